# rules for dev/cuda (included by the top-level Makefile)
#
# The CUDA lab files built for the CPU execution harness (dev/harness/: every CUDA thread is a
# Boost.Context fiber), so that CI runs every kernel without a GPU:
#   make cuda-harness        g++ builds of dev/cuda/*.cu into $(BUILD)/cuda/
#   make test-cuda           harness self-tests and every lab's --check in two thread orders
#                            (forward, reverse) on a fixed seed (CUDA_LAB_SEED), the coverage of
#                            the kernels' LS_BRANCH paths (dev/cuda/branch_coverage.py), then each
#                            lab with random inputs once on a fresh seed (reported, not deciding);
#                            and cuda-compile-check
#   make test-cuda-san       the same under ASan+UBSan (build/san/cuda/), in one thread order and
#                            without the FP16 builds (bf16's element size: the same indexing); also
#                            catches the planted out-of-bounds writes
#   make cuda-compile-check  nvcc, warnings as errors, every lab in every precision it is built in
#                            (dev/cuda/Makefile: BF16 and FP32 for sm_90, FP16 for sm_75, CUDA 13's
#                            oldest), each object then linked with the real CUDA libraries
#   make cuda-gpu            nvcc builds for the local GPU (dev/cuda/Makefile, needs a GPU)
# `make test` runs test-cuda (TEST_PHONY), `make test-san` runs test-cuda-san (TEST_SAN_PHONY).
# A new lab file dev/cuda/foo.cu is picked up by every target, and its --check runs in test-cuda.

# The harness build's flags (CUDA_HOME, CUDA_HARNESS_FLAGS, CUDA_HARNESS_LIBS) are the top Makefile's,
# the same as for the GPU trainer's harness builds.
CUDA_SOURCES := $(wildcard dev/cuda/*.cu)
CUDA_HARNESS_BINS := $(patsubst dev/cuda/%.cu,$(BUILD)/cuda/%,$(CUDA_SOURCES))

# The thread orders CI runs every kernel test in (a race shows as a difference between them). The
# sanitizer builds run one: ASan+UBSan look for memory errors, which do not depend on the order.
CUDA_ORDERS := $(if $(filter 1,$(SAN)),forward,forward reverse)
# The deciding runs: every lab's --check on one fixed seed (lab.h's LEANSTEP_LAB_SEED, whatever the
# lab's seed flag is called), so that a pass or a failure does not depend on the draw. Then the labs
# with random inputs (CUDA_SEEDED_LABS) once more each on a fresh seed, in the forward order, not
# under the sanitizers: what they print and their seed are reported, their exit status decides
# nothing (a failure there is reproduced with -s and the printed seed, then fixed or given a reason).
CUDA_LAB_SEED ?= 1
# The coverage of the kernels' marked paths (LS_BRANCH in llmc/): the harness builds count them, the
# deciding runs append the counts here, and dev/cuda/branch_coverage.py fails if a path never ran.
CUDA_BRANCH_LOG := $(BUILD)/cuda/branches.log
# Every lab file's --check runs (the list comes from the files, so a new lab cannot be forgotten);
# the blocks below add the FP32 builds' checks and --bench smoke runs.
CUDA_LABS := $(filter-out harness_selftest,$(patsubst dev/cuda/%.cu,%,$(CUDA_SOURCES)))
CUDA_TEST_CMDS := $(BUILD)/cuda/harness_selftest -q $(foreach l,$(CUDA_LABS),&& $(BUILD)/cuda/$(l) --check -q) && \
	$(BUILD)/cuda/adamw --bench -r 2 -n 20000 >/dev/null

# Header dependencies come from the compiler (-MMD): only the headers a lab file includes. A lab's
# parts (dev/cuda/labs.mk: LAB_PARTS_<lab>) are objects of their own, linked to it.
$(BUILD)/cuda/%: dev/cuda/%.cu
	@mkdir -p $(@D)
	@test -f $(CUDA_HOME)/include/cuda_runtime.h || { echo "error: CUDA headers not found in $(CUDA_HOME)/include (set CUDA_HOME)"; exit 1; }
	@echo "  CXX   $@ (CPU harness)"
	$(Q)$(CXX) $(CXXFLAGS) $(CUDA_HARNESS_FLAGS) -MMD -MP -MF $@.d $< -x none $(filter %.o,$^) -o $@ $(CUDA_HARNESS_LIBS)
$(BUILD)/cuda/parts/%.o: dev/cuda/parts/%.cu
	@mkdir -p $(@D)
	@echo "  CXX   $@ (CPU harness, a lab's part)"
	$(Q)$(CXX) $(CXXFLAGS) $(CUDA_HARNESS_FLAGS) -MMD -MP -MF $@.d -c $< -o $@
CUDA_PART_OBJS := $(patsubst dev/cuda/parts/%.cu,$(BUILD)/cuda/parts/%.o,$(wildcard dev/cuda/parts/*.cu))
-include $(wildcard $(BUILD)/cuda/*.d $(BUILD)/cuda/parts/*.d)
# (a binary built before it had a .d file depends on every header once)
$(foreach b,$(CUDA_HARNESS_BINS) $(CUDA_PART_OBJS),$(if $(wildcard $(b).d),,$(eval $(b): $(LLMC_HEADERS) $(LLMC_CUDA_HEADERS) $(HARNESS_HEADERS) $(wildcard dev/cuda/*.h))))

.PHONY: cuda-harness test-cuda test-cuda-san cuda-compile-check cuda-gpu
cuda-harness: $(CUDA_HARNESS_BINS)

# (the compile check is a prerequisite, not a step: make -j runs it beside the harness tests)
test-cuda: $(CUDA_HARNESS_BINS) $(if $(filter 1,$(SAN)),,cuda-compile-check)
	$(Q)rm -f $(CUDA_BRANCH_LOG); for order in $(CUDA_ORDERS); do \
		echo "  TEST  dev/cuda under the CPU harness, $$order order, seed $(CUDA_LAB_SEED)$(if $(filter 1,$(SAN)), (ASan+UBSan))"; \
		export LEANSTEP_HARNESS_ORDER=$$order LEANSTEP_LAB_SEED=$(CUDA_LAB_SEED) LEANSTEP_BRANCH_LOG=$(CUDA_BRANCH_LOG); \
		{ $(CUDA_TEST_CMDS); } || exit 1; \
	done; python3 dev/cuda/branch_coverage.py -q $(CUDA_BRANCH_LOG)$(if $(filter 1,$(SAN)),,; $(CUDA_SEEDED_CMDS))

# The ASan+UBSan run: the same tests on the sanitizer builds (build/san/cuda/).
ifeq ($(SAN),1)
test-cuda-san: test-cuda
else
test-cuda-san:
	$(Q)$(MAKE) --no-print-directory SAN=1 test-cuda-san
endif

cuda-compile-check:
	$(Q)$(MAKE) --no-print-directory -C dev/cuda compile-check NVCC=$(NVCC) Q=$(Q)

cuda-gpu:
	$(Q)$(MAKE) --no-print-directory -C dev/cuda gpu NVCC=$(NVCC) Q=$(Q)

TEST_TARGETS += $(CUDA_HARNESS_BINS)
TEST_PHONY += test-cuda
TEST_SAN_PHONY += test-cuda-san

# --- the labs built in every precision (dev/cuda/labs.mk: LAB_PRECISION_LABS) -------------------
# $(BUILD)/cuda/<lab> (the rule above) is the default precision, BF16 (llmc/cuda/cuda_precision.h);
# $(BUILD)/cuda/<lab>_fp32 and <lab>_fp16 are the other two (-DENABLE_FP32, -DENABLE_FP16). test-cuda
# runs --check of each and a --bench smoke run of some (small shapes on the harness); the nvcc
# compile check of every precision build is dev/cuda/Makefile's.
include dev/cuda/labs.mk
$(foreach l,$(CUDA_LABS),$(eval $(BUILD)/cuda/$(l): $(call lab_parts,$(BUILD)/cuda,$(l))))
CUDA_PRECISION_LABS := encoder layernorm gelu fused_classifier
define CUDA_PRECISION_RULES
$$(BUILD)/cuda/%_$(1): dev/cuda/%.cu
	@mkdir -p $$(@D)
	@echo "  CXX   $$@ (CPU harness, $(1))"
	$$(Q)$$(CXX) $$(CXXFLAGS) $$(CUDA_HARNESS_FLAGS) $$(PFLAGS_$(1)) -MMD -MP -MF $$@.d $$< -o $$@ $$(CUDA_HARNESS_LIBS)
endef
$(foreach p,fp32 fp16,$(eval $(call CUDA_PRECISION_RULES,$(p))))
CUDA_FP32_BINS := $(patsubst %,$(BUILD)/cuda/%_fp32,$(LAB_PRECISION_LABS))
# (the sanitizer builds leave FP16 out: its indexing and vector widths are BF16's, same element size)
CUDA_FP16_BINS := $(if $(filter 1,$(SAN)),,$(patsubst %,$(BUILD)/cuda/%_fp16,$(LAB_PRECISION_LABS)))
cuda-harness test-cuda: $(CUDA_FP32_BINS) $(CUDA_FP16_BINS)
TEST_TARGETS += $(CUDA_FP32_BINS) $(CUDA_FP16_BINS)
CUDA_TEST_CMDS += $(foreach l,$(LAB_PRECISION_LABS),&& $(BUILD)/cuda/$(l)_fp32 --check -q $(if $(CUDA_FP16_BINS),&& $(BUILD)/cuda/$(l)_fp16 --check -q))
# (the fresh-seed runs: each lab with random inputs in its default build, and gelu_fp32, the tightest
# relative tolerance (gelu.cu); about 5 s of CPU. The optimizer labs' data is fixed.)
CUDA_SEEDED_LABS := global_norm $(LAB_PRECISION_LABS) gelu_fp32
CUDA_SEEDED_CMDS := unset LEANSTEP_LAB_SEED; \
	echo "  TEST  dev/cuda under the CPU harness, forward order, a fresh seed each (reported, not deciding)"; \
	$(foreach l,$(CUDA_SEEDED_LABS),LEANSTEP_HARNESS_ORDER=forward $(BUILD)/cuda/$(l) --check -q || \
		echo "    $(l): FAILED on a fresh seed (not deciding; reproduce with -s and the seed above)";)
CUDA_TEST_CMDS += $(foreach l,$(CUDA_PRECISION_LABS),&& $(BUILD)/cuda/$(l) --bench -r 2 >/dev/null)

# --- matmul and attention (llmc/kernels/matmul.cuh: cuBLASLt, under the harness its CPU stand-in;
# attention.cuh): --bench once per build on tiny shapes (the code path only); the matmul lab again
# with a cuBLASLt that has no GELU epilogues (the launchers' fallback to the separate GELU kernels)
CUDA_TEST_CMDS += && LEANSTEP_HARNESS_CUBLASLT_GELU=0 $(BUILD)/cuda/matmul --check -q --gelu-fallback
CUDA_TEST_CMDS += $(foreach p,matmul matmul_fp32,&& $(BUILD)/cuda/$(p) --bench -n 40 -c 32 --vocab 96 -s 64 -r 1 >/dev/null)
CUDA_TEST_CMDS += $(foreach p,attention attention_fp32,&& $(BUILD)/cuda/$(p) --bench -b 1 -t 24 -c 32 --nh 2 -s 64 -r 1 >/dev/null)

# --- the optimizer family (llmc/optim/update.cuh, dev/cuda/optimizers.cu) ----------------------------
# Every optimizer x state precision x parameter format through optim_step_gpu, against the CPU
# updates of llmc/optim/optim.h bit for bit and against float64, in both thread orders; --bench once on
# a tiny problem (the code path only).
CUDA_TEST_CMDS += && $(BUILD)/cuda/optimizers --bench -r 1 -n 5000 >/dev/null

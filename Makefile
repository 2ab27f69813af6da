# leanstep Makefile. `make help` lists the targets.
#
# Sub-directories keep their rules in rules.mk files included below; each appends its test
# programs to TEST_TARGETS and its test commands to the `test` recipe through TEST_CMDS.
# Output is quiet: one line per built file. V=1 shows full commands.

CC      ?= gcc
CXX     ?= g++
NVCC    ?= nvcc
OPT     ?= -O3 -march=native
# -fno-math-errno: sqrtf/expf set no errno, so loops with them vectorize. -fno-trapping-math: no
# code reads FP exception flags, so floorf vectorizes (GELU, softmax); values are unchanged.
# -ffp-contract=off: no implicit fused multiply-adds, so explicit fmaf() decides rounding (AdamW
# agrees bit for bit with the GPU kernels, llmc/optim/update.cuh)
CFLAGS  ?= $(OPT) -std=gnu11 -Wall -Wextra -fno-math-errno -fno-trapping-math -ffp-contract=off -fopenmp -I.
CXXFLAGS ?= $(OPT) -std=c++17 -Wall -Wextra -fno-math-errno -ffp-contract=off -I.
# BLAS: prefer the OpenMP build of OpenBLAS (one thread pool with our OpenMP loops; the pthread
# build's pool and OpenMP's spin against each other on few cores); else any OpenBLAS.
MULTIARCH := $(shell gcc -print-multiarch 2>/dev/null)
BLAS_OMP_DIR := /usr/lib/$(MULTIARCH)/openblas-openmp
ifneq ($(wildcard $(BLAS_OMP_DIR)/libopenblas.so.0),)
LDLIBS_BLAS := $(BLAS_OMP_DIR)/libopenblas.so.0
BLAS_INC := /usr/include/$(MULTIARCH)/openblas-openmp
else
LDLIBS_BLAS := -lopenblas
BLAS_INC := $(firstword $(wildcard /usr/include/$(MULTIARCH)/openblas-pthread /usr/include/openblas))
endif
ifneq ($(BLAS_INC),)
CFLAGS += -I$(BLAS_INC)
endif
LDLIBS_TOK := -lpcre2-8 -lcjson
LDLIBS  ?= -lm -lz
# Header dependencies by layer (llmc/ shows them as folders): the C programs depend on the C layers;
# the CUDA programs also on the CUDA platform (llmc/cuda/) and the kernels (llmc/kernels/, and the
# .cuh of the other layers); only the harness builds on the CPU execution harness (dev/harness/).
LLMC_HEADERS := $(wildcard llmc/*.h llmc/io/*.h llmc/dist/*.h llmc/run/*.h llmc/optim/*.h)
LLMC_CUDA_HEADERS := $(wildcard llmc/*.cuh llmc/*/*.cuh llmc/cuda/*.h llmc/kernels/*.h)
HARNESS_HEADERS := $(wildcard dev/harness/*.h)

# Sanitizer build of the C programs: `make SAN=1 ...` writes into build/san/.
ifeq ($(SAN),1)
OPT := -O1 -g -fno-omit-frame-pointer
CFLAGS += -fsanitize=address,undefined -fno-sanitize-recover=undefined -DLS_SANITIZED=1
CXXFLAGS += -fsanitize=address,undefined -fno-sanitize-recover=undefined -DLS_SANITIZED=1
BUILD := build/san
else
BUILD := build
endif

ifeq ($(V),1)
Q :=
else
Q := @
endif

PYTHON ?= python3
TORCH_PYTHON ?= /usr/bin/python3
# Where `make data` takes its inputs from when there is no network: a mirror directory.
LEANSTEP_DATA_MIRROR ?=

# A test whose dependency is missing: a visible skip on a developer's machine, a failure in CI
# (CI=true), where dev/install_deps.sh must have installed it. $(call missing_dep,TARGET,WHAT,PACKAGE)
missing_dep = echo "$(1): $(2) not found$(if $(filter true,$(CI)),: FAILED (CI=true; install $(3)),: skipped (install $(3)))"$(if $(filter true,$(CI)), && exit 1)

.PHONY: all test test-san test-main test-units test-cli help clean train deps bench bench-build memory-table optim-cost-table offload-table \
	quality-table quality-frontier
all: train_gpt2 test_gpt2

TEST_TARGETS :=
TEST_PHONY :=
TEST_SAN_PHONY :=

# The CPU-harness builds of CUDA code (the GPU trainer's test builds, dev/cuda's labs): g++ with
# dev/harness/ first on the include path, whose cuda_runtime.h (and nccl.h) add the CPU execution
# of kernels to the toolkit's headers (llmc/cuda/cuda_compat.h). CUDA code type-puns through
# reinterpret_cast (float4, int4) and uses #pragma unroll: the host compiler must not assume strict
# aliasing, and ignores the pragma. -g1: kernel names and source lines in harness reports.
# Stack-clash protection: a kernel's large locals hit the fiber stack's guard page instead of
# jumping over it.
CUDA_HOME ?= /usr/local/cuda
CUDA_HARNESS_FLAGS := -x c++ -Idev/harness -I$(CUDA_HOME)/include -g1 -fno-strict-aliasing -Wno-unknown-pragmas \
	-fstack-clash-protection -fopenmp -DLS_ENCODE -DLS_HOST_BLAS $(if $(BLAS_INC),-I$(BLAS_INC))
CUDA_HARNESS_LIBS := -x none -lboost_context $(LDLIBS_TOK) $(LDLIBS_BLAS)

include dev/data/rules.mk
include dev/reference/rules.mk
include dev/cuda/rules.mk
include dev/test/rules.mk

# ----------------------------------------------------------------------------
# the CPU trainer and its tests

train_gpt2: train_gpt2.c $(LLMC_HEADERS)
	@echo "  CC    $@"
	$(Q)$(CC) $(CFLAGS) $< -o $@ $(LDLIBS_BLAS) $(LDLIBS_TOK) $(LDLIBS)

test_gpt2: test_gpt2.c train_gpt2.c dev/test/test_common.h $(LLMC_HEADERS)
	@echo "  CC    $@"
	$(Q)$(CC) $(CFLAGS) $< -o $@ $(LDLIBS_BLAS) $(LDLIBS_TOK) $(LDLIBS)

$(BUILD)/train_gpt2 $(BUILD)/test_gpt2: $(BUILD)/%: %.c train_gpt2.c dev/test/test_common.h $(LLMC_HEADERS)
	@mkdir -p $(BUILD)
	@echo "  CC    $@"
	$(Q)$(CC) $(CFLAGS) $< -o $@ $(LDLIBS_BLAS) $(LDLIBS_TOK) $(LDLIBS)

# The MPI build of the CPU trainer (data parallel, -z 0 / -z 1), when mpicc is there; the plain
# train_gpt2 stays free of MPI.
MPICC ?= mpicc
HAVE_MPI := $(shell command -v $(MPICC) >/dev/null 2>&1 && echo 1)

# Several GPUs (llmc/dist/nccl_comm.cuh): NCCL when nccl.h is found (NO_MULTI_GPU=1: without), and MPI
# for `mpirun` launches when mpicxx is found (NO_USE_MPI=1: without; -pi fs|tcp still work).
NCCL_INC := $(firstword $(wildcard $(CUDA_HOME)/include/nccl.h /usr/include/nccl.h))
NCCL_LIBDIR := $(firstword $(dir $(wildcard $(CUDA_HOME)/lib/libnccl.so $(CUDA_HOME)/lib64/libnccl.so /usr/lib/$(MULTIARCH)/libnccl.so)))
MPICXX ?= mpicxx
MPI_SKIP_CXX := -DOMPI_SKIP_MPICXX -DMPICH_SKIP_MPICXX  # the C API only (the C++ bindings warn)
HAVE_MPICXX := $(shell command -v $(MPICXX) >/dev/null 2>&1 && echo 1)
ifeq ($(HAVE_MPICXX),1)
MPI_CFLAGS := $(shell $(MPICXX) --showme:compile 2>/dev/null) -DUSE_MPI $(MPI_SKIP_CXX)
MPI_LIBS := $(shell $(MPICXX) --showme:link 2>/dev/null)
endif
# The multi-GPU build needs both nccl.h and libnccl.so; NCCL_STATE says which the build lines show.
NCCL_FLAGS :=
NCCL_LIBS :=
ifneq ($(NO_MULTI_GPU),)
NCCL_STATE := NO_MULTI_GPU=1: one GPU only
else ifeq ($(NCCL_INC),)
NCCL_STATE := no NCCL (nccl.h not found): one GPU only
else ifeq ($(NCCL_LIBDIR),)
NCCL_STATE := no NCCL (nccl.h but no libnccl.so): one GPU only
else
NCCL_STATE := NCCL: several GPUs
NCCL_FLAGS := -DUSE_NCCL -I$(dir $(NCCL_INC))
NCCL_LIBS := -L$(NCCL_LIBDIR) -Xlinker -rpath=$(NCCL_LIBDIR) -lnccl
ifeq ($(NO_USE_MPI),)
NCCL_FLAGS += $(MPI_CFLAGS)
NCCL_LIBS += $(MPI_LIBS)
endif
endif

$(BUILD)/train_gpt2_mpi: train_gpt2.c $(LLMC_HEADERS)
	@mkdir -p $(BUILD)
	@echo "  MPICC $@"
	$(Q)OMPI_CC=$(CC) $(MPICC) $(CFLAGS) -DUSE_MPI $< -o $@ $(LDLIBS_BLAS) $(LDLIBS_TOK) $(LDLIBS)

ifeq ($(HAVE_MPI),1)
test-mpi: $(BUILD)/train_gpt2_mpi $(BUILD)/train_gpt2
	$(PYTHON) dev/test/test_mpi.py --mpi-bin $(BUILD)/train_gpt2_mpi --bin $(BUILD)/train_gpt2
ifneq ($(NCCL_INC),)
	$(PYTHON) dev/test/test_mpi_gpu.py --mpi-bin $(BUILD)/train_gpt2cu_emu_mpi_fp32 --bin $(BUILD)/train_gpt2cu_emu_fp32 \
		--mpi-bin-bf16 $(BUILD)/train_gpt2cu_emu_mpi_bf16 --bin-bf16 $(BUILD)/train_gpt2cu_emu_bf16
else
	@$(call missing_dep,test-mpi,nccl.h (the GPU trainer's MPI test: NCCL over MPI under the harness),the CUDA toolkit's NCCL)
endif
else
test-mpi:
	@$(call missing_dep,test-mpi,mpicc,libopenmpi-dev openmpi-bin)
endif
TEST_PHONY += test-mpi

# The model check: the PyTorch reference writes a random model and its debug state, and
# test_gpt2 compares init, logits, loss, all gradients and 10 AdamW steps. REF_DESC picks the
# config (CI: a small one, seconds); `make test-d12` runs it on GPT-2 124M.
REF_DESC ?= L2C64H4T64
REF_ARGS ?= --layers 2 --channels 64 --heads 4 --max-seq 64 --vocab 50257
REF_B ?= 4
REF_T ?= 32
REF_DIR := build/ref
# _init.bin is the initialised model (the init check); _model.bin the same with random biases and
# layernorm parameters (init leaves them 0 and 1, where a trainer that ignores them is still exact).
$(REF_DIR)/$(REF_DESC)_init.bin: dev/reference/gpt2_ref.py
	@mkdir -p $(REF_DIR)
	@echo "  REF   $@"
	$(Q)$(TORCH_PYTHON) dev/reference/gpt2_ref.py init $(REF_ARGS) --seed 42 --out $@ >/dev/null
$(REF_DIR)/$(REF_DESC)_model.bin: $(REF_DIR)/$(REF_DESC)_init.bin
	@echo "  REF   $@"
	$(Q)$(TORCH_PYTHON) dev/reference/gpt2_ref.py perturb --model $< --seed 7 --out $@ >/dev/null
$(REF_DIR)/$(REF_DESC)_state.bin: $(REF_DIR)/$(REF_DESC)_model.bin
	@echo "  REF   $@"
	$(Q)$(TORCH_PYTHON) dev/reference/gpt2_ref.py state --model $< --batch $(REF_B) --seq $(REF_T) --seed 1 \
		--steps 10 --lr 1e-4 --beta1 0.9 --beta2 0.95 --eps 1e-8 --weight-decay 0.1 --grad-clip 1.0 --out $@ >/dev/null

# Muon's steps (test_gpt2 --muon-state): the same batch, Muon for the blocks' matrices
$(REF_DIR)/$(REF_DESC)_muon_state.bin: $(REF_DIR)/$(REF_DESC)_model.bin
	@echo "  REF   $@"
	$(Q)$(TORCH_PYTHON) dev/reference/gpt2_ref.py state --model $< --batch $(REF_B) --seq $(REF_T) --seed 1 \
		--steps 10 --lr 1e-3 --beta1 0.9 --beta2 0.95 --eps 1e-8 --weight-decay 0.1 --grad-clip 1.0 \
		--optimizer muon --momentum 0.95 --out $@ >/dev/null

# Adam-mini's steps (test_gpt2 --adam-mini-state)
$(REF_DIR)/$(REF_DESC)_adam_mini_state.bin: $(REF_DIR)/$(REF_DESC)_model.bin
	@echo "  REF   $@"
	$(Q)$(TORCH_PYTHON) dev/reference/gpt2_ref.py state --model $< --batch $(REF_B) --seq $(REF_T) --seed 1 \
		--steps 10 --lr 5e-3 --beta1 0.9 --beta2 0.95 --eps 1e-8 --weight-decay 0.1 --grad-clip 1.0 \
		--optimizer adam-mini --out $@ >/dev/null

test-main: $(BUILD)/test_gpt2 $(REF_DIR)/$(REF_DESC)_state.bin $(REF_DIR)/$(REF_DESC)_muon_state.bin \
		$(REF_DIR)/$(REF_DESC)_adam_mini_state.bin
	$(BUILD)/test_gpt2 --units
	$(BUILD)/test_gpt2 --model $(REF_DIR)/$(REF_DESC)_model.bin --state $(REF_DIR)/$(REF_DESC)_state.bin \
		--muon-state $(REF_DIR)/$(REF_DESC)_muon_state.bin --adam-mini-state $(REF_DIR)/$(REF_DESC)_adam_mini_state.bin \
		--descriptor $(REF_DESC) --init-seed 42 --init-model $(REF_DIR)/$(REF_DESC)_init.bin

# The checks have teeth: against a reference with a planted bug (dev/test/test_ref_mutants.py),
# test_gpt2 must fail (test-gpu-emu runs the same for the harness test_gpt2cu builds).
REF_MUTANTS = $(PYTHON) dev/test/test_ref_mutants.py --model $(REF_DIR)/$(REF_DESC)_model.bin \
	--state $(REF_DIR)/$(REF_DESC)_state.bin --torch-python $(TORCH_PYTHON)
# (the wrong references are made once, before any test reads them: make -j runs these tests at once)
REF_MUTANTS_MADE := $(REF_DIR)/mutants/.made
$(REF_MUTANTS_MADE): $(REF_DIR)/$(REF_DESC)_state.bin dev/test/test_ref_mutants.py
	@echo "  REF   $(@D)/ (the reference with each planted bug)"
	$(Q)$(REF_MUTANTS) && touch $@
test-ref-mutants: $(BUILD)/test_gpt2 $(REF_MUTANTS_MADE)
	$(REF_MUTANTS) --bin $(BUILD)/test_gpt2

test-d12: $(BUILD)/test_gpt2
	TORCH_PYTHON=$(TORCH_PYTHON) $(BUILD)/test_gpt2 --d12

# The training loop against the PyTorch reference: loss, gradient norm, lr per step, val loss;
# gradient accumulation, 2 processes (-z 0, -z 1), clipping from step 1, every schedule, -m
# (dev/test/test_train_loop.py).
test-train-loop: $(BUILD)/train_gpt2 $(REF_DIR)/$(REF_DESC)_model.bin $(if $(HAVE_MPI),$(BUILD)/train_gpt2_mpi)
	$(PYTHON) dev/test/test_train_loop.py --bin $(BUILD)/train_gpt2 --model $(REF_DIR)/$(REF_DESC)_model.bin \
		--torch-python $(TORCH_PYTHON) $(if $(HAVE_MPI),--mpi-bin $(BUILD)/train_gpt2_mpi)
TEST_PHONY += test-train-loop

# Sampling a checkpoint without training (-x 0, --prompt, --temperature, --top-k) in both trainers:
# the prompt as tiktoken encodes it, the greedy continuation as PyTorch's, the draws at --temperature 2
# --top-k 40 against softmax(logits / 2) of the reference's logits (chi-square; dev/test/test_sample.py)
test-sample: $(BUILD)/train_gpt2 $(BUILD)/train_gpt2cu_emu_fp32 $(REF_DIR)/$(REF_DESC)_model.bin data
	$(EMU_RUN) $(PYTHON) dev/test/test_sample.py --bin $(BUILD)/train_gpt2 --gpu-bin $(BUILD)/train_gpt2cu_emu_fp32 \
		--model $(REF_DIR)/$(REF_DESC)_model.bin --tokenizer data/gpt2_tokenizer.bin --data-dir data --torch-python $(TORCH_PYTHON)
TEST_PHONY += test-sample

# HellaSwag (--hellaswag) in both trainers on a file in the official format: tiktoken's tokens, the
# PyTorch reference's right answers (acc, acc_norm), other -b, 2 processes, the logs, bad files
test-hellaswag: $(BUILD)/train_gpt2 $(BUILD)/train_gpt2cu_emu_fp32 $(REF_DIR)/$(REF_DESC)_model.bin data \
		$(if $(HAVE_MPI),$(BUILD)/train_gpt2_mpi)
	$(EMU_RUN) $(PYTHON) dev/test/test_hellaswag.py --bin $(BUILD)/train_gpt2 --gpu-bin $(BUILD)/train_gpt2cu_emu_fp32 \
		$(if $(HAVE_MPI),--mpi-bin $(BUILD)/train_gpt2_mpi) --model $(REF_DIR)/$(REF_DESC)_model.bin \
		--tokenizer data/gpt2_tokenizer.bin --data-dir data --torch-python $(TORCH_PYTHON)
TEST_PHONY += test-hellaswag

test-cli: $(BUILD)/train_gpt2
	$(PYTHON) dev/test/test_cli.py --bin $(BUILD)/train_gpt2

# Long-run reliability: log.jsonl, -nk/-nm pruning, SIGINT stop + resume, SIGKILL at random moments
# (KILLS iterations) with a bit-exact resume from the newest complete checkpoint every time.
KILLS ?= 200
test-reliability: $(BUILD)/train_gpt2
	$(PYTHON) dev/test/test_reliability.py --bin $(BUILD)/train_gpt2 --kills $(KILLS)
	$(PYTHON) dev/test/test_guards.py --bin $(BUILD)/train_gpt2

TEST_PHONY += test-main test-cli test-reliability test-ref-mutants
TEST_SAN_PHONY += test-main test-cli

# The OpenBLAS core (llmc/run/blas_env.h): the choice on synthetic cpuid bits and core names, the
# sgemm self-check, and the start-up under its test hooks (a wrong result, a crash, a core OpenBLAS
# does not take: one warning, then OpenBLAS's own choice), in the trainer too. A few seconds.
$(BUILD)/test_blas_env: dev/test/test_blas_env.c llmc/run/blas_env.h llmc/run/openmp_env.h
	@mkdir -p $(@D)
	@echo "  CC    $@"
	$(Q)$(CC) $(CFLAGS) $< -o $@ $(LDLIBS_BLAS) $(LDLIBS)
test-blas-env: $(BUILD)/test_blas_env $(BUILD)/train_gpt2
	$(BUILD)/test_blas_env
	$(PYTHON) dev/test/test_blas_env.py --bin $(BUILD)/test_blas_env --trainer $(BUILD)/train_gpt2
TEST_TARGETS += $(BUILD)/test_blas_env
TEST_PHONY += test-blas-env
.PHONY: test-blas-env

# A run directory and -y as job scripts meet them, in both trainers (the GPU one under the harness):
# one run per -o (a second exits 1 naming the owner, a dead owner's lock is taken over; mpirun too),
# -y 1 without a checkpoint starts fresh, -y 1 at or past -x ends at once (dev/test/test_run_dir.py)
test-run-dir: $(BUILD)/train_gpt2 $(BUILD)/train_gpt2cu_emu_fp32 $(if $(HAVE_MPI),$(BUILD)/train_gpt2_mpi)
	$(EMU_RUN) $(PYTHON) dev/test/test_run_dir.py --bin $(BUILD)/train_gpt2 --bin $(BUILD)/train_gpt2cu_emu_fp32 \
		$(if $(HAVE_MPI),--mpi-bin $(BUILD)/train_gpt2_mpi)
TEST_PHONY += test-run-dir
.PHONY: test-run-dir

# The documented commands as written, in a fresh copy of the tree (dev/test/test_readme.py): every
# command of README.md (make train with TEST_TRAIN_STEPS, its follow-ups on out/, the memory
# reports, the AdamW lab; the train_gpt2cu lines' flags through the harness build), docs/data.md's
# corpus example and the command prepare_corpus prints, and every line of docs/ on out/; and the
# memory figures README.md and docs/ quote, against the programs. About 2 min on 2 cores.
TEST_TRAIN_STEPS ?= 5
test-readme: $(BUILD)/train_gpt2 $(BUILD)/prepare_corpus $(BUILD)/prepare_data $(BUILD)/memory_table $(BUILD)/cuda/adamw \
		$(BUILD)/train_gpt2cu_emu_fp32 data
	$(PYTHON) dev/test/test_readme.py --bin $(BUILD)/train_gpt2 --prepare-corpus $(BUILD)/prepare_corpus \
		--memory-table $(BUILD)/memory_table --lab $(BUILD)/cuda/adamw --gpu-bin $(BUILD)/train_gpt2cu_emu_fp32 \
		--steps $(TEST_TRAIN_STEPS)
TEST_PHONY += test-readme
.PHONY: test-readme

# ----------------------------------------------------------------------------
# the GPU trainer: nvcc builds (need a GPU to run), and the CPU-harness builds that CI runs.
# PRECISION=BF16 (default) or FP32, as llm.c; the output names carry no precision for the nvcc
# builds (like llm.c) and a suffix for the harness builds, so both precisions can coexist.

PRECISION ?= BF16
ifeq ($(PRECISION),FP32)
PFLAGS := -DENABLE_FP32
else ifeq ($(PRECISION),BF16)
PFLAGS := -DENABLE_BF16
else ifeq ($(PRECISION),FP16)
PFLAGS := -DENABLE_FP16
else
$(error PRECISION must be BF16, FP16 or FP32, got '$(PRECISION)')
endif
PREC_LC := $(shell echo $(PRECISION) | tr A-Z a-z)
# the flags of each precision, for the rules that build both in one make
PFLAGS_fp32 := -DENABLE_FP32
PFLAGS_bf16 := -DENABLE_BF16
PFLAGS_fp16 := -DENABLE_FP16
# native: this machine's GPU. A machine without one (nvidia-smi lists none) builds for Hopper, sm_90,
# and its build line says so (nvcc's native would quietly fall back to its oldest architecture,
# where bf16 does not run): set GPU_ARCH=sm_80 etc. for another GPU. (Evaluated once, when used.)
GPU_ARCH ?= $(gpu_arch_default)
gpu_arch_default = $(eval gpu_arch_default := $(if $(shell nvidia-smi -L 2>/dev/null),native,sm_90))$(gpu_arch_default)
gpu_arch_note = $(if $(filter command line environment,$(origin GPU_ARCH)),,$(if $(filter sm_90,$(GPU_ARCH)), (no GPU here: GPU_ARCH=sm_80 etc. for another)))
# EXTRA_INC / ZLIB_LIB: a machine without zlib's headers builds with the copy `make gpu-carry` made
EXTRA_INC ?=
ZLIB_LIB ?= -lz
# --prompt in the GPU trainer encodes with the C tokenizer when PCRE2's and cJSON's headers are here
# (-DLS_ENCODE); a machine without them builds the decode-only trainer, whose --prompt says so
HAVE_TOK_DEV := $(if $(and $(wildcard /usr/include/pcre2.h),$(wildcard /usr/include/cjson/cJSON.h)),1)
TOK_GPU_FLAGS := $(if $(HAVE_TOK_DEV),-DLS_ENCODE)
TOK_GPU_LIBS := $(if $(HAVE_TOK_DEV),$(LDLIBS_TOK))
# Muon under --offload cpu runs its Newton-Schulz products on the host through OpenBLAS: the GPU
# builds link it where its header is here (-DLS_HOST_BLAS); a machine without it builds a trainer
# that refuses that one combination with a line saying why
HAVE_BLAS_DEV := $(if $(wildcard $(BLAS_INC)/cblas.h /usr/include/cblas.h),1)
BLAS_GPU_FLAGS := $(if $(HAVE_BLAS_DEV),-DLS_HOST_BLAS $(if $(BLAS_INC),-I$(BLAS_INC)))
BLAS_GPU_LIBS := $(if $(HAVE_BLAS_DEV),$(if $(filter -l%,$(LDLIBS_BLAS)),$(LDLIBS_BLAS),-L$(dir $(LDLIBS_BLAS)) -l:$(notdir $(LDLIBS_BLAS))))
NVCC_TRAIN_FLAGS := -std=c++17 -O3 -lineinfo -Xptxas=--warn-on-spills -Xcompiler -Wall,-Wextra,-fopenmp -I. $(EXTRA_INC) $(PFLAGS) \
	$(TOK_GPU_FLAGS) $(BLAS_GPU_FLAGS)
NVCC_LIBS := -lcublasLt -lcublas -lgomp $(ZLIB_LIB) $(TOK_GPU_LIBS) $(BLAS_GPU_LIBS)
CUDA_TRAIN_DEPS := train_gpt2.cu $(LLMC_HEADERS) $(LLMC_CUDA_HEADERS)

# Flash attention (--attention cudnn, the BF16 default): cuDNN's fused attention through the cuDNN
# frontend (header-only C++, PyPI nvidia-cudnn-frontend). `make cudnn-frontend` (also run by
# `make deps`) puts its headers in an ignored folder of the working tree, so that they travel with
# it to a GPU machine without network; llmc/kernels/cudnn_att.cpp, its own translation unit (host code
# only: the host compiler, about a minute), is a shared library linked with cuDNN,
# build/libleanstep_cudnn.so, that the BF16 nvcc builds open at run time on the first cudnn call
# (llmc/kernels/cudnn_load.h, dlopen): they do not link libcudnn, so `--attention matmul` runs without it.
# Their targets build the library first (order-only: relinking a binary does not need it).
CUDNN_FRONTEND_VERSION ?= 1.32.0
CUDNN_FRONTEND_DIR := build/deps/cudnn_frontend
CUDNN_FRONTEND_H := $(CUDNN_FRONTEND_DIR)/include/cudnn_frontend.h
CUDNN_ATT_LIB := build/libleanstep_cudnn.so
# CUDNN_HOME: where cuDNN's include/ and lib/ (or lib64/) are; the toolkit's by default (a machine
# with cuDNN from PyTorch's wheels passes site-packages/nvidia/cudnn, as dev/gpu_check.sh does)
CUDNN_HOME ?= $(CUDA_HOME)
CUDNN_LIBDIR := $(firstword $(dir $(wildcard $(CUDNN_HOME)/lib64/libcudnn.so $(CUDNN_HOME)/lib/libcudnn.so \
	$(CUDNN_HOME)/lib/libcudnn.so.9 /usr/lib/$(MULTIARCH)/libcudnn.so)))
# (-lnvrtc: the frontend headers carry an NVRTC-compiled engine of their own, never used here;
# -l:libcudnn.so.9 finds a cuDNN without its development symlink, as in PyTorch's wheels. RUNPATH:
# cuDNN's directory and the toolkit's lib64, where libnvrtc.so.13 is when cuDNN comes from a wheel)
CUDNN_RUNPATH := $(sort $(patsubst %/,%,$(CUDNN_LIBDIR)) $(CUDA_HOME)/lib64)
CUDNN_LINK := $(if $(CUDNN_LIBDIR),-L$(CUDNN_LIBDIR)) $(foreach d,$(CUDNN_RUNPATH),-Xlinker -rpath=$(d)) -l:libcudnn.so.9 -lnvrtc
ifeq ($(PRECISION),BF16)
CUDNN_DEPS := | $(CUDNN_ATT_LIB)
CUDNN_LIBS := -ldl
endif

.PHONY: cudnn-frontend
cudnn-frontend: $(CUDNN_FRONTEND_H)
	@echo "cudnn frontend headers: $(CUDNN_FRONTEND_DIR)/include"
# (the builds that need the headers fetch them themselves: a fresh clone's make train_gpt2cu works;
# without network, a wheel in PIP_FIND_LINKS or pip's cache serves, else one line says so)
$(CUDNN_FRONTEND_H):
	$(Q)bash dev/get_cudnn_frontend.sh $(CUDNN_FRONTEND_DIR) $(CUDNN_FRONTEND_VERSION)

# (llmc/kernels/cudnn_att.map: only the four extern "C" entry points are exported; -z defs: every symbol
# resolved at link time, so a dlopen that finds cuDNN cannot fail on a missing symbol later; the
# frontend's few CUDA runtime calls link the static runtime, as the nvcc builds do)
CUDNN_ATT_PIC := build/cudnn_att.pic.o
$(CUDNN_ATT_PIC): llmc/kernels/cudnn_att.cpp llmc/kernels/cudnn_att.cuh llmc/utils.h | $(CUDNN_FRONTEND_H)
	@mkdir -p $(@D)
	@echo "  CXX   $@ (cuDNN frontend)"
	$(Q)$(CXX) -std=c++17 -O2 -Wall -Wextra -Werror -fPIC -fvisibility=hidden \
		-I. -I$(CUDA_HOME)/include -I$(CUDNN_HOME)/include -isystem $(CUDNN_FRONTEND_DIR)/include -c $< -o $@
$(CUDNN_ATT_LIB): $(CUDNN_ATT_PIC) llmc/kernels/cudnn_att.map
	@echo "  LD    $@ (cuDNN)"
	$(Q)$(CXX) -shared -Wl,-z,defs -Wl,--version-script=llmc/kernels/cudnn_att.map $< -o $@ \
		$(CUDNN_LINK) -L$(CUDA_HOME)/lib64 -lcudart_static -lrt -lpthread -ldl

# The loader (llmc/kernels/cudnn_load.h) without a GPU: a missing library, a file that is no library and a
# library whose own dependency is missing (as without libcudnn.so.9) each stop with the one line;
# the built library resolves every entry point, and is found from copies of the test where the
# binaries live: next to it (build/), in its build/ (the repository root) and in ../ (build/gpu/);
# none near it is the one line too (run by gpu-compile-check PRECISION=BF16).
CUDNN_LOAD_DIR := $(BUILD)/cudnn_load
$(BUILD)/test_cudnn_load: dev/test/test_cudnn_load.cpp llmc/kernels/cudnn_load.h llmc/utils.h
	@mkdir -p $(@D)
	@echo "  CXX   $@"
	$(Q)$(CXX) $(CXXFLAGS) -Werror $< -o $@ -ldl
$(CUDNN_LOAD_DIR)/libneeds_gone.so:
	@mkdir -p $(@D)
	$(Q)printf 'void ls_gone(void) {}\n' | $(CC) -shared -fPIC -x c - -o $(@D)/libls_gone.so
	$(Q)printf 'void ls_gone(void); void ls_needs_gone(void) { ls_gone(); }\n' | \
		$(CC) -shared -fPIC -x c - -o $@ -L$(@D) -l:libls_gone.so
	$(Q)rm -f $(@D)/libls_gone.so
test-cudnn-load: $(BUILD)/test_cudnn_load $(CUDNN_LOAD_DIR)/libneeds_gone.so $(CUDNN_ATT_LIB)
	$(Q)$(BUILD)/test_cudnn_load --lib $(CUDNN_ATT_LIB) --needs-missing $(CUDNN_LOAD_DIR)/libneeds_gone.so \
		--not-lib dev/test/test_cudnn_load.cpp
	$(Q)mkdir -p $(CUDNN_LOAD_DIR)/alone/bin && cp -f $(BUILD)/test_cudnn_load $(CUDNN_LOAD_DIR)/alone/bin/
	$(Q)$(CUDNN_LOAD_DIR)/alone/bin/test_cudnn_load --not-found
	$(Q)cd $(CUDNN_LOAD_DIR) && mkdir -p root/build up/bin && cp -f ../test_cudnn_load root/ && cp -f ../test_cudnn_load up/bin/ && \
		ln -sf $(abspath $(CUDNN_ATT_LIB)) root/build/ && ln -sf $(abspath $(CUDNN_ATT_LIB)) up/ && \
		root/test_cudnn_load --expect-at root/build/libleanstep_cudnn.so && up/bin/test_cudnn_load --expect-at up/libleanstep_cudnn.so
	@# its own dependencies: every one found, and its RUNPATH names the toolkit's lib64 (libnvrtc.so.13
	@# there) besides cuDNN's directory: with cuDNN from PyTorch's wheels, nvrtc is not beside it
	$(Q)runpath=$$(readelf -d $(CUDNN_ATT_LIB) | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p'); \
		for d in $(CUDNN_RUNPATH); do case ":$$runpath:" in *":$$d:"*) ;; \
		*) echo "test-cudnn-load: $(CUDNN_ATT_LIB)'s RUNPATH is '$$runpath', without $$d"; exit 1 ;; esac; done; \
		if ldd $(CUDNN_ATT_LIB) | grep "not found"; then echo "test-cudnn-load: $(CUDNN_ATT_LIB) misses a library"; exit 1; fi; \
		echo "ok   $(CUDNN_ATT_LIB): RUNPATH $$runpath, every dependency found"
.PHONY: test-cudnn-load

# What an nvcc build depends on beyond its sources: precision, architecture, multi-GPU and
# tokenizer state. The stamp's file changes only when they do (its recipe always runs, and rewrites
# it only on a difference), so `make train_gpt2cu PRECISION=FP32` after a BF16 build rebuilds, and
# a second `make train_gpt2cu` does nothing.
gpu_config = $(PRECISION) $(GPU_ARCH) $(NCCL_STATE) $(if $(HAVE_TOK_DEV),encoder,decode-only) $(if $(HAVE_BLAS_DEV),blas,no-blas)
.PHONY: FORCE
build/train_gpt2cu.config build/test_gpt2cu.config: FORCE
	@mkdir -p $(@D)
	@echo '$(gpu_config)' | cmp -s - $@ || echo '$(gpu_config)' >$@

train_gpt2cu: $(CUDA_TRAIN_DEPS) build/train_gpt2cu.config $(CUDNN_DEPS)
	@echo "  NVCC  $@ ($(PRECISION), $(GPU_ARCH)$(gpu_arch_note), $(NCCL_STATE))"
	$(Q)$(NVCC) $(NVCC_TRAIN_FLAGS) $(NCCL_FLAGS) -arch=$(GPU_ARCH) $< -o $@ $(NVCC_LIBS) $(CUDNN_LIBS) $(NCCL_LIBS)

test_gpt2cu: test_gpt2.cu dev/test/test_common.h dev/test/shape_sweep.h $(CUDA_TRAIN_DEPS) build/test_gpt2cu.config $(CUDNN_DEPS)
	@echo "  NVCC  $@ ($(PRECISION), $(GPU_ARCH)$(gpu_arch_note))"
	$(Q)$(NVCC) $(NVCC_TRAIN_FLAGS) -arch=$(GPU_ARCH) $< -o $@ $(NVCC_LIBS) $(CUDNN_LIBS)

# compile (no GPU needed) for the precision's architectures (GPU_CHECK_ARCHS_*) with warnings as
# errors, then link each object with the real CUDA libraries, as gpu-build links the binaries a GPU
# machine runs (gpu_link_libs: a missing library is a failure here); then, when NCCL is installed,
# the multi-GPU trainer (NCCL, and MPI when found) compiled and linked the same way. The outputs stay
# in build/gpu-check/ with their header dependencies (nvcc -MMD), so a second run with nothing
# changed compiles nothing. gpu-compile-check checks $(PRECISION), gpu-compile-check-all (make test)
# every precision in one make (FP16 without the NCCL link), so make -j compiles them side by side.
GPU_CHECK_DIR := build/gpu-check
# The architectures each precision is checked for: sm_90 (Hopper, the GPU a run is prepared for,
# dev/gpu_check.sh) for all three; fp16 also for the GPUs before bf16 (CUDA 13's oldest is sm_75;
# Volta's sm_70 needs CUDA 12's nvcc). The source has no code that differs by architecture, so one
# device compile per precision and target architecture is the check; each costs ~30 s of CPU.
GPU_CHECK_ARCHS_bf16 := 90
GPU_CHECK_ARCHS_fp32 := 90
GPU_CHECK_ARCHS_fp16 := 75 90
gpu_check_archs = $(subst $(check_space),$(check_space)+$(check_space),$(patsubst %,sm_%,$(GPU_CHECK_ARCHS_$(1))))
check_space := $(subst ,, )
NVCC_CHECK_FLAGS = $(filter-out $(PFLAGS),$(NVCC_TRAIN_FLAGS)) $(PFLAGS_$*) -Werror all-warnings -Xcompiler -Werror \
	$(foreach a,$(GPU_CHECK_ARCHS_$*),-gencode arch=compute_$(a),code=sm_$(a)) -MMD -MP -MF $@.d
GPU_CHECK_TRAIN := $(GPU_CHECK_DIR)/train_gpt2_bf16.o $(GPU_CHECK_DIR)/train_gpt2_fp32.o $(GPU_CHECK_DIR)/train_gpt2_fp16.o
GPU_CHECK_TEST := $(GPU_CHECK_DIR)/test_gpt2_bf16.o $(GPU_CHECK_DIR)/test_gpt2_fp32.o $(GPU_CHECK_DIR)/test_gpt2_fp16.o
GPU_CHECK_NCCL := $(GPU_CHECK_DIR)/train_gpt2cu_nccl_bf16 $(GPU_CHECK_DIR)/train_gpt2cu_nccl_fp32
GPU_CHECK_LINKED := $(foreach p,bf16 fp32 fp16,$(GPU_CHECK_DIR)/train_gpt2cu_$(p) $(GPU_CHECK_DIR)/test_gpt2cu_$(p))
gpu_check_files = $(GPU_CHECK_DIR)/train_gpt2cu_$(1) $(GPU_CHECK_DIR)/test_gpt2cu_$(1) \
	$(if $(NCCL_LIBS),$(GPU_CHECK_DIR)/train_gpt2cu_nccl_$(1))
# the libraries of the one-GPU trainer and its test in precision $(1) (gpu-build links the same)
gpu_link_libs = $(NVCC_LIBS) $(if $(filter bf16,$(1)),-ldl)
define GPU_CHECK_COMPILE
@mkdir -p $(@D)
@echo "  NVCC  $< ($*, $(call gpu_check_archs,$*), warnings are errors)"
$(Q)$(NVCC) $(NVCC_CHECK_FLAGS) -c $< -o $@
endef
$(GPU_CHECK_TRAIN): $(GPU_CHECK_DIR)/train_gpt2_%.o: train_gpt2.cu
	$(GPU_CHECK_COMPILE)
$(GPU_CHECK_TEST): $(GPU_CHECK_DIR)/test_gpt2_%.o: test_gpt2.cu
	$(GPU_CHECK_COMPILE)
define GPU_CHECK_LINK
$(GPU_CHECK_DIR)/$(1)_gpt2cu_$(2): $(GPU_CHECK_DIR)/$(1)_gpt2_$(2).o
	@echo "  LINK  $$@"
	$$(Q)$$(NVCC) $$< -o $$@ $$(call gpu_link_libs,$(2))
endef
$(foreach t,train test,$(foreach p,bf16 fp32 fp16,$(eval $(call GPU_CHECK_LINK,$(t),$(p)))))
$(GPU_CHECK_NCCL): $(GPU_CHECK_DIR)/train_gpt2cu_nccl_%: train_gpt2.cu
	@mkdir -p $(@D)
	@echo "  NVCC  $@ (NCCL$(if $(findstring USE_MPI,$(NCCL_FLAGS)), + MPI)$(if $(filter bf16,$*), + cuDNN loader), $(call gpu_check_archs,$*), compile and link, warnings are errors)"
	$(Q)$(NVCC) $(NVCC_CHECK_FLAGS) $(NCCL_FLAGS) $< -o $@ $(call gpu_link_libs,$*) $(NCCL_LIBS)
-include $(wildcard $(GPU_CHECK_DIR)/*.d)
# (an output built before it had a .d file depends on every header once)
$(foreach t,$(GPU_CHECK_TRAIN) $(GPU_CHECK_TEST) $(GPU_CHECK_NCCL),$(if $(wildcard $(t).d),,$(eval $(t): $(CUDA_TRAIN_DEPS) dev/test/test_common.h dev/test/shape_sweep.h)))
# Volta (sm_70): CUDA 13 cannot build it; this assembles the FP16 trainer's PTX with CUDA 12.9's ptxas
# (from PyPI) for sm_70 (dev/sm70_check.sh says what that shows). Not part of make test (a download).
.PHONY: gpu-sm70-check
gpu-sm70-check:
	$(Q)NVCC=$(NVCC) bash dev/sm70_check.sh $(filter-out $(PFLAGS),$(NVCC_TRAIN_FLAGS))
.PHONY: gpu-compile-check gpu-compile-check-all gpu-compile-check-nccl
gpu-compile-check: $(call gpu_check_files,$(PREC_LC)) $(if $(CUDNN_DEPS),test-cudnn-load) gpu-compile-check-nccl
gpu-compile-check-all: $(call gpu_check_files,bf16) $(call gpu_check_files,fp32) $(GPU_CHECK_DIR)/train_gpt2cu_fp16 \
	$(GPU_CHECK_DIR)/test_gpt2cu_fp16 test-cudnn-load gpu-compile-check-nccl
gpu-compile-check-nccl:
ifeq ($(NCCL_LIBS),)
	@$(call missing_dep,gpu-compile-check,NCCL (the multi-GPU build: $(NCCL_STATE)),the CUDA toolkit's NCCL)
else
	@:
endif

# Both precisions side by side for a GPU machine (dev/gpu_check.sh builds the bf16 trainer first and
# the rest beside it):
#   make -j gpu-build    the labs (build/cuda-gpu/) and build/gpu/{train,test}_gpt2cu_{bf16,fp32,fp16}
#   make gpu-carry       what a GPU machine without network needs from here (see below)
GPU_BUILD := build/gpu
GPU_BINS := $(foreach p,bf16 fp32 fp16,$(GPU_BUILD)/train_gpt2cu_$(p) $(GPU_BUILD)/test_gpt2cu_$(p))
# (the bf16 builds open cuDNN's flash attention at run time, build/libleanstep_cudnn.so, found
# from build/gpu/ as ../; the fp32 and fp16 builds have none. They do not wait for it: gpu-build
# makes it beside them, and a GPU machine's first step makes the bf16 trainer and it together)
gpu_prec_flags = $(filter-out $(PFLAGS),$(NVCC_TRAIN_FLAGS)) $(PFLAGS_$(1)) -arch=$(GPU_ARCH)
$(GPU_BUILD)/train_gpt2cu_%: $(CUDA_TRAIN_DEPS)
	@mkdir -p $(@D)
	@echo "  NVCC  $@ ($(GPU_ARCH), $(NCCL_STATE))"
	$(Q)$(NVCC) $(call gpu_prec_flags,$*) $(NCCL_FLAGS) $< -o $@ $(call gpu_link_libs,$*) $(NCCL_LIBS)
$(GPU_BUILD)/test_gpt2cu_%: test_gpt2.cu dev/test/test_common.h dev/test/shape_sweep.h $(CUDA_TRAIN_DEPS)
	@mkdir -p $(@D)
	@echo "  NVCC  $@ ($(GPU_ARCH))"
	$(Q)$(NVCC) $(call gpu_prec_flags,$*) $< -o $@ $(call gpu_link_libs,$*)
# (the labs do not wait for the cuDNN library: the attention lab opens it at run time only, and
# gpu-build builds it beside them, in this make alone)
gpu-lab-build:
	$(Q)$(MAKE) --no-print-directory -C dev/cuda gpu NVCC=$(NVCC) GPU_ARCH=$(GPU_ARCH) Q=$(Q)
gpu-build: $(GPU_BINS) gpu-lab-build $(CUDNN_ATT_LIB)
# the PyTorch reference of the CI config (dev/gpu_check.sh makes it on the GPU machine with its torch)
ref: $(REF_DIR)/$(REF_DESC)_state.bin $(REF_DIR)/$(REF_DESC)_muon_state.bin
# What a GPU machine without network needs beyond the tracked files, one path a line in
# dev/gpu_carry.txt: the data's token files and the tokenizer file, build/deps/ (the cuDNN
# frontend's headers and zlib's), the cuDNN library built here (host code) and build/gpu_carry.stamp,
# the hash of the library's sources (dev/gpu_carry.sh), so that dev/gpu_check.sh uses it as it is
# while they match. Prints each path and the size with the tracked files (at most 48 MiB).
gpu-carry: data cudnn-frontend $(CUDNN_ATT_LIB)
	@mkdir -p build/deps/include
	$(Q)cp -f $(wildcard /usr/include/zlib.h /usr/include/zconf.h /usr/include/$(MULTIARCH)/zconf.h) build/deps/include/
	$(Q)CUDNN_HOME=$(CUDNN_HOME) CXX=$(CXX) bash dev/gpu_carry.sh stamp
	$(Q)bash dev/gpu_carry.sh size
	@echo "then on the GPU machine, with those paths carried: OUT=... dev/gpu_check.sh"
# (the library's object is rebuilt when any header of this tree it includes changes: its stamp's files)
$(CUDNN_ATT_PIC): $(shell bash dev/gpu_carry.sh closure)
.PHONY: gpu-build gpu-lab-build gpu-carry ref

# the harness builds: g++, every CUDA thread a fiber, cuBLASLt's calls and cuDNN's attention on the
# CPU. Both precisions are targets of every make (not only $(PRECISION)'s), so one make -j builds
# them all without recursive makes racing on the same file.
# (fp16: outside these lists, built by the tests that run it: model-fp16, compare-fp16, cli-fp16, guards-fp16)
EMU_TRAIN := $(BUILD)/train_gpt2cu_emu_fp32 $(BUILD)/train_gpt2cu_emu_bf16
EMU_TEST := $(BUILD)/test_gpt2cu_emu_fp32 $(BUILD)/test_gpt2cu_emu_bf16
EMU_MPI := $(BUILD)/train_gpt2cu_emu_mpi_fp32 $(BUILD)/train_gpt2cu_emu_mpi_bf16
$(EMU_TRAIN) $(BUILD)/train_gpt2cu_emu_fp16: $(BUILD)/train_gpt2cu_emu_%: $(CUDA_TRAIN_DEPS) $(HARNESS_HEADERS)
	@mkdir -p $(@D)
	@echo "  CXX   $@ (CPU harness)"
	$(Q)$(CXX) $(CXXFLAGS) $(CUDA_HARNESS_FLAGS) $(PFLAGS_$*) $< -o $@ $(CUDA_HARNESS_LIBS) -lz
$(EMU_TEST) $(BUILD)/test_gpt2cu_emu_fp16: $(BUILD)/test_gpt2cu_emu_%: test_gpt2.cu dev/test/test_common.h dev/test/shape_sweep.h $(CUDA_TRAIN_DEPS) $(HARNESS_HEADERS)
	@mkdir -p $(@D)
	@echo "  CXX   $@ (CPU harness)"
	$(Q)$(CXX) $(CXXFLAGS) $(CUDA_HARNESS_FLAGS) $(PFLAGS_$*) $< -o $@ $(CUDA_HARNESS_LIBS) -lz
# the fp32 harness trainer as built where OpenBLAS's header is missing (test-gpu-emu-no-blas)
$(BUILD)/train_gpt2cu_emu_noblas_fp32: $(CUDA_TRAIN_DEPS) $(HARNESS_HEADERS)
	@mkdir -p $(@D)
	@echo "  CXX   $@ (CPU harness, no OpenBLAS)"
	$(Q)$(CXX) $(CXXFLAGS) $(filter-out -DLS_HOST_BLAS,$(CUDA_HARNESS_FLAGS)) $(PFLAGS_fp32) $< -o $@ \
		-x none -lboost_context $(LDLIBS_TOK) -lz
train_gpt2cu_emu: $(BUILD)/train_gpt2cu_emu_$(PREC_LC)
test_gpt2cu_emu: $(BUILD)/test_gpt2cu_emu_$(PREC_LC)

# the harness build with MPI: NCCL's calls over MPI between CPU processes (dev/harness/nccl.h, what
# -DUSE_NCCL includes there), so `mpirun -np 2` runs the GPU trainer's -z 0 / -z 1 code; needs mpicxx
# and nccl.h (declarations)
$(EMU_MPI): $(BUILD)/train_gpt2cu_emu_mpi_%: $(CUDA_TRAIN_DEPS) $(HARNESS_HEADERS)
	@mkdir -p $(@D)
	@echo "  MPICXX $@ (CPU harness, NCCL over MPI)"
	$(Q)OMPI_CXX=$(CXX) $(MPICXX) $(CXXFLAGS) $(CUDA_HARNESS_FLAGS) $(PFLAGS_$*) -DUSE_MPI -DUSE_NCCL $(MPI_SKIP_CXX) $< -o $@ $(CUDA_HARNESS_LIBS) -lz
train_gpt2cu_emu_mpi: $(BUILD)/train_gpt2cu_emu_mpi_$(PREC_LC)
ifeq ($(HAVE_MPI)$(if $(NCCL_INC),1),11)
test-mpi: $(EMU_MPI) $(EMU_TRAIN)  # test_mpi_gpu.py's binaries
endif

# CI: the GPU trainer's whole step under the harness in both precisions, against PyTorch (bf16: the
# default --attention cudnn, then the matmul path); then 10 training steps of the fp32 harness build
# against the CPU trainer on TinyShakespeare; every awkward (B, T, NH) against a float64 forward
# (--sweep 1); both trainers run as a user runs them, default flags and one row per mode
# (test_modes.py). One target per run, so that `make -j` (as `make test` runs) spreads them over
# the cores. Tiny shapes: one OpenMP thread (more only spin, and make -j runs the others).
EMU_REF := --model $(REF_DIR)/$(REF_DESC)_model.bin --state $(REF_DIR)/$(REF_DESC)_state.bin
EMU_RUN := OMP_NUM_THREADS=1
GPU_EMU_TESTS := $(addprefix test-gpu-emu-,model-fp32 model-bf16 model-bf16-matmul model-fp16 mutants-fp32 mutants-bf16 \
	compare-1 compare-2 compare-3 compare-fp16 cli-fp32 cli-bf16 cli-fp16 sweep-fp32 sweep-bf16 modes cross-resume first-run \
	guards-fp32 guards-bf16 guards-fp16 train-loop optim-matrix cudnn-graphs no-blas) gpu-compile-check-all
.PHONY: test-gpu-emu $(GPU_EMU_TESTS)
test-gpu-emu: $(GPU_EMU_TESTS)
$(filter test-gpu-emu-%,$(GPU_EMU_TESTS)): $(EMU_TRAIN)
test-gpu-emu-model-fp32 test-gpu-emu-model-bf16: test-gpu-emu-model-%: $(BUILD)/test_gpt2cu_emu_% $(REF_DIR)/$(REF_DESC)_state.bin \
		$(REF_DIR)/$(REF_DESC)_muon_state.bin $(REF_DIR)/$(REF_DESC)_adam_mini_state.bin
	$(EMU_RUN) $(BUILD)/test_gpt2cu_emu_$* $(EMU_REF) --muon-state $(REF_DIR)/$(REF_DESC)_muon_state.bin \
		--adam-mini-state $(REF_DIR)/$(REF_DESC)_adam_mini_state.bin
test-gpu-emu-model-bf16-matmul: $(BUILD)/test_gpt2cu_emu_bf16 $(REF_DIR)/$(REF_DESC)_state.bin
	$(EMU_RUN) $(BUILD)/test_gpt2cu_emu_bf16 $(EMU_REF) --attention matmul --resume-check 0
# PRECISION=FP16 (fp32 master weights, the reference checks under loss scaling 1024: test_gpt2.cu);
# then the offload modes alone (--offload cpu's host rounding to fp16 against the GPU kernels')
test-gpu-emu-model-fp16: $(BUILD)/test_gpt2cu_emu_fp16 $(REF_DIR)/$(REF_DESC)_state.bin
	$(EMU_RUN) $(BUILD)/test_gpt2cu_emu_fp16 $(EMU_REF) --resume-check 0
	$(EMU_RUN) $(BUILD)/test_gpt2cu_emu_fp16 $(EMU_REF) --offload-only 1
test-gpu-emu-mutants-fp32 test-gpu-emu-mutants-bf16: test-gpu-emu-mutants-%: $(BUILD)/test_gpt2cu_emu_% $(REF_MUTANTS_MADE)
	$(EMU_RUN) $(REF_MUTANTS) --bin $(BUILD)/test_gpt2cu_emu_$*
# (the optimizer modes in three parts, about 45 s of CPU each; 3: bf16/int8/4bit state of the others)
EMU_COMPARE_MODES_1 := --mode "" --mode "--badam 2" --mode "--optimizer sgd --nesterov 1" --mode "--optimizer lamb"
EMU_COMPARE_MODES_2 := --mode "--optimizer lion" --mode "--opt-state bf16" --mode "--opt-state int8" --mode "--amsgrad 1" \
	--mode "--opt-state fp16"
EMU_COMPARE_MODES_3 := --mode "--optimizer lion --opt-state int8 --badam 2" --mode "--optimizer lamb --opt-state int8" \
	--mode "--optimizer sgd --nesterov 1 --opt-state bf16" --mode "--opt-state int8 --amsgrad 1" --mode "--opt-state 4bit"
test-gpu-emu-compare-1 test-gpu-emu-compare-2 test-gpu-emu-compare-3: test-gpu-emu-compare-%: $(BUILD)/train_gpt2 $(REF_DIR)/$(REF_DESC)_model.bin data
	$(EMU_RUN) $(PYTHON) dev/test/compare_trainers.py --cpu $(BUILD)/train_gpt2 --gpu $(BUILD)/train_gpt2cu_emu_fp32 \
		--model $(REF_DIR)/$(REF_DESC)_model.bin $(EMU_COMPARE_MODES_$*)
# PRECISION=FP16 against the fp32 CPU trainer: 25 steps on TinyShakespeare under its default loss
# scaling (65536), within 1e-3 relative per step (fp16 keeps 11 significant bits, 4.9e-4 relative;
# the loss is an fp32 mean over B*T positions of fp16 logits; measured 2.4e-5)
test-gpu-emu-compare-fp16: $(BUILD)/train_gpt2 $(BUILD)/train_gpt2cu_emu_fp16 $(REF_DIR)/$(REF_DESC)_model.bin data
	$(EMU_RUN) $(PYTHON) dev/test/compare_trainers.py --cpu $(BUILD)/train_gpt2 --gpu $(BUILD)/train_gpt2cu_emu_fp16 \
		--model $(REF_DIR)/$(REF_DESC)_model.bin --steps 25 --rtol 1e-3
test-gpu-emu-cli-fp16 test-gpu-emu-guards-fp16: $(BUILD)/train_gpt2cu_emu_fp16
test-gpu-emu-cli-fp32 test-gpu-emu-cli-bf16 test-gpu-emu-cli-fp16: test-gpu-emu-cli-%: data
	$(EMU_RUN) $(PYTHON) dev/test/test_cli.py --bin $(BUILD)/train_gpt2cu_emu_$*
test-gpu-emu-sweep-fp32 test-gpu-emu-sweep-bf16: test-gpu-emu-sweep-%: $(BUILD)/test_gpt2cu_emu_%
	$(EMU_RUN) $(BUILD)/test_gpt2cu_emu_$* --sweep 1
# without OpenBLAS: Muon with --offload cpu refused in one line, the rest equal to the BLAS build
test-gpu-emu-no-blas: $(BUILD)/train_gpt2cu_emu_noblas_fp32 data
	$(PYTHON) dev/test/test_no_blas.py --bin $(BUILD)/train_gpt2cu_emu_noblas_fp32 --blas-bin $(BUILD)/train_gpt2cu_emu_fp32
test-gpu-emu-modes: $(BUILD)/train_gpt2 data
	$(PYTHON) dev/test/test_modes.py --bin $(BUILD)/train_gpt2 --bin $(BUILD)/train_gpt2cu_emu_fp32 \
		--bin $(BUILD)/train_gpt2cu_emu_bf16
test-gpu-emu-cross-resume: $(BUILD)/train_gpt2 data
	$(EMU_RUN) $(PYTHON) dev/test/test_cross_resume.py --cpu $(BUILD)/train_gpt2 --fp32 $(BUILD)/train_gpt2cu_emu_fp32 \
		--bf16 $(BUILD)/train_gpt2cu_emu_bf16
# every optimizer x state precision x placement cell of the optimizer engine (dev/test/test_optim_matrix.py):
# the CPU trainer (its MPI build for -z 1) and the fp32 harness GPU build (its MPI build for -z 1): run
# or refused as listed, CPU = GPU losses, -z 1 = one process, bit-exact resume of a sample of cells
test-gpu-emu-optim-matrix: $(BUILD)/train_gpt2 data $(if $(HAVE_MPI),$(BUILD)/train_gpt2_mpi) \
		$(if $(HAVE_MPI),$(if $(NCCL_INC),$(BUILD)/train_gpt2cu_emu_mpi_fp32))
	$(EMU_RUN) $(PYTHON) dev/test/test_optim_matrix.py --bin $(BUILD)/train_gpt2 --gpu-bin $(BUILD)/train_gpt2cu_emu_fp32 \
		$(if $(HAVE_MPI),--mpi-bin $(BUILD)/train_gpt2_mpi) \
		$(if $(HAVE_MPI),$(if $(NCCL_INC),--gpu-mpi-bin $(BUILD)/train_gpt2cu_emu_mpi_fp32))
# The optimizer's numerics, frozen: a guard for changes that must not change them (not in make test:
# the bits are the CPU's and the OpenBLAS build's). Every matrix cell's final checkpoint, SHA-256 of
# its model and state files, in the CPU trainer and the fp32 harness GPU build (and their MPI
# builds). optim-hashes records them into $(BUILD)/optim_hashes.txt; optim-hashes-check records them
# and fails naming each cell whose bits differ from OPTIM_HASHES_GOLDEN's, or that is missing from
# either side. A new golden file is optim-hashes's output, copied.
OPTIM_HASHES_GOLDEN := dev/test/data/optim_matrix_hashes.txt
OPTIM_HASHES_MPI := $(if $(HAVE_MPI),$(BUILD)/train_gpt2_mpi) $(if $(HAVE_MPI),$(if $(NCCL_INC),$(BUILD)/train_gpt2cu_emu_mpi_fp32))
OPTIM_HASHES_RUN = $(EMU_RUN) $(PYTHON) dev/test/test_optim_matrix.py --cells-only --bin $(BUILD)/train_gpt2 \
	--gpu-bin $(BUILD)/train_gpt2cu_emu_fp32 $(if $(HAVE_MPI),--mpi-bin $(BUILD)/train_gpt2_mpi) \
	$(if $(HAVE_MPI),$(if $(NCCL_INC),--gpu-mpi-bin $(BUILD)/train_gpt2cu_emu_mpi_fp32)) --record-hashes $(BUILD)/optim_hashes.txt
.PHONY: optim-hashes optim-hashes-check
optim-hashes: $(BUILD)/train_gpt2 $(BUILD)/train_gpt2cu_emu_fp32 $(OPTIM_HASHES_MPI)
	$(OPTIM_HASHES_RUN)
optim-hashes-check: $(BUILD)/train_gpt2 $(BUILD)/train_gpt2cu_emu_fp32 $(OPTIM_HASHES_MPI)
	$(OPTIM_HASHES_RUN) --compare-hashes $(OPTIM_HASHES_GOLDEN)
# Checkpoints of an earlier build (dev/test/data/golden_ckpt/: AdamW fp32 and int8, Lion bf16, Muon,
# BAdam) resume in both trainers with its losses and model bits (dev/test/test_golden_resume.py,
# --regenerate to write new ones). A second.
test-golden-resume: $(BUILD)/train_gpt2 $(BUILD)/train_gpt2cu_emu_fp32
	$(EMU_RUN) $(PYTHON) dev/test/test_golden_resume.py --bin $(BUILD)/train_gpt2 --gpu-bin $(BUILD)/train_gpt2cu_emu_fp32
.PHONY: test-golden-resume
TEST_PHONY += test-golden-resume
test-gpu-emu-first-run: $(BUILD)/prepare_data data
	$(EMU_RUN) $(PYTHON) dev/test/test_first_run.py --gpu-bin $(BUILD)/train_gpt2cu_emu_fp32
test-gpu-emu-guards-fp32 test-gpu-emu-guards-bf16 test-gpu-emu-guards-fp16: test-gpu-emu-guards-%: data
	$(EMU_RUN) $(PYTHON) dev/test/test_guards.py --bin $(BUILD)/train_gpt2cu_emu_$*
# sampling and HellaSwag in the bf16 build (cuDNN attention): a bounded number of cuDNN graphs (the
# forwards padded to a small set of shapes, gpt2_eval_shape), and the same samples and answers as at
# the exact shapes (LEANSTEP_EVAL_SHAPES=exact) and as the CPU trainer's (dev/test/test_cudnn_graphs.py)
test-gpu-emu-cudnn-graphs: $(BUILD)/train_gpt2 $(REF_DIR)/$(REF_DESC)_model.bin data
	$(EMU_RUN) $(PYTHON) dev/test/test_cudnn_graphs.py --bin $(BUILD)/train_gpt2cu_emu_bf16 --cpu-bin $(BUILD)/train_gpt2 \
		--model $(REF_DIR)/$(REF_DESC)_model.bin --tokenizer data/gpt2_tokenizer.bin --data-dir data
test-gpu-emu-train-loop: $(REF_DIR)/$(REF_DESC)_model.bin data
	$(EMU_RUN) $(PYTHON) dev/test/test_train_loop.py --bin $(BUILD)/train_gpt2cu_emu_fp32 --model $(REF_DIR)/$(REF_DESC)_model.bin \
		--torch-python $(TORCH_PYTHON) --no-schedules

TEST_PHONY += test-gpu-emu

# The GPU trainer's whole step under ASan+UBSan (make test-san): the fp32 harness build against the
# PyTorch reference.
ifeq ($(SAN),1)
test-gpu-emu-san: $(BUILD)/test_gpt2cu_emu_fp32 $(REF_DIR)/$(REF_DESC)_state.bin
	$(EMU_RUN) $(BUILD)/test_gpt2cu_emu_fp32 $(EMU_REF)
else
test-gpu-emu-san: $(REF_DIR)/$(REF_DESC)_state.bin
	$(Q)$(MAKE) --no-print-directory SAN=1 test-gpu-emu-san
endif
TEST_SAN_PHONY += test-gpu-emu-san

TEST_PHONY += memory-table
include dev/fuzz/rules.mk
include dev/export/rules.mk
include dev/plot/rules.mk
include dev/lint/rules.mk
include dev/mutants/rules.mk

# The README's test command: the dependency step, then everything and the C tests again under
# ASan+UBSan (test-san), in one make -j$(TEST_JOBS) (default: every core): most tests are one
# thread, so they run side by side. --output-sync: each test's output in one piece when it ends. A
# failure stops nothing else (-k), so every failing test shows; the exit status is make's. The
# longest jobs come first (TEST_FIRST), so that none of them starts last; OMP_NUM_THREADS=1
# (unless set) so that the tests side by side do not spin against each other.
TEST_JOBS ?= $(shell nproc)
TEST_FIRST := test-san test-gpu-emu-model-bf16 test-gpu-emu-model-fp32 test-gpu-emu-model-bf16-matmul
test: deps
	$(Q)OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(MAKE) --no-print-directory -k -j$(TEST_JOBS) --output-sync=target \
		$(TEST_FIRST) $(filter-out $(TEST_FIRST),$(TEST_PHONY))
	@echo "all tests passed"

# (what the sanitizer builds share with the others is made first, here: data/, build/ref/, the venv)
# (the longest, the GPU trainer's step under ASan, first)
test-san: data $(REF_DIR)/$(REF_DESC)_state.bin $(HF_VENV)/.done
	$(MAKE) --no-print-directory SAN=1 test-gpu-emu-san $(filter-out test-gpu-emu-san,$(TEST_SAN_PHONY))

# The README's first command, the main job: the dependency step, the data, then training on the
# CPU into TRAIN_OUT: main.log, log.jsonl (make plot RUN=out) and the model at the end
# (TRAIN_OUT/model_<TRAIN_STEPS>.bin). Run again, it continues from TRAIN_OUT's checkpoint (-y 1;
# a SIGINT writes one), or ends at once when that is at TRAIN_STEPS. TRAIN_STEPS: how many steps
# (the README's test runs it with a few).
TRAIN_STEPS ?= 200
TRAIN_OUT ?= out
train: deps
	$(Q)$(MAKE) --no-print-directory train_gpt2 data
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-$$(nproc)} ./train_gpt2 -e L4C256H4 -b 4 -t 64 -x $(TRAIN_STEPS) -v 50 -s 100 -l 1e-3 -u 20 \
		-c 0.1 -k cosine -q 0.1 -o $(TRAIN_OUT) -n $(TRAIN_STEPS) -y 1

# installs what is missing (apt, pip); only checks when everything is there
deps:
	$(Q)bash dev/install_deps.sh

help:
	@echo "make                 build train_gpt2 and test_gpt2 (CPU)"
	@echo "make data            get TinyShakespeare + GPT-2 tokenizer files and tokenize them into data/"
	@echo "make corpus CORPUS=P any corpus (.txt, .jsonl, .gz, directories) into shards (CORPUS_OUT, CORPUS_FLAGS)"
	@echo "make hellaswag       HellaSwag's validation JSONL into data/hellaswag/ (for --hellaswag 1)"
	@echo "make deps            install what is missing (apt, pip); make train and make test run it"
	@echo "make train           make deps and data, then train GPT-2 on TinyShakespeare on the CPU into out/ (TRAIN_STEPS=200)"
	@echo "make test            make deps, then the whole test suite side by side (TEST_JOBS=cores; the README's test command)"
	@echo "make test-san        the C tests again under ASan+UBSan"
	@echo "make bench           CPU benchmarks: trainer tokens/s and MFU, AdamW vs bandwidth (PEER=llm.c/train_gpt2: measured beside it)"
	@echo "make bench-corpus    corpus tokenizer throughput against tiktoken at equal threads"
	@echo "make bench-peer PEER=llm.c/train_gpt2  the CPU trainer against llm.c's, ms/step on this machine"
	@echo "make memory-table    published memory figures vs their formulas vs our memory model"
	@echo "make optim-cost-table  bytes per parameter of every optimizer x state x placement (docs/optimizers.md)"
	@echo "make offload-table   GPT-2 124M..1.5B: which fits which GPU with which --offload, and --offload cpu's predicted step"
	@echo "make gpu-sm70-check    the FP16 trainer's PTX assembled for Volta (sm_70) by CUDA 12.9's ptxas (PyPI)"
	@echo "make train_gpt2cu    the GPU trainer (PRECISION=BF16|FP16|FP32, GPU_ARCH=native|sm_90...)"
	@echo "make cudnn-frontend  the cuDNN frontend headers (pip) for the BF16 GPU trainer's flash attention"
	@echo "make test-gpu-emu    the GPU trainer's tests under the CPU harness"
	@echo "make test-train-loop the training loop (loss, norm, lr, val loss) against the PyTorch reference"
	@echo "make test-ref-mutants the model checks must fail against a reference with a planted bug"
	@echo "make test-golden-resume  checkpoints of an earlier build resume to its losses and bits"
	@echo "make optim-hashes    SHA-256 of every optimizer matrix cell's final checkpoint (build/optim_hashes.txt)"
	@echo "make optim-hashes-check  the same, compared with dev/test/data/optim_matrix_hashes.txt (refactors)"
	@echo "make mutants         planted bugs in the product code that make test must catch (ONLY=pattern; ~25 min)"
	@echo "make gpu-build       (GPU machine) the labs and both precisions of the GPU trainer, make -j"
	@echo "make gpu-carry       what a GPU machine without network needs (dev/gpu_carry.txt), and its size"
	@echo "make quality-table   the same CPU training run in every optimizer-memory mode (minutes)"
	@echo "make quality-frontier  val loss against state bytes per parameter, two seeds (hours; build/quality_frontier.png)"
	@echo "make fuzz            every file reader under libFuzzer, FUZZ_SECONDS each"
	@echo "make lint            cppcheck + clang-tidy"
	@echo "make test-docs       README.md and docs/: links, anchors, tables of contents, line lengths"
	@echo "make plot RUN=DIR    loss and throughput curves of a run to DIR/plot.png (make train's: RUN=out)"
	@echo "make hf_convert      the Hugging Face safetensors export/import tool"
	@echo "make clean           remove build outputs (not data/)"

clean:
	rm -rf build train_gpt2 test_gpt2 train_gpt2cu test_gpt2cu $(CLEAN_EXTRA)

# ----------------------------------------------------------------------------
# the memory table: published figures vs their formulas vs our memory model (exit 1 on a mismatch)

$(BUILD)/memory_table: dev/memory_table.c $(LLMC_HEADERS)
	@mkdir -p $(BUILD)
	@echo "  CC    $@"
	$(Q)$(CC) $(CFLAGS) $< -o $@ $(LDLIBS)

memory-table: $(BUILD)/memory_table
	$(Q)$(BUILD)/memory_table

# what each optimizer x state precision x placement costs per parameter (docs/optimizers.md's table)
$(BUILD)/optim_cost_table: dev/optim_cost_table.c $(LLMC_HEADERS)
	@mkdir -p $(BUILD)
	@echo "  CC    $@"
	$(Q)$(CC) $(CFLAGS) $< -o $@ $(LDLIBS)

optim-cost-table: $(BUILD)/optim_cost_table
	$(Q)$(BUILD)/optim_cost_table

# which GPT-2 sizes fit which GPU with which --offload mode, and --offload cpu's predicted step
# (README's table): the bf16 GPU trainer's memory model and prediction (the harness build: no GPU
# needed); the host update measured here, scaled to HOST_THREADS at most HOST_GBS
OFFLOAD_TABLE_FLAGS ?= --host-threads 16 --host-gbs 100
offload-table: $(BUILD)/train_gpt2cu_emu_bf16
	$(Q)$(PYTHON) dev/offload_table.py --bin $(BUILD)/train_gpt2cu_emu_bf16 $(OFFLOAD_TABLE_FLAGS)

# ----------------------------------------------------------------------------
# benchmarks (programs that print tables; not tests)

$(BUILD)/bench_train: dev/cpu/bench_train.c dev/cpu/bench_util.h train_gpt2.c $(LLMC_HEADERS)
	@mkdir -p $(BUILD)
	@echo "  CC    $@"
	$(Q)$(CC) $(CFLAGS) $< -o $@ $(LDLIBS_BLAS) $(LDLIBS_TOK) $(LDLIBS)

$(BUILD)/adamw_bench: dev/cpu/adamw_bench.c dev/cpu/bench_util.h $(LLMC_HEADERS)
	@mkdir -p $(BUILD)
	@echo "  CC    $@"
	$(Q)$(CC) $(CFLAGS) $< -o $@ $(LDLIBS)

# make test builds the benchmarks (not runs them): they include the trainer and must keep building
# warning-free with it
bench-build: $(BUILD)/bench_train $(BUILD)/adamw_bench
TEST_PHONY += bench-build

# what they print does not mislead: quoted figures labelled, no percentage above 100% (seconds)
test-bench: $(BUILD)/bench_train $(BUILD)/adamw_bench
	$(PYTHON) dev/cpu/test_bench.py --bench-train $(BUILD)/bench_train --adamw-bench $(BUILD)/adamw_bench
TEST_PHONY += test-bench
.PHONY: test-bench

# PEER: llm.c's CPU trainer (its train_gpt2, built from a checkout of karpathy/llm.c outside this
# repository with its `make train_gpt2`). With it, `make bench` measures it in the same run (as
# bench-peer); without, bench_train's llm.c column holds quoted figures and says so.
PEER ?=
bench: $(BUILD)/bench_train $(BUILD)/adamw_bench $(if $(PEER),$(BUILD)/train_gpt2 data)
	$(BUILD)/bench_train $(if $(PEER),--peer none)
	$(BUILD)/adamw_bench --torch-python $(TORCH_PYTHON)
	$(if $(PEER),$(PYTHON) dev/cpu/bench_peer.py --bin $(BUILD)/train_gpt2 --peer $(PEER),@echo "llm.c's CPU trainer: \
		not measured in this run (make bench PEER=/path/to/llm.c/train_gpt2 measures it beside ours)")

# the CPU trainer against llm.c's train_gpt2.c on this machine, ms per step, taking turns
.PHONY: bench-peer
bench-peer: $(BUILD)/train_gpt2 data
	$(Q)if [ -z "$(PEER)" ]; then echo "make bench-peer: set PEER=/path/to/llm.c/train_gpt2" >&2; exit 2; fi
	$(PYTHON) dev/cpu/bench_peer.py --bin $(BUILD)/train_gpt2 --peer $(PEER)

# One lab for this machine's GPU (nvcc; all of them: make cuda-gpu): make build/cuda-gpu/adamw
build/cuda-gpu/%: FORCE
	$(Q)$(MAKE) --no-print-directory -C dev/cuda ../../build/cuda-gpu/$* NVCC=$(NVCC) GPU_ARCH=$(GPU_ARCH) Q=$(Q)

# the optimizer-memory quality table: the same training run in each mode (CPU trainer; minutes)
quality-table: $(BUILD)/train_gpt2 data
	$(PYTHON) dev/quality_table.py --bin $(BUILD)/train_gpt2
# the quality-per-byte frontier: the state precisions of AdamW and Muon, two seeds and three rates
# each (the CPU trainer; about an hour in all on 2 cores), as a table and build/quality_frontier.png
FRONTIER_MODES ?= adamw,adamw-bf16,adamw-fp16,adamw-int8,adamw-4bit,adam-mini,adam-mini-bf16,adam-mini-int8,\
	adam-mini-4bit,muon,muon-bf16,muon-int8,muon-4bit
quality-frontier: $(BUILD)/train_gpt2 data
	$(PYTHON) dev/quality_table.py --bin $(BUILD)/train_gpt2 --modes $(FRONTIER_MODES) --seeds 42,7 \
		--json $(BUILD)/quality.json
	$(PLOT_PYTHON) dev/plot/plot_frontier.py $(BUILD)/quality.json --out $(BUILD)/quality_frontier.png

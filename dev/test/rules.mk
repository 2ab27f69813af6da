# rules for the optimizer family's tests (included by the top-level Makefile)
#
#   make test-optim    the CPU optimizers of llmc/optim/optim.h: unit tests against a float64 reference
#                      and bit-level properties ($(BUILD)/test_optim), then dev/reference/optim_ref.py
#                      against PyTorch (torch.optim.SGD and AdamW; LAMB and Lion from their papers'
#                      formulas in torch ops). A few seconds.
#   make bench-optim   CPU GB/s of every optimizer at GPT-2 124M against AdamW's access pattern, and
#                      the state bytes per parameter of every optimizer x state precision.
# `make test` runs test-optim (TEST_PHONY); `make test-san` runs it on the ASan+UBSan build.
# The GPU kernels of the family are checked by dev/cuda/optimizers.cu (dev/cuda/rules.mk).

.PHONY: test-optim bench-optim

$(BUILD)/test_optim: dev/test/test_optim.c dev/cpu/bench_util.h $(LLMC_HEADERS)
	@mkdir -p $(@D)
	@echo "  CC    $@"
	$(Q)$(CC) $(CFLAGS) $< -o $@ $(LDLIBS_BLAS) $(LDLIBS)

test-optim: $(BUILD)/test_optim
	$(BUILD)/test_optim -q
	$(TORCH_PYTHON) dev/reference/optim_ref.py --bin $(BUILD)/test_optim

bench-optim: $(BUILD)/test_optim
	$(BUILD)/test_optim --bench

TEST_TARGETS += $(BUILD)/test_optim
TEST_PHONY += test-optim
TEST_SAN_PHONY += test-optim

# dev/gpu_check.sh rehearsed as a GPU machine without network would run it (--dry-run in a copy of
# the tree and the carry: every step's prerequisites, the builds' plans, each trainer run's flags
# through the harness builds' --dry-run, nothing fetched), with planted faults that must fail it;
# the carry's size (dev/gpu_carry.sh). Seconds, on what make test builds anyway.
test-gpu-check: gpu-carry $(BUILD)/train_gpt2cu_emu_bf16 $(BUILD)/train_gpt2cu_emu_fp16
	$(PYTHON) dev/test/test_gpu_check.py --torch-python $(TORCH_PYTHON) --emu $(BUILD)
TEST_PHONY += test-gpu-check

# README.md and docs/*.md hold together (dev/test/check_docs.py): relative links and #anchors
# resolve, every docs file has a one-line summary and a table of contents of its ## headings, no
# line over 100 characters, README.md at most 260 lines. A second.
test-docs:
	$(PYTHON) dev/test/check_docs.py
TEST_PHONY += test-docs
.PHONY: test-docs

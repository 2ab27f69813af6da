# rules for dev/reference (included by the top-level Makefile)
#
# dev/reference/gpt2_ref.py is the PyTorch reference the C trainers are compared against; it runs
# under Debian's PyTorch ($(TORCH_PYTHON)). Its self-test joins `make test` through TEST_PHONY.

.PHONY: test-reference
TEST_PHONY += test-reference

# The reference's own self-tests: init RNG vs its spec, file I/O, forward/backward vs a naive
# float64 GPT-2, AdamW vs torch.optim.AdamW. Prints one line per check; exit 1 on failure.
test-reference:
	$(Q)$(TORCH_PYTHON) dev/reference/gpt2_ref.py check

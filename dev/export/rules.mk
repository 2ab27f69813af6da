# rules for dev/export (included by the top-level Makefile after REF_DIR/REF_DESC are defined,
# since test-export uses the reference test model, and before the `test:` rule)
#
# build/hf_convert: llm.c model files <-> Hugging Face GPT-2 checkpoints (dev/export/hf_convert.c).
#   make hf_convert      build it
#   make test-export     export the reference test model (fp32 and bf16), check every tensor with
#                        the safetensors package, load it in transformers' GPT2LMHeadModel and
#                        compare logits with dev/reference/gpt2_ref.py, import it back (byte-identical
#                        model files), and check the strict header validation's messages.
# The test runs in build/hfvenv: a venv over Debian's python3 (for its PyTorch 1.13) with
# transformers and safetensors from PyPI, created on first use (about 20 s, network needed once).

HF_VENV := build/hfvenv
HF_PYTHON := $(HF_VENV)/bin/python
HF_PIP_PACKAGES := transformers==4.45.2 safetensors==0.8.0

$(BUILD)/hf_convert: dev/export/hf_convert.c $(LLMC_HEADERS)
	@mkdir -p $(@D)
	@echo "  CC    $@"
	$(Q)$(CC) $(CFLAGS) $< -o $@ -lcjson $(LDLIBS)

$(HF_VENV)/.done:
	@echo "  VENV  $(HF_VENV) ($(HF_PIP_PACKAGES))"
	$(Q)rm -rf $(HF_VENV) && $(TORCH_PYTHON) -m venv --system-site-packages $(HF_VENV)
	$(Q)$(HF_PYTHON) -m pip install -q --disable-pip-version-check $(HF_PIP_PACKAGES)
	$(Q)touch $@

.PHONY: hf_convert test-export
hf_convert: $(BUILD)/hf_convert

test-export: $(BUILD)/hf_convert $(REF_DIR)/$(REF_DESC)_model.bin $(HF_VENV)/.done
	$(Q)HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(HF_PYTHON) dev/export/test_export.py --bin $(BUILD)/hf_convert \
		--model $(REF_DIR)/$(REF_DESC)_model.bin

TEST_PHONY += test-export
TEST_SAN_PHONY += test-export

# rules for dev/fuzz (included by the top-level Makefile)
#
# libFuzzer targets for every reader of untrusted input: the model file, the state file, token
# shards (dataloader), the tokenizer decoder file, encoder.json + vocab.bpe, the BPE encoder on
# arbitrary bytes (real GPT-2 tokenizer, needs `make data`), the command line, safetensors and the
# HellaSwag JSONL.
# Built with clang -fsanitize=fuzzer,address,undefined -Dexit=fuzz_exit (see dev/fuzz/fuzz_common.h
# for how rejected inputs return instead of exiting; the product code is unchanged).
#   make fuzz          each target for FUZZ_SECONDS (default 60) from the committed seeds in
#                      dev/fuzz/corpus/<target>/; new inputs and crashes go to build/fuzz/
#   make fuzz-ci       each target for FUZZ_CI_SECONDS (default 6); inputs and crashes go to a
#                      temporary directory, nothing is written into the repo; fails on any crash
#   make fuzz-seeds    rewrite the generated seeds (dev/fuzz/make_seeds.py)
# A crash leaves build/fuzz/artifacts/<target>-crash-*: fix the reader, then copy the file into
# dev/fuzz/corpus/<target>/ as regress-<what> so that every later run replays it.
# To add a target: dev/fuzz/fuzz_<name>.c, its name in FUZZ_NAMES, its max input length below,
# and seeds in dev/fuzz/corpus/<name>/.

FUZZ_CC ?= clang
FUZZ_SECONDS ?= 60
FUZZ_CI_SECONDS ?= 6
FUZZ_CFLAGS := -g -O1 -std=gnu11 -Wall -Wextra -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
	-Dexit=fuzz_exit -I.
FUZZ_NAMES := model_file state_file shard tokenizer_file tokenizer_bpe encode cli safetensors hellaswag
FUZZ_BINS := $(addprefix build/fuzz/fuzz_,$(FUZZ_NAMES))
# the largest input each target tries (a bf16 model file of the smallest model is ~12 KB)
FUZZ_MAXLEN_model_file := 32768
FUZZ_MAXLEN_state_file := 4096
FUZZ_MAXLEN_shard := 4096
FUZZ_MAXLEN_tokenizer_file := 8192
FUZZ_MAXLEN_tokenizer_bpe := 16384
FUZZ_MAXLEN_encode := 4096
FUZZ_MAXLEN_cli := 1024
FUZZ_MAXLEN_safetensors := 8192
FUZZ_MAXLEN_hellaswag := 4096
# the shell loop body that runs target $$t for $(1) seconds with its work directory $(2):
# replays the committed corpus (seeds and regressions), then fuzzes; prints one summary line.
# -close_fd_mask=3: the readers' one-line rejections would flood the log (libFuzzer's report and
# the sanitizers' still print); -timeout: an input slower than this is a hang.
define FUZZ_RUN_ONE
mkdir -p $(2)/corpus/$$t $(2)/artifacts; log=$(2)/$$t.log; \
case $$t in $(foreach n,$(FUZZ_NAMES),$(n)$(rparen) maxlen=$(FUZZ_MAXLEN_$(n));;) esac; \
dict=; [ -f build/fuzz/$$t.dict ] && dict=-dict=build/fuzz/$$t.dict; \
if ./build/fuzz/fuzz_$$t -close_fd_mask=3 -timeout=25 -print_final_stats=1 -max_len=$$maxlen $$dict \
	-max_total_time=$(1) -artifact_prefix=$(2)/artifacts/$$t- $(2)/corpus/$$t dev/fuzz/corpus/$$t > $$log 2>&1; then \
	awk -v t=$$t '/^stat::number_of_executed_units/ {n=$$2} /^Done [0-9]+ runs in/ {s=$$(NF-1)} \
		END {printf "  fuzz  %-15s %9d executions in %3d s, 0 crashes\n", t, n, s}' $$log; \
else \
	tail -n 60 $$log; echo "  fuzz  $$t: CRASH (see above; the input is in $(2)/artifacts/)"; status=1; \
fi
endef
rparen := )

build/fuzz/fuzz_%: dev/fuzz/fuzz_%.c dev/fuzz/fuzz_common.h dev/fuzz/fuzz_tokenizer.h $(LLMC_HEADERS)
	@mkdir -p $(@D)
	@echo "  FUZZ  $@"
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) $< -o $@ $(LDLIBS_TOK) $(LDLIBS)

# a dictionary of the flag names for the command-line target, from the flag table itself
build/fuzz/cli.dict: llmc/run/train_options.h
	@mkdir -p $(@D)
	$(Q)sed -n 's/^ *{\(NULL\|"\([a-z]*\)"\), "\([a-z0-9-]*\)".*/\2 \3/p' $< | \
		awk '{ if (NF == 2) print "\"-" $$1 "\""; print "\"--" $$NF "\"" }' > $@
	$(Q)printf '"d12"\n"L2C64H4"\n"T1024"\n"V50257"\n"cosine"\n"1e-4"\n"-1"\n' >> $@

.PHONY: fuzz fuzz-ci fuzz-seeds fuzz-build
fuzz-build: $(FUZZ_BINS) build/fuzz/cli.dict

# Every target runs (a crash in one does not stop the others); the exit status is 1 if any crashed.
fuzz: fuzz-build data
	$(Q)status=0; for t in $(FUZZ_NAMES); do $(call FUZZ_RUN_ONE,$(FUZZ_SECONDS),build/fuzz); done; exit $$status

fuzz-ci: fuzz-build data
	$(Q)work=$$(mktemp -d); status=0; \
	for t in $(FUZZ_NAMES); do $(call FUZZ_RUN_ONE,$(FUZZ_CI_SECONDS),$$work); done; \
	if [ $$status -ne 0 ]; then mkdir -p build/fuzz/artifacts; cp $$work/artifacts/* build/fuzz/artifacts/ 2>/dev/null; \
		echo "fuzz-ci: crash inputs copied to build/fuzz/artifacts/"; fi; \
	rm -rf "$$work"; exit $$status

fuzz-seeds:
	$(PYTHON) dev/fuzz/make_seeds.py dev/fuzz/corpus

# CI runs the short campaign with the other tests (about 3 minutes)
TEST_PHONY += fuzz-ci

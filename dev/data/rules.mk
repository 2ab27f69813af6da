# rules for dev/data (included by the top-level Makefile)
#
# The data step and the tokenizer's tests:
#   make data             build prepare_data and run it: fetch + verify TinyShakespeare and GPT-2's
#                         encoder.json/vocab.bpe into data/ (from LEANSTEP_DATA_MIRROR if set, else
#                         the network), tokenize them into data/tinyshakespeare/*.bin and write
#                         data/gpt2_tokenizer.bin. A no-op when everything is up to date.
#   make test-tokenizer   C unit tests, then id-for-id comparison with tiktoken (python3)
#   make corpus CORPUS=.. tokenize your own text (.txt, .jsonl, .gz, directories) into shards in
#                         CORPUS_OUT (default data/corpus) with build/prepare_corpus (CORPUS_FLAGS)
#   make test-corpus      prepare_corpus (any corpus -> shards) against tiktoken, and its error paths
#   make test-full-disk   the CPU trainer's checkpoint write on a full disk: exit 1, no temp file left
#   make bench-corpus     prepare_corpus's MB/s against tiktoken's encode_ordinary_batch (BENCH_CORPUS_MB)
#   make test-first-run   a run as on a fresh machine (dev/test/test_first_run.py): the CPU trainer
#                         makes missing default data itself (`make data` from the mirror), missing
#                         -i/-j/--tokenizer paths are named, and the Makefile's NCCL detection
#                         (`make train` itself: test-readme, which runs README's commands).
#                         test-gpu-emu runs it on the GPU trainer's harness build (+ its no-GPU line).
# `make test` runs test-tokenizer, test-corpus, test-full-disk and test-first-run (TEST_PHONY), `make test-san`
# test-tokenizer and test-corpus again under ASan+UBSan (TEST_SAN_PHONY).

TOKENIZER_DEPS := llmc/io/tokenizer.h llmc/io/shard.h llmc/utils.h

# prepare_data: the data step (libcurl downloads, OpenSSL sha256)
$(BUILD)/prepare_data: dev/data/prepare_data.c $(TOKENIZER_DEPS)
	@mkdir -p $(@D)
	@echo "  CC    $@"
	$(Q)$(CC) $(CFLAGS) $< -o $@ $(LDLIBS_TOK) -lcurl -lcrypto $(LDLIBS)

# prepare_corpus: any corpus (.txt, .jsonl, .gz, directories) -> token shards, on all cores
$(BUILD)/prepare_corpus: dev/data/prepare_corpus.c $(TOKENIZER_DEPS) llmc/run/progress.h llmc/run/openmp_env.h
	@mkdir -p $(@D)
	@echo "  CC    $@"
	$(Q)$(CC) $(CFLAGS) $< -o $@ $(LDLIBS_TOK) $(LDLIBS)

# make corpus CORPUS="files or directories" [CORPUS_OUT=data/corpus] [CORPUS_FLAGS="--field content ..."]
CORPUS_OUT ?= data/corpus
.PHONY: corpus
corpus: $(BUILD)/prepare_corpus data
	$(Q)if [ -z "$(CORPUS)" ]; then echo "make corpus: set CORPUS=\"files or directories\" (.txt, .jsonl, .gz)" >&2; exit 2; fi
	$(Q)$(BUILD)/prepare_corpus -o $(CORPUS_OUT) $(CORPUS_FLAGS) $(CORPUS)

# test_tokenizer: unit tests of llmc/io/tokenizer.h + the CLI used by tokenizer_check.py
$(BUILD)/test_tokenizer: dev/test/test_tokenizer.c $(TOKENIZER_DEPS)
	@mkdir -p $(@D)
	@echo "  CC    $@"
	$(Q)$(CC) $(CFLAGS) $< -o $@ $(LDLIBS_TOK) $(LDLIBS)

# HellaSwag's validation set for --hellaswag (10,042 examples): from LEANSTEP_DATA_MIRROR's
# hellaswag/ when it has the file, else its canonical URL; written under a temporary name and
# renamed. Its sha256 is printed (and checked when HELLASWAG_SHA256 is set: no hash is pinned
# here, none was available to check against when this was written).
HELLASWAG_URL := https://raw.githubusercontent.com/rowanz/hellaswag/master/data/hellaswag_val.jsonl
HELLASWAG_FILE := data/hellaswag/hellaswag_val.jsonl
.PHONY: hellaswag
hellaswag: $(HELLASWAG_FILE)
$(HELLASWAG_FILE):
	@mkdir -p $(@D)
	$(Q)if [ -n "$(LEANSTEP_DATA_MIRROR)" ] && [ -f "$(LEANSTEP_DATA_MIRROR)/hellaswag/hellaswag_val.jsonl" ]; then \
		cp "$(LEANSTEP_DATA_MIRROR)/hellaswag/hellaswag_val.jsonl" $@.tmp; \
	else $(PYTHON) -c 'import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])' $(HELLASWAG_URL) $@.tmp 2>/dev/null \
		|| { rm -f $@.tmp; echo "make hellaswag: cannot download $(HELLASWAG_URL) (no network: put the file in \$$LEANSTEP_DATA_MIRROR/hellaswag/)" >&2; exit 1; }; fi
	$(Q)sum=$$(sha256sum $@.tmp | cut -d' ' -f1); echo "hellaswag: $$(wc -l < $@.tmp) lines, sha256 $$sum"; \
	if [ -n "$(HELLASWAG_SHA256)" ] && [ "$$sum" != "$(HELLASWAG_SHA256)" ]; then \
		rm -f $@.tmp; echo "make hellaswag: sha256 $$sum, expected HELLASWAG_SHA256=$(HELLASWAG_SHA256)" >&2; exit 1; fi
	$(Q)mv $@.tmp $@

.PHONY: data test-tokenizer
data: $(BUILD)/prepare_data
	$(Q)LEANSTEP_DATA_MIRROR="$(LEANSTEP_DATA_MIRROR)" $(BUILD)/prepare_data

test-tokenizer: $(BUILD)/test_tokenizer $(BUILD)/prepare_data data
	$(Q)$(BUILD)/test_tokenizer
	$(Q)$(PYTHON) dev/test/tokenizer_check.py --bin $(BUILD)/test_tokenizer --prepare $(BUILD)/prepare_data

# test-corpus: prepare_corpus's shards token for token against tiktoken, its error paths (seconds)
.PHONY: test-corpus bench-corpus
test-corpus: $(BUILD)/prepare_corpus data
	$(Q)$(PYTHON) dev/test/corpus_check.py --bin $(BUILD)/prepare_corpus

# bench-corpus: prepare_corpus against tiktoken's encode_ordinary_batch, same threads, same text
BENCH_CORPUS_MB ?= 32
bench-corpus: $(BUILD)/prepare_corpus data
	$(Q)$(PYTHON) dev/test/corpus_check.py --bin $(BUILD)/prepare_corpus --bench $(BENCH_CORPUS_MB)

# test-full-disk: a checkpoint write that fails (full disk) leaves no temp file (the atomic writes of
# llmc/utils.h, which the shards use too)
.PHONY: test-full-disk
test-full-disk: $(BUILD)/train_gpt2 data
	$(Q)$(PYTHON) dev/test/test_full_disk.py --bin $(BUILD)/train_gpt2

TEST_TARGETS += $(BUILD)/test_tokenizer $(BUILD)/prepare_data $(BUILD)/prepare_corpus
TEST_PHONY += test-full-disk
TEST_PHONY += test-corpus
TEST_SAN_PHONY += test-corpus
TEST_PHONY += test-tokenizer
TEST_SAN_PHONY += test-tokenizer

.PHONY: test-first-run
test-first-run: $(BUILD)/train_gpt2 $(BUILD)/prepare_data data
	$(Q)$(PYTHON) dev/test/test_first_run.py --bin $(BUILD)/train_gpt2

TEST_PHONY += test-first-run

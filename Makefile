# leanstep Makefile. `make help` lists the targets.
#
# Sub-directories keep their rules in rules.mk files included below; each appends its test
# programs to TEST_TARGETS and its test commands to the `test` recipe through TEST_CMDS.
# Output is quiet: one line per built file. V=1 shows full commands.

CC      ?= gcc
CXX     ?= g++
NVCC    ?= nvcc
OPT     ?= -O3 -march=native
CFLAGS  ?= $(OPT) -std=gnu11 -Wall -Wextra -fopenmp -I.
CXXFLAGS ?= $(OPT) -std=c++17 -Wall -Wextra -I.
LDLIBS_BLAS := -lopenblas
BLAS_INC := $(firstword $(wildcard /usr/include/x86_64-linux-gnu/openblas-pthread /usr/include/openblas /usr/include/aarch64-linux-gnu/openblas-pthread))
ifneq ($(BLAS_INC),)
CFLAGS += -I$(BLAS_INC)
endif
LDLIBS_TOK := -lpcre2-8 -lcjson
LDLIBS  ?= -lm

# Sanitizer build of the C programs: `make SAN=1 ...` writes into build/san/.
ifeq ($(SAN),1)
OPT := -O1 -g -fno-omit-frame-pointer
CFLAGS += -fsanitize=address,undefined -fno-sanitize-recover=undefined
CXXFLAGS += -fsanitize=address,undefined -fno-sanitize-recover=undefined
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

.PHONY: all test help clean
all: train_gpt2 test_gpt2

TEST_TARGETS :=
TEST_CMDS :=

include dev/data/rules.mk
include dev/reference/rules.mk
include dev/cuda/rules.mk

help:
	@echo "make                 build train_gpt2 and test_gpt2 (CPU)"
	@echo "make data            get TinyShakespeare + GPT-2 tokenizer files and tokenize them into data/"
	@echo "make train           make data, then train GPT-2 on TinyShakespeare on the CPU"
	@echo "make test            run the whole test suite (the README's test command)"
	@echo "make test-san        the C tests again under ASan+UBSan"
	@echo "make bench           CPU benchmarks: trainer tokens/s and MFU, AdamW vs bandwidth"
	@echo "make clean           remove build outputs (not data/)"

clean:
	rm -rf build train_gpt2 test_gpt2 $(CLEAN_EXTRA)

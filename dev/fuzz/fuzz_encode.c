/*
 fuzz_encode.c: libFuzzer target for the BPE encoder on arbitrary bytes, with the real GPT-2
 tokenizer (data/gpt2/encoder.json + vocab.bpe, from `make data`; another directory with
 LEANSTEP_GPT2_DIR). The encoder accepts any bytes: an exit here is a crash, so no call is guarded.
 Checked for each input, with and without the special token allowed:
   decode(encode(x)) == x, every id is in the vocabulary, only the literal "<|endoftext|>" becomes
   the eot id (and only when allowed), a second encode (now from the word cache) gives the same
   ids, and the ids decode to printable text.
*/
#include "dev/fuzz/fuzz_common.h"
#include "dev/fuzz/fuzz_tokenizer.h"

static Tokenizer tok;
static TokenList first, second;

int LLVMFuzzerInitialize(int* argc, char*** argv) {
    (void)argc; (void)argv;
    fuzz_setup();
    fuzz_gpt2_tokenizer(&tok);
    return 0;
}

static size_t count_eot_literals(const uint8_t* data, size_t size) {
    size_t k = 0, n = strlen(TOKENIZER_EOT_STRING);
    for (size_t i = 0; i + n <= size; i++) {
        if (memcmp(data + i, TOKENIZER_EOT_STRING, n) == 0) { k++; i += n - 1; }
    }
    return k;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    for (int allow = 0; allow <= 1; allow++) {
        first.len = second.len = 0;
        tokenizer_encode(&tok, (const char*)data, size, allow, &first);
        fuzz_check_lossless(&tok, &first, data, size);
        size_t eots = 0;
        for (size_t i = 0; i < first.len; i++) { eots += (uint32_t)first.data[i] == tok.eot_token; }
        fuzz_check(eots == (allow ? count_eot_literals(data, size) : 0), "eot id exactly for allowed literals");
        tokenizer_encode(&tok, (const char*)data, size, allow, &second);
        fuzz_check(first.len == second.len &&
                   (first.len == 0 || memcmp(first.data, second.data, first.len * sizeof(int)) == 0),
                   "encoding is deterministic (word cache)");
        if (allow) { fuzz_check_decode(&tok, first.data, first.len); }
    }
    return 0;
}

/*
 fuzz_hellaswag.c: libFuzzer target for the HellaSwag reader (llmc/io/hellaswag.h): arbitrary bytes
 as the JSONL file, tokenized with the real GPT-2 tokenizer (data/gpt2/encoder.json + vocab.bpe,
 from `make data`; another directory with LEANSTEP_GPT2_DIR). The first byte picks T (8..71).
 Every accepted file must give: at least one example, labels 0..3, a context of at least one
 token and endings of at least one, every row within T, rows inside the token buffer, and each
 example's four rows sharing their context.
*/
#include "dev/fuzz/fuzz_common.h"
#include "dev/fuzz/fuzz_tokenizer.h"
#include "llmc/io/hellaswag.h"

static Tokenizer tok;
static Hellaswag h;
static TokenList warm;

int LLVMFuzzerInitialize(int* argc, char*** argv) {
    (void)argc; (void)argv;
    fuzz_setup();
    fuzz_gpt2_tokenizer(&tok);
    // the encoder's scratch grown for the longest piece an input can hold: it must not grow inside
    // a guarded call (a rejection frees what was allocated there, and tok outlives the input)
    static char piece[8192 + 1];
    memset(piece, 'a', 8192);
    tokenizer_encode(&tok, piece, 8192, 0, &warm);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 1) { return 0; }
    const int T = 8 + data[0] % 64;
    const char* path = fuzz_write_file(0, "hellaswag.jsonl", data + 1, size - 1);
    fuzz_begin();
    if (setjmp(fuzz_env) == 0) {
        hellaswag_load(&h, path, &tok, T, 64);
        fuzz_check(h.n >= 1 && h.n <= 64, "at least one example, at most the maximum asked");
        for (int e = 0; e < h.n; e++) {
            fuzz_check(h.label[e] >= 0 && h.label[e] < HELLASWAG_ENDINGS, "label 0..3");
            fuzz_check(h.ctx_len[e] >= 1, "a context of at least one token");
            for (int i = 0; i < HELLASWAG_ENDINGS; i++) {
                const int len = hellaswag_row_len(&h, e, i);
                fuzz_check(h.end_len[e * HELLASWAG_ENDINGS + i] >= 1 && len <= T, "an ending of >= 1 token, the row within T");
                fuzz_check(h.off[e * HELLASWAG_ENDINGS + i] + (size_t)len <= h.len, "the row inside the buffer");
                fuzz_check(memcmp(hellaswag_row(&h, e, i), hellaswag_row(&h, e, 0), (size_t)h.ctx_len[e] * sizeof(int)) == 0,
                           "the four rows share their context");
                for (int t = 0; t < len; t++) {
                    const int id = hellaswag_row(&h, e, i)[t];
                    fuzz_check(id >= 0 && (uint32_t)id < tok.vocab_size, "token ids in the vocabulary");
                }
            }
        }
        hellaswag_free(&h);
        fuzz_end();
    } else {
        hellaswag_free(&h);  // (what it had allocated; fuzz_reject frees the reader's locals)
        fuzz_reject();
    }
    return 0;
}

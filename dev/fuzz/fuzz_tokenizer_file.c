/*
 fuzz_tokenizer_file.c: libFuzzer target for the llm.c tokenizer (decoder) file reader
 (tokenizer_init_from_file in llmc/io/tokenizer.h), and for what a loaded file is used for:
 decoding every id (and ids outside the vocabulary) to printable text, and encoding, which first
 builds the BPE tables from the file (and may reject it) and must then be lossless.
 The input is the file; the text encoded is the input's own first bytes.
*/
#include "dev/fuzz/fuzz_common.h"
#include "dev/fuzz/fuzz_tokenizer.h"

static Tokenizer tok;
static TokenList toks;
static int* ids;

FUZZ_INITIALIZE_DEFAULT

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const char* path = fuzz_write_input("tokenizer.bin", data, size);
    fuzz_begin();
    if (setjmp(fuzz_env) == 0) {
        tokenizer_init_from_file(&tok, path);
        fuzz_check(tok.vocab_size > 0 && tok.eot_token < tok.vocab_size, "vocab and eot");
        // every id in order, then a few outside the vocabulary
        size_t n = (size_t)tok.vocab_size + 3;
        ids = (int*)mallocCheck(n * sizeof(int));
        for (uint32_t i = 0; i < tok.vocab_size; i++) { ids[i] = (int)i; }
        ids[n - 3] = -1;
        ids[n - 2] = (int)tok.vocab_size;
        ids[n - 1] = INT32_MAX;
        fuzz_check_decode(&tok, ids, n);
        free(ids);
        ids = NULL;
        size_t text_len = size < 512 ? size : 512;
        tokenizer_encode(&tok, (const char*)data, text_len, 0, &toks);  // builds the tables first
        fuzz_check_lossless(&tok, &toks, data, text_len);
        tokenlist_free(&toks);
        tokenizer_free(&tok);
        fuzz_end();
    } else {
        tokenizer_free(&tok);
        tokenlist_free(&toks);
        ids = NULL;
        fuzz_reject();
    }
    return 0;
}

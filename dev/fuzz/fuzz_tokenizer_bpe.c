/*
 fuzz_tokenizer_bpe.c: libFuzzer target for the encoder.json + vocab.bpe readers
 (tokenizer_init_from_bpe in llmc/io/tokenizer.h). The input is split at its first NUL byte:
 encoder.json before, vocab.bpe after (no NUL: all of it is encoder.json, vocab.bpe is empty).
 A pair of files that loads must then encode losslessly (the text is the vocab.bpe part) and
 decode to printable text.
*/
#include "dev/fuzz/fuzz_common.h"
#include "dev/fuzz/fuzz_tokenizer.h"

static Tokenizer tok;
static TokenList toks;

FUZZ_INITIALIZE_DEFAULT

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const uint8_t* nul = (const uint8_t*)memchr(data, 0, size);
    size_t json_len = nul ? (size_t)(nul - data) : size;
    const uint8_t* bpe = nul ? nul + 1 : data + size;
    size_t bpe_len = (size_t)(data + size - bpe);
    const char* json_path = fuzz_write_file(0, "encoder.json", data, json_len);
    const char* bpe_path = fuzz_write_file(1, "vocab.bpe", bpe, bpe_len);
    fuzz_begin();
    if (setjmp(fuzz_env) == 0) {
        tokenizer_init_from_bpe(&tok, json_path, bpe_path);
        fuzz_check(tok.encode_ready && tok.vocab_size >= 257, "a loaded pair can encode");
        tokenizer_encode(&tok, (const char*)bpe, bpe_len, 1, &toks);
        fuzz_check_lossless(&tok, &toks, bpe, bpe_len);
        fuzz_check_decode(&tok, toks.data, toks.len);
        tokenlist_free(&toks);
        tokenizer_free(&tok);
        fuzz_end();
    } else {
        tokenizer_free(&tok);
        tokenlist_free(&toks);
        fuzz_reject();
    }
    return 0;
}

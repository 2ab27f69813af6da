/*
 fuzz_tokenizer.h: checks shared by the tokenizer fuzz targets (include after fuzz_common.h).
 - decoding is printable: valid UTF-8 with no control characters but \n and \t, NUL-terminated,
   never longer than the buffer, and the streaming decoder gives the same text;
 - encoding is lossless: the tokens' bytes, concatenated, are the text again.
*/
#ifndef DEV_FUZZ_FUZZ_TOKENIZER_H
#define DEV_FUZZ_FUZZ_TOKENIZER_H

#include "llmc/io/tokenizer.h"

// 1 if s (n,) is well-formed UTF-8 without C0 (but \n, \t), DEL or C1 controls.
static FUZZ_UNUSED int fuzz_printable_utf8(const unsigned char* s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned char b = s[i];
        if (b < 0x80) {
            if ((b < 0x20 && b != '\n' && b != '\t') || b == 0x7F) { return 0; }
            i++;
            continue;
        }
        int need;
        uint32_t cp, min;
        if (b >= 0xC2 && b <= 0xDF) { need = 1; cp = b & 0x1F; min = 0x80; }
        else if (b >= 0xE0 && b <= 0xEF) { need = 2; cp = b & 0x0F; min = 0x800; }
        else if (b >= 0xF0 && b <= 0xF4) { need = 3; cp = b & 0x07; min = 0x10000; }
        else { return 0; }
        if (i + (size_t)need >= n) { return 0; }  // the sequence runs past the end
        for (int k = 1; k <= need; k++) {
            if ((s[i + k] & 0xC0) != 0x80) { return 0; }
            cp = cp << 6 | (s[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF) || (cp >= 0x80 && cp < 0xA0)) { return 0; }
        i += (size_t)need + 1;
    }
    return 1;
}

static char fuzz_text[1 << 16], fuzz_stream_text[1 << 16];

// Decodes tokens (n,) into buffers of several sizes and checks the results are printable, cut at
// a character boundary, and equal to the streamed text when the buffer is large enough.
static FUZZ_UNUSED void fuzz_check_decode(const Tokenizer* t, const int* tokens, size_t n) {
    size_t len = tokenizer_decode_to_buf(t, tokens, n, fuzz_text, sizeof(fuzz_text));
    fuzz_check(len < sizeof(fuzz_text) && fuzz_text[len] == '\0', "decode_to_buf terminates");
    fuzz_check(fuzz_printable_utf8((const unsigned char*)fuzz_text, len), "decoded text is printable UTF-8");
    static const size_t small[] = {1, 2, 3, 4, 7, 64};
    for (size_t k = 0; k < sizeof(small) / sizeof(small[0]); k++) {
        char buf[64];
        size_t got = tokenizer_decode_to_buf(t, tokens, n, buf, small[k]);
        fuzz_check(got < small[k] && buf[got] == '\0', "small buffer: terminated, within bounds");
        fuzz_check(got <= len && memcmp(buf, fuzz_text, got) == 0, "small buffer: a prefix of the full text");
        fuzz_check(fuzz_printable_utf8((const unsigned char*)buf, got), "small buffer: printable UTF-8");
    }
    // streaming, one token at a time, must give the same text (when it fits)
    TokenizerUtf8State st;
    memset(&st, 0, sizeof(st));
    size_t at = 0;
    int fits = 1;
    for (size_t i = 0; i <= n && fits; i++) {
        char piece[TOKENIZER_STREAM_BUF];
        int tok = i < n ? tokens[i] : TOKENIZER_STREAM_END;
        size_t got = tokenizer_decode_stream(t, &st, tok, piece, sizeof(piece));
        fuzz_check(got < sizeof(piece) - 1, "a streamed token fits TOKENIZER_STREAM_BUF");
        if (at + got >= sizeof(fuzz_stream_text)) { fits = 0; break; }
        memcpy(fuzz_stream_text + at, piece, got);
        at += got;
    }
    if (fits && len + 16 < sizeof(fuzz_text)) {
        fuzz_check(at == len && memcmp(fuzz_stream_text, fuzz_text, len) == 0, "streamed text equals decode_to_buf");
    }
}

// Checks that the tokens' raw bytes, concatenated, are text (n,), and every id is in range.
static FUZZ_UNUSED void fuzz_check_lossless(const Tokenizer* t, const TokenList* toks, const unsigned char* text, size_t n) {
    size_t at = 0;
    for (size_t i = 0; i < toks->len; i++) {
        fuzz_check(toks->data[i] >= 0 && (uint32_t)toks->data[i] < t->vocab_size, "token id in range");
        size_t len;
        const char* p = tokenizer_decode(t, (uint32_t)toks->data[i], &len);
        fuzz_check(p != NULL && len > 0, "token has bytes");
        fuzz_check(at + len <= n && memcmp(text + at, p, len) == 0, "decode(encode(x)) == x");
        at += len;
    }
    fuzz_check(at == n, "decode(encode(x)) covers all of x");
}

// The real GPT-2 tokenizer, from data/gpt2/encoder.json + vocab.bpe (`make data`; another directory
// with LEANSTEP_GPT2_DIR). Not guarded: a failure ends the run (call it from LLVMFuzzerInitialize).
static FUZZ_UNUSED void fuzz_gpt2_tokenizer(Tokenizer* t) {
    const char* dir = getenv("LEANSTEP_GPT2_DIR");
    if (dir == NULL) { dir = "data/gpt2"; }
    char json[512], bpe[512];
    snprintf(json, sizeof(json), "%s/encoder.json", dir);
    snprintf(bpe, sizeof(bpe), "%s/vocab.bpe", dir);
    tokenizer_init_from_bpe(t, json, bpe);
}

#endif // DEV_FUZZ_FUZZ_TOKENIZER_H

/*
 tokenizer.h: GPT-2's byte-level BPE tokenizer, encode and decode, header-only.

 Two ways to get a Tokenizer:
 - tokenizer_init_from_bpe(): from OpenAI's encoder.json + vocab.bpe (what `make data` fetches).
   Both files are validated against each other; encode and decode are ready.
 - tokenizer_init_from_file(): from llm.c's decoder file (data/gpt2_tokenizer.bin, written by
   tokenizer_write_file). Decode is ready at once; encode is prepared on first use, because the
   file holds every token's bytes in rank order, which is all that byte-level BPE needs.

 Encoding reproduces tiktoken's encode_ordinary for the "gpt2" encoding, id for id:
 1. The text is cut into pieces by GPT-2's regex (PCRE2, UTF + Unicode properties, JIT).
 2. A piece that is a token as a whole becomes that token. Otherwise it starts as one part per
    byte and the adjacent pair whose concatenated bytes form the lowest-ranked token is merged
    (leftmost on ties), until no adjacent pair forms a token. In GPT-2 a token's rank is its id.
 Bytes that are not valid UTF-8 never match the regex; each run of them is encoded as a piece of
 its own, so decode(encode(x)) == x for any bytes (tiktoken only takes valid text).
 Known difference: PCRE2 10.42 (Debian 12) knows Unicode 14.0. Characters assigned since then
 (e.g. U+1C89) are not letters to it, so text with them may be split unlike tiktoken; every
 character assigned in Unicode 14.0 is checked by dev/test/tokenizer_check.py.

 The encode state (regex match data, word cache, BPE scratch) lives in the Tokenizer: use one
 Tokenizer per thread for encoding. Decoding is read-only.

 Define TOKENIZER_DECODE_ONLY before including this file to get just the decode half
 (init_from_file, decode, decode_to_buf, write_file, free): no PCRE2 or cJSON headers or
 libraries needed, e.g. in the CUDA trainer.
 To add a special token: give it an id after the mergeable tokens, exclude it from the token map
 in tokenizer_prepare_encode like eot_token, and match its literal string in tokenizer_encode.
 Link with -lpcre2-8 -lcjson ($(LDLIBS_TOK)) unless TOKENIZER_DECODE_ONLY is defined.
 Compiles as C11 and as C++17 (nvcc, g++).
*/
#ifndef LLMC_TOKENIZER_H
#define LLMC_TOKENIZER_H

#include <stdint.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include "llmc/utils.h"

#ifndef TOKENIZER_DECODE_ONLY
#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>
#include <cjson/cJSON.h>
#endif

#define TOKENIZER_MAGIC 20240328
#define TOKENIZER_VERSION 2
#define TOKENIZER_HEADER_INTS 256
#define TOKENIZER_MAX_VOCAB (1u << 20)      // bound on sizes read from files
#define TOKENIZER_EOT_STRING "<|endoftext|>"
#define TOKENIZER_NONE UINT32_MAX           // "no such token" / empty hash slot

// Word cache: pieces up to CACHE_MAX_PIECE bytes map to their tokens. When it fills up it is
// emptied and refilled, which keeps memory bounded on any input.
#define TOKENIZER_CACHE_SLOTS (1u << 17)    // power of 2; at most half are used
#define TOKENIZER_CACHE_ENTRIES (1u << 16)
#define TOKENIZER_CACHE_MAX_PIECE 64
#define TOKENIZER_CACHE_KEY_BYTES (1u << 20)
#define TOKENIZER_CACHE_TOKENS (1u << 18)

// GPT-2's pre-tokenization pattern (encoder.py in openai/gpt-2), as tiktoken's "gpt2" uses it.
// \s is spelled out as Unicode White_Space: PCRE2's \s also matches U+180E (MONGOLIAN VOWEL
// SEPARATOR, a space before Unicode 6.3), which Python's regex and tiktoken's Rust regex do not.
#define TOKENIZER_WS "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}" \
                     "\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
#define TOKENIZER_GPT2_PATTERN \
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" TOKENIZER_WS "\\p{L}\\p{N}]+" \
    "|[" TOKENIZER_WS "]+(?![^" TOKENIZER_WS "])|[" TOKENIZER_WS "]+"

// ----------------------------------------------------------------------------
// a growable list of token ids (the encoder's output)

typedef struct {
    int* data;   // (len,) token ids
    size_t len;
    size_t cap;
} TokenList;

static inline void* tokenizer_realloc(void* p, size_t size) {
    void* q = realloc(p, size == 0 ? 1 : size);
    if (q == NULL) { ls_fatal("out of host memory reallocating %zu bytes", size); }
    return q;
}

static inline void tokenlist_reserve(TokenList* l, size_t extra) {
    if (l->len + extra <= l->cap) { return; }
    size_t cap = l->cap < 1024 ? 1024 : l->cap;
    while (cap < l->len + extra) { cap *= 2; }
    l->data = (int*)tokenizer_realloc(l->data, cap * sizeof(int));
    l->cap = cap;
}

static inline void tokenlist_push(TokenList* l, int token) {
    if (l->len == l->cap) { tokenlist_reserve(l, 1); }
    l->data[l->len++] = token;
}

// Frees the list's storage; the list is empty and reusable afterwards.
static inline void tokenlist_free(TokenList* l) {
    free(l->data);
    l->data = NULL;
    l->len = 0;
    l->cap = 0;
}

// ----------------------------------------------------------------------------
// the Tokenizer

typedef struct { uint64_t hash; uint32_t key_off, tok_off, key_len, tok_len; } TokenizerCacheEntry;
typedef struct { uint32_t rank, pos, left, right; } BpeCandidate;  // merge parts pos and next(pos)

typedef struct {
    // vocabulary (both init paths)
    uint32_t vocab_size;    // 50257 for GPT-2
    uint32_t eot_token;     // 50256 for GPT-2: <|endoftext|>
    char source[256];       // the file it came from, for messages
    uint32_t* offsets;      // (vocab_size+1,) token i's bytes start at bytes + offsets[i]
    char* bytes;            // every token's bytes, each followed by a NUL (for printf-style use)
    // encode state, built by tokenizer_prepare_encode()
    int encode_ready;
    uint32_t byte_token[256];   // byte -> its single-byte token
    uint32_t* tok_slots;        // (tok_mask+1,) open addressing: token bytes -> id
    uint32_t tok_mask;
    uint64_t* pair_keys;        // (pair_mask+1,) (left id << 32 | right id), UINT64_MAX = empty
    uint32_t* pair_vals;        // (pair_mask+1,) id of the token the pair's bytes form
    uint32_t pair_mask;
    void* regex;                // pcre2_code*; void* so TOKENIZER_DECODE_ONLY needs no pcre2.h
    void* match_data;           // pcre2_match_data*
    uint32_t* cache_slots;      // (TOKENIZER_CACHE_SLOTS,) entry index + 1, 0 = empty
    TokenizerCacheEntry* cache_entries; // (TOKENIZER_CACHE_ENTRIES,)
    unsigned char* cache_keys;  // (TOKENIZER_CACHE_KEY_BYTES,)
    int* cache_tokens;          // (TOKENIZER_CACHE_TOKENS,)
    uint32_t cache_n, cache_key_len, cache_tok_len;
    uint32_t* part_tok;         // (scratch_cap,) BPE scratch: token of each part, NONE = merged away
    int32_t* part_prev;         // (scratch_cap,) linked list of live parts, -1 = none
    int32_t* part_next;         // (scratch_cap,)
    BpeCandidate* heap;         // (3 * scratch_cap,) candidate merges, min-heap on (rank, pos)
    size_t scratch_cap;
} Tokenizer;

// Bytes of one token, NUL-terminated; *len (if not NULL) gets the length, which counts embedded
// NULs (the single-byte token for 0x00). NULL for an id outside the vocabulary (e.g. the padded
// vocab rows 50257..50303 of the model). The pointer lives as long as the Tokenizer.
static inline const char* tokenizer_decode(const Tokenizer* t, uint32_t token, size_t* len) {
    if (token >= t->vocab_size) {
        if (len) { *len = 0; }
        return NULL;
    }
    if (len) { *len = t->offsets[token + 1] - t->offsets[token] - 1; }
    return t->bytes + t->offsets[token];
}

static inline uint64_t tokenizer_hash_bytes(const unsigned char* p, size_t n) {
    uint64_t h = 1469598103934665603ull;  // FNV-1a
    for (size_t i = 0; i < n; i++) { h = (h ^ p[i]) * 1099511628211ull; }
    return h ^ (h >> 29);
}

static inline uint64_t tokenizer_hash_pair(uint64_t key) {
    key ^= key >> 33;  // murmur3 finalizer
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    return key;
}

// GPT-2 stores token bytes as printable unicode: bytes that are printable Latin-1 (and not
// space) stand for themselves, the 68 others map to U+0100.. in byte order.
static inline void tokenizer_byte_alphabet(uint32_t codepoint_of_byte[256], int16_t byte_of_codepoint[512]) {
    for (int i = 0; i < 512; i++) { byte_of_codepoint[i] = -1; }
    int n = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        uint32_t cp = printable ? (uint32_t)b : (uint32_t)(256 + n++);
        codepoint_of_byte[b] = cp;
        byte_of_codepoint[cp] = (int16_t)b;
    }
}

// Reads a whole file into a NUL-terminated buffer (caller frees). A missing file is a user error
// reported with how to create it.
static inline char* tokenizer_read_all(const char* path, size_t* size_out) {
    FILE* fp = fopen(path, "rb");
    if (fp == NULL) {
        ls_fatal("%s: cannot open (%s); create it with `make data`", path, strerror(errno));
    }
    long long size = file_size_of(fp);
    if (size < 0 || size > (1LL << 30)) {
        ls_fatal("%s: cannot read its size or larger than 1 GiB", path);
    }
    char* buf = (char*)mallocCheck((size_t)size + 1);
    freadCheck(buf, 1, (size_t)size, fp, path);
    fclose(fp);
    buf[size] = '\0';
    *size_out = (size_t)size;
    return buf;
}

// remembers (a prefix of) the file name for messages; snprintf would warn about truncation
static inline void tokenizer_set_source(Tokenizer* t, const char* path) {
    size_t n = strlen(path);
    if (n >= sizeof(t->source)) { n = sizeof(t->source) - 1; }
    memcpy(t->source, path, n);
    t->source[n] = '\0';
}

// ----------------------------------------------------------------------------
// the llm.c decoder file: header 256 x uint32 [magic, version, vocab_size, eot], then per token
// a uint8 length (> 0) and that many bytes

static inline void tokenizer_init_from_file(Tokenizer* t, const char* path) {
    memset(t, 0, sizeof(*t));
    tokenizer_set_source(t, path);
    size_t size;
    char* buf = tokenizer_read_all(path, &size);
    const unsigned char* p = (const unsigned char*)buf;
    size_t header_bytes = TOKENIZER_HEADER_INTS * sizeof(uint32_t);
    if (size < header_bytes) {
        ls_fatal("%s: truncated header (%zu bytes, expected at least %zu); recreate it with `make data`",
                 path, size, header_bytes);
    }
    uint32_t header[TOKENIZER_HEADER_INTS];
    memcpy(header, p, header_bytes);
    if (header[0] != TOKENIZER_MAGIC) {
        ls_fatal("%s: bad magic %u (expected %d: not a tokenizer file); recreate it with `make data`",
                 path, header[0], TOKENIZER_MAGIC);
    }
    if (header[1] != TOKENIZER_VERSION) {
        ls_fatal("%s: unsupported version %u (expected %d); recreate it with `make data`",
                 path, header[1], TOKENIZER_VERSION);
    }
    uint32_t n = header[2], eot = header[3];
    if (n == 0 || n > TOKENIZER_MAX_VOCAB || eot >= n) {
        ls_fatal("%s: bad header: vocab_size %u, eot %u (expected 0 < eot < vocab_size <= %u)",
                 path, n, eot, TOKENIZER_MAX_VOCAB);
    }
    // one pass to validate lengths and size the arena, one to copy
    size_t at = header_bytes, total = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (at >= size) {
            ls_fatal("%s: truncated at token %u of %u; recreate it with `make data`", path, i, n);
        }
        size_t len = p[at];
        if (len == 0) { ls_fatal("%s: token %u has length 0 (expected 1..255)", path, i); }
        if (at + 1 + len > size) {
            ls_fatal("%s: truncated inside token %u of %u; recreate it with `make data`", path, i, n);
        }
        at += 1 + len;
        total += len + 1;
    }
    if (at != size) { ls_fatal("%s: %zu unexpected bytes after the last token", path, size - at); }
    t->vocab_size = n;
    t->eot_token = eot;
    t->offsets = (uint32_t*)mallocCheck(((size_t)n + 1) * sizeof(uint32_t));
    t->bytes = (char*)mallocCheck(total);
    at = header_bytes;
    size_t off = 0;
    for (uint32_t i = 0; i < n; i++) {
        size_t len = p[at];
        t->offsets[i] = (uint32_t)off;
        memcpy(t->bytes + off, p + at + 1, len);
        t->bytes[off + len] = '\0';
        off += len + 1;
        at += 1 + len;
    }
    t->offsets[n] = (uint32_t)off;
    free(buf);
}

static inline void tokenizer_write_file(const Tokenizer* t, const char* path) {
    uint32_t header[TOKENIZER_HEADER_INTS];
    memset(header, 0, sizeof(header));
    header[0] = TOKENIZER_MAGIC;
    header[1] = TOKENIZER_VERSION;
    header[2] = t->vocab_size;
    header[3] = t->eot_token;
    AtomicFile af;
    atomic_file_open(&af, path);
    fwriteCheck(header, sizeof(uint32_t), TOKENIZER_HEADER_INTS, af.fp, af.tmp_path);
    for (uint32_t i = 0; i < t->vocab_size; i++) {
        size_t len;
        const char* s = tokenizer_decode(t, i, &len);
        if (len == 0 || len > 255) {
            ls_fatal("%s: token %u is %zu bytes long, the file format allows 1..255", path, i, len);
        }
        uint8_t len8 = (uint8_t)len;
        fwriteCheck(&len8, 1, 1, af.fp, af.tmp_path);
        fwriteCheck(s, 1, len, af.fp, af.tmp_path);
    }
    atomic_file_commit(&af);
}

// ----------------------------------------------------------------------------
// decoding a sequence into printable text

typedef struct { char* buf; size_t cap; size_t len; int full; } TokenizerTextSink;
typedef struct { unsigned char seq[4]; int have, need; unsigned char lo, hi; } TokenizerUtf8State;

// Appends whole characters only: once one does not fit, nothing more is written, so a truncated
// result never ends inside a UTF-8 sequence. One byte is always kept for the NUL.
static inline void tokenizer_sink_put(TokenizerTextSink* s, const unsigned char* p, size_t n) {
    if (s->full || s->len + n + 1 > s->cap) {
        s->full = 1;
        return;
    }
    memcpy(s->buf + s->len, p, n);
    s->len += n;
}

static inline void tokenizer_sink_replacement(TokenizerTextSink* s) {
    static const unsigned char fffd[3] = {0xEF, 0xBF, 0xBD};  // U+FFFD
    tokenizer_sink_put(s, fffd, 3);
}

// One byte of the concatenated token bytes. Well-formed UTF-8 (Unicode Table 3-7) passes
// through; each maximal ill-formed subpart becomes one U+FFFD, as Python's errors="replace"
// does. Control characters other than \n and \t (C0, DEL, C1) also become U+FFFD: a sampled
// escape sequence must not reprogram the terminal.
static inline void tokenizer_utf8_push(TokenizerUtf8State* u, TokenizerTextSink* s, unsigned char b) {
    if (u->need > 0) {
        if (b >= u->lo && b <= u->hi) {
            u->seq[u->have++] = b;
            u->need--;
            u->lo = 0x80;
            u->hi = 0xBF;
            if (u->need == 0) {
                int c1_control = u->have == 2 && u->seq[0] == 0xC2 && u->seq[1] < 0xA0;
                if (c1_control) { tokenizer_sink_replacement(s); }
                else { tokenizer_sink_put(s, u->seq, (size_t)u->have); }
                u->have = 0;
            }
            return;
        }
        tokenizer_sink_replacement(s);  // the partial sequence; b starts afresh below
        u->have = 0;
        u->need = 0;
    }
    if (b < 0x80) {
        if ((b < 0x20 && b != '\n' && b != '\t') || b == 0x7F) { tokenizer_sink_replacement(s); }
        else { tokenizer_sink_put(s, &b, 1); }
        return;
    }
    u->lo = 0x80;
    u->hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) { u->need = 1; }
    else if (b >= 0xE0 && b <= 0xEF) {
        u->need = 2;
        if (b == 0xE0) { u->lo = 0xA0; }  // no overlongs
        if (b == 0xED) { u->hi = 0x9F; }  // no surrogates
    } else if (b >= 0xF0 && b <= 0xF4) {
        u->need = 3;
        if (b == 0xF0) { u->lo = 0x90; }  // no overlongs
        if (b == 0xF4) { u->hi = 0x8F; }  // nothing above U+10FFFF
    } else {
        tokenizer_sink_replacement(s);  // 0x80..0xC1, 0xF5..0xFF never start a character
        return;
    }
    u->seq[0] = b;
    u->have = 1;
}

// Feeds one token's bytes through the UTF-8 state; an id outside the vocabulary ends any
// unfinished character and prints as U+FFFD.
static inline void tokenizer_feed(const Tokenizer* t, TokenizerUtf8State* u, TokenizerTextSink* s, int token) {
    size_t len;
    const char* p = token < 0 ? NULL : tokenizer_decode(t, (uint32_t)token, &len);
    if (p == NULL) {
        if (u->need > 0) { tokenizer_sink_replacement(s); }
        u->need = u->have = 0;
        tokenizer_sink_replacement(s);
        return;
    }
    for (size_t j = 0; j < len; j++) { tokenizer_utf8_push(u, s, (unsigned char)p[j]); }
}

// tokens (n,) -> buf: their bytes concatenated (so characters split across tokens come out
// whole), made printable as in tokenizer_utf8_push; ids outside the vocabulary print as U+FFFD.
// Always NUL-terminates (buf_size >= 1); on overflow stops at a character boundary. Returns the
// number of bytes written, without the NUL. Allocates nothing, so it is safe in the step loop.
static inline size_t tokenizer_decode_to_buf(const Tokenizer* t, const int* tokens, size_t n,
                                             char* buf, size_t buf_size) {
    if (buf_size == 0) { return 0; }
    TokenizerTextSink s = {buf, buf_size, 0, 0};
    TokenizerUtf8State u;
    memset(&u, 0, sizeof(u));
    for (size_t i = 0; i < n && !s.full; i++) { tokenizer_feed(t, &u, &s, tokens[i]); }
    if (u.need > 0) { tokenizer_sink_replacement(&s); }  // text ended inside a character
    buf[s.len] = '\0';
    return s.len;
}

// Streaming decode, for printing samples token by token as they are generated: writes into buf
// the printable text that `token` completes (possibly "", while a character split across tokens
// is unfinished; the state carries it to the next call). Start with a zeroed state; after the
// last token call it with token = TOKENIZER_STREAM_END to flush an unfinished character as U+FFFD.
// A buf of TOKENIZER_STREAM_BUF bytes always suffices (255 bytes per token, 3 per U+FFFD).
#define TOKENIZER_STREAM_END INT32_MIN
#define TOKENIZER_STREAM_BUF 1024
static inline size_t tokenizer_decode_stream(const Tokenizer* t, TokenizerUtf8State* state, int token,
                                             char* buf, size_t buf_size) {
    if (buf_size == 0) { return 0; }
    TokenizerTextSink s = {buf, buf_size, 0, 0};
    if (token == TOKENIZER_STREAM_END) {
        if (state->need > 0) { tokenizer_sink_replacement(&s); }
        state->need = state->have = 0;
    } else {
        tokenizer_feed(t, state, &s, token);
    }
    buf[s.len] = '\0';
    return s.len;
}

// Frees everything; accepts a zeroed Tokenizer. The Tokenizer is zeroed afterwards.
static inline void tokenizer_free(Tokenizer* t) {
#ifndef TOKENIZER_DECODE_ONLY
    if (t->match_data) { pcre2_match_data_free((pcre2_match_data*)t->match_data); }
    if (t->regex) { pcre2_code_free((pcre2_code*)t->regex); }
#endif
    free(t->offsets);
    free(t->bytes);
    free(t->tok_slots);
    free(t->pair_keys);
    free(t->pair_vals);
    free(t->cache_slots);
    free(t->cache_entries);
    free(t->cache_keys);
    free(t->cache_tokens);
    free(t->part_tok);
    free(t->part_prev);
    free(t->part_next);
    free(t->heap);
    memset(t, 0, sizeof(*t));
}

#ifndef TOKENIZER_DECODE_ONLY
// ----------------------------------------------------------------------------
// hash maps: token bytes -> id, (left id, right id) -> id of the merged token

static inline uint32_t tokenizer_token_len(const Tokenizer* t, uint32_t id) {
    return t->offsets[id + 1] - t->offsets[id] - 1;
}

static inline uint32_t tokenizer_lookup(const Tokenizer* t, const unsigned char* p, size_t n, uint64_t h) {
    for (uint32_t i = (uint32_t)h & t->tok_mask;; i = (i + 1) & t->tok_mask) {
        uint32_t id = t->tok_slots[i];
        if (id == TOKENIZER_NONE) { return TOKENIZER_NONE; }
        if (tokenizer_token_len(t, id) == n && memcmp(t->bytes + t->offsets[id], p, n) == 0) { return id; }
    }
}

static inline uint32_t tokenizer_pair_get(const Tokenizer* t, uint32_t left, uint32_t right) {
    uint64_t key = ((uint64_t)left << 32) | right;
    for (uint32_t i = (uint32_t)tokenizer_hash_pair(key) & t->pair_mask;; i = (i + 1) & t->pair_mask) {
        if (t->pair_keys[i] == key) { return t->pair_vals[i]; }
        if (t->pair_keys[i] == UINT64_MAX) { return TOKENIZER_NONE; }
    }
}

static inline uint32_t tokenizer_pow2_at_least(size_t n) {
    uint32_t c = 16;
    while (c < n) { c *= 2; }
    return c;
}

// Builds everything encode needs from the vocabulary alone (source names the file for errors):
// the mergeable tokens are all but eot, their rank is their id, and bytes 0..255 must be tokens
// 0..255 (as in tiktoken's gpt2, where the single bytes have the lowest ranks).
static inline void tokenizer_prepare_encode(Tokenizer* t, const char* source) {
    uint32_t n = t->vocab_size;
    if (n < 257 || t->eot_token < 256) {
        ls_fatal("%s: cannot encode: vocab of %u tokens with eot %u (expected ids 0..255 to be the bytes)",
                 source, n, t->eot_token);
    }
    for (int b = 0; b < 256; b++) { t->byte_token[b] = TOKENIZER_NONE; }
    for (uint32_t id = 0; id < 256; id++) {
        if (tokenizer_token_len(t, id) != 1) {
            ls_fatal("%s: token %u is %u bytes long (expected ids 0..255 to be the 256 single bytes)",
                     source, id, tokenizer_token_len(t, id));
        }
        unsigned char b = (unsigned char)t->bytes[t->offsets[id]];
        if (t->byte_token[b] != TOKENIZER_NONE) {
            ls_fatal("%s: byte 0x%02x is both token %u and token %u", source, b, t->byte_token[b], id);
        }
        t->byte_token[b] = id;
    }
    // token bytes -> id (eot excluded: its literal text is never merged into it)
    t->tok_mask = tokenizer_pow2_at_least(2 * (size_t)n) - 1;
    t->tok_slots = (uint32_t*)mallocCheck(((size_t)t->tok_mask + 1) * sizeof(uint32_t));
    memset(t->tok_slots, 0xFF, ((size_t)t->tok_mask + 1) * sizeof(uint32_t));
    for (uint32_t id = 0; id < n; id++) {
        if (id == t->eot_token) { continue; }
        const unsigned char* p = (const unsigned char*)t->bytes + t->offsets[id];
        uint32_t len = tokenizer_token_len(t, id);
        uint64_t h = tokenizer_hash_bytes(p, len);
        uint32_t dup = tokenizer_lookup(t, p, len, h);
        if (dup != TOKENIZER_NONE) { ls_fatal("%s: tokens %u and %u have the same bytes", source, dup, id); }
        uint32_t i = (uint32_t)h & t->tok_mask;
        while (t->tok_slots[i] != TOKENIZER_NONE) { i = (i + 1) & t->tok_mask; }
        t->tok_slots[i] = id;
    }
    // (left, right) -> merged, for every token that splits into two tokens: tiktoken merges any
    // adjacent pair whose bytes form a token, not only the pairs listed in vocab.bpe.
    // Two passes: count the pairs to size the table, then insert.
    size_t n_pairs = 0;
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) {
            t->pair_mask = tokenizer_pow2_at_least(2 * n_pairs) - 1;
            t->pair_keys = (uint64_t*)mallocCheck(((size_t)t->pair_mask + 1) * sizeof(uint64_t));
            t->pair_vals = (uint32_t*)mallocCheck(((size_t)t->pair_mask + 1) * sizeof(uint32_t));
            memset(t->pair_keys, 0xFF, ((size_t)t->pair_mask + 1) * sizeof(uint64_t));
        }
        for (uint32_t id = 256; id < n; id++) {
            if (id == t->eot_token) { continue; }
            const unsigned char* p = (const unsigned char*)t->bytes + t->offsets[id];
            uint32_t len = tokenizer_token_len(t, id);
            for (uint32_t k = 1; k < len; k++) {
                uint32_t left = tokenizer_lookup(t, p, k, tokenizer_hash_bytes(p, k));
                if (left == TOKENIZER_NONE) { continue; }
                uint32_t right = tokenizer_lookup(t, p + k, len - k, tokenizer_hash_bytes(p + k, len - k));
                if (right == TOKENIZER_NONE) { continue; }
                if (pass == 0) { n_pairs++; continue; }
                uint64_t key = ((uint64_t)left << 32) | right;
                uint32_t i = (uint32_t)tokenizer_hash_pair(key) & t->pair_mask;
                while (t->pair_keys[i] != UINT64_MAX) { i = (i + 1) & t->pair_mask; }
                t->pair_keys[i] = key;
                t->pair_vals[i] = id;
            }
        }
    }
    // the pre-tokenization regex; invalid UTF-8 is allowed in the subject and never matches
    int err;
    PCRE2_SIZE err_off;
    pcre2_code* re = pcre2_compile((PCRE2_SPTR)TOKENIZER_GPT2_PATTERN, PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &err_off, NULL);
    if (re == NULL) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof(msg));
        ls_fatal("PCRE2 rejects the GPT-2 pattern at offset %zu: %s", (size_t)err_off, (const char*)msg);
    }
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);  // without JIT, pcre2_match interprets
    t->regex = re;
    t->match_data = pcre2_match_data_create_from_pattern(re, NULL);
    if (t->match_data == NULL) { ls_fatal("out of host memory creating PCRE2 match data"); }
    // word cache
    t->cache_slots = (uint32_t*)callocCheck(TOKENIZER_CACHE_SLOTS, sizeof(uint32_t));
    t->cache_entries = (TokenizerCacheEntry*)mallocCheck(TOKENIZER_CACHE_ENTRIES * sizeof(TokenizerCacheEntry));
    t->cache_keys = (unsigned char*)mallocCheck(TOKENIZER_CACHE_KEY_BYTES);
    t->cache_tokens = (int*)mallocCheck(TOKENIZER_CACHE_TOKENS * sizeof(int));
    t->cache_n = t->cache_key_len = t->cache_tok_len = 0;
    t->encode_ready = 1;
}

// ----------------------------------------------------------------------------
// loading encoder.json + vocab.bpe

// Up to 40 bytes of s for an error message, control bytes shown as '?' so that the message stays
// one line, cut at a character boundary. out needs 48 bytes.
static inline const char* tokenizer_quote(const char* s, char* out) {
    size_t n = 0;
    while (n < 40 && s[n] != '\0') { n++; }
    if (s[n] != '\0') {
        while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80) { n--; }  // do not split a character
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        out[i] = (char)((c < 0x20 || c == 0x7F) ? '?' : c);
    }
    memcpy(out + n, s[n] != '\0' ? "..." : "", s[n] != '\0' ? 4 : 1);
    return out;
}

// Decodes one GPT-2 alphabet string (UTF-8) into raw bytes; returns the byte count or -1 if a
// character is not in the alphabet (or the UTF-8 is broken). out needs strlen(s) bytes.
static inline int tokenizer_unalphabet(const char* s, size_t n, const int16_t byte_of_codepoint[512], unsigned char* out) {
    const unsigned char* p = (const unsigned char*)s;
    int len = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        if (p[i] < 0x80) { cp = p[i]; i += 1; }
        else if ((p[i] & 0xE0) == 0xC0 && i + 1 < n && (p[i + 1] & 0xC0) == 0x80) {
            cp = ((uint32_t)(p[i] & 0x1F) << 6) | (p[i + 1] & 0x3F);
            i += 2;
        } else { return -1; }  // the alphabet is U+0021..U+0143: one or two UTF-8 bytes
        if (cp >= 512 || byte_of_codepoint[cp] < 0) { return -1; }
        out[len++] = (unsigned char)byte_of_codepoint[cp];
    }
    return len;
}

static inline void tokenizer_load_encoder_json(Tokenizer* t, const char* path, const int16_t byte_of_codepoint[512]) {
    size_t size;
    char* text = tokenizer_read_all(path, &size);
    cJSON* root = cJSON_ParseWithLength(text, size);
    if (root == NULL || !cJSON_IsObject(root)) {
        ls_fatal("%s: not a JSON object (expected GPT-2's encoder.json: {\"token\": id, ...}); re-fetch it with `make data`", path);
    }
    int count = cJSON_GetArraySize(root);
    if (count < 257 || (uint32_t)count > TOKENIZER_MAX_VOCAB) {
        ls_fatal("%s: %d entries (expected 257..%u; GPT-2 has 50257)", path, count, TOKENIZER_MAX_VOCAB);
    }
    uint32_t n = (uint32_t)count;
    // pass 1: validate ids, decode keys into a scratch arena indexed by id
    uint32_t* start = (uint32_t*)mallocCheck((size_t)n * sizeof(uint32_t));
    uint32_t* length = (uint32_t*)callocCheck(n, sizeof(uint32_t));  // 0 = id not seen yet
    unsigned char* arena = (unsigned char*)mallocCheck(size);
    size_t used = 0;
    uint32_t eot = TOKENIZER_NONE;
    cJSON* item;
    cJSON_ArrayForEach(item, root) {
        const char* key = item->string;
        double v = cJSON_IsNumber(item) ? item->valuedouble : -1.0;
        char q[48];
        if (v < 0 || v >= (double)n || v != (double)(uint32_t)v) {
            ls_fatal("%s: entry \"%s\" has no integer id in 0..%u", path, tokenizer_quote(key, q), n - 1);
        }
        uint32_t id = (uint32_t)v;
        if (length[id] != 0) { ls_fatal("%s: id %u appears twice (again for \"%s\")", path, id, tokenizer_quote(key, q)); }
        if (strcmp(key, TOKENIZER_EOT_STRING) == 0) { eot = id; }
        size_t klen = strlen(key);
        int len = tokenizer_unalphabet(key, klen, byte_of_codepoint, arena + used);
        if (len <= 0) {
            ls_fatal("%s: key \"%s\" (id %u) is empty or has characters outside GPT-2's byte alphabet", path,
                     tokenizer_quote(key, q), id);
        }
        start[id] = (uint32_t)used;
        length[id] = (uint32_t)len;
        used += (size_t)len;
    }
    if (eot == TOKENIZER_NONE) { ls_fatal("%s: no \"%s\" entry", path, TOKENIZER_EOT_STRING); }
    // pass 2: lay the tokens out in id order (ids are 0..n-1 without repeats, as checked above)
    t->vocab_size = n;
    t->eot_token = eot;
    t->offsets = (uint32_t*)mallocCheck(((size_t)n + 1) * sizeof(uint32_t));
    t->bytes = (char*)mallocCheck(used + n);
    size_t off = 0;
    for (uint32_t id = 0; id < n; id++) {
        t->offsets[id] = (uint32_t)off;
        memcpy(t->bytes + off, arena + start[id], length[id]);
        t->bytes[off + length[id]] = '\0';
        off += length[id] + 1;
    }
    t->offsets[n] = (uint32_t)off;
    free(arena);
    free(length);
    free(start);
    cJSON_Delete(root);
    free(text);
}

// vocab.bpe: a "#version" line, then one merge "left right" per line in rank order. Checks that
// merge i forms token 256 + i, which is what makes rank == id (tiktoken asserts the same).
static inline void tokenizer_check_merges(Tokenizer* t, const char* path, const int16_t byte_of_codepoint[512]) {
    size_t size;
    char* text = tokenizer_read_all(path, &size);
    if (size == 0 || text[0] != '#') {
        ls_fatal("%s: first line is not the '#version' comment (expected GPT-2's vocab.bpe)", path);
    }
    char* line = strchr(text, '\n');
    if (line == NULL) { ls_fatal("%s: no merges after the '#version' line", path); }
    line++;
    size_t n_expected = (size_t)t->vocab_size - 257;  // all but the 256 bytes and eot
    size_t n_lines = 0;
    for (const char* p = line; p < text + size; n_lines++) {
        const char* nl = (const char*)memchr(p, '\n', (size_t)(text + size - p));
        p = nl ? nl + 1 : text + size;
    }
    if (n_lines != n_expected) {
        ls_fatal("%s: %zu merges, but the encoder has %u tokens (expected %zu merges)", path, n_lines,
                 t->vocab_size, n_expected);
    }
    unsigned char* buf = (unsigned char*)mallocCheck(size + 1);
    for (size_t i = 0; i < n_lines; i++) {
        char* nl = strchr(line, '\n');
        if (nl) { *nl = '\0'; }
        size_t lineno = i + 2;
        char q[48];
        char* space = strchr(line, ' ');
        if (space == NULL || space == line || space[1] == '\0' || strchr(space + 1, ' ') != NULL) {
            ls_fatal("%s: line %zu: \"%s\" is not two tokens separated by one space", path, lineno,
                     tokenizer_quote(line, q));
        }
        int la = tokenizer_unalphabet(line, (size_t)(space - line), byte_of_codepoint, buf);
        int lb = la < 0 ? -1 : tokenizer_unalphabet(space + 1, strlen(space + 1), byte_of_codepoint, buf + la);
        if (la <= 0 || lb <= 0) {
            ls_fatal("%s: line %zu: \"%s\" has characters outside GPT-2's byte alphabet", path, lineno,
                     tokenizer_quote(line, q));
        }
        uint32_t a = tokenizer_lookup(t, buf, (size_t)la, tokenizer_hash_bytes(buf, (size_t)la));
        uint32_t b = tokenizer_lookup(t, buf + la, (size_t)lb, tokenizer_hash_bytes(buf + la, (size_t)lb));
        uint32_t ab = (a == TOKENIZER_NONE || b == TOKENIZER_NONE) ? TOKENIZER_NONE : tokenizer_pair_get(t, a, b);
        if (ab == TOKENIZER_NONE) {
            ls_fatal("%s: line %zu: merge \"%s\" does not form a token of the encoder (files do not match)",
                     path, lineno, tokenizer_quote(line, q));
        }
        if (ab != 256 + i) {
            ls_fatal("%s: line %zu: merge \"%s\" forms id %u in the encoder, expected %zu (merges must be in id order)",
                     path, lineno, tokenizer_quote(line, q), ab, 256 + i);
        }
        line = nl ? nl + 1 : line + strlen(line);
    }
    free(buf);
    free(text);
}

// A second Tokenizer with src's vocabulary and its own encode state, for another thread.
static inline void tokenizer_init_copy(Tokenizer* t, const Tokenizer* src) {
    memset(t, 0, sizeof(*t));
    memcpy(t->source, src->source, sizeof(t->source));
    t->vocab_size = src->vocab_size;
    t->eot_token = src->eot_token;
    size_t n_bytes = src->offsets[src->vocab_size];
    t->offsets = (uint32_t*)mallocCheck(((size_t)src->vocab_size + 1) * sizeof(uint32_t));
    memcpy(t->offsets, src->offsets, ((size_t)src->vocab_size + 1) * sizeof(uint32_t));
    t->bytes = (char*)mallocCheck(n_bytes);
    memcpy(t->bytes, src->bytes, n_bytes);
    tokenizer_prepare_encode(t, t->source);
}

static inline void tokenizer_init_from_bpe(Tokenizer* t, const char* encoder_json, const char* vocab_bpe) {
    memset(t, 0, sizeof(*t));
    tokenizer_set_source(t, encoder_json);
    uint32_t codepoint_of_byte[256];
    int16_t byte_of_codepoint[512];
    tokenizer_byte_alphabet(codepoint_of_byte, byte_of_codepoint);
    tokenizer_load_encoder_json(t, encoder_json, byte_of_codepoint);
    tokenizer_prepare_encode(t, encoder_json);
    tokenizer_check_merges(t, vocab_bpe, byte_of_codepoint);
}

// ----------------------------------------------------------------------------
// encoding

static inline void tokenizer_heap_push(BpeCandidate* heap, size_t* n, BpeCandidate c) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        BpeCandidate p = heap[parent];
        if (p.rank < c.rank || (p.rank == c.rank && p.pos < c.pos)) { break; }
        heap[i] = p;
        i = parent;
    }
    heap[i] = c;
}

static inline BpeCandidate tokenizer_heap_pop(BpeCandidate* heap, size_t* n) {
    BpeCandidate top = heap[0];
    BpeCandidate last = heap[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) { break; }
        if (c + 1 < *n && (heap[c + 1].rank < heap[c].rank ||
                           (heap[c + 1].rank == heap[c].rank && heap[c + 1].pos < heap[c].pos))) { c++; }
        if (last.rank < heap[c].rank || (last.rank == heap[c].rank && last.pos < heap[c].pos)) { break; }
        heap[i] = heap[c];
        i = c;
    }
    heap[i] = last;
    return top;
}

static inline void tokenizer_try_candidate(const Tokenizer* t, size_t* n_heap, int32_t pos, int32_t next) {
    uint32_t merged = tokenizer_pair_get(t, t->part_tok[pos], t->part_tok[next]);
    if (merged == TOKENIZER_NONE) { return; }
    BpeCandidate c = {merged, (uint32_t)pos, t->part_tok[pos], t->part_tok[next]};
    tokenizer_heap_push(t->heap, n_heap, c);
}

// piece (n,) bytes, n >= 2 -> its BPE tokens appended to out. Always merges the lowest-ranked
// pair, leftmost on ties, exactly like tiktoken's loop, but in O(n log n) with a heap whose stale
// entries (a part that has since changed) are skipped when popped.
static inline void tokenizer_bpe(Tokenizer* t, const unsigned char* piece, size_t n, TokenList* out) {
    if (n > (size_t)INT32_MAX) { ls_fatal("tokenizer: a single %zu-byte piece is too long to encode", n); }
    if (n > t->scratch_cap) {
        size_t cap = n < 256 ? 256 : n;
        t->part_tok = (uint32_t*)tokenizer_realloc(t->part_tok, cap * sizeof(uint32_t));
        t->part_prev = (int32_t*)tokenizer_realloc(t->part_prev, cap * sizeof(int32_t));
        t->part_next = (int32_t*)tokenizer_realloc(t->part_next, cap * sizeof(int32_t));
        t->heap = (BpeCandidate*)tokenizer_realloc(t->heap, 3 * cap * sizeof(BpeCandidate));
        t->scratch_cap = cap;
    }
    uint32_t* tok = t->part_tok;
    int32_t* prev = t->part_prev;
    int32_t* next = t->part_next;
    for (size_t i = 0; i < n; i++) {
        tok[i] = t->byte_token[piece[i]];
        prev[i] = (int32_t)i - 1;
        next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    size_t n_heap = 0;  // at most n-1 initial candidates + 2 per merge: < 3n
    for (size_t i = 0; i + 1 < n; i++) { tokenizer_try_candidate(t, &n_heap, (int32_t)i, (int32_t)i + 1); }
    while (n_heap > 0) {
        BpeCandidate c = tokenizer_heap_pop(t->heap, &n_heap);
        int32_t i = (int32_t)c.pos, j = next[i];
        // stale if either part changed since: a part's token only grows, so equal ids mean same parts
        if (tok[i] != c.left || j < 0 || tok[j] != c.right) { continue; }
        tok[i] = c.rank;  // rank == id of the merged token
        tok[j] = TOKENIZER_NONE;
        next[i] = next[j];
        if (next[j] >= 0) { prev[next[j]] = i; }
        if (prev[i] >= 0) { tokenizer_try_candidate(t, &n_heap, prev[i], i); }
        if (next[i] >= 0) { tokenizer_try_candidate(t, &n_heap, i, next[i]); }
    }
    for (int32_t i = 0; i >= 0; i = next[i]) { tokenlist_push(out, (int)tok[i]); }  // part 0 never dies
}

static inline void tokenizer_cache_clear(Tokenizer* t) {
    memset(t->cache_slots, 0, TOKENIZER_CACHE_SLOTS * sizeof(uint32_t));
    t->cache_n = t->cache_key_len = t->cache_tok_len = 0;
}

// one piece (n,) bytes -> tokens appended to out
static inline void tokenizer_encode_piece(Tokenizer* t, const unsigned char* p, size_t n, TokenList* out) {
    if (n == 0) { return; }
    if (n == 1) {
        tokenlist_push(out, (int)t->byte_token[p[0]]);
        return;
    }
    uint64_t h = tokenizer_hash_bytes(p, n);
    uint32_t whole = tokenizer_lookup(t, p, n, h);
    if (whole != TOKENIZER_NONE) {  // tiktoken takes a piece that is a token as is
        tokenlist_push(out, (int)whole);
        return;
    }
    if (n > TOKENIZER_CACHE_MAX_PIECE) {
        tokenizer_bpe(t, p, n, out);
        return;
    }
    uint32_t slot = (uint32_t)(h >> 32) & (TOKENIZER_CACHE_SLOTS - 1);
    for (;; slot = (slot + 1) & (TOKENIZER_CACHE_SLOTS - 1)) {
        uint32_t e = t->cache_slots[slot];
        if (e == 0) { break; }
        const TokenizerCacheEntry* ce = &t->cache_entries[e - 1];
        if (ce->hash == h && ce->key_len == n && memcmp(t->cache_keys + ce->key_off, p, n) == 0) {
            tokenlist_reserve(out, ce->tok_len);
            memcpy(out->data + out->len, t->cache_tokens + ce->tok_off, ce->tok_len * sizeof(int));
            out->len += ce->tok_len;
            return;
        }
    }
    size_t first = out->len;
    tokenizer_bpe(t, p, n, out);
    size_t n_tok = out->len - first;
    if (t->cache_n == TOKENIZER_CACHE_ENTRIES || t->cache_key_len + n > TOKENIZER_CACHE_KEY_BYTES ||
        t->cache_tok_len + n_tok > TOKENIZER_CACHE_TOKENS) {
        tokenizer_cache_clear(t);
        slot = (uint32_t)(h >> 32) & (TOKENIZER_CACHE_SLOTS - 1);
    }
    TokenizerCacheEntry* ce = &t->cache_entries[t->cache_n];
    ce->hash = h;
    ce->key_off = t->cache_key_len;
    ce->key_len = (uint32_t)n;
    ce->tok_off = t->cache_tok_len;
    ce->tok_len = (uint32_t)n_tok;
    memcpy(t->cache_keys + ce->key_off, p, n);
    memcpy(t->cache_tokens + ce->tok_off, out->data + first, n_tok * sizeof(int));
    t->cache_key_len += (uint32_t)n;
    t->cache_tok_len += (uint32_t)n_tok;
    t->cache_slots[slot] = ++t->cache_n;
}

// text (len,) bytes -> tokens appended to out, like tiktoken's encode_ordinary: the literal text
// "<|endoftext|>" is encoded as ordinary text. Any bytes are accepted (see the banner).
static inline void tokenizer_encode_ordinary(Tokenizer* t, const char* text, size_t len, TokenList* out) {
    if (!t->encode_ready) { tokenizer_prepare_encode(t, t->source); }
    pcre2_code* re = (pcre2_code*)t->regex;
    pcre2_match_data* md = (pcre2_match_data*)t->match_data;
    const unsigned char* s = (const unsigned char*)text;
    size_t pos = 0;
    while (pos < len) {
        int rc = pcre2_match(re, (PCRE2_SPTR)s, len, pos, 0, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) {  // only invalid UTF-8 is left
            tokenizer_encode_piece(t, s + pos, len - pos, out);
            break;
        }
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof(msg));
            ls_fatal("tokenizer: PCRE2 match failed at byte %zu: %s", pos, (const char*)msg);
        }
        PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        size_t begin = ov[0], end = ov[1];
        if (end <= begin) {  // every alternative consumes a character; guard against looping
            ls_fatal("tokenizer: empty regex match at byte %zu", begin);
        }
        tokenizer_encode_piece(t, s + pos, begin - pos, out);  // invalid UTF-8 skipped by the match
        tokenizer_encode_piece(t, s + begin, end - begin, out);
        pos = end;
    }
}

// Like tokenizer_encode_ordinary; with allow_special != 0 the literal "<|endoftext|>" becomes
// eot_token (tiktoken's encode(..., allowed_special={"<|endoftext|>"})).
static inline void tokenizer_encode(Tokenizer* t, const char* text, size_t len, int allow_special, TokenList* out) {
    if (!allow_special) {
        tokenizer_encode_ordinary(t, text, len, out);
        return;
    }
    const size_t eot_len = strlen(TOKENIZER_EOT_STRING);
    size_t pos = 0;
    while (pos < len) {
        const char* hit = NULL;  // the next "<|endoftext|>" (memmem is not C11)
        for (const char* c = text + pos; c + eot_len <= text + len; c++) {
            c = (const char*)memchr(c, '<', (size_t)(text + len - c));
            if (c == NULL || c + eot_len > text + len) { break; }
            if (memcmp(c, TOKENIZER_EOT_STRING, eot_len) == 0) { hit = c; break; }
        }
        size_t stop = hit ? (size_t)(hit - text) : len;
        tokenizer_encode_ordinary(t, text + pos, stop - pos, out);
        if (hit == NULL) { break; }
        tokenlist_push(out, (int)t->eot_token);
        pos = stop + eot_len;
    }
}
#endif // TOKENIZER_DECODE_ONLY

#endif // LLMC_TOKENIZER_H

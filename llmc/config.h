/*
 config.h: the GPT-2 model configuration, model descriptors, and FLOPs per token.

 A descriptor names a model without a file:
   d6 | d12 | d24 | d36 | d48    llm.c's depth presets (d12 = GPT-2 124M, d48 = GPT-2 1558M)
   L4C256H4[T1024][V50257]       explicit form: layers, channels, heads, optional max sequence
                                 length (default 1024) and vocabulary (default 50257)
 The padded vocabulary rounds V up to a multiple of 128 (50257 -> 50304), as llm.c does, so the
 classifier matmul has friendly shapes; padded rows of wte are zero and never enter the loss.
*/
#ifndef LLMC_CONFIG_H
#define LLMC_CONFIG_H

#include <ctype.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define GPT2_EOT 50256
#define GPT2_VOCAB 50257

typedef struct {
    int max_seq_len;        // max sequence length, e.g. 1024
    int vocab_size;         // vocabulary size, e.g. 50257
    int padded_vocab_size;  // vocab rounded up to a multiple of 128, e.g. 50304
    int num_layers;         // L
    int num_heads;          // NH
    int channels;           // C
} GPT2Config;

static inline int padded_vocab_of(int vocab_size) { return (vocab_size + 127) / 128 * 128; }

// Checks a configuration; on failure writes a reason into err and returns 0.
static inline int gpt2_config_valid(const GPT2Config* c, char* err, size_t errlen) {
    if (c->num_layers < 1 || c->num_layers > 256) { snprintf(err, errlen, "layers must be in [1, 256], got %d", c->num_layers); return 0; }
    if (c->channels < 16 || c->channels > 65536) { snprintf(err, errlen, "channels must be in [16, 65536], got %d", c->channels); return 0; }
    if (c->num_heads < 1 || c->channels % c->num_heads != 0) { snprintf(err, errlen, "heads (%d) must divide channels (%d)", c->num_heads, c->channels); return 0; }
    if (c->max_seq_len < 1 || c->max_seq_len > 1048576) { snprintf(err, errlen, "max sequence length must be in [1, 1048576], got %d", c->max_seq_len); return 0; }
    if (c->vocab_size < 2 || c->vocab_size > 65536) { snprintf(err, errlen, "vocab size must be in [2, 65536] (tokens are stored as uint16), got %d", c->vocab_size); return 0; }
    if (c->padded_vocab_size < c->vocab_size) { snprintf(err, errlen, "padded vocab %d < vocab %d", c->padded_vocab_size, c->vocab_size); return 0; }
    return 1;
}

static inline int parse_positive_int(const char** s, int* out) {
    const char* p = *s;
    if (!isdigit((unsigned char)*p)) { return 0; }
    long v = 0;
    while (isdigit((unsigned char)*p)) { v = v * 10 + (*p - '0'); if (v > 100000000L) { return 0; } p++; }
    *out = (int)v;
    *s = p;
    return 1;
}

// Parses a descriptor (see the banner). Returns 1 on success; 0 if `desc` is not a descriptor.
static inline int gpt2_config_from_descriptor(const char* desc, GPT2Config* c) {
    memset(c, 0, sizeof(*c));
    c->max_seq_len = 1024;
    c->vocab_size = GPT2_VOCAB;
    if (desc[0] == 'd' && isdigit((unsigned char)desc[1])) {
        const char* p = desc + 1;
        int depth;
        if (!parse_positive_int(&p, &depth) || *p != '\0') { return 0; }
        switch (depth) {
            case 6:  c->channels = 384;  c->num_heads = 6;  break;
            case 12: c->channels = 768;  c->num_heads = 12; break;
            case 24: c->channels = 1024; c->num_heads = 16; break;
            case 36: c->channels = 1280; c->num_heads = 20; break;
            case 48: c->channels = 1600; c->num_heads = 25; break;
            default: return 0;
        }
        c->num_layers = depth;
    } else if (desc[0] == 'L' || desc[0] == 'l') {
        const char* p = desc;
        int seen_c = 0, seen_h = 0;
        while (*p) {
            char key = (char)toupper((unsigned char)*p++);
            int v;
            if (!parse_positive_int(&p, &v)) { return 0; }
            switch (key) {
                case 'L': c->num_layers = v; break;
                case 'C': c->channels = v; seen_c = 1; break;
                case 'H': c->num_heads = v; seen_h = 1; break;
                case 'T': c->max_seq_len = v; break;
                case 'V': c->vocab_size = v; break;
                default: return 0;
            }
        }
        if (!seen_c || !seen_h) { return 0; }
    } else {
        return 0;
    }
    c->padded_vocab_size = padded_vocab_of(c->vocab_size);
    return 1;
}

// Number of parameters (with the padded vocabulary, as stored).
static inline size_t gpt2_num_parameters(const GPT2Config* c) {
    size_t C = (size_t)c->channels, L = (size_t)c->num_layers;
    size_t Vp = (size_t)c->padded_vocab_size, maxT = (size_t)c->max_seq_len;
    return Vp * C + maxT * C + L * (12 * C * C + 13 * C) + 2 * C;
}

// Training FLOPs per token, 6N + 6·L·C·T (PaLM appendix B, as llm.c counts it): N = all stored
// parameters, the second term is attention (QK^T and att·V, forward and backward).
static inline double gpt2_flops_per_token(const GPT2Config* c, int T) {
    double C = c->channels, L = c->num_layers;
    double N = (double)gpt2_num_parameters(c);
    return 6.0 * N + 6.0 * L * C * (double)T;
}

#endif // LLMC_CONFIG_H

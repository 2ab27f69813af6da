/*
 hellaswag.h: the HellaSwag validation set (Zellers et al. 2019) read from its official JSONL
 (hellaswag_val.jsonl: one JSON object per line with "ctx", "endings" (4 strings) and "label"),
 tokenized with the C tokenizer, and scored as the published GPT-2 evaluation does (llm.c's
 eval too): each ending follows the context, encoded as " " + ending, and the model's loss over
 the ending's tokens picks an answer: the lowest sum (acc) and the lowest mean per token
 (acc_norm, "length normalized").

 A row (context + ending) longer than the model's sequence length T keeps the ending whole and
 the context's last tokens (the four rows of an example share the same context); an example
 whose ending leaves the context no room (T <= its length; or an empty context) is left out and
 counted. Nothing is padded
 into the scored positions: each row is scored over its own tokens only.

   Hellaswag h;
   hellaswag_load(&h, "data/hellaswag/hellaswag_val.jsonl", &tokenizer, T, max_examples);
   ... rows h.row(e, i) with lengths, scored by llmc/run/run.h (run_hellaswag) ...
   hellaswag_free(&h);

 Bad input (not JSON, a missing or mistyped field, not 4 endings, a label outside 0..3, an empty
 file) stops with one line naming the file and the line. Needs the encoder (not
 TOKENIZER_DECODE_ONLY) and cJSON.
*/
#ifndef LLMC_HELLASWAG_H
#define LLMC_HELLASWAG_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmc/io/tokenizer.h"
#include "llmc/utils.h"

#define HELLASWAG_ENDINGS 4

typedef struct {
    int n;            // examples kept
    int skipped;      // left out: an ending of T tokens or more
    int truncated;    // kept with the context's first tokens cut so that every row fits T
    int* label;       // (n) the right ending
    int* ctx_len;     // (n) context tokens (after truncation)
    int* end_len;     // (n * 4) ending tokens
    size_t* off;      // (n * 4) where each row (context, then ending) starts in tokens
    int* tokens;      // the rows back to back
    size_t len, cap;  // of tokens
} Hellaswag;

static inline void hellaswag_push(Hellaswag* h, const int* t, size_t n) {
    if (h->len + n > h->cap) {
        h->cap = (h->len + n) * 2 + 1024;
        h->tokens = (int*)realloc(h->tokens, h->cap * sizeof(int));
        if (h->tokens == NULL) ls_fatal("hellaswag: out of memory");
    }
    memcpy(h->tokens + h->len, t, n * sizeof(int));
    h->len += n;
}

// The row of example e's ending i: its tokens (ctx_len + end_len of them).
static inline const int* hellaswag_row(const Hellaswag* h, int e, int i) { return h->tokens + h->off[e * HELLASWAG_ENDINGS + i]; }
static inline int hellaswag_row_len(const Hellaswag* h, int e, int i) { return h->ctx_len[e] + h->end_len[e * HELLASWAG_ENDINGS + i]; }

// A string field of a JSON object, or a one-line error naming the file, the line and the field.
static inline const char* hellaswag_string(const cJSON* o, const char* key, const char* path, size_t line) {
    const cJSON* v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsString(v) || v->valuestring == NULL) ls_fatal("hellaswag file %s line %zu: \"%s\" must be a string", path, line, key);
    return v->valuestring;
}

// Reads up to max_examples (< 0: all) examples of the JSONL file, tokenized for sequences of T.
static inline void hellaswag_load(Hellaswag* h, const char* path, Tokenizer* tok, int T, int max_examples) {
    memset(h, 0, sizeof(*h));
    size_t size = 0;
    char* text = tokenizer_read_all(path, &size);
    size_t cap = 1024, line = 0;
    int read = 0;
    h->label = (int*)mallocCheck(cap * sizeof(int));
    h->ctx_len = (int*)mallocCheck(cap * sizeof(int));
    h->end_len = (int*)mallocCheck(cap * HELLASWAG_ENDINGS * sizeof(int));
    h->off = (size_t*)mallocCheck(cap * HELLASWAG_ENDINGS * sizeof(size_t));
    TokenList ctx, end[HELLASWAG_ENDINGS];
    memset(&ctx, 0, sizeof(ctx));
    memset(end, 0, sizeof(end));
    char* spaced = NULL;
    size_t spaced_cap = 0;
    for (char* p = text; p < text + size && (max_examples < 0 || h->n < max_examples);) {
        char* nl = (char*)memchr(p, '\n', (size_t)(text + size - p));
        if (nl != NULL) *nl = '\0';
        char* next = nl ? nl + 1 : text + size;
        line++;
        if (strspn(p, " \t\r") == strlen(p)) { p = next; continue; }  // a blank line
        cJSON* o = cJSON_Parse(p);
        if (o == NULL || !cJSON_IsObject(o)) ls_fatal("hellaswag file %s line %zu: not a JSON object", path, line);
        const char* c = hellaswag_string(o, "ctx", path, line);
        const cJSON* ends = cJSON_GetObjectItemCaseSensitive(o, "endings");
        const cJSON* lab = cJSON_GetObjectItemCaseSensitive(o, "label");
        if (!cJSON_IsArray(ends) || cJSON_GetArraySize(ends) != HELLASWAG_ENDINGS) {
            ls_fatal("hellaswag file %s line %zu: \"endings\" must be an array of %d strings", path, line, HELLASWAG_ENDINGS);
        }
        if (!cJSON_IsNumber(lab) || !(lab->valuedouble >= 0.0 && lab->valuedouble < HELLASWAG_ENDINGS) ||
            lab->valuedouble != floor(lab->valuedouble)) {  // (range first: a huge number cannot become an int)
            ls_fatal("hellaswag file %s line %zu: \"label\" must be an integer 0..%d", path, line, HELLASWAG_ENDINGS - 1);
        }
        ctx.len = 0;
        tokenizer_encode(tok, c, strlen(c), 0, &ctx);
        int most = 0;
        for (int i = 0; i < HELLASWAG_ENDINGS; i++) {
            const cJSON* s = cJSON_GetArrayItem(ends, i);
            if (!cJSON_IsString(s) || s->valuestring == NULL) {
                ls_fatal("hellaswag file %s line %zu: \"endings\" must be an array of %d strings", path, line, HELLASWAG_ENDINGS);
            }
            const size_t n = strlen(s->valuestring) + 2;  // " " + ending (GPT-2 tokens carry their space)
            if (n > spaced_cap) {
                spaced_cap = n * 2;
                spaced = (char*)realloc(spaced, spaced_cap);
                if (spaced == NULL) ls_fatal("hellaswag: out of memory");
            }
            snprintf(spaced, n, " %s", s->valuestring);
            end[i].len = 0;
            tokenizer_encode(tok, spaced, n - 1, 0, &end[i]);
            if ((int)end[i].len > most) most = (int)end[i].len;
        }
        const int label = (int)lab->valuedouble;
        cJSON_Delete(o);
        p = next;
        read++;
        if (ctx.len == 0 || most + 1 > T) {  // no context, or an ending that leaves it no room
            h->skipped++;
            continue;
        }
        int keep = (int)ctx.len;
        if (keep + most > T) {
            keep = T - most;
            h->truncated++;
        }
        if ((size_t)h->n == cap) {
            cap *= 2;
            h->label = (int*)realloc(h->label, cap * sizeof(int));
            h->ctx_len = (int*)realloc(h->ctx_len, cap * sizeof(int));
            h->end_len = (int*)realloc(h->end_len, cap * HELLASWAG_ENDINGS * sizeof(int));
            h->off = (size_t*)realloc(h->off, cap * HELLASWAG_ENDINGS * sizeof(size_t));
            if (!h->label || !h->ctx_len || !h->end_len || !h->off) ls_fatal("hellaswag: out of memory");
        }
        const int e = h->n++;
        h->label[e] = label;
        h->ctx_len[e] = keep;
        for (int i = 0; i < HELLASWAG_ENDINGS; i++) {
            h->off[e * HELLASWAG_ENDINGS + i] = h->len;
            h->end_len[e * HELLASWAG_ENDINGS + i] = (int)end[i].len;
            hellaswag_push(h, ctx.data + (ctx.len - (size_t)keep), (size_t)keep);
            hellaswag_push(h, end[i].data, end[i].len);
        }
    }
    if (read == 0) ls_fatal("hellaswag file %s: no examples (one JSON object per line expected)", path);
    if (h->n == 0) ls_fatal("hellaswag file %s: none of its %d examples fits sequences of %d tokens (-t)", path, read, T);
    tokenlist_free(&ctx);
    for (int i = 0; i < HELLASWAG_ENDINGS; i++) tokenlist_free(&end[i]);
    free(spaced);
    free(text);
}

static inline void hellaswag_free(Hellaswag* h) {
    free(h->label);
    free(h->ctx_len);
    free(h->end_len);
    free(h->off);
    free(h->tokens);
    memset(h, 0, sizeof(*h));
}

#endif // LLMC_HELLASWAG_H

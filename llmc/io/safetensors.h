/*
 safetensors.h: reading and writing Hugging Face's safetensors format, header-only (cJSON for
 the header). Link with -lcjson.

 File layout: an 8-byte little-endian length N, N bytes of JSON (UTF-8, starting with '{',
 possibly padded at the end with spaces), then the data section. The JSON object maps each
 tensor name to {"dtype": "F32", "shape": [rows, cols], "data_offsets": [begin, end]}, byte
 offsets into the data section (row-major, little-endian), and may hold "__metadata__", an
 object of strings (transformers wants {"format": "pt"}).

 safetensors_open() validates the whole header before anything is read, and stops with one
 line naming the file on the first problem: the length field against the file size, JSON
 syntax, no duplicate names, exactly the three fields per tensor, a known dtype, a shape of
 at most ST_MAX_DIMS non-negative integers, offsets that are integers with begin <= end, whose
 span is the shape's size in bytes, and tensors that tile the data section exactly (sorted by
 offset: no gap, no overlap, nothing after the last), as the reference implementation requires.

 safetensors_write() lays tensors out in the order given, writes the offsets as exact
 integers, pads the header to a multiple of 8 bytes, and replaces the file atomically.
 To add a dtype: a row in st_dtypes.
*/
#ifndef LLMC_SAFETENSORS_H
#define LLMC_SAFETENSORS_H

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "llmc/utils.h"

#define ST_MAX_DIMS 8
#define ST_MAX_HEADER UINT64_C(100000000)  // the reference implementation's limit on N

typedef enum { ST_BOOL = 0, ST_U8, ST_I8, ST_F8_E5M2, ST_F8_E4M3, ST_I16, ST_U16, ST_F16, ST_BF16,
               ST_I32, ST_U32, ST_F32, ST_F64, ST_I64, ST_U64, ST_NUM_DTYPES } SafetensorsDtype;

static const struct { const char* name; size_t size; } st_dtypes[ST_NUM_DTYPES] = {
    {"BOOL", 1}, {"U8", 1}, {"I8", 1}, {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2}, {"U16", 2}, {"F16", 2},
    {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4}, {"F64", 8}, {"I64", 8}, {"U64", 8},
};

typedef struct {
    char* name;                   // owned
    SafetensorsDtype dtype;
    int ndim;
    uint64_t shape[ST_MAX_DIMS];  // (ndim,)
    uint64_t numel;
    uint64_t begin, end;          // byte offsets in the data section
} SafetensorsTensor;

typedef struct {
    char path[512];               // for messages (a prefix of a longer path)
    FILE* fp;
    uint64_t file_size;
    uint64_t data_start;          // 8 + N
    int num_tensors;
    SafetensorsTensor* tensors;   // (num_tensors,) sorted by begin
    int num_metadata;
    char** metadata;              // (2 * num_metadata,) key, value, key, value...
} SafetensorsFile;

// A tensor to write: data holds numel * size bytes, row-major.
typedef struct {
    const char* name;
    SafetensorsDtype dtype;
    int ndim;
    uint64_t shape[ST_MAX_DIMS];
    const void* data;
} SafetensorsEntry;

static inline size_t st_dtype_size(SafetensorsDtype d) { return st_dtypes[d].size; }
static inline const char* st_dtype_name(SafetensorsDtype d) { return st_dtypes[d].name; }

// ----------------------------------------------------------------------------
// reading

// 1 if s (n,) is well-formed UTF-8 (no overlongs, surrogates, or code points above U+10FFFF)
static inline int st_utf8_valid(const unsigned char* s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned char b = s[i];
        int need;
        unsigned char lo = 0x80, hi = 0xBF;
        if (b < 0x80) { i++; continue; }
        if (b >= 0xC2 && b <= 0xDF) { need = 1; }
        else if (b >= 0xE0 && b <= 0xEF) { need = 2; if (b == 0xE0) { lo = 0xA0; } if (b == 0xED) { hi = 0x9F; } }
        else if (b >= 0xF0 && b <= 0xF4) { need = 3; if (b == 0xF0) { lo = 0x90; } if (b == 0xF4) { hi = 0x8F; } }
        else { return 0; }
        if (i + (size_t)need >= n) { return 0; }
        if (s[i + 1] < lo || s[i + 1] > hi) { return 0; }
        for (int k = 2; k <= need; k++) {
            if ((s[i + k] & 0xC0) != 0x80) { return 0; }
        }
        i += (size_t)need + 1;
    }
    return 1;
}

// A JSON number that is an exact integer in [0, 2^53] -> *out; else 0.
static inline int st_json_uint(const cJSON* j, uint64_t* out) {
    if (!cJSON_IsNumber(j)) { return 0; }
    double v = j->valuedouble;
    if (!(v >= 0.0 && v <= 9007199254740992.0) || v != (double)(uint64_t)v) { return 0; }
    *out = (uint64_t)v;
    return 1;
}

static inline int st_cmp_begin(const void* a, const void* b) {
    const SafetensorsTensor* x = (const SafetensorsTensor*)a;
    const SafetensorsTensor* y = (const SafetensorsTensor*)b;
    if (x->begin != y->begin) { return x->begin < y->begin ? -1 : 1; }
    return x->end < y->end ? -1 : (x->end > y->end ? 1 : 0);
}

static inline int st_cmp_name(const void* a, const void* b) {
    return strcmp(*(const char* const*)a, *(const char* const*)b);
}

static inline char* st_strdup(const char* s) {
    size_t n = strlen(s);
    char* d = (char*)mallocCheck(n + 1);
    memcpy(d, s, n + 1);
    return d;
}

// One tensor's entry {"dtype", "shape", "data_offsets"} -> t (name set by the caller).
static inline void st_parse_entry(const SafetensorsFile* f, const cJSON* e, SafetensorsTensor* t) {
    const char* name = t->name;
    if (!cJSON_IsObject(e)) { ls_fatal("safetensors file '%s': tensor '%s': entry is not an object", f->path, name); }
    const cJSON *dtype = NULL, *shape = NULL, *offsets = NULL, *field;
    cJSON_ArrayForEach(field, e) {
        const cJSON** slot = strcmp(field->string, "dtype") == 0 ? &dtype
                           : strcmp(field->string, "shape") == 0 ? &shape
                           : strcmp(field->string, "data_offsets") == 0 ? &offsets : NULL;
        if (slot == NULL || *slot != NULL) {
            ls_fatal("safetensors file '%s': tensor '%s': %s field \"%.40s\" (expected dtype, shape, data_offsets)",
                     f->path, name, slot ? "repeated" : "unknown", field->string);
        }
        *slot = field;
    }
    if (dtype == NULL || shape == NULL || offsets == NULL) {
        ls_fatal("safetensors file '%s': tensor '%s': missing %s", f->path, name,
                 dtype == NULL ? "dtype" : shape == NULL ? "shape" : "data_offsets");
    }
    int d = -1;
    for (int k = 0; k < ST_NUM_DTYPES && cJSON_IsString(dtype); k++) {
        if (strcmp(dtype->valuestring, st_dtypes[k].name) == 0) { d = k; }
    }
    if (d < 0) {
        ls_fatal("safetensors file '%s': tensor '%s': unknown dtype %.40s", f->path, name,
                 cJSON_IsString(dtype) ? dtype->valuestring : "(not a string)");
    }
    t->dtype = (SafetensorsDtype)d;
    int ndim = cJSON_IsArray(shape) ? cJSON_GetArraySize(shape) : -1;
    if (ndim < 0 || ndim > ST_MAX_DIMS) {
        ls_fatal("safetensors file '%s': tensor '%s': shape is not an array of at most %d sizes", f->path, name, ST_MAX_DIMS);
    }
    t->ndim = ndim;
    // numel with an overflow check: a shape with a 0 has no elements, else numel <= 2^60 so that
    // its size in bytes (at most 8 per element) fits 63 bits
    uint64_t numel = 1;
    int overflow = 0, has_zero = 0;
    const cJSON* dim;
    int k = 0;
    cJSON_ArrayForEach(dim, shape) {
        if (!st_json_uint(dim, &t->shape[k])) {
            ls_fatal("safetensors file '%s': tensor '%s': shape[%d] is not a non-negative integer", f->path, name, k);
        }
        if (t->shape[k] == 0) { has_zero = 1; }
        else if (numel > (UINT64_C(1) << 60) / t->shape[k]) { overflow = 1; }
        else { numel *= t->shape[k]; }
        k++;
    }
    if (has_zero) { numel = 0; }
    else if (overflow) { ls_fatal("safetensors file '%s': tensor '%s': shape too large", f->path, name); }
    t->numel = numel;
    if (!cJSON_IsArray(offsets) || cJSON_GetArraySize(offsets) != 2 || !st_json_uint(offsets->child, &t->begin) ||
        !st_json_uint(offsets->child->next, &t->end) || t->begin > t->end) {
        ls_fatal("safetensors file '%s': tensor '%s': data_offsets must be [begin, end], integers with begin <= end",
                 f->path, name);
    }
    if (t->end - t->begin != numel * st_dtype_size(t->dtype)) {
        ls_fatal("safetensors file '%s': tensor '%s': data_offsets span %" PRIu64 " bytes, its shape and dtype %s need %" PRIu64,
                 f->path, name, t->end - t->begin, st_dtype_name(t->dtype), numel * st_dtype_size(t->dtype));
    }
}

// Opens and validates path (see the banner). On success f holds the tensors, sorted by offset.
static inline void safetensors_open(SafetensorsFile* f, const char* path) {
    memset(f, 0, sizeof(*f));
    size_t plen = strlen(path);
    if (plen >= sizeof(f->path)) { plen = sizeof(f->path) - 1; }
    memcpy(f->path, path, plen);
    f->fp = fopen(path, "rb");
    if (f->fp == NULL) { ls_fatal("safetensors file '%s': cannot open: %s", path, strerror(errno)); }
    long long size = file_size_of(f->fp);
    if (size < 8) { ls_fatal("safetensors file '%s': %lld bytes, too short for the header length", path, size); }
    f->file_size = (uint64_t)size;
    unsigned char len8[8];
    freadCheck(len8, 1, 8, f->fp, f->path);
    uint64_t n = 0;
    for (int k = 7; k >= 0; k--) { n = n << 8 | len8[k]; }
    if (n < 2 || n > ST_MAX_HEADER || n > f->file_size - 8) {
        ls_fatal("safetensors file '%s': header length %" PRIu64 " does not fit the file (%" PRIu64 " bytes; at most %" PRIu64 ")",
                 path, n, f->file_size, ST_MAX_HEADER);
    }
    f->data_start = 8 + n;
    uint64_t data_size = f->file_size - f->data_start;
    char* text = (char*)mallocCheck((size_t)n + 1);
    freadCheck(text, 1, (size_t)n, f->fp, f->path);
    text[n] = '\0';
    if (text[0] != '{' || !st_utf8_valid((const unsigned char*)text, (size_t)n)) {
        ls_fatal("safetensors file '%s': header is not a UTF-8 JSON object", path);
    }
    const char* end = NULL;
    cJSON* root = cJSON_ParseWithLengthOpts(text, (size_t)n, &end, 0);
    if (root == NULL || !cJSON_IsObject(root)) {
        ls_fatal("safetensors file '%s': header is not valid JSON (near byte %zu of %" PRIu64 ")", path,
                 end ? (size_t)(end - text) : (size_t)0, n);
    }
    for (const char* p = end; p < text + n; p++) {
        if (*p != ' ') { ls_fatal("safetensors file '%s': bytes after the header's JSON (only spaces may pad it)", path); }
    }
    // count, check names unique, and parse
    int count = cJSON_GetArraySize(root);
    const char** names = (const char**)mallocCheck((size_t)count * sizeof(char*));
    int k = 0;
    const cJSON* item;
    cJSON_ArrayForEach(item, root) { names[k++] = item->string; }
    qsort(names, (size_t)count, sizeof(char*), st_cmp_name);
    for (k = 1; k < count; k++) {
        if (strcmp(names[k - 1], names[k]) == 0) { ls_fatal("safetensors file '%s': name '%.80s' appears twice", path, names[k]); }
    }
    free(names);
    f->tensors = (SafetensorsTensor*)callocCheck((size_t)count, sizeof(SafetensorsTensor));
    cJSON_ArrayForEach(item, root) {
        if (strcmp(item->string, "__metadata__") == 0) {
            if (!cJSON_IsObject(item)) { ls_fatal("safetensors file '%s': __metadata__ is not an object", path); }
            int m = cJSON_GetArraySize(item);
            f->metadata = (char**)callocCheck(2 * (size_t)m, sizeof(char*));
            const cJSON* kv;
            cJSON_ArrayForEach(kv, item) {
                if (!cJSON_IsString(kv)) {
                    ls_fatal("safetensors file '%s': __metadata__ value of \"%.40s\" is not a string", path, kv->string);
                }
                f->metadata[2 * (size_t)f->num_metadata] = st_strdup(kv->string);
                f->metadata[2 * (size_t)f->num_metadata + 1] = st_strdup(kv->valuestring);
                f->num_metadata++;
            }
            continue;
        }
        if (item->string[0] == '\0') { ls_fatal("safetensors file '%s': a tensor has an empty name", path); }
        SafetensorsTensor* t = &f->tensors[f->num_tensors++];
        t->name = st_strdup(item->string);
        st_parse_entry(f, item, t);
    }
    cJSON_Delete(root);
    free(text);
    // the tensors must tile the data section: sorted by offset, each begins where the last ended
    qsort(f->tensors, (size_t)f->num_tensors, sizeof(SafetensorsTensor), st_cmp_begin);
    uint64_t at = 0;
    for (k = 0; k < f->num_tensors; k++) {
        const SafetensorsTensor* t = &f->tensors[k];
        if (t->begin != at) {
            ls_fatal("safetensors file '%s': tensor '%.80s' starts at byte %" PRIu64 " of the data, expected %" PRIu64 " (%s)",
                     path, t->name, t->begin, at, t->begin < at ? "overlaps the one before" : "a gap before it");
        }
        at = t->end;
    }
    if (at != data_size) {
        ls_fatal("safetensors file '%s': the tensors cover %" PRIu64 " bytes of data, the file holds %" PRIu64 " (%s)", path,
                 at, data_size, at > data_size ? "truncated" : "trailing bytes");
    }
}

// The tensor called name, or NULL.
static inline const SafetensorsTensor* safetensors_find(const SafetensorsFile* f, const char* name) {
    for (int k = 0; k < f->num_tensors; k++) {
        if (strcmp(f->tensors[k].name, name) == 0) { return &f->tensors[k]; }
    }
    return NULL;
}

// The metadata value of key, or NULL.
static inline const char* safetensors_metadata(const SafetensorsFile* f, const char* key) {
    for (int k = 0; k < f->num_metadata; k++) {
        if (strcmp(f->metadata[2 * (size_t)k], key) == 0) { return f->metadata[2 * (size_t)k + 1]; }
    }
    return NULL;
}

// Reads tensor t's bytes (t->end - t->begin) into dst.
static inline void safetensors_read(const SafetensorsFile* f, const SafetensorsTensor* t, void* dst) {
    if (fseeko(f->fp, (off_t)(f->data_start + t->begin), SEEK_SET) != 0) {
        ls_fatal("safetensors file '%s': cannot seek to tensor '%s': %s", f->path, t->name, strerror(errno));
    }
    freadCheck(dst, 1, (size_t)(t->end - t->begin), f->fp, f->path);
}

// Frees everything; accepts a zeroed SafetensorsFile.
static inline void safetensors_close(SafetensorsFile* f) {
    if (f->fp) { fclose(f->fp); }
    for (int k = 0; k < f->num_tensors; k++) { free(f->tensors[k].name); }
    free(f->tensors);
    for (size_t k = 0; k < 2 * (size_t)f->num_metadata; k++) { free(f->metadata[k]); }
    free(f->metadata);
    memset(f, 0, sizeof(*f));
}

// ----------------------------------------------------------------------------
// writing

static inline uint64_t st_entry_bytes(const SafetensorsEntry* e) {
    uint64_t numel = 1;
    for (int d = 0; d < e->ndim; d++) { numel *= e->shape[d]; }
    return numel * st_dtype_size(e->dtype);
}

// Writes entries (n,) in that order, with metadata (n_meta key/value pairs, may be NULL).
static inline void safetensors_write(const char* path, const SafetensorsEntry* entries, int n,
                                     const char* const* metadata, int n_meta) {
    cJSON* root = cJSON_CreateObject();
    if (root == NULL) { ls_fatal("out of host memory building a safetensors header"); }
    if (n_meta > 0) {
        cJSON* meta = cJSON_AddObjectToObject(root, "__metadata__");
        for (size_t k = 0; k < (size_t)n_meta; k++) { cJSON_AddStringToObject(meta, metadata[2 * k], metadata[2 * k + 1]); }
    }
    uint64_t at = 0;
    for (int k = 0; k < n; k++) {
        const SafetensorsEntry* e = &entries[k];
        if (e->ndim < 0 || e->ndim > ST_MAX_DIMS) { ls_fatal("%s: tensor '%s': %d dims", path, e->name, e->ndim); }
        cJSON* t = cJSON_AddObjectToObject(root, e->name);
        cJSON_AddStringToObject(t, "dtype", st_dtype_name(e->dtype));
        // integers as raw text: cJSON would print numbers above 2^31 through "%g"
        char num[48];
        cJSON* shape = cJSON_AddArrayToObject(t, "shape");
        for (int d = 0; d < e->ndim; d++) {
            snprintf(num, sizeof(num), "%" PRIu64, e->shape[d]);
            cJSON_AddItemToArray(shape, cJSON_CreateRaw(num));
        }
        uint64_t bytes = st_entry_bytes(e);
        cJSON* offs = cJSON_AddArrayToObject(t, "data_offsets");
        snprintf(num, sizeof(num), "%" PRIu64, at);
        cJSON_AddItemToArray(offs, cJSON_CreateRaw(num));
        snprintf(num, sizeof(num), "%" PRIu64, at + bytes);
        cJSON_AddItemToArray(offs, cJSON_CreateRaw(num));
        at += bytes;
    }
    char* json = cJSON_PrintUnformatted(root);
    if (json == NULL) { ls_fatal("out of host memory printing a safetensors header"); }
    size_t jlen = strlen(json);
    size_t hlen = (jlen + 7) / 8 * 8;  // pad with spaces so the data starts 8-byte aligned
    unsigned char len8[8];
    for (int k = 0; k < 8; k++) { len8[k] = (unsigned char)((uint64_t)hlen >> (8 * k)); }
    AtomicFile af;
    atomic_file_open(&af, path);
    fwriteCheck(len8, 1, 8, af.fp, af.tmp_path);
    fwriteCheck(json, 1, jlen, af.fp, af.tmp_path);
    for (size_t k = jlen; k < hlen; k++) { fputc(' ', af.fp); }
    for (int k = 0; k < n; k++) { fwriteCheck(entries[k].data, 1, (size_t)st_entry_bytes(&entries[k]), af.fp, af.tmp_path); }
    atomic_file_commit(&af);
    free(json);
    cJSON_Delete(root);
}

#endif // LLMC_SAFETENSORS_H

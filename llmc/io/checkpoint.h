/*
 checkpoint.h: llm.c-compatible model files and leanstep's optimizer/run state files.

 Model file (llm.c): 256 x int32 header, then the 16 tensors in params.h order.
   header[0] = 20240326 magic, [1] = version (3: fp32, 5: bf16), [2] = max_seq_len,
   [3] = vocab_size, [4] = num_layers, [5] = num_heads, [6] = channels, [7] = padded_vocab_size.
 State file (leanstep, written beside a model file): 256 x int32 header, then m and v (fp32,
   the same flat layout as the parameters), then the fp32 master weights if the run keeps them.
   header[0] = 20240527 magic, [1] = 1 version, [2] = num_processes, [3] = process_rank,
   [4] = step, [5] = has_m_v, [6..7] = parameter count (uint64), [8..9] = dataloader epoch,
   [10..11] = dataloader sample index, [12..13] = sampler rng state (uint64), [14] = has_master,
   [15] = CHECKSUM_TAG, [16] = crc32, [17..18] = master weight count (uint64; 0: the parameter
   count, as in files written before the slot existed).
 Resuming across precisions (-y): the master weights are the exact trained parameters (a bf16
   model file holds their rounding), so a run without master weights (the CPU trainer, an fp32 GPU
   build, -w 0) takes its parameters from them; a run with master weights resuming from a file
   without them takes them from the model file's parameters (fp32 from an fp32 run).
   state_file_read reports whether the file has them; the trainers do the rest.
 Every read validates magic, version, shape and exact file size, and names the file on error.
 Every write is atomic (utils.h): a crash leaves the old file or the whole new one.
 Checksums: writers put CHECKSUM_TAG and the zlib crc32 of everything after the header in
 header[8] and [9] (model files) or [15] and [16] (state files); readers verify it when the tag is
 there. llm.c ignores these header slots, so it still reads our model files, and we still read
 its files (no tag: no check).
*/
#ifndef LLMC_CHECKPOINT_H
#define LLMC_CHECKPOINT_H

#include <stdint.h>
#include <zlib.h>
#include "llmc/config.h"
#include "llmc/params.h"
#include "llmc/utils.h"

#define MODEL_MAGIC 20240326
#define MODEL_VERSION_FP32 3
#define MODEL_VERSION_BF16 5
#define STATE_MAGIC 20240527
#define STATE_VERSION 1
#define HEADER_INTS 256
#define CHECKSUM_TAG 0x4b43534c  // "LSCK"

// zlib's crc32 over any length (its length argument is 32-bit)
static inline uint32_t crc32_update(uint32_t crc, const void* data, size_t n) {
    const unsigned char* p = (const unsigned char*)data;
    while (n > 0) {
        uInt k = n > (1u << 30) ? (1u << 30) : (uInt)n;
        crc = (uint32_t)crc32((uLong)crc, p, k);
        p += k;
        n -= k;
    }
    return crc;
}

static inline void checksum_verify(const char* path, const int* header, int tag_slot, int slot, uint32_t crc) {
    if (header[tag_slot] != CHECKSUM_TAG) { return; }  // an llm.c file: no checksum to check
    uint32_t want;
    memcpy(&want, &header[slot], 4);
    if (want != crc) {
        ls_fatal("'%s': checksum mismatch (stored crc32 %08x, data %08x): the file is corrupt", path, want, crc);
    }
}

// bf16 <-> fp32 on the host, round to nearest even (NaN kept quiet)
static inline uint16_t f32_to_bf16_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) { return (uint16_t)((u >> 16) | 0x40); }
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static inline float bf16_bits_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// n parameters between fp32 memory and bf16 in a file, in chunks: read (write 0: widen, exact) or
// write (write 1: round to nearest even; params only read). Returns crc updated with the file's bytes.
static inline uint32_t bf16_file_transfer(FILE* fp, const char* path, float* params, size_t n, int write, uint32_t crc) {
    const size_t chunk = 1 << 20;
    uint16_t* buf = (uint16_t*)mallocCheck(chunk * sizeof(uint16_t));
    for (size_t i = 0; i < n; i += chunk) {
        size_t k = n - i < chunk ? n - i : chunk;
        if (write) {
            for (size_t j = 0; j < k; j++) { buf[j] = f32_to_bf16_bits(params[i + j]); }
            fwriteCheck(buf, sizeof(uint16_t), k, fp, path);
        } else {
            freadCheck(buf, sizeof(uint16_t), k, fp, path);
            for (size_t j = 0; j < k; j++) { params[i + j] = bf16_bits_to_f32(buf[j]); }
        }
        crc = crc32_update(crc, buf, k * sizeof(uint16_t));
    }
    free(buf);
    return crc;
}

// Reads and validates a model file's header (and its size). Returns the version (3 or 5).
static inline int model_file_read_header(const char* path, GPT2Config* c) {
    FILE* fp = fopen(path, "rb");
    if (fp == NULL) {
        ls_fatal("model file '%s': cannot open: %s (expected an llm.c model file, or a descriptor such as d12 or L4C256H4)",
                 path, strerror(errno));
    }
    int header[HEADER_INTS];
    if (fread(header, sizeof(int), HEADER_INTS, fp) != HEADER_INTS) {
        ls_fatal("model file '%s': truncated header (expected %d bytes)", path, HEADER_INTS * 4);
    }
    if (header[0] != MODEL_MAGIC) {
        ls_fatal("model file '%s': bad magic %d (expected %d, an llm.c model file)", path, header[0], MODEL_MAGIC);
    }
    int version = header[1];
    if (version != MODEL_VERSION_FP32 && version != MODEL_VERSION_BF16) {
        ls_fatal("model file '%s': version %d (expected %d fp32 or %d bf16)", path, version,
                 MODEL_VERSION_FP32, MODEL_VERSION_BF16);
    }
    c->max_seq_len = header[2];
    c->vocab_size = header[3];
    c->num_layers = header[4];
    c->num_heads = header[5];
    c->channels = header[6];
    c->padded_vocab_size = header[7];
    char err[200];
    if (!gpt2_config_valid(c, err, sizeof(err))) { ls_fatal("model file '%s': bad header: %s", path, err); }
    long long expected = (long long)HEADER_INTS * 4 +
                         (long long)gpt2_num_parameters(c) * (version == MODEL_VERSION_FP32 ? 4 : 2);
    long long size = file_size_of(fp);
    fclose(fp);
    if (size != expected) {
        ls_fatal("model file '%s': size %lld bytes, expected %lld for its header (L=%d C=%d V=%d) - truncated or corrupt",
                 path, size, expected, c->num_layers, c->channels, c->vocab_size);
    }
    return version;
}

// Reads all parameters as fp32 (a bf16 file is widened). `params` holds gpt2_num_parameters.
static inline void model_file_read_params(const char* path, const GPT2Config* c, float* params) {
    GPT2Config fc;
    int version = model_file_read_header(path, &fc);
    if (memcmp(&fc, c, sizeof(fc)) != 0) { ls_fatal("model file '%s': changed while reading", path); }
    size_t n = gpt2_num_parameters(c);
    FILE* fp = fopenCheck(path, "rb");
    int header[HEADER_INTS];
    freadCheck(header, sizeof(int), HEADER_INTS, fp, path);
    uint32_t crc = crc32_update(0, NULL, 0);
    if (version == MODEL_VERSION_FP32) {
        freadCheck(params, sizeof(float), n, fp, path);
        crc = crc32_update(crc, params, n * sizeof(float));
    } else {
        crc = bf16_file_transfer(fp, path, params, n, 0, crc);
    }
    fclose(fp);
    checksum_verify(path, header, 8, 9, crc);
}

static inline void model_header_fill(int* header, const GPT2Config* c, int version) {
    memset(header, 0, HEADER_INTS * sizeof(int));
    header[0] = MODEL_MAGIC;
    header[1] = version;
    header[2] = c->max_seq_len;
    header[3] = c->vocab_size;
    header[4] = c->num_layers;
    header[5] = c->num_heads;
    header[6] = c->channels;
    header[7] = c->padded_vocab_size;
}

// Writes fp32 parameters as a version 3 (fp32) or 5 (bf16, rounded to nearest even) model file.
static inline void model_file_write(const char* path, const GPT2Config* c, const float* params, int version) {
    int header[HEADER_INTS];
    model_header_fill(header, c, version);
    size_t n = gpt2_num_parameters(c);
    AtomicFile af;
    atomic_file_open(&af, path);
    fwriteCheck(header, sizeof(int), HEADER_INTS, af.fp, path);  // rewritten with the checksum below
    uint32_t crc = crc32_update(0, NULL, 0);
    if (version == MODEL_VERSION_FP32) {
        fwriteCheck(params, sizeof(float), n, af.fp, path);
        crc = crc32_update(crc, params, n * sizeof(float));
    } else {
        crc = bf16_file_transfer(af.fp, path, (float*)params, n, 1, crc);
    }
    header[8] = CHECKSUM_TAG;
    memcpy(&header[9], &crc, 4);
    if (fseek(af.fp, 0, SEEK_SET) != 0) { ls_fatal("'%s': cannot seek to rewrite the header", af.tmp_path); }
    fwriteCheck(header, sizeof(int), HEADER_INTS, af.fp, path);
    atomic_file_commit(&af);
}

// ----------------------------------------------------------------------------
// optimizer / run state

typedef struct {
    int num_processes;
    int process_rank;
    int step;              // steps completed
    int has_m_v;           // 0 before the first update
    uint64_t num_params;
    uint64_t data_epoch;   // dataloader position
    uint64_t data_sample;
    uint64_t sampler_rng;  // state of the text sampler's generator
    int has_master;        // read: the file holds fp32 master weights
    uint64_t num_master;   // their count (write: 0 = num_params)
} RunState;

// master may be NULL (no master weights); v NULL: m is the optimizer's whole state block
// (num_params 32-bit words; header[5] = 2).
static inline void state_file_write(const char* path, const RunState* s, const float* m, const float* v,
                                    const float* master) {
    int header[HEADER_INTS];
    memset(header, 0, sizeof(header));
    header[0] = STATE_MAGIC;
    header[1] = STATE_VERSION;
    header[2] = s->num_processes;
    header[3] = s->process_rank;
    header[4] = s->step;
    header[5] = v ? s->has_m_v : 2;
    memcpy(&header[6], &s->num_params, 8);
    memcpy(&header[8], &s->data_epoch, 8);
    memcpy(&header[10], &s->data_sample, 8);
    memcpy(&header[12], &s->sampler_rng, 8);
    header[14] = master != NULL;
    const uint64_t nm = master == NULL ? 0 : s->num_master ? s->num_master : s->num_params;
    memcpy(&header[17], &nm, 8);
    uint32_t crc = crc32_update(0, NULL, 0);
    crc = crc32_update(crc, m, s->num_params * sizeof(float));
    if (v) { crc = crc32_update(crc, v, s->num_params * sizeof(float)); }
    if (master) { crc = crc32_update(crc, master, nm * sizeof(float)); }
    header[15] = CHECKSUM_TAG;
    memcpy(&header[16], &crc, 4);
    AtomicFile af;
    atomic_file_open(&af, path);
    fwriteCheck(header, sizeof(int), HEADER_INTS, af.fp, path);
    fwriteCheck(m, sizeof(float), s->num_params, af.fp, path);
    if (v) { fwriteCheck(v, sizeof(float), s->num_params, af.fp, path); }
    if (master) { fwriteCheck(master, sizeof(float), nm, af.fp, path); }
    atomic_file_commit(&af);
}

// Parses and validates a state file's header into s; fp is left after the header.
static inline void state_header_parse(FILE* fp, const char* path, RunState* s, int* header) {
    if (fread(header, sizeof(int), HEADER_INTS, fp) != HEADER_INTS) {
        ls_fatal("state file '%s': truncated header (expected %d bytes)", path, HEADER_INTS * 4);
    }
    if (header[0] != STATE_MAGIC) { ls_fatal("state file '%s': bad magic %d (expected %d)", path, header[0], STATE_MAGIC); }
    if (header[1] != STATE_VERSION) { ls_fatal("state file '%s': version %d (expected %d)", path, header[1], STATE_VERSION); }
    s->num_processes = header[2];
    s->process_rank = header[3];
    s->step = header[4];
    s->has_m_v = header[5];
    memcpy(&s->num_params, &header[6], 8);
    memcpy(&s->data_epoch, &header[8], 8);
    memcpy(&s->data_sample, &header[10], 8);
    memcpy(&s->sampler_rng, &header[12], 8);
    s->has_master = header[14] != 0;
    s->num_master = 0;
    if (s->has_master) {
        memcpy(&s->num_master, &header[17], 8);
        if (s->num_master == 0) { s->num_master = s->num_params; }
    }
}

// Reads only the header of a state file (to check it against the run before reading the rest).
static inline void state_file_read_header(const char* path, RunState* s) {
    FILE* fp = fopen(path, "rb");
    if (fp == NULL) { ls_fatal("state file '%s': cannot open: %s", path, strerror(errno)); }
    int header[HEADER_INTS];
    state_header_parse(fp, path, s, header);
    fclose(fp);
}

// Reads a state file for a model of num_params state elements; m and v receive the moments (v
// NULL: m receives the optimizer's whole state block of num_params words). master (num_master
// floats, or NULL to skip them) receives the file's master weights when it has them. Returns 1
// when the file has master weights (their count must be num_master), else 0: the caller decides
// what they become (see the banner: resuming across precisions).
static inline int state_file_read(const char* path, size_t num_params, size_t num_master, RunState* s, float* m,
                                  float* v, float* master) {
    FILE* fp = fopen(path, "rb");
    if (fp == NULL) { ls_fatal("state file '%s': cannot open: %s", path, strerror(errno)); }
    int header[HEADER_INTS];
    state_header_parse(fp, path, s, header);
    if (s->num_params != num_params) {
        ls_fatal("state file '%s': holds %llu parameters, the model has %zu", path,
                 (unsigned long long)s->num_params, num_params);
    }
    if ((header[5] == 2) != (v == NULL)) {
        ls_fatal("state file '%s': holds %s, this run expects %s (flags --optimizer/--opt-state/--amsgrad)", path,
                 header[5] == 2 ? "an optimizer-family state block" : "AdamW m and v",
                 v == NULL ? "an optimizer-family state block" : "AdamW m and v");
    }
    if (s->has_master && s->num_master != num_master) {
        ls_fatal("state file '%s': holds %llu master weights, this run's state has %zu (resume with the -z, --badam "
                 "and optimizer flags of the run that wrote it)", path, (unsigned long long)s->num_master, num_master);
    }
    long long expected = (long long)HEADER_INTS * 4 + (v ? 2LL : 1LL) * (long long)num_params * 4 +
                         (long long)s->num_master * 4;
    long long size = file_size_of(fp);
    if (size != expected) { ls_fatal("state file '%s': size %lld bytes, expected %lld", path, size, expected); }
    fseek(fp, (long)HEADER_INTS * 4, SEEK_SET);
    float* mw = s->has_master && master == NULL ? (float*)mallocCheck(num_master * sizeof(float)) : master;
    freadCheck(m, sizeof(float), num_params, fp, path);
    if (v) { freadCheck(v, sizeof(float), num_params, fp, path); }
    if (s->has_master) { freadCheck(mw, sizeof(float), num_master, fp, path); }
    fclose(fp);
    uint32_t crc = crc32_update(0, NULL, 0);
    crc = crc32_update(crc, m, num_params * sizeof(float));
    if (v) { crc = crc32_update(crc, v, num_params * sizeof(float)); }
    if (s->has_master) { crc = crc32_update(crc, mw, num_master * sizeof(float)); }
    if (mw != master) { free(mw); }
    checksum_verify(path, header, 15, 16, crc);
    return s->has_master;
}

#endif // LLMC_CHECKPOINT_H

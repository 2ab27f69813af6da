/*
 checkpoint.h: llm.c-compatible model files and leanstep's optimizer/run state files.

 Model file (llm.c): 256 x int32 header, then the 16 tensors in params.h order.
   header[0] = 20240326 magic, [1] = version (3: fp32, 5: bf16), [2] = max_seq_len,
   [3] = vocab_size, [4] = num_layers, [5] = num_heads, [6] = channels, [7] = padded_vocab_size.
 State file (leanstep, written beside a model file), version 2: 256 x int32 header, then the
   optimizer engine's state block (llmc/optim/engine.h: whatever the optimizer, state precision and
   placement keep, in the engine's carve order, as 32-bit words), then the fp32 master weights if
   the run keeps them.
   header[0] = 20240527 magic, [1] = 2 version, [2] = num_processes, [3] = process_rank,
   [4] = step, [5] = has_m_v (1 once the state holds an update), [6..7] = words of the state block
   (uint64), [8..9] = dataloader epoch, [10..11] = dataloader sample index, [12..13] = sampler rng
   state (uint64), [14] = has_master, [15] = CHECKSUM_TAG, [16] = crc32, [17..18] = master weight
   count (uint64; 0: the block's word count), [19] = optimizer tag (optim_engine_tag: optimizer,
   state precision, AMSGrad, momentum, Nesterov; a resume with other flags is refused naming them),
   [20] = loss scaling's scale (float bits; 0: off), [21] = its good steps (llmc/run/loss_scale.h).
   Version 1 (before the engine) is still read: header[5] = 2 held the same block (no tag: only its
   size is checked); else [6..7] = n and the file held fp32 AdamW m, then v (n each), which an
   fp32 AdamW run takes into its state's m and v; any other optimizer refuses it.
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
#define STATE_VERSION 2
#define STATE_VERSION_1 1  // still read: AdamW m and v, or an optimizer-family block (header[5] = 2)
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
    uint32_t optim_tag;    // the optimizer configuration of the state (optim_engine_tag; 0 in version 1)
    float loss_scale;      // loss scaling's S (llmc/run/loss_scale.h; 0: off, or a file from before it)
    int loss_scale_good;   // and its good steps since S last changed
    int version;           // read: the file's version
} RunState;

// master may be NULL (no master weights). block: the optimizer's state block, s->num_params 32-bit
// words (the engine's current view, llmc/optim/engine.h), s->optim_tag its configuration.
static inline void state_file_write(const char* path, const RunState* s, const void* block, const float* master) {
    int header[HEADER_INTS];
    memset(header, 0, sizeof(header));
    header[0] = STATE_MAGIC;
    header[1] = STATE_VERSION;
    header[2] = s->num_processes;
    header[3] = s->process_rank;
    header[4] = s->step;
    header[5] = s->has_m_v;
    memcpy(&header[6], &s->num_params, 8);
    memcpy(&header[8], &s->data_epoch, 8);
    memcpy(&header[10], &s->data_sample, 8);
    memcpy(&header[12], &s->sampler_rng, 8);
    header[14] = master != NULL;
    const uint64_t nm = master == NULL ? 0 : s->num_master ? s->num_master : s->num_params;
    memcpy(&header[17], &nm, 8);
    header[19] = (int)s->optim_tag;
    memcpy(&header[20], &s->loss_scale, 4);
    header[21] = s->loss_scale_good;
    uint32_t crc = crc32_update(0, NULL, 0);
    crc = crc32_update(crc, block, s->num_params * sizeof(float));
    if (master) { crc = crc32_update(crc, master, nm * sizeof(float)); }
    header[15] = CHECKSUM_TAG;
    memcpy(&header[16], &crc, 4);
    AtomicFile af;
    atomic_file_open(&af, path);
    fwriteCheck(header, sizeof(int), HEADER_INTS, af.fp, path);
    fwriteCheck(block, sizeof(float), s->num_params, af.fp, path);
    if (master) { fwriteCheck(master, sizeof(float), nm, af.fp, path); }
    atomic_file_commit(&af);
}

// Parses and validates a state file's header into s; fp is left after the header.
static inline void state_header_parse(FILE* fp, const char* path, RunState* s, int* header) {
    if (fread(header, sizeof(int), HEADER_INTS, fp) != HEADER_INTS) {
        ls_fatal("state file '%s': truncated header (expected %d bytes)", path, HEADER_INTS * 4);
    }
    if (header[0] != STATE_MAGIC) { ls_fatal("state file '%s': bad magic %d (expected %d)", path, header[0], STATE_MAGIC); }
    if (header[1] != STATE_VERSION && header[1] != STATE_VERSION_1) {
        ls_fatal("state file '%s': version %d (this build reads versions %d and %d)", path, header[1], STATE_VERSION_1,
                 STATE_VERSION);
    }
    s->version = header[1];
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
    s->optim_tag = s->version == STATE_VERSION ? (uint32_t)header[19] : 0;
    memcpy(&s->loss_scale, &header[20], 4);
    s->loss_scale_good = header[21];
    if (!(s->loss_scale >= 0.0f && s->loss_scale <= 16777216.0f) || s->loss_scale_good < 0) {
        ls_fatal("state file '%s': loss scale %g with %d good steps (expected 0 .. 2^24 and >= 0)", path, s->loss_scale,
                 s->loss_scale_good);
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

// What a run expects of a state file.
typedef struct {
    uint64_t words;       // 32-bit words of its optimizer state block (the engine's current view)
    uint32_t tag;         // optim_engine_tag of its optimizer configuration
    // writes a tag's description into buf (optim_engine_tag_describe): the errors name both sides
    void (*describe_tag)(uint32_t tag, char* buf, size_t size);
    uint64_t num_master;  // the master weights it keeps, or would take from the file
    float* v1_m;          // version-1 files of fp32 AdamW (m, then v, v1_n each): where they go;
    float* v1_v;          // NULL when the run's state is not fp32 AdamW (such files are refused)
    uint64_t v1_n;
} StateExpect;

// Reads a state file into block (want->words words), or (version 1, AdamW m and v) into want->v1_m
// and v1_v. master (want->num_master floats, or NULL to skip them) receives the file's master
// weights when it has them. Returns 1 when the file has master weights (their count must be
// num_master), else 0: the caller decides what they become (see the banner: resuming across
// precisions). Fatal, naming the file and what differs, when the file does not fit the run.
static inline int state_file_read(const char* path, const StateExpect* want, RunState* s, void* block, float* master) {
    FILE* fp = fopen(path, "rb");
    if (fp == NULL) { ls_fatal("state file '%s': cannot open: %s", path, strerror(errno)); }
    int header[HEADER_INTS];
    state_header_parse(fp, path, s, header);
    const int v1_moments = s->version == STATE_VERSION_1 && header[5] != 2;  // AdamW m and v
    char have[96], expect[96];
    want->describe_tag(s->optim_tag, have, sizeof have);
    want->describe_tag(want->tag, expect, sizeof expect);
    if (s->version == STATE_VERSION && s->optim_tag != want->tag) {
        ls_fatal("state file '%s': holds the state of %s, this run's optimizer is %s (resume with the --optimizer, "
                 "--opt-state, --amsgrad, --momentum and --nesterov flags of the run that wrote it)", path, have, expect);
    }
    if (v1_moments && want->v1_m == NULL) {
        ls_fatal("state file '%s': version 1 with AdamW m and v, this run's optimizer is %s (resume with fp32 AdamW)",
                 path, expect);
    }
    const uint64_t words = v1_moments ? want->v1_n : want->words;
    if (s->num_params != words) {
        ls_fatal("state file '%s': holds %llu %s, this run's state has %llu (resume with the -z, --badam and optimizer "
                 "flags of the run that wrote it)", path, (unsigned long long)s->num_params,
                 v1_moments ? "AdamW moments" : "words of optimizer state", (unsigned long long)words);
    }
    if (s->has_master && s->num_master != want->num_master) {
        ls_fatal("state file '%s': holds %llu master weights, this run's state has %llu (resume with the -z, --badam "
                 "and optimizer flags of the run that wrote it)", path, (unsigned long long)s->num_master,
                 (unsigned long long)want->num_master);
    }
    long long expected = (long long)HEADER_INTS * 4 + (v1_moments ? 2LL : 1LL) * (long long)words * 4 +
                         (long long)s->num_master * 4;
    long long size = file_size_of(fp);
    if (size != expected) { ls_fatal("state file '%s': size %lld bytes, expected %lld", path, size, expected); }
    fseek(fp, (long)HEADER_INTS * 4, SEEK_SET);
    float* mw = s->has_master && master == NULL ? (float*)mallocCheck(s->num_master * sizeof(float)) : master;
    void* first = v1_moments ? (void*)want->v1_m : block;
    freadCheck(first, sizeof(float), words, fp, path);
    if (v1_moments) { freadCheck(want->v1_v, sizeof(float), words, fp, path); }
    if (s->has_master) { freadCheck(mw, sizeof(float), s->num_master, fp, path); }
    fclose(fp);
    uint32_t crc = crc32_update(0, NULL, 0);
    crc = crc32_update(crc, first, words * sizeof(float));
    if (v1_moments) { crc = crc32_update(crc, want->v1_v, words * sizeof(float)); }
    if (s->has_master) { crc = crc32_update(crc, mw, s->num_master * sizeof(float)); }
    if (mw != master) { free(mw); }
    checksum_verify(path, header, 15, 16, crc);
    return s->has_master;
}

#endif // LLMC_CHECKPOINT_H

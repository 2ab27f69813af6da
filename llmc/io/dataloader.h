/*
 dataloader.h: batches of tokens from llm.c token shards, shared by both trainers.

 Shard file (llm.c): 256 x int32 header ([0] = 20240520 magic, [1] = 1 version, [2] = token
 count), then the tokens as uint16. A glob pattern selects the shards; every shard is validated
 when the loader opens (magic, version, exact file size, at least B*T+1 tokens).

 A sample is a window of B*T+1 tokens starting at a multiple of B*T inside one shard; inputs
 are its first B*T tokens, targets the B*T tokens after the first. An epoch visits every sample
 of every shard once: in order, or in a permutation drawn from (seed, epoch) when shuffling.
 With N processes, step i of an epoch gives process r the sample i*N + r (data parallelism),
 and the epoch ends when fewer than N samples remain.
*/
#ifndef LLMC_DATALOADER_H
#define LLMC_DATALOADER_H

#include <glob.h>
#include <stdint.h>
#include "llmc/rand.h"
#include "llmc/io/shard.h"
#include "llmc/utils.h"

typedef struct {
    // configuration
    int B, T;
    int process_rank, num_processes;
    int shuffle;
    uint64_t seed;
    int vocab_size;            // tokens must be below this
    // shards
    int num_shards;
    char** shard_paths;
    size_t* shard_first_sample; // (num_shards + 1) prefix sums of samples per shard
    size_t total_samples;
    // position
    uint64_t epoch;
    size_t step_in_epoch;       // steps of N samples taken in this epoch
    size_t* perm;               // (total_samples) sample order of this epoch
    // current shard file
    FILE* fp;
    int open_shard;
    // output
    uint16_t* buffer;           // (B*T+1)
    int* inputs;                // (B, T)
    int* targets;               // (B, T)
} DataLoader;

// Validates one shard; returns its token count. Errors name the file.
static inline size_t shard_validate(const char* path, size_t min_tokens) {
    FILE* fp = fopen(path, "rb");
    if (fp == NULL) { ls_fatal("shard '%s': cannot open: %s", path, strerror(errno)); }
    int header[SHARD_HEADER_INTS];
    if (fread(header, sizeof(int), SHARD_HEADER_INTS, fp) != SHARD_HEADER_INTS) {
        ls_fatal("shard '%s': truncated header (expected %d bytes)", path, SHARD_HEADER_INTS * 4);
    }
    if (header[0] != SHARD_MAGIC) {
        ls_fatal("shard '%s': bad magic %d (expected %d, an llm.c token shard)", path, header[0], SHARD_MAGIC);
    }
    if (header[1] != SHARD_VERSION) {
        ls_fatal("shard '%s': version %d (expected %d, uint16 tokens)", path, header[1], SHARD_VERSION);
    }
    if (header[2] < 0) { ls_fatal("shard '%s': negative token count %d", path, header[2]); }
    size_t ntok = (size_t)header[2];
    long long expected = (long long)SHARD_HEADER_INTS * 4 + (long long)ntok * 2;
    long long size = file_size_of(fp);
    fclose(fp);
    if (size != expected) {
        ls_fatal("shard '%s': size %lld bytes, expected %lld for %zu tokens - truncated or corrupt", path, size,
                 expected, ntok);
    }
    if (ntok < min_tokens) {
        ls_fatal("shard '%s': %zu tokens, fewer than B*T+1 = %zu needed for one batch (lower -b or -t)", path, ntok,
                 min_tokens);
    }
    return ntok;
}

static inline void dataloader_draw_permutation(DataLoader* dl) {
    for (size_t i = 0; i < dl->total_samples; i++) { dl->perm[i] = i; }
    if (!dl->shuffle) { return; }
    Mt19937 rng;  // the same permutation on every process: it depends on (seed, epoch) only
    mt19937_seed(&rng, (uint32_t)(dl->seed * 1000003ull + dl->epoch));
    for (size_t i = dl->total_samples; i > 1; i--) {
        uint64_t r = ((uint64_t)mt19937_next_u32(&rng) << 32) | mt19937_next_u32(&rng);
        size_t j = (size_t)(r % i);
        size_t tmp = dl->perm[i - 1];
        dl->perm[i - 1] = dl->perm[j];
        dl->perm[j] = tmp;
    }
}

static inline void dataloader_init(DataLoader* dl, const char* pattern, int B, int T, int process_rank,
                                   int num_processes, int shuffle, uint64_t seed, int vocab_size) {
    memset(dl, 0, sizeof(*dl));
    dl->B = B;
    dl->T = T;
    dl->process_rank = process_rank;
    dl->num_processes = num_processes;
    dl->shuffle = shuffle;
    dl->seed = seed;
    dl->vocab_size = vocab_size;
    dl->open_shard = -1;
    glob_t g;
    int rc = glob(pattern, 0, NULL, &g);
    if (rc != 0 || g.gl_pathc == 0) {
        ls_fatal("no data shards match '%s' (run `make data` to create the TinyShakespeare shards, or pass -i/-j)", pattern);
    }
    dl->num_shards = (int)g.gl_pathc;
    dl->shard_paths = (char**)mallocCheck(g.gl_pathc * sizeof(char*));
    dl->shard_first_sample = (size_t*)mallocCheck((g.gl_pathc + 1) * sizeof(size_t));
    size_t BT = (size_t)B * (size_t)T;
    dl->shard_first_sample[0] = 0;
    for (size_t i = 0; i < g.gl_pathc; i++) {
        dl->shard_paths[i] = strdup(g.gl_pathv[i]);
        size_t ntok = shard_validate(g.gl_pathv[i], BT + 1);
        dl->shard_first_sample[i + 1] = dl->shard_first_sample[i] + (ntok - 1) / BT;
    }
    globfree(&g);
    dl->total_samples = dl->shard_first_sample[dl->num_shards];
    if (dl->total_samples < (size_t)num_processes) {
        ls_fatal("data '%s': %zu batches of B*T = %zu tokens, fewer than the %d processes", pattern,
                 dl->total_samples, BT, num_processes);
    }
    dl->perm = (size_t*)mallocCheck(dl->total_samples * sizeof(size_t));
    dl->buffer = (uint16_t*)mallocCheck((BT + 1) * sizeof(uint16_t));
    dl->inputs = (int*)mallocCheck(BT * sizeof(int));
    dl->targets = (int*)mallocCheck(BT * sizeof(int));
    dataloader_draw_permutation(dl);
}

// Steps (of num_processes samples each) in one epoch.
static inline size_t dataloader_steps_per_epoch(const DataLoader* dl) {
    return dl->total_samples / (size_t)dl->num_processes;
}

static inline void dataloader_reset(DataLoader* dl) {
    dl->epoch = 0;
    dl->step_in_epoch = 0;
    dataloader_draw_permutation(dl);
}

// Moves to a saved position (epoch, step in epoch), e.g. when resuming.
static inline void dataloader_seek(DataLoader* dl, uint64_t epoch, size_t step_in_epoch) {
    dl->epoch = epoch;
    dl->step_in_epoch = step_in_epoch % dataloader_steps_per_epoch(dl);
    dataloader_draw_permutation(dl);
}

// Loads this process's next batch into inputs/targets.
static inline void dataloader_next_batch(DataLoader* dl) {
    if (dl->step_in_epoch >= dataloader_steps_per_epoch(dl)) {
        dl->epoch++;
        dl->step_in_epoch = 0;
        dataloader_draw_permutation(dl);
    }
    size_t sample = dl->perm[dl->step_in_epoch * (size_t)dl->num_processes + (size_t)dl->process_rank];
    dl->step_in_epoch++;
    int shard = 0;
    while (dl->shard_first_sample[shard + 1] <= sample) { shard++; }
    size_t BT = (size_t)dl->B * (size_t)dl->T;
    size_t offset = (sample - dl->shard_first_sample[shard]) * BT;  // in tokens
    if (dl->open_shard != shard) {
        if (dl->fp) { fclose(dl->fp); }
        dl->fp = fopenCheck(dl->shard_paths[shard], "rb");
        dl->open_shard = shard;
    }
    fseek(dl->fp, (long)((size_t)SHARD_HEADER_INTS * 4 + offset * 2), SEEK_SET);
    freadCheck(dl->buffer, sizeof(uint16_t), BT + 1, dl->fp, dl->shard_paths[shard]);
    for (size_t i = 0; i < BT; i++) {
        dl->inputs[i] = dl->buffer[i];
        dl->targets[i] = dl->buffer[i + 1];
    }
    for (size_t i = 0; i <= BT; i++) {
        if (dl->buffer[i] >= dl->vocab_size) {
            ls_fatal("shard '%s': token %u at position %zu is not below the model's vocab size %d",
                     dl->shard_paths[shard], dl->buffer[i], offset + i, dl->vocab_size);
        }
    }
}

static inline void dataloader_free(DataLoader* dl) {
    if (dl->fp) { fclose(dl->fp); }
    for (int i = 0; i < dl->num_shards; i++) { free(dl->shard_paths[i]); }
    free(dl->shard_paths);
    free(dl->shard_first_sample);
    free(dl->perm);
    free(dl->buffer);
    free(dl->inputs);
    free(dl->targets);
    memset(dl, 0, sizeof(*dl));
}

#endif // LLMC_DATALOADER_H

/*
 memory.h: the memory model. For a configuration and run options it says how many bytes each
 category takes (parameters, gradients, AdamW m and v, activations, backward scratch), prints
 the start-up table, and defines the activation layouts the trainers carve their buffers from,
 so prediction and allocation cannot drift. Trainers count what they really allocate per
 category (MemCounter) and tests check the two agree.

 CPU trainer activations, element counts (L layers, B batch, T time, C channels, NH heads,
 Vp padded vocab). Kept for the backward pass:
   encoded (B,T,C)  ln1 (L,B,T,C)  ln1_mean ln1_rstd (L,B,T)  qkv (L,B,T,3C)  atty (L,B,T,C)
   att (L,B,NH,T,T)  residual2 (L,B,T,C)  ln2 (L,B,T,C)  ln2_mean ln2_rstd (L,B,T)
   fch fch_gelu (L,B,T,4C)  residual3 (L,B,T,C)  lnf (B,T,C)  lnf_mean lnf_rstd (B,T)
   logits (B,T,Vp), overwritten in place by dlogits in the backward pass  losses (B,T)
 Backward scratch, reused by every layer: dresidual dbuf1 dbuf2 (B,T,C)  dqkv (B,T,3C)
   dfch (B,T,4C)  datt (B,NH,T,T).
*/
#ifndef LLMC_MEMORY_H
#define LLMC_MEMORY_H

#include <stdio.h>
#include "llmc/config.h"
#include "llmc/utils.h"

typedef enum {
    MEM_PARAMS = 0,
    MEM_GRADS,
    MEM_ADAM_M,
    MEM_ADAM_V,
    MEM_ACTS,
    MEM_SCRATCH,
    MEM_COUNT
} MemCategory;

static const char* const mem_category_names[MEM_COUNT] = {
    "parameters", "gradients", "AdamW m", "AdamW v", "activations", "backward scratch",
};

typedef struct {
    size_t bytes[MEM_COUNT];
} MemoryReport;

// ----------------------------------------------------------------------------
// CPU activation layout

#define CPU_NUM_ACTIVATIONS 19
#define CPU_NUM_SCRATCH 6

static inline void cpu_activation_sizes(const GPT2Config* c, int B, int T, size_t* sizes) {
    size_t L = (size_t)c->num_layers, C = (size_t)c->channels, NH = (size_t)c->num_heads;
    size_t BT = (size_t)B * (size_t)T, Vp = (size_t)c->padded_vocab_size;
    size_t i = 0;
    sizes[i++] = BT * C;               // encoded
    sizes[i++] = L * BT * C;           // ln1
    sizes[i++] = L * BT;               // ln1_mean
    sizes[i++] = L * BT;               // ln1_rstd
    sizes[i++] = L * BT * 3 * C;       // qkv
    sizes[i++] = L * BT * C;           // atty
    sizes[i++] = L * (size_t)B * NH * (size_t)T * (size_t)T;  // att
    sizes[i++] = L * BT * C;           // residual2
    sizes[i++] = L * BT * C;           // ln2
    sizes[i++] = L * BT;               // ln2_mean
    sizes[i++] = L * BT;               // ln2_rstd
    sizes[i++] = L * BT * 4 * C;       // fch
    sizes[i++] = L * BT * 4 * C;       // fch_gelu
    sizes[i++] = L * BT * C;           // residual3
    sizes[i++] = BT * C;               // lnf
    sizes[i++] = BT;                   // lnf_mean
    sizes[i++] = BT;                   // lnf_rstd
    sizes[i++] = BT * Vp;              // logits (and dlogits)
    sizes[i++] = BT;                   // losses
}

static inline void cpu_scratch_sizes(const GPT2Config* c, int B, int T, size_t* sizes) {
    size_t C = (size_t)c->channels, NH = (size_t)c->num_heads, BT = (size_t)B * (size_t)T;
    sizes[0] = BT * C;      // dresidual
    sizes[1] = BT * C;      // dbuf1
    sizes[2] = BT * C;      // dbuf2
    sizes[3] = BT * 3 * C;  // dqkv
    sizes[4] = BT * 4 * C;  // dfch
    sizes[5] = (size_t)B * NH * (size_t)T * (size_t)T;  // datt
}

static inline size_t sum_sizes(const size_t* sizes, int n) {
    size_t total = 0;
    for (int i = 0; i < n; i++) { total += sizes[i]; }
    return total;
}

// The CPU trainer (fp32 everything): B, T per process.
static inline MemoryReport memory_model_cpu(const GPT2Config* c, int B, int T) {
    MemoryReport r;
    memset(&r, 0, sizeof(r));
    size_t n = gpt2_num_parameters(c);
    size_t acts[CPU_NUM_ACTIVATIONS], scratch[CPU_NUM_SCRATCH];
    cpu_activation_sizes(c, B, T, acts);
    cpu_scratch_sizes(c, B, T, scratch);
    r.bytes[MEM_PARAMS] = n * sizeof(float);
    r.bytes[MEM_GRADS] = n * sizeof(float);
    r.bytes[MEM_ADAM_M] = n * sizeof(float);
    r.bytes[MEM_ADAM_V] = n * sizeof(float);
    r.bytes[MEM_ACTS] = sum_sizes(acts, CPU_NUM_ACTIVATIONS) * sizeof(float);
    r.bytes[MEM_SCRATCH] = sum_sizes(scratch, CPU_NUM_SCRATCH) * sizeof(float);
    return r;
}

static inline size_t memory_report_total(const MemoryReport* r) {
    size_t total = 0;
    for (int i = 0; i < MEM_COUNT; i++) { total += r->bytes[i]; }
    return total;
}

static inline double mib(size_t bytes) { return (double)bytes / (1024.0 * 1024.0); }

// Prints the start-up table. num_params for the bytes-per-parameter column.
static inline void memory_report_print(FILE* out, const MemoryReport* r, size_t num_params) {
    size_t total = memory_report_total(r);
    size_t param_related = r->bytes[MEM_PARAMS] + r->bytes[MEM_GRADS] + r->bytes[MEM_ADAM_M] + r->bytes[MEM_ADAM_V];
    size_t optimizer_side = param_related - r->bytes[MEM_PARAMS];
    fprintf(out, "+-----------------------+------------+-------------+\n");
    fprintf(out, "| memory                |        MiB | bytes/param |\n");
    fprintf(out, "+-----------------------+------------+-------------+\n");
    for (int i = 0; i < MEM_COUNT; i++) {
        if (r->bytes[i] == 0) { continue; }
        if (i == MEM_ACTS || i == MEM_SCRATCH) {
            fprintf(out, "| %-21s | %10.1f |             |\n", mem_category_names[i], mib(r->bytes[i]));
        } else {
            fprintf(out, "| %-21s | %10.1f | %11.2f |\n", mem_category_names[i], mib(r->bytes[i]),
                    (double)r->bytes[i] / (double)num_params);
        }
    }
    fprintf(out, "+-----------------------+------------+-------------+\n");
    fprintf(out, "| total                 | %10.1f |             |\n", mib(total));
    fprintf(out, "+-----------------------+------------+-------------+\n");
    fprintf(out, "parameters: %zu; optimizer side (gradients + m + v): %.1f MiB = %.0f%% of parameter-related memory\n",
            num_params, mib(optimizer_side), 100.0 * (double)optimizer_side / (double)param_related);
}

// ----------------------------------------------------------------------------
// counting what is really allocated, per category

typedef struct {
    size_t bytes[MEM_COUNT];
} MemCounter;

static inline void* mem_alloc_counted(MemCounter* mc, MemCategory cat, size_t bytes, const char* file, int line) {
    void* p = malloc_check(bytes, file, line);
    mc->bytes[cat] += bytes;
    return p;
}
#define memAlloc(mc, cat, bytes) mem_alloc_counted(mc, cat, bytes, __FILE__, __LINE__)

#endif // LLMC_MEMORY_H

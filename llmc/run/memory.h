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
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "llmc/config.h"
#include "llmc/optim/optim.h"
#include "llmc/utils.h"

typedef enum {
    MEM_PARAMS = 0,
    MEM_MASTER,
    MEM_GRADS,
    MEM_OPT_STATE,
    MEM_ACTS,
    MEM_SCRATCH,
    MEM_WORKSPACE,
    MEM_COUNT
} MemCategory;

static const char* const mem_category_names[MEM_COUNT] = {
    "parameters", "master weights", "gradients", "optimizer state", "activations", "backward scratch",
    "cuBLASLt workspace",
};

typedef struct {
    size_t bytes[MEM_COUNT];  // where the trainer computes: host for the CPU trainer, the device for the GPU one
    size_t host_pinned;       // GPU trainer: what --offload keeps in pinned host memory, in all
    size_t host[MEM_COUNT];   // and by category (master weights, gradients' copies, optimizer state)
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

typedef struct {
    size_t badam_block;      // BAdam: elements of the largest block (0: BAdam off)
    int zero_stage;          // 1: ZeRO-1 over num_processes
    int num_processes;
    size_t opt_state_bytes;  // the optimizer engine's state block and the step's scratch (train_options_optim_sizes)
    size_t max_shard;        // ZeRO-1: the largest view's part (OptimSizes.max_shard)
    size_t zero_elems;       // ZeRO-1: the gradients' elements (OptimSizes.zero_elems; 0: the equal shards')
    int update_delay;        // --offload-delay 1: the last step's gradients kept for the delayed update
} CpuMemoryOptions;

// ZeRO-1's gradient elements: every process's part of the largest view (given), or n's equal shards.
static inline size_t memory_zero_elems(size_t given, size_t n, int procs) {
    return given > 0 ? given : zero_shard_elems(n, procs) * (size_t)procs;
}

// The CPU trainer (fp32 everything), per process: B, T per process. Gradients hold all parameters,
// or BAdam's largest block; with ZeRO-1 over P processes they hold the P parts of the largest view
// (equal shards, padded; Muon's: whole matrices, unpadded), and so do the parameters without BAdam
// (the all-gather is in place); the reduced gradient part gets its own buffer. The optimizer's state is the engine's block
// (llmc/optim/engine.h), sized by its largest view.
static inline MemoryReport memory_model_cpu(const GPT2Config* c, int B, int T, const CpuMemoryOptions* o) {
    MemoryReport r;
    memset(&r, 0, sizeof(r));
    size_t np = gpt2_num_parameters(c);
    size_t n = o && o->badam_block ? o->badam_block : np;
    size_t acts[CPU_NUM_ACTIVATIONS], scratch[CPU_NUM_SCRATCH];
    cpu_activation_sizes(c, B, T, acts);
    cpu_scratch_sizes(c, B, T, scratch);
    r.bytes[MEM_PARAMS] = np * sizeof(float);
    r.bytes[MEM_GRADS] = n * sizeof(float);
    r.bytes[MEM_OPT_STATE] = o ? o->opt_state_bytes : 0;
    if (o && o->zero_stage >= 1 && o->num_processes > 1) {
        size_t padded = memory_zero_elems(o->zero_elems, n, o->num_processes);
        if (!o->badam_block) { r.bytes[MEM_PARAMS] = padded * sizeof(float); }
        r.bytes[MEM_GRADS] = (padded + o->max_shard) * sizeof(float);
    }
    if (o && o->update_delay) { r.bytes[MEM_GRADS] += n * sizeof(float); }
    r.bytes[MEM_ACTS] = sum_sizes(acts, CPU_NUM_ACTIVATIONS) * sizeof(float);
    r.bytes[MEM_SCRATCH] = sum_sizes(scratch, CPU_NUM_SCRATCH) * sizeof(float);
    return r;
}

// ----------------------------------------------------------------------------
// GPU trainer activation layout (train_gpt2.cu). Element counts and whether each tensor is fp32
// (statistics, losses, token ids) or floatX (everything else). Recompute (-r) keeps one layer's
// worth instead of L: 1 recomputes GELU outputs in the backward pass, 2 also the layernorm
// outputs. `output` is the scratch that holds a matmul's output in the forward pass and the
// logits / dlogits (B,T,Vp).
//   inputs targets (B,T) int  encoded (B,T,C)  ln1 (L|1,B,T,C)  ln1_mean ln1_rstd (L,B,T) fp32
//   atty (L,B,T,C)  att (L,B,NH,T,T)  residual2 (L,B,T,C)  ln2 (L|1,B,T,C)  ln2_mean ln2_rstd (L,B,T) fp32
//   fch (L,B,T,4C) pre-GELU  fch_gelu (L|1,B,T,4C)  residual3 (L,B,T,C)  lnf (B,T,C)
//   lnf_mean lnf_rstd losses (B,T) fp32  qkvr (L,B,T,3C)  output (B,T,max(3C,Vp))  att_stats (L,B,NH,T) fp32
// Backward scratch (floatX): dresidual dbuf datty (B,T,C)  dfch (B,T,4C)  dqkv dqkvr (B,T,3C)
//   datt (B,NH,T,T); plus the kernels' fp32 scratch, sized by the kernel headers.
// Every tensor starts 256-byte aligned, and so does every layer's slice of an (L, ...) tensor:
// its layers lie gpu_layer_stride() elements apart.
// Attention: flash (--attention cudnn|cudnn-fast, llmc/kernels/cudnn_att.cuh) keeps no T x T tensor: att,
// datt and dqkvr are empty, qkvr holds each layer's qkv as the matmul wrote it (B,T,3C), and
// att_stats the log-sum-exp of every score row (cuDNN's workspace is in the kernel scratch: with
// the deterministic backward of `cudnn` it holds one (B,NH,T,T) bf16 matrix on Hopper); the
// matmul path (llmc/kernels/attention.cuh) has no att_stats.

#define GPU_NUM_ACTIVATIONS 23
#define GPU_NUM_SCRATCH 7

// Elements from one layer's slice of a per-layer tensor (L, ...) to the next: the slice's n
// elements of elem bytes (1, 2 or 4) rounded up to a multiple of 256 bytes, so that every slice
// starts as aligned as the tensor does, whatever B, T and NH are. The trainer slices with the
// stride at the current (B, T); rounding up is monotone, so that fits in L strides at the
// allocated (B, T).
static inline size_t gpu_layer_stride(size_t n, size_t elem) { return (n * elem + 255) / 256 * 256 / elem; }

// floatx_bytes: 2 (bf16) or 4 (fp32), for the padding of the per-layer floatX tensors; flash:
// GpuMemoryOptions.flash_attention (no T x T tensors, att_stats instead).
static inline void gpu_activation_sizes(const GPT2Config* c, int B, int T, int recompute, size_t floatx_bytes, int flash,
                                        size_t* n,
                                        int* is_fp32) {
    size_t L = (size_t)c->num_layers, C = (size_t)c->channels, NH = (size_t)c->num_heads;
    size_t BT = (size_t)B * (size_t)T, Vp = (size_t)c->padded_vocab_size;
    size_t L_ln = recompute >= 2 ? 1 : L, L_gelu = recompute >= 1 ? 1 : L;
    size_t out = 3 * C > Vp ? 3 * C : Vp;
    size_t i = 0;
#define ACT(count, fp32) do { n[i] = (count); is_fp32[i] = (fp32); i++; } while (0)
    // layers x the padded stride of a per-layer slice of `count` elements
#define PER_LAYER(layers, count, fp32) ((layers) * gpu_layer_stride((count), (fp32) ? 4 : floatx_bytes))
    ACT(BT, 1);                      // inputs (int)
    ACT(BT, 1);                      // targets (int)
    ACT(BT * C, 0);                  // encoded
    ACT(PER_LAYER(L_ln, BT * C, 0), 0);       // ln1
    ACT(PER_LAYER(L, BT, 1), 1);              // ln1_mean
    ACT(PER_LAYER(L, BT, 1), 1);              // ln1_rstd
    ACT(PER_LAYER(L, BT * C, 0), 0);          // atty
    ACT(flash ? 0 : PER_LAYER(L, (size_t)B * NH * (size_t)T * (size_t)T, 0), 0);  // att
    ACT(PER_LAYER(L, BT * C, 0), 0);          // residual2
    ACT(PER_LAYER(L_ln, BT * C, 0), 0);       // ln2
    ACT(PER_LAYER(L, BT, 1), 1);              // ln2_mean
    ACT(PER_LAYER(L, BT, 1), 1);              // ln2_rstd
    ACT(PER_LAYER(L, BT * 4 * C, 0), 0);      // fch
    ACT(PER_LAYER(L_gelu, BT * 4 * C, 0), 0); // fch_gelu
    ACT(PER_LAYER(L, BT * C, 0), 0);          // residual3
    ACT(BT * C, 0);                  // lnf
    ACT(BT, 1);                      // lnf_mean
    ACT(BT, 1);                      // lnf_rstd
    ACT(BT, 1);                      // losses
    ACT(PER_LAYER(L, BT * 3 * C, 0), 0);      // qkvr
    ACT(BT * out, 0);                // output
    ACT(flash ? PER_LAYER(L, (size_t)B * NH * (size_t)T, 1) : 0, 1);  // att_stats
    ACT(0, 1);                       // (end)
#undef PER_LAYER
#undef ACT
}

static inline void gpu_scratch_sizes(const GPT2Config* c, int B, int T, int flash, size_t* n) {
    size_t C = (size_t)c->channels, NH = (size_t)c->num_heads, BT = (size_t)B * (size_t)T;
    n[0] = BT * C;      // dresidual
    n[1] = BT * C;      // dbuf
    n[2] = BT * C;      // datty
    n[3] = BT * 4 * C;  // dfch
    n[4] = BT * 3 * C;  // dqkv
    n[5] = flash ? 0 : BT * 3 * C;  // dqkvr
    n[6] = flash ? 0 : (size_t)B * NH * (size_t)T * (size_t)T;  // datt
}

// Bytes of an activation list, each tensor rounded up to 256 bytes (the trainer aligns every
// tensor so that 128-bit loads stay aligned).
static inline size_t gpu_tensor_bytes(size_t count, size_t elem) { return (count * elem + 255) / 256 * 256; }

typedef struct {
    int recompute;          // -r
    int master_weights;     // -w (bf16 builds)
    size_t floatx_bytes;    // 2 (bf16) or 4 (fp32)
    size_t kernel_scratch;  // fp32 scratch of the backward kernels, bytes (from the kernel headers)
    size_t workspace;       // cuBLASLt workspace, bytes
    int zero_stage;         // 1: m, v and master weights sharded over the processes (parameters and
    int num_processes;      // gradients padded to a multiple of the shard)
    size_t offload_chunk;   // > 0: the optimizer's state and the master weights live in pinned host
                            // memory; the device holds 2 chunks of staging
    size_t badam_block;     // > 0: BAdam, gradients (floatX) hold the largest block's elements only
                            // (Badam.max_block)
    size_t opt_state_bytes; // the optimizer engine's block: its largest view's (train_options_state_bytes)
    size_t master_elems;    // elements of its largest view: the fp32 master weights beside it
    size_t stage_bytes;     // --offload: the largest chunk's state bytes and elements (each of the two
    size_t stage_elems;     // staging buffers; llmc/optim/offload.cuh)
    size_t zero_elems;      // ZeRO-1: the gradients' elements (OptimSizes.zero_elems; 0: the equal shards')
    size_t opt_work_bytes;  // the step's scratch beside the block (Muon's batched Newton-Schulz)
    int host_update;        // --offload cpu: the state and fp32 master weights on the host, updated
                            // there (llmc/optim/offload_cpu.cuh); the device holds none of either
    size_t host_work_bytes; // --offload cpu: the step's scratch on the host (Muon's Newton-Schulz)
    size_t gather_elems;    // -z 1 --badam --offload-delay 1: the block's parameter all-gather buffer
                            // (floatX; the gradient buffer holds the next step's gradients then)
    int flash_attention;    // 0: --attention matmul; 1 cudnn, 2 cudnn-fast (no T x T activations, LSE stats)
} GpuMemoryOptions;

static inline MemoryReport memory_model_gpu(const GPT2Config* c, int B, int T, const GpuMemoryOptions* g) {
    MemoryReport r;
    memset(&r, 0, sizeof(r));
    size_t n = gpt2_num_parameters(c);
    size_t ng = g->badam_block > 0 ? g->badam_block : n;  // gradient elements
    if (g->zero_stage >= 1 && g->num_processes > 1) {
        // ZeRO-1: gradients hold the parts of the largest view (equal shards, padded; Muon's whole
        // matrices, unpadded: the reduce-scatter works in place on them), and without BAdam the
        // parameters too (so does the all-gather); the optimizer's view is this process's part
        ng = memory_zero_elems(g->zero_elems, ng, g->num_processes);
        if (g->badam_block == 0) { n = ng; }
    }
    r.bytes[MEM_PARAMS] = gpu_tensor_bytes(n, g->floatx_bytes);
    if (g->gather_elems > 0) r.bytes[MEM_PARAMS] += gpu_tensor_bytes(g->gather_elems, g->floatx_bytes);
    r.bytes[MEM_GRADS] = gpu_tensor_bytes(ng, g->floatx_bytes);
    r.bytes[MEM_OPT_STATE] = g->opt_state_bytes > 0 ? gpu_tensor_bytes(g->opt_state_bytes, 1) : 0;
    if (g->opt_work_bytes > 0) r.bytes[MEM_OPT_STATE] += gpu_tensor_bytes(g->opt_work_bytes, 1);
    r.bytes[MEM_MASTER] = g->master_weights ? gpu_tensor_bytes(g->master_elems, 4) : 0;
    if (g->offload_chunk > 0) {  // in pinned host memory; the device holds two chunks of staging
        r.bytes[MEM_OPT_STATE] = 2 * gpu_tensor_bytes(g->stage_bytes, 1);
        if (g->opt_work_bytes > 0) r.bytes[MEM_OPT_STATE] += gpu_tensor_bytes(g->opt_work_bytes, 1);
        r.bytes[MEM_MASTER] = g->master_weights ? 2 * gpu_tensor_bytes(g->stage_elems, 4) : 0;
        r.host[MEM_OPT_STATE] = g->opt_state_bytes;
        r.host[MEM_MASTER] = g->master_weights ? g->master_elems * 4 : 0;
    }
    if (g->host_update) {  // fp32 master weights in every build, the gradients as fp32 and (16-bit
                           // builds) the transfer buffer of the gradients down and parameters up
        r.bytes[MEM_OPT_STATE] = 0;
        r.bytes[MEM_MASTER] = 0;
        r.host[MEM_OPT_STATE] = g->opt_state_bytes + g->host_work_bytes;
        r.host[MEM_MASTER] = g->master_elems * 4;
        r.host[MEM_GRADS] = g->master_elems * 4 + (g->floatx_bytes == 4 ? 0 : g->master_elems * g->floatx_bytes);
    }
    for (int i = 0; i < MEM_COUNT; i++) r.host_pinned += r.host[i];
    size_t acts[GPU_NUM_ACTIVATIONS], scratch[GPU_NUM_SCRATCH];
    int fp32[GPU_NUM_ACTIVATIONS];
    gpu_activation_sizes(c, B, T, g->recompute, g->floatx_bytes, g->flash_attention, acts, fp32);
    for (int i = 0; i < GPU_NUM_ACTIVATIONS; i++) { r.bytes[MEM_ACTS] += gpu_tensor_bytes(acts[i], fp32[i] ? 4 : g->floatx_bytes); }
    gpu_scratch_sizes(c, B, T, g->flash_attention, scratch);
    for (int i = 0; i < GPU_NUM_SCRATCH; i++) { r.bytes[MEM_SCRATCH] += gpu_tensor_bytes(scratch[i], g->floatx_bytes); }
    r.bytes[MEM_SCRATCH] += gpu_tensor_bytes(g->kernel_scratch, 1);
    r.bytes[MEM_WORKSPACE] = g->workspace;
    return r;
}

// The host memory available to a new allocation (MemAvailable of /proc/meminfo; the free pages
// elsewhere), bytes; 0 when unknown.
static inline size_t memory_host_available(void) {
    FILE* f = fopen("/proc/meminfo", "r");
    if (f != NULL) {
        char line[256];
        unsigned long long kb = 0;
        const char* key = "MemAvailable:";
        while (fgets(line, sizeof(line), f) != NULL) {
            if (strncmp(line, key, strlen(key)) == 0) {
                kb = strtoull(line + strlen(key), NULL, 10);
                break;
            }
        }
        fclose(f);
        if (kb > 0) { return (size_t)kb * 1024; }
    }
    long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (size_t)pages * (size_t)page : 0;
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
    size_t param_related = r->bytes[MEM_PARAMS] + r->bytes[MEM_MASTER] + r->bytes[MEM_GRADS] + r->bytes[MEM_OPT_STATE];
    size_t optimizer_side = param_related - r->bytes[MEM_PARAMS];
    fprintf(out, "+-----------------------+------------+-------------+\n");
    fprintf(out, "| memory                |        MiB | bytes/param |\n");
    fprintf(out, "+-----------------------+------------+-------------+\n");
    for (int i = 0; i < MEM_COUNT; i++) {
        if (r->bytes[i] == 0) { continue; }
        if (i == MEM_ACTS || i == MEM_SCRATCH || i == MEM_WORKSPACE) {
            fprintf(out, "| %-21s | %10.1f |             |\n", mem_category_names[i], mib(r->bytes[i]));
        } else {
            fprintf(out, "| %-21s | %10.1f | %11.2f |\n", mem_category_names[i], mib(r->bytes[i]),
                    (double)r->bytes[i] / (double)num_params);
        }
    }
    fprintf(out, "+-----------------------+------------+-------------+\n");
    fprintf(out, "| total                 | %10.1f |             |\n", mib(total));
    fprintf(out, "+-----------------------+------------+-------------+\n");
    if (r->host_pinned) {
        fprintf(out, "offloaded to pinned host memory: %.1f MiB (", mib(r->host_pinned));
        const char* sep = "";
        for (int i = 0; i < MEM_COUNT; i++) {
            if (r->host[i] == 0) { continue; }
            fprintf(out, "%s%s %.1f MiB, %.2f B/param", sep, mem_category_names[i], mib(r->host[i]),
                    (double)r->host[i] / (double)num_params);
            sep = "; ";
        }
        fprintf(out, ")\n");
    }
    fprintf(out, "parameters: %zu; optimizer side (master weights, gradients, optimizer state): %.1f MiB (%.1f MB) = %.0f%% of "
            "parameter-related memory\n", num_params, mib(optimizer_side), (double)optimizer_side / 1e6,
            100.0 * (double)optimizer_side / (double)param_related);
}

// ----------------------------------------------------------------------------
// counting what is really allocated, per category

typedef struct {
    size_t bytes[MEM_COUNT];
    size_t host_pinned;
    size_t host[MEM_COUNT];
} MemCounter;

static inline void* mem_alloc_counted(MemCounter* mc, MemCategory cat, size_t bytes, const char* file, int line) {
    void* p = malloc_check(bytes, file, line);
    mc->bytes[cat] += bytes;
    return p;
}
#define memAlloc(mc, cat, bytes) mem_alloc_counted(mc, cat, bytes, __FILE__, __LINE__)

// The trainers check at start-up that what they allocated is what the memory model predicted
// (the table they print is the model's): a disagreement is a bug, reported with the category.
static inline void memory_check_allocation(const MemoryReport* predicted, const MemCounter* allocated) {
    for (int i = 0; i < MEM_COUNT; i++) {
        if (predicted->bytes[i] != allocated->bytes[i]) {
            ls_fatal("memory model: %s predicted %zu bytes, allocated %zu", mem_category_names[i], predicted->bytes[i],
                     allocated->bytes[i]);
        }
    }
    for (int i = 0; i < MEM_COUNT; i++) {
        if (predicted->host[i] != allocated->host[i]) {
            ls_fatal("memory model: host %s predicted %zu bytes, allocated %zu", mem_category_names[i], predicted->host[i],
                     allocated->host[i]);
        }
    }
    if (predicted->host_pinned != allocated->host_pinned) {
        ls_fatal("memory model: pinned host memory predicted %zu bytes, allocated %zu", predicted->host_pinned,
                 allocated->host_pinned);
    }
}

#endif // LLMC_MEMORY_H

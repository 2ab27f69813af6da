/*
 state.h: the optimizer's state (the engine's views of it and the step, optim_step_cpu:
 llmc/optim/engine.h). An OptimState owns (or borrows) one block of memory holding everything the
 optimizer keeps between steps, carved with 64-byte aligned offsets; optim_state_bytes() is its
 exact size for the memory model.

   OptimConfig cfg = optim_config_default(OPT_LION);     // then set what the flags say
   char why[256];
   if (!optim_config_check(&cfg, why, sizeof why)) ls_fatal("%s", why);  // names the flags
   OptimState st;
   optim_state_init(&st, &cfg, segs, nseg, n, NULL);          // NULL: it allocates
   optim_step_cpu(&st, params, grads, lr, step, clip_scale);  // step = 1, 2, ... (engine.h)
   optim_state_free(&st);

 State per parameter (the memory table's numbers; per block of OPT_BLOCK elements, per element of
 the tensors under QUANT8_MIN_ELEMS, per segment; each buffer starts 64-byte aligned). k state
 values per element: AdamW 2 (m, v; AMSGrad 3: vmax), LAMB 2, SGD with momentum 1, Lion 1, plain
 SGD 0 (no state, so fp32 only):
   fp32  4k B                  adamw 8 (+4 AMSGrad), lamb 8, sgd 4, lion 4
   bf16  2k B                  adamw 4 (+2 AMSGrad), lamb 4, sgd 2, lion 2
   fp16  2k B                  adamw 4 (+2 AMSGrad) only (m * 2^14 and sqrt(v) * 2^14: llmc/optim/optim.h)
   int8  k B + 4k B/block + 4k B/small element + 2 KB maps
   4bit  k/2 B (codes in whole OPT_BLOCK blocks) + 4 B per 128 elements (m's absmax) + 4k B/small
         element + 2 x 4 B per row and column of each tensor per v slot (its scales, and the step's
         new ones) + 128 B map (Muon: v's codes packed per tensor in whole blocks)
 LAMB adds 8 B/block + 4 B/segment (its block sums and trust ratios) at every precision.
 GPT-2 124M with per-layer segments (optim_segments_build_layers), B/param:
            fp32    bf16    int8    4bit
   adamw    8       4       2.012   1.053   (AMSGrad: 12, 6, 3.018, 1.570)
   lamb     8.004   4.004   2.016   1.057
   sgd      4       2       1.006   0.536   (momentum 0: none)
   lion     4       2       1.006   0.536
   muon     5.271   2.635   1.329   0.712   (momentum of the matrices, m and v of the rest)
 Not counted: the host copies of the segment and block tables (a few KB) and, for int8 state on
 the CPU, the quantize indexes (2 x 257 KB, quant8_index_build).
 The GPU uses the same layout in device memory (llmc/optim/engine.cuh: optim_state_init_device,
 optim_step_gpu). BAdam's reset: optim_state_zero (host) / optim_state_zero_device,
 then steps count from 1 again. LAMB under ZeRO-1: `reduce` sums the trust ratios' norms over
 the processes (lamb_trust_reduced in llmc/optim/optim.h).

 Combinations: every optimizer with state at every precision (AdamW's bf16 and int8 kernels:
 dev/cuda/adamw.cu versions 6a, 6b; SGD's, Lion's and LAMB's: llmc/optim/update.h and
 llmc/optim/engine.cuh); plain SGD (momentum 0) keeps no state, so bf16 or int8 state has no
 meaning for it; Nesterov needs momentum > 0 and no dampening (as torch.optim.SGD); fp16 state is
 AdamW's and Adam-mini's. optim_config_check says which flags conflict.
*/
#ifndef LLMC_OPTIM_STATE_H
#define LLMC_OPTIM_STATE_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmc/optim/muon.h"
#include "llmc/optim/optim.h"
#include "llmc/optim/quant8.h"
#include "llmc/utils.h"

// The flags' words, in enum order (CLI_CHOICE tables can use them: the index is the enum value).
static const char* const optim_kind_choices[] = {"adamw", "sgd", "lamb", "lion", "muon", "adam-mini", NULL};
static const char* const optim_precision_choices[] = {"fp32", "bf16", "int8", "fp16", "4bit", NULL};

static inline const char* optim_kind_name(OptimKind k) {
    return (int)k >= (int)OPT_ADAMW && (int)k <= (int)OPT_KIND_LAST ? optim_kind_choices[k] : "?";
}
static inline const char* optim_precision_name(OptimStatePrecision p) {
    return (int)p >= (int)OPT_STATE_FP32 && (int)p <= (int)OPT_STATE_LAST ? optim_precision_choices[p] : "?";
}
// 1 and *out set when s names a kind (--optimizer adamw|sgd|lamb|lion|muon|adam-mini), else 0.
static inline int optim_kind_parse(const char* s, OptimKind* out) {
    for (int k = OPT_ADAMW; k <= OPT_KIND_LAST; k++) {
        if (strcmp(s, optim_kind_choices[k]) == 0) { *out = (OptimKind)k; return 1; }
    }
    return 0;
}
// 1 and *out set when s names a precision (--opt-state fp32|bf16|int8|fp16|4bit), else 0.
static inline int optim_precision_parse(const char* s, OptimStatePrecision* out) {
    for (int p = OPT_STATE_FP32; p <= OPT_STATE_LAST; p++) {
        if (strcmp(s, optim_precision_choices[p]) == 0) { *out = (OptimStatePrecision)p; return 1; }
    }
    return 0;
}

// The usual hyperparameters of each optimizer (the papers' / PyTorch's defaults; AdamW's betas
// are GPT-2 training's 0.9, 0.95). seed 0, fp32 state.
static inline OptimConfig optim_config_default(OptimKind kind) {
    OptimConfig c;
    memset(&c, 0, sizeof c);
    c.kind = kind;
    c.state = OPT_STATE_FP32;
    c.beta1 = 0.9f;
    c.beta2 = kind == OPT_LION ? 0.99f : kind == OPT_LAMB ? 0.999f : 0.95f;
    c.eps = kind == OPT_LAMB ? 1e-6f : 1e-8f;
    c.momentum = kind == OPT_SGD ? 0.9f : kind == OPT_MUON ? 0.95f : 0.0f;
    c.nesterov = kind == OPT_MUON;  // Muon: Nesterov unless asked otherwise
    c.adamw_lr_mult = 1.0f;
    return c;
}

// 1 when the configuration is usable; else 0 with a message naming the offending flags.
static inline int optim_config_check(const OptimConfig* c, char* msg, size_t size) {
    const char* kn = optim_kind_name(c->kind);
    msg[0] = '\0';
    if ((int)c->kind < (int)OPT_ADAMW || (int)c->kind > (int)OPT_KIND_LAST) {
        snprintf(msg, size, "--optimizer: unknown optimizer %d (adamw, sgd, lamb, lion, muon or adam-mini)", (int)c->kind);
    } else if ((int)c->state < (int)OPT_STATE_FP32 || (int)c->state > (int)OPT_STATE_LAST) {
        snprintf(msg, size, "--opt-state: unknown state precision %d (fp32, bf16, int8, fp16 or 4bit)", (int)c->state);
    } else if (c->state == OPT_STATE_FP16 && c->kind != OPT_ADAMW && c->kind != OPT_ADAM_MINI) {
        snprintf(msg, size, "--opt-state fp16 is AdamW's and Adam-mini's (m and sqrt(v) scaled by 2^14, llmc/optim/storage.h); "
                 "--optimizer %s takes fp32, bf16, int8 or 4bit state", kn);
    } else if (c->state != OPT_STATE_FP32 && c->kind == OPT_SGD && c->momentum == 0.0f) {
        snprintf(msg, size, "--opt-state %s with --optimizer sgd --momentum 0: plain SGD keeps no state to store in %s",
                 optim_precision_name(c->state), optim_precision_name(c->state));
    } else if (c->amsgrad && c->kind != OPT_ADAMW) {
        snprintf(msg, size, "--amsgrad is an AdamW option (got --optimizer %s)", kn);
    } else if (c->nesterov && c->kind != OPT_SGD && c->kind != OPT_MUON) {
        snprintf(msg, size, "--nesterov is an SGD option (got --optimizer %s)", kn);
    } else if (c->kind != OPT_SGD && c->kind != OPT_MUON && (c->momentum != 0.0f || c->dampening != 0.0f)) {
        snprintf(msg, size, "--momentum is an SGD and Muon option (got --optimizer %s; Lion's momentum is beta2)", kn);
    } else if (c->kind == OPT_MUON && !(c->momentum >= 0.0f && c->momentum < 1.0f)) {
        snprintf(msg, size, "--momentum %g: Muon's momentum must be in [0, 1)", c->momentum);
    } else if (c->kind == OPT_MUON && c->dampening != 0.0f) {
        snprintf(msg, size, "--optimizer muon: dampening %g (Muon has none)", c->dampening);
    } else if (c->kind == OPT_MUON && c->muon_scale != MUON_SCALE_RMS && c->muon_scale != MUON_SCALE_ORIG) {
        snprintf(msg, size, "--muon-scale: unknown shape scale %d (rms or orig)", c->muon_scale);
    } else if (c->kind == OPT_MUON && !(c->adamw_lr_mult >= 0.0f && isfinite(c->adamw_lr_mult))) {
        snprintf(msg, size, "--muon-adamw-lr: the AdamW tensors' learning rate ratio %g (finite, >= 0 expected)",
                 c->adamw_lr_mult);
    } else if (c->kind == OPT_SGD && !(c->momentum >= 0.0f && c->momentum < 1.0f)) {
        snprintf(msg, size, "--momentum %g: expected a value in [0, 1)", c->momentum);
    } else if (c->kind == OPT_SGD && !(c->dampening >= 0.0f && c->dampening <= 1.0f)) {
        snprintf(msg, size, "SGD dampening %g: expected a value in [0, 1]", c->dampening);
    } else if (c->kind == OPT_SGD && c->nesterov && (c->momentum <= 0.0f || c->dampening != 0.0f)) {
        snprintf(msg, size, "--nesterov needs --momentum > 0 and no dampening (got momentum %g, dampening %g)",
                 c->momentum, c->dampening);
    } else if (c->kind != OPT_SGD && !(c->beta1 >= 0.0f && c->beta1 < 1.0f && c->beta2 >= 0.0f && c->beta2 < 1.0f)) {
        snprintf(msg, size, "--optimizer %s: beta1 %g, beta2 %g (each in [0, 1) expected)", kn, c->beta1, c->beta2);
    } else if ((c->kind == OPT_ADAMW || c->kind == OPT_LAMB || c->kind == OPT_MUON || c->kind == OPT_ADAM_MINI) &&
               !(c->eps > 0.0f && isfinite(c->eps))) {
        snprintf(msg, size, "--optimizer %s: eps %g (a positive number expected)", kn, c->eps);
    }
    return msg[0] == '\0';
}

// Fatal unless the segments are sorted, contiguous and non-empty, cover [0, n) of the step's
// buffers (param, the parameters' place, is free), lie inside their tensors, and have finite,
// non-negative weight decay and lr multipliers.
static inline void optim_segments_check(const OptimSegment* segs, int nseg, size_t n) {
    if (nseg < 1 || segs == NULL) ls_fatal("optimizer: %d segments (at least 1 needed)", nseg);
    size_t next = 0;
    for (int s = 0; s < nseg; s++) {
        if (segs[s].offset != next || segs[s].count == 0) {
            ls_fatal("optimizer: segment %d covers [%zu, %zu) but must start at %zu and be non-empty", s,
                     segs[s].offset, segs[s].offset + segs[s].count, next);
        }
        if (segs[s].tensor_count < segs[s].count) {
            ls_fatal("optimizer: segment %d has %zu elements, more than its tensor's %zu", s, segs[s].count,
                     segs[s].tensor_count);
        }
        if (!(segs[s].weight_decay >= 0.0f && isfinite(segs[s].weight_decay)) ||
            !(segs[s].lr_mult >= 0.0f && isfinite(segs[s].lr_mult))) {
            ls_fatal("optimizer: segment %d has weight_decay %g, lr_mult %g (finite, >= 0 expected)", s,
                     segs[s].weight_decay, segs[s].lr_mult);
        }
        next += segs[s].count;
    }
    if (next != n) ls_fatal("optimizer: the segments cover %zu elements, the parameters are %zu", next, n);
}

// Fatal unless each segment holds whole Adam-mini blocks of its tensor (a cut inside one would split
// its mean of g^2 between two states).
static inline void optim_mini_check(const OptimSegment* segs, int nseg) {
    for (int s = 0; s < nseg; s++) {
        const OptimSegment* g = &segs[s];
        const size_t e = g->trel + g->count, last = optim_mini_index(g, e - 1);
        if (optim_mini_start(g, optim_mini_index(g, g->trel)) != g->trel ||
            optim_mini_start(g, last) + optim_mini_len(g, last) != e) {
            ls_fatal("optimizer: adam-mini: segment %d [%zu, %zu) of its tensor cuts a block of one second moment", s,
                     g->trel, e);
        }
    }
}

// ----------------------------------------------------------------------------
// the state

typedef struct {
    OptimConfig cfg;
    size_t n;              // parameters
    int nseg;
    OptimSegment* segs;      // (nseg) the segment table (a copy)
    size_t* block0;        // (nseg + 1) first OPT_BLOCK block of each segment; [nseg] = nblocks
    size_t* small_off;     // (nseg) int8, 4bit: offset of a small tensor's fp32 state, or OPT_NOT_SMALL
    size_t* rank1_off;     // (nseg) 4bit: offset of a segment's v scales (optim_rank1_build), or OPT_NOT_SMALL
    size_t nblocks, nsmall, nrank1;
    size_t rank1_stride;   // 4bit: the new scales' distance from the stored ones (nrank1; Muon's AdamW
                           // sub-states on the GPU: their parent's, whose scales they point into)
    size_t* adam_off;      // (nseg) Muon: a segment's first element in the packed v of the AdamW tensors, or
                           // OPT_NOT_SMALL for a matrix
    size_t nadam;          // Muon: elements of the AdamW tensors (v's length)
    size_t nwork;          // Muon: scratch floats (muon_work_floats)
    size_t* mini0;         // (nseg + 1) Adam-mini: each segment's first block in vmini (optim_mini_build)
    size_t nmini;          // Adam-mini: its blocks
    OptimGemm gemm;        // Muon: the matrix multiply of Newton-Schulz (optim_engine_set_gemm)
    OptimGemmBatched gemm_batched;  // Muon on the GPU: its batched multiply, in elements of gemm_elem bytes
    int gemm_elem;
    void* muon_plan;       // Muon on the GPU: its runs and AdamW sub-states (llmc/optim/muon.cuh)
    int params_at_offset;  // the CPU step's params are the view's master weights, indexed as the state
                           // (OptimTable.params_at_offset; --offload cpu)
    // state, carved from `memory`; NULL where the configuration has none
    float* m;              // (n) fp32 first moment: AdamW, LAMB, Lion; SGD's momentum buffer
    float* v;              // (n) fp32 second moment: AdamW, LAMB; (nadam) Muon's AdamW tensors
    float* vmax;           // (n) fp32 AMSGrad max of v
    uint16_t* m16;         // (n) bf16 m (--opt-state bf16; every optimizer with state)
    uint16_t* v16;         // (n) bf16 v (AdamW, LAMB)
    uint16_t* vmax16;      // (n) bf16 vmax (AMSGrad)
    unsigned char* qm;     // (n) int8 codes of m, signed map (--opt-state int8; every optimizer with state)
    unsigned char* qv;     // (n) int8 codes of v, unsigned map (AdamW, LAMB)
    unsigned char* qvmax;  // (n) int8 codes of vmax, unsigned map (AMSGrad)
    float* absmax_m;       // (nblocks)
    float* absmax_v;       // (nblocks)
    float* absmax_vmax;    // (nblocks)
    float* m32;            // (nsmall) fp32 m, v, vmax of the tensors under QUANT8_MIN_ELEMS
    float* v32;            // (nsmall)
    float* vmax32;         // (nsmall)
    float* maps;           // (QUANT8_MAP_FLOATS) the quantization maps
    unsigned char* q4m;    // (nblocks * QUANT4_BLOCK_BYTES) 4-bit codes of m (--opt-state 4bit; llmc/optim/quant4.h)
    unsigned char* q4v;    // (nblocks * QUANT4_BLOCK_BYTES) 4-bit codes of v (AdamW)
    unsigned char* q4vmax; // (nblocks * QUANT4_BLOCK_BYTES) 4-bit codes of vmax (AMSGrad)
    float* absmax4_m;      // (nblocks * QUANT4_GROUPS) m's absmax per group of QUANT4_GROUP
    float* rank1_v;        // (2 * nrank1) v's row and column maxima: as stored, then the step's new ones
    float* rank1_vmax;     // (2 * nrank1) vmax's
    float* map4;           // (QUANT4_MAP_FLOATS) m's 4-bit map and its midpoints
    float* vmini;          // (nmini) Adam-mini: v per block (fp32 at every storage)
    float* partials;       // (2 * nblocks) LAMB: per-block sums of p^2 and u^2
    float* trust;          // (nseg) LAMB: the trust ratios of the last step
    float* work;           // (nwork) Muon: Newton-Schulz's scratch, outside the block (not state, never
                           // saved: overwritten every step); the engine's, or owned (owns_work)
    int owns_work;
    OptimReduce reduce;    // LAMB under ZeRO-1: its tensors' sums over the processes (hook NULL: off)
    Quant8Index* q8_index; // (2) host int8 state: the CPU's quantize indexes (m, v); 130 KB, not state
    void* memory;          // the block holding all of the above
    size_t bytes;          // its size (optim_state_bytes)
    int owns_memory;       // 1: the free function frees it
    // a state in device memory (llmc/optim/engine.cuh): the tables' device copies
    int on_device;
    OptimSegment* d_segs;    // (nseg)
    size_t* d_block0;      // (nseg + 1)
    size_t* d_small_off;   // (nseg)
    size_t* d_rank1_off;   // (nseg)
    size_t* d_mini0;       // (nseg + 1) Adam-mini, else NULL
} OptimState;

static inline size_t optim_align64(size_t x) { return (x + 63) & ~(size_t)63; }

// Sets every state pointer of st (cfg, n, nseg, nblocks, nsmall already set) to its place in a
// block starting at `base` (host or device memory: only addresses are computed), and st->bytes.
// base 0 computes the size only.
// NOLINTBEGIN(performance-no-int-to-ptr): the base is an address of host or device memory, or 0
// to compute the size only, so the carving is integer arithmetic turned into pointers on purpose.
static inline void optim_state_carve(OptimState* st, uintptr_t base) {
    const OptimConfig* c = &st->cfg;
    const size_t n = st->n;
    const int adam = c->kind == OPT_ADAMW, ams = adam && c->amsgrad;
    size_t off = 0;
#define OPT_CARVE(field, T, count, needed)                                                   \
    do {                                                                                     \
        st->field = NULL;                                                                    \
        if ((needed) && (count) > 0) {                                                       \
            st->field = (T*)(base + off);                                                    \
            off += optim_align64((size_t)(count) * sizeof(T));                               \
        }                                                                                    \
    } while (0)
    const int f32 = c->state == OPT_STATE_FP32, i8 = c->state == OPT_STATE_INT8, q4 = c->state == OPT_STATE_4BIT;
    const int b16 = c->state == OPT_STATE_BF16 || c->state == OPT_STATE_FP16;  // (16-bit buffers: bf16 or fp16)
    // a first moment (AdamW, LAMB, Lion; SGD's momentum buffer), a second moment (AdamW, LAMB)
    const int muon = c->kind == OPT_MUON;
    const int has_m = adam || muon || c->kind == OPT_ADAM_MINI || c->kind == OPT_LAMB || c->kind == OPT_LION || (c->kind == OPT_SGD && c->momentum != 0.0f);
    const int has_v = adam || c->kind == OPT_LAMB;
    // (Muon: v for its AdamW tensors only, packed; absmax_v and v32 indexed as m's blocks and smalls)
    const size_t nv = muon ? st->nadam : n;
    OPT_CARVE(m, float, n, has_m && f32);
    OPT_CARVE(v, float, nv, (has_v || muon) && f32);
    OPT_CARVE(vmax, float, n, ams && f32);
    OPT_CARVE(m16, uint16_t, n, has_m && b16);
    OPT_CARVE(v16, uint16_t, nv, (has_v || muon) && b16);
    OPT_CARVE(vmax16, uint16_t, n, ams && b16);
    OPT_CARVE(qm, unsigned char, n, has_m && i8);
    OPT_CARVE(qv, unsigned char, nv, (has_v || muon) && i8);
    OPT_CARVE(qvmax, unsigned char, n, ams && i8);
    OPT_CARVE(absmax_m, float, st->nblocks, has_m && i8);
    OPT_CARVE(absmax_v, float, st->nblocks, (has_v || muon) && i8);
    OPT_CARVE(absmax_vmax, float, st->nblocks, ams && i8);
    OPT_CARVE(m32, float, st->nsmall, has_m && (i8 || q4));
    OPT_CARVE(v32, float, st->nsmall, (has_v || muon) && (i8 || q4));
    OPT_CARVE(vmax32, float, st->nsmall, ams && (i8 || q4));
    OPT_CARVE(maps, float, QUANT8_MAP_FLOATS, has_m && i8);
    OPT_CARVE(q4m, unsigned char, st->nblocks * QUANT4_BLOCK_BYTES, has_m && q4);
    OPT_CARVE(q4v, unsigned char, muon ? nv / 2 : st->nblocks * QUANT4_BLOCK_BYTES, (has_v || muon) && q4);  // (Muon: nv in whole blocks)
    OPT_CARVE(q4vmax, unsigned char, st->nblocks * QUANT4_BLOCK_BYTES, ams && q4);
    OPT_CARVE(absmax4_m, float, st->nblocks * QUANT4_GROUPS, has_m && q4);
    OPT_CARVE(rank1_v, float, 2 * st->nrank1, (has_v || muon) && q4);
    OPT_CARVE(rank1_vmax, float, 2 * st->nrank1, ams && q4);
    OPT_CARVE(map4, float, QUANT4_MAP_FLOATS, has_m && q4);
    OPT_CARVE(vmini, float, st->nmini, c->kind == OPT_ADAM_MINI);
    OPT_CARVE(partials, float, 2 * st->nblocks, c->kind == OPT_LAMB);
    OPT_CARVE(trust, float, (size_t)st->nseg, c->kind == OPT_LAMB);
#undef OPT_CARVE
    st->bytes = off;
}
// NOLINTEND(performance-no-int-to-ptr)

// Bytes of optimizer state for these parameters (the whole block optim_state_init carves;
// the segment tables, a few KB of host memory, are not counted).
static inline size_t optim_state_bytes(const OptimConfig* cfg, const OptimSegment* segs, int nseg, size_t n) {
    OptimState st;
    memset(&st, 0, sizeof st);
    st.cfg = *cfg;
    st.n = n;
    st.nseg = nseg;
    size_t* tmp = (size_t*)mallocCheck(((size_t)nseg + 1) * sizeof(size_t));
    st.nblocks = optim_blocks_build(segs, nseg, tmp);
    st.nsmall = optim_small_build(segs, nseg, tmp);
    size_t* r1 = (size_t*)mallocCheck(((size_t)nseg + 1) * sizeof(size_t));
    st.nrank1 = optim_rank1_build(segs, nseg, tmp, r1);
    free(r1);
    st.nadam = muon_adam_build(segs, nseg, muon_adam_align(cfg->state), tmp);
    st.nmini = cfg->kind == OPT_ADAM_MINI ? optim_mini_build(segs, nseg, tmp) : 0;
    free(tmp);
    optim_state_carve(&st, 0);
    return st.bytes;
}

// Bytes of scratch the step needs beside the state (Muon's Newton-Schulz on the host; 0 for the
// others): not part of the block, not saved.
static inline size_t optim_state_work_bytes(const OptimConfig* cfg, const OptimSegment* segs, int nseg) {
    return cfg->kind == OPT_MUON ? muon_work_floats(segs, nseg, cfg->muon_qkv_joined) * sizeof(float) : 0;
}

// The state as a fresh run starts it: moments 0 (int8: the codes of 0, absmax 0), and the maps.
// Host memory only (the GPU side: optim_state_zero_device in llmc/optim/engine.cuh).
static inline void optim_state_zero(OptimState* st) {
    memset(st->memory, 0, st->bytes);
    if (st->qm != NULL) memset(st->qm, QUANT8_ZERO_SIGNED, st->n);
    if (st->qv != NULL) memset(st->qv, QUANT8_ZERO_UNSIGNED, st->cfg.kind == OPT_MUON ? st->nadam : st->n);
    if (st->qvmax != NULL) memset(st->qvmax, QUANT8_ZERO_UNSIGNED, st->n);
    if (st->maps != NULL) quant8_maps(st->maps, st->maps + 256);
    if (st->q4m != NULL) memset(st->q4m, QUANT4_ZERO_BYTE, st->nblocks * QUANT4_BLOCK_BYTES);
    if (st->map4 != NULL) quant4_signed_map(st->map4);
    if (st->trust != NULL) {
        for (int s = 0; s < st->nseg; s++) st->trust[s] = 1.0f;
    }
}

// Fills in st's tables and carves the state. memory: NULL to allocate (owned, freed by
// optim_state_free), else the caller's block of optim_state_bytes() bytes, 16-byte
// aligned (borrowed; buffers start at multiples of 64 bytes from it). Fatal on an invalid configuration or segment table. Host memory is zeroed
// (optim_state_zero); a device block (`device` 1) is left to the caller.
static inline void optim_state_setup(OptimState* st, const OptimConfig* cfg, const OptimSegment* segs,
                                         int nseg, size_t n, void* memory, int device) {
    char why[256];
    if (!optim_config_check(cfg, why, sizeof why)) ls_fatal("%s", why);
    optim_segments_check(segs, nseg, n);
    memset(st, 0, sizeof *st);
    st->cfg = *cfg;
    st->n = n;
    st->nseg = nseg;
    st->segs = (OptimSegment*)mallocCheck((size_t)nseg * sizeof(OptimSegment));
    memcpy(st->segs, segs, (size_t)nseg * sizeof(OptimSegment));
    st->block0 = (size_t*)mallocCheck(((size_t)nseg + 1) * sizeof(size_t));
    st->small_off = (size_t*)mallocCheck((size_t)nseg * sizeof(size_t));
    st->rank1_off = (size_t*)mallocCheck((size_t)nseg * sizeof(size_t));
    st->nblocks = optim_blocks_build(segs, nseg, st->block0);
    const int quantized = cfg->state == OPT_STATE_INT8 || cfg->state == OPT_STATE_4BIT;
    st->nsmall = quantized ? optim_small_build(segs, nseg, st->small_off) : 0;
    if (st->nsmall == 0) {
        for (int s = 0; s < nseg; s++) st->small_off[s] = OPT_NOT_SMALL;
    }
    st->nrank1 = 0;
    for (int s = 0; s < nseg; s++) st->rank1_off[s] = OPT_NOT_SMALL;
    if (cfg->state == OPT_STATE_4BIT) {
        st->nrank1 = optim_rank1_build(segs, nseg, st->small_off, st->rank1_off);
        st->rank1_stride = st->nrank1;
        for (int s = 0; s < nseg; s++) {  // (the GPU walks a segment's rows and columns in 32 bits)
            if (segs[s].trel + segs[s].count > 0xffffffffu) {
                ls_fatal("optimizer: --opt-state 4bit: tensor piece %d reaches element %zu (4-bit state takes tensors of "
                         "under 2^32 elements)", s, segs[s].trel + segs[s].count);
            }
        }
    }
    if (cfg->kind == OPT_ADAM_MINI) {
        optim_mini_check(segs, nseg);
        st->mini0 = (size_t*)mallocCheck(((size_t)nseg + 1) * sizeof(size_t));
        st->nmini = optim_mini_build(segs, nseg, st->mini0);
    }
    if (cfg->kind == OPT_MUON) {
        st->adam_off = (size_t*)mallocCheck((size_t)nseg * sizeof(size_t));
        st->nadam = muon_adam_build(segs, nseg, muon_adam_align(cfg->state), st->adam_off);
        st->nwork = muon_work_floats(segs, nseg, cfg->muon_qkv_joined);
    }
    optim_state_carve(st, 0);
    if (device && memory == NULL && st->bytes > 0) ls_fatal("optimizer: a device state needs its device memory");
    if (cfg->state == OPT_STATE_INT8 && !device) {
        float maps[QUANT8_MAP_FLOATS];
        quant8_maps(maps, maps + 256);
        st->q8_index = (Quant8Index*)mallocCheck(2 * sizeof(Quant8Index));
        if (!quant8_index_build(maps, &st->q8_index[0]) || !quant8_index_build(maps + 256, &st->q8_index[1])) {
            ls_fatal("optimizer: the 8-bit maps are denser than the quantize index allows (QUANT8_FAST_STEPS)");
        }
    }
    if (memory == NULL && !device) {
        if (posix_memalign(&memory, 64, st->bytes > 0 ? st->bytes : 64) != 0) {
            ls_fatal("optimizer: out of host memory allocating %zu bytes of state", st->bytes);
        }
        st->owns_memory = 1;
        if (st->nwork > 0) {  // a state of its own: its scratch too (the engine's views: the engine's)
            st->work = (float*)mallocCheck(st->nwork * sizeof(float));
            st->owns_work = 1;
        }
    }
    if (((uintptr_t)memory & 15u) != 0) ls_fatal("optimizer: state memory %p is not 16-byte aligned", memory);
    st->memory = memory;
    optim_state_carve(st, (uintptr_t)memory);
    if (!device) optim_state_zero(st);
}

static inline void optim_state_init(OptimState* st, const OptimConfig* cfg, const OptimSegment* segs,
                                        int nseg, size_t n, void* memory) {
    optim_state_setup(st, cfg, segs, nseg, n, memory, 0);
}

// Frees what st owns; accepts a zeroed or already freed state. (A device state:
// optim_state_free_device.)
static inline void optim_state_free(OptimState* st) {
    if (st == NULL) return;
    if (st->on_device) ls_fatal("optimizer: optim_state_free on a device state (use optim_state_free_device)");
    if (st->owns_memory) free(st->memory);
    if (st->owns_work) free(st->work);
    free(st->q8_index);
    free(st->small_off);
    free(st->rank1_off);
    free(st->adam_off);
    free(st->mini0);
    free(st->block0);
    free(st->segs);
    st->segs = NULL;  // (the memset below says it too; the static analyzer follows this better)
    st->block0 = st->small_off = st->rank1_off = st->adam_off = st->mini0 = NULL;
    st->q8_index = NULL;
    st->memory = NULL;
    memset(st, 0, sizeof *st);
}

// The state's buffers per slot (m, v, vmax), as the update reads them.
static inline OptimSlots optim_state_slots(const OptimState* st) {
    OptimSlots o = {{st->m, st->v, st->vmax},
                    {st->m16, st->v16, st->vmax16},
                    {st->qm, st->qv, st->qvmax},
                    {st->absmax_m, st->absmax_v, st->absmax_vmax},
                    {st->m32, st->v32, st->vmax32},
                    st->maps,
                    {st->q4m, st->q4v, st->q4vmax},
                    st->absmax4_m,
                    st->map4,
                    {NULL, st->rank1_v, st->rank1_vmax},
                    st->on_device ? st->d_rank1_off : st->rank1_off,
                    st->rank1_stride,
                    st->nrank1,
                    st->vmini,
                    st->on_device ? st->d_mini0 : st->mini0};
    return o;
}

#endif // LLMC_OPTIM_STATE_H

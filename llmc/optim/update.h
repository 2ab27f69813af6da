/*
 update.h: the optimizer's CPU update, written once for every rule (llmc/optim/rules.h) and every
 storage (llmc/optim/storage.h), over a table of segments (llmc/optim/segments.h: the whole model,
 or a placement's cut of it: a ZeRO-1 shard, a BAdam block, an offload chunk).

   for each block of OPT_BLOCK elements (OpenMP threads split the blocks):
       x[slot] = the block's state as fp32     update_block_load   (fp32: the state itself)
       the rule on each element (p, g, x)      update_block_rule   (rules.h, one loop per rule)
       the state stored back                    update_block_store  (16-bit: stochastic rounding,
                                                                     int8: requantized per block,
                                                                     4bit: per group and rank-1)
   4-bit state first computes v's (and vmax's) new row and column maxima (update4_scales: the new
   values as the rule will compute them), which its codes are quantized with (llmc/optim/quant4.h).
   LAMB runs two passes: the moments and per-block sums of p^2 and u^2, then per tensor the trust
   ratio, then the update from the moments as stored (the direction applied is the one measured).

 The GPU kernels (llmc/optim/update.cuh) call the same element rules
 and storage functions in the same order, so a CPU step and a GPU step give the same bits; the
 blocks are only a unit of work (every rule but LAMB is elementwise, so the cut changes no value).

 Deterministic reductions: LAMB's sums have a fixed order that does not depend on the number of
 threads (on the CPU) or on the grid (on the GPU): within a block, lane j % 1024 accumulates
 elements j and j + 1024 with fmaf, four consecutive lanes are added left to right (a GPU
 thread's 128-bit load), and the 256 sums are added in a halving tree (optim_tree256_*); the
 blocks of a tensor are summed in double by 256 lanes (block c into lane c % 256, in order) and
 the same tree.

 Bytes moved per parameter (fp32 params and grads; k state values: AdamW 2, AMSGrad 3, LAMB 2,
 SGD with momentum and Lion 1): 12 + 8k fp32, 12 + 4k bf16 / fp16, ~12 + 2k int8, ~12 + k 4bit
 (AdamW reads v's codes and g twice: +4.5 B); LAMB reads its state twice (fp32 40 B).
*/
#ifndef LLMC_OPTIM_UPDATE_H
#define LLMC_OPTIM_UPDATE_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "llmc/optim/quant8.h"
#include "llmc/optim/rules.h"
#include "llmc/optim/segments.h"
#include "llmc/optim/storage.h"
#include "llmc/utils.h"

// The table one step runs over: its segments and their blocks (optim_blocks_build), and for int8
// state the small tensors' places in the packed fp32 state (optim_small_build) and the CPU's
// quantize indexes of the two maps (signed, unsigned: quant8_index_build).
typedef struct {
    const OptimSegment* segs;
    int nseg;
    const size_t* block0;     // (nseg + 1)
    const size_t* small_off;  // (nseg) int8 only: OPT_NOT_SMALL, or the segment's place in `small`
    const Quant8Index* ix;    // (2) int8 only
    const size_t* mini0;      // (nseg + 1) Adam-mini only: each segment's first block in the v of blocks
    int params_at_offset;     // 1: the params buffer is the view's master weights, indexed by offset as the
                              // state (--offload cpu's host update); 0: by param, the global index (which
                              // keys stochastic rounding either way)
} OptimTable;

// Where block `at`'s parameters start in the params buffer of table t.
static inline size_t optim_table_pstart(const OptimTable* t, const OptimBlockAt* at) {
    return t->params_at_offset ? at->start : at->pstart;
}

// ----------------------------------------------------------------------------
// a block's state as fp32: loaded, then stored back

// 4-bit v, vmax: each element's scale min(R[r], C[c]) of block b into sc (len), from the scales
// R (the rows', then the columns': C); row by row, so that the loops vectorize.
static inline void update4_block_scales(const OptimTable* t, const OptimBlockAt* at, const float* R, float* sc) {
    const OptimSegment* sg = &t->segs[at->s];
    const size_t w = optim_segment_width(sg), e = sg->trel + at->rel;
    const float* C = R + optim_segment_rows(sg);
    size_t r = e / w - optim_segment_row0(sg), col = e % w;
    for (size_t j = 0; j < at->len; r++, col = 0) {
        const size_t run = w - col < at->len - j ? w - col : at->len - j;  // the rest of row r in the block
        const float rr = R[r];
        const float* cc = C + col;
        float* out = sc + j;
        #pragma omp simd
        for (size_t k = 0; k < run; k++) out[k] = storage4_min(rr, cc[k]);
        j += run;
    }
}

// 4-bit: the slot's values of block b (not a small tensor's) into buf; v and vmax with the scales
// as stored (fresh 0) or the step's new ones (fresh 1: what was just stored, read back).
static inline void update4_block_load(const OptimSlots* st, int slot, const OptimTable* t, const OptimBlockAt* at,
                                      size_t b, float* buf, int fresh) {
    const size_t len = at->len;
    const unsigned char* q = st->q4[slot] + b * QUANT4_BLOCK_BYTES;
    if (slot == OPT_SLOT_M) {
        const float* am = st->absmax4 + b * QUANT4_GROUPS;
        const float* map = st->map4;
        #pragma omp simd
        for (size_t j = 0; j < len; j++) buf[j] = storage4_load_m(map, q, j, am[j / QUANT4_GROUP]);
        return;
    }
    float sc[OPT_BLOCK];
    update4_block_scales(t, at, st->rank1[slot] + (fresh ? st->nrank1 : 0) + st->rank1_off[at->s], sc);
    #pragma omp simd
    for (size_t j = 0; j < len; j++) buf[j] = storage4_load_v(q, j, sc[j]);
}

// The slot's values of block b (at) as fp32: a pointer into the state when it is fp32 (the rule
// updates it in place), else buf filled from the stored values.
static inline float* update_block_load(const OptimSlots* st, OptimStatePrecision prec, int slot, const OptimTable* t,
                                       const OptimBlockAt* at, size_t b, float* buf) {
    const size_t len = at->len;
    if (prec == OPT_STATE_FP32) return st->f32[slot] + at->start;
    if (prec == OPT_STATE_4BIT) {
        if (t->small_off[at->s] != OPT_NOT_SMALL) return st->small[slot] + t->small_off[at->s] + at->rel;
        update4_block_load(st, slot, t, at, b, buf, 0);
        return buf;
    }
    if (prec == OPT_STATE_INT8) {
        if (t->small_off[at->s] != OPT_NOT_SMALL) return st->small[slot] + t->small_off[at->s] + at->rel;
        const unsigned char* q = st->q8[slot] + at->start;
        const float* map = storage8_map(st->maps, slot);
        const float am = st->absmax[slot][b];
        #pragma omp simd
        for (size_t j = 0; j < len; j++) buf[j] = map[(int32_t)q[j]] * am;  // (32-bit indexes: a gather)
        return buf;
    }
    const uint16_t* h = st->h16[slot] + at->start;
    const int fp16 = prec == OPT_STATE_FP16;
    #pragma omp simd
    for (size_t j = 0; j < len; j++) buf[j] = storage16_load(h[j], fp16, slot);
    return buf;
}

// 4-bit: the slot's values x of block b as codes (llmc/optim/quant4.h): m with each group's new
// absmax, v and vmax with the step's new rank-1 scales (update4_scales). Codes past the block's
// end (an odd length) are 0.
static inline void update4_block_store(const OptimSlots* st, int slot, const OptimTable* t, const OptimBlockAt* at,
                                       size_t b, const float* x) {
    const size_t len = at->len;
    unsigned char* q = st->q4[slot] + b * QUANT4_BLOCK_BYTES;
    unsigned char c[OPT_BLOCK + 1];
    if (slot == OPT_SLOT_M) {
        float* am = st->absmax4 + b * QUANT4_GROUPS;
        const float* map = st->map4;
        for (size_t g0 = 0; g0 < len; g0 += QUANT4_GROUP) {
            const size_t g1 = g0 + QUANT4_GROUP < len ? g0 + QUANT4_GROUP : len;
            float mx = 0.0f;
            #pragma omp simd reduction(max : mx)
            for (size_t j = g0; j < g1; j++) mx = fabsf(x[j]) > mx ? fabsf(x[j]) : mx;
            const float inv = quant4_inv(mx);
            #pragma omp simd
            for (size_t j = g0; j < g1; j++) c[j] = (unsigned char)quant4_quantize_signed(map, x[j] * inv);
            am[g0 / QUANT4_GROUP] = mx;
        }
    } else {
        float sc[OPT_BLOCK];
        update4_block_scales(t, at, st->rank1[slot] + st->nrank1 + st->rank1_off[at->s], sc);  // the new scales
        #pragma omp simd
        for (size_t j = 0; j < len; j++) c[j] = (unsigned char)quant4_quantize_linear(x[j] * quant4_inv(sc[j]));
    }
    if (len % 2) c[len] = 0;  // (the high half of the last byte)
    #pragma omp simd
    for (size_t k = 0; k < (len + 1) / 2; k++) q[k] = (unsigned char)(c[2 * k] | c[2 * k + 1] << 4);
}

// Stores the slot's updated values x of block b. readback: x becomes what was stored (LAMB's
// second pass and its sums read the stored moments).
static inline void update_block_store(const OptimSlots* st, OptimStatePrecision prec, int slot, const OptimTable* t,
                                      const OptimBlockAt* at, size_t b, float* x, unsigned long long key, int readback) {
    const size_t len = at->len;
    if (prec == OPT_STATE_FP32) return;  // updated in place
    if (prec == OPT_STATE_4BIT) {
        if (t->small_off[at->s] != OPT_NOT_SMALL) return;  // fp32, in place
        update4_block_store(st, slot, t, at, b, x);
        if (readback) update4_block_load(st, slot, t, at, b, x, 1);
        return;
    }
    if (prec == OPT_STATE_INT8) {
        if (t->small_off[at->s] != OPT_NOT_SMALL) return;  // fp32, in place
        unsigned char* q = st->q8[slot] + at->start;
        const int is_m = slot == OPT_SLOT_M;
        const float am = quant8_block_quantize_fast(x, len, &t->ix[is_m ? 0 : 1], is_m, q);
        st->absmax[slot][b] = am;
        if (readback) update_block_load(st, prec, slot, t, at, b, x);
        return;
    }
    uint16_t* h = st->h16[slot] + at->start;
    const size_t pstart = at->pstart;
    if (prec == OPT_STATE_BF16) {  // NOLINT(bugprone-branch-clone): a constant differs (one loop per storage vectorizes)
        #pragma omp simd
        for (size_t j = 0; j < len; j++) h[j] = storage16_store(x[j], 0, slot, key, pstart + j);
    } else {
        #pragma omp simd
        for (size_t j = 0; j < len; j++) h[j] = storage16_store(x[j], 1, slot, key, pstart + j);
    }
    if (readback) update_block_load(st, prec, slot, t, at, b, x);
}

// ----------------------------------------------------------------------------
// the elementwise rules over one block (one loop per rule and variant: each vectorizes)

// p, g: the block's parameters and gradients (len); x: its state per slot (rules.h's order).
static inline void update_block_rule(const OptimConfig* c, const OptimStepArgs* a, float* p, const float* g,
                                     float grad_scale, float* const* x, size_t len, float lr, float wd) {
    float *m = x[OPT_SLOT_M], *v = x[OPT_SLOT_V], *vmax = x[OPT_SLOT_VMAX];
    switch (c->kind) {
        case OPT_ADAMW:
            if (c->amsgrad) {
                #pragma omp simd
                for (size_t j = 0; j < len; j++) p[j] = rule_amsgrad(p[j], g[j] * grad_scale, &m[j], &v[j], &vmax[j], lr, wd, a);
            } else {
                #pragma omp simd
                for (size_t j = 0; j < len; j++) p[j] = rule_adamw(p[j], g[j] * grad_scale, &m[j], &v[j], lr, wd, a);
            }
            break;
        case OPT_SGD:
            if (m == NULL) {  // momentum 0: no state
                #pragma omp simd
                for (size_t j = 0; j < len; j++) p[j] = rule_sgd_plain(p[j], g[j] * grad_scale, lr, wd);
            } else if (c->nesterov) {  // NOLINT(bugprone-branch-clone): the bodies differ in a constant
                #pragma omp simd
                for (size_t j = 0; j < len; j++) p[j] = rule_sgd(p[j], g[j] * grad_scale, &m[j], 1, lr, wd, a);
            } else {
                #pragma omp simd
                for (size_t j = 0; j < len; j++) p[j] = rule_sgd(p[j], g[j] * grad_scale, &m[j], 0, lr, wd, a);
            }
            break;
        case OPT_LION:
            #pragma omp simd
            for (size_t j = 0; j < len; j++) p[j] = rule_lion(p[j], g[j] * grad_scale, &m[j], lr, wd, a);
            break;
        case OPT_LAMB:       // (update_lamb_cpu)
        case OPT_MUON:       // (llmc/optim/muon.h)
        case OPT_ADAM_MINI:  // (optim_update_cpu)
            break;
    }
}

// ----------------------------------------------------------------------------
// The fixed-order sums (see the top): 256 values added in a halving tree, x[t] += x[t + w] for
// w = 128, 64, ..., 1; the result is x[0]. Destroys x.
static inline float optim_tree256_f32(float* x) {
    for (int w = 128; w > 0; w >>= 1)
        for (int t = 0; t < w; t++) x[t] = x[t] + x[t + w];
    return x[0];
}
static inline double optim_tree256_f64(double* x) {
    for (int w = 128; w > 0; w >>= 1)
        for (int t = 0; t < w; t++) x[t] = x[t] + x[t + w];
    return x[0];
}

// ----------------------------------------------------------------------------
// Adam-mini: v per block of the tensor (llmc/params.h), from its mean of g^2

// The fixed-order sum of a block's (g * scale)^2 (len elements), as the GPU's kernel adds it: lane
// j % 256 accumulates its elements in order with fmaf, then the 256 lanes' halving tree.
static inline float adam_mini_block_sum(const float* g, size_t len, float scale) {
    float lane[256];
    for (int t = 0; t < 256; t++) lane[t] = 0.0f;
    for (size_t j0 = 0; j0 < len; j0 += 256) {
        const size_t cnt = len - j0 < 256 ? len - j0 : 256;
        const float* gg = g + j0;
        #pragma omp simd
        for (size_t t = 0; t < cnt; t++) {
            const float x = gg[t] * scale;
            lane[t] = fmaf(x, x, lane[t]);
        }
    }
    return optim_tree256_f32(lane);
}

// Every block's new v (inside the update's parallel region: an orphaned omp for, its barrier at the end).
static inline void adam_mini_v_cpu(const OptimStepArgs* a, const OptimTable* t, float* vmini, const float* grads,
                                   float grad_scale) {
    const size_t nmini = t->mini0[t->nseg];
    #pragma omp for schedule(static)
    for (size_t i = 0; i < nmini; i++) {
        const int s = optim_block_segment(t->mini0, t->nseg, i);
        const OptimSegment* sg = &t->segs[s];
        const size_t k = optim_mini_index(sg, sg->trel) + (i - t->mini0[s]);  // the block in the tensor
        const size_t len = optim_mini_len(sg, k);
        const float sum = adam_mini_block_sum(grads + sg->offset + (optim_mini_start(sg, k) - sg->trel), len, grad_scale);
        vmini[i] = rule_adam_mini_v(sum / (float)len, vmini[i], a);
    }
}

// Each element's block v of block b (at) into vb (len): runs of one block's value.
static inline void adam_mini_block_v(const OptimTable* t, const OptimBlockAt* at, const float* vmini, float* vb) {
    const OptimSegment* sg = &t->segs[at->s];
    const size_t e0 = sg->trel + at->rel, first = optim_mini_index(sg, sg->trel);
    for (size_t j = 0; j < at->len;) {
        const size_t k = optim_mini_index(sg, e0 + j);
        const size_t end = optim_mini_start(sg, k) + optim_mini_len(sg, k) - e0;  // the block's end, in the block b
        const size_t run = (end < at->len ? end : at->len) - j;
        const float v = vmini[t->mini0[at->s] + (k - first)];
        for (size_t r = 0; r < run; r++) vb[j + r] = v;
        j += run;
    }
}

// ----------------------------------------------------------------------------
// LAMB's sums and trust ratios


// Block b's sums of p^2 and u^2 into partials[b], partials[nblocks + b], with u from the moments
// m, v as stored: lane l accumulates elements l, then l + OPT_BLOCK / 2; four lanes, then a tree.
static inline void lamb_block_sums(const float* p, const float* m, const float* v, size_t len, float wd,
                                   const OptimStepArgs* a, float* partials, size_t nblocks, size_t b) {
    float ap[OPT_BLOCK / 2], au[OPT_BLOCK / 2];
    for (size_t j = 0; j < OPT_BLOCK / 2; j++) ap[j] = au[j] = 0.0f;
    for (size_t h = 0; h < 2; h++) {
        const size_t j0 = h * (OPT_BLOCK / 2);
        const size_t cnt = len > j0 ? (len - j0 < OPT_BLOCK / 2 ? len - j0 : OPT_BLOCK / 2) : 0;
        const float *pp = p + j0, *mm = m + j0, *vv = v + j0;
        #pragma omp simd
        for (size_t l = 0; l < cnt; l++) {
            const float u = rule_adam_direction(pp[l], mm[l], vv[l], wd, a);
            ap[l] = fmaf(pp[l], pp[l], ap[l]);
            au[l] = fmaf(u, u, au[l]);
        }
    }
    float tp[256], tu[256];
    for (size_t t = 0; t < 256; t++) {
        tp[t] = ((ap[4 * t] + ap[4 * t + 1]) + ap[4 * t + 2]) + ap[4 * t + 3];
        tu[t] = ((au[4 * t] + au[4 * t + 1]) + au[4 * t + 2]) + au[4 * t + 3];
    }
    partials[b] = optim_tree256_f32(tp);
    partials[nblocks + b] = optim_tree256_f32(tu);
}

// LAMB under ZeRO-1 (llmc/optim/engine.h): a tensor's pieces lie in several processes' tables, so
// its trust ratio needs their sums of squares added over the processes. hook(ctx, x, n) adds x over
// the processes in place, in the same order on every process; the segments' tensor ids are below
// ntensors (the same id for a tensor's pieces everywhere).
typedef struct {
    void (*hook)(void* ctx, double* x, int n);
    void* ctx;
    int ntensors;
} OptimReduce;

// The trust ratios when the tensors' pieces lie in several processes: per tensor id the sums of its
// segments' block sums (double, in block order), added over the processes, then each segment's ratio.
// The CPU and the GPU step (llmc/optim/update.cuh) both use it, so they agree bit for bit.
static inline void lamb_trust_reduced(const OptimSegment* segs, int nseg, const size_t* block0, const float* partials,
                                      const OptimReduce* red, float* trust) {
    const size_t nblocks = block0[nseg];
    double* t = (double*)calloc(2 * (size_t)red->ntensors, sizeof(double));
    if (t == NULL) ls_fatal("lamb: out of memory for %d tensor sums", red->ntensors);
    for (int s = 0; s < nseg; s++) {
        const int id = segs[s].tensor;
        if (id < 0 || id >= red->ntensors) ls_fatal("lamb: tensor id %d of segment %d (ids below %d)", id, s, red->ntensors);
        for (size_t b = block0[s]; b < block0[s + 1]; b++) {
            t[2 * (size_t)id] += (double)partials[b];
            t[2 * (size_t)id + 1] += (double)partials[nblocks + b];
        }
    }
    red->hook(red->ctx, t, 2 * red->ntensors);
    for (int s = 0; s < nseg; s++) trust[s] = rule_lamb_trust(t[2 * (size_t)segs[s].tensor], t[2 * (size_t)segs[s].tensor + 1]);
    free(t);
}

// LAMB's trust ratios after pass 1, inside the update's parallel region (the loop is an orphaned
// omp for): per segment, from the block sums of its tensor's pieces in this table (in double,
// fixed order; one piece: the segment's own blocks), or over the processes (red: ZeRO-1).
static inline void lamb_trust_cpu(const OptimSegment* segs, int nseg, const size_t* block0, const float* partials,
                                  const OptimReduce* red, float* trust) {
    if (red != NULL) {
        #pragma omp single
        lamb_trust_reduced(segs, nseg, block0, partials, red, trust);
        return;
    }
    const size_t nblocks = block0[nseg];
    #pragma omp for schedule(static)
    for (int s = 0; s < nseg; s++) {
        double lp[256], lu[256];
        for (int t = 0; t < 256; t++) lp[t] = lu[t] = 0.0;
        size_t b0, b1;
        optim_tensor_blocks(segs, nseg, block0, s, &b0, &b1);
        for (size_t c = 0; c < b1 - b0; c++) {
            lp[c % 256] += (double)partials[b0 + c];
            lu[c % 256] += (double)partials[nblocks + b0 + c];
        }
        trust[s] = rule_lamb_trust(optim_tree256_f64(lp), optim_tree256_f64(lu));
    }
}

// ----------------------------------------------------------------------------
// 4-bit state: the new rank-1 scales of v and vmax, before the update (llmc/optim/quant4.h)

// For each segment with scales: the new values of v (and AMSGrad's vmax) computed as the rule will
// (rules.h: rule_adam_v, rule_vmax), from the state as stored and the scaled gradient, and their
// row and column maxima written to the second half of the slots' scales (max is exact: any order
// and thread count give the same bits). Inside the update's parallel region (orphaned omp for).
static inline void update4_scales(const OptimConfig* c, const OptimStepArgs* a, const OptimTable* t,
                                  const OptimSlots* st, const float* grads, float grad_scale) {
    const int ams = c->kind == OPT_ADAMW && c->amsgrad;
    for (int s = 0; s < t->nseg; s++) {
        const size_t off = st->rank1_off[s];
        if (off == OPT_NOT_SMALL) continue;
        const OptimSegment* sg = &t->segs[s];
        const size_t w = optim_segment_width(sg), rows = optim_segment_rows(sg), r0 = optim_segment_row0(sg);
        const float* Rv = st->rank1[OPT_SLOT_V] + off;
        const float* Cv = Rv + rows;
        float* nRv = st->rank1[OPT_SLOT_V] + st->nrank1 + off;
        float* nCv = nRv + rows;
        const float* Rx = ams ? st->rank1[OPT_SLOT_VMAX] + off : NULL;
        const float* Cx = ams ? Rx + rows : NULL;
        float* nRx = ams ? st->rank1[OPT_SLOT_VMAX] + st->nrank1 + off : NULL;
        float* nCx = ams ? nRx + rows : NULL;
        #pragma omp for schedule(static)
        for (size_t j = 0; j < w; j++) {
            nCv[j] = 0.0f;
            if (ams) nCx[j] = 0.0f;
        }
        // (the loop below reduces into nCv, nCx: each thread's maxima, then combined)
        float* cv = nCv;
        float* cx = ams ? nCx : nCv;  // (no vmax: one element of v's, its max unchanged)
        #pragma omp for schedule(static) reduction(max : cv[:w], cx[:(ams ? w : 1)])
        for (size_t r = 0; r < rows; r++) {
            const size_t e0 = (r0 + r) * w, lo = e0 > sg->trel ? e0 - sg->trel : 0;
            const size_t hi = e0 + w - sg->trel < sg->count ? e0 + w - sg->trel : sg->count;
            float mv = 0.0f, mx = 0.0f;
            for (size_t k = lo; k < hi;) {  // k: the element in the segment; the row's part in one block at a time
                const size_t b = t->block0[s] + k / OPT_BLOCK, j0 = k % OPT_BLOCK, c0 = (sg->trel + k) % w;
                const size_t run = hi - k < OPT_BLOCK - j0 ? hi - k : OPT_BLOCK - j0;
                const unsigned char* qv = st->q4[OPT_SLOT_V] + b * QUANT4_BLOCK_BYTES;
                const float* g = grads + sg->offset + k;
                const float* ccv = Cv + c0;
                float* ncv = cv + c0;
                const float rv = Rv[r];
                if (!ams) {
                    #pragma omp simd reduction(max : mv)
                    for (size_t i = 0; i < run; i++) {
                        const float v = rule_adam_v(g[i] * grad_scale, storage4_load_v(qv, j0 + i, storage4_min(rv, ccv[i])), a);
                        mv = v > mv ? v : mv;
                        ncv[i] = v > ncv[i] ? v : ncv[i];
                    }
                } else {
                    const unsigned char* qx = st->q4[OPT_SLOT_VMAX] + b * QUANT4_BLOCK_BYTES;
                    const float* ccx = Cx + c0;
                    float* ncx = cx + c0;
                    const float rx = Rx[r];
                    #pragma omp simd reduction(max : mv, mx)
                    for (size_t i = 0; i < run; i++) {
                        const float v = rule_adam_v(g[i] * grad_scale, storage4_load_v(qv, j0 + i, storage4_min(rv, ccv[i])), a);
                        const float d = rule_vmax(v, storage4_load_v(qx, j0 + i, storage4_min(rx, ccx[i])));
                        mv = v > mv ? v : mv;
                        ncv[i] = v > ncv[i] ? v : ncv[i];
                        mx = d > mx ? d : mx;
                        ncx[i] = d > ncx[i] ? d : ncx[i];
                    }
                }
                k += run;
            }
            nRv[r] = mv;
            if (ams) nRx[r] = mx;
        }
    }
}

// After the update: the new scales become the stored ones.
static inline void update4_scales_commit(const OptimConfig* c, const OptimSlots* st) {
    for (int k = OPT_SLOT_V; k < optim_slots(c); k++) {
        memcpy(st->rank1[k], st->rank1[k] + st->nrank1, st->rank1_len * sizeof(float));
    }
}

// The bytes per parameter one CPU step moves (the count of the banner: fp32 params and grads, k
// state values each read and written, LAMB reading them twice; int8 ~1 B per value, 4bit 0.5 B,
// their per-block scales left out; 4-bit v's scales pass reads g and the codes again).
static inline double optim_update_bytes_per_param(const OptimConfig* c) {
    const int k = optim_slots(c);
    const double per = c->state == OPT_STATE_FP32 ? 4.0 : c->state == OPT_STATE_INT8 ? 1.0
                     : c->state == OPT_STATE_4BIT ? 0.5 : 2.0;
    double b = 12.0 + (c->kind == OPT_LAMB ? 3.0 : 2.0) * k * per;  // p read and written, g read
    if (c->state == OPT_STATE_4BIT && k > 1) b += 4.0 + 0.5 * (k - 1);
    return b;
}

// ----------------------------------------------------------------------------
// the step

// One step of the configured rule (not Muon: llmc/optim/muon.h) over table t: params (indexed by
// the segments' param) and grads (by their offset) and the state st (by offset, per slot).
// grad_scale: the clip scale. LAMB: partials (2 * nblocks) scratch, trust (nseg) written, red NULL
// or the sums over the processes (ZeRO-1).
static inline void optim_update_cpu(const OptimConfig* c, const OptimStepArgs* a, const OptimTable* t,
                                    const OptimSlots* st, float* params, const float* grads, float grad_scale,
                                    float* partials, float* trust, const OptimReduce* red) {
    const int nslot = optim_slots(c), lamb = c->kind == OPT_LAMB, mini = c->kind == OPT_ADAM_MINI;
    const OptimStatePrecision prec = c->state;
    const size_t nblocks = t->block0[t->nseg];
    if (lamb && (partials == NULL || trust == NULL)) ls_fatal("optimizer: LAMB's block sums or trust ratios are missing");
    if (mini && (t->mini0 == NULL || st->vmini == NULL)) ls_fatal("optimizer: Adam-mini's blocks are missing");
    const int scales = prec == OPT_STATE_4BIT && nslot > OPT_SLOT_V && st->rank1_len > 0;
    #pragma omp parallel
    {
        float buf[OPT_SLOTS][OPT_BLOCK];
        float* x[OPT_SLOTS] = {NULL, NULL, NULL};
        if (scales) update4_scales(c, a, t, st, grads, grad_scale);  // (its last loop ends in a barrier)
        if (mini) adam_mini_v_cpu(a, t, st->vmini, grads, grad_scale);  // (a barrier too)
        // the rule (LAMB: its moments and the block sums of pass 1)
        #pragma omp for schedule(static)
        for (size_t b = 0; b < nblocks; b++) {
            const OptimBlockAt at = optim_block_at(t->segs, t->block0, t->nseg, b);
            const OptimSegment* sg = &t->segs[at.s];
            float* p = params + optim_table_pstart(t, &at);
            const float* g = grads + at.start;
            for (int k = 0; k < nslot; k++) x[k] = update_block_load(st, prec, k, t, &at, b, buf[k]);
            if (lamb) {
                float *m = x[OPT_SLOT_M], *v = x[OPT_SLOT_V];
                #pragma omp simd
                for (size_t j = 0; j < at.len; j++) rule_adam_moments(g[j] * grad_scale, &m[j], &v[j], a);
            } else if (mini) {
                float* m = x[OPT_SLOT_M];
                float* vb = buf[OPT_SLOT_V];  // (no per-element v: its slot's buffer is free)
                adam_mini_block_v(t, &at, st->vmini, vb);
                const float lr = a->lr * sg->lr_mult, wd = sg->weight_decay;
                #pragma omp simd
                for (size_t j = 0; j < at.len; j++) p[j] = rule_adam_mini(p[j], g[j] * grad_scale, &m[j], vb[j], lr, wd, a);
            } else {
                update_block_rule(c, a, p, g, grad_scale, x, at.len, a->lr * sg->lr_mult, sg->weight_decay);
            }
            for (int k = 0; k < nslot; k++) update_block_store(st, prec, k, t, &at, b, x[k], a->rng_key, lamb);
            if (lamb) lamb_block_sums(p, x[OPT_SLOT_M], x[OPT_SLOT_V], at.len, sg->weight_decay, a, partials, nblocks, b);
        }
        if (lamb) {
            lamb_trust_cpu(t->segs, t->nseg, t->block0, partials, red, trust);
            if (scales) {  // pass 2 reads the moments as stored: with their new scales
                #pragma omp single
                update4_scales_commit(c, st);
            }
            // pass 2 (after the barrier above: every trust ratio is known): the update
            #pragma omp for schedule(static)
            for (size_t b = 0; b < nblocks; b++) {
                const OptimBlockAt at = optim_block_at(t->segs, t->block0, t->nseg, b);
                const OptimSegment* sg = &t->segs[at.s];
                const float step_lr = (a->lr * sg->lr_mult) * trust[at.s], wd = sg->weight_decay;
                float* p = params + optim_table_pstart(t, &at);
                const float* m = update_block_load(st, prec, OPT_SLOT_M, t, &at, b, buf[OPT_SLOT_M]);
                const float* v = update_block_load(st, prec, OPT_SLOT_V, t, &at, b, buf[OPT_SLOT_V]);
                #pragma omp simd
                for (size_t j = 0; j < at.len; j++) p[j] = rule_lamb_apply(p[j], m[j], v[j], step_lr, wd, a);
            }
        }
    }
    if (scales && !lamb) update4_scales_commit(c, st);
}

#endif // LLMC_OPTIM_UPDATE_H

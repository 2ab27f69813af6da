/*
 optim.h: the optimizer's host side. Hyperparameters, the segment table built from the
 parameter table, the global gradient norm and clip scale, the fused CPU AdamW, and the CPU
 updates of the optimizer family (AdamW + AMSGrad, bf16 and 8-bit AdamW state, SGD with momentum
 and Nesterov, LAMB, Lion). llmc/optim/state.h owns the state buffers and picks the update
 (optim_step_cpu); the GPU kernels (llmc/optim/adamw.cuh, llmc/optim/adamw_lowp.cuh, llmc/optim/kernels.cuh)
 perform the same operations in the same order, so a CPU update and its kernel agree bit for bit.

 AdamW, per element, with t = step (1, 2, ...) and s = clip scale (1 when the norm is below the clip):
   g = s * grad
   m = beta1 * m + (1 - beta1) * g
   v = beta2 * v + (1 - beta2) * g^2
   p -= lr * lr_mult * ( (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps) + wd * p )
 wd is the segment's weight decay (decoupled; 2-D weights only). The bias corrections are
 computed once per step outside the loop: with -O3 a powf inside the loop is not hoisted
 (errno), and the loop runs ~25x slower. One pass reads p, g, m, v and writes p, m, v: 28 bytes
 per parameter, so the CPU update is memory-bound (dev/cpu/adamw_bench.c measures it against a
 probe with the same access pattern).

 The family (lr = this step's lr * the segment's lr_mult, wd = the segment's weight decay; weight
 decay is DECOUPLED for every optimizer, p -= lr * wd * p as in AdamW, never added to the gradient):
   AdamW + AMSGrad  vmax = max(vmax, v); the update divides by sqrt(vmax / (1 - beta2^t)) + eps
                    (torch.optim.AdamW(amsgrad=True)). 36 B/param moved.
   AdamW bf16 state m, v (vmax) stored as bf16, rounded stochastically (llmc/optim/srng.h streams 1, 2, 3)
                    after the fp32 update, which uses the unrounded values. 20 B/param.
   AdamW int8 state m, v as 8-bit blockwise codes (llmc/optim/quant8.h): per tensor, blocks of
                    QUANT8_BLOCK with an fp32 absmax; tensors under QUANT8_MIN_ELEMS keep fp32 m, v.
                    Dequantize, update in fp32, requantize with the new absmax. 16 B/param.
                    AMSGrad: vmax too (unsigned map, its own absmax). 18 B/param.
   The bf16 and int8 state of SGD, Lion and LAMB: llmc/optim/lowp.h.
   SGD              torch.optim.SGD(momentum, dampening, nesterov) with decoupled weight decay:
                      buf = g at step 1, else momentum * buf + (1 - dampening) * g
                      d = nesterov ? g + momentum * buf : buf     (momentum 0: d = g, no state)
                      p -= lr * (d + wd * p)                      20 B/param (12 without momentum)
   LAMB             (You et al. 2019) Adam moments with bias correction, then per TENSOR (segment):
                      u = m_hat / (sqrt(v_hat) + eps) + wd * p
                      trust = ||p|| / ||u||  (1 when either norm is 0)
                      p -= lr * trust * u
                    Two passes over the data: (1) m, v, and the partial sums of p^2, u^2 per block
                    of OPT_BLOCK elements; then per tensor (the adjacent segments with one tensor
                    id: the pieces of a tensor a view cut at block boundaries) the block partials
                    summed in double (the trust ratio); (2) u again from the stored m, v, and the
                    update. 40 B/param.
   Lion             (Chen et al. 2023) c = beta1 * m + (1 - beta1) * g
                      p -= lr * (sign(c) + wd * p)
                      m = beta2 * m + (1 - beta2) * g             20 B/param
 Deterministic reductions: LAMB's sums have a fixed order that does not depend on the number of
 threads (on the CPU) or on the grid (on the GPU): within a block of OPT_BLOCK elements, lane
 j % 1024 accumulates elements j and j + 1024 with fmaf, four consecutive lanes are added left
 to right (a GPU thread's 128-bit load), and the 256 sums are added in a halving tree
 (optim_tree256_*); the blocks of a segment are summed in double by 256 lanes (block c into lane
 c % 256, in order) and the same tree. The GPU kernel does exactly this, so trust ratios agree.
*/
#ifndef LLMC_OPTIM_H
#define LLMC_OPTIM_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "llmc/params.h"
#include "llmc/optim/quant8.h"
#include "llmc/optim/rules.h"
#include "llmc/optim/srng.h"
#include "llmc/optim/storage.h"

// AdamW's element math, in the one order every CPU update and GPU kernel uses (explicit fmaf, the
// build has -ffp-contract=off: the same bits everywhere). g is the clipped gradient.
OPTIM_HD float adamw_m(float m, float g, float beta1, float one_minus_beta1) { return fmaf(beta1, m, one_minus_beta1 * g); }
OPTIM_HD float adamw_v(float v, float g, float beta2, float one_minus_beta2) { return fmaf(beta2, v, (one_minus_beta2 * g) * g); }
// The direction m^ / (sqrt(v^) + eps) + wd * p (LAMB's u too), and the updated parameter.
OPTIM_HD float adamw_direction(float p, float m, float v, float wd, float bc1, float bc2, float eps) {
    float upd = (m * bc1) / (sqrtf(v * bc2) + eps);
    return fmaf(wd, p, upd);
}
OPTIM_HD float adamw_param(float p, float m, float v, float lr, float wd, float bc1, float bc2, float eps) {
    return fmaf(-lr, adamw_direction(p, m, v, wd, bc1, bc2, eps), p);
}

// One whole fp32 AdamW element in place: p, m, v from the clipped gradient g.
typedef struct {
    float beta1, one_minus_beta1, beta2, one_minus_beta2, bc1, bc2, eps;
} AdamWConsts;

OPTIM_HD void adamw_element(float* p, float* m, float* v, float g, const AdamWConsts* k, float lr, float wd) {
    float mi = adamw_m(*m, g, k->beta1, k->one_minus_beta1), vi = adamw_v(*v, g, k->beta2, k->one_minus_beta2);
    *m = mi;
    *v = vi;
    *p = adamw_param(*p, mi, vi, lr, wd, k->bc1, k->bc2, k->eps);
}

// A segment knows where its parameters are: grads, state and master weights of a step are
// indexed from `offset` (the step's buffers: the whole model, a ZeRO-1 shard, a BAdam block, an
// offload chunk), the parameters from `param`, their global index in the model, which also picks
// the random bits of stochastic rounding. A whole-model table has param == offset; a view cuts
// and rebases offset and keeps param. `tensor` names the model tensor the segment is a piece of
// (LAMB's trust ratio spans consecutive pieces of one tensor), `tensor_count` its elements (the
// int8 state keeps fp32 m, v for tensors under QUANT8_MIN_ELEMS, whatever the piece).
typedef struct {
    size_t offset;         // first element in the grads, state and master buffers of the step
    size_t param;          // first element in the parameter buffer: its global index
    size_t count;
    size_t tensor_count;   // elements of the whole tensor
    float weight_decay;    // decoupled weight decay of this segment
    float lr_mult;         // learning-rate multiplier
    int tensor;            // the tensor's id (distinct for adjacent tensors)
    int mat_parts;         // Muon: matrices stacked in the tensor (qkv: 3), each (mat_rows / mat_parts, mat_cols)
    size_t mat_rows, mat_cols;  // Muon: a transformer block's 2-D weight (rows, cols); 0: not a Muon matrix
} OptimSegment;

// A whole tensor as one segment of a whole-model table (param == offset).
static inline OptimSegment optim_segment(size_t offset, size_t count, float weight_decay, float lr_mult, int tensor) {
    OptimSegment s = {offset, offset, count, count, weight_decay, lr_mult, tensor, 0, 0, 0};
    return s;
}

typedef struct {
    float lr;            // learning rate of this step (after the schedule)
    float beta1, beta2, eps;
    float weight_decay;  // applied to segments whose tensors decay
    float grad_clip;     // clip the global norm to this; 0 = off
} AdamWHyper;

// ZeRO-1: each of P processes owns one contiguous shard of the flat optimizer state. Shards are
// equal, ceil(n / P) rounded up to 32 elements (128-byte aligned fp32); the last one is padded
// past n, so element counts that do not divide by P need no special case.
static inline size_t zero_shard_elems(size_t n, int num_processes) {
    size_t P = num_processes < 1 ? 1 : (size_t)num_processes;
    size_t per = (n + P - 1) / P;
    return (per + 31) / 32 * 32;
}

// The parts of the segments inside [lo, hi) of the step's buffers, rebased to lo (a ZeRO-1
// shard, an offload chunk); each part keeps its parameters' place (param moves with the cut).
// Returns how many (<= nseg).
static inline int optim_segments_cut(const OptimSegment* segs, int nseg, size_t lo, size_t hi, OptimSegment* out) {
    int k = 0;
    for (int i = 0; i < nseg; i++) {
        size_t a = segs[i].offset > lo ? segs[i].offset : lo;
        size_t b = segs[i].offset + segs[i].count < hi ? segs[i].offset + segs[i].count : hi;
        if (a >= b) { continue; }
        out[k] = segs[i];
        out[k].offset = a - lo;
        out[k].param = segs[i].param + (a - segs[i].offset);
        out[k].count = b - a;
        k++;
    }
    return k;
}

// One segment per parameter tensor; weight decay from the table's decay flag, never by index.
static inline int optim_segments_build(const ParamTable* pt, float weight_decay, OptimSegment* segs) {
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        segs[i] = optim_segment(pt->t[i].offset, pt->t[i].count, pt->t[i].decay ? weight_decay : 0.0f, pt->t[i].lr_mult, i);
    }
    return NUM_PARAMETER_TENSORS;
}

// L2 norm of g[0..n), accumulated in double per thread (then summed in thread order).
static inline float global_norm_cpu(const float* g, size_t n) {
    double total = 0.0;
    #pragma omp parallel for simd reduction(+:total) schedule(static)
    for (size_t i = 0; i < n; i++) { total += (double)g[i] * (double)g[i]; }
    return (float)sqrt(total);
}

static inline float clip_scale_of(float norm, float grad_clip) {
    return (grad_clip > 0.0f && norm > grad_clip) ? grad_clip / norm : 1.0f;
}

// The fused CPU AdamW over all segments; `step` counts from 1. grad_scale is the clip scale.
static inline void adamw_update_cpu(float* params, const float* grads, float* m, float* v, const OptimSegment* segs,
                                    int nseg, const AdamWHyper* h, int step, float grad_scale) {
    const AdamWConsts k = {h->beta1, 1.0f - h->beta1, h->beta2, 1.0f - h->beta2,
                           1.0f / (1.0f - powf(h->beta1, (float)step)),  // bias corrections, hoisted
                           1.0f / (1.0f - powf(h->beta2, (float)step)), h->eps};
    #pragma omp parallel
    for (int s = 0; s < nseg; s++) {
        const float lr = h->lr * segs[s].lr_mult;
        const float wd = segs[s].weight_decay;
        float* p = params + segs[s].param;
        const float* g = grads + segs[s].offset;
        float* ms = m + segs[s].offset;
        float* vs = v + segs[s].offset;
        const size_t n = segs[s].count;
        // the same operations, in the same order, as the GPU kernel (llmc/optim/adamw.cuh), so the two
        // give the same bits: explicit fmaf where the kernel fuses, nothing left for the compiler
        #pragma omp for simd schedule(static) nowait
        for (size_t i = 0; i < n; i++) { adamw_element(&p[i], &ms[i], &vs[i], g[i] * grad_scale, &k, lr, wd); }
    }
}

// ----------------------------------------------------------------------------
// segment tables: per-layer tensors, blocks inside segments

// Marks a segment of tensor t as Muon's when t is a transformer block's weight matrix (per layer,
// 2-D): its layer shape, and qkv's three stacked matrices. (A segment may hold several layers'.)
static inline void optim_segment_set_matrix(OptimSegment* s, const ParamTensor* t) {
    if (!(t->per_layer && t->ndim == 2)) return;
    s->mat_rows = t->rows;
    s->mat_cols = t->cols;
    s->mat_parts = strcmp(t->name, "qkvw") == 0 ? 3 : 1;
}

// One segment per tensor as PyTorch sees it: stacked per-layer tensors are split into their L
// layer slices (LAMB's trust ratio and the int8 size threshold are per tensor). Returns the number
// of segments; segs needs optim_segments_count_layers(pt) entries.
static inline int optim_segments_count_layers(const ParamTable* pt) {
    int n = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) n += pt->t[i].per_layer ? pt->num_layers : 1;
    return n;
}
static inline int optim_segments_build_layers(const ParamTable* pt, float weight_decay, OptimSegment* segs) {
    int k = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        const ParamTensor* t = &pt->t[i];
        int slices = t->per_layer ? pt->num_layers : 1;
        size_t count = t->count / (size_t)slices;
        for (int l = 0; l < slices; l++) {
            segs[k] = optim_segment(t->offset + (size_t)l * count, count, t->decay ? weight_decay : 0.0f, t->lr_mult, k);
            optim_segment_set_matrix(&segs[k], t);
            k++;
        }
    }
    return k;
}

// Blocks of OPT_BLOCK elements cut from each segment from its first element (never straddling
// segments): block0[s] is segment s's first block, block0[nseg] the total (returned).
static inline size_t optim_blocks_build(const OptimSegment* segs, int nseg, size_t* block0) {
    size_t b = 0;
    for (int s = 0; s < nseg; s++) {
        block0[s] = b;
        b += (segs[s].count + OPT_BLOCK - 1) / OPT_BLOCK;
    }
    block0[nseg] = b;
    return b;
}

// int8 state: segments of tensors under QUANT8_MIN_ELEMS keep fp32 m, v, packed in segment
// order: small_off[s] is the offset of segment s there, or OPT_NOT_SMALL. Returns the packed length.
static inline size_t optim_small_build(const OptimSegment* segs, int nseg, size_t* small_off) {
    size_t k = 0;
    for (int s = 0; s < nseg; s++) {
        if (segs[s].tensor_count < QUANT8_MIN_ELEMS) {
            small_off[s] = k;
            k += segs[s].count;
        } else {
            small_off[s] = OPT_NOT_SMALL;
        }
    }
    return k;
}

// The segment of block b (block0 from optim_blocks_build, b < block0[nseg]).
OPTIM_HD int optim_block_segment(const size_t* block0, int nseg, size_t b) {
    int lo = 0, hi = nseg - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (block0[mid] <= b) lo = mid; else hi = mid - 1;
    }
    return lo;
}

// Block b of a table: its segment s, its offset in the segment (rel), its first element in the
// step's buffers (start) and in the parameters (pstart), and its length (OPT_BLOCK, or less at the
// segment's end).
typedef struct {
    int s;
    size_t rel, start, pstart, len;
} OptimBlockAt;
static inline OptimBlockAt optim_block_at(const OptimSegment* segs, const size_t* block0, int nseg, size_t b) {
    OptimBlockAt k;
    k.s = optim_block_segment(block0, nseg, b);
    k.rel = (b - block0[k.s]) * OPT_BLOCK;
    k.start = segs[k.s].offset + k.rel;
    k.pstart = segs[k.s].param + k.rel;
    const size_t rest = segs[k.s].count - k.rel;
    k.len = rest < OPT_BLOCK ? rest : OPT_BLOCK;
    return k;
}

// The blocks [*b0, *b1) of segment s's tensor in this table: the blocks of the run of adjacent
// segments with s's tensor id (the pieces of one tensor: a table cut at block boundaries of the
// tensor gives the whole tensor's blocks, so its sums are the whole tensor's, bit for bit).
OPTIM_HD void optim_tensor_blocks(const OptimSegment* segs, int nseg, const size_t* block0, int s, size_t* b0,
                                  size_t* b1) {
    int f = s, l = s;
    while (f > 0 && segs[f - 1].tensor == segs[s].tensor) f--;
    while (l + 1 < nseg && segs[l + 1].tensor == segs[s].tensor) l++;
    *b0 = block0[f];
    *b1 = block0[l + 1];
}

// The fixed-order sums of LAMB (see the banner): 256 values added in a halving tree,
// x[t] += x[t + w] for w = 128, 64, ..., 1; the result is x[0]. Destroys x.
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
// CPU updates of the family. Each: one fused pass per segment (LAMB: two), OpenMP threads split
// each segment's elements, the segment's hyperparameters in registers; explicit fmaf in the GPU
// kernels' order (the build has -ffp-contract=off). params, grads, state: n elements.

// AdamW with AMSGrad (fp32 m, v, vmax).
static inline void adamw_amsgrad_update_cpu(float* params, const float* grads, float* m, float* v, float* vmax,
                                            const OptimSegment* segs, int nseg, const OptimStepArgs* a,
                                            float grad_scale) {
    const float beta1 = a->beta1, beta2 = a->beta2, omb1 = a->one_minus_beta1, omb2 = a->one_minus_beta2;
    const float eps = a->eps, bc1 = a->inv_bias_corr1, bc2 = a->inv_bias_corr2;
    #pragma omp parallel
    for (int s = 0; s < nseg; s++) {
        const float lr = a->lr * segs[s].lr_mult, wd = segs[s].weight_decay;
        const size_t off = segs[s].offset, n = segs[s].count;
        float* p = params + segs[s].param;
        const float* g = grads + off;
        float *ms = m + off, *vs = v + off, *xs = vmax + off;
        #pragma omp for simd schedule(static) nowait
        for (size_t i = 0; i < n; i++) {
            float gi = g[i] * grad_scale;
            float mi = adamw_m(ms[i], gi, beta1, omb1), vi = adamw_v(vs[i], gi, beta2, omb2);
            // fmaxf(vmax, v) of the GPU kernel, as a compare that vectorizes (fmaxf does not): equal
            // for v, vmax >= +0 (never -0), and when v is NaN both keep vmax, so vmax is never NaN
            float xi = vi > xs[i] ? vi : xs[i];
            ms[i] = mi;
            vs[i] = vi;
            xs[i] = xi;
            p[i] = adamw_param(p[i], mi, xi, lr, wd, bc1, bc2, eps);
        }
    }
}

// ----------------------------------------------------------------------------
// AdamW's fp16 state (--opt-state fp16). Plain fp16 loses AdamW's state: v ~ g^2 (1e-8 .. 1e-12
// for GPT-2's clipped gradients) is below fp16's smallest subnormal 6e-8, and m ~ g is mostly
// subnormal (dev/reference/fp16_state_study.py measures it). So m is stored as m * 2^14 and v as
// sqrt(v) * 2^14: sqrt(v) has m's range, and with the gradients clipped to norm 1 every |m| and
// sqrt(v) is <= 1, so the stored values stay under 16384 (< 65504) and keep fp16's 11 bits down to
// 6.1e-5 / 2^14 = 3.7e-9. Stores round stochastically (streams 1, 2, 3, as bf16) and saturate.
OPTIM_HD float fp16_state_m(uint16_t b) { return fp16_bits_to_float(b) * OPT_FP16_STATE_INV; }
OPTIM_HD float fp16_state_v(uint16_t b) {
    const float r = fp16_bits_to_float(b) * OPT_FP16_STATE_INV;
    return r * r;
}
OPTIM_HD uint16_t fp16_state_m_store(float m, unsigned bits) { return fp16_bits_round_stochastic(m * OPT_FP16_STATE_SCALE, bits); }
OPTIM_HD uint16_t fp16_state_v_store(float v, unsigned bits) {
    return fp16_bits_round_stochastic(sqrtf(v) * OPT_FP16_STATE_SCALE, bits);
}
// A 16-bit state value (bf16, or fp16 in the layout above) and its stochastic store.
OPTIM_HD float state16_m(uint16_t b, int fp16) { return fp16 ? fp16_state_m(b) : bf16_bits_to_float(b); }
OPTIM_HD float state16_v(uint16_t b, int fp16) { return fp16 ? fp16_state_v(b) : bf16_bits_to_float(b); }
OPTIM_HD uint16_t state16_m_store(float m, unsigned bits, int fp16) {
    return fp16 ? fp16_state_m_store(m, bits) : bf16_bits_round_stochastic(m, bits);
}
OPTIM_HD uint16_t state16_v_store(float v, unsigned bits, int fp16) {
    return fp16 ? fp16_state_v_store(v, bits) : bf16_bits_round_stochastic(v, bits);
}

// AdamW with 16-bit m, v (and vmax when not NULL): bf16, or fp16 (fp16 1) in the layout above; the
// fp32 update of the unrounded values, then stochastic rounding of the state (streams 1, 2, 3 of
// llmc/optim/srng.h at the global element index param + k, as adamw_update_bf16_state in
// llmc/optim/adamw_lowp.cuh).
static inline void adamw_state16_update_cpu(float* params, const float* grads, uint16_t* m, uint16_t* v, uint16_t* vmax,
                                            const OptimSegment* segs, int nseg, const OptimStepArgs* a, float grad_scale,
                                            int fp16) {
    const float beta1 = a->beta1, beta2 = a->beta2, omb1 = a->one_minus_beta1, omb2 = a->one_minus_beta2;
    const float eps = a->eps, bc1 = a->inv_bias_corr1, bc2 = a->inv_bias_corr2;
    const unsigned long long key = a->rng_key;
    #pragma omp parallel
    for (int s = 0; s < nseg; s++) {
        const float lr = a->lr * segs[s].lr_mult, wd = segs[s].weight_decay;
        const size_t off = segs[s].offset, par = segs[s].param, n = segs[s].count;
        if (vmax != NULL) {
            #pragma omp for simd schedule(static) nowait
            for (size_t k = 0; k < n; k++) {
                const size_t i = off + k, pi = par + k;
                float gi = grads[i] * grad_scale;
                float mi = adamw_m(state16_m(m[i], fp16), gi, beta1, omb1);
                float vi = adamw_v(state16_v(v[i], fp16), gi, beta2, omb2);
                const float x = state16_v(vmax[i], fp16);
                const float vv = vi > x ? vi : x; // fmaxf(vmax, v), as in adamw_amsgrad_update_cpu
                params[pi] = adamw_param(params[pi], mi, vv, lr, wd, bc1, bc2, eps);
                m[i] = state16_m_store(mi, srng_bits(key, pi, 1), fp16);
                v[i] = state16_v_store(vi, srng_bits(key, pi, 2), fp16);
                vmax[i] = state16_v_store(vv, srng_bits(key, pi, 3), fp16);
            }
        } else {
            #pragma omp for simd schedule(static) nowait
            for (size_t k = 0; k < n; k++) {
                const size_t i = off + k, pi = par + k;
                float gi = grads[i] * grad_scale;
                float mi = adamw_m(state16_m(m[i], fp16), gi, beta1, omb1);
                float vi = adamw_v(state16_v(v[i], fp16), gi, beta2, omb2);
                params[pi] = adamw_param(params[pi], mi, vi, lr, wd, bc1, bc2, eps);
                m[i] = state16_m_store(mi, srng_bits(key, pi, 1), fp16);
                v[i] = state16_v_store(vi, srng_bits(key, pi, 2), fp16);
            }
        }
    }
}

// The 8-bit state of AdamW (llmc/optim/quant8.h), as laid out by optim_blocks_build/optim_small_build.
typedef struct {
    unsigned char* qm;  // (n) codes of m, by element index (bytes of small tensors unused)
    unsigned char* qv;  // (n) codes of v
    float* absmax_m;    // (nblocks) per block (entries of small tensors unused)
    float* absmax_v;    // (nblocks)
    float* m32;         // (nsmall) fp32 m of the small tensors, packed
    float* v32;         // (nsmall)
    const float* maps;  // (512) signed map (m) then unsigned map (v, vmax), quant8_maps
    unsigned char* qx;  // (n) AMSGrad: codes of vmax (unsigned map), or NULL
    float* absmax_x;    // (nblocks)
    float* x32;         // (nsmall)
} Adamw8Buffers;

// AdamW with 8-bit m, v: per block, dequantize, the fp32 update, block absmax, requantize (the
// GPU kernel adamw_update_8bit's operations; absmax is a max, exact in any order). ix: the
// quantize indexes of the signed (m) and unsigned (v) maps (quant8_index_build), same codes as the
// kernel's binary search.
static inline void adamw_int8_update_cpu(float* params, const float* grads, const Adamw8Buffers* q,
                                         const Quant8Index* ix, const OptimSegment* segs, int nseg,
                                         const size_t* block0, const size_t* small_off, const OptimStepArgs* a,
                                         float grad_scale) {
    const AdamWConsts k = {a->beta1, a->one_minus_beta1, a->beta2, a->one_minus_beta2, a->inv_bias_corr1,
                           a->inv_bias_corr2, a->eps};
    const float* map_m = q->maps;
    const float* map_v = q->maps + 256;
    const size_t nblocks = block0[nseg];
    #pragma omp parallel
    {
        float mb[OPT_BLOCK], vb[OPT_BLOCK], xb[OPT_BLOCK];
        #pragma omp for schedule(static)
        for (size_t b = 0; b < nblocks; b++) {
            const int s = optim_block_segment(block0, nseg, b);
            const size_t kb = b - block0[s], rel = kb * OPT_BLOCK;
            const size_t start = segs[s].offset + rel;
            const size_t rest = segs[s].count - rel, len = rest < OPT_BLOCK ? rest : OPT_BLOCK;
            const float lr = a->lr * segs[s].lr_mult, wd = segs[s].weight_decay;
            float* p = params + segs[s].param + rel;
            const float* g = grads + start;
            float *ms, *vs, *xs = xb;
            if (small_off[s] != OPT_NOT_SMALL) { // fp32 state, updated in place
                ms = q->m32 + small_off[s] + rel;
                vs = q->v32 + small_off[s] + rel;
                if (q->qx != NULL) xs = q->x32 + small_off[s] + rel;
            } else {
                const float am = q->absmax_m[b], av = q->absmax_v[b];
                const unsigned char *cm = q->qm + start, *cv = q->qv + start;
                for (size_t j = 0; j < len; j++) {
                    // NOLINTNEXTLINE(clang-analyzer-core.NullDereference): optim_state_carve gives every int8 state its codes
                    mb[j] = map_m[cm[j]] * am;
                    vb[j] = map_v[cv[j]] * av;
                }
                if (q->qx != NULL) {
                    const float ax = q->absmax_x[b];
                    for (size_t j = 0; j < len; j++) xb[j] = map_v[q->qx[start + j]] * ax;
                }
                ms = mb;
                vs = vb;
            }
            if (q->qx != NULL) { // AMSGrad: vmax = max(vmax, v) as adamw_amsgrad_update_cpu
                #pragma omp simd
                for (size_t j = 0; j < len; j++) {
                    const float gj = g[j] * grad_scale;
                    const float mj = adamw_m(ms[j], gj, k.beta1, k.one_minus_beta1), vj = adamw_v(vs[j], gj, k.beta2, k.one_minus_beta2);
                    const float xj = vj > xs[j] ? vj : xs[j];
                    ms[j] = mj;
                    vs[j] = vj;
                    xs[j] = xj;
                    p[j] = adamw_param(p[j], mj, xj, lr, wd, k.bc1, k.bc2, k.eps);
                }
            } else {
                #pragma omp simd
                for (size_t j = 0; j < len; j++) { adamw_element(&p[j], &ms[j], &vs[j], g[j] * grad_scale, &k, lr, wd); }
            }
            if (small_off[s] == OPT_NOT_SMALL) {
                q->absmax_m[b] = quant8_block_quantize_fast(mb, len, &ix[0], 1, q->qm + start);
                q->absmax_v[b] = quant8_block_quantize_fast(vb, len, &ix[1], 0, q->qv + start);
                if (q->qx != NULL) q->absmax_x[b] = quant8_block_quantize_fast(xb, len, &ix[1], 0, q->qx + start);
            }
        }
    }
}

// SGD with momentum buffer buf (NULL when momentum is 0) and optional Nesterov momentum.
static inline void sgd_update_cpu(float* params, const float* grads, float* buf, const OptimSegment* segs, int nseg,
                                  const OptimStepArgs* a, int nesterov, float grad_scale) {
    const float mu = a->momentum, omd = a->one_minus_dampening;
    const int first = a->first_step;
    #pragma omp parallel
    for (int s = 0; s < nseg; s++) {
        const float lr = a->lr * segs[s].lr_mult, wd = segs[s].weight_decay;
        const size_t off = segs[s].offset, n = segs[s].count;
        float* p = params + segs[s].param;
        const float* g = grads + off;
        if (buf == NULL) {
            #pragma omp for simd schedule(static) nowait
            for (size_t i = 0; i < n; i++) p[i] = fmaf(-lr, fmaf(wd, p[i], g[i] * grad_scale), p[i]);
            continue;
        }
        float* bs = buf + off;
        if (first) { // the buffer starts as g (no dampening on the first step, as PyTorch)
            #pragma omp for simd schedule(static) nowait
            for (size_t i = 0; i < n; i++) {
                float gi = g[i] * grad_scale;
                bs[i] = gi;
                float d = nesterov ? fmaf(mu, gi, gi) : gi;
                p[i] = fmaf(-lr, fmaf(wd, p[i], d), p[i]);
            }
        } else if (nesterov) {  // NOLINT(bugprone-branch-clone): the bodies differ; the check sees only the omp directives
            #pragma omp for simd schedule(static) nowait
            for (size_t i = 0; i < n; i++) {
                float gi = g[i] * grad_scale;
                float b = fmaf(mu, bs[i], omd * gi);
                bs[i] = b;
                p[i] = fmaf(-lr, fmaf(wd, p[i], fmaf(mu, b, gi)), p[i]);
            }
        } else {
            #pragma omp for simd schedule(static) nowait
            for (size_t i = 0; i < n; i++) {
                float gi = g[i] * grad_scale;
                float b = fmaf(mu, bs[i], omd * gi);
                bs[i] = b;
                p[i] = fmaf(-lr, fmaf(wd, p[i], b), p[i]);
            }
        }
    }
}

// sign(c) as Lion uses it: +-1, and 0 (or NaN) passed through.
OPTIM_HD float optim_sign(float c) { return c > 0.0f ? 1.0f : (c < 0.0f ? -1.0f : c); }

// Lion with momentum m.
static inline void lion_update_cpu(float* params, const float* grads, float* m, const OptimSegment* segs, int nseg,
                                   const OptimStepArgs* a, float grad_scale) {
    const float beta1 = a->beta1, beta2 = a->beta2, omb1 = a->one_minus_beta1, omb2 = a->one_minus_beta2;
    #pragma omp parallel
    for (int s = 0; s < nseg; s++) {
        const float lr = a->lr * segs[s].lr_mult, wd = segs[s].weight_decay;
        const size_t off = segs[s].offset, n = segs[s].count;
        float* p = params + segs[s].param;
        const float* g = grads + off;
        float* ms = m + off;
        #pragma omp for simd schedule(static) nowait
        for (size_t i = 0; i < n; i++) {
            float gi = g[i] * grad_scale;
            float c = fmaf(beta1, ms[i], omb1 * gi);
            ms[i] = fmaf(beta2, ms[i], omb2 * gi);
            p[i] = fmaf(-lr, fmaf(wd, p[i], optim_sign(c)), p[i]);
        }
    }
}

// LAMB's direction u of one element from the updated m, v (every pass computes it this way).
OPTIM_HD float lamb_direction(float p, float m, float v, float wd, float bc1, float bc2, float eps) {
    return adamw_direction(p, m, v, wd, bc1, bc2, eps);
}

// The trust ratio of a segment from its sums of squares.
OPTIM_HD float lamb_trust_ratio(double sum_p2, double sum_u2) {
    double pn = sqrt(sum_p2), un = sqrt(sum_u2);
    return (pn > 0.0 && un > 0.0) ? (float)(pn / un) : 1.0f;
}

// LAMB's block sums from the lanes' sums ap, au (OPT_BLOCK / 2 each: lane l holds elements l and
// l + OPT_BLOCK / 2): four lanes, then a tree of 256, in the GPU kernel's order.
static inline void lamb_block_sums(const float* ap, const float* au, float* partials, size_t nblocks, size_t b) {
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
// The CPU and the GPU step (llmc/optim/kernels.cuh) both use it, so they agree bit for bit.
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
    for (int s = 0; s < nseg; s++) trust[s] = lamb_trust_ratio(t[2 * (size_t)segs[s].tensor], t[2 * (size_t)segs[s].tensor + 1]);
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
        trust[s] = lamb_trust_ratio(optim_tree256_f64(lp), optim_tree256_f64(lu));
    }
}

// LAMB. partials: (2 * nblocks) scratch, the sums of p^2 (first half) and u^2 per block; trust:
// (nseg) the trust ratio of each segment, written (the caller may read it after the step); red:
// NULL, or the sums over the processes (ZeRO-1).
static inline void lamb_update_cpu(float* params, const float* grads, float* m, float* v, float* partials,
                                   float* trust, const OptimSegment* segs, int nseg, const size_t* block0,
                                   const OptimStepArgs* a, float grad_scale, const OptimReduce* red) {
    const float beta1 = a->beta1, beta2 = a->beta2, omb1 = a->one_minus_beta1, omb2 = a->one_minus_beta2;
    const float eps = a->eps, bc1 = a->inv_bias_corr1, bc2 = a->inv_bias_corr2;
    const size_t nblocks = block0[nseg];
    #pragma omp parallel
    {
        float ap[OPT_BLOCK / 2], au[OPT_BLOCK / 2];
        // pass 1: moments, and the block sums of p^2 and u^2 in the GPU's order
        #pragma omp for schedule(static)
        for (size_t b = 0; b < nblocks; b++) {
            const OptimBlockAt at = optim_block_at(segs, block0, nseg, b);
            const size_t start = at.start, pstart = at.pstart, len = at.len;
            const float wd = segs[at.s].weight_decay;
            for (size_t j = 0; j < OPT_BLOCK / 2; j++) ap[j] = au[j] = 0.0f;
            for (size_t h = 0; h < 2; h++) { // lane l accumulates elements l, then l + OPT_BLOCK / 2
                const size_t j0 = h * (OPT_BLOCK / 2);
                const size_t cnt = len > j0 ? (len - j0 < OPT_BLOCK / 2 ? len - j0 : OPT_BLOCK / 2) : 0;
                const float* p = params + pstart + j0;
                const float* g = grads + start + j0;
                float *ms = m + start + j0, *vs = v + start + j0;
                #pragma omp simd
                for (size_t l = 0; l < cnt; l++) {
                    float gl = g[l] * grad_scale;
                    float ml = adamw_m(ms[l], gl, beta1, omb1), vl = adamw_v(vs[l], gl, beta2, omb2);
                    ms[l] = ml;
                    vs[l] = vl;
                    float u = lamb_direction(p[l], ml, vl, wd, bc1, bc2, eps);
                    ap[l] = fmaf(p[l], p[l], ap[l]);
                    au[l] = fmaf(u, u, au[l]);
                }
            }
            lamb_block_sums(ap, au, partials, nblocks, b);
        }
        lamb_trust_cpu(segs, nseg, block0, partials, red, trust);
        // pass 2: the update (the implicit barrier above: every trust ratio is known)
        for (int s = 0; s < nseg; s++) {
            const float step = (a->lr * segs[s].lr_mult) * trust[s], wd = segs[s].weight_decay;
            const size_t off = segs[s].offset, n = segs[s].count;
            float* p = params + segs[s].param;
            const float *ms = m + off, *vs = v + off;
            #pragma omp for simd schedule(static) nowait
            for (size_t i = 0; i < n; i++) p[i] = fmaf(-step, lamb_direction(p[i], ms[i], vs[i], wd, bc1, bc2, eps), p[i]);
        }
    }
}

#endif // LLMC_OPTIM_H

/*
 optim.h: the optimizer's host side. Hyperparameters, the segment table built from the
 parameter table, the global gradient norm and clip scale, and the fused CPU AdamW.

 AdamW, per element, with t = step + 1 and s = clip scale (1 when the norm is below the clip):
   g = s * grad
   m = beta1 * m + (1 - beta1) * g
   v = beta2 * v + (1 - beta2) * g^2
   p -= lr * lr_mult * ( (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps) + wd * p )
 wd is the segment's weight decay (decoupled; 2-D weights only). The bias corrections are
 computed once per step outside the loop: with -O3 a powf inside the loop is not hoisted
 (errno), and the loop runs ~25x slower. One pass reads p, g, m, v and writes p, m, v: 28 bytes
 per parameter, so the CPU update is memory-bound (dev/cpu/adamw_bench.c measures it against a
 probe with the same access pattern).
*/
#ifndef LLMC_OPTIM_H
#define LLMC_OPTIM_H

#include <math.h>
#include <stddef.h>
#include "llmc/params.h"

typedef struct {
    size_t offset, count;  // elements in the flat buffers
    float weight_decay;    // decoupled weight decay of this segment
    float lr_mult;         // learning-rate multiplier
} OptSegment;

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

// One segment per parameter tensor; weight decay from the table's decay flag, never by index.
static inline int optim_segments_build(const ParamTable* pt, float weight_decay, OptSegment* segs) {
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        segs[i].offset = pt->t[i].offset;
        segs[i].count = pt->t[i].count;
        segs[i].weight_decay = pt->t[i].decay ? weight_decay : 0.0f;
        segs[i].lr_mult = pt->t[i].lr_mult;
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
static inline void adamw_update_cpu(float* params, const float* grads, float* m, float* v, const OptSegment* segs,
                                    int nseg, const AdamWHyper* h, int step, float grad_scale) {
    const float beta1 = h->beta1, beta2 = h->beta2, eps = h->eps;
    const float one_minus_beta1 = 1.0f - beta1, one_minus_beta2 = 1.0f - beta2;
    const float bc1 = 1.0f / (1.0f - powf(beta1, (float)step));  // bias corrections, hoisted
    const float bc2 = 1.0f / (1.0f - powf(beta2, (float)step));
    #pragma omp parallel
    for (int s = 0; s < nseg; s++) {
        const float lr = h->lr * segs[s].lr_mult;
        const float wd = segs[s].weight_decay;
        float* p = params + segs[s].offset;
        const float* g = grads + segs[s].offset;
        float* ms = m + segs[s].offset;
        float* vs = v + segs[s].offset;
        const size_t n = segs[s].count;
        // the same operations, in the same order, as the GPU kernel (llmc/adamw.cuh), so the two
        // give the same bits: explicit fmaf where the kernel fuses, nothing left for the compiler
        #pragma omp for simd schedule(static) nowait
        for (size_t i = 0; i < n; i++) {
            float gi = g[i] * grad_scale;
            float mi = fmaf(beta1, ms[i], one_minus_beta1 * gi);
            float vi = fmaf(beta2, vs[i], (one_minus_beta2 * gi) * gi);
            ms[i] = mi;
            vs[i] = vi;
            float upd = (mi * bc1) / (sqrtf(vi * bc2) + eps);
            p[i] = fmaf(-lr, fmaf(wd, p[i], upd), p[i]);
        }
    }
}

#endif // LLMC_OPTIM_H

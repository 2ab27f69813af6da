/*
 optim.h: the optimizer's host side for the trainers: the global gradient norm and its clip
 scale, and the classic fused CPU AdamW loop (adamw_update_cpu: the
 reference the template is checked against, and the CPU benchmark's subject). The optimizer
 itself is written once: the rules (llmc/optim/rules.h) over the storages (llmc/optim/storage.h)
 on a segment table (llmc/optim/segments.h), run on the CPU by llmc/optim/update.h; its state:
 llmc/optim/state.h; its entry point, optim_step_cpu: llmc/optim/engine.h.

 AdamW, per element, with t = step (1, 2, ...) and s = clip scale (1 when the norm is below the clip):
   g = s * grad
   m = beta1 * m + (1 - beta1) * g
   v = beta2 * v + (1 - beta2) * g^2
   p -= lr * lr_mult * ( (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps) + wd * p )
 wd is the segment's weight decay (decoupled; 2-D weights only). One pass reads p, g, m, v and
 writes p, m, v: 28 bytes per parameter, so the CPU update is memory-bound (dev/cpu/adamw_bench.c
 measures it against a probe with the same access pattern).
*/
#ifndef LLMC_OPTIM_H
#define LLMC_OPTIM_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include "llmc/optim/rules.h"
#include "llmc/optim/segments.h"
#include "llmc/optim/update.h"

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

// The fused CPU AdamW over all segments (c: its betas and eps); `step` counts from 1, lr is this
// step's, grad_scale the clip scale.
static inline void adamw_update_cpu(float* params, const float* grads, float* m, float* v, const OptimSegment* segs,
                                    int nseg, const OptimConfig* c, float lr, int step, float grad_scale) {
    const OptimStepArgs a = optim_step_args(c, lr, step);
    #pragma omp parallel
    for (int s = 0; s < nseg; s++) {
        const float slr = lr * segs[s].lr_mult;
        const float wd = segs[s].weight_decay;
        float* p = params + segs[s].param;
        const float* g = grads + segs[s].offset;
        float* ms = m + segs[s].offset;
        float* vs = v + segs[s].offset;
        const size_t n = segs[s].count;
        #pragma omp for simd schedule(static) nowait
        for (size_t i = 0; i < n; i++) p[i] = rule_adamw(p[i], g[i] * grad_scale, &ms[i], &vs[i], slr, wd, &a);
    }
}


#endif // LLMC_OPTIM_H

/*
 lowp.h: low-precision state (bf16, int8) of SGD with momentum, Lion and LAMB on the CPU; plain C,
 included by llmc/optim/state.h (optim_step_cpu picks these). The GPU kernels of
 llmc/optim/kernels.cuh do the same operations in the same order, so both agree bit for bit
 (dev/cuda/optimizers.cu checks it). AdamW's own bf16 / int8 updates are in llmc/optim/optim.h.

 The rules are AdamW's (llmc/optim/optim.h, llmc/optim/quant8.h, llmc/optim/srng.h):
   bf16   the state is read as fp32, updated in fp32, and stored rounded stochastically with the
          random bits of its global element index (param + k): stream 1 for m (SGD's momentum
          buffer, Lion's m), 2 for v. SGD and Lion update the parameter from the unrounded fp32
          values (as AdamW does).
   int8   blocks of OPT_BLOCK elements of each segment from its first element, one fp32 absmax per
          block, m on the signed map, v on the unsigned map; tensors under QUANT8_MIN_ELEMS keep
          fp32 state (m32, v32). Per block: dequantize, update in fp32, requantize with the new
          absmax.
 LAMB needs its state twice (pass 1: moments and the norms of u; pass 2: u again and the update),
 so with bf16 or int8 state both passes compute u from the STORED (rounded) moments: the trust
 ratio is the ratio of the direction actually applied.

 Bytes per parameter moved (fp32 params and grads): SGD / Lion bf16 16, int8 ~14; LAMB bf16 32,
 int8 ~28 (two passes).
*/
#ifndef LLMC_OPTIM_LOWP_H
#define LLMC_OPTIM_LOWP_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include "llmc/optim/optim.h"
#include "llmc/optim/quant8.h"
#include "llmc/optim/srng.h"

// ----------------------------------------------------------------------------
// the element rules of SGD and Lion (the fp32 CPU loops of llmc/optim/optim.h spell the same
// operations; the GPU's optim_element calls these)

// SGD with momentum: b, the buffer, in place (g itself at the first step); returns the new p.
OPTIM_HD float sgd_element(float p, float g, float* b, float mu, float omd, int first, int nesterov, float lr, float wd) {
    const float buf = first ? g : fmaf(mu, *b, omd * g);
    *b = buf;
    const float d = nesterov ? fmaf(mu, buf, g) : buf;
    return fmaf(-lr, fmaf(wd, p, d), p);
}

// Lion: m in place; returns the new p.
OPTIM_HD float lion_element(float p, float g, float* m, float beta1, float omb1, float beta2, float omb2, float lr,
                            float wd) {
    const float c = fmaf(beta1, *m, omb1 * g);
    *m = fmaf(beta2, *m, omb2 * g);
    return fmaf(-lr, fmaf(wd, p, optim_sign(c)), p);
}

// ----------------------------------------------------------------------------
// SGD with momentum, Lion: bf16 and int8 m

static inline void sgd_lion_bf16_update_cpu(OptimKind kind, int nesterov, float* params, const float* grads, uint16_t* m,
                                            const OptimSegment* segs, int nseg, const OptimStepArgs* a,
                                            float grad_scale) {
    const unsigned long long key = a->rng_key;
    #pragma omp parallel
    for (int s = 0; s < nseg; s++) {
        const float lr = a->lr * segs[s].lr_mult, wd = segs[s].weight_decay;
        const size_t off = segs[s].offset, par = segs[s].param, n = segs[s].count;
        if (kind == OPT_LION) { // one loop per optimizer, the branches outside: they vectorize
            const float b1 = a->beta1, omb1 = a->one_minus_beta1, b2 = a->beta2, omb2 = a->one_minus_beta2;
            #pragma omp for simd schedule(static) nowait
            for (size_t k = 0; k < n; k++) {
                const size_t i = off + k, pi = par + k;
                float mi = bf16_bits_to_float(m[i]);
                params[pi] = lion_element(params[pi], grads[i] * grad_scale, &mi, b1, omb1, b2, omb2, lr, wd);
                m[i] = bf16_bits_round_stochastic(mi, srng_bits(key, pi, 1));
            }
        } else {
            const float mu = a->momentum, omd = a->one_minus_dampening;
            const int first = a->first_step;
            #pragma omp for simd schedule(static) nowait
            for (size_t k = 0; k < n; k++) {
                const size_t i = off + k, pi = par + k;
                float mi = bf16_bits_to_float(m[i]);
                params[pi] = sgd_element(params[pi], grads[i] * grad_scale, &mi, mu, omd, first, nesterov, lr, wd);
                m[i] = bf16_bits_round_stochastic(mi, srng_bits(key, pi, 1));
            }
        }
    }
}

// The fp32 state of block b of segment s (rel its first element in the segment, len its
// elements): the small tensor's own fp32 state, or the block dequantized into buf.
static inline float* optim_q8_block_load(const unsigned char* codes, const float* absmax, float* state32,
                                         const float* map, const size_t* small_off, int s, size_t b, size_t start,
                                         size_t rel, size_t len, float* buf) {
    if (small_off[s] != OPT_NOT_SMALL) return state32 + small_off[s] + rel;
    const float am = absmax[b];
    for (size_t j = 0; j < len; j++) buf[j] = map[codes[start + j]] * am;
    return buf;
}

static inline void sgd_lion_int8_update_cpu(OptimKind kind, int nesterov, float* params, const float* grads,
                                            const Adamw8Buffers* q, const Quant8Index* ix, const OptimSegment* segs,
                                            int nseg, const size_t* block0, const size_t* small_off,
                                            const OptimStepArgs* a, float grad_scale) {
    const size_t nblocks = block0[nseg];
    #pragma omp parallel
    {
        float mb[OPT_BLOCK];
        #pragma omp for schedule(static)
        for (size_t b = 0; b < nblocks; b++) {
            const int s = optim_block_segment(block0, nseg, b);
            const size_t rel = (b - block0[s]) * OPT_BLOCK, start = segs[s].offset + rel;
            const size_t rest = segs[s].count - rel, len = rest < OPT_BLOCK ? rest : OPT_BLOCK;
            const float lr = a->lr * segs[s].lr_mult, wd = segs[s].weight_decay;
            float* p = params + segs[s].param + rel;
            const float* g = grads + start;
            float* ms = optim_q8_block_load(q->qm, q->absmax_m, q->m32, q->maps, small_off, s, b, start, rel, len, mb);
            if (kind == OPT_LION) {
                #pragma omp simd
                for (size_t j = 0; j < len; j++)
                    p[j] = lion_element(p[j], g[j] * grad_scale, &ms[j], a->beta1, a->one_minus_beta1, a->beta2,
                                        a->one_minus_beta2, lr, wd);
            } else {
                #pragma omp simd
                for (size_t j = 0; j < len; j++)
                    p[j] = sgd_element(p[j], g[j] * grad_scale, &ms[j], a->momentum, a->one_minus_dampening,
                                       a->first_step, nesterov, lr, wd);
            }
            if (small_off[s] == OPT_NOT_SMALL) q->absmax_m[b] = quant8_block_quantize_fast(mb, len, &ix[0], 1, q->qm + start);
        }
    }
}

// ----------------------------------------------------------------------------
// LAMB with bf16 (q NULL) or int8 (q, ix) m, v; the order of the sums and the trust ratios as
// lamb_update_cpu (llmc/optim/optim.h)

typedef struct {
    uint16_t *m16, *v16;        // bf16 state, or NULL
    const Adamw8Buffers* q;     // int8 state, or NULL
    const Quant8Index* ix;      // (2) int8: the quantize indexes (signed, unsigned)
    const size_t* small_off;    // (nseg) int8: the small tensors' fp32 state
} LambLowp;

// Block b's m, v as fp32 into mb, vb: the stored values (bf16 widened, int8 dequantized).
static inline void lamb_lowp_load(const LambLowp* L, int s, size_t b, size_t start, size_t rel, size_t len, float* mb,
                                  float* vb) {
    if (L->q == NULL) {
        #pragma omp simd
        for (size_t j = 0; j < len; j++) {
            mb[j] = bf16_bits_to_float(L->m16[start + j]);
            vb[j] = bf16_bits_to_float(L->v16[start + j]);
        }
        return;
    }
    const Adamw8Buffers* q = L->q;
    const float* ms = optim_q8_block_load(q->qm, q->absmax_m, q->m32, q->maps, L->small_off, s, b, start, rel, len, mb);
    const float* vs = optim_q8_block_load(q->qv, q->absmax_v, q->v32, q->maps + 256, L->small_off, s, b, start, rel, len, vb);
    if (ms != mb) {
        for (size_t j = 0; j < len; j++) { mb[j] = ms[j]; vb[j] = vs[j]; }
    }
}

// Stores block b's updated m, v and leaves in mb, vb the values stored (what pass 2 reads back).
static inline void lamb_lowp_store(const LambLowp* L, int s, size_t b, size_t start, size_t pstart, size_t rel,
                                   size_t len, unsigned long long key, float* mb, float* vb) {
    if (L->q == NULL) {
        #pragma omp simd
        for (size_t j = 0; j < len; j++) {
            L->m16[start + j] = bf16_bits_round_stochastic(mb[j], srng_bits(key, pstart + j, 1));
            L->v16[start + j] = bf16_bits_round_stochastic(vb[j], srng_bits(key, pstart + j, 2));
            mb[j] = bf16_bits_to_float(L->m16[start + j]);
            vb[j] = bf16_bits_to_float(L->v16[start + j]);
        }
        return;
    }
    const Adamw8Buffers* q = L->q;
    if (L->small_off[s] != OPT_NOT_SMALL) {
        for (size_t j = 0; j < len; j++) {
            q->m32[L->small_off[s] + rel + j] = mb[j];
            q->v32[L->small_off[s] + rel + j] = vb[j];
        }
        return;
    }
    const float am = quant8_block_quantize_fast(mb, len, &L->ix[0], 1, q->qm + start);
    const float av = quant8_block_quantize_fast(vb, len, &L->ix[1], 0, q->qv + start);
    q->absmax_m[b] = am;
    q->absmax_v[b] = av;
    for (size_t j = 0; j < len; j++) {
        mb[j] = q->maps[q->qm[start + j]] * am;
        vb[j] = q->maps[256 + q->qv[start + j]] * av;
    }
}

static inline void lamb_lowp_update_cpu(float* params, const float* grads, const LambLowp* L, float* partials,
                                        float* trust, const OptimSegment* segs, int nseg, const size_t* block0,
                                        const OptimStepArgs* a, float grad_scale, const OptimReduce* red) {
    const size_t nblocks = block0[nseg];
    const float beta1 = a->beta1, beta2 = a->beta2, omb1 = a->one_minus_beta1, omb2 = a->one_minus_beta2;
    const float eps = a->eps, bc1 = a->inv_bias_corr1, bc2 = a->inv_bias_corr2;
    #pragma omp parallel
    {
        float mb[OPT_BLOCK], vb[OPT_BLOCK], ap[OPT_BLOCK / 2], au[OPT_BLOCK / 2];
        // pass 1: moments, stored; the block sums of p^2 and u^2 (u from the stored moments)
        #pragma omp for schedule(static)
        for (size_t b = 0; b < nblocks; b++) {
            const OptimBlockAt at = optim_block_at(segs, block0, nseg, b);
            const int s = at.s;
            const size_t rel = at.rel, start = at.start, pstart = at.pstart, len = at.len;
            const float wd = segs[s].weight_decay;
            lamb_lowp_load(L, s, b, start, rel, len, mb, vb);
            #pragma omp simd
            for (size_t j = 0; j < len; j++) {
                const float gj = grads[start + j] * grad_scale;
                mb[j] = adamw_m(mb[j], gj, beta1, omb1);
                vb[j] = adamw_v(vb[j], gj, beta2, omb2);
            }
            lamb_lowp_store(L, s, b, start, pstart, rel, len, a->rng_key, mb, vb);
            for (size_t j = 0; j < OPT_BLOCK / 2; j++) ap[j] = au[j] = 0.0f;
            for (size_t h = 0; h < 2; h++) { // lane l accumulates elements l, then l + OPT_BLOCK / 2
                const size_t j0 = h * (OPT_BLOCK / 2);
                const size_t cnt = len > j0 ? (len - j0 < OPT_BLOCK / 2 ? len - j0 : OPT_BLOCK / 2) : 0;
                const float *pp = params + pstart + j0, *mm = mb + j0, *vv = vb + j0;
                #pragma omp simd
                for (size_t l = 0; l < cnt; l++) {
                    const float u = lamb_direction(pp[l], mm[l], vv[l], wd, bc1, bc2, eps);
                    ap[l] = fmaf(pp[l], pp[l], ap[l]);
                    au[l] = fmaf(u, u, au[l]);
                }
            }
            lamb_block_sums(ap, au, partials, nblocks, b);
        }
        lamb_trust_cpu(segs, nseg, block0, partials, red, trust);  // as lamb_update_cpu
        // pass 2: u from the stored moments, the update
        #pragma omp for schedule(static)
        for (size_t b = 0; b < nblocks; b++) {
            const int s = optim_block_segment(block0, nseg, b);
            const size_t rel = (b - block0[s]) * OPT_BLOCK, start = segs[s].offset + rel;
            const size_t rest = segs[s].count - rel, len = rest < OPT_BLOCK ? rest : OPT_BLOCK;
            const float step = (a->lr * segs[s].lr_mult) * trust[s], wd = segs[s].weight_decay;
            float* p = params + segs[s].param + rel;
            lamb_lowp_load(L, s, b, start, rel, len, mb, vb);
            #pragma omp simd
            for (size_t j = 0; j < len; j++) p[j] = fmaf(-step, lamb_direction(p[j], mb[j], vb[j], wd, bc1, bc2, eps), p[j]);
        }
    }
}

#endif // LLMC_OPTIM_LOWP_H

/*
 kernels.cuh: the GPU kernels of the optimizer family (SGD with momentum / Nesterov, LAMB,
 Lion) and the one GPU entry point of every optimizer, optim_step_gpu(), which also routes
 AdamW to llmc/optim/adamw.cuh (fp32 state, AMSGrad) and llmc/optim/adamw_lowp.cuh (bf16, int8 state). The
 state is llmc/optim/state.h's OptimState, carved from device memory with the CPU layout.

 Conventions of llmc/optim/adamw.cuh: one launch over all segments (LAMB: three), segment table in
 shared memory, 128-bit streaming loads and stores, params fp32 or bf16 with optional fp32 master
 weights (p is read from the master when there is one), bf16 params rounded stochastically
 (srng_bits stream 0 at the global element index param + k, key srng_step_key(cfg.seed, step)) or to nearest even,
 gradients fp32 or bf16, the clip scale from a device pointer (NULL: 1). Every element is
 computed with the operations of the CPU update of llmc/optim/optim.h in the same order (explicit fmaf),
 so the fp32 results are bit-identical to optim_step_cpu (dev/cuda/optimizers.cu checks it).

 SGD, Lion: one elementwise kernel (optim_elementwise_kernel), the op and the state's storage
   (fp32 or bf16, rounded stochastically: llmc/optim/storage.h) template parameters.
   Traffic per parameter, fp32 params and grads: SGD with momentum and Lion 20 B (bf16 state 16 B),
   plain SGD 12 B.
 int8 state (SGD, Lion, LAMB's update): optim_int8_kernel, one CUDA block per OPT_BLOCK block as
   AdamW's 8-bit kernel (dequantize, the op, block absmax, requantize); ~14 B/param.
 LAMB, per tensor: (1) lamb_moments_kernel: one CUDA block of 256 threads per block of OPT_BLOCK
   elements of a tensor; thread t owns elements 4t..4t+3 and 1024+4t..1024+4t+3 (two 128-bit
   words), updates m, v, and accumulates p^2 and u^2 per element slot with fmaf; the four slots are
   added left to right and the 256 thread sums in a halving tree (llmc/optim/optim.h's order); the block
   writes its two partial sums. (2) lamb_trust_kernel: one CUDA block per segment sums the partials
   of the segment's tensor (its adjacent pieces with the same tensor id, optim_tensor_blocks) in double (thread t: partials t, t + 256, ... in order; then the halving tree) and
   writes the trust ratio. (3) optim_elementwise_kernel with the LAMB op: u again from the stored m,
   v and the update with lr * lr_mult * trust. 40 B/param; no atomics, no order depending on the
   grid: the same bits on any GPU and under the CPU harness.

 Use:
   OptimState st;
   optim_state_init_device(&st, &cfg, segs, nseg, n);        // cudaMalloc + zeroed state
   (or optim_state_attach_device(&st, &cfg, segs, nseg, n, mem) into the caller's block)
   optim_step_gpu(&st, params, master, grads, lr, step, stochastic, d_clip_scale, stream);
   optim_state_free_device(&st);
 LAMB with bf16 or int8 state: the moments kernel stores the rounded (requantized) m, v and
   computes u from them; the update reads them back (llmc/optim/update.h).
 To add an optimizer: its CPU update in llmc/optim/optim.h, its kernel (an Op for the elementwise
 kernel, or its own) here, a case in optim_step_gpu, and a case in dev/cuda/optimizers.cu.
*/
#ifndef LLMC_OPTIM_KERNELS_CUH
#define LLMC_OPTIM_KERNELS_CUH

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include "llmc/optim/adamw.cuh"
#include "llmc/optim/adamw_lowp.cuh"
#include "llmc/optim/optim.h"
#include "llmc/optim/engine.h"
#include "llmc/optim/state.h"
#include "llmc/cuda/profile.cuh"

#define OPT_ELEM_BLOCK 512
#define LAMB_THREADS 256 // x 8 elements = one OPT_BLOCK block; the trust kernel's block too

// ----------------------------------------------------------------------------
// the elementwise ops: p (fp32, from the master if any), g (scaled), the state s1 (m) in place

enum OptimElemOp { OP_SGD_PLAIN, OP_SGD, OP_SGD_NESTEROV, OP_LION, OP_LAMB_APPLY };

// Number of fp32 state buffers an op reads (and, but for LAMB, writes).
template <int kOp>
struct OptimOpTraits {
    static constexpr int states = kOp == OP_SGD_PLAIN ? 0 : kOp == OP_LAMB_APPLY ? 2 : 1;
    static constexpr bool reads_grads = kOp != OP_LAMB_APPLY;
    static constexpr bool writes_state = kOp != OP_LAMB_APPLY;
};

// One element; returns the new p. step_lr: lr * lr_mult (* trust for LAMB).
template <int kOp>
__device__ __forceinline__ float optim_element(float p, float g, float& s1, float s2, float wd, float step_lr,
                                             const OptimStepArgs& a) {
    if constexpr (kOp == OP_SGD_PLAIN) {
        return rule_sgd_plain(p, g, step_lr, wd);
    } else if constexpr (kOp == OP_SGD || kOp == OP_SGD_NESTEROV) { // llmc/optim/rules.h
        return rule_sgd(p, g, &s1, kOp == OP_SGD_NESTEROV, step_lr, wd, &a);
    } else if constexpr (kOp == OP_LION) {
        return rule_lion(p, g, &s1, step_lr, wd, &a);
    } else { // OP_LAMB_APPLY: s1 = m, s2 = v, already updated
        return rule_lamb_apply(p, s1, s2, step_lr, wd, &a);
    }
}

// The state of the elementwise ops is Ts: fp32, or bf16 rounded stochastically after the update
// (llmc/optim/storage.h: stream 1 at the global index pi).
template <typename Ts>
__device__ __forceinline__ Ts optim_state_store_value(float x, unsigned long long key, size_t pi) {
    if constexpr (sizeof(Ts) == 2) return bf16_round_stochastic(x, srng_bits(key, pi, 1));
    else return x;
}

// Elements per chunk: whole 128-bit words of params, grads and the state the op reads.
template <int kOp, typename Tp, typename Tg, typename Ts>
struct OptimEwWidth {
    static constexpr size_t mn = sizeof(Tp) < sizeof(Tg) ? sizeof(Tp) : sizeof(Tg);
    static constexpr size_t ms = OptimOpTraits<kOp>::states > 0 && sizeof(Ts) < mn ? sizeof(Ts) : mn;
    static constexpr int V = (int)(16 / ms);
};

template <int kOp, typename Tp, typename Tg, typename Ts, bool kMaster>
__device__ __forceinline__ void optim_elementwise_one(Tp* params, float* master, const Tg* grads, Ts* s1,
                                                    const Ts* s2, size_t i, size_t pi, float wd, float step_lr,
                                                    float scale, const OptimStepArgs& a, bool stochastic) {
    using Tr = OptimOpTraits<kOp>;
    float p = optim_load_param<Tp, kMaster>(params, master, i, pi);
    float g = Tr::reads_grads ? (float)grads[i] * scale : 0.0f;
    float m = Tr::states >= 1 ? (float)s1[i] : 0.0f, v = Tr::states >= 2 ? (float)s2[i] : 0.0f;
    p = optim_element<kOp>(p, g, m, v, wd, step_lr, a);
    if (Tr::states >= 1 && Tr::writes_state) s1[i] = optim_state_store_value<Ts>(m, a.rng_key, pi);
    optim_store_param_rt<Tp, kMaster>(stochastic, params, master, i, pi, p, a.rng_key);
}

// V state values from element i0 (parameters from p0: the random bits of bf16 state).
template <int V, typename Ts>
__device__ __forceinline__ void optim_state_store(Ts* s, size_t i0, size_t p0, const float (&x)[V],
                                                  unsigned long long key) {
    if constexpr (sizeof(Ts) == 2) {
#pragma unroll
        for (int k = 0; k < V / 8; k++) {
            Vec128<__nv_bfloat16> out;
#pragma unroll
            for (int e = 0; e < 8; e++) out[e] = optim_state_store_value<Ts>(x[k * 8 + e], key, p0 + k * 8 + e);
            store128cs(s + i0 + k * 8, out);
        }
    } else {
        adamw_store<V>(s + i0, x);
    }
}

// seg_mul: per-segment factor of the learning rate (LAMB's trust ratios), or NULL. stochastic:
// bf16 params rounded stochastically (else to nearest).
template <int kOp, typename Tp, typename Tg, typename Ts, bool kMaster>
__global__ void __launch_bounds__(OPT_ELEM_BLOCK, 2)
optim_elementwise_kernel(Tp* __restrict__ params, float* __restrict__ master, const Tg* __restrict__ grads,
                       Ts* __restrict__ s1, const Ts* __restrict__ s2, size_t n,
                       const OptimSegment* __restrict__ segments, int nseg, const float* __restrict__ seg_mul,
                       OptimStepArgs a, const float* __restrict__ clip_scale, bool stochastic) {
    using Tr = OptimOpTraits<kOp>;
    constexpr int V = OptimEwWidth<kOp, Tp, Tg, Ts>::V;
    const float scale = adamw_clip_scale(clip_scale);
    auto one = [&](size_t i, size_t pi, float wd, float step_lr) {
        optim_elementwise_one<kOp, Tp, Tg, Ts, kMaster>(params, master, grads, s1, s2, i, pi, wd, step_lr, scale, a,
                                                        stochastic);
    };
    auto chunk = [&](size_t i0, size_t p0, float wd, float step_lr) {
        float p[V], g[V] = {}, m[V] = {}, v[V] = {};
        optim_load_params<V, Tp, kMaster>(params, master, i0, p0, p);
        if constexpr (Tr::reads_grads) adamw_load<V>(grads + i0, g);
        if constexpr (Tr::states >= 1) adamw_load<V>(s1 + i0, m);
        if constexpr (Tr::states >= 2) adamw_load<V>(s2 + i0, v);
#pragma unroll
        for (int j = 0; j < V; j++) p[j] = optim_element<kOp>(p[j], g[j] * scale, m[j], v[j], wd, step_lr, a);
        if constexpr (Tr::states >= 1 && Tr::writes_state) optim_state_store<V, Ts>(s1, i0, p0, m, a.rng_key);
        optim_store_params_rt<V, Tp, kMaster>(stochastic, params, master, i0, p0, p, a.rng_key);
    };
    adamw_for_each_chunk<V>(segments, nseg, seg_mul, a.lr, n, chunk, one);
}

template <int kOp, typename Tp, typename Tg, typename Ts, bool kMaster>
static void optim_elementwise_launch(Tp* params, float* master, const Tg* grads, Ts* s1, const Ts* s2, size_t n,
                                   const OptimSegment* d_segs, int nseg, const float* d_seg_mul, const OptimStepArgs& a,
                                   bool stochastic, const float* d_clip_scale, cudaStream_t stream) {
    constexpr size_t V = (size_t)OptimEwWidth<kOp, Tp, Tg, Ts>::V;
    const size_t want = CEIL_DIV(n / V, (size_t)OPT_ELEM_BLOCK), full = (size_t)cuda_sm_count() * 2;
    const unsigned grid = (unsigned)(want < full ? (want > 0 ? want : 1) : full);
    launch(optim_elementwise_kernel<kOp, Tp, Tg, Ts, kMaster>, grid, OPT_ELEM_BLOCK, adamw_segments_smem_bytes(nseg),
           stream, params, master, grads, s1, s2, n, d_segs, nseg, d_seg_mul, a, d_clip_scale, stochastic);
}

// runtime options -> template variants (master weights: bf16 params only; the rounding is a kernel
// argument); Ts: the state's storage, float or __nv_bfloat16
template <int kOp, typename Tp, typename Tg, typename Ts>
static void optim_elementwise(Tp* params, float* master, const Tg* grads, Ts* s1, const Ts* s2, size_t n,
                            const OptimSegment* d_segs, int nseg, const float* d_seg_mul, const OptimStepArgs& a,
                            bool stochastic, const float* d_clip_scale, cudaStream_t stream) {
#define OPT_EW_ARGS params, master, grads, s1, s2, n, d_segs, nseg, d_seg_mul, a, stochastic, d_clip_scale, stream
    if constexpr (sizeof(Tp) == 2) {
        if (master != nullptr) return optim_elementwise_launch<kOp, Tp, Tg, Ts, true>(OPT_EW_ARGS);
    }
    optim_elementwise_launch<kOp, Tp, Tg, Ts, false>(OPT_EW_ARGS);
#undef OPT_EW_ARGS
}

// ----------------------------------------------------------------------------
// LAMB: moments and per-block sums, then the trust ratios

// Four consecutive elements as fp32 (fp32: one 128-bit load; bf16: one 64-bit load). p 4-aligned.
template <typename T>
__device__ __forceinline__ void optim_load4(const T* p, float (&out)[4]) {
    if constexpr (sizeof(T) == 4) {
        float4 x = __ldcs(reinterpret_cast<const float4*>(p));
        out[0] = x.x; out[1] = x.y; out[2] = x.z; out[3] = x.w;
    } else {
        const uint2 x = *reinterpret_cast<const uint2*>(p);
        const T* b = reinterpret_cast<const T*>(&x);
#pragma unroll
        for (int e = 0; e < 4; e++) out[e] = (float)b[e];
    }
}

// Sum over the block's 256 threads of one value each, as optim_tree256_f32/f64 (llmc/optim/update.h)
// adds: x[t] += x[t + w] for w = 128 ... 1 (shared memory down to 32, then warp 0 by shuffles,
// which add the same pairs). Valid in thread 0; red has 256 entries; the caller synchronizes
// before reusing red.
template <typename T>
__device__ __forceinline__ T optim_tree256(T x, T* red) {
    red[threadIdx.x] = x;
    __syncthreads();
    for (int w = 128; w >= 32; w >>= 1) {
        if ((int)threadIdx.x < w) red[threadIdx.x] = red[threadIdx.x] + red[threadIdx.x + w];
        __syncthreads();
    }
    T y = red[threadIdx.x % 32];
    if (threadIdx.x < 32) {
        for (int w = 16; w > 0; w >>= 1) y = y + __shfl_down_sync(0xffffffffu, y, w);
    }
    return y;
}

// LAMB's state as the moments kernel sees it (kState: OptimStatePrecision): fp32 m, v; bf16 m16,
// v16; or int8 q with the small tensors' fp32 state at small_off (llmc/optim/storage.h).
struct LambStateArgs {
    float* m;
    float* v;
    __nv_bfloat16* m16;
    __nv_bfloat16* v16;
    Adamw8Buffers q;
    const size_t* small_off;
};

// Block-wide max over the CUDA block (OPT_Q8_THREADS threads) of one value >= 0 each (a max: exact
// in any order, the CPU's quant8_block_quantize_fast absmax); red: OPT_Q8_THREADS / 32 floats.
// Every thread gets it; synchronizes (red is free again on return).
#define OPT_Q8_THREADS 256 // x 8 elements = one OPT_BLOCK block
__device__ __forceinline__ float optim_block_max(float x, float* red) {
    x = adamw8_warp_max(x);
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = x;
    __syncthreads();
    float r = 0.0f;
    for (int w = 0; w < OPT_Q8_THREADS / 32; w++) r = fmaxf(r, red[w]);
    __syncthreads();
    return r;
}

// Four codes from one 32-bit word (c 4-byte aligned), or element by element (n < 4 valid).
__device__ __forceinline__ void optim_codes_load4(const unsigned char* c, bool vec, int nv, unsigned char (&out)[4]) {
    if (vec) {
        const unsigned w = *reinterpret_cast<const unsigned*>(c);
#pragma unroll
        for (int e = 0; e < 4; e++) out[e] = (unsigned char)(w >> (8 * e));
    } else {
#pragma unroll
        for (int e = 0; e < 4; e++) out[e] = e < nv ? c[e] : 0;
    }
}
__device__ __forceinline__ void optim_codes_store4(unsigned char* c, bool vec, int nv, const unsigned char (&in)[4]) {
    if (vec) {
        *reinterpret_cast<unsigned*>(c) = in[0] | in[1] << 8 | in[2] << 16 | (unsigned)in[3] << 24;
    } else {
#pragma unroll
        for (int e = 0; e < 4; e++)
            if (e < nv) c[e] = in[e];
    }
}

// Pass 1 of LAMB: one CUDA block of LAMB_THREADS per block of OPT_BLOCK elements; thread t owns
// elements 4t..4t+3 (h = 0) and 1024+4t.. (h = 1). It updates m, v, stores them (bf16: rounded
// stochastically; int8: requantized with the block's new absmax) and accumulates p^2 and u^2, u
// from the stored values, per element slot in h order (optim_update_cpu's order); then the block's two sums in the halving tree.
template <typename Tp, typename Tg, bool kMaster, int kState>
__global__ void __launch_bounds__(LAMB_THREADS)
lamb_moments_kernel(const Tp* __restrict__ params, const float* __restrict__ master, const Tg* __restrict__ grads,
                    LambStateArgs S, float* __restrict__ partials, const OptimSegment* __restrict__ segments,
                    const size_t* __restrict__ block0, int nseg, OptimStepArgs a, const float* __restrict__ clip_scale) {
    static_assert(LAMB_THREADS * 8 == OPT_BLOCK, "one CUDA block per OPT_BLOCK block, 8 elements per thread");
    static_assert(LAMB_THREADS == OPT_Q8_THREADS, "the int8 absmax reduction's block");
    constexpr bool kInt8 = kState == OPT_STATE_INT8, kBf16 = kState == OPT_STATE_BF16;
    __shared__ float red[LAMB_THREADS];
    __shared__ float maps[kInt8 ? QUANT8_MAP_FLOATS : 1];
    if constexpr (kInt8) {
        for (int i = threadIdx.x; i < QUANT8_MAP_FLOATS; i += blockDim.x) maps[i] = S.q.maps[i];
        __syncthreads();
    }
    const float scale = adamw_clip_scale(clip_scale);
    const size_t nblocks = block0[nseg];
    optim_for_each_block(segments, block0, nseg, [&](size_t b, int s, const OptimSegment& sg, size_t rel, size_t len) {
        const size_t start = sg.offset + rel;
        const float wd = sg.weight_decay;
        const size_t so = kInt8 ? S.small_off[s] : OPT_NOT_SMALL;
        const bool small = kInt8 && so != OPT_NOT_SMALL; // uniform over the CUDA block
        float p[2][4], m[2][4], v[2][4];
        bool vec[2];
        int nv[2];
        size_t i0[2], pi0[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const size_t j0 = (size_t)h * (OPT_BLOCK / 2) + 4 * (size_t)threadIdx.x;
            i0[h] = start + j0;
            pi0[h] = sg.param + rel + j0;
            nv[h] = j0 < len ? (len - j0 < 4 ? (int)(len - j0) : 4) : 0;
            vec[h] = nv[h] == 4 && i0[h] % 4 == 0 && pi0[h] % 4 == 0;
            float g[4];
            if (vec[h]) {
                LS_BRANCH("lamb.vector");
                if constexpr (kMaster) optim_load4(master + i0[h], p[h]); else optim_load4(params + pi0[h], p[h]);
                optim_load4(grads + i0[h], g);
            } else {
                LS_BRANCH("lamb.by_element");
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const bool in = e < nv[h];
                    p[h][e] = in ? optim_load_param<Tp, kMaster>(params, master, i0[h] + e, pi0[h] + e) : 0.0f;
                    g[e] = in ? (float)grads[i0[h] + e] : 0.0f;
                }
            }
            // the state as fp32
            if constexpr (kInt8) {
                if (small) {
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const size_t k = so + rel + (i0[h] - start) + e;
                        m[h][e] = e < nv[h] ? S.q.m32[k] : 0.0f;
                        v[h][e] = e < nv[h] ? S.q.v32[k] : 0.0f;
                    }
                } else {
                    unsigned char cm[4], cv[4];
                    optim_codes_load4(S.q.qm + i0[h], vec[h], nv[h], cm);
                    optim_codes_load4(S.q.qv + i0[h], vec[h], nv[h], cv);
                    const float am = S.q.absmax_m[b], av = S.q.absmax_v[b];
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        m[h][e] = maps[cm[e]] * am;
                        v[h][e] = maps[256 + cv[e]] * av;
                    }
                }
            } else if (vec[h]) {
                if constexpr (kBf16) {
                    optim_load4(S.m16 + i0[h], m[h]);
                    optim_load4(S.v16 + i0[h], v[h]);
                } else {
                    optim_load4(S.m + i0[h], m[h]);
                    optim_load4(S.v + i0[h], v[h]);
                }
            } else {
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const bool in = e < nv[h];
                    if constexpr (kBf16) {
                        m[h][e] = in ? (float)S.m16[i0[h] + e] : 0.0f;
                        v[h][e] = in ? (float)S.v16[i0[h] + e] : 0.0f;
                    } else {
                        m[h][e] = in ? S.m[i0[h] + e] : 0.0f;
                        v[h][e] = in ? S.v[i0[h] + e] : 0.0f;
                    }
                }
            }
#pragma unroll
            for (int e = 0; e < 4; e++) {
                if (e < nv[h]) {
                    const float ge = g[e] * scale;
                    m[h][e] = fmaf(a.beta1, m[h][e], a.one_minus_beta1 * ge);
                    v[h][e] = fmaf(a.beta2, v[h][e], (a.one_minus_beta2 * ge) * ge);
                }
            }
        }
        // store the state; m, v become the stored values
        if constexpr (kInt8) {
            if (small) {
#pragma unroll
                for (int h = 0; h < 2; h++) {
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        if (e >= nv[h]) continue;
                        const size_t k = so + rel + (i0[h] - start) + e;
                        S.q.m32[k] = m[h][e];
                        S.q.v32[k] = v[h][e];
                    }
                }
            } else {
                float mx_m = 0.0f, mx_v = 0.0f;
#pragma unroll
                for (int h = 0; h < 2; h++) {
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        if (e < nv[h]) {
                            mx_m = fmaxf(mx_m, fabsf(m[h][e]));
                            mx_v = fmaxf(mx_v, v[h][e]);
                        }
                    }
                }
                const float am = optim_block_max(mx_m, red), av = optim_block_max(mx_v, red);
                const float inv_m = quant8_inv_absmax(am), inv_v = quant8_inv_absmax(av);
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    unsigned char cm[4], cv[4];
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        cm[e] = quant8_quantize(maps, m[h][e] * inv_m);
                        cv[e] = quant8_quantize(maps + 256, v[h][e] * inv_v);
                        m[h][e] = maps[cm[e]] * am;
                        v[h][e] = maps[256 + cv[e]] * av;
                    }
                    optim_codes_store4(S.q.qm + i0[h], vec[h], nv[h], cm);
                    optim_codes_store4(S.q.qv + i0[h], vec[h], nv[h], cv);
                }
                if (threadIdx.x == 0) {
                    S.q.absmax_m[b] = am;
                    S.q.absmax_v[b] = av;
                }
            }
        } else if constexpr (kBf16) {
#pragma unroll
            for (int h = 0; h < 2; h++) {
                __align__(8) __nv_bfloat16 bm[4];
                __align__(8) __nv_bfloat16 bv[4];
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    bm[e] = bf16_round_stochastic(m[h][e], srng_bits(a.rng_key, pi0[h] + e, 1));
                    bv[e] = bf16_round_stochastic(v[h][e], srng_bits(a.rng_key, pi0[h] + e, 2));
                    m[h][e] = (float)bm[e];
                    v[h][e] = (float)bv[e];
                }
                if (vec[h]) {
                    *reinterpret_cast<uint2*>(S.m16 + i0[h]) = *reinterpret_cast<const uint2*>(bm);
                    *reinterpret_cast<uint2*>(S.v16 + i0[h]) = *reinterpret_cast<const uint2*>(bv);
                } else {
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        if (e >= nv[h]) continue;
                        S.m16[i0[h] + e] = bm[e];
                        S.v16[i0[h] + e] = bv[e];
                    }
                }
            }
        } else {
#pragma unroll
            for (int h = 0; h < 2; h++) {
                if (vec[h]) {
                    __stcs(reinterpret_cast<float4*>(S.m + i0[h]), make_float4(m[h][0], m[h][1], m[h][2], m[h][3]));
                    __stcs(reinterpret_cast<float4*>(S.v + i0[h]), make_float4(v[h][0], v[h][1], v[h][2], v[h][3]));
                } else {
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        if (e >= nv[h]) continue;
                        S.m[i0[h] + e] = m[h][e];
                        S.v[i0[h] + e] = v[h][e];
                    }
                }
            }
        }
        // the sums of p^2 and u^2 per element slot, h = 0 then 1
        float ap[4] = {0.0f, 0.0f, 0.0f, 0.0f}, au[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int h = 0; h < 2; h++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                if (e < nv[h]) {
                    const float u = rule_adam_direction(p[h][e], m[h][e], v[h][e], wd, &a);
                    ap[e] = fmaf(p[h][e], p[h][e], ap[e]);
                    au[e] = fmaf(u, u, au[e]);
                }
            }
        }
        const float sp = optim_tree256(((ap[0] + ap[1]) + ap[2]) + ap[3], red);
        __syncthreads();
        const float su = optim_tree256(((au[0] + au[1]) + au[2]) + au[3], red);
        if (threadIdx.x == 0) {
            partials[b] = sp;
            partials[nblocks + b] = su;
        }
        __syncthreads(); // red[] is reused by the next block
    });
}

// trust[s] from the partial sums of the blocks of segment s's tensor: its own, and those of the
// adjacent pieces of the same tensor (optim_tensor_blocks). One CUDA block of LAMB_THREADS per
// segment.
__global__ void __launch_bounds__(LAMB_THREADS)
lamb_trust_kernel(float* __restrict__ trust, const float* __restrict__ partials, const OptimSegment* __restrict__ segments,
                  const size_t* __restrict__ block0, int nseg) {
    __shared__ double red[LAMB_THREADS];
    const int s = blockIdx.x;
    size_t b0, b1;
    optim_tensor_blocks(segments, nseg, block0, s, &b0, &b1);
    const size_t nblocks = block0[nseg], nb = b1 - b0;
    double sp = 0.0, su = 0.0;
    for (size_t c = threadIdx.x; c < nb; c += LAMB_THREADS) {
        sp += (double)partials[b0 + c];
        su += (double)partials[nblocks + b0 + c];
    }
    sp = optim_tree256(sp, red);
    __syncthreads();
    su = optim_tree256(su, red);
    if (threadIdx.x == 0) trust[s] = rule_lamb_trust(sp, su);
}

// ----------------------------------------------------------------------------
// int8 state of the elementwise ops (SGD, Lion: m; LAMB's update: m, v read only), blockwise as
// llmc/optim/update.h: one CUDA block of OPT_Q8_THREADS per block of OPT_BLOCK elements, 8 elements
// per thread (128-bit params and grads, 64-bit codes); dequantize, the op in fp32, the block's new
// absmax, requantize. Tensors under QUANT8_MIN_ELEMS: fp32 m32 (v32), packed.

template <int kOp, typename Tp, typename Tg, bool kMaster>
__global__ void __launch_bounds__(OPT_Q8_THREADS, 4)
optim_int8_kernel(Tp* __restrict__ params, float* __restrict__ master, const Tg* __restrict__ grads, Adamw8Buffers q,
                  const OptimSegment* __restrict__ segments, const size_t* __restrict__ block0,
                  const size_t* __restrict__ small_off, int nseg, const float* __restrict__ seg_mul, OptimStepArgs a,
                  const float* __restrict__ clip_scale, bool stochastic) {
    using Tr = OptimOpTraits<kOp>;
    constexpr int V = 8;
    static_assert(OPT_Q8_THREADS * V == OPT_BLOCK, "one CUDA block per quantization block");
    __shared__ float maps[QUANT8_MAP_FLOATS];
    __shared__ float red[OPT_Q8_THREADS / 32];
    for (int i = threadIdx.x; i < QUANT8_MAP_FLOATS; i += blockDim.x) maps[i] = q.maps[i];
    __syncthreads();
    const float scale = adamw_clip_scale(clip_scale);
    optim_for_each_block(segments, block0, nseg, [&](size_t b, int s, const OptimSegment& sg, size_t rel, size_t len) {
        const size_t start = sg.offset + rel;
        const size_t j0 = (size_t)threadIdx.x * V, i0 = start + j0, pi0 = sg.param + rel + j0;
        const int nv = j0 < len ? (len - j0 < V ? (int)(len - j0) : V) : 0;
        const float wd = sg.weight_decay;
        const float step_lr = seg_mul != nullptr ? (a.lr * sg.lr_mult) * seg_mul[s] : a.lr * sg.lr_mult;
        const size_t so = small_off[s];
        if (so != OPT_NOT_SMALL) { // a small tensor: fp32 state, packed (uniform per block)
            LS_BRANCH("optim_int8.small_tensor");
            for (int j = 0; j < nv; j++) {
                const size_t i = i0 + j, k = so + rel + j0 + j;
                float m = q.m32[k], v = Tr::states >= 2 ? q.v32[k] : 0.0f;
                const float g = Tr::reads_grads ? (float)grads[i] * scale : 0.0f;
                const float p = optim_element<kOp>(optim_load_param<Tp, kMaster>(params, master, i, pi0 + j), g, m, v, wd,
                                                   step_lr, a);
                if (Tr::writes_state) q.m32[k] = m;
                optim_store_param_rt<Tp, kMaster>(stochastic, params, master, i, pi0 + j, p, a.rng_key);
            }
            return;
        }
        const float am_old = q.absmax_m[b], av_old = Tr::states >= 2 ? q.absmax_v[b] : 0.0f;
        float p[V], g[V] = {}, m[V], v[V] = {};
        const bool vec = nv == V && i0 % V == 0 && pi0 % V == 0;
        if (vec) {
            LS_BRANCH("optim_int8.vector");
            optim_load_params<V, Tp, kMaster>(params, master, i0, pi0, p);
            if constexpr (Tr::reads_grads) adamw_load<V>(grads + i0, g);
            const uint2 cm = *reinterpret_cast<const uint2*>(q.qm + i0);
#pragma unroll
            for (int j = 0; j < V; j++) m[j] = maps[((j < 4 ? cm.x : cm.y) >> (8 * (j % 4))) & 0xffu] * am_old;
            if constexpr (Tr::states >= 2) {
                const uint2 cv = *reinterpret_cast<const uint2*>(q.qv + i0);
#pragma unroll
                for (int j = 0; j < V; j++) v[j] = maps[256 + (((j < 4 ? cv.x : cv.y) >> (8 * (j % 4))) & 0xffu)] * av_old;
            }
        } else {
            LS_BRANCH("optim_int8.by_element");
#pragma unroll
            for (int j = 0; j < V; j++) {
                p[j] = m[j] = 0.0f;
                if (j < nv) {
                    p[j] = optim_load_param<Tp, kMaster>(params, master, i0 + j, pi0 + j);
                    if (Tr::reads_grads) g[j] = (float)grads[i0 + j];
                    m[j] = maps[q.qm[i0 + j]] * am_old;
                    if (Tr::states >= 2) v[j] = maps[256 + q.qv[i0 + j]] * av_old;
                }
            }
        }
        float mx = 0.0f;
#pragma unroll
        for (int j = 0; j < V; j++) {
            if (j < nv) {
                p[j] = optim_element<kOp>(p[j], g[j] * scale, m[j], v[j], wd, step_lr, a);
                mx = fmaxf(mx, fabsf(m[j]));
            }
        }
        if constexpr (Tr::writes_state) {
            const float am = optim_block_max(mx, red), inv = quant8_inv_absmax(am);
            unsigned char c[V];
#pragma unroll
            for (int j = 0; j < V; j++) c[j] = quant8_quantize(maps, m[j] * inv);
            if (vec) {
                uint2 o;
                o.x = c[0] | c[1] << 8 | c[2] << 16 | (unsigned)c[3] << 24;
                o.y = c[4] | c[5] << 8 | c[6] << 16 | (unsigned)c[7] << 24;
                *reinterpret_cast<uint2*>(q.qm + i0) = o;
            } else {
#pragma unroll
                for (int j = 0; j < V; j++)
                    if (j < nv) q.qm[i0 + j] = c[j];
            }
            if (threadIdx.x == 0) q.absmax_m[b] = am;
        }
        if (vec) {
            optim_store_params_rt<V, Tp, kMaster>(stochastic, params, master, i0, pi0, p, a.rng_key);
        } else {
#pragma unroll
            for (int j = 0; j < V; j++)
                if (j < nv) optim_store_param_rt<Tp, kMaster>(stochastic, params, master, i0 + j, pi0 + j, p[j], a.rng_key);
        }
    });
}

template <int kOp, typename Tp, typename Tg, bool kMaster>
static void optim_int8_launch(OptimState* st, Tp* params, float* master, const Tg* grads, const float* d_seg_mul,
                              const OptimStepArgs& a, bool stochastic, const float* d_clip_scale, cudaStream_t stream) {
    const size_t full = (size_t)cuda_sm_count() * 8;
    const unsigned grid = (unsigned)(st->nblocks < full ? st->nblocks : full);
    const Adamw8Buffers q = {st->qm, st->qv, st->absmax_m, st->absmax_v, st->m32, st->v32, st->maps, nullptr, nullptr, nullptr};
    launch(optim_int8_kernel<kOp, Tp, Tg, kMaster>, grid, OPT_Q8_THREADS, 0, stream, params, master, grads, q,
           (const OptimSegment*)st->d_segs, (const size_t*)st->d_block0, (const size_t*)st->d_small_off, st->nseg,
           d_seg_mul, a, d_clip_scale, stochastic);
}

// runtime options -> template variants, as optim_elementwise
template <int kOp, typename Tp, typename Tg>
static void optim_int8(OptimState* st, Tp* params, float* master, const Tg* grads, const float* d_seg_mul,
                       const OptimStepArgs& a, bool stochastic, const float* d_clip_scale, cudaStream_t stream) {
    if (st->nblocks == 0) return;
#define OPT_Q8_ARGS st, params, master, grads, d_seg_mul, a, stochastic, d_clip_scale, stream
    if constexpr (sizeof(Tp) == 2) {
        if (master != nullptr) return optim_int8_launch<kOp, Tp, Tg, true>(OPT_Q8_ARGS);
    }
    optim_int8_launch<kOp, Tp, Tg, false>(OPT_Q8_ARGS);
#undef OPT_Q8_ARGS
}

// SGD with momentum, Lion: m fp32, bf16 or int8.
template <int kOp, typename Tp, typename Tg>
static void optim_m_update(OptimState* st, Tp* params, float* master, const Tg* grads, const OptimStepArgs& a, bool sr,
                           const float* d_clip_scale, cudaStream_t stream) {
    if (st->cfg.state == OPT_STATE_BF16) {
        optim_elementwise<kOp, Tp, Tg, __nv_bfloat16>(params, master, grads, (__nv_bfloat16*)st->m16, nullptr, st->n,
                                                      st->d_segs, st->nseg, nullptr, a, sr, d_clip_scale, stream);
    } else if (st->cfg.state == OPT_STATE_INT8) {
        optim_int8<kOp, Tp, Tg>(st, params, master, grads, nullptr, a, sr, d_clip_scale, stream);
    } else {
        optim_elementwise<kOp, Tp, Tg, float>(params, master, grads, st->m, (const float*)nullptr, st->n, st->d_segs,
                                              st->nseg, nullptr, a, sr, d_clip_scale, stream);
    }
}

// ----------------------------------------------------------------------------
// LAMB's three launches

template <typename Tp, typename Tg, int kState>
static void lamb_moments_launch(OptimState* st, const Tp* params, const float* master, const Tg* grads,
                                const OptimStepArgs& a, const float* d_clip_scale, cudaStream_t stream) {
    const unsigned grid = (unsigned)(st->nblocks < (size_t)cuda_sm_count() * 8 ? st->nblocks : (size_t)cuda_sm_count() * 8);
    const Adamw8Buffers q = {st->qm, st->qv, st->absmax_m, st->absmax_v, st->m32, st->v32, st->maps, nullptr, nullptr, nullptr};
    const LambStateArgs S = {st->m, st->v, (__nv_bfloat16*)st->m16, (__nv_bfloat16*)st->v16, q, (const size_t*)st->d_small_off};
    if (master != nullptr) {
        launch(lamb_moments_kernel<Tp, Tg, true, kState>, grid, LAMB_THREADS, 0, stream, params, master, grads, S,
               st->partials, (const OptimSegment*)st->d_segs, (const size_t*)st->d_block0, st->nseg, a, d_clip_scale);
    } else {
        launch(lamb_moments_kernel<Tp, Tg, false, kState>, grid, LAMB_THREADS, 0, stream, params, master, grads, S,
               st->partials, (const OptimSegment*)st->d_segs, (const size_t*)st->d_block0, st->nseg, a, d_clip_scale);
    }
}

// LAMB's pass 1: the moments and the block sums of p^2 and u^2 (st->partials).
template <typename Tp, typename Tg>
static void lamb_moments(OptimState* st, const Tp* params, const float* master, const Tg* grads, const OptimStepArgs& a,
                         const float* d_clip_scale, cudaStream_t stream) {
    const OptimStatePrecision prec = st->cfg.state;
    if (prec == OPT_STATE_BF16) lamb_moments_launch<Tp, Tg, OPT_STATE_BF16>(st, params, master, grads, a, d_clip_scale, stream);
    else if (prec == OPT_STATE_INT8) lamb_moments_launch<Tp, Tg, OPT_STATE_INT8>(st, params, master, grads, a, d_clip_scale, stream);
    else lamb_moments_launch<Tp, Tg, OPT_STATE_FP32>(st, params, master, grads, a, d_clip_scale, stream);
}

// LAMB's trust ratios (st->trust) from the block sums: on the device, or (ZeRO-1: st->reduce) on
// the host with the sums over the processes.
static inline void lamb_trust(OptimState* st, cudaStream_t stream) {
    if (st->reduce.hook == NULL) {
        launch(lamb_trust_kernel, (unsigned)st->nseg, LAMB_THREADS, 0, stream, st->trust, (const float*)st->partials,
               (const OptimSegment*)st->d_segs, (const size_t*)st->d_block0, st->nseg);
        return;
    }
    const size_t nb = st->nblocks;
    float* h = (float*)mallocCheck((2 * nb + (size_t)st->nseg) * sizeof(float));
    cudaCheck(cudaMemcpyAsync(h, st->partials, 2 * nb * sizeof(float), cudaMemcpyDeviceToHost, stream));
    cudaCheck(cudaStreamSynchronize(stream));
    lamb_trust_reduced(st->segs, st->nseg, st->block0, h, &st->reduce, h + 2 * nb);
    cudaCheck(cudaMemcpyAsync(st->trust, h + 2 * nb, (size_t)st->nseg * sizeof(float), cudaMemcpyHostToDevice, stream));
    cudaCheck(cudaStreamSynchronize(stream));
    free(h);
}

// LAMB's pass 2: the update with the trust ratios.
template <typename Tp, typename Tg>
static void lamb_apply(OptimState* st, Tp* params, float* master, const Tg* grads, const OptimStepArgs& a, bool stochastic,
                       const float* d_clip_scale, cudaStream_t stream) {
    const OptimStatePrecision prec = st->cfg.state;
    if (prec == OPT_STATE_BF16) {
        optim_elementwise<OP_LAMB_APPLY, Tp, Tg, __nv_bfloat16>(params, master, grads, (__nv_bfloat16*)st->m16,
                                                                (const __nv_bfloat16*)st->v16, st->n, st->d_segs, st->nseg,
                                                                st->trust, a, stochastic, d_clip_scale, stream);
    } else if (prec == OPT_STATE_INT8) {
        optim_int8<OP_LAMB_APPLY, Tp, Tg>(st, params, master, grads, st->trust, a, stochastic, d_clip_scale, stream);
    } else {
        optim_elementwise<OP_LAMB_APPLY, Tp, Tg, float>(params, master, grads, st->m, (const float*)st->v, st->n, st->d_segs,
                                                        st->nseg, st->trust, a, stochastic, d_clip_scale, stream);
    }
}

template <typename Tp, typename Tg>
static void lamb_update(OptimState* st, Tp* params, float* master, const Tg* grads, const OptimStepArgs& a,
                        bool stochastic, const float* d_clip_scale, cudaStream_t stream) {
    lamb_moments(st, params, master, grads, a, d_clip_scale, stream);
    lamb_trust(st, stream);
    lamb_apply(st, params, master, grads, a, stochastic, d_clip_scale, stream);
}

// ----------------------------------------------------------------------------
// the state in device memory, and the entry point

// AdamW's kernels of each state precision (llmc/optim/adamw.cuh, adamw_lowp.cuh) on st; sr: bf16
// params rounded stochastically. optim_step_gpu's AdamW, and Muon's AdamW tensors.
template <typename Tp, typename Tg>
static void optim_adamw_step_gpu(OptimState* st, Tp* params, float* master, const Tg* grads, float lr, int step, bool sr,
                                 const float* d_clip_scale, cudaStream_t stream) {
    const OptimConfig* c = &st->cfg;
    AdamWParams hp = {};
    hp.lr = lr;
    hp.beta1 = c->beta1;
    hp.beta2 = c->beta2;
    hp.eps = c->eps;
    hp.amsgrad = c->amsgrad;
    hp.stochastic_rounding = sr;
    hp.seed = c->seed;
    if (c->state == OPT_STATE_BF16 || c->state == OPT_STATE_FP16) {  // (fp16: AdamW only, optim_config_check)
        adamw_update_bf16_state(params, master, grads, (__nv_bfloat16*)st->m16, (__nv_bfloat16*)st->v16,
                                (__nv_bfloat16*)st->vmax16, st->n, st->d_segs, st->nseg, hp, step, d_clip_scale, stream,
                                c->state == OPT_STATE_FP16);
    } else if (c->state == OPT_STATE_INT8) {
        Adamw8Buffers q = {st->qm, st->qv, st->absmax_m, st->absmax_v, st->m32, st->v32, st->maps,
                           st->qvmax, st->absmax_vmax, st->vmax32};
        OptimBlockTables t = {st->d_block0, st->d_small_off, st->nblocks, st->nsmall};
        adamw_update_8bit(params, master, grads, q, st->n, st->d_segs, t, st->nseg, hp, step, d_clip_scale, stream);
    } else {
        AdamWBuffers<Tp, Tg> b = {params, grads, st->m, st->v, master, st->vmax};
        adamw_update(b, st->n, st->d_segs, st->nseg, hp, step, d_clip_scale, stream);
    }
}

// Muon (llmc/optim/muon.cuh, included below; its AdamW runs step through optim_adamw_step_gpu)
template <typename Tp, typename Tg>
static void muon_step_gpu(OptimState* st, Tp* params, float* master, const Tg* grads, float lr, int step, bool sr,
                          const float* d_clip_scale, cudaStream_t stream);
static inline void muon_plan_free(OptimState* st);


// Zeroes a device state as optim_state_zero does a host one (moments 0, int8 codes of 0,
// the maps, trust ratios 1).
static inline void optim_state_zero_device(OptimState* st, cudaStream_t stream) {
    cudaCheck(cudaMemsetAsync(st->memory, 0, st->bytes, stream));
    if (st->qm != NULL) cudaCheck(cudaMemsetAsync(st->qm, QUANT8_ZERO_SIGNED, st->n, stream));
    if (st->qv != NULL) {  // (Muon: its AdamW tensors' only)
        cudaCheck(cudaMemsetAsync(st->qv, QUANT8_ZERO_UNSIGNED, st->cfg.kind == OPT_MUON ? st->nadam : st->n, stream));
    }
    if (st->qvmax != NULL) cudaCheck(cudaMemsetAsync(st->qvmax, QUANT8_ZERO_UNSIGNED, st->n, stream));
    if (st->maps != NULL || st->trust != NULL) {
        float* h = (float*)mallocCheck((QUANT8_MAP_FLOATS + (size_t)st->nseg) * sizeof(float));
        quant8_maps(h, h + 256);
        for (int s = 0; s < st->nseg; s++) h[QUANT8_MAP_FLOATS + s] = 1.0f;
        if (st->maps != NULL) cudaCheck(cudaMemcpy(st->maps, h, QUANT8_MAP_FLOATS * sizeof(float), cudaMemcpyHostToDevice));
        if (st->trust != NULL) cudaCheck(cudaMemcpy(st->trust, h + QUANT8_MAP_FLOATS, (size_t)st->nseg * sizeof(float), cudaMemcpyHostToDevice));
        free(h);
    }
}

// The state of cfg for n parameters in the device block mem (optim_state_bytes(cfg, ...) bytes,
// 16-byte aligned, not owned: the caller frees it), zeroed; the segment and block tables uploaded.
// Fatal on an invalid configuration.
static inline void optim_state_attach_device(OptimState* st, const OptimConfig* cfg, const OptimSegment* segs,
                                                 int nseg, size_t n, void* mem) {
    if (nseg > ADAMW_MAX_SEGMENTS) ls_fatal("optimizer: %d segments (at most %d on the GPU)", nseg, ADAMW_MAX_SEGMENTS);
    optim_state_setup(st, cfg, segs, nseg, n, mem, 1);
    st->owns_memory = 0;
    st->on_device = 1;
    cudaCheck(cudaMalloc((void**)&st->d_segs, (size_t)nseg * sizeof(OptimSegment)));
    cudaCheck(cudaMalloc((void**)&st->d_block0, ((size_t)nseg + 1) * sizeof(size_t)));
    cudaCheck(cudaMalloc((void**)&st->d_small_off, (size_t)nseg * sizeof(size_t)));
    cudaCheck(cudaMemcpy(st->d_segs, segs, (size_t)nseg * sizeof(OptimSegment), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(st->d_block0, st->block0, ((size_t)nseg + 1) * sizeof(size_t), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(st->d_small_off, st->small_off, (size_t)nseg * sizeof(size_t), cudaMemcpyHostToDevice));
    optim_state_zero_device(st, 0);
    cudaCheck(cudaDeviceSynchronize());
}

// The same in its own cudaMalloc of optim_state_bytes (freed by optim_state_free_device).
static inline void optim_state_init_device(OptimState* st, const OptimConfig* cfg, const OptimSegment* segs,
                                               int nseg, size_t n) {
    void* mem = nullptr;
    const size_t bytes = optim_state_bytes(cfg, segs, nseg, n);
    cudaCheck(cudaMalloc(&mem, bytes > 0 ? bytes : 64)); // plain SGD has no state
    optim_state_attach_device(st, cfg, segs, nseg, n, mem);
    st->owns_memory = 1;
}

static inline void optim_state_free_device(OptimState* st) {
    if (st == NULL || !st->on_device) return;
    muon_plan_free(st);
    cudaCheck(cudaFree(st->d_small_off));
    cudaCheck(cudaFree(st->d_block0));
    cudaCheck(cudaFree(st->d_segs));
    if (st->owns_memory) cudaCheck(cudaFree(st->memory));
    st->on_device = 0;
    st->owns_memory = 0;
    optim_state_free(st); // the host tables
}

// One step (step = 1, 2, ... since the state was zeroed) of st's optimizer over all n parameters.
// params: fp32, or bf16 with master weights (master != NULL: p is read from them, params only
// written) or without; stochastic: bf16 params rounded stochastically, else to nearest even.
// grads fp32 or bf16. d_clip_scale: device pointer to the gradient scale, or NULL for 1. All
// buffers 16-byte aligned. Asynchronous on `stream`.
template <typename Tp, typename Tg>
void optim_step_gpu(OptimState* st, Tp* params, float* master, const Tg* grads, float lr, int step,
                        bool stochastic, const float* d_clip_scale, cudaStream_t stream) {
    PROFILE_SCOPE(PROF_OPTIMIZER, stream);
    static_assert(sizeof(Tp) == 2 || sizeof(Tp) == 4, "params are bf16 or fp32");
    static_assert(sizeof(Tg) == 2 || sizeof(Tg) == 4, "grads are bf16 or fp32");
    if (!st->on_device) ls_fatal("optimizer: optim_step_gpu needs a device state (optim_state_init_device)");
    if (step < 1) ls_fatal("optimizer: step %d (steps count from 1)", step);
    if (!isfinite(lr)) ls_fatal("optimizer: learning rate %g", lr);
    if (st->n == 0) return;
    optim_check_params(params, master, "optimizer");
    adamw_check_aligned(grads, "grads");
    const OptimConfig* c = &st->cfg;
    const bool sr = sizeof(Tp) == 2 && stochastic;
    if (c->kind == OPT_ADAMW) {
        optim_adamw_step_gpu(st, params, master, grads, lr, step, sr, d_clip_scale, stream);
        return;
    }
    const OptimStepArgs a = optim_step_args(c, lr, step);
    switch (c->kind) {
        case OPT_SGD:
            if (c->momentum == 0.0f) {
                optim_elementwise<OP_SGD_PLAIN, Tp, Tg, float>(params, master, grads, nullptr, nullptr, st->n, st->d_segs,
                                                             st->nseg, nullptr, a, sr, d_clip_scale, stream);
            } else if (c->nesterov) {
                optim_m_update<OP_SGD_NESTEROV, Tp, Tg>(st, params, master, grads, a, sr, d_clip_scale, stream);
            } else {
                optim_m_update<OP_SGD, Tp, Tg>(st, params, master, grads, a, sr, d_clip_scale, stream);
            }
            break;
        case OPT_LION:
            optim_m_update<OP_LION, Tp, Tg>(st, params, master, grads, a, sr, d_clip_scale, stream);
            break;
        case OPT_LAMB:
            lamb_update(st, params, master, grads, a, sr, d_clip_scale, stream);
            break;
        case OPT_MUON:
            muon_step_gpu(st, params, master, grads, lr, step, sr, d_clip_scale, stream);
            break;
        default:
            ls_fatal("optimizer: unknown kind %d", (int)c->kind);
    }
}

#include "llmc/optim/muon.cuh"

// ----------------------------------------------------------------------------
// the engine (llmc/optim/engine.h) with its state block in device memory (e->memory)

// Makes `view` current over the device block, zeroed, its tables uploaded.
static inline void optim_engine_set_view_device(OptimEngine* e, int view) {
    if (e->st.on_device) {
        e->st.owns_memory = 0;
        optim_state_free_device(&e->st);  // the tables; the block is the trainer's
    }
    optim_engine_set_view_with(e, view, optim_state_attach_device);
    e->st.on_device = 1;  // (also an empty view: the step checks it)
}

// Before a step's update, as optim_engine_begin_step_cpu.
static inline void optim_engine_begin_step_device(OptimEngine* e, const OptimPlan* plan, cudaStream_t stream) {
    const int view = plan->block >= 0 ? plan->block : OPTIM_VIEW_MODEL;
    if (view != e->view) {
        optim_engine_set_view_device(e, view);
    } else if (plan->reset && e->st.n > 0) {
        optim_state_zero_device(&e->st, stream);
    }
    optim_engine_seed_step(e, plan);
}

// optim_engine_set_hyper for a device state (the changed segment table uploaded).
static inline void optim_engine_set_hyper_device(OptimEngine* e, float beta1, float beta2, float eps, float weight_decay) {
    if (optim_engine_set_hyper(e, beta1, beta2, eps, weight_decay) && e->st.d_segs != NULL) {
        cudaCheck(cudaMemcpy(e->st.d_segs, e->st.segs, (size_t)e->st.nseg * sizeof(OptimSegment), cudaMemcpyHostToDevice));
    }
}

// One update of the current view (optim_step_gpu; nothing for an empty view).
template <typename Tp, typename Tg>
void optim_engine_step_gpu(OptimEngine* e, Tp* params, float* master, const Tg* grads, float lr, int step,
                           bool stochastic, const float* d_clip_scale, cudaStream_t stream) {
    if (e->st.n == 0) {  // a ZeRO-1 shard of padding only
        optim_engine_reduce_idle(e);
        return;
    }
    optim_step_gpu(&e->st, params, master, grads, lr, step, stochastic, d_clip_scale, stream);
}

static inline void optim_engine_free_device(OptimEngine* e) {
    e->st.owns_memory = 0;
    optim_state_free_device(&e->st);
    free(e->parts);
    e->parts = NULL;
    e->view = OPTIM_VIEW_NONE;
}

#endif // LLMC_OPTIM_KERNELS_CUH

/*
 update.cuh: the optimizer's GPU update, written once for every rule (llmc/optim/rules.h) and every
 storage (llmc/optim/storage.h), as llmc/optim/update.h is on the CPU: the same element rules and
 storage functions in the same order, so a GPU step gives the CPU step's bits (dev/cuda/optimizers.cu
 and dev/cuda/adamw.cu check it). The state is llmc/optim/state.h's OptimState in device memory
 (llmc/optim/engine.cuh carves and zeroes it); the walks and the parameters' loads and stores are
 llmc/optim/device.cuh's.

 Kernels (one launch per step; LAMB three), each a template over the rule (OptimElemOp):
   optim_elementwise_kernel  fp32, bf16 and fp16 state: grid-stride chunks of 128-bit words, the
                             rule on each element, the state stored (16-bit: stochastic rounding,
                             encoded as each element is done). AdamW is one rule of it.
   optim_int8_kernel         int8 state (blockwise, llmc/optim/quant8.h): one CUDA block of 256
                             threads x 8 elements per OPT_BLOCK block of a tensor; per state value
                             dequantize, the rule in fp32, the block's new absmax, requantize;
                             tensors under QUANT8_MIN_ELEMS keep fp32 state.
   optim_q4_scales_kernel    4-bit state of AdamW, AMSGrad, LAMB: v's (vmax's) new values, their row and
                             column maxima (atomicMax on the bits: exact, any order).
   optim_int4_kernel         4-bit state (llmc/optim/quant4.h), as the int8 kernel: one CUDA block per
                             OPT_BLOCK block, a thread's 8 codes one 32-bit word; m's group absmax
                             over the group's 16 threads (shuffles), v's codes from the new scales.
   lamb_moments_kernel       LAMB pass 1: one CUDA block of 256 threads per OPT_BLOCK block; thread t
                             owns elements 4t..4t+3 and 1024+4t..1024+4t+3 (two 128-bit words),
                             updates m, v, stores them and accumulates p^2 and u^2 (u from the stored
                             values) per element slot with fmaf; the four slots are added left to
                             right and the 256 thread sums in a halving tree (llmc/optim/update.h's
                             order); the block writes its two partial sums.
   lamb_trust_kernel         LAMB pass 2: one CUDA block per segment sums the partials of the
                             segment's tensor (its adjacent pieces with the same tensor id,
                             optim_tensor_blocks) in double (thread t: partials t, t + 256, ... in
                             order; then the tree) and writes the trust ratio; then the elementwise
                             kernel applies the update with lr * lr_mult * trust. No atomics, no order
                             depending on the grid: the same bits on any GPU and under the CPU harness.
   adam_mini_v_kernel        Adam-mini pass 1: one CUDA block of 256 threads per block of one v
                             (llmc/params.h), the mean of g^2 in llmc/optim/update.h's order, the new
                             v; then the rule's kernel of the storage of m (any of the above) reads
                             each element's block v (adam_mini_v_load).
 Traffic per parameter, fp32 params and grads: AdamW 28 B (bf16, fp16 state 20 B; int8 ~16 B),
 AMSGrad +8 B (+4, +2); SGD with momentum and Lion 20 B (bf16 16 B, int8 ~14 B); plain SGD 12 B;
 4bit: AdamW ~18.6 B (its scales pass reads g and v's codes again), SGD and Lion ~13 B;
 LAMB 40 B; Adam-mini 24 B (its v pass reads g once more; m as in AdamW's storages). bf16 params
 with fp32 master weights: the same as fp32 params plus 2 B (the bf16 copy written); without
 master weights 6 B less than fp32 (p read and written as bf16, g bf16).

 optim_launch<rule>(st, ...) is the one place that picks a kernel variant (storage, master weights);
 optim_step_gpu (llmc/optim/engine.cuh) picks the rule. To add a rule: its element function in
 llmc/optim/rules.h, an OptimElemOp with its traits here, a case in optim_step_gpu and in
 optim_update_cpu (llmc/optim/update.h).
*/
#ifndef LLMC_OPTIM_UPDATE_CUH
#define LLMC_OPTIM_UPDATE_CUH

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include "llmc/optim/device.cuh"
#include "llmc/optim/rules.h"
#include "llmc/optim/state.h"
#include "llmc/optim/storage.h"
#include "llmc/optim/update.h"

#define OPT_ELEM_BLOCK 512
#define LAMB_THREADS 256 // x 8 elements = one OPT_BLOCK block; the trust kernel's block too

// ----------------------------------------------------------------------------
// the elementwise ops: p (fp32, from the master if any), g (scaled), the state (m, v, vmax) in place

enum OptimElemOp { OP_SGD_PLAIN, OP_SGD, OP_SGD_NESTEROV, OP_LION, OP_LAMB_APPLY, OP_ADAMW, OP_AMSGRAD, OP_ADAM_MINI };

// The state values an op reads (and, but for LAMB's update, writes), in slot order (m, v, vmax;
// Adam-mini: m, its v being its block's, read into the v slot by adam_mini_v_load and never stored),
// and the CUDA blocks per SM its kernel is built for (AMSGrad's three state values and Adam-mini's
// block walk: one block, so up to 128 registers; the others two, <= 64 registers).
template <int kOp>
struct OptimOpTraits {
    static constexpr int states = kOp == OP_SGD_PLAIN ? 0 : kOp == OP_AMSGRAD ? 3 : (kOp == OP_ADAMW || kOp == OP_LAMB_APPLY) ? 2 : 1;
    static constexpr bool reads_grads = kOp != OP_LAMB_APPLY;
    static constexpr bool writes_state = kOp != OP_LAMB_APPLY;
    static constexpr int min_blocks = kOp == OP_AMSGRAD || kOp == OP_ADAM_MINI ? 1 : 2;
};

// One element (llmc/optim/rules.h); returns the new p. step_lr: lr * lr_mult (* trust for LAMB).
template <int kOp>
__device__ __forceinline__ float optim_element(float p, float g, float& m, float& v, float& vmax, float wd,
                                               float step_lr, const OptimStepArgs& a) {
    if constexpr (kOp == OP_ADAMW) {
        return rule_adamw(p, g, &m, &v, step_lr, wd, &a);
    } else if constexpr (kOp == OP_AMSGRAD) {
        return rule_amsgrad(p, g, &m, &v, &vmax, step_lr, wd, &a);
    } else if constexpr (kOp == OP_SGD_PLAIN) {
        return rule_sgd_plain(p, g, step_lr, wd);
    } else if constexpr (kOp == OP_SGD || kOp == OP_SGD_NESTEROV) {
        return rule_sgd(p, g, &m, kOp == OP_SGD_NESTEROV, step_lr, wd, &a);
    } else if constexpr (kOp == OP_LION) {
        return rule_lion(p, g, &m, step_lr, wd, &a);
    } else if constexpr (kOp == OP_ADAM_MINI) {  // v: the element's block's (adam_mini_v_load)
        return rule_adam_mini(p, g, &m, v, step_lr, wd, &a);
    } else { // OP_LAMB_APPLY: m, v as stored by the moments kernel
        return rule_lamb_apply(p, m, v, step_lr, wd, &a);
    }
}

// Adam-mini: the v of elements rel ... rel + nv - 1 of segment s (sg) into x: runs of one block's
// value (llmc/optim/update.h's adam_mini_block_v). Blocks follow each other, so one division finds
// the first; the next starts where it ends.
template <int V>
__device__ __forceinline__ void adam_mini_v_load(const OptimSlots& q, const OptimSegment& sg, int s, size_t rel, int nv,
                                                 float (&x)[V]) {
    const size_t e0 = sg.trel + rel, first = optim_mini_index(&sg, sg.trel);
    size_t k = optim_mini_index(&sg, e0), end = optim_mini_start(&sg, k) + optim_mini_len(&sg, k);
    float v = q.vmini[q.mini0[s] + (k - first)];
#pragma unroll
    for (int j = 0; j < V; j++) {
        if (j < nv && e0 + j >= end) {
            k++;
            end += optim_mini_len(&sg, k);
            v = q.vmini[q.mini0[s] + (k - first)];
        }
        x[j] = v;
    }
}

// ----------------------------------------------------------------------------
// the state on the device, through llmc/optim/storage.h: kStore is fp32, bf16 or fp16
// (OptimStatePrecision; int8 has its own kernels, below). A slot's values of a chunk from element
// i0 (128-bit words), or of element i; stored with the random bits of the global index p0 + j.

template <int V, int kStore>
__device__ __forceinline__ void optim_state_load(const OptimSlots& st, int slot, size_t i0, float (&x)[V]) {
    if constexpr (kStore == OPT_STATE_FP32) {
        optim_load<V>(st.f32[slot] + i0, x);
    } else {
        static_assert(V % 8 == 0, "16-bit state: whole 128-bit words");
        const __nv_bfloat16* h = reinterpret_cast<const __nv_bfloat16*>(st.h16[slot] + i0);
#pragma unroll
        for (int k = 0; k < V / 8; k++) {
            const Vec128<__nv_bfloat16> w = load128cs(h + k * 8);
#pragma unroll
            for (int e = 0; e < 8; e++) x[k * 8 + e] = storage16_load(__bfloat16_as_ushort(w[e]), kStore == OPT_STATE_FP16, slot);
        }
    }
}

template <int kStore>
__device__ __forceinline__ float optim_state_load_one(const OptimSlots& st, int slot, size_t i) {
    if constexpr (kStore == OPT_STATE_FP32) return st.f32[slot][i];
    else return storage16_load(st.h16[slot][i], kStore == OPT_STATE_FP16, slot);
}

template <int kStore>
__device__ __forceinline__ void optim_state_store_one(const OptimSlots& st, int slot, size_t i, size_t pi, float x,
                                                      unsigned long long key) {
    if constexpr (kStore == OPT_STATE_FP32) st.f32[slot][i] = x;
    else st.h16[slot][i] = storage16_store(x, kStore == OPT_STATE_FP16, slot, key, pi);
}

// Elements per chunk: whole 128-bit words of params, grads and the state the op reads.
template <int kOp, typename Tp, typename Tg, int kStore>
struct OptimEwWidth {
    static constexpr size_t mn = sizeof(Tp) < sizeof(Tg) ? sizeof(Tp) : sizeof(Tg);
    static constexpr size_t ts = kStore == OPT_STATE_FP32 ? 4 : 2;
    static constexpr size_t ms = OptimOpTraits<kOp>::states > 0 && ts < mn ? ts : mn;
    static constexpr int V = (int)(16 / ms);
};

template <int kOp, typename Tp, typename Tg, int kStore>
__device__ __forceinline__ void optim_elementwise_one(Tp* params, float* master, const Tg* grads, const OptimSlots& st,
                                                      const OptimSegment* segments, int s, size_t i, size_t pi, float wd,
                                                      float step_lr, float scale, const OptimStepArgs& a, bool stochastic) {
    using Tr = OptimOpTraits<kOp>;
    float p = optim_load_param_mrt<Tp>(params, master, i, pi);
    const float g = Tr::reads_grads ? (float)grads[i] * scale : 0.0f;
    float x[OPT_SLOTS] = {};
#pragma unroll
    for (int k = 0; k < Tr::states; k++) x[k] = optim_state_load_one<kStore>(st, k, i);
    if constexpr (kOp == OP_ADAM_MINI) {
        float vb[1];
        adam_mini_v_load<1>(st, segments[s], s, i - segments[s].offset, 1, vb);
        x[OPT_SLOT_V] = vb[0];
    }
    p = optim_element<kOp>(p, g, x[0], x[1], x[2], wd, step_lr, a);
    if constexpr (Tr::writes_state) {
#pragma unroll
        for (int k = 0; k < Tr::states; k++) optim_state_store_one<kStore>(st, k, i, pi, x[k], a.rng_key);
    }
    optim_store_param_mrt<Tp>(stochastic, params, master, i, pi, p, a.rng_key);
}

// Every rule on fp32 or 16-bit state (st: its buffers, llmc/optim/storage.h). seg_mul: per-segment
// factor of the learning rate (LAMB's trust ratios), or NULL. stochastic: bf16 params rounded
// stochastically (else to nearest).
template <int kOp, typename Tp, typename Tg, int kStore>
__global__ void __launch_bounds__(OPT_ELEM_BLOCK, OptimOpTraits<kOp>::min_blocks)
optim_elementwise_kernel(Tp* __restrict__ params, float* __restrict__ master, const Tg* __restrict__ grads,
                         OptimSlots st, size_t n, const OptimSegment* __restrict__ segments, int nseg,
                         const float* __restrict__ seg_mul, OptimStepArgs a, const float* __restrict__ clip_scale,
                         bool stochastic) {
    using Tr = OptimOpTraits<kOp>;
    constexpr int V = OptimEwWidth<kOp, Tp, Tg, kStore>::V;
    const float scale = optim_clip_scale(clip_scale);
    auto one = [&](size_t i, size_t pi, float wd, float step_lr, int s) {
        optim_elementwise_one<kOp, Tp, Tg, kStore>(params, master, grads, st, segments, s, i, pi, wd, step_lr, scale, a,
                                                   stochastic);
    };
    auto chunk = [&](size_t i0, size_t p0, float wd, float step_lr, int s) {
        constexpr bool k16 = kStore != OPT_STATE_FP32, kStores = Tr::writes_state && Tr::states > 0;
        float p[V], g[V] = {}, x[OPT_SLOTS][V] = {};
        Vec128<__nv_bfloat16> w[OPT_SLOTS][k16 ? V / 8 : 1];  // 16-bit state: its words, encoded as each
                                                             // element is done (fewer live registers)
        optim_load_params_mrt<V, Tp>(params, master, i0, p0, p);
        if constexpr (Tr::reads_grads) optim_load<V>(grads + i0, g);
#pragma unroll
        for (int k = 0; k < Tr::states; k++) optim_state_load<V, kStore>(st, k, i0, x[k]);
        if constexpr (kOp == OP_ADAM_MINI) adam_mini_v_load<V>(st, segments[s], s, i0 - segments[s].offset, V, x[OPT_SLOT_V]);
#pragma unroll
        for (int j = 0; j < V; j++) p[j] = optim_element<kOp>(p[j], g[j] * scale, x[0][j], x[1][j], x[2][j], wd, step_lr, a);
#pragma unroll
        for (int j = 0; j < V; j++) {
            if constexpr (kStores && k16) {
#pragma unroll
                for (int k = 0; k < Tr::states; k++) {
                    w[k][j / 8][j % 8] = __ushort_as_bfloat16(storage16_store(x[k][j], kStore == OPT_STATE_FP16, k, a.rng_key, p0 + j));
                }
            }
        }
        optim_store_params_mrt<V, Tp>(stochastic, params, master, i0, p0, p, a.rng_key);
        if constexpr (kStores) {
#pragma unroll
            for (int k = 0; k < Tr::states; k++) {
                if constexpr (k16) {
#pragma unroll
                    for (int q = 0; q < V / 8; q++) store128cs(reinterpret_cast<__nv_bfloat16*>(st.h16[k] + i0) + q * 8, w[k][q]);
                } else {
                    optim_store<V>(st.f32[k] + i0, x[k]);
                }
            }
        }
    };
    optim_for_each_chunk<V>(segments, nseg, seg_mul, a.lr, n, chunk, one);
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

// Block-wide max over the CUDA block (OPT_Q8_THREADS threads) of one value >= 0 each (a max: exact
// in any order, the CPU's quant8_block_quantize_fast absmax); red: OPT_Q8_THREADS / 32 floats.
// Every thread gets it; synchronizes (red is free again on return).
#define OPT_Q8_THREADS 256 // x 8 elements = one OPT_BLOCK block
__device__ __forceinline__ float optim_block_max(float x, float* red) {
    x = optim_warp_max(x);
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
template <typename Tp, typename Tg, int kState>
__global__ void __launch_bounds__(LAMB_THREADS)
lamb_moments_kernel(const Tp* __restrict__ params, const float* __restrict__ master, const Tg* __restrict__ grads,
                    OptimSlots S, const size_t* __restrict__ small_off, float* __restrict__ partials,
                    const OptimSegment* __restrict__ segments,
                    const size_t* __restrict__ block0, int nseg, OptimStepArgs a, const float* __restrict__ clip_scale) {
    static_assert(LAMB_THREADS * 8 == OPT_BLOCK, "one CUDA block per OPT_BLOCK block, 8 elements per thread");
    static_assert(LAMB_THREADS == OPT_Q8_THREADS, "the int8 absmax reduction's block");
    constexpr bool kInt8 = kState == OPT_STATE_INT8, kBf16 = kState == OPT_STATE_BF16, kQ4 = kState == OPT_STATE_4BIT;
    constexpr bool kQuant = kInt8 || kQ4;  // (small tensors: fp32 state)
    __shared__ float red[LAMB_THREADS];
    __shared__ float maps[kInt8 ? QUANT8_MAP_FLOATS : kQ4 ? QUANT4_MAP_FLOATS : 1];
    if constexpr (kQuant) {
        for (int i = threadIdx.x; i < (kInt8 ? QUANT8_MAP_FLOATS : QUANT4_MAP_FLOATS); i += blockDim.x) {
            maps[i] = kInt8 ? S.maps[i] : S.map4[i];
        }
        __syncthreads();
    }
    const float scale = optim_clip_scale(clip_scale);
    const size_t nblocks = block0[nseg];
    optim_for_each_block(segments, block0, nseg, [&](size_t b, int s, const OptimSegment& sg, size_t rel, size_t len) {
        const size_t start = sg.offset + rel;
        const float wd = sg.weight_decay;
        const size_t so = kQuant ? small_off[s] : OPT_NOT_SMALL;
        const bool small = kQuant && so != OPT_NOT_SMALL; // uniform over the CUDA block
        const size_t rows = kQ4 ? optim_segment_rows(&sg) : 0, r1 = kQ4 ? S.rank1_off[s] : 0;
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
                if (sizeof(Tp) == 2 && master != nullptr) optim_load4(master + i0[h], p[h]); else optim_load4(params + pi0[h], p[h]);
                optim_load4(grads + i0[h], g);
            } else {
                LS_BRANCH("lamb.by_element");
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const bool in = e < nv[h];
                    p[h][e] = in ? optim_load_param_mrt<Tp>(params, master, i0[h] + e, pi0[h] + e) : 0.0f;
                    g[e] = in ? (float)grads[i0[h] + e] : 0.0f;
                }
            }
            // the state as fp32
            if constexpr (kQuant) {
                if (small) {
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const size_t k = so + rel + (i0[h] - start) + e;
                        m[h][e] = e < nv[h] ? S.small[0][k] : 0.0f;
                        v[h][e] = e < nv[h] ? S.small[1][k] : 0.0f;
                    }
                } else if constexpr (kQ4) {  // (a thread's 4 codes: 16 bits of its block's bytes)
                    const size_t j0 = i0[h] - start;
                    const unsigned cm = *reinterpret_cast<const unsigned short*>(S.q4[0] + b * QUANT4_BLOCK_BYTES + j0 / 2);
                    const unsigned cv = *reinterpret_cast<const unsigned short*>(S.q4[1] + b * QUANT4_BLOCK_BYTES + j0 / 2);
                    const float am = S.absmax4[b * QUANT4_GROUPS + j0 / QUANT4_GROUP];
                    const float* R = S.rank1[1] + r1;
                    OptimQ4Walk at = optim_q4_walk(sg, rel + j0);
#pragma unroll
                    for (int e = 0; e < 4; e++, at.next()) {
                        m[h][e] = e < nv[h] ? maps[(cm >> (4 * e)) & 15u] * am : 0.0f;
                        v[h][e] = e < nv[h] ? quant4_linear_value((cv >> (4 * e)) & 15u) * storage4_min(R[at.r], R[rows + at.c]) : 0.0f;
                    }
                } else {
                    unsigned char cm[4], cv[4];
                    optim_codes_load4(S.q8[0] + i0[h], vec[h], nv[h], cm);
                    optim_codes_load4(S.q8[1] + i0[h], vec[h], nv[h], cv);
                    const float am = S.absmax[0][b], av = S.absmax[1][b];
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        m[h][e] = maps[cm[e]] * am;
                        v[h][e] = maps[256 + cv[e]] * av;
                    }
                }
            } else if (vec[h]) {
                if constexpr (kBf16) {
                    optim_load4(reinterpret_cast<__nv_bfloat16*>(S.h16[0]) + i0[h], m[h]);
                    optim_load4(reinterpret_cast<__nv_bfloat16*>(S.h16[1]) + i0[h], v[h]);
                } else {
                    optim_load4(S.f32[0] + i0[h], m[h]);
                    optim_load4(S.f32[1] + i0[h], v[h]);
                }
            } else {
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const bool in = e < nv[h];
                    if constexpr (kBf16) {
                        m[h][e] = in ? (float)reinterpret_cast<__nv_bfloat16*>(S.h16[0])[i0[h] + e] : 0.0f;
                        v[h][e] = in ? (float)reinterpret_cast<__nv_bfloat16*>(S.h16[1])[i0[h] + e] : 0.0f;
                    } else {
                        m[h][e] = in ? S.f32[0][i0[h] + e] : 0.0f;
                        v[h][e] = in ? S.f32[1][i0[h] + e] : 0.0f;
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
        if constexpr (kQuant) {
            if (small) {
#pragma unroll
                for (int h = 0; h < 2; h++) {
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        if (e >= nv[h]) continue;
                        const size_t k = so + rel + (i0[h] - start) + e;
                        S.small[0][k] = m[h][e];
                        S.small[1][k] = v[h][e];
                    }
                }
            } else if constexpr (kQ4) {
                // m's groups: h's 128 elements of a warp (lane l: 4l .. 4l + 3), its absmax over the warp
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const size_t j0 = i0[h] - start;
                    float mx = 0.0f;
#pragma unroll
                    for (int e = 0; e < 4; e++) mx = e < nv[h] && fabsf(m[h][e]) > mx ? fabsf(m[h][e]) : mx;
#pragma unroll
                    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
                    const float inv_m = quant4_inv(mx);
                    const float* nR = S.rank1[1] + S.nrank1 + r1;  // v's new scales
                    OptimQ4Walk at = optim_q4_walk(sg, rel + j0);
                    unsigned cm = 0, cv = 0;
#pragma unroll
                    for (int e = 0; e < 4; e++, at.next()) {
                        if (e < nv[h]) {
                            const unsigned qm = quant4_quantize_signed(maps, m[h][e] * inv_m);
                            const float sc = storage4_min(nR[at.r], nR[rows + at.c]);
                            const unsigned qv = quant4_quantize_linear(v[h][e] * quant4_inv(sc));
                            cm |= qm << (4 * e);
                            cv |= qv << (4 * e);
                            m[h][e] = maps[qm] * mx;
                            v[h][e] = quant4_linear_value(qv) * sc;
                        }
                    }
                    unsigned char* bm = S.q4[0] + b * QUANT4_BLOCK_BYTES + j0 / 2;
                    unsigned char* bv = S.q4[1] + b * QUANT4_BLOCK_BYTES + j0 / 2;
                    if (nv[h] == 4) {
                        *reinterpret_cast<unsigned short*>(bm) = (unsigned short)cm;
                        *reinterpret_cast<unsigned short*>(bv) = (unsigned short)cv;
                    } else {  // the block's end: the bytes holding its elements only (the CPU's)
                        for (int k = 0; 2 * k < nv[h]; k++) {
                            bm[k] = (unsigned char)(cm >> (8 * k));
                            bv[k] = (unsigned char)(cv >> (8 * k));
                        }
                    }
                    if (j0 % QUANT4_GROUP == 0 && nv[h] > 0) S.absmax4[b * QUANT4_GROUPS + j0 / QUANT4_GROUP] = mx;
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
                    optim_codes_store4(S.q8[0] + i0[h], vec[h], nv[h], cm);
                    optim_codes_store4(S.q8[1] + i0[h], vec[h], nv[h], cv);
                }
                if (threadIdx.x == 0) {
                    S.absmax[0][b] = am;
                    S.absmax[1][b] = av;
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
                    *reinterpret_cast<uint2*>(reinterpret_cast<__nv_bfloat16*>(S.h16[0]) + i0[h]) = *reinterpret_cast<const uint2*>(bm);
                    *reinterpret_cast<uint2*>(reinterpret_cast<__nv_bfloat16*>(S.h16[1]) + i0[h]) = *reinterpret_cast<const uint2*>(bv);
                } else {
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        if (e >= nv[h]) continue;
                        reinterpret_cast<__nv_bfloat16*>(S.h16[0])[i0[h] + e] = bm[e];
                        reinterpret_cast<__nv_bfloat16*>(S.h16[1])[i0[h] + e] = bv[e];
                    }
                }
            }
        } else {
#pragma unroll
            for (int h = 0; h < 2; h++) {
                if (vec[h]) {
                    __stcs(reinterpret_cast<float4*>(S.f32[0] + i0[h]), make_float4(m[h][0], m[h][1], m[h][2], m[h][3]));
                    __stcs(reinterpret_cast<float4*>(S.f32[1] + i0[h]), make_float4(v[h][0], v[h][1], v[h][2], v[h][3]));
                } else {
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        if (e >= nv[h]) continue;
                        S.f32[0][i0[h] + e] = m[h][e];
                        S.f32[1][i0[h] + e] = v[h][e];
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
// segment. (static: the one kernel here that is not a template, in each translation unit its own)
static __global__ void __launch_bounds__(LAMB_THREADS)
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
// int8 state of every rule (AdamW, AMSGrad: m, v, vmax; SGD, Lion: m; LAMB's update: m, v read
// only), blockwise as llmc/optim/update.h: one CUDA block of OPT_Q8_THREADS per block of OPT_BLOCK
// elements, 8 elements per thread (128-bit params and grads, 64-bit codes); per slot: dequantize
// (llmc/optim/storage.h's map: m signed, v and vmax unsigned), the rule in fp32, the block's new
// absmax (a max: exact in any order), requantize. Tensors under QUANT8_MIN_ELEMS: fp32 state,
// packed (q.small).

// Eight codes from one 64-bit word (c 8-byte aligned: vec), or element by element (nv valid).
__device__ __forceinline__ void optim_codes_load8(const unsigned char* c, bool vec, int nv, unsigned (&out)[8]) {
    if (vec) {
        const uint2 w = *reinterpret_cast<const uint2*>(c);
#pragma unroll
        for (int j = 0; j < 8; j++) out[j] = ((j < 4 ? w.x : w.y) >> (8 * (j % 4))) & 0xffu;
    } else {
#pragma unroll
        for (int j = 0; j < 8; j++) out[j] = j < nv ? c[j] : 0u;
    }
}
__device__ __forceinline__ void optim_codes_store8(unsigned char* c, bool vec, int nv, const unsigned char (&in)[8]) {
    if (vec) {
        uint2 w;
        w.x = in[0] | in[1] << 8 | in[2] << 16 | (unsigned)in[3] << 24;
        w.y = in[4] | in[5] << 8 | in[6] << 16 | (unsigned)in[7] << 24;
        *reinterpret_cast<uint2*>(c) = w;
    } else {
#pragma unroll
        for (int j = 0; j < 8; j++)
            if (j < nv) c[j] = in[j];
    }
}

// The CUDA blocks per SM the int8 kernel is built for: AdamW and AMSGrad 3 (<= 80 registers;
// ptxas spills at 64), the one-slot rules 4 (<= 64 registers).
template <int kOp>
struct OptimInt8Bounds {
    static constexpr int min_blocks = kOp == OP_AMSGRAD || kOp == OP_ADAMW ? 3 : 4;
};

template <int kOp, typename Tp, typename Tg>
__global__ void __launch_bounds__(OPT_Q8_THREADS, OptimInt8Bounds<kOp>::min_blocks)
optim_int8_kernel(Tp* __restrict__ params, float* __restrict__ master, const Tg* __restrict__ grads, OptimSlots q,
                  const OptimSegment* __restrict__ segments, const size_t* __restrict__ block0,
                  const size_t* __restrict__ small_off, int nseg, const float* __restrict__ seg_mul, OptimStepArgs a,
                  const float* __restrict__ clip_scale, bool stochastic) {
    using Tr = OptimOpTraits<kOp>;
    constexpr int V = 8, K = Tr::states;
    static_assert(OPT_Q8_THREADS * V == OPT_BLOCK, "one CUDA block per quantization block");
    __shared__ float maps[QUANT8_MAP_FLOATS];
    __shared__ float red[K][OPT_Q8_THREADS / 32];
    for (int i = threadIdx.x; i < QUANT8_MAP_FLOATS; i += blockDim.x) maps[i] = q.maps[i];
    __syncthreads();
    const float scale = optim_clip_scale(clip_scale);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    optim_for_each_block(segments, block0, nseg, [&](size_t b, int s, const OptimSegment& sg, size_t rel, size_t len) {
        const size_t start = sg.offset + rel;
        const size_t j0 = (size_t)threadIdx.x * V, i0 = start + j0, pi0 = sg.param + rel + j0;
        const int nv = j0 < len ? (len - j0 < V ? (int)(len - j0) : V) : 0;
        const float wd = sg.weight_decay;
        const float step_lr = seg_mul != nullptr ? (a.lr * sg.lr_mult) * seg_mul[s] : a.lr * sg.lr_mult;
        float vb[V] = {};  // Adam-mini: the elements' block v
        if constexpr (kOp == OP_ADAM_MINI) {
            if (nv > 0) adam_mini_v_load<V>(q, sg, s, rel + j0, nv, vb);
        }
        const size_t so = small_off[s];
        if (so != OPT_NOT_SMALL) { // a small tensor: fp32 state, packed (uniform per block)
            LS_BRANCH("optim_int8.small_tensor");
            for (int j = 0; j < nv; j++) {
                const size_t i = i0 + j, k = so + rel + j0 + j;
                float x[OPT_SLOTS] = {};
#pragma unroll
                for (int t = 0; t < K; t++) x[t] = q.small[t][k];
                if constexpr (kOp == OP_ADAM_MINI) x[OPT_SLOT_V] = vb[j];
                const float g = Tr::reads_grads ? (float)grads[i] * scale : 0.0f;
                const float p = optim_element<kOp>(optim_load_param_mrt<Tp>(params, master, i, pi0 + j), g, x[0], x[1],
                                                   x[2], wd, step_lr, a);
                if constexpr (Tr::writes_state) {
#pragma unroll
                    for (int t = 0; t < K; t++) q.small[t][k] = x[t];
                }
                optim_store_param_mrt<Tp>(stochastic, params, master, i, pi0 + j, p, a.rng_key);
            }
            return;
        }
        float p[V], g[V] = {}, x[OPT_SLOTS][V] = {};
        if constexpr (kOp == OP_ADAM_MINI) {
#pragma unroll
            for (int j = 0; j < V; j++) x[OPT_SLOT_V][j] = vb[j];
        }
        const bool vec = nv == V && i0 % V == 0 && pi0 % V == 0;
        if (vec) {
            LS_BRANCH("optim_int8.vector");
            optim_load_params_mrt<V, Tp>(params, master, i0, pi0, p);
            if constexpr (Tr::reads_grads) optim_load<V>(grads + i0, g);
        } else {
            LS_BRANCH("optim_int8.by_element");
#pragma unroll
            for (int j = 0; j < V; j++) {
                p[j] = j < nv ? optim_load_param_mrt<Tp>(params, master, i0 + j, pi0 + j) : 0.0f;
                if (Tr::reads_grads) g[j] = j < nv ? (float)grads[i0 + j] : 0.0f;
            }
        }
#pragma unroll
        for (int t = 0; t < K; t++) {  // dequantize
            unsigned c[V];
            optim_codes_load8(q.q8[t] + i0, vec, nv, c);
            const float am = q.absmax[t][b];
            const float* map = storage8_map(maps, t);
#pragma unroll
            for (int j = 0; j < V; j++) x[t][j] = j < nv ? map[c[j]] * am : 0.0f;
        }
        float mx[OPT_SLOTS] = {};
#pragma unroll
        for (int j = 0; j < V; j++) {
            if (j < nv) {
                p[j] = optim_element<kOp>(p[j], g[j] * scale, x[0][j], x[1][j], x[2][j], wd, step_lr, a);
#pragma unroll
                for (int t = 0; t < K; t++) mx[t] = fmaxf(mx[t], storage8_magnitude(x[t][j], t));
            }
        }
        if constexpr (Tr::writes_state) {  // the block's absmax per slot, then the codes
#pragma unroll
            for (int t = 0; t < K; t++) {
                mx[t] = optim_warp_max(mx[t]);
                if (lane == 0) red[t][warp] = mx[t];
            }
            __syncthreads();
#pragma unroll
            for (int t = 0; t < K; t++) {
                float am = 0.0f;
                for (int w = 0; w < OPT_Q8_THREADS / 32; w++) am = fmaxf(am, red[t][w]);
                const float inv = quant8_inv_absmax(am);
                const float* map = storage8_map(maps, t);
                unsigned char c[V];
#pragma unroll
                for (int j = 0; j < V; j++) c[j] = quant8_quantize(map, x[t][j] * inv);
                optim_codes_store8(q.q8[t] + i0, vec, nv, c);
                if (threadIdx.x == 0) q.absmax[t][b] = am;
            }
        }
        if (vec) {
            optim_store_params_mrt<V, Tp>(stochastic, params, master, i0, pi0, p, a.rng_key);
        } else {
#pragma unroll
            for (int j = 0; j < V; j++)
                if (j < nv) optim_store_param_mrt<Tp>(stochastic, params, master, i0 + j, pi0 + j, p[j], a.rng_key);
        }
        if constexpr (Tr::writes_state) __syncthreads(); // red[] is reused by the next block
    });
}


// ----------------------------------------------------------------------------
// 4-bit state of AdamW, AMSGrad, SGD, Lion and LAMB's update (llmc/optim/quant4.h; LAMB's moments:
// lamb_moments_kernel), as llmc/optim/update.h: one
// CUDA block of OPT_Q8_THREADS per block of OPT_BLOCK elements, 8 elements per thread (a 32-bit
// word of codes). First the new rank-1 scales of v (and vmax): optim_q4_scales_kernel computes the
// new values as the rule will and takes their row and column maxima with atomicMax on the bits
// (non-negative floats order as their bits; max is exact in any order); then optim_int4_kernel:
// dequantize, the rule, m's group absmax over the group's 16 threads, the codes. Tensors under
// QUANT8_MIN_ELEMS: fp32 state, packed (q.small).

// m's group absmax: the max of |m| over the group's QUANT4_GROUP / V threads (aligned lanes of one warp).
template <int V>
__device__ __forceinline__ float quant4_group_max(float mx) {
    static_assert(QUANT4_GROUP % V == 0 && QUANT4_GROUP / V <= 32, "a group is whole threads of one warp");
#pragma unroll
    for (int o = QUANT4_GROUP / V / 2; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    return mx;
}
// A thread's 8 codes w into its place blk in the block's bytes: the whole word, or at the block's
// end (nv < 8 elements) the bytes holding its elements only (the CPU's).
__device__ __forceinline__ void quant4_store_word(unsigned char* blk, unsigned w, int nv) {
    if (nv == 8) {
        *reinterpret_cast<unsigned*>(blk) = w;
    } else {
        for (int k = 0; 2 * k < nv; k++) blk[k] = (unsigned char)(w >> (8 * k));
    }
}

__device__ __forceinline__ void optim_atomic_max_pos(float* at, float x) {
    if (x == x) atomicMax(reinterpret_cast<unsigned*>(at), __float_as_uint(x));  // (x >= +0; NaN skipped, as the CPU)
}

template <bool kAms, typename Tg>
__global__ void __launch_bounds__(OPT_Q8_THREADS)
optim_q4_scales_kernel(const Tg* __restrict__ grads, OptimSlots q, const OptimSegment* __restrict__ segments,
                       const size_t* __restrict__ block0, int nseg, OptimStepArgs a, const float* __restrict__ clip_scale) {
    constexpr int V = 8;
    const float scale = optim_clip_scale(clip_scale);
    optim_for_each_block(segments, block0, nseg, [&](size_t b, int s, const OptimSegment& sg, size_t rel, size_t len) {
        const size_t off = q.rank1_off[s];
        if (off == OPT_NOT_SMALL) return;
        LS_BRANCH("optim_q4.scales");
        const size_t j0 = (size_t)threadIdx.x * V;
        const int nv = j0 < len ? (len - j0 < V ? (int)(len - j0) : V) : 0;
        if (nv == 0) return;
        const size_t rows = optim_segment_rows(&sg);
        const float* R = q.rank1[OPT_SLOT_V] + off;
        float* nR = q.rank1[OPT_SLOT_V] + q.nrank1 + off;
        const float* X = kAms ? q.rank1[OPT_SLOT_VMAX] + off : nullptr;
        float* nX = kAms ? q.rank1[OPT_SLOT_VMAX] + q.nrank1 + off : nullptr;
        const unsigned char* cv = q.q4[OPT_SLOT_V] + b * QUANT4_BLOCK_BYTES;
        const unsigned char* cx = kAms ? q.q4[OPT_SLOT_VMAX] + b * QUANT4_BLOCK_BYTES : nullptr;
        OptimQ4Walk at = optim_q4_walk(sg, rel + j0);
        size_t row = at.r;
        float mv = 0.0f, mx = 0.0f;  // the current row's maxima (a thread's 8 elements span few rows)
#pragma unroll 1
        for (int j = 0; j < nv; j++, at.next()) {
            if (at.r != row) {
                optim_atomic_max_pos(nR + row, mv);
                if constexpr (kAms) optim_atomic_max_pos(nX + row, mx);
                row = at.r;
                mv = mx = 0.0f;
            }
            const float g = (float)grads[sg.offset + rel + j0 + j] * scale;
            const float v = rule_adam_v(g, storage4_load_v(cv, j0 + j, storage4_min(R[at.r], R[rows + at.c])), &a);
            mv = v > mv ? v : mv;
            optim_atomic_max_pos(nR + rows + at.c, v);
            if constexpr (kAms) {
                const float d = rule_vmax(v, storage4_load_v(cx, j0 + j, storage4_min(X[at.r], X[rows + at.c])));
                mx = d > mx ? d : mx;
                optim_atomic_max_pos(nX + rows + at.c, d);
            }
        }
        optim_atomic_max_pos(nR + row, mv);
        if constexpr (kAms) optim_atomic_max_pos(nX + row, mx);
    });
}

// The CUDA blocks per SM the 4-bit kernel is built for: AMSGrad 2 (<= 128 registers; at 80 the bf16
// variant spills), AdamW 3, the one-slot rules 4.
template <int kOp>
struct OptimInt4Bounds {
    static constexpr int min_blocks = kOp == OP_AMSGRAD || kOp == OP_ADAMW ? 2 : 4;
};

template <int kOp, typename Tp, typename Tg>
__global__ void __launch_bounds__(OPT_Q8_THREADS, OptimInt4Bounds<kOp>::min_blocks)
optim_int4_kernel(Tp* __restrict__ params, float* __restrict__ master, const Tg* __restrict__ grads, OptimSlots q,
                  const OptimSegment* __restrict__ segments, const size_t* __restrict__ block0,
                  const size_t* __restrict__ small_off, int nseg, const float* __restrict__ seg_mul, OptimStepArgs a,
                  const float* __restrict__ clip_scale, bool stochastic) {
    using Tr = OptimOpTraits<kOp>;
    constexpr int V = 8, K = Tr::states;
    static_assert(OPT_Q8_THREADS * V == OPT_BLOCK, "one CUDA block per block");
    __shared__ float map4[QUANT4_MAP_FLOATS];
    if (threadIdx.x < QUANT4_MAP_FLOATS) map4[threadIdx.x] = q.map4[threadIdx.x];
    __syncthreads();
    const float scale = optim_clip_scale(clip_scale);
    optim_for_each_block(segments, block0, nseg, [&](size_t b, int s, const OptimSegment& sg, size_t rel, size_t len) {
        const size_t start = sg.offset + rel;
        const size_t j0 = (size_t)threadIdx.x * V, i0 = start + j0, pi0 = sg.param + rel + j0;
        const int nv = j0 < len ? (len - j0 < V ? (int)(len - j0) : V) : 0;
        const float wd = sg.weight_decay;
        const float step_lr = seg_mul != nullptr ? (a.lr * sg.lr_mult) * seg_mul[s] : a.lr * sg.lr_mult;
        float vb[V] = {};  // Adam-mini: the elements' block v
        if constexpr (kOp == OP_ADAM_MINI) {
            if (nv > 0) adam_mini_v_load<V>(q, sg, s, rel + j0, nv, vb);
        }
        const size_t so = small_off[s];
        if (so != OPT_NOT_SMALL) {  // a small tensor: fp32 state, packed (uniform per block)
            LS_BRANCH("optim_int4.small_tensor");
            for (int j = 0; j < nv; j++) {
                const size_t i = i0 + j, k = so + rel + j0 + j;
                float x[OPT_SLOTS] = {};
#pragma unroll
                for (int t = 0; t < K; t++) x[t] = q.small[t][k];
                if constexpr (kOp == OP_ADAM_MINI) x[OPT_SLOT_V] = vb[j];
                const float g = Tr::reads_grads ? (float)grads[i] * scale : 0.0f;
                const float p = optim_element<kOp>(optim_load_param_mrt<Tp>(params, master, i, pi0 + j), g, x[0], x[1],
                                                   x[2], wd, step_lr, a);
                if constexpr (Tr::writes_state) {
#pragma unroll
                    for (int t = 0; t < K; t++) q.small[t][k] = x[t];
                }
                optim_store_param_mrt<Tp>(stochastic, params, master, i, pi0 + j, p, a.rng_key);
            }
            return;
        }
        float p[V], g[V] = {}, x[OPT_SLOTS][V] = {};
        if constexpr (kOp == OP_ADAM_MINI) {
#pragma unroll
            for (int j = 0; j < V; j++) x[OPT_SLOT_V][j] = vb[j];
        }
        const bool vec = nv == V && i0 % V == 0 && pi0 % V == 0;
        if (vec) {
            LS_BRANCH("optim_int4.vector");
            optim_load_params_mrt<V, Tp>(params, master, i0, pi0, p);
            if constexpr (Tr::reads_grads) optim_load<V>(grads + i0, g);
        } else {
            LS_BRANCH("optim_int4.by_element");
#pragma unroll
            for (int j = 0; j < V; j++) {
                p[j] = j < nv ? optim_load_param_mrt<Tp>(params, master, i0 + j, pi0 + j) : 0.0f;
                if (Tr::reads_grads) g[j] = j < nv ? (float)grads[i0 + j] : 0.0f;
            }
        }
        const size_t rows = optim_segment_rows(&sg), off = q.rank1_off[s];
        unsigned words[OPT_SLOTS] = {};
#pragma unroll
        for (int t = 0; t < K; t++) {  // dequantize (a thread's codes: one 32-bit word of its block's bytes)
            const unsigned char* blk = q.q4[t] + b * QUANT4_BLOCK_BYTES;
            words[t] = *reinterpret_cast<const unsigned*>(blk + j0 / 2);
            if (t == OPT_SLOT_M) {
                const float am = q.absmax4[b * QUANT4_GROUPS + j0 / QUANT4_GROUP];
#pragma unroll
                for (int j = 0; j < V; j++) x[t][j] = j < nv ? map4[(words[t] >> (4 * j)) & 15u] * am : 0.0f;
            } else {
                const float* R = q.rank1[t] + off;
                OptimQ4Walk at = optim_q4_walk(sg, rel + j0);
#pragma unroll
                for (int j = 0; j < V; j++, at.next()) {
                    x[t][j] = j < nv ? quant4_linear_value((words[t] >> (4 * j)) & 15u) * storage4_min(R[at.r], R[rows + at.c])
                                     : 0.0f;
                }
            }
        }
        float mx = 0.0f;  // |m| over the thread's elements
#pragma unroll
        for (int j = 0; j < V; j++) {
            if (j < nv) {
                p[j] = optim_element<kOp>(p[j], g[j] * scale, x[0][j], x[1][j], x[2][j], wd, step_lr, a);
                mx = fabsf(x[0][j]) > mx ? fabsf(x[0][j]) : mx;
            }
        }
        mx = quant4_group_max<V>(mx);  // m's group absmax
#pragma unroll
        for (int t = 0; t < (Tr::writes_state ? K : 0); t++) {
            unsigned w = 0;
            if (t == OPT_SLOT_M) {
                const float inv = quant4_inv(mx);
#pragma unroll
                for (int j = 0; j < V; j++) w |= (j < nv ? quant4_quantize_signed(map4, x[t][j] * inv) : 0u) << (4 * j);
                if (j0 % QUANT4_GROUP == 0 && nv > 0) q.absmax4[b * QUANT4_GROUPS + j0 / QUANT4_GROUP] = mx;
            } else {
                const float* nR = q.rank1[t] + q.nrank1 + off;
                OptimQ4Walk at = optim_q4_walk(sg, rel + j0);
#pragma unroll
                for (int j = 0; j < V; j++, at.next()) {  // (past nv: no scale read, the row may not exist)
                    if (j < nv) w |= quant4_quantize_linear(x[t][j] * quant4_inv(storage4_min(nR[at.r], nR[rows + at.c]))) << (4 * j);
                }
            }
            quant4_store_word(q.q4[t] + b * QUANT4_BLOCK_BYTES + j0 / 2, w, nv);
        }
        if (vec) {
            optim_store_params_mrt<V, Tp>(stochastic, params, master, i0, pi0, p, a.rng_key);
        } else {
#pragma unroll
            for (int j = 0; j < V; j++)
                if (j < nv) optim_store_param_mrt<Tp>(stochastic, params, master, i0 + j, pi0 + j, p[j], a.rng_key);
        }
    });
}

// ----------------------------------------------------------------------------
// Adam-mini: v per block of a tensor (llmc/params.h), before the elements' kernel

// One CUDA block of OPT_Q8_THREADS per Adam-mini block of the table (q.mini0), CUDA block k taking
// blocks k, k + gridDim.x, ...: thread t adds (g * scale)^2 of the block's elements t, t + 256, ...
// in order with fmaf, then the tree; thread 0 stores the block's new v from the mean. The order of
// llmc/optim/update.h's adam_mini_block_sum: the CPU's bits.
template <typename Tg>
__global__ void __launch_bounds__(OPT_Q8_THREADS)
adam_mini_v_kernel(const Tg* __restrict__ grads, OptimSlots q, const OptimSegment* __restrict__ segments, int nseg,
                   OptimStepArgs a, const float* __restrict__ clip_scale) {
    static_assert(OPT_Q8_THREADS == 256, "the lanes of adam_mini_block_sum");
    __shared__ float red[OPT_Q8_THREADS];
    const float scale = optim_clip_scale(clip_scale);
    const size_t nmini = q.mini0[nseg];
    int s = blockIdx.x < nmini ? optim_block_segment(q.mini0, nseg, blockIdx.x) : 0;
    for (size_t i = blockIdx.x; i < nmini; i += gridDim.x) {
        while (q.mini0[s + 1] <= i) s++;
        const OptimSegment sg = segments[s];
        const size_t k = optim_mini_index(&sg, sg.trel) + (i - q.mini0[s]);  // the block in the tensor
        const size_t len = optim_mini_len(&sg, k);
        const Tg* g = grads + sg.offset + (optim_mini_start(&sg, k) - sg.trel);
        float acc = 0.0f;
        for (size_t j = threadIdx.x; j < len; j += OPT_Q8_THREADS) {
            const float x = (float)g[j] * scale;
            acc = fmaf(x, x, acc);
        }
        const float sum = optim_tree256(acc, red);
        if (threadIdx.x == 0) q.vmini[i] = rule_adam_mini_v(sum / (float)len, q.vmini[i], &a);
        __syncthreads();  // (red is reused)
    }
}

template <typename Tg>
void adam_mini_v_launch(OptimState* st, const Tg* grads, const OptimStepArgs& a, const float* d_clip_scale,
                        cudaStream_t stream) {
    if (st->nmini == 0) return;
    const size_t full = (size_t)cuda_sm_count() * 8;
    const unsigned grid = (unsigned)(st->nmini < full ? st->nmini : full);
    launch(adam_mini_v_kernel<Tg>, grid, OPT_Q8_THREADS, 0, stream, grads, optim_state_slots(st),
           (const OptimSegment*)st->d_segs, st->nseg, a, d_clip_scale);
}

// ----------------------------------------------------------------------------
// the launch of a rule's kernel

// One wave of the elementwise kernel over n elements (its launch bounds' blocks per SM).
template <int kOp, typename Tp, typename Tg, int kStore>
static unsigned optim_elementwise_grid(size_t n) {
    constexpr size_t V = (size_t)OptimEwWidth<kOp, Tp, Tg, kStore>::V;
    const size_t want = CEIL_DIV(n / V, (size_t)OPT_ELEM_BLOCK);
    const size_t full = (size_t)cuda_sm_count() * OptimOpTraits<kOp>::min_blocks;
    return (unsigned)(want < full ? (want > 0 ? want : 1) : full);
}

// Rule kOp's kernel on st: the elementwise kernel for fp32, bf16 and fp16 state, the blockwise one
// for int8, in the variant of the parameters (master weights: bf16 params only). seg_mul: LAMB's
// trust ratios (or NULL); sr: bf16 params rounded stochastically.
template <int kOp, typename Tp, typename Tg>
void optim_launch(OptimState* st, Tp* params, float* master, const Tg* grads, const float* seg_mul,
                  const OptimStepArgs& a, bool sr, const float* d_clip_scale, cudaStream_t stream) {
    using Tr = OptimOpTraits<kOp>;
    const OptimSlots slots = optim_state_slots(st);
    const OptimSegment* segs = st->d_segs;
    const bool with_master = sizeof(Tp) == 2 && master != nullptr;
    const OptimStatePrecision prec = Tr::states == 0 ? OPT_STATE_FP32 : st->cfg.state;
#define OPT_EW_PARAMS(S)                                                                                              \
    launch(optim_elementwise_kernel<kOp, Tp, Tg, S>, optim_elementwise_grid<kOp, Tp, Tg, S>(st->n), OPT_ELEM_BLOCK,         \
           optim_segments_smem_bytes(st->nseg), stream, params, with_master ? master : nullptr, grads, slots, st->n, segs,  \
           st->nseg, seg_mul, a, d_clip_scale, sr)
    if constexpr (Tr::states == 0) {  // plain SGD: no state
        OPT_EW_PARAMS(OPT_STATE_FP32);
    } else if (prec == OPT_STATE_INT8) {  // one CUDA block per quantization block, one wave
        if (st->nblocks == 0) return;
        const size_t full = (size_t)cuda_sm_count() * 8;
        const unsigned grid = (unsigned)(st->nblocks < full ? st->nblocks : full);
        launch(optim_int8_kernel<kOp, Tp, Tg>, grid, OPT_Q8_THREADS, 0, stream, params, with_master ? master : nullptr, grads,
               slots, segs, (const size_t*)st->d_block0, (const size_t*)st->d_small_off, st->nseg, seg_mul, a, d_clip_scale, sr);
    } else if (prec == OPT_STATE_4BIT) {  // the new scales of v (vmax), then one CUDA block per block
        if (st->nblocks == 0) return;
        const size_t full = (size_t)cuda_sm_count() * 8;
        const unsigned grid = (unsigned)(st->nblocks < full ? st->nblocks : full);
        // (LAMB's update reads what its moments pass stored, with the scales it made: lamb_moments)
        const bool scales = Tr::states > 1 && Tr::writes_state && slots.rank1_len > 0;
        if constexpr (Tr::states > 1 && Tr::writes_state) {
            if (scales) {
                for (int t = OPT_SLOT_V; t < Tr::states; t++) {
                    cudaCheck(cudaMemsetAsync(slots.rank1[t] + slots.nrank1, 0, slots.rank1_len * sizeof(float), stream));
                }
                launch(optim_q4_scales_kernel<kOp == OP_AMSGRAD, Tg>, grid, OPT_Q8_THREADS, 0, stream, grads, slots, segs,
                       (const size_t*)st->d_block0, st->nseg, a, d_clip_scale);
            }
        }
        launch(optim_int4_kernel<kOp, Tp, Tg>, grid, OPT_Q8_THREADS, 0, stream, params, with_master ? master : nullptr, grads,
               slots, segs, (const size_t*)st->d_block0, (const size_t*)st->d_small_off, st->nseg, seg_mul, a, d_clip_scale,
               sr);
        if (scales) {  // the new scales become the stored ones
            for (int t = OPT_SLOT_V; t < Tr::states; t++) {
                cudaCheck(cudaMemcpyAsync(slots.rank1[t], slots.rank1[t] + slots.nrank1, slots.rank1_len * sizeof(float),
                                          cudaMemcpyDeviceToDevice, stream));
            }
        }
    } else if (prec == OPT_STATE_BF16) {
        OPT_EW_PARAMS(OPT_STATE_BF16);
    } else if (prec == OPT_STATE_FP16) {  // AdamW's and Adam-mini's only (optim_config_check)
        if constexpr (kOp == OP_ADAMW || kOp == OP_AMSGRAD || kOp == OP_ADAM_MINI) OPT_EW_PARAMS(OPT_STATE_FP16);
        else ls_fatal("optimizer: --opt-state fp16 is AdamW's and Adam-mini's");
    } else {
        OPT_EW_PARAMS(OPT_STATE_FP32);
    }
#undef OPT_EW_PARAMS
}

// ----------------------------------------------------------------------------
// LAMB's three launches

template <typename Tp, typename Tg, int kState>
static void lamb_moments_launch(OptimState* st, const Tp* params, const float* master, const Tg* grads,
                                const OptimStepArgs& a, const float* d_clip_scale, cudaStream_t stream) {
    const unsigned grid = (unsigned)(st->nblocks < (size_t)cuda_sm_count() * 8 ? st->nblocks : (size_t)cuda_sm_count() * 8);
    const OptimSlots S = optim_state_slots(st);
    const size_t* small_off = (const size_t*)st->d_small_off;
    launch(lamb_moments_kernel<Tp, Tg, kState>, grid, LAMB_THREADS, 0, stream, params, sizeof(Tp) == 2 ? master : nullptr,
           grads, S, small_off, st->partials, (const OptimSegment*)st->d_segs, (const size_t*)st->d_block0, st->nseg, a,
           d_clip_scale);
}

// LAMB's pass 1: the moments and the block sums of p^2 and u^2 (st->partials).
template <typename Tp, typename Tg>
static void lamb_moments(OptimState* st, const Tp* params, const float* master, const Tg* grads, const OptimStepArgs& a,
                         const float* d_clip_scale, cudaStream_t stream) {
    const OptimStatePrecision prec = st->cfg.state;
    if (prec == OPT_STATE_BF16) lamb_moments_launch<Tp, Tg, OPT_STATE_BF16>(st, params, master, grads, a, d_clip_scale, stream);
    else if (prec == OPT_STATE_INT8) lamb_moments_launch<Tp, Tg, OPT_STATE_INT8>(st, params, master, grads, a, d_clip_scale, stream);
    else if (prec == OPT_STATE_4BIT) {  // v's new scales, the moments stored with them, then they are the stored ones
        const OptimSlots S = optim_state_slots(st);
        if (S.rank1_len > 0) {
            cudaCheck(cudaMemsetAsync(S.rank1[1] + S.nrank1, 0, S.rank1_len * sizeof(float), stream));
            const unsigned grid = (unsigned)(st->nblocks < (size_t)cuda_sm_count() * 8 ? st->nblocks : (size_t)cuda_sm_count() * 8);
            launch(optim_q4_scales_kernel<false, Tg>, grid, OPT_Q8_THREADS, 0, stream, grads, S, (const OptimSegment*)st->d_segs,
                   (const size_t*)st->d_block0, st->nseg, a, d_clip_scale);
        }
        lamb_moments_launch<Tp, Tg, OPT_STATE_4BIT>(st, params, master, grads, a, d_clip_scale, stream);
        if (S.rank1_len > 0) {
            cudaCheck(cudaMemcpyAsync(S.rank1[1], S.rank1[1] + S.nrank1, S.rank1_len * sizeof(float), cudaMemcpyDeviceToDevice,
                                      stream));
        }
    } else lamb_moments_launch<Tp, Tg, OPT_STATE_FP32>(st, params, master, grads, a, d_clip_scale, stream);
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
    optim_launch<OP_LAMB_APPLY, Tp, Tg>(st, params, master, grads, st->trust, a, stochastic, d_clip_scale, stream);
}

template <typename Tp, typename Tg>
void lamb_update(OptimState* st, Tp* params, float* master, const Tg* grads, const OptimStepArgs& a,
                 bool stochastic, const float* d_clip_scale, cudaStream_t stream) {
    lamb_moments(st, params, master, grads, a, d_clip_scale, stream);
    lamb_trust(st, stream);
    lamb_apply(st, params, master, grads, a, stochastic, d_clip_scale, stream);
}

#endif // LLMC_OPTIM_UPDATE_CUH

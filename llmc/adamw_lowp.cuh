/*
 adamw_lowp.cuh: AdamW with low-precision optimizer state (smaller memory and traffic), sharing
 the update rule, segment table and rounding of llmc/adamw.cuh. Parameters are fp32 (or the fp32
 master copy of bf16 weights); gradients fp32 or bf16 (template).

 (a) bf16 state: m and v stored as bf16, rounded stochastically after each update (random
     streams 1 and 2 of adamw_random_bits), so their expectation follows the fp32 recurrence.
     Traffic: 20 B/param with fp32 grads (p 8, g 4, m 4, v 4).
 (b) 8-bit blockwise state (Dettmers et al. 2021, "8-bit optimizers via block-wise quantization"):
     m and v stored as 8-bit codes of a dynamic (tree) quantization map, scaled per block of
     ADAMW8_QBLOCK elements by the block's absmax. The map: bit pattern = [sign] [E zeros] [1]
     [F fraction bits]; value = +-10^-E * (0.1 + 0.9 * (f + 1) / 2^F), so each decade below the
     absmax gets half the codes of the one above (unsigned map for v: no sign bit, one more
     fraction bit). m and v are dequantized, updated in fp32 (the parameter update uses the fp32
     values), then requantized to the nearest code with the new absmax. Traffic: 16 B/param.
     One CUDA block (256 threads x 8 elements) per quantization block, grid-stride.
 Host: adamw8_codebooks() builds the two sorted 256-entry maps (upload once); codes start at
 ADAMW8_ZERO_M / ADAMW8_ZERO_V (the value 0) and absmax at 0.
*/
#ifndef LLMC_ADAMW_LOWP_CUH
#define LLMC_ADAMW_LOWP_CUH

#include <math.h>
#include <stdint.h>
#include "adamw.cuh"

// ----------------------------------------------------------------------------
// (a) bf16 m and v

template <typename Tg, bool kAmsgrad>
__device__ __forceinline__ void adamw_bf16_state_one(float* params, const Tg* grads, __nv_bfloat16* mom1,
                                                     __nv_bfloat16* mom2, __nv_bfloat16* vmax, size_t i, float wd,
                                                     float lr_eff, float scale, const AdamWStepArgs& a) {
    float m = (float)mom1[i], v = (float)mom2[i], vm = kAmsgrad ? (float)vmax[i] : 0.0f;
    params[i] = adamw_element<kAmsgrad>(params[i], (float)grads[i] * scale, m, v, vm, wd, lr_eff, a);
    mom1[i] = bf16_round_stochastic(m, adamw_random_bits(a.rng_key, i, 1));
    mom2[i] = bf16_round_stochastic(v, adamw_random_bits(a.rng_key, i, 2));
    if (kAmsgrad) vmax[i] = bf16_round_stochastic(vm, adamw_random_bits(a.rng_key, i, 3));
}

template <typename Tg, bool kAmsgrad>
__global__ void __launch_bounds__(ADAMW_BLOCK, kAmsgrad ? 1 : 2)
adamw_bf16_state_kernel(float* __restrict__ params, const Tg* __restrict__ grads, __nv_bfloat16* __restrict__ mom1,
                        __nv_bfloat16* __restrict__ mom2, __nv_bfloat16* __restrict__ vmax, size_t n,
                        const AdamWSegment* __restrict__ segments, int nseg, AdamWStepArgs a,
                        const float* __restrict__ clip_scale) {
    constexpr int V = 8; // one 128-bit word of bf16 state
    DYNAMIC_SHARED(size_t, seg_end);
    float2* seg_par = reinterpret_cast<float2*>(seg_end + nseg);
    adamw_segments_to_smem(seg_end, seg_par, segments, nseg);
    __syncthreads();
    const float scale = clip_scale != nullptr ? *clip_scale : 1.0f;
    const size_t nchunks = n / V, stride = (size_t)gridDim.x * blockDim.x;
    const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    int s = tid < nchunks ? adamw_find_segment(seg_end, nseg, tid * V) : 0;
    for (size_t c = tid; c < nchunks; c += stride) {
        const size_t i0 = c * V;
        while (seg_end[s] <= i0) s++;
        if (i0 + V > seg_end[s]) { // a tensor boundary inside the chunk
            for (int j = 0; j < V; j++) {
                int sj = adamw_find_segment(seg_end, nseg, i0 + j);
                adamw_bf16_state_one<Tg, kAmsgrad>(params, grads, mom1, mom2, vmax, i0 + j, seg_par[sj].x,
                                                   a.lr * seg_par[sj].y, scale, a);
            }
            continue;
        }
        const float wd = seg_par[s].x, lr_eff = a.lr * seg_par[s].y;
        float p[V], g[V], m[V], v[V], vm[V] = {};
        adamw_load<V>(params + i0, p);
        adamw_load<V>(grads + i0, g);
        adamw_load<V>(mom1 + i0, m);
        adamw_load<V>(mom2 + i0, v);
        if (kAmsgrad) adamw_load<V>(vmax + i0, vm);
        Vec128<__nv_bfloat16> mo, vo, vmo;
#pragma unroll
        for (int j = 0; j < V; j++) {
            p[j] = adamw_element<kAmsgrad>(p[j], g[j] * scale, m[j], v[j], vm[j], wd, lr_eff, a);
            mo[j] = bf16_round_stochastic(m[j], adamw_random_bits(a.rng_key, i0 + j, 1));
            vo[j] = bf16_round_stochastic(v[j], adamw_random_bits(a.rng_key, i0 + j, 2));
            if (kAmsgrad) vmo[j] = bf16_round_stochastic(vm[j], adamw_random_bits(a.rng_key, i0 + j, 3));
        }
        adamw_store<V>(params + i0, p);
        store128cs(mom1 + i0, mo);
        store128cs(mom2 + i0, vo);
        if (kAmsgrad) store128cs(vmax + i0, vmo);
    }
    if (tid < n - nchunks * V) {
        const size_t i = nchunks * V + tid;
        int sj = adamw_find_segment(seg_end, nseg, i);
        adamw_bf16_state_one<Tg, kAmsgrad>(params, grads, mom1, mom2, vmax, i, seg_par[sj].x, a.lr * seg_par[sj].y,
                                           scale, a);
    }
}

// One step with bf16 m, v (and vmax when hp.amsgrad). Buffers 16-byte aligned, n elements.
template <typename Tg>
void adamw_update_bf16_state(float* params, const Tg* grads, __nv_bfloat16* m, __nv_bfloat16* v,
                             __nv_bfloat16* vmax, size_t n, const AdamWSegment* d_segments, int nseg,
                             const AdamWParams& hp, int step, const float* d_clip_scale, cudaStream_t stream) {
    if (n == 0) return;
    if (step < 1 || nseg < 1 || nseg > ADAMW_MAX_SEGMENTS) ls_fatal("adamw_bf16_state: step %d, %d segments", step, nseg);
    if ((vmax != nullptr) != (hp.amsgrad != 0)) ls_fatal("adamw_bf16_state: AMSGrad needs vmax, and only then");
    adamw_check_aligned(params, "params");
    adamw_check_aligned(grads, "grads");
    adamw_check_aligned(m, "m");
    adamw_check_aligned(v, "v");
    adamw_check_aligned(vmax, "vmax");
    AdamWStepArgs a = adamw_step_args(hp, step);
    size_t want = CEIL_DIV(n / 8, (size_t)ADAMW_BLOCK), full = (size_t)cuda_sm_count() * (hp.amsgrad ? 1 : 2);
    unsigned grid = (unsigned)(want < full ? (want > 0 ? want : 1) : full);
    size_t smem = adamw_segments_smem_bytes(nseg);
    if (hp.amsgrad) {
        launch(adamw_bf16_state_kernel<Tg, true>, grid, ADAMW_BLOCK, smem, stream, params, grads, m, v, vmax, n,
               d_segments, nseg, a, d_clip_scale);
    } else {
        launch(adamw_bf16_state_kernel<Tg, false>, grid, ADAMW_BLOCK, smem, stream, params, grads, m, v, vmax, n,
               d_segments, nseg, a, d_clip_scale);
    }
}

// ----------------------------------------------------------------------------
// (b) 8-bit blockwise-quantized m and v

#define ADAMW8_QBLOCK 2048  // elements per absmax
#define ADAMW8_THREADS 256  // x 8 elements = one quantization block
#define ADAMW8_ZERO_M 128   // code of 0 in the signed map (index of +0)
#define ADAMW8_ZERO_V 0     // code of 0 in the unsigned map

// Host: the two sorted maps, 256 entries each. signed_map: 127 negatives, -0, +0, 127 positives,
// from -1 to 1; unsigned_map: 0 then 255 positives up to 1.
static inline void adamw8_codebooks(float* signed_map, float* unsigned_map) {
    float pos[256];
    int k = 0;
    for (int e = 6; e >= 0; e--) { // signed: 7 bits after the sign, E = e zeros, F = 6 - e
        int F = 6 - e;
        for (int f = 0; f < (1 << F); f++) pos[k++] = (float)(pow(10.0, -e) * (0.1 + 0.9 * (f + 1) / (double)(1 << F)));
    }
    // pos[0..126] ascending (decades in increasing order, linear inside each)
    for (int i = 0; i < 127; i++) signed_map[i] = -pos[126 - i];
    signed_map[127] = -0.0f;
    signed_map[128] = 0.0f;
    for (int i = 0; i < 127; i++) signed_map[129 + i] = pos[i];
    k = 0;
    unsigned_map[k++] = 0.0f;
    for (int e = 7; e >= 0; e--) { // unsigned: 8 bits, F = 7 - e
        int F = 7 - e;
        for (int f = 0; f < (1 << F); f++) unsigned_map[k++] = (float)(pow(10.0, -e) * (0.1 + 0.9 * (f + 1) / (double)(1 << F)));
    }
}

// Code of the map entry nearest to x (map sorted ascending, 256 entries, in shared memory).
__device__ __forceinline__ unsigned char adamw8_quantize(const float* map, float x) {
    int lo = 0; // ends at the largest index with map[lo] <= x (0 if none)
#pragma unroll
    for (int step = 128; step > 0; step >>= 1) {
        if (lo + step <= 255 && map[lo + step] <= x) lo += step;
    }
    int hi = lo < 255 ? lo + 1 : 255;
    return (unsigned char)(fabsf(map[hi] - x) < fabsf(x - map[lo]) ? hi : lo);
}

__device__ __forceinline__ float adamw8_warp_max(float x) {
    for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}

template <typename Tg>
__global__ void __launch_bounds__(ADAMW8_THREADS)
adamw_8bit_kernel(float* __restrict__ params, const Tg* __restrict__ grads, unsigned char* __restrict__ qm,
                  unsigned char* __restrict__ qv, float* __restrict__ absmax_m, float* __restrict__ absmax_v,
                  size_t n, const float* __restrict__ maps, const AdamWSegment* __restrict__ segments, int nseg,
                  AdamWStepArgs a, const float* __restrict__ clip_scale) {
    constexpr int V = 8;
    static_assert(ADAMW8_THREADS * V == ADAMW8_QBLOCK, "one CUDA block per quantization block");
    __shared__ float map_m[256], map_v[256];
    __shared__ float red[2][ADAMW8_THREADS / 32];
    DYNAMIC_SHARED(size_t, seg_end);
    float2* seg_par = reinterpret_cast<float2*>(seg_end + nseg);
    adamw_segments_to_smem(seg_end, seg_par, segments, nseg);
    for (int i = threadIdx.x; i < 256; i += blockDim.x) {
        map_m[i] = maps[i];
        map_v[i] = maps[256 + i];
    }
    __syncthreads();
    const float scale = clip_scale != nullptr ? *clip_scale : 1.0f;
    const size_t nq = CEIL_DIV(n, (size_t)ADAMW8_QBLOCK);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int s = 0;
    for (size_t qb = blockIdx.x; qb < nq; qb += gridDim.x) { // uniform per block: barriers are safe
        const size_t i0 = qb * ADAMW8_QBLOCK + (size_t)threadIdx.x * V;
        const float am_old = absmax_m[qb], av_old = absmax_v[qb];
        float p[V], g[V], m[V], v[V], wd[V], lr_eff[V], unused[V] = {};
        const bool full = i0 + V <= n;
        int nv = full ? V : (i0 < n ? (int)(n - i0) : 0);
        if (full) {
            adamw_chunk_hyper<V>(seg_end, seg_par, s, i0, a.lr, wd, lr_eff);
            adamw_load<V>(params + i0, p);
            adamw_load<V>(grads + i0, g);
            uint2 cm = *reinterpret_cast<const uint2*>(qm + i0), cv = *reinterpret_cast<const uint2*>(qv + i0);
#pragma unroll
            for (int j = 0; j < V; j++) {
                unsigned wm = j < 4 ? cm.x : cm.y, wv = j < 4 ? cv.x : cv.y;
                m[j] = map_m[(wm >> (8 * (j % 4))) & 0xffu] * am_old;
                v[j] = map_v[(wv >> (8 * (j % 4))) & 0xffu] * av_old;
            }
        } else {
#pragma unroll
            for (int j = 0; j < V; j++) {
                p[j] = g[j] = m[j] = v[j] = wd[j] = lr_eff[j] = 0.0f;
                if (j < nv) {
                    int sj = adamw_find_segment(seg_end, nseg, i0 + j);
                    wd[j] = seg_par[sj].x;
                    lr_eff[j] = a.lr * seg_par[sj].y;
                    p[j] = params[i0 + j];
                    g[j] = (float)grads[i0 + j];
                    m[j] = map_m[qm[i0 + j]] * am_old;
                    v[j] = map_v[qv[i0 + j]] * av_old;
                }
            }
        }
        float mx_m = 0.0f, mx_v = 0.0f;
#pragma unroll
        for (int j = 0; j < V; j++) {
            if (j < nv) {
                p[j] = adamw_element<false>(p[j], g[j] * scale, m[j], v[j], unused[j], wd[j], lr_eff[j], a);
                mx_m = fmaxf(mx_m, fabsf(m[j]));
                mx_v = fmaxf(mx_v, v[j]);
            }
        }
        // block absmax, fixed order
        mx_m = adamw8_warp_max(mx_m);
        mx_v = adamw8_warp_max(mx_v);
        if (lane == 0) {
            red[0][warp] = mx_m;
            red[1][warp] = mx_v;
        }
        __syncthreads();
        float am = 0.0f, av = 0.0f;
        for (int w = 0; w < ADAMW8_THREADS / 32; w++) {
            am = fmaxf(am, red[0][w]);
            av = fmaxf(av, red[1][w]);
        }
        const float inv_m = am > 0.0f ? 1.0f / am : 0.0f, inv_v = av > 0.0f ? 1.0f / av : 0.0f;
        unsigned char cm[V], cv[V];
#pragma unroll
        for (int j = 0; j < V; j++) {
            cm[j] = adamw8_quantize(map_m, m[j] * inv_m);
            cv[j] = adamw8_quantize(map_v, v[j] * inv_v);
        }
        if (full) {
            adamw_store<V>(params + i0, p);
            uint2 om, ov;
            om.x = cm[0] | cm[1] << 8 | cm[2] << 16 | (unsigned)cm[3] << 24;
            om.y = cm[4] | cm[5] << 8 | cm[6] << 16 | (unsigned)cm[7] << 24;
            ov.x = cv[0] | cv[1] << 8 | cv[2] << 16 | (unsigned)cv[3] << 24;
            ov.y = cv[4] | cv[5] << 8 | cv[6] << 16 | (unsigned)cv[7] << 24;
            *reinterpret_cast<uint2*>(qm + i0) = om;
            *reinterpret_cast<uint2*>(qv + i0) = ov;
        } else {
#pragma unroll
            for (int j = 0; j < V; j++) {
                if (j < nv) {
                    params[i0 + j] = p[j];
                    qm[i0 + j] = cm[j];
                    qv[i0 + j] = cv[j];
                }
            }
        }
        if (threadIdx.x == 0) {
            absmax_m[qb] = am;
            absmax_v[qb] = av;
        }
        __syncthreads(); // red[] is reused by the next quantization block
    }
}

// One step with 8-bit m, v. params/grads 16-byte aligned; qm, qv (n codes) 8-byte aligned;
// absmax_m/v: CEIL_DIV(n, ADAMW8_QBLOCK) floats; d_maps: signed map then unsigned map (512 floats).
// AMSGrad is not supported here.
template <typename Tg>
void adamw_update_8bit(float* params, const Tg* grads, unsigned char* qm, unsigned char* qv, float* absmax_m,
                       float* absmax_v, const float* d_maps, size_t n, const AdamWSegment* d_segments, int nseg,
                       const AdamWParams& hp, int step, const float* d_clip_scale, cudaStream_t stream) {
    if (n == 0) return;
    if (step < 1 || nseg < 1 || nseg > ADAMW_MAX_SEGMENTS) ls_fatal("adamw_8bit: step %d, %d segments", step, nseg);
    if (hp.amsgrad) ls_fatal("adamw_8bit: AMSGrad is not supported with 8-bit state");
    adamw_check_aligned(params, "params");
    adamw_check_aligned(grads, "grads");
    if (((uintptr_t)qm & 7u) || ((uintptr_t)qv & 7u)) ls_fatal("adamw_8bit: code buffers must be 8-byte aligned");
    AdamWStepArgs a = adamw_step_args(hp, step);
    size_t nq = CEIL_DIV(n, (size_t)ADAMW8_QBLOCK), full = (size_t)cuda_sm_count() * 8;
    unsigned grid = (unsigned)(nq < full ? nq : full);
    launch(adamw_8bit_kernel<Tg>, grid, ADAMW8_THREADS, adamw_segments_smem_bytes(nseg), stream, params, grads, qm,
           qv, absmax_m, absmax_v, n, d_maps, d_segments, nseg, a, d_clip_scale);
}

#endif // LLMC_ADAMW_LOWP_CUH

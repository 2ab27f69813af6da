/*
 device.cuh: what every optimizer kernel shares on the device (llmc/optim/update.cuh, muon.cuh):
 the two walks over a step's elements, 128-bit loads and stores, and the parameters' load and store.

 The segment table (llmc/optim/segments.h): a sorted, contiguous list of OptimSegment {offset, param,
 count, ..., weight_decay, lr_mult} covering [0, n) of the step's buffers; element k of segment s is
 element offset + k of the gradients, the state and the master weights, and element param + k of
 the parameters (param == offset for a whole model; a ZeRO-1 shard, BAdam block or offload chunk
 cuts and rebases offset and keeps param, the global index). Tensor boundaries need not be aligned
 to anything; at most OPT_MAX_SEGMENTS.
   optim_for_each_chunk  the elementwise kernels: grid-stride chunks of V elements (whole 128-bit
                         words of every buffer), the table in shared memory, each thread finding
                         its first chunk's segment by binary search and then walking forward.
   optim_for_each_block  the blockwise kernels (int8 state, LAMB's sums, Muon's int8 momentum): one
                         CUDA block per OPT_BLOCK block of a tensor (llmc/optim/segments.h).
 Parameters: fp32, or bf16 with fp32 master weights (p is read from the master; the bf16 params are
 only written) or without; bf16 results rounded stochastically (random bits = srng_bits of the
 global element index in stream 0, llmc/optim/srng.h: a view rounds as the whole model) or to
 nearest even.
*/
#ifndef LLMC_OPTIM_DEVICE_CUH
#define LLMC_OPTIM_DEVICE_CUH

#include <type_traits>
#include <cuda_fp16.h>

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include "llmc/cuda/cuda_common.h"
#include "llmc/optim/segments.h"
#include "llmc/optim/srng.h"

#define OPT_MAX_SEGMENTS 2048 // 24 B each in shared memory: 48 KB

// ----------------------------------------------------------------------------
// shared device helpers

// Random bits: srng_bits(key, i, salt) of llmc/optim/srng.h (shared with the CPU optimizers); stream 0
// rounds the bf16 parameters.

// Unbiased rounding of x to bf16: rounds up (in magnitude) with probability equal to the discarded
// fraction. Infinities and NaNs convert as they are.
__device__ __forceinline__ __nv_bfloat16 bf16_round_stochastic(float x, unsigned bits) {
    unsigned u = __float_as_uint(x);
    if ((u & 0x7f800000u) == 0x7f800000u) return __float2bfloat16_rn(x);
    u += bits & 0xffffu;
    return __ushort_as_bfloat16((unsigned short)(u >> 16));
}

// Unbiased rounding of x to fp16: toward zero, then one ulp away with probability equal to the
// discarded fraction of that ulp (fp16's ulp is not a fixed count of fp32 bits: subnormals).
// Infinities and NaNs convert as they are.
__device__ __forceinline__ __half fp16_round_stochastic(float x, unsigned bits) {
    if (!isfinite(x)) return __float2half_rn(x);
    const __half t = __float2half_rz(x);
    const float lo = __half2float(t);
    if (lo == x) return t;
    const __half away = __ushort_as_half((unsigned short)(__half_as_ushort(t) + 1));
    const float frac = (x - lo) / (__half2float(away) - lo);
    return (float)(bits & 0xffffu) < frac * 65536.0f ? away : t;
}

// x stored as a parameter of type Tp: fp32 as it is; bf16 and fp16 stochastically (bits) or to nearest.
template <typename Tp, bool kStochastic>
__device__ __forceinline__ Tp optim_round_param(float x, unsigned bits) {
    if constexpr (std::is_same<Tp, __nv_bfloat16>::value) return kStochastic ? bf16_round_stochastic(x, bits) : __float2bfloat16_rn(x);
    else if constexpr (std::is_same<Tp, __half>::value) return kStochastic ? fp16_round_stochastic(x, bits) : __float2half_rn(x);
    else return x;
}

// First segment whose end is past element i (seg_end sorted ascending, i < seg_end[nseg-1]).
__device__ __forceinline__ int optim_find_segment(const size_t* seg_end, int nseg, size_t i) {
    int lo = 0, hi = nseg - 1;
    while (lo < hi) {
        int mid = (lo + hi) >> 1;
        if (seg_end[mid] > i) hi = mid; else lo = mid + 1;
    }
    return lo;
}

// Copies the segment table into shared memory as seg_end[nseg] (one past the last element),
// seg_delta[nseg] (param - offset, modulo 2^64: element i's parameter is i + seg_delta) and
// seg_par[nseg] {weight_decay, step_lr}: step_lr = lr * lr_mult, times seg_mul[s] when seg_mul is
// not NULL (LAMB's trust ratios), rounded once here as the CPU updates round it; the caller
// synchronizes.
__device__ __forceinline__ void optim_segments_to_smem(size_t* seg_end, size_t* seg_delta, float2* seg_par,
                                                       const OptimSegment* segments, int nseg, float lr,
                                                       const float* seg_mul) {
    for (int s = threadIdx.x; s < nseg; s += blockDim.x) {
        const OptimSegment sg = segments[s];
        seg_end[s] = sg.offset + sg.count;
        seg_delta[s] = sg.param - sg.offset;
        seg_par[s] = make_float2(sg.weight_decay, seg_mul != nullptr ? (lr * sg.lr_mult) * seg_mul[s] : lr * sg.lr_mult);
    }
}
// The dynamic shared memory of a kernel that walks its elements with optim_for_each_chunk.
static inline size_t optim_segments_smem_bytes(int nseg) { return (size_t)nseg * (2 * sizeof(size_t) + sizeof(float2)); }

// The gradient scale of a step: *clip_scale (global_norm_clip_scale), or 1 when NULL.
__device__ __forceinline__ float optim_clip_scale(const float* clip_scale) {
    return clip_scale != nullptr ? *clip_scale : 1.0f;
}

// The walk of the elementwise optimizer kernel (every rule on fp32 or 16-bit state, and LAMB's
// update) over [0, n) in chunks of V elements, V such that a chunk is whole 128-bit words of every
// buffer. Copies the segment table into shared memory (optim_segments_to_smem with lr and seg_mul;
// launch with optim_segments_smem_bytes(nseg) of dynamic shared memory; one barrier, reached by
// every thread), then thread tid takes chunks tid, tid + the grid's threads, ...:
//   chunk(i0, p0, wd, step_lr, s)  a chunk inside one tensor (segment s) whose parameters p0 ...
//                               are whole 128-bit words too (nearly all; all when param ==
//                               offset): the vector path, with the tensor's hyperparameters in
//                               registers;
//   one(i, pi, wd, step_lr, s)  each element of any other chunk (a tensor boundary inside, or
//                               parameters placed off the chunk grid by a view), and the n % V
//                               tail (one element per thread): scalar loads and stores.
// i indexes grads, state and master, pi = i + param - offset the parameters. A thread finds the
// segment of its first chunk by binary search and then walks forward (its chunks only move
// forward). chunk and one are inlined: no traffic or registers of their own.
template <int V, typename Chunk, typename One>
__device__ __forceinline__ void optim_for_each_chunk(const OptimSegment* segments, int nseg, const float* seg_mul,
                                                     float lr, size_t n, Chunk chunk, One one) {
    DYNAMIC_SHARED(size_t, seg_end); // (nseg), (nseg) seg_delta, then (nseg) float2 {weight_decay, step_lr}
    size_t* seg_delta = seg_end + nseg;
    float2* seg_par = reinterpret_cast<float2*>(seg_delta + nseg);
    optim_segments_to_smem(seg_end, seg_delta, seg_par, segments, nseg, lr, seg_mul);
    __syncthreads();
    const size_t nchunks = n / V, stride = (size_t)gridDim.x * blockDim.x;
    const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    int s = tid < nchunks ? optim_find_segment(seg_end, nseg, tid * V) : 0;
    for (size_t c = tid; c < nchunks; c += stride) {
        const size_t i0 = c * V;
        while (seg_end[s] <= i0) s++;
        const size_t p0 = i0 + seg_delta[s];
        if (i0 + V > seg_end[s] || p0 % V != 0) { // a tensor boundary inside, or parameters off the grid
            LS_BRANCH("optim.chunk_by_element");
#pragma unroll 1
            for (int j = 0; j < V; j++) {
                const int sj = optim_find_segment(seg_end, nseg, i0 + j);
                one(i0 + j, i0 + j + seg_delta[sj], seg_par[sj].x, seg_par[sj].y, sj);
            }
            continue;
        }
        LS_BRANCH("optim.chunk_vector");
        chunk(i0, p0, seg_par[s].x, seg_par[s].y, s);
    }
    if (tid < n - nchunks * V) { // the tail
        LS_BRANCH("optim.tail");
        const size_t i = nchunks * V + tid;
        const int sj = optim_find_segment(seg_end, nseg, i);
        one(i, i + seg_delta[sj], seg_par[sj].x, seg_par[sj].y, sj);
    }
}

// V elements of T from p (16-byte aligned) as floats, in 128-bit streaming loads.
template <int V, typename T>
__device__ __forceinline__ void optim_load(const T* p, float (&out)[V]) {
    constexpr int E = Vec128<T>::size;
    static_assert(V % E == 0, "a chunk is whole 128-bit words of every buffer");
#pragma unroll
    for (int k = 0; k < V / E; k++) {
        Vec128<T> x = load128cs(p + k * E);
#pragma unroll
        for (int e = 0; e < E; e++) out[k * E + e] = (float)x[e];
    }
}
template <int V>
__device__ __forceinline__ void optim_store(float* p, const float (&in)[V]) {
#pragma unroll
    for (int k = 0; k < V / 4; k++) {
        Vec128<float> x;
#pragma unroll
        for (int e = 0; e < 4; e++) x[e] = in[k * 4 + e];
        store128cs(p + k * 4, x);
    }
}

// 4-bit state's v (llmc/optim/quant4.h): a thread's elements' rows and columns in the segment's
// scales, from its first element rel; 32-bit (a 4-bit segment's place in its tensor is below 2^32:
// optim_state_setup).
struct OptimQ4Walk {
    unsigned r, c, w;
    __device__ __forceinline__ void next() {
        if (++c == w) { c = 0; r++; }
    }
};
__device__ __forceinline__ OptimQ4Walk optim_q4_walk(const OptimSegment& sg, size_t rel) {
    const unsigned w = (unsigned)optim_segment_width(&sg), t0 = (unsigned)sg.trel, e = t0 + (unsigned)rel;
    return OptimQ4Walk{e / w - t0 / w, e % w, w};
}

// ----------------------------------------------------------------------------
// parameters: fp32, or bf16 with optional fp32 master weights (every optimizer kernel)

// V parameters as fp32: the master weights from element i0 when kMaster (the state's index),
// else params from element p0 (the global index); 16-byte aligned.
template <int V, typename Tp, bool kMaster>
__device__ __forceinline__ void optim_load_params(const Tp* params, const float* master, size_t i0, size_t p0,
                                                  float (&p)[V]) {
    if constexpr (kMaster) optim_load<V>(master + i0, p);
    else optim_load<V>(params + p0, p);
}

// Stores V updated parameters: the master weights from element i0 (kMaster) and params from
// element p0; bf16 params rounded stochastically (stream 0 at the global index p0 + j) or to
// nearest even.
template <int V, typename Tp, bool kMaster, bool kStochastic>
__device__ __forceinline__ void optim_store_params(Tp* params, float* master, size_t i0, size_t p0, const float (&p)[V],
                                                   unsigned long long key) {
    if constexpr (kMaster) optim_store<V>(master + i0, p);
    if constexpr (sizeof(Tp) == 2) {
        static_assert(V % 8 == 0, "16-bit params: whole 128-bit words");
#pragma unroll
        for (int k = 0; k < V / 8; k++) {
            Vec128<Tp> out;
#pragma unroll
            for (int e = 0; e < 8; e++) {
                out[e] = optim_round_param<Tp, kStochastic>(p[k * 8 + e], kStochastic ? srng_bits(key, p0 + k * 8 + e, 0) : 0u);
            }
            store128cs(params + p0 + k * 8, out);
        }
    } else {
        optim_store<V>(reinterpret_cast<float*>(params) + p0, p);
    }
}

// One parameter: the master's element i, or params' element pi.
template <typename Tp, bool kMaster>
__device__ __forceinline__ float optim_load_param(const Tp* params, const float* master, size_t i, size_t pi) {
    if constexpr (kMaster) return master[i];
    else return (float)params[pi];
}

template <typename Tp, bool kMaster, bool kStochastic>
__device__ __forceinline__ void optim_store_param(Tp* params, float* master, size_t i, size_t pi, float p,
                                                  unsigned long long key) {
    if constexpr (kMaster) master[i] = p;
    if constexpr (sizeof(Tp) == 2) {
        params[pi] = optim_round_param<Tp, kStochastic>(p, kStochastic ? srng_bits(key, pi, 0) : 0u);
    } else {
        reinterpret_cast<float*>(params)[pi] = p;
    }
}

// The same two with the rounding chosen at run time (a uniform branch): the kernels of
// llmc/optim/update.cuh, whose template variants multiply with every rule and storage.
template <typename Tp, bool kMaster>
__device__ __forceinline__ void optim_store_param_rt(bool stochastic, Tp* params, float* master, size_t i, size_t pi,
                                                     float p, unsigned long long key) {
    if (stochastic) optim_store_param<Tp, kMaster, true>(params, master, i, pi, p, key);
    else optim_store_param<Tp, kMaster, false>(params, master, i, pi, p, key);
}

template <int V, typename Tp, bool kMaster>
__device__ __forceinline__ void optim_store_params_rt(bool stochastic, Tp* params, float* master, size_t i0, size_t p0,
                                                      const float (&p)[V], unsigned long long key) {
    if (stochastic) optim_store_params<V, Tp, kMaster, true>(params, master, i0, p0, p, key);
    else optim_store_params<V, Tp, kMaster, false>(params, master, i0, p0, p, key);
}

// And with the master weights chosen at run time too (master != nullptr: bf16 params only): the
// 4-bit kernel, whose variants per master would double its build time.
template <typename Tp>
__device__ __forceinline__ float optim_load_param_mrt(const Tp* params, const float* master, size_t i, size_t pi) {
    if constexpr (sizeof(Tp) == 2) {
        if (master != nullptr) return optim_load_param<Tp, true>(params, master, i, pi);
    }
    return optim_load_param<Tp, false>(params, master, i, pi);
}
template <int V, typename Tp>
__device__ __forceinline__ void optim_load_params_mrt(const Tp* params, const float* master, size_t i0, size_t p0,
                                                      float (&p)[V]) {
    if constexpr (sizeof(Tp) == 2) {
        if (master != nullptr) { optim_load_params<V, Tp, true>(params, master, i0, p0, p); return; }
    }
    optim_load_params<V, Tp, false>(params, master, i0, p0, p);
}
template <typename Tp>
__device__ __forceinline__ void optim_store_param_mrt(bool stochastic, Tp* params, float* master, size_t i, size_t pi,
                                                      float p, unsigned long long key) {
    if constexpr (sizeof(Tp) == 2) {
        if (master != nullptr) { optim_store_param_rt<Tp, true>(stochastic, params, master, i, pi, p, key); return; }
    }
    optim_store_param_rt<Tp, false>(stochastic, params, master, i, pi, p, key);
}
template <int V, typename Tp>
__device__ __forceinline__ void optim_store_params_mrt(bool stochastic, Tp* params, float* master, size_t i0, size_t p0,
                                                       const float (&p)[V], unsigned long long key) {
    if constexpr (sizeof(Tp) == 2) {
        if (master != nullptr) { optim_store_params_rt<V, Tp, true>(stochastic, params, master, i0, p0, p, key); return; }
    }
    optim_store_params_rt<V, Tp, false>(stochastic, params, master, i0, p0, p, key);
}

// ----------------------------------------------------------------------------
// host side

static inline void optim_check_aligned(const void* p, const char* name) {
    if (((uintptr_t)p & 15u) != 0) ls_fatal("optimizer: buffer %s (%p) is not 16-byte aligned", name, p);
}

// Fatal unless the parameter buffers fit the template: master weights for bf16 params only.
template <typename Tp>
static inline void optim_check_params(const Tp* params, const float* master, const char* who) {
    if (master != nullptr && sizeof(Tp) != 2) ls_fatal("%s: master weights are for bf16 params only", who);
    optim_check_aligned(params, "params");
    optim_check_aligned(master, "master");
}

// The walk of the blockwise kernels (int8 state and LAMB's moments, llmc/optim/update.cuh) over
// the OPT_BLOCK-element blocks of every tensor (block0 from optim_blocks_build: blocks start at each
// tensor's first element), CUDA block k taking blocks k, k + gridDim.x, ...:
//   body(b, s, sg, rel, len)  block b of segment s (sg = segments[s]): elements sg.offset + rel
//                             ... + len - 1 of the flat buffers, sg.param + rel ... of the
//                             parameters (len < OPT_BLOCK at a tensor's end).
// The segment of the first block by binary search (optim_block_segment), then walking forward. The
// same for every thread of a CUDA block: body may synchronize (barriers are safe).
template <typename Body>
__device__ __forceinline__ void optim_for_each_block(const OptimSegment* segments, const size_t* block0, int nseg,
                                                   Body body) {
    const size_t nblocks = block0[nseg];
    int s = blockIdx.x < nblocks ? optim_block_segment(block0, nseg, blockIdx.x) : 0;
    for (size_t b = blockIdx.x; b < nblocks; b += gridDim.x) {
        while (block0[s + 1] <= b) s++;
        const OptimSegment sg = segments[s];
        const size_t rel = (b - block0[s]) * OPT_BLOCK, rest = sg.count - rel;
        body(b, s, sg, rel, rest < OPT_BLOCK ? rest : (size_t)OPT_BLOCK);
    }
}

// The max over a warp (every lane gets it).
__device__ __forceinline__ float optim_warp_max(float x) {
    for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}

#endif // LLMC_OPTIM_DEVICE_CUH

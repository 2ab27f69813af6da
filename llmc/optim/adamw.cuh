/*
 adamw.cuh: the fused AdamW update of leanstep. One launch updates every parameter of the model.

 Layout: flat buffers of n elements (grads, m, v, and optionally fp32 master weights and the
 AMSGrad max of v) and the parameter buffer, 16-byte aligned. Per-tensor hyperparameters come
 from a segment table (llmc/optim/optim.h): a sorted, contiguous list of OptimSegment {offset,
 param, count, ..., weight_decay, lr_mult} covering [0, n) of the step's buffers; element k of
 segment s is element offset + k of grads, state and master and element param + k of the
 parameters (param == offset for a whole model; a ZeRO-1 shard, BAdam block or offload chunk
 cuts and rebases offset and keeps param, the global index). Tensor boundaries need not be
 aligned to anything; at most ADAMW_MAX_SEGMENTS. Each block copies the table into shared memory;
 a thread finds the segment of its first chunk by binary search and then walks forward
 (grid-stride chunks only move forward): no tensor index involved. That walk,
 adamw_for_each_chunk, is shared by every elementwise optimizer kernel.

 The update of one element, fp32, in exactly this order (the CPU trainer must use the same
 operations to agree bit for bit; fmaf is one rounding):
     g    = grad * clip_scale                     clip_scale = *d_clip_scale, or 1 when NULL
     m    = fmaf(beta1, m, (1 - beta1) * g)       (1 - beta1) computed in float on the host
     v    = fmaf(beta2, v, ((1 - beta2) * g) * g)
     vmax = fmaxf(vmax, v); use vmax for v        (AMSGrad only)
     upd  = (m * ibc1) / (sqrtf(v * ibc2) + eps)  ibc1 = 1.0f / (1.0f - powf(beta1, (float)t)),
                                                  ibc2 likewise, on the host (as llmc/optim/optim.h)
     p    = fmaf(-(lr * lr_mult), fmaf(wd, p, upd), p)     i.e. p -= lr*lr_mult*(upd + wd*p)
 Division and sqrtf are IEEE-rounded in both builds (nvcc's defaults), so a CPU loop written with
 the same fmaf calls gives the same bits; plain `a*b + c` lets each compiler choose what to fuse.
 p is read from the master weights when there are any (the bf16 params are then only written).
 bf16 results are rounded stochastically (unbiased; random bits = hash(seed, step, global element
 index param + k), so a run is reproducible and a view rounds as the whole model; llmc/optim/srng.h)
 or to nearest even.

 Memory traffic per parameter: fp32 params+grads 28 B; bf16 params+grads with master 28 B, without
 master 22 B; AMSGrad +8 B. 128-bit loads/stores with streaming cache hints; a chunk that straddles
 a tensor boundary (and the n % V tail) goes element by element.

 Use:
   OptimSegment* d_seg = adamw_segments_upload(segments, nseg, n);   // once; cudaFree it at the end
   AdamWBuffers<__nv_bfloat16, __nv_bfloat16> buf = {params, grads, m, v, master, NULL};
   adamw_update(buf, n, d_seg, nseg, hyper, step, d_clip_scale, stream);  // step = 1, 2, ...
 Reusable pieces for other optimizer kernels (llmc/optim/adamw_lowp.cuh, llmc/optim/kernels.cuh):
 adamw_step_args, bf16_round_stochastic (random bits: srng_bits of llmc/optim/srng.h, shared with the CPU
 optimizers), adamw_for_each_chunk (the segment table and the chunk walk), adamw_clip_scale,
 adamw_load/adamw_store.
*/
#ifndef LLMC_ADAMW_CUH
#define LLMC_ADAMW_CUH

#include <type_traits>
#include <cuda_fp16.h>

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include "llmc/cuda/cuda_common.h"
#include "llmc/cuda/profile.cuh"
#include "llmc/optim/optim.h"
#include "llmc/optim/srng.h"

// Hyperparameters of a run (lr is this step's, after the schedule).
typedef struct {
    float lr;
    float beta1, beta2;   // in [0, 1)
    float eps;
    int amsgrad;          // 1: keep the running max of v (buffer vmax) and divide by it
    int stochastic_rounding; // bf16 outputs: 1 stochastic, 0 round to nearest even
    unsigned long long seed; // for stochastic rounding
} AdamWParams;

// Per-step scalars, computed once on the host.
struct AdamWStepArgs {
    float lr, beta1, beta2, one_minus_beta1, one_minus_beta2, eps;
    float inv_bias_corr1, inv_bias_corr2; // 1 / (1 - beta^t)
    unsigned long long rng_key;   // hash of (seed, step)
};

// Device buffers of one update, n elements each, 16-byte aligned.
template <typename Tp, typename Tg>
struct AdamWBuffers {
    Tp* params;        // (n) written; read too unless master != NULL
    const Tg* grads;   // (n)
    float* m;          // (n) first moment
    float* v;          // (n) second moment
    float* master;     // (n) fp32 master weights, or NULL (bf16 params only)
    float* vmax;       // (n) AMSGrad running max of v, or NULL (amsgrad off)
};

#define ADAMW_BLOCK 512
#define ADAMW_MAX_SEGMENTS 2048 // 24 B each in shared memory: 48 KB

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
__device__ __forceinline__ int adamw_find_segment(const size_t* seg_end, int nseg, size_t i) {
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
__device__ __forceinline__ void adamw_segments_to_smem(size_t* seg_end, size_t* seg_delta, float2* seg_par,
                                                       const OptimSegment* segments, int nseg, float lr,
                                                       const float* seg_mul) {
    for (int s = threadIdx.x; s < nseg; s += blockDim.x) {
        const OptimSegment sg = segments[s];
        seg_end[s] = sg.offset + sg.count;
        seg_delta[s] = sg.param - sg.offset;
        seg_par[s] = make_float2(sg.weight_decay, seg_mul != nullptr ? (lr * sg.lr_mult) * seg_mul[s] : lr * sg.lr_mult);
    }
}
// The dynamic shared memory of a kernel that walks its elements with adamw_for_each_chunk.
static inline size_t adamw_segments_smem_bytes(int nseg) { return (size_t)nseg * (2 * sizeof(size_t) + sizeof(float2)); }

// The gradient scale of a step: *clip_scale (global_norm_clip_scale), or 1 when NULL.
__device__ __forceinline__ float adamw_clip_scale(const float* clip_scale) {
    return clip_scale != nullptr ? *clip_scale : 1.0f;
}

// The walk of every elementwise optimizer kernel (AdamW with fp32 or bf16 state, SGD, Lion, LAMB's
// update) over [0, n) in chunks of V elements, V such that a chunk is whole 128-bit words of every
// buffer. Copies the segment table into shared memory (adamw_segments_to_smem with lr and seg_mul;
// launch with adamw_segments_smem_bytes(nseg) of dynamic shared memory; one barrier, reached by
// every thread), then thread tid takes chunks tid, tid + the grid's threads, ...:
//   chunk(i0, p0, wd, step_lr)  a chunk inside one tensor whose parameters p0 ... are whole
//                               128-bit words too (nearly all; all when param == offset): the
//                               vector path, with the tensor's hyperparameters in registers;
//   one(i, pi, wd, step_lr)     each element of any other chunk (a tensor boundary inside, or
//                               parameters placed off the chunk grid by a view), and the n % V
//                               tail (one element per thread): scalar loads and stores.
// i indexes grads, state and master, pi = i + param - offset the parameters. A thread finds the
// segment of its first chunk by binary search and then walks forward (its chunks only move
// forward). chunk and one are inlined: no traffic or registers of their own.
template <int V, typename Chunk, typename One>
__device__ __forceinline__ void adamw_for_each_chunk(const OptimSegment* segments, int nseg, const float* seg_mul,
                                                     float lr, size_t n, Chunk chunk, One one) {
    DYNAMIC_SHARED(size_t, seg_end); // (nseg), (nseg) seg_delta, then (nseg) float2 {weight_decay, step_lr}
    size_t* seg_delta = seg_end + nseg;
    float2* seg_par = reinterpret_cast<float2*>(seg_delta + nseg);
    adamw_segments_to_smem(seg_end, seg_delta, seg_par, segments, nseg, lr, seg_mul);
    __syncthreads();
    const size_t nchunks = n / V, stride = (size_t)gridDim.x * blockDim.x;
    const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    int s = tid < nchunks ? adamw_find_segment(seg_end, nseg, tid * V) : 0;
    for (size_t c = tid; c < nchunks; c += stride) {
        const size_t i0 = c * V;
        while (seg_end[s] <= i0) s++;
        const size_t p0 = i0 + seg_delta[s];
        if (i0 + V > seg_end[s] || p0 % V != 0) { // a tensor boundary inside, or parameters off the grid
            LS_BRANCH("adamw.chunk_by_element");
#pragma unroll 1
            for (int j = 0; j < V; j++) {
                const int sj = adamw_find_segment(seg_end, nseg, i0 + j);
                one(i0 + j, i0 + j + seg_delta[sj], seg_par[sj].x, seg_par[sj].y);
            }
            continue;
        }
        LS_BRANCH("adamw.chunk_vector");
        chunk(i0, p0, seg_par[s].x, seg_par[s].y);
    }
    if (tid < n - nchunks * V) { // the tail
        LS_BRANCH("adamw.tail");
        const size_t i = nchunks * V + tid;
        const int sj = adamw_find_segment(seg_end, nseg, i);
        one(i, i + seg_delta[sj], seg_par[sj].x, seg_par[sj].y);
    }
}

// V elements of T from p (16-byte aligned) as floats, in 128-bit streaming loads.
template <int V, typename T>
__device__ __forceinline__ void adamw_load(const T* p, float (&out)[V]) {
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
__device__ __forceinline__ void adamw_store(float* p, const float (&in)[V]) {
#pragma unroll
    for (int k = 0; k < V / 4; k++) {
        Vec128<float> x;
#pragma unroll
        for (int e = 0; e < 4; e++) x[e] = in[k * 4 + e];
        store128cs(p + k * 4, x);
    }
}

// ----------------------------------------------------------------------------
// parameters: fp32, or bf16 with optional fp32 master weights (every optimizer kernel)

// V parameters as fp32: the master weights from element i0 when kMaster (the state's index),
// else params from element p0 (the global index); 16-byte aligned.
template <int V, typename Tp, bool kMaster>
__device__ __forceinline__ void optim_load_params(const Tp* params, const float* master, size_t i0, size_t p0,
                                                  float (&p)[V]) {
    if constexpr (kMaster) adamw_load<V>(master + i0, p);
    else adamw_load<V>(params + p0, p);
}

// Stores V updated parameters: the master weights from element i0 (kMaster) and params from
// element p0; bf16 params rounded stochastically (stream 0 at the global index p0 + j) or to
// nearest even.
template <int V, typename Tp, bool kMaster, bool kStochastic>
__device__ __forceinline__ void optim_store_params(Tp* params, float* master, size_t i0, size_t p0, const float (&p)[V],
                                                   unsigned long long key) {
    if constexpr (kMaster) adamw_store<V>(master + i0, p);
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
        adamw_store<V>(reinterpret_cast<float*>(params) + p0, p);
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

// The same two with the rounding chosen at run time (a uniform branch): the generic kernels of
// llmc/optim/kernels.cuh, whose template variants multiply with every optimizer and state format.
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

// ----------------------------------------------------------------------------
// the update

// The update of one element (see the banner); m, v, vmax in place, returns the new parameter.
template <bool kAmsgrad>
__device__ __forceinline__ float adamw_element(float p, float g, float& m, float& v, float& vmax, float wd,
                                               float lr_eff, const AdamWStepArgs& a) {
    m = fmaf(a.beta1, m, a.one_minus_beta1 * g);
    v = fmaf(a.beta2, v, a.one_minus_beta2 * g * g);
    float vv = v;
    if (kAmsgrad) {
        vmax = fmaxf(vmax, v);
        vv = vmax;
    }
    float upd = (m * a.inv_bias_corr1) / (sqrtf(vv * a.inv_bias_corr2) + a.eps);
    return fmaf(-lr_eff, fmaf(wd, p, upd), p);
}

// ----------------------------------------------------------------------------
// the kernel

// One element through scalar loads and stores: tensor boundaries inside a chunk, and the tail.
template <typename Tp, typename Tg, bool kMaster, bool kAmsgrad, bool kStochastic>
__device__ __forceinline__ void adamw_one(Tp* params, float* master, const Tg* grads, float* mom1, float* mom2,
                                          float* vmax, size_t i, size_t pi, float wd, float lr_eff, float scale,
                                          const AdamWStepArgs& a) {
    float m = mom1[i], v = mom2[i], vm = kAmsgrad ? vmax[i] : 0.0f;
    const float p = adamw_element<kAmsgrad>(optim_load_param<Tp, kMaster>(params, master, i, pi),
                                            (float)grads[i] * scale, m, v, vm, wd, lr_eff, a);
    mom1[i] = m;
    mom2[i] = v;
    if (kAmsgrad) vmax[i] = vm;
    optim_store_param<Tp, kMaster, kStochastic>(params, master, i, pi, p, a.rng_key);
}

// One chunk = V elements = whole 128-bit words of every buffer (adamw_for_each_chunk: the vector
// path inside a tensor, element by element across a tensor boundary and in the tail).
template <typename Tp, typename Tg, bool kMaster, bool kAmsgrad, bool kStochastic>
__global__ void __launch_bounds__(ADAMW_BLOCK, kAmsgrad ? 1 : 2) // 2 blocks/SM: <= 64 registers
adamw_kernel(Tp* __restrict__ params, float* __restrict__ master, const Tg* __restrict__ grads,
             float* __restrict__ mom1, float* __restrict__ mom2, float* __restrict__ vmax, size_t n,
             const OptimSegment* __restrict__ segments, int nseg, AdamWStepArgs a,
             const float* __restrict__ clip_scale) {
    constexpr int V = 16 / (sizeof(Tp) < sizeof(Tg) ? sizeof(Tp) : sizeof(Tg));
    const float scale = adamw_clip_scale(clip_scale);
    auto one = [&](size_t i, size_t pi, float wd, float lr_eff) {
        adamw_one<Tp, Tg, kMaster, kAmsgrad, kStochastic>(params, master, grads, mom1, mom2, vmax, i, pi, wd, lr_eff,
                                                          scale, a);
    };
    auto chunk = [&](size_t i0, size_t p0, float wd, float lr_eff) {
        float p[V], g[V], m[V], v[V], vm[V] = {};
        adamw_load<V>(grads + i0, g);
        adamw_load<V>(mom1 + i0, m);
        adamw_load<V>(mom2 + i0, v);
        if (kAmsgrad) adamw_load<V>(vmax + i0, vm);
        optim_load_params<V, Tp, kMaster>(params, master, i0, p0, p);
#pragma unroll
        for (int j = 0; j < V; j++) p[j] = adamw_element<kAmsgrad>(p[j], g[j] * scale, m[j], v[j], vm[j], wd, lr_eff, a);
        adamw_store<V>(mom1 + i0, m);
        adamw_store<V>(mom2 + i0, v);
        if (kAmsgrad) adamw_store<V>(vmax + i0, vm);
        optim_store_params<V, Tp, kMaster, kStochastic>(params, master, i0, p0, p, a.rng_key);
    };
    adamw_for_each_chunk<V>(segments, nseg, nullptr, a.lr, n, chunk, one);
}

// ----------------------------------------------------------------------------
// host side

static inline AdamWStepArgs adamw_step_args(const AdamWParams& hp, int step) {
    AdamWStepArgs a;
    a.lr = hp.lr;
    a.beta1 = hp.beta1;
    a.beta2 = hp.beta2;
    a.one_minus_beta1 = 1.0f - hp.beta1;
    a.one_minus_beta2 = 1.0f - hp.beta2;
    a.eps = hp.eps;
    a.inv_bias_corr1 = 1.0f / (1.0f - powf(hp.beta1, (float)step)); // the CPU trainer's expression
    a.inv_bias_corr2 = 1.0f / (1.0f - powf(hp.beta2, (float)step));
    a.rng_key = srng_step_key(hp.seed, step);
    return a;
}

// Validates a host segment table (sorted, contiguous, covering [0, n) of the step's buffers, sane
// hyperparameters; param is any place in the parameter buffer) and copies it to the device. The caller owns the returned pointer (cudaFree).
static inline OptimSegment* adamw_segments_upload(const OptimSegment* segs, int nseg, size_t n) {
    if (nseg < 1 || nseg > ADAMW_MAX_SEGMENTS) ls_fatal("adamw: %d segments (1..%d allowed)", nseg, ADAMW_MAX_SEGMENTS);
    size_t next = 0;
    for (int s = 0; s < nseg; s++) {
        const OptimSegment& g = segs[s];
        if (g.offset != next || g.count == 0) {
            ls_fatal("adamw: segment %d covers [%zu, %zu) but must start at %zu and be non-empty", s, g.offset,
                     g.offset + g.count, next);
        }
        if (!(g.weight_decay >= 0.0f) || !isfinite(g.weight_decay) || !(g.lr_mult >= 0.0f) || !isfinite(g.lr_mult)) {
            ls_fatal("adamw: segment %d has weight_decay %g, lr_mult %g (finite, >= 0 expected)", s,
                     g.weight_decay, g.lr_mult);
        }
        next += g.count;
    }
    if (next != n) ls_fatal("adamw: the segments cover %zu elements, the buffers have %zu", next, n);
    OptimSegment* d = nullptr;
    cudaCheck(cudaMalloc((void**)&d, (size_t)nseg * sizeof(OptimSegment)));
    cudaCheck(cudaMemcpy(d, segs, (size_t)nseg * sizeof(OptimSegment), cudaMemcpyHostToDevice));
    return d;
}

static inline void adamw_check_aligned(const void* p, const char* name) {
    if (((uintptr_t)p & 15u) != 0) ls_fatal("adamw: buffer %s (%p) is not 16-byte aligned", name, p);
}

// Fatal unless the parameter buffers fit the template: master weights for bf16 params only.
template <typename Tp>
static inline void optim_check_params(const Tp* params, const float* master, const char* who) {
    if (master != nullptr && sizeof(Tp) != 2) ls_fatal("%s: master weights are for bf16 params only", who);
    adamw_check_aligned(params, "params");
    adamw_check_aligned(master, "master");
}

template <typename Tp, typename Tg, bool kMaster, bool kAmsgrad, bool kStochastic>
static void adamw_launch(const AdamWBuffers<Tp, Tg>& b, size_t n, const OptimSegment* d_segments, int nseg,
                         const AdamWStepArgs& a, const float* d_clip_scale, cudaStream_t stream) {
    constexpr size_t V = 16 / (sizeof(Tp) < sizeof(Tg) ? sizeof(Tp) : sizeof(Tg));
    size_t nchunks = n / V;
    size_t want = CEIL_DIV(nchunks, (size_t)ADAMW_BLOCK);
    size_t full = (size_t)cuda_sm_count() * (kAmsgrad ? 1 : 2); // one wave: the kernel's launch bounds
    unsigned grid = (unsigned)(want < full ? (want > 0 ? want : 1) : full);
    size_t smem = adamw_segments_smem_bytes(nseg);
    launch(adamw_kernel<Tp, Tg, kMaster, kAmsgrad, kStochastic>, grid, ADAMW_BLOCK, smem, stream, b.params,
           b.master, b.grads, b.m, b.v, b.vmax, n, d_segments, nseg, a, d_clip_scale);
}

// One AdamW step (step = 1, 2, ...) over n elements. d_segments from adamw_segments_upload();
// d_clip_scale: device pointer to the gradient scale (global_norm_clip_scale), or NULL for 1.
// Asynchronous on `stream`; no host synchronization.
template <typename Tp, typename Tg>
void adamw_update(const AdamWBuffers<Tp, Tg>& b, size_t n, const OptimSegment* d_segments, int nseg,
                  const AdamWParams& hp, int step, const float* d_clip_scale, cudaStream_t stream) {
    PROFILE_SCOPE(PROF_OPTIMIZER, stream);
    constexpr bool kBf16 = sizeof(Tp) == 2;
    static_assert(sizeof(Tp) == 2 || sizeof(Tp) == 4, "params are bf16 or fp32");
    static_assert(sizeof(Tg) == 2 || sizeof(Tg) == 4, "grads are bf16 or fp32");
    if (n == 0) return;
    if (step < 1) ls_fatal("adamw: step %d (steps count from 1)", step);
    if (nseg < 1 || nseg > ADAMW_MAX_SEGMENTS || d_segments == nullptr) ls_fatal("adamw: bad segment table (%d segments)", nseg);
    if (!(hp.beta1 >= 0.0f && hp.beta1 < 1.0f && hp.beta2 >= 0.0f && hp.beta2 < 1.0f) || !(hp.eps > 0.0f) || !isfinite(hp.lr)) {
        ls_fatal("adamw: lr %g beta1 %g beta2 %g eps %g out of range", hp.lr, hp.beta1, hp.beta2, hp.eps);
    }
    if (b.master != nullptr && !kBf16) ls_fatal("adamw: master weights are for bf16 params only");
    if ((b.vmax != nullptr) != (hp.amsgrad != 0)) ls_fatal("adamw: AMSGrad needs the vmax buffer, and only then");
    adamw_check_aligned(b.params, "params");
    adamw_check_aligned(b.grads, "grads");
    adamw_check_aligned(b.m, "m");
    adamw_check_aligned(b.v, "v");
    adamw_check_aligned(b.master, "master");
    adamw_check_aligned(b.vmax, "vmax");
    AdamWStepArgs a = adamw_step_args(hp, step);
    const bool sr = kBf16 && hp.stochastic_rounding;
    const bool ms = b.master != nullptr, am = hp.amsgrad != 0;
    // runtime options -> template variants
    if constexpr (kBf16) {
        if (ms && am && sr) adamw_launch<Tp, Tg, true, true, true>(b, n, d_segments, nseg, a, d_clip_scale, stream);
        else if (ms && am) adamw_launch<Tp, Tg, true, true, false>(b, n, d_segments, nseg, a, d_clip_scale, stream);
        else if (ms && sr) adamw_launch<Tp, Tg, true, false, true>(b, n, d_segments, nseg, a, d_clip_scale, stream);
        else if (ms) adamw_launch<Tp, Tg, true, false, false>(b, n, d_segments, nseg, a, d_clip_scale, stream);
        else if (am && sr) adamw_launch<Tp, Tg, false, true, true>(b, n, d_segments, nseg, a, d_clip_scale, stream);
        else if (am) adamw_launch<Tp, Tg, false, true, false>(b, n, d_segments, nseg, a, d_clip_scale, stream);
        else if (sr) adamw_launch<Tp, Tg, false, false, true>(b, n, d_segments, nseg, a, d_clip_scale, stream);
        else adamw_launch<Tp, Tg, false, false, false>(b, n, d_segments, nseg, a, d_clip_scale, stream);
    } else {
        if (am) adamw_launch<Tp, Tg, false, true, false>(b, n, d_segments, nseg, a, d_clip_scale, stream);
        else adamw_launch<Tp, Tg, false, false, false>(b, n, d_segments, nseg, a, d_clip_scale, stream);
    }
}

#endif // LLMC_ADAMW_CUH

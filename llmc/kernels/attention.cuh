/*
 attention.cuh: causal multi-head self-attention of the GPU trainer, forward and backward, with the
 (B, NH, T, T) probabilities kept for the backward pass (as the CPU trainer does).

   attention_forward(out, qkvr, att, qkv, B, T, C, NH, stream)
       qkv (B,T,3C) holds q, k, v, each NH heads of hs = C/NH channels; out (B,T,C);
       qkvr (3,B,NH,T,hs) receives q, k, v split into heads (kept for the backward pass);
       att (B,NH,T,T) receives the softmax probabilities (zero above the diagonal).
   attention_backward(dqkv, dqkvr, datt, scratch, dout, qkvr, att, B, T, C, NH, stream)
       dqkv (B,T,3C) overwritten; dqkvr (3,B,NH,T,hs) and datt (B,NH,T,T) are workspaces;
       scratch: attention_backward_scratch_bytes() bytes (0 in this implementation: may be NULL).

 The steps (all kernels here run unchanged under the CPU harness; the GEMMs go through matmul_gemm,
 cuBLASLt on a GPU and its CPU fallback under the harness):
   forward:  split heads    qkv -> q, k, v (B,NH,T,hs)                       kernel
             scores         att = q @ k^T / sqrt(hs), batch B*NH              GEMM
             softmax        in place, causal mask, fp32 max and sum          kernel, one warp per row
             values         out (B,T,C) = att @ v, per head                   GEMM, batch B, NH calls:
                            written straight into (B,T,C), so no unpermute pass and no scratch
   backward: split heads    dout -> dout_r, kept in dqkvr's q slot (dq is computed last)
             datt = dout_r @ v^T, dv = att^T @ dout_r                         GEMMs
             softmax bwd    datt = att * (datt - sum(att * datt)), in place   kernel, one warp per row
             dk = datt^T @ q / sqrt(hs), dq = datt @ k / sqrt(hs)             GEMMs
             merge heads    dq, dk, dv -> dqkv (B,T,3C)                       kernel
 Numerics: the scores are rounded to floatX once (the GEMM's output) before the softmax, whose
 statistics are fp32; in the BF16 build att, datt and the head-split tensors are bf16 too. The
 upper triangle is computed by the GEMMs and then zeroed by the softmax kernels (2x the minimal
 FLOPs in the T x T products, in exchange for plain library GEMMs).

 Contracts (checked with ls_fatal): matmul_init() called; C % NH == 0 and hs % 8 == 0; pointers
 16-byte aligned. T is free: rows whose length is a multiple of x128::size take the 128-bit path
 in the softmax kernels, others a scalar one; on a GPU, T % 8 == 0 also keeps every (T, T) head
 matrix 16-byte aligned for the tensor-core GEMMs (other T ask cuBLASLt for algorithms that accept
 the lower alignment: checked under the harness only).
*/
#ifndef LLMC_ATTENTION_CUH
#define LLMC_ATTENTION_CUH

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include "llmc/cuda/cuda_common.h"
#include "llmc/cuda/cuda_precision.h"
#include "llmc/kernels/matmul.cuh"
#include "llmc/cuda/profile.cuh"

#define ATTENTION_BLOCK 256 // threads per block of every kernel here (8 warps = 8 softmax rows)

// ----------------------------------------------------------------------------
// kernels

// Between the token-major layout (B, T, K, NH, hs) and the head-major one (K, B, NH, T, hs): K = 3
// for qkv, K = 1 for dout. kToHeads: token-major in, head-major out (the split); else the inverse
// (the merge). One thread per 16-byte chunk of the output; hs % x128::size == 0.
template <bool kToHeads>
static __global__ void attention_permute_heads_kernel(floatX* out, const floatX* in, int B, int T, int K, int NH,
                                                      int hs) {
    const int chunks = hs / x128::size;
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)K * B * NH * T * chunks) return;
    size_t r = idx / chunks;
    const int d = (int)(idx % chunks) * x128::size;
    int b, t, k, h; // the chunk's coordinates, from the output's layout
    if constexpr (kToHeads) {
        t = (int)(r % T);
        r /= T;
        h = (int)(r % NH);
        r /= NH;
        b = (int)(r % B);
        k = (int)(r / B);
    } else {
        h = (int)(r % NH);
        r /= NH;
        k = (int)(r % K);
        r /= K;
        t = (int)(r % T);
        b = (int)(r / T);
    }
    const size_t src = kToHeads ? (((size_t)b * T + t) * K + k) * NH * hs + (size_t)h * hs + d
                                : ((((size_t)k * B + b) * NH + h) * T + t) * hs + d;
    store128(out + idx * x128::size, load128(in + src));
}

// V consecutive elements as floats: one 128-bit load when V == x128::size (p 16-byte aligned).
template <int V>
__device__ __forceinline__ void attention_load(const floatX* p, float (&x)[V]) {
    if constexpr (V == x128::size) {
        x128 v = load128(p);
#pragma unroll
        for (int e = 0; e < V; e++) x[e] = to_float(v[e]);
    } else {
#pragma unroll
        for (int e = 0; e < V; e++) x[e] = to_float(p[e]);
    }
}

template <int V>
__device__ __forceinline__ void attention_store(floatX* p, const float (&x)[V]) {
    if constexpr (V == x128::size) {
        x128 v;
#pragma unroll
        for (int e = 0; e < V; e++) v[e] = from_float(x[e]);
        store128(p, v);
    } else {
#pragma unroll
        for (int e = 0; e < V; e++) p[e] = from_float(x[e]);
    }
}

// s * exp(m - m_new), where an empty partial (m == -inf) contributes nothing.
__device__ __forceinline__ float attention_rescale(float s, float m, float m_new) {
    return m == -INFINITY ? 0.0f : s * expf(m - m_new);
}

// att (rows, T), rows = B*NH*T, in place: row (bh, t) holds the scores of query t; keeps columns
// 0..t as softmax probabilities (fp32 max and sum, online), writes zeros after. One warp per row.
// V = x128::size when T % V == 0 (rows 16-byte aligned), else 1. T is the row length.
template <int V>
__global__ void attention_softmax_forward_kernel(floatX* att, int rows, int T) {
    const int row = (int)(((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32);
    const int lane = threadIdx.x % 32;
    if (row >= rows) return; // whole warps: rows are per warp
    const int n = row % T + 1; // valid columns
    floatX* p = att + (size_t)row * T;
    float m = -INFINITY, s = 0.0f;
    for (int j0 = lane * V; j0 < n; j0 += 32 * V) {
        float x[V];
        attention_load<V>(p + j0, x);
#pragma unroll
        for (int e = 0; e < V; e++) {
            if (j0 + e >= n) break;
            if (x[e] > m) {
                s = attention_rescale(s, m, x[e]) + 1.0f;
                m = x[e];
            } else {
                s += expf(x[e] - m);
            }
        }
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) { // butterfly: every lane ends with the same bits
        float m2 = __shfl_xor_sync(0xffffffffu, m, off);
        float s2 = __shfl_xor_sync(0xffffffffu, s, off);
        float mn = fmaxf(m, m2);
        s = attention_rescale(s, m, mn) + attention_rescale(s2, m2, mn);
        m = mn;
    }
    const float inv = 1.0f / s;
    for (int j0 = lane * V; j0 < T; j0 += 32 * V) {
        float x[V];
        if (j0 < n) {
            attention_load<V>(p + j0, x);
#pragma unroll
            for (int e = 0; e < V; e++) x[e] = j0 + e < n ? expf(x[e] - m) * inv : 0.0f;
        } else {
#pragma unroll
            for (int e = 0; e < V; e++) x[e] = 0.0f;
        }
        attention_store<V>(p + j0, x);
    }
}

// datt (rows, T) in place: on entry d loss / d att, on exit d loss / d scores
// = att * (datt - sum_j att_j datt_j) on columns 0..t, zero after. One warp per row.
template <int V>
__global__ void attention_softmax_backward_kernel(floatX* datt, const floatX* att, int rows, int T) {
    const int row = (int)(((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32);
    const int lane = threadIdx.x % 32;
    if (row >= rows) return;
    const int n = row % T + 1;
    floatX* dp = datt + (size_t)row * T;
    const floatX* ap = att + (size_t)row * T;
    float dot = 0.0f;
    for (int j0 = lane * V; j0 < n; j0 += 32 * V) {
        float a[V], d[V];
        attention_load<V>(ap + j0, a);
        attention_load<V>(dp + j0, d);
#pragma unroll
        for (int e = 0; e < V; e++)
            if (j0 + e < n) dot += a[e] * d[e];
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);
    for (int j0 = lane * V; j0 < T; j0 += 32 * V) {
        float a[V], d[V];
        if (j0 < n) {
            attention_load<V>(ap + j0, a);
            attention_load<V>(dp + j0, d);
#pragma unroll
            for (int e = 0; e < V; e++) d[e] = j0 + e < n ? a[e] * (d[e] - dot) : 0.0f;
        } else {
#pragma unroll
            for (int e = 0; e < V; e++) d[e] = 0.0f;
        }
        attention_store<V>(dp + j0, d);
    }
}

// ----------------------------------------------------------------------------
// the steps (host); the lab times them one by one

template <bool kToHeads>
static inline void attention_permute_heads(floatX* out, const floatX* in, int B, int T, int K, int NH, int hs,
                                           cudaStream_t stream) {
    const size_t n = (size_t)K * B * NH * T * (hs / x128::size);
    launch(attention_permute_heads_kernel<kToHeads>, dim3((unsigned)CEIL_DIV(n, (size_t)ATTENTION_BLOCK)),
           dim3(ATTENTION_BLOCK), 0, stream, out, in, B, T, K, NH, hs);
}

// in (B, T, K, NH, hs) -> out (K, B, NH, T, hs)
static inline void attention_split_heads(floatX* out, const floatX* in, int B, int T, int K, int NH, int hs,
                                         cudaStream_t stream) {
    attention_permute_heads<true>(out, in, B, T, K, NH, hs, stream);
}

// in (K, B, NH, T, hs) -> out (B, T, K, NH, hs)
static inline void attention_merge_heads(floatX* out, const floatX* in, int B, int T, int K, int NH, int hs,
                                         cudaStream_t stream) {
    attention_permute_heads<false>(out, in, B, T, K, NH, hs, stream);
}

static inline void attention_softmax_forward(floatX* att, int rows, int T, cudaStream_t stream) {
    dim3 grid((unsigned)CEIL_DIV((size_t)rows * 32, (size_t)ATTENTION_BLOCK)), block(ATTENTION_BLOCK);
    if (T % x128::size == 0) launch(attention_softmax_forward_kernel<x128::size>, grid, block, 0, stream, att, rows, T);
    else launch(attention_softmax_forward_kernel<1>, grid, block, 0, stream, att, rows, T);
}

static inline void attention_softmax_backward(floatX* datt, const floatX* att, int rows, int T, cudaStream_t stream) {
    dim3 grid((unsigned)CEIL_DIV((size_t)rows * 32, (size_t)ATTENTION_BLOCK)), block(ATTENTION_BLOCK);
    if (T % x128::size == 0) {
        launch(attention_softmax_backward_kernel<x128::size>, grid, block, 0, stream, datt, att, rows, T);
    } else {
        launch(attention_softmax_backward_kernel<1>, grid, block, 0, stream, datt, att, rows, T);
    }
}

// Per (b, h): D (T, T or hs) = alpha * op(X) @ op(Y) over B*NH contiguous head matrices.
static inline GemmShape attention_head_gemm(int M, int N, int K, int trans_a, int trans_b, int BNH, float alpha) {
    GemmShape s = gemm_shape(M, N, K, trans_a, trans_b);
    s.batch = BNH;
    s.stride_a = (long long)M * K;
    s.stride_b = (long long)K * N;
    s.stride_d = (long long)M * N;
    s.alpha = alpha;
    return s;
}

static inline void attention_check(const char* fn, int B, int T, int C, int NH) {
    if (B <= 0 || T <= 0 || C <= 0 || NH <= 0) ls_fatal("%s: B=%d T=%d C=%d NH=%d (all > 0 expected)", fn, B, T, C, NH);
    if (C % NH != 0) ls_fatal("%s: C=%d is not a multiple of NH=%d", fn, C, NH);
    if ((C / NH) % 8 != 0) ls_fatal("%s: head size C/NH=%d must be a multiple of 8", fn, C / NH);
    if ((size_t)B * NH * T > (size_t)INT32_MAX / 32) ls_fatal("%s: B*NH*T=%zu rows is too many", fn, (size_t)B * NH * T);
    matmul_require_init(fn);
}

static inline void attention_check_aligned(const void* p, const char* fn, const char* name) {
    if (p == NULL) ls_fatal("%s: %s must not be NULL", fn, name);
    if (((uintptr_t)p & 15) != 0) ls_fatal("%s: %s = %p is not 16-byte aligned", fn, name, p);
}

// ----------------------------------------------------------------------------
// the launchers

// qkv (B,T,3C) -> out (B,T,C); qkvr (3,B,NH,T,hs) and att (B,NH,T,T) written for the backward pass.
static inline void attention_forward(floatX* out, floatX* qkvr, floatX* att, const floatX* qkv, int B, int T, int C,
                                     int NH, cudaStream_t stream) {
    PROFILE_SCOPE(PROF_ATTENTION, stream);
    static const char* fn = "attention_forward";
    attention_check(fn, B, T, C, NH);
    attention_check_aligned(out, fn, "out");
    attention_check_aligned(qkvr, fn, "qkvr");
    attention_check_aligned(att, fn, "att");
    attention_check_aligned(qkv, fn, "qkv");
    const int hs = C / NH, BNH = B * NH;
    const size_t BTC = (size_t)B * T * C;
    const floatX *q = qkvr, *k = qkvr + BTC, *v = qkvr + 2 * BTC;
    attention_split_heads(qkvr, qkv, B, T, 3, NH, hs, stream);
    // att = q @ k^T / sqrt(hs)
    GemmShape sc = attention_head_gemm(T, T, hs, 0, 1, BNH, 1.0f / sqrtf((float)hs));
    matmul_gemm(att, q, k, sc, GEMM_EPI_NONE, NULL, NULL, stream);
    attention_softmax_forward(att, BNH * T, T, stream);
    // out[b, t, h*hs + i] = sum_j att[b, h, t, j] v[b, h, j, i]: a call per head h, batched over b
    // (the D matrices of one call then lie in disjoint (T, C) slabs of out)
    GemmShape sv = attention_head_gemm(T, hs, T, 0, 0, B, 1.0f);
    sv.stride_a = (long long)NH * T * T;
    sv.stride_b = (long long)NH * T * hs;
    sv.ldd = C;
    sv.stride_d = (long long)T * C;
    sv.repeat = NH;
    sv.repeat_a = (long long)T * T;
    sv.repeat_b = (long long)T * hs;
    sv.repeat_d = hs;
    matmul_gemm(out, att, v, sv, GEMM_EPI_NONE, NULL, NULL, stream);
}

// Bytes of `scratch` attention_backward needs: none (dout's head-split copy lives in dqkvr's q slot
// until dq, computed last, overwrites it). Kept so that another backend can ask for memory.
static inline size_t attention_backward_scratch_bytes(int B, int T, int C, int NH) {
    (void)B, (void)T, (void)C, (void)NH;
    return 0;
}

// dout (B,T,C) -> dqkv (B,T,3C) (overwritten). qkvr and att as the forward pass left them;
// dqkvr (3,B,NH,T,hs) and datt (B,NH,T,T) are workspaces; scratch may be NULL.
static inline void attention_backward(floatX* dqkv, floatX* dqkvr, floatX* datt, floatX* scratch, const floatX* dout,
                                      const floatX* qkvr, const floatX* att, int B, int T, int C, int NH,
                                      cudaStream_t stream) {
    PROFILE_SCOPE(PROF_ATTENTION, stream);
    static const char* fn = "attention_backward";
    (void)scratch;
    attention_check(fn, B, T, C, NH);
    attention_check_aligned(dqkv, fn, "dqkv");
    attention_check_aligned(dqkvr, fn, "dqkvr");
    attention_check_aligned(datt, fn, "datt");
    attention_check_aligned(dout, fn, "dout");
    attention_check_aligned(qkvr, fn, "qkvr");
    attention_check_aligned(att, fn, "att");
    const int hs = C / NH, BNH = B * NH;
    const size_t BTC = (size_t)B * T * C;
    const float scale = 1.0f / sqrtf((float)hs);
    const floatX *q = qkvr, *k = qkvr + BTC, *v = qkvr + 2 * BTC;
    floatX *dq = dqkvr, *dk = dqkvr + BTC, *dv = dqkvr + 2 * BTC;
    floatX* dout_r = dq; // (B,NH,T,hs) until dq is written
    attention_split_heads(dout_r, dout, B, T, 1, NH, hs, stream);
    // datt = dout_r @ v^T; dv = att^T @ dout_r
    matmul_gemm(datt, dout_r, v, attention_head_gemm(T, T, hs, 0, 1, BNH, 1.0f), GEMM_EPI_NONE, NULL, NULL, stream);
    matmul_gemm(dv, att, dout_r, attention_head_gemm(T, hs, T, 1, 0, BNH, 1.0f), GEMM_EPI_NONE, NULL, NULL, stream);
    attention_softmax_backward(datt, att, BNH * T, T, stream);
    // dk = datt^T @ q * scale; then dq = datt @ k * scale (overwrites dout_r)
    matmul_gemm(dk, datt, q, attention_head_gemm(T, hs, T, 1, 0, BNH, scale), GEMM_EPI_NONE, NULL, NULL, stream);
    matmul_gemm(dq, datt, k, attention_head_gemm(T, hs, T, 0, 0, BNH, scale), GEMM_EPI_NONE, NULL, NULL, stream);
    attention_merge_heads(dqkv, dqkvr, B, T, 3, NH, hs, stream);
}

#endif // LLMC_ATTENTION_CUH

/*
 layernorm.cuh: LayerNorm on the GPU, forward (optionally fused with the residual add that
 precedes it in GPT-2) and backward; train_gpt2.c's layernorm_forward / layernorm_backward in
 floatX storage with fp32 arithmetic and fp32 statistics. eps = 1e-5.

   layernorm_forward                 out (N,C) = (inp - mean) * rstd * weight + bias
   fused_residual_layernorm_forward  residual = inp1 + inp2 (rounded to floatX), then
                                     normed = layernorm(residual): the statistics are those of the
                                     stored, rounded residual, which is what the backward pass sees
   layernorm_backward                dinp += , dweight += , dbias +=  (accumulating, as on the CPU);
                                     dweight = dbias = NULL: a frozen layernorm (BAdam), dinp only

 Forward: one warp per row. The warp reads its row once (16-byte loads), keeps it in shared memory
 (each lane reads back only the chunks it wrote: no synchronization), and computes the mean, then
 the variance as the mean of squared deviations (two passes over the cached row, not
 E[x^2] - mean^2), rstd = 1 / sqrtf(var + eps), and the output. Sums are warp xor-shuffle trees.
 mean and rstd (N) may be NULL (recomputation in the backward pass does not need them again).

 Backward: deterministic, no atomics. Block b owns a fixed range of rows (the number of blocks G
 and the range depend only on N); warp w of the block takes rows w, w+W, ... of the range: for each
 row it sums dnorm and dnorm*norm over the row (first pass), then writes dinp and adds norm*dout
 and dout into its own fp32 accumulators for dweight and dbias in shared memory (second pass; a
 lane owns its channels). The block then sums its warps' accumulators in warp order into
 scratch (G, 2, C); a second kernel sums the G partials in a fixed order and adds them to dweight
 and dbias (round to nearest). The warp count W depends only on C. dinp must not alias dout or inp.

 Preconditions (checked with ls_fatal): N, C > 0, C % x128::size == 0 (8 in bf16, 4 in fp32),
 pointers 16-byte aligned (mean/rstd: 4-byte), C small enough for 48 KB of shared memory per
 warp: forward C <= 24576 (bf16) / 12288 (fp32), backward C <= 6144.
 Scratch (device): layernorm_backward_scratch_bytes(N, C) = G(N) * 2 * C floats,
 G(N) = min(ceil(N / 16), 1024).
*/
#ifndef LLMC_LAYERNORM_CUH
#define LLMC_LAYERNORM_CUH

#include <stddef.h>
#include <stdint.h>
#include "llmc/cuda/cuda_common.h"
#include "llmc/cuda/cuda_precision.h"
#include "llmc/cuda/profile.cuh"

#define LAYERNORM_EPS 1e-5f
#define LAYERNORM_MAX_WARPS 8              // warps (rows) per block
#define LAYERNORM_SMEM_MAX (48 * 1024)     // dynamic shared memory without cudaFuncSetAttribute
#define LAYERNORM_BWD_MIN_ROWS 16          // rows per backward block, at least (up to the block cap)
#define LAYERNORM_BWD_MAX_BLOCKS 1024      // partial sums of dweight/dbias: at most this many
#define LAYERNORM_FINISH_BLOCK 256         // 32 columns x 8 row groups

// ----------------------------------------------------------------------------
// kernels

static __device__ __forceinline__ float layernorm_warp_sum(float x) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x; // the same bits in every lane (each step adds the same pair)
}

// One warp per row. kResidual: the row is inp1 + inp2 (stored to residual) instead of inp1.
// Dynamic shared memory: (warps, C) floatX, the rows being normalized.
template <bool kResidual>
static __global__ void __launch_bounds__(32 * LAYERNORM_MAX_WARPS)
layernorm_forward_kernel(floatX* __restrict__ residual, floatX* __restrict__ out,
                         float* __restrict__ mean, float* __restrict__ rstd,
                         const floatX* __restrict__ inp1, const floatX* __restrict__ inp2,
                         const floatX* __restrict__ weight, const floatX* __restrict__ bias,
                         int N, int C) {
    constexpr int X = x128::size;
    DYNAMIC_SHARED(floatX, rows);
    const int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int row = blockIdx.x * warps + warp;
    if (row >= N) return; // the whole warp
    floatX* x = rows + (size_t)warp * C;
    const size_t off = (size_t)row * C;

    float sum = 0.0f;
    for (int c = lane * X; c < C; c += 32 * X) {
        x128 v;
        if constexpr (kResidual) {
            const x128 a = load128cs(inp1 + off + c), b = load128cs(inp2 + off + c);
#pragma unroll
            for (int k = 0; k < X; k++) v[k] = from_float(to_float(a[k]) + to_float(b[k]));
            store128(residual + off + c, v);
        } else {
            v = load128cs(inp1 + off + c);
        }
        store128(x + c, v);
#pragma unroll
        for (int k = 0; k < X; k++) sum += to_float(v[k]);
    }
    const float m = layernorm_warp_sum(sum) / (float)C;

    float var = 0.0f;
    for (int c = lane * X; c < C; c += 32 * X) {
        const x128 v = load128(x + c);
#pragma unroll
        for (int k = 0; k < X; k++) {
            const float d = to_float(v[k]) - m;
            var += d * d;
        }
    }
    const float s = 1.0f / sqrtf(layernorm_warp_sum(var) / (float)C + LAYERNORM_EPS);

    for (int c = lane * X; c < C; c += 32 * X) {
        const x128 v = load128(x + c), w = load128(weight + c), b = load128(bias + c);
        x128 o;
#pragma unroll
        for (int k = 0; k < X; k++) o[k] = from_float((to_float(v[k]) - m) * s * to_float(w[k]) + to_float(b[k]));
        store128(out + off + c, o);
    }
    if (lane == 0) {
        if (mean != nullptr) mean[row] = m;
        if (rstd != nullptr) rstd[row] = s;
    }
}

// dinp += of the block's rows [blockIdx.x * rows_per_block, ... + rows_per_block) ∩ [0, N), and with
// kParamGrads partials[blockIdx.x] = (sum over those rows of norm*dout, of dout), each (C).
// Dynamic shared memory (kParamGrads): (warps, 2, C) floats, each warp's dweight and dbias sums.
// Without kParamGrads (frozen weight and bias) dinp gets exactly the same values.
template <bool kParamGrads>
static __global__ void __launch_bounds__(32 * LAYERNORM_MAX_WARPS, 4) // 4 blocks of 48 KB per SM
layernorm_backward_kernel(floatX* __restrict__ dinp, float* __restrict__ partials,
                          const floatX* __restrict__ dout, const floatX* __restrict__ inp,
                          const floatX* __restrict__ weight, const float* __restrict__ mean,
                          const float* __restrict__ rstd, int N, int C, int rows_per_block) {
    constexpr int X = x128::size;
    DYNAMIC_SHARED(float, acc);
    const int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    float* acc_w = acc + (size_t)warp * 2 * C;
    float* acc_b = acc_w + C;
    if (kParamGrads) {
        for (int c = lane * X; c < C; c += 32 * X) {
#pragma unroll
            for (int k = 0; k < X; k++) acc_w[c + k] = acc_b[c + k] = 0.0f;
        }
    }
    const int r0 = blockIdx.x * rows_per_block;
    const int r1 = r0 + rows_per_block < N ? r0 + rows_per_block : N;
    for (int row = r0 + warp; row < r1; row += warps) {
        const size_t off = (size_t)row * C;
        const float m = mean[row], s = rstd[row];
        float sum_dn = 0.0f, sum_dn_norm = 0.0f;
        for (int c = lane * X; c < C; c += 32 * X) {
            const x128 d = load128(dout + off + c), x = load128(inp + off + c), w = load128(weight + c);
#pragma unroll
            for (int k = 0; k < X; k++) {
                const float norm = (to_float(x[k]) - m) * s, dn = to_float(w[k]) * to_float(d[k]);
                sum_dn += dn;
                sum_dn_norm += dn * norm;
            }
        }
        const float mean_dn = layernorm_warp_sum(sum_dn) / (float)C;
        const float mean_dn_norm = layernorm_warp_sum(sum_dn_norm) / (float)C;
        for (int c = lane * X; c < C; c += 32 * X) {
            const x128 d = load128cs(dout + off + c), x = load128cs(inp + off + c), w = load128(weight + c);
            x128 g = load128(dinp + off + c);
#pragma unroll
            for (int k = 0; k < X; k++) {
                const float dk = to_float(d[k]), norm = (to_float(x[k]) - m) * s, dn = to_float(w[k]) * dk;
                g[k] = from_float(to_float(g[k]) + (dn - mean_dn - norm * mean_dn_norm) * s);
                if (kParamGrads) {
                    acc_w[c + k] += norm * dk;
                    acc_b[c + k] += dk;
                }
            }
            store128(dinp + off + c, g);
        }
    }
    if (!kParamGrads) return;
    __syncthreads();
    float* part = partials + (size_t)blockIdx.x * 2 * C;
    for (int i = threadIdx.x; i < 2 * C; i += blockDim.x) {
        float t = acc[i];
        for (int v = 1; v < warps; v++) t += acc[(size_t)v * 2 * C + i];
        part[i] = t;
    }
}

// dweight (C) += sum over g of partials[g][0], dbias (C) += sum over g of partials[g][1], in a
// fixed order: thread (column j, group y) sums g = y, y+8, ...; then the 8 group sums in order.
static __global__ void __launch_bounds__(LAYERNORM_FINISH_BLOCK)
layernorm_backward_finish_kernel(floatX* __restrict__ dweight, floatX* __restrict__ dbias,
                                 const float* __restrict__ partials, int nparts, int C) {
    constexpr int GROUPS = LAYERNORM_FINISH_BLOCK / 32;
    __shared__ float group_sums[GROUPS][32];
    const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
    const int j = blockIdx.x * 32 + tx; // column of (2, C)
    float s = 0.0f;
    if (j < 2 * C) {
        for (int g = ty; g < nparts; g += GROUPS) s += partials[(size_t)g * 2 * C + j];
    }
    group_sums[ty][tx] = s;
    __syncthreads();
    if (ty == 0 && j < 2 * C) {
        float t = group_sums[0][tx];
#pragma unroll
        for (int y = 1; y < GROUPS; y++) t += group_sums[y][tx];
        floatX* dst = j < C ? dweight + j : dbias + (j - C);
        *dst = from_float(to_float(*dst) + t);
    }
}

// ----------------------------------------------------------------------------
// host side

static inline void layernorm_check_aligned(const char* what, const void* p, const char* name) {
    if (p == nullptr || ((uintptr_t)p & 15u) != 0) ls_fatal("%s: %s (%p) is NULL or not 16-byte aligned", what, name, p);
}

static inline void layernorm_check_shape(const char* what, int N, int C) {
    if (N <= 0 || C <= 0) ls_fatal("%s: N=%d C=%d (positive expected)", what, N, C);
    if (C % x128::size != 0) {
        ls_fatal("%s: C=%d is not a multiple of %d (16-byte vectors of %s)", what, C, x128::size, PRECISION_NAME);
    }
}

// Warps per block: `bytes_per_warp` of shared memory each, within 48 KB; 0 if C is too large.
static inline int layernorm_warps(size_t bytes_per_warp) {
    size_t w = LAYERNORM_SMEM_MAX / bytes_per_warp;
    return (int)(w < LAYERNORM_MAX_WARPS ? w : LAYERNORM_MAX_WARPS);
}

template <bool kResidual>
static inline void layernorm_forward_launch(const char* what, floatX* residual, floatX* out, float* mean, float* rstd,
                                            const floatX* inp1, const floatX* inp2, const floatX* weight,
                                            const floatX* bias, int N, int C, cudaStream_t stream) {
    layernorm_check_shape(what, N, C);
    layernorm_check_aligned(what, out, "out");
    layernorm_check_aligned(what, inp1, kResidual ? "inp1" : "inp");
    layernorm_check_aligned(what, weight, "weight");
    layernorm_check_aligned(what, bias, "bias");
    if (kResidual) {
        layernorm_check_aligned(what, residual, "residual");
        layernorm_check_aligned(what, inp2, "inp2");
    }
    const size_t row_bytes = (size_t)C * sizeof(floatX);
    const int warps = layernorm_warps(row_bytes);
    if (warps < 1) ls_fatal("%s: C=%d: a row does not fit in 48 KB of shared memory", what, C);
    launch(layernorm_forward_kernel<kResidual>, (unsigned)CEIL_DIV(N, warps), (unsigned)(32 * warps),
           (size_t)warps * row_bytes, stream, residual, out, mean, rstd, inp1, inp2, weight, bias, N, C);
}

// out (N,C) = layernorm(inp) * weight + bias; mean, rstd (N) fp32 (each may be NULL).
static inline void layernorm_forward(floatX* out, float* mean, float* rstd, const floatX* inp, const floatX* weight,
                                     const floatX* bias, int N, int C, cudaStream_t stream) {
    PROFILE_SCOPE(PROF_LAYERNORM, stream);
    layernorm_forward_launch<false>("layernorm_forward", nullptr, out, mean, rstd, inp, nullptr, weight, bias, N, C,
                                    stream);
}

// residual (N,C) = inp1 + inp2; normed (N,C) = layernorm(residual) * weight + bias; mean, rstd (N)
// (each may be NULL). residual may alias neither input.
static inline void fused_residual_layernorm_forward(floatX* residual, floatX* normed, float* mean, float* rstd,
                                                    const floatX* inp1, const floatX* inp2, const floatX* weight,
                                                    const floatX* bias, int N, int C, cudaStream_t stream) {
    PROFILE_SCOPE(PROF_LAYERNORM, stream);
    layernorm_forward_launch<true>("fused_residual_layernorm_forward", residual, normed, mean, rstd, inp1, inp2,
                                   weight, bias, N, C, stream);
}

// Blocks of the backward pass (= partial sums): a function of N only.
static inline int layernorm_backward_blocks(int N) {
    int g = CEIL_DIV(N, LAYERNORM_BWD_MIN_ROWS);
    return g < LAYERNORM_BWD_MAX_BLOCKS ? g : LAYERNORM_BWD_MAX_BLOCKS;
}

// Bytes of device scratch layernorm_backward needs (16-byte multiple).
static inline size_t layernorm_backward_scratch_bytes(int N, int C) {
    return (size_t)layernorm_backward_blocks(N) * 2 * (size_t)C * sizeof(float);
}

// dinp (N,C) += d inp; dweight, dbias (C) += d weight, d bias. dout, inp (N,C); mean, rstd (N)
// from the forward pass. scratch: layernorm_backward_scratch_bytes(N, C) bytes. dweight and dbias
// both NULL: a frozen layernorm, dinp only (the same values); scratch is then not used.
static inline void layernorm_backward(floatX* dinp, floatX* dweight, floatX* dbias, float* scratch, const floatX* dout,
                                      const floatX* inp, const floatX* weight, const float* mean, const float* rstd, int N,
                                      int C, cudaStream_t stream) {
    PROFILE_SCOPE(PROF_LAYERNORM, stream);
    static const char* what = "layernorm_backward";
    layernorm_check_shape(what, N, C);
    layernorm_check_aligned(what, dinp, "dinp");
    const bool param_grads = dweight != nullptr || dbias != nullptr;
    if (param_grads) {  // both or neither
        layernorm_check_aligned(what, dweight, "dweight");
        layernorm_check_aligned(what, dbias, "dbias");
        layernorm_check_aligned(what, scratch, "scratch");
    }
    layernorm_check_aligned(what, dout, "dout");
    layernorm_check_aligned(what, inp, "inp");
    layernorm_check_aligned(what, weight, "weight");
    if (mean == nullptr || rstd == nullptr) ls_fatal("%s: mean or rstd is NULL", what);
    if (dinp == dout || dinp == inp) ls_fatal("%s: dinp aliases dout or inp", what);
    const int warps = layernorm_warps(2 * (size_t)C * sizeof(float));
    if (warps < 1) ls_fatal("%s: C=%d: the per-warp sums do not fit in 48 KB of shared memory", what, C);
    const int blocks = layernorm_backward_blocks(N);
    const int rows_per_block = CEIL_DIV(N, blocks);
    if (!param_grads) {
        launch(layernorm_backward_kernel<false>, (unsigned)blocks, (unsigned)(32 * warps), 0, stream, dinp, nullptr,
               dout, inp, weight, mean, rstd, N, C, rows_per_block);
        return;
    }
    launch(layernorm_backward_kernel<true>, (unsigned)blocks, (unsigned)(32 * warps), (size_t)warps * 2 * C * sizeof(float),
           stream, dinp, scratch, dout, inp, weight, mean, rstd, N, C, rows_per_block);
    launch(layernorm_backward_finish_kernel, (unsigned)CEIL_DIV(2 * C, 32), LAYERNORM_FINISH_BLOCK, 0, stream,
           dweight, dbias, scratch, blocks, C);
}

#endif // LLMC_LAYERNORM_CUH

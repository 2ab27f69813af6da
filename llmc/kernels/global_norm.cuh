/*
 global_norm.cuh: the gradient's global L2 norm and the clip scale AdamW multiplies gradients by.

 Deterministic: a fixed-order two-pass reduction, no floating-point atomics. The number of
 partial sums depends only on n (never on the device), each thread accumulates its grid-stride
 chunks in order with fmaf, blocks reduce in a fixed tree (warp xor-shuffles, then one warp over
 the warp sums), and one block sums the partials in order. Same input -> same bits, on any GPU
 and under the CPU harness (explicit fmaf: no contraction differences between nvcc and g++).

 Use (all on `stream`, no host synchronization):
   global_norm_squared(d_sumsq, grads, n, d_scratch, stream);   // d_scratch: GLOBAL_NORM_MAX_BLOCKS floats
   // multi-GPU: all-reduce *d_sumsq here
   global_norm_clip_scale(d_scale, d_norm, d_sumsq, max_norm, stream);
   optim_step_gpu(..., d_scale, stream);                        // llmc/optim/engine.cuh
 max_norm <= 0 turns clipping off (scale 1), as grad_clip = 0 in llmc/optim/optim.h. A non-finite norm
 gives scale 1: check the norm (it is also written to d_norm) before trusting the step.
*/
#ifndef LLMC_GLOBAL_NORM_CUH
#define LLMC_GLOBAL_NORM_CUH

#include <math.h>
#include <stddef.h>
#include "llmc/cuda/cuda_common.h"
#include "llmc/cuda/profile.cuh"

#define GLOBAL_NORM_BLOCK 512
#define GLOBAL_NORM_MAX_BLOCKS 1024

// Sum over the block of one value per thread, fixed order; the result is valid in thread 0.
__device__ __forceinline__ float global_norm_block_sum(float x) {
    __shared__ float warp_sums[32];
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    if (lane == 0) warp_sums[warp] = x;
    __syncthreads();
    x = 0.0f;
    if (warp == 0) {
        x = lane < nwarps ? warp_sums[lane] : 0.0f;
        for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    }
    return x;
}

// partials[blockIdx.x] = sum of squares of this block's grid-stride chunks (and of the tail).
template <typename Tg>
__global__ void __launch_bounds__(GLOBAL_NORM_BLOCK)
global_norm_partials_kernel(float* __restrict__ partials, const Tg* __restrict__ grads, size_t n) {
    constexpr int E = Vec128<Tg>::size;
    const size_t nchunks = n / E;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    float acc = 0.0f;
    for (size_t c = tid; c < nchunks; c += stride) {
        LS_BRANCH("global_norm.vector");
        Vec128<Tg> x = load128cs(grads + c * E);
#pragma unroll
        for (int e = 0; e < E; e++) {
            float f = (float)x[e];
            acc = fmaf(f, f, acc);
        }
    }
    if (tid < n - nchunks * E) {
        LS_BRANCH("global_norm.tail");
        float f = (float)grads[nchunks * E + tid];
        acc = fmaf(f, f, acc);
    }
    float s = global_norm_block_sum(acc);
    if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

// *out = sum of partials[0..nparts), one block, fixed order.
__global__ void __launch_bounds__(GLOBAL_NORM_BLOCK)
global_norm_finish_kernel(float* __restrict__ out, const float* __restrict__ partials, int nparts) {
    float acc = 0.0f;
    for (int i = threadIdx.x; i < nparts; i += blockDim.x) acc += partials[i];
    float s = global_norm_block_sum(acc);
    if (threadIdx.x == 0) *out = s;
}

// *scale = (max_norm > 0 && norm > max_norm) ? max_norm / norm : 1 (clip_scale_of in llmc/optim/optim.h),
// with norm = sqrt(*sumsq), also stored to *norm_out.
__global__ void global_norm_clip_scale_kernel(float* __restrict__ scale, float* __restrict__ norm_out,
                                              const float* __restrict__ sumsq, float max_norm, float inv_loss_scale) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    float norm = sqrtf(*sumsq) * inv_loss_scale;
    if (norm_out != nullptr) *norm_out = norm;
    *scale = ((max_norm > 0.0f && norm > max_norm) ? max_norm / norm : 1.0f) * inv_loss_scale;
}

// Number of partial sums for n elements (a function of n only: keeps the result device-independent).
static inline int global_norm_num_blocks(size_t n, size_t elems_per_chunk) {
    size_t chunks = n / elems_per_chunk;
    size_t b = CEIL_DIV(chunks, (size_t)GLOBAL_NORM_BLOCK);
    if (b < 1) b = 1;
    return (int)(b < GLOBAL_NORM_MAX_BLOCKS ? b : GLOBAL_NORM_MAX_BLOCKS);
}

// *d_sumsq = sum of grads[i]^2 over [0, n). grads 16-byte aligned; d_scratch holds
// GLOBAL_NORM_MAX_BLOCKS floats.
template <typename Tg>
void global_norm_squared(float* d_sumsq, const Tg* grads, size_t n, float* d_scratch, cudaStream_t stream) {
    PROFILE_SCOPE(PROF_GLOBAL_NORM, stream);
    if (((uintptr_t)grads & 15u) != 0) ls_fatal("global_norm: grads (%p) not 16-byte aligned", (const void*)grads);
    int nb = global_norm_num_blocks(n, (size_t)Vec128<Tg>::size);
    launch(global_norm_partials_kernel<Tg>, nb, GLOBAL_NORM_BLOCK, 0, stream, d_scratch, grads, n);
    launch(global_norm_finish_kernel, 1, GLOBAL_NORM_BLOCK, 0, stream, d_sumsq, d_scratch, nb);
}

// d_norm may be NULL. max_norm <= 0: no clipping. inv_loss_scale: loss scaling's 1/S (llmc/run/
// loss_scale.h), divided out of the norm and folded into the scale the update multiplies by.
static inline void global_norm_clip_scale(float* d_scale, float* d_norm, const float* d_sumsq, float max_norm,
                                          cudaStream_t stream, float inv_loss_scale = 1.0f) {
    PROFILE_SCOPE(PROF_GLOBAL_NORM, stream);
    launch(global_norm_clip_scale_kernel, 1, 1, 0, stream, d_scale, d_norm, d_sumsq, max_norm, inv_loss_scale);
}

#endif // LLMC_GLOBAL_NORM_CUH

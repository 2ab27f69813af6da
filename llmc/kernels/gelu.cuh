/*
 gelu.cuh: GELU, tanh approximation (as train_gpt2.c), on the GPU, elementwise over n values:

   gelu_forward           out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
   gelu_backward_inplace  d = d * gelu'(x)   (d: on entry d out, on exit d inp)

 One thread per 16-byte chunk (x128), fp32 arithmetic with tanhf (correctly rounded to within an
 ulp or two on both builds; the CPU trainer's vtanhf agrees to a few ulps), results rounded to
 nearest. Any n: the n % x128::size tail is handled element by element by one extra thread.
 Preconditions (checked with ls_fatal): pointers 16-byte aligned; out may alias inp (each thread
 reads its chunk before writing it).
*/
#ifndef LLMC_GELU_CUH
#define LLMC_GELU_CUH

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include "llmc/cuda/cuda_common.h"
#include "llmc/cuda/cuda_precision.h"
#include "llmc/cuda/profile.cuh"

#define GELU_BLOCK 512

static __host__ __device__ __forceinline__ float gelu_tanh_arg(float x) {
    const float sqrt_2_over_pi = 0.7978845608028654f;
    return sqrt_2_over_pi * (x + 0.044715f * x * x * x);
}

static __device__ __forceinline__ float gelu_value(float x) {
    return 0.5f * x * (1.0f + tanhf(gelu_tanh_arg(x)));
}

// d gelu(x) / dx
static __device__ __forceinline__ float gelu_derivative(float x) {
    const float sqrt_2_over_pi = 0.7978845608028654f;
    const float th = tanhf(gelu_tanh_arg(x));
    const float sech2 = 1.0f - th * th;
    return 0.5f * (1.0f + th) + 0.5f * x * sech2 * sqrt_2_over_pi * (1.0f + 3.0f * 0.044715f * x * x);
}

// Thread i < nchunks: chunk i; thread nchunks: the tail elements [nchunks * X, n).
template <bool kBackward>
static __global__ void __launch_bounds__(GELU_BLOCK)
gelu_kernel(floatX* out, const floatX* inp, size_t n, size_t nchunks) { // out may alias inp: no __restrict__
    constexpr int X = x128::size;
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < nchunks) {
        LS_BRANCH("gelu.vector");
        const x128 x = load128cs(inp + i * X);
        x128 o;
        if constexpr (kBackward) {
            const x128 d = load128(out + i * X);
#pragma unroll
            for (int k = 0; k < X; k++) o[k] = from_float(to_float(d[k]) * gelu_derivative(to_float(x[k])));
        } else {
#pragma unroll
            for (int k = 0; k < X; k++) o[k] = from_float(gelu_value(to_float(x[k])));
        }
        store128(out + i * X, o);
    } else if (i == nchunks) {
        LS_BRANCH("gelu.tail");
        for (size_t j = nchunks * X; j < n; j++) {
            const float x = to_float(inp[j]);
            out[j] = kBackward ? from_float(to_float(out[j]) * gelu_derivative(x)) : from_float(gelu_value(x));
        }
    }
}

template <bool kBackward>
static inline void gelu_launch(const char* what, floatX* out, const floatX* inp, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    if (out == nullptr || inp == nullptr || (((uintptr_t)out | (uintptr_t)inp) & 15u) != 0) {
        ls_fatal("%s: out (%p) or inp (%p) is NULL or not 16-byte aligned", what, (void*)out, (const void*)inp);
    }
    const size_t nchunks = n / x128::size;
    const size_t threads = nchunks + (n % x128::size != 0 ? 1 : 0);
    const size_t blocks = CEIL_DIV(threads, (size_t)GELU_BLOCK);
    if (blocks > 0x7fffffffu) ls_fatal("%s: n=%zu is too large for one launch", what, n);
    launch(gelu_kernel<kBackward>, (unsigned)blocks, GELU_BLOCK, 0, stream, out, inp, n, nchunks);
}

// out (n) = gelu(inp (n)).
static inline void gelu_forward(floatX* out, const floatX* inp, size_t n, cudaStream_t stream) {
    PROFILE_SCOPE(PROF_GELU, stream);
    gelu_launch<false>("gelu_forward", out, inp, n, stream);
}

// d_in_out (n): on entry d out, on exit d inp = d out * gelu'(inp). inp (n) the forward input.
static inline void gelu_backward_inplace(floatX* d_in_out, const floatX* inp, size_t n, cudaStream_t stream) {
    PROFILE_SCOPE(PROF_GELU, stream);
    gelu_launch<true>("gelu_backward_inplace", d_in_out, inp, n, stream);
}

#endif // LLMC_GELU_CUH

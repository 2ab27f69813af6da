/*
 cuda_precision.h: the storage type of parameters, activations and gradients in the GPU trainer
 and its kernels, chosen at build time (llm.c's PRECISION=BF16|FP32):

   -DENABLE_BF16 (the default; also when none is defined)     floatX = __nv_bfloat16
   -DENABLE_FP16 (GPUs without bf16: V100, T4; loss scaling)  floatX = __half
   -DENABLE_FP32                                               floatX = float

 Arithmetic is always fp32: load floatX, convert with to_float(), compute in float, convert back
 with from_float() (round to nearest even) or from_float_stochastic() (unbiased rounding for
 accumulations into bf16, e.g. gradients). Statistics (means, variances, softmax sums, losses) stay
 float in both builds. The helpers are __host__ __device__ and work in both builds (nvcc, and g++
 under the CPU harness, where <cuda_bf16.h> supplies the host-side conversions).

   floatX           the storage type
   x128             Vec128<floatX>: 16 bytes, x128::size = 8 (bf16) or 4 (fp32) elements; kernels
                    that move rows with x128 need the row length to be a multiple of x128::size
   f128             Vec128<float>
   PRECISION_NAME   "bf16", "fp16" or "fp32" (for banners and file headers)
   FLOATX_IS_BF16   1 or 0, for `if constexpr` and host code
   FLOATX_IS_FP16   1 or 0
   FLOATX_IS_LOWP   1 for the 16-bit types (master weights, stochastic rounding), 0 for fp32
*/
#ifndef LLMC_CUDA_PRECISION_H
#define LLMC_CUDA_PRECISION_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "llmc/cuda/cuda_common.h"

#if defined(ENABLE_BF16) + defined(ENABLE_FP32) + defined(ENABLE_FP16) > 1
#error "define one of ENABLE_BF16, ENABLE_FP16 and ENABLE_FP32 (PRECISION=BF16|FP16|FP32)"
#endif
#if !defined(ENABLE_BF16) && !defined(ENABLE_FP32) && !defined(ENABLE_FP16)
#define ENABLE_BF16
#endif

#if defined(ENABLE_FP32)
typedef float floatX;
#define PRECISION_NAME "fp32"
#define FLOATX_IS_BF16 0
#define FLOATX_IS_FP16 0
#elif defined(ENABLE_FP16)
#include <cuda_fp16.h>
typedef __half floatX;
#define PRECISION_NAME "fp16"
#define FLOATX_IS_BF16 0
#define FLOATX_IS_FP16 1
#else
typedef __nv_bfloat16 floatX;
#define PRECISION_NAME "bf16"
#define FLOATX_IS_BF16 1
#define FLOATX_IS_FP16 0
#endif
#define FLOATX_IS_LOWP (FLOATX_IS_BF16 || FLOATX_IS_FP16)

typedef Vec128<floatX> x128;
typedef Vec128<float> f128;

// floatX -> float (exact).
static __host__ __device__ inline float to_float(floatX x) {
#if defined(ENABLE_FP32)
    return x;
#elif defined(ENABLE_FP16)
    return __half2float(x);
#else
    return __bfloat162float(x);
#endif
}

// float -> floatX, round to nearest even (exact in fp32 builds).
static __host__ __device__ inline floatX from_float(float x) {
#if defined(ENABLE_FP32)
    return x;
#elif defined(ENABLE_FP16)
    return __float2half_rn(x);
#else
    return __float2bfloat16_rn(x);
#endif
}

// 32 random bits for element `i` of the stream `seed`: a stateless hash (splitmix64 finalizer), so a
// result depends only on (seed, i), never on the thread that computes it.
static __host__ __device__ inline unsigned stochastic_bits(unsigned long long seed, size_t i) {
    unsigned long long x = seed * 0x9e3779b97f4a7c15ULL ^ ((unsigned long long)i + 1) * 0xd1b54a32d192ed03ULL;
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return (unsigned)(x >> 32);
}

// float -> floatX, rounding away from zero with probability equal to the discarded fraction
// (unbiased: E[result] = x), using the low 16 of `bits`; infinities and NaNs convert as they are.
// Exact in fp32 builds. Accumulations into bf16 (gradients) use this, so that many small additions
// do not all round away.
static __host__ __device__ inline floatX from_float_stochastic(float x, unsigned bits) {
#if defined(ENABLE_FP32)
    (void)bits;
    return x;
#elif defined(ENABLE_FP16)
    // between the two fp16 neighbours lo <= x < hi (round toward zero, then one ulp away): hi with
    // probability (x - lo) / (hi - lo), from the low 16 bits
    if (!isfinite(x)) return __float2half_rn(x);
    const __half t = __float2half_rz(x);
    const float lo = __half2float(t);
    if (lo == x) return t;
    __half_raw r = t;
    r.x = (unsigned short)(r.x + 1);  // one ulp away from zero (to the infinity past the largest)
    const __half away(r);
    const float hi = __half2float(away);
    const float frac = (x - lo) / (hi - lo);
    return (float)(bits & 0xffffu) < frac * 65536.0f ? away : t;
#else
    unsigned u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7f800000u) == 0x7f800000u) return __float2bfloat16_rn(x);
    u += bits & 0xffffu; // carries into the kept half with probability (low 16 bits) / 2^16
    __nv_bfloat16_raw r;
    r.x = (unsigned short)(u >> 16);
    return __nv_bfloat16(r);
#endif
}

// ----------------------------------------------------------------------------
// The oldest GPU a build runs on. bf16 needs Ampere (sm_80: bf16 tensor cores and intrinsics); fp16
// and fp32 run on whatever the toolkit still compiles for: CUDA 13 dropped Volta (sm_70), so its
// oldest is Turing (sm_75), CUDA 12's is sm_70. (The CPU harness reports CUDART_VERSION 13000.)
#if defined(CUDART_VERSION) && CUDART_VERSION < 13000
#define CUDA_TOOLKIT_MIN_SM 70
#else
#define CUDA_TOOLKIT_MIN_SM 75
#endif
#define PRECISION_MIN_SM (FLOATX_IS_BF16 ? 80 : CUDA_TOOLKIT_MIN_SM)

// Exits with one line when `device` is older than this build's PRECISION_MIN_SM, naming its compute
// capability and the build that would run on it.
static inline void cuda_check_device_arch(int device) {
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, device));
    const int sm = prop.major * 10 + prop.minor;
    if (sm >= PRECISION_MIN_SM) { return; }
    if (sm < CUDA_TOOLKIT_MIN_SM) {
        ls_fatal("GPU %d (%s) has compute capability %d.%d; this CUDA %d build runs on %d.%d or newer%s; train on the "
                 "CPU with `make train`", device, prop.name, prop.major, prop.minor, CUDART_VERSION / 1000,
                 CUDA_TOOLKIT_MIN_SM / 10, CUDA_TOOLKIT_MIN_SM % 10,
                 sm >= 70 ? " (Volta: build PRECISION=FP16 with CUDA 12, whose nvcc still targets sm_70)" : "");
    }
    ls_fatal("GPU %d (%s) has compute capability %d.%d; the %s build needs %d.%d or newer (bf16 tensor cores): build "
             "PRECISION=FP16 (fp16 with loss scaling) for this GPU", device, prop.name, prop.major, prop.minor,
             PRECISION_NAME, PRECISION_MIN_SM / 10, PRECISION_MIN_SM % 10);
}

#endif // LLMC_CUDA_PRECISION_H

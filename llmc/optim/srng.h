/*
 srng.h: the random bits of stochastic rounding, and bf16 rounding on raw bits, in one header that
 plain C (the CPU update, llmc/optim/update.h), nvcc and the CPU harness (the GPU kernels,
 llmc/optim/update.cuh, llmc/optim/device.cuh) all compile, so a CPU update and a GPU kernel that
 round the same value draw the same bits and give the same result.

 Counter-based: the bits of element i in stream `salt` of a step are a hash of (key, i, salt), with
 key = srng_step_key(seed, step). No state, no order: any thread may round any element. Streams in
 use (one per rounded quantity, so they are independent): 0 bf16 parameters, 1 first moment m
 (SGD's momentum buffer, Lion's m), 2 second moment v, 3 AMSGrad's vmax.

 Stochastic rounding to bf16 adds 16 random bits below the kept 16 and truncates: x rounds up (in
 magnitude) with probability equal to the discarded fraction, so E[round(x)] = x. Infinities and
 NaNs convert as round-to-nearest-even does (NaN -> 0x7fff, CUDA's canonical bf16 NaN). fp16 (the
 fp16 optimizer state) the same way on its 10-bit significand, saturating at 65504.
*/
#ifndef LLMC_SRNG_H
#define LLMC_SRNG_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define SRNG_FN __host__ __device__ __forceinline__
#else
#define SRNG_FN static inline
#endif

// splitmix64's finalizer: a bijection of 64-bit words with good avalanche.
SRNG_FN unsigned long long srng_mix64(unsigned long long x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

// The key of one optimizer step (step = 1, 2, ...) of a run seeded with `seed`.
SRNG_FN unsigned long long srng_step_key(unsigned long long seed, int step) {
    return srng_mix64(seed * 0x9e3779b97f4a7c15ULL + (unsigned long long)step);
}

// 32 random bits for element i of stream `salt` (0..63) of the step with this key.
SRNG_FN unsigned srng_bits(unsigned long long key, size_t i, unsigned salt) {
    unsigned long long x = key ^ ((unsigned long long)i * 0x9e3779b97f4a7c15ULL) ^ ((unsigned long long)salt << 58);
    return (unsigned)(srng_mix64(x) >> 32);
}

// ----------------------------------------------------------------------------
// bf16 as raw 16-bit patterns (the CPU side; the GPU side uses __nv_bfloat16 with the same rules)

SRNG_FN float bf16_bits_to_float(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

// Round to nearest even (__float2bfloat16_rn).
SRNG_FN uint16_t bf16_bits_round_nearest(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)0x7fffu; // NaN
    uint32_t rem = u << 16, r = u >> 16;
    if (rem > 0x80000000u || (rem == 0x80000000u && (r & 1u))) r++;
    return (uint16_t)r;
}

// Stochastic rounding with 32 random bits (the low 16 are used): bf16_round_stochastic of
// llmc/optim/device.cuh, on bits.
SRNG_FN uint16_t bf16_bits_round_stochastic(float x, unsigned bits) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
#if defined(__CUDA_ARCH__)  // a branch on the device (fewer registers)
    if ((u & 0x7f800000u) == 0x7f800000u) return (u & 0x7fffffffu) > 0x7f800000u ? (uint16_t)0x7fffu : (uint16_t)(u >> 16);
    return (uint16_t)((u + (bits & 0xffffu)) >> 16);
#else  // selects on the host: the CPU loops that call this vectorize
    const uint32_t nonfinite = (u & 0x7fffffffu) > 0x7f800000u ? 0x7fffu : u >> 16;  // NaN; +-inf kept
    const uint32_t rounded = (u + (bits & 0xffffu)) >> 16;
    return (uint16_t)((u & 0x7f800000u) == 0x7f800000u ? nonfinite : rounded);
#endif
}

// ----------------------------------------------------------------------------
// fp16 as raw 16-bit patterns (1 sign, 5 exponent bits biased by 15, 10 stored significand bits;
// subnormals below 2^-14 in steps of 2^-24), for the fp16 optimizer state: the same functions in C,
// nvcc and the harness, so the CPU and the GPU store the same bits.

SRNG_FN float fp16_bits_to_float(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, f = h & 0x3ffu;
    uint32_t u;
    if (e == 0) {  // zero or subnormal: f * 2^-24, exact in fp32
        float x = (float)f * 5.9604644775390625e-8f;
        memcpy(&u, &x, sizeof u);
        u |= sign;
    } else if (e == 31) {
        u = sign | 0x7f800000u | (f << 13);  // inf, NaN
    } else {
        u = sign | ((e + 112u) << 23) | (f << 13);
    }
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

// Stochastic rounding to fp16 with 32 random bits (the low 13, or for subnormals the low 16, are
// used): x rounds up in magnitude with probability equal to the discarded fraction, so E = x.
// Saturating: magnitudes past fp16's largest finite 65504 (after rounding) give 65504 with x's sign,
// not infinity (state stores; llmc/optim/optim.h keeps its values far below). NaN -> 0x7e00.
SRNG_FN uint16_t fp16_bits_round_stochastic(float x, unsigned bits) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    const uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    const int normal = a >= 0x38800000u;  // |x| >= 2^-14 (both cases computed, then selected: it vectorizes)
    // normal: drop 13 significand bits, the carry may bump the exponent
    const uint32_t h = ((a + (bits & 0x1fffu)) >> 13) - (112u << 10);
    const uint32_t hn = h > 0x7bffu ? 0x7bffu : h;
    // |x| < 2^-14: a multiple of 2^-24; q = |x| * 2^24 (exact, <= 1024 = 0x400: the smallest normal),
    // its fraction compared with 16 random bits
    float ax;
    memcpy(&ax, &a, sizeof ax);
    const float q = (normal ? 0.0f : ax) * 16777216.0f;
    const float kf = floorf(q), kb = kf + 8388608.0f;  // k = floor(q) read from kb's bits: no float-to-int
    uint32_t k;                                          // conversion, which would stop the CPU loops'
    memcpy(&k, &kb, sizeof k);                           // vectorizing (it may trap, so is not speculated)
    const float frac = q - kf;  // exact
    const uint32_t sub = (k - 0x4b000000u) + (frac * 65536.0f > (float)(bits & 0xffffu) ? 1u : 0u);
    return (uint16_t)(a > 0x7f800000u ? 0x7e00u : sign | (normal ? hn : sub));
}

#endif // LLMC_SRNG_H

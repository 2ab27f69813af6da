/*
 srng.h: the random bits of stochastic rounding, and bf16 rounding on raw bits, in one header that
 plain C (the CPU optimizers, llmc/optim/optim.h), nvcc and the CPU harness (the GPU kernels,
 llmc/optim/adamw.cuh, llmc/optim/kernels.cuh) all compile, so a CPU update and a GPU kernel that round the
 same value draw the same bits and give the same result.

 Counter-based: the bits of element i in stream `salt` of a step are a hash of (key, i, salt), with
 key = srng_step_key(seed, step). No state, no order: any thread may round any element. Streams in
 use (one per rounded quantity, so they are independent): 0 bf16 parameters, 1 first moment m
 (SGD's momentum buffer, Lion's m), 2 second moment v, 3 AMSGrad's vmax.

 Stochastic rounding to bf16 adds 16 random bits below the kept 16 and truncates: x rounds up (in
 magnitude) with probability equal to the discarded fraction, so E[round(x)] = x. Infinities and
 NaNs convert as round-to-nearest-even does (NaN -> 0x7fff, CUDA's canonical bf16 NaN).
*/
#ifndef LLMC_SRNG_H
#define LLMC_SRNG_H

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
// llmc/optim/adamw.cuh, on bits.
SRNG_FN uint16_t bf16_bits_round_stochastic(float x, unsigned bits) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7f800000u) == 0x7f800000u) return bf16_bits_round_nearest(x);
    u += bits & 0xffffu;
    return (uint16_t)(u >> 16);
}

#endif // LLMC_SRNG_H

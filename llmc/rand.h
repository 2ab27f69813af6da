/*
 rand.h: the Mersenne Twister (mt19937) and the normal fill of PyTorch's CPU generator.

 Why: a model initialised here from seed S equals, to the last few ulps, the one PyTorch gives
 with torch.Generator().manual_seed(S) and tensor.normal_(mean, std, generator=g) on the same
 tensors in the same order (dev/reference/gpt2_ref.py init). The random stream is identical;
 the sin/cos/log of a vectorised PyTorch build may differ by an ulp, so tests compare with a
 tolerance of 1e-6 relative to std.

 PyTorch's float normal_ on a contiguous tensor of >= 16 elements: fill with uniforms in [0,1)
 (24 random bits each), then Box-Muller on pairs (j, j+8) of every chunk of 16; a tail that is
 not a multiple of 16 redraws the last 16 uniforms and transforms them again.
*/
#ifndef LLMC_RAND_H
#define LLMC_RAND_H

#include <math.h>
#include <stdint.h>
#include <stddef.h>

#define MT19937_N 624
#define MT19937_M 397

typedef struct {
    uint32_t state[MT19937_N];
    int left;  // values left before the next regeneration of the state
    int next;  // index of the next value in state
} Mt19937;

static inline void mt19937_seed(Mt19937* rng, uint32_t seed) {
    rng->state[0] = seed;
    for (int i = 1; i < MT19937_N; i++) {
        uint32_t prev = rng->state[i - 1];
        rng->state[i] = 1812433253u * (prev ^ (prev >> 30)) + (uint32_t)i;
    }
    rng->left = 1;
    rng->next = 0;
}

static inline void mt19937_regenerate(Mt19937* rng) {
    uint32_t* s = rng->state;
    for (int i = 0; i < MT19937_N; i++) {
        uint32_t y = (s[i] & 0x80000000u) | (s[(i + 1) % MT19937_N] & 0x7fffffffu);
        uint32_t v = s[(i + MT19937_M) % MT19937_N] ^ (y >> 1);
        if (y & 1u) { v ^= 0x9908b0dfu; }
        s[i] = v;
    }
    rng->left = MT19937_N;
    rng->next = 0;
}

static inline uint32_t mt19937_next_u32(Mt19937* rng) {
    if (--rng->left <= 0) { mt19937_regenerate(rng); }
    uint32_t y = rng->state[rng->next++];
    // tempering
    y ^= (y >> 11);
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= (y >> 18);
    return y;
}

// uniform float in [0, 1) from 24 random bits, as PyTorch's uniform_real_distribution<float>
static inline float mt19937_uniform_f32(Mt19937* rng) {
    return (float)(mt19937_next_u32(rng) & ((1u << 24) - 1)) * (1.0f / (float)(1u << 24));
}

static inline void normal_fill_16(float* data, float mean, float std) {
    for (int j = 0; j < 8; j++) {
        float u1 = 1.0f - data[j];  // [0,1) -> (0,1] for the log
        float u2 = data[j + 8];
        float radius = sqrtf(-2.0f * logf(u1));
        float theta = (float)(2.0 * M_PI * (double)u2);
        data[j] = radius * cosf(theta) * std + mean;
        data[j + 8] = radius * sinf(theta) * std + mean;
    }
}

// Fills data[0..n) like torch's normal_(mean, std) on a contiguous float tensor with n >= 16.
static inline void normal_fill(float* data, size_t n, float mean, float std, Mt19937* rng) {
    for (size_t i = 0; i < n; i++) { data[i] = mt19937_uniform_f32(rng); }
    for (size_t i = 0; i + 16 <= n; i += 16) { normal_fill_16(data + i, mean, std); }
    if (n % 16 != 0) {
        float* tail = data + n - 16;  // n >= 16 is a precondition (checked by callers)
        for (int i = 0; i < 16; i++) { tail[i] = mt19937_uniform_f32(rng); }
        normal_fill_16(tail, mean, std);
    }
}

// A small fast generator for sampling and dropout-free randomness that needs no torch parity.
static inline uint32_t xorshift_u32(uint64_t* state) {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    return (uint32_t)((*state * 0x2545F4914F6CDD1Dull) >> 32);
}
static inline float xorshift_f32(uint64_t* state) {  // [0, 1)
    return (float)(xorshift_u32(state) >> 8) / 16777216.0f;
}

#endif // LLMC_RAND_H

/*
 quant8.h: 8-bit blockwise dynamic quantization of optimizer state (Dettmers et al. 2021, "8-bit
 optimizers via block-wise quantization"), ONE definition for the CPU optimizers (llmc/optim/optim.h,
 plain C) and the GPU kernels (llmc/optim/update.cuh; nvcc and the CPU harness), so both quantize to
 the same codes.

 The map (a "dynamic tree" code): a code's bit pattern is [sign] [E zeros] [1] [F fraction bits];
 its value is +-10^-E * (0.1 + 0.9 * (f + 1) / 2^F), so each decade below the block's absmax gets
 half the codes of the one above; the smallest nonzero magnitude is 1e-6 of the absmax (signed)
 and 1e-7 (unsigned). Signed map (m): 127 negatives, -0, +0, 127 positives, sorted ascending
 from -1 to 1 (F = 6 - E, E = 0..6). Unsigned map (v >= 0): no sign bit, one more fraction bit:
 0, then 255 positives up to 1 (F = 7 - E, E = 0..7). The value 0 is code QUANT8_ZERO_SIGNED (128)
 resp. QUANT8_ZERO_UNSIGNED (0): a state buffer starts as codes of 0 with absmax 0.

 Blocks: a tensor's (segment's) elements are cut into blocks of QUANT8_BLOCK consecutive elements
 starting at the tensor's first element (blocks never straddle tensors); each block stores its
 absmax in fp32 and one code per element. x is stored as the code of the map entry nearest to
 x / absmax (quant8_quantize: binary search, ties to the lower entry), read back as map[code] *
 absmax; in the unsigned map (v, AMSGrad's vmax) a positive x never takes the code of 0: it gets
 the smallest nonzero entry instead (quant8_nonzero_rule; dev/reference/int8_state_study.md has
 the measurements: without it a rare token's v in a block of the token embedding reads back as 0
 and its step is m / eps). Tensors with fewer than QUANT8_MIN_ELEMS elements keep fp32 state
 (bitsandbytes' rule: biases and norm weights are small, and their state is where quantization
 hurts most).

 Error of one quantization: at most half the gap between neighbouring codes, which is largest in
 the top decade: 0.9 / 64 / 2 = 0.0070 of the absmax (signed), 0.9 / 128 / 2 = 0.0035 (unsigned;
 the nonzero rule's error is under the smallest entry, 1e-7 of the absmax).
*/
#ifndef LLMC_QUANT8_H
#define LLMC_QUANT8_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define QUANT8_BLOCK 2048          // elements per absmax
#define QUANT8_MIN_ELEMS 4096      // tensors with fewer elements keep fp32 state
#define QUANT8_ZERO_SIGNED 128     // code of 0 in the signed map (index of +0)
#define QUANT8_ZERO_UNSIGNED 0     // code of 0 in the unsigned map
#define QUANT8_MAP_FLOATS 512      // the two maps, signed then unsigned

#if defined(__CUDACC__)
#define QUANT8_FN __host__ __device__ __forceinline__
#else
#define QUANT8_FN static inline
#endif

// Host: the two sorted 256-entry maps, each value computed in double and rounded once to float.
static inline void quant8_maps(float* signed_map, float* unsigned_map) {
    float pos[127];
    int k = 0;
    for (int e = 6; e >= 0; e--) { // signed: 7 bits after the sign, E = e zeros, F = 6 - e
        int F = 6 - e;
        for (int f = 0; f < (1 << F); f++) pos[k++] = (float)(pow(10.0, -e) * (0.1 + 0.9 * (f + 1) / (double)(1 << F)));
    }
    // pos[0..126] ascending (decades in increasing order, linear inside each)
    // cppcheck-suppress uninitvar ; the loops above fill pos[0..126] (1 + 2 + ... + 64 = 127 values)
    for (int i = 0; i < 127; i++) signed_map[i] = -pos[126 - i];
    signed_map[127] = -0.0f;
    signed_map[128] = 0.0f;
    for (int i = 0; i < 127; i++) signed_map[129 + i] = pos[i];
    k = 0;
    unsigned_map[k++] = 0.0f;
    for (int e = 7; e >= 0; e--) { // unsigned: 8 bits, F = 7 - e
        int F = 7 - e;
        for (int f = 0; f < (1 << F); f++) unsigned_map[k++] = (float)(pow(10.0, -e) * (0.1 + 0.9 * (f + 1) / (double)(1 << F)));
    }
}

// The unsigned map's rule for a positive x whose nearest entry is 0: code 1 (the smallest nonzero
// entry). v is a divisor (m / (sqrt(v) + eps)): a nonzero v read back as 0 makes the step of an
// element whose m is not 0 explode (the "zero-point problem", Li et al. 2023, "Memory efficient
// optimizers with 4-bit states"), while a v read back too large only shortens it. The signed map
// (m, momentum: numerators) keeps nearest rounding to 0. is_unsigned: map[0] == 0 (the signed
// map starts at -1).
QUANT8_FN int quant8_nonzero_rule(int code, int is_unsigned, float x) {
    return code == QUANT8_ZERO_UNSIGNED && is_unsigned && x > 0.0f ? 1 : code;
}

// Code of the map entry nearest to x (map sorted ascending, 256 entries; ties go to the lower one),
// except that in the unsigned map a positive x never takes the code of 0 (quant8_nonzero_rule).
QUANT8_FN unsigned char quant8_quantize(const float* map, float x) {
    int lo = 0; // ends at the largest index with map[lo] <= x (0 if none)
    for (int step = 128; step > 0; step >>= 1) {
        if (lo + step <= 255 && map[lo + step] <= x) lo += step;
    }
    int hi = lo < 255 ? lo + 1 : 255;
    const int code = fabsf(map[hi] - x) < fabsf(x - map[lo]) ? hi : lo;
    return (unsigned char)quant8_nonzero_rule(code, map[0] == 0.0f, x);
}

// 1 / absmax, or 0 for an all-zero block (every element then quantizes to the code of 0).
QUANT8_FN float quant8_inv_absmax(float absmax) { return absmax > 0.0f ? 1.0f / absmax : 0.0f; }

// Host: one block x[0..len) -> codes and the returned absmax (|x| for the signed map; the unsigned
// map expects x >= 0). The GPU kernel does the same per element, with the absmax reduced over
// the CUDA block: max is exact, so both give the same codes.
static inline float quant8_block_quantize(const float* x, size_t len, const float* map, int is_signed,
                                          unsigned char* codes) {
    float am = 0.0f;
    for (size_t j = 0; j < len; j++) am = fmaxf(am, is_signed ? fabsf(x[j]) : x[j]);
    const float inv = quant8_inv_absmax(am);
    for (size_t j = 0; j < len; j++) codes[j] = quant8_quantize(map, x[j] * inv);
    return am;
}

// ----------------------------------------------------------------------------
// the CPU's faster quantize: the same codes without a binary search

// For each of the 65536 values of a float's top 16 bits (sign, exponent, 7 fraction bits): the
// code quant8_quantize's search would reach for the smallest float with those bits (the largest
// index whose entry is <= it, 0 if none). Any x with those bits is at least that float, so its
// search ends at most QUANT8_FAST_STEPS entries further (checked when the table is built): two
// compares replace eight dependent ones, and the loop vectorizes with gathers.
#define QUANT8_FAST_STEPS 2
typedef struct {
    float map[256 + QUANT8_FAST_STEPS]; // the map, padded with +inf
    int32_t start[65536];               // 32-bit entries: vector gathers need them
} Quant8Index;

// Returns 0 if some bucket spans more than QUANT8_FAST_STEPS entries (then quant8_quantize it is).
static inline int quant8_index_build(const float* map, Quant8Index* ix) {
    for (int k = 0; k < 256; k++) ix->map[k] = map[k];
    for (int k = 256; k < 256 + QUANT8_FAST_STEPS; k++) ix->map[k] = INFINITY;
    int ok = 1;
    for (uint32_t b = 0; b < 65536; b++) {
        uint32_t lo_bits = b & 0x8000u ? (b << 16) | 0xffffu : b << 16, hi_bits = lo_bits ^ 0xffffu;
        float lo, hi;
        memcpy(&lo, &lo_bits, 4);
        memcpy(&hi, &hi_bits, 4);
        int k = 0;
        if (lo == lo) { // NaN buckets: quant8_quantize_fast returns 0 for NaN itself
            for (int j = 0; j < 256; j++)
                if (map[j] <= lo) k = j;
        }
        ix->start[b] = k;
        int steps = 0; // entries the search may still pass inside the bucket
        for (int j = k + 1; j < 256 && hi == hi && map[j] <= hi; j++) steps++;
        if (lo == lo && steps > QUANT8_FAST_STEPS) ok = 0;
    }
    return ok;
}

// quant8_quantize(map, x), bit for bit, from the index.
static inline unsigned char quant8_quantize_fast(const Quant8Index* ix, float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    int lo = ix->start[u >> 16];
    for (int s = 0; s < QUANT8_FAST_STEPS; s++) lo += ix->map[lo + 1] <= x;
    lo = lo > 255 ? 255 : lo;
    int hi = lo < 255 ? lo + 1 : 255;
    int code = fabsf(ix->map[hi] - x) < fabsf(x - ix->map[lo]) ? hi : lo;
    code = quant8_nonzero_rule(code, ix->map[0] == 0.0f, x);
    return (unsigned char)(x == x ? code : 0);
}

static inline float quant8_block_quantize_fast(const float* x, size_t len, const Quant8Index* ix, int is_signed,
                                               unsigned char* codes) {
    float am = 0.0f; // fmaxf as a compare, which vectorizes: the same for |x| and x >= +0, NaN skipped
    #pragma omp simd reduction(max : am)
    for (size_t j = 0; j < len; j++) {
        const float a = is_signed ? fabsf(x[j]) : x[j];
        am = a > am ? a : am;
    }
    const float inv = quant8_inv_absmax(am);
    #pragma omp simd
    for (size_t j = 0; j < len; j++) codes[j] = quant8_quantize_fast(ix, x[j] * inv);
    return am;
}

static inline void quant8_block_dequantize(const unsigned char* codes, size_t len, float absmax, const float* map,
                                           float* x) {
    for (size_t j = 0; j < len; j++) x[j] = map[codes[j]] * absmax;
}

#endif // LLMC_QUANT8_H

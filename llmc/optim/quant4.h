/*
 quant4.h: 4-bit optimizer state (Li et al. 2023, "Memory efficient optimizers with 4-bit states"),
 ONE definition for the CPU update (llmc/optim/update.h, plain C) and the GPU kernels
 (llmc/optim/update.cuh; nvcc and the CPU harness), so both store the same codes.

 Two codes per byte (element 2i in the low nibble, 2i + 1 in the high one), laid out per OPT_BLOCK
 block of a segment (llmc/optim/segments.h): block b's codes are bytes [b * QUANT4_BLOCK_BYTES,
 (b + 1) * QUANT4_BLOCK_BYTES), so a block's state never shares a byte with another's.

   m (signed: AdamW's first moment, SGD's and Lion's momentum)
       groups of QUANT4_GROUP elements from the block's first element, one fp32 absmax per group
       (block b's groups: absmax[b * QUANT4_GROUPS + j / QUANT4_GROUP]), on the dynamic-exponent map
       of bitsandbytes' create_dynamic_map(signed, 3 exponent bits, 4 bits): +-0.0055, +-0.0325,
       +-0.0775, +-0.2125, +-0.4375, +-0.6625, +-0.8875, 0 and 1 (16 values, quant4_signed_map);
       the nearest entry: the code is the number of midpoints between neighbouring entries (each
       rounded once to float) below x, so a tie goes to the lower entry (15 compares: the loop
       vectorizes).
   v, vmax (unsigned: second moments)
       rank-1 normalization: a segment is a matrix of `cols` columns (the tensor's row length; a
       vector's rows are QUANT4_ROW long), and element (r, c) is scaled by min(R[r], C[c]), R and C
       the maxima of its row and its column; the code i of the linear map without zero,
       T(i) = (i + 1) / 16, nearest (halves up): a positive v never reads back as 0, so the step
       m / (sqrt(v) + eps) cannot explode (the paper's "zero-point problem"), and v read back too
       large only shortens a step. The maxima are those of the new values: a step computes them in
       a pass of its own (llmc/optim/update.h), then quantizes with them.
 Tensors under QUANT8_MIN_ELEMS keep fp32 state (as int8 state: the paper's threshold, 4096).

 Error of one quantization: m at most half the widest gap, (0.4375 - 0.2125) / 2 = 0.1125 of the
 group's absmax; v at most 1/32 of its scale min(R[r], C[c]) (v <= its scale: it is in both maxima).
*/
#ifndef LLMC_QUANT4_H
#define LLMC_QUANT4_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include "llmc/optim/quant8.h"

#define QUANT4_GROUP 128                               // m: elements per absmax
#define QUANT4_GROUPS (QUANT8_BLOCK / QUANT4_GROUP)    // m's groups per OPT_BLOCK block
#define QUANT4_BLOCK_BYTES (QUANT8_BLOCK / 2)          // one block's codes
#define QUANT4_ROW 128                                 // a vector's rows for v's rank-1 scales
#define QUANT4_ZERO_SIGNED 7                           // code of 0 in the signed map
#define QUANT4_ZERO_BYTE 0x77                          // two codes of 0 (signed)
#define QUANT4_MAP_FLOATS 32                           // the signed map (16), its 15 midpoints, +inf

#if defined(__CUDACC__)
#define QUANT4_FN __host__ __device__ __forceinline__
#else
#define QUANT4_FN static inline
#endif

// Host: the signed map (QUANT4_MAP_FLOATS), ascending, each value computed in double and rounded once
// to float: for exponent i = 0, 1, 2 the midpoints of 2^i + 1 points spread evenly over [0.1, 1],
// times 10^(i - 2), and their negatives; then 0 and 1. Then the 15 midpoints between neighbours
// (map[16 + k] between map[k] and map[k + 1], from the doubles) and +inf.
static inline void quant4_signed_map(float* map) {
    double pos[7] = {0};
    int k = 0;
    for (int i = 0; i < 3; i++) {
        const int pts = (1 << i) + 1;
        for (int f = 0; f + 1 < pts; f++) {  // (1 + 2 + 4 = 7 values)
            const double lo = 0.1 + 0.9 * f / (pts - 1), hi = 0.1 + 0.9 * (f + 1) / (pts - 1);
            pos[k++] = pow(10.0, i - 2) * (lo + hi) / 2.0;
        }
    }
    // pos ascending: 0.0055, 0.0325, 0.0775, 0.2125, 0.4375, 0.6625, 0.8875
    double v[16];
    for (int j = 0; j < 7; j++) v[j] = -pos[6 - j];
    v[7] = 0.0;
    for (int j = 0; j < 7; j++) v[8 + j] = pos[j];
    v[15] = 1.0;
    for (int j = 0; j < 16; j++) map[j] = (float)v[j];
    for (int k = 0; k < 15; k++) map[16 + k] = (float)((v[k] + v[k + 1]) / 2.0);
    map[31] = INFINITY;
}

// Code of the signed map's entry nearest to x: the midpoints below x (a tie: the lower entry; NaN: 0).
QUANT4_FN unsigned quant4_quantize_signed(const float* map, float x) {
    unsigned c = 0;
    for (int k = 0; k < 15; k++) c += x > map[16 + k];
    return c;
}

// Code of the linear map without zero nearest to x in [0, 1]: (i + 1) / 16, halves up, clamped.
QUANT4_FN unsigned quant4_quantize_linear(float x) {
    const float k = floorf(x * 16.0f + 0.5f);  // (x * 16: exact)
    return k < 1.0f ? 0u : k > 16.0f ? 15u : (unsigned)k - 1u;
}
QUANT4_FN float quant4_linear_value(unsigned code) { return (float)(code + 1u) * 0.0625f; }

// 1 / scale, or 0 for a scale of 0 (all of the group or row is 0: its codes are those of 0).
QUANT4_FN float quant4_inv(float scale) { return scale > 0.0f ? 1.0f / scale : 0.0f; }

// Code j of a block's bytes, and the byte holding codes j and j ^ 1.
QUANT4_FN unsigned quant4_code(const unsigned char* block, size_t j) {
    return (unsigned)(block[j >> 1] >> (4 * (j & 1))) & 15u;
}

#endif // LLMC_QUANT4_H

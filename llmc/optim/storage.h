/*
 storage.h: how the optimizer keeps one state value (a first moment m, a second moment v, AMSGrad's
 vmax) between steps, for every update rule (llmc/optim/rules.h) on the CPU and the GPU alike. The
 functions here are the only place a stored value is read or written: the CPU loops
 (llmc/optim/update.h) and the GPU kernels (llmc/optim/update.cuh) call them, so both store the
 same bits.

   fp32  the value itself.
   bf16  rounded stochastically after the fp32 update (llmc/optim/srng.h: stream slot + 1 at the
         element's global index), so E[stored] follows the fp32 recurrence. 2 B.
   fp16  AdamW's 16-bit alternative: plain fp16 loses AdamW's state (v ~ g^2 of 1e-8 .. 1e-12 lies
         below fp16's smallest subnormal 6e-8, m ~ g is mostly subnormal;
         dev/reference/fp16_state_study.py measures it). So m is stored as m * 2^14 and v, vmax as
         sqrt(v) * 2^14: sqrt(v) has m's range, and with the gradients clipped to norm 1 every |m|
         and sqrt(v) is <= 1, so stored values stay under 16384 (< 65504) and keep fp16's 11 bits
         down to 6.1e-5 / 2^14 = 3.7e-9. Rounded stochastically (as bf16), saturating. 2 B.
   int8  blockwise dynamic quantization (llmc/optim/quant8.h): blocks of OPT_BLOCK elements from each
         tensor piece's first element, one fp32 absmax per block, m on the signed map, v and vmax on
         the unsigned map (a positive v never reads back as 0). Per block: dequantize, update in
         fp32, requantize with the block's new absmax. Tensors under QUANT8_MIN_ELEMS keep fp32 state
         (bitsandbytes' rule). 1 B + 4 B per block.
   4bit  two codes per byte (llmc/optim/quant4.h): m in groups of 128 with one fp32 absmax each on a
         4-bit dynamic-exponent map; v, vmax scaled per element by the smaller of its row's and its
         column's maxima (rank-1), on the linear map (i + 1) / 16 that excludes 0. The maxima are
         the new values': a pass of their own before the update. Small tensors keep fp32 state, as
         int8. 0.5 B + 4 B per 128 elements (m), 0.5 B + 4 B per row and column (v, vmax).
 A rule updates in fp32 from the values as loaded; the parameter update uses the unrounded fp32
 result and the state keeps the stored one (LAMB, which reads its state twice, reads back the stored
 values in its second pass: the trust ratio is that of the direction applied).
*/
#ifndef LLMC_OPTIM_STORAGE_H
#define LLMC_OPTIM_STORAGE_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include "llmc/optim/quant4.h"
#include "llmc/optim/quant8.h"
#include "llmc/optim/srng.h"

// Functions the GPU kernels call too: host+device under nvcc, plain static inline everywhere else
// (the CPU harness runs kernels as host code).
#if defined(__CUDACC__)
#define OPTIM_HD __host__ __device__ __forceinline__
#else
#define OPTIM_HD static inline
#endif

typedef enum { OPT_STATE_FP32 = 0, OPT_STATE_BF16 = 1, OPT_STATE_INT8 = 2, OPT_STATE_FP16 = 3, OPT_STATE_4BIT = 4 } OptimStatePrecision;
#define OPT_STATE_LAST OPT_STATE_4BIT

// The state values a rule keeps per element. The slot picks the random stream of stochastic
// rounding (slot + 1: stream 0 rounds bf16 parameters), the 8-bit map (m signed, v and vmax
// unsigned) and fp16's layout (m scaled, v and vmax as a scaled square root).
typedef enum { OPT_SLOT_M = 0, OPT_SLOT_V = 1, OPT_SLOT_VMAX = 2 } OptimSlot;
#define OPT_SLOTS 3

#define OPT_BLOCK QUANT8_BLOCK           // elements per block: int8 absmax, LAMB's norm partials
#define OPT_NOT_SMALL ((size_t)-1)       // a segment whose int8 state is quantized (not kept in fp32)

// Where a step's state lives, per slot (NULL where the configuration keeps none): the buffers of
// one storage, indexed by the step's element (fp32, 16-bit, int8 codes), its block (absmax) or its
// place among the small tensors' elements (int8's fp32 state). A plain struct: a kernel argument.
typedef struct {
    float* f32[OPT_SLOTS];           // (n) fp32
    uint16_t* h16[OPT_SLOTS];        // (n) bf16 or fp16 bits
    unsigned char* q8[OPT_SLOTS];    // (n) int8 codes
    float* absmax[OPT_SLOTS];        // (nblocks) int8: per block
    float* small[OPT_SLOTS];         // (nsmall) int8, 4bit: the small tensors' fp32 state, packed
    const float* maps;               // (QUANT8_MAP_FLOATS) int8: the signed, then the unsigned map
    unsigned char* q4[OPT_SLOTS];    // (nblocks * QUANT4_BLOCK_BYTES) 4bit codes, two per byte
    float* absmax4;                  // (nblocks * QUANT4_GROUPS) 4bit: m's absmax per group
    const float* map4;               // (QUANT4_MAP_FLOATS) 4bit: m's signed map, its midpoints
    float* rank1[OPT_SLOTS];         // 4bit v, vmax: the scales as stored (rank1_len), the new ones nrank1 further
    const size_t* rank1_off;         // (nseg) 4bit: a segment's scales in rank1[], or OPT_NOT_SMALL
    size_t nrank1;                   // 4bit: the floats of one set of the state's scales (the new ones' distance)
    size_t rank1_len;                // 4bit: this table's scales (nrank1; Muon's AdamW tensors: theirs alone)
    float* vmini;                    // (nmini) Adam-mini: v per block, fp32 at every storage
    const size_t* mini0;             // (nseg + 1) Adam-mini: each segment's first block in vmini
} OptimSlots;

// ----------------------------------------------------------------------------
// 16-bit storage: bf16, or fp16 in the scaled layout above

#define OPT_FP16_STATE_SCALE 16384.0f
#define OPT_FP16_STATE_INV (1.0f / 16384.0f)

OPTIM_HD float storage16_load(uint16_t b, int fp16, int slot) {
    if (!fp16) return bf16_bits_to_float(b);
    const float r = fp16_bits_to_float(b) * OPT_FP16_STATE_INV;
    return slot == OPT_SLOT_M ? r : r * r;
}

// x stored, rounded with the random bits `bits`.
OPTIM_HD uint16_t storage16_round(float x, int fp16, int slot, unsigned bits) {
    if (!fp16) return bf16_bits_round_stochastic(x, bits);
    return fp16_bits_round_stochastic((slot == OPT_SLOT_M ? x : sqrtf(x)) * OPT_FP16_STATE_SCALE, bits);
}

// x stored with the random bits of element pi (its global index) in the slot's stream.
OPTIM_HD uint16_t storage16_store(float x, int fp16, int slot, unsigned long long key, size_t pi) {
    return storage16_round(x, fp16, slot, srng_bits(key, pi, (unsigned)slot + 1u));
}

// ----------------------------------------------------------------------------
// 8-bit storage: maps (QUANT8_MAP_FLOATS: signed, then unsigned) and codes

// The slot's map within the two.
OPTIM_HD const float* storage8_map(const float* maps, int slot) { return slot == OPT_SLOT_M ? maps : maps + 256; }

OPTIM_HD float storage8_load(const float* maps, int slot, unsigned char code, float absmax) {
    return storage8_map(maps, slot)[code] * absmax;
}

// The magnitude the block's absmax is the max of: |m|, and v, vmax (never negative).
OPTIM_HD float storage8_magnitude(float x, int slot) { return slot == OPT_SLOT_M ? fabsf(x) : x; }

// ----------------------------------------------------------------------------
// 4-bit storage: m on the signed map in groups, v and vmax on the linear map with rank-1 scales

OPTIM_HD float storage4_min(float a, float b) { return a < b ? a : b; }

// Element j's value of a block's codes: m (slot M) from its group's absmax, v and vmax from the
// scale min(R[r], C[c]) of its row and column.
OPTIM_HD float storage4_load_m(const float* map4, const unsigned char* codes, size_t j, float absmax) {
    return map4[quant4_code(codes, j)] * absmax;
}
OPTIM_HD float storage4_load_v(const unsigned char* codes, size_t j, float scale) {
    return quant4_linear_value(quant4_code(codes, j)) * scale;
}

#endif // LLMC_OPTIM_STORAGE_H

/*
 segments.h: the optimizer's segment tables. A segment is a piece of one parameter tensor with its
 hyperparameters (weight decay, lr multiplier) and two places: `offset`, its first element in the
 step's buffers (gradients, state, master weights: the whole model, a ZeRO-1 shard, a BAdam block,
 an offload chunk) and `param`, its first element in the parameters (the global index, which also
 keys stochastic rounding). The placements (llmc/optim/views.h) are tables cut and rebased from
 the whole model's. Blocks of OPT_BLOCK elements are cut from each segment's first element: the
 int8 state's absmax blocks and LAMB's partial sums live on them, the same on the CPU and the GPU.
*/
#ifndef LLMC_OPTIM_SEGMENTS_H
#define LLMC_OPTIM_SEGMENTS_H

#include <stddef.h>
#include <string.h>
#include "llmc/optim/quant4.h"
#include "llmc/optim/storage.h"
#include "llmc/params.h"

// A segment knows where its parameters are: grads, state and master weights of a step are
// indexed from `offset` (the step's buffers: the whole model, a ZeRO-1 shard, a BAdam block, an
// offload chunk), the parameters from `param`, their global index in the model, which also picks
// the random bits of stochastic rounding. A whole-model table has param == offset; a view cuts
// and rebases offset and keeps param. `tensor` names the model tensor the segment is a piece of
// (LAMB's trust ratio spans consecutive pieces of one tensor), `tensor_count` its elements (the
// int8 state keeps fp32 m, v for tensors under QUANT8_MIN_ELEMS, whatever the piece).
typedef struct {
    size_t offset;         // first element in the grads, state and master buffers of the step
    size_t param;          // first element in the parameter buffer: its global index
    size_t count;
    size_t tensor_count;   // elements of the whole tensor
    float weight_decay;    // decoupled weight decay of this segment
    float lr_mult;         // learning-rate multiplier
    int tensor;            // the tensor's id (distinct for adjacent tensors)
    int mat_parts;         // Muon: matrices stacked in the tensor (qkv: 3), each (mat_rows / mat_parts, mat_cols)
    size_t mat_rows, mat_cols;  // Muon: a transformer block's 2-D weight (rows, cols); 0: not a Muon matrix
    size_t cols;           // the tensor's row length when it is a matrix (0: a vector): 4-bit v's rank-1 scales
    size_t trel;           // the segment's first element within its tensor (a view's cut moves it)
    size_t mini_lead, mini_lead_block, mini_block;  // Adam-mini's blocks of the tensor (ParamTensor's)
} OptimSegment;

// A whole tensor as one segment of a whole-model table (param == offset).
static inline OptimSegment optim_segment(size_t offset, size_t count, float weight_decay, float lr_mult, int tensor) {
    OptimSegment s = {offset, offset, count, count, weight_decay, lr_mult, tensor, 0, 0, 0, 0, 0, 0, 0, count};
    return s;
}
// ZeRO-1: each of P processes owns one contiguous shard of the flat optimizer state. Shards are
// equal, ceil(n / P) rounded up to 32 elements (128-byte aligned fp32); the last one is padded
// past n, so element counts that do not divide by P need no special case.
static inline size_t zero_shard_elems(size_t n, int num_processes) {
    size_t P = num_processes < 1 ? 1 : (size_t)num_processes;
    size_t per = (n + P - 1) / P;
    return (per + 31) / 32 * 32;
}

// The parts of the segments inside [lo, hi) of the step's buffers, rebased to lo (a ZeRO-1
// shard, an offload chunk); each part keeps its parameters' place (param moves with the cut).
// Returns how many (<= nseg).
static inline int optim_segments_cut(const OptimSegment* segs, int nseg, size_t lo, size_t hi, OptimSegment* out) {
    int k = 0;
    for (int i = 0; i < nseg; i++) {
        size_t a = segs[i].offset > lo ? segs[i].offset : lo;
        size_t b = segs[i].offset + segs[i].count < hi ? segs[i].offset + segs[i].count : hi;
        if (a >= b) { continue; }
        out[k] = segs[i];
        out[k].offset = a - lo;
        out[k].param = segs[i].param + (a - segs[i].offset);
        out[k].trel = segs[i].trel + (a - segs[i].offset);
        out[k].count = b - a;
        k++;
    }
    return k;
}

// One segment per parameter tensor; weight decay from the table's decay flag, never by index. (Its
// layers' slices in one segment: Adam-mini takes optim_segments_build_layers's table.)
static inline int optim_segments_build(const ParamTable* pt, float weight_decay, OptimSegment* segs) {
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        segs[i] = optim_segment(pt->t[i].offset, pt->t[i].count, pt->t[i].decay ? weight_decay : 0.0f, pt->t[i].lr_mult, i);
        segs[i].cols = pt->t[i].ndim == 2 ? pt->t[i].cols : 0;
    }
    return NUM_PARAMETER_TENSORS;
}


// Sets a segment of tensor t's row length (cols, when t is a matrix) and Adam-mini's blocks, and marks it as
// Muon's when t is a transformer block's weight matrix (per layer, 2-D): its layer shape, and qkv's
// three stacked matrices. (A segment may hold several layers'.)
static inline void optim_segment_set_matrix(OptimSegment* s, const ParamTensor* t) {
    s->cols = t->ndim == 2 ? t->cols : 0;  // (every matrix: 4-bit v's rows and columns)
    s->mini_lead = t->mini_lead;
    s->mini_lead_block = t->mini_lead_block;
    s->mini_block = t->mini_block;
    if (!(t->per_layer && t->ndim == 2)) return;
    s->mat_rows = t->rows;
    s->mat_cols = t->cols;
    s->mat_parts = strcmp(t->name, "qkvw") == 0 ? 3 : 1;
}

// One segment per tensor as PyTorch sees it: stacked per-layer tensors are split into their L
// layer slices (LAMB's trust ratio and the int8 size threshold are per tensor). Returns the number
// of segments; segs needs optim_segments_count_layers(pt) entries.
static inline int optim_segments_count_layers(const ParamTable* pt) {
    int n = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) n += pt->t[i].per_layer ? pt->num_layers : 1;
    return n;
}
static inline int optim_segments_build_layers(const ParamTable* pt, float weight_decay, OptimSegment* segs) {
    int k = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        const ParamTensor* t = &pt->t[i];
        int slices = t->per_layer ? pt->num_layers : 1;
        size_t count = t->count / (size_t)slices;
        for (int l = 0; l < slices; l++) {
            segs[k] = optim_segment(t->offset + (size_t)l * count, count, t->decay ? weight_decay : 0.0f, t->lr_mult, k);
            optim_segment_set_matrix(&segs[k], t);
            k++;
        }
    }
    return k;
}

// Blocks of OPT_BLOCK elements cut from each segment from its first element (never straddling
// segments): block0[s] is segment s's first block, block0[nseg] the total (returned).
static inline size_t optim_blocks_build(const OptimSegment* segs, int nseg, size_t* block0) {
    size_t b = 0;
    for (int s = 0; s < nseg; s++) {
        block0[s] = b;
        b += (segs[s].count + OPT_BLOCK - 1) / OPT_BLOCK;
    }
    block0[nseg] = b;
    return b;
}

// int8 state: segments of tensors under QUANT8_MIN_ELEMS keep fp32 m, v, packed in segment
// order: small_off[s] is the offset of segment s there, or OPT_NOT_SMALL. Returns the packed length.
static inline size_t optim_small_build(const OptimSegment* segs, int nseg, size_t* small_off) {
    size_t k = 0;
    for (int s = 0; s < nseg; s++) {
        if (segs[s].tensor_count < QUANT8_MIN_ELEMS) {
            small_off[s] = k;
            k += segs[s].count;
        } else {
            small_off[s] = OPT_NOT_SMALL;
        }
    }
    return k;
}

// 4-bit state: v's rank-1 scales per segment (llmc/optim/quant4.h). A segment is a matrix of
// optim_segment_width columns starting at its tensor's element trel: rows r0 .. r1 of it, the first
// and last perhaps partial. Its scales are the rows' maxima, then the columns': optim_rank1_floats.
OPTIM_HD size_t optim_segment_width(const OptimSegment* s) { return s->cols != 0 ? s->cols : (size_t)QUANT4_ROW; }
OPTIM_HD size_t optim_segment_row0(const OptimSegment* s) { return s->trel / optim_segment_width(s); }
OPTIM_HD size_t optim_segment_rows(const OptimSegment* s) {
    const size_t w = optim_segment_width(s);
    return s->count == 0 ? 0 : (s->trel + s->count - 1) / w - s->trel / w + 1;
}
OPTIM_HD size_t optim_rank1_floats(const OptimSegment* s) { return optim_segment_rows(s) + optim_segment_width(s); }

// The segments not kept in fp32 (small_off[s] == OPT_NOT_SMALL) get their scales at rank1_off[s]
// of a buffer packed in segment order, the others OPT_NOT_SMALL. Returns the packed length.
static inline size_t optim_rank1_build(const OptimSegment* segs, int nseg, const size_t* small_off, size_t* rank1_off) {
    size_t k = 0;
    for (int s = 0; s < nseg; s++) {
        rank1_off[s] = small_off[s] == OPT_NOT_SMALL ? k : OPT_NOT_SMALL;
        if (small_off[s] == OPT_NOT_SMALL) k += optim_rank1_floats(&segs[s]);
    }
    return k;
}

// Adam-mini: the block of element e of the segment's tensor (from the tensor's first element: its
// first mini_lead elements in blocks of mini_lead_block, then blocks of mini_block), and the
// block's first element and length (optim_segment's default: the segment is one block).
OPTIM_HD size_t optim_mini_index(const OptimSegment* s, size_t e) {
    if (e < s->mini_lead) return e / s->mini_lead_block;
    const size_t lead = s->mini_lead ? s->mini_lead / s->mini_lead_block : 0;
    return lead + (e - s->mini_lead) / s->mini_block;
}
OPTIM_HD size_t optim_mini_start(const OptimSegment* s, size_t i) {
    const size_t lead = s->mini_lead ? s->mini_lead / s->mini_lead_block : 0;
    return i < lead ? i * s->mini_lead_block : s->mini_lead + (i - lead) * s->mini_block;
}
OPTIM_HD size_t optim_mini_len(const OptimSegment* s, size_t i) {
    const size_t lead = s->mini_lead ? s->mini_lead / s->mini_lead_block : 0;
    return i < lead ? s->mini_lead_block : s->mini_block;
}

// Adam-mini: the blocks of each segment, which holds whole blocks (optim_mini_check), packed in
// segment order: mini0[s] is segment s's first, mini0[nseg] the total (returned).
static inline size_t optim_mini_build(const OptimSegment* segs, int nseg, size_t* mini0) {
    size_t k = 0;
    for (int s = 0; s < nseg; s++) {
        mini0[s] = k;
        k += optim_mini_index(&segs[s], segs[s].trel + segs[s].count - 1) - optim_mini_index(&segs[s], segs[s].trel) + 1;
    }
    mini0[nseg] = k;
    return k;
}

// The segment of block b (block0 from optim_blocks_build, b < block0[nseg]).
OPTIM_HD int optim_block_segment(const size_t* block0, int nseg, size_t b) {
    int lo = 0, hi = nseg - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (block0[mid] <= b) lo = mid; else hi = mid - 1;
    }
    return lo;
}

// Block b of a table: its segment s, its offset in the segment (rel), its first element in the
// step's buffers (start) and in the parameters (pstart), and its length (OPT_BLOCK, or less at the
// segment's end).
typedef struct {
    int s;
    size_t rel, start, pstart, len;
} OptimBlockAt;
static inline OptimBlockAt optim_block_at(const OptimSegment* segs, const size_t* block0, int nseg, size_t b) {
    OptimBlockAt k;
    k.s = optim_block_segment(block0, nseg, b);
    k.rel = (b - block0[k.s]) * OPT_BLOCK;
    k.start = segs[k.s].offset + k.rel;
    k.pstart = segs[k.s].param + k.rel;
    const size_t rest = segs[k.s].count - k.rel;
    k.len = rest < OPT_BLOCK ? rest : OPT_BLOCK;
    return k;
}

// The blocks [*b0, *b1) of segment s's tensor in this table: the blocks of the run of adjacent
// segments with s's tensor id (the pieces of one tensor: a table cut at block boundaries of the
// tensor gives the whole tensor's blocks, so its sums are the whole tensor's, bit for bit).
OPTIM_HD void optim_tensor_blocks(const OptimSegment* segs, int nseg, const size_t* block0, int s, size_t* b0,
                                  size_t* b1) {
    int f = s, l = s;
    while (f > 0 && segs[f - 1].tensor == segs[s].tensor) f--;
    while (l + 1 < nseg && segs[l + 1].tensor == segs[s].tensor) l++;
    *b0 = block0[f];
    *b1 = block0[l + 1];
}

#endif // LLMC_OPTIM_SEGMENTS_H

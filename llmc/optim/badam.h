/*
 badam.h: BAdam, block coordinate descent with Adam (Luo et al. 2024), for both trainers.

 The parameters are cut into D blocks: block l < L is transformer layer l (its 12 tensor slices),
 and with `embed` block L holds the embeddings and the final layernorm (wte, wpe, lnfw, lnfb);
 without it those stay frozen. Every K steps the active block changes; only the active block has
 gradients and AdamW state (reset at each switch, bias correction counting from the switch), so
 the optimizer side of memory is that of the largest block instead of the whole model: BAdam's
 2M + 16M/D instead of Adam's 18M (paper's accounting for mixed precision; here fp32: 4 B of
 parameters for all, 12 B of gradient + m + v for one block).

 Which block is active is a pure function of the step (resuming needs nothing but the step):
   k = step / K (the k-th block phase), round r = k / D, position j = k % D,
   ascending: block j; descending: block D-1-j; random: a permutation of the D blocks drawn
   from (seed, r), a new one every round.
 The compact buffers (gradients, m, v) hold the active block's slices back to back in table order.
*/
#ifndef LLMC_BADAM_H
#define LLMC_BADAM_H

#include <stddef.h>
#include <stdint.h>
#include "llmc/params.h"
#include "llmc/rand.h"

typedef enum { BADAM_ASCENDING = 0, BADAM_DESCENDING, BADAM_RANDOM } BadamOrder;
static const char* const badam_order_names[] = {"ascending", "descending", "random", NULL};

#define BADAM_MAX_SLICES NUM_PARAMETER_TENSORS

typedef struct {
    int tensor;     // index in the parameter table
    int layer;      // layer of the slice (0 for tensors that are not per layer)
    size_t offset;  // element offset of the slice in the flat parameter buffer
    size_t count;   // elements
    size_t compact; // element offset in the compact gradient / state buffers
} BadamSlice;

typedef struct {
    int switch_every;  // K steps per block phase
    int order;         // BadamOrder
    int embed;         // 1: embeddings + final layernorm form block L
    uint64_t seed;
    int num_layers;
    int num_blocks;    // D = L (+1 with embed)
    size_t max_block;  // elements of the largest block: the size of the compact buffers
} Badam;

// Is tensor t of the table part of the embedding block (as opposed to a layer block)?
static inline int badam_is_embed_tensor(const ParamTensor* t) { return !t->per_layer; }

// Elements of block b.
static inline size_t badam_block_elems(const Badam* bd, const ParamTable* pt, int b) {
    size_t n = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        const ParamTensor* t = &pt->t[i];
        if (b < bd->num_layers && t->per_layer) { n += t->rows * t->cols; }
        if (b == bd->num_layers && badam_is_embed_tensor(t)) { n += t->count; }
    }
    return n;
}

static inline void badam_init(Badam* bd, const ParamTable* pt, int switch_every, int order, int embed, uint64_t seed) {
    bd->switch_every = switch_every;
    bd->order = order;
    bd->embed = embed;
    bd->seed = seed;
    bd->num_layers = pt->num_layers;
    bd->num_blocks = pt->num_layers + (embed ? 1 : 0);
    bd->max_block = 0;
    for (int b = 0; b < bd->num_blocks; b++) {
        size_t n = badam_block_elems(bd, pt, b);
        if (n > bd->max_block) { bd->max_block = n; }
    }
}

// The active block at a step.
static inline int badam_block_at(const Badam* bd, int step) {
    int k = step / bd->switch_every;
    int D = bd->num_blocks;
    int r = k / D, j = k % D;
    if (bd->order == BADAM_ASCENDING) { return j; }
    if (bd->order == BADAM_DESCENDING) { return D - 1 - j; }
    int perm[1024];
    int n = D < 1024 ? D : 1024;
    if (n < 1) { return 0; }  // (badam_init makes at least one block)
    for (int i = 0; i < n; i++) { perm[i] = i; }
    Mt19937 rng;
    mt19937_seed(&rng, (uint32_t)(bd->seed * 2654435761u + (uint64_t)r));
    for (int i = n - 1; i > 0; i--) {
        int q = (int)(mt19937_next_u32(&rng) % (uint32_t)(i + 1));
        int tmp = perm[i]; perm[i] = perm[q]; perm[q] = tmp;
    }
    // cppcheck-suppress uninitvar ; n >= 1 (a Badam has a block), so perm[0..n) is filled above
    return perm[j % n];
}

// Steps since the active block was switched in (0 at a switch: reset the state).
static inline int badam_step_in_block(const Badam* bd, int step) { return step % bd->switch_every; }

// The slices of block b, in table order, with their compact offsets. Returns the count.
static inline int badam_block_slices(const Badam* bd, const ParamTable* pt, int b, BadamSlice* out) {
    int n = 0;
    size_t compact = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        const ParamTensor* t = &pt->t[i];
        int in_block = (b < bd->num_layers && t->per_layer) || (b == bd->num_layers && badam_is_embed_tensor(t));
        if (!in_block) { continue; }
        BadamSlice s;
        s.tensor = i;
        s.layer = t->per_layer ? b : 0;
        s.count = t->per_layer ? t->rows * t->cols : t->count;
        s.offset = t->offset + (size_t)s.layer * (t->per_layer ? s.count : 0);
        s.compact = compact;
        compact += s.count;
        out[n++] = s;
    }
    return n;
}

// Where the gradient of layer l's slice of tensor i lives in the gradient buffer: its offset among
// all parameters (BAdam off: slices == NULL), its compact offset when the slice is in the active
// block, or BADAM_FROZEN when it is not (the backward pass then skips that weight gradient).
#define BADAM_FROZEN ((size_t)-1)
static inline size_t badam_grad_offset(const ParamTable* pt, const BadamSlice* slices, int num_slices, int i, int l) {
    if (slices == NULL) { return param_slice_offset(pt, i, l); }
    for (int k = 0; k < num_slices; k++) {
        if (slices[k].tensor == i && slices[k].layer == l) { return slices[k].compact; }
    }
    return BADAM_FROZEN;
}

#endif // LLMC_BADAM_H

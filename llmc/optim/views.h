/*
 views.h: the placements of the optimizer engine as segment tables, and the step plan; plain C,
 for both trainers.

 A view is a segment table over a state of n_state elements (llmc/optim/optim.h: a segment's
 offset indexes the step's gradients, state and master weights, its param the parameters):
   whole model    one segment per tensor slice (optim_segments_build_layers), param == offset
   ZeRO-1 shard   the whole table cut to [lo, hi) and rebased (optim_segments_cut), param global
   BAdam block    the active block's slices back to back (offset = the slice's compact offset,
                  param = its place in the model), state sized for the largest block
   both           the BAdam block's table cut to the process's shard of the block
 ZeRO-1's parts of a view (optim_view_parts): equal shards, or for Muon cut around whole matrices.
 Where a table may be cut without changing any bit (optim_cut_of): anywhere for the elementwise
 optimizers, at the tensors' OPT_BLOCK boundaries for int8 state of any optimizer (absmax
 blocks), at tensor boundaries for 4-bit state (v's rank-1 scales) and LAMB (whatever its state) (its trust ratio needs the whole tensor's sums in one table),
 and for Muon around whole matrices (Newton-Schulz needs all of one), its other tensors as AdamW's.

 The step plan (optim_plan_step) is the mode logic the trainers share: the active BAdam block and
 its slices, the lowest layer the backward pass must reach, whether the state is zeroed before
 the update (at a block switch, or when there is no state to continue), and the optimizer's step
 counter (bias correction counts from the switch).
*/
#ifndef LLMC_OPTIM_VIEWS_H
#define LLMC_OPTIM_VIEWS_H

#include <stddef.h>
#include "llmc/optim/badam.h"
#include "llmc/optim/optim.h"
#include "llmc/params.h"

// ----------------------------------------------------------------------------
// where a table may be cut

// (MATRIX, MATRIX_BLOCK: Muon's matrices whole, its other tensors by element or by int8 block)
typedef enum { OPTIM_CUT_ELEMENT = 0, OPTIM_CUT_BLOCK, OPTIM_CUT_TENSOR, OPTIM_CUT_MATRIX, OPTIM_CUT_MATRIX_BLOCK, OPTIM_CUT_MINI,
               OPTIM_CUT_MINI_BLOCK } OptimCut;

static inline OptimCut optim_cut_of(const OptimConfig* c) {
    if (c->kind == OPT_LAMB) return OPTIM_CUT_TENSOR;
    if (c->kind == OPT_ADAM_MINI) {  // whole blocks of one v (and whole int8 blocks or 4-bit tensors)
        return c->state == OPT_STATE_4BIT ? OPTIM_CUT_TENSOR : c->state == OPT_STATE_INT8 ? OPTIM_CUT_MINI_BLOCK : OPTIM_CUT_MINI;
    }
    if (c->kind == OPT_MUON) {  // (4-bit: the AdamW tensors whole, for v's rank-1 scales)
        return c->state == OPT_STATE_INT8 ? OPTIM_CUT_MATRIX_BLOCK : c->state == OPT_STATE_4BIT ? OPTIM_CUT_TENSOR : OPTIM_CUT_MATRIX;
    }
    if (c->state == OPT_STATE_INT8) return OPTIM_CUT_BLOCK;
    if (c->state == OPT_STATE_4BIT) return OPTIM_CUT_TENSOR;  // v's rank-1 scales span the segment
    return OPTIM_CUT_ELEMENT;
}

// The first place at or after x (an element of the table's buffers) where the table may be cut.
static inline size_t optim_cut_snap(const OptimSegment* segs, int nseg, size_t x, OptimCut cut) {
    for (int s = 0; s < nseg; s++) {
        const size_t a = segs[s].offset, b = a + segs[s].count;
        if (x <= a || x >= b) continue;
        if (cut == OPTIM_CUT_TENSOR || ((cut == OPTIM_CUT_MATRIX || cut == OPTIM_CUT_MATRIX_BLOCK) && segs[s].mat_rows != 0)) {
            return b;
        }
        if (cut == OPTIM_CUT_ELEMENT || cut == OPTIM_CUT_MATRIX) return x;
        if (cut == OPTIM_CUT_MINI || cut == OPTIM_CUT_MINI_BLOCK) {  // the first start of an Adam-mini block
            const OptimSegment* g = &segs[s];                              // (and of an int8 block) at or after x
            const size_t step = cut == OPTIM_CUT_MINI_BLOCK ? OPT_BLOCK : 1;
            for (size_t y = a + (x - a + step - 1) / step * step; y < b;) {
                const size_t k = optim_mini_index(g, g->trel + (y - a)), st = optim_mini_start(g, k);
                if (st == g->trel + (y - a)) return y;
                const size_t next = a + (st + optim_mini_len(g, k) - g->trel);  // the next block's start
                y = a + (next - a + step - 1) / step * step;
            }
            return b;
        }
        const size_t up = a + (x - a + OPT_BLOCK - 1) / OPT_BLOCK * OPT_BLOCK;
        return up < b ? up : b;
    }
    return x;
}

// ----------------------------------------------------------------------------
// ZeRO-1's parts of a view

// Muon's cut nearest the state's share `target` (a matrix element holds its momentum, any other
// its m and v: weight 1 and 2): within an AdamW tensor at the next multiple of 32 elements (then
// optim_cut_of's rule: int8 blocks), within a matrix at its nearer end.
static inline size_t optim_muon_part_cut(const OptimConfig* cfg, const OptimSegment* segs, int nseg, size_t n,
                                         double target) {
    double below = 0.0;
    for (int s = 0; s < nseg; s++) {
        const size_t a = segs[s].offset, b = a + segs[s].count;
        const double w = segs[s].mat_rows != 0 ? 1.0 : 2.0, here = w * (double)segs[s].count;
        if (below + here < target) {
            below += here;
            continue;
        }
        if (segs[s].mat_rows != 0) return 2.0 * (target - below) < here ? a : b;
        size_t x = a + (size_t)((target - below) / w);
        x = (x + 31) / 32 * 32;
        return x >= b ? b : optim_cut_snap(segs, nseg, x, optim_cut_of(cfg));
    }
    return n;
}

// Process r of procs updates elements [parts[r], parts[r + 1]) of a view over n elements (its
// gradients and state; parts has procs + 1 entries). Equal shards of zero_shard_elems, the last
// one ending in padding past n, for every optimizer but Muon: there the cuts never split a matrix
// (every process orthogonalizes whole matrices) and share the state, not the elements, equally
// (optim_muon_part_cut); the parts then end at n, differ in size, and may be empty.
// Returns 1 when the parts are equal shards (the collectives without counts serve them).
static inline int optim_view_parts(const OptimConfig* cfg, const OptimSegment* segs, int nseg, size_t n, int procs,
                                   size_t* parts) {
    const size_t shard = zero_shard_elems(n, procs);
    const int even = cfg->kind != OPT_MUON && cfg->kind != OPT_ADAM_MINI;
    double total = 0.0;
    for (int s = 0; s < nseg; s++) total += (segs[s].mat_rows != 0 ? 1.0 : 2.0) * (double)segs[s].count;
    parts[0] = 0;
    for (int r = 1; r <= procs; r++) {
        size_t x = (size_t)r * shard;
        if (cfg->kind == OPT_ADAM_MINI) {  // (the equal shard's end moved up to a whole block's)
            x = r < procs ? optim_cut_snap(segs, nseg, x < n ? x : n, optim_cut_of(cfg)) : n;
            if (x > n) x = n;
        } else if (!even) {
            x = r < procs ? optim_muon_part_cut(cfg, segs, nseg, n, total * r / procs) : n;
            if (x > n) x = n;
            if (x < parts[r - 1]) x = parts[r - 1];
        }
        parts[r] = x;
    }
    return even;
}

// ----------------------------------------------------------------------------
// BAdam's block as a view

// The slices of a BAdam block as segments: offset = the compact offset, param = the slice's place
// in the model, the tensor's weight decay and lr multiplier; tensor ids distinct per slice.
// Returns the count (num_slices); n_state = the block's elements.
static inline int optim_view_badam(const ParamTable* pt, const BadamSlice* slices, int num_slices, float weight_decay,
                                   OptimSegment* out, size_t* n_state) {
    size_t n = 0;
    for (int k = 0; k < num_slices; k++) {
        const ParamTensor* t = &pt->t[slices[k].tensor];
        out[k] = optim_segment(slices[k].compact, slices[k].count, t->decay ? weight_decay : 0.0f, t->lr_mult, k);
        out[k].param = slices[k].offset;
        optim_segment_set_matrix(&out[k], t);
        n = slices[k].compact + slices[k].count;
    }
    *n_state = n;
    return num_slices;
}

// ----------------------------------------------------------------------------
// the step plan

// What the plan needs to know of a run.
typedef struct {
    const ParamTable* table;
    const Badam* badam;  // NULL: BAdam off
} OptimRun;

typedef struct {
    int block;                             // the active BAdam block (-1: BAdam off)
    int num_slices;                        // its slices (0: BAdam off)
    BadamSlice slices[BADAM_MAX_SLICES];   // in table order, with their compact offsets
    int lowest_layer;                      // the lowest layer whose gradients the backward pass needs
    int reset;                             // zero the optimizer state before this step's update
    int opt_step;                          // the optimizer's step of this update (1, 2, ...)
    int step;                              // the training step (from 0)
} OptimPlan;

// The plan of training step `step` (from 0). has_state: the state holds what the previous step
// left (0 on a fresh start, or after loading a model without its optimizer state).
static inline OptimPlan optim_plan_step(const OptimRun* run, int step, int has_state) {
    OptimPlan p;
    p.block = -1;
    p.num_slices = 0;
    p.lowest_layer = 0;
    p.reset = !has_state;
    p.opt_step = step + 1;
    p.step = step;
    if (run->badam != NULL) {
        const Badam* bd = run->badam;
        const int in_block = badam_step_in_block(bd, step);
        p.block = badam_block_at(bd, step);
        p.num_slices = badam_block_slices(bd, run->table, p.block, p.slices);
        // the layers below the active one need no gradients; the embedding block needs them all
        p.lowest_layer = p.block < bd->num_layers ? p.block : 0;
        p.reset = in_block == 0 || !has_state;
        // bias correction counts from the switch
        p.opt_step = in_block + 1;
    }
    return p;
}

#endif // LLMC_OPTIM_VIEWS_H

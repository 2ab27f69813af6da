/*
 engine.h: the optimizer engine that both trainers drive; plain C (the device side of the same
 engine: optim_engine_set_view_device in llmc/optim/kernels.cuh).

 One engine holds every optimizer and state precision (llmc/optim/state.h) in one block of memory,
 and the placements are views of it (llmc/optim/views.h): the step's segment table says which
 elements the state covers and where their parameters are.
   whole model    one segment per tensor slice, the state covers all parameters
   ZeRO-1         the table cut to this process's shard [rank * shard, (rank + 1) * shard); the
                  step's gradients are the reduced shard, the parameters the whole model's
   BAdam          the active block's slices back to back; the block of memory is the largest
                  block's state, and each switch sets the new block's view up in it (zeroed)
 A trainer asks optim_engine_bytes for the block's size (the memory model uses the same number),
 allocates it where the state lives, sets the engine up (optim_engine_init), and at each step
 makes the plan's view current (optim_engine_begin_step_cpu, or _device) before the update.

   OptimEngine e;
   optim_engine_init(&e, &cfg, &table, badam_or_NULL, weight_decay, rank, procs, shard);
   void* mem = allocate(e.bytes);  e.memory = mem;
   optim_engine_begin_step_cpu(&e, &plan);                       // each step, from the plan
   optim_engine_step_cpu(&e, params, grads, lr, plan.opt_step, clip_scale);

 A state file holds the current view's block (e.st.memory, e.st.bytes): a resumed run sets up the
 view of the step it continues (optim_engine_view_of_step) before reading it.
*/
#ifndef LLMC_OPTIM_ENGINE_H
#define LLMC_OPTIM_ENGINE_H

#include <stddef.h>
#include <string.h>
#include "llmc/optim/badam.h"
#include "llmc/optim/state.h"
#include "llmc/optim/views.h"
#include "llmc/params.h"
#include "llmc/utils.h"

#define OPTIM_VIEW_NONE (-2)   // no view set up yet
#define OPTIM_VIEW_MODEL (-1)  // the whole model, or this process's ZeRO-1 shard of it

typedef struct {
    OptimConfig cfg;
    const ParamTable* table;  // borrowed
    const Badam* badam;       // borrowed; NULL: BAdam off
    float weight_decay;       // of the tensors that decay (ParamTensor.decay)
    int rank, procs;          // ZeRO-1: this process and the process count (procs 1: off)
    size_t shard;             // ZeRO-1: elements per process (0: off)
    size_t bytes;             // the state block: the largest view's optim_state_bytes
    size_t max_elems;         // elements of the largest view
    void* memory;             // the block (host, or device memory for the GPU trainer); the caller's
    int view;                 // the current view: a BAdam block, OPTIM_VIEW_MODEL or OPTIM_VIEW_NONE
    OptimState st;            // the current view's state, carved from memory (n 0: nothing to update)
} OptimEngine;

// The segment table of a view: BAdam block `block`, or (OPTIM_VIEW_MODEL) the whole model cut to
// the ZeRO-1 shard. Returns the count (0: the view is empty, a process whose shard is all padding);
// *segs is malloc'd (free it), *n the elements the state covers.
static inline int optim_engine_view_table(const OptimEngine* e, int block, OptimSegment** segs, size_t* n) {
    const ParamTable* pt = e->table;
    *n = 0;
    if (block >= 0) {
        BadamSlice slices[BADAM_MAX_SLICES];
        int k = badam_block_slices(e->badam, pt, block, slices);
        *segs = (OptimSegment*)mallocCheck((size_t)(k > 0 ? k : 1) * sizeof(OptimSegment));
        return optim_view_badam(pt, slices, k, e->weight_decay, *segs, n);
    }
    int nseg = optim_segments_count_layers(pt);
    OptimSegment* whole = (OptimSegment*)mallocCheck((size_t)nseg * sizeof(OptimSegment));
    optim_segments_build_layers(pt, e->weight_decay, whole);
    *n = pt->total;
    if (e->procs > 1 && e->shard > 0) {  // this process's shard, rebased to its first element
        const size_t lo = (size_t)e->rank * e->shard, hi = lo + e->shard;
        OptimSegment* cut = (OptimSegment*)mallocCheck((size_t)nseg * sizeof(OptimSegment));
        nseg = optim_segments_cut(whole, nseg, lo, hi, cut);
        free(whole);
        whole = cut;
        *n = nseg > 0 ? whole[nseg - 1].offset + whole[nseg - 1].count : 0;
    }
    *segs = whole;
    return nseg;
}

static inline size_t optim_engine_view_bytes(const OptimEngine* e, int block, size_t* n) {
    OptimSegment* segs;
    int nseg = optim_engine_view_table(e, block, &segs, n);
    size_t bytes = nseg > 0 ? optim_state_bytes(&e->cfg, segs, nseg, *n) : 0;
    free(segs);
    return bytes;
}

// Sets e up (no memory yet: e->bytes says how much the caller allocates into e->memory). badam
// NULL: BAdam off; procs > 1 with shard > 0: ZeRO-1. Fatal on an invalid configuration.
static inline void optim_engine_init(OptimEngine* e, const OptimConfig* cfg, const ParamTable* table,
                                     const Badam* badam, float weight_decay, int rank, int procs, size_t shard) {
    char why[256];
    if (!optim_config_check(cfg, why, sizeof why)) ls_fatal("%s", why);
    if (badam != NULL && procs > 1 && shard > 0) ls_fatal("optimizer: BAdam with ZeRO-1 is not supported yet");
    memset(e, 0, sizeof *e);
    e->cfg = *cfg;
    e->table = table;
    e->badam = badam;
    e->weight_decay = weight_decay;
    e->rank = rank;
    e->procs = procs < 1 ? 1 : procs;
    e->shard = procs > 1 ? shard : 0;
    e->view = OPTIM_VIEW_NONE;
    if (badam != NULL) {  // the largest block's state (int8 and LAMB tables differ per block)
        for (int b = 0; b < badam->num_blocks; b++) {
            size_t n, bytes = optim_engine_view_bytes(e, b, &n);
            if (bytes > e->bytes) e->bytes = bytes;
            if (n > e->max_elems) e->max_elems = n;
        }
    } else {
        e->bytes = optim_engine_view_bytes(e, OPTIM_VIEW_MODEL, &e->max_elems);
    }
}

// The bytes of the state block for these settings, without keeping an engine (the memory model).
static inline size_t optim_engine_bytes(const OptimConfig* cfg, const ParamTable* table, const Badam* badam,
                                        int rank, int procs, size_t shard) {
    OptimEngine e;
    optim_engine_init(&e, cfg, table, badam, 0.0f, rank, procs, shard);
    return e.bytes;
}

// The view a training step updates: its BAdam block, or the whole model (shard).
static inline int optim_engine_view_of_step(const OptimEngine* e, int step) {
    return e->badam != NULL ? badam_block_at(e->badam, step) : OPTIM_VIEW_MODEL;
}

// Makes `view` current over host memory, zeroed (a view with no elements leaves st.n 0).
static inline void optim_engine_set_view_cpu(OptimEngine* e, int view) {
    if (e->memory == NULL && e->bytes > 0) ls_fatal("optimizer: the engine's state block is not allocated");
    optim_state_free(&e->st);  // the tables only: the memory is the engine's caller's
    OptimSegment* segs;
    size_t n;
    int nseg = optim_engine_view_table(e, view, &segs, &n);
    if (nseg > 0) {
        optim_state_init(&e->st, &e->cfg, segs, nseg, n, e->memory);
    } else {
        memset(&e->st, 0, sizeof e->st);
        e->st.cfg = e->cfg;
    }
    free(segs);
    e->view = view;
}

// The key of stochastic rounding (bf16 state, bf16 parameters): the step counter of a BAdam view
// restarts at each switch, so its key also mixes in the training step (no two steps share bits).
static inline void optim_engine_seed_step(OptimEngine* e, const OptimPlan* plan) {
    e->st.cfg.seed = e->badam != NULL ? srng_step_key(e->cfg.seed, plan->step + 1) : e->cfg.seed;
}

// Before a step's update: the plan's view becomes current (zeroed) when it changes or the plan
// resets the state; otherwise the state continues.
static inline void optim_engine_begin_step_cpu(OptimEngine* e, const OptimPlan* plan) {
    const int view = plan->block >= 0 ? plan->block : OPTIM_VIEW_MODEL;
    if (view != e->view) {
        optim_engine_set_view_cpu(e, view);
    } else if (plan->reset && e->st.n > 0) {
        optim_state_zero(&e->st);
    }
    optim_engine_seed_step(e, plan);
}

// The step's hyperparameters (the trainers' AdamWHyper: the flags' values, or a test's): betas,
// eps and weight decay follow them. Returns 1 when the current view's weight decay changed (a
// device state must upload its segment table again).
static inline int optim_engine_set_hyper(OptimEngine* e, float beta1, float beta2, float eps, float weight_decay) {
    e->cfg.beta1 = e->st.cfg.beta1 = beta1;
    e->cfg.beta2 = e->st.cfg.beta2 = beta2;
    e->cfg.eps = e->st.cfg.eps = eps;
    if (weight_decay == e->weight_decay) return 0;
    if (!(weight_decay >= 0.0f && isfinite(weight_decay))) ls_fatal("optimizer: weight decay %g (finite, >= 0 expected)", weight_decay);
    e->weight_decay = weight_decay;
    if (e->st.nseg == 0) return 0;
    OptimSegment* segs;
    size_t n;
    int nseg = optim_engine_view_table(e, e->view, &segs, &n);
    for (int s = 0; s < nseg && s < e->st.nseg; s++) e->st.segs[s].weight_decay = segs[s].weight_decay;
    free(segs);
    return 1;
}

// One update of the current view (step counts from 1 since the view was zeroed).
static inline void optim_engine_step_cpu(OptimEngine* e, float* params, const float* grads, float lr, int step,
                                         float grad_scale) {
    if (e->st.n == 0) return;  // a ZeRO-1 shard of padding only
    optim_step_cpu(&e->st, params, grads, lr, step, grad_scale);
}

static inline void optim_engine_free_cpu(OptimEngine* e) {
    optim_state_free(&e->st);  // its tables (and the 64 bytes it took for a state of none)
    e->view = OPTIM_VIEW_NONE;
}

// The tag a state file records for the configuration (what must match to continue its state).
static inline uint32_t optim_engine_tag(const OptimConfig* c) {
    const int has_momentum = c->kind == OPT_SGD && c->momentum != 0.0f;
    return (uint32_t)c->kind | (uint32_t)c->state << 4 | (uint32_t)(c->amsgrad != 0) << 8 |
           (uint32_t)has_momentum << 9 | (uint32_t)(c->nesterov != 0) << 10;
}

// "adamw, int8 state, AMSGrad" for a tag (messages).
static inline void optim_engine_tag_describe(uint32_t tag, char* buf, size_t size) {
    snprintf(buf, size, "%s, %s state%s%s%s", optim_kind_name((OptimKind)(tag & 15u)),
             optim_precision_name((OptimStatePrecision)(tag >> 4 & 15u)), tag >> 8 & 1u ? ", AMSGrad" : "",
             tag >> 9 & 1u ? ", momentum" : "", tag >> 10 & 1u ? ", Nesterov" : "");
}

#endif // LLMC_OPTIM_ENGINE_H

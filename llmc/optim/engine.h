/*
 engine.h: the optimizer engine that both trainers drive; plain C (the device side of the same
 engine: optim_engine_set_view_device in llmc/optim/engine.cuh).

 One engine holds every optimizer and state precision (llmc/optim/state.h) in one block of memory,
 and the placements are views of it (llmc/optim/views.h): the step's segment table says which
 elements the state covers and where their parameters are.
   whole model    one segment per tensor slice, the state covers all parameters
   ZeRO-1         the table cut to this process's part of it (optim_engine_view_parts: equal
                  shards [rank * shard, (rank + 1) * shard), or for Muon cut around whole
                  matrices); the step's gradients are the reduced part, the parameters the model's
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
 ZeRO-1 with BAdam: the block's compact elements are sharded (optim_engine_view_shard). LAMB under
 ZeRO-1 needs each tensor's sums of squares over all shards: the trainer gives the engine a sum over
 the processes (optim_engine_set_reduce), which the views' states call once per step.
 --offload (GPU): the view's block in pinned host memory, stepped in chunks (below, and
 llmc/optim/offload.cuh); the chunks' copies are plain C here so that the CPU tests check them.
*/
#ifndef LLMC_OPTIM_ENGINE_H
#define LLMC_OPTIM_ENGINE_H

#include <stddef.h>
#include <string.h>
#include <time.h>
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
    size_t work_bytes;        // the step's scratch (Muon): the largest view's optim_state_work_bytes
    void* work;               // (work_bytes) host memory; the caller's, as memory (never saved)
    size_t max_elems;         // elements of the largest view
    void* memory;             // the block (host, or device memory for the GPU trainer); the caller's
    int view;                 // the current view: a BAdam block, OPTIM_VIEW_MODEL or OPTIM_VIEW_NONE
    size_t* parts;            // ZeRO-1: the current view's parts (procs + 1: optim_engine_view_parts), else NULL
    OptimState st;            // the current view's state, carved from memory (n 0: nothing to update)
    OptimReduce reduce;       // ZeRO-1 with LAMB: sums over the processes (optim_engine_set_reduce)
    OptimGemm gemm;           // Muon's matrix multiply on the host (optim_engine_set_gemm)
    OptimGemmBatched gemm_batched;  // and on the device (optim_engine_set_gemm_batched), in elements of
    int gemm_elem;                  // gemm_elem bytes (the parameters')
} OptimEngine;

// The segment table of a view, whole: BAdam block `block` (its slices back to back), or
// (OPTIM_VIEW_MODEL) the whole model. Returns the count; *segs is malloc'd (free it), *n the
// view's elements.
static inline int optim_engine_view_whole(const OptimEngine* e, int block, OptimSegment** segs, size_t* n) {
    const ParamTable* pt = e->table;
    int nseg;
    if (block >= 0) {
        BadamSlice slices[BADAM_MAX_SLICES];
        int k = badam_block_slices(e->badam, pt, block, slices);
        *segs = (OptimSegment*)mallocCheck((size_t)(k > 0 ? k : 1) * sizeof(OptimSegment));
        nseg = optim_view_badam(pt, slices, k, e->weight_decay, *segs, n);
    } else {
        nseg = optim_segments_count_layers(pt);
        *segs = (OptimSegment*)mallocCheck((size_t)nseg * sizeof(OptimSegment));
        optim_segments_build_layers(pt, e->weight_decay, *segs);
        *n = pt->total;
    }
    return nseg;
}

static inline int optim_engine_zero(const OptimEngine* e) { return e->procs > 1 && e->shard > 0; }

// ZeRO-1's parts of a view (llmc/optim/views.h optim_view_parts; procs + 1 entries): process r
// updates the view's elements [parts[r], parts[r + 1]), and the gradient collectives move them.
// Returns 1 when the parts are equal shards. ZeRO-1 off: one part, the whole view.
static inline int optim_engine_view_parts(const OptimEngine* e, int view, size_t* parts) {
    OptimSegment* segs;
    size_t n;
    const int nseg = optim_engine_view_whole(e, view, &segs, &n);
    int even = 1;
    if (optim_engine_zero(e)) {
        even = optim_view_parts(&e->cfg, segs, nseg, n, e->procs, parts);
    } else {
        parts[0] = 0;
        parts[1] = n;
    }
    free(segs);
    return even;
}

// ZeRO-1's shard of a view: the elements of its largest part (0: ZeRO-1 off); the gradients hold
// it times the process count (every part fits: the equal shards' padding, or Muon's cuts).
static inline size_t optim_engine_view_shard(const OptimEngine* e, int view) {
    if (!optim_engine_zero(e)) return 0;
    if (e->cfg.kind != OPT_MUON && e->cfg.kind != OPT_ADAM_MINI) {
        if (view < 0) return e->shard;
        return zero_shard_elems(badam_block_elems(e->badam, e->table, view), e->procs);
    }
    size_t* parts = (size_t*)mallocCheck(((size_t)e->procs + 1) * sizeof(size_t));
    optim_engine_view_parts(e, view, parts);
    size_t most = 0;
    for (int r = 0; r < e->procs; r++) {
        if (parts[r + 1] - parts[r] > most) most = parts[r + 1] - parts[r];
    }
    free(parts);
    return most;
}

// ZeRO-1's buffers: the gradients (and without BAdam the parameters) hold every part of the
// largest view: zero_elems elements (equal shards: the largest shard times the processes, the
// padding included; Muon: the view's elements). 0: ZeRO-1 off.
static inline size_t optim_engine_zero_elems(const OptimEngine* e) {
    if (!optim_engine_zero(e)) return 0;
    size_t most = 0;
    size_t* parts = (size_t*)mallocCheck(((size_t)e->procs + 1) * sizeof(size_t));
    const int views = e->badam != NULL ? e->badam->num_blocks : 1;
    for (int v = 0; v < views; v++) {
        optim_engine_view_parts(e, e->badam != NULL ? v : OPTIM_VIEW_MODEL, parts);
        if (parts[e->procs] > most) most = parts[e->procs];
    }
    free(parts);
    return most;
}

// The segment table of a view (optim_engine_view_whole), with ZeRO-1 cut to this process's part
// of it, rebased to its first element. Returns the count (0: the view is empty here, a process
// whose part is padding only or, for Muon, nothing); *segs is malloc'd (free it), *n the elements
// the state covers.
static inline int optim_engine_view_table(const OptimEngine* e, int block, OptimSegment** segs, size_t* n) {
    OptimSegment* whole;
    int nseg = optim_engine_view_whole(e, block, &whole, n);
    if (optim_engine_zero(e)) {
        size_t* parts = (size_t*)mallocCheck(((size_t)e->procs + 1) * sizeof(size_t));
        optim_view_parts(&e->cfg, whole, nseg, *n, e->procs, parts);
        OptimSegment* cut = (OptimSegment*)mallocCheck((size_t)(nseg > 0 ? nseg : 1) * sizeof(OptimSegment));
        nseg = optim_segments_cut(whole, nseg, parts[e->rank], parts[e->rank + 1], cut);
        free(parts);
        free(whole);
        whole = cut;
        *n = nseg > 0 ? whole[nseg - 1].offset + whole[nseg - 1].count : 0;
    }
    *segs = whole;
    return nseg;
}

static inline size_t optim_engine_view_bytes(const OptimEngine* e, int block, size_t* n, size_t* work) {
    OptimSegment* segs;
    int nseg = optim_engine_view_table(e, block, &segs, n);
    size_t bytes = nseg > 0 ? optim_state_bytes(&e->cfg, segs, nseg, *n) : 0;
    *work = nseg > 0 ? optim_state_work_bytes(&e->cfg, segs, nseg) : 0;
    free(segs);
    return bytes;
}

// Sets e up (no memory yet: e->bytes says how much the caller allocates into e->memory). badam
// NULL: BAdam off; procs > 1 with shard > 0: ZeRO-1. Fatal on an invalid configuration.
static inline void optim_engine_init(OptimEngine* e, const OptimConfig* cfg, const ParamTable* table,
                                     const Badam* badam, float weight_decay, int rank, int procs, size_t shard) {
    char why[256];
    if (!optim_config_check(cfg, why, sizeof why)) ls_fatal("%s", why);
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
            size_t n, work, bytes = optim_engine_view_bytes(e, b, &n, &work);
            if (bytes > e->bytes) e->bytes = bytes;
            if (n > e->max_elems) e->max_elems = n;
            if (work > e->work_bytes) e->work_bytes = work;
        }
    } else {
        e->bytes = optim_engine_view_bytes(e, OPTIM_VIEW_MODEL, &e->max_elems, &e->work_bytes);
    }
}

// ZeRO-1's largest part over the views (BAdam: its blocks'; else the whole model's): the CPU
// trainer's buffer of the reduced gradients (the gradients themselves: optim_engine_zero_elems).
static inline size_t optim_engine_max_shard(const OptimEngine* e) {
    if (e->badam == NULL) return optim_engine_view_shard(e, OPTIM_VIEW_MODEL);
    size_t m = 0;
    for (int b = 0; b < e->badam->num_blocks; b++) {
        size_t sh = optim_engine_view_shard(e, b);
        if (sh > m) m = sh;
    }
    return m;
}

// The sums over the processes that LAMB's trust ratios need under ZeRO-1 (a tensor's pieces lie in
// several shards): hook(ctx, x, n) adds x over the processes in place (llmc/dist/comm.h:
// comm_sum_hook). Set before the first view; other optimizers and one process never call it.
static inline void optim_engine_set_reduce(OptimEngine* e, void (*hook)(void* ctx, double* x, int n), void* ctx) {
    e->reduce.hook = hook;
    e->reduce.ctx = ctx;
    int nt = optim_segments_count_layers(e->table);  // the whole model's tensor ids, or BAdam's slices'
    e->reduce.ntensors = nt > BADAM_MAX_SLICES ? nt : BADAM_MAX_SLICES;
}

// Muon's Newton-Schulz products on the host (the CPU trainer: OpenBLAS's sgemm); the current view
// and every later one use it.
static inline void optim_engine_set_gemm(OptimEngine* e, OptimGemm gemm) {
    e->gemm = gemm;
    e->st.gemm = gemm;
}

// The same on the device (the GPU trainer: matmul_gemm), whose matrices hold elem-byte values
// (the parameters' type); e->work is then device memory of optim_engine_device_work_bytes.
static inline void optim_engine_set_gemm_batched(OptimEngine* e, OptimGemmBatched gemm, int elem) {
    e->gemm_batched = gemm;
    e->gemm_elem = elem;
    e->st.gemm_batched = gemm;
    e->st.gemm_elem = elem;
}

// Muon's GPU scratch over the views (muon_device_work: elements of elem bytes and fp32 floats).
static inline size_t optim_engine_device_work_bytes(const OptimEngine* e, int elem) {
    if (e->cfg.kind != OPT_MUON) return 0;
    size_t most = 0;
    const int views = e->badam != NULL ? e->badam->num_blocks : 1;
    for (int b = 0; b < views; b++) {
        OptimSegment* segs;
        size_t n, elems = 0, floats = 0;
        const int nseg = optim_engine_view_table(e, e->badam != NULL ? b : OPTIM_VIEW_MODEL, &segs, &n);
        if (nseg > 0) muon_device_work(segs, nseg, e->cfg.muon_qkv_joined, &elems, &floats);
        free(segs);
        const size_t bytes = elems * (size_t)elem + floats * sizeof(float);
        if (bytes > most) most = bytes;
    }
    return most;
}

// Whether the current view's steps sum over the processes (then every process steps, even one whose
// shard of the view is empty, so that the sums pair up).
static inline int optim_engine_reduces(const OptimEngine* e) {
    return e->cfg.kind == OPT_LAMB && e->reduce.hook != NULL && optim_engine_view_shard(e, e->view) > 0;
}

// A process with nothing to update takes part in the sums of the others' step with zeros.
static inline void optim_engine_reduce_idle(const OptimEngine* e) {
    if (!optim_engine_reduces(e)) return;
    double* t = (double*)calloc(2 * (size_t)e->reduce.ntensors, sizeof(double));
    if (t == NULL) ls_fatal("optimizer: out of memory for the tensor sums");
    e->reduce.hook(e->reduce.ctx, t, 2 * e->reduce.ntensors);
    free(t);
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

// How a view's state is set up over the engine's block: optim_state_init (host memory) or
// optim_state_attach_device (llmc/optim/engine.cuh).
typedef void (*OptimStateSetup)(OptimState* st, const OptimConfig* cfg, const OptimSegment* segs, int nseg, size_t n,
                                void* memory);

// Makes `view` current over the engine's block with `setup` (zeroed; a view with no elements
// leaves st.n 0: nothing to carve, nothing to update). st's old tables are freed by the caller.
static inline void optim_engine_set_view_with(OptimEngine* e, int view, OptimStateSetup setup) {
    if (e->memory == NULL && e->bytes > 0) ls_fatal("optimizer: the engine's state block is not allocated");
    OptimSegment* segs;
    size_t n;
    int nseg = optim_engine_view_table(e, view, &segs, &n);
    memset(&e->st, 0, sizeof e->st);
    e->st.cfg = e->cfg;
    e->view = view;
    if (optim_engine_zero(e)) {  // (the trainers' collectives move the parts)
        if (e->parts == NULL) e->parts = (size_t*)mallocCheck(((size_t)e->procs + 1) * sizeof(size_t));
        optim_engine_view_parts(e, view, e->parts);
    }
    if (nseg > 0) {
        setup(&e->st, &e->cfg, segs, nseg, n, e->memory);
        if (optim_engine_reduces(e)) e->st.reduce = e->reduce;
        e->st.gemm = e->gemm;
        e->st.gemm_batched = e->gemm_batched;
        e->st.gemm_elem = e->gemm_elem;
        e->st.work = (float*)e->work;
    }
    free(segs);
}

// Makes `view` current over host memory.
static inline void optim_engine_set_view_cpu(OptimEngine* e, int view) {
    optim_state_free(&e->st);  // the tables only: the memory is the engine's caller's
    optim_engine_set_view_with(e, view, optim_state_init);
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

// ----------------------------------------------------------------------------
// the step: the CPU's one entry point, and the engine's

// One step (step = 1, 2, ... since the state was zeroed) of the configured optimizer over all
// parameters: params (n) updated in place from grads (n) times grad_scale (the clip scale).
static inline void optim_step_cpu(OptimState* st, float* params, const float* grads, float lr, int step,
                                      float grad_scale) {
    if (step < 1) ls_fatal("optimizer: step %d (steps count from 1)", step);
    if (!isfinite(lr)) ls_fatal("optimizer: learning rate %g", lr);
    if (st->on_device) ls_fatal("optimizer: optim_step_cpu on a device state (use optim_step_gpu)");
    const OptimConfig* c = &st->cfg;
    const OptimStepArgs a = optim_step_args(c, lr, step);
    const OptimSlots slots = optim_state_slots(st);
    const OptimTable t = {st->segs, st->nseg, st->block0, st->small_off, st->q8_index, st->mini0, st->params_at_offset};
    if (c->kind != OPT_MUON) {
        optim_update_cpu(c, &a, &t, &slots, params, grads, grad_scale, st->partials, st->trust,
                         st->reduce.hook ? &st->reduce : NULL);
        return;
    }
    if (st->gemm == NULL) ls_fatal("optimizer: Muon needs a matrix multiply (optim_engine_set_gemm)");
    if (st->work == NULL && optim_state_work_bytes(c, st->segs, st->nseg) > 0) {  // (none: no matrices here)
        ls_fatal("optimizer: Muon's scratch is not allocated (OptimEngine.work)");
    }
    const MuonBuffers M = {slots, &t, st->adam_off, st->work};
    muon_update_cpu(st->gemm, &M, params, grads, c, &a, grad_scale);
}

// One update of the current view (step counts from 1 since the view was zeroed).
static inline void optim_engine_step_cpu(OptimEngine* e, float* params, const float* grads, float lr, int step,
                                         float grad_scale) {
    if (e->st.n == 0) {  // a ZeRO-1 shard of padding only
        optim_engine_reduce_idle(e);
        return;
    }
    optim_step_cpu(&e->st, params, grads, lr, step, grad_scale);
}

// --offload cpu's host step around the update (llmc/optim/offload_cpu.cuh), bf16 side: the
// gradients widened to fp32, and the master weights of the view's segments [s0, s1) (by offset)
// rounded to the bf16 parameters (by offset too) with the GPU kernels' bits: srng_bits of the
// global index, stream 0.
static inline void optim_host_widen_bf16(const uint16_t* g16, float* g, size_t n) {
    #pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) g[i] = bf16_bits_to_float(g16[i]);
}
static inline void optim_host_round_bf16(const OptimState* st, int s0, int s1, const float* master, uint16_t* out,
                                         unsigned long long key, int stochastic) {
    #pragma omp parallel
    for (int s = s0; s < s1; s++) {  // (one team for the segments: they write apart, no barrier)
        const OptimSegment* sg = &st->segs[s];
        const float* p = master + sg->offset;
        uint16_t* o = out + sg->offset;
        if (!stochastic) {
            #pragma omp for simd schedule(static) nowait
            for (size_t k = 0; k < sg->count; k++) o[k] = bf16_bits_round_nearest(p[k]);
            continue;
        }
        #pragma omp for simd schedule(static) nowait
        for (size_t k = 0; k < sg->count; k++) o[k] = bf16_bits_round_stochastic(p[k], srng_bits(key, sg->param + k, 0));
    }
}

// The host step timed on its own (adamw_bench --host-step, and the GPU trainer's --memory-report
// prediction of --offload cpu): an engine over table pt (the whole model, zeroed state), its master
// weights, fp32 gradients and bf16 transfer buffer, first-touched by the threads that use them;
// Muon's Newton-Schulz products through gemm (NULL for the other rules), in scratch of its own.
typedef struct {
    OptimEngine e;
    size_t n;
    float* master;   // (n)
    float* g;        // (n)
    uint16_t* xfer;  // (n) the bf16 gradients in, the parameters out
} OptimHostTimer;

static inline double optim_host_timer_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline void optim_host_timer_init(OptimHostTimer* h, const OptimConfig* cfg, const ParamTable* pt,
                                         OptimGemm gemm) {
    optim_engine_init(&h->e, cfg, pt, NULL, 0.1f, 0, 1, 0);
    const size_t n = h->n = pt->total;
    h->e.memory = mallocCheck(h->e.bytes + 64);
    h->e.work = h->e.work_bytes > 0 ? mallocCheck(h->e.work_bytes) : NULL;
    optim_engine_set_gemm(&h->e, gemm);
    h->master = (float*)mallocCheck(n * sizeof(float));
    h->g = (float*)mallocCheck(n * sizeof(float));
    h->xfer = (uint16_t*)mallocCheck(n * sizeof(uint16_t));
    unsigned char* st = (unsigned char*)h->e.memory;
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        h->master[i] = 0.01f * (float)(i % 101);
        h->g[i] = 0.0f;
        h->xfer[i] = bf16_bits_round_nearest(0.001f * (float)(i % 37) - 0.018f);
    }
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < h->e.bytes; i++) st[i] = 0;
    optim_engine_set_view_cpu(&h->e, OPTIM_VIEW_MODEL);
    h->e.st.params_at_offset = 1;
}

// One host step (step counts from 1): sec[0] the widening, sec[1] the update, sec[2] the rounding
// (bf16: 0 and 0 for an fp32 build, which moves fp32 both ways).
static inline void optim_host_timer_step(OptimHostTimer* h, int step, int bf16, double sec[3]) {
    const double t0 = optim_host_timer_now();
    if (bf16) optim_host_widen_bf16(h->xfer, h->g, h->n);
    const double t1 = optim_host_timer_now();
    optim_engine_step_cpu(&h->e, h->master, h->g, 1e-4f, step, 1.0f);
    const double t2 = optim_host_timer_now();
    if (bf16) optim_host_round_bf16(&h->e.st, 0, h->e.st.nseg, h->master, h->xfer, optim_step_args(&h->e.st.cfg, 1e-4f, step).rng_key, 1);
    const double t3 = optim_host_timer_now();
    sec[0] = t1 - t0;
    sec[1] = t2 - t1;
    sec[2] = t3 - t2;
}

static inline void optim_engine_free_cpu(OptimEngine* e);
static inline void optim_host_timer_free(OptimHostTimer* h) {
    optim_engine_free_cpu(&h->e);
    free(h->e.memory);
    free(h->e.work);
    free(h->master);
    free(h->g);
    free(h->xfer);
}

static inline void optim_engine_free_cpu(OptimEngine* e) {
    optim_state_free(&e->st);  // its tables (and the 64 bytes it took for a state of none)
    free(e->parts);
    e->parts = NULL;
    e->view = OPTIM_VIEW_NONE;
}

// ----------------------------------------------------------------------------
// offload: a view in chunks (llmc/optim/offload.cuh streams them through device staging)
//
// The view's state stays in its block (pinned host memory); chunk k is the view's elements
// [bounds[k], bounds[k + 1]) with the table cut there (optim_segments_cut: offsets rebased, params
// global), carved as a state of its own in device staging. The cuts follow optim_cut_of, so every
// int8 absmax block, LAMB tensor and Adam-mini block lies in one chunk, and a chunk's
// per-element, per-block, per-small-element and per-segment state is one contiguous range of each
// of the view's buffers: optim_chunk_copies lists them, and the chunked steps give the view's step
// bit for bit.

// One copy between the view's block and a chunk's block (byte offsets from each block's start).
typedef struct {
    size_t src, dst, bytes;
    int upload_only;  // constant state (the 8-bit maps): never copied back
} OptimCopy;

#define OPTIM_MAX_COPIES 32

// --offload: the elements asked per chunk for want (--offload-chunk) of n: at most n, a multiple of
// 32 (every chunk starts 128-bit aligned).
static inline size_t optim_chunk_elems(size_t n, size_t want) {
    size_t c = want < n ? want : n;
    return (c + 31) / 32 * 32;
}

// Chunk boundaries of a table over n elements: chunks of `chunk` elements (a multiple of 32),
// each end moved up to the next place the table may be cut (int8: an OPT_BLOCK boundary of its
// segment; LAMB: the segment's end). Returns the count; *bounds (count + 1 entries) malloc'd.
static inline int optim_chunk_bounds(const OptimConfig* cfg, const OptimSegment* segs, int nseg, size_t n, size_t chunk,
                                     size_t** bounds) {
    if (chunk == 0) ls_fatal("optimizer: offload chunks of 0 elements");
    const OptimCut cut = optim_cut_of(cfg);
    size_t cap = n / chunk + (size_t)nseg + 2, k = 0;
    size_t* b = (size_t*)mallocCheck(cap * sizeof(size_t));
    b[k++] = 0;
    for (size_t a = 0; a < n;) {
        size_t x = a + chunk < n ? optim_cut_snap(segs, nseg, a + chunk, cut) : n;
        if (x > n) x = n;
        if (k >= cap) ls_fatal("optimizer: offload chunk table overflow");
        b[k++] = x;
        a = x;
    }
    *bounds = b;
    return (int)k - 1;
}

// The largest chunk's state bytes and elements (the device staging) of a table cut into chunks.
static inline void optim_chunks_size(const OptimConfig* cfg, const OptimSegment* segs, int nseg, size_t n, size_t chunk,
                                     size_t* max_bytes, size_t* max_elems) {
    size_t* bounds;
    int nc = optim_chunk_bounds(cfg, segs, nseg, n, chunk, &bounds);
    OptimSegment* part = (OptimSegment*)mallocCheck((size_t)nseg * sizeof(OptimSegment));
    for (int k = 0; k < nc; k++) {
        int np = optim_segments_cut(segs, nseg, bounds[k], bounds[k + 1], part);
        size_t bytes = optim_state_bytes(cfg, part, np, bounds[k + 1] - bounds[k]);
        if (bytes > *max_bytes) *max_bytes = bytes;
        if (bounds[k + 1] - bounds[k] > *max_elems) *max_elems = bounds[k + 1] - bounds[k];
    }
    free(part);
    free(bounds);
}

// The staging an offloaded engine needs: the largest chunk of any of its views.
static inline void optim_engine_offload_size(const OptimEngine* e, size_t chunk, size_t* max_bytes, size_t* max_elems) {
    *max_bytes = *max_elems = 0;
    const int first = e->badam != NULL ? 0 : OPTIM_VIEW_MODEL, last = e->badam != NULL ? e->badam->num_blocks - 1 : OPTIM_VIEW_MODEL;
    for (int v = first; v <= last; v++) {
        OptimSegment* segs;
        size_t n;
        int nseg = optim_engine_view_table(e, v, &segs, &n);
        if (nseg > 0) optim_chunks_size(&e->cfg, segs, nseg, n, chunk, max_bytes, max_elems);
        free(segs);
    }
}

// Elements before x of the view's small (fp32-kept) int8 segments, and its blocks before x (x at a
// block boundary of its segment, or a segment's start).
static inline size_t optim_smalls_before(const OptimState* st, size_t x) {
    size_t k = 0;
    for (int s = 0; s < st->nseg; s++) {
        if (st->small_off[s] == OPT_NOT_SMALL || x <= st->segs[s].offset) continue;
        size_t in = x - st->segs[s].offset;
        k += in < st->segs[s].count ? in : st->segs[s].count;
    }
    return k;
}
static inline size_t optim_blocks_before(const OptimState* st, size_t x) {
    for (int s = 0; s < st->nseg; s++) {
        if (x < st->segs[s].offset + st->segs[s].count) {
            return st->block0[s] + (x > st->segs[s].offset ? (x - st->segs[s].offset + OPT_BLOCK - 1) / OPT_BLOCK : 0);
        }
    }
    return st->nblocks;
}
// 4-bit: the floats of v's scales (one set) of the segments before x (a segment's start).
static inline size_t optim_rank1_before(const OptimState* st, size_t x) {
    size_t k = 0;
    for (int s = 0; s < st->nseg && st->segs[s].offset < x; s++) {
        if (st->rank1_off[s] != OPT_NOT_SMALL) k += optim_rank1_floats(&st->segs[s]);
    }
    return k;
}
// Adam-mini: its blocks before x (x at a block boundary: optim_cut_of's cuts).
static inline size_t optim_minis_before(const OptimState* st, size_t x) {
    for (int s = 0; s < st->nseg; s++) {
        const OptimSegment* g = &st->segs[s];
        if (x < g->offset + g->count) {
            const size_t first = optim_mini_index(g, g->trel);
            return st->mini0[s] + (x > g->offset ? optim_mini_index(g, g->trel + (x - g->offset)) - first : 0);
        }
    }
    return st->nmini;
}
static inline int optim_segment_at(const OptimState* st, size_t x) {
    for (int s = 0; s < st->nseg; s++) {
        if (st->segs[s].offset == x) return s;
    }
    return st->nseg;
}

// Appends the copy of `count` elements of esize bytes: from element `first` of the view's buffer
// wf (block wb) to the start of the chunk's buffer pf (block pb). Returns the new count.
static inline int optim_copy_add(OptimCopy* out, int k, uintptr_t wb, const void* wf, size_t first, uintptr_t pb,
                                 const void* pf, size_t count, size_t esize, int upload_only) {
    if (pf == NULL || count == 0) return k;
    if (wf == NULL || k >= OPTIM_MAX_COPIES) ls_fatal("optimizer: a chunk's state does not match its view's");
    out[k].src = (uintptr_t)wf - wb + first * esize;
    out[k].dst = (uintptr_t)pf - pb;
    out[k].bytes = count * esize;
    out[k].upload_only = upload_only;
    return k + 1;
}

// The copies that move chunk `part` (elements [a, a + part->n) of the view `whole`, both carved)
// between the two blocks. Returns their count (<= OPTIM_MAX_COPIES).
static inline int optim_chunk_copies(const OptimState* whole, const OptimState* part, size_t a, OptimCopy* out) {
    const uintptr_t wb = (uintptr_t)whole->memory, pb = (uintptr_t)part->memory;
    const size_t bl = optim_blocks_before(whole, a), sm = optim_smalls_before(whole, a);
    int k = 0;
    // per element: fp32, bf16 and int8 moments (Muon's v: its AdamW tensors' elements, packed)
    const void* we[] = {whole->m, whole->v, whole->vmax, whole->m16, whole->v16, whole->vmax16, whole->qm, whole->qv, whole->qvmax};
    const void* pe[] = {part->m, part->v, part->vmax, part->m16, part->v16, part->vmax16, part->qm, part->qv, part->qvmax};
    const size_t es[] = {4, 4, 4, 2, 2, 2, 1, 1, 1};
    const int muon = whole->cfg.kind == OPT_MUON, is_v[] = {0, 1, 0, 0, 1, 0, 0, 1, 0};
    size_t adam_before = 0, adam_blocks = 0;  // (4-bit: v's codes of a tensor in whole blocks; tensors are never cut)
    for (int s = 0; muon && s < whole->nseg && whole->segs[s].offset < a; s++) {  // (a matrix is never cut)
        const size_t in = a - whole->segs[s].offset, c = in < whole->segs[s].count ? in : whole->segs[s].count;
        if (whole->adam_off[s] != OPT_NOT_SMALL) {
            adam_before += c;
            adam_blocks += (c + OPT_BLOCK - 1) / OPT_BLOCK;
        }
    }
    for (int i = 0; i < 9; i++) {
        const int packed = muon && is_v[i];
        k = optim_copy_add(out, k, wb, we[i], packed ? adam_before : a, pb, pe[i], packed ? part->nadam : part->n, es[i], 0);
    }
    // per block: int8 absmax, LAMB's sums of p^2 and of u^2 (after all blocks); per small element
    const float* wk[] = {whole->absmax_m, whole->absmax_v, whole->absmax_vmax, whole->partials,
                         whole->partials ? whole->partials + whole->nblocks : NULL};
    const float* pk[] = {part->absmax_m, part->absmax_v, part->absmax_vmax, part->partials,
                         part->partials ? part->partials + part->nblocks : NULL};
    for (int i = 0; i < 5; i++) k = optim_copy_add(out, k, wb, wk[i], bl, pb, pk[i], part->nblocks, sizeof(float), 0);
    const float* ws[] = {whole->m32, whole->v32, whole->vmax32};
    const float* ps[] = {part->m32, part->v32, part->vmax32};
    for (int i = 0; i < 3; i++) k = optim_copy_add(out, k, wb, ws[i], sm, pb, ps[i], part->nsmall, sizeof(float), 0);
    // 4-bit: codes and m's group absmax per block; v's scales (as stored, then the step's) per segment
    const unsigned char* wq[] = {whole->q4m, whole->q4v, whole->q4vmax};
    const unsigned char* pq[] = {part->q4m, part->q4v, part->q4vmax};
    for (int i = 0; i < 3; i++) {
        const int packed = muon && i == 1;
        k = optim_copy_add(out, k, wb, wq[i], packed ? adam_blocks : bl, pb, pq[i], packed ? part->nadam / OPT_BLOCK : part->nblocks,
                           QUANT4_BLOCK_BYTES, 0);
    }
    k = optim_copy_add(out, k, wb, whole->absmax4_m, bl * QUANT4_GROUPS, pb, part->absmax4_m, part->nblocks * QUANT4_GROUPS,
                       sizeof(float), 0);
    const size_t r1 = optim_rank1_before(whole, a);
    const float* wr[] = {whole->rank1_v, whole->rank1_vmax};
    const float* pr[] = {part->rank1_v, part->rank1_vmax};
    for (int i = 0; i < 2; i++) {
        for (int half = 0; half < 2; half++) {
            k = optim_copy_add(out, k, wb, wr[i], r1 + half * whole->nrank1, pb, pr[i] ? pr[i] + half * part->nrank1 : NULL,
                               part->nrank1, sizeof(float), 0);
        }
    }
    // Adam-mini: v per block
    if (part->vmini != NULL) {
        k = optim_copy_add(out, k, wb, whole->vmini, optim_minis_before(whole, a), pb, part->vmini, part->nmini, sizeof(float), 0);
    }
    // constant (never copied back), per segment
    k = optim_copy_add(out, k, wb, whole->maps, 0, pb, part->maps, QUANT8_MAP_FLOATS, sizeof(float), 1);
    k = optim_copy_add(out, k, wb, whole->map4, 0, pb, part->map4, QUANT4_MAP_FLOATS, sizeof(float), 1);
    return optim_copy_add(out, k, wb, whole->trust, (size_t)optim_segment_at(whole, a), pb, part->trust, (size_t)part->nseg,
                          sizeof(float), 0);
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

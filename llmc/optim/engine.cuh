/*
 engine.cuh: the optimizer on the GPU: its state in device memory (the CPU layout of
 llmc/optim/state.h, carved from one block), the one GPU entry point optim_step_gpu, and the engine
 (llmc/optim/engine.h) with its state block in device memory.

   OptimState st;
   optim_state_init_device(&st, &cfg, segs, nseg, n);        // cudaMalloc + zeroed state
   (or optim_state_attach_device(&st, &cfg, segs, nseg, n, mem) into the caller's block)
   optim_step_gpu(&st, params, master, grads, lr, step, stochastic, d_clip_scale, stream);
   optim_state_free_device(&st);

 optim_step_gpu picks the rule and launches its kernel (llmc/optim/update.cuh: optim_launch; LAMB's
 three passes; Adam-mini's two; Muon, llmc/optim/muon.cuh). The trainer's path: main -> gpt2_update (train_gpt2.cu)
 -> optim_engine_step_gpu -> optim_step_gpu (here) -> optim_launch (update.cuh) -> the kernel.
*/
#ifndef LLMC_OPTIM_ENGINE_CUH
#define LLMC_OPTIM_ENGINE_CUH

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include "llmc/cuda/profile.cuh"
#include "llmc/optim/engine.h"
#include "llmc/optim/muon.cuh"
#include "llmc/optim/state.h"
#include "llmc/optim/update.cuh"

// Zeroes a device state as optim_state_zero does a host one (moments 0, int8 codes of 0,
// the maps, trust ratios 1).
static inline void optim_state_zero_device(OptimState* st, cudaStream_t stream) {
    cudaCheck(cudaMemsetAsync(st->memory, 0, st->bytes, stream));
    if (st->qm != NULL) cudaCheck(cudaMemsetAsync(st->qm, QUANT8_ZERO_SIGNED, st->n, stream));
    if (st->qv != NULL) {  // (Muon: its AdamW tensors' only)
        cudaCheck(cudaMemsetAsync(st->qv, QUANT8_ZERO_UNSIGNED, st->cfg.kind == OPT_MUON ? st->nadam : st->n, stream));
    }
    if (st->qvmax != NULL) cudaCheck(cudaMemsetAsync(st->qvmax, QUANT8_ZERO_UNSIGNED, st->n, stream));
    if (st->q4m != NULL) cudaCheck(cudaMemsetAsync(st->q4m, QUANT4_ZERO_BYTE, st->nblocks * QUANT4_BLOCK_BYTES, stream));
    if (st->map4 != NULL) {
        float h[QUANT4_MAP_FLOATS];
        quant4_signed_map(h);
        cudaCheck(cudaMemcpy(st->map4, h, sizeof h, cudaMemcpyHostToDevice));
    }
    if (st->maps != NULL || st->trust != NULL) {
        float* h = (float*)mallocCheck((QUANT8_MAP_FLOATS + (size_t)st->nseg) * sizeof(float));
        quant8_maps(h, h + 256);
        for (int s = 0; s < st->nseg; s++) h[QUANT8_MAP_FLOATS + s] = 1.0f;
        if (st->maps != NULL) cudaCheck(cudaMemcpy(st->maps, h, QUANT8_MAP_FLOATS * sizeof(float), cudaMemcpyHostToDevice));
        if (st->trust != NULL) cudaCheck(cudaMemcpy(st->trust, h + QUANT8_MAP_FLOATS, (size_t)st->nseg * sizeof(float), cudaMemcpyHostToDevice));
        free(h);
    }
}

// The state of cfg for n parameters in the device block mem (optim_state_bytes(cfg, ...) bytes,
// 16-byte aligned, not owned: the caller frees it), zeroed; the segment and block tables uploaded.
// Fatal on an invalid configuration.
static inline void optim_state_attach_device(OptimState* st, const OptimConfig* cfg, const OptimSegment* segs,
                                                 int nseg, size_t n, void* mem) {
    if (nseg > OPT_MAX_SEGMENTS) ls_fatal("optimizer: %d segments (at most %d on the GPU)", nseg, OPT_MAX_SEGMENTS);
    optim_state_setup(st, cfg, segs, nseg, n, mem, 1);
    st->owns_memory = 0;
    st->on_device = 1;
    cudaCheck(cudaMalloc((void**)&st->d_segs, (size_t)nseg * sizeof(OptimSegment)));
    cudaCheck(cudaMalloc((void**)&st->d_block0, ((size_t)nseg + 1) * sizeof(size_t)));
    cudaCheck(cudaMalloc((void**)&st->d_small_off, (size_t)nseg * sizeof(size_t)));
    cudaCheck(cudaMalloc((void**)&st->d_rank1_off, (size_t)nseg * sizeof(size_t)));
    cudaCheck(cudaMemcpy(st->d_segs, segs, (size_t)nseg * sizeof(OptimSegment), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(st->d_block0, st->block0, ((size_t)nseg + 1) * sizeof(size_t), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(st->d_small_off, st->small_off, (size_t)nseg * sizeof(size_t), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(st->d_rank1_off, st->rank1_off, (size_t)nseg * sizeof(size_t), cudaMemcpyHostToDevice));
    if (st->mini0 != NULL) {
        cudaCheck(cudaMalloc((void**)&st->d_mini0, ((size_t)nseg + 1) * sizeof(size_t)));
        cudaCheck(cudaMemcpy(st->d_mini0, st->mini0, ((size_t)nseg + 1) * sizeof(size_t), cudaMemcpyHostToDevice));
    }
    optim_state_zero_device(st, 0);
    cudaCheck(cudaDeviceSynchronize());
}

// The same in its own cudaMalloc of optim_state_bytes (freed by optim_state_free_device).
static inline void optim_state_init_device(OptimState* st, const OptimConfig* cfg, const OptimSegment* segs,
                                               int nseg, size_t n) {
    void* mem = nullptr;
    const size_t bytes = optim_state_bytes(cfg, segs, nseg, n);
    cudaCheck(cudaMalloc(&mem, bytes > 0 ? bytes : 64)); // plain SGD has no state
    optim_state_attach_device(st, cfg, segs, nseg, n, mem);
    st->owns_memory = 1;
}

static inline void optim_state_free_device(OptimState* st) {
    if (st == NULL || !st->on_device) return;
    muon_plan_free(st);
    cudaCheck(cudaFree(st->d_rank1_off));
    if (st->d_mini0 != NULL) cudaCheck(cudaFree(st->d_mini0));
    st->d_mini0 = NULL;
    cudaCheck(cudaFree(st->d_small_off));
    cudaCheck(cudaFree(st->d_block0));
    cudaCheck(cudaFree(st->d_segs));
    if (st->owns_memory) cudaCheck(cudaFree(st->memory));
    st->on_device = 0;
    st->owns_memory = 0;
    optim_state_free(st); // the host tables
}

// One step (step = 1, 2, ... since the state was zeroed) of st's optimizer over all n parameters.
// params: fp32, or bf16 with master weights (master != NULL: p is read from them, params only
// written) or without; stochastic: bf16 params rounded stochastically, else to nearest even.
// grads fp32 or bf16. d_clip_scale: device pointer to the gradient scale, or NULL for 1. All
// buffers 16-byte aligned. Asynchronous on `stream`.
template <typename Tp, typename Tg>
void optim_step_gpu(OptimState* st, Tp* params, float* master, const Tg* grads, float lr, int step,
                        bool stochastic, const float* d_clip_scale, cudaStream_t stream) {
    PROFILE_SCOPE(PROF_OPTIMIZER, stream);
    static_assert(sizeof(Tp) == 2 || sizeof(Tp) == 4, "params are bf16 or fp32");
    static_assert(sizeof(Tg) == 2 || sizeof(Tg) == 4, "grads are bf16 or fp32");
    if (!st->on_device) ls_fatal("optimizer: optim_step_gpu needs a device state (optim_state_init_device)");
    if (step < 1) ls_fatal("optimizer: step %d (steps count from 1)", step);
    if (!isfinite(lr)) ls_fatal("optimizer: learning rate %g", lr);
    if (st->n == 0) return;
    optim_check_params(params, master, "optimizer");
    optim_check_aligned(grads, "grads");
    const OptimConfig* c = &st->cfg;
    const OptimStepArgs a = optim_step_args(c, lr, step);
    const bool sr = sizeof(Tp) == 2 && stochastic;
#define OPT_RULE(OP) optim_launch<OP, Tp, Tg>(st, params, master, grads, nullptr, a, sr, d_clip_scale, stream)
    switch (c->kind) {
        case OPT_ADAMW:
            if (c->amsgrad) OPT_RULE(OP_AMSGRAD);
            else OPT_RULE(OP_ADAMW);
            break;
        case OPT_SGD:
            if (c->momentum == 0.0f) OPT_RULE(OP_SGD_PLAIN);
            else if (c->nesterov) OPT_RULE(OP_SGD_NESTEROV);
            else OPT_RULE(OP_SGD);
            break;
        case OPT_LION: OPT_RULE(OP_LION); break;
        case OPT_LAMB: lamb_update(st, params, master, grads, a, sr, d_clip_scale, stream); break;
        case OPT_MUON: muon_step_gpu(st, params, master, grads, lr, step, sr, d_clip_scale, stream); break;
        case OPT_ADAM_MINI:  // v per block from the gradients, then the elements with their block's v
            adam_mini_v_launch(st, grads, a, d_clip_scale, stream);
            OPT_RULE(OP_ADAM_MINI);
            break;
        default: ls_fatal("optimizer: unknown kind %d", (int)c->kind);
    }
#undef OPT_RULE
}

// ----------------------------------------------------------------------------
// the engine (llmc/optim/engine.h) with its state block in device memory (e->memory)

// Makes `view` current over the device block, zeroed, its tables uploaded.
static inline void optim_engine_set_view_device(OptimEngine* e, int view) {
    if (e->st.on_device) {
        e->st.owns_memory = 0;
        optim_state_free_device(&e->st);  // the tables; the block is the trainer's
    }
    optim_engine_set_view_with(e, view, optim_state_attach_device);
    e->st.on_device = 1;  // (also an empty view: the step checks it)
}

// Before a step's update, as optim_engine_begin_step_cpu.
static inline void optim_engine_begin_step_device(OptimEngine* e, const OptimPlan* plan, cudaStream_t stream) {
    const int view = plan->block >= 0 ? plan->block : OPTIM_VIEW_MODEL;
    if (view != e->view) {
        optim_engine_set_view_device(e, view);
    } else if (plan->reset && e->st.n > 0) {
        optim_state_zero_device(&e->st, stream);
    }
    optim_engine_seed_step(e, plan);
}

// One update of the current view (optim_step_gpu; nothing for an empty view).
template <typename Tp, typename Tg>
void optim_engine_step_gpu(OptimEngine* e, Tp* params, float* master, const Tg* grads, float lr, int step,
                           bool stochastic, const float* d_clip_scale, cudaStream_t stream) {
    if (e->st.n == 0) {  // a ZeRO-1 shard of padding only
        optim_engine_reduce_idle(e);
        return;
    }
    optim_step_gpu(&e->st, params, master, grads, lr, step, stochastic, d_clip_scale, stream);
}

static inline void optim_engine_free_device(OptimEngine* e) {
    e->st.owns_memory = 0;
    optim_state_free_device(&e->st);
    free(e->parts);
    e->parts = NULL;
    e->view = OPTIM_VIEW_NONE;
}

#endif // LLMC_OPTIM_ENGINE_CUH

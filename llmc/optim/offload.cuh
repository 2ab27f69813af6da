/*
 offload.cuh: the optimizer engine's state in pinned host memory, streamed through device staging
 (--offload). Any optimizer, state precision and view (whole model, ZeRO-1 shard, BAdam block).

 The engine's current view is a host state (optim_engine_set_view_cpu over a cudaMallocHost
 block). optim_offload_build cuts it into chunks (llmc/optim/engine.h: optim_chunk_bounds, at
 places where no int8 block or LAMB tensor is split) and carves each chunk as a device state over
 one of two staging blocks; optim_offload_step then runs, for chunk k on the compute stream, the
 same optim_step_gpu as the on-device engine, while the copy stream brings chunk k + 1 up and takes
 chunk k - 1 down:

   copy stream   up 0 | up 1 |          | down 0, up 2 |          | down 1, up 3 | ...
   compute              | step 0 |          | step 1 |          | step 2 | ...

 The device holds two chunks: for LAMB a chunk holds whole tensors (its trust ratio needs a
 tensor's sums before any of its elements is updated), so the staging is at least twice the largest
 tensor (GPT-2 124M: wte, 31% of the parameters; 2 x 31% of the state instead of all of it).
 The master weights (bf16 parameters) travel with their chunk. The segments keep their
 parameters' global place, which also picks the random bits of stochastic rounding, so the result
 is bit for bit the on-device update's (test_gpt2.cu checks it).
*/
#ifndef LLMC_OPTIM_OFFLOAD_CUH
#define LLMC_OPTIM_OFFLOAD_CUH

#include <stddef.h>
#include <string.h>
#include "llmc/optim/engine.h"
#include "llmc/optim/engine.cuh"

typedef struct {
    size_t chunk;             // elements asked per chunk (the cut rules may make one longer)
    int num_chunks;
    size_t* bounds;           // (num_chunks + 1) in the view's elements
    OptimState* part;         // (num_chunks) chunk k's state over staging[k % 2], tables on the device
    OptimCopy* copies;        // (num_chunks * OPTIM_MAX_COPIES) its copies to and from the view's block
    int* ncopies;
    void* staging[2];         // device: the caller's, optim_engine_offload_size bytes each
    float* master_stage[2];   // device: its master weights (max elements), or NULL
    int view;                 // the engine view the chunks were cut from (OPTIM_VIEW_NONE: none)
    float weight_decay;       // of the chunks' tables
    cudaStream_t copy_stream;
    cudaEvent_t loaded[2], updated[2];
} OptimOffload;

static inline void optim_offload_init(OptimOffload* o, size_t chunk, void* staging0, void* staging1, float* master0,
                                      float* master1) {
    memset(o, 0, sizeof(*o));
    o->chunk = chunk;
    o->staging[0] = staging0;
    o->staging[1] = staging1;
    o->master_stage[0] = master0;
    o->master_stage[1] = master1;
    o->view = OPTIM_VIEW_NONE;
    cudaCheck(cudaStreamCreate(&o->copy_stream));
    for (int i = 0; i < 2; i++) {
        cudaCheck(cudaEventCreateWithFlags(&o->loaded[i], cudaEventDisableTiming));
        cudaCheck(cudaEventCreateWithFlags(&o->updated[i], cudaEventDisableTiming));
    }
}

static inline void optim_offload_free_chunks(OptimOffload* o) {
    for (int k = 0; k < o->num_chunks; k++) {
        o->part[k].owns_memory = 0;
        optim_state_free_device(&o->part[k]);
    }
    free(o->part);
    free(o->copies);
    free(o->ncopies);
    free(o->bounds);
    o->part = NULL;
    o->copies = NULL;
    o->ncopies = NULL;
    o->bounds = NULL;
    o->num_chunks = 0;
    o->view = OPTIM_VIEW_NONE;
}

static inline void optim_offload_free(OptimOffload* o) {
    optim_offload_free_chunks(o);
    for (int i = 0; i < 2; i++) {
        cudaCheck(cudaEventDestroy(o->loaded[i]));
        cudaCheck(cudaEventDestroy(o->updated[i]));
    }
    cudaCheck(cudaStreamDestroy(o->copy_stream));
}

// Cuts the engine's current (host) view into chunks and sets their device states up.
static inline void optim_offload_build(OptimOffload* o, const OptimEngine* e) {
    optim_offload_free_chunks(o);
    const OptimState* w = &e->st;
    o->view = e->view;
    o->weight_decay = e->weight_decay;
    if (w->n == 0) return;
    o->num_chunks = optim_chunk_bounds(&w->cfg, w->segs, w->nseg, w->n, o->chunk, &o->bounds);
    o->part = (OptimState*)callocCheck((size_t)o->num_chunks, sizeof(OptimState));
    o->copies = (OptimCopy*)mallocCheck((size_t)o->num_chunks * OPTIM_MAX_COPIES * sizeof(OptimCopy));
    o->ncopies = (int*)mallocCheck((size_t)o->num_chunks * sizeof(int));
    OptimSegment* segs = (OptimSegment*)mallocCheck((size_t)w->nseg * sizeof(OptimSegment));
    for (int k = 0; k < o->num_chunks; k++) {
        const size_t a = o->bounds[k], b = o->bounds[k + 1];
        int nseg = optim_segments_cut(w->segs, w->nseg, a, b, segs);
        optim_state_attach_device(&o->part[k], &w->cfg, segs, nseg, b - a, o->staging[k % 2]);
        o->part[k].gemm_batched = e->gemm_batched;  // Muon: its products and scratch (one chunk at a time)
        o->part[k].gemm_elem = e->gemm_elem;
        o->part[k].work = (float*)e->work;
        o->ncopies[k] = optim_chunk_copies(w, &o->part[k], a, o->copies + (size_t)k * OPTIM_MAX_COPIES);
    }
    free(segs);
}

// Chunk k's state (and master weights) from the host to its staging, on the copy stream.
static inline void optim_offload_upload(OptimOffload* o, const OptimEngine* e, const float* master_host, int k) {
    const OptimCopy* c = o->copies + (size_t)k * OPTIM_MAX_COPIES;
    const char* host = (const char*)e->st.memory;
    char* dev = (char*)o->part[k].memory;
    for (int i = 0; i < o->ncopies[k]; i++) {
        cudaCheck(cudaMemcpyAsync(dev + c[i].dst, host + c[i].src, c[i].bytes, cudaMemcpyHostToDevice, o->copy_stream));
    }
    if (master_host != NULL) {
        const size_t a = o->bounds[k], n = o->bounds[k + 1] - a;
        cudaCheck(cudaMemcpyAsync(o->master_stage[k % 2], master_host + a, n * sizeof(float), cudaMemcpyHostToDevice,
                                  o->copy_stream));
    }
    cudaCheck(cudaEventRecord(o->loaded[k % 2], o->copy_stream));
}

static inline void optim_offload_download(OptimOffload* o, OptimEngine* e, float* master_host, int k) {
    const OptimCopy* c = o->copies + (size_t)k * OPTIM_MAX_COPIES;
    char* host = (char*)e->st.memory;
    const char* dev = (const char*)o->part[k].memory;
    for (int i = 0; i < o->ncopies[k]; i++) {
        if (c[i].upload_only) continue;
        cudaCheck(cudaMemcpyAsync(host + c[i].src, dev + c[i].dst, c[i].bytes, cudaMemcpyDeviceToHost, o->copy_stream));
    }
    if (master_host != NULL) {
        const size_t a = o->bounds[k], n = o->bounds[k + 1] - a;
        cudaCheck(cudaMemcpyAsync(master_host + a, o->master_stage[k % 2], n * sizeof(float), cudaMemcpyDeviceToHost,
                                  o->copy_stream));
    }
}

// One update of the engine's current view with its state on the host: params (the whole model,
// at the segments' param), grads (the view's, from offset 0), master_host (the view's master
// weights, or NULL), as optim_engine_step_gpu. Returns when the state is back on the host.
// One pass over the chunks: each goes up, `pass` steps it on the compute stream, it comes down.
enum { OFFLOAD_STEP, OFFLOAD_LAMB_MOMENTS, OFFLOAD_LAMB_APPLY };
template <typename Tp, typename Tg>
void optim_offload_pass(OptimOffload* o, OptimEngine* e, Tp* params, float* master_host, const Tg* grads, float lr,
                        int step, bool stochastic, const float* d_clip_scale, cudaStream_t stream, int pass) {
    for (int k = 0; k < o->num_chunks && k < 2; k++) optim_offload_upload(o, e, master_host, k);
    for (int k = 0; k < o->num_chunks; k++) {
        const int buf = k % 2;
        OptimState* part = &o->part[k];
        part->cfg = e->st.cfg;  // this step's betas, eps and stochastic-rounding key
        float* master = master_host ? o->master_stage[buf] : NULL;
        const Tg* g = grads + o->bounds[k];
        cudaCheck(cudaStreamWaitEvent(stream, o->loaded[buf], 0));
        if (pass == OFFLOAD_STEP) {
            optim_step_gpu(part, params, master, g, lr, step, stochastic, d_clip_scale, stream);
        } else {
            const OptimStepArgs a = optim_step_args(&part->cfg, lr, step);
            if (pass == OFFLOAD_LAMB_MOMENTS) lamb_moments(part, (const Tp*)params, (const float*)master, g, a, d_clip_scale, stream);
            else lamb_apply(part, params, master, g, a, stochastic && sizeof(Tp) == 2, d_clip_scale, stream);
        }
        cudaCheck(cudaEventRecord(o->updated[buf], stream));
        cudaCheck(cudaStreamWaitEvent(o->copy_stream, o->updated[buf], 0));
        optim_offload_download(o, e, master_host, k);
        if (k + 2 < o->num_chunks) optim_offload_upload(o, e, master_host, k + 2);  // after this buffer's download
    }
    cudaCheck(cudaStreamSynchronize(o->copy_stream));
}

// One update of the engine's current view with its state on the host (see the banner). LAMB under
// ZeRO-1 streams the chunks twice: the moments and block sums of every chunk first, then the trust
// ratios of the whole view on the host, summed over the processes once (every process makes the
// same one call, whatever its chunks), then the update.
template <typename Tp, typename Tg>
void optim_offload_step(OptimOffload* o, OptimEngine* e, Tp* params, float* master_host, const Tg* grads, float lr,
                        int step, bool stochastic, const float* d_clip_scale, cudaStream_t stream) {
    if (o->view != e->view || o->weight_decay != e->weight_decay) optim_offload_build(o, e);
    if (e->st.n == 0) {  // a ZeRO-1 shard of padding only
        optim_engine_reduce_idle(e);
        return;
    }
    if (e->st.reduce.hook == NULL) {
        optim_offload_pass(o, e, params, master_host, grads, lr, step, stochastic, d_clip_scale, stream, OFFLOAD_STEP);
        return;
    }
    OptimState* w = &e->st;
    optim_offload_pass(o, e, params, master_host, grads, lr, step, stochastic, d_clip_scale, stream, OFFLOAD_LAMB_MOMENTS);
    lamb_trust_reduced(w->segs, w->nseg, w->block0, w->partials, &w->reduce, w->trust);
    optim_offload_pass(o, e, params, master_host, grads, lr, step, stochastic, d_clip_scale, stream, OFFLOAD_LAMB_APPLY);
}

#endif // LLMC_OPTIM_OFFLOAD_CUH

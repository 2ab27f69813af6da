/*
 offload_cpu.cuh: the optimizer step on the host CPU (--offload cpu), ZeRO-Offload's split: the
 fp32 master weights and the optimizer state live in host memory in the CPU optimizer's layout and
 never cross PCIe; each step the gradients go down (2 B per parameter in the 16-bit builds) and the
 updated parameters come up (2 B), and the CPU update of llmc/optim/update.h runs on all cores in
 between. Any rule, any state precision, any view (whole model, ZeRO-1 shard, BAdam block). Muon's
 Newton-Schulz products run through the engine's host matrix multiply (the trainer's: OpenBLAS's
 sgemm, in fp32) in scratch of its own (OptimEngine.work, host memory), where the device's run in
 the parameters' type: Muon's host update is the CPU optimizer's, not the device's bits.

   compute stream   backward: layer by layer, norm --ready--|                           |--wait up--> next step
   copy stream        each layer's grads down ... --down--|     |-up 1-|-up 2-| ... -up 8-|--up--|
   host                                        wait down, widen, update, round 1, round 2, ...

 The master weights are the view's, indexed as its state (OptimState.params_at_offset): the CPU
 update reads and writes them in place, then each is rounded to the parameters' type with the
 random bits the GPU kernels use (srng_bits of the global index, stream 0, the step's key), so the
 parameters that go up are bit for bit the on-device update's (Muon's: see above); they are rounded
 in pieces, each going up while the host rounds the next. The update itself starts once every
 gradient is down: the clip scale needs the global norm. The fp32 build has no master weights: the
 host copy of the view's parameters is the same buffer, and goes up as it is.

 One-step delayed parameter update (--offload-delay 1): the gradients of step t go down after its
 backward pass without waiting (optim_host_download), and the host update of step t runs while
 the GPU works through step t + 1's forward and backward (optim_host_update then
 optim_host_upload, called by the trainer before it waits for that step), which therefore see the
 parameters of step t - 1's update. The device must not overwrite the gradients before they are
 down: the trainer's next step waits for `down` before it zeroes them.
*/
#ifndef LLMC_OPTIM_OFFLOAD_CPU_CUH
#define LLMC_OPTIM_OFFLOAD_CPU_CUH

#include <type_traits>
#include <stddef.h>
#include <string.h>
#include "llmc/cuda/cuda_common.h"
#include "llmc/optim/engine.h"
#include "llmc/optim/srng.h"

typedef struct {
    float* params;          // (max_elems) the view's fp32 parameters: the master weights (host), by offset
    float* grads;           // (max_elems) the step's gradients as fp32 (host)
    void* xfer;             // (max_elems) pinned, 16-bit builds: the gradients down, then the parameters up
    float* scale;           // (1) pinned: the step's clip scale (gpt2_grad_norm's, on the device)
    size_t max_elems;
    int elem;               // bytes of a parameter and of a gradient on the device (2 or 4)
    cudaStream_t copy_stream;
    cudaEvent_t ready, down, up;
    // the update whose gradients are down or on their way (--offload-delay): its learning rate and
    // step, and the view it belongs to
    int pending;
    float pending_lr;
    int pending_step;
    int early;              // this step's gradients already went down piece by piece (optim_host_download_part)
    unsigned long long round_key;  // the last update's key of stochastic rounding (optim_host_upload's)
} OptimHost;

// Host bytes beside the engine's block: the master weights and fp32 gradients of the largest view,
// and in the 16-bit builds the transfer buffer of elem bytes per element.
static inline size_t optim_host_bytes(size_t max_elems, int elem, size_t* master, size_t* grads) {
    *master = max_elems * sizeof(float);
    *grads = max_elems * sizeof(float) + (elem == 4 ? 0 : max_elems * (size_t)elem);
    return *master + *grads;
}

static inline void optim_host_init(OptimHost* h, size_t max_elems, int elem) {
    memset(h, 0, sizeof(*h));
    h->max_elems = max_elems;
    h->elem = elem;
    const size_t n = max_elems > 0 ? max_elems : 1;
    cudaCheck(cudaMallocHost((void**)&h->params, n * sizeof(float)));
    cudaCheck(cudaMallocHost((void**)&h->grads, n * sizeof(float)));
    if (elem != 4) { cudaCheck(cudaMallocHost(&h->xfer, n * (size_t)elem)); }
    cudaCheck(cudaMallocHost((void**)&h->scale, sizeof(float)));
    memset(h->params, 0, n * sizeof(float));
    cudaCheck(cudaStreamCreate(&h->copy_stream));
    cudaCheck(cudaEventCreateWithFlags(&h->ready, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&h->down, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&h->up, cudaEventDisableTiming));
}

static inline void optim_host_free(OptimHost* h) {
    cudaCheck(cudaStreamSynchronize(h->copy_stream));
    cudaCheck(cudaFreeHost(h->params));
    cudaCheck(cudaFreeHost(h->grads));
    if (h->xfer) { cudaCheck(cudaFreeHost(h->xfer)); }
    cudaCheck(cudaFreeHost(h->scale));
    cudaCheck(cudaEventDestroy(h->ready));
    cudaCheck(cudaEventDestroy(h->down));
    cudaCheck(cudaEventDestroy(h->up));
    cudaCheck(cudaStreamDestroy(h->copy_stream));
}

// The gradients of the engine's current view (grads: the view's, from offset 0) and the clip scale
// go down on the copy stream once `stream` has made them; `down` marks their arrival. The update
// (lr, step) is then pending.
template <typename Tg>
void optim_host_download(OptimHost* h, const OptimEngine* e, const Tg* grads, const float* d_clip_scale, float lr,
                         int step, cudaStream_t stream) {
    static_assert(sizeof(Tg) == 2 || sizeof(Tg) == 4, "gradients: 16-bit or fp32");
    if (h->pending) ls_fatal("optimizer: --offload cpu: a host update is still pending");
    const size_t n = e->st.n;
    cudaCheck(cudaEventRecord(h->ready, stream));
    cudaCheck(cudaStreamWaitEvent(h->copy_stream, h->ready, 0));
    void* dst = sizeof(Tg) == 4 ? (void*)h->grads : h->xfer;
    if (n > 0 && !h->early) { cudaCheck(cudaMemcpyAsync(dst, grads, n * sizeof(Tg), cudaMemcpyDeviceToHost, h->copy_stream)); }
    h->early = 0;
    if (d_clip_scale != NULL) {
        cudaCheck(cudaMemcpyAsync(h->scale, d_clip_scale, sizeof(float), cudaMemcpyDeviceToHost, h->copy_stream));
    } else {
        *h->scale = 1.0f;  // (nothing queued reads or writes it now: the last update has consumed it)
    }
    cudaCheck(cudaEventRecord(h->down, h->copy_stream));
    h->pending = 1;
    h->pending_lr = lr;
    h->pending_step = step;
}

// Gradients [offset, offset + n) of the view down now, on the copy stream once `stream` has made
// them (during the backward pass, layer by layer: they cross PCIe while the layers below are
// computed; the caller records `ready` on its stream once per layer, before that layer's pieces);
// the step's optim_host_download then sends only the clip scale. The caller makes sure no host
// update reads the transfer buffer meanwhile (none is pending) and that the pieces cover the view.
template <typename Tg>
void optim_host_download_part(OptimHost* h, const Tg* grads, size_t offset, size_t n) {
    Tg* dst = (Tg*)(sizeof(Tg) == 4 ? (void*)h->grads : h->xfer);
    cudaCheck(cudaMemcpyAsync(dst + offset, grads + offset, n * sizeof(Tg), cudaMemcpyDeviceToHost, h->copy_stream));
    h->early = 1;
}

// The copy stream waits for what `stream` has queued so far (a layer's gradients).
static inline void optim_host_after(OptimHost* h, cudaStream_t stream) {
    cudaCheck(cudaEventRecord(h->ready, stream));
    cudaCheck(cudaStreamWaitEvent(h->copy_stream, h->ready, 0));
}

// An fp16 parameter from fp32 x: the device's optim_round_param<__half, stochastic> (device.cuh)
// on the host, with the same bits (bf16: optim_host_round_bf16 of engine.h).
static inline uint16_t optim_host_round_fp16(float x, unsigned bits, bool stochastic) {
    // fp16_round_stochastic: toward zero, then one ulp away with probability the discarded fraction
    if (!stochastic || !isfinite(x)) { __half_raw r = __float2half_rn(x); return r.x; }
    const __half t = __float2half_rz(x);
    const float lo = __half2float(t);
    __half_raw tr = t;
    if (lo == x) return tr.x;
    __half_raw ar;
    ar.x = (unsigned short)(tr.x + 1);
    const float frac = (x - lo) / (__half2float(__half(ar)) - lo);
    return (float)(bits & 0xffffu) < frac * 65536.0f ? ar.x : tr.x;
}

// The pending update on the host: waits for the gradients, widens them (the 16-bit builds: the
// gradients have the parameters' type Tp) and runs the engine's CPU step over the master weights.
// Their rounding to the parameters waits for optim_host_upload, which sends them piece by piece.
template <typename Tp>
void optim_host_update(OptimHost* h, OptimEngine* e) {
    if (!h->pending) ls_fatal("optimizer: --offload cpu: no host update is pending");
    cudaCheck(cudaEventSynchronize(h->down));
    OptimState* st = &e->st;
    if constexpr (std::is_same<Tp, __half>::value) {
        const __half* g16 = (const __half*)h->xfer;
        #pragma omp parallel for schedule(static)
        for (size_t i = 0; i < st->n; i++) h->grads[i] = __half2float(g16[i]);
    } else if constexpr (sizeof(Tp) == 2) {
        optim_host_widen_bf16((const uint16_t*)h->xfer, h->grads, st->n);
    }
    st->params_at_offset = 1;
    optim_engine_step_cpu(e, h->params, h->grads, h->pending_lr, h->pending_step, *h->scale);
    h->round_key = optim_step_args(&st->cfg, h->pending_lr, h->pending_step).rng_key;
    h->pending = 0;
}

// Segments [s0, s1) of the view's master weights rounded to fp16 parameters in the transfer buffer
// (one team for all segments, as optim_host_round_bf16).
static inline void optim_host_round_fp16_segs(const OptimHost* h, const OptimState* st, int s0, int s1, bool stochastic) {
    uint16_t* out = (uint16_t*)h->xfer;
    #pragma omp parallel
    for (int s = s0; s < s1; s++) {
        const OptimSegment* sg = &st->segs[s];
        #pragma omp for schedule(static) nowait
        for (size_t k = 0; k < sg->count; k++) {
            out[sg->offset + k] = optim_host_round_fp16(h->params[sg->offset + k], srng_bits(h->round_key, sg->param + k, 0),
                                                        stochastic);
        }
    }
}

// The updated parameters of the view up to params (the whole model's, at the segments' global
// places), once the work `stream` has queued (which still reads the old ones) is done; then the
// compute stream waits for them. The 16-bit builds round the master weights in
// OPTIM_HOST_UP_PIECES pieces of whole segments, each going up while the host rounds the next.
#define OPTIM_HOST_UP_PIECES 8
template <typename Tp>
void optim_host_upload(OptimHost* h, const OptimEngine* e, Tp* params, cudaStream_t stream, bool stochastic) {
    const OptimState* st = &e->st;
    const char* src = sizeof(Tp) == 4 ? (const char*)h->params : (const char*)h->xfer;
    cudaCheck(cudaEventRecord(h->ready, stream));
    cudaCheck(cudaStreamWaitEvent(h->copy_stream, h->ready, 0));
    const size_t piece = st->n / OPTIM_HOST_UP_PIECES + 1;
    for (int s0 = 0; s0 < st->nseg;) {
        int s1 = s0;
        for (size_t got = 0; s1 < st->nseg && got < piece; s1++) got += st->segs[s1].count;  // (at least one)
        if constexpr (std::is_same<Tp, __half>::value) {
            optim_host_round_fp16_segs(h, st, s0, s1, stochastic);
        } else if constexpr (sizeof(Tp) == 2) {
            optim_host_round_bf16(st, s0, s1, h->params, (uint16_t*)h->xfer, h->round_key, stochastic);
        }
        for (int s = s0; s < s1;) {  // runs of segments adjacent in both buffers go as one copy
            const OptimSegment* a = &st->segs[s];
            size_t count = a->count;
            int k = s + 1;
            while (k < s1 && st->segs[k].offset == a->offset + count && st->segs[k].param == a->param + count) {
                count += st->segs[k++].count;
            }
            cudaCheck(cudaMemcpyAsync(params + a->param, src + a->offset * sizeof(Tp), count * sizeof(Tp),
                                      cudaMemcpyHostToDevice, h->copy_stream));
            s = k;
        }
        s0 = s1;
    }
    cudaCheck(cudaEventRecord(h->up, h->copy_stream));
    cudaCheck(cudaStreamWaitEvent(stream, h->up, 0));
}

#endif // LLMC_OPTIM_OFFLOAD_CPU_CUH

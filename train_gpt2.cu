/*
 train_gpt2.cu: GPT-2 training on one GPU, mixed precision (bf16 by default, fp32 with
 PRECISION=FP32), matmuls through cuBLASLt, and every step ending with one fused optimizer launch
 (llmc/optim/update.cuh) over all parameters (with --badam, over the active block's slices).

 It reads top to bottom like train_gpt2.c, the CPU trainer it is tested against: the model
 (parameters, activations, forward, backward, update), the rest of the trainer interface
 (llmc/run/trainer.h), and main, the training loop, around which llmc/run/run.h does the run. The kernels live in llmc/kernels/, one family per .cuh file
 (except BAdam's one-line widening of a block's parameters into its master weights).

 --badam K (llmc/optim/badam.h), as in train_gpt2.c: gradients, m, v and master weights exist for the
 active block only (compact buffers, its slices back to back); the backward pass passes NULL
 weight gradients for frozen tensors (grad_slice) and stops below the lowest active layer; the
 update is one AdamW launch per slice of the block.

 Several processes, one GPU each (llmc/dist/nccl_comm.cuh; mpirun, or -pi fs|tcp): -z 0 sums the
 gradients with NCCL all-reduces, layer by layer on the communicator's stream while the backward
 pass computes the layers below; -z 1 (ZeRO-1) reduce-scatters them, updates this process's shard
 of the parameters with its shard of m, v and master weights, and all-gathers the parameters.
 Parameters and gradients are padded to a multiple of the shard (zero_shard_elems), so any
 parameter count works. Muon's parts hold whole matrices instead (each process orthogonalizes its
 own; llmc/optim/views.h optim_view_parts): unequal, so they move in groups of NCCL reduces and
 broadcasts.

 The same source, unchanged, also builds for the CPU execution harness (make train_gpt2cu_emu):
 its include path supplies the CUDA runtime (each CUDA thread a fiber), cuBLASLt and the cuDNN
 attention entry points on the CPU, and CI runs the whole training step that way (test_gpt2.cu);
 with MPI (build/train_gpt2cu_emu_mpi_*) NCCL is provided over MPI between CPU processes
 (dev/harness/cuda_harness_nccl.h).

 Shapes: B batch, T time, C channels, NH heads, L layers, V vocab, Vp padded vocab; Linear
 weights (out, in). floatX is the storage type (llmc/cuda/cuda_precision.h); statistics are fp32.
*/
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifndef LS_ENCODE  // (the Makefile's, where PCRE2 and cJSON are installed: --prompt encodes)
#define TOKENIZER_DECODE_ONLY  // samples are decoded only: no PCRE2 / cJSON needed
#endif
#include "llmc/utils.h"
#include "llmc/config.h"
#include "llmc/params.h"
#include "llmc/io/checkpoint.h"
#include "llmc/run/train_options.h"
#include "llmc/optim/optim.h"
#include "llmc/run/memory.h"
#include "llmc/run/logger.h"
#include "llmc/run/trainer.h"
#include "llmc/optim/badam.h"
#include "llmc/cuda/cuda_common.h"
#include "llmc/cuda/cuda_precision.h"
#include "llmc/kernels/encoder.cuh"
#include "llmc/kernels/layernorm.cuh"
#include "llmc/kernels/matmul.cuh"
#include "llmc/kernels/attention.cuh"
#include "llmc/kernels/cudnn_att.cuh"
#include "llmc/kernels/gelu.cuh"
#include "llmc/kernels/fused_classifier.cuh"
#include "llmc/kernels/global_norm.cuh"
#include "llmc/optim/engine.cuh"
#include "llmc/optim/offload.cuh"
#include "llmc/optim/offload_cpu.cuh"
#ifdef LS_HOST_BLAS
#include "llmc/run/blas_gemm.h"  // Muon's Newton-Schulz on the host (--offload cpu)
#endif
#include <omp.h>
#include "llmc/optim/srng.h"
#include "llmc/dist/nccl_comm.cuh"
#include "llmc/optim/views.h"

#define CUBLASLT_WORKSPACE_BYTES ((size_t)32 << 20)

// ----------------------------------------------------------------------------
// the model

// (L, ...) tensors: layer l's slice starts LAYER(ptr, l, n) (padded so each slice is aligned).
typedef union {
    struct {
        int* inputs;       // (B,T)
        int* targets;      // (B,T)
        floatX* encoded;   // (B,T,C)
        floatX* ln1;       // (L,B,T,C), or (B,T,C) with -r 2
        float* ln1_mean;   // (L,B,T)
        float* ln1_rstd;   // (L,B,T)
        floatX* atty;      // (L,B,T,C)
        floatX* att;       // (L,B,NH,T,T); NULL with --attention cudnn
        floatX* residual2; // (L,B,T,C)
        floatX* ln2;       // (L,B,T,C), or (B,T,C) with -r 2
        float* ln2_mean;   // (L,B,T)
        float* ln2_rstd;   // (L,B,T)
        floatX* fch;       // (L,B,T,4C) before GELU
        floatX* fch_gelu;  // (L,B,T,4C), or (B,T,4C) with -r >= 1
        floatX* residual3; // (L,B,T,C)
        floatX* lnf;       // (B,T,C)
        float* lnf_mean;   // (B,T)
        float* lnf_rstd;   // (B,T)
        float* losses;     // (B,T)
        floatX* qkvr;      // (L,B,T,3C) q, k, v permuted per head; --attention cudnn: qkv as the matmul wrote it
        floatX* output;    // (B,T,max(3C,Vp)) matmul outputs; logits, then dlogits
        float* att_stats;  // (L,B,NH,T) --attention cudnn: LSE of each score row; else NULL
        void* end;
    };
    void* t[GPU_NUM_ACTIVATIONS];
} ActivationTensors;

typedef union {
    struct {
        floatX* dresidual; // (B,T,C)
        floatX* dbuf;      // (B,T,C)
        floatX* datty;     // (B,T,C)
        floatX* dfch;      // (B,T,4C)
        floatX* dqkv;      // (B,T,3C)
        floatX* dqkvr;     // (B,T,3C); NULL with --attention cudnn
        floatX* datt;      // (B,NH,T,T); NULL with --attention cudnn
    };
    floatX* t[GPU_NUM_SCRATCH];
} ScratchTensors;

typedef union {
    struct {
        floatX *wte, *wpe, *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb;
        floatX *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb, *lnfw, *lnfb;
    };
    floatX* t[NUM_PARAMETER_TENSORS];
} ParameterTensorsX;  // the same tensors as ParameterTensors (params.h), in floatX

struct GPT2 {
    GPT2Config config;
    ParamTable table;
    size_t num_parameters;
    int B, T;                 // the largest batch the activations hold
    int recompute;            // -r
    int flash;                // 0: --attention matmul (llmc/kernels/attention.cuh); 1 cudnn, 2 cudnn-fast (llmc/kernels/cudnn_att.cuh)
    floatX* params_memory;    // (num_parameters) device
    ParameterTensorsX params;
    floatX* grads_memory;     // (state_elems) device: all parameters, or BAdam's active block (grad_slice)
    floatX* gather_memory;    // -z 1 --badam with --offload-delay 1: the block's parameter all-gather (the
                              // gradients hold the next step's when the delayed update runs), else NULL
    size_t state_elems;       // gradient elements: num_parameters, or BAdam's largest block
    // the optimizer engine (llmc/optim/engine.h, device side in llmc/optim/engine.cuh): every
    // optimizer and state precision in one device block; BAdam's block and the ZeRO-1 shard are views
    OptimEngine opt;
    int opt_step;             // the optimizer's step of this update (BAdam: counts from the switch)
    float* master_memory;     // (opt.max_elems) fp32 master weights, indexed as the state, or NULL
                              // (with --offload: 2 chunks of staging)
    int use_master;
    // --badam: one block trains at a time; gradients, state and master hold its slices back to back
    int use_badam;
    Badam badam;
    int active_block;         // the block of the current step (-1 before the first)
    int badam_fresh;          // 1 until the state holds a block's (reset at a switch, or read from a checkpoint)
    int badam_master_stale;   // 1: resumed from a checkpoint without master weights (the block's are made at the next step)
    BadamSlice slices[BADAM_MAX_SLICES];  // the active block's slices
    int num_slices;
    // --offload (OffloadMode): the engine's block and the master weights live in host memory.
    // stream: pinned, streamed through device staging two chunks at a time (llmc/optim/offload.cuh);
    // cpu: updated there by the CPU, the gradients down and the parameters up (llmc/optim/offload_cpu.cuh)
    int offload;
    size_t chunk;             // stream: elements asked per chunk
    OptimOffload offl;
    size_t stage_bytes, stage_elems;  // the largest chunk's state bytes and elements
    size_t work_bytes;                // Muon's Newton-Schulz scratch on the device (OptimEngine.work)
    float* master_host;       // (opt.max_elems) the view's master weights, or NULL (cpu: host.params,
                              // the view's fp32 parameters in every build)
    OptimHost host;           // cpu: the host step's buffers and copy stream
    int delay, delay_warmup;  // cpu: --offload-delay, and the steps before it starts
    double host_update_ms;    // cpu: wall time of the last host update (widen, update, round)
    // data parallelism: NULL nccl = one process
    NcclComm* nccl;           // the communicator (trainer_init's), when there are several processes
    int zero_stage;           // -z
    size_t shard;             // ZeRO-1: elements per process; parameters and gradients hold shard * processes
                              // (this step's parts, BAdam's block's or Muon's whole matrices: opt.parts)
    int accum;                // micro-steps per step: the last one's backward pass reduces the gradients
    int grads_reduced;        // -z 0: the reduction of this step was issued during the backward pass
    unsigned long long seed;  // stochastic rounding
    int step;                 // the training step (gpt2_begin_step), and the micro-step within it:
    int micro_step;           // they key the encoder backward's stochastic rounding (resumable)
    void* acts_memory;
    ActivationTensors acts;
    void* scratch_memory;
    ScratchTensors scratch;
    float* kernel_scratch;    // fp32 scratch of the backward kernels
    size_t kernel_scratch_bytes;
    float* d_norm_scratch;    // (GLOBAL_NORM_MAX_BLOCKS + 3): partials, sum of squares, norm, scale
    int* inputs_cpu;          // (B,T) host copy of the last inputs (the encoder backward groups by token)
    // a forward's inputs and targets go up from pinned staging (2, B, T), two buffers used in turn: an
    // upload from pageable memory would first wait for the stream's queued work, so the host would
    // stall on every micro-step's backward pass. io_copied[k]: recorded after the upload from
    // io_pinned[k], which is rewritten only once that has passed (a whole micro-step earlier).
    int* io_pinned[2];
    cudaEvent_t io_copied[2];
    int io_next;
    float* losses_cpu;        // (B,T) host
    float* logits_row_cpu;    // (Vp) host, for sampling
    MemCounter mem;           // what was really allocated on the device, per category
    float mean_loss;
    // gpt2_forward_train: the dlogits it leaves in acts.output for gpt2_backward, and the step's
    // loss, kept on the device until gpt2_loss_sum reads it (no sync in the forward pass)
    int dlogits_ready;        // acts.output holds dlogits of (mean loss * dlogits_scale) for (dlogits_B, dlogits_T)
    float dlogits_scale;
    int dlogits_B, dlogits_T;
    double* d_loss_sum;       // (1) device: the summed losses of the step's gpt2_forward_train calls
    int loss_micro_steps;     // gpt2_forward_train calls since gpt2_begin_step
    int loss_BT;              // their B*T
    cudaStream_t stream;
};

static void* cuda_malloc_counted(MemCounter* mc, MemCategory cat, size_t bytes) {
    void* p = NULL;
    cudaError_t err = cudaMalloc(&p, bytes == 0 ? 1 : bytes);
    if (err != cudaSuccess) {
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        ls_fatal("out of device memory allocating %.1f MiB of %s (device has %.1f MiB free of %.1f MiB): lower -b or -t, "
                 "or use -r 2 (see the memory table above)", mib(bytes), mem_category_names[cat], mib(free_b), mib(total_b));
    }
    mc->bytes[cat] += bytes;
    return p;
}

// --attention as the model's flash mode (see GPT2.flash); NULL options: the build's default.
static int attention_flash_mode(const TrainOptions* o) {
    if (o == NULL) { return FLOATX_IS_LOWP ? 1 : 0; }
    return o->attention == ATTENTION_CUDNN ? 1 : o->attention == ATTENTION_CUDNN_FAST ? 2 : 0;
}

static size_t kernel_scratch_bytes_for(const GPT2Config* c, int B, int T, int flash) {
    size_t BT = (size_t)B * T, C = (size_t)c->channels, Vp = (size_t)c->padded_vocab_size;
    size_t need = encoder_backward_scratch_bytes(B, T, (int)C);
    size_t x;
    x = layernorm_backward_scratch_bytes((int)BT, (int)C); if (x > need) { need = x; }
    x = matmul_backward_scratch_bytes((int)BT, (int)(Vp > 4 * C ? Vp : 4 * C)); if (x > need) { need = x; }
    x = attention_backward_scratch_bytes(B, T, (int)C, c->num_heads); if (x > need) { need = x; }
    x = flash ? attention_cudnn_scratch_bytes(B, T, c->num_heads, (int)C, flash == 1) : 0; if (x > need) { need = x; }
    return need;
}

static GpuMemoryOptions gpu_memory_options(const GPT2Config* c, int B, int T, int recompute, int master,
                                           size_t offload_chunk, size_t badam_block, int zero_stage, int procs,
                                           size_t opt_state_bytes, size_t master_elems, int flash) {
    GpuMemoryOptions g;
    g.recompute = recompute;
    g.master_weights = master;
    g.floatx_bytes = sizeof(floatX);
    g.kernel_scratch = kernel_scratch_bytes_for(c, B, T, flash);
    g.workspace = CUBLASLT_WORKSPACE_BYTES;
    g.zero_stage = zero_stage;
    g.num_processes = procs;
    g.offload_chunk = offload_chunk;
    g.badam_block = badam_block;
    g.opt_state_bytes = opt_state_bytes;
    g.master_elems = master_elems;
    g.stage_bytes = g.stage_elems = g.zero_elems = g.opt_work_bytes = g.host_work_bytes = g.gather_elems = 0;
    g.host_update = 0;
    g.flash_attention = flash;
    return g;
}

// fp32 host values -> floatX device buffer (rounded to nearest even)
static void upload_floatx(floatX* dst, const float* src, size_t n) {
    const size_t chunk = 1 << 20;
    floatX* buf = (floatX*)mallocCheck(chunk * sizeof(floatX));
    for (size_t i = 0; i < n; i += chunk) {
        size_t k = n - i < chunk ? n - i : chunk;
        for (size_t j = 0; j < k; j++) { buf[j] = from_float(src[i + j]); }
        cudaCheck(cudaMemcpy(dst + i, buf, k * sizeof(floatX), cudaMemcpyHostToDevice));
    }
    free(buf);
}

static void download_floatx(float* dst, const floatX* src, size_t n) {
    const size_t chunk = 1 << 20;
    floatX* buf = (floatX*)mallocCheck(chunk * sizeof(floatX));
    for (size_t i = 0; i < n; i += chunk) {
        size_t k = n - i < chunk ? n - i : chunk;
        cudaCheck(cudaMemcpy(buf, src + i, k * sizeof(floatX), cudaMemcpyDeviceToHost));
        for (size_t j = 0; j < k; j++) { dst[i + j] = to_float(buf[j]); }
    }
    free(buf);
}

// Carves `n` tensors out of one allocation, each 256-byte aligned (the memory model's rounding).
static void* carve_tensors(MemCounter* mc, MemCategory cat, const size_t* counts, const int* is_fp32, int n, void** out) {
    size_t total = 0;
    for (int i = 0; i < n; i++) { total += gpu_tensor_bytes(counts[i], is_fp32 && is_fp32[i] ? 4 : sizeof(floatX)); }
    char* base = (char*)cuda_malloc_counted(mc, cat, total);
    char* p = base;
    for (int i = 0; i < n; i++) {
        out[i] = p;
        p += gpu_tensor_bytes(counts[i], is_fp32 && is_fp32[i] ? 4 : sizeof(floatX));
    }
    return base;
}

// The processes of a run and its ZeRO stage (0 with one process, as the CPU trainer).
static int gpu_procs(const TrainOptions* o) { return o && o->comm ? o->comm->size : 1; }

// Flag combinations the GPU trainer does not support: the options layer's table (run_setup checks
// it too; here for callers of gpt2_build such as the tests), and what this build cannot do.
static void gpu_check_flags(const TrainOptions* o) {
    if (o == NULL) { return; }
    if (o->attention != ATTENTION_MATMUL && !FLOATX_IS_BF16) {
        ls_fatal("flag --attention %s: cuDNN's flash attention needs the BF16 build (make train_gpt2cu PRECISION=BF16); "
                 "this %s build has --attention matmul", attention_choices[o->attention], PRECISION_NAME);
    }
    if (FLOATX_IS_FP16 && !o->master_weights) {
        ls_fatal("flag -w 0: the FP16 build always keeps fp32 master weights (fp16 parameters cannot take AdamW's small "
                 "steps); drop -w 0, or build PRECISION=BF16 for bf16 parameters without them");
    }
    if (o->offload == OFFLOAD_CPU && FLOATX_IS_LOWP && !o->master_weights) {
        ls_fatal("flag -w 0: --offload cpu keeps fp32 master weights on the host (they cost no GPU memory there); drop -w 0");
    }
#ifndef LS_HOST_BLAS
    if (o->offload == OFFLOAD_CPU && o->optimizer == OPT_MUON) {
        ls_fatal("flag --offload cpu: Muon's Newton-Schulz products run on the host through OpenBLAS, and this build has "
                 "none (no cblas.h when it was built: install libopenblas-dev and rebuild, or use --offload stream)");
    }
#endif
    if (o->offload_delay && o->offload != OFFLOAD_CPU) {
        ls_fatal("flag --offload-delay 1: the delayed update is --offload cpu's (got --offload %s)", offload_choices[o->offload]);
    }
}

static int gpu_zero_stage(const TrainOptions* o) { return gpu_procs(o) > 1 ? o->zero_stage : 0; }

// ZeRO-1: the parameters this process updates, [lo, hi) (the real ones of its part of the whole
// model: the padding past num_parameters is never updated and stays 0); without ZeRO-1 all of them.
static void zero_range(const GPT2* model, size_t* lo, size_t* hi) {
    size_t n = model->num_parameters;
    *lo = 0;
    *hi = n;
    if (model->zero_stage >= 1) {
        size_t* parts = (size_t*)mallocCheck(((size_t)model->nccl->size + 1) * sizeof(size_t));
        optim_engine_view_parts(&model->opt, OPTIM_VIEW_MODEL, parts);
        const size_t a = parts[model->nccl->rank], b = parts[model->nccl->rank + 1];
        free(parts);
        *lo = a < n ? a : n;
        *hi = b < n ? b : n;
    }
}

// BAdam's largest block for these options (0: BAdam off), and a line describing the schedule.
static size_t badam_block_for(const GPT2Config* c, const TrainOptions* o, int print) {
    if (o == NULL || o->badam <= 0) { return 0; }
    ParamTable pt;
    param_table_build(&pt, c);
    Badam bd;
    badam_init(&bd, &pt, o->badam, o->badam_order, o->badam_embed, 0);
    if (print) {
        printf("BAdam: %d blocks (%s), switching every %d steps, order %s; gradients and AdamW state for %zu elements\n",
               bd.num_blocks, o->badam_embed ? "layers + embeddings" : "layers; embeddings frozen", o->badam,
               badam_order_names[o->badam_order], bd.max_block);
    }
    return bd.max_block;
}

// The run's modes from the flags (opts may be NULL: recompute 1, master weights in bf16 builds):
// recompute, attention, master weights, offload chunks, processes and ZeRO-1 shard, BAdam, and
// the parameter table; what the optimizer state holds (state_elems).
static void gpt2_setup_modes(GPT2* model, uint64_t seed, int B, int T, const TrainOptions* opts) {
    const GPT2Config* c = &model->config;
    gpu_check_flags(opts);
    model->recompute = opts ? opts->recompute : 1;
    model->flash = attention_flash_mode(opts);
    model->use_master = FLOATX_IS_LOWP && (opts ? opts->master_weights : 1);
    model->seed = seed;
    model->offload = opts ? opts->offload : OFFLOAD_OFF;
    model->delay = opts && opts->offload == OFFLOAD_CPU ? opts->offload_delay : 0;
    model->delay_warmup = opts ? opts->offload_delay_warmup : 0;
    size_t n_params = gpt2_num_parameters(c);
    int procs = gpu_procs(opts);
    model->zero_stage = gpu_zero_stage(opts);
    model->nccl = procs > 1 ? (NcclComm*)opts->comm->ctx : NULL;  // trainer_init connected the processes
    if (procs > 1 && model->nccl == NULL) { ls_fatal("gpt2_build: %d processes but no communicator (trainer_init first)", procs); }
    long long per_micro = (long long)B * T * procs;
    model->accum = opts && opts->total_batch > 0 ? (int)(opts->total_batch / per_micro) : 1;
    if (model->offload == OFFLOAD_STREAM) {  // chunks of a multiple of 32 elements keep every chunk 128-bit aligned
        model->chunk = optim_chunk_elems(n_params, (size_t)opts->offload_chunk);
    }
    param_table_build(&model->table, c);
    model->state_elems = n_params;
    model->active_block = -1;
    if (opts && opts->badam > 0) {
        model->use_badam = 1;
        model->badam_fresh = 1;
        badam_init(&model->badam, &model->table, opts->badam, opts->badam_order, opts->badam_embed, seed);
        model->state_elems = model->badam.max_block;
    }
    if (model->zero_stage >= 1) { model->shard = zero_shard_elems(n_params, procs); }
    // the optimizer engine: its views and the size of its block (allocated by gpt2_alloc_state)
    OptimConfig cfg = opts ? train_options_optimizer(opts) : optim_config_default(OPT_ADAMW);
    cfg.seed = seed;
    optim_engine_init(&model->opt, &cfg, &model->table, model->use_badam ? &model->badam : NULL,
                      opts ? opts->weight_decay : 0.0f, model->nccl ? model->nccl->rank : 0, procs,
                      model->zero_stage >= 1 ? model->shard : 0);
    if (model->zero_stage >= 1) { optim_engine_set_reduce(&model->opt, comm_sum_hook, (void*)opts->comm); }  // LAMB
    if (model->offload == OFFLOAD_STREAM) { optim_engine_offload_size(&model->opt, model->chunk, &model->stage_bytes, &model->stage_elems); }
    optim_engine_set_gemm_batched(&model->opt, matmul_gemm_batched, (int)sizeof(floatX));  // Muon
    model->work_bytes = optim_engine_device_work_bytes(&model->opt, (int)sizeof(floatX));
#ifdef LS_HOST_BLAS
    if (model->offload == OFFLOAD_CPU) {  // Muon's products on the host, its scratch there (OptimEngine.work_bytes)
        optim_engine_set_gemm(&model->opt, blas_gemm);
        model->work_bytes = 0;
    }
#endif
}

// Elements of the buffer a BAdam block's parameters are all-gathered through when the gradient
// buffer is taken then (-z 1 --badam with --offload-delay 1: the gradients' size), else 0.
static size_t gpt2_gather_elems(const GPT2* model) {
    if (!(model->delay && model->zero_stage >= 1 && model->use_badam)) { return 0; }
    return optim_engine_zero_elems(&model->opt) > 0 ? optim_engine_zero_elems(&model->opt) : model->state_elems;
}

// The memory options of this run at batch (B, T).
static GpuMemoryOptions gpt2_memory_options(const GPT2* model, int B, int T, int procs) {
    size_t badam_block = model->use_badam ? model->state_elems : 0;
    GpuMemoryOptions g = gpu_memory_options(&model->config, B, T, model->recompute, model->use_master, model->chunk,
                                            badam_block, model->zero_stage, procs, model->opt.bytes, model->opt.max_elems,
                                            model->flash);
    g.stage_bytes = model->stage_bytes;
    g.stage_elems = model->stage_elems;
    g.zero_elems = optim_engine_zero_elems(&model->opt);
    g.opt_work_bytes = model->work_bytes;
    g.host_update = model->offload == OFFLOAD_CPU;
    g.host_work_bytes = g.host_update ? model->opt.work_bytes : 0;
    g.gather_elems = gpt2_gather_elems(model);
    return g;
}

// Will it fit? If not, stop before allocating, with the memory table and the largest batch that fits.
static void gpt2_check_fits(const GPT2* model, int B, int T, const TrainOptions* opts) {
    const GPT2Config* c = &model->config;
    int procs = gpu_procs(opts);
    size_t free_b = 0, total_b = 0;
    cudaCheck(cudaMemGetInfo(&free_b, &total_b));
    GpuMemoryOptions mo = gpt2_memory_options(model, B, T, procs);
    MemoryReport need = memory_model_gpu(c, B, T, &mo);
    const size_t host_free = memory_host_available();
    if (need.host_pinned > 0 && host_free > 0 && need.host_pinned > host_free) {
        ls_fatal("out of host memory: --offload %s keeps %.1f MiB in pinned host memory (optimizer state %.1f, master "
                 "weights %.1f, gradients %.1f), the host has %.1f MiB available; try --opt-state int8 or 4bit",
                 offload_choices[model->offload], mib(need.host_pinned), mib(need.host[MEM_OPT_STATE]),
                 mib(need.host[MEM_MASTER]), mib(need.host[MEM_GRADS]), mib(host_free));
    }
    if (memory_report_total(&need) > free_b) {
        memory_report_print(stderr, &need, gpt2_num_parameters(c));
        int fit = 0;
        for (int b = B - 1; b >= 1 && fit == 0; b--) {
            GpuMemoryOptions mb = gpt2_memory_options(model, b, T, procs);
            MemoryReport r = memory_model_gpu(c, b, T, &mb);
            if (memory_report_total(&r) <= free_b) { fit = b; }
        }
        char hint[128];
        if (fit > 0) { snprintf(hint, sizeof(hint), "the largest batch that fits is -b %d at -t %d", fit, T); }
        else { snprintf(hint, sizeof(hint), "no batch fits at -t %d: lower -t, use -r 2, or a smaller model", T); }
        ls_fatal("out of device memory: this run needs %.1f MiB (table above), the device has %.1f MiB free of %.1f MiB; %s",
                 mib(memory_report_total(&need)), mib(free_b), mib(total_b), hint);
    }
}

// Parameters, gradients, the optimizer engine's block (on the device, or with --offload in pinned
// host memory with two chunks of device staging) and master weights, in the memory model's sizes.
static void gpt2_alloc_state(GPT2* model) {
    int master = model->use_master;
    size_t n = model->num_parameters = model->table.total;
    // ZeRO-1: gradients hold every process's part of the largest view (and the parameters too
    // without BAdam: their all-gather is in place)
    OptimEngine* e = &model->opt;
    size_t g_pad = optim_engine_zero_elems(e);
    size_t n_pad = model->zero_stage >= 1 && !model->use_badam ? g_pad : n;
    size_t ng = model->zero_stage >= 1 ? g_pad : model->state_elems;
    MemCounter* mc = &model->mem;
    model->params_memory = (floatX*)cuda_malloc_counted(mc, MEM_PARAMS, gpu_tensor_bytes(n_pad, sizeof(floatX)));
    model->grads_memory = (floatX*)cuda_malloc_counted(mc, MEM_GRADS, gpu_tensor_bytes(ng, sizeof(floatX)));
    cudaCheck(cudaMemset(model->grads_memory, 0, ng * sizeof(floatX)));
    model->gather_memory = NULL;
    if (gpt2_gather_elems(model) > 0) {
        model->gather_memory = (floatX*)cuda_malloc_counted(mc, MEM_PARAMS, gpu_tensor_bytes(gpt2_gather_elems(model), sizeof(floatX)));
    }
    cudaCheck(cudaMemset(model->params_memory, 0, n_pad * sizeof(floatX)));  // the padding stays 0
    if (!model->offload) {  // the views are set up over the block at the first step (or a resume)
        e->memory = e->bytes > 0 ? cuda_malloc_counted(mc, MEM_OPT_STATE, gpu_tensor_bytes(e->bytes, 1)) : NULL;
        e->work = model->work_bytes > 0 ? cuda_malloc_counted(mc, MEM_OPT_STATE, gpu_tensor_bytes(model->work_bytes, 1)) : NULL;
        model->master_memory = master ? (float*)cuda_malloc_counted(mc, MEM_MASTER, gpu_tensor_bytes(e->max_elems, 4)) : NULL;
        return;
    }
    // --offload: the block in pinned host memory (its views set up at the first step, or a resume)
    cudaCheck(cudaMallocHost(&e->memory, e->bytes > 0 ? e->bytes : 64));
    mc->host_pinned = e->bytes;
    mc->host[MEM_OPT_STATE] = e->bytes;
    if (model->offload == OFFLOAD_CPU) {  // the master weights, the gradients' host copy and the transfer buffer
        optim_host_init(&model->host, e->max_elems, (int)sizeof(floatX));
        model->master_host = model->host.params;
        size_t hm, hg;
        mc->host_pinned += optim_host_bytes(e->max_elems, (int)sizeof(floatX), &hm, &hg);
        mc->host[MEM_MASTER] = hm;
        mc->host[MEM_GRADS] = hg;
        if (e->gemm != NULL && e->work_bytes > 0) {  // Muon's Newton-Schulz scratch, beside the state
            cudaCheck(cudaMallocHost(&e->work, e->work_bytes));
            mc->host_pinned += e->work_bytes;
            mc->host[MEM_OPT_STATE] += e->work_bytes;
        }
        return;
    }
    // stream: two chunks of device staging
    e->work = model->work_bytes > 0 ? cuda_malloc_counted(mc, MEM_OPT_STATE, gpu_tensor_bytes(model->work_bytes, 1)) : NULL;
    void* stage[2];
    float* mstage[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++) {
        stage[i] = cuda_malloc_counted(mc, MEM_OPT_STATE, gpu_tensor_bytes(model->stage_bytes, 1));
        if (master) { mstage[i] = (float*)cuda_malloc_counted(mc, MEM_MASTER, gpu_tensor_bytes(model->stage_elems, 4)); }
    }
    if (master) {
        cudaCheck(cudaMallocHost((void**)&model->master_host, (e->max_elems > 0 ? e->max_elems : 1) * sizeof(float)));
        mc->host_pinned += e->max_elems * sizeof(float);
        mc->host[MEM_MASTER] = e->max_elems * sizeof(float);
    }
    optim_offload_init(&model->offl, model->chunk, stage[0], stage[1], mstage[0], mstage[1]);
}

// The parameters: fp32 on the host (random init, or the model file), rounded to floatX on the
// device; the master weights (ZeRO-1: this process's shard; BAdam: filled at a switch) exact.
static void gpt2_load_params(GPT2* model, const char* model_or_descriptor, int from_descriptor, uint64_t seed) {
    const GPT2Config* c = &model->config;
    size_t n = model->num_parameters, nm = model->opt.max_elems;
    int master = model->use_master;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) { model->params.t[i] = model->params_memory + model->table.t[i].offset; }
    float* host = (float*)mallocCheck(n * sizeof(float));
    if (from_descriptor) { params_init_random(&model->table, host, seed); }
    else { model_file_read_params(model_or_descriptor, c, host); }
    upload_floatx(model->params_memory, host, n);
    size_t lo, hi;  // ZeRO-1: this process's shard
    zero_range(model, &lo, &hi);
    if (model->offload == OFFLOAD_CPU) { master = 1; }  // the host update's fp32 parameters, in every build
    if (master && model->use_badam) {  // (ZeRO-1: this process's shard of the block)  // filled at a switch
        if (model->offload) { memset(model->master_host, 0, nm * sizeof(float)); }
        else { cudaCheck(cudaMemset(model->master_memory, 0, nm * sizeof(float))); }
    } else if (master && model->offload) {
        memcpy(model->master_host, host + lo, (hi - lo) * sizeof(float));
    } else if (master && nm > 0) {
        cudaCheck(cudaMemcpy(model->master_memory, host + lo, (hi - lo) * sizeof(float), cudaMemcpyHostToDevice));
    }
    free(host);

}

// Activations and scratch for batches up to (B, T), in the memory model's layout, and the small
// buffers of a step.
static void gpt2_alloc_activations(GPT2* model, int B, int T) {
    const GPT2Config* c = &model->config;
    MemCounter* mc = &model->mem;
    model->B = B;
    model->T = T;
    size_t act_n[GPU_NUM_ACTIVATIONS], scr_n[GPU_NUM_SCRATCH];
    int act_fp32[GPU_NUM_ACTIVATIONS];
    gpu_activation_sizes(c, B, T, model->recompute, sizeof(floatX), model->flash, act_n, act_fp32);
    gpu_scratch_sizes(c, B, T, model->flash, scr_n);
    model->acts_memory = carve_tensors(mc, MEM_ACTS, act_n, act_fp32, GPU_NUM_ACTIVATIONS, model->acts.t);
    model->scratch_memory = carve_tensors(mc, MEM_SCRATCH, scr_n, NULL, GPU_NUM_SCRATCH, (void**)model->scratch.t);
    if (model->flash) { model->acts.att = model->scratch.datt = model->scratch.dqkvr = NULL; }  // empty in this mode
    else { model->acts.att_stats = NULL; }
    model->kernel_scratch_bytes = kernel_scratch_bytes_for(c, B, T, model->flash);
    model->kernel_scratch = (float*)cuda_malloc_counted(mc, MEM_SCRATCH, gpu_tensor_bytes(model->kernel_scratch_bytes, 1));
    // small buffers that the memory model does not list (a few KB)
    MemCounter small;
    memset(&small, 0, sizeof(small));
    model->d_norm_scratch = (float*)cuda_malloc_counted(&small, MEM_SCRATCH, (GLOBAL_NORM_MAX_BLOCKS + 3) * sizeof(float));
    model->d_loss_sum = (double*)cuda_malloc_counted(&small, MEM_SCRATCH, sizeof(double));
    model->inputs_cpu = (int*)mallocCheck((size_t)B * T * sizeof(int));
    for (int k = 0; k < 2; k++) {
        cudaCheck(cudaMallocHost((void**)&model->io_pinned[k], 2 * (size_t)B * T * sizeof(int)));
        cudaCheck(cudaEventCreateWithFlags(&model->io_copied[k], cudaEventDisableTiming));
    }
    model->losses_cpu = (float*)mallocCheck((size_t)B * T * sizeof(float));
    model->logits_row_cpu = (float*)mallocCheck((size_t)c->padded_vocab_size * sizeof(float));
}

// Builds the model from a model file or a descriptor and allocates everything for batches up to
// (B, T). opts may be NULL (recompute 1, master weights on in bf16 builds).
static void gpt2_build(GPT2* model, const char* model_or_descriptor, uint64_t seed, int B, int T, const TrainOptions* opts) {
    memset(model, 0, sizeof(*model));
    int from_descriptor = gpt2_config_from_descriptor(model_or_descriptor, &model->config);
    if (from_descriptor) {
        char err[200];
        if (!gpt2_config_valid(&model->config, err, sizeof(err))) { ls_fatal("flag -e: descriptor '%s': %s", model_or_descriptor, err); }
    } else {
        model_file_read_header(model_or_descriptor, &model->config);
    }
    const GPT2Config* c = &model->config;
    if (c->channels % (int)x128::size != 0 || (c->channels / c->num_heads) % (int)x128::size != 0) {
        ls_fatal("model: channels %d and head size %d must be multiples of %d for the GPU kernels", c->channels,
                 c->channels / c->num_heads, (int)x128::size);
    }
    gpt2_setup_modes(model, seed, B, T, opts);
    gpt2_check_fits(model, B, T, opts);
    cudaCheck(cudaStreamCreate(&model->stream));
    matmul_init(CUBLASLT_WORKSPACE_BYTES);
    model->mem.bytes[MEM_WORKSPACE] = matmul_workspace_bytes();
    gpt2_alloc_state(model);
    gpt2_load_params(model, model_or_descriptor, from_descriptor, seed);
    gpt2_alloc_activations(model, B, T);
}

static void gpt2_free(GPT2* model) {
    if (model->offload == OFFLOAD_CPU) {
        optim_host_free(&model->host);
        optim_engine_free_cpu(&model->opt);
        cudaCheck(cudaFreeHost(model->opt.memory));
        if (model->opt.work) { cudaCheck(cudaFreeHost(model->opt.work)); }
        model->master_host = NULL;
    } else if (model->offload) {
        optim_offload_free(&model->offl);
        for (int i = 0; i < 2; i++) {
            cudaCheck(cudaFree(model->offl.staging[i]));
            if (model->offl.master_stage[i]) { cudaCheck(cudaFree(model->offl.master_stage[i])); }
        }
        optim_engine_free_cpu(&model->opt);
        cudaCheck(cudaFreeHost(model->opt.memory));
        cudaCheck(cudaFree(model->opt.work));
        if (model->master_host) { cudaCheck(cudaFreeHost(model->master_host)); }
    } else {
        optim_engine_free_device(&model->opt);
        cudaCheck(cudaFree(model->opt.memory));
        cudaCheck(cudaFree(model->opt.work));
    }
    cudaCheck(cudaFree(model->d_loss_sum));
    cudaCheck(cudaFree(model->d_norm_scratch));
    cudaCheck(cudaFree(model->kernel_scratch));
    cudaCheck(cudaFree(model->scratch_memory));
    cudaCheck(cudaFree(model->acts_memory));
    if (model->master_memory) { cudaCheck(cudaFree(model->master_memory)); }
    cudaCheck(cudaFree(model->grads_memory));
    if (model->gather_memory) { cudaCheck(cudaFree(model->gather_memory)); }
    cudaCheck(cudaFree(model->params_memory));
    encoder_backward_free();
    for (int k = 0; k < 2; k++) {
        cudaCheck(cudaEventSynchronize(model->io_copied[k]));
        cudaCheck(cudaEventDestroy(model->io_copied[k]));
        cudaCheck(cudaFreeHost(model->io_pinned[k]));
    }
    cudaCheck(cudaStreamDestroy(model->stream));
    matmul_free();
    if (model->flash) { attention_cudnn_free(); }
    free(model->logits_row_cpu);
    free(model->losses_cpu);
    free(model->inputs_cpu);
    memset(model, 0, sizeof(*model));
}

// Layer l's slice of a per-layer activation whose slices hold n elements at the current (B, T):
// slices lie gpu_layer_stride() apart (the memory model's padding), so each is 256-byte aligned.
#define LAYER(ptr, l, n) ((ptr) + (size_t)(l) * gpu_layer_stride((n), sizeof(*(ptr))))

// Forward pass on host tokens inputs (B,T) (B <= model->B, T <= model->T). With targets: the
// losses, and the mean loss is returned; without: -1, and the logits stay in acts.output.
// train (gpt2_forward_train): the same pass over the logits also writes the dlogits of
// (mean loss * loss_scale) in their place, the loss stays on the device, and nothing waits.
static float gpt2_forward_pass(GPT2* model, const int* inputs, const int* targets, int B, int T, int train,
                               float loss_scale) {
    if (B > model->B || T > model->T) { ls_fatal("forward: batch (%d, %d) exceeds the allocated (%d, %d)", B, T, model->B, model->T); }
    const GPT2Config* c = &model->config;
    int L = c->num_layers, C = c->channels, NH = c->num_heads, V = c->vocab_size, Vp = c->padded_vocab_size;
    int BT = B * T;
    size_t BTC = (size_t)BT * C;
    cudaStream_t s = model->stream;
    ParameterTensorsX* w = &model->params;
    ActivationTensors* a = &model->acts;
    for (int i = 0; i < BT; i++) {
        if (inputs[i] < 0 || inputs[i] >= V) { ls_fatal("forward: input token %d at %d is outside [0, %d)", inputs[i], i, V); }
        if (targets && (targets[i] < 0 || targets[i] >= V)) { ls_fatal("forward: target token %d at %d is outside [0, %d)", targets[i], i, V); }
    }
    memcpy(model->inputs_cpu, inputs, (size_t)BT * sizeof(int));
    const int k = model->io_next;  // the staging buffer of this call (see GPT2.io_pinned)
    model->io_next ^= 1;
    int* staged = model->io_pinned[k];
    cudaCheck(cudaEventSynchronize(model->io_copied[k]));
    memcpy(staged, inputs, (size_t)BT * sizeof(int));
    cudaCheck(cudaMemcpyAsync(a->inputs, staged, (size_t)BT * sizeof(int), cudaMemcpyHostToDevice, s));
    if (targets) {
        memcpy(staged + BT, targets, (size_t)BT * sizeof(int));
        cudaCheck(cudaMemcpyAsync(a->targets, staged + BT, (size_t)BT * sizeof(int), cudaMemcpyHostToDevice, s));
    }
    cudaCheck(cudaEventRecord(model->io_copied[k], s));
    size_t ln_stride = model->recompute >= 2 ? 0 : BTC;
    size_t gelu_stride = model->recompute >= 1 ? 0 : 4 * BTC;

    encoder_forward(a->encoded, a->inputs, w->wte, w->wpe, B, T, C, s);
    layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, a->encoded, w->ln1w, w->ln1b, BT, C, s);
    for (int l = 0; l < L; l++) {
        size_t lC = (size_t)l * C;
        const floatX* residual = l == 0 ? a->encoded : LAYER(a->residual3, l - 1, BTC);
        floatX* ln1 = LAYER(a->ln1, l, ln_stride);
        floatX* qkvr = LAYER(a->qkvr, l, 3 * BTC);
        floatX* atty = LAYER(a->atty, l, BTC);
        floatX* residual2 = LAYER(a->residual2, l, BTC);
        floatX* ln2 = LAYER(a->ln2, l, ln_stride);
        floatX* fch = LAYER(a->fch, l, 4 * BTC);
        floatX* fch_gelu = LAYER(a->fch_gelu, l, gelu_stride);
        floatX* residual3 = LAYER(a->residual3, l, BTC);
        // ln1 of this layer was written by the previous layer's fused residual + layernorm
        if (model->flash) {  // qkv kept per layer as the matmul writes it; no T x T buffer
            float* stats = LAYER(a->att_stats, l, (size_t)B * NH * T);
            matmul_forward(qkvr, NULL, ln1, w->qkvw + 3 * lC * C, w->qkvb + 3 * lC, BT, C, 3 * C, s);
            attention_forward_cudnn(atty, stats, qkvr, B, T, NH, C, model->kernel_scratch, model->kernel_scratch_bytes, s);
        } else {
            matmul_forward(a->output, NULL, ln1, w->qkvw + 3 * lC * C, w->qkvb + 3 * lC, BT, C, 3 * C, s);
            attention_forward(atty, qkvr, LAYER(a->att, l, (size_t)B * NH * T * T), a->output, B, T, C, NH, s);
        }
        matmul_forward(a->output, NULL, atty, w->attprojw + lC * C, w->attprojb + lC, BT, C, C, s);
        fused_residual_layernorm_forward(residual2, ln2, LAYER(a->ln2_mean, l, BT), LAYER(a->ln2_rstd, l, BT),
                                         residual, a->output, w->ln2w + lC, w->ln2b + lC, BT, C, s);
        matmul_forward(fch_gelu, fch, ln2, w->fcw + 4 * lC * C, w->fcb + 4 * lC, BT, C, 4 * C, s);
        matmul_forward(a->output, NULL, fch_gelu, w->fcprojw + 4 * lC * C, w->fcprojb + lC, BT, 4 * C, C, s);
        if (l + 1 < L) {
            size_t nC = (size_t)(l + 1) * C;
            fused_residual_layernorm_forward(residual3, LAYER(a->ln1, l + 1, ln_stride), LAYER(a->ln1_mean, l + 1, BT),
                                             LAYER(a->ln1_rstd, l + 1, BT), residual2, a->output, w->ln1w + nC,
                                             w->ln1b + nC, BT, C, s);
        } else {
            fused_residual_layernorm_forward(residual3, a->lnf, a->lnf_mean, a->lnf_rstd, residual2, a->output, w->lnfw,
                                             w->lnfb, BT, C, s);
        }
    }
    matmul_forward(a->output, NULL, a->lnf, w->wte, NULL, BT, C, Vp, s);
    model->dlogits_ready = 0;
    if (targets == NULL) { model->mean_loss = -1.0f; return -1.0f; }
    if (train) {  // loss and dlogits in one pass; the dloss of gpt2_backward's classifier, bit for bit
        if (model->loss_micro_steps > 0 && BT != model->loss_BT) {
            ls_fatal("forward: micro-steps of one step have different B*T (%d, then %d)", model->loss_BT, BT);
        }
        fused_classifier(a->output, a->losses, loss_scale / (float)BT, a->targets, BT, V, Vp, 1, s);
        fused_classifier_loss_sum(model->d_loss_sum, a->losses, BT, model->loss_micro_steps > 0, s);
        model->loss_micro_steps++;
        model->loss_BT = BT;
        model->dlogits_ready = 1;
        model->dlogits_scale = loss_scale;
        model->dlogits_B = B;
        model->dlogits_T = T;
        return NAN;  // read with gpt2_loss_sum
    }
    fused_classifier(a->output, a->losses, 1.0f, a->targets, BT, V, Vp, 0, s);
    cudaCheck(cudaMemcpyAsync(model->losses_cpu, a->losses, (size_t)BT * sizeof(float), cudaMemcpyDeviceToHost, s));
    cudaCheck(cudaStreamSynchronize(s));
    double sum = 0.0;
    for (int i = 0; i < BT; i++) { sum += model->losses_cpu[i]; }
    model->mean_loss = (float)(sum / BT);
    return model->mean_loss;
}

static float gpt2_forward(GPT2* model, const int* inputs, const int* targets, int B, int T) {
    return gpt2_forward_pass(model, inputs, targets, B, T, 0, 0.0f);
}

// The forward pass of a training micro-step, before gpt2_backward(..., loss_scale): the classifier
// writes the loss and the dlogits in one pass, and nothing is read back (gpt2_loss_sum does).
static LS_UNUSED void gpt2_forward_train(GPT2* model, const int* inputs, const int* targets, int B, int T, float loss_scale) {
    if (targets == NULL) { ls_fatal("gpt2_forward_train: no targets"); }
    gpt2_forward_pass(model, inputs, targets, B, T, 1, loss_scale);
}

// The sum of the mean losses of the gpt2_forward_train calls since gpt2_begin_step. It waits for
// the queued work: call it once the step's backward passes are queued.
static LS_UNUSED double gpt2_loss_sum(GPT2* model) {
    if (model->loss_micro_steps == 0) { return 0.0; }
    double sum = 0.0;
    cudaCheck(cudaMemcpyAsync(&sum, model->d_loss_sum, sizeof(double), cudaMemcpyDeviceToHost, model->stream));
    cudaCheck(cudaStreamSynchronize(model->stream));
    return sum / model->loss_BT;
}

static void gpt2_zero_grad(GPT2* model) {
    size_t ng = model->zero_stage >= 1 ? optim_engine_zero_elems(&model->opt) : model->state_elems;
    cudaCheck(cudaMemsetAsync(model->grads_memory, 0, ng * sizeof(floatX), model->stream));
}

// The gradient of layer l's slice of tensor i (l = 0 for tensors that are not per layer), or NULL
// when it is frozen (BAdam: not in the active block); the backward pass then skips that weight
// gradient.
static floatX* grad_slice(GPT2* model, int i, int l) {
    size_t off = badam_grad_offset(&model->table, model->use_badam ? model->slices : NULL, model->num_slices, i, l);
    return off == BADAM_FROZEN ? NULL : model->grads_memory + off;
}

// The lowest layer the backward pass must reach: 0 when the embeddings train, else the lowest
// layer with a trainable slice (BAdam stops the backward pass there).
static int backward_lowest_layer(const GPT2* model) {
    if (!model->use_badam || model->active_block >= model->badam.num_layers) { return 0; }
    return model->active_block;
}

// master (n) = params (n) widened to fp32 (exact): the master weights of a block BAdam switches in.
static __global__ void badam_master_from_params_kernel(float* master, const floatX* params, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        master[i] = to_float(params[i]);
    }
}

// BAdam at a switch (master weights): the master weights of the engine's new view (the block's
// slices; ZeRO-1: this process's shard of them) = their current floatX parameters, exactly (the
// engine zeroes the view's optimizer state). --offload: the host's master weights.
static void badam_master_from_params(GPT2* model) {
    cudaStream_t s = model->stream;
    const OptimState* st = &model->opt.st;
    for (int k = 0; k < st->nseg; k++) {
        const OptimSegment* g = &st->segs[k];
        if (model->offload) {
            download_floatx(model->master_host + g->offset, model->params_memory + g->param, g->count);
            continue;
        }
        unsigned grid = (unsigned)(CEIL_DIV(g->count, (size_t)256) < 4096 ? CEIL_DIV(g->count, (size_t)256) : 4096);
        launch(badam_master_from_params_kernel, grid, 256, 0, s, model->master_memory + g->offset,
               (const floatX*)model->params_memory + g->param, g->count);
    }
}

// ZeRO-1, after each process updated its shard of the view: every process gets all of them. The
// whole model: the parameters all-gathered in place. A BAdam block: its slices' parameters through
// the compact gradient buffer (free after the update; with --offload-delay 1 a buffer of its own),
// all-gathered there and copied back.
static void zero_gather_params(GPT2* model) {
    if (model->zero_stage < 1) { return; }
    cudaStream_t s = model->stream;
    const OptimEngine* e = &model->opt;
    floatX* buf = model->gather_memory ? model->gather_memory : model->grads_memory;
    watchdog_arm("the parameter all-gather");
    if (e->view < 0) {
        nccl_allgather(model->nccl, model->params_memory, e->parts, s);
        return;
    }
    BadamSlice sl[BADAM_MAX_SLICES];
    int k = badam_block_slices(&model->badam, &model->table, e->view, sl);
    for (int i = 0; i < k; i++) {
        cudaCheck(cudaMemcpyAsync(buf + sl[i].compact, model->params_memory + sl[i].offset,
                                  sl[i].count * sizeof(floatX), cudaMemcpyDeviceToDevice, s));
    }
    nccl_allgather(model->nccl, buf, e->parts, s);
    for (int i = 0; i < k; i++) {
        cudaCheck(cudaMemcpyAsync(model->params_memory + sl[i].offset, buf + sl[i].compact,
                                  sl[i].count * sizeof(floatX), cudaMemcpyDeviceToDevice, s));
    }
}

// --offload cpu: the pending host update (its gradients down, or on their way) runs on the CPU
// now, and its parameters go up once the compute stream's queued work is done with the old ones
// (ZeRO-1: then all-gathered); the compute stream's later work sees them.
static void host_update_apply(GPT2* model) {
    const double t0 = wall_seconds();
    optim_host_update<floatX>(&model->host, &model->opt);
    optim_host_upload(&model->host, &model->opt, model->params_memory, model->stream, true);  // (rounds, piece by piece)
    model->host_update_ms = 1000.0 * (wall_seconds() - t0);
    zero_gather_params(model);
}

// --offload-delay: applies the pending update now (before a checkpoint, a BAdam switch or a view's
// reset), and waits for it.
static void host_update_flush(GPT2* model) {
    if (model->offload != OFFLOAD_CPU || !model->host.pending) { return; }
    host_update_apply(model);
    if (model->nccl) { nccl_comm_sync(model->nccl, model->stream, "the parameter all-gather"); }
    else { cudaCheck(cudaStreamSynchronize(model->stream)); }
}

// Starts training step `step` (from 0): the step plan (llmc/optim/views.h) picks BAdam's block and
// the engine's view of this update (its state zeroed at a switch); the gradients are zeroed.
static void gpt2_begin_step(GPT2* model, int step) {
    model->step = step;
    model->micro_step = 0;
    model->grads_reduced = 0;
    model->loss_micro_steps = 0;
    OptimRun run = {&model->table, model->use_badam ? &model->badam : NULL};
    const OptimPlan plan = optim_plan_step(&run, step, !model->badam_fresh);
    model->opt_step = plan.opt_step;
    model->active_block = plan.block;
    model->num_slices = plan.num_slices;
    memcpy(model->slices, plan.slices, (size_t)plan.num_slices * sizeof(BadamSlice));
    const int view = plan.block >= 0 ? plan.block : OPTIM_VIEW_MODEL;
    if (plan.reset || view != model->opt.view) { host_update_flush(model); }  // the old view's pending update
    if (model->offload) { optim_engine_begin_step_cpu(&model->opt, &plan); }  // the state is on the host
    else { optim_engine_begin_step_device(&model->opt, &plan, model->stream); }  // (ZeRO-1: its parts, opt.parts)
    // at a switch; or on a fresh start in the middle of a block phase (no state to continue)
    if (model->use_badam && (plan.reset || model->badam_master_stale)) {  // stale: resumed without master weights
        if (model->master_memory || model->master_host) { badam_master_from_params(model); }
        model->badam_fresh = model->badam_master_stale = 0;
    }
    // --offload-delay: the last step's gradients may still be going down
    if (model->offload == OFFLOAD_CPU) {
        cudaCheck(cudaStreamWaitEvent(model->stream, model->host.down, 0));
        model->host.early = 0;  // (a skipped update's early gradients are not this step's)
    }
    gpt2_zero_grad(model);
}

// -z 0 with several processes: the gradients of layer l (l = -1: the tensors outside the layers,
// embeddings and final layernorm) summed over the processes in place, on the communicator's
// stream once the compute stream has finished them; the backward pass of the layers below goes on
// meanwhile (it writes other gradients only). BAdam: the active block's slices only.
static void grads_reduce_layer(GPT2* model, int l) {
    NcclComm* nc = model->nccl;
    cudaCheck(cudaEventRecord(nc->ready, model->stream));
    cudaCheck(cudaStreamWaitEvent(nc->stream, nc->ready, 0));
    PROFILE_SCOPE(PROF_COMM, nc->stream);  // the group's all-reduces, timed as one
    nccl_group_start();
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        const ParamTensor* t = &model->table.t[i];
        if (t->per_layer != (l >= 0)) { continue; }
        floatX* g = grad_slice(model, i, l >= 0 ? l : 0);
        if (g) { nccl_allreduce_sum(nc, g, t->rows * t->cols, nc->stream); }
    }
    nccl_group_end();
}

// --offload cpu, undelayed: the gradients of layer l (l = -1: the tensors outside the layers) go
// down as soon as the step's last backward pass has made them (-z 0 over several processes: summed,
// so once `after`, the all-reduce's stream, has them), while it computes the layers below; the
// update's download then sends only the clip scale. BAdam: the block's slices in that layer, at
// their compact places (the view's offsets).
static void grads_down_layer(GPT2* model, int l, cudaStream_t after) {
    optim_host_after(&model->host, after);
    const floatX* grads = (const floatX*)model->grads_memory;
    if (model->use_badam) {
        for (int k = 0; k < model->num_slices; k++) {
            const BadamSlice* sl = &model->slices[k];
            if (model->table.t[sl->tensor].per_layer != (l >= 0) || (l >= 0 && sl->layer != l)) { continue; }
            optim_host_download_part(&model->host, grads, sl->compact, sl->count);
        }
        return;
    }
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        const ParamTensor* t = &model->table.t[i];
        if (t->per_layer != (l >= 0)) { continue; }
        const size_t n = t->rows * t->cols;
        optim_host_download_part(&model->host, grads, t->offset + (l >= 0 ? (size_t)l * n : 0), n);
    }
}

// Backward pass after gpt2_forward_train(..., loss_scale), or after gpt2_forward with targets
// (then the classifier runs here): adds the gradient of (mean loss * loss_scale) to the parameter
// gradients (grad_slice: with BAdam, the active block's only; frozen weights get no weight-gradient matmul, and the pass stops below the lowest active layer). With -z 0 and
// several processes, the step's last micro-step also sums them over the processes, layer by layer.
static void gpt2_backward(GPT2* model, const int* inputs, const int* targets, int B, int T, float loss_scale) {
    (void)inputs; (void)targets;  // on the device since the forward pass (host copy in inputs_cpu)
    if (model->use_badam && model->num_slices == 0) { ls_fatal("gpt2_backward: BAdam needs gpt2_begin_step first (no active block)"); }
    const GPT2Config* c = &model->config;
    int L = c->num_layers, C = c->channels, NH = c->num_heads, V = c->vocab_size, Vp = c->padded_vocab_size;
    int BT = B * T;
    size_t BTC = (size_t)BT * C;
    cudaStream_t s = model->stream;
    ParameterTensorsX* w = &model->params;
    ActivationTensors* a = &model->acts;
    ScratchTensors* d = &model->scratch;
    float* ks = model->kernel_scratch;
    size_t ln_stride = model->recompute >= 2 ? 0 : BTC;
    size_t gelu_stride = model->recompute >= 1 ? 0 : 4 * BTC;
    int reduce = model->nccl && model->zero_stage == 0 && model->micro_step == model->accum - 1;
    // (a pending delayed update still reads the transfer buffer, and ZeRO-1 reduce-scatters after
    // the pass: then all at once in gpt2_update)
    int down = model->offload == OFFLOAD_CPU && (!model->nccl || reduce) && !model->host.pending &&
               model->micro_step == model->accum - 1;
    cudaStream_t down_after = reduce ? model->nccl->stream : s;
    if (reduce) {
        nccl_comm_maybe_hang(model->nccl, model->step + 1);
        watchdog_arm("the gradient all-reduce");  // disarmed after gpt2_grad_norm's sync
    }

    // the classifier: dlogits in place of the logits (gpt2_forward_train wrote them), then into lnf and wte
    if (!model->dlogits_ready) {
        fused_classifier(a->output, a->losses, loss_scale / (float)BT, a->targets, BT, V, Vp, 1, s);
    } else if (model->dlogits_scale != loss_scale || model->dlogits_B != B || model->dlogits_T != T) {
        ls_fatal("gpt2_backward: loss_scale %g and batch (%d, %d), but gpt2_forward_train wrote the dlogits for %g and (%d, %d)",
                 loss_scale, B, T, model->dlogits_scale, model->dlogits_B, model->dlogits_T);
    }
    model->dlogits_ready = 0;
    cudaCheck(cudaMemsetAsync(d->dresidual, 0, BTC * sizeof(floatX), s));
    matmul_backward(d->dbuf, grad_slice(model, P_WTE, 0), NULL, ks, a->output, a->lnf, w->wte, NULL, BT, C, Vp, s);
    layernorm_backward(d->dresidual, grad_slice(model, P_LNFW, 0), grad_slice(model, P_LNFB, 0), ks, d->dbuf,
                       LAYER(a->residual3, L - 1, BTC), w->lnfw, a->lnf_mean, a->lnf_rstd, BT, C, s);
    int lowest = backward_lowest_layer(model);
    for (int l = L - 1; l >= lowest; l--) {
        size_t lC = (size_t)l * C;
        const floatX* residual = l == 0 ? a->encoded : LAYER(a->residual3, l - 1, BTC);
        floatX* ln1 = LAYER(a->ln1, l, ln_stride);
        floatX* ln2 = LAYER(a->ln2, l, ln_stride);
        floatX* fch = LAYER(a->fch, l, 4 * BTC);
        floatX* fch_gelu = LAYER(a->fch_gelu, l, gelu_stride);
        floatX* residual2 = LAYER(a->residual2, l, BTC);
        float* ln1_mean = LAYER(a->ln1_mean, l, BT);
        float* ln1_rstd = LAYER(a->ln1_rstd, l, BT);
        float* ln2_mean = LAYER(a->ln2_mean, l, BT);
        float* ln2_rstd = LAYER(a->ln2_rstd, l, BT);
        floatX *dfcprojw = grad_slice(model, P_FCPROJW, l), *dfcw = grad_slice(model, P_FCW, l);
        floatX *dattprojw = grad_slice(model, P_ATTPROJW, l), *dqkvw = grad_slice(model, P_QKVW, l);
        // recompute what -r dropped (only weight gradients read it: not for a frozen layer)
        if (model->recompute >= 1 && dfcprojw) { gelu_forward(fch_gelu, fch, 4 * BTC, s); }
        if (model->recompute >= 2 && (dqkvw || dfcw)) {
            layernorm_forward(ln1, ln1_mean, ln1_rstd, residual, w->ln1w + lC, w->ln1b + lC, BT, C, s);
            layernorm_forward(ln2, ln2_mean, ln2_rstd, residual2, w->ln2w + lC, w->ln2b + lC, BT, C, s);
        }
        // dresidual holds d residual3[l]: the MLP block (fcproj, GELU through the epilogue, fc)
        matmul_backward(d->dfch, dfcprojw, grad_slice(model, P_FCPROJB, l), ks, d->dresidual, fch_gelu,
                        w->fcprojw + 4 * lC * C, fch, BT, 4 * C, C, s);
        matmul_backward(d->dbuf, dfcw, grad_slice(model, P_FCB, l), ks, d->dfch, ln2, w->fcw + 4 * lC * C, NULL,
                        BT, C, 4 * C, s);
        layernorm_backward(d->dresidual, grad_slice(model, P_LN2W, l), grad_slice(model, P_LN2B, l), ks, d->dbuf,
                           residual2, w->ln2w + lC, ln2_mean, ln2_rstd, BT, C, s);
        // dresidual holds d residual2[l]: the attention block
        matmul_backward(d->datty, dattprojw, grad_slice(model, P_ATTPROJB, l), ks, d->dresidual,
                        LAYER(a->atty, l, BTC), w->attprojw + lC * C, NULL, BT, C, C, s);
        if (model->flash) {
            attention_backward_cudnn(d->dqkv, d->datty, LAYER(a->qkvr, l, 3 * BTC), LAYER(a->atty, l, BTC),
                                     LAYER(a->att_stats, l, (size_t)B * NH * T), B, T, NH, C,
                                     model->flash == 1, ks, model->kernel_scratch_bytes, s);
        } else {
            attention_backward(d->dqkv, d->dqkvr, d->datt, (floatX*)ks, d->datty, LAYER(a->qkvr, l, 3 * BTC),
                               LAYER(a->att, l, (size_t)B * NH * T * T), B, T, C, NH, s);
        }
        matmul_backward(d->dbuf, dqkvw, grad_slice(model, P_QKVB, l), ks, d->dqkv, ln1, w->qkvw + 3 * lC * C, NULL,
                        BT, C, 3 * C, s);
        layernorm_backward(d->dresidual, grad_slice(model, P_LN1W, l), grad_slice(model, P_LN1B, l), ks, d->dbuf,
                           residual, w->ln1w + lC, ln1_mean, ln1_rstd, BT, C, s);
        if (reduce) { grads_reduce_layer(model, l); }  // layer l's gradients are complete
        if (down) { grads_down_layer(model, l, down_after); }
    }
    unsigned rounding_seed = (unsigned)srng_bits(srng_step_key(model->seed, model->step + 1), (size_t)model->micro_step++, 4);
    floatX *dwte = grad_slice(model, P_WTE, 0), *dwpe = grad_slice(model, P_WPE, 0);
    if (dwte && dwpe) { encoder_backward(dwte, dwpe, ks, d->dresidual, a->inputs, model->inputs_cpu, B, T, C, rounding_seed, s); }
    if (reduce) { grads_reduce_layer(model, -1); }
    if (down) { grads_down_layer(model, -1, down_after); }
    if (reduce) {
        cudaCheck(cudaEventRecord(model->nccl->reduced, model->nccl->stream));
        model->grads_reduced = 1;
    }
}

// Host<->device bytes the optimizer moves per step with --offload: stream, the state and master
// weights both ways; cpu, the gradients down and the parameters up.
static size_t offload_bytes_per_step(const GPT2* model) {
    if (model->offload == OFFLOAD_CPU) { return 2 * model->opt.max_elems * sizeof(floatX); }
    return model->offload ? 2 * (model->opt.bytes + (model->use_master ? model->opt.max_elems * sizeof(float) : 0)) : 0;
}

// --offload-delay 1 past its warm-up: this step's host update runs under the next step.
static int host_update_delayed(const GPT2* model) {
    return model->offload == OFFLOAD_CPU && model->delay && model->step >= model->delay_warmup;
}

// Elements of BAdam's active block (its compact gradients).
static size_t badam_active_elems(const GPT2* model) {
    const BadamSlice* last = &model->slices[model->num_slices - 1];
    return last->compact + last->count;
}

// The global norm of the gradients before clipping (BAdam: of the active block), and on the
// device the clip scale that gpt2_update applies. One sync: the training loop looks at the norm
// first, so a NaN/Inf or outlier step can be skipped before anything changes.
static float gpt2_grad_norm(GPT2* model, float grad_clip, float inv_loss_scale) {
    cudaStream_t s = model->stream;
    if (model->use_badam && model->num_slices == 0) { ls_fatal("gpt2_grad_norm: BAdam needs gpt2_begin_step first (no active block)"); }
    // --offload-delay: the last step's host update runs here, while the GPU works through this
    // step's queued forward and backward passes; its parameters go up after them
    if (model->offload == OFFLOAD_CPU && model->host.pending) { host_update_apply(model); }
    float* partials = model->d_norm_scratch;
    float* sumsq = partials + GLOBAL_NORM_MAX_BLOCKS;
    float* norm = sumsq + 1;
    float* scale = sumsq + 2;
    size_t n_grads = model->use_badam ? badam_active_elems(model) : model->num_parameters;
    const floatX* grads = model->grads_memory;
    NcclComm* nc = model->nccl;
    if (nc && model->zero_stage >= 1) {  // this process's part of the summed gradients, in place
        nccl_comm_maybe_hang(nc, model->step + 1);
        watchdog_arm("the gradient reduce-scatter");
        const size_t* parts = model->opt.parts;  // (BAdam: of the block)
        nccl_reduce_scatter_sum(nc, model->grads_memory, parts, s);
        grads = model->grads_memory + parts[nc->rank];
        n_grads = parts[nc->rank + 1] - parts[nc->rank];  // the padding is 0
    } else if (nc && model->grads_reduced) {
        cudaCheck(cudaStreamWaitEvent(s, nc->reduced, 0));  // issued layer by layer in the backward pass
    } else if (nc) {  // a backward pass that did not know it was the last micro-step: all at once
        nccl_comm_maybe_hang(nc, model->step + 1);
        watchdog_arm("the gradient all-reduce");
        nccl_allreduce_sum(nc, model->grads_memory, n_grads, s);
    }
    global_norm_squared(sumsq, grads, n_grads, partials, s);
    if (nc && model->zero_stage >= 1) { nccl_allreduce_sum_f32(nc, sumsq, 1, s); }  // over the shards
    global_norm_clip_scale(scale, norm, sumsq, grad_clip, s, inv_loss_scale);
    float norm_host = 0.0f;
    cudaCheck(cudaMemcpyAsync(&norm_host, norm, sizeof(float), cudaMemcpyDeviceToHost, s));
    if (nc) { nccl_comm_sync(nc, s, "the gradient reduction"); } else { cudaCheck(cudaStreamSynchronize(s)); }
    return norm_host;
}

// Testing (--inject-nan): one NaN in the gradients, as an overflow in the backward pass would leave.
static LS_UNUSED void gpt2_poison_grads(GPT2* model) {
    const float nan_value = NAN;
    upload_floatx(model->grads_memory, &nan_value, 1);
}

// Clip (with the device scale of gpt2_grad_norm) and update with the optimizer engine: all
// parameters, the BAdam block or the ZeRO-1 shard (then all-gather); --offload streams fp32 AdamW's
// state through the staging buffers. The step counter is the plan's (BAdam: from the switch).
static void gpt2_update(GPT2* model, float lr, int step) {
    (void)step;  // the plan's opt_step counts the optimizer's steps
    cudaStream_t s = model->stream;
    const float* scale = model->d_norm_scratch + GLOBAL_NORM_MAX_BLOCKS + 2;
    const floatX* grads = model->grads_memory;  // ZeRO-1: the shard's; the segments keep the parameters' place
    if (model->zero_stage >= 1) { grads += model->opt.parts[model->nccl->rank]; }
    if (model->offload == OFFLOAD_CPU) {  // the gradients down; the update now, or under the next step
        // (down layer by layer already, unless backward passes followed the one that sent them)
        if (model->micro_step != model->accum) { model->host.early = 0; }
        optim_host_download(&model->host, &model->opt, grads, scale, lr, model->opt_step, s);
        if (host_update_delayed(model)) { return; }
        host_update_apply(model);
        if (model->nccl) { nccl_comm_sync(model->nccl, s, "the parameter all-gather"); } else { cudaCheck(cudaStreamSynchronize(s)); }
        return;
    } else if (model->offload) {
        optim_offload_step(&model->offl, &model->opt, model->params_memory, model->master_host, grads, lr,
                           model->opt_step, true, scale, s);
    } else {
        optim_engine_step_gpu(&model->opt, model->params_memory, model->master_memory, grads, lr, model->opt_step,
                              true, scale, s);
    }
    zero_gather_params(model);  // every process's updated shard to every process
    if (model->nccl) { nccl_comm_sync(model->nccl, s, "the parameter all-gather"); } else { cudaCheck(cudaStreamSynchronize(s)); }
}

// ----------------------------------------------------------------------------
// the rest of what a run needs from this trainer (llmc/run/trainer.h)

static LS_UNUSED const float* gpt2_logits_row(GPT2* model, int t) {
    int Vp = model->config.padded_vocab_size;
    download_floatx(model->logits_row_cpu, model->acts.output + (size_t)t * Vp, (size_t)Vp);
    return model->logits_row_cpu;
}

// (gpt2_forward with targets copied them to the host)
static LS_UNUSED const float* gpt2_token_losses(GPT2* model) { return model->losses_cpu; }

// LEANSTEP_EVAL_SHAPES=exact: gpt2_eval_shape keeps every shape (a set of cuDNN graphs each), to
// compare with the padded forwards; =padded (or unset): the default.
static int eval_shapes_exact(void) {
    static int exact = -1;
    if (exact < 0) {
        const char* s = getenv("LEANSTEP_EVAL_SHAPES");
        if (s != NULL && s[0] != '\0' && strcmp(s, "exact") != 0 && strcmp(s, "padded") != 0) {
            ls_fatal("LEANSTEP_EVAL_SHAPES='%s': exact or padded expected", s);
        }
        exact = s != NULL && strcmp(s, "exact") == 0;
    }
    return exact;
}

// With cuDNN attention every new (B, T) builds cuDNN graphs (hundreds of ms each), so a forward
// outside training runs at T rounded up to a power of two from 64 (at most the model's T) and at B =
// 1 or the model's B: sampling (B = 1, T = 1..gen_T) and HellaSwag (its last batch short) then
// build a handful of graphs, not one per length. The matmul attention builds nothing: (B, T).
static LS_UNUSED void gpt2_eval_shape(const GPT2* model, int B, int T, int* Bp, int* Tp) {
    *Bp = B;
    *Tp = T;
    if (!model->flash || eval_shapes_exact()) { return; }
    int t = 64;
    while (t < T) { t *= 2; }
    if (t > model->T) { t = model->T; }
    if (t > T) { *Tp = t; }
    if (B > 1 && B < model->B) { *Bp = model->B; }
}

// The model file holds the parameters exactly as trained: fp32 (version 3) in the fp32 build,
// bf16 (version 5) in the bf16 build, by rank 0; the state file (one per process) holds the
// engine's block of the current view (llmc/io/checkpoint.h, version 2: the CPU trainer's layout)
// and the view's master weights (--offload: all of them).
static LS_UNUSED void gpt2_checkpoint_write(GPT2* model, const char* model_path, const char* state_path, const RunState* rs) {
    size_t n = model->num_parameters;
    host_update_flush(model);  // --offload-delay: the parameters and state of every update so far
    if (rs->process_rank == 0) {  // the parameters are the same on every process
        float* host = (float*)mallocCheck(n * sizeof(float));
        download_floatx(host, model->params_memory, n);
        model_file_write(model_path, &model->config, host, FLOATX_IS_BF16 ? MODEL_VERSION_BF16 : MODEL_VERSION_FP32);
        free(host);
    }
    const OptimState* st = &model->opt.st;
    RunState r = *rs;
    r.num_params = st->bytes / sizeof(float);
    r.optim_tag = optim_engine_tag(&model->opt.cfg);
    r.num_master = st->n;
    if (model->offload) {  // on the host already
        state_file_write(state_path, &r, st->memory, model->use_master ? model->master_host : NULL);
        return;
    }
    void* block = mallocCheck(st->bytes + 4);
    if (st->bytes > 0) { cudaCheck(cudaMemcpy(block, st->memory, st->bytes, cudaMemcpyDeviceToHost)); }
    float* master = model->use_master ? (float*)mallocCheck(r.num_master * sizeof(float) + 4) : NULL;
    if (master && r.num_master > 0) {
        cudaCheck(cudaMemcpy(master, model->master_memory, r.num_master * sizeof(float), cudaMemcpyDeviceToHost));
    }
    state_file_write(state_path, &r, block, master);
    free(master);
    free(block);
}

// A checkpoint with master weights resumed by a run without them (the fp32 build, -w 0): they are
// the exact trained parameters (the model file holds their bf16 rounding), so the parameters are
// taken from them: those of the engine's view of the last update (its segments say where each
// goes: the BAdam block's slices, this process's ZeRO-1 shard), then every process gathers the
// others' (ZeRO-1).
static void gpt2_params_from_master(GPT2* model, const float* master) {
    const OptimState* st = &model->opt.st;
    for (int k = 0; k < st->nseg; k++) {
        upload_floatx(model->params_memory + st->segs[k].param, master + st->segs[k].offset, st->segs[k].count);
    }
    if (model->zero_stage >= 1) {
        zero_gather_params(model);
        nccl_comm_sync(model->nccl, model->stream, "the parameter all-gather");
    }
}

// Resuming (-y): the engine's view of the last update (step - 1) is set up, then read. A run with
// master weights resuming from a checkpoint without them (an fp32 or -w 0 run) keeps the master
// weights gpt2_build made from the model file's fp32 parameters (BAdam: the active block's, made
// from the parameters at the first step, gpt2_begin_step).
static LS_UNUSED void gpt2_state_read(GPT2* model, const char* state_path, RunState* rs) {
    RunState head;
    state_file_read_header(state_path, &head);
    OptimEngine* e = &model->opt;
    const int view = optim_engine_view_of_step(e, head.step > 0 ? head.step - 1 : 0);
    if (model->offload) { optim_engine_set_view_cpu(e, view); }  // the chunks are cut again at the next step
    else { optim_engine_set_view_device(e, view); }
    OptimState* st = &e->st;
    size_t nm = st->n;
    const int host_master = model->offload == OFFLOAD_CPU || (model->offload && model->use_master);  // read in place
    float* master = host_master ? model->master_host : (float*)mallocCheck(nm * sizeof(float) + 4);
    void* block = model->offload ? st->memory : mallocCheck(st->bytes + 4);
    // version-1 fp32 AdamW files (m, v): into the block's carve (host), uploaded with it
    const int v1_adamw = e->cfg.kind == OPT_ADAMW && e->cfg.state == OPT_STATE_FP32 && !e->cfg.amsgrad && st->n > 0;
    float* hm = v1_adamw ? (float*)((char*)block + ((char*)st->m - (char*)st->memory)) : NULL;
    float* hv = v1_adamw ? (float*)((char*)block + ((char*)st->v - (char*)st->memory)) : NULL;
    if (v1_adamw) { memset(block, 0, st->bytes); }
    StateExpect want = {st->bytes / sizeof(float), optim_engine_tag(&e->cfg), optim_engine_tag_describe, nm, hm, hv,
                        st->n};
    int had_master = state_file_read(state_path, &want, rs, block, master);
    if (!model->offload) {
        if (st->bytes > 0) { cudaCheck(cudaMemcpy(st->memory, block, st->bytes, cudaMemcpyHostToDevice)); }
        free(block);
    }
    if (had_master && model->use_master && !model->offload && nm > 0) {
        cudaCheck(cudaMemcpy(model->master_memory, master, nm * sizeof(float), cudaMemcpyHostToDevice));
    } else if (had_master && !model->use_master) {
        gpt2_params_from_master(model, master);
    } else if (!had_master && (model->use_master || model->offload == OFFLOAD_CPU) && model->use_badam) {
        model->badam_master_stale = 1;
    }
    if (master != model->master_host) { free(master); }
    model->badam_fresh = 0;  // BAdam: the state of the step's block, unless the step starts a new one
}

// Peak dense FLOP/s by device name, for MFU. 0: unknown (MFU is then not printed).
typedef struct { const char* name; double bf16, fp32; } GpuPeak;
static const GpuPeak gpu_peaks[] = {
    {"H200", 989e12, 67e12},         {"H100 PCIe", 756e12, 51e12}, {"H100 NVL", 835e12, 60e12},
    {"H100", 989e12, 67e12},         {"A100", 312e12, 19.5e12},    {"L40S", 362e12, 91.6e12},
    {"RTX 4090", 165e12, 82.6e12},   {"A10", 125e12, 31.2e12},     {"L4", 121e12, 30.3e12},
};

static double gpu_peak_flops(void) {
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) { return 0.0; }
    for (size_t i = 0; i < sizeof(gpu_peaks) / sizeof(gpu_peaks[0]); i++) {
        if (strstr(prop.name, gpu_peaks[i].name)) { return FLOATX_IS_LOWP ? gpu_peaks[i].bf16 : gpu_peaks[i].fp32; }
    }
    return 0.0;
}

#define TRAINER_FLAGS CLI_GPU
#define TRAINER_SUMMARY "Train GPT-2 on one GPU (" PRECISION_NAME ", cuBLASLt, fused AdamW). Flags follow llm.c's train_gpt2cu."

static LS_UNUSED void trainer_defaults(TrainOptions* o) {
    o->T = 1024;
    o->attention = FLOATX_IS_BF16 ? ATTENTION_CUDNN : ATTENTION_MATMUL;  // flash attention is bf16 only
    if (FLOATX_IS_FP16) { o->loss_scale = 65536.0f; }  // fp16 gradients underflow without it (llmc/run/loss_scale.h)
}

static NcclComm trainer_nccl;  // the communicator of a run with several processes

// One process: device 0. Several: each its local rank's device, connected by NCCL, which also
// carries the training loop's host-side sums from now on (o->comm's backend).
static LS_UNUSED void trainer_init(const TrainOptions* o) {
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
        ls_fatal("no CUDA GPU found (cudaGetDeviceCount: %s%s); train on the CPU with `make train`",
                 err != cudaSuccess ? cudaGetErrorString(err) : "0 devices",
                 err == cudaErrorInsufficientDriver ? ": no NVIDIA driver, or one older than this CUDA" : "");
    }
    gpu_check_flags(o);
    if (gpu_procs(o) > 1) {
        CommOptions co = train_options_comm(o);
        nccl_comm_init(&trainer_nccl, o->comm, &co);
        cuda_check_device_arch(trainer_nccl.device);
        return;
    }
    cudaCheck(cudaSetDevice(0));
    cuda_check_device_arch(0);
}

// A matrix multiply that does nothing: Muon's host step timed without its Newton-Schulz products.
static void gemm_skip(int trans_a, int trans_b, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
                      int ldb, float beta, float* C, int ldc) {
    (void)trans_a; (void)trans_b; (void)M; (void)N; (void)K; (void)alpha; (void)A; (void)lda; (void)B; (void)ldb;
    (void)beta; (void)C; (void)ldc;
}

// --memory-report with --offload cpu: the host step (the gradients widened, the CPU update over the
// master weights, the parameters rounded: what optim_host_update runs), measured now with this
// run's threads on a one-layer slice of the model (small vocabulary), the median of 3 after a
// warm-up: seconds per parameter. Muon's Newton-Schulz products are a far larger share of the
// slice than of the model, so the step is timed without them and they apart, once (long enough):
// seconds per FLOP (else 0). round_share: the rounding's share of the timed step (what the upload's
// pieces overlap).
static void host_step_cost(const TrainOptions* o, const GPT2Config* c, double* sec_per_param, double* sec_per_flop,
                           double* round_share) {
    char desc[96];
    snprintf(desc, sizeof(desc), "L1C%dH%dT%dV1024", c->channels, c->num_heads, c->max_seq_len);
    GPT2Config sc;
    gpt2_config_from_descriptor(desc, &sc);
    ParamTable pt;
    param_table_build(&pt, &sc);
    const OptimConfig cfg = train_options_optimizer(o);
    OptimHostTimer h;
    optim_host_timer_init(&h, &cfg, &pt, gemm_skip);
    double t[3], rounding = 0.0;
    for (int r = -1; r < 3; r++) {
        double sec[3];
        optim_host_timer_step(&h, r + 2, FLOATX_IS_LOWP, sec);  // (fp16: bf16's bytes and work)
        if (r >= 0) {
            t[r] = sec[0] + sec[1] + sec[2];
            rounding += sec[2];
        }
    }
    const double lo = t[0] < t[1] ? t[0] : t[1], hi = t[0] < t[1] ? t[1] : t[0];
    *sec_per_param = (t[2] < lo ? lo : t[2] > hi ? hi : t[2]) / (double)h.n;
    *round_share = FLOATX_IS_LOWP ? rounding / (t[0] + t[1] + t[2]) : 0.0;  // (fp32: the master weights go up as they are)
    *sec_per_flop = 0.0;
#ifdef LS_HOST_BLAS
    if (cfg.kind == OPT_MUON) {  // the slice's Newton-Schulz products: its iterations, less their own
        const OptimState* st = &h.e.st;  // elementwise passes (the step above timed those)
        float* x = (float*)h.e.work;  // (its scratch: X, X', A and B')
        double sec = 0.0, flops = 0.0;
        for (int k = 0; k < st->nseg; k++) {
            const OptimSegment* sg = &st->segs[k];
            if (sg->mat_rows == 0) { continue; }
            const size_t rows = muon_rows(sg, cfg.muon_qkv_joined), cols = sg->mat_cols, n = rows * cols;
            const size_t kk = rows < cols ? rows : cols, KK = rows < cols ? cols : rows;
            for (int pass = 0; pass < 2; pass++) {
                for (size_t i = 0; i < n; i++) { x[i] = (0.001f * (float)(i % 37) - 0.018f) / sqrtf((float)kk); }
                const double t0 = wall_seconds();
                muon_newton_schulz(pass ? gemm_skip : blas_gemm, x, x + n, x + 2 * n, x + 2 * n + kk * kk, (int)kk, (int)KK);
                sec += (pass ? -1.0 : 1.0) * (wall_seconds() - t0) * (double)(sg->count / n);
            }
            flops += muon_ns_flops(sg->count / n, rows, cols);
        }
        *sec_per_flop = (sec > 0.0 ? sec : 0.0) / flops;
    }
#endif
    optim_host_timer_free(&h);
}

// The host's memory bandwidth with AdamW's access pattern (read 4 fp32 streams, write 3), GB/s:
// 2^25 elements per stream, this run's threads, the best of 3.
static double host_probe_gbs(void) {
    const size_t n = (size_t)1 << 25;
    float* b = (float*)mallocCheck(4 * n * sizeof(float));
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < 4 * n; i++) { b[i] = 0.001f * (float)(i % 37); }
    double best = 1e30;
    for (int r = 0; r < 3; r++) {
        const double t0 = wall_seconds();
        float *p = b, *g = b + n, *m = b + 2 * n, *v = b + 3 * n;
        #pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++) {
            const float gi = g[i];
            m[i] = m[i] * 0.999f + gi;
            v[i] = v[i] * 0.999f + gi;
            p[i] = p[i] * 0.999f + gi;
        }
        const double dt = wall_seconds() - t0;
        if (dt < best) { best = dt; }
    }
    free(b);
    return 28.0 * (double)n / best / 1e9;
}

// --memory-report with --offload: the step time predicted from the GPU's achieved FLOP/s, PCIe's
// bandwidth and the host's (measured, or the flags), showing what the GPU step hides and what it
// does not. cpu: the gradients go down during or after the backward pass, the host update runs, the
// parameters come up (piece by piece under the rounding); undelayed what outlasts the pass adds to
// the step, with --offload-delay 1 it runs under the next step's forward and backward and only what
// exceeds them shows. stream: the state and master weights cross PCIe both ways (the update's
// kernels hide under the copies).
static void offload_predict(const GPT2Config* c, const TrainOptions* o, const OptimSizes* z, int accum) {
    const double n = (double)z->max_elems;  // the view's elements (ZeRO-1: this process's part)
    const double tokens = (double)o->B * o->T * accum;
    const double gpu_ms = 1e3 * gpt2_flops_per_token(c, o->T) * tokens / (1e12 * o->predict_gpu_tflops);
    const double pcie = 1e9 * o->predict_pcie_gbs;
    printf("predicted step (GPU %g TFLOP/s achieved, PCIe %g GB/s each way): forward and backward %.1f ms (%.0f tokens)\n",
           o->predict_gpu_tflops, o->predict_pcie_gbs, gpu_ms, tokens);
    if (o->offload == OFFLOAD_STREAM) {
        const double bytes = (double)z->bytes + (FLOATX_IS_LOWP && o->master_weights ? 4.0 * n : 0.0);
        const double copy_ms = 1e3 * 2.0 * bytes / pcie;  // both ways (the copy engines may overlap them: at most)
        printf("  --offload stream: %.0f MiB of state and master weights up and down, %.1f ms after the backward pass: "
               "step %.1f ms (+%.0f%%)\n", bytes / 1048576.0, copy_ms, gpu_ms + copy_ms, 100.0 * copy_ms / gpu_ms);
        return;
    }
    int threads = omp_get_max_threads();
    const int target = o->predict_host_threads > 0 ? o->predict_host_threads : threads;
    const double host_gbs = o->predict_host_gbs > 0 ? o->predict_host_gbs : host_probe_gbs();
    const OptimConfig cfg = train_options_optimizer(o);
    const double bpp = optim_update_bytes_per_param(&cfg) + (FLOATX_IS_LOWP ? 12.0 : 0.0);  // + widen 2+4, round 4+2
    double per_param, per_flop, round_share;
    host_step_cost(o, c, &per_param, &per_flop, &round_share);
    // at `threads`: the elementwise work by parameters, Muon's products by their FLOPs (the view's
    // share of the model's)
    ParamTable mt;
    param_table_build(&mt, c);
    const int nseg = optim_segments_count_layers(&mt);
    OptimSegment* segs = (OptimSegment*)mallocCheck((size_t)nseg * sizeof(OptimSegment));
    optim_segments_build_layers(&mt, 0.0f, segs);
    const double ns_flops = per_flop > 0.0 ? muon_table_ns_flops(segs, nseg, cfg.muon_qkv_joined) * n / (double)mt.total : 0.0;
    free(segs);
    const double measured = per_param * n + per_flop * ns_flops;
    const double floor_s = bpp * n / (1e9 * host_gbs);
    double host_s = measured * (double)threads / (double)target;  // the compute scales with the threads...
    if (host_s < floor_s) { host_s = floor_s; }                     // ...down to the memory bandwidth
    const double xfer_ms = 1e3 * n * (double)sizeof(floatX) / pcie, host_ms = 1e3 * host_s;
    // the parameters go up in OPTIM_HOST_UP_PIECES pieces, each while the host rounds the next: a
    // two-stage pipeline, P pieces of round_ms / P then xfer_ms / P each
    const double round_ms = host_ms * round_share * per_param * n / measured, update_ms = host_ms - round_ms;
    const double P = OPTIM_HOST_UP_PIECES, slow = round_ms > xfer_ms ? round_ms : xfer_ms;
    const double up_ms = (round_ms + xfer_ms + (P - 1.0) * slow) / P;  // the rounding and the copies, after the update
    const double side = xfer_ms + update_ms + up_ms;
    // undelayed (but with ZeRO-1, which reduce-scatters after the pass): the gradients go down layer
    // by layer during the backward pass (two thirds of the GPU's FLOPs), so only what outlasts it
    // adds to the step
    const int per_layer = !(gpu_procs(o) > 1 && gpu_zero_stage(o) >= 1);
    const double down_left = per_layer ? (xfer_ms > 2.0 * gpu_ms / 3.0 ? xfer_ms - 2.0 * gpu_ms / 3.0 : 0.0) : xfer_ms;
    const double undelayed = down_left + update_ms + up_ms;
    printf("  --offload cpu: gradients down %.1f ms, host update %.1f ms, parameters up %.1f ms\n", xfer_ms, host_ms, xfer_ms);
    if (round_ms > 0.0) {
        printf("    (the update's rounding to %s, %.1f ms, and the parameters' copies in %d pieces: %.1f ms after the update)\n",
               PRECISION_NAME, round_ms, OPTIM_HOST_UP_PIECES, up_ms);
    }
    printf("    (host update: measured here at %.2f ns/param with %d thread%s, scaled to %d, at least %.0f B/param at %.1f GB/s%s)\n",
           1e9 * measured / n, threads, threads == 1 ? "" : "s", target, bpp, host_gbs,
           o->predict_host_gbs > 0 ? "" : " measured");
    if (ns_flops > 0.0) {
        printf("    (of which Muon's Newton-Schulz: %.0f GFLOP at %.1f GFLOP/s measured here, %.1f ms)\n", ns_flops / 1e9,
               1e-9 / per_flop, 1e3 * per_flop * ns_flops);
    }
    printf("    undelayed: step %.1f ms, %.1f ms exposed (+%.0f%%)%s\n", gpu_ms + undelayed, undelayed,
           100.0 * undelayed / gpu_ms, per_layer ? " (the gradients down during the backward pass)" : "");
    const double exposed = side > gpu_ms ? side - gpu_ms : 0.0;
    printf("    --offload-delay 1: step %.1f ms, %.1f ms hidden under the GPU step, %.1f ms exposed (+%.0f%%)\n",
           gpu_ms + exposed, side - exposed, exposed, 100.0 * exposed / gpu_ms);
}

static LS_UNUSED void trainer_memory_report(const GPT2Config* c, const TrainOptions* o) {
    gpu_check_flags(o);
    size_t chunk = o->offload == OFFLOAD_STREAM ? optim_chunk_elems(gpt2_num_parameters(c), (size_t)o->offload_chunk) : 0;
    size_t badam_block = badam_block_for(c, o, 1);
    OptimSizes z = train_options_optim_sizes(o, c, 0, gpu_zero_stage(o) ? gpu_procs(o) : 1);
    GpuMemoryOptions g = gpu_memory_options(c, o->B, o->T, o->recompute, FLOATX_IS_LOWP && o->master_weights, chunk,
                                            badam_block, gpu_zero_stage(o), gpu_procs(o), z.bytes, z.max_elems,
                                            attention_flash_mode(o));
    g.stage_bytes = z.stage_bytes;
    g.stage_elems = z.stage_elems;
    g.zero_elems = z.zero_elems;
    g.host_update = o->offload == OFFLOAD_CPU;
    g.opt_work_bytes = g.host_update ? 0 : z.gpu_work_bytes[FLOATX_IS_LOWP ? 0 : 1];
    g.host_work_bytes = g.host_update ? z.work_bytes : 0;
    if (g.host_update && o->offload_delay && gpu_zero_stage(o) >= 1 && badam_block > 0) {  // (gpt2_gather_elems)
        g.gather_elems = memory_zero_elems(z.zero_elems, badam_block, gpu_procs(o));
    }
    MemoryReport predicted = memory_model_gpu(c, o->B, o->T, &g);
    printf("GPU memory (%s, recompute %d, master weights %s, attention %s", PRECISION_NAME, o->recompute,
           g.master_weights ? "on" : "off", attention_choices[o->attention]);
    if (gpu_procs(o) > 1) { printf(", per process of %d, -z %d", gpu_procs(o), gpu_zero_stage(o)); }
    printf("):\n");
    memory_report_print(stdout, &predicted, gpt2_num_parameters(c));
    if (o->offload != OFFLOAD_OFF) { offload_predict(c, o, &z, train_options_accum_steps(o, c, gpu_procs(o))); }
}

static LS_UNUSED void trainer_describe(const GPT2* model, const TrainOptions* o, int accum) {
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, 0));
    size_t v = cublasLtGetVersion();  // the library the matmuls run in: major * 10000 + minor * 100 + patch
    const char* archs = cuda_build_archs();
    printf("leanstep train_gpt2cu (%s%s%s), device: %s (sm_%d%d)%s, matmuls: cuBLASLt %zu.%zu.%zu\n", PRECISION_NAME,
           archs[0] ? ", kernels for " : "", archs, prop.name, prop.major, prop.minor,
           gpu_peak_flops() > 0 ? "" : " (peak FLOP/s unknown: no MFU)", v / 10000, v / 100 % 100, v % 100);
    gpt2_describe(&model->config, model->num_parameters, o, accum);
    printf("recompute %d, master weights %s, attention %s", model->recompute, model->use_master ? "on" : "off",
           model->flash ? attention_choices[model->flash == 1 ? ATTENTION_CUDNN : ATTENTION_CUDNN_FAST] : "matmul");
    if (model->offload == OFFLOAD_CPU) {
        printf(", optimizer step on the host CPU (%d threads)%s, %.1f MiB host<->device per step", omp_get_max_threads(),
               model->delay ? ", delayed one step" : "", mib(offload_bytes_per_step(model)));
        if (model->delay) { printf(" (the first %d steps undelayed)", model->delay_warmup); }
    } else if (model->offload) {
        printf(", optimizer state offloaded to host: chunks of %zu elements, %.1f MiB host<->device per step",
               model->chunk, mib(offload_bytes_per_step(model)));
    }
    printf("\n");
    badam_block_for(&model->config, o, 1);  // its line
    int procs = model->nccl ? model->nccl->size : 1;
    GpuMemoryOptions g = gpt2_memory_options(model, model->B, model->T, procs);
    if (procs > 1) { printf("memory per process (%d processes, -z %d):\n", procs, model->zero_stage); }
    MemoryReport predicted = memory_model_gpu(&model->config, model->B, model->T, &g);
    memory_report_print(stdout, &predicted, model->num_parameters);
    memory_check_allocation(&predicted, &model->mem);
    size_t free_b = 0, total_b = 0;
    cudaCheck(cudaMemGetInfo(&free_b, &total_b));
    printf("device memory: %.1f MiB free of %.1f MiB\n", mib(free_b), mib(total_b));
}

// --profile: events around every kernel family's calls during one step (llmc/cuda/profile.cuh).
static LS_UNUSED void trainer_profile(GPT2* model, const TrainOptions* o, int begin) {
    if (begin) { profile_start(model->stream); return; }
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, 0));
    char title[400];
    snprintf(title, sizeof(title), "one training step of %s, B %d, T %d, %d micro-step(s), %s, on %s; device time per kernel family",
             o->model, o->B, o->T, model->accum, PRECISION_NAME, prop.name);
    profile_finish(model->stream, stdout, title);
    profile_free();
}

static LS_UNUSED void trainer_step_extra(const GPT2* model, const TrainOptions* o, double tok_per_s, char* buf, size_t len) {
    size_t used = 0;
    buf[0] = '\0';
    double peak = gpu_peak_flops();
    if (peak > 0) {
        double mfu = tok_per_s * gpt2_flops_per_token(&model->config, o->T) / peak;
        used += (size_t)snprintf(buf, len, " %.1f%% %s MFU |", 100.0 * mfu, PRECISION_NAME);
    }
    if (model->offload == OFFLOAD_CPU && used < len) {  // (delayed: the update that ran under this step)
        snprintf(buf + used, len - used, " %.0f MiB h<->d, host update %.1f ms |", mib(offload_bytes_per_step(model)),
                 model->host_update_ms);
    } else if (model->offload && used < len) {
        snprintf(buf + used, len - used, " %.0f MiB h<->d |", mib(offload_bytes_per_step(model)));
    }
}

#include "llmc/run/run.h"

#ifndef TESTING
// The training loop: llmc/run/run.h does what happens around it (flags, data, val loss, samples,
// checkpoints, the step line), llmc/run/trainer.h names the model's part.
int main(int argc, char** argv) {
    Run run;
    if (!run_setup(&run, argc, argv)) { return run.exit_code; }  // --help, --memory-report
    const int B = run.o.B, T = run.o.T;
    GPT2 model;
    gpt2_build(&model, run.model_source, (uint64_t)run.o.seed, B, T, &run.o);
    if (run_start(&run, &model)) {  // banner and memory table, data, -y resume (not --dry-run)
        for (int step = run.start_step; run_between_steps(&run, &model, step); step++) {  // val, samples, checkpoints
            gpt2_begin_step(&model, step);  // zero the gradients; BAdam: the step's block
            for (int micro = 0; micro < run.accum; micro++) {  // gradient accumulation
                const DataLoader* batch = run_next_batch(&run);
                gpt2_forward_train(&model, batch->inputs, batch->targets, B, T, run_grad_scale(&run));
                gpt2_backward(&model, batch->inputs, batch->targets, B, T, run_grad_scale(&run));
            }
            if (run_inject_nan(&run, step)) { gpt2_poison_grads(&model); }  // testing: --inject-nan
            run_lr(&run, step);
            float norm = gpt2_grad_norm(&model, run.o.grad_clip, run_inv_loss_scale(&run));  // over the processes, before clipping
            double loss = run_mean_loss(&run, gpt2_loss_sum(&model));
            int skip = run_guard(&run, loss, norm);  // NaN/Inf or an outlier: no update
            if (!skip) { gpt2_update(&model, run.lr, step + 1); }  // clip, optimizer step
            if (!run_step_end(&run, &model, step, loss, norm, skip)) { break; }  // step line; --max-skips
        }
    }
    if (model.flash && !run.o.dry_run) {
        const int graphs = attention_cudnn_graphs();
        printf("cuDNN attention: %d graph%s built\n", graphs, graphs == 1 ? "" : "s");
    }
    return run_finish(&run, &model);
}
#endif

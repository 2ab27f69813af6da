/*
 train_gpt2.c: GPT-2 training on the CPU in fp32 — the reference for the CUDA trainer, and a
 real trainer: OpenMP across cores, matmuls through BLAS (cblas_sgemm), the fused AdamW of
 llmc/optim/optim.h.

 Reads top to bottom: the layers (forward and backward of each op), the model (parameters,
 activations, forward, backward, update), sampling, checkpoints, and the training loop.
 Everything both trainers share lives in llmc/: configuration, parameter table, model and state
 files, dataloader, tokenizer, schedulers, flags, memory model, logging.

 Shapes are in PyTorch order: B batch, T time, C channels, NH heads, hs = C/NH head size,
 L layers, V vocab, Vp padded vocab. Linear weights are (out, in).
*/
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <cblas.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include "llmc/utils.h"
#include "llmc/config.h"
#include "llmc/params.h"
#include "llmc/io/checkpoint.h"
#include "llmc/io/dataloader.h"
#include "llmc/io/tokenizer.h"
#include "llmc/optim/schedulers.h"
#include "llmc/run/train_options.h"
#include "llmc/optim/optim.h"
#include "llmc/run/memory.h"
#include "llmc/run/logger.h"
#include "llmc/run/trainer.h"
#include "llmc/optim/badam.h"
#include "llmc/run/blas_env.h"
#include "llmc/run/blas_gemm.h"
#include "llmc/optim/views.h"

// ----------------------------------------------------------------------------
// layers: forward and backward of each op. Backward ops accumulate (+=) into parameter
// gradients; into activation gradients as their comment says.

// exp(x) that the compiler can vectorize (glibc's expf is a scalar call here): x = n ln2 + r,
// |r| <= ln2/2, exp(r) by a degree-6 polynomial, 2^n through the exponent bits. Relative error
// below 3e-7 for x in [-87, 88] (test_gpt2 --units checks it against exp in double); inputs
// below -87 give exp(-87) ~ 1.6e-38 instead of a denormal or 0.
static inline float vexpf(float x) {
    x = x > -87.0f ? x : -87.0f;  // compares, not fminf/fmaxf: those are calls that stop vectorizing
    x = x < 88.0f ? x : 88.0f;
    float n = floorf(x * 1.44269504088896341f + 0.5f);
    float r = fmaf(n, -0.693359375f, x);  // ln2 split in two (Cody-Waite) for an exact r
    r = fmaf(n, 2.12194440e-4f, r);
    float p = 1.9875691500e-4f;
    p = fmaf(p, r, 1.3981999507e-3f);
    p = fmaf(p, r, 8.3334519073e-3f);
    p = fmaf(p, r, 4.1665795894e-2f);
    p = fmaf(p, r, 1.6666665459e-1f);
    p = fmaf(p, r, 5.0000001201e-1f);
    p = fmaf(p, r * r, r) + 1.0f;
    union { int32_t i; float f; } scale;
    scale.i = ((int32_t)n + 127) << 23;
    return p * scale.f;
}

// tanh through vexpf; |u| is clamped at 9, where tanh rounds to +-1 in float
static inline float vtanhf(float u) {
    u = u > -9.0f ? u : -9.0f;
    u = u < 9.0f ? u : 9.0f;
    float e = vexpf(2.0f * u);
    return (e - 1.0f) / (e + 1.0f);
}

// out (B,T,C) = wte[inp] + wpe[t]
static void encoder_forward(float* out, const int* inp, const float* wte, const float* wpe, int B, int T, int C) {
    #pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            float* o = out + ((size_t)b * T + t) * C;
            const float* we = wte + (size_t)inp[b * T + t] * C;
            const float* pe = wpe + (size_t)t * C;
            for (int i = 0; i < C; i++) { o[i] = we[i] + pe[i]; }
        }
    }
}

// dwte (Vp,C) += scatter of dout (B,T,C) by token; dwpe (maxT,C) += sum over b of dout
static void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* inp, int B, int T, int C) {
    // position gradients: parallel over t, no conflicts
    #pragma omp parallel for
    for (int t = 0; t < T; t++) {
        float* dp = dwpe + (size_t)t * C;
        for (int b = 0; b < B; b++) {
            const float* d = dout + ((size_t)b * T + t) * C;
            for (int i = 0; i < C; i++) { dp[i] += d[i]; }
        }
    }
    // token gradients: a token may repeat, so each thread owns a slice of the channels
    #pragma omp parallel
    {
        int nth = 1, tid = 0;
#ifdef _OPENMP
        nth = omp_get_num_threads();
        tid = omp_get_thread_num();
#endif
        int c0 = (int)((long)C * tid / nth), c1 = (int)((long)C * (tid + 1) / nth);
        for (int bt = 0; bt < B * T; bt++) {
            float* dw = dwte + (size_t)inp[bt] * C;
            const float* d = dout + (size_t)bt * C;
            for (int i = c0; i < c1; i++) { dw[i] += d[i]; }
        }
    }
}

// out (N,C) = (inp - mean) * rstd * weight + bias; mean, rstd (N)
static void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                              const float* bias, int N, int C) {
    const float eps = 1e-5f;
    #pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const float* x = inp + (size_t)n * C;
        float sum = 0.0f;
        #pragma omp simd reduction(+:sum)
        for (int i = 0; i < C; i++) { sum += x[i]; }
        float m = sum / (float)C;
        float var = 0.0f;
        #pragma omp simd reduction(+:var)
        for (int i = 0; i < C; i++) { float d = x[i] - m; var += d * d; }
        float s = 1.0f / sqrtf(var / (float)C + eps);
        float* o = out + (size_t)n * C;
        #pragma omp simd
        for (int i = 0; i < C; i++) { o[i] = (x[i] - m) * s * weight[i] + bias[i]; }
        mean[n] = m;
        rstd[n] = s;
    }
}

// dinp (N,C) += ...; dweight, dbias (C) += ... (both NULL: frozen, skipped)
static void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                               const float* weight, const float* mean, const float* rstd, int N, int C) {
    #pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const float* d = dout + (size_t)n * C;
        const float* x = inp + (size_t)n * C;
        float* dx = dinp + (size_t)n * C;
        float m = mean[n], s = rstd[n];
        float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
        #pragma omp simd reduction(+:dnorm_mean, dnorm_norm_mean)
        for (int i = 0; i < C; i++) {
            float norm = (x[i] - m) * s;
            float dnorm = weight[i] * d[i];
            dnorm_mean += dnorm;
            dnorm_norm_mean += dnorm * norm;
        }
        dnorm_mean /= (float)C;
        dnorm_norm_mean /= (float)C;
        #pragma omp simd
        for (int i = 0; i < C; i++) {
            float norm = (x[i] - m) * s;
            float dnorm = weight[i] * d[i];
            dx[i] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
        }
    }
    if (dweight == NULL || dbias == NULL) { return; }
    // parameter gradients: parallel over channels, rows in order (deterministic)
    #pragma omp parallel for
    for (int i = 0; i < C; i++) {
        float dw = 0.0f, db = 0.0f;
        for (int n = 0; n < N; n++) {
            float norm = (inp[(size_t)n * C + i] - mean[n]) * rstd[n];
            dw += norm * dout[(size_t)n * C + i];
            db += dout[(size_t)n * C + i];
        }
        dweight[i] += dw;
        dbias[i] += db;
    }
}

// out (N,OC) = inp (N,IC) @ weight (OC,IC)^T + bias (OC); bias may be NULL
static void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int IC,
                           int OC) {
    if (bias != NULL) {
        #pragma omp parallel for
        for (int n = 0; n < N; n++) { memcpy(out + (size_t)n * OC, bias, (size_t)OC * sizeof(float)); }
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, IC, 1.0f, inp, IC, weight, IC,
                bias != NULL ? 1.0f : 0.0f, out, OC);
}

// dinp (N,IC) = dout @ weight (overwritten); dweight (OC,IC) += dout^T @ inp; dbias (OC) += colsum.
// dweight / dbias NULL: a frozen weight, its gradient is skipped.
static void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                            const float* weight, int N, int IC, int OC) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, IC, OC, 1.0f, dout, OC, weight, IC, 0.0f, dinp, IC);
    if (dweight != NULL) {
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, IC, N, 1.0f, dout, OC, inp, IC, 1.0f, dweight, IC);
    }
    if (dbias != NULL) {  // column sums, a block of columns per task: rows stream, columns vectorize
        enum { COLS = 64 };
        #pragma omp parallel for schedule(static)
        for (int o0 = 0; o0 < OC; o0 += COLS) {
            int w = OC - o0 < COLS ? OC - o0 : COLS;
            float sum[COLS] = {0.0f};
            for (int n = 0; n < N; n++) {
                const float* row = dout + (size_t)n * OC + o0;
                #pragma omp simd
                for (int j = 0; j < w; j++) { sum[j] += row[j]; }
            }
            for (int j = 0; j < w; j++) { dbias[o0 + j] += sum[j]; }
        }
    }
}

// Causal self-attention. qkv (B,T,3C) holds q, k, v; out (B,T,C); att (B,NH,T,T) the softmax
// probabilities (zero above the diagonal), kept for the backward pass.
static void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH) {
    int hs = C / NH;
    size_t C3 = 3 * (size_t)C;
    float scale = 1.0f / sqrtf((float)hs);
    #pragma omp parallel for collapse(3)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            for (int t = 0; t < T; t++) {
                const float* q = qkv + ((size_t)b * T + t) * C3 + (size_t)h * hs;
                float* a = att + (((size_t)b * NH + h) * T + t) * T;
                float maxval = -INFINITY;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float* k = qkv + ((size_t)b * T + t2) * C3 + C + (size_t)h * hs;
                    float dot = 0.0f;
                    #pragma omp simd reduction(+:dot)
                    for (int i = 0; i < hs; i++) { dot += q[i] * k[i]; }
                    dot *= scale;
                    a[t2] = dot;
                    if (dot > maxval) { maxval = dot; }
                }
                float sum = 0.0f;
                for (int t2 = 0; t2 <= t; t2++) { a[t2] = vexpf(a[t2] - maxval); sum += a[t2]; }
                float inv = 1.0f / sum;
                for (int t2 = 0; t2 <= t; t2++) { a[t2] *= inv; }
                for (int t2 = t + 1; t2 < T; t2++) { a[t2] = 0.0f; }
                float* o = out + ((size_t)b * T + t) * C + (size_t)h * hs;
                for (int i = 0; i < hs; i++) { o[i] = 0.0f; }
                for (int t2 = 0; t2 <= t; t2++) {
                    const float* v = qkv + ((size_t)b * T + t2) * C3 + 2 * (size_t)C + (size_t)h * hs;
                    float w = a[t2];
                    #pragma omp simd
                    for (int i = 0; i < hs; i++) { o[i] += w * v[i]; }
                }
            }
        }
    }
}

// dqkv (B,T,3C) = gradient (overwritten); datt (B,NH,T,T) scratch; dout (B,T,C)
static void attention_backward(float* dqkv, float* datt, const float* dout, const float* qkv, const float* att,
                               int B, int T, int C, int NH) {
    int hs = C / NH;
    size_t C3 = 3 * (size_t)C;
    float scale = 1.0f / sqrtf((float)hs);
    // each (b, h) owns its slice of dqkv: no two threads write the same element
    #pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            for (int t = 0; t < T; t++) {
                float* dq = dqkv + ((size_t)b * T + t) * C3 + (size_t)h * hs;
                float* dk = dq + C;
                float* dv = dq + 2 * (size_t)C;
                for (int i = 0; i < hs; i++) { dq[i] = 0.0f; dk[i] = 0.0f; dv[i] = 0.0f; }
            }
            for (int t = 0; t < T; t++) {
                const float* a = att + (((size_t)b * NH + h) * T + t) * T;
                float* da = datt + (((size_t)b * NH + h) * T + t) * T;
                const float* d = dout + ((size_t)b * T + t) * C + (size_t)h * hs;
                // through out = att @ v
                float dsum = 0.0f;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float* v = qkv + ((size_t)b * T + t2) * C3 + 2 * (size_t)C + (size_t)h * hs;
                    float* dv = dqkv + ((size_t)b * T + t2) * C3 + 2 * (size_t)C + (size_t)h * hs;
                    float dot = 0.0f;
                    float w = a[t2];
                    #pragma omp simd reduction(+:dot)
                    for (int i = 0; i < hs; i++) { dot += d[i] * v[i]; dv[i] += w * d[i]; }
                    da[t2] = dot;
                    dsum += w * dot;
                }
                // through the softmax: dpre = att * (datt - sum(att * datt))
                for (int t2 = 0; t2 <= t; t2++) { da[t2] = a[t2] * (da[t2] - dsum) * scale; }
                // through pre = q . k * scale
                const float* q = qkv + ((size_t)b * T + t) * C3 + (size_t)h * hs;
                float* dq = dqkv + ((size_t)b * T + t) * C3 + (size_t)h * hs;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float* k = qkv + ((size_t)b * T + t2) * C3 + C + (size_t)h * hs;
                    float* dk = dqkv + ((size_t)b * T + t2) * C3 + C + (size_t)h * hs;
                    float g = da[t2];
                    #pragma omp simd
                    for (int i = 0; i < hs; i++) { dq[i] += g * k[i]; dk[i] += g * q[i]; }
                }
            }
        }
    }
}

#define GELU_SCALE 0.7978845608028654f  // sqrt(2 / pi)

// out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), elementwise over N
static void gelu_forward(float* out, const float* inp, size_t N) {
    #pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < N; i++) {
        float x = inp[i];
        out[i] = 0.5f * x * (1.0f + vtanhf(GELU_SCALE * (x + 0.044715f * x * x * x)));
    }
}

// dinout (N): on entry d out, on exit d inp
static void gelu_backward_inplace(float* dinout, const float* inp, size_t N) {
    #pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < N; i++) {
        float x = inp[i];
        float u = GELU_SCALE * (x + 0.044715f * x * x * x);
        float th = vtanhf(u);
        float sech2 = 1.0f - th * th;
        float local = 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
        dinout[i] *= local;
    }
}

// out += inp, elementwise over N
static void residual_add_inplace(float* out, const float* inp, size_t N) {
    #pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < N; i++) { out[i] += inp[i]; }
}

// losses (B*T) = -log softmax(logits)[target], softmax over the first V of Vp columns
static void crossentropy_forward(float* losses, const float* logits, const int* targets, int BT, int V, int Vp) {
    #pragma omp parallel for
    for (int i = 0; i < BT; i++) {
        const float* row = logits + (size_t)i * Vp;
        float maxval = -INFINITY;
        #pragma omp simd reduction(max:maxval)
        for (int j = 0; j < V; j++) { maxval = row[j] > maxval ? row[j] : maxval; }
        float sum = 0.0f;
        #pragma omp simd reduction(+:sum)
        for (int j = 0; j < V; j++) { sum += vexpf(row[j] - maxval); }
        // cppcheck-suppress invalidFunctionArg ; sum >= 1: the row's maximum contributes exp(0)
        losses[i] = logf(sum) + maxval - row[targets[i]];
    }
}

// logits (B*T, Vp) become dlogits in place: (softmax - onehot(target)) * dloss; padding 0
static void crossentropy_softmax_backward_inplace(float* logits, const int* targets, int BT, int V, int Vp,
                                                  float dloss) {
    #pragma omp parallel for
    for (int i = 0; i < BT; i++) {
        float* row = logits + (size_t)i * Vp;
        float maxval = -INFINITY;
        #pragma omp simd reduction(max:maxval)
        for (int j = 0; j < V; j++) { maxval = row[j] > maxval ? row[j] : maxval; }
        float sum = 0.0f;
        #pragma omp simd reduction(+:sum)
        for (int j = 0; j < V; j++) { row[j] = vexpf(row[j] - maxval); sum += row[j]; }
        float scale = dloss / sum;
        #pragma omp simd
        for (int j = 0; j < V; j++) { row[j] *= scale; }
        row[targets[i]] -= dloss;
        for (int j = V; j < Vp; j++) { row[j] = 0.0f; }
    }
}

// ----------------------------------------------------------------------------
// the model

typedef union {
    struct {
        float* encoded;    // (B,T,C)
        float* ln1;        // (L,B,T,C)
        float* ln1_mean;   // (L,B,T)
        float* ln1_rstd;   // (L,B,T)
        float* qkv;        // (L,B,T,3C)
        float* atty;       // (L,B,T,C)
        float* att;        // (L,B,NH,T,T)
        float* residual2;  // (L,B,T,C)
        float* ln2;        // (L,B,T,C)
        float* ln2_mean;   // (L,B,T)
        float* ln2_rstd;   // (L,B,T)
        float* fch;        // (L,B,T,4C)
        float* fch_gelu;   // (L,B,T,4C)
        float* residual3;  // (L,B,T,C)
        float* lnf;        // (B,T,C)
        float* lnf_mean;   // (B,T)
        float* lnf_rstd;   // (B,T)
        float* logits;     // (B,T,Vp), dlogits after the backward pass
        float* losses;     // (B,T)
    };
    float* t[CPU_NUM_ACTIVATIONS];
} ActivationTensors;

typedef union {
    struct {
        float* dresidual;  // (B,T,C) gradient flowing down the residual stream
        float* dbuf1;      // (B,T,C)
        float* dbuf2;      // (B,T,C)
        float* dqkv;       // (B,T,3C)
        float* dfch;       // (B,T,4C)
        float* datt;       // (B,NH,T,T)
    };
    float* t[CPU_NUM_SCRATCH];
} ScratchTensors;

struct GPT2 {
    GPT2Config config;
    ParamTable table;
    size_t num_parameters;
    float* params_memory;
    ParameterTensors params;
    float* grads_memory;   // gradients: all parameters (ZeRO-1: padded), or BAdam's active block
    // the optimizer engine (llmc/optim/engine.h): every optimizer and state precision; BAdam's
    // block and the ZeRO-1 shard are its views. Its state block is allocated at build.
    OptimEngine opt;
    int use_badam;
    Badam badam;
    int active_block;      // BAdam: the block of the current step
    int opt_step;          // the optimizer's step of this update (BAdam: counts from the switch)
    BadamSlice slices[BADAM_MAX_SLICES];  // BAdam: the active block's slices
    int num_slices;
    // data parallelism (llmc/dist/comm.h): -z 0 all-reduces the gradients, -z 1 (ZeRO-1) gives every
    // process one part of m and v: reduce-scatter the gradients, update the part, all-gather (equal
    // shards; Muon's parts hold whole matrices: opt.parts)
    const Comm* comm;      // NULL: one process
    int zero_stage;
    size_t shard;          // ZeRO-1: elements per process (the buffers are padded to shard * processes)
    float* grad_shard;     // ZeRO-1: (largest part) this process's part of the summed gradients (opt.parts)
    int B, T;              // the largest batch the activations hold
    float* acts_memory;
    ActivationTensors acts;
    float* scratch_memory;
    ScratchTensors scratch;
    MemCounter mem;        // what was really allocated, per category
    float mean_loss;       // of the last forward with targets
    double loss_sum;       // the mean losses of the gpt2_forward_train calls since gpt2_begin_step
    float grad_norm;       // of the last gpt2_grad_norm, before clipping
    float clip_scale;      // what gpt2_update multiplies the gradients by
    // --offload-delay 1 (the GPU trainer's delayed update, --offload cpu, on this trainer's schedule):
    // step t's update is applied after step t + 1's backward pass, from its kept gradients and scale
    int delay, delay_warmup, step;
    float* grads_late;     // (num_parameters) the pending update's gradients
    int pending;           // an update is pending: its lr, step and clip scale
    float late_lr, late_scale;
    int late_step;
};

// Builds the model from a model file or a descriptor (random init from seed), and allocates
// parameters, gradients, AdamW state and activations for batches up to (B, T).
static void gpt2_build(GPT2* model, const char* model_or_descriptor, uint64_t seed, int B, int T,
                       const TrainOptions* opts) {
    memset(model, 0, sizeof(*model));
    int from_descriptor = gpt2_config_from_descriptor(model_or_descriptor, &model->config);
    if (from_descriptor) {
        char err[200];
        if (!gpt2_config_valid(&model->config, err, sizeof(err))) {
            ls_fatal("flag -e: descriptor '%s': %s", model_or_descriptor, err);
        }
    } else {
        model_file_read_header(model_or_descriptor, &model->config);
    }
    GPT2Config* c = &model->config;
    param_table_build(&model->table, c);
    model->num_parameters = model->table.total;
    size_t n = model->num_parameters;
    size_t ng = n;  // gradients
    if (opts && opts->badam > 0) {
        model->use_badam = 1;
        badam_init(&model->badam, &model->table, opts->badam, opts->badam_order, opts->badam_embed, seed);
        ng = model->badam.max_block;
    }
    model->comm = opts ? opts->comm : NULL;
    int procs = model->comm ? model->comm->size : 1;
    model->delay = opts ? opts->offload_delay : 0;
    model->delay_warmup = opts ? opts->offload_delay_warmup : 0;
    if (model->delay && (model->use_badam || (procs > 1 && opts->zero_stage >= 1))) {
        ls_fatal("flag --offload-delay 1: the CPU trainer's delayed update is for the whole model on one process (no "
                 "--badam or -z 1); the GPU trainer's --offload cpu composes with them");
    }
    model->zero_stage = (opts && procs > 1) ? opts->zero_stage : 0;
    if (model->zero_stage >= 1) { model->shard = zero_shard_elems(n, procs); }
    // the optimizer: its views and its state block (the largest view's, zeroed when a view is set up)
    OptimConfig cfg = opts ? train_options_optimizer(opts) : optim_config_default(OPT_ADAMW);
    optim_engine_init(&model->opt, &cfg, &model->table, model->use_badam ? &model->badam : NULL,
                      opts ? opts->weight_decay : 0.0f, model->comm ? model->comm->rank : 0, procs,
                      model->zero_stage >= 1 ? model->shard : 0);
    if (model->zero_stage >= 1) { optim_engine_set_reduce(&model->opt, comm_sum_hook, (void*)model->comm); }  // LAMB
    optim_engine_set_gemm(&model->opt, blas_gemm);  // Muon
    size_t n_alloc = n, max_shard = optim_engine_max_shard(&model->opt);
    if (model->zero_stage >= 1) {  // gradients hold every process's part (BAdam: of the largest block);
        ng = optim_engine_zero_elems(&model->opt);  // without BAdam the parameters too (the all-gather is in place)
        if (!model->use_badam) { n_alloc = ng; }
    }
    MemCounter* mc = &model->mem;
    model->params_memory = (float*)memAlloc(mc, MEM_PARAMS, n_alloc * sizeof(float));
    model->grads_memory = (float*)memAlloc(mc, MEM_GRADS, ng * sizeof(float));
    if (model->zero_stage >= 1) { model->grad_shard = (float*)memAlloc(mc, MEM_GRADS, max_shard * sizeof(float)); }
    if (model->delay) { model->grads_late = (float*)memAlloc(mc, MEM_GRADS, ng * sizeof(float)); }
    model->opt.memory = model->opt.bytes > 0 ? memAlloc(mc, MEM_OPT_STATE, model->opt.bytes) : NULL;
    model->opt.work = model->opt.work_bytes > 0 ? memAlloc(mc, MEM_OPT_STATE, model->opt.work_bytes) : NULL;  // Muon
    memset(model->params_memory, 0, n_alloc * sizeof(float));
    memset(model->grads_memory, 0, ng * sizeof(float));
    param_pointers(&model->table, model->params_memory, &model->params);
    if (from_descriptor) {
        params_init_random(&model->table, model->params_memory, seed);
    } else {
        model_file_read_params(model_or_descriptor, c, model->params_memory);
    }
    // activations, carved from one buffer in the memory model's layout
    model->B = B;
    model->T = T;
    size_t act_sizes[CPU_NUM_ACTIVATIONS], scratch_sizes[CPU_NUM_SCRATCH];
    cpu_activation_sizes(c, B, T, act_sizes);
    cpu_scratch_sizes(c, B, T, scratch_sizes);
    model->acts_memory = (float*)memAlloc(mc, MEM_ACTS, sum_sizes(act_sizes, CPU_NUM_ACTIVATIONS) * sizeof(float));
    model->scratch_memory = (float*)memAlloc(mc, MEM_SCRATCH, sum_sizes(scratch_sizes, CPU_NUM_SCRATCH) * sizeof(float));
    float* p = model->acts_memory;
    for (int i = 0; i < CPU_NUM_ACTIVATIONS; i++) { model->acts.t[i] = p; p += act_sizes[i]; }
    p = model->scratch_memory;
    for (int i = 0; i < CPU_NUM_SCRATCH; i++) { model->scratch.t[i] = p; p += scratch_sizes[i]; }
}

static void gpt2_free(GPT2* model) {
    optim_engine_free_cpu(&model->opt);
    free(model->opt.memory);  // ours (memAlloc), lent to the engine
    free(model->opt.work);
    free(model->grad_shard);
    free(model->grads_late);
    free(model->scratch_memory);
    free(model->acts_memory);
    free(model->grads_memory);
    free(model->params_memory);
    memset(model, 0, sizeof(*model));
}

// Forward pass on inputs (B,T), B <= model->B, T <= model->T. With targets (B,T), fills
// acts.losses and returns the mean loss; without, returns -1 and leaves acts.logits.
static float gpt2_forward(GPT2* model, const int* inputs, const int* targets, int B, int T) {
    if (B > model->B || T > model->T) { ls_fatal("forward: batch (%d, %d) exceeds the allocated (%d, %d)", B, T, model->B, model->T); }
    const GPT2Config* c = &model->config;
    int L = c->num_layers, C = c->channels, NH = c->num_heads, V = c->vocab_size, Vp = c->padded_vocab_size;
    int BT = B * T;
    ParameterTensors* w = &model->params;
    ActivationTensors* a = &model->acts;
    for (int i = 0; i < BT; i++) {
        if (inputs[i] < 0 || inputs[i] >= V) { ls_fatal("forward: input token %d at %d is outside [0, %d)", inputs[i], i, V); }
        if (targets && (targets[i] < 0 || targets[i] >= V)) { ls_fatal("forward: target token %d at %d is outside [0, %d)", targets[i], i, V); }
    }
    encoder_forward(a->encoded, inputs, w->wte, w->wpe, B, T, C);
    for (int l = 0; l < L; l++) {
        size_t lC = (size_t)l * C, lBTC = (size_t)l * BT * C, lBT = (size_t)l * BT;
        const float* residual = l == 0 ? a->encoded : a->residual3 + lBTC - (size_t)BT * C;
        float* ln1 = a->ln1 + lBTC;
        float* qkv = a->qkv + 3 * lBTC;
        float* atty = a->atty + lBTC;
        float* att = a->att + (size_t)l * B * NH * T * T;
        float* residual2 = a->residual2 + lBTC;
        float* ln2 = a->ln2 + lBTC;
        float* fch = a->fch + 4 * lBTC;
        float* fch_gelu = a->fch_gelu + 4 * lBTC;
        float* residual3 = a->residual3 + lBTC;
        layernorm_forward(ln1, a->ln1_mean + lBT, a->ln1_rstd + lBT, residual, w->ln1w + lC, w->ln1b + lC, BT, C);
        matmul_forward(qkv, ln1, w->qkvw + 3 * lC * C, w->qkvb + 3 * lC, BT, C, 3 * C);
        attention_forward(atty, att, qkv, B, T, C, NH);
        matmul_forward(residual2, atty, w->attprojw + lC * C, w->attprojb + lC, BT, C, C);
        residual_add_inplace(residual2, residual, (size_t)BT * C);
        layernorm_forward(ln2, a->ln2_mean + lBT, a->ln2_rstd + lBT, residual2, w->ln2w + lC, w->ln2b + lC, BT, C);
        matmul_forward(fch, ln2, w->fcw + 4 * lC * C, w->fcb + 4 * lC, BT, C, 4 * C);
        gelu_forward(fch_gelu, fch, (size_t)BT * 4 * C);
        matmul_forward(residual3, fch_gelu, w->fcprojw + 4 * lC * C, w->fcprojb + lC, BT, 4 * C, C);
        residual_add_inplace(residual3, residual2, (size_t)BT * C);
    }
    const float* last = a->residual3 + (size_t)(L - 1) * BT * C;
    layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, last, w->lnfw, w->lnfb, BT, C);
    matmul_forward(a->logits, a->lnf, w->wte, NULL, BT, C, Vp);
    if (targets == NULL) { model->mean_loss = -1.0f; return -1.0f; }
    crossentropy_forward(a->losses, a->logits, targets, BT, V, Vp);
    double sum = 0.0;
    for (int i = 0; i < BT; i++) { sum += a->losses[i]; }
    model->mean_loss = (float)(sum / BT);
    return model->mean_loss;
}

// The forward pass of a training micro-step (llmc/run/trainer.h). Here the loss is known at
// once and the backward pass computes the dlogits itself, so loss_scale is not needed yet.
static LS_UNUSED void gpt2_forward_train(GPT2* model, const int* inputs, const int* targets, int B, int T, float loss_scale) {
    (void)loss_scale;
    if (targets == NULL) { ls_fatal("gpt2_forward_train: no targets"); }
    model->loss_sum += gpt2_forward(model, inputs, targets, B, T);
}

static LS_UNUSED double gpt2_loss_sum(GPT2* model) { return model->loss_sum; }

static size_t grad_elems(const GPT2* model) {
    if (model->zero_stage >= 1) { return optim_engine_zero_elems(&model->opt); }
    return model->use_badam ? model->badam.max_block : model->num_parameters;
}

static void gpt2_zero_grad(GPT2* model) { memset(model->grads_memory, 0, grad_elems(model) * sizeof(float)); }

// The gradient of layer l's slice of tensor i, or NULL when it is frozen (BAdam: not in the
// active block); the backward pass then skips that weight gradient.
static float* grad_slice(GPT2* model, int i, int l) {
    size_t off = badam_grad_offset(&model->table, model->use_badam ? model->slices : NULL, model->num_slices, i, l);
    return off == BADAM_FROZEN ? NULL : model->grads_memory + off;
}

// The lowest layer the backward pass must reach: 0 when the embeddings train, else the lowest
// layer with a trainable slice (BAdam stops the backward pass there).
static int backward_lowest_layer(GPT2* model) {
    if (!model->use_badam || model->active_block >= model->badam.num_layers) { return 0; }
    return model->active_block;
}

// Starts training step `step` (from 0): BAdam picks the step's block (resetting the AdamW state
// at a switch); the gradients are zeroed.
static void gpt2_begin_step(GPT2* model, int step) {
    // the step plan (llmc/optim/views.h): BAdam's block, and the engine's view of this update
    OptimRun run = {&model->table, model->use_badam ? &model->badam : NULL};
    const OptimPlan plan = optim_plan_step(&run, step, 1);
    model->opt_step = plan.opt_step;
    model->active_block = plan.block;
    model->num_slices = plan.num_slices;
    memcpy(model->slices, plan.slices, (size_t)plan.num_slices * sizeof(BadamSlice));
    optim_engine_begin_step_cpu(&model->opt, &plan);  // (ZeRO-1: its parts, opt.parts)
    model->step = step;
    model->loss_sum = 0.0;
    gpt2_zero_grad(model);
}

// Backward pass after gpt2_forward with targets; adds the gradient of (mean loss * loss_scale)
// to the parameter gradients (loss_scale = 1 / gradient-accumulation steps).
static void gpt2_backward(GPT2* model, const int* inputs, const int* targets, int B, int T, float loss_scale) {
    const GPT2Config* c = &model->config;
    int L = c->num_layers, C = c->channels, NH = c->num_heads, V = c->vocab_size, Vp = c->padded_vocab_size;
    int BT = B * T;
    ParameterTensors* w = &model->params;
    ActivationTensors* a = &model->acts;
    ScratchTensors* s = &model->scratch;
    size_t BTC = (size_t)BT * C;
    crossentropy_softmax_backward_inplace(a->logits, targets, BT, V, Vp, loss_scale / (float)BT);
    const float* dlogits = a->logits;
    memset(s->dresidual, 0, BTC * sizeof(float));
    matmul_backward(s->dbuf1, grad_slice(model, P_WTE, 0), NULL, dlogits, a->lnf, w->wte, BT, C, Vp);
    const float* last = a->residual3 + (size_t)(L - 1) * BTC;
    layernorm_backward(s->dresidual, grad_slice(model, P_LNFW, 0), grad_slice(model, P_LNFB, 0), s->dbuf1, last,
                       w->lnfw, a->lnf_mean, a->lnf_rstd, BT, C);
    int lowest = backward_lowest_layer(model);
    for (int l = L - 1; l >= lowest; l--) {
        size_t lC = (size_t)l * C, lBTC = (size_t)l * BTC, lBT = (size_t)l * BT;
        const float* residual = l == 0 ? a->encoded : a->residual3 + lBTC - BTC;
        // dresidual holds d residual3[l]; the MLP block
        matmul_backward(s->dfch, grad_slice(model, P_FCPROJW, l), grad_slice(model, P_FCPROJB, l), s->dresidual,
                        a->fch_gelu + 4 * lBTC, w->fcprojw + 4 * lC * C, BT, 4 * C, C);
        gelu_backward_inplace(s->dfch, a->fch + 4 * lBTC, 4 * BTC);
        matmul_backward(s->dbuf1, grad_slice(model, P_FCW, l), grad_slice(model, P_FCB, l), s->dfch, a->ln2 + lBTC,
                        w->fcw + 4 * lC * C, BT, C, 4 * C);
        layernorm_backward(s->dresidual, grad_slice(model, P_LN2W, l), grad_slice(model, P_LN2B, l), s->dbuf1,
                           a->residual2 + lBTC, w->ln2w + lC, a->ln2_mean + lBT, a->ln2_rstd + lBT, BT, C);
        // dresidual holds d residual2[l]; the attention block
        matmul_backward(s->dbuf2, grad_slice(model, P_ATTPROJW, l), grad_slice(model, P_ATTPROJB, l), s->dresidual,
                        a->atty + lBTC, w->attprojw + lC * C, BT, C, C);
        attention_backward(s->dqkv, s->datt, s->dbuf2, a->qkv + 3 * lBTC, a->att + (size_t)l * B * NH * T * T, B, T,
                           C, NH);
        matmul_backward(s->dbuf1, grad_slice(model, P_QKVW, l), grad_slice(model, P_QKVB, l), s->dqkv, a->ln1 + lBTC,
                        w->qkvw + 3 * lC * C, BT, C, 3 * C);
        layernorm_backward(s->dresidual, grad_slice(model, P_LN1W, l), grad_slice(model, P_LN1B, l), s->dbuf1,
                           residual, w->ln1w + lC, a->ln1_mean + lBT, a->ln1_rstd + lBT, BT, C);
    }
    float* dwte = grad_slice(model, P_WTE, 0);
    float* dwpe = grad_slice(model, P_WPE, 0);
    if (dwte && dwpe) { encoder_backward(dwte, dwpe, s->dresidual, inputs, B, T, C); }
}

// Sums the gradients over the processes (ZeRO-1: each keeps its shard of the sum) and returns
// their global norm before clipping; the update that follows clips with it. The training loop
// looks at the norm first, so a NaN/Inf or outlier step can be skipped before anything changes.
static float gpt2_grad_norm(GPT2* model, float grad_clip, float inv_loss_scale) {
    const Comm* comm = model->comm;
    float norm;
    if (model->pending) {  // --offload-delay: the last step's update, after this step's backward pass
        optim_engine_step_cpu(&model->opt, model->params_memory, model->grads_late, model->late_lr, model->late_step,
                              model->late_scale);
        model->pending = 0;
    }
    if (model->zero_stage >= 1) {  // (BAdam: the active block's compact gradients in the block's parts)
        const size_t* parts = model->opt.parts;
        const size_t part = parts[comm->rank + 1] - parts[comm->rank];
        comm_reduce_scatter_sum_f32(comm, model->grads_memory, model->grad_shard, parts);
        double sumsq = 0.0;
        for (size_t i = 0; i < part; i++) { sumsq += (double)model->grad_shard[i] * model->grad_shard[i]; }
        norm = (float)sqrt(comm_allreduce_sum_f64(comm, sumsq));
    } else {  // all parameters, or BAdam's active block (its slices' compact gradients)
        size_t n = model->num_parameters;
        if (model->use_badam) {
            const BadamSlice* last = &model->slices[model->num_slices - 1];
            n = last->compact + last->count;
        }
        if (comm && comm->size > 1) { comm_allreduce_sum_f32(comm, model->grads_memory, n); }
        norm = global_norm_cpu(model->grads_memory, n);
    }
    norm *= inv_loss_scale;  // (loss scaling: the gradients hold S times theirs)
    model->grad_norm = norm;
    model->clip_scale = clip_scale_of(norm, grad_clip) * inv_loss_scale;
    return norm;
}

// Testing (--inject-nan): one NaN in the gradients, as an overflow in the backward pass would leave.
static LS_UNUSED void gpt2_poison_grads(GPT2* model) { model->grads_memory[0] = NAN; }

// ZeRO-1, after each process updated its shard of the view: every process gets all of them. The
// whole model: the parameters all-gathered in place. A BAdam block: its slices' parameters through
// the compact gradient buffer (free after the update), all-gathered there and copied back.
static void zero_gather_params(GPT2* model) {
    if (model->zero_stage < 1) { return; }
    const OptimEngine* e = &model->opt;
    if (e->view < 0) {
        comm_allgather_inplace_f32(model->comm, model->params_memory, e->parts);
        return;
    }
    BadamSlice sl[BADAM_MAX_SLICES];
    int k = badam_block_slices(&model->badam, &model->table, e->view, sl);
    for (int i = 0; i < k; i++) { memcpy(model->grads_memory + sl[i].compact, model->params_memory + sl[i].offset, sl[i].count * sizeof(float)); }
    comm_allgather_inplace_f32(model->comm, model->grads_memory, e->parts);
    for (int i = 0; i < k; i++) { memcpy(model->params_memory + sl[i].offset, model->grads_memory + sl[i].compact, sl[i].count * sizeof(float)); }
}

// Clip (with the scale of gpt2_grad_norm) and update with the optimizer engine: all parameters,
// the BAdam block, or the ZeRO-1 shard (then all-gather). The step counter is the plan's (BAdam:
// from the switch); lr is this step's, the rest of the optimizer's settings were fixed at build.
static void gpt2_update(GPT2* model, float lr, int step) {
    (void)step;
    if (model->delay && model->step >= model->delay_warmup) {  // applied after the next step's backward pass
        memcpy(model->grads_late, model->grads_memory, model->num_parameters * sizeof(float));
        model->late_lr = lr;
        model->late_step = model->opt_step;
        model->late_scale = model->clip_scale;
        model->pending = 1;
        return;
    }
    const float* grads = model->zero_stage >= 1 ? model->grad_shard : model->grads_memory;
    optim_engine_step_cpu(&model->opt, model->params_memory, grads, lr, model->opt_step, model->clip_scale);
    zero_gather_params(model);
}

// ----------------------------------------------------------------------------
// the rest of what a run needs from this trainer (llmc/run/trainer.h)

// Host fp32 logits of position t of batch row 0 after gpt2_forward.
static LS_UNUSED const float* gpt2_logits_row(GPT2* model, int t) {
    return model->acts.logits + (size_t)t * model->config.padded_vocab_size;
}

static LS_UNUSED const float* gpt2_token_losses(GPT2* model) { return model->acts.losses; }

// Every shape costs the same to start here: forwards run at the caller's.
static LS_UNUSED void gpt2_eval_shape(const GPT2* model, int B, int T, int* Bp, int* Tp) {
    (void)model;
    *Bp = B;
    *Tp = T;
}

static LS_UNUSED void gpt2_checkpoint_write(GPT2* model, const char* model_path, const char* state_path, const RunState* rs) {
    if (model->pending) {  // --offload-delay: every update so far in the checkpoint (as the GPU trainer)
        optim_engine_step_cpu(&model->opt, model->params_memory, model->grads_late, model->late_lr, model->late_step,
                              model->late_scale);
        model->pending = 0;
    }
    if (rs->process_rank == 0) { model_file_write(model_path, &model->config, model->params_memory, MODEL_VERSION_FP32); }
    RunState r = *rs;  // the engine's current view: the whole model, BAdam's block, the ZeRO-1 shard
    r.num_params = model->opt.st.bytes / sizeof(float);
    r.optim_tag = optim_engine_tag(&model->opt.cfg);
    state_file_write(state_path, &r, model->opt.st.memory, NULL);
}

// A checkpoint of a run with master weights (the bf16 GPU trainer): they are the exact trained
// parameters of the state's elements (the model file holds their bf16 rounding), so they replace
// the parameters read from the model file: those of the engine's view of the last update (its
// segments say where each goes: the BAdam block's slices, this process's ZeRO-1 shard), then
// every process gathers the others' (ZeRO-1).
static void gpt2_params_from_master(GPT2* model, const float* master) {
    const OptimState* st = &model->opt.st;
    for (int s = 0; s < st->nseg; s++) {
        memcpy(model->params_memory + st->segs[s].param, master + st->segs[s].offset, st->segs[s].count * sizeof(float));
    }
    zero_gather_params(model);
}

// The state continues the view of the last update (step - 1), set up before the file is read.
static LS_UNUSED void gpt2_state_read(GPT2* model, const char* state_path, RunState* rs) {
    RunState head;
    state_file_read_header(state_path, &head);
    OptimEngine* e = &model->opt;
    optim_engine_set_view_cpu(e, optim_engine_view_of_step(e, head.step > 0 ? head.step - 1 : 0));
    const int v1_adamw = e->cfg.kind == OPT_ADAMW && e->cfg.state == OPT_STATE_FP32 && !e->cfg.amsgrad;
    StateExpect want = {e->st.bytes / sizeof(float), optim_engine_tag(&e->cfg), optim_engine_tag_describe, e->st.n,
                        v1_adamw ? e->st.m : NULL, v1_adamw ? e->st.v : NULL, e->st.n};
    float* master = (float*)mallocCheck((e->st.n > 0 ? e->st.n : 1) * sizeof(float));
    if (state_file_read(state_path, &want, rs, e->st.memory, master)) { gpt2_params_from_master(model, master); }
    free(master);
}

#define TRAINER_FLAGS CLI_CPU
#define TRAINER_SUMMARY "Train GPT-2 on the CPU (fp32, OpenMP + BLAS). Flags follow llm.c's train_gpt2cu."

static LS_UNUSED void trainer_defaults(TrainOptions* o) { o->T = 64; }  // llm.c's train_gpt2.c

// --profile is the GPU trainer's (CLI_GPU): never set here.
static LS_UNUSED void trainer_profile(GPT2* model, const TrainOptions* o, int begin) { (void)model; (void)o; (void)begin; }

static LS_UNUSED void trainer_init(const TrainOptions* o) {
#ifdef _OPENMP
    if (o->threads > 0) { omp_set_num_threads(o->threads); }
#else
    (void)o;
#endif
}

static LS_UNUSED MemoryReport trainer_memory_predicted(const GPT2Config* c, const TrainOptions* o) {
    int procs = o->comm ? o->comm->size : 1;
    OptimSizes z = train_options_optim_sizes(o, c, o->comm ? o->comm->rank : 0, procs);
    CpuMemoryOptions mo = {0, o->zero_stage, procs, z.bytes + z.work_bytes, z.max_shard, z.zero_elems,
                           o->offload_delay};  // (+ Muon's scratch)
    if (o->badam > 0) {
        ParamTable pt;
        param_table_build(&pt, c);
        Badam bd;
        badam_init(&bd, &pt, o->badam, o->badam_order, o->badam_embed, 0);
        mo.badam_block = bd.max_block;
    }
    return memory_model_cpu(c, o->B, o->T, &mo);
}

static LS_UNUSED void trainer_memory_report(const GPT2Config* c, const TrainOptions* o) {
    if (o->badam > 0) {
        printf("BAdam: %d blocks (%s), switching every %d steps, order %s\n", c->num_layers + (o->badam_embed ? 1 : 0),
               o->badam_embed ? "layers + embeddings" : "layers; embeddings frozen", o->badam, badam_order_names[o->badam_order]);
    }
    MemoryReport predicted = trainer_memory_predicted(c, o);
    int procs = o->comm ? o->comm->size : 1;
    if (procs > 1) { printf("memory per process of %d (-z %d):\n", procs, o->zero_stage); }
    memory_report_print(stdout, &predicted, gpt2_num_parameters(c));
}

// Start-up banner and memory table.
static LS_UNUSED void trainer_describe(const GPT2* model, const TrainOptions* o, int accum) {
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    printf("leanstep train_gpt2 (CPU, fp32), %d threads, %s\n", threads, blas_env_describe());
    gpt2_describe(&model->config, model->num_parameters, o, accum);
    trainer_memory_report(&model->config, o);
    MemoryReport predicted = trainer_memory_predicted(&model->config, o);
    memory_check_allocation(&predicted, &model->mem);
}

static LS_UNUSED void trainer_step_extra(const GPT2* model, const TrainOptions* o, double tok_per_s, char* buf, size_t len) {
    (void)model; (void)o; (void)tok_per_s;  // CPU MFU needs a measured sgemm peak: see make bench
    if (len) { buf[0] = '\0'; }
}

#include "llmc/run/run.h"

#ifndef TESTING
// The training loop: llmc/run/run.h does what happens around it (flags, data, val loss, samples,
// checkpoints, the step line), llmc/run/trainer.h names the model's part.
int main(int argc, char** argv) {
    cpu_env_apply(argv);  // idle OpenMP threads sleep, OpenBLAS runs the CPU's best kernel (llmc/run/blas_env.h)
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
    return run_finish(&run, &model);
}
#endif

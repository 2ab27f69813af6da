/*
 cudnn_att.cuh: causal self-attention without T x T buffers (flash attention), the GPU trainer's
 `--attention cudnn` path (the BF16 default; llmc/kernels/attention.cuh is `--attention matmul`).

   attention_forward_cudnn(out, stats, qkv, B, T, NH, C, scratch, scratch_bytes, stream)
       qkv (B,T,3,NH,hs) as the qkv matmul writes it (no head split); out (B,T,NH,hs) = (B,T,C);
       stats (B,NH,T) fp32: the log-sum-exp of each query row's scaled scores (natural log),
       kept for the backward pass.
   attention_backward_cudnn(dqkv, dout, qkv, out, stats, B, T, NH, C, deterministic, scratch, scratch_bytes,
                            stream)
       dout (B,T,C) -> dqkv (B,T,3,NH,hs) (overwritten), from the forward's qkv, out and stats.
       deterministic = 1: cuDNN's deterministic backward (bitwise reproducible; on Hopper it goes
       through a (B,NH,T,T) bf16 dP workspace), 0: its default one (fp32 dQ accumulated with
       atomics: linear workspace, faster, not bitwise reproducible). --attention cudnn / cudnn-fast.
   attention_cudnn_scratch_bytes(B, T, NH, C, deterministic)
       device bytes the caller passes as scratch (cuDNN's workspace), at most what a shape needs.
   attention_cudnn_free()
       releases cuDNN's cached graphs and handle (before the CUDA context goes).

 Where the work is done
   GPU build: cuDNN's fused scaled-dot-product attention through the cuDNN frontend graph API,
   in llmc/kernels/cudnn_att.cpp, its own translation unit (the frontend headers are heavy; built with
   `make cudnn-frontend` into build/deps/cudnn_frontend/include), a shared library
   (build/libleanstep_cudnn.so) that the first cudnn call opens (llmc/kernels/cudnn_load.h): without it or
   without libcudnn.so.9, a one-line error naming the shape and `--attention matmul`. BF16 only: the FP32 build's
   attention is the matmul path. Scores, softmax and LSE in fp32, tensor-core GEMMs; one graph
   per shape and direction, built on first use and cached. A shape cuDNN cannot run, or cuDNN
   asking for more workspace than scratch_bytes: a one-line error naming the shape and the
   fallback flag (`--attention matmul`), never a silent switch.
   CPU harness (g++, LS_HARNESS): the same contract computed on the CPU in fp32 from the floatX
   inputs (like matmul.cuh's cuBLASLt fallback): scores s = q.k / sqrt(hs), stats = LSE(s),
   p = exp(s - stats), out = p @ v rounded once to floatX; the backward recomputes p from the
   stats (never stores it), D = sum(dout * out) from the stored (rounded) out, as cuDNN does,
   dv = p^T dout, ds = p (dout.v - D), dq = ds k / sqrt(hs), dk = ds^T q / sqrt(hs). Deterministic:
   each (b, h) is summed in a fixed order.

 Contracts (ls_fatal): C % NH == 0, hs = C/NH a multiple of 8 and at most 128; pointers 16-byte
 aligned; scratch may be NULL when scratch_bytes is 0.
*/
#ifndef LLMC_CUDNN_ATT_H
#define LLMC_CUDNN_ATT_H

#include <stddef.h>
#include <stdint.h>

#if defined(LS_CUDNN_ATT_IMPL) // llmc/kernels/cudnn_att.cpp: plain host C++ against the CUDA headers
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#else
#include <math.h>
#include <vector>
#include "llmc/cuda/cuda_common.h"
#include "llmc/cuda/cuda_precision.h"
#include "llmc/cuda/profile.cuh"
#endif

// cuDNN's flash-attention kernels take head sizes up to 128 (a multiple of 8).
#define ATTENTION_CUDNN_MAX_HS 128

// Workspace for cuDNN (the backward pass's fp32 dQ accumulator and row sums, with room to spare):
// 2 (B,T,C) fp32 tensors, 4 (B,NH,T) fp32 vectors and 1 MiB; deterministic: also the bf16 dP
// matrix (B,NH,T,T), T padded to 128 both ways. The trainer passes its fp32 kernel scratch; a
// graph that wants more stops the run with the numbers (see llmc/kernels/cudnn_att.cpp).
static inline size_t attention_cudnn_scratch_bytes(int B, int T, int NH, int C, int deterministic) {
    const size_t BT = (size_t)B * (size_t)T, Tp = ((size_t)T + 127) / 128 * 128;
    const size_t dp = deterministic ? (size_t)B * (size_t)NH * Tp * Tp * 2 : 0;
    return dp + 2 * BT * (size_t)C * 4 + 4 * BT * (size_t)NH * 4 + ((size_t)1 << 20);
}

#if defined(LS_CUDNN_ATT_IMPL) || (!LS_HARNESS && FLOATX_IS_BF16)
// The GPU implementation: llmc/kernels/cudnn_att.cpp, built as build/libleanstep_cudnn.so (linked with cuDNN)
// and opened at run time by the first cudnn call (llmc/kernels/cudnn_load.h): the nvcc builds do not link
// libcudnn, so they start on a machine without it. extern "C": found by these names with dlsym
// (cudnn_load.h lists them, cudnn_att.map exports them).
// The trainer calls them only through the pointers cudnn_att_lib() resolves (a direct call would
// not link).
extern "C" {
__attribute__((visibility("default"))) void attention_forward_cudnn_bf16(
    __nv_bfloat16* out, float* stats, const __nv_bfloat16* qkv, int B, int T, int NH, int C, void* scratch,
    size_t scratch_bytes, cudaStream_t stream);
__attribute__((visibility("default"))) void attention_backward_cudnn_bf16(
    __nv_bfloat16* dqkv, const __nv_bfloat16* dout, const __nv_bfloat16* qkv, const __nv_bfloat16* out,
    const float* stats, int B, int T, int NH, int C, int deterministic, void* scratch, size_t scratch_bytes,
    cudaStream_t stream);
__attribute__((visibility("default"))) void attention_cudnn_free_gpu(void);
}
#endif

#if !defined(LS_CUDNN_ATT_IMPL) && !LS_HARNESS && FLOATX_IS_BF16
#include "llmc/kernels/cudnn_load.h"

struct CudnnAttLib {
    decltype(&attention_forward_cudnn_bf16) forward;
    decltype(&attention_backward_cudnn_bf16) backward;
    decltype(&attention_cudnn_free_gpu) free_gpu;
};

// The library's entry points, opened on first use; fn and the shape name the failing call.
static inline const CudnnAttLib& cudnn_att_lib(const char* fn, int B, int T, int NH, int C) {
    static CudnnAttLib lib = {NULL, NULL, NULL};
    if (lib.forward == NULL) {
        void* syms[CUDNN_LIB_NSYMS];
        cudnn_lib_load(fn, B, T, NH, C, syms);
        lib.forward = (decltype(lib.forward))syms[0];
        lib.backward = (decltype(lib.backward))syms[1];
        lib.free_gpu = (decltype(lib.free_gpu))syms[2];
    }
    return lib;
}
#endif

#if !defined(LS_CUDNN_ATT_IMPL)

static inline void attention_cudnn_check(const char* fn, int B, int T, int NH, int C, const void* const* ptrs,
                                         const char* const* names, int n) {
    if (B <= 0 || T <= 0 || C <= 0 || NH <= 0) ls_fatal("%s: B=%d T=%d NH=%d C=%d (all > 0 expected)", fn, B, T, NH, C);
    if (C % NH != 0) ls_fatal("%s: C=%d is not a multiple of NH=%d", fn, C, NH);
    const int hs = C / NH;
    if (hs % 8 != 0 || hs > ATTENTION_CUDNN_MAX_HS) {
        ls_fatal("%s: head size C/NH=%d: cuDNN attention needs a multiple of 8 up to %d (use --attention matmul)", fn,
                 hs, ATTENTION_CUDNN_MAX_HS);
    }
    for (int i = 0; i < n; i++) {
        if (ptrs[i] == NULL) ls_fatal("%s: %s must not be NULL", fn, names[i]);
        if (((uintptr_t)ptrs[i] & 15) != 0) ls_fatal("%s: %s = %p is not 16-byte aligned", fn, names[i], ptrs[i]);
    }
}

#if LS_HARNESS
// ----------------------------------------------------------------------------
// the CPU implementation (harness builds, both precisions)

// One (b, h): q, k, v rows of head h are qkv[(b*T + t)*3C + {0, C, 2C} + h*hs]; dq/dk/dv likewise.
// Forward: out rows, stats (T). s (T) is a work row.
static inline void attention_cudnn_cpu_forward_head(floatX* out, float* stats, const floatX* qkv, int T, int NH, int C,
                                                    int h, float* s) {
    const int hs = C / NH;
    const size_t C3 = 3 * (size_t)C;
    const float scale = 1.0f / sqrtf((float)hs);
    std::vector<float> acc(hs);
    for (int t = 0; t < T; t++) {
        const floatX* q = qkv + (size_t)t * C3 + (size_t)h * hs;
        float m = -INFINITY;
        for (int j = 0; j <= t; j++) {
            const floatX* k = qkv + (size_t)j * C3 + C + (size_t)h * hs;
            float d = 0.0f;
            for (int i = 0; i < hs; i++) d += to_float(q[i]) * to_float(k[i]);
            s[j] = d * scale;
            m = fmaxf(m, s[j]);
        }
        float sum = 0.0f;
        for (int j = 0; j <= t; j++) sum += expf(s[j] - m);
        const float lse = m + logf(sum);
        stats[t] = lse;
        for (int i = 0; i < hs; i++) acc[i] = 0.0f;
        for (int j = 0; j <= t; j++) {
            const float p = expf(s[j] - lse);
            const floatX* v = qkv + (size_t)j * C3 + 2 * (size_t)C + (size_t)h * hs;
            for (int i = 0; i < hs; i++) acc[i] += p * to_float(v[i]);
        }
        floatX* o = out + (size_t)t * C + (size_t)h * hs;
        for (int i = 0; i < hs; i++) o[i] = from_float(acc[i]);
    }
}

// Backward of one (b, h): dq, dk, dv of head h in dqkv (overwritten). dq32, dk32, dv32 (T, hs) and
// s (T) are work buffers.
static inline void attention_cudnn_cpu_backward_head(floatX* dqkv, const floatX* dout, const floatX* qkv,
                                                     const floatX* out, const float* stats, int T, int NH, int C, int h,
                                                     float* dq32, float* dk32, float* dv32, float* s) {
    const int hs = C / NH;
    const size_t C3 = 3 * (size_t)C;
    const float scale = 1.0f / sqrtf((float)hs);
    for (size_t i = 0; i < (size_t)T * hs; i++) dq32[i] = dk32[i] = dv32[i] = 0.0f;
    for (int t = 0; t < T; t++) {
        const floatX* q = qkv + (size_t)t * C3 + (size_t)h * hs;
        const floatX* go = dout + (size_t)t * C + (size_t)h * hs;
        const floatX* o = out + (size_t)t * C + (size_t)h * hs;
        float D = 0.0f; // sum_i dout_i * out_i = sum_j p_j (dout . v_j)
        for (int i = 0; i < hs; i++) D += to_float(go[i]) * to_float(o[i]);
        for (int j = 0; j <= t; j++) {
            const floatX* k = qkv + (size_t)j * C3 + C + (size_t)h * hs;
            const floatX* v = qkv + (size_t)j * C3 + 2 * (size_t)C + (size_t)h * hs;
            float qk = 0.0f, dp = 0.0f;
            for (int i = 0; i < hs; i++) {
                qk += to_float(q[i]) * to_float(k[i]);
                dp += to_float(go[i]) * to_float(v[i]);
            }
            const float p = expf(qk * scale - stats[t]);
            float* dv = dv32 + (size_t)j * hs;
            for (int i = 0; i < hs; i++) dv[i] += p * to_float(go[i]);
            s[j] = p * (dp - D) * scale; // d loss / d (q.k)
        }
        float* dq = dq32 + (size_t)t * hs;
        for (int j = 0; j <= t; j++) {
            const floatX* k = qkv + (size_t)j * C3 + C + (size_t)h * hs;
            float* dk = dk32 + (size_t)j * hs;
            for (int i = 0; i < hs; i++) {
                dq[i] += s[j] * to_float(k[i]);
                dk[i] += s[j] * to_float(q[i]);
            }
        }
    }
    for (int t = 0; t < T; t++)
        for (int i = 0; i < hs; i++) {
            floatX* row = dqkv + (size_t)t * C3 + (size_t)h * hs + i;
            row[0] = from_float(dq32[(size_t)t * hs + i]);
            row[C] = from_float(dk32[(size_t)t * hs + i]);
            row[2 * (size_t)C] = from_float(dv32[(size_t)t * hs + i]);
        }
}
#endif // LS_HARNESS

// ----------------------------------------------------------------------------
// the launchers

static inline void attention_forward_cudnn(floatX* out, float* stats, const floatX* qkv, int B, int T, int NH, int C,
                                           void* scratch, size_t scratch_bytes, cudaStream_t stream) {
    const void* ptrs[] = {out, stats, qkv};
    const char* names[] = {"out", "stats", "qkv"};
    attention_cudnn_check("attention_forward_cudnn", B, T, NH, C, ptrs, names, 3);
    PROFILE_SCOPE(PROF_ATTENTION, stream);
#if LS_HARNESS
    (void)scratch, (void)scratch_bytes;
    // queued on the stream like a kernel: it runs after the work that writes qkv (the harness's
    // stream order, dev/harness/cuda_harness_streams.h)
    ls_harness::stream_task(stream, "attention_forward_cudnn (CPU)", [=] {
        const size_t C3 = 3 * (size_t)C;
#pragma omp parallel for collapse(2) schedule(static)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++) {
                std::vector<float> s(T);
                attention_cudnn_cpu_forward_head(out + (size_t)b * T * C, stats + ((size_t)b * NH + h) * T,
                                                 qkv + (size_t)b * T * C3, T, NH, C, h, s.data());
            }
    });
#elif FLOATX_IS_BF16
    cudnn_att_lib("attention_forward_cudnn", B, T, NH, C).forward(out, stats, qkv, B, T, NH, C, scratch, scratch_bytes,
                                                                  stream);
#else
    (void)scratch, (void)scratch_bytes, (void)stream;
    ls_fatal("attention_forward_cudnn: cuDNN attention needs the BF16 build (B=%d T=%d NH=%d C=%d; "
             "use --attention matmul)", B, T, NH, C);
#endif
}

static inline void attention_backward_cudnn(floatX* dqkv, const floatX* dout, const floatX* qkv, const floatX* out,
                                            const float* stats, int B, int T, int NH, int C, int deterministic,
                                            void* scratch, size_t scratch_bytes, cudaStream_t stream) {
    const void* ptrs[] = {dqkv, dout, qkv, out, stats};
    const char* names[] = {"dqkv", "dout", "qkv", "out", "stats"};
    attention_cudnn_check("attention_backward_cudnn", B, T, NH, C, ptrs, names, 5);
    PROFILE_SCOPE(PROF_ATTENTION, stream);
#if LS_HARNESS
    (void)deterministic, (void)scratch, (void)scratch_bytes;  // always deterministic here
    ls_harness::stream_task(stream, "attention_backward_cudnn (CPU)", [=] {
        const size_t C3 = 3 * (size_t)C;
        const int hs = C / NH;
#pragma omp parallel for collapse(2) schedule(static)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++) {
                std::vector<float> work(3 * (size_t)T * hs + T);
                float* w = work.data();
                const size_t n = (size_t)T * hs;
                attention_cudnn_cpu_backward_head(dqkv + (size_t)b * T * C3, dout + (size_t)b * T * C,
                                                  qkv + (size_t)b * T * C3, out + (size_t)b * T * C,
                                                  stats + ((size_t)b * NH + h) * T, T, NH, C, h, w, w + n, w + 2 * n,
                                                  w + 3 * n);
            }
    });
#elif FLOATX_IS_BF16
    cudnn_att_lib("attention_backward_cudnn", B, T, NH, C)
        .backward(dqkv, dout, qkv, out, stats, B, T, NH, C, deterministic, scratch, scratch_bytes, stream);
#else
    (void)deterministic, (void)scratch, (void)scratch_bytes, (void)stream;
    ls_fatal("attention_backward_cudnn: cuDNN attention needs the BF16 build (B=%d T=%d NH=%d C=%d; "
             "use --attention matmul)", B, T, NH, C);
#endif
}

// Releases cuDNN's graphs and handle (the trainer's gpt2_free); the next call builds them again.
static inline void attention_cudnn_free(void) {
#if !LS_HARNESS && FLOATX_IS_BF16
    if (cudnn_lib_loaded()) cudnn_att_lib("attention_cudnn_free", 0, 0, 0, 0).free_gpu(); // nothing to free before
#endif
}

#endif // !LS_CUDNN_ATT_IMPL

#endif // LLMC_CUDNN_ATT_H

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
   attention_cudnn_graphs()
       graphs built so far (one per direction and shape, each hundreds of ms; 0 before the first
       call), for the end of a run.

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
   The launchers reach that code through its extern "C" entry points for floatX's precision
   (attention_forward_cudnn_bf16, ...), resolved on the first call: entry points linked into the
   program itself come first (weak references, NULL when absent: a build that links its own
   implementation, as the CPU test builds do in every precision, never opens the library); else
   the BF16 build opens the library; else (the FP32 and FP16 builds) a one-line error: cuDNN
   attention needs the BF16 build, use `--attention matmul`.

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

#if defined(LS_CUDNN_ATT_IMPL)
// The library's definitions (llmc/kernels/cudnn_att.cpp, built as build/libleanstep_cudnn.so, linked with cuDNN):
// extern "C", found by these names with dlsym (cudnn_load.h lists them, cudnn_att.map exports them).
extern "C" {
__attribute__((visibility("default"))) void attention_forward_cudnn_bf16(
    __nv_bfloat16* out, float* stats, const __nv_bfloat16* qkv, int B, int T, int NH, int C, void* scratch,
    size_t scratch_bytes, cudaStream_t stream);
__attribute__((visibility("default"))) void attention_backward_cudnn_bf16(
    __nv_bfloat16* dqkv, const __nv_bfloat16* dout, const __nv_bfloat16* qkv, const __nv_bfloat16* out,
    const float* stats, int B, int T, int NH, int C, int deterministic, void* scratch, size_t scratch_bytes,
    cudaStream_t stream);
__attribute__((visibility("default"))) void attention_cudnn_free_gpu(void);
__attribute__((visibility("default"))) int attention_cudnn_graphs_gpu(void);
}
#else
// The program's view of the entry points for floatX: weak references, NULL unless the program
// links an implementation (see the banner). The nvcc builds do not link libcudnn, so they start on
// a machine without it; the BF16 build calls the library only through the pointers cudnn_att_lib()
// resolves.
#if FLOATX_IS_BF16
#define CUDNN_ATT_ENTRY(name) name##_bf16
#elif FLOATX_IS_FP16
#define CUDNN_ATT_ENTRY(name) name##_fp16
#else
#define CUDNN_ATT_ENTRY(name) name##_fp32
#endif
extern "C" {
__attribute__((weak)) void CUDNN_ATT_ENTRY(attention_forward_cudnn)(floatX* out, float* stats, const floatX* qkv, int B,
                                                                    int T, int NH, int C, void* scratch,
                                                                    size_t scratch_bytes, cudaStream_t stream);
__attribute__((weak)) void CUDNN_ATT_ENTRY(attention_backward_cudnn)(floatX* dqkv, const floatX* dout,
                                                                     const floatX* qkv, const floatX* out,
                                                                     const float* stats, int B, int T, int NH, int C,
                                                                     int deterministic, void* scratch,
                                                                     size_t scratch_bytes, cudaStream_t stream);
__attribute__((weak)) void attention_cudnn_free_gpu(void);
__attribute__((weak)) int attention_cudnn_graphs_gpu(void);
}
#if FLOATX_IS_BF16
#include "llmc/kernels/cudnn_load.h"
#endif

struct CudnnAttLib {
    decltype(&CUDNN_ATT_ENTRY(attention_forward_cudnn)) forward;
    decltype(&CUDNN_ATT_ENTRY(attention_backward_cudnn)) backward;
    decltype(&attention_cudnn_free_gpu) free_gpu;
    decltype(&attention_cudnn_graphs_gpu) graphs;
};

static inline CudnnAttLib& cudnn_att_lib_state(void) {
    static CudnnAttLib lib = {NULL, NULL, NULL, NULL};
    return lib;
}

// The entry points, resolved on the first call (see the banner); fn and the shape name the failing call.
static inline const CudnnAttLib& cudnn_att_lib(const char* fn, int B, int T, int NH, int C) {
    CudnnAttLib& lib = cudnn_att_lib_state();
    if (lib.forward != NULL) return lib;
    CudnnAttLib linked = {&CUDNN_ATT_ENTRY(attention_forward_cudnn), &CUDNN_ATT_ENTRY(attention_backward_cudnn),
                          &attention_cudnn_free_gpu, &attention_cudnn_graphs_gpu};
    if (linked.forward != NULL && linked.backward != NULL && linked.free_gpu != NULL && linked.graphs != NULL) {
        lib = linked;
        return lib;
    }
#if FLOATX_IS_BF16
    void* syms[CUDNN_LIB_NSYMS];
    cudnn_lib_load(fn, B, T, NH, C, syms);
    lib.forward = (decltype(lib.forward))syms[0];
    lib.backward = (decltype(lib.backward))syms[1];
    lib.free_gpu = (decltype(lib.free_gpu))syms[2];
    lib.graphs = (decltype(lib.graphs))syms[3];
#else
    ls_fatal("%s: cuDNN attention needs the BF16 build (B=%d T=%d NH=%d C=%d; use --attention matmul)", fn, B, T, NH, C);
#endif
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

// ----------------------------------------------------------------------------
// the launchers

static inline void attention_forward_cudnn(floatX* out, float* stats, const floatX* qkv, int B, int T, int NH, int C,
                                           void* scratch, size_t scratch_bytes, cudaStream_t stream) {
    const void* ptrs[] = {out, stats, qkv};
    const char* names[] = {"out", "stats", "qkv"};
    attention_cudnn_check("attention_forward_cudnn", B, T, NH, C, ptrs, names, 3);
    PROFILE_SCOPE(PROF_ATTENTION, stream);
    cudnn_att_lib("attention_forward_cudnn", B, T, NH, C).forward(out, stats, qkv, B, T, NH, C, scratch, scratch_bytes,
                                                                  stream);
}

static inline void attention_backward_cudnn(floatX* dqkv, const floatX* dout, const floatX* qkv, const floatX* out,
                                            const float* stats, int B, int T, int NH, int C, int deterministic,
                                            void* scratch, size_t scratch_bytes, cudaStream_t stream) {
    const void* ptrs[] = {dqkv, dout, qkv, out, stats};
    const char* names[] = {"dqkv", "dout", "qkv", "out", "stats"};
    attention_cudnn_check("attention_backward_cudnn", B, T, NH, C, ptrs, names, 5);
    PROFILE_SCOPE(PROF_ATTENTION, stream);
    cudnn_att_lib("attention_backward_cudnn", B, T, NH, C)
        .backward(dqkv, dout, qkv, out, stats, B, T, NH, C, deterministic, scratch, scratch_bytes, stream);
}

// Releases cuDNN's graphs and handle (the trainer's gpt2_free); the next call builds them again.
static inline void attention_cudnn_free(void) {
    const CudnnAttLib& lib = cudnn_att_lib_state();
    if (lib.free_gpu != NULL) lib.free_gpu(); // NULL: no call yet, nothing to free
}

// cuDNN graphs built so far (0 before the first call).
static inline int attention_cudnn_graphs(void) {
    const CudnnAttLib& lib = cudnn_att_lib_state();
    return lib.graphs != NULL ? lib.graphs() : 0;
}

#endif // !LS_CUDNN_ATT_IMPL

#endif // LLMC_CUDNN_ATT_H

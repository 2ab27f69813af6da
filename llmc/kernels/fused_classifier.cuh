/*
 fused_classifier.cuh: softmax + cross-entropy loss + its gradient in one kernel, in place over
 the logits (train_gpt2.c's crossentropy_forward and crossentropy_softmax_backward_inplace).

 Per row n of logits (N, Vp), over the first V columns (V..Vp-1 are the padded vocabulary: never
 read as logits, whatever they hold):
   losses[n] = -log softmax(logits[n])[targets[n]]            fp32, = log(sum) + (max - logit[target])
   if write_dlogits: logits[n][j] = dloss * (p_j - [j == targets[n]]) for j < V, 0 for j >= V
 The probabilities are never stored. One block per row:
   pass 1  reads the row once (16-byte loads) keeping an online (max, sum of exp(x - max)) per
           thread: each 16-byte chunk updates it with one rescale; the pairs are combined through a
           warp xor-shuffle tree, then across warps by warp 0 (fixed order: the same bits on every
           run). Thread 0 reads the target's logit and writes the loss before the row is written.
   pass 2  reads the row again (streaming loads) and writes dlogits.
 Stable for large logits (everything is relative to the row max). __expf: approximate on the GPU
 (relative error about 2 ulp + |x| 2^-24 for the arguments x <= 0 used here), which the labs'
 tolerances allow for.

 Preconditions (ls_fatal): N > 0, 0 < V <= Vp, Vp % x128::size == 0 (8 in bf16, 4 in fp32),
 logits 16-byte aligned. Not checked on the host (device data): 0 <= targets[n] < V; finite
 logits.

 fused_classifier_loss_sum adds the N losses into one device double (one block, a fixed order:
 the same bits on every run), so a training step can read its loss once, after its work is
 queued, instead of synchronizing in every forward pass.
*/
#ifndef LLMC_FUSED_CLASSIFIER_CUH
#define LLMC_FUSED_CLASSIFIER_CUH

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include "llmc/cuda/cuda_common.h"
#include "llmc/cuda/cuda_precision.h"
#include "llmc/cuda/profile.cuh"

#define CLASSIFIER_BLOCK 1024

// (m, s) <- the softmax statistics of the union of two sets: max and sum of exp(x - max).
// An empty set is (-inf, 0).
static __device__ __forceinline__ void classifier_combine(float& m, float& s, float m2, float s2) {
    const float mn = fmaxf(m, m2);
    if (mn == -INFINITY) return; // both empty
    s = s * __expf(m - mn) + s2 * __expf(m2 - mn);
    m = mn;
}

static __device__ __forceinline__ void classifier_warp_combine(float& m, float& s) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        classifier_combine(m, s, m2, s2);
    }
}

template <bool kWriteDlogits>
static __global__ void __launch_bounds__(CLASSIFIER_BLOCK)
fused_classifier_kernel(floatX* __restrict__ logits, float* __restrict__ losses, float dloss,
                        const int* __restrict__ targets, int V, int Vp) {
    constexpr int X = x128::size;
    __shared__ float warp_m[32], warp_s[32];
    __shared__ float row_m, row_s;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nwarps = blockDim.x / 32;
    floatX* x = logits + (size_t)blockIdx.x * Vp;

    // pass 1: online max and sum over the chunks that hold at least one column < V
    const int valid_chunks = CEIL_DIV(V, X);
    float m = -INFINITY, s = 0.0f;
    for (int c = threadIdx.x; c < valid_chunks; c += blockDim.x) {
        const x128 v = load128(x + c * X);
        float f[X], cm = -INFINITY;
#pragma unroll
        for (int k = 0; k < X; k++) {
            f[k] = c * X + k < V ? to_float(v[k]) : -INFINITY;
            cm = fmaxf(cm, f[k]);
        }
        float cs = 0.0f;
#pragma unroll
        for (int k = 0; k < X; k++) cs += __expf(f[k] - cm); // exp(-inf) = 0 for the padding
        classifier_combine(m, s, cm, cs);
    }
    classifier_warp_combine(m, s);
    if (lane == 0) {
        warp_m[warp] = m;
        warp_s[warp] = s;
    }
    __syncthreads();
    if (warp == 0) {
        m = lane < nwarps ? warp_m[lane] : -INFINITY;
        s = lane < nwarps ? warp_s[lane] : 0.0f;
        classifier_warp_combine(m, s);
        if (lane == 0) {
            const float xt = to_float(x[targets[blockIdx.x]]); // before pass 2 overwrites it
            losses[blockIdx.x] = logf(s) + (m - xt);
            row_m = m;
            row_s = s;
        }
    }
    if (!kWriteDlogits) return;
    __syncthreads();

    // pass 2: dlogits = dloss * (p - onehot(target)); 0 in the padding
    m = row_m;
    const float inv_s = 1.0f / row_s;
    const int target = targets[blockIdx.x];
    for (int c = threadIdx.x; c < Vp / X; c += blockDim.x) {
        const x128 v = load128cs(x + c * X);
        x128 o;
#pragma unroll
        for (int k = 0; k < X; k++) {
            const int j = c * X + k;
            const float p = j < V ? __expf(to_float(v[k]) - m) * inv_s : 0.0f;
            const float g = j < V ? dloss * (p - (j == target ? 1.0f : 0.0f)) : 0.0f;
            o[k] = from_float(g);
        }
        store128(x + c * X, o);
    }
}

// losses (N) = cross-entropy of softmax(logits[:, :V]) at targets (N, device); if write_dlogits,
// logits (N, Vp) become dloss * (softmax - onehot(target)), 0 in the padding.
static inline void fused_classifier(floatX* logits, float* losses, float dloss, const int* targets, int N, int V, int Vp,
                                    int write_dlogits, cudaStream_t stream) {
    PROFILE_SCOPE(PROF_CLASSIFIER, stream);
    static const char* what = "fused_classifier";
    if (N <= 0 || V <= 0 || V > Vp) ls_fatal("%s: N=%d V=%d Vp=%d (N > 0, 0 < V <= Vp expected)", what, N, V, Vp);
    if (Vp % x128::size != 0) {
        ls_fatal("%s: Vp=%d is not a multiple of %d (16-byte vectors of %s)", what, Vp, x128::size, PRECISION_NAME);
    }
    if (logits == nullptr || ((uintptr_t)logits & 15u) != 0) {
        ls_fatal("%s: logits (%p) is NULL or not 16-byte aligned", what, (void*)logits);
    }
    if (losses == nullptr || targets == nullptr) ls_fatal("%s: losses or targets is NULL", what);
    if (write_dlogits) {
        launch(fused_classifier_kernel<true>, (unsigned)N, CLASSIFIER_BLOCK, 0, stream, logits, losses, dloss, targets,
               V, Vp);
    } else {
        launch(fused_classifier_kernel<false>, (unsigned)N, CLASSIFIER_BLOCK, 0, stream, logits, losses, dloss,
               targets, V, Vp);
    }
}

#define CLASSIFIER_SUM_BLOCK 256

static __global__ void __launch_bounds__(CLASSIFIER_SUM_BLOCK)
classifier_loss_sum_kernel(double* __restrict__ sum, const float* __restrict__ losses, int N, int accumulate) {
    __shared__ double part[CLASSIFIER_SUM_BLOCK];
    double s = 0.0;
    for (int i = threadIdx.x; i < N; i += blockDim.x) s += (double)losses[i];
    part[threadIdx.x] = s;
    __syncthreads();
    for (unsigned w = blockDim.x / 2; w > 0; w >>= 1) {
        if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) *sum = (accumulate ? *sum : 0.0) + part[0];
}

// *sum = (accumulate ? *sum : 0) + sum of losses[0..N) (device pointers), in double.
static inline void fused_classifier_loss_sum(double* sum, const float* losses, int N, int accumulate, cudaStream_t stream) {
    PROFILE_SCOPE(PROF_CLASSIFIER, stream);
    if (N <= 0 || sum == nullptr || losses == nullptr) ls_fatal("fused_classifier_loss_sum: N=%d, sum or losses NULL", N);
    launch(classifier_loss_sum_kernel, 1, CLASSIFIER_SUM_BLOCK, 0, stream, sum, losses, N, accumulate);
}

#endif // LLMC_FUSED_CLASSIFIER_CUH

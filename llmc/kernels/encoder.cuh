/*
 encoder.cuh: GPT-2's input embedding on the GPU, forward and backward (train_gpt2.c's
 encoder_forward / encoder_backward, in floatX with fp32 arithmetic).

   encoder_forward   out (B,T,C) = wte[inp[b,t]] + wpe[t]; one thread per 16-byte chunk of out
   encoder_backward  dwte (Vp,C) += dout summed by token; dwpe (maxT,C) += dout summed over b

 The backward pass is deterministic (the same inputs give the same bits, on any GPU and under the
 CPU harness) without floating-point atomics: the host groups the positions by token (a counting
 sort of inp_cpu, positions ascending within a token) and uploads the grouping to the scratch
 buffer; one block per distinct token sums its positions in a fixed order (warp w takes positions
 w, w+W, w+2W, ..., then the W warp sums are added in warp order; W depends only on C) and adds the
 sum to the token's row of dwte. Blocks are ordered by decreasing group size, so the largest sums
 start first. dwpe: one thread per (t, chunk of channels) sums b = 0..B-1 in order.
 bf16 builds add into dwte/dwpe with stochastic rounding (from_float_stochastic), random bits from
 (seed, element index): reproducible for a given seed.

 Preconditions (checked by the launchers with ls_fatal): B, T, C > 0, C % x128::size == 0 (8 in
 bf16, 4 in fp32), every pointer 16-byte aligned (cudaMalloc'd buffers and row offsets of such C
 are), 0 <= token, inp_cpu the host copy of inp. Not checkable on the host: tokens < rows of wte,
 T <= rows of wpe.

 Scratch (device, encoder_backward_scratch_bytes(B, T, C) bytes, 16-byte aligned): (2·B·T + 1)
 ints: the positions grouped by token, then the groups' start offsets. The host groups into one of
 two pinned staging buffers, used in turn (they grow to the largest B·T seen: no allocation in the
 steady state), and the upload is an asynchronous copy from it: the host does not wait for the
 backward pass queued before it (a copy from pageable memory would), so the GPU does not idle
 while the host groups and launches. A buffer is written again only after its last copy has run
 (an event per buffer; in a steady state it ran a whole step ago). encoder_backward_free()
 releases them (the trainer's teardown).
*/
#ifndef LLMC_ENCODER_CUH
#define LLMC_ENCODER_CUH

#include <stddef.h>
#include <stdint.h>
#include <algorithm>
#include <vector>
#include "llmc/cuda/cuda_common.h"
#include "llmc/cuda/cuda_precision.h"
#include "llmc/cuda/profile.cuh"

#define ENCODER_BLOCK 256
#define ENCODER_BWD_MAX_WARPS 8
#define ENCODER_BWD_SMEM_MAX (48 * 1024) // without cudaFuncSetAttribute

// ----------------------------------------------------------------------------
// kernels

// out (B,T,C) = wte[inp] + wpe[t]: thread i writes the i-th 16-byte chunk of out.
static __global__ void __launch_bounds__(ENCODER_BLOCK)
encoder_forward_kernel(floatX* __restrict__ out, const int* __restrict__ inp, const floatX* __restrict__ wte,
                       const floatX* __restrict__ wpe, int T, int C, size_t nchunks) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= nchunks) return;
    const int chunks_per_row = C / x128::size;
    const size_t bt = i / chunks_per_row;
    const int c = (int)(i % chunks_per_row) * x128::size;
    const int t = (int)(bt % T);
    const x128 we = load128(wte + (size_t)inp[bt] * C + c);
    const x128 pe = load128(wpe + (size_t)t * C + c);
    x128 o;
#pragma unroll
    for (int k = 0; k < x128::size; k++) o[k] = from_float(to_float(we[k]) + to_float(pe[k]));
    store128(out + bt * C + c, o);
}

// dwte[token of group g] += sum of dout over the group's positions. One block per group
// (blockIdx.x = g); order[start[g] .. start[g+1]) are the positions, ascending. Dynamic shared
// memory: (warps, C) floats.
static __global__ void __launch_bounds__(32 * ENCODER_BWD_MAX_WARPS)
encoder_backward_wte_kernel(floatX* __restrict__ dwte, const floatX* __restrict__ dout,
                            const int* __restrict__ inp, const int* __restrict__ order,
                            const int* __restrict__ start, int C, unsigned long long seed) {
    DYNAMIC_SHARED(float, warp_sums); // (nwarps, C)
    const int nwarps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g0 = start[blockIdx.x], count = start[blockIdx.x + 1] - g0;
    const int used = count < nwarps ? count : nwarps; // warps with at least one position
    if (warp < used) {
        float* ws = warp_sums + (size_t)warp * C;
        for (int c = lane * x128::size; c < C; c += 32 * x128::size) {
            float acc[x128::size] = {};
#pragma unroll 4
            for (int p = warp; p < count; p += nwarps) {
                const x128 d = load128cs(dout + (size_t)order[g0 + p] * C + c);
#pragma unroll
                for (int k = 0; k < x128::size; k++) acc[k] += to_float(d[k]);
            }
#pragma unroll
            for (int k = 0; k < x128::size; k++) ws[c + k] = acc[k];
        }
    }
    __syncthreads();
    const size_t row = (size_t)inp[order[g0]] * C;
    for (int c = threadIdx.x * x128::size; c < C; c += blockDim.x * x128::size) {
        x128 w = load128(dwte + row + c);
#pragma unroll
        for (int k = 0; k < x128::size; k++) {
            float s = warp_sums[c + k];
            for (int v = 1; v < used; v++) s += warp_sums[(size_t)v * C + c + k];
            w[k] = from_float_stochastic(to_float(w[k]) + s, stochastic_bits(seed, row + c + k));
        }
        store128(dwte + row + c, w);
    }
}

// dwpe[t] += sum over b of dout[b, t]: thread i owns the i-th 16-byte chunk of dwpe[0..T).
static __global__ void __launch_bounds__(ENCODER_BLOCK)
encoder_backward_wpe_kernel(floatX* __restrict__ dwpe, const floatX* __restrict__ dout, int B, int T, int C,
                            unsigned long long seed) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const size_t tc = (size_t)T * C;
    if (i >= tc / x128::size) return;
    const size_t off = i * x128::size; // t * C + c
    float acc[x128::size] = {};
#pragma unroll 4
    for (int b = 0; b < B; b++) {
        const x128 d = load128cs(dout + (size_t)b * tc + off);
#pragma unroll
        for (int k = 0; k < x128::size; k++) acc[k] += to_float(d[k]);
    }
    x128 w = load128(dwpe + off);
#pragma unroll
    for (int k = 0; k < x128::size; k++) {
        w[k] = from_float_stochastic(to_float(w[k]) + acc[k], stochastic_bits(seed, off + k));
    }
    store128(dwpe + off, w);
}

// ----------------------------------------------------------------------------
// host side

static inline void encoder_check_args(const char* what, int B, int T, int C) {
    if (B <= 0 || T <= 0 || C <= 0) ls_fatal("%s: B=%d T=%d C=%d (positive expected)", what, B, T, C);
    if (C % x128::size != 0) {
        ls_fatal("%s: C=%d is not a multiple of %d (16-byte vectors of %s)", what, C, x128::size, PRECISION_NAME);
    }
}

static inline void encoder_check_aligned(const char* what, const void* p, const char* name) {
    if (p == nullptr || ((uintptr_t)p & 15u) != 0) ls_fatal("%s: %s (%p) is NULL or not 16-byte aligned", what, name, p);
}

// out (B,T,C) = wte[inp[b,t]] + wpe[t]. inp (B,T) device.
static inline void encoder_forward(floatX* out, const int* inp, const floatX* wte, const floatX* wpe, int B, int T, int C,
                                   cudaStream_t stream) {
    PROFILE_SCOPE(PROF_ENCODER, stream);
    encoder_check_args("encoder_forward", B, T, C);
    encoder_check_aligned("encoder_forward", out, "out");
    encoder_check_aligned("encoder_forward", wte, "wte");
    encoder_check_aligned("encoder_forward", wpe, "wpe");
    if (inp == nullptr) ls_fatal("encoder_forward: inp is NULL");
    const size_t nchunks = (size_t)B * T * C / x128::size;
    launch(encoder_forward_kernel, (unsigned)CEIL_DIV(nchunks, (size_t)ENCODER_BLOCK), ENCODER_BLOCK, 0, stream, out,
           inp, wte, wpe, T, C, nchunks);
}

// Bytes of device scratch encoder_backward needs: (2·B·T + 1) ints, rounded up to 16 bytes.
static inline size_t encoder_backward_scratch_bytes(int B, int T, int C) {
    (void)C;
    size_t bytes = (2 * (size_t)B * T + 1) * sizeof(int);
    return (bytes + 15) & ~(size_t)15;
}

// Warps per block of the wte kernel: (warps, C) floats of shared memory within 48 KB. A function
// of C only, so the summation order (and the result's bits) does not depend on the device.
static inline int encoder_backward_warps(int C) {
    int w = (int)(ENCODER_BWD_SMEM_MAX / ((size_t)C * sizeof(float)));
    return w < ENCODER_BWD_MAX_WARPS ? w : ENCODER_BWD_MAX_WARPS;
}

// Groups positions 0..N-1 by token into staging (room for 2N + 1 ints) = [order (N) | start
// (ngroups + 1)], groups in decreasing size (ties: ascending token), positions ascending within a
// group. Returns ngroups.
static inline int encoder_group_positions(int* staging, const int* tokens, int N) {
    static std::vector<int> count, groups; // grow once to the vocabulary size
    int max_token = 0;
    for (int n = 0; n < N; n++) {
        if (tokens[n] < 0) ls_fatal("encoder_backward: token %d at position %d is negative", tokens[n], n);
        max_token = std::max(max_token, tokens[n]);
    }
    count.assign((size_t)max_token + 1, 0);
    for (int n = 0; n < N; n++) count[tokens[n]]++;
    groups.clear();
    for (int v = 0; v <= max_token; v++) if (count[v] > 0) groups.push_back(v);
    std::sort(groups.begin(), groups.end(),
              [](int a, int b) { return count[a] != count[b] ? count[a] > count[b] : a < b; });
    const int ngroups = (int)groups.size();
    int* start = staging + N;
    int off = 0;
    for (int g = 0; g < ngroups; g++) {
        start[g] = off;
        int c = count[groups[g]];
        count[groups[g]] = off; // from here on: the next write offset of this token
        off += c;
    }
    start[ngroups] = off;
    for (int n = 0; n < N; n++) staging[count[tokens[n]]++] = n;
    return ngroups;
}

// The pinned staging of the grouping's upload: two buffers of `cap` ints used in turn, each with the
// event recorded after the copy that last read it.
typedef struct {
    int* host[2];
    size_t cap;
    cudaEvent_t copied[2];
    int next;
} EncoderStaging;

static inline EncoderStaging& encoder_staging(void) {
    static EncoderStaging st;
    return st;
}

// Releases the staging buffers (after the work that reads them: cudaFreeHost waits for the device).
static inline void encoder_backward_free(void) {
    EncoderStaging& st = encoder_staging();
    if (st.cap == 0) return;
    for (int i = 0; i < 2; i++) {
        cudaCheck(cudaEventSynchronize(st.copied[i]));
        cudaCheck(cudaFreeHost(st.host[i]));
        cudaCheck(cudaEventDestroy(st.copied[i]));
    }
    memset(&st, 0, sizeof st);
}

// The next staging buffer with room for n ints, once the copy that last read it has run.
static inline int* encoder_staging_next(size_t n, int* which) {
    EncoderStaging& st = encoder_staging();
    if (n > st.cap) { // first use, or a larger B*T: allocate both anew
        encoder_backward_free();
        for (int i = 0; i < 2; i++) {
            cudaCheck(cudaMallocHost((void**)&st.host[i], n * sizeof(int)));
            cudaCheck(cudaEventCreateWithFlags(&st.copied[i], cudaEventDisableTiming));
        }
        st.cap = n;
    }
    *which = st.next;
    st.next ^= 1;
    cudaCheck(cudaEventSynchronize(st.copied[*which]));
    return st.host[*which];
}

// dwte (Vp,C) += dout summed by token; dwpe (maxT,C) += dout summed over the batch. dout (B,T,C),
// inp (B,T) on the device and inp_cpu, the same tokens on the host. scratch: device buffer of
// encoder_backward_scratch_bytes(B, T, C) bytes. seed: stochastic rounding of the bf16 sums (use a
// new one every step).
static inline void encoder_backward(floatX* dwte, floatX* dwpe, float* scratch, const floatX* dout, const int* inp,
                                    const int* inp_cpu, int B, int T, int C, unsigned int seed, cudaStream_t stream) {
    PROFILE_SCOPE(PROF_ENCODER, stream);
    static const char* what = "encoder_backward";
    encoder_check_args(what, B, T, C);
    encoder_check_aligned(what, dwte, "dwte");
    encoder_check_aligned(what, dwpe, "dwpe");
    encoder_check_aligned(what, dout, "dout");
    encoder_check_aligned(what, scratch, "scratch");
    if (inp == nullptr || inp_cpu == nullptr) ls_fatal("%s: inp or inp_cpu is NULL", what);
    const int warps = encoder_backward_warps(C);
    if (warps < 1) ls_fatal("%s: C=%d needs more than 48 KB of shared memory per block", what, C);
    if ((long long)B * T > (1LL << 30)) ls_fatal("%s: B*T=%lld positions is too many", what, (long long)B * T);
    const int N = B * T;

    int which;
    int* staging = encoder_staging_next(2 * (size_t)N + 1, &which);
    const int ngroups = encoder_group_positions(staging, inp_cpu, N);
    int* d_order = reinterpret_cast<int*>(scratch);
    int* d_start = d_order + N;
    cudaCheck(cudaMemcpyAsync(d_order, staging, ((size_t)N + ngroups + 1) * sizeof(int), cudaMemcpyHostToDevice, stream));
    cudaCheck(cudaEventRecord(encoder_staging().copied[which], stream));

    // independent random streams for the two tensors
    const unsigned long long seed_wte = 2ULL * seed, seed_wpe = 2ULL * seed + 1;
    launch(encoder_backward_wte_kernel, (unsigned)ngroups, (unsigned)(32 * warps), (size_t)warps * C * sizeof(float),
           stream, dwte, dout, inp, d_order, d_start, C, seed_wte);
    const size_t nchunks = (size_t)T * C / x128::size;
    launch(encoder_backward_wpe_kernel, (unsigned)CEIL_DIV(nchunks, (size_t)ENCODER_BLOCK), ENCODER_BLOCK, 0, stream,
           dwpe, dout, B, T, C, seed_wpe);
}

#endif // LLMC_ENCODER_CUH

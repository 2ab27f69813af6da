/*
 harness_selftest.cu: tests of the CPU execution harness (dev/harness/cuda_harness.h), and of the GPU
 semantics it claims to reproduce.

 Positive tests run in both builds, each against expectations written here from the CUDA
 documentation (not from the harness code): indices, shared memory, barriers, shuffles with masks
 and widths, votes, warp reductions, atomics, dynamic shared memory and its 48 KB / 227 KB rule,
 launch errors through cudaGetLastError, bf16 conversions, __constant__, runtime calls.
 Harness-only tests: poisoning, thread orders, worker threads, and the planted bugs that must be
 caught: a missing __syncthreads (wrong in at least one order), a barrier in divergent code and a
 warp/barrier deadlock (deadlock reports), bad warp masks, a 2048-thread block (launch error), an
 out-of-bounds write (ASan report, ASan build only), a fiber stack overflow. Failure tests run this
 program again as a child (`--child NAME`) and check its exit status and message.

 usage: harness_selftest [--list | --bench | --child NAME | TEST...]
 To add a test: write `static void test_xxx()` using EXPECT, add it to kTests (or kDeathTests with
 the text the report must contain).
*/
#include "llmc/cuda/cuda_common.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <algorithm>
#include <chrono>
#include <string>
#include <vector>
#if LS_HARNESS
#include <sys/wait.h>
#include <cublasLt.h> // the harness's cuBLASLt on the CPU (dev/harness/cublasLt.h): its refusals below
#endif

static int g_failures = 0;
static bool g_quiet = false; // -q: failures and the summary only
#define EXPECT(cond, ...)                                                         \
    do {                                                                          \
        if (!(cond)) {                                                            \
            g_failures++;                                                         \
            printf("    FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);            \
            printf(__VA_ARGS__);                                                  \
            printf("\n");                                                         \
        }                                                                         \
    } while (0)

// A device buffer of n T's with host copies in and out.
template <typename T>
struct DevBuf {
    T* d = nullptr;
    size_t n = 0;
    explicit DevBuf(size_t count) : n(count) {
        cudaCheck(cudaMalloc((void**)&d, n * sizeof(T)));
        cudaCheck(cudaMemset(d, 0, n * sizeof(T)));
    }
    DevBuf(const DevBuf&) = delete;
    DevBuf& operator=(const DevBuf&) = delete;
    ~DevBuf() { cudaCheck(cudaFree(d)); }
    void put(const std::vector<T>& h) { cudaCheck(cudaMemcpy(d, h.data(), n * sizeof(T), cudaMemcpyHostToDevice)); }
    std::vector<T> get() const {
        std::vector<T> h(n);
        cudaCheck(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
        return h;
    }
};

static uint32_t f2u(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }

// ----------------------------------------------------------------------------
// indices

static __global__ void k_indices(uint32_t* out) {
    unsigned nt = blockDim.x * blockDim.y * blockDim.z;
    size_t b = blockIdx.x + (size_t)gridDim.x * (blockIdx.y + (size_t)gridDim.y * blockIdx.z);
    unsigned t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    uint32_t* o = out + (b * nt + t) * 4;
    o[0] = threadIdx.x | threadIdx.y << 8 | threadIdx.z << 16;
    o[1] = blockIdx.x | blockIdx.y << 8 | blockIdx.z << 16;
    o[2] = blockDim.x | blockDim.y << 8 | blockDim.z << 16;
    o[3] = gridDim.x | gridDim.y << 8 | gridDim.z << 16 | (uint32_t)warpSize << 24;
}

static void test_indices() {
    dim3 grid(3, 2, 2), block(4, 3, 2);
    size_t total = 3 * 2 * 2 * 4 * 3 * 2;
    DevBuf<uint32_t> out(total * 4);
    launch(k_indices, grid, block, 0, 0, out.d);
    std::vector<uint32_t> h = out.get();
    size_t i = 0, bad = 0;
    for (unsigned bz = 0; bz < 2; bz++) for (unsigned by = 0; by < 2; by++) for (unsigned bx = 0; bx < 3; bx++)
    for (unsigned tz = 0; tz < 2; tz++) for (unsigned ty = 0; ty < 3; ty++) for (unsigned tx = 0; tx < 4; tx++, i++) {
        bad += h[i * 4 + 0] != (tx | ty << 8 | tz << 16);
        bad += h[i * 4 + 1] != (bx | by << 8 | bz << 16);
        bad += h[i * 4 + 2] != (4u | 3u << 8 | 2u << 16);
        bad += h[i * 4 + 3] != (3u | 2u << 8 | 2u << 16 | 32u << 24);
    }
    EXPECT(bad == 0, "%zu wrong index fields", bad);
}

// ----------------------------------------------------------------------------
// static shared memory + __syncthreads; the same kernel without the barrier is the planted race

template <int N>
static __global__ void k_reverse(float* out, const float* in, int use_barrier) {
    __shared__ float s[N];
    s[threadIdx.x] = in[blockIdx.x * N + threadIdx.x];
    if (use_barrier) __syncthreads();
    out[blockIdx.x * N + threadIdx.x] = s[N - 1 - threadIdx.x];
}

// Returns the number of wrong outputs.
static size_t run_reverse(int use_barrier) {
    const int N = 128, B = 4;
    std::vector<float> h(N * B);
    for (int i = 0; i < N * B; i++) h[i] = (float)i;
    DevBuf<float> in(N * B), out(N * B);
    in.put(h);
    launch(k_reverse<N>, B, N, 0, 0, out.d, in.d, use_barrier);
    std::vector<float> o = out.get();
    size_t bad = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < N; t++) bad += o[b * N + t] != h[b * N + N - 1 - t];
    return bad;
}

static void test_shared_barrier() {
    EXPECT(run_reverse(1) == 0, "block reverse with a barrier is wrong");
}

// __syncthreads_count/_and/_or give every thread the block-wide result.
static __global__ void k_sync_reduce(int* out) {
    int t = threadIdx.x;
    int c = __syncthreads_count(t % 3 == 0);
    int a = __syncthreads_and(t % 3 == 0);
    int o = __syncthreads_or(t % 3 == 0);
    int a1 = __syncthreads_and(1);
    int o0 = __syncthreads_or(0);
    out[t * 5 + 0] = c;
    out[t * 5 + 1] = a;
    out[t * 5 + 2] = o;
    out[t * 5 + 3] = a1;
    out[t * 5 + 4] = o0;
}

static void test_syncthreads_reductions() {
    const int N = 200;
    DevBuf<int> out(N * 5);
    launch(k_sync_reduce, 1, N, 0, 0, out.d);
    std::vector<int> h = out.get();
    int bad = 0;
    for (int t = 0; t < N; t++) {
        bad += h[t * 5 + 0] != 67 || h[t * 5 + 1] != 0 || h[t * 5 + 2] != 1 || h[t * 5 + 3] != 1 || h[t * 5 + 4] != 0;
    }
    EXPECT(bad == 0, "%d threads got wrong __syncthreads_count/and/or (thread 0: %d %d %d %d %d)", bad,
           h[0], h[1], h[2], h[3], h[4]);
}

// A tree reduction with shared memory, barriers and shuffles: the same result in every order.
static __global__ void k_block_sum(float* out, const float* in, int n) {
    __shared__ float warp_sums[32];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? in[i] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    v = lane < nw ? warp_sums[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    if (threadIdx.x == 0) out[blockIdx.x] = v;
}

static void run_block_sum(const char* what) {
    const int n = 5000, T = 256, B = CEIL_DIV(n, T);
    std::vector<float> h(n);
    for (int i = 0; i < n; i++) h[i] = (float)(i % 17);
    DevBuf<float> in(n), out(B);
    in.put(h);
    launch(k_block_sum, B, T, 0, 0, out.d, in.d, n);
    std::vector<float> o = out.get();
    int bad = 0;
    for (int b = 0; b < B; b++) {
        float ref = 0;
        for (int i = b * T; i < n && i < (b + 1) * T; i++) ref += h[i];
        bad += o[b] != ref; // integers: exact in any order
    }
    EXPECT(bad == 0, "%s: %d wrong block sums", what, bad);
}

static void test_block_sum() { run_block_sum("default order"); }

// ----------------------------------------------------------------------------
// warp shuffles: all four kinds, all widths, 4- and 8-byte types

static __global__ void k_shuffles(float* outf, long long* outll, int* outi) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    float v = (float)(lane * 10 + warp * 1000 + 1);
    long long w = ((long long)lane << 40) + warp;
    for (int k = 0; k < 6; k++) {
        int width = 32 >> k;
        float* o = outf + ((size_t)k * blockDim.x + threadIdx.x) * 6;
        o[0] = __shfl_sync(0xffffffffu, v, lane * 7 + 3, width);
        o[1] = __shfl_up_sync(0xffffffffu, v, 3, width);
        o[2] = __shfl_down_sync(0xffffffffu, v, 3, width);
        o[3] = __shfl_xor_sync(0xffffffffu, v, 1, width);
        o[4] = __shfl_xor_sync(0xffffffffu, v, 8, width); // may reach into an earlier group
        o[5] = __shfl_down_sync(0xffffffffu, v, 33, width); // delta is taken mod 32
        long long* q = outll + ((size_t)k * blockDim.x + threadIdx.x) * 2;
        q[0] = __shfl_xor_sync(0xffffffffu, w, 5, width);
        q[1] = __shfl_sync(0xffffffffu, w, 31, width);
    }
    // two half-warps, each its own mask and operation
    int x = lane * 3 + warp;
    int r = lane < 16 ? __shfl_xor_sync(0x0000ffffu, x, 1) : __shfl_down_sync(0xffff0000u, x, 2, 16);
    outi[threadIdx.x] = r;
}

// Expected source lane per the CUDA programming guide: each group of `width` lanes shuffles
// within itself; a lane computed past the end of its own group returns the caller's value.
static int expect_src(int kind, int lane, int b, int width) {
    int base = lane / width * width;
    int src;
    switch (kind) {
        case 0: return base + ((b % 32) % width);     // __shfl_sync
        case 1: src = lane - (b % 32); return src < base ? lane : src;
        case 2: src = lane + (b % 32); return src >= base + width ? lane : src;
        default: src = lane ^ (b % 32); return src >= base + width ? lane : src;
    }
}

static void test_shuffles() {
    const int T = 64;
    DevBuf<float> outf(6 * T * 6);
    DevBuf<long long> outll(6 * T * 2);
    DevBuf<int> outi(T);
    launch(k_shuffles, 1, T, 0, 0, outf.d, outll.d, outi.d);
    std::vector<float> f = outf.get();
    std::vector<long long> q = outll.get();
    std::vector<int> r = outi.get();
    int bad = 0, shown = 0;
    for (int k = 0; k < 6; k++) {
        int width = 32 >> k;
        for (int t = 0; t < T; t++) {
            int lane = t % 32, warp = t / 32;
            auto val = [&](int l) { return (float)(l * 10 + warp * 1000 + 1); };
            float e[6] = {val(expect_src(0, lane, lane * 7 + 3, width)), val(expect_src(1, lane, 3, width)),
                          val(expect_src(2, lane, 3, width)), val(expect_src(3, lane, 1, width)),
                          val(expect_src(3, lane, 8, width)), val(expect_src(2, lane, 33, width))};
            for (int j = 0; j < 6; j++) {
                if (f[((size_t)k * T + t) * 6 + j] != e[j]) {
                    bad++;
                    if (shown++ < 5) printf("    width %d thread %d op %d: got %g want %g\n", width, t, j,
                                            f[((size_t)k * T + t) * 6 + j], e[j]);
                }
            }
            long long e0 = ((long long)expect_src(3, lane, 5, width) << 40) + warp;
            long long e1 = ((long long)expect_src(0, lane, 31, width) << 40) + warp;
            bad += q[((size_t)k * T + t) * 2] != e0;
            bad += q[((size_t)k * T + t) * 2 + 1] != e1;
        }
    }
    for (int t = 0; t < T; t++) {
        int lane = t % 32, warp = t / 32;
        int src = lane < 16 ? (lane ^ 1) : (lane + 2 >= 32 ? lane : lane + 2);
        bad += r[t] != src * 3 + warp;
    }
    EXPECT(bad == 0, "%d wrong shuffle results", bad);
}

// 2-D block: a warp spans 4 rows of 8 threads; xor 8 swaps neighbouring rows.
static __global__ void k_shuffle_2d(int* out) {
    int v = threadIdx.y * 100 + threadIdx.x;
    out[threadIdx.y * blockDim.x + threadIdx.x] = __shfl_xor_sync(0xffffffffu, v, 8);
}

static void test_shuffle_2d() {
    DevBuf<int> out(64);
    launch(k_shuffle_2d, 1, dim3(8, 8), 0, 0, out.d);
    std::vector<int> h = out.get();
    int bad = 0;
    for (int y = 0; y < 8; y++)
        for (int x = 0; x < 8; x++) bad += h[y * 8 + x] != (y ^ 1) * 100 + x;
    EXPECT(bad == 0, "%d wrong 2-D shuffle results", bad);
}

// ----------------------------------------------------------------------------
// votes, __syncwarp, warp reductions (sm_80+)

static __global__ void k_votes(unsigned* out) {
    int lane = threadIdx.x % 32;
    int p = lane % 3 == 0;
    unsigned* o = out + threadIdx.x * 8;
    o[0] = __ballot_sync(0xffffffffu, p);
    o[1] = __any_sync(0xffffffffu, p);
    o[2] = __all_sync(0xffffffffu, p);
    o[3] = __all_sync(0xffffffffu, 1);
    unsigned m = (lane & 4) ? 0xf0f0f0f0u : 0x0f0f0f0fu; // two interleaved groups
    o[4] = __ballot_sync(m, p);
    __syncwarp();
    o[5] = __reduce_add_sync(0xffffffffu, (unsigned)lane);
    o[6] = (unsigned)__reduce_min_sync(0xffffffffu, lane - 20);
    o[7] = __reduce_or_sync(0xffffffffu, 1u << lane) ^ __reduce_and_sync(0xffffffffu, 0xffu | (1u << lane));
}

static void test_votes() {
    DevBuf<unsigned> out(64 * 8);
    launch(k_votes, 1, 64, 0, 0, out.d);
    std::vector<unsigned> h = out.get();
    unsigned ballot = 0;
    for (int l = 0; l < 32; l++) ballot |= (unsigned)(l % 3 == 0) << l;
    int bad = 0;
    for (int t = 0; t < 64; t++) {
        int lane = t % 32;
        unsigned m = (lane & 4) ? 0xf0f0f0f0u : 0x0f0f0f0fu;
        const unsigned* o = &h[t * 8];
        bad += o[0] != ballot || o[1] != 1 || o[2] != 0 || o[3] != 1 || o[4] != (ballot & m);
        bad += o[5] != 496 || (int)o[6] != -20 || o[7] != (0xffffffffu ^ 0xffu);
    }
    EXPECT(bad == 0, "%d threads with wrong votes/reductions (thread 0: %08x %u %u %u %08x %u %d %08x)", bad,
           h[0], h[1], h[2], h[3], h[4], h[5], (int)h[6], h[7]);
}

// ----------------------------------------------------------------------------
// atomics

struct AtomicOut {
    int i_add, i_max, i_min, i_sub;
    unsigned u_or, u_inc, u_cas;
    float f_add;
    double d_add;
    unsigned long long ull_add;
};

static __global__ void k_atomics(AtomicOut* o) {
    int g = blockIdx.x * blockDim.x + threadIdx.x;
    atomicAdd(&o->i_add, 2);
    atomicMax(&o->i_max, g);
    atomicMin(&o->i_min, -g);
    atomicSub(&o->i_sub, 1);
    atomicOr(&o->u_or, 1u << (g % 32));
    atomicInc(&o->u_inc, 9u);
    unsigned old = o->u_cas, assumed; // lock-free increment by CAS
    do {
        assumed = old;
        old = atomicCAS(&o->u_cas, assumed, assumed + 1);
    } while (old != assumed);
    atomicAdd(&o->f_add, 1.0f);
    atomicAdd(&o->d_add, 0.5);
    atomicAdd(&o->ull_add, 3ull);
}

static void test_atomics_n(const char* what) {
    const int B = 8, T = 256, N = B * T;
    DevBuf<AtomicOut> o(1);
    launch(k_atomics, B, T, 0, 0, o.d);
    AtomicOut h = o.get()[0];
    EXPECT(h.i_add == 2 * N && h.i_max == N - 1 && h.i_min == -(N - 1) && h.i_sub == -N,
           "%s: int atomics %d %d %d %d", what, h.i_add, h.i_max, h.i_min, h.i_sub);
    EXPECT(h.u_or == 0xffffffffu && h.u_inc == (unsigned)(N % 10) && h.u_cas == (unsigned)N,
           "%s: unsigned atomics %08x %u %u", what, h.u_or, h.u_inc, h.u_cas);
    EXPECT(h.f_add == (float)N && h.d_add == 0.5 * N && h.ull_add == 3ull * N, "%s: add %g %g %llu", what,
           h.f_add, h.d_add, h.ull_add);
}

static void test_atomics() { test_atomics_n("atomics"); }

// ----------------------------------------------------------------------------
// dynamic shared memory

static __global__ void k_dyn_rotate(float* out, const float* in) {
    DYNAMIC_SHARED(float, buf);
    int t = threadIdx.x, n = blockDim.x;
    buf[t] = in[blockIdx.x * n + t];
    __syncthreads();
    out[blockIdx.x * n + t] = buf[(t + 1) % n];
}

static __global__ void k_dyn_big(float* out, int count) {
    DYNAMIC_SHARED(float, buf);
    for (int i = threadIdx.x; i < count; i += blockDim.x) buf[i] = (float)i;
    __syncthreads();
    float s = 0;
    for (int i = threadIdx.x; i < count; i += blockDim.x) s += buf[count - 1 - i];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}

static void test_dynamic_smem() {
    const int T = 96, B = 3;
    std::vector<float> h(T * B);
    for (int i = 0; i < T * B; i++) h[i] = (float)(i * 2);
    DevBuf<float> in(T * B), out(T * B);
    in.put(h);
    launch(k_dyn_rotate, B, T, T * sizeof(float), 0, out.d, in.d);
    std::vector<float> o = out.get();
    int bad = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) bad += o[b * T + t] != h[b * T + (t + 1) % T];
    EXPECT(bad == 0, "%d wrong values through dynamic shared memory", bad);

    // 100 KB: refused without the attribute (cudaErrorInvalidValue), fine after it
    const int count = 100 * 1024 / 4;
    const size_t bytes = count * sizeof(float);
    DevBuf<float> big(2 * 128);
    (void)cudaGetLastError();
    ls_launch_raw(k_dyn_big, 2, 128, bytes, 0, big.d, count);
    cudaError_t e = cudaGetLastError();
    EXPECT(e == cudaErrorInvalidValue, "100 KB without cudaFuncSetAttribute: got %s", cudaGetErrorName(e));
    cudaError_t e2 = cudaFuncSetAttribute(k_dyn_big, cudaFuncAttributeMaxDynamicSharedMemorySize, 240 * 1024);
    (void)cudaGetLastError();
    EXPECT(e2 == cudaErrorInvalidValue, "attribute above 227 KB accepted: %s", cudaGetErrorName(e2));
    cudaCheck(cudaFuncSetAttribute(k_dyn_big, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    launch(k_dyn_big, 2, 128, bytes, 0, big.d, count);
    std::vector<float> s = big.get();
    double got = 0, want = 0;
    for (float x : s) got += x;
    for (int i = 0; i < count; i++) want += 2.0 * i;
    EXPECT(got == want, "sum over 100 KB of dynamic shared memory: %g, want %g", got, want);
}

#if LS_HARNESS
// Dynamic shared memory reads as NaN (0xFF bytes) before the block writes it, in every block.
static __global__ void k_dyn_poison(unsigned* out) {
    DYNAMIC_SHARED(unsigned, buf);
    out[blockIdx.x * blockDim.x + threadIdx.x] = buf[threadIdx.x];
    __syncthreads();
    buf[threadIdx.x] = 7;
}

static void test_poison() {
    DevBuf<unsigned> out(3 * 32);
    launch(k_dyn_poison, 3, 32, 32 * sizeof(unsigned), 0, out.d);
    std::vector<unsigned> h = out.get();
    int bad = 0;
    for (unsigned x : h) bad += x != 0xffffffffu;
    EXPECT(bad == 0, "%d unpoisoned words of dynamic shared memory", bad);
}

// A lane outside the mask reads as all-ones bits.
static __global__ void k_shfl_outside(float* out) {
    float v = (float)threadIdx.x;
    if (threadIdx.x < 16) out[threadIdx.x] = __shfl_xor_sync(0x0000ffffu, v, 16);
}

static void test_shfl_outside_mask() {
    DevBuf<float> out(16);
    launch(k_shfl_outside, 1, 32, 0, 0, out.d);
    std::vector<float> h = out.get();
    int bad = 0;
    for (float x : h) bad += f2u(x) != 0xffffffffu;
    EXPECT(bad == 0, "%d reads outside the mask did not return poison", bad);
}
#endif

// ----------------------------------------------------------------------------
// launch errors surface through cudaGetLastError (not sticky)

static __global__ void k_noop(int* p) {
    if (p != nullptr && threadIdx.x == 0) p[0] = 1;
}

static void test_launch_errors() {
    (void)cudaGetLastError();
    struct { dim3 grid, block; } bad[] = {
        {dim3(1), dim3(2048)}, {dim3(1), dim3(32, 32, 2)}, {dim3(1), dim3(1, 1, 65)},
        {dim3(1, 65536), dim3(32)}, {dim3(0), dim3(32)},
    };
    for (auto& c : bad) {
        ls_launch_raw(k_noop, c.grid, c.block, 0, 0, (int*)nullptr);
        cudaError_t e = cudaGetLastError();
        EXPECT(e == cudaErrorInvalidConfiguration, "grid (%u,%u,%u) block (%u,%u,%u): got %s", c.grid.x,
               c.grid.y, c.grid.z, c.block.x, c.block.y, c.block.z, cudaGetErrorName(e));
        EXPECT(cudaGetLastError() == cudaSuccess, "launch errors must not be sticky");
    }
    DevBuf<int> p(1);
    launch(k_noop, 1, 1024, 0, 0, p.d); // the largest legal block
    EXPECT(p.get()[0] == 1, "1024-thread block did not run");
}

// ----------------------------------------------------------------------------
// bf16

static uint16_t bf16_rne_ref(float x) { // round to nearest even, written from the format's definition
    uint32_t u = f2u(x);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x7fffffu)) return 0x7fff; // NaN
    uint32_t lsb = (u >> 16) & 1u;
    return (uint16_t)((u + 0x7fffu + lsb) >> 16);
}

static __global__ void k_bf16(uint16_t* out, float* back, const float* in, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    __nv_bfloat16 b = __float2bfloat16(in[i]);
    out[i] = __bfloat16_as_ushort(b);
    back[i] = __bfloat162float(b);
}

static void test_bf16() {
    std::vector<float> v = {0.0f, -0.0f, 1.0f, 1.00390625f, 1.01171875f, 1.0078125f, -2.5f, 3.0e38f,
                            3.4e38f, 1e-40f, -1e-39f, 65504.0f, 0.1f, INFINITY, -INFINITY, NAN, 7.0e-45f,
                            1.0f + 1.0f / 256 + 1.0f / 65536};
    int n = (int)v.size(), bad = 0;
    for (int i = 0; i < n; i++) {
        uint16_t h = __bfloat16_as_ushort(__float2bfloat16(v[i]));
        uint16_t r = bf16_rne_ref(v[i]);
        bool ok = isnan(v[i]) ? ((h & 0x7f80) == 0x7f80 && (h & 0x7f)) : h == r;
        if (!ok) printf("    host __float2bfloat16(%g) = %04x, want %04x\n", v[i], h, r);
        bad += !ok;
    }
    DevBuf<float> in(n), back(n);
    DevBuf<uint16_t> out(n);
    in.put(v);
    launch(k_bf16, 1, 32, 0, 0, out.d, back.d, in.d, n);
    std::vector<uint16_t> o = out.get();
    std::vector<float> bk = back.get();
    for (int i = 0; i < n; i++) {
        if (isnan(v[i])) { bad += !isnan(bk[i]); continue; }
        bad += o[i] != bf16_rne_ref(v[i]);
        uint32_t ub = (uint32_t)o[i] << 16;
        float fb;
        memcpy(&fb, &ub, 4);
        bad += f2u(bk[i]) != f2u(fb);
    }
    EXPECT(bad == 0, "%d wrong bf16 conversions", bad);
}

// ----------------------------------------------------------------------------
// __constant__ and runtime calls

__constant__ float c_table[4];

static __global__ void k_constant(float* out) { out[threadIdx.x] = c_table[threadIdx.x % 4] * 2.0f; }

static void test_constant() {
    float t[4] = {1, 2, 3, 4};
    cudaCheck(cudaMemcpyToSymbol(c_table, t, sizeof t));
    DevBuf<float> out(8);
    launch(k_constant, 1, 8, 0, 0, out.d);
    std::vector<float> h = out.get();
    int bad = 0;
    for (int i = 0; i < 8; i++) bad += h[i] != 2.0f * t[i % 4];
    EXPECT(bad == 0, "%d wrong values from __constant__ memory", bad);
}

static void test_runtime() {
    cudaDeviceProp p;
    cudaCheck(cudaGetDeviceProperties(&p, 0));
    EXPECT(p.warpSize == 32 && p.maxThreadsPerBlock == 1024 && p.sharedMemPerBlockOptin >= 48 * 1024 &&
           p.multiProcessorCount > 0, "implausible device properties");
    EXPECT(cuda_sm_count() == p.multiProcessorCount, "cuda_sm_count %d vs %d", cuda_sm_count(), p.multiProcessorCount);
    size_t free0, total0, free1, total1;
    cudaCheck(cudaMemGetInfo(&free0, &total0));
    EXPECT(free0 <= total0 && total0 > 0, "cudaMemGetInfo: free %zu total %zu", free0, total0);
    {
        DevBuf<char> big(16 << 20);
        cudaCheck(cudaMemGetInfo(&free1, &total1));
        EXPECT(free1 + (16 << 20) <= free0 + (4 << 20), "free memory did not drop after a 16 MiB cudaMalloc");
    }
    cudaStream_t s;
    cudaEvent_t a, b;
    cudaCheck(cudaStreamCreate(&s));
    cudaCheck(cudaEventCreate(&a));
    cudaCheck(cudaEventCreate(&b));
    DevBuf<int> x(1000);
    std::vector<int> h(1000, 5);
    cudaCheck(cudaEventRecord(a, s));
    cudaCheck(cudaMemcpyAsync(x.d, h.data(), 1000 * sizeof(int), cudaMemcpyHostToDevice, s));
    cudaCheck(cudaMemsetAsync(x.d, 0, 10 * sizeof(int), s));
    launch(k_noop, 1, 32, 0, s, x.d + 500);
    cudaCheck(cudaEventRecord(b, s));
    cudaCheck(cudaEventSynchronize(b));
    cudaCheck(cudaStreamSynchronize(s));
    float ms = -1;
    cudaCheck(cudaEventElapsedTime(&ms, a, b));
    EXPECT(ms >= 0.0f, "event time %g ms", ms);
    std::vector<int> back = x.get();
    EXPECT(back[0] == 0 && back[9] == 0 && back[10] == 5 && back[500] == 1 && back[999] == 5,
           "async copy/memset/launch on a stream: %d %d %d %d", back[0], back[10], back[500], back[999]);
    cudaCheck(cudaEventDestroy(a));
    cudaCheck(cudaEventDestroy(b));
    cudaCheck(cudaStreamDestroy(s));
    cudaCheck(cudaDeviceSynchronize());
    const char* name = nullptr;
    cudaCheck(cudaFuncGetName(&name, (const void*)k_noop));
    EXPECT(name != nullptr && strstr(name, "k_noop") != nullptr, "cudaFuncGetName: %s", name ? name : "(null)");
#if LS_HARNESS
    std::vector<int> host(4);
    cudaError_t e = cudaMemcpy(host.data(), host.data() + 2, 8, cudaMemcpyDeviceToHost);
    (void)cudaGetLastError();
    EXPECT(e == cudaErrorInvalidValue, "copy from a host pointer named as device: %s", cudaGetErrorName(e));
    e = cudaFree(host.data());
    (void)cudaGetLastError();
    EXPECT(e == cudaErrorInvalidValue, "cudaFree of a host pointer: %s", cudaGetErrorName(e));
#endif
}

// ----------------------------------------------------------------------------
// streams: what CUDA guarantees about the order of work on different streams

static __global__ void k_fill(int* x, int n, int v) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = v + i;
}
static __global__ void k_add(int* y, const int* x, int n, int v) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] + v;
}
static __global__ void k_step(int* x, int n) { // x = 3x + 1 (mod 2^32): order-sensitive
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = (int)(3u * (unsigned)x[i] + 1u);
}

// A pinned host buffer of n ints.
struct PinnedInts {
    int* h = nullptr;
    explicit PinnedInts(size_t n) { cudaCheck(cudaMallocHost((void**)&h, n * sizeof(int))); }
    ~PinnedInts() { cudaCheck(cudaFreeHost(h)); }
    PinnedInts(const PinnedInts&) = delete;
    PinnedInts& operator=(const PinnedInts&) = delete;
};

// Two streams share x. read_after_write: a kernel on stream a writes x, one on stream b reads it
// (b must wait for a); else b reads x first and a overwrites it (a must wait for b). `wait`: with
// the cudaStreamWaitEvent that orders them. Returns the number of wrong outputs (of 256).
static int run_two_streams(bool read_after_write, bool wait) {
    const int n = 256;
    cudaStream_t a, b;
    cudaEvent_t e;
    cudaCheck(cudaStreamCreate(&a));
    cudaCheck(cudaStreamCreate(&b));
    cudaCheck(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    DevBuf<int> x(n), y(n);
    PinnedInts out(n);
    launch(k_fill, 1, n, 0, 0, x.d, n, 1000); // legacy stream: a and b wait for it
    if (read_after_write) {
        launch(k_fill, 1, n, 0, a, x.d, n, 2000);
        cudaCheck(cudaEventRecord(e, a));
        if (wait) cudaCheck(cudaStreamWaitEvent(b, e, 0));
        launch(k_add, 1, n, 0, b, y.d, x.d, n, 1);
    } else {
        launch(k_add, 1, n, 0, b, y.d, x.d, n, 1);
        cudaCheck(cudaEventRecord(e, b));
        if (wait) cudaCheck(cudaStreamWaitEvent(a, e, 0));
        launch(k_fill, 1, n, 0, a, x.d, n, 2000);
    }
    cudaCheck(cudaMemcpyAsync(out.h, y.d, n * sizeof(int), cudaMemcpyDeviceToHost, b));
    cudaCheck(cudaStreamSynchronize(b)); // out is complete; a may still run
    int bad = 0;
    for (int i = 0; i < n; i++) bad += out.h[i] != (read_after_write ? 2000 : 1000) + i + 1;
    cudaCheck(cudaDeviceSynchronize());
    cudaCheck(cudaEventDestroy(e));
    cudaCheck(cudaStreamDestroy(a));
    cudaCheck(cudaStreamDestroy(b));
    return bad;
}

static void test_stream_waits() {
    EXPECT(run_two_streams(true, true) == 0, "read after write across streams, with the wait");
    EXPECT(run_two_streams(false, true) == 0, "write after read across streams, with the wait");
}

// Three streams each run a chain of k_step on their own buffer, stream 2 then joins stream 0's
// result through an event, and the legacy stream (synchronous cudaMemcpy) reads everything: stream
// order, events and the legacy stream's implicit waits, with more operations than fit the queue.
static void test_stream_order() {
    const int n = 64, steps = 700;
    cudaStream_t s[3];
    cudaEvent_t done0;
    for (auto& x : s) cudaCheck(cudaStreamCreate(&x));
    cudaCheck(cudaEventCreate(&done0));
    DevBuf<int> buf(3 * n), joined(n);
    for (int k = 0; k < 3; k++) launch(k_fill, 1, n, 0, s[k], buf.d + k * n, n, 10 * k);
    for (int r = 0; r < steps; r++)
        for (int k = 0; k < 3; k++) launch(k_step, 1, n, 0, s[k], buf.d + k * n, n);
    cudaCheck(cudaEventRecord(done0, s[0]));
    cudaCheck(cudaStreamWaitEvent(s[2], done0, 0));
    launch(k_add, 1, n, 0, s[2], joined.d, buf.d, n, 7);
    std::vector<int> got = buf.get(), got_joined = joined.get(); // legacy stream: waits for all three
    int bad = 0;
    for (int k = 0; k < 3; k++) {
        for (int i = 0; i < n; i++) {
            unsigned v = (unsigned)(10 * k + i);
            for (int r = 0; r < steps; r++) v = 3u * v + 1u;
            bad += got[k * n + i] != (int)v;
            if (k == 0) bad += got_joined[i] != (int)(v + 7u);
        }
    }
    EXPECT(bad == 0, "%d wrong values after %d steps on 3 streams", bad, steps);
    float ms = -1.0f;
    EXPECT(cudaEventElapsedTime(&ms, done0, done0) == cudaSuccess && ms == 0.0f, "elapsed time of an event to itself");
    cudaCheck(cudaEventDestroy(done0));
    for (auto& x : s) cudaCheck(cudaStreamDestroy(x));
}

// ----------------------------------------------------------------------------
// harness-only: orders, workers, the planted race

#if LS_HARNESS
static const ls_harness::Order kOrders[] = {ls_harness::Order::forward, ls_harness::Order::reverse,
                                            ls_harness::Order::strided, ls_harness::Order::random};

static void test_orders() {
    ls_harness::Order saved = ls_harness::config().order;
    for (ls_harness::Order o : kOrders) {
        ls_harness::set_order(o);
        run_block_sum(ls_harness::order_name(o));
        EXPECT(run_reverse(1) == 0, "block reverse with a barrier, order %s", ls_harness::order_name(o));
    }
    ls_harness::set_order(saved);
}

// Planted bug: without the barrier, some thread reads a slot before its owner wrote it.
static void test_missing_barrier_caught() {
    ls_harness::Order saved = ls_harness::config().order;
    int orders_wrong = 0;
    for (ls_harness::Order o : kOrders) {
        ls_harness::set_order(o);
        size_t bad = run_reverse(0);
        if (!g_quiet) printf("    missing __syncthreads, order %-8s: %zu of 512 outputs wrong\n", ls_harness::order_name(o), bad);
        orders_wrong += bad > 0;
    }
    ls_harness::set_order(saved);
    EXPECT(orders_wrong >= 1, "the missing __syncthreads went unnoticed in every order");
}

// Planted bugs: the cudaStreamWaitEvent left out, in both directions. The interleaving is random
// under a seed, so each seed catches a given missing wait or not, deterministically; over 8 seeds
// both must be caught, and the correct versions must pass under every seed.
static const uint64_t kStreamSeeds[] = {1, 2, 3, 4, 5, 6, 7, 8};

static void test_missing_wait_caught() {
    uint64_t saved = ls_harness::config().stream_seed;
    int caught_raw = 0, caught_war = 0;
    for (uint64_t seed : kStreamSeeds) {
        ls_harness::set_stream_seed(seed);
        EXPECT(run_two_streams(true, true) == 0 && run_two_streams(false, true) == 0,
               "with the waits, stream seed %llu", (unsigned long long)seed);
        test_stream_order();
        int raw = run_two_streams(true, false), war = run_two_streams(false, false);
        if (!g_quiet) printf("    missing wait, stream seed %llu: read-after-write %3d, write-after-read %3d of 256 wrong\n",
                             (unsigned long long)seed, raw, war);
        caught_raw += raw > 0;
        caught_war += war > 0;
    }
    ls_harness::set_stream_seed(saved);
    EXPECT(caught_raw >= 1, "the missing wait (read after write) went unnoticed under every seed");
    EXPECT(caught_war >= 1, "the missing wait (write after read) went unnoticed under every seed");
    // the old synchronous mode runs in issue order: it cannot see them
    ls_harness::config().streams_sync = true;
    EXPECT(run_two_streams(true, false) == 0 && run_two_streams(false, false) == 0, "LEANSTEP_HARNESS_STREAMS=sync");
    ls_harness::config().streams_sync = false;
}

// Planted bug: the host reads pinned memory that an async copy writes, without synchronizing.
static void test_missing_sync_caught() {
    const int n = 64;
    cudaStream_t s;
    cudaCheck(cudaStreamCreate(&s));
    DevBuf<int> y(n);
    PinnedInts out(n);
    for (int i = 0; i < n; i++) out.h[i] = -1;
    launch(k_fill, 1, n, 0, s, y.d, n, 5);
    cudaCheck(cudaMemcpyAsync(out.h, y.d, n * sizeof(int), cudaMemcpyDeviceToHost, s));
    int stale = 0;
    for (int i = 0; i < n; i++) stale += out.h[i] == -1; // no synchronization yet
    EXPECT(stale == n, "the copy ran before any synchronization (%d of %d stale)", stale, n);
    cudaCheck(cudaStreamSynchronize(s));
    int bad = 0;
    for (int i = 0; i < n; i++) bad += out.h[i] != 5 + i;
    EXPECT(bad == 0, "%d wrong values after cudaStreamSynchronize", bad);
    // a pageable source is staged when the copy is issued (the host may change it at once); a pinned
    // one is read when it runs (changing it before then: the child pinned-changed)
    std::vector<int> pageable(n, 1);
    for (int i = 0; i < n; i++) out.h[i] = 2;
    cudaCheck(cudaMemcpyAsync(y.d, pageable.data(), n * sizeof(int), cudaMemcpyHostToDevice, s));
    cudaCheck(cudaMemcpyAsync(y.d + n / 2, out.h, n / 2 * sizeof(int), cudaMemcpyHostToDevice, s));
    pageable[0] = 3;
    std::vector<int> got = y.get();
    EXPECT(got[0] == 1 && got[n / 2] == 2 && got[n / 2 + 1] == 2, "staging: %d %d %d", got[0], got[n / 2], got[n / 2 + 1]);
    out.h[0] = 4;  // (after the synchronization: the copy is done)
    cudaCheck(cudaStreamDestroy(s));
}

static void test_workers() {
    int saved = ls_harness::config().workers;
    ls_harness::config().workers = 2;
    test_atomics_n("2 workers");
    run_block_sum("2 workers");
    EXPECT(run_reverse(1) == 0, "block reverse on 2 workers");
    ls_harness::config().workers = saved;
}
#endif

// ----------------------------------------------------------------------------
// planted bugs that must kill the program with a report (run as children; harness only: on a GPU
// these hang or corrupt memory)

#if LS_HARNESS
static __global__ void k_divergent_barrier(int* out) {
    if (threadIdx.x < 16) {
        __syncthreads();
    } else {
        __syncthreads();
    }
    out[threadIdx.x] = 1;
}
static __global__ void k_warp_vs_barrier(float* out) {
    float v = 1.0f;
    if (threadIdx.x < 16) __syncthreads();
    v = __shfl_xor_sync(0xffffffffu, v, 1);
    out[threadIdx.x] = v;
}
static __global__ void k_mask_missing_self(float* out) {
    out[threadIdx.x] = __shfl_xor_sync(0x1u, 1.0f, 1);
}
static __global__ void k_mask_exited(float* out) {
    if (threadIdx.x >= 16) return;
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
}
static __global__ void k_mask_mismatch(float* out) {
    float v = (float)threadIdx.x;
    out[threadIdx.x] = threadIdx.x < 16 ? __shfl_xor_sync(0xffffffffu, v, 1) : __shfl_down_sync(0xffffffffu, v, 1);
}
static __global__ void k_bad_width(float* out) { out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1, 3); }
static __global__ void k_oob_write(float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) out[i] = 1.0f; // off by one: writes out[n]
}
static __global__ void k_smem_oob(float* out) {
    DYNAMIC_SHARED(float, buf);
    buf[threadIdx.x + 1] = 1.0f; // the last thread writes one past the end
    out[threadIdx.x] = buf[threadIdx.x];
}
static __global__ void k_stack_hog(float* out, int n) {
    volatile float big[1 << 18]; // 1 MiB of locals: more than a fiber stack
    for (int i = 0; i < n; i++) big[i] = (float)i;
    out[threadIdx.x] = big[n - 1];
}

// The harness's cuBLASLt stops on what it does not model (an epilogue, an attribute) and on a matrix
// less aligned than the algorithm was chosen for (the reduction scheme mask is accepted on the way).
#define cublasCheck(call) \
    do { if ((call) != CUBLAS_STATUS_SUCCESS) ls_fatal("%s failed", #call); } while (0)
static void child_cublaslt(const char* name) {
    cublasLtHandle_t h;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t l;
    cublasLtMatmulPreference_t pref;
    cublasCheck(cublasLtCreate(&h));
    cublasCheck(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    if (strcmp(name, "lt-epilogue") == 0) {
        const cublasLtEpilogue_t e = CUBLASLT_EPILOGUE_RELU;
        cublasCheck(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e));
        return;
    }
    if (strcmp(name, "lt-attribute") == 0) {
        const int32_t fill = CUBLAS_FILL_MODE_LOWER;
        cublasCheck(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_FILL_MODE, &fill, sizeof fill));
        return;
    }
    // D (8,8) = A (8,8) B (8,8) in fp32, the algorithm chosen for 16-byte aligned matrices; A is 4 bytes off
    cublasCheck(cublasLtMatrixLayoutCreate(&l, CUDA_R_32F, 8, 8, 8));
    cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
    const uint32_t fp32_reduction = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE | CUBLASLT_REDUCTION_SCHEME_INPLACE;
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &fp32_reduction,
                                                     sizeof fp32_reduction));
    const uint32_t align = 16;
    for (int a = CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES; a <= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES; a++) {
        cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, (cublasLtMatmulPreferenceAttributes_t)a, &align, sizeof align));
    }
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;
    cublasCheck(cublasLtMatmulAlgoGetHeuristic(h, op, l, l, l, l, pref, 1, &heur, &found));
    DevBuf<float> m(4 * 64);
    const float one = 1.0f, zero = 0.0f;
    cublasCheck(cublasLtMatmul(h, op, &one, m.d + 1, l, m.d + 64, l, &zero, m.d + 128, l, m.d + 128, l, &heur.algo,
                               nullptr, 0, 0));
}

static void child(const char* name) {
    if (strncmp(name, "lt-", 3) == 0) {
        child_cublaslt(name);
        printf("child %s: finished without an error\n", name);
        return;
    }
    DevBuf<float> f(64);
    DevBuf<int> i(64);
    if (strcmp(name, "divergent-barrier") == 0) launch(k_divergent_barrier, 1, 32, 0, 0, i.d);
    else if (strcmp(name, "warp-vs-barrier") == 0) launch(k_warp_vs_barrier, 1, 32, 0, 0, f.d);
    else if (strcmp(name, "mask-missing-self") == 0) launch(k_mask_missing_self, 1, 32, 0, 0, f.d);
    else if (strcmp(name, "mask-exited") == 0) launch(k_mask_exited, 1, 32, 0, 0, f.d);
    else if (strcmp(name, "mask-mismatch") == 0) launch(k_mask_mismatch, 1, 32, 0, 0, f.d);
    else if (strcmp(name, "mask-nonexistent") == 0) launch(k_mask_exited, 1, 20, 0, 0, f.d);
    else if (strcmp(name, "bad-width") == 0) launch(k_bad_width, 1, 32, 0, 0, f.d);
    else if (strcmp(name, "block-2048") == 0) launch(k_noop, 1, 2048, 0, 0, i.d);
    else if (strcmp(name, "smem-over-limit") == 0) launch(k_dyn_rotate, 1, 32, 64 * 1024, 0, f.d, f.d);
    else if (strcmp(name, "oob-write") == 0) launch(k_oob_write, 1, 96, 0, 0, f.d, 64);
    else if (strcmp(name, "smem-oob") == 0) launch(k_smem_oob, 1, 32, 32 * sizeof(float), 0, f.d);
    else if (strcmp(name, "stack-overflow") == 0) launch(k_stack_hog, 1, 1, 0, 0, f.d, 1 << 18);
    else if (strcmp(name, "pinned-changed") == 0) {  // the host writes a pinned source before its copy ran
        cudaStream_t s;
        cudaCheck(cudaStreamCreate(&s));
        PinnedInts src(64);
        for (int k = 0; k < 64; k++) src.h[k] = k;
        cudaCheck(cudaMemcpyAsync(i.d, src.h, 64 * sizeof(int), cudaMemcpyHostToDevice, s));
        src.h[7] = -1;
        cudaCheck(cudaStreamSynchronize(s));
    }
    else if (strcmp(name, "ok") == 0) launch(k_noop, 1, 32, 0, 0, i.d);
    else ls_fatal("unknown child test '%s'", name);
    cudaCheck(cudaDeviceSynchronize());
    printf("child %s: finished without an error\n", name);
}

struct DeathTest {
    const char* name;
    const char* env;      // extra environment for the child, or ""
    bool asan_only;
    const char* must[4];  // texts the child's output must contain
};
static const DeathTest kDeathTests[] = {
    {"divergent-barrier", "", false, {"deadlock", "divergent", "k_divergent_barrier", "launched from: child ["}},
    {"warp-vs-barrier", "", false, {"deadlock", "__shfl_xor_sync", "block (0,0,0)"}},
    {"mask-missing-self", "", false, {"bad warp mask", "must be in the mask", "k_mask_missing_self", "by thread ("}},
    {"mask-exited", "", false, {"bad warp mask", "exited", "k_mask_exited"}},
    {"mask-mismatch", "", false, {"bad warp mask", "__shfl_down_sync", "same operation"}},
    {"mask-nonexistent", "", false, {"bad warp mask", "do not exist", "block of 20 threads"}},
    {"bad-width", "", false, {"width 3", "k_bad_width", "by thread ("}},
    {"block-2048", "", false, {"invalid configuration argument", "k_noop", "block (2048,1,1)"}},
    {"smem-over-limit", "", false, {"invalid argument", "k_dyn_rotate", "65536 bytes"}},
    {"oob-write", "", true, {"AddressSanitizer", "heap-buffer-overflow", "k_oob_write", "thread (64,0,0)"}},
    {"smem-oob", "", true, {"AddressSanitizer", "heap-buffer-overflow", "k_smem_oob"}},
    {"stack-overflow", "", false, {"", "", ""}},
    {"pinned-changed", "", false, {"harness: cudaMemcpyAsync: the host changed its pinned source", "256 bytes", "race"}},
    {"lt-epilogue", "", false, {"harness: cuBLASLt: cublasLtMatmulDescSetAttribute", "CUBLASLT_MATMUL_DESC_EPILOGUE = 2 (RELU", ""}},
    {"lt-attribute", "", false, {"harness: cuBLASLt: cublasLtMatmulDescSetAttribute", "CUBLASLT_MATMUL_DESC_FILL_MODE (6)", ""}},
    {"lt-misaligned", "", false, {"harness: cuBLASLt: cublasLtMatmul: A = ", "aligned to 4 bytes",
                                  "CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES"}},
    {"ok", "LEANSTEP_HARNESS_ORDER=sideways", false, {"LEANSTEP_HARNESS_ORDER='sideways'", "forward", ""}},
    {"ok", "LEANSTEP_HARNESS_WORKERS=0", false, {"LEANSTEP_HARNESS_WORKERS='0'", "", ""}},
    {"ok", "LEANSTEP_HARNESS_STREAMS=eager", false, {"LEANSTEP_HARNESS_STREAMS='eager'", "deferred or sync", ""}},
    {"ok", "LEANSTEP_HARNESS_STREAM_QUEUE=0", false, {"LEANSTEP_HARNESS_STREAM_QUEUE='0'", "", ""}},
};

// Returns the number of failure tests run.
static int run_death_tests() {
    int ran = 0;
    char exe[1024];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) ls_fatal("readlink /proc/self/exe failed");
    exe[n] = '\0';
    for (const DeathTest& t : kDeathTests) {
        if (t.asan_only && !LS_HARNESS_ASAN) {
            if (!g_quiet) printf("  [skip] child %s: needs the ASan build (make test-cuda-san)\n", t.name);
            continue;
        }
        char cmd[1400];
        snprintf(cmd, sizeof cmd, "%s '%s' --child %s 2>&1", t.env, exe, t.name);
        ran++;
        auto t0 = std::chrono::steady_clock::now();
        FILE* p = popen(cmd, "r");
        if (p == nullptr) ls_fatal("popen(%s) failed", cmd);
        std::string out;
        char buf[4096];
        size_t k;
        while ((k = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, k);
        int st = pclose(p);
        double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        bool died = !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        bool ok = died;
        const char* missing = nullptr;
        for (const char* m : t.must) {
            if (m != nullptr && *m != '\0' && out.find(m) == std::string::npos) { ok = false; missing = m; }
        }
        if (strcmp(t.name, "stack-overflow") == 0 && out.find("stack overflow") == std::string::npos &&
            out.find("stack-overflow") == std::string::npos && out.find("SEGV") == std::string::npos) {
            ok = false;
            missing = "stack overflow";
        }
        if (!g_quiet || !ok) {
            printf("  [%s] child %s%s%s: %s (%.0f ms)\n", ok ? "ok" : "FAIL", t.name, *t.env ? " with " : "", t.env,
                   died ? "died as expected" : "exited 0", ms);
        }
        if (!ok) {
            g_failures++;
            if (missing) printf("    missing '%s' in its output:\n", missing);
            printf("%s\n", out.c_str());
        } else if (!g_quiet) { // the report's headline (ASan: its SUMMARY line)
            size_t at = out.find("SUMMARY:");
            if (at == std::string::npos) at = 0;
            size_t nl = out.find('\n', at);
            printf("      %s\n", out.substr(at, std::min<size_t>(nl == std::string::npos ? 160 : nl - at, 160)).c_str());
        }
    }
    return ran;
}

// ----------------------------------------------------------------------------
// --bench: what the harness costs

static __global__ void k_empty() {}
static __global__ void k_barriers(int n) {
    for (int i = 0; i < n; i++) __syncthreads();
}
static __global__ void k_shfls(int n, float* sink) {
    float v = (float)threadIdx.x;
    for (int i = 0; i < n; i++) v = __shfl_xor_sync(0xffffffffu, v, 1);
    if (v < 0.0f) sink[0] = v;
}

static double time_ms(void (*fn)()) {
    fn(); // warm-up: stacks, pages
    auto t0 = std::chrono::steady_clock::now();
    fn();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

static void bench() {
    static float* sink;
    cudaCheck(cudaMalloc(&sink, 4));
    const int B = 256, T = 256, R = 64;
    double threads = (double)B * T;
    double t_empty = time_ms([] { launch(k_empty, 256, 256, 0, 0); cudaCheck(cudaDeviceSynchronize()); });
    double t_bar = time_ms([] { launch(k_barriers, 256, 256, 0, 0, 64); cudaCheck(cudaDeviceSynchronize()); });
    double t_shfl = time_ms([] { launch(k_shfls, 256, 256, 0, 0, 64, sink); cudaCheck(cudaDeviceSynchronize()); });
    printf("harness cost (order %s, %d worker(s), %s build):\n", ls_harness::order_name(ls_harness::config().order),
           ls_harness::config().workers, LS_HARNESS_ASAN ? "ASan" : "optimized");
    printf("  thread start+run+exit : %6.1f ns per thread\n", t_empty * 1e6 / threads);
    printf("  __syncthreads         : %6.1f ns per thread per barrier (2 fiber switches)\n",
           (t_bar - t_empty) * 1e6 / (threads * R));
    printf("  __shfl_xor_sync       : %6.1f ns per thread per shuffle\n", (t_shfl - t_empty) * 1e6 / (threads * R));
#if !LS_HARNESS_ASAN // (unannotated fibers confuse ASan)
    // raw fiber switch: one resume + one yield per iteration
    namespace ctx = boost::context;
    const int N = 1000000;
    ctx::fiber f{[](ctx::fiber&& main) {
        for (;;) main = std::move(main).resume();
        return std::move(main);
    }};
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < N; i++) f = std::move(f).resume();
    double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
    printf("  Boost.Context switch  : %6.1f ns per switch\n", ns / (2.0 * N));
#endif
    cudaCheck(cudaFree(sink));
}
#endif

// ----------------------------------------------------------------------------

struct Test {
    const char* name;
    void (*fn)();
};
static const Test kTests[] = {
    {"indices", test_indices},
    {"shared-barrier", test_shared_barrier},
    {"syncthreads-reductions", test_syncthreads_reductions},
    {"block-sum", test_block_sum},
    {"shuffles", test_shuffles},
    {"shuffle-2d", test_shuffle_2d},
    {"votes", test_votes},
    {"atomics", test_atomics},
    {"dynamic-smem", test_dynamic_smem},
    {"launch-errors", test_launch_errors},
    {"bf16", test_bf16},
    {"constant", test_constant},
    {"runtime", test_runtime},
    {"stream-waits", test_stream_waits},
    {"stream-order", test_stream_order},
#if LS_HARNESS
    {"poison", test_poison},
    {"shfl-outside-mask", test_shfl_outside_mask},
    {"orders", test_orders},
    {"workers", test_workers},
    {"missing-barrier-caught", test_missing_barrier_caught},
    {"missing-wait-caught", test_missing_wait_caught},
    {"missing-sync-caught", test_missing_sync_caught},
#endif
};

static void usage(const char* prog) {
    fprintf(stderr, "usage: %s [-q] [--list | --bench | --child NAME | TEST...]\n"
                    "  without TEST: every test, then the failure tests as child processes\n", prog);
    exit(2);
}

int main(int argc, char** argv) {
    std::vector<const char*> names;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-q") == 0) {
            g_quiet = true;
        } else if (strcmp(argv[i], "--list") == 0) {
            for (const Test& t : kTests) printf("%s\n", t.name);
            return 0;
#if LS_HARNESS
        } else if (strcmp(argv[i], "--child") == 0 && i + 1 < argc) {
            child(argv[i + 1]);
            return 0;
        } else if (strcmp(argv[i], "--bench") == 0) {
            bench();
            return 0;
#endif
        } else if (argv[i][0] == '-') {
            usage(argv[0]);
        } else {
            bool known = false;
            for (const Test& t : kTests) known = known || strcmp(argv[i], t.name) == 0;
            if (!known) {
                fprintf(stderr, "%s: no test '%s' (--list shows them)\n", argv[0], argv[i]);
                usage(argv[0]);
            }
            names.push_back(argv[i]);
        }
    }
    if (!g_quiet) {
#if LS_HARNESS
        printf("harness_selftest (CPU harness, order %s%s)\n", ls_harness::order_name(ls_harness::config().order),
               LS_HARNESS_ASAN ? ", ASan" : "");
#else
        printf("harness_selftest (GPU)\n");
#endif
    }
    int ran = 0;
    for (const Test& t : kTests) {
        bool chosen = names.empty();
        for (const char* nm : names) chosen = chosen || strcmp(nm, t.name) == 0;
        if (!chosen) continue;
        int before = g_failures;
        auto t0 = std::chrono::steady_clock::now();
        t.fn();
        double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        if (!g_quiet || g_failures != before) printf("  [%s] %s (%.1f ms)\n", g_failures == before ? "ok" : "FAIL", t.name, ms);
        ran++;
    }
    int deaths = 0;
#if LS_HARNESS
    if (names.empty()) deaths = run_death_tests();
#endif
    if (g_failures > 0) {
        printf("harness_selftest: %d FAILED\n", g_failures);
        return 1;
    }
    printf("harness_selftest: all passed (%d tests, %d failure tests as child processes)\n", ran, deaths);
    return 0;
}

/*
 cuda_common.h: what every CUDA file of leanstep shares, in both builds (nvcc and the CPU harness).
   - cudaCheck(call): the one fatal path for CUDA runtime calls (file, line, the call's text).
   - CEIL_DIV, cuda_sm_count(): launch geometry helpers; cuda_build_archs(): what the kernels were
     compiled for.
   - Vec128<T>: 16 bytes of T for 128-bit loads/stores (load128/store128 and the streaming
     variants load128cs/store128cs, which do not keep the data in L1/L2 on a GPU).
   - LS_BRANCH(name): marks one path through a kernel (a 128-bit body, a scalar tail), so that a
     test can require every marked path to have run.
 Include this (it includes cuda_compat.h and utils.h) rather than the runtime headers.
*/
#ifndef LLMC_CUDA_COMMON_H
#define LLMC_CUDA_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include "llmc/cuda/cuda_compat.h"
#include "llmc/utils.h"

static inline void cuda_check(cudaError_t err, const char* what, const char* file, int line) {
    if (err != cudaSuccess) {
        ls_fatal("%s:%d: CUDA error: %s (%s) in %s", file, line, cudaGetErrorString(err), cudaGetErrorName(err), what);
    }
}
#define cudaCheck(call) cuda_check((call), #call, __FILE__, __LINE__)

#define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))

// LS_BRANCH(name) (a string literal) in a kernel marks a path through it. A host build of the CUDA code that
// defines LS_BRANCH_COUNTERS supplies ls_branch_counter(), which hands out one counter per marked
// site (registered the first time the site runs); the test runs then list which paths ran. In
// every other build (nvcc above all) the mark is nothing.
#ifdef LS_BRANCH_COUNTERS
#define LS_BRANCH(name)                                                                          \
    do {                                                                                         \
        static unsigned long long* const ls_branch_hits_ = ls_branch_counter(name, __FILE__, __LINE__); \
        __atomic_fetch_add(ls_branch_hits_, 1ull, __ATOMIC_RELAXED);                             \
    } while (0)
#else
#define LS_BRANCH(name) \
    do {                \
    } while (0)
#endif

// Number of SMs of device 0, queried once.
static inline int cuda_sm_count(void) {
    static int n = 0;
    if (n == 0) cudaCheck(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, 0));
    return n;
}

// The GPU architectures this binary's kernels were compiled for, as nvcc lists them in
// __CUDA_ARCH_LIST__ ("sm_80 sm_90"; -arch=native resolved to the build machine's GPU), or "" in a
// build by the host compiler alone. The start-up banner prints it beside the device's own.
static inline const char* cuda_build_archs(void) {
#ifdef __CUDA_ARCH_LIST__
    static char buf[128] = "";
    if (buf[0] == '\0') {
        static const int archs[] = {__CUDA_ARCH_LIST__};  // e.g. 800, 900
        size_t used = 0;
        for (size_t i = 0; i < sizeof(archs) / sizeof(archs[0]) && used + 12 < sizeof(buf); i++) {
            used += (size_t)snprintf(buf + used, sizeof(buf) - used, "%ssm_%d", i ? " " : "", archs[i] / 10);
        }
    }
    return buf;
#else
    return "";
#endif
}

// 16 bytes of T, 16-byte aligned: one 128-bit memory transaction per thread.
template <typename T>
struct alignas(16) Vec128 {
    static constexpr int size = (int)(16 / sizeof(T));
    T v[size];
    __host__ __device__ T& operator[](int i) { return v[i]; }
    __host__ __device__ const T& operator[](int i) const { return v[i]; }
};
static_assert(sizeof(Vec128<float>) == 16, "Vec128 is 16 bytes");

// p must be 16-byte aligned.
template <typename T>
__device__ __forceinline__ Vec128<T> load128(const T* p) {
    Vec128<T> r;
    *reinterpret_cast<int4*>(r.v) = *reinterpret_cast<const int4*>(p);
    return r;
}
template <typename T>
__device__ __forceinline__ Vec128<T> load128cs(const T* p) {
    Vec128<T> r;
    *reinterpret_cast<int4*>(r.v) = __ldcs(reinterpret_cast<const int4*>(p));
    return r;
}
template <typename T>
__device__ __forceinline__ void store128(T* p, const Vec128<T>& x) {
    *reinterpret_cast<int4*>(p) = *reinterpret_cast<const int4*>(x.v);
}
template <typename T>
__device__ __forceinline__ void store128cs(T* p, const Vec128<T>& x) {
    __stcs(reinterpret_cast<int4*>(p), *reinterpret_cast<const int4*>(x.v));
}

#endif // LLMC_CUDA_COMMON_H

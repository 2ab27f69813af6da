/*
 cuda_compat.h: one CUDA source, two builds.

   nvcc  (the GPU build)   : the real <cuda_runtime.h> and <cuda_bf16.h>.
   g++ -std=c++17 -x c++   : the same headers for types and host-side bf16 conversions, plus a CPU
                             execution of kernels that the include path supplies: a
                             <cuda_runtime.h> first on it that also defines ls_launch_raw() and
                             DYNAMIC_SHARED (the test builds' dev/harness/, the Makefile's
                             CUDA_HARNESS_FLAGS). Nothing here depends on which one.

 What a kernel file may use, in both builds:
   - launch(kernel, grid, block, smem_bytes, stream, args...): the ONE way to start a kernel. It is
     kernel<<<grid, block, smem_bytes, stream>>>(args...) followed by a check of cudaGetLastError():
     a launch error (block > 1024 threads, too much dynamic shared memory, ...) is fatal and names
     the kernel. LEANSTEP_CUDA_SYNC=1 also synchronizes after every launch, so asynchronous faults
     are reported at the kernel that caused them. ls_launch_raw() is the unchecked primitive, for
     tests of the error path only. launch() is always inlined, so the primitive's return address
     is the code that launched (what a report of a kernel's failure names).
   - DYNAMIC_SHARED(T, name): declares `T* name` pointing at the block's dynamic shared memory
     (16-byte aligned). Never write `extern __shared__` directly: the harness cannot emulate it.
   - static __shared__ arrays, __syncthreads*, __shfl*_sync, __all/__any/__ballot_sync, __syncwarp,
     __reduce_*_sync, atomics, threadIdx/blockIdx/blockDim/gridDim/warpSize, bf16 from
     <cuda_bf16.h>, __ldcs/__stcs-style cache hints, fmaf/sqrtf/__expf..., printf.
 The product code is the same in both builds: nothing in llmc/ branches on which one it is (tests
 that need to, for smaller shapes on the CPU, ask the harness's own headers).
 Not available on the CPU: see the banner of dev/harness/cuda_harness.h (inline PTX, tensor cores,
 cooperative groups, ...): keep such code out of kernels that must run in CI, or give it a fallback.
*/
#ifndef LLMC_CUDA_COMPAT_H
#define LLMC_CUDA_COMPAT_H

#include <utility>
#include "llmc/utils.h"
#include <cuda_runtime.h> // the harness build: dev/harness/cuda_runtime.h (see the banner)
#include <cuda_bf16.h>

#if defined(__CUDACC__)

#define DYNAMIC_SHARED(T, name)                                        \
    extern __shared__ __align__(16) unsigned char ls_dynamic_smem_[]; \
    T* name = reinterpret_cast<T*>(ls_dynamic_smem_)

// The unchecked launch primitive: exactly the triple-chevron launch.
template <typename... KP, typename... A>
inline void ls_launch_raw(void (*kernel)(KP...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                          A&&... args) {
    static_assert(sizeof...(KP) == sizeof...(A), "launch: wrong number of kernel arguments");
    kernel<<<grid, block, smem, stream>>>(std::forward<A>(args)...);
}

#elif !defined(DYNAMIC_SHARED)
#error "CUDA code under a host compiler needs a <cuda_runtime.h> that runs kernels on the CPU first on the include path (the Makefile's CUDA_HARNESS_FLAGS)"
#endif

// True when LEANSTEP_CUDA_SYNC=1: synchronize and check after every launch (debugging aid; the
// results do not change, only where an asynchronous error is reported).
inline bool ls_sync_launches() {
    static const bool on = [] {
        const char* s = getenv("LEANSTEP_CUDA_SYNC");
        return s != nullptr && strcmp(s, "1") == 0;
    }();
    return on;
}

[[noreturn]] inline void ls_launch_failed(const void* kernel, dim3 grid, dim3 block, size_t smem, cudaError_t err) {
    const char* name = nullptr;
    if (cudaFuncGetName(&name, kernel) != cudaSuccess || name == nullptr) name = "(unknown kernel)";
    (void)cudaGetLastError();
    ls_fatal("launch of kernel %s (grid (%u,%u,%u), block (%u,%u,%u), %zu bytes of dynamic shared memory) "
             "failed: %s (%s)", name, grid.x, grid.y, grid.z, block.x, block.y, block.z, smem,
             cudaGetErrorString(err), cudaGetErrorName(err));
}

// launch(kernel, grid, block, smem_bytes, stream, args...): see the banner. Arguments convert to
// the kernel's parameter types as in a <<<>>> launch.
template <typename... KP, typename... A>
__attribute__((always_inline)) inline void launch(void (*kernel)(KP...), dim3 grid, dim3 block, size_t smem,
                                                  cudaStream_t stream, A&&... args) {
    ls_launch_raw(kernel, grid, block, smem, stream, std::forward<A>(args)...);
    cudaError_t err = cudaGetLastError();
    if (err == cudaSuccess && ls_sync_launches()) err = cudaDeviceSynchronize();
    if (err != cudaSuccess) ls_launch_failed((const void*)kernel, grid, block, smem, err);
}

#endif // LLMC_CUDA_COMPAT_H

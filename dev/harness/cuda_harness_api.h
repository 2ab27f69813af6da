/*
 cuda_harness_api.h: the CUDA API surface of the CPU harness that is not scheduling: atomics,
 cache-hinted loads/stores, bit casts, integer intrinsics, fast math, min/max, and the runtime
 calls (cudaMalloc ... cudaFuncSetAttribute) as host shims. Included by cuda_harness.h only (it
 needs the harness's Worker and error state); see that file's banner for the model.

 To add a device function: define it here with the CUDA signature (templates are fine). To add a
 runtime call: define it in the extern "C" block with the exact prototype of cuda_runtime_api.h,
 and record errors through ls_harness::set_error().
*/
#ifndef LLMC_CUDA_HARNESS_API_H
#define LLMC_CUDA_HARNESS_API_H

#ifndef LLMC_CUDA_HARNESS_H
#error "include llmc/cuda/cuda_compat.h (or cuda_harness.h), not cuda_harness_api.h"
#endif

// ----------------------------------------------------------------------------
// device API: atomics (relaxed, like CUDA's; real atomics so worker threads are safe)

namespace ls_harness {
template <typename T, typename F>
inline T atomic_update(T* addr, F f) { // compare-and-swap loop on the bit pattern
    static_assert(sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8, "atomic size");
    using U = std::conditional_t<sizeof(T) == 8, uint64_t, std::conditional_t<sizeof(T) == 4, uint32_t, uint16_t>>;
    U* p = (U*)(void*)addr;
    U old = __atomic_load_n(p, __ATOMIC_RELAXED);
    for (;;) {
        T o;
        memcpy((void*)&o, &old, sizeof o);
        T n = f(o);
        U nu;
        memcpy(&nu, (const void*)&n, sizeof nu);
        if (__atomic_compare_exchange_n(p, &old, nu, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) return o;
    }
}
} // namespace ls_harness

#define LS_ATOMIC_INT(T)                                                                                    \
    inline T atomicAdd(T* a, T v) { return __atomic_fetch_add(a, v, __ATOMIC_RELAXED); }                   \
    inline T atomicExch(T* a, T v) { return __atomic_exchange_n(a, v, __ATOMIC_RELAXED); }                 \
    inline T atomicAnd(T* a, T v) { return __atomic_fetch_and(a, v, __ATOMIC_RELAXED); }                  \
    inline T atomicOr(T* a, T v) { return __atomic_fetch_or(a, v, __ATOMIC_RELAXED); }                    \
    inline T atomicXor(T* a, T v) { return __atomic_fetch_xor(a, v, __ATOMIC_RELAXED); }                  \
    inline T atomicMin(T* a, T v) { return ls_harness::atomic_update(a, [v](T o) { return v < o ? v : o; }); } \
    inline T atomicMax(T* a, T v) { return ls_harness::atomic_update(a, [v](T o) { return v > o ? v : o; }); } \
    inline T atomicCAS(T* a, T cmp, T v) {                                                                  \
        __atomic_compare_exchange_n(a, &cmp, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);                 \
        return cmp;                                                                                         \
    }
LS_ATOMIC_INT(int)
LS_ATOMIC_INT(unsigned int)
LS_ATOMIC_INT(unsigned long long int)
#undef LS_ATOMIC_INT
inline long long atomicMin(long long* a, long long v) {
    return ls_harness::atomic_update(a, [v](long long o) { return v < o ? v : o; });
}
inline long long atomicMax(long long* a, long long v) {
    return ls_harness::atomic_update(a, [v](long long o) { return v > o ? v : o; });
}
inline int atomicSub(int* a, int v) { return __atomic_fetch_sub(a, v, __ATOMIC_RELAXED); }
inline unsigned atomicSub(unsigned* a, unsigned v) { return __atomic_fetch_sub(a, v, __ATOMIC_RELAXED); }
inline unsigned atomicInc(unsigned* a, unsigned lim) {
    return ls_harness::atomic_update(a, [lim](unsigned o) { return o >= lim ? 0u : o + 1; });
}
inline unsigned atomicDec(unsigned* a, unsigned lim) {
    return ls_harness::atomic_update(a, [lim](unsigned o) { return (o == 0 || o > lim) ? lim : o - 1; });
}
inline unsigned short atomicCAS(unsigned short* a, unsigned short cmp, unsigned short v) {
    __atomic_compare_exchange_n(a, &cmp, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    return cmp;
}
inline float atomicAdd(float* a, float v) { return ls_harness::atomic_update(a, [v](float o) { return o + v; }); }
inline double atomicAdd(double* a, double v) { return ls_harness::atomic_update(a, [v](double o) { return o + v; }); }
inline float atomicExch(float* a, float v) { return ls_harness::atomic_update(a, [v](float) { return v; }); }
inline __nv_bfloat16 atomicAdd(__nv_bfloat16* a, __nv_bfloat16 v) {
    return ls_harness::atomic_update(a, [v](__nv_bfloat16 o) {
        return __float2bfloat16(__bfloat162float(o) + __bfloat162float(v));
    });
}
inline __nv_bfloat162 atomicAdd(__nv_bfloat162* a, __nv_bfloat162 v) {
    return ls_harness::atomic_update(a, [v](__nv_bfloat162 o) {
        return __floats2bfloat162_rn(__low2float(o) + __low2float(v), __high2float(o) + __high2float(v));
    });
}

// ----------------------------------------------------------------------------
// device API: loads/stores with cache hints, bit casts, integer intrinsics, fast math

#define LS_LOAD_HINT(name) template <typename T> inline T name(const T* p) { return *p; }
LS_LOAD_HINT(__ldg)
LS_LOAD_HINT(__ldcs)
LS_LOAD_HINT(__ldcg)
LS_LOAD_HINT(__ldca)
LS_LOAD_HINT(__ldlu)
LS_LOAD_HINT(__ldcv)
#undef LS_LOAD_HINT
#define LS_STORE_HINT(name) template <typename T> inline void name(T* p, T v) { *p = v; }
LS_STORE_HINT(__stcs)
LS_STORE_HINT(__stcg)
LS_STORE_HINT(__stwb)
LS_STORE_HINT(__stwt)
#undef LS_STORE_HINT

inline unsigned __float_as_uint(float x) { unsigned u; memcpy(&u, &x, 4); return u; }
inline float __uint_as_float(unsigned u) { float x; memcpy(&x, &u, 4); return x; }
inline int __float_as_int(float x) { int u; memcpy(&u, &x, 4); return u; }
inline float __int_as_float(int u) { float x; memcpy(&x, &u, 4); return x; }
inline long long __double_as_longlong(double x) { long long u; memcpy(&u, &x, 8); return u; }
inline double __longlong_as_double(long long u) { double x; memcpy(&x, &u, 8); return x; }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) {
    x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
    x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
    x = ((x >> 4) & 0x0F0F0F0Fu) | ((x & 0x0F0F0F0Fu) << 4);
    x = ((x >> 8) & 0x00FF00FFu) | ((x & 0x00FF00FFu) << 8);
    return (x >> 16) | (x << 16);
}
inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((uint64_t)a * b) >> 32); }
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
    return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}

// glibc declares some of these without exporting them: define all of them here (C linkage).
extern "C" {
inline float __expf(float x) noexcept { return expf(x); }
inline float __logf(float x) noexcept { return logf(x); }
inline float __sinf(float x) noexcept { return sinf(x); }
inline float __cosf(float x) noexcept { return cosf(x); }
inline float __powf(float x, float y) noexcept { return powf(x, y); }
inline float __tanhf(float x) noexcept { return tanhf(x); }
}
inline float __exp10f(float x) { return powf(10.0f, x); }
inline float __log2f(float x) { return log2f(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __saturatef(float x) { return x > 1.0f ? 1.0f : (x > 0.0f ? x : 0.0f); }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float __frsqrt_rn(float x) { return 1.0f / sqrtf(x); }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline double __fma_rn(double a, double b, double c) { return fma(a, b, c); }
inline int __float2int_rn(float x) { return (int)nearbyintf(x); }
inline int __float2int_rz(float x) { return (int)x; }
inline unsigned __float2uint_rn(float x) { return (unsigned)nearbyintf(x); }
inline float __int2float_rn(int x) { return (float)x; }
inline float __uint2float_rn(unsigned x) { return (float)x; }
// CUDA's device min/max overloads (the host compiler has none in the global namespace)
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long min(long a, long b) { return a < b ? a : b; }
inline long max(long a, long b) { return a > b ? a : b; }
inline unsigned long min(unsigned long a, unsigned long b) { return a < b ? a : b; }
inline unsigned long max(unsigned long a, unsigned long b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }

// Dynamic shared memory of the running block: DYNAMIC_SHARED(T, name), the host build's form of
// llmc/cuda/cuda_compat.h's `extern __shared__` declaration.
inline void* ls_dynamic_smem() { return ls_harness::device_worker("DYNAMIC_SHARED").smem; }
#define DYNAMIC_SHARED(T, name) T* name = reinterpret_cast<T*>(ls_dynamic_smem())

// ----------------------------------------------------------------------------
// runtime API shims (exact prototypes of cuda_runtime_api.h, C linkage)

namespace ls_harness {
struct Allocs {
    std::mutex mu;
    std::map<uintptr_t, size_t> live;   // base -> bytes
    std::map<uintptr_t, size_t> pinned; // cudaMallocHost: base -> bytes
    size_t total = 0;
};
inline Allocs& allocs() {
    static Allocs* a = new Allocs();
    return *a;
}
constexpr size_t kDeviceMemBytes = (size_t)80 << 30; // what cudaMemGetInfo/properties report

// Is [p, p+n) inside one cudaMalloc allocation?
inline bool is_device_range(const void* p, size_t n) {
    Allocs& a = allocs();
    std::lock_guard<std::mutex> lk(a.mu);
    auto it = a.live.upper_bound((uintptr_t)p);
    if (it == a.live.begin()) return false;
    --it;
    return (uintptr_t)p >= it->first && (uintptr_t)p + n <= it->first + (it->second ? it->second : 1);
}
inline cudaError_t check_copy(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
    if (n == 0) return cudaSuccess;
    bool ok = true;
    switch (kind) {
        case cudaMemcpyHostToDevice: ok = is_device_range(dst, n); break;
        case cudaMemcpyDeviceToHost: ok = is_device_range(src, n); break;
        case cudaMemcpyDeviceToDevice: ok = is_device_range(dst, n) && is_device_range(src, n); break;
        case cudaMemcpyHostToHost: case cudaMemcpyDefault: break;
        default: return set_error(cudaErrorInvalidMemcpyDirection);
    }
    return ok ? cudaSuccess : set_error(cudaErrorInvalidValue);
}
// LEANSTEP_HARNESS_DEVICES=0 plays a machine without a GPU, as the runtime reports it (the test of
// the trainer's "no CUDA GPU" message); default 1.
inline int device_count() { return (int)env_long("LEANSTEP_HARNESS_DEVICES", 1, 0, 1); }
// The compute capability the harness reports, major * 10 + minor (LEANSTEP_HARNESS_SM, default 90:
// an H100/H200); tests set an older one to reach the trainers' "this GPU is too old" messages.
inline int sm_version() { return (int)env_long("LEANSTEP_HARNESS_SM", 90, 30, 129); }
inline void sync_all(); // every queued operation of every stream (cuda_harness_streams.h)
} // namespace ls_harness

extern "C" {

inline cudaError_t cudaGetLastError(void) {
    return (cudaError_t)ls_harness::last_error().exchange(0);
}
inline cudaError_t cudaPeekAtLastError(void) { return (cudaError_t)ls_harness::last_error().load(); }

inline const char* cudaGetErrorName(cudaError_t e) {
    switch (e) {
        case cudaSuccess: return "cudaSuccess";
        case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
        case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
        case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
        case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
        case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
        case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
        case cudaErrorInvalidDeviceFunction: return "cudaErrorInvalidDeviceFunction";
        case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
        case cudaErrorNotSupported: return "cudaErrorNotSupported";
        case cudaErrorNoDevice: return "cudaErrorNoDevice";
        case cudaErrorNotReady: return "cudaErrorNotReady";
        default: return "cudaErrorUnknown";
    }
}
inline const char* cudaGetErrorString(cudaError_t e) {
    switch (e) {
        case cudaSuccess: return "no error";
        case cudaErrorInvalidValue: return "invalid argument";
        case cudaErrorMemoryAllocation: return "out of memory";
        case cudaErrorInvalidConfiguration: return "invalid configuration argument";
        case cudaErrorInvalidDevice: return "invalid device ordinal";
        case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
        case cudaErrorInvalidResourceHandle: return "invalid resource handle";
        case cudaErrorInvalidDeviceFunction: return "invalid device function";
        case cudaErrorLaunchFailure: return "unspecified launch failure";
        case cudaErrorNotSupported: return "operation not supported";
        case cudaErrorNoDevice: return "no CUDA-capable device is detected";
        case cudaErrorNotReady: return "device not ready";
        default: return "unknown error";
    }
}

inline cudaError_t cudaMalloc(void** devPtr, size_t size) {
    if (devPtr == nullptr) return ls_harness::set_error(cudaErrorInvalidValue);
    void* p = nullptr;
    // exact size (ASan redzone right after the last byte), 256-byte aligned like the GPU
    if (posix_memalign(&p, 256, size > 0 ? size : 1) != 0) {
        *devPtr = nullptr;
        return ls_harness::set_error(cudaErrorMemoryAllocation);
    }
    ls_harness::Allocs& a = ls_harness::allocs();
    std::lock_guard<std::mutex> lk(a.mu);
    a.live[(uintptr_t)p] = size;
    a.total += size;
    *devPtr = p;
    return cudaSuccess;
}
// Frees after all queued work has run (cudaFree synchronizes the device; queued work may use it).
inline cudaError_t cudaFree(void* devPtr) {
    if (devPtr == nullptr) return cudaSuccess;
    ls_harness::Allocs& a = ls_harness::allocs();
    {
        std::lock_guard<std::mutex> lk(a.mu);
        if (a.live.find((uintptr_t)devPtr) == a.live.end()) return ls_harness::set_error(cudaErrorInvalidValue);
    }
    ls_harness::sync_all();
    {
        std::lock_guard<std::mutex> lk(a.mu);
        auto it = a.live.find((uintptr_t)devPtr);
        a.total -= it->second;
        a.live.erase(it);
    }
    free(devPtr);
    return cudaSuccess;
}
// Pinned host memory: recorded, because async copies read and write it when they run, not when issued.
inline cudaError_t cudaMallocHost(void** ptr, size_t size) {
    if (ptr == nullptr) return ls_harness::set_error(cudaErrorInvalidValue);
    *ptr = malloc(size > 0 ? size : 1);
    if (*ptr == nullptr) return ls_harness::set_error(cudaErrorMemoryAllocation);
    ls_harness::Allocs& a = ls_harness::allocs();
    std::lock_guard<std::mutex> lk(a.mu);
    a.pinned[(uintptr_t)*ptr] = size;
    return cudaSuccess;
}
inline cudaError_t cudaHostAlloc(void** pHost, size_t size, unsigned int) { return cudaMallocHost(pHost, size); }
inline cudaError_t cudaFreeHost(void* ptr) {
    if (ptr == nullptr) return cudaSuccess;
    ls_harness::Allocs& a = ls_harness::allocs();
    {
        std::lock_guard<std::mutex> lk(a.mu);
        if (a.pinned.find((uintptr_t)ptr) == a.pinned.end()) return ls_harness::set_error(cudaErrorInvalidValue);
    }
    ls_harness::sync_all();
    {
        std::lock_guard<std::mutex> lk(a.mu);
        a.pinned.erase((uintptr_t)ptr);
    }
    free(ptr);
    return cudaSuccess;
}

inline cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
    ls_harness::Allocs& a = ls_harness::allocs();
    std::lock_guard<std::mutex> lk(a.mu);
    *total = ls_harness::kDeviceMemBytes;
    *free_bytes = a.total < *total ? *total - a.total : 0;
    return cudaSuccess;
}

inline cudaError_t cudaDeviceReset(void) { ls_harness::sync_all(); return cudaSuccess; }
inline cudaError_t cudaSetDevice(int device) {
    if (ls_harness::device_count() == 0) return ls_harness::set_error(cudaErrorNoDevice);
    return device == 0 ? cudaSuccess : ls_harness::set_error(cudaErrorInvalidDevice);
}
inline cudaError_t cudaGetDevice(int* device) { *device = 0; return cudaSuccess; }
inline cudaError_t cudaGetDeviceCount(int* count) {
    *count = ls_harness::device_count();
    return *count > 0 ? cudaSuccess : ls_harness::set_error(cudaErrorNoDevice);
}

inline cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp* p, int device) {
    if (device != 0) return ls_harness::set_error(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "leanstep CPU harness (as sm_%d)", ls_harness::sm_version());
    p->totalGlobalMem = ls_harness::kDeviceMemBytes;
    p->sharedMemPerBlock = ls_harness::kDefaultDynSmem;
    p->regsPerBlock = 65536;
    p->warpSize = 32;
    p->maxThreadsPerBlock = 1024;
    p->maxThreadsDim[0] = 1024; p->maxThreadsDim[1] = 1024; p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 0x7fffffff; p->maxGridSize[1] = 65535; p->maxGridSize[2] = 65535;
    p->totalConstMem = 65536;
    p->major = ls_harness::sm_version() / 10;
    p->minor = ls_harness::sm_version() % 10;
    p->multiProcessorCount = 132;
    p->concurrentKernels = 1;
    p->unifiedAddressing = 1;
    p->memoryBusWidth = 5120;
    p->l2CacheSize = 50 << 20;
    p->maxThreadsPerMultiProcessor = 2048;
    p->sharedMemPerMultiprocessor = 228 * 1024;
    p->regsPerMultiprocessor = 65536;
    p->sharedMemPerBlockOptin = ls_harness::kMaxDynSmemOptin;
    p->maxBlocksPerMultiProcessor = 32;
    p->reservedSharedMemPerBlock = 1024;
    return cudaSuccess;
}
inline cudaError_t cudaDeviceGetAttribute(int* value, enum cudaDeviceAttr attr, int device) {
    if (device != 0) return ls_harness::set_error(cudaErrorInvalidDevice);
    switch (attr) {
        case cudaDevAttrMaxThreadsPerBlock: *value = 1024; break;
        case cudaDevAttrMaxSharedMemoryPerBlock: *value = (int)ls_harness::kDefaultDynSmem; break;
        case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = (int)ls_harness::kMaxDynSmemOptin; break;
        case cudaDevAttrWarpSize: *value = 32; break;
        case cudaDevAttrMultiProcessorCount: *value = 132; break;
        case cudaDevAttrClockRate: *value = 1980000; break;
        case cudaDevAttrMemoryClockRate: *value = 2619000; break;
        case cudaDevAttrGlobalMemoryBusWidth: *value = 5120; break;
        case cudaDevAttrL2CacheSize: *value = 50 << 20; break;
        case cudaDevAttrComputeCapabilityMajor: *value = ls_harness::sm_version() / 10; break;
        case cudaDevAttrComputeCapabilityMinor: *value = ls_harness::sm_version() % 10; break;
        default: return ls_harness::set_error(cudaErrorInvalidValue);
    }
    return cudaSuccess;
}

inline cudaError_t cudaFuncSetAttribute(const void* func, enum cudaFuncAttribute attr, int value) {
    if (func == nullptr) return ls_harness::set_error(cudaErrorInvalidDeviceFunction);
    if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
        if (value < 0 || (size_t)value > ls_harness::kMaxDynSmemOptin) return ls_harness::set_error(cudaErrorInvalidValue);
        std::lock_guard<std::mutex> lk(ls_harness::attr_mu());
        ls_harness::dyn_smem_limits()[func] = (size_t)value;
        return cudaSuccess;
    }
    if (attr == cudaFuncAttributePreferredSharedMemoryCarveout) {
        return (value >= -1 && value <= 100) ? cudaSuccess : ls_harness::set_error(cudaErrorInvalidValue);
    }
    return cudaSuccess; // other attributes only tune performance
}

inline cudaError_t cudaFuncGetName(const char** name, const void* func) {
    static std::mutex mu;
    static std::map<const void*, std::string> names;
    std::lock_guard<std::mutex> lk(mu);
    auto it = names.find(func);
    if (it == names.end()) it = names.emplace(func, ls_harness::symbolize(func)).first;
    *name = it->second.c_str();
    return cudaSuccess;
}

} // extern "C"

// The typed overloads cuda_runtime.h declares only under nvcc.
template <typename T>
inline cudaError_t cudaFuncSetAttribute(T* entry, enum cudaFuncAttribute attr, int value) {
    return cudaFuncSetAttribute((const void*)entry, attr, value);
}
template <typename T>
inline cudaError_t cudaFuncGetName(const char** name, T* func) {
    return cudaFuncGetName(name, (const void*)func);
}

// ----------------------------------------------------------------------------
// element conversions of the library stand-ins (cuda_harness_cublaslt.h, cuda_harness_cudnn.h):
// exact widening to fp32, and rounding to nearest even, as the product's to_float / from_float
// (llmc/cuda/cuda_precision.h) for every floatX

namespace ls_harness {
inline float elem_to_float(float x) { return x; }
inline float elem_to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
inline float elem_to_float(__half x) { return __half2float(x); }
template <typename T> inline T elem_from_float(float x);
template <> inline float elem_from_float<float>(float x) { return x; }
template <> inline __nv_bfloat16 elem_from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <> inline __half elem_from_float<__half>(float x) { return __float2half_rn(x); }
} // namespace ls_harness

#endif // LLMC_CUDA_HARNESS_API_H

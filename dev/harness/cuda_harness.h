/*
 cuda_harness.h: the CPU build of llmc/cuda/cuda_compat.h. Runs unmodified CUDA kernels on the CPU
 so that CI (no GPU) executes every kernel against its CPU reference. Test machinery, not part of
 the product: the harness builds put dev/harness/ first on the include path, so the product's
 #include <cuda_runtime.h> finds this folder's cuda_runtime.h, which includes the toolkit's header
 and then this file. Product code includes "llmc/cuda/cuda_common.h" (or cuda_compat.h), never this.

 Model of execution
   - Each CUDA thread is a Boost.Context fiber (boost::context::fiber) on a persistent, guarded
     stack. Blocks run one after another on the calling OS thread (deterministic), or on
     LEANSTEP_HARNESS_WORKERS persistent worker threads.
   - Launches, async copies, memsets, event records and waits are queued per stream and run later,
     in a seeded random interleaving of the streams that respects only what CUDA guarantees (stream
     order, events, the legacy default stream, synchronizations): see cuda_harness_streams.h.
   - A fiber runs until it reaches a barrier or a warp operation, or exits. The scheduler walks the
     block's threads in the selected order (LEANSTEP_HARNESS_ORDER=forward|reverse|strided|random,
     LEANSTEP_HARNESS_SEED for random) and resumes every runnable one; a full pass without a
     runnable thread is a deadlock, reported with kernel, block, threads and source lines.
   - __syncthreads counts exited threads as arrived (as on Volta and later). Threads that meet at
     barriers on different source lines are reported as a barrier in divergent code.
   - Warp operations (__shfl*_sync, votes, __syncwarp, __reduce*_sync) complete when every lane
     named in the mask has arrived at the same operation with the same mask. A caller outside its
     own mask, a mask naming an exited or non-existent lane, a mismatch of masks or operations, or
     a bad width is reported. Reading a lane outside the mask yields all-ones bits (NaN / -1).
   - Static __shared__ variables become thread_local (one copy per worker: blocks of one worker
     run one at a time). Dynamic shared memory (DYNAMIC_SHARED) is an exact-size heap buffer per
     launch and worker, filled with 0xFF (NaN) before each block, so ASan catches overflows and
     uninitialized reads show as NaN.
   - Runtime calls are host shims: cudaMalloc is malloc of the exact size (ASan sees kernel
     out-of-bounds accesses at their source line), copies are memcpy after checking that the
     device side lies inside an allocation, events read the host clock when they run.
   - Launch errors (block > 1024 threads, bad grid, dynamic shared memory over the kernel's limit:
     48 KB, or up to 227 KB after cudaFuncSetAttribute) surface through cudaGetLastError like on a
     GPU. Device-side faults (deadlock, bad mask, fiber stack overflow) print a report and exit 1.

 Not emulated (compile error or report): inline PTX, tensor cores, cp.async/TMA, clusters,
 cooperative groups (the header is empty under g++), dynamic parallelism, textures, __noinline__,
 `extern __shared__` arrays (use DYNAMIC_SHARED), inter-block spin waits (blocks do not overlap).
 Numerics: nvcc and g++ (C++, FMA hardware) both contract a*b+c into FMAs, not necessarily the
 same ones, and __expf is approximate on the GPU: compare with tolerances, or write fmaf()
 explicitly where bit-equality between the builds matters.

 Files: this one holds the execution model (fibers, scheduler, barriers, warp operations, launch);
 cuda_harness_api.h, included at its end, the rest of the API (atomics, intrinsics, math, runtime
 calls); cuda_harness_streams.h, streams, events, copies and the launch primitive;
 cuda_harness_cudnn.h, included last, the cuDNN attention library's entry points. The libraries
 the product includes by name are stand-ins in this folder too: cublasLt.h (cuBLASLt's calls,
 cuda_harness_cublaslt.h) and nccl.h (NCCL over MPI, cuda_harness_nccl.h).
 To add a synchronizing operation, extend Worker here; stream work goes there (stream_task); anything
 else goes in cuda_harness_api.h.
*/
#ifndef LLMC_CUDA_HARNESS_H
#define LLMC_CUDA_HARNESS_H

#if defined(__CUDACC__)
#error "cuda_harness.h is the CPU build; nvcc uses the real CUDA runtime (include cuda_compat.h)"
#endif
#define LS_HARNESS 1 // for tests and labs (smaller shapes, harness-only checks); llmc/ never reads it

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <signal.h>
#include <dlfcn.h>
#include <elf.h>
#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <boost/context/fiber.hpp>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define LS_HARNESS_ASAN 1
#else
#define LS_HARNESS_ASAN 0
#endif

// The CUDA headers define these away under a host compiler; give them harness meanings.
#undef __shared__
#define __shared__ thread_local
#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif

// ----------------------------------------------------------------------------
// built-in variables: set by the scheduler before it resumes a thread

inline thread_local uint3 threadIdx;
inline thread_local uint3 blockIdx;
inline thread_local uint3 blockDim;
inline thread_local uint3 gridDim;
constexpr int warpSize = 32;

namespace ls_harness {

constexpr unsigned kMaxThreads = 1024;
constexpr unsigned kMaxWarps = kMaxThreads / 32;
constexpr size_t kDefaultDynSmem = 48 * 1024;   // without cudaFuncSetAttribute
constexpr size_t kMaxDynSmemOptin = 227 * 1024; // sharedMemPerBlockOptin of sm_90

// ----------------------------------------------------------------------------
// configuration (environment, overridable by tests)

enum class Order { forward, reverse, strided, random };

struct Config {
    Order order = Order::forward;
    uint64_t seed = 1;
    int workers = 1;
    size_t stack_bytes = 0;
    bool streams_sync = false; // LEANSTEP_HARNESS_STREAMS=sync: run stream work when issued
    uint64_t stream_seed = 1;  // the interleaving of streams (cuda_harness_streams.h)
    long stream_queue = 1024;  // queued operations before the harness runs some on its own
};

[[noreturn]] inline void die(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
inline void die(const char* fmt, ...) {
    fflush(stdout);
    va_list ap;
    va_start(ap, fmt);
    fputs("leanstep: error: harness: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    fflush(stderr);
    _exit(1); // no atexit/leak scan: suspended fibers still hold pointers
}

inline const char* order_name(Order o) {
    switch (o) {
        case Order::forward: return "forward";
        case Order::reverse: return "reverse";
        case Order::strided: return "strided";
        case Order::random: return "random";
    }
    return "?";
}

inline Order parse_order(const char* s) {
    if (strcmp(s, "forward") == 0) return Order::forward;
    if (strcmp(s, "reverse") == 0) return Order::reverse;
    if (strcmp(s, "strided") == 0) return Order::strided;
    if (strcmp(s, "random") == 0) return Order::random;
    die("LEANSTEP_HARNESS_ORDER='%s': expected forward, reverse, strided or random", s);
}

inline long env_long(const char* name, long def, long lo, long hi) {
    const char* s = getenv(name);
    if (s == nullptr || *s == '\0') return def;
    char* end = nullptr;
    long v = strtol(s, &end, 10);
    if (*end != '\0' || v < lo || v > hi) die("%s='%s': expected an integer in [%ld, %ld]", name, s, lo, hi);
    return v;
}

inline Config& config() {
    static Config c = [] {
        Config k;
        const char* o = getenv("LEANSTEP_HARNESS_ORDER");
        if (o != nullptr && *o != '\0') k.order = parse_order(o);
        k.seed = (uint64_t)env_long("LEANSTEP_HARNESS_SEED", 1, 0, 0x7fffffffL);
        k.workers = (int)env_long("LEANSTEP_HARNESS_WORKERS", 1, 1, 256);
        long kb = env_long("LEANSTEP_HARNESS_STACK_KB", LS_HARNESS_ASAN ? 256 : 64, 16, 65536);
        k.stack_bytes = (size_t)kb * 1024;
        const char* sm = getenv("LEANSTEP_HARNESS_STREAMS");
        if (sm != nullptr && *sm != '\0') {
            if (strcmp(sm, "sync") == 0) k.streams_sync = true;
            else if (strcmp(sm, "deferred") != 0) die("LEANSTEP_HARNESS_STREAMS='%s': expected deferred or sync", sm);
        }
        k.stream_seed = (uint64_t)env_long("LEANSTEP_HARNESS_STREAM_SEED", 1, 0, 0x7fffffffL);
        k.stream_queue = env_long("LEANSTEP_HARNESS_STREAM_QUEUE", 1024, 1, 1L << 24);
        return k;
    }();
    return c;
}

// For tests that compare orders inside one process.
inline void set_order(Order o) { config().order = o; }

// ----------------------------------------------------------------------------
// names of kernels and call sites (only on error paths: runs addr2line)

// addr's function and source line. A call site's address (in_launch) lies in the code of launch()
// (llmc/cuda/cuda_compat.h), always inlined into its caller: the inlining chain (addr2line -i)
// then names that caller and the line of its launch() call.
inline std::string symbolize(const void* addr, bool in_launch = false) {
    char fallback[64];
    snprintf(fallback, sizeof fallback, "%p", addr);
    Dl_info di;
    if (addr == nullptr || dladdr(addr, &di) == 0 || di.dli_fname == nullptr || di.dli_fbase == nullptr)
        return fallback;
    const Elf64_Ehdr* eh = (const Elf64_Ehdr*)di.dli_fbase;
    uintptr_t a = (uintptr_t)addr;
    if (eh->e_type == ET_DYN) a -= (uintptr_t)di.dli_fbase; // PIE or shared object: file offsets
    char cmd[1200], exe[800];
    const char* file = di.dli_fname;
    if (file[0] != '/') { // the main program, named as started: ask the kernel for its path
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (n <= 0) return fallback;
        exe[n] = '\0';
        file = exe;
    }
    snprintf(cmd, sizeof cmd, "addr2line -i -f -C -e '%s' 0x%lx 2>/dev/null", file, (unsigned long)a);
    FILE* p = popen(cmd, "r");
    if (p == nullptr) return fallback;
    std::vector<std::string> lines; // function, location, function, location, ... innermost first
    char line[800];
    while (fgets(line, sizeof line, p) != nullptr) {
        line[strcspn(line, "\n")] = '\0';
        lines.emplace_back(line);
    }
    pclose(p);
    size_t f = 0;
    while (in_launch && f + 3 < lines.size() && lines[f + 1].find("llmc/cuda/cuda_compat.h:") != std::string::npos) f += 2;
    if (f >= lines.size() || lines[f].empty() || lines[f] == "??") return fallback;
    std::string s = lines[f];
    if (f + 1 < lines.size() && !lines[f + 1].empty() && lines[f + 1].compare(0, 2, "??") != 0) s += " [" + lines[f + 1] + "]";
    return s;
}

// ----------------------------------------------------------------------------
// last-error state of the runtime (process-wide, like the primary context)

inline std::atomic<int>& last_error() {
    static std::atomic<int> e{0};
    return e;
}
inline cudaError_t set_error(cudaError_t e) {
    if (e != cudaSuccess) last_error().store((int)e);
    return e;
}

// ----------------------------------------------------------------------------
// fiber stacks: persistent, guard page below each, reused LIFO (hot in cache)

struct GuardRanges {
    std::mutex mu;
    std::vector<std::pair<uintptr_t, uintptr_t>> r; // [lo, hi) of guard pages
};
inline GuardRanges& guards() {
    static GuardRanges g;
    return g;
}

// Which kernel thread is running on this OS thread (for crash reports); defined after Worker.
inline void print_fault_context();

inline void segv_handler(int sig, siginfo_t* si, void*) {
    uintptr_t a = (uintptr_t)si->si_addr;
    bool in_guard = false;
    for (auto& g : guards().r) {
        if (a >= g.first && a < g.second) in_guard = true;
    }
    const char* msg = in_guard
        ? "leanstep: error: harness: fiber stack overflow in a kernel thread (hit the guard page); "
          "use fewer/smaller local arrays or raise LEANSTEP_HARNESS_STACK_KB\n"
        : "leanstep: error: harness: segmentation fault (in a kernel or host code)\n";
    ssize_t w = write(2, msg, strlen(msg));
    (void)w;
    print_fault_context();
    signal(sig, SIG_DFL);
    raise(sig);
}

inline void install_segv_handler_once() {
#if !LS_HARNESS_ASAN
    static bool done = [] {
        static char altstack[64 * 1024];
        stack_t ss;
        memset(&ss, 0, sizeof ss);
        ss.ss_sp = altstack;
        ss.ss_size = sizeof altstack;
        sigaltstack(&ss, nullptr);
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = segv_handler;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
        sigaction(SIGSEGV, &sa, nullptr);
        return true;
    }();
    (void)done;
#endif
}

struct StackPool {
    size_t bytes = 0;           // usable bytes per stack
    std::vector<void*> free_;   // usable base addresses
    void* get() {
        if (!free_.empty()) {
            void* p = free_.back();
            free_.pop_back();
            return p;
        }
        size_t page = (size_t)sysconf(_SC_PAGESIZE);
        void* m = mmap(nullptr, bytes + page, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED) die("mmap of a %zu-byte fiber stack failed", bytes + page);
        if (mprotect(m, page, PROT_NONE) != 0) die("mprotect of a fiber stack guard page failed");
        {
            std::lock_guard<std::mutex> lk(guards().mu);
            guards().r.push_back({(uintptr_t)m, (uintptr_t)m + page});
        }
        return (char*)m + page;
    }
    void put(void* p) { free_.push_back(p); }
};

// Boost.Context stack allocator handing out one pool stack; deallocate returns it to the pool.
struct PoolStack {
    StackPool* pool;
    void* base;
    boost::context::stack_context allocate() {
        boost::context::stack_context sc;
        sc.size = pool->bytes;
        sc.sp = (char*)base + pool->bytes;
        return sc;
    }
    void deallocate(boost::context::stack_context& sc) { pool->put((char*)sc.sp - sc.size); }
};

// ----------------------------------------------------------------------------
// one launch, type-erased

struct Launch {
    const void* kernel = nullptr;      // for names in reports
    const void* site = nullptr;        // return address inside the launching code
    void (*invoke)(const void*) = nullptr;
    const void* bound = nullptr;       // kernel pointer + argument tuple
    dim3 grid, block;
    size_t smem = 0;
    unsigned nthreads = 0;
    uint64_t nblocks = 0;
};

enum State : uint8_t { S_NEW, S_READY, S_BARRIER, S_WARP, S_DONE };

enum OpKind : uint8_t {
    OP_SHFL_IDX, OP_SHFL_UP, OP_SHFL_DOWN, OP_SHFL_XOR,
    OP_ALL, OP_ANY, OP_BALLOT, OP_SYNCWARP,
    OP_RED_ADD, OP_RED_MIN_U, OP_RED_MAX_U, OP_RED_MIN_S, OP_RED_MAX_S,
    OP_RED_AND, OP_RED_OR, OP_RED_XOR,
};

inline const char* op_name(OpKind k) {
    static const char* const names[] = {
        "__shfl_sync", "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync",
        "__all_sync", "__any_sync", "__ballot_sync", "__syncwarp",
        "__reduce_add_sync", "__reduce_min_sync", "__reduce_max_sync", "__reduce_min_sync",
        "__reduce_max_sync", "__reduce_and_sync", "__reduce_or_sync", "__reduce_xor_sync",
    };
    return names[k];
}

enum BarKind : uint8_t { BAR_SYNC, BAR_COUNT, BAR_AND, BAR_OR };
inline const char* bar_name(BarKind k) {
    static const char* const names[] = {"__syncthreads", "__syncthreads_count", "__syncthreads_and",
                                        "__syncthreads_or"};
    return names[k];
}

struct Thread {
    boost::context::fiber fib;
    uint3 idx;
    unsigned linear = 0, lane = 0, warp = 0;
    State state = S_NEW;
    uint8_t kind = 0;            // BarKind or OpKind of the wait
    const char* file = nullptr;  // where it waits
    int line = 0;
    int op = -1;                 // warp op slot while in S_WARP
    int b = 0, c = 0;            // shuffle operand and clamp word
    uint64_t val = 0, out = 0;   // warp/barrier operand and result
    void* stack = nullptr;       // usable base of its fiber stack (ASan annotations)
    void* asan_fake = nullptr;
};

struct WarpOp {
    unsigned mask = 0, arrived = 0;
    OpKind kind = OP_SYNCWARP;
    const char* file = nullptr;
    int line = 0;
};

struct Warp {
    WarpOp ops[32];
    int nops = 0;
    unsigned exited = 0; // lanes that have returned from the kernel
};

// ----------------------------------------------------------------------------
// a worker: runs whole blocks, one at a time, on one OS thread

struct Worker {
    std::vector<Thread> threads;
    Warp warps[kMaxWarps];
    StackPool stacks;
    boost::context::fiber sched;   // the scheduler's continuation while a fiber runs
    Thread* cur = nullptr;
    const Launch* launch = nullptr;
    unsigned char* smem = nullptr;
    size_t smem_cap = 0;
    unsigned nthreads = 0, live = 0, at_barrier = 0;
    std::vector<unsigned> order;
    void* sched_fake = nullptr;
    const void* sched_bottom = nullptr;
    size_t sched_size = 0;

    Worker() : threads(kMaxThreads) { stacks.bytes = config().stack_bytes; }

    // ---- reports ----
    std::string where() const {
        char buf[256];
        snprintf(buf, sizeof buf, "block (%u,%u,%u) of grid (%u,%u,%u), blockDim (%u,%u,%u)",
                 blockIdx.x, blockIdx.y, blockIdx.z, launch->grid.x, launch->grid.y, launch->grid.z,
                 launch->block.x, launch->block.y, launch->block.z);
        return buf;
    }
    std::string thread_str(const Thread& t) const {
        char buf[128];
        snprintf(buf, sizeof buf, "thread (%u,%u,%u) [warp %u lane %u]", t.idx.x, t.idx.y, t.idx.z,
                 t.warp, t.lane);
        return buf;
    }
    [[noreturn]] void fault(const std::string& what) const {
        std::string k = symbolize(launch->kernel);
        std::string s = symbolize(launch->site, true);
        die("%s\n  kernel: %s\n  launched from: %s\n  %s (order %s)", what.c_str(), k.c_str(), s.c_str(),
            where().c_str(), order_name(config().order));
    }
    // One line per run of consecutive threads with the same wait.
    std::string wait_table() const {
        std::string s;
        unsigned i = 0, lines = 0;
        while (i < nthreads) {
            const Thread& a = threads[i];
            unsigned j = i + 1;
            while (j < nthreads) {
                const Thread& b = threads[j];
                if (b.state != a.state || b.kind != a.kind || b.line != a.line || b.file != a.file) break;
                j++;
            }
            if (lines++ < 16) {
                char buf[512];
                const char* what = a.state == S_DONE ? "exited"
                                 : a.state == S_BARRIER ? bar_name((BarKind)a.kind)
                                 : a.state == S_WARP ? op_name((OpKind)a.kind)
                                 : "runnable";
                if (a.state == S_BARRIER || a.state == S_WARP) {
                    char mask[32] = "";
                    if (a.state == S_WARP) {
                        snprintf(mask, sizeof mask, "(mask 0x%08x)",
                                 warps[a.warp].ops[a.op].mask);
                    }
                    snprintf(buf, sizeof buf, "    threads %u..%u: waiting in %s%s at %s:%d\n", i, j - 1,
                             what, mask, a.file, a.line);
                } else {
                    snprintf(buf, sizeof buf, "    threads %u..%u: %s\n", i, j - 1, what);
                }
                s += buf;
            }
            i = j;
        }
        return s;
    }

    // ---- switching ----
    void resume(Thread& t) {
        cur = &t;
        threadIdx = t.idx;
#if LS_HARNESS_ASAN
        __sanitizer_start_switch_fiber(&sched_fake, t.stack, stacks.bytes);
#endif
        t.fib = std::move(t.fib).resume();
#if LS_HARNESS_ASAN
        __sanitizer_finish_switch_fiber(sched_fake, nullptr, nullptr);
#endif
        cur = nullptr;
    }

    // Called on a fiber: hand control back to the scheduler until this thread is released.
    void yield(Thread& t) {
        (void)t;
#if LS_HARNESS_ASAN
        __sanitizer_start_switch_fiber(&t.asan_fake, sched_bottom, sched_size);
#endif
        sched = std::move(sched).resume();
#if LS_HARNESS_ASAN
        __sanitizer_finish_switch_fiber(t.asan_fake, &sched_bottom, &sched_size);
#endif
    }

    void start(Thread& t) {
        void* base = stacks.get();
        t.stack = base;
        Thread* tp = &t;
        t.fib = boost::context::fiber(std::allocator_arg, PoolStack{&stacks, base},
                                      [this, tp](boost::context::fiber&& s) {
#if LS_HARNESS_ASAN
            __sanitizer_finish_switch_fiber(nullptr, &sched_bottom, &sched_size);
#endif
            sched = std::move(s);
            launch->invoke(launch->bound);
            tp->state = S_DONE;
#if LS_HARNESS_ASAN
            __sanitizer_start_switch_fiber(nullptr, sched_bottom, sched_size);
#endif
            return std::move(sched);
        });
        t.state = S_READY;
    }

    // ---- barrier ----
    void release_barrier() {
        // every live thread waits at a barrier: they must be the same barrier
        Thread* first = nullptr;
        uint64_t count = 0;
        bool all = true, any = false;
        for (unsigned i = 0; i < nthreads; i++) {
            Thread& t = threads[i];
            if (t.state != S_BARRIER) continue;
            if (first == nullptr) first = &t;
            if (t.line != first->line || t.file != first->file || t.kind != first->kind) {
                fault("deadlock: __syncthreads in divergent code (threads of one block wait at different "
                      "barriers; a GPU would hang or mis-synchronize)\n" + wait_table());
            }
            count += (t.val != 0);
            all = all && t.val != 0;
            any = any || t.val != 0;
        }
        for (unsigned i = 0; i < nthreads; i++) {
            Thread& t = threads[i];
            if (t.state != S_BARRIER) continue;
            switch ((BarKind)t.kind) {
                case BAR_SYNC: t.out = 0; break;
                case BAR_COUNT: t.out = count; break;
                case BAR_AND: t.out = all; break;
                case BAR_OR: t.out = any; break;
            }
            t.state = S_READY;
        }
        at_barrier = 0;
    }

    uint64_t barrier(BarKind kind, int pred, const char* file, int line) {
        Thread& t = *cur;
        t.state = S_BARRIER;
        t.kind = kind;
        t.file = file;
        t.line = line;
        t.val = (pred != 0);
        at_barrier++;
        if (at_barrier == live) {
            release_barrier(); // the last arrival releases everyone and continues
        } else {
            yield(t);
        }
        return t.out;
    }

    // ---- warp operations ----
    unsigned lanes_present(unsigned warp) const {
        unsigned first = warp * 32;
        unsigned n = nthreads - first < 32 ? nthreads - first : 32;
        return n == 32 ? 0xffffffffu : ((1u << n) - 1u);
    }

    void complete(Warp& w, int slot) {
        WarpOp& op = w.ops[slot];
        Thread* lanes = &threads[(size_t)(cur->warp) * 32];
        unsigned mask = op.mask;
        uint64_t red = 0;
        switch (op.kind) {
            case OP_ALL: red = 1; break;
            case OP_RED_MIN_U: red = 0xffffffffu; break;
            case OP_RED_MIN_S: red = (uint64_t)(uint32_t)INT32_MAX; break;
            case OP_RED_MAX_S: red = (uint64_t)(uint32_t)INT32_MIN; break;
            case OP_RED_AND: red = 0xffffffffu; break;
            default: red = 0; break;
        }
        for (unsigned l = 0; l < 32; l++) {
            if (!(mask >> l & 1u)) continue;
            uint64_t v = lanes[l].val;
            uint32_t u = (uint32_t)v;
            switch (op.kind) {
                case OP_ALL: red = red && v != 0; break;
                case OP_ANY: red = red || v != 0; break;
                case OP_BALLOT: red |= (uint64_t)(v != 0) << l; break;
                case OP_RED_ADD: red = (uint32_t)(red + u); break;
                case OP_RED_MIN_U: red = u < (uint32_t)red ? u : red; break;
                case OP_RED_MAX_U: red = u > (uint32_t)red ? u : red; break;
                case OP_RED_MIN_S: red = (int32_t)u < (int32_t)(uint32_t)red ? u : red; break;
                case OP_RED_MAX_S: red = (int32_t)u > (int32_t)(uint32_t)red ? u : red; break;
                case OP_RED_AND: red &= u; break;
                case OP_RED_OR: red |= u; break;
                case OP_RED_XOR: red ^= u; break;
                default: break;
            }
        }
        for (unsigned l = 0; l < 32; l++) {
            if (!(mask >> l & 1u)) continue;
            Thread& t = lanes[l];
            if (op.kind <= OP_SHFL_XOR) {
                // PTX shfl.sync semantics: c = ((32 - width) << 8) | clamp
                int segmask = (t.c >> 8) & 0x1f, cval = t.c & 0x1f, bval = t.b & 0x1f;
                int lane = (int)l;
                int maxl = (lane & segmask) | (cval & ~segmask), minl = lane & segmask;
                int j = lane;
                bool ok = false;
                switch (op.kind) {
                    case OP_SHFL_UP: j = lane - bval; ok = j >= maxl; break;
                    case OP_SHFL_DOWN: j = lane + bval; ok = j <= maxl; break;
                    case OP_SHFL_XOR: j = lane ^ bval; ok = j <= maxl; break;
                    default: j = minl | (bval & ~segmask); ok = j <= maxl; break;
                }
                if (!ok) j = lane;
                t.out = (mask >> j & 1u) ? lanes[j].val : ~(uint64_t)0; // outside the mask: undefined
            } else {
                t.out = red;
            }
            t.state = S_READY;
        }
        // free the slot
        w.ops[slot] = w.ops[w.nops - 1];
        w.nops--;
        for (unsigned l = 0; l < 32; l++) {
            if (lanes[l].state == S_WARP && lanes[l].op == w.nops) lanes[l].op = slot;
        }
    }

    uint64_t warp_op(OpKind kind, unsigned mask, uint64_t val, int b, int c, const char* file, int line) {
        Thread& t = *cur;
        unsigned bit = 1u << t.lane;
        char buf[320];
        if (!(mask & bit)) {
            snprintf(buf, sizeof buf, "bad warp mask: %s(mask 0x%08x) at %s:%d by %s: the calling lane "
                     "must be in the mask", op_name(kind), mask, file, line, thread_str(t).c_str());
            fault(buf);
        }
        unsigned present = lanes_present(t.warp);
        if (mask & ~present) {
            snprintf(buf, sizeof buf, "bad warp mask: %s(mask 0x%08x) at %s:%d by %s names lanes 0x%08x "
                     "that do not exist (block of %u threads)", op_name(kind), mask, file, line,
                     thread_str(t).c_str(), mask & ~present, nthreads);
            fault(buf);
        }
        Warp& w = warps[t.warp];
        if (mask & w.exited) {
            snprintf(buf, sizeof buf, "bad warp mask: %s(mask 0x%08x) at %s:%d by %s names lanes 0x%08x, "
                     "which have exited", op_name(kind), mask, file, line, thread_str(t).c_str(),
                     mask & w.exited);
            fault(buf);
        }
        // Lanes meet in the pending operation of the same kind and mask (as shfl.sync/vote.sync
        // match on qualifiers and member mask, not on the call site); else this lane opens one.
        int slot = -1;
        for (int i = 0; i < w.nops; i++) {
            if (w.ops[i].mask == mask && w.ops[i].kind == kind) { slot = i; break; }
        }
        if (slot < 0) {
            slot = w.nops++;
            w.ops[slot] = WarpOp{mask, 0, kind, file, line};
        }
        WarpOp& op = w.ops[slot];
        t.state = S_WARP;
        t.kind = kind;
        t.file = file;
        t.line = line;
        t.op = slot;
        t.val = val;
        t.b = b;
        t.c = c;
        op.arrived |= bit;
        if (op.arrived == op.mask) {
            complete(w, slot);
        } else {
            yield(t);
        }
        return t.out;
    }

    // ---- one block ----
    void build_order(uint64_t block_linear) {
        order.resize(nthreads);
        Order o = config().order;
        for (unsigned i = 0; i < nthreads; i++) order[i] = i;
        if (o == Order::reverse) {
            for (unsigned i = 0; i < nthreads; i++) order[i] = nthreads - 1 - i;
        } else if (o == Order::strided) {
            // lane-major: lane 0 of every warp, then lane 1 of every warp, ...
            unsigned k = 0, nw = (nthreads + 31) / 32;
            for (unsigned l = 0; l < 32; l++)
                for (unsigned wi = 0; wi < nw; wi++)
                    if (wi * 32 + l < nthreads) order[k++] = wi * 32 + l;
        } else if (o == Order::random) {
            uint64_t s = config().seed * 0x9E3779B97F4A7C15ull + block_linear + 1;
            for (unsigned i = nthreads - 1; i > 0; i--) {
                s ^= s >> 33; s *= 0xff51afd7ed558ccdull; s ^= s >> 29;
                unsigned j = (unsigned)(s % (i + 1));
                std::swap(order[i], order[j]);
            }
        }
    }

    void run_block(uint64_t bl) {
        const Launch& L = *launch;
        blockIdx.x = (unsigned)(bl % L.grid.x);
        blockIdx.y = (unsigned)((bl / L.grid.x) % L.grid.y);
        blockIdx.z = (unsigned)(bl / ((uint64_t)L.grid.x * L.grid.y));
        if (L.smem > 0) memset(smem, 0xFF, L.smem); // poison: reads as NaN
        nthreads = L.nthreads;
        live = nthreads;
        at_barrier = 0;
        for (unsigned w = 0; w < (nthreads + 31) / 32; w++) {
            warps[w].nops = 0;
            warps[w].exited = 0;
        }
        for (unsigned i = 0; i < nthreads; i++) {
            Thread& t = threads[i];
            t.idx.x = i % L.block.x;
            t.idx.y = (i / L.block.x) % L.block.y;
            t.idx.z = i / (L.block.x * L.block.y);
            t.linear = i;
            t.lane = i % 32;
            t.warp = i / 32;
            t.state = S_NEW;
            t.file = nullptr;
            t.line = 0;
            t.kind = 0;
        }
        build_order(bl);
        while (live > 0) {
            bool progress = false;
            for (unsigned k = 0; k < nthreads; k++) {
                Thread& t = threads[order[k]];
                if (t.state == S_NEW) start(t);
                if (t.state != S_READY) continue;
                progress = true;
                resume(t);
                if (t.state == S_DONE) on_exit(t);
            }
            if (!progress) deadlock();
        }
    }

    [[noreturn]] void deadlock() {
        // Two pending operations of one warp whose masks overlap can never complete: lanes named in
        // a mask must all execute the same operation with the same mask.
        for (unsigned wi = 0; wi < (nthreads + 31) / 32; wi++) {
            const Warp& w = warps[wi];
            for (int i = 0; i < w.nops; i++) {
                for (int j = i + 1; j < w.nops; j++) {
                    const WarpOp &a = w.ops[i], &b = w.ops[j];
                    if (!(a.mask & b.mask)) continue;
                    char buf[400];
                    snprintf(buf, sizeof buf, "bad warp mask (deadlock): in warp %u, %s(mask 0x%08x) at %s:%d "
                             "and %s(mask 0x%08x) at %s:%d wait for each other's lanes (lanes named in a "
                             "mask must execute the same operation with the same mask)\n", wi,
                             op_name(a.kind), a.mask, a.file, a.line, op_name(b.kind), b.mask, b.file, b.line);
                    fault(buf + wait_table());
                }
            }
        }
        fault("deadlock: no thread of the block can make progress (a barrier or warp operation that "
              "some threads never reach)\n" + wait_table());
    }

    void on_exit(Thread& t) {
        live--;
        Warp& w = warps[t.warp];
        w.exited |= 1u << t.lane;
        for (int i = 0; i < w.nops; i++) {
            if (w.ops[i].mask >> t.lane & 1u) {
                char buf[320];
                snprintf(buf, sizeof buf, "bad warp mask: %s exited while lanes wait in %s(mask 0x%08x) at "
                         "%s:%d, which names it", thread_str(t).c_str(), op_name(w.ops[i].kind),
                         w.ops[i].mask, w.ops[i].file, w.ops[i].line);
                fault(buf);
            }
        }
        if (at_barrier > 0 && at_barrier == live) release_barrier();
    }

    void run_launch(const Launch& L, std::atomic<uint64_t>& next) {
        launch = &L;
        blockDim = uint3{L.block.x, L.block.y, L.block.z};
        gridDim = uint3{L.grid.x, L.grid.y, L.grid.z};
        if (L.smem > smem_cap || smem == nullptr) {
            free(smem);
            smem = (unsigned char*)malloc(L.smem > 0 ? L.smem : 1);
            if (smem == nullptr) die("out of host memory for %zu bytes of dynamic shared memory", L.smem);
            smem_cap = L.smem;
        }
#if LS_HARNESS_ASAN
        // exact size each launch, so ASan catches dynamic shared memory overflows
        free(smem);
        smem = (unsigned char*)malloc(L.smem > 0 ? L.smem : 1);
        smem_cap = L.smem;
#endif
        for (;;) {
            uint64_t b = next.fetch_add(1);
            if (b >= L.nblocks) break;
            run_block(b);
        }
        launch = nullptr;
    }
};

inline thread_local Worker* tl_worker = nullptr;

inline void print_fault_context() {
    Worker* w = tl_worker;
    if (w == nullptr || w->cur == nullptr || w->launch == nullptr) return;
    char buf[400];
    int n = snprintf(buf, sizeof buf, "leanstep: harness: the fault happened in kernel %p, %s, %s\n",
                     w->launch->kernel, w->where().c_str(), w->thread_str(*w->cur).c_str());
    ssize_t k = write(2, buf, n > 0 ? (size_t)n : 0);
    (void)k;
}

inline Worker& this_worker() {
    if (tl_worker == nullptr) {
#if LS_HARNESS_ASAN
        static bool cb = (__sanitizer_set_death_callback(print_fault_context), true);
        (void)cb;
#endif
        install_segv_handler_once();
        tl_worker = new Worker(); // persistent: lives as long as the OS thread (stacks are reused)
    }
    return *tl_worker;
}

inline Worker& device_worker(const char* what) {
    Worker* w = tl_worker;
    if (w == nullptr || w->cur == nullptr) die("%s called outside a kernel", what);
    return *w;
}

// ----------------------------------------------------------------------------
// worker pool (only when LEANSTEP_HARNESS_WORKERS > 1)

struct Pool {
    std::mutex mu;
    std::condition_variable cv, done_cv;
    std::vector<std::thread> threads;
    const Launch* launch = nullptr;
    std::atomic<uint64_t>* next = nullptr;
    uint64_t generation = 0;
    int busy = 0;

    void ensure(int n) {
        while ((int)threads.size() < n) {
            threads.emplace_back([this] { loop(); });
            threads.back().detach();
        }
    }
    void loop() {
        uint64_t seen = 0;
        for (;;) {
            const Launch* L;
            std::atomic<uint64_t>* nx;
            {
                std::unique_lock<std::mutex> lk(mu);
                cv.wait(lk, [&] { return generation != seen; });
                seen = generation;
                L = launch;
                nx = next;
            }
            this_worker().run_launch(*L, *nx);
            {
                std::lock_guard<std::mutex> lk(mu);
                if (--busy == 0) done_cv.notify_all();
            }
        }
    }
    void run(const Launch& L, std::atomic<uint64_t>& nx, int helpers) {
        ensure(helpers);
        {
            std::lock_guard<std::mutex> lk(mu);
            launch = &L;
            next = &nx;
            busy = (int)threads.size();
            generation++;
        }
        cv.notify_all();
        this_worker().run_launch(L, nx);
        std::unique_lock<std::mutex> lk(mu);
        done_cv.wait(lk, [&] { return busy == 0; });
    }
};

inline Pool& pool() {
    static Pool* p = new Pool(); // never destroyed: its threads are detached
    return *p;
}

// ----------------------------------------------------------------------------
// launch

inline std::mutex& attr_mu() {
    static std::mutex m;
    return m;
}
inline std::map<const void*, size_t>& dyn_smem_limits() {
    static std::map<const void*, size_t> m;
    return m;
}

// The checks a GPU makes when a kernel is launched (errors through cudaGetLastError).
inline cudaError_t check_launch(Launch& L) {
    const dim3 g = L.grid, b = L.block;
    if (b.x == 0 || b.y == 0 || b.z == 0 || b.x > 1024 || b.y > 1024 || b.z > 64 ||
        (uint64_t)b.x * b.y * b.z > kMaxThreads || g.x == 0 || g.y == 0 || g.z == 0 ||
        g.x > 0x7fffffffu || g.y > 65535 || g.z > 65535) {
        return set_error(cudaErrorInvalidConfiguration);
    }
    size_t limit = kDefaultDynSmem;
    {
        std::lock_guard<std::mutex> lk(attr_mu());
        auto it = dyn_smem_limits().find(L.kernel);
        if (it != dyn_smem_limits().end()) limit = it->second;
    }
    if (L.smem > limit) return set_error(cudaErrorInvalidValue);
    if (tl_worker != nullptr && tl_worker->cur != nullptr) {
        die("kernel launch from inside a kernel (dynamic parallelism) is not supported");
    }
    L.nthreads = b.x * b.y * b.z;
    L.nblocks = (uint64_t)g.x * g.y * g.z;
    return cudaSuccess;
}

// Runs a checked launch to completion (when its stream's turn comes).
inline void execute_launch(const Launch& L) {
    std::atomic<uint64_t> next{0};
    int nw = config().workers;
    if (nw > 1 && L.nblocks > 1) {
        pool().run(L, next, nw - 1);
    } else {
        this_worker().run_launch(L, next);
    }
}

template <typename... KP>
struct Bound {
    void (*kernel)(KP...);
    std::tuple<std::decay_t<KP>...> args;
    static void invoke(const void* self) {
        const Bound* b = (const Bound*)self;
        std::apply(b->kernel, b->args);
    }
};

} // namespace ls_harness

// ----------------------------------------------------------------------------
// device API: synchronization

#define LS_SITE const char *ls_file_ = __builtin_FILE(), int ls_line_ = __builtin_LINE()

inline void __syncthreads(LS_SITE) {
    ls_harness::device_worker("__syncthreads").barrier(ls_harness::BAR_SYNC, 1, ls_file_, ls_line_);
}
inline int __syncthreads_count(int pred, LS_SITE) {
    return (int)ls_harness::device_worker("__syncthreads_count")
        .barrier(ls_harness::BAR_COUNT, pred, ls_file_, ls_line_);
}
inline int __syncthreads_and(int pred, LS_SITE) {
    return (int)ls_harness::device_worker("__syncthreads_and")
        .barrier(ls_harness::BAR_AND, pred, ls_file_, ls_line_);
}
inline int __syncthreads_or(int pred, LS_SITE) {
    return (int)ls_harness::device_worker("__syncthreads_or")
        .barrier(ls_harness::BAR_OR, pred, ls_file_, ls_line_);
}
inline void __syncwarp(unsigned mask = 0xffffffffu, LS_SITE) {
    ls_harness::device_worker("__syncwarp").warp_op(ls_harness::OP_SYNCWARP, mask, 0, 0, 0, ls_file_, ls_line_);
}
// Lanes of the calling warp that have not exited (the harness does not model divergence).
inline unsigned __activemask() {
    ls_harness::Worker& w = ls_harness::device_worker("__activemask");
    unsigned m = 0, base = w.cur->warp * 32;
    for (unsigned l = 0; l < 32 && base + l < w.nthreads; l++)
        if (w.threads[base + l].state != ls_harness::S_DONE) m |= 1u << l;
    return m;
}
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __nanosleep(unsigned) {}
[[noreturn]] inline void __trap() { ls_harness::die("__trap() called in a kernel"); }
inline long long clock64() {
    return (long long)std::chrono::steady_clock::now().time_since_epoch().count();
}

// ----------------------------------------------------------------------------
// device API: warp shuffles, votes, reductions

namespace ls_harness {
template <typename T>
inline uint64_t to_bits(T v) {
    static_assert(sizeof(T) <= 8, "warp shuffles move at most 8 bytes");
    uint64_t u = 0;
    memcpy(&u, (const void*)&v, sizeof(T));
    return u;
}
template <typename T>
inline T from_bits(uint64_t u) {
    T v;
    memcpy((void*)&v, &u, sizeof(T));
    return v;
}
inline int shfl_clamp(int width, const char* name, const char* file, int line) {
    if (width < 1 || width > 32 || (width & (width - 1)) != 0) {
        Worker& w = device_worker(name);
        char buf[200];
        snprintf(buf, sizeof buf, "%s at %s:%d by %s: width %d is not a power of two in [1, 32]", name,
                 file, line, w.thread_str(*w.cur).c_str(), width);
        w.fault(buf);
    }
    return (32 - width) << 8;
}
template <typename T>
inline T shfl(OpKind k, unsigned mask, T var, int b, int width, int clamp, const char* file, int line) {
    int c = shfl_clamp(width, op_name(k), file, line) | clamp;
    return from_bits<T>(device_worker(op_name(k)).warp_op(k, mask, to_bits(var), b, c, file, line));
}
} // namespace ls_harness

template <typename T>
inline T __shfl_sync(unsigned mask, T var, int srcLane, int width = warpSize, LS_SITE) {
    return ls_harness::shfl(ls_harness::OP_SHFL_IDX, mask, var, srcLane, width, 0x1f, ls_file_, ls_line_);
}
template <typename T>
inline T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize, LS_SITE) {
    return ls_harness::shfl(ls_harness::OP_SHFL_UP, mask, var, (int)delta, width, 0, ls_file_, ls_line_);
}
template <typename T>
inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize, LS_SITE) {
    return ls_harness::shfl(ls_harness::OP_SHFL_DOWN, mask, var, (int)delta, width, 0x1f, ls_file_, ls_line_);
}
template <typename T>
inline T __shfl_xor_sync(unsigned mask, T var, int laneMask, int width = warpSize, LS_SITE) {
    return ls_harness::shfl(ls_harness::OP_SHFL_XOR, mask, var, laneMask, width, 0x1f, ls_file_, ls_line_);
}
inline int __all_sync(unsigned mask, int pred, LS_SITE) {
    return (int)ls_harness::device_worker("__all_sync").warp_op(ls_harness::OP_ALL, mask, pred != 0, 0, 0, ls_file_, ls_line_);
}
inline int __any_sync(unsigned mask, int pred, LS_SITE) {
    return (int)ls_harness::device_worker("__any_sync").warp_op(ls_harness::OP_ANY, mask, pred != 0, 0, 0, ls_file_, ls_line_);
}
inline unsigned __ballot_sync(unsigned mask, int pred, LS_SITE) {
    return (unsigned)ls_harness::device_worker("__ballot_sync").warp_op(ls_harness::OP_BALLOT, mask, pred != 0, 0, 0, ls_file_, ls_line_);
}
#define LS_WARP_REDUCE(name, T, kind)                                                              \
    inline T name(unsigned mask, T value, LS_SITE) {                                               \
        return (T)(uint32_t)ls_harness::device_worker(#name).warp_op(ls_harness::kind, mask,        \
                                                               (uint32_t)value, 0, 0, ls_file_, ls_line_); \
    }
LS_WARP_REDUCE(__reduce_add_sync, unsigned, OP_RED_ADD)
LS_WARP_REDUCE(__reduce_add_sync, int, OP_RED_ADD)
LS_WARP_REDUCE(__reduce_min_sync, unsigned, OP_RED_MIN_U)
LS_WARP_REDUCE(__reduce_min_sync, int, OP_RED_MIN_S)
LS_WARP_REDUCE(__reduce_max_sync, unsigned, OP_RED_MAX_U)
LS_WARP_REDUCE(__reduce_max_sync, int, OP_RED_MAX_S)
LS_WARP_REDUCE(__reduce_and_sync, unsigned, OP_RED_AND)
LS_WARP_REDUCE(__reduce_or_sync, unsigned, OP_RED_OR)
LS_WARP_REDUCE(__reduce_xor_sync, unsigned, OP_RED_XOR)
#undef LS_WARP_REDUCE

#undef LS_SITE

// Branch counters (llmc/cuda/cuda_common.h's LS_BRANCH): one counter per marked site, registered
// the first time the site runs. At exit the process appends "file:line name hits" per site that
// ran to the file named by LEANSTEP_BRANCH_LOG (if set); dev/cuda/branch_coverage.py then requires
// every LS_BRANCH site in llmc/ to appear in the logs of the lab runs. A forked child (a lab's
// expected-failure run) does not write: its counts are its parent's until the fork.
#define LS_BRANCH_COUNTERS 1
namespace ls_harness {
struct BranchSite {
    const char* name;
    const char* file;
    int line;
    unsigned long long hits;
};
struct BranchLog {
    std::mutex mu;
    std::vector<BranchSite*> sites;
    pid_t owner = getpid();
    ~BranchLog() {
        const char* path = getenv("LEANSTEP_BRANCH_LOG");
        if (path != nullptr && path[0] != '\0' && getpid() == owner) {
            FILE* f = fopen(path, "a");
            if (f == nullptr) {
                fprintf(stderr, "harness: cannot append to LEANSTEP_BRANCH_LOG %s\n", path);
            } else {
                for (const BranchSite* s : sites) fprintf(f, "%s:%d %s %llu\n", s->file, s->line, s->name, s->hits);
                fclose(f);
            }
        }
        for (BranchSite* s : sites) delete s;
    }
};
inline BranchLog& branch_log() {
    static BranchLog log;
    return log;
}
} // namespace ls_harness
inline unsigned long long* ls_branch_counter(const char* name, const char* file, int line) {
    ls_harness::BranchLog& log = ls_harness::branch_log();
    std::lock_guard<std::mutex> lock(log.mu);
    log.sites.push_back(new ls_harness::BranchSite{name, file, line, 0});
    return &log.sites.back()->hits;
}

// Atomics, intrinsics, math and the runtime API shims; then streams, copies and the launch primitive;
// then the cuDNN attention library's entry points, on the CPU.
#include "dev/harness/cuda_harness_api.h"
#include "dev/harness/cuda_harness_streams.h"
#include "dev/harness/cuda_harness_cudnn.h"

#endif // LLMC_CUDA_HARNESS_H

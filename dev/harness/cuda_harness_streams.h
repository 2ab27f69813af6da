/*
 cuda_harness_streams.h: streams, events and copies of the CPU harness, and the order in which
 device work runs. Included by cuda_harness.h only (after cuda_harness_api.h).

 The GPU runs the work of different streams concurrently, in any order that respects what CUDA
 guarantees; a program that forgets a cudaStreamWaitEvent or a synchronization usually still works
 on one GPU, by luck of timing. So the harness does not run work when it is issued: every kernel
 launch, async copy and memset, event record, event wait, host task (the CPU cuBLASLt stand-in,
 cudaLaunchHostFunc) and NCCL call (cuda_harness_nccl.h) goes into its stream's queue, and queued
 work runs later, in an order constrained only by
   - stream order (a stream's operations run one after another, in issue order);
   - events: cudaStreamWaitEvent(s, e) makes s's later work wait for e's latest cudaEventRecord;
   - the legacy default stream (stream 0, cudaStreamLegacy): its work waits for all earlier work
     of the blocking streams (cudaStreamCreate), and their later work waits for it; streams made
     with cudaStreamNonBlocking do neither;
   - NCCL calls on one communicator run in issue order (NCCL serializes them; the MPI shim would
     otherwise deadlock between processes).
 Queued work runs only when something forces it: cudaStreamSynchronize, cudaEventSynchronize,
 cudaDeviceSynchronize, cudaStreamQuery/cudaEventQuery, a synchronous cudaMemcpy to the host (it is
 legacy-stream work, so it waits for the blocking streams), cudaFree/cudaFreeHost (the harness must
 not free memory that queued work uses), or a full queue (LEANSTEP_HARNESS_STREAM_QUEUE operations).
 Then the scheduler repeatedly picks, with a seeded random generator (LEANSTEP_HARNESS_STREAM_SEED),
 one stream whose next operation may run, and runs it, until what was asked for is complete: work
 of other streams may run early, late, or not yet. A missing wait shows as a wrong result (the
 consumer ran before the producer, or a writer before a reader); a missing synchronization before
 the host reads pinned memory written by an async copy shows as a stale value, since the copy has
 not run yet. NCCL calls (which block on the other processes) run only when needed for the target.

 Copies: async host->device copies from pageable memory read the source when issued (the driver
 stages pageable memory before returning); from pinned memory (cudaMallocHost) when they run, so
 the host must not change it before then: the harness hashes the source at both times and stops,
 naming the copy, when they differ. Async device->host copies write when they run, pinned or
 pageable (CUDA only promises the data after a synchronization). Synchronous cudaMemcpy is
 legacy-stream work and returns when it is done, except device->device (async to the host, as in
 CUDA); cudaMemset is legacy-stream work that does not wait.

 Environment:
   LEANSTEP_HARNESS_STREAMS=deferred|sync   deferred (default): the model above. sync: every
                                            operation runs when issued, in issue order (the old
                                            harness; for timing single launches or bisecting).
   LEANSTEP_HARNESS_STREAM_SEED=N           the interleaving (default 1); any N is a legal order.
   LEANSTEP_HARNESS_STREAM_QUEUE=N          queued operations before the harness runs some on its
                                            own (default 1024, at least 1).
 The thread order inside a block (LEANSTEP_HARNESS_ORDER, _SEED) is independent of these.

 Not modelled: stream priorities, graphs/capture, managed memory, cudaHostRegister, peer copies.
 Errors of a launch or a copy (bad configuration, a range outside any allocation) are reported when
 issued, as on a GPU; a fault inside a kernel is reported when it runs, naming the kernel and the
 place that launched it.
*/
#ifndef LLMC_CUDA_HARNESS_STREAMS_H
#define LLMC_CUDA_HARNESS_STREAMS_H

#ifndef LLMC_CUDA_HARNESS_H
#error "include llmc/cuda/cuda_compat.h (or cuda_harness.h), not cuda_harness_streams.h"
#endif

#include <deque>
#include <functional>
#include <memory>

struct CUstream_st;

namespace ls_harness {

// Done once stream s has completed its operation number seq (numbered from 1).
struct Dep {
    CUstream_st* s = nullptr;
    uint64_t seq = 0;
};

struct StreamOp {
    uint64_t seq = 0;
    const char* what = "";     // for reports
    bool peer = false;         // waits for other processes (NCCL): run only when needed
    size_t bytes = 0;          // staged host bytes it holds
    std::vector<Dep> deps;     // besides stream order
    std::function<void()> fn;
};

} // namespace ls_harness

struct CUstream_st {
    std::deque<ls_harness::StreamOp> q; // issued, not yet run
    uint64_t issued = 0, done = 0;      // operations issued / completed (in order)
    uint64_t need = 0;                  // scheduler scratch: completed operations a wait needs
    bool blocking = true;               // synchronizes with the legacy default stream
    bool legacy = false;                // the legacy default stream itself
    bool destroyed = false;
    int id = 0;                         // for reports: 0 legacy, 1 per-thread, 2... created
};

struct CUevent_st {
    CUstream_st* s = nullptr; // latest record: complete when s->done >= seq
    uint64_t seq = 0;
    uint64_t gen = 0;         // records so far (a late-running older record does not set t)
    bool recorded = false, timing = true, destroyed = false;
    int pending = 0;          // queued records (the event is freed after the last one)
    std::chrono::steady_clock::time_point t;
};

namespace ls_harness {

struct Streams {
    std::recursive_mutex mu;
    CUstream_st legacy, per_thread;
    std::vector<CUstream_st*> live;    // streams the scheduler looks at
    std::vector<CUstream_st*> retired; // destroyed and drained: kept, since Deps may name them
    size_t queued = 0, queued_bytes = 0;
    uint64_t rng = 0;
    int next_id = 2;
    bool running = false;              // an operation runs (CUDA calls from there are errors)
    std::vector<CUstream_st*> cand;    // scratch
    Streams() {
        legacy.legacy = true;
        legacy.id = 0;
        per_thread.id = 1;
        live.push_back(&legacy);
        live.push_back(&per_thread);
        rng = config().stream_seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
    }
};
inline Streams& streams() {
    static Streams* s = new Streams(); // never destroyed: atexit code may still synchronize
    return *s;
}

// For tests that compare interleavings inside one process (call with no work queued).
inline void set_stream_seed(uint64_t seed) {
    Streams& S = streams();
    std::lock_guard<std::recursive_mutex> lk(S.mu);
    config().stream_seed = seed;
    S.rng = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
}

inline uint64_t stream_rand(Streams& S) { // splitmix64
    uint64_t z = (S.rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

inline CUstream_st* resolve_stream(cudaStream_t s) {
    if (s == nullptr || s == cudaStreamLegacy) return &streams().legacy;
    if (s == cudaStreamPerThread) return &streams().per_thread;
    return s;
}

inline bool dep_done(const Dep& d) { return d.s->done >= d.seq; }
inline bool op_ready(const StreamOp& op) {
    for (const Dep& d : op.deps)
        if (!dep_done(d)) return false;
    return true;
}

// The next operation of s, which must be ready.
inline void run_head(Streams& S, CUstream_st* s) {
    StreamOp op = std::move(s->q.front());
    s->q.pop_front();
    S.queued--;
    S.queued_bytes -= op.bytes;
    S.running = true;
    op.fn();
    S.running = false;
    s->done = op.seq;
    if (s->destroyed && s->q.empty()) { // retire it: the scheduler stops looking at it
        for (size_t i = 0; i < S.live.size(); i++) {
            if (S.live[i] == s) {
                S.live.erase(S.live.begin() + (long)i);
                S.retired.push_back(s);
                break;
            }
        }
    }
}

[[noreturn]] inline void stuck(Streams& S, const char* why) {
    std::string t;
    for (CUstream_st* s : S.live) {
        if (s->q.empty()) continue;
        char buf[200];
        const StreamOp& h = s->q.front();
        snprintf(buf, sizeof buf, "\n  stream %d: %zu queued, next: %s%s", s->id, s->q.size(), h.what,
                 op_ready(h) ? "" : " (waiting)");
        t += buf;
    }
    die("streams: %s%s", why, t.c_str());
}

// Runs queued operations in a random order allowed by the dependencies until every target is
// done. Only operations needed for the targets may block on other processes.
inline void run_until(const std::vector<Dep>& targets) {
    Streams& S = streams();
    std::lock_guard<std::recursive_mutex> lk(S.mu);
    if (S.running) die("a CUDA synchronization inside a stream operation (host task or NCCL call)");
    auto all_done = [&] {
        for (const Dep& d : targets)
            if (!dep_done(d)) return false;
        return true;
    };
    if (all_done()) return;
    // what the targets need, transitively through the waits of the needed operations
    for (CUstream_st* s : S.live) s->need = s->done;
    for (const Dep& d : targets) d.s->need = std::max(d.s->need, d.seq);
    for (bool changed = true; changed;) {
        changed = false;
        for (CUstream_st* s : S.live) {
            for (const StreamOp& op : s->q) {
                if (op.seq > s->need) break;
                for (const Dep& d : op.deps) {
                    if (d.s->need < d.seq) { d.s->need = d.seq; changed = true; }
                }
            }
        }
    }
    while (!all_done()) {
        S.cand.clear();
        for (CUstream_st* s : S.live) {
            if (s->q.empty()) continue;
            const StreamOp& h = s->q.front();
            if ((!h.peer || h.seq <= s->need) && op_ready(h)) S.cand.push_back(s);
        }
        if (S.cand.empty()) stuck(S, "no queued operation can run, but a synchronization waits for one (harness bug)");
        run_head(S, S.cand[stream_rand(S) % S.cand.size()]);
    }
}

// The queue is full: run random ready operations (none that waits for other processes) until it
// is half empty, or nothing more can run without them.
inline void relieve(Streams& S) {
    const size_t cap = (size_t)config().stream_queue;
    const size_t cap_bytes = (size_t)256 << 20;
    while (S.queued > cap / 2 || S.queued_bytes > cap_bytes / 2) {
        S.cand.clear();
        for (CUstream_st* s : S.live) {
            if (!s->q.empty() && !s->q.front().peer && op_ready(s->q.front())) S.cand.push_back(s);
        }
        if (S.cand.empty()) return;
        run_head(S, S.cand[stream_rand(S) % S.cand.size()]);
    }
}

// Issues fn as the next operation of `stream`; returns its Dep. `after`: one more operation it
// must wait for (nullptr: none). Under LEANSTEP_HARNESS_STREAMS=sync it runs at once.
inline Dep stream_task(cudaStream_t stream, const char* what, std::function<void()> fn, bool peer = false,
                       const Dep* after = nullptr, size_t bytes = 0) {
    Streams& S = streams();
    std::lock_guard<std::recursive_mutex> lk(S.mu);
    if (S.running) die("%s issued inside a stream operation (host task or NCCL call)", what);
    CUstream_st* s = resolve_stream(stream);
    if (s->destroyed) die("%s issued on a destroyed stream", what);
    StreamOp op;
    op.seq = ++s->issued;
    if (config().streams_sync) {
        S.running = true;
        fn();
        S.running = false;
        s->done = op.seq;
        return Dep{s, op.seq};
    }
    op.what = what;
    op.peer = peer;
    op.bytes = bytes;
    op.fn = std::move(fn);
    if (s->legacy) { // waits for the earlier work of every blocking stream
        for (CUstream_st* b : S.live) {
            if (b != s && b->blocking && b->done < b->issued) op.deps.push_back(Dep{b, b->issued});
        }
    } else if (s->blocking && S.legacy.done < S.legacy.issued) { // and they wait for it
        op.deps.push_back(Dep{&S.legacy, S.legacy.issued});
    }
    if (after != nullptr && after->s != nullptr && !dep_done(*after)) op.deps.push_back(*after);
    s->q.push_back(std::move(op));
    S.queued++;
    S.queued_bytes += bytes;
    if (S.queued > (size_t)config().stream_queue || S.queued_bytes > ((size_t)256 << 20)) relieve(S);
    return Dep{s, s->issued};
}

// Every operation issued so far on s is complete; for the legacy stream, also those of the blocking
// streams (it synchronizes with them).
inline void sync_stream(CUstream_st* s) {
    std::vector<Dep> t;
    {
        Streams& S = streams();
        std::lock_guard<std::recursive_mutex> lk(S.mu);
        t.push_back(Dep{s, s->issued});
        if (s->legacy) {
            for (CUstream_st* b : S.live)
                if (b->blocking && b != s) t.push_back(Dep{b, b->issued});
        }
    }
    run_until(t);
}

inline void sync_all() {
    std::vector<Dep> t;
    {
        Streams& S = streams();
        std::lock_guard<std::recursive_mutex> lk(S.mu);
        for (CUstream_st* b : S.live) t.push_back(Dep{b, b->issued});
    }
    run_until(t);
}

inline bool is_pinned_range(const void* p, size_t n) {
    Allocs& a = allocs();
    std::lock_guard<std::mutex> lk(a.mu);
    auto it = a.pinned.upper_bound((uintptr_t)p);
    if (it == a.pinned.begin()) return false;
    --it;
    return (uintptr_t)p >= it->first && (uintptr_t)p + n <= it->first + (it->second ? it->second : 1);
}

// cudaMemcpyDefault -> the direction the pointers say.
inline cudaMemcpyKind copy_direction(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
    if (kind != cudaMemcpyDefault) return kind;
    bool d = is_device_range(dst, n), s = is_device_range(src, n);
    return d ? (s ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
             : (s ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
}

// FNV-1a over 8-byte words (the tail bytewise): a pinned source's contents, cheaply.
inline uint64_t bytes_hash(const void* p, size_t n) {
    const unsigned char* b = (const unsigned char*)p;
    uint64_t h = 1469598103934665603ull;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, 8);
        h = (h ^ w) * 1099511628211ull;
    }
    for (; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

// A copy as stream work (the range checks were done). Pageable sources of host->device copies are
// staged now; everything else is read and written when the copy runs. A pinned source is hashed
// when issued and again when the copy runs: the host changing it in between races with the copy
// engine on a GPU (which may read it at any time until the host knows the copy done).
inline Dep issue_copy(void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t stream,
                      const char* what) {
    kind = copy_direction(dst, src, n, kind);
    if (kind == cudaMemcpyHostToDevice && !config().streams_sync) {
        if (!is_pinned_range(src, n)) {
            auto staged = std::make_shared<std::vector<unsigned char>>((const unsigned char*)src,
                                                                       (const unsigned char*)src + n);
            return stream_task(stream, what, [dst, staged, n] { memcpy(dst, staged->data(), n); }, false, nullptr, n);
        }
        const uint64_t issued = bytes_hash(src, n);
        return stream_task(stream, what, [dst, src, n, issued, what] {
            if (bytes_hash(src, n) != issued) {
                die("%s: the host changed its pinned source (%p, %zu bytes) after issuing the copy and before "
                    "it ran (a race with the copy engine on a GPU: wait for the copy first)", what, src, n);
            }
            memcpy(dst, src, n);
        });
    }
    return stream_task(stream, what, [dst, src, n] { memcpy(dst, src, n); });
}

} // namespace ls_harness

// ----------------------------------------------------------------------------
// the launch primitive (kernel<<<grid, block, smem, stream>>>(args...)); use launch() from
// cuda_compat.h, which also checks the error. Configuration errors surface at once (through
// cudaGetLastError); the kernel runs when its stream's turn comes.

template <typename... KP, typename... A>
__attribute__((noinline)) void ls_launch_raw(void (*kernel)(KP...), dim3 grid, dim3 block, size_t smem,
                                             cudaStream_t stream, A&&... args) {
    static_assert(sizeof...(KP) == sizeof...(A), "launch: wrong number of kernel arguments");
    using B = ls_harness::Bound<KP...>;
    auto bound = std::make_shared<B>(B{kernel, std::tuple<std::decay_t<KP>...>(std::forward<A>(args)...)});
    ls_harness::Launch L;
    L.kernel = (const void*)kernel;
    L.site = __builtin_return_address(0); // in the launching code: launch() is always inlined
    L.invoke = &B::invoke;
    L.bound = bound.get();
    L.grid = grid;
    L.block = block;
    L.smem = smem;
    if (ls_harness::check_launch(L) != cudaSuccess) return;
    ls_harness::stream_task(stream, "kernel", [L, bound] { ls_harness::execute_launch(L); });
}

// ----------------------------------------------------------------------------
// runtime API: copies, memsets, streams, events, synchronization (exact prototypes, C linkage)

extern "C" {

inline cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind,
                                   cudaStream_t stream) {
    cudaError_t e = ls_harness::check_copy(dst, src, count, kind);
    if (e != cudaSuccess || count == 0) return e;
    kind = ls_harness::copy_direction(dst, src, count, kind);
    ls_harness::Dep d = ls_harness::issue_copy(dst, src, count, kind, stream, "cudaMemcpyAsync");
    if (kind == cudaMemcpyHostToHost) ls_harness::run_until({d}); // fully synchronous in CUDA
    return cudaSuccess;
}

// Legacy-stream work; returns when done, except device->device (asynchronous to the host in CUDA).
inline cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind) {
    cudaError_t e = ls_harness::check_copy(dst, src, count, kind);
    if (e != cudaSuccess || count == 0) return e;
    kind = ls_harness::copy_direction(dst, src, count, kind);
    ls_harness::Dep d = ls_harness::issue_copy(dst, src, count, kind, nullptr, "cudaMemcpy");
    if (kind != cudaMemcpyDeviceToDevice) ls_harness::run_until({d});
    return cudaSuccess;
}

inline cudaError_t cudaMemsetAsync(void* devPtr, int value, size_t count, cudaStream_t stream) {
    if (count == 0) return cudaSuccess;
    if (!ls_harness::is_device_range(devPtr, count)) return ls_harness::set_error(cudaErrorInvalidValue);
    ls_harness::stream_task(stream, "cudaMemsetAsync", [devPtr, value, count] { memset(devPtr, value, count); });
    return cudaSuccess;
}

// Legacy-stream work, asynchronous to the host (device memory).
inline cudaError_t cudaMemset(void* devPtr, int value, size_t count) {
    if (count == 0) return cudaSuccess;
    if (!ls_harness::is_device_range(devPtr, count)) return ls_harness::set_error(cudaErrorInvalidValue);
    ls_harness::stream_task(nullptr, "cudaMemset", [devPtr, value, count] { memset(devPtr, value, count); });
    return cudaSuccess;
}

// __constant__ symbols are host globals here; the copies are legacy-stream work and return when done.
inline cudaError_t cudaMemcpyToSymbol(const void* symbol, const void* src, size_t count, size_t offset,
                                      enum cudaMemcpyKind) {
    void* dst = (char*)(uintptr_t)symbol + offset;
    ls_harness::run_until({ls_harness::stream_task(nullptr, "cudaMemcpyToSymbol", [dst, src, count] { memcpy(dst, src, count); })});
    return cudaSuccess;
}
inline cudaError_t cudaMemcpyFromSymbol(void* dst, const void* symbol, size_t count, size_t offset,
                                        enum cudaMemcpyKind) {
    const void* src = (const char*)symbol + offset;
    ls_harness::run_until({ls_harness::stream_task(nullptr, "cudaMemcpyFromSymbol", [dst, src, count] { memcpy(dst, src, count); })});
    return cudaSuccess;
}

inline cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* userData) {
    if (fn == nullptr) return ls_harness::set_error(cudaErrorInvalidValue);
    ls_harness::stream_task(stream, "cudaLaunchHostFunc", [fn, userData] { fn(userData); });
    return cudaSuccess;
}

inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int flags) {
    if (s == nullptr) return ls_harness::set_error(cudaErrorInvalidValue);
    ls_harness::Streams& S = ls_harness::streams();
    std::lock_guard<std::recursive_mutex> lk(S.mu);
    CUstream_st* st = new CUstream_st();
    st->blocking = (flags & cudaStreamNonBlocking) == 0;
    st->id = S.next_id++;
    S.live.push_back(st);
    *s = st;
    return cudaSuccess;
}
inline cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithFlags(s, cudaStreamDefault); }

// As in CUDA, queued work still runs; the stream is gone for new work.
inline cudaError_t cudaStreamDestroy(cudaStream_t s) {
    ls_harness::Streams& S = ls_harness::streams();
    std::lock_guard<std::recursive_mutex> lk(S.mu);
    CUstream_st* st = ls_harness::resolve_stream(s);
    if (st == &S.legacy || st == &S.per_thread || st->destroyed) return ls_harness::set_error(cudaErrorInvalidResourceHandle);
    st->destroyed = true;
    if (st->q.empty()) {
        for (size_t i = 0; i < S.live.size(); i++) {
            if (S.live[i] == st) {
                S.live.erase(S.live.begin() + (long)i);
                break;
            }
        }
        S.retired.push_back(st);
    }
    return cudaSuccess;
}

inline cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    ls_harness::sync_stream(ls_harness::resolve_stream(s));
    return cudaSuccess;
}
// Completing the work is always a legal answer: a query never spins.
inline cudaError_t cudaStreamQuery(cudaStream_t s) { return cudaStreamSynchronize(s); }

inline cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int) {
    if (e == nullptr) return ls_harness::set_error(cudaErrorInvalidResourceHandle);
    ls_harness::Streams& S = ls_harness::streams();
    std::lock_guard<std::recursive_mutex> lk(S.mu);
    if (!e->recorded) return cudaSuccess; // never recorded: nothing to wait for
    ls_harness::Dep d{e->s, e->seq};
    ls_harness::stream_task(s, "cudaStreamWaitEvent", [] {}, false, &d);
    return cudaSuccess;
}

inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int flags) {
    if (e == nullptr) return ls_harness::set_error(cudaErrorInvalidValue);
    *e = new CUevent_st();
    (*e)->timing = (flags & cudaEventDisableTiming) == 0;
    return cudaSuccess;
}
inline cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, cudaEventDefault); }

// As in CUDA, a pending record still completes; the event is freed after it.
inline cudaError_t cudaEventDestroy(cudaEvent_t e) {
    if (e == nullptr) return ls_harness::set_error(cudaErrorInvalidResourceHandle);
    ls_harness::Streams& S = ls_harness::streams();
    std::lock_guard<std::recursive_mutex> lk(S.mu);
    if (e->pending > 0) e->destroyed = true;
    else delete e;
    return cudaSuccess;
}

inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    if (e == nullptr || e->destroyed) return ls_harness::set_error(cudaErrorInvalidResourceHandle);
    ls_harness::Streams& S = ls_harness::streams();
    std::lock_guard<std::recursive_mutex> lk(S.mu);
    uint64_t gen = ++e->gen;
    e->pending++;
    e->recorded = true;
    ls_harness::Dep d = ls_harness::stream_task(s, "cudaEventRecord", [e, gen] {
        if (e->gen == gen) e->t = std::chrono::steady_clock::now();
        if (--e->pending == 0 && e->destroyed) delete e;
    });
    e->s = d.s;
    e->seq = d.seq;
    return cudaSuccess;
}

inline cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    if (e == nullptr) return ls_harness::set_error(cudaErrorInvalidResourceHandle);
    if (e->recorded) ls_harness::run_until({ls_harness::Dep{e->s, e->seq}});
    return cudaSuccess;
}
inline cudaError_t cudaEventQuery(cudaEvent_t e) { return cudaEventSynchronize(e); }

inline cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
    if (ms == nullptr) return ls_harness::set_error(cudaErrorInvalidValue);
    if (start == nullptr || end == nullptr || !start->recorded || !end->recorded || !start->timing || !end->timing)
        return ls_harness::set_error(cudaErrorInvalidResourceHandle);
    if (!ls_harness::dep_done({start->s, start->seq}) || !ls_harness::dep_done({end->s, end->seq}))
        return ls_harness::set_error(cudaErrorNotReady);
    *ms = std::chrono::duration<float, std::milli>(end->t - start->t).count();
    return cudaSuccess;
}

inline cudaError_t cudaDeviceSynchronize(void) {
    ls_harness::sync_all();
    return cudaSuccess;
}

} // extern "C"

#endif // LLMC_CUDA_HARNESS_STREAMS_H

/*
 profile.cuh: the GPU trainer's --profile: device time per kernel family over one training step,
 printed as a table (ms, % of the step, calls), as llm.c's profile_gpt2.cu does for a whole run.

 Each family's entry functions (encoder.cuh, matmul.cuh, ...) open a scope on their stream,
     PROFILE_SCOPE(PROF_MATMUL, stream);
 which records a CUDA event pair around the call while profiling is on, and costs a branch when
 it is off. Only the outermost scope is timed (a family that calls another, e.g. attention's
 matmuls, counts as itself). Scopes must open and close between profile_start and
 profile_finish (the training loop brackets one whole step). Families on another stream (the
 gradient all-reduce of -z 0) overlap the compute: their share can make the rows add up to more
 than 100%. "other" is the rest of the step's device time: memsets, copies, kernels outside the
 families, and idle gaps while the host works.

 Under the CPU harness the events are host-timed (launches run synchronously), so the table
 shows where the CPU time goes; the rows and calls are the same as on a GPU.
*/
#ifndef LLMC_PROFILE_CUH
#define LLMC_PROFILE_CUH

#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "llmc/cuda/cuda_common.h"

typedef enum {
    PROF_ENCODER, PROF_LAYERNORM, PROF_MATMUL, PROF_MATMUL_BACKWARD, PROF_ATTENTION, PROF_GELU, PROF_CLASSIFIER,
    PROF_GLOBAL_NORM, PROF_OPTIMIZER, PROF_COMM, PROF_COUNT
} ProfileFamily;

static const char* const profile_family_names[PROF_COUNT] = {
    "encoder", "layernorm", "matmul", "matmul backward", "attention", "gelu", "classifier", "global norm",
    "optimizer update", "communication"};

typedef struct {
    int family;
    cudaEvent_t start, stop;
} ProfileMark;

typedef struct {
    int on;               // recording (between profile_start and profile_finish)
    int depth;            // open scopes: only the outermost is timed
    ProfileMark* marks;   // the step's timed calls; their events are kept for reuse
    int n, cap;
    cudaEvent_t step_start, step_stop;
    double wall_start;
} Profiler;

static inline double profile_wall_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline Profiler& profiler(void) {
    static Profiler p;
    return p;
}

static inline void profile_begin(ProfileFamily family, cudaStream_t stream) {
    Profiler& p = profiler();
    if (p.depth++ > 0) return;
    if (p.n == p.cap) {
        int cap = p.cap ? 2 * p.cap : 256;
        p.marks = (ProfileMark*)realloc(p.marks, (size_t)cap * sizeof(ProfileMark));
        if (p.marks == NULL) ls_fatal("profile: out of host memory for %d marks", cap);
        for (int i = p.cap; i < cap; i++) {
            cudaCheck(cudaEventCreate(&p.marks[i].start));
            cudaCheck(cudaEventCreate(&p.marks[i].stop));
        }
        p.cap = cap;
    }
    p.marks[p.n].family = family;
    cudaCheck(cudaEventRecord(p.marks[p.n].start, stream));
}

static inline void profile_end(cudaStream_t stream) {
    Profiler& p = profiler();
    if (--p.depth > 0) return;
    cudaCheck(cudaEventRecord(p.marks[p.n].stop, stream));
    p.n++;
}

// Times one family call while profiling is on (it decides at construction, so a scope always closes
// what it opened).
struct ProfileScope {
    cudaStream_t stream;
    bool active;
    ProfileScope(ProfileFamily family, cudaStream_t s) : stream(s), active(profiler().on != 0) {
        if (active) profile_begin(family, stream);
    }
    ~ProfileScope() {
        if (active) profile_end(stream);
    }
    ProfileScope(const ProfileScope&) = delete;
    ProfileScope& operator=(const ProfileScope&) = delete;
};
#define PROFILE_CONCAT2(a, b) a##b
#define PROFILE_CONCAT(a, b) PROFILE_CONCAT2(a, b)
#define PROFILE_SCOPE(family, stream) ProfileScope PROFILE_CONCAT(profile_scope_, __LINE__)((family), (stream))

// Starts recording; the step's time is measured on `stream` (the compute stream).
static inline void profile_start(cudaStream_t stream) {
    Profiler& p = profiler();
    if (p.step_start == NULL) {
        cudaCheck(cudaEventCreate(&p.step_start));
        cudaCheck(cudaEventCreate(&p.step_stop));
    }
    p.n = 0;
    p.depth = 0;
    p.on = 1;
    p.wall_start = profile_wall_seconds();
    cudaCheck(cudaEventRecord(p.step_start, stream));
}

// Stops recording, waits for the device and prints the table to `out` under `title`.
static inline void profile_finish(cudaStream_t stream, FILE* out, const char* title) {
    Profiler& p = profiler();
    cudaCheck(cudaEventRecord(p.step_stop, stream));
    cudaCheck(cudaDeviceSynchronize());  // every stream: the communicator's too
    p.on = 0;
    if (p.depth != 0) ls_fatal("profile: %d scopes still open at the end of the step", p.depth);
    double wall_ms = 1000.0 * (profile_wall_seconds() - p.wall_start);
    float step_ms = 0.0f;
    cudaCheck(cudaEventElapsedTime(&step_ms, p.step_start, p.step_stop));
    double ms[PROF_COUNT] = {0};
    int calls[PROF_COUNT] = {0};
    for (int i = 0; i < p.n; i++) {
        float t = 0.0f;
        cudaCheck(cudaEventElapsedTime(&t, p.marks[i].start, p.marks[i].stop));
        ms[p.marks[i].family] += t;
        calls[p.marks[i].family]++;
    }
    double total = 0.0;
    fprintf(out, "profile: %s\n", title);
    fprintf(out, "  %-18s %10s %8s %7s\n", "family", "ms", "% step", "calls");
    for (int f = 0; f < PROF_COUNT; f++) {
        total += ms[f];
        fprintf(out, "  %-18s %10.3f %7.1f%% %7d\n", profile_family_names[f], ms[f], step_ms > 0 ? 100.0 * ms[f] / step_ms : 0.0,
                calls[f]);
    }
    double other = step_ms - total > 0 ? step_ms - total : 0.0;
    fprintf(out, "  %-18s %10.3f %7.1f%%\n", "other", other, step_ms > 0 ? 100.0 * other / step_ms : 0.0);
    fprintf(out, "  %-18s %10.3f %7.1f%% %7d   (wall %.3f ms)\n", "step", (double)step_ms, 100.0, p.n, wall_ms);
}

static inline void profile_free(void) {
    Profiler& p = profiler();
    for (int i = 0; i < p.cap; i++) {
        cudaCheck(cudaEventDestroy(p.marks[i].start));
        cudaCheck(cudaEventDestroy(p.marks[i].stop));
    }
    if (p.step_start) {
        cudaCheck(cudaEventDestroy(p.step_start));
        cudaCheck(cudaEventDestroy(p.step_stop));
    }
    free(p.marks);
    p = Profiler();
}

#endif // LLMC_PROFILE_CUH

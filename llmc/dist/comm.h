/*
 comm.h: the processes of a data-parallel run, over MPI (OpenMPI), or one process without it.

 Built with -DUSE_MPI (make train_gpt2_mpi, with mpicc) the functions are MPI collectives on
 MPI_COMM_WORLD; without it there is one process and every collective is the identity, so the
 single-process trainer needs no MPI at all. Launch: `mpirun -np N ./train_gpt2_mpi ...`.

 Counts are size_t; MPI's are int, so large buffers go in pieces of at most 2^30 elements.
 A fatal error on any rank (ls_fatal) exits that process with status 1; mpirun then stops the
 others and says which rank failed, so a run never hangs on a dead rank.

 A backend (CommOps) can take over the host-side collectives (loss sums, barriers, the flag
 check): the GPU trainer installs its NCCL communicator there (llmc/dist/nccl_comm.cuh), so processes
 started without MPI (-pi fs|tcp) get the same collectives, and comm_finalize frees it.
*/
#ifndef LLMC_COMM_H
#define LLMC_COMM_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "llmc/utils.h"
#ifdef USE_MPI
#include <mpi.h>
#endif

typedef struct {
    void (*allreduce_sum_f64)(void* ctx, double* x, int n);  // x (n) = its sum over processes, in place
    void (*finalize)(void* ctx);
} CommOps;

typedef struct {
    int rank;  // this process, 0 .. size-1
    int size;  // number of processes
    const CommOps* ops;  // NULL: MPI (USE_MPI builds) or one process
    void* ctx;           // the backend's state
} Comm;

// How the processes of a GPU run meet and how long a wait on them may take: the few fields of the
// run's options the communicator needs (llmc/dist/nccl_comm.cuh; the run layer fills them from its
// flags -pi, -pf, -ps, --comm-timeout: train_options_comm in llmc/run/train_options.h).
typedef enum { INIT_MPI, INIT_FS, INIT_TCP } InitMethod;
static const char* const init_method_choices[] = {"mpi", "fs", "tcp", NULL};
typedef struct {
    int init_method;          // InitMethod: mpi (mpirun), fs (a shared directory) or tcp (rank 0's address)
    const char* fs_path;      // INIT_FS: a directory every process sees
    const char* server_addr;  // INIT_TCP: rank 0's HOST[:PORT]
    float timeout_s;          // seconds a wait on the other processes may take before the run stops
} CommOptions;

#define COMM_PIECE ((size_t)1 << 30)

#ifdef USE_MPI
static inline void mpi_check(int rc, const char* what, const char* file, int line) {
    if (rc != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(rc, msg, &len);
        ls_fatal_at(file, line, "MPI error in %s: %s", what, msg);
    }
}
#define mpiCheck(call) mpi_check((call), #call, __FILE__, __LINE__)
#endif

static inline void comm_init(Comm* c, int* argc, char*** argv) {
#ifdef USE_MPI
    mpiCheck(MPI_Init(argc, argv));
    mpiCheck(MPI_Comm_rank(MPI_COMM_WORLD, &c->rank));
    mpiCheck(MPI_Comm_size(MPI_COMM_WORLD, &c->size));
#else
    (void)argc; (void)argv;
    c->rank = 0;
    c->size = 1;
#endif
    c->ops = NULL;
    c->ctx = NULL;
}

static inline void comm_finalize(Comm* c) {
    if (c->ops && c->ops->finalize) { c->ops->finalize(c->ctx); }
    c->ops = NULL;
#ifdef USE_MPI
    if (c->size >= 1) { mpiCheck(MPI_Finalize()); }
#endif
    c->size = 0;
}

static inline void comm_barrier(const Comm* c) {
    if (c->ops) {  // a sum that every process must join is a barrier
        double x = 0.0;
        c->ops->allreduce_sum_f64(c->ctx, &x, 1);
        return;
    }
#ifdef USE_MPI
    if (c->size > 1) { mpiCheck(MPI_Barrier(MPI_COMM_WORLD)); }
#else
    (void)c;
#endif
}

// buf (n) = the sum over processes of buf, in place.
static inline void comm_allreduce_sum_f32(const Comm* c, float* buf, size_t n) {
#ifdef USE_MPI
    for (size_t i = 0; c->size > 1 && i < n; i += COMM_PIECE) {
        int k = (int)(n - i < COMM_PIECE ? n - i : COMM_PIECE);
        mpiCheck(MPI_Allreduce(MPI_IN_PLACE, buf + i, k, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
    }
#else
    (void)c; (void)buf; (void)n;
#endif
}

// x (n) = its sum over the processes, in place (double: the same order on every process).
static inline void comm_allreduce_sum_f64_n(const Comm* c, double* x, int n) {
    if (c->ops) {
        c->ops->allreduce_sum_f64(c->ctx, x, n);
        return;
    }
#ifdef USE_MPI
    if (c->size > 1) { mpiCheck(MPI_Allreduce(MPI_IN_PLACE, x, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD)); }
#else
    (void)c; (void)x; (void)n;
#endif
}

// The same, with the signature of a hook (llmc/optim/engine.h: LAMB's tensor sums under ZeRO-1).
static inline void comm_sum_hook(void* comm, double* x, int n) { comm_allreduce_sum_f64_n((const Comm*)comm, x, n); }

static inline double comm_allreduce_sum_f64(const Comm* c, double x) {
    if (c->ops) {
        c->ops->allreduce_sum_f64(c->ctx, &x, 1);
        return x;
    }
#ifdef USE_MPI
    if (c->size > 1) { mpiCheck(MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD)); }
#else
    (void)c;
#endif
    return x;
}

// ZeRO-1's parts (llmc/optim/engine.h optim_engine_view_parts, size + 1 entries): whether they are
// equal shards (then the collectives without counts serve them), and MPI's counts of them.
static inline int comm_parts_even(const Comm* c, const size_t* parts) {
    for (int r = 1; r < c->size; r++) {
        if (parts[r + 1] - parts[r] != parts[1] - parts[0]) return 0;
    }
    return 1;
}

#ifdef USE_MPI
static inline void comm_parts_counts(const Comm* c, const size_t* parts, int* counts, int* displs) {
    for (int r = 0; r < c->size; r++) {
        if (parts[r + 1] > (size_t)1 << 30) { ls_fatal("comm: ZeRO-1 parts above 2^30 elements are not supported"); }
        counts[r] = (int)(parts[r + 1] - parts[r]);
        displs[r] = (int)parts[r];
    }
}
#endif

// ZeRO-1's gradient step: send holds parts[size] elements; recv (parts[rank + 1] - parts[rank])
// gets this process's part of their sum over the processes.
static inline void comm_reduce_scatter_sum_f32(const Comm* c, const float* send, float* recv, const size_t* parts) {
#ifdef USE_MPI
    if (c->size > 1) {
        if (comm_parts_even(c, parts)) {
            const size_t shard = parts[1];
            if (shard > (size_t)1 << 30) { ls_fatal("comm: shards above 2^30 elements are not supported"); }
            mpiCheck(MPI_Reduce_scatter_block(send, recv, (int)shard, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
            return;
        }
        int* counts = (int*)mallocCheck(2 * (size_t)c->size * sizeof(int));
        comm_parts_counts(c, parts, counts, counts + c->size);
        mpiCheck(MPI_Reduce_scatter(send, recv, counts, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
        free(counts);
        return;
    }
#endif
    memcpy(recv, send + parts[c->rank], (parts[c->rank + 1] - parts[c->rank]) * sizeof(float));
}

// ZeRO-1's parameter step: every process contributes its part (in place in buf, at parts[rank]);
// afterwards buf (parts[size]) holds all of them.
static inline void comm_allgather_inplace_f32(const Comm* c, float* buf, const size_t* parts) {
#ifdef USE_MPI
    if (c->size > 1) {
        if (comm_parts_even(c, parts)) {
            const size_t shard = parts[1];
            if (shard > (size_t)1 << 30) { ls_fatal("comm: shards above 2^30 elements are not supported"); }
            mpiCheck(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, (int)shard, MPI_FLOAT, MPI_COMM_WORLD));
            return;
        }
        int* counts = (int*)mallocCheck(2 * (size_t)c->size * sizeof(int));
        comm_parts_counts(c, parts, counts, counts + c->size);
        mpiCheck(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, counts, counts + c->size, MPI_FLOAT, MPI_COMM_WORLD));
        free(counts);
    }
#else
    (void)c; (void)buf; (void)parts;
#endif
}

// Every process must have been given the same flags: compares a hash of argv (rank 0 reports).
// per_rank (NULL-terminated, may be NULL) names flags whose values differ per process by design
// (-pr): they and their values are left out.
static inline void comm_check_same_args(const Comm* c, int argc, char** argv, const char* const* per_rank) {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the arguments
    for (int i = 1; i < argc; i++) {
        int skip = 0;  // arguments to leave out: the flag and its value, or "--flag=value"
        for (int k = 0; per_rank && per_rank[k] && !skip; k++) {
            size_t m = strlen(per_rank[k]);
            if (strcmp(argv[i], per_rank[k]) == 0) { skip = 2; }
            else if (strncmp(argv[i], per_rank[k], m) == 0 && argv[i][m] == '=') { skip = 1; }
        }
        if (skip) { i += skip - 1; continue; }
        for (const char* p = argv[i]; *p; p++) { h = (h ^ (unsigned char)*p) * 1099511628211ull; }
        h = (h ^ 0xff) * 1099511628211ull;
    }
    if (c->ops && c->size > 1) {
        // sums only: the hash in 8-bit pieces x; all equal iff size * sum(x^2) == sum(x)^2 (exact
        // in doubles for up to 2^18 processes)
        double s[16];  // s[k]: sum of piece k, s[8 + k]: sum of its squares
        for (int k = 0; k < 8; k++) {
            double x = (double)((h >> (8 * k)) & 0xff);
            s[k] = x;
            s[8 + k] = x * x;
        }
        c->ops->allreduce_sum_f64(c->ctx, s, 16);
        for (int k = 0; k < 8; k++) {
            if (s[8 + k] * c->size != s[k] * s[k]) {
                ls_fatal("the %d processes were started with different flags (rank %d); give every rank the same command line", c->size, c->rank);
            }
        }
        return;
    }
#ifdef USE_MPI
    if (c->size > 1) {
        uint64_t lo = h, hi = h;
        mpiCheck(MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD));
        mpiCheck(MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD));
        if (lo != hi) { ls_fatal("the %d processes were started with different flags (rank %d); give every rank the same command line", c->size, c->rank); }
    }
#else
    (void)c; (void)h;
#endif
}

#endif // LLMC_COMM_H

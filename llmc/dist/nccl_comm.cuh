/*
 nccl_comm.cuh: the GPU trainer's communicator between processes, one GPU each: NCCL collectives on
 device buffers (gradients, parameters), plus the host-side sums of the training loop (llmc/dist/comm.h
 CommOps: loss, barriers, the flag check) carried through a small device buffer.

 Bootstrap (-pi): rank 0 makes NCCL's unique id and hands it to the others over MPI (mpi, the
 default: `mpirun -np N`), through a shared directory (fs, -pf DIR) or over TCP (tcp, -ps
 HOST[:PORT]) (llmc/dist/rendezvous.h); then every rank joins ncclCommInitRank. Each process takes GPU
 (local rank % visible devices), the local rank from the launcher's environment
 (OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, SLURM_LOCALID or LOCAL_RANK), else the rank.

 Builds: -DUSE_NCCL includes <nccl.h> (nvcc links the real NCCL; the CPU-harness build with MPI gets
 the same functions over MPI from its own nccl.h, dev/harness/); any other build has one process
 only and these functions are never reached (nccl_comm_init says what to build instead).

 A dead or hung rank: every wait that needs the other ranks (init, the gradient reduction, the
 host sums) runs under llmc/dist/watchdog.h, so after --comm-timeout seconds the surviving ranks stop
 with a message and exit 1 (under mpirun, mpirun also ends the job when any rank exits non-zero).
 Testing: LEANSTEP_TEST_HANG=RANK:STEP makes that rank stop responding before that step's
 gradient reduction (training steps count from 1).
*/
#ifndef LLMC_NCCL_COMM_CUH
#define LLMC_NCCL_COMM_CUH

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "llmc/utils.h"
#include "llmc/dist/comm.h"
#include "llmc/dist/rendezvous.h"
#include "llmc/dist/watchdog.h"
#include "llmc/cuda/cuda_common.h"
#include "llmc/cuda/cuda_precision.h"
#include "llmc/cuda/profile.cuh"

#if defined(USE_NCCL)
#include <nccl.h>
#define LS_NCCL 1
#else
#define LS_NCCL 0
#endif

#define NCCL_COMM_SCALARS 16  // doubles the host sums carry at once (more go in pieces)

typedef struct {
    int rank, size;
    int device;              // the CUDA device this process uses
    cudaStream_t stream;     // the gradient reductions overlapped with the backward pass
    cudaEvent_t ready;       // on the compute stream: the gradients of a layer are complete
    cudaEvent_t reduced;     // on `stream`: every reduction issued so far is done
    double* d_scalars;       // (NCCL_COMM_SCALARS) device buffer of the host sums
    int hang_step;           // testing (LEANSTEP_TEST_HANG): this rank stops before that step's reduction
#if LS_NCCL
    ncclComm_t comm;
#endif
} NcclComm;

// The launcher's local rank (processes on this node), or the global rank when none says.
static inline int nccl_comm_local_rank(int rank) {
    const char* vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "LOCAL_RANK"};
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
        const char* v = getenv(vars[i]);
        char* end = NULL;
        long r = v ? strtol(v, &end, 10) : -1;
        if (v && end != v && *end == '\0' && r >= 0 && r <= INT_MAX) { return (int)r; }
    }
    return rank;
}

// Waits for `stream` under the watchdog (a peer that died would otherwise hang this forever).
static inline void nccl_comm_sync(const NcclComm* nc, cudaStream_t stream, const char* what) {
    (void)nc;
    watchdog_arm(what);
    cudaCheck(cudaStreamSynchronize(stream));
    watchdog_disarm();
}

// Testing: LEANSTEP_TEST_HANG=RANK:STEP, read at init; the named rank sleeps instead of reducing.
static inline void nccl_comm_maybe_hang(const NcclComm* nc, int step) {
    if (nc->hang_step > 0 && step == nc->hang_step) {
        fprintf(stderr, "rank %d: LEANSTEP_TEST_HANG: not responding from step %d on\n", nc->rank, step);
        for (;;) { pause(); }
    }
}

#if LS_NCCL

static inline void nccl_check(ncclResult_t r, const char* what, const char* file, int line) {
    if (r != ncclSuccess) { ls_fatal_at(file, line, "NCCL error in %s: %s", what, ncclGetErrorString(r)); }
}
#define ncclCheck(call) nccl_check((call), #call, __FILE__, __LINE__)

static const ncclDataType_t nccl_floatx = FLOATX_IS_BF16 ? ncclBfloat16 : FLOATX_IS_FP16 ? ncclHalf : ncclFloat;

static void nccl_comm_allreduce_host(void* ctx, double* x, int n) {
    NcclComm* nc = (NcclComm*)ctx;
    watchdog_arm("a sum over the processes (loss, barrier, flag check or LAMB's tensor norms)");
    for (int i = 0; i < n; i += NCCL_COMM_SCALARS) {
        const size_t k = (size_t)(n - i < NCCL_COMM_SCALARS ? n - i : NCCL_COMM_SCALARS);
        cudaCheck(cudaMemcpyAsync(nc->d_scalars, x + i, k * sizeof(double), cudaMemcpyHostToDevice, nc->stream));
        ncclCheck(ncclAllReduce(nc->d_scalars, nc->d_scalars, k, ncclDouble, ncclSum, nc->comm, nc->stream));
        cudaCheck(cudaMemcpyAsync(x + i, nc->d_scalars, k * sizeof(double), cudaMemcpyDeviceToHost, nc->stream));
    }
    cudaCheck(cudaStreamSynchronize(nc->stream));
    watchdog_disarm();
}

static void nccl_comm_finalize(void* ctx) {
    NcclComm* nc = (NcclComm*)ctx;
    ncclCheck(ncclCommDestroy(nc->comm));
    cudaCheck(cudaFree(nc->d_scalars));
    cudaCheck(cudaEventDestroy(nc->ready));
    cudaCheck(cudaEventDestroy(nc->reduced));
    cudaCheck(cudaStreamDestroy(nc->stream));
}

static const CommOps nccl_comm_ops = {nccl_comm_allreduce_host, nccl_comm_finalize};

// Connects the processes of comm (rank, size set: by MPI or by -pn/-pr), selects this process's
// GPU, and installs the communicator as comm's backend (comm_finalize frees it).
static inline void nccl_comm_init(NcclComm* nc, Comm* comm, const CommOptions* o) {
    memset(nc, 0, sizeof(*nc));
    nc->rank = comm->rank;
    nc->size = comm->size;
    watchdog_start(comm->rank, o->timeout_s);
    int count = 0;
    cudaCheck(cudaGetDeviceCount(&count));
    nc->device = nccl_comm_local_rank(comm->rank) % count;
    cudaCheck(cudaSetDevice(nc->device));
    ncclUniqueId id;
    memset(&id, 0, sizeof(id));
    if (comm->rank == 0) { ncclCheck(ncclGetUniqueId(&id)); }
    if (o->init_method == INIT_MPI) {
#ifdef USE_MPI
        mpiCheck(MPI_Bcast(&id, (int)sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD));
#else
        ls_fatal("flag -pi: mpi, but this build has no MPI: use -pi fs or -pi tcp");
#endif
    } else if (o->init_method == INIT_FS) {
        rendezvous_fs(o->fs_path, comm->rank, comm->size, &id, sizeof(id), o->timeout_s);
    } else {
        rendezvous_tcp(o->server_addr, comm->rank, comm->size, &id, sizeof(id), o->timeout_s);
    }
    watchdog_arm("NCCL init (ncclCommInitRank)");
    ncclCheck(ncclCommInitRank(&nc->comm, comm->size, id, comm->rank));
    watchdog_disarm();
    cudaCheck(cudaStreamCreate(&nc->stream));
    cudaCheck(cudaEventCreateWithFlags(&nc->ready, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&nc->reduced, cudaEventDisableTiming));
    cudaCheck(cudaMalloc((void**)&nc->d_scalars, NCCL_COMM_SCALARS * sizeof(double)));
    comm->ops = &nccl_comm_ops;
    comm->ctx = nc;
    comm_barrier(comm);  // every rank has its communicator (and has read the fs file)
    if (o->init_method == INIT_FS) { rendezvous_fs_done(o->fs_path, comm->rank); }
    const char* hang = getenv("LEANSTEP_TEST_HANG");
    int hr = -1, hs = 0;
    if (hang && sscanf(hang, "%d:%d", &hr, &hs) == 2 && hr == comm->rank) { nc->hang_step = hs; }  // NOLINT(cert-err34-c): testing only
    int version = 0;
    ncclCheck(ncclGetVersion(&version));
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, nc->device));
    printf("NCCL %d.%d.%d: %d processes (-pi %s), rank 0 on device %d (%s)\n", version / 10000, version / 100 % 100,
           version % 100, comm->size, init_method_choices[o->init_method], nc->device, prop.name);
}

// buf (n) = its sum over the processes, in place, on `stream`.
static inline void nccl_allreduce_sum(const NcclComm* nc, floatX* buf, size_t n, cudaStream_t stream) {
    PROFILE_SCOPE(PROF_COMM, stream);
    ncclCheck(ncclAllReduce(buf, buf, n, nccl_floatx, ncclSum, nc->comm, stream));
}

static inline void nccl_allreduce_sum_f32(const NcclComm* nc, float* buf, size_t n, cudaStream_t stream) {
    PROFILE_SCOPE(PROF_COMM, stream);
    ncclCheck(ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, nc->comm, stream));
}

// ZeRO-1 (parts: llmc/optim/engine.h optim_engine_view_parts, size + 1 entries): buf (parts[size])
// summed over the processes; this rank's part of the sum lands in place at buf + parts[rank] (the
// rest of buf is left as it was). Equal shards: one reduce-scatter; unequal ones (Muon's whole
// matrices): a group of reduces, one to each part's owner.
static inline void nccl_reduce_scatter_sum(const NcclComm* nc, floatX* buf, const size_t* parts, cudaStream_t stream) {
    PROFILE_SCOPE(PROF_COMM, stream);
    Comm c = {nc->rank, nc->size, NULL, NULL};
    if (comm_parts_even(&c, parts)) {
        const size_t shard = parts[1];
        ncclCheck(ncclReduceScatter(buf, buf + (size_t)nc->rank * shard, shard, nccl_floatx, ncclSum, nc->comm, stream));
        return;
    }
    ncclCheck(ncclGroupStart());
    for (int r = 0; r < nc->size; r++) {
        ncclCheck(ncclReduce(buf + parts[r], buf + parts[r], parts[r + 1] - parts[r], nccl_floatx, ncclSum, r, nc->comm, stream));
    }
    ncclCheck(ncclGroupEnd());
}

// ZeRO-1: every rank's part at buf + parts[rank] -> all of buf (parts[size]), in place: one
// all-gather for equal shards, else a group of broadcasts from each part's owner.
static inline void nccl_allgather(const NcclComm* nc, floatX* buf, const size_t* parts, cudaStream_t stream) {
    PROFILE_SCOPE(PROF_COMM, stream);
    Comm c = {nc->rank, nc->size, NULL, NULL};
    if (comm_parts_even(&c, parts)) {
        const size_t shard = parts[1];
        ncclCheck(ncclAllGather(buf + (size_t)nc->rank * shard, buf, shard, nccl_floatx, nc->comm, stream));
        return;
    }
    ncclCheck(ncclGroupStart());
    for (int r = 0; r < nc->size; r++) {
        ncclCheck(ncclBroadcast(buf + parts[r], buf + parts[r], parts[r + 1] - parts[r], nccl_floatx, r, nc->comm, stream));
    }
    ncclCheck(ncclGroupEnd());
}

static inline void nccl_group_start(void) { ncclCheck(ncclGroupStart()); }
static inline void nccl_group_end(void) { ncclCheck(ncclGroupEnd()); }

#else  // one process only: the trainer never calls these with a single process

static inline void nccl_comm_init(NcclComm* nc, Comm* comm, const CommOptions* o) {
    (void)nc; (void)o;
    ls_fatal("%d processes, but this build has no NCCL: build train_gpt2cu with NCCL installed (nccl.h; the Makefile "
             "then adds -DUSE_NCCL), or the harness build with MPI (make build/train_gpt2cu_emu_mpi_fp32)", comm->size);
}
static inline void nccl_allreduce_sum(const NcclComm*, floatX*, size_t, cudaStream_t) { ls_fatal("nccl_comm: no NCCL in this build"); }
static inline void nccl_allreduce_sum_f32(const NcclComm*, float*, size_t, cudaStream_t) { ls_fatal("nccl_comm: no NCCL in this build"); }
static inline void nccl_reduce_scatter_sum(const NcclComm*, floatX*, const size_t*, cudaStream_t) { ls_fatal("nccl_comm: no NCCL in this build"); }
static inline void nccl_allgather(const NcclComm*, floatX*, const size_t*, cudaStream_t) { ls_fatal("nccl_comm: no NCCL in this build"); }
static inline void nccl_group_start(void) {}
static inline void nccl_group_end(void) {}

#endif  // LS_NCCL

#endif // LLMC_NCCL_COMM_CUH

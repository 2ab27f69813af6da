/*
 cuda_harness_nccl.h: the NCCL functions the GPU trainer calls, implemented with MPI between CPU
 processes, for the CPU-harness build (make build/train_gpt2cu_emu_mpi_fp32). The same -z 0 / -z 1
 code of train_gpt2.cu then runs in CI under `mpirun -np 2` without a GPU or NCCL's library.

 The declarations come from the real <nccl.h>, so a signature that drifts from NCCL's does not
 compile. "Device" buffers are host memory in the harness. Each collective is stream work
 (dev/harness/cuda_harness_streams.h): it runs, on the host thread, when its stream's turn comes, after
 the waits its stream was given, and after the communicator's previous call (NCCL runs one
 communicator's calls in issue order, which every rank issues identically; a group is simply its
 calls in order). The harness runs a collective only when a synchronization needs it, so that a
 process never blocks in MPI on work that its peers have not been asked to finish yet. Argument
 errors are returned when the call is issued; an MPI failure while it runs is fatal. The
 communicator is a duplicate of MPI_COMM_WORLD: nranks and rank must be MPI's, and CommInitRank
 checks that every rank got the same unique id (so the fs / tcp rendezvous is tested too).

 Numerics: ncclFloat sums in fp32 (for two ranks a + b, as NCCL), ncclFloat64 in fp64, and
 ncclBfloat16 widens to fp32, sums, and rounds once to nearest even. NCCL's ring rounds to bf16
 after each of its P-1 additions: for P = 2 that is the same single rounding (the fp32 sum of two
 bf16 values is exact unless their exponents differ by more than 16); for more ranks the results
 differ by the bf16 rounding of the partial sums.
*/
#ifndef LLMC_CUDA_HARNESS_NCCL_H
#define LLMC_CUDA_HARNESS_NCCL_H

#include <mpi.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmc/utils.h"

struct ncclComm {
    MPI_Comm mpi;
    int rank, size;
    ls_harness::Dep last;  // the previous collective: the next one runs after it
};

static size_t nccl_shim_type_bytes(ncclDataType_t t) {
    switch (t) {
    case ncclFloat32: return 4;
    case ncclFloat64: return 8;
    case ncclBfloat16: return 2;
    default: return 0;
    }
}

// n elements of type t at src -> a new buffer of fp32 (fp64 stays fp64); caller frees.
static void* nccl_shim_widen(const void* src, size_t n, ncclDataType_t t) {
    if (t == ncclFloat64) {
        void* w = mallocCheck(n * 8 + 8);
        memcpy(w, src, n * 8);
        return w;
    }
    float* w = (float*)mallocCheck(n * sizeof(float) + 4);
    if (t == ncclFloat32) { memcpy(w, src, n * sizeof(float)); }
    else { for (size_t i = 0; i < n; i++) { w[i] = __bfloat162float(((const __nv_bfloat16*)src)[i]); } }
    return w;
}

static void nccl_shim_narrow(const void* w, void* dst, size_t n, ncclDataType_t t) {
    if (t == ncclBfloat16) { for (size_t i = 0; i < n; i++) { ((__nv_bfloat16*)dst)[i] = __float2bfloat16(((const float*)w)[i]); } }
    else { memcpy(dst, w, n * nccl_shim_type_bytes(t)); }
}

static ncclResult_t nccl_shim_args(size_t count, ncclDataType_t t, ncclComm_t comm) {
    if (comm == NULL || nccl_shim_type_bytes(t) == 0) { return ncclInvalidArgument; }
    if (count * (size_t)comm->size > ((size_t)1 << 30)) { return ncclInvalidUsage; }  // MPI's int counts
    return ncclSuccess;
}

static MPI_Datatype nccl_shim_mpi_type(ncclDataType_t t) { return t == ncclFloat64 ? MPI_DOUBLE : MPI_FLOAT; }

// Queues a collective on `stream` after the communicator's previous one.
static void nccl_shim_issue(ncclComm_t comm, cudaStream_t stream, const char* what, std::function<void()> fn) {
    comm->last = ls_harness::stream_task(stream, what, std::move(fn), true, &comm->last);
}

static void nccl_shim_mpi_check(int rc, const char* what) {
    if (rc != MPI_SUCCESS) { ls_fatal("nccl shim: %s: the MPI call failed (error %d)", what, rc); }
}

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t r) {
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclInvalidArgument: return "invalid argument (shim: null communicator or a type other than float, double, bfloat16)";
    case ncclInvalidUsage: return "invalid usage (shim: nranks/rank differ from MPI's, or a count above 2^30)";
    case ncclSystemError: return "system error (shim: an MPI call failed)";
    default: return "unhandled error (shim)";
    }
}

const char* ncclGetLastError(ncclComm_t comm) {
    (void)comm;
    return "";
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
    FILE* fp = fopen("/dev/urandom", "rb");
    if (fp == NULL || fread(id->internal, 1, sizeof(id->internal), fp) != sizeof(id->internal)) {
        if (fp) { fclose(fp); }
        return ncclSystemError;
    }
    fclose(fp);
    return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
    int wr = 0, ws = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &wr);
    MPI_Comm_size(MPI_COMM_WORLD, &ws);
    if (nranks != ws || rank != wr) { return ncclInvalidUsage; }
    ncclUniqueId root = id;  // every rank must hold rank 0's id
    if (MPI_Bcast(root.internal, (int)sizeof(root.internal), MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS) { return ncclSystemError; }
    int same = memcmp(root.internal, id.internal, sizeof(id.internal)) == 0, all = 0;
    MPI_Allreduce(&same, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all) {
        fprintf(stderr, "nccl shim: rank %d: the ranks were given different unique ids (the rendezvous is broken)\n", rank);
        return ncclInvalidUsage;
    }
    ncclComm* c = new ncclComm();
    c->rank = rank;
    c->size = nranks;
    if (MPI_Comm_dup(MPI_COMM_WORLD, &c->mpi) != MPI_SUCCESS) { delete c; return ncclSystemError; }
    *comm = c;
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    if (comm == NULL) { return ncclSuccess; }
    if (comm->last.s != NULL) { ls_harness::run_until({comm->last}); }  // its queued collectives first
    MPI_Comm_free(&comm->mpi);
    delete comm;
    return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
    (void)comm;
    MPI_Abort(MPI_COMM_WORLD, 1);
    return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* err) {
    (void)comm;
    *err = ncclSuccess;  // a collective that fails while it runs ends the process
    return ncclSuccess;
}

ncclResult_t ncclGroupStart() { return ncclSuccess; }
ncclResult_t ncclGroupEnd() { return ncclSuccess; }

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t t, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
    ncclResult_t r = nccl_shim_args(count, t, comm);
    if (r != ncclSuccess || op != ncclSum) { return r != ncclSuccess ? r : ncclInvalidArgument; }
    nccl_shim_issue(comm, stream, "ncclAllReduce", [=] {
        void* w = nccl_shim_widen(sendbuff, count, t);
        nccl_shim_mpi_check(MPI_Allreduce(MPI_IN_PLACE, w, (int)count, nccl_shim_mpi_type(t), MPI_SUM, comm->mpi), "ncclAllReduce");
        nccl_shim_narrow(w, recvbuff, count, t);
        free(w);
    });
    return ncclSuccess;
}

// sendbuff holds size * recvcount elements (in place: recvbuff == sendbuff + rank * recvcount)
ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t t, ncclRedOp_t op,
                               ncclComm_t comm, cudaStream_t stream) {
    ncclResult_t r = nccl_shim_args(recvcount, t, comm);
    if (r != ncclSuccess || op != ncclSum) { return r != ncclSuccess ? r : ncclInvalidArgument; }
    nccl_shim_issue(comm, stream, "ncclReduceScatter", [=] {
        void* w = nccl_shim_widen(sendbuff, recvcount * (size_t)comm->size, t);
        void* out = mallocCheck(recvcount * 8 + 8);
        nccl_shim_mpi_check(MPI_Reduce_scatter_block(w, out, (int)recvcount, nccl_shim_mpi_type(t), MPI_SUM, comm->mpi),
                            "ncclReduceScatter");
        nccl_shim_narrow(out, recvbuff, recvcount, t);
        free(out);
        free(w);
    });
    return ncclSuccess;
}

// recvbuff gets size * sendcount elements (in place: sendbuff == recvbuff + rank * sendcount)
ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t t, ncclComm_t comm,
                           cudaStream_t stream) {
    ncclResult_t r = nccl_shim_args(sendcount, t, comm);
    if (r != ncclSuccess) { return r; }
    size_t bytes = sendcount * nccl_shim_type_bytes(t);
    nccl_shim_issue(comm, stream, "ncclAllGather", [=] {
        void* mine = mallocCheck(bytes + 1);
        memcpy(mine, sendbuff, bytes);
        nccl_shim_mpi_check(MPI_Allgather(mine, (int)bytes, MPI_BYTE, recvbuff, (int)bytes, MPI_BYTE, comm->mpi), "ncclAllGather");
        free(mine);
    });
    return ncclSuccess;
}

// recvbuff (count) on rank root gets the sum over the ranks of sendbuff (in place: equal); the
// other ranks' recvbuff is left as it was
ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t t, ncclRedOp_t op, int root,
                        ncclComm_t comm, cudaStream_t stream) {
    ncclResult_t r = nccl_shim_args(count, t, comm);
    if (r != ncclSuccess || op != ncclSum || root < 0 || root >= comm->size) { return r != ncclSuccess ? r : ncclInvalidArgument; }
    nccl_shim_issue(comm, stream, "ncclReduce", [=] {
        void* w = nccl_shim_widen(sendbuff, count, t);
        void* out = mallocCheck(count * 8 + 8);
        nccl_shim_mpi_check(MPI_Reduce(w, out, (int)count, nccl_shim_mpi_type(t), MPI_SUM, root, comm->mpi), "ncclReduce");
        if (comm->rank == root) { nccl_shim_narrow(out, recvbuff, count, t); }
        free(out);
        free(w);
    });
    return ncclSuccess;
}

// recvbuff (count) on every rank gets root's sendbuff (in place: equal)
ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t t, int root, ncclComm_t comm,
                           cudaStream_t stream) {
    ncclResult_t r = nccl_shim_args(count, t, comm);
    if (r != ncclSuccess || root < 0 || root >= comm->size) { return r != ncclSuccess ? r : ncclInvalidArgument; }
    const size_t bytes = count * nccl_shim_type_bytes(t);
    nccl_shim_issue(comm, stream, "ncclBroadcast", [=] {
        if (comm->rank == root && sendbuff != recvbuff) { memcpy(recvbuff, sendbuff, bytes); }
        nccl_shim_mpi_check(MPI_Bcast(recvbuff, (int)bytes, MPI_BYTE, root, comm->mpi), "ncclBroadcast");
    });
    return ncclSuccess;
}

}  // extern "C"

#endif // LLMC_CUDA_HARNESS_NCCL_H

/*
 nccl.h (dev/harness): the harness build's <nccl.h>: NCCL's own declarations, then their
 implementation over MPI between CPU processes (cuda_harness_nccl.h). Reached through the include
 path of the harness build with -DUSE_MPI -DUSE_NCCL (llmc/dist/nccl_comm.cuh includes <nccl.h>
 under USE_NCCL).
*/
#ifndef LS_HARNESS_NCCL_H
#define LS_HARNESS_NCCL_H

#if !defined(USE_MPI)
#error "the harness's NCCL runs over MPI: build with mpicxx and -DUSE_MPI (make build/train_gpt2cu_emu_mpi_fp32)"
#endif

#include_next <nccl.h>
#include "dev/harness/cuda_harness_nccl.h"

#endif // LS_HARNESS_NCCL_H

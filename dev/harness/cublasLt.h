/*
 cublasLt.h (dev/harness): the harness build's <cublasLt.h>: cuBLASLt's own declarations and types,
 then their implementation on the CPU (cuda_harness_cublaslt.h). Reached through the include path
 of the harness builds (llmc/kernels/matmul.cuh includes <cublasLt.h>); an nvcc build never sees
 this folder.
*/
#ifndef LS_HARNESS_CUBLASLT_H
#define LS_HARNESS_CUBLASLT_H

#if defined(__CUDACC__)
#error "dev/harness/ is the CPU build's include folder; nvcc builds must not have it on the include path"
#endif

#include <cuda_runtime.h> // the harness (dev/harness/cuda_runtime.h): stream work
#include_next <cublasLt.h>
#include "dev/harness/cuda_harness_cublaslt.h"

#endif // LS_HARNESS_CUBLASLT_H

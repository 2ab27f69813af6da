/*
 cuda_runtime.h (dev/harness): the harness build's <cuda_runtime.h>. The CPU-harness builds put
 dev/harness/ first on the include path (the top Makefile's CUDA_HARNESS_FLAGS), so the product's
 own #include <cuda_runtime.h> (llmc/cuda/cuda_compat.h) brings the toolkit's header (types,
 declarations, host-side bf16) and then the CPU execution of CUDA code (cuda_harness.h). No product
 header names the harness; an nvcc build never sees this folder.
*/
#ifndef LS_HARNESS_CUDA_RUNTIME_H
#define LS_HARNESS_CUDA_RUNTIME_H

#if defined(__CUDACC__)
#error "dev/harness/ is the CPU build's include folder; nvcc builds must not have it on the include path"
#endif

#include_next <cuda_runtime.h>
#include "dev/harness/cuda_harness.h"

#endif // LS_HARNESS_CUDA_RUNTIME_H

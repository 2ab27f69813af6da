// Transitional: the optimizer files still at the top of llmc/ (adamw.cuh, optimizers.cuh) include
// this name; it moved to llmc/cuda/cuda_common.h. Delete this file once they include "llmc/cuda/cuda_common.h"
// (issue 13: the optimizer files move to llmc/optim/).
#ifndef LLMC_CUDA_COMMON_FWD_H
#define LLMC_CUDA_COMMON_FWD_H
#include "llmc/cuda/cuda_common.h"
#endif

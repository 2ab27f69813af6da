// Transitional: the optimizer files still at the top of llmc/ (adamw.cuh, optimizers.cuh) include
// this name; it moved to llmc/cuda/profile.cuh. Delete this file once they include "llmc/cuda/profile.cuh"
// (issue 13: the optimizer files move to llmc/optim/).
#ifndef LLMC_PROFILE_FWD_CUH
#define LLMC_PROFILE_FWD_CUH
#include "llmc/cuda/profile.cuh"
#endif

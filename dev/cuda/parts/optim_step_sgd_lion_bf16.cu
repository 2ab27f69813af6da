// optim_step_sgd_lion_bf16.cu: the optimizer step's launchers of SGD and Lion for bf16 parameters,
// a part of the labs that link it (dev/cuda/optim_step_parts.h, dev/cuda/labs.mk).
#include "dev/cuda/optim_step_parts.h"

OPT_PART_SGD_LION(OPT_PART_NONE, __nv_bfloat16)

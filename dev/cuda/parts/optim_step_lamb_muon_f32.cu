// optim_step_lamb_muon_f32.cu: the optimizer step's launchers of LAMB and Muon for f32 parameters,
// a part of the labs that link it (dev/cuda/optim_step_parts.h, dev/cuda/labs.mk).
#include "dev/cuda/optim_step_parts.h"

OPT_PART_LAMB_MUON(OPT_PART_NONE, float)

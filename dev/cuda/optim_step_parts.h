/*
 optim_step_parts.h: the optimizer step's launchers (llmc/optim/update.cuh, llmc/optim/muon.cuh),
 instantiated in parts of their own (dev/cuda/parts/optim_step_*.cu) for the labs that step every
 rule (optimizers.cu) or AdamW's (adamw.cu): each lab declares the instantiations extern and links
 the parts' objects (dev/cuda/labs.mk: LAB_PARTS_<lab>), so that no one translation unit holds
 all of the rules' kernels (about 90 of them, in two parameter types) and each builds in seconds.
 The parts: per parameter type T (grads of the same type), the AdamW family (AdamW, AMSGrad,
 Adam-mini and its blocks' v), SGD and Lion (SGD with momentum, Nesterov, plain SGD, Lion), and
 LAMB and Muon (whose AdamW tensors use the AdamW family's part).
*/
#ifndef DEV_CUDA_OPTIM_STEP_PARTS_H
#define DEV_CUDA_OPTIM_STEP_PARTS_H

#include "llmc/optim/engine.cuh"

#define OPT_PART_LAUNCH(EXT, OP, T)                                                                          \
    EXT template void optim_launch<OP, T, T>(OptimState*, T*, float*, const T*, const float*, const OptimStepArgs&, \
                                             bool, const float*, cudaStream_t);
// the AdamW family of parameter type T
#define OPT_PART_ADAMW(EXT, T)                                                                               \
    OPT_PART_LAUNCH(EXT, OP_ADAMW, T)                                                                        \
    OPT_PART_LAUNCH(EXT, OP_AMSGRAD, T)                                                                      \
    OPT_PART_LAUNCH(EXT, OP_ADAM_MINI, T)                                                                    \
    EXT template void adam_mini_v_launch<T>(OptimState*, const T*, const OptimStepArgs&, const float*, cudaStream_t);
// SGD (plain, momentum, Nesterov) and Lion of parameter type T
#define OPT_PART_SGD_LION(EXT, T)                                                                            \
    OPT_PART_LAUNCH(EXT, OP_SGD_PLAIN, T)                                                                    \
    OPT_PART_LAUNCH(EXT, OP_SGD, T)                                                                          \
    OPT_PART_LAUNCH(EXT, OP_SGD_NESTEROV, T)                                                                 \
    OPT_PART_LAUNCH(EXT, OP_LION, T)
// LAMB and Muon of parameter type T
#define OPT_PART_LAMB_MUON(EXT, T)                                                                           \
    EXT template void lamb_update<T, T>(OptimState*, T*, float*, const T*, const OptimStepArgs&, bool, const float*, \
                                        cudaStream_t);                                                       \
    EXT template void muon_step_gpu<T, T>(OptimState*, T*, float*, const T*, float, int, bool, const float*,    \
                                          cudaStream_t);
// (EXT: extern in a lab, empty in its part)
#define OPT_PART_NONE

#endif // DEV_CUDA_OPTIM_STEP_PARTS_H

# dev/cuda/labs.mk: what every nvcc build of the kernel labs shares, in one place (included by
# dev/cuda/Makefile, which builds them, and by dev/cuda/rules.mk, which runs them under the harness).
#
# The labs built in every precision: <lab> is BF16 (the default floatX), <lab>_fp32 (-DENABLE_FP32)
# and <lab>_fp16 (-DENABLE_FP16) the other two. The others (adamw, optimizers, global_norm, ...)
# do not touch floatX in a way that differs by precision and are built once.
LAB_PRECISION_LABS := encoder layernorm gelu fused_classifier muon matmul attention
# Labs with parts: dev/cuda/parts/<part>.cu compiled apart and linked to the lab (the optimizer
# step's launchers, dev/cuda/optim_step_parts.h: no one file holds every rule's kernels).
LAB_PARTS_optimizers := $(foreach f,adamw sgd_lion lamb_muon,optim_step_$(f)_f32 optim_step_$(f)_bf16)
LAB_PARTS_adamw := optim_step_adamw_f32 optim_step_adamw_bf16
# (a lab's part objects under a build directory)
lab_parts = $(patsubst %,$(1)/parts/%.o,$(LAB_PARTS_$(2)))
# Every lab links the same libraries: cuBLAS(Lt) (matmul, attention and muon call it through
# llmc/kernels/matmul.cuh), libdl (attention opens the cuDNN library at run time) and OpenMP's
# runtime (the host references' parallel loops; nvcc passes -Xcompiler -fopenmp to the compile
# only). One list for all, so that a lab starting to use one cannot be left out of its link line.
LAB_LIBS := -lcublasLt -lcublas -ldl -lgomp
# -lineinfo for profilers, --warn-on-spills so register spills are seen, OpenMP for the host references
LAB_NVCC_FLAGS := -std=c++17 -O3 -lineinfo -Xptxas=--warn-on-spills -Xcompiler -Wall,-Wextra,-fopenmp
# The compile check's architecture per precision (no lab has code that differs by architecture; the
# trainers' check covers sm_80 too): BF16 and FP32 Hopper, FP16 the oldest GPU CUDA 13 builds for
# (sm_75: T4, RTX 20xx).
LAB_CHECK_ARCH_bf16 := 90
LAB_CHECK_ARCH_fp32 := 90
LAB_CHECK_ARCH_fp16 := 75
LAB_PFLAGS_bf16 :=
LAB_PFLAGS_fp32 := -DENABLE_FP32
LAB_PFLAGS_fp16 := -DENABLE_FP16

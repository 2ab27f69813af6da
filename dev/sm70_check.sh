#!/usr/bin/env bash
# dev/sm70_check.sh: what can be checked here of the FP16 build for Volta (V100, sm_70). CUDA 13, this
# project's toolkit, dropped sm_70 ("Unsupported gpu architecture 'compute_70'"), and PyPI has no CUDA
# 12 nvcc (nvidia-cuda-nvcc-cu12 ships only ptxas and libnvvm). So: CUDA 13's nvcc writes the FP16
# trainer's PTX for compute_75, the PTX is relabelled for sm_70 (ISA 8.8), and CUDA 12.9's ptxas (from
# PyPI, into build/cuda12-ptxas/) assembles it for sm_70 with spills reported. It shows whether the
# device code uses anything Volta lacks; it is not the nvcc build a V100 user makes with CUDA 12.
#   make gpu-sm70-check        (called with the trainer's nvcc flags; about 2 min of one core)
set -euo pipefail
cd "$(dirname "$0")/.."
NVCC=${NVCC:-nvcc}
dir=build/cuda12-ptxas
ptxas=$dir/nvidia/cuda_nvcc/bin/ptxas
if [ ! -x "$ptxas" ]; then
    echo "  PIP   nvidia-cuda-nvcc-cu12==12.9.86 (ptxas only) -> $dir"
    PIP_ROOT_USER_ACTION=ignore python3 -m pip install -q --disable-pip-version-check --no-deps --target "$dir" nvidia-cuda-nvcc-cu12==12.9.86
fi
mkdir -p build/sm70
echo "  NVCC  train_gpt2.cu (fp16, PTX for compute_75)"
"$NVCC" "$@" -DENABLE_FP16 -arch=compute_75 -ptx train_gpt2.cu -o build/sm70/train_gpt2_fp16.ptx
sed -e 's/^\.version [0-9.]*$/.version 8.8/' -e 's/^\.target sm_75$/.target sm_70/' build/sm70/train_gpt2_fp16.ptx \
    >build/sm70/train_gpt2_fp16_sm70.ptx
echo "  PTXAS build/sm70/train_gpt2_fp16_sm70.ptx (CUDA 12.9 ptxas, sm_70)"
if "$ptxas" -arch=sm_70 -O3 --warn-on-spills build/sm70/train_gpt2_fp16_sm70.ptx -o build/sm70/train_gpt2_fp16_sm70.cubin \
    2>build/sm70/ptxas.log; then
    warnings=$(grep -c "warning" build/sm70/ptxas.log || true)
    echo "sm70-check: every kernel of the FP16 trainer assembles for sm_70 ($warnings ptxas warning(s)$([ "$warnings" -gt 0 ] && echo ': build/sm70/ptxas.log'))"
    [ "$warnings" -eq 0 ] || sed 's/^/  /' build/sm70/ptxas.log
else
    sed 's/^/  /' build/sm70/ptxas.log
    echo "sm70-check: ptxas failed for sm_70" >&2
    exit 1
fi

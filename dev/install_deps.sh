#!/usr/bin/env bash
# install_deps.sh: installs what leanstep needs on Debian/Ubuntu (as root, or with sudo).
# Required: a C compiler, OpenBLAS, PCRE2, cJSON, zlib (checksums), libcurl and OpenSSL (sha256, the
# data step), Boost.Context (the CUDA CPU harness). Optional but installed here: OpenMPI (the
# data-parallel CPU trainer, train_gpt2_mpi). For the tests: Debian's PyTorch (python3-torch) and
# tiktoken from PyPI; the cuDNN frontend headers (PyPI, into build/deps/). Not installed here: the
# CUDA toolkit (nvcc) for the GPU builds.
set -euo pipefail
packages=(build-essential libopenblas-openmp-dev libopenblas-dev libpcre2-dev libcjson-dev zlib1g-dev
          libcurl4-openssl-dev libssl-dev libboost-context-dev libopenmpi-dev openmpi-bin python3-torch
          python3-venv python3-matplotlib clang libclang-rt-14-dev libomp-14-dev cppcheck clang-tidy shellcheck)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
PY=${PYTHON:-python3}
if ! "$PY" -c "import tiktoken" >/dev/null 2>&1; then
  echo "installing: tiktoken (pip)"
  "$PY" -m pip install -q tiktoken
fi
# the cuDNN frontend headers (pip) for the BF16 GPU trainer's flash attention: into the working tree
make -C "$(dirname "$0")/.." --no-print-directory cudnn-frontend ||
  echo "warning: cuDNN frontend headers not installed: the BF16 GPU builds need them (make cudnn-frontend)"
echo "dependencies: ok"

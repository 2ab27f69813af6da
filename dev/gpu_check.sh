#!/usr/bin/env bash
# dev/gpu_check.sh: the checks that need a GPU, in one prepared run (< 5 minutes on an H100/H200).
#
# Builds every CUDA lab file for the local GPU, runs the harness self-tests on the real GPU (the
# semantics the CPU harness claims), the AdamW lab's checks on small problems and at full size
# (GPT-2 124M, n = 124,475,904) and its benchmarks (with torch.optim.AdamW(fused=True) when
# torch is importable); then builds the GPU trainer (bf16 and fp32), runs test_gpt2cu against the
# PyTorch reference (the CI config from build/ref, carried or made with torch; GPT-2 124M when
# torch is there to make its reference), and trains GPT-2 124M (-b 16 -t 1024) on TinyShakespeare
# for 50 steps (needs data/, carried or made by `make data`), reporting median tok/s, MFU and
# memory. Writes a summary table to $OUT/summary.txt if OUT is set, else to stdout. Logs of every
# step go next to the summary (or to a temporary directory).
#
# usage: dev/gpu_check.sh            env: OUT, GPU_ARCH (default: the local GPU's), NVCC,
#                                          TORCH_PYTHON (default python3)
# Exit status: 0 when every step passed, 1 otherwise (the summary says which failed and why).
# To add a step: one `step NAME TIMEOUT_S command...` line below, and its row appears in the table.
set -euo pipefail

cd "$(dirname "$0")/.."
LOGS=${OUT:-$(mktemp -d /tmp/gpu_check.XXXXXX)}
mkdir -p "$LOGS"
SUMMARY=$(mktemp /tmp/gpu_check_summary.XXXXXX)
export TORCH_PYTHON=${TORCH_PYTHON:-python3}
NVCC=${NVCC:-nvcc}
BIN=build/cuda-gpu
START=$(date +%s)
FAILED=()
ROWS=()

# step NAME TIMEOUT_S CMD...: runs CMD with a time limit, its output in $LOGS/NAME.log.
step() {
    local name=$1 limit=$2
    shift 2
    local t0 rc=0
    t0=$(date +%s)
    echo "== $name: $*"
    if declare -F "$1" >/dev/null; then  # a shell function: run it in a child bash under the limit
        # shellcheck disable=SC2163  # exports the function named by $1
        export -f "$1"
        timeout "$limit" bash -c '"$@"' _ "$@" >"$LOGS/$name.log" 2>&1 || rc=$?
    else
        timeout "$limit" "$@" >"$LOGS/$name.log" 2>&1 || rc=$?
    fi
    local dt=$(($(date +%s) - t0)) status=ok
    if [ "$rc" -eq 124 ]; then
        status="FAIL (timeout ${limit}s)"
    elif [ "$rc" -ne 0 ]; then
        status="FAIL (exit $rc)"
    fi
    tail -n 4 "$LOGS/$name.log" | sed 's/^/   | /'
    if [ "$status" != ok ]; then FAILED+=("$name"); fi
    ROWS+=("$(printf '%-22s %-22s %5ss' "$name" "$status" "$dt")")
    return 0
}

# --- the machine
GPU_INFO=$(nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2>&1 | head -n 1) ||
    GPU_INFO="nvidia-smi failed: $GPU_INFO"
if [ -z "${GPU_ARCH:-}" ]; then
    CC=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d ' .' || true)
    GPU_ARCH=${CC:+sm_$CC}
    GPU_ARCH=${GPU_ARCH:-native}
fi
echo "GPU: $GPU_INFO (building for $GPU_ARCH); logs in $LOGS"

# --- the steps
step build 100 make -C dev/cuda gpu GPU_ARCH="$GPU_ARCH" NVCC="$NVCC"
step harness-semantics 30 "$BIN/harness_selftest"
step adamw-check-small 30 "$BIN/adamw" --check -q
step adamw-check-gpt2 110 "$BIN/adamw" --check --gpt2 -s 2 -q
step adamw-bench-gpt2 60 "$BIN/adamw" --bench --gpt2 -r 20 --torch

# --- the trainer: builds, the PyTorch comparison, a training run
export GB=build/gpu GPU_ARCH NVCC
build_trainers() {
    mkdir -p "$GB"
    for p in BF16 FP32; do
        make --no-print-directory train_gpt2cu test_gpt2cu PRECISION=$p GPU_ARCH="$GPU_ARCH" NVCC="$NVCC" || return 1
        local lc
        lc=${p,,}
        mv -f train_gpt2cu "$GB/train_gpt2cu_$lc" && mv -f test_gpt2cu "$GB/test_gpt2cu_$lc" || return 1
    done
}
step build-trainer 200 build_trainers
HAVE_TORCH=0
"$TORCH_PYTHON" -c "import torch" >/dev/null 2>&1 && HAVE_TORCH=1
export REF=build/ref
if [ "$HAVE_TORCH" = 1 ] && [ ! -f "$REF/L2C64H4T64_state.bin" ]; then
    step reference-small 60 make --no-print-directory build/ref/L2C64H4T64_state.bin TORCH_PYTHON="$TORCH_PYTHON"
fi
if [ -f "$REF/L2C64H4T64_state.bin" ]; then
    for p in bf16 fp32; do
        step test-$p-small 120 "$GB/test_gpt2cu_$p" --model "$REF/L2C64H4T64_model.bin" --state "$REF/L2C64H4T64_state.bin"
    done
else
    ROWS+=("$(printf '%-22s %-22s' test-small 'skipped (no reference: carry build/ref or install torch)')")
fi
if [ "$HAVE_TORCH" = 1 ]; then
    d12ref() {
        mkdir -p "$REF"
        "$TORCH_PYTHON" dev/reference/gpt2_ref.py init --layers 12 --channels 768 --heads 12 --max-seq 1024 --vocab 50257 --seed 42 --out "$REF/d12_model.bin" &&
        "$TORCH_PYTHON" dev/reference/gpt2_ref.py state --model "$REF/d12_model.bin" --batch 4 --seq 64 --seed 1 --steps 10 \
            --lr 1e-4 --beta1 0.9 --beta2 0.95 --eps 1e-8 --weight-decay 0.1 --grad-clip 1.0 --out "$REF/d12_state.bin"
    }
    step reference-d12 150 d12ref
    for p in bf16 fp32; do
        step test-$p-d12 120 "$GB/test_gpt2cu_$p" --model "$REF/d12_model.bin" --state "$REF/d12_state.bin" --resume-check 0
    done
fi
if [ ! -f data/tinyshakespeare/tiny_shakespeare_train.bin ]; then
    step data 60 make --no-print-directory data
fi
export NVSMI_LOG="$LOGS/train-d12-memory.csv"
train_d12() {
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 500 >"$NVSMI_LOG" 2>/dev/null &
    local smi=$!
    "$GB/train_gpt2cu_bf16" -e d12 -b 16 -t 1024 -x 50 -v 0 -s 0 -l 6e-4 -u 10 -c 0.1
    local rc=$?
    kill "$smi" 2>/dev/null || true
    return $rc
}
step train-d12 240 train_d12
# every optimizer-memory mode, 20 steps each: step time against the on-device AdamW (the offload
# overhead), the predicted total against what cudaMemGetInfo says is used
train_modes() {
    local mode
    for mode in "" "--offload 1" "--opt-state bf16" "--opt-state int8" "--optimizer lion" "--optimizer lamb" "--badam 5"; do
        echo "=== mode: ${mode:-adamw}"
        # shellcheck disable=SC2086
        "$GB/train_gpt2cu_bf16" -e d12 -b 16 -t 1024 -x 20 -v 0 -s 0 -l 6e-4 -u 10 -c 0.1 $mode || return 1
    done
}
step train-modes 300 train_modes

# --- the summary
{
    echo "leanstep dev/gpu_check.sh, $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
    echo "GPU: $GPU_INFO, built for $GPU_ARCH"
    echo
    printf '%-22s %-22s %6s\n' step status time
    for r in "${ROWS[@]}"; do echo "$r"; done
    echo
    echo "AdamW checks:"
    grep -h "adamw --check:" "$LOGS"/adamw-check-*.log 2>/dev/null | sed 's/^/  /' || echo "  (none ran)"
    echo
    echo "AdamW benchmark (GPT-2 124M):"
    sed -n '/^AdamW bench/,$p' "$LOGS/adamw-bench-gpt2.log" 2>/dev/null | sed 's/^/  /' || true
    echo
    echo "test_gpt2cu vs PyTorch:"
    grep -hE "^(test_gpt2cu|logits|loss|gradients|memory|resume|OK|FAILED)" "$LOGS"/test-*.log 2>/dev/null | sed 's/^/  /' || echo "  (none ran)"
    echo
    if [ -f "$LOGS/train-d12.log" ]; then
        echo "training GPT-2 124M, bf16, B=16 T=1024, 50 steps (median of steps 11-50):"
        grep -E "^\| (total|parameters|master|gradients|AdamW|activations)" "$LOGS/train-d12.log" | sed 's/^/  /' || true
        steps=$(grep -E "^step" "$LOGS/train-d12.log" | tail -n 40)
        med_tok=$(echo "$steps" | grep -oE "[0-9]+ tok/s" | awk '{print $1}' | sort -n | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]}')
        med_mfu=$(echo "$steps" | grep -oE "[0-9.]+% bf16 MFU" | awk '{print $1+0}' | sort -n | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]}')
        echo "  median ${med_tok:-?} tok/s, median MFU ${med_mfu:-?}%"
        grep -E "^step +50/" "$LOGS/train-d12.log" | sed 's/^/  last: /' || true
        [ -s "$NVSMI_LOG" ] && echo "  peak device memory (nvidia-smi): $(sort -n "$NVSMI_LOG" | tail -n 1) MiB"
    fi
    echo
    if [ -f "$LOGS/train-modes.log" ]; then
        echo "optimizer-memory modes, GPT-2 124M bf16 B=16 T=1024 (median ms of steps 6-20; device MiB: predicted total, used by cudaMemGetInfo):"
        awk '/^=== mode:/ { if (m != "") emit(); m = substr($0, 11); n = 0; pred = "?"; used = "?"; next }
             /^\| total/ { pred = $4 }
             /^device memory:/ { used = $7 - $3 }
             /^step/ { for (i = 1; i <= NF; i++) if ($i == "ms") { n++; if (n > 5) t[n - 5] = $(i - 1) } }
             function emit(   k, j, x) { k = n - 5; for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (t[j] < t[i]) { x = t[i]; t[i] = t[j]; t[j] = x }
                 printf "  %-18s %9s ms  predicted %8s MiB  used %8s MiB\n", m, (k > 0 ? t[int((k + 1) / 2)] : "?"), pred, used }
             END { if (m != "") emit() }' "$LOGS/train-modes.log"
    fi
    echo
    if [ "${#FAILED[@]}" -eq 0 ]; then
        echo "all steps passed ($(($(date +%s) - START)) s)"
    else
        echo "FAILED: ${FAILED[*]} ($(($(date +%s) - START)) s); first lines of their logs:"
        for f in "${FAILED[@]}"; do
            echo "--- $f"
            grep -m 12 -iE "error|fail|mismatch|not found|timeout" "$LOGS/$f.log" || tail -n 12 "$LOGS/$f.log"
        done
    fi
} >"$SUMMARY"

if [ -n "${OUT:-}" ]; then
    cp "$SUMMARY" "$OUT/summary.txt"
    echo "summary: $OUT/summary.txt"
fi
cat "$SUMMARY"
rm -f "$SUMMARY"
[ "${#FAILED[@]}" -eq 0 ]

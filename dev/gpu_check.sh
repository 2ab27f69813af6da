#!/usr/bin/env bash
# dev/gpu_check.sh: the checks that need a GPU, in one prepared run (< 5 minutes on an H100/H200).
#
# Builds every CUDA lab file for the local GPU, runs the harness self-tests on the real GPU (the
# semantics the CPU harness claims), the AdamW lab's checks on small problems and at full size
# (GPT-2 124M, n = 124,475,904) and its benchmarks (with torch.optim.AdamW(fused=True) when
# torch is importable), then writes a summary table to $OUT/summary.txt if OUT is set, else to
# stdout. Logs of every step go next to the summary (or to a temporary directory).
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
    timeout "$limit" "$@" >"$LOGS/$name.log" 2>&1 || rc=$?
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

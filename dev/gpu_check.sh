#!/usr/bin/env bash
# dev/gpu_check.sh: every check that needs a GPU, in one prepared run of at most 7 minutes on one
# H200 (builds included), that always leaves its summary behind.
#
# What it does, in order (each a step with a time limit; a step that cannot run is "skipped" with
# the reason, one that fails is "FAILED" with its last error line, and the rest still run):
#   env           the GPU, nvcc, cuDNN, NCCL, zlib, torch and data that this machine has
#   build         `make -j gpu-build`: the kernel labs and train_gpt2cu / test_gpt2cu in bf16, fp32, fp16
#   labs          every lab's --check on the GPU (kernels vs float64 CPU references), and the harness
#                 self-tests (the semantics the CPU harness claims)
#   muon-bench    Muon's lab: GPT-2 124M's four Newton-Schulz runs, ms and TFLOP/s
#   adamw         the AdamW lab at GPT-2 124M size: --check, then --bench (vs copy bandwidth and
#                 torch.optim.AdamW(fused=True) when torch is importable)
#   test-*        test_gpt2cu (bf16, fp32, fp16) against the PyTorch reference: the CI config (build/ref,
#                 carried or made with torch) and GPT-2 124M (made with torch when importable)
#   profile-d12   the per-kernel time table of one d12 B16 T1024 step (train_gpt2cu --profile 1)
#   train-d12     50 steps of GPT-2 124M, bf16, B16 T1024 on TinyShakespeare: tok/s, MFU, memory
#   train-fp16    the same 50 steps in the FP16 build (loss scaling from 65536)
#   torch-step    the same step in PyTorch (dev/reference/torch_step.py) when torch is importable
#   train-modes   20 steps in each attention and optimizer-memory mode: ms/step, predicted vs used memory
#   sample-eval   -x 0 on the GPU: a greedy sample of a prompt (--prompt, --temperature 0) and HellaSwag's
#                 batched scoring (--hellaswag) of a small file in its format, both from GPT-2 124M's shape
# The summary ($OUT/summary.txt, or stdout) is rewritten after every step, so a run killed from
# outside still leaves the steps it finished.
#
# The GPU machine has no network and gets a copy of the working tree only: prepare here, then carry
#   make gpu-carry      (data/, build/deps/: the cuDNN frontend headers and zlib's, build/ref/)
#   carry: data, build/deps, build/ref        (about 10 MB)
# Without data/ the training steps are skipped (and say so); without the cuDNN frontend headers the
# build fails naming `make cudnn-frontend`.
#
# usage: dev/gpu_check.sh [--dry-run]
#   --dry-run   rehearse without a GPU: the steps that need one are skipped; the summary is written
# env: OUT (where logs and summary.txt go), GPU_ARCH (default: the GPU's), NVCC, TORCH_PYTHON
#      (default python3), GPU_CHECK_BUDGET (seconds for the whole run, default 420),
#      GPU_CHECK_FAIL / GPU_CHECK_PAUSE (a step name: that step fails on purpose / waits a minute
#      first; the tests of this script, dev/test/test_gpu_check.py)
# Exit status: 0 when no step failed, 1 otherwise.
set -uo pipefail  # not -e: a failing step must not stop the others or the summary

cd "$(dirname "$0")/.." || exit 1
DRY=0
for arg in "$@"; do
    case $arg in
        --dry-run) DRY=1 ;;
        -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "gpu_check.sh: unknown argument '$arg' (expected --dry-run or --help)" >&2; exit 2 ;;
    esac
done
LOGS=${OUT:-$(mktemp -d /tmp/gpu_check.XXXXXX)}
mkdir -p "$LOGS"
SUMMARY_FILE=${OUT:+$OUT/summary.txt}
export TORCH_PYTHON=${TORCH_PYTHON:-python3}
NVCC=${NVCC:-nvcc}
BUDGET=${GPU_CHECK_BUDGET:-420}
START=$(date +%s)
FAILED=()
ROWS=()
NOTES=()
GPU_INFO="none"
export LAB=build/cuda-gpu GB=build/gpu REF=build/ref  # exported: steps run shell functions in a child bash

elapsed() { echo $(($(date +%s) - START)); }

# The summary: one line per step, then what the steps measured. Written after every step.
write_summary() {
    local tmp
    tmp=$(mktemp /tmp/gpu_check_summary.XXXXXX)
    {
        echo "leanstep dev/gpu_check.sh$([ $DRY = 1 ] && echo ' (dry run)'), $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
        echo "GPU: $GPU_INFO; built for ${GPU_ARCH:-?}; $(elapsed) s of a ${BUDGET} s budget"
        echo
        printf '%-16s %6s  %s\n' step time status
        local r
        for r in "${ROWS[@]}"; do echo "$r"; done
        for r in "${NOTES[@]}"; do echo; echo "$r"; done
        echo
        if [ "${#FAILED[@]}" -eq 0 ]; then echo "no step failed"; else echo "FAILED: ${FAILED[*]}"; fi
    } >"$tmp"
    if [ -n "$SUMMARY_FILE" ]; then cp "$tmp" "$SUMMARY_FILE"; fi
    SUMMARY_TEXT=$(cat "$tmp")
    rm -f "$tmp"
}
# Stopped from outside (a time limit, Ctrl-C): the step in flight is ended and the summary says so.
# Steps run in the background and are waited for, so the signal is handled at once.
CHILD=
on_signal() {
    [ -n "$CHILD" ] && kill -TERM "$CHILD" 2>/dev/null
    ROWS+=("$(printf '%-16s %5ss  %s' interrupted "$(elapsed)" "FAILED (signal): this step and the later ones did not finish")")
    FAILED+=(interrupted)
    write_summary
    exit 1
}
trap on_signal INT TERM

# row NAME SECONDS STATUS: one line of the table
row() { ROWS+=("$(printf '%-16s %5ss  %s' "$1" "$2" "$3")"); write_summary; }
skip() { row "$1" 0 "skipped ($2)"; }

# step NAME LIMIT CMD...: runs CMD (a command or a shell function) with a time limit (cut to what is
# left of the budget), its output in $LOGS/NAME.log; one row with passed / FAILED / skipped.
step() {
    local name=$1 limit=$2
    shift 2
    local left=$((BUDGET - $(elapsed)))
    if [ "$left" -lt 10 ]; then skip "$name" "time budget spent"; return 0; fi
    [ "$limit" -gt "$left" ] && limit=$left
    local t0 rc=0
    t0=$(date +%s)
    echo "== $name ($(elapsed) s): $*"
    if [ "${GPU_CHECK_FAIL:-}" = "$name" ]; then
        echo "error: $name fails on purpose (GPU_CHECK_FAIL=$name)" >"$LOGS/$name.log"
        rc=1
    else
        if declare -F "$1" >/dev/null; then  # a shell function: run it in a child bash under the limit
            # shellcheck disable=SC2163  # exports the function named by $1
            export -f "$1"
            set -- bash -c '"$@"' _ "$@"
        fi
        timeout --kill-after=5 "$limit" "$@" >"$LOGS/$name.log" 2>&1 &
        CHILD=$!
        wait "$CHILD" || rc=$?
        CHILD=
    fi
    local dt=$(($(date +%s) - t0)) status=passed
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        status="FAILED (timeout ${limit}s): $(last_error "$LOGS/$name.log")"
    elif [ "$rc" -ne 0 ]; then
        status="FAILED (exit $rc): $(last_error "$LOGS/$name.log")"
    fi
    tail -n 3 "$LOGS/$name.log" | sed 's/^/   | /'
    [ "$status" != passed ] && FAILED+=("$name")
    row "$name" "$dt" "$status"
    return 0
}

# The last line of a log that looks like an error (else its last line), cut to 160 characters.
last_error() {
    local line
    line=$(grep -iE "error|fail|mismatch|not found|abort|fatal|exceed" "$1" 2>/dev/null | tail -n 1)
    [ -z "$line" ] && line=$(tail -n 1 "$1" 2>/dev/null)
    echo "${line:0:160}"
}

# median of the numbers on stdin
median() { sort -n | awk '{a[NR] = $1} END {if (NR) print a[int((NR + 1) / 2)]; else print "?"}'; }

# ---------------------------------------------------------------------------------------------
# env: what this machine has

HAVE_GPU=0
if [ $DRY = 0 ] && command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
    HAVE_GPU=1
    GPU_INFO=$(nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader | head -n 1)
    if [ -z "${GPU_ARCH:-}" ]; then
        cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n 1 | tr -d ' .')
        GPU_ARCH=${cc:+sm_$cc}
    fi
fi
GPU_ARCH=${GPU_ARCH:-sm_90}
HAVE_TORCH=0
"$TORCH_PYTHON" -c "import torch; assert torch.cuda.is_available()" >/dev/null 2>&1 && HAVE_TORCH=1
# cuDNN: the toolkit's, else the one PyTorch's wheels bring (include/ and lib/ side by side)
CUDNN_HOME=${CUDNN_HOME:-}
if [ -z "$CUDNN_HOME" ]; then
    for d in /usr/local/cuda /usr; do [ -f "$d/include/cudnn.h" ] && CUDNN_HOME=$d && break; done
fi
if [ -z "$CUDNN_HOME" ]; then
    CUDNN_HOME=$("$TORCH_PYTHON" -c "import nvidia.cudnn, os; print(os.path.dirname(nvidia.cudnn.__file__))" 2>/dev/null ||
                 "$TORCH_PYTHON" -c "import nvidia.cudnn; print(list(nvidia.cudnn.__path__)[0])" 2>/dev/null || true)
fi
if [ -n "$CUDNN_HOME" ]; then
    for d in "$CUDNN_HOME/lib64" "$CUDNN_HOME/lib"; do [ -d "$d" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; done
fi
export CUDNN_HOME
# NCCL: one GPU needs none; build without it (the multi-GPU build is checked by CI's compile check)
MAKE_VARS=(GPU_ARCH="$GPU_ARCH" NVCC="$NVCC" NO_MULTI_GPU=1 ${CUDNN_HOME:+CUDNN_HOME="$CUDNN_HOME"})
# zlib: the trainer's checksums; without zlib.h here, the copy `make gpu-deps` carried in build/deps
if ! echo '#include <zlib.h>' | cc -E -x c - >/dev/null 2>&1 && [ -f build/deps/include/zlib.h ]; then
    MAKE_VARS+=(EXTRA_INC=-Ibuild/deps/include ZLIB_LIB=-l:libz.so.1)
fi
env_report() {
    echo "GPU: $GPU_INFO (arch $GPU_ARCH)"
    echo "nvcc: $($NVCC --version 2>/dev/null | tail -n 1 || echo missing)"
    echo "cuDNN: ${CUDNN_HOME:-not found}; frontend headers: $([ -f build/deps/cudnn_frontend/include/cudnn_frontend.h ] && echo build/deps/cudnn_frontend || echo 'missing (make gpu-carry here, carry build/deps)')"
    echo "torch with CUDA: $([ $HAVE_TORCH = 1 ] && "$TORCH_PYTHON" -c 'import torch; print(torch.__version__)' || echo no)"
    echo "data: $([ -f data/tinyshakespeare/tiny_shakespeare_train.bin ] && echo yes || echo 'missing (make gpu-carry here, carry data)')"
    echo "reference: $([ -f $REF/L2C64H4T64_state.bin ] && echo build/ref || echo 'missing (make gpu-carry here, carry build/ref)')"
    echo "make: ${MAKE_VARS[*]}"
    echo "cores: $(nproc)"
}
env_report >"$LOGS/env.log" 2>&1  # in this shell: it reads this shell's variables
row env 0 passed
NOTES+=("$(sed 's/^/  /' "$LOGS/env.log")")
write_summary

# gpu_step NAME LIMIT CMD...: a step that needs the GPU (skipped in a dry run or without one)
gpu_step() {
    if [ "${GPU_CHECK_PAUSE:-}" = "$1" ]; then sleep 60 & wait $!; fi  # tests: a run to stop from outside
    if [ $HAVE_GPU = 0 ]; then
        skip "$1" "$([ $DRY = 1 ] && echo 'dry run' || echo 'no GPU')"
        return 0
    fi
    step "$@"
}
# need FILE NAME REASON: true when FILE exists, else a skipped row for NAME
need() {
    [ -e "$1" ] && return 0
    skip "$2" "$3"
    return 1
}

# ---------------------------------------------------------------------------------------------
# build: everything in parallel

if [ $DRY = 1 ]; then
    step build 60 make --no-print-directory -n gpu-build "${MAKE_VARS[@]}"  # the plan only
else
    step build 200 make --no-print-directory -j "$(nproc)" gpu-build "${MAKE_VARS[@]}"
fi

# ---------------------------------------------------------------------------------------------
# kernels: the labs' checks, the harness semantics, AdamW at size

labs_check() {
    local rc=0 lab
    "$LAB/harness_selftest" -q || rc=1
    for lab in "$LAB"/*; do
        case $lab in *.d | */harness_selftest) continue ;; esac
        [ -x "$lab" ] || continue
        echo "--- $lab --check"
        "$lab" --check -q || { echo "error: $lab --check failed"; rc=1; }
    done
    return $rc
}
gpu_step labs 90 labs_check
gpu_step adamw-check 60 "$LAB/adamw" --check --gpt2 -s 2 -q
if [ $HAVE_TORCH = 1 ]; then adamw_torch=(--torch); else adamw_torch=(); fi
gpu_step adamw-bench 60 "$LAB/adamw" --bench --gpt2 -r 20 "${adamw_torch[@]}"
if [ -f "$LOGS/adamw-bench.log" ]; then
    NOTES+=("AdamW, GPT-2 124M (vs device copy bandwidth and torch fused):
$(sed -n '/^AdamW bench/,$p' "$LOGS/adamw-bench.log" | head -n 20 | sed 's/^/  /')")
fi
gpu_step muon-bench 60 "$LAB/muon" --bench -r 10
if [ -f "$LOGS/muon-bench.log" ]; then
    NOTES+=("Muon, GPT-2 124M's Newton-Schulz runs (bf16, cuBLASLt batched; the issue's estimate: ~2 ms per step):
$(sed -n '/^muon --bench/,$p' "$LOGS/muon-bench.log" | head -n 10 | sed 's/^/  /')")
fi

# ---------------------------------------------------------------------------------------------
# the trainer against PyTorch

if [ $HAVE_TORCH = 1 ] && [ ! -f "$REF/L2C64H4T64_state.bin" ]; then
    gpu_step ref-small 60 make --no-print-directory ref TORCH_PYTHON="$TORCH_PYTHON"
fi
for p in bf16 fp32 fp16; do
    if need "$REF/L2C64H4T64_state.bin" "test-$p" "no reference: make ref here and carry build/ref"; then
        muon=()
        [ -f "$REF/L2C64H4T64_muon_state.bin" ] && muon=(--muon-state "$REF/L2C64H4T64_muon_state.bin")
        gpu_step "test-$p" 90 "$GB/test_gpt2cu_$p" --model "$REF/L2C64H4T64_model.bin" --state "$REF/L2C64H4T64_state.bin" "${muon[@]}"
    fi
done
d12ref() {
    mkdir -p "$REF"
    [ -f "$REF/d12_state.bin" ] && return 0
    "$TORCH_PYTHON" dev/reference/gpt2_ref.py init --layers 12 --channels 768 --heads 12 --max-seq 1024 --vocab 50257 \
        --seed 42 --out "$REF/d12_init.bin" &&
    "$TORCH_PYTHON" dev/reference/gpt2_ref.py perturb --model "$REF/d12_init.bin" --seed 7 --out "$REF/d12_model.bin" &&
    "$TORCH_PYTHON" dev/reference/gpt2_ref.py state --model "$REF/d12_model.bin" --batch 4 --seq 64 --seed 1 --steps 10 \
        --lr 1e-4 --beta1 0.9 --beta2 0.95 --eps 1e-8 --weight-decay 0.1 --grad-clip 1.0 --out "$REF/d12_state.bin"
}
if [ $HAVE_TORCH = 1 ]; then
    gpu_step ref-d12 120 d12ref
    if [ -f "$REF/d12_state.bin" ]; then
        gpu_step test-bf16-d12 90 "$GB/test_gpt2cu_bf16" --model "$REF/d12_model.bin" --state "$REF/d12_state.bin" --resume-check 0
    fi
else
    skip test-d12 "torch with CUDA not importable"
fi
{
    echo "test_gpt2cu vs PyTorch:"
    grep -hE "^(test_gpt2cu|logits|loss|gradients|step|memory|resume|muon|OK|FAIL)" "$LOGS"/test-*.log 2>/dev/null | head -n 60 | sed 's/^/  /'
} >"$LOGS/tests.txt"
[ -s "$LOGS/tests.txt" ] && [ "$(wc -l <"$LOGS/tests.txt")" -gt 1 ] && NOTES+=("$(cat "$LOGS/tests.txt")")

# ---------------------------------------------------------------------------------------------
# the step: per-kernel profile, a training run, PyTorch's step, every mode

TRAIN=(-e d12 -b 16 -t 1024 -v 0 -s 0 -l 6e-4 -u 10 -c 0.1)
gpu_step profile-d12 60 "$GB/train_gpt2cu_bf16" "${TRAIN[@]}" --profile 1
if [ -f "$LOGS/profile-d12.log" ]; then
    NOTES+=("one training step, GPT-2 124M bf16 B16 T1024, per kernel family (--profile 1):
$(sed -n '/^profile/,$p' "$LOGS/profile-d12.log" | head -n 30 | sed 's/^/  /')")
fi
# Muon's optimizer step at llm.c's batch (-d 524288: 32 micro-steps): its share of the step (target <= 3%)
gpu_step profile-d12-muon 90 "$GB/train_gpt2cu_bf16" "${TRAIN[@]}" -d 524288 --optimizer muon --profile 1
if [ -f "$LOGS/profile-d12-muon.log" ]; then
    NOTES+=("Muon, GPT-2 124M bf16 B16 T1024 -d 524288, one step per kernel family (the optimizer update row: Newton-Schulz included):
$(sed -n '/^profile/,$p' "$LOGS/profile-d12-muon.log" | grep -E "optimizer|step|matmul" | head -n 8 | sed 's/^/  /')")
fi
export NVSMI_LOG="$LOGS/train-d12-memory.csv"
train_d12() {
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 500 >"$NVSMI_LOG" 2>/dev/null &
    local smi=$! rc=0
    "$GB/train_gpt2cu_bf16" -e d12 -b 16 -t 1024 -x 50 -v 25 -s 0 -l 6e-4 -u 10 -c 0.1 || rc=$?
    kill "$smi" 2>/dev/null
    return $rc
}
if need data/tinyshakespeare/tiny_shakespeare_train.bin train-d12 "no data/: make data here and carry data"; then
    gpu_step train-d12 120 train_d12
fi
if [ -f "$LOGS/train-d12.log" ]; then
    steps=$(grep -E "^step" "$LOGS/train-d12.log" | tail -n 40)
    med_ms=$(echo "$steps" | grep -oE "[0-9.]+ ms" | awk '{print $1}' | median)
    med_tok=$(echo "$steps" | grep -oE "[0-9]+ tok/s" | awk '{print $1}' | median)
    med_mfu=$(echo "$steps" | grep -oE "[0-9.]+% [a-z0-9]* ?MFU" | awk '{print $1 + 0}' | median)
    NOTES+=("training GPT-2 124M, bf16, B16 T1024, 50 steps (median of steps 11-50): ${med_ms} ms/step, ${med_tok} tok/s, MFU ${med_mfu}%
$(grep -E "^\| (total|parameters|master|gradients|AdamW|activations)" "$LOGS/train-d12.log" | sed 's/^/  /')
$(grep -E "^(step +50/|val loss)" "$LOGS/train-d12.log" | tail -n 2 | sed 's/^/  /')
  peak device memory (nvidia-smi): $([ -s "$NVSMI_LOG" ] && sort -n "$NVSMI_LOG" | tail -n 1 || echo '?') MiB")
fi
# PRECISION=FP16 (the build for GPUs without bf16; it runs on every GPU from sm_75): the same 50
# steps under its default loss scaling, to set beside bf16's time and loss
train_fp16() {
    "$GB/train_gpt2cu_fp16" -e d12 -b 16 -t 1024 -x 50 -v 25 -s 0 -l 6e-4 -u 10 -c 0.1
}
if need data/tinyshakespeare/tiny_shakespeare_train.bin train-fp16 "no data/: make data here and carry data"; then
    gpu_step train-fp16 120 train_fp16
fi
if [ -f "$LOGS/train-fp16.log" ]; then
    steps=$(grep -E "^step" "$LOGS/train-fp16.log" | tail -n 40)
    NOTES+=("training GPT-2 124M, fp16 (loss scaling), B16 T1024, 50 steps (median of steps 11-50): $(echo "$steps" | grep -oE "[0-9.]+ ms" | awk '{print $1}' | median) ms/step
$(grep -E "^(loss scaling|step +50/|val loss|summary)" "$LOGS/train-fp16.log" | tail -n 4 | sed 's/^/  /')")
fi
if [ $HAVE_TORCH = 1 ]; then
    gpu_step torch-step 90 "$TORCH_PYTHON" dev/reference/torch_step.py -b 16 -t 1024 -n 20
    if [ -f "$LOGS/torch-step.log" ]; then
        NOTES+=("PyTorch, the same step (eager, SDPA flash, fused AdamW): $(grep -E '^torch_step_ms' "$LOGS/torch-step.log" || last_error "$LOGS/torch-step.log")")
    fi
else
    skip torch-step "torch with CUDA not importable"
fi
train_modes() {
    local mode
    for mode in "--attention matmul" "--attention cudnn-fast" "" "--offload 1" "--opt-state bf16" "--opt-state fp16" "--opt-state int8" "--optimizer lion" \
        "--optimizer muon" "--optimizer muon --opt-state bf16" \
        "--optimizer lamb" "--badam 5" "-r 2" "--optimizer lion --opt-state int8" "--offload 1 --badam 5 --opt-state int8"; do
        echo "=== mode: ${mode:-adamw}"
        # shellcheck disable=SC2086  # the mode is several words
        "$GB/train_gpt2cu_bf16" -e d12 -b 16 -t 1024 -x 20 -v 0 -s 0 -l 6e-4 -u 10 -c 0.1 $mode || echo "error: mode '${mode:-adamw}' failed"
    done
}
gpu_step train-modes 150 train_modes
if [ -f "$LOGS/train-modes.log" ]; then
    NOTES+=("modes, GPT-2 124M bf16 B16 T1024 (median ms of steps 6-20; device MiB predicted by the memory model, used per cudaMemGetInfo):
$(awk '/^=== mode:/ { if (m != "") emit(); m = substr($0, 11); n = 0; pred = "?"; used = "?"; next }
       /^\| total/ { pred = $4 }
       /^device memory:/ { used = $7 - $3 }
       /^step/ { for (i = 1; i <= NF; i++) if ($i == "ms") { n++; if (n > 5) t[n - 5] = $(i - 1) } }
       function emit(   k, i, j, x) { k = n - 5; for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (t[j] < t[i]) { x = t[i]; t[i] = t[j]; t[j] = x }
           printf "  %-20s %9s ms  predicted %8s MiB  used %8s MiB\n", m, (k > 0 ? t[int((k + 1) / 2)] : "?"), pred, used }
       END { if (m != "") emit() }' "$LOGS/train-modes.log")")
fi

# sampling and HellaSwag on the device (the bf16 build; its --prompt needs PCRE2/cJSON at build time)
sample_eval() {
    local hs="$LOGS/hellaswag_small.jsonl" i
    : >"$hs"
    for i in 0 1 2 3 4 5 6 7; do
        printf '{"ctx": "The cook took the pan off the stove and %s", "endings": ["put it on the table.", "sang to the moon for an hour.", "the river was cold.", "then %s"], "label": %d}\n' \
            "$i" "$i" $((i % 4)) >>"$hs"
    done
    "$GB/train_gpt2cu_bf16" -e d12 -x 0 -v 0 -b 4 -t 64 -g 32 --prompt "The cook took the pan" --temperature 0 &&
    "$GB/train_gpt2cu_bf16" -e d12 -x 0 -v 0 -s 0 -b 4 -t 64 --hellaswag 1 --hellaswag-file "$hs"
}
if need data/gpt2_tokenizer.bin sample-eval "no data/: make data here and carry data"; then
    gpu_step sample-eval 60 sample_eval
fi
if [ -f "$LOGS/sample-eval.log" ]; then
    NOTES+=("sampling and HellaSwag on the GPU (random d12, so the text and accuracy mean nothing): $(grep -E "^(prompt|hellaswag)" "$LOGS/sample-eval.log" | tr '\n' ';')")
fi

write_summary
echo "$SUMMARY_TEXT"
[ -n "$SUMMARY_FILE" ] && echo "summary: $SUMMARY_FILE"
[ "${#FAILED[@]}" -eq 0 ]

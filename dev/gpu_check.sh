#!/usr/bin/env bash
# dev/gpu_check.sh: every check that needs a GPU, in one prepared run of at most 7 minutes (420 s)
# on one H200 with 16 cores, builds included, that always leaves its summary and logs behind.
#
# The steps, most valuable first, with the seconds each is predicted to take there (the summary
# sets the actual time beside them); they add up to 405 s. A step that cannot run is "skipped"
# with the reason, one that fails is "FAILED" with its last error line, and the rest still run.
#   step               s  what
#   env                5  the GPU, nvcc, cuDNN, torch; the carried paths (dev/gpu_carry.txt); the
#                         carried cuDNN library, kept as it is when its stamp matches its sources
#                         and it loads (else rebuilt beside build-bf16)
#   build-bf16        25  build/gpu/train_gpt2cu_bf16 alone; the rest of `make gpu-build` starts
#                         beside it in the background (nice 19, -j12), and so do the PyTorch
#                         references (torch on the CPU: `make ref`, then GPT-2 124M's)
#   profile-d12       15  the per-kernel time table of one d12 B16 T1024 step (--profile 1)
#   build-rest         5  waits for the background build, so that train-d12 runs on a quiet machine
#   train-d12         20  50 steps of GPT-2 124M, bf16, B16 T1024 on TinyShakespeare: tok/s, MFU, memory
#   refs               0  waits for the CI config's PyTorch reference (`make ref`)
#   test-bf16         10  test_gpt2cu (bf16) against it
#   adamw-check       10  the AdamW lab at GPT-2 124M size: --check
#   adamw-bench       20  --bench against the copy bandwidth and torch.optim.AdamW(fused=True)
#   labs              40  every lab's --check (kernels against float64 CPU references), harness self-tests
#   muon-bench        10  Muon's lab: GPT-2 124M's Newton-Schulz runs, ms and TFLOP/s
#   test-fp32         10  test_gpt2cu (fp32) against PyTorch
#   test-fp16         10  test_gpt2cu (fp16) against PyTorch
#   profile-d12-muon  20  Muon at llm.c's batch (-d 524288): the optimizer's share of the step
#   train-fp16        20  the 50 steps in the FP16 build (loss scaling from 65536)
#   torch-step        25  the same step in PyTorch (dev/reference/torch_step.py)
#   train-modes      120  20 steps in each of 15 attention and optimizer-memory modes: ms, memory
#   sample-eval       15  -x 0: a greedy sample of a prompt and HellaSwag's scoring of a small file in
#                         its format; a decode-only build (no PCRE2/cJSON headers): a plain sample only
#   ref-d12            0  waits for GPT-2 124M's PyTorch reference (made in the background)
#   test-bf16-d12     25  test_gpt2cu (bf16) against it
# The predictions: builds as measured with nvcc 13.0 on a 2-core Xeon (23 s for a trainer, about 5 s
# for a lab, one core each; the cuDNN library, about a minute, is carried instead); a trainer run's
# start (CUDA context, cuBLASLt, cuDNN plans) estimated at 8 s and a d12 B16 T1024 step at 40 ms
# (13 TFLOP at 40% of the H200's 790 TFLOP/s). GPT-2 124M's reference took 102 s on those 2 cores
# (torch 1.13), in the background.
#
# What comes back: $OUT/summary.txt and $OUT/logs.tar.gz (every step's log), both rewritten after
# every step (temp file, then rename); stopped by SIGTERM or SIGINT, the run ends the step in
# flight, writes both and prints the summary on stdout. A run never reaches for the network: the
# trainers get explicit -i/-j/--tokenizer paths (they make no data for those), and curl, wget,
# pip, apt, `python -m pip` and `make data|hellaswag|cudnn-frontend|deps|gpu-carry` are refused
# (the summary's no-network row names any such call).
#
# Prepare here, then carry the paths in dev/gpu_carry.txt (a device run takes at most 8):
#   make gpu-carry   makes them (data, build/deps, the cuDNN library and its stamp) and prints
#                    them with their size (with the tracked files: at most 48 MiB)
#   on the GPU:      OUT=/some/dir dev/gpu_check.sh
# It ends by itself within the budget and a few seconds (each step's limit is cut to what is left);
# an outer time limit of 450 s or more lets it.
#
# usage: dev/gpu_check.sh [--dry-run]
#   --dry-run   rehearse without a GPU (CI: make test-gpu-check): every step's prerequisites are
#               checked (a carried path missing is a failure, the builds' `make -n` must resolve
#               without fetching or rebuilding the carried library, the references' `make -n ref`
#               too); the steps that need a GPU are "ready"; trainer runs are checked with the
#               CPU harness builds' --dry-run 1 when GPU_CHECK_EMU names their folder (their flags)
# env: OUT (where summary.txt and logs.tar.gz go; default a new folder in /tmp), GPU_ARCH (default:
#      the GPU's), NVCC, TORCH_PYTHON (default python3), GPU_CHECK_BUDGET (seconds, default 420),
#      GPU_CHECK_EMU (--dry-run: the folder of train_gpt2cu_emu_bf16 and _fp16),
#      GPU_CHECK_FAIL / GPU_CHECK_PAUSE (a step name: that step fails on purpose / waits a minute
#      first), GPU_CHECK_PLANT=fetch (a step that calls `make data`) and GPU_CHECK_DECODE_ONLY=1
#      (the steps as for a decode-only build): this script's tests, dev/test/test_gpu_check.py
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
OUT=${OUT:-$(mktemp -d /tmp/gpu_check_out.XXXXXX)}
mkdir -p "$OUT" || exit 1
LOGS=$(mktemp -d /tmp/gpu_check_logs.XXXXXX) || exit 1    # every log; archived into $OUT/logs.tar.gz
GUARD=$(mktemp -d /tmp/gpu_check_guard.XXXXXX) || exit 1  # the refusing commands, first on PATH
export TORCH_PYTHON=${TORCH_PYTHON:-python3}
NVCC=${NVCC:-nvcc}
BUDGET=${GPU_CHECK_BUDGET:-420}
START=$(date +%s)
# (exported: steps run shell functions in a child bash)
export LAB=build/cuda-gpu GB=build/gpu REF=build/ref LOGS
LIB=build/libleanstep_cudnn.so
STAMP=build/gpu_carry.stamp
# explicit paths: a trainer makes no data for a path it was given (llmc/run/default_data.h)
export DATA_TRAIN=data/tinyshakespeare/tiny_shakespeare_train.bin DATA_VAL=data/tinyshakespeare/tiny_shakespeare_val.bin
export TOKENIZER=data/gpt2_tokenizer.bin
export DATA_ARGS="-i $DATA_TRAIN -j $DATA_VAL --tokenizer $TOKENIZER"
# the background build's jobs: the cores less four for the timed steps beside it
CORES=$(nproc)
BG_JOBS=$((CORES > 5 ? CORES - 4 : 1))

# each step's predicted seconds (the banner's table)
declare -A PRED=([env]=5 [build-bf16]=25 [profile-d12]=15 [build-rest]=5 [train-d12]=20 [refs]=0 [test-bf16]=10
                 [adamw-check]=10 [adamw-bench]=20 [labs]=40 [muon-bench]=10 [test-fp32]=10 [test-fp16]=10
                 [profile-d12-muon]=20 [train-fp16]=20 [torch-step]=25 [train-modes]=120 [sample-eval]=15
                 [ref-d12]=0 [test-bf16-d12]=25)
PRED_TOTAL=0
for k in "${!PRED[@]}"; do PRED_TOTAL=$((PRED_TOTAL + PRED[$k])); done
FAILED=()
ROWS=()
NOTES=()
GPU_INFO="none"
CARRIED="?"

elapsed() { echo $(($(date +%s) - START)); }

# ---------------------------------------------------------------------------------------------
# what comes back: the summary and one archive of the logs, each replaced whole

# the table: a header, one row per step, the verdict
summary_table() {
    local r
    echo "leanstep dev/gpu_check.sh$([ $DRY = 1 ] && echo ' (dry run)'), $(date -u '+%Y-%m-%d %H:%M UTC'); tree: $CARRIED"
    echo "GPU: $GPU_INFO; built for ${GPU_ARCH:-?}; $(nproc) cores; $(elapsed) s of a ${BUDGET} s budget (predicted: $PRED_TOTAL s)"
    echo
    printf '%-17s %5s %6s  %s\n' step pred actual status
    for r in "${ROWS[@]}"; do echo "$r"; done
    echo
    if [ "${#FAILED[@]}" -eq 0 ]; then echo "no step failed"; else echo "FAILED: ${FAILED[*]}"; fi
}
# what the steps measured
summary_notes() {
    local r
    for r in "${NOTES[@]}"; do echo "$r"; echo; done
}
write_summary() {
    {
        summary_table
        echo
        summary_notes
        echo "logs: every step's in logs.tar.gz beside this file"
    } >"$OUT/summary.txt.tmp"
    mv -f "$OUT/summary.txt.tmp" "$OUT/summary.txt"
    write_archive
}
# On stdout the table comes last: a device run returns the output's last 12,000 characters.
print_summary() {
    summary_notes
    summary_table
    echo "summary: $OUT/summary.txt; logs: $OUT/logs.tar.gz"
}
# (the device returns files up to 16 MiB: past 15 MiB, each log's last MiB)
write_archive() {
    [ -f "$GUARD/refused.log" ] && cp -f "$GUARD/refused.log" "$LOGS/refused.log"
    tar -czf "$OUT/logs.tar.gz.tmp" -C "$LOGS" . 2>/dev/null || return 0
    if [ "$(stat -c %s "$OUT/logs.tar.gz.tmp")" -gt 15728640 ]; then
        local cut f
        cut=$(mktemp -d /tmp/gpu_check_cut.XXXXXX)
        for f in "$LOGS"/*; do tail -c 1048576 "$f" >"$cut/${f##*/}"; done
        tar -czf "$OUT/logs.tar.gz.tmp" -C "$cut" . 2>/dev/null
        rm -rf "$cut"
    fi
    mv -f "$OUT/logs.tar.gz.tmp" "$OUT/logs.tar.gz"
}

# row NAME SECONDS STATUS: one line of the table (FAILED... also lists NAME as failed)
row() {
    STEP_NOTE='' CURRENT=''
    [ -e "$LOGS/$1.log" ] || echo "$1: $3" >"$LOGS/$1.log"
    local pred=-
    [ -n "${PRED[$1]:-}" ] && pred=${PRED[$1]}s
    ROWS+=("$(printf '%-17s %5s %5ss  %s' "$1" "$pred" "$2" "$3")")
    case $3 in FAILED*) FAILED+=("$1") ;; esac
    write_summary
}
skip() { row "$1" 0 "skipped ($2)"; }

# Stopped from outside (a time limit, Ctrl-C): the step in flight and the background jobs are
# ended, and the summary says so, also on stdout (where a device run's output tail shows it).
CHILD=
CURRENT=  # the step in flight
declare -A BG_PID=() BG_LIMIT=() RAN=()
on_signal() {
    local p
    [ -n "$CHILD" ] && kill -TERM "$CHILD" 2>/dev/null
    for p in "${BG_PID[@]}"; do kill -TERM "$p" 2>/dev/null; done
    row interrupted "$(elapsed)" "FAILED (signal${CURRENT:+ during $CURRENT}): it and the later steps did not finish"
    print_summary
    cleanup
    exit 1
}
cleanup() { rm -rf "$LOGS" "$GUARD"; }
trap on_signal INT TERM

# as_command CMD...: sets CMD_ARGS to CMD, or for a shell function to a child bash running it
as_command() {
    CMD_ARGS=("$@")
    if declare -F "$1" >/dev/null; then
        # shellcheck disable=SC2163  # exports the function named by $1
        export -f "$1"
        CMD_ARGS=(bash -c '"$@"' _ "$@")
    fi
}

# step NAME LIMIT CMD...: runs CMD (a command or a shell function) with a time limit (cut to what
# is left of the budget), its output in $LOGS/NAME.log; one row: passed / FAILED / skipped.
# STEP_NOTE, when set, is added to a passed row.
STEP_NOTE=
step() {
    local name=$1 limit=$2
    shift 2
    local left=$((BUDGET - $(elapsed)))
    if [ "$left" -lt 10 ]; then skip "$name" "time budget spent"; STEP_NOTE=; return 0; fi
    [ "$limit" -gt "$left" ] && limit=$left
    local t0 rc=0
    t0=$(date +%s)
    RAN[$name]=1
    CURRENT=$name
    echo "== $name ($(elapsed) s): $*"
    if [ "${GPU_CHECK_FAIL:-}" = "$name" ]; then
        echo "error: $name fails on purpose (GPU_CHECK_FAIL=$name)" >"$LOGS/$name.log"
        rc=1
    else
        as_command "$@"
        timeout --kill-after=5 "$limit" "${CMD_ARGS[@]}" >"$LOGS/$name.log" 2>&1 &
        CHILD=$!
        wait "$CHILD" || rc=$?
        CHILD=
    fi
    local dt=$(($(date +%s) - t0)) status="passed${STEP_NOTE:+ ($STEP_NOTE)}"
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        status="FAILED (timeout ${limit}s): $(last_error "$LOGS/$name.log")"
    elif [ "$rc" -ne 0 ]; then
        status="FAILED (exit $rc): $(last_error "$LOGS/$name.log")"
    fi
    STEP_NOTE=
    tail -n 3 "$LOGS/$name.log" | sed 's/^/   | /'
    row "$name" "$dt" "$status"
    return 0
}

# ran NAME: the step ran here (its log holds what it measured)
ran() { [ -n "${RAN[$1]:-}" ] && [ $DRY = 0 ]; }

# The last line of a log that looks like an error (else its last line), cut to 160 characters.
last_error() {
    local line
    line=$(grep -iE "error|fail|mismatch|not found|abort|fatal|exceed|refused" "$1" 2>/dev/null | tail -n 1)
    [ -z "$line" ] && line=$(tail -n 1 "$1" 2>/dev/null)
    echo "${line:0:160}"
}

# median of the numbers on stdin
median() { sort -n | awk '{a[NR] = $1} END {if (NR) print a[int((NR + 1) / 2)]; else print "?"}'; }

# bg_start NAME LIMIT CMD...: CMD in the background (nice 19), output in $LOGS/NAME.log; bg_wait
# NAME LIMIT: one row for it once it ends (the seconds waited; killed past LIMIT).
bg_start() {
    local name=$1 limit=$2
    shift 2
    as_command "$@"
    echo "== $name in the background ($(elapsed) s): $*"
    # shellcheck disable=SC2016  # the child bash's own expansions
    timeout --kill-after=5 "$limit" nice -n 19 bash -c \
        't0=$(date +%s); "$@"; rc=$?; echo "== exit $rc after $(($(date +%s) - t0)) s"; exit $rc' _ "${CMD_ARGS[@]}" \
        >"$LOGS/$name.log" 2>&1 &
    BG_PID[$name]=$!
    BG_LIMIT[$name]=$limit
}
bg_running() { [ -n "${BG_PID[$1]:-}" ] && kill -0 "${BG_PID[$1]}" 2>/dev/null; }
bg_wait() {
    local name=$1 limit=$2 t0 rc=0 status
    t0=$(date +%s)
    CURRENT=$name
    while bg_running "$name" && [ $(($(date +%s) - t0)) -lt "$limit" ] && [ "$(elapsed)" -lt "$BUDGET" ]; do
        sleep 0.5
    done
    if bg_running "$name"; then
        kill -TERM "${BG_PID[$name]}" 2>/dev/null
        wait "${BG_PID[$name]}" 2>/dev/null
        status="FAILED (not done after waiting ${limit} s: ended): $(last_error "$LOGS/$name.log")"
    else
        wait "${BG_PID[$name]}" || rc=$?
        if [ "$rc" -eq 0 ]; then
            status="passed (background, $(sed -n 's/^== exit 0 after \([0-9]*\) s$/\1/p' "$LOGS/$name.log") s in all)"
        elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
            status="FAILED (timeout: ended after ${BG_LIMIT[$name]} s in all): $(last_error "$LOGS/$name.log")"
        else
            status="FAILED (exit $rc): $(last_error "$LOGS/$name.log")"
        fi
    fi
    unset "BG_PID[$name]"
    row "$name" $(($(date +%s) - t0)) "$status"
}

# ---------------------------------------------------------------------------------------------
# no network: the commands that fetch or install are refused (and listed in refused.log)

export LEANSTEP_DATA_MIRROR="$GUARD/no-mirror"  # (a `make data` that got through fails reading it)
refuse_script() {  # refuse_script NAME TEST: $GUARD/NAME refuses when the shell test TEST holds
    local real
    real=$(command -v "$1" || true)
    {
        echo '#!/bin/sh'
        echo "if $2; then"
        echo "    echo \"$1 \$*\" >>'$GUARD/refused.log'"
        echo "    echo \"gpu_check.sh: refused: $1 \$* (no network and no installs in this run)\" >&2"
        echo '    exit 1'
        echo 'fi'
        if [ -n "$real" ]; then echo "exec '$real' \"\$@\""; else echo "echo '$1: not installed' >&2; exit 127"; fi
    } >"$GUARD/$1"
    chmod +x "$GUARD/$1"
}
for tool in curl wget pip pip3 apt apt-get; do refuse_script "$tool" true; done
for tool in python3 python; do refuse_script "$tool" 'case " $* " in *" -m pip "*) true ;; *) false ;; esac'; done
# make: refused for its targets that fetch (data, hellaswag, cudnn-frontend) or install (deps)
cat >"$GUARD/make" <<EOF
#!/bin/sh
for a in "\$@"; do
    case \$a in
        data | hellaswag | cudnn-frontend | deps | gpu-carry)
            echo "make \$*" >>'$GUARD/refused.log'
            echo "gpu_check.sh: refused: make \$* (no network and no installs in this run)" >&2
            exit 1 ;;
    esac
done
exec '$(command -v make)' "\$@"
EOF
chmod +x "$GUARD/make"
export PATH="$GUARD:$PATH"

# ---------------------------------------------------------------------------------------------
# env: what this machine has, and what was carried to it

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
# torch: on the CPU for the references, with CUDA for the PyTorch timings
TORCH_VERSION=$("$TORCH_PYTHON" -c "import torch; print(torch.__version__, int(torch.cuda.is_available()))" 2>/dev/null)
TORCH_CPU=0 TORCH_CUDA=0
[ -n "$TORCH_VERSION" ] && TORCH_CPU=1
[ "${TORCH_VERSION##* }" = 1 ] && TORCH_CUDA=1
TORCH_VERSION=${TORCH_VERSION% *}
# cuDNN: the toolkit's, else the one PyTorch's wheels bring (include/ and lib/ side by side)
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
CUDNN_HOME=${CUDNN_HOME:-}
if [ -z "$CUDNN_HOME" ]; then
    for d in "$CUDA_HOME" /usr; do [ -f "$d/include/cudnn.h" ] && CUDNN_HOME=$d && break; done
fi
if [ -z "$CUDNN_HOME" ]; then
    CUDNN_HOME=$("$TORCH_PYTHON" -c "import nvidia.cudnn, os; print(os.path.dirname(nvidia.cudnn.__file__))" 2>/dev/null ||
                 "$TORCH_PYTHON" -c "import nvidia.cudnn; print(list(nvidia.cudnn.__path__)[0])" 2>/dev/null || true)
fi
for d in "$CUDA_HOME/lib64" ${CUDNN_HOME:+"$CUDNN_HOME/lib64" "$CUDNN_HOME/lib"}; do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
done
export CUDNN_HOME
# NCCL: one GPU needs none; build without it (the multi-GPU build is checked by CI's compile check)
MAKE_VARS=(GPU_ARCH="$GPU_ARCH" NVCC="$NVCC" NO_MULTI_GPU=1 ${CUDNN_HOME:+CUDNN_HOME="$CUDNN_HOME"})
# zlib: the trainer's checksums; without zlib.h here, the copy `make gpu-carry` carried in build/deps
if ! echo '#include <zlib.h>' | cc -E -x c - >/dev/null 2>&1 && [ -f build/deps/include/zlib.h ]; then
    MAKE_VARS+=(EXTRA_INC=-Ibuild/deps/include ZLIB_LIB=-l:libz.so.1)
fi
# the carried paths
MISSING=()
while read -r p; do [ -e "$p" ] || MISSING+=("$p"); done < <(bash dev/gpu_carry.sh list)
[ -f "$STAMP" ] && CARRIED="$(head -n 1 "$STAMP") (build/gpu_carry.stamp)"
# The carried cuDNN library: kept while its stamp matches its sources and it loads here; then it
# is made newer than its sources (dev/cuda's make compares times) and every make gets -o: a copy
# that arrived looking older than its sources is not rebuilt.
LIB_OK=0
lib_check() {
    [ -f "$LIB" ] || { echo "$LIB missing"; return 1; }
    [ -f "$STAMP" ] || { echo "$STAMP missing"; return 1; }
    local want have
    want=$(sed -n 's/^libleanstep_cudnn.so //p' "$STAMP")
    have=$(bash dev/gpu_carry.sh hash)
    [ "$want" = "$have" ] || { echo "its sources changed since it was built (stamp ${want:0:12}, sources ${have:0:12})"; return 1; }
    "$TORCH_PYTHON" -c 'import ctypes, sys; ctypes.CDLL(sys.argv[1])' "$LIB" >"$LOGS/lib-load.log" 2>&1 ||
        { echo "it does not load here: $(tail -n 1 "$LOGS/lib-load.log")"; return 1; }
}
LIB_WHY=$(lib_check) && LIB_OK=1
OLD=()
if [ $LIB_OK = 1 ]; then touch "$LIB"; OLD=(-o "$LIB"); fi
export LIB LIB_OK LIB_READY="$GUARD/lib.ready"
# the builds: the bf16 trainer (and the library when it is not kept) in front, the rest behind
FG_TARGETS=("$GB/train_gpt2cu_bf16")
[ $LIB_OK = 0 ] && FG_TARGETS+=("$LIB")
export BG_BINS="$GB/test_gpt2cu_bf16 $GB/train_gpt2cu_fp32 $GB/test_gpt2cu_fp32 $GB/train_gpt2cu_fp16 $GB/test_gpt2cu_fp16"
export MAKE_ARGS="--no-print-directory ${OLD[*]} ${MAKE_VARS[*]}"  # (no value here has a space)
export BG_JOBS
# --prompt and --hellaswag need the encoder, which the build has when PCRE2's and cJSON's headers
# are here (the Makefile's decision, read from its command line)
ENCODER=0
make -n -B --no-print-directory "${OLD[@]}" "${MAKE_VARS[@]}" "$GB/train_gpt2cu_bf16" 2>/dev/null | grep -q -- -DLS_ENCODE && ENCODER=1
[ "${GPU_CHECK_DECODE_ONLY:-}" = 1 ] && ENCODER=0  # tests: the decode-only path where the encoder is
export ENCODER

env_report() {
    echo "GPU: $GPU_INFO (arch $GPU_ARCH)"
    echo "nvcc: $($NVCC --version 2>/dev/null | tail -n 1 || echo missing)"
    local h=${CUDNN_HOME:-/none}/include/cudnn_version.h
    echo "cuDNN: ${CUDNN_HOME:-not found}$([ -f "$h" ] && awk '/#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) / {v = v (v == "" ? " " : ".") $3} END {print v}' "$h")"
    echo "the cuDNN library: $([ $LIB_OK = 1 ] && echo "carried, its stamp matches its sources, it loads" || echo "rebuilt here: $LIB_WHY")"
    echo "torch: ${TORCH_VERSION:-not importable} ($TORCH_PYTHON; CUDA: $([ $TORCH_CUDA = 1 ] && echo yes || echo no))"
    echo "encoder (--prompt, --hellaswag): $([ $ENCODER = 1 ] && echo yes || echo 'no: decode-only build (no PCRE2/cJSON headers)')"
    echo "carried: $([ ${#MISSING[@]} = 0 ] && echo 'every path in dev/gpu_carry.txt' || echo "MISSING ${MISSING[*]}"); ${CARRIED}"
    [ -f "$STAMP" ] && sed -n '2p' "$STAMP"
    echo "make: ${MAKE_ARGS}"
    echo "cores: $CORES (background build: -j$BG_JOBS)"
}
env_report >"$LOGS/env.log" 2>&1
NOTES+=("$(sed 's/^/  /' "$LOGS/env.log")")
if [ ${#MISSING[@]} -gt 0 ]; then
    row env 0 "FAILED (carried path(s) missing: ${MISSING[*]}; make gpu-carry, then carry dev/gpu_carry.txt's paths)"
elif [ $DRY = 1 ] && [ $LIB_OK = 0 ]; then
    row env 0 "FAILED (the carried cuDNN library would be rebuilt: $LIB_WHY; make gpu-carry)"
else
    row env "$(elapsed)" "passed$([ $LIB_OK = 0 ] && echo " (the cuDNN library is rebuilt: $LIB_WHY)")"
fi

# ---------------------------------------------------------------------------------------------
# prerequisites: a step whose prerequisite is absent gets a skipped row with the reason. In a dry
# run, what the carry or the build plan should provide and does not is a failure instead (the
# GPU machine would skip it), and the steps that need a GPU are "ready".

# planned FILE: a build or reference command in the dry run's plans writes FILE (or it exists)
planned() {
    [ -e "$1" ] || grep -qE -- "(-o|--out) (\.\./\.\./)?$1( |$)" "$LOGS"/plan-*.log 2>/dev/null
}
# needs NAME REQ...: REQ is file:PATH (carried), built:PATH (by the builds), ref:PATH (by the
# references) or torch (with CUDA)
needs() {
    local name=$1 req what
    shift
    for req in "$@"; do
        what=${req#*:}
        case $req in
            file:*) [ -e "$what" ] && continue
                    unmet "$name" "$what missing (carried: make gpu-carry)"; return 1 ;;
            built:*) if [ $DRY = 1 ]; then planned "$what" && continue
                     else [ -x "$what" ] && continue; fi
                     unmet "$name" "$what not built (build logs)"; return 1 ;;
            ref:*) if [ $DRY = 1 ]; then
                       [ $TORCH_CPU = 0 ] && { skip "$name" "torch not importable: no reference"; return 1; }
                       planned "$what" && continue
                   else [ -f "$what" ] && continue; fi
                   unmet "$name" "no PyTorch reference $what (refs logs)"; return 1 ;;
            torch) [ $TORCH_CUDA = 1 ] && continue
                   [ $DRY = 1 ] && [ $TORCH_CPU = 1 ] && continue
                   skip "$name" "torch with CUDA not importable"; return 1 ;;
        esac
    done
}
unmet() {
    if [ $DRY = 1 ]; then row "$1" 0 "FAILED (dry run: the GPU machine would skip it: $2)"; else skip "$1" "$2"; fi
}

# gpu_step NAME LIMIT CMD...: a step that needs the GPU. A dry run checks trainer runs with the
# CPU harness builds' --dry-run when GPU_CHECK_EMU is set (see TRAIN_* below); else "ready".
DRY_RUNNABLE=" profile-d12 train-d12 profile-d12-muon train-fp16 train-modes sample-eval "
gpu_step() {
    if [ "${GPU_CHECK_PAUSE:-}" = "$1" ]; then  # tests: a run to stop from outside
        CURRENT=$1
        sleep 60 &
        CHILD=$!
        wait "$CHILD"
        CHILD=
    fi
    if [ $DRY = 1 ]; then
        if [ -n "${GPU_CHECK_EMU:-}" ] && [[ $DRY_RUNNABLE == *" $1 "* ]]; then
            STEP_NOTE="${STEP_NOTE:+$STEP_NOTE; }dry run: the harness trainer's --dry-run took every flag"
            step "$@"
        else
            echo "dry run: on the GPU: ${*:3}" >"$LOGS/$1.log"
            row "$1" 0 "ready (dry run: prerequisites present)"
        fi
        return 0
    fi
    if [ $HAVE_GPU = 0 ]; then skip "$1" "no GPU"; return 0; fi
    step "$@"
}
# The trainers. A dry run with GPU_CHECK_EMU gives each run to the harness build with --dry-run 1
# (every flag parsed and checked against the others, the memory table printed), its model cut to
# one layer of 64 channels (L1C64H1: the same T and vocabulary, in milliseconds).
export TRAIN_BF16="$GB/train_gpt2cu_bf16" TRAIN_FP16="$GB/train_gpt2cu_fp16"
if [ $DRY = 1 ] && [ -n "${GPU_CHECK_EMU:-}" ]; then
    for p in bf16 fp16; do
        # shellcheck disable=SC2016  # the expansions are the shim's own
        {
            echo '#!/usr/bin/env bash'
            echo 'args=(); e=0'
            echo 'for a in "$@"; do [ $e = 1 ] && a=L1C64H1; [ "$a" = -e ] && e=1 || e=0; args+=("$a"); done'
            printf 'exec %q "${args[@]}" --dry-run 1\n' "$GPU_CHECK_EMU/train_gpt2cu_emu_$p"
        } >"$GUARD/train_dry_$p"
        chmod +x "$GUARD/train_dry_$p"
    done
    TRAIN_BF16="$GUARD/train_dry_bf16" TRAIN_FP16="$GUARD/train_dry_fp16"
fi

if [ "${GPU_CHECK_PLANT:-}" = fetch ]; then  # tests: a step that reaches for the network
    planted_fetch() { make --no-print-directory data; }
    step planted-fetch 30 planted_fetch
fi

# ---------------------------------------------------------------------------------------------
# the builds: the bf16 trainer in front; the rest of gpu-build and the references behind it

# plan NAME TARGETS...: `make -n` of the targets, which must not fetch or rebuild the carried library
# (the background's plan never builds the library: the front builds it when it is not kept)
plan() {
    local name=$1 log="$LOGS/plan-$1.log"
    shift
    # shellcheck disable=SC2086  # MAKE_ARGS: words
    make -n $MAKE_ARGS "$@" >"$log" 2>&1 || { cat "$log"; echo "error: make -n $* failed"; return 1; }
    echo "make -n $*: $(grep -cE '(^| )(nvcc|g\+\+|c\+\+|gcc|cc) ' "$log") compile commands"
    if grep -nE "prepare_data|get_cudnn_frontend|pip[0-9]* (download|install)|curl |wget |apt(-get)? install" "$log"; then
        echo "error: the plan fetches (above)"
        return 1
    fi
    if { [ "$LIB_OK" = 1 ] || [ "$name" = rest ]; } && grep -nE "cudnn_att\.pic\.o|-o (\.\./\.\./)?build/libleanstep_cudnn\.so( |$)" "$log"; then
        echo "error: the plan rebuilds the carried cuDNN library (above)"
        return 1
    fi
}
# (in front; the library, when it is not kept, beside it: both before the labs need it; -k: one
# failing does not stop the other)
build_front() {
    # shellcheck disable=SC2086  # MAKE_ARGS: words
    make -k -j2 $MAKE_ARGS "$@"
    local rc=$?
    touch "$LIB_READY"
    return $rc
}
# (behind, nice: the trainers and tests of every precision, then the labs, which need the library;
# never the library itself, which the front builds when it is not kept: -o)
build_rest() {
    # shellcheck disable=SC2086  # words
    if [ "$LIB_OK" = 1 ]; then
        make -k -j"$BG_JOBS" $MAKE_ARGS -o "$LIB" $BG_BINS gpu-lab-build
    else
        local rc=0
        make -k -j"$BG_JOBS" $MAKE_ARGS -o "$LIB" $BG_BINS || rc=$?
        while [ ! -e "$LIB_READY" ]; do sleep 1; done
        make -k -j"$BG_JOBS" $MAKE_ARGS -o "$LIB" gpu-lab-build || rc=$?
        return $rc
    fi
}
# the references (torch on the CPU, a few threads): the CI config's, then GPT-2 124M's
refs_small() { OMP_NUM_THREADS=2 make --no-print-directory ref TORCH_PYTHON="$TORCH_PYTHON"; }
refs_d12() {
    mkdir -p "$REF"
    [ -f "$REF/d12_state.bin" ] && return 0
    export OMP_NUM_THREADS=4
    "$TORCH_PYTHON" dev/reference/gpt2_ref.py init --layers 12 --channels 768 --heads 12 --max-seq 1024 --vocab 50257 \
        --seed 42 --out "$REF/d12_init.bin" &&
    "$TORCH_PYTHON" dev/reference/gpt2_ref.py perturb --model "$REF/d12_init.bin" --seed 7 --out "$REF/d12_model.bin" &&
    "$TORCH_PYTHON" dev/reference/gpt2_ref.py state --model "$REF/d12_model.bin" --batch 4 --seq 64 --seed 1 --steps 10 \
        --lr 1e-4 --beta1 0.9 --beta2 0.95 --eps 1e-8 --weight-decay 0.1 --grad-clip 1.0 --out "$REF/d12_state.bin.tmp" &&
    mv "$REF/d12_state.bin.tmp" "$REF/d12_state.bin"
}

if [ $DRY = 1 ]; then
    step build-bf16 60 plan bf16 "${FG_TARGETS[@]}"
else
    if [ $TORCH_CPU = 1 ]; then
        bg_start refs 200 refs_small
        bg_start ref-d12 400 refs_d12
    fi
    bg_start build-rest 400 build_rest
    step build-bf16 200 build_front "${FG_TARGETS[@]}"
    touch "$LIB_READY"  # (also when the front build was ended: the labs then build without waiting)
fi

# ---------------------------------------------------------------------------------------------
# the step: its per-kernel profile and 50 timed steps, first

TRAIN="-e d12 -b 16 -t 1024 -v 0 -s 0 -l 6e-4 -u 10 -c 0.1"
export TRAIN
profile_d12() {
    # shellcheck disable=SC2086  # flag lists
    "$TRAIN_BF16" $TRAIN $DATA_ARGS --profile 1
}
if needs profile-d12 "file:$DATA_TRAIN" "built:$GB/train_gpt2cu_bf16"; then
    bg_running build-rest && STEP_NOTE="the background build ran beside it"
    gpu_step profile-d12 60 profile_d12
fi
if ran profile-d12; then
    NOTES+=("one training step, GPT-2 124M bf16 B16 T1024, per kernel family (--profile 1):
$(sed -n '/^profile/,$p' "$LOGS/profile-d12.log" | head -n 30 | sed 's/^/  /')")
fi

if [ $DRY = 1 ]; then
    # shellcheck disable=SC2086  # BG_BINS: words
    step build-rest 60 plan rest -o "$LIB" $BG_BINS gpu-lab-build
elif [ -n "${BG_PID[build-rest]:-}" ]; then
    bg_wait build-rest 150
fi

export NVSMI_LOG="$LOGS/train-d12-memory.csv"
train_d12() {
    local smi="" rc=0
    if command -v nvidia-smi >/dev/null; then
        nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 500 >"$NVSMI_LOG" 2>/dev/null &
        smi=$!
    fi
    # shellcheck disable=SC2086  # flag lists
    "$TRAIN_BF16" -e d12 -b 16 -t 1024 -x 50 -v 25 -s 0 -l 6e-4 -u 10 -c 0.1 $DATA_ARGS || rc=$?
    [ -n "$smi" ] && kill "$smi" 2>/dev/null
    return $rc
}
if needs train-d12 "file:$DATA_TRAIN" "file:$DATA_VAL" "built:$GB/train_gpt2cu_bf16"; then
    bg_running ref-d12 && STEP_NOTE="the d12 reference (torch, CPU, nice 19) ran beside it"
    gpu_step train-d12 120 train_d12
fi
if ran train-d12; then
    steps=$(grep -E "^step" "$LOGS/train-d12.log" | tail -n 40)
    med_ms=$(echo "$steps" | grep -oE "[0-9.]+ ms" | awk '{print $1}' | median)
    med_tok=$(echo "$steps" | grep -oE "[0-9]+ tok/s" | awk '{print $1}' | median)
    med_mfu=$(echo "$steps" | grep -oE "[0-9.]+% [a-z0-9]* ?MFU" | awk '{print $1 + 0}' | median)
    NOTES+=("training GPT-2 124M, bf16, B16 T1024, 50 steps (median of steps 11-50): ${med_ms} ms/step, ${med_tok} tok/s, MFU ${med_mfu}%
$(grep -E "^\| (total|parameters|master|gradients|AdamW|activations)" "$LOGS/train-d12.log" | sed 's/^/  /')
$(grep -E "^(step +50/|val loss)" "$LOGS/train-d12.log" | tail -n 2 | sed 's/^/  /')
  peak device memory (nvidia-smi): $([ -s "$NVSMI_LOG" ] && sort -n "$NVSMI_LOG" | tail -n 1 || echo '?') MiB")
fi

# ---------------------------------------------------------------------------------------------
# the trainer against PyTorch (the CI config), the optimizer labs, every lab's check

if [ $DRY = 1 ]; then
    if [ $TORCH_CPU = 1 ]; then step refs 30 plan refs ref TORCH_PYTHON="$TORCH_PYTHON"
    else skip refs "torch not importable: no reference"; fi
elif [ -n "${BG_PID[refs]:-}" ]; then
    bg_wait refs 60
else
    skip refs "torch not importable ($TORCH_PYTHON)"
fi
CI_MODEL="$REF/L2C64H4T64_model.bin" CI_STATE="$REF/L2C64H4T64_state.bin" CI_MUON="$REF/L2C64H4T64_muon_state.bin"
test_cu() {  # test_cu PRECISION: test_gpt2cu against the CI config's reference, Muon's steps too
    "$GB/test_gpt2cu_$1" --model "$CI_MODEL" --state "$CI_STATE" --muon-state "$CI_MUON"
}
export CI_MODEL CI_STATE CI_MUON
if needs test-bf16 "built:$GB/test_gpt2cu_bf16" "ref:$CI_STATE" "ref:$CI_MUON"; then
    gpu_step test-bf16 90 test_cu bf16
fi

if needs adamw-check "built:$LAB/adamw"; then
    gpu_step adamw-check 60 "$LAB/adamw" --check --gpt2 -s 2 -q
fi
if [ $TORCH_CUDA = 1 ]; then adamw_torch=(--torch); else adamw_torch=(); fi
if needs adamw-bench "built:$LAB/adamw"; then
    gpu_step adamw-bench 60 "$LAB/adamw" --bench --gpt2 -r 20 "${adamw_torch[@]}"
fi
if ran adamw-bench; then
    NOTES+=("AdamW, GPT-2 124M (vs device copy bandwidth and torch fused):
$(sed -n '/^AdamW bench/,$p' "$LOGS/adamw-bench.log" | head -n 20 | sed 's/^/  /')")
fi

labs_check() {
    local rc=0 lab
    "$LAB/harness_selftest" -q || rc=1
    for lab in "$LAB"/*; do
        case $lab in *.d | */harness_selftest) continue ;; esac
        [ -f "$lab" ] || continue  # (parts/: the labs' objects)
        [ -x "$lab" ] || continue
        echo "--- $lab --check"
        "$lab" --check -q || { echo "error: $lab --check failed"; rc=1; }
    done
    return $rc
}
if needs labs "built:$LAB/harness_selftest" "built:$LAB/attention" "built:$LAB/muon_fp16"; then
    gpu_step labs 90 labs_check
fi
if needs muon-bench "built:$LAB/muon"; then
    gpu_step muon-bench 60 "$LAB/muon" --bench -r 10
fi
if ran muon-bench; then
    NOTES+=("Muon, GPT-2 124M's Newton-Schulz runs (bf16, cuBLASLt batched; estimate ~2 ms per step):
$(sed -n '/^muon --bench/,$p' "$LOGS/muon-bench.log" | head -n 10 | sed 's/^/  /')")
fi
for p in fp32 fp16; do
    if needs "test-$p" "built:$GB/test_gpt2cu_$p" "ref:$CI_STATE" "ref:$CI_MUON"; then
        gpu_step "test-$p" 90 test_cu "$p"
    fi
done
{
    echo "test_gpt2cu vs PyTorch:"
    grep -hE "^(test_gpt2cu|logits|loss|gradients|step|memory|resume|muon|OK|FAIL)" "$LOGS"/test-*.log 2>/dev/null | head -n 25 | sed 's/^/  /'
} >"$LOGS/tests.txt"
[ "$(wc -l <"$LOGS/tests.txt")" -gt 1 ] && NOTES+=("$(cat "$LOGS/tests.txt")")

# ---------------------------------------------------------------------------------------------
# more of the step: Muon's share, FP16, PyTorch's step, every mode; sampling

# Muon's optimizer step at llm.c's batch (-d 524288: 32 micro-steps): its share of the step (target <= 3%)
profile_d12_muon() {
    # shellcheck disable=SC2086  # flag lists
    "$TRAIN_BF16" $TRAIN $DATA_ARGS -d 524288 --optimizer muon --profile 1
}
if needs profile-d12-muon "file:$DATA_TRAIN" "built:$GB/train_gpt2cu_bf16"; then
    gpu_step profile-d12-muon 90 profile_d12_muon
fi
if ran profile-d12-muon; then
    NOTES+=("Muon, GPT-2 124M bf16 B16 T1024 -d 524288, one step per kernel family (the optimizer update row: Newton-Schulz included):
$(sed -n '/^profile/,$p' "$LOGS/profile-d12-muon.log" | grep -E "optimizer|step|matmul" | head -n 8 | sed 's/^/  /')")
fi
# PRECISION=FP16 (the build for GPUs without bf16; it runs on every GPU from sm_75): the same 50
# steps under its default loss scaling, to set beside bf16's time and loss
train_fp16() {
    # shellcheck disable=SC2086  # flag lists
    "$TRAIN_FP16" -e d12 -b 16 -t 1024 -x 50 -v 25 -s 0 -l 6e-4 -u 10 -c 0.1 $DATA_ARGS
}
if needs train-fp16 "file:$DATA_TRAIN" "file:$DATA_VAL" "built:$GB/train_gpt2cu_fp16"; then
    gpu_step train-fp16 120 train_fp16
fi
if ran train-fp16; then
    steps=$(grep -E "^step" "$LOGS/train-fp16.log" | tail -n 40)
    NOTES+=("training GPT-2 124M, fp16 (loss scaling), B16 T1024, 50 steps (median of steps 11-50): $(echo "$steps" | grep -oE "[0-9.]+ ms" | awk '{print $1}' | median) ms/step
$(grep -E "^(loss scaling|step +50/|val loss|summary)" "$LOGS/train-fp16.log" | tail -n 4 | sed 's/^/  /')")
fi
if needs torch-step torch; then
    gpu_step torch-step 90 "$TORCH_PYTHON" dev/reference/torch_step.py -b 16 -t 1024 -n 20
    if ran torch-step; then
        NOTES+=("PyTorch, the same step (eager, SDPA flash, fused AdamW): $(grep -E '^torch_step_ms' "$LOGS/torch-step.log" || last_error "$LOGS/torch-step.log")")
    fi
fi
train_modes() {
    local mode rc=0
    for mode in "--attention matmul" "--attention cudnn-fast" "" "--offload stream" "--opt-state bf16" "--opt-state fp16" "--opt-state int8" "--optimizer lion" \
        "--optimizer muon" "--optimizer muon --opt-state bf16" \
        "--optimizer lamb" "--badam 5" "-r 2" "--optimizer lion --opt-state int8" "--offload stream --badam 5 --opt-state int8" \
        "--opt-state 4bit"; do
        echo "=== mode: ${mode:-adamw}"
        # shellcheck disable=SC2086  # the mode and the data flags are several words
        "$TRAIN_BF16" -e d12 -b 16 -t 1024 -x 20 -v 0 -s 0 -l 6e-4 -u 10 -c 0.1 $DATA_ARGS $mode || { echo "error: mode '${mode:-adamw}' failed"; rc=1; }
    done
    return $rc
}
if needs train-modes "file:$DATA_TRAIN" "built:$GB/train_gpt2cu_bf16"; then
    gpu_step train-modes 150 train_modes
fi
if ran train-modes; then
    NOTES+=("modes, GPT-2 124M bf16 B16 T1024 (median ms of steps 6-20; device MiB predicted by the memory model, used per cudaMemGetInfo):
$(awk '/^=== mode:/ { if (m != "") emit(); m = substr($0, 11); n = 0; pred = "?"; used = "?"; next }
       /^\| total/ { pred = $4 }
       /^device memory:/ { used = $7 - $3 }
       /^step/ { for (i = 1; i <= NF; i++) if ($i == "ms") { n++; if (n > 5) t[n - 5] = $(i - 1) } }
       function emit(   k, i, j, x) { k = n - 5; for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (t[j] < t[i]) { x = t[i]; t[i] = t[j]; t[j] = x }
           printf "  %-20s %9s ms  predicted %8s MiB  used %8s MiB\n", m, (k > 0 ? t[int((k + 1) / 2)] : "?"), pred, used }
       END { if (m != "") emit() }' "$LOGS/train-modes.log")")
fi

# sampling and HellaSwag on the device (the bf16 build). Both encode text, which a decode-only
# build (no PCRE2/cJSON headers where it was built) cannot: it samples from the model instead.
sample_eval() {
    if [ "$ENCODER" = 0 ]; then
        echo "note: decode-only build (no PCRE2/cJSON headers here): --prompt and --hellaswag skipped; a plain sample"
        "$TRAIN_BF16" -e d12 -x 0 -v 0 -s 1 -b 4 -t 64 -g 32 --temperature 0 --tokenizer "$TOKENIZER"
        return
    fi
    local hs="$LOGS/hellaswag_small.jsonl" i
    : >"$hs"
    for i in 0 1 2 3 4 5 6 7; do
        printf '{"ctx": "The cook took the pan off the stove and %s", "endings": ["put it on the table.", "sang to the moon for an hour.", "the river was cold.", "then %s"], "label": %d}\n' \
            "$i" "$i" $((i % 4)) >>"$hs"
    done
    "$TRAIN_BF16" -e d12 -x 0 -v 0 -b 4 -t 64 -g 32 --prompt "The cook took the pan" --temperature 0 --tokenizer "$TOKENIZER" &&
    "$TRAIN_BF16" -e d12 -x 0 -v 0 -s 0 -b 4 -t 64 --hellaswag 1 --hellaswag-file "$hs" --tokenizer "$TOKENIZER"
}
if needs sample-eval "file:$TOKENIZER" "built:$GB/train_gpt2cu_bf16"; then
    [ $ENCODER = 0 ] && STEP_NOTE="decode-only build: a plain sample; --prompt and HellaSwag skipped"
    gpu_step sample-eval 60 sample_eval
fi
if ran sample-eval; then
    NOTES+=("sampling and HellaSwag on the GPU (random d12, so the text and accuracy mean nothing): $(grep -E "^(prompt|hellaswag|sample)" "$LOGS/sample-eval.log" | head -n 4 | tr '\n' ';')")
fi

# ---------------------------------------------------------------------------------------------
# the trainer against PyTorch at GPT-2 124M (its reference made in the background meanwhile)

if [ $DRY = 1 ]; then
    if [ $TORCH_CPU = 1 ] && [ -f dev/reference/gpt2_ref.py ]; then row ref-d12 0 "ready (dry run: torch and dev/reference/gpt2_ref.py present)"
    else skip ref-d12 "torch not importable: no reference"; fi
elif [ -n "${BG_PID[ref-d12]:-}" ]; then
    bg_wait ref-d12 120
else
    skip ref-d12 "torch not importable ($TORCH_PYTHON)"
fi
if { [ $DRY = 1 ] && [ $TORCH_CPU = 1 ]; } || [ -f "$REF/d12_state.bin" ]; then
    if needs test-bf16-d12 "built:$GB/test_gpt2cu_bf16"; then
        gpu_step test-bf16-d12 90 "$GB/test_gpt2cu_bf16" --model "$REF/d12_model.bin" --state "$REF/d12_state.bin" --resume-check 0
    fi
else
    skip test-bf16-d12 "no GPT-2 124M reference (ref-d12)"
fi

# ---------------------------------------------------------------------------------------------
# the optimizer on the host CPU (--offload cpu), undelayed and delayed one step: GPT-2 124M bf16,
# 20 steps each; the step time against the on-device update's (train-modes' adamw row), and the
# host update's own time from the step lines

offload_cpu() {
    local mode rc=0
    for mode in "--offload cpu" "--offload cpu --offload-delay 1 --offload-delay-warmup 5"; do
        echo "=== mode: $mode"
        # shellcheck disable=SC2086  # the mode and the data flags are several words
        "$TRAIN_BF16" -e d12 -b 16 -t 1024 -x 20 -v 0 -s 0 -l 6e-4 -u 10 -c 0.1 $DATA_ARGS $mode || { echo "error: mode '$mode' failed"; rc=1; }
    done
    return $rc
}
if needs offload-cpu "file:$DATA_TRAIN" "built:$GB/train_gpt2cu_bf16"; then
    gpu_step offload-cpu 150 offload_cpu
fi
if ran offload-cpu; then
    NOTES+=("--offload cpu, GPT-2 124M bf16 B16 T1024, $(nproc) host cores (median of steps 6-20: ms/step, host update ms):
$(awk '/^=== mode:/ { if (m != "") emit(); m = substr($0, 11); n = 0; next }
       /^step/ { for (i = 1; i <= NF; i++) { if ($i == "ms" && $(i - 2) == "|") { n++; if (n > 5) t[n - 5] = $(i - 1) }
                                             if ($i == "update") h[n] = $(i + 1) } }
       function emit(   k, i, j, x) { k = n - 5; for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (t[j] < t[i]) { x = t[i]; t[i] = t[j]; t[j] = x }
           printf "  %-48s %9s ms/step  host update %s ms\n", m, (k > 0 ? t[int((k + 1) / 2)] : "?"), h[n] }
       END { if (m != "") emit() }' "$LOGS/offload-cpu.log")")
fi

# ---------------------------------------------------------------------------------------------
# the end: any background job still running is ended; every refused fetch is a failure

for name in "${!BG_PID[@]}"; do
    kill -TERM "${BG_PID[$name]}" 2>/dev/null
    row "$name" 0 "FAILED (still running at the end, ended)"
done
if [ -s "$GUARD/refused.log" ]; then
    row no-network 0 "FAILED ($(wc -l <"$GUARD/refused.log") call(s) refused, first: $(head -n 1 "$GUARD/refused.log"))"
else
    row no-network 0 "passed (no fetch or install was tried)"
fi
write_summary
print_summary
cleanup
[ "${#FAILED[@]}" -eq 0 ]

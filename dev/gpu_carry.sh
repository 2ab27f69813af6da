#!/usr/bin/env bash
# dev/gpu_carry.sh: what is carried to a GPU machine without network (the paths in
# dev/gpu_carry.txt), for `make gpu-carry` and dev/gpu_check.sh.
#
# usage: dev/gpu_carry.sh list | closure | hash | stamp | size
#   list     the carried paths, one a line
#   closure  the files build/libleanstep_cudnn.so is built from: llmc/kernels/cudnn_att.cpp, every
#            header of this tree it includes (transitively) and its export map
#   hash     sha256 of the closure and the Makefile (its build rules): the library's stamp
#   stamp    writes build/gpu_carry.stamp: the commit, where the library was built, and the hash.
#            dev/gpu_check.sh uses the carried library as it is while the hash still matches
#   size     each carried path's size, the files that travel with them (tracked, and untracked
#            files git does not ignore) and the total; exit 1 when a carried path is missing or
#            the total is over GPU_CARRY_MAX_MIB (default 48; the device takes 64)
# env: CUDNN_HOME (stamp: the cuDNN whose version it records), CXX (stamp: the compiler it names)
set -euo pipefail
cd "$(dirname "$0")/.."

carry_list() { sed 's/#.*//; s/[[:space:]]*$//; /^$/d' dev/gpu_carry.txt; }

# breadth-first over #include "..." (this tree's includes are relative to its root)
closure() {
    local todo=(llmc/kernels/cudnn_att.cpp) seen=" " f inc
    while [ "${#todo[@]}" -gt 0 ]; do
        f=${todo[0]}
        todo=("${todo[@]:1}")
        case $seen in *" $f "*) continue ;; esac
        seen+="$f "
        echo "$f"
        while read -r inc; do
            [ -f "$inc" ] && todo+=("$inc")
        done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
    done
    echo llmc/kernels/cudnn_att.map
}

lib_hash() {
    local files
    files=$({ closure; echo Makefile; } | LC_ALL=C sort)
    # shellcheck disable=SC2086  # one path a word (no path here has a space)
    sha256sum $files | sha256sum | cut -d' ' -f1
}

write_stamp() {
    local commit dirty="" os cudnn="?" h
    commit=$(git rev-parse --short HEAD 2>/dev/null || echo '?')
    git diff --quiet HEAD 2>/dev/null || dirty=" + uncommitted changes"
    os=$(sed -n 's/^PRETTY_NAME="\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' /etc/os-release 2>/dev/null || true)
    [ -n "$os" ] || os=$(uname -s)
    h=${CUDNN_HOME:-/usr/local/cuda}/include/cudnn_version.h
    if [ -f "$h" ]; then
        cudnn=$(awk '/#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) / {v = v (v == "" ? "" : ".") $3} END {print v}' "$h")
    fi
    mkdir -p build
    {
        echo "commit $commit$dirty"
        echo "stamped $(date -u '+%Y-%m-%d %H:%M UTC') on $(uname -m), $os; the library: $(${CXX:-g++} --version | head -n 1), cuDNN $cudnn's headers"
        echo "libleanstep_cudnn.so $(lib_hash)"
    } >build/gpu_carry.stamp.tmp
    mv build/gpu_carry.stamp.tmp build/gpu_carry.stamp
}

# bytes of a file or folder (apparent size: what is copied)
bytes() { du -sb "$1" | cut -f1; }
mib() { awk -v b="$1" 'BEGIN {printf "%.1f MiB", b / 1048576}'; }

size_report() {
    local max=${GPU_CARRY_MAX_MIB:-48} p b carry=0 tree=0 n=0 missing=()
    echo "carried (dev/gpu_carry.txt):"
    while read -r p; do
        if [ -e "$p" ]; then
            b=$(bytes "$p")
            carry=$((carry + b))
            printf '  %-48s %10s\n' "$p" "$(mib "$b")"
        else
            missing+=("$p")
            printf '  %-48s %10s\n' "$p" missing
        fi
    done < <(carry_list)
    while IFS= read -r -d '' p; do
        [ -f "$p" ] && tree=$((tree + $(stat -c %s "$p"))) && n=$((n + 1))
    done < <(git ls-files -z --cached --others --exclude-standard)
    echo "carry $(mib "$carry") + the tree's $n files (tracked, untracked not ignored) $(mib "$tree") = $(mib $((carry + tree))) of at most $max MiB"
    if [ "${#missing[@]}" -gt 0 ]; then
        echo "error: carried path(s) missing: ${missing[*]} (make gpu-carry makes them)" >&2
        return 1
    fi
    if [ $((carry + tree)) -gt $((max * 1048576)) ]; then
        echo "error: $(mib $((carry + tree))) to carry is over GPU_CARRY_MAX_MIB=$max" >&2
        return 1
    fi
}

case ${1:-} in
    list) carry_list ;;
    closure) closure ;;
    hash) lib_hash ;;
    stamp) write_stamp ;;
    size) size_report ;;
    *) echo "usage: dev/gpu_carry.sh list | closure | hash | stamp | size" >&2; exit 2 ;;
esac

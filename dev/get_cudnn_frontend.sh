#!/usr/bin/env bash
# get_cudnn_frontend.sh DEST VERSION: puts the cuDNN frontend's C++ headers (header-only; PyPI
# package nvidia-cudnn-frontend) into DEST/include, for the GPU trainer's flash attention
# (llmc/kernels/cudnn_att.cpp). `make cudnn-frontend` calls it with DEST = build/deps/cudnn_frontend.
# The wheel comes from pip (its cache, PIP_FIND_LINKS or the index); only its include/ is kept,
# so the headers can travel with the working tree to a machine without network.
set -euo pipefail
dest=${1:?usage: get_cudnn_frontend.sh DEST VERSION}
version=${2:?usage: get_cudnn_frontend.sh DEST VERSION}
PY=${PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! "$PY" -m pip download -q --no-deps --only-binary=:all: -d "$tmp" "nvidia-cudnn-frontend==$version" >"$tmp/pip.log" 2>&1; then
  echo "error: pip download nvidia-cudnn-frontend==$version failed (no network? a wheel in PIP_FIND_LINKS also works): $(tail -n 1 "$tmp/pip.log")" >&2
  exit 1
fi
wheel=$(ls "$tmp"/nvidia_cudnn_frontend-*.whl)
rm -rf "$dest/include.tmp"
mkdir -p "$dest"
"$PY" - "$wheel" "$dest/include.tmp" <<'EOF'
import sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if n.startswith("include/") and not n.endswith("/")]
    if not any(n == "include/cudnn_frontend.h" for n in names):
        sys.exit("error: %s has no include/cudnn_frontend.h" % wheel)
    for n in names:
        z.extract(n, out)
EOF
rm -rf "$dest/include"
mv "$dest/include.tmp/include" "$dest/include"
rmdir "$dest/include.tmp"
echo "cudnn frontend $version headers: $dest/include"

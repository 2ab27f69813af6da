#!/usr/bin/env python3
"""test_no_blas.py: the GPU trainer built where OpenBLAS's header is missing (no LS_HOST_BLAS).

Muon with --offload cpu needs the host's sgemm for its Newton-Schulz products: that build refuses
it with one line naming the flag and the remedy, exit 1 (what the build lacks, as --attention
cudnn in the fp32 build), before the banner (also under --memory-report and --dry-run). Everything
else runs as in the BLAS build, to the same bits: the step lines of --offload cpu with AdamW (and
--offload-delay 1) and of Muon on the device must equal the BLAS build's.

  test_no_blas.py --bin build/train_gpt2cu_emu_noblas_fp32 --blas-bin build/train_gpt2cu_emu_fp32
Exit status 1 if any check failed.
"""
import argparse
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from testlib import check, failures, step_losses  # noqa: E402

FEW = ["-e", "L2C16H2", "-b", "1", "-t", "16", "-x", "3", "-v", "0", "-s", "0"]


def run(binary, args):
    env = dict(os.environ, OMP_NUM_THREADS="1")  # a tiny model: threads would only spin
    return subprocess.run([binary] + args, capture_output=True, text=True, timeout=300, env=env)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, help="the harness GPU trainer built without OpenBLAS")
    ap.add_argument("--blas-bin", required=True, help="the same build with it (build/train_gpt2cu_emu_fp32)")
    a = ap.parse_args()
    muon_host = ["--optimizer", "muon", "--offload", "cpu"]
    for extra in ([], ["--memory-report", "1"], ["--dry-run", "1"], ["--offload-delay", "1"]):
        r = run(a.bin, FEW + muon_host + extra)
        lines = r.stderr.strip().splitlines()
        tag = "Muon --offload cpu %s" % " ".join(extra)
        check(r.returncode == 1, "%s: exit 1 (got %d)" % (tag, r.returncode))
        check(len(lines) == 1 and re.match(r"leanstep: error: flag --offload cpu: .*OpenBLAS.*libopenblas-dev", lines[0]),
              "%s: one line naming the flag and the remedy (got %r)" % (tag, r.stderr.strip()[-400:]))
        check("step " not in r.stdout and "leanstep train_gpt2cu" not in r.stdout,
              "%s: refused before the banner (stdout %r)" % (tag, r.stdout[-200:]))
    same = 0
    for name, flags in (("AdamW --offload cpu", ["--offload", "cpu"]),
                        ("AdamW --offload cpu --offload-delay 1", ["--offload", "cpu", "--offload-delay", "1",
                                                                   "--offload-delay-warmup", "1", "-x", "4"]),
                        ("Muon on the device", ["--optimizer", "muon"])):
        got, want = run(a.bin, FEW + flags), run(a.blas_bin, FEW + flags)
        check(got.returncode == 0 and want.returncode == 0,
              "%s: both builds exit 0 (%d: %s; %d)" % (name, got.returncode, got.stderr.strip()[-300:], want.returncode))
        gl, wl = step_losses(got.stdout), step_losses(want.stdout)
        check(len(gl) >= 3 and gl == wl, "%s: the step losses equal the BLAS build's (%s vs %s)" % (name, gl, wl))
        same += len(gl) >= 3 and gl == wl
    print("test_no_blas: Muon with --offload cpu refused in 4 ways; %d of 3 runs equal the BLAS build's; %s" % (
        same, "%d failed" % len(failures) if failures else "all checks passed"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

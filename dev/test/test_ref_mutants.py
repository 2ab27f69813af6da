#!/usr/bin/env python3
"""test_ref_mutants.py: the model checks have teeth. For each bug that gpt2_ref.py can plant in its
forward pass (state --inject-bug: layernorms without their parameters, every layer with layer 0's
layernorm parameters and biases, linear layers without biases), it writes that wrong reference's
state for the same model and requires every given test binary (test_gpt2, test_gpt2cu harness
builds) to FAIL against it, naming a mismatch. A check that passes against a wrong reference
would not see the bug in a trainer either.

usage: test_ref_mutants.py --model M.bin --state S.bin [--bin TEST ...]
  (S.bin: the correct state, only read for its batch size and sequence length; without --bin it
  only writes the wrong references, into mutants/ beside S.bin, so that `make -j` makes them once)
The test binaries run with LEANSTEP_TEST_FAIL_FAST=1 (dev/test/test_common.h): they stop at the
first failed check, which is all a run against a wrong reference has to show.
"""
import argparse
import os
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from testlib import check, failures  # noqa: E402

BUGS = ["ignore-ln-weights", "layer0-params", "ignore-biases"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--state", required=True)
    ap.add_argument("--bin", action="append", default=[])
    ap.add_argument("--torch-python", default=os.environ.get("TORCH_PYTHON", "/usr/bin/python3"))
    a = ap.parse_args()
    with open(a.state, "rb") as f:
        _, _, B, T = struct.unpack("<4i", f.read(16))
    outdir = os.path.join(os.path.dirname(a.state), "mutants")
    os.makedirs(outdir, exist_ok=True)
    n = 0
    for bug in BUGS:
        state = os.path.join(outdir, "%s_%s" % (bug, os.path.basename(a.state)))
        if not os.path.exists(state) or os.path.getmtime(state) < os.path.getmtime(a.model):
            cmd = [a.torch_python, "dev/reference/gpt2_ref.py", "state", "--model", a.model, "--batch", str(B),
                   "--seq", str(T), "--seed", "1", "--steps", "10", "--lr", "1e-4", "--beta1", "0.9", "--beta2", "0.95",
                   "--eps", "1e-8", "--weight-decay", "0.1", "--grad-clip", "1.0", "--inject-bug", bug,
                   "--out", state + ".tmp%d" % os.getpid()]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            os.replace(cmd[-1], state)  # whole or not at all, for another run reading it at the same time
        for b in a.bin:
            p = subprocess.run([b, "--model", a.model, "--state", state], capture_output=True, text=True,
                               env=dict(os.environ, LEANSTEP_TEST_FAIL_FAST="1"))
            out = p.stdout + p.stderr
            fails = [l for l in out.splitlines() if l.startswith("FAIL")]
            n += 1
            check(p.returncode == 1 and fails, "%s against a reference with bug '%s' must fail (exit %d, %d FAIL lines)"
                  % (b, bug, p.returncode, len(fails)))
            print("%-36s bug %-18s exit %d, %3d failed checks, first: %s" % (os.path.basename(b), bug, p.returncode,
                                                                               len(fails), fails[0][:90] if fails else "-"))
    if a.bin:
        print("%d passed, %d failed" % (n - len(failures), len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

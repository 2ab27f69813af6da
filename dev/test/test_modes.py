#!/usr/bin/env python3
"""test_modes.py: the trainers run as a user runs them, one row per mode, on TinyShakespeare.

  test_modes.py --bin build/train_gpt2 --bin build/train_gpt2cu_emu_fp32 --bin build/train_gpt2cu_emu_bf16

Row "defaults": the trainer's default flags (sampling and val loss every 20 steps, 20 val batches,
64 generated tokens, cosine schedule, -r 1, ...) on a tiny model for 21 steps; only the model
(-e), the batch (-b 1 -t 16: the default d12 at T = 1024 is hours under the CPU harness) and the
step count (-x) are given (and for the CPU trainer once more with its default B = 4, T = 64).
Every other row is a mode whose default path no other test runs, for a few steps with sampling
and val loss on: odd and minimal T, the lr schedules, -r 0 / -r 2, --offload stream / cpu (GPU trainer only) and
--offload-delay 1 (the GPU trainer's with --offload cpu; the CPU trainer delays its own update), and Muon
(the GPU trainer's with --offload cpu: Newton-Schulz on the host, as the CPU trainer's).
Each run must exit 0 and print every step line with a finite loss,
the val loss lines, the generated text (non-empty when T > 1) and the summary line.
When the CPU trainer and an fp32 GPU build are both given, their step and val losses must agree
within 1e-4 relative in every row they both run (same descriptor, seed and batches; both fp32).
Exit status 1 if any check failed.
"""
import argparse
import math
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from testlib import check, failures, step_losses  # noqa: E402

TINY = "L2C16H2"  # head size 8: the smallest the GPU kernels take in both precisions
FEW = ["-e", TINY, "-b", "1", "-t", "16", "-x", "3", "-v", "2", "-m", "2", "-s", "2", "-g", "16"]

# name, flags, steps, which trainer (None: both), extra check on the output
ROWS = [
    ("defaults", ["-e", TINY, "-b", "1", "-t", "16", "-x", "21"], 21, None, None),
    ("defaults, B and T too", ["-e", TINY, "-x", "21"], 21, "cpu", None),  # the CPU trainer's B = 4, T = 64
    ("-b 3 -t 37 (odd T)", FEW + ["-b", "3", "-t", "37"], 3, None, None),
    ("-t 1", FEW + ["-t", "1"], 3, None, None),
    ("-k linear", FEW + ["-k", "linear", "-q", "0.1"], 3, None, "lr decays"),
    ("-k wsd", FEW + ["-k", "wsd", "-q", "0.1", "-x", "5"], 5, None, "lr decays"),  # cools down over the last 20%
    ("-r 0", FEW + ["-r", "0", "-t", "37"], 3, "gpu", None),
    ("-r 2", FEW + ["-r", "2", "-t", "37"], 3, "gpu", None),
    ("--offload stream", FEW + ["--offload", "stream", "--offload-chunk", "100000"], 3, "gpu", None),
    ("--offload cpu", FEW + ["--offload", "cpu"], 3, "gpu", None),
    # (both trainers: the GPU's with --offload cpu, GPU_ONLY_FLAGS; the CPU trainer delays its own update)
    ("--offload-delay 1", FEW + ["--offload-delay", "1", "--offload-delay-warmup", "1", "-x", "5"], 5, None, None),
    # (both trainers: the GPU's Newton-Schulz on the host, through OpenBLAS as the CPU trainer's)
    ("--optimizer muon, host", FEW + ["--optimizer", "muon"], 3, None, None),
    ("--optimizer muon --offload-delay 1", FEW + ["--optimizer", "muon", "--offload-delay", "1", "--offload-delay-warmup", "1",
                                                  "-x", "5"], 5, None, None),
    ("-a 1 (overfit one batch)", FEW + ["-a", "1", "-x", "6", "-l", "1e-3"], 6, None, "loss falls"),
    ("-w 0 (no master weights)", FEW + ["-w", "0"], 3, "gpu", None),
    ("--attention matmul", FEW + ["--attention", "matmul", "-t", "37"], 3, "gpu", None),
]


GPU_ONLY_FLAGS = {"--offload-delay 1": ["--offload", "cpu"], "--optimizer muon, host": ["--offload", "cpu"],
                  "--optimizer muon --offload-delay 1": ["--offload", "cpu"]}  # row: what the GPU trainer adds to its flags


def run(binary, args):
    env = dict(os.environ, OMP_NUM_THREADS="1")  # tiny models: threads would only spin
    return subprocess.run([binary] + args, capture_output=True, text=True, timeout=600, env=env)


def check_run(tag, r, steps, seq_len, extra):
    """The lines a user sees; returns (step losses, val losses)."""
    check(r.returncode == 0, "%s: exits 0 (exit %d: %s)" % (tag, r.returncode, r.stderr.strip()[-500:]))
    out = r.stdout
    losses = step_losses(out)
    check(len(losses) == steps and all(math.isfinite(x) for x in losses),
          "%s: %d step lines with finite losses (got %s)" % (tag, steps, losses))
    vals = [float(x) for x in re.findall(r"^val loss ([\d.]+)", out, re.M)]
    check(len(vals) >= 2 and all(math.isfinite(x) for x in vals), "%s: val loss lines (got %s)" % (tag, vals))
    samples = re.findall(r"^generating:\n---\n(.*?)\n---$", out, re.M | re.S)
    check(len(samples) >= 1, "%s: a sample is printed" % tag)
    if seq_len > 1:
        check(all(s.strip() for s in samples), "%s: the samples hold text: %r" % (tag, samples))
    check(re.search(r"^summary: %d steps" % steps, out, re.M) is not None, "%s: the summary line" % tag)
    if extra == "loss falls":
        check(len(losses) == steps and losses[-1] < losses[0] - 0.05, "%s: the loss on the one batch falls (%s)" % (tag, losses))
    if extra == "lr decays":
        lrs = [float(x) for x in re.findall(r"^step\s+\d+/\d+ \| loss [\d.]+ \| norm [\d.]+ \| lr ([\d.e+-]+)", out, re.M)]
        check(len(lrs) == steps and lrs[-1] < lrs[0], "%s: the learning rate decays (%s)" % (tag, lrs))
    return losses, vals


def close(a, b, rtol):
    return len(a) == len(b) and all(abs(x - y) <= rtol * abs(y) for x, y in zip(a, b))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", action="append", required=True, help="a trainer (repeat: CPU trainer, GPU builds)")
    a = ap.parse_args()
    results = {}  # (row, kind) -> (step losses, val losses); kind: cpu, fp32 or bf16
    for binary in a.bin:
        binary = os.path.abspath(binary)
        banner = run(binary, ["--dry-run", "1", "-e", TINY, "-t", "16"]).stdout
        gpu = "train_gpt2cu" in banner
        kind = "cpu" if not gpu else ("fp32" if "(fp32" in banner else "bf16")
        for name, flags, steps, only, extra in ROWS:
            if only is not None and only != ("gpu" if gpu else "cpu"):
                continue
            tag = "%s %s" % (os.path.basename(binary), name)
            r = run(binary, flags + (GPU_ONLY_FLAGS.get(name, []) if gpu else []))
            seq_len = int(flags[len(flags) - 1 - flags[::-1].index("-t") + 1]) if "-t" in flags else 64
            results[(name, kind)] = check_run(tag, r, steps, seq_len, extra)
            print("%s: %s" % (tag, "ok" if r.returncode == 0 else "exit %d" % r.returncode))
    compared, worst = 0, 0.0
    for name, _, _, _, _ in ROWS:
        if (name, "cpu") in results and (name, "fp32") in results:
            (cl, cv), (gl, gv) = results[(name, "cpu")], results[(name, "fp32")]
            check(close(gl, cl, 1e-4), "%s: fp32 GPU step losses %s equal the CPU trainer's %s (1e-4 relative)" % (name, gl, cl))
            check(close(gv, cv, 1e-4), "%s: fp32 GPU val losses %s equal the CPU trainer's %s (1e-4 relative)" % (name, gv, cv))
            compared += 1
            worst = max([worst] + [abs(x - y) / abs(y) for x, y in zip(gl + gv, cl + cv)])
    print("test_modes: %d runs, %d rows compared with the CPU trainer (worst relative difference %.1e); %s" % (
        len(results), compared, worst, "%d failed" % len(failures) if failures else "all checks passed"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""compare_trainers.py: the GPU trainer (fp32 build, under the CPU harness in CI) and the CPU
trainer, from the same model file on the same TinyShakespeare batches, must print the same
losses: within 1e-4 relative per step (both are fp32; matmul summation orders and the kernels'
reductions differ). Exit status 1 on any mismatch.

  compare_trainers.py --cpu build/train_gpt2 --gpu build/train_gpt2cu_emu_fp32 --model M.bin [--steps 10]
                      [--mode "FLAGS"]...

Each --mode adds trainer flags for one comparison (default: one, fp32 AdamW). E.g. "--badam 2":
both trainers train one block at a time (switching every 2 steps), so the BAdam schedule, the
early-stopping backward pass and the per-block AdamW are compared too; "--optimizer lion",
"--opt-state int8", ...: the optimizer family's GPU kernels against the CPU updates.
"""
import argparse
import re
import subprocess
import sys


def losses_of(binary, args):
    r = subprocess.run([binary] + args, capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        print("FAIL: %s exited %d: %s" % (binary, r.returncode, r.stderr.strip()[-2000:]))
        sys.exit(1)
    return [float(x) for x in re.findall(r"^step\s+\d+/\d+ \| loss ([\d.]+)", r.stdout, re.M)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cpu", required=True)
    ap.add_argument("--gpu", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--mode", action="append", default=None, help="extra trainer flags of one comparison")
    a = ap.parse_args()
    common = ["-e", a.model, "-b", "4", "-t", "32", "-x", str(a.steps), "-v", "0", "-s", "0",
              "-l", "1e-3", "-c", "0.1", "-u", "2", "-d", "256"]
    all_ok = True
    for mode in a.mode or [""]:
        cpu = losses_of(a.cpu, common + mode.split())
        gpu = losses_of(a.gpu, common + mode.split())
        ok = len(cpu) == a.steps and len(gpu) == a.steps
        worst = 0.0
        for i, (x, y) in enumerate(zip(cpu, gpu)):
            rel = abs(x - y) / abs(x)
            worst = max(worst, rel)
            if rel > a.rtol:
                print("step %2d: cpu %.6f gpu %.6f rel %.2e  <-- differs" % (i + 1, x, y, rel))
            ok &= rel <= a.rtol
        print("compare_trainers [%s]: %d steps, loss %.6f -> %.6f, worst relative difference %.2e (tolerance %.0e): %s"
              % (mode or "adamw", min(len(cpu), len(gpu)), cpu[0] if cpu else float("nan"), cpu[-1] if cpu else float("nan"),
                 worst, a.rtol, "OK" if ok else "FAILED"))
        all_ok &= ok
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())

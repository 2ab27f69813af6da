#!/usr/bin/env python3
"""quality_table.py: `make quality-table`. Trains the same small GPT-2 on TinyShakespeare with the
CPU trainer in each optimizer-memory mode, the same steps and data order, and prints a Markdown
table: final train loss (mean of the last 20 steps), val loss, and the optimizer-side memory the
trainer's memory model reports (gradients + optimizer state), with the saving against full AdamW.

  quality_table.py --bin build/train_gpt2 [--steps 300] [--model L4C128H4] [--modes adamw,badam...]

A mode the binary rejects (a flag it does not have yet) is reported as such, not skipped silently.
"""
import argparse
import re
import subprocess
import sys
import time

MODES = {
    "adamw": ("full AdamW", []),
    "badam": ("BAdam, K = 25", ["--badam", "25"]),
    "badam-frozen-emb": ("BAdam, K = 25, embeddings frozen", ["--badam", "25", "--badam-embed", "0"]),
    "state-bf16": ("AdamW, bf16 state", ["--opt-state", "bf16"]),
    "state-int8": ("AdamW, int8 state", ["--opt-state", "int8"]),
    "sgd-nesterov": ("SGD, Nesterov momentum 0.9", ["--optimizer", "sgd", "--nesterov", "1", "-l", "3e-2"]),
    "lamb": ("LAMB", ["--optimizer", "lamb", "-l", "3e-3"]),
    "lion": ("Lion", ["--optimizer", "lion", "-l", "1e-4"]),
}

MIB_RE = re.compile(r"^\| (gradients|optimizer state[^|]*|master weights)\s*\|\s*([\d.]+)", re.M)


def run(binary, args):
    t0 = time.time()
    r = subprocess.run([binary] + args, capture_output=True, text=True, timeout=3600)
    return r, time.time() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--model", default="L4C128H4")
    ap.add_argument("--modes", default=",".join(MODES))
    a = ap.parse_args()
    base = ["-e", a.model, "-b", "8", "-t", "64", "-x", str(a.steps), "-l", "1e-3", "-u", "20", "-k", "cosine",
            "-q", "0.1", "-c", "0.1", "-v", str(a.steps), "-m", "20", "-s", "0", "--seed", "42"]
    rows = []
    ref_mem = None
    for key in a.modes.split(","):
        name, extra = MODES[key]
        args = base + extra
        # later flags win: a mode's own -l replaces the base learning rate
        rep, _ = run(a.bin, args + ["--memory-report", "1"])
        if rep.returncode != 0:
            rows.append((name, None, None, None, None, rep.stderr.strip().splitlines()[-1] if rep.stderr else "failed"))
            continue
        mem = sum(float(m.group(2)) for m in MIB_RE.finditer(rep.stdout))
        if ref_mem is None:
            ref_mem = mem
        r, secs = run(a.bin, args)
        if r.returncode != 0:
            rows.append((name, None, None, mem, secs, r.stderr.strip().splitlines()[-1]))
            continue
        losses = [float(x) for x in re.findall(r"^step\s+\d+/\d+ \| loss ([\d.]+)", r.stdout, re.M)]
        vals = [float(x) for x in re.findall(r"^val loss ([\d.]+)", r.stdout, re.M)]
        tail = losses[-20:]
        rows.append((name, sum(tail) / len(tail), vals[-1] if vals else None, mem, secs, ""))
        print("%-40s done in %.0f s" % (name, secs), file=sys.stderr)
    print("Model %s, B=8, T=64, %d steps on TinyShakespeare (%d tokens), cosine schedule with warmup 20, weight decay 0.1, seed 42."
          % (a.model, a.steps, 8 * 64 * a.steps))
    print()
    print("| mode | train loss (last 20 steps) | val loss | gradients + optimizer state (MiB) | vs full AdamW | time (s) |")
    print("|---|---|---|---|---|---|")
    for name, tl, vl, mem, secs, err in rows:
        if tl is None:
            print("| %s | not run: %s | | %s | | |" % (name, err, "%.1f" % mem if mem is not None else ""))
            continue
        saving = "" if ref_mem is None else "%+.0f%%" % (100.0 * (mem - ref_mem) / ref_mem)
        print("| %s | %.4f | %s | %.1f | %s | %.0f |" % (name, tl, "%.4f" % vl if vl is not None else "-", mem, saving, secs))
    return 0


if __name__ == "__main__":
    sys.exit(main())

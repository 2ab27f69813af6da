#!/usr/bin/env python3
"""test_bench.py: what `make bench` prints does not mislead (seconds, on tiny configs).

  bench_train: the llm.c column is labelled as quoted, not measured, with a line saying how to
  measure it (--peer none: no such column); every CPU MFU is at most 100%.
  adamw_bench: every "% of ceiling" is at most 100%, and where a kernel beat the probe a line says
  so (on sizes this small the probe and the kernels trade places from run to run: several runs).
  adamw_bench --rules: a row for every rule and storage the optimizer accepts (AdamW and AMSGrad in
  fp32, bf16, int8, fp16, 4bit; SGD, LAMB, Lion in fp32, bf16, int8, 4bit), each at most 100% of
  the ceiling.
Usage: test_bench.py --bench-train build/bench_train --adamw-bench build/adamw_bench. Exit 1 on a failure.
"""
import argparse
import re
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench-train", required=True)
    ap.add_argument("--adamw-bench", required=True)
    a = ap.parse_args()
    fails = []
    out = subprocess.run([a.bench_train, "--configs", "L2C64H4", "--steps", "1"], capture_output=True, text=True,
                         timeout=300).stdout
    header = [ln for ln in out.splitlines() if ln.startswith("| config")]
    if not header or "llm.c tok/s (quoted)" not in header[0] or "not measured in this run" not in out:
        fails.append("bench_train: the llm.c column is not labelled as quoted: %s" % out[-600:])
    mfu = [float(x) for x in re.findall(r"\| ([\d.]+)% \|", out)]
    if not mfu or max(mfu) > 100.0:
        fails.append("bench_train: CPU MFU %s (at most 100%%)" % mfu)
    out = subprocess.run([a.bench_train, "--configs", "L2C64H4", "--steps", "1", "--peer", "none"], capture_output=True,
                         text=True, timeout=300).stdout
    if "llm.c" in out or "quoted" in out:
        fails.append("bench_train --peer none: no llm.c column: %s" % out[-400:])
    noted = 0
    for _ in range(4):
        out = subprocess.run([a.adamw_bench, "--desc", "L2C64H4", "--repeats", "3", "--torch-python", "none"],
                             capture_output=True, text=True, timeout=300).stdout
        rows = re.findall(r"^\| ((?:probe|leanstep)[^|]*?) \| [\d.]+ \| [\d.]+ \| ([\d.]+)% \|", out, re.M)
        pct = {name: float(p) for name, p in rows}
        probe_beaten = "below" in out
        noted += probe_beaten
        if len(pct) != 3 or max(pct.values()) > 100.0 or min(pct.values()) <= 0.0:
            fails.append("adamw_bench: %% of ceiling %s (three rows, at most 100%%)" % pct)
        if (pct.get("probe (AdamW access pattern)", 100.0) < 100.0) != probe_beaten:
            fails.append("adamw_bench: the probe below 100%% only with the line that says why: %s" % out)
    out = subprocess.run([a.adamw_bench, "--rules", "--desc", "L2C64H4", "--repeats", "3"], capture_output=True, text=True,
                         timeout=300).stdout
    rows = re.findall(r"^\| (\w+(?: \(amsgrad\))?) \| (\w+) \| [\d.]+ \| \d+ \| [\d.]+ \| ([\d.]+)% \|", out, re.M)
    want = {(r, s) for r in ("adamw", "adamw (amsgrad)") for s in ("fp32", "bf16", "int8", "fp16", "4bit")}
    want |= {(r, s) for r in ("sgd", "lamb", "lion") for s in ("fp32", "bf16", "int8", "4bit")}
    got = {(r, s) for r, s, _ in rows}
    if got != want or len(rows) != len(want):
        fails.append("adamw_bench --rules: rows %s, expected %s" % (sorted(got), sorted(want)))
    pct = [float(p) for _, _, p in rows]
    if not pct or max(pct) > 100.0 or min(pct) <= 0.0:
        fails.append("adamw_bench --rules: shares of the ceiling %s (at most 100%%)" % pct)
    for f in fails:
        print("FAIL:", f)
    print("test_bench: %s (a kernel beat the probe in %d of 4 runs)" % ("FAIL" if fails else "all checks passed", noted))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""bench_peer.py: the CPU trainer against llm.c's CPU trainer (train_gpt2.c), measured on this machine
in the same run: ms per training step (forward, backward, AdamW) at B=4, T=64, the batch both use.

  bench_peer.py --bin build/train_gpt2 --peer /path/to/llm.c/train_gpt2 [--configs L4C256H4,d12]
                [--steps 6] [--rounds 2]

llm.c's trainer is run unmodified (build it from a checkout of karpathy/llm.c outside this
repository: `make train_gpt2`). It reads gpt2_124M.bin and dev/data/tinyshakespeare/*.bin from its
working directory and trains 40 steps, printing "step k: train loss ... (took X ms)": each config
gets a directory with our trainer's model file of that shape (llm.c's format, written with -x 1
-l 0) under that name and TinyShakespeare's shards, and the peer is stopped after --steps + 1 step
lines. Ours trains the same model file with -b 4 -t 64 -v 0 -s 0. The first step of each run is a
warm-up and is left out; the table has the median over the other steps of all --rounds (the two
trainers take turns), the ratio, and the threads each used (both: all cores, the environment as
the user has it).
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

PEER_STEP = re.compile(r"^step \d+: train loss [\d.]+ \(took ([\d.]+) ms\)")
OUR_STEP = re.compile(r"^step\s+\d+/\d+ \| loss [\d.]+ \| norm [\d.]+ \| lr [\d.e+-]+ \| ([\d.]+) ms", re.M)


def peer_run(peer, cwd, steps):
    """The peer's step times until it has printed steps + 1 of them (then it is stopped)."""
    p = subprocess.Popen([peer], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    times = []
    for line in p.stdout:
        m = PEER_STEP.match(line)
        if m:
            times.append(float(m.group(1)))
            if len(times) == steps + 1:
                break
    p.kill()
    p.wait()
    if len(times) < steps + 1:
        sys.exit("bench_peer: llm.c's trainer stopped after %d steps" % len(times))
    return times[1:]


def our_run(binary, model, steps):
    r = subprocess.run([binary, "-e", model, "-b", "4", "-t", "64", "-x", str(steps + 1), "-v", "0", "-s", "0"],
                       capture_output=True, text=True)
    times = [float(x) for x in OUR_STEP.findall(r.stdout)] if r.returncode == 0 else []
    if len(times) != steps + 1:
        sys.exit("bench_peer: %s failed: %s" % (binary, r.stderr.strip()[-300:]))
    return times[1:], re.search(r"^leanstep train_gpt2 .*$", r.stdout, re.M).group(0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--peer", required=True, help="llm.c's train_gpt2, built from its checkout")
    ap.add_argument("--configs", default="L4C256H4,d12")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--data", default="data/tinyshakespeare")
    a = ap.parse_args()
    binary, peer, data = os.path.abspath(a.bin), os.path.abspath(a.peer), os.path.abspath(a.data)
    tmp = tempfile.mkdtemp(prefix="leanstep_peer_")
    rows = []
    try:
        for cfg in a.configs.split(","):
            d = os.path.join(tmp, cfg)
            os.makedirs(os.path.join(d, "dev", "data"))
            os.symlink(data, os.path.join(d, "dev", "data", "tinyshakespeare"))
            r = subprocess.run([binary, "-e", cfg, "-x", "1", "-l", "0", "-v", "0", "-s", "0", "-n", "1", "-o", os.path.join(d, "ck"),
                                "-b", "1", "-t", "64"], capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit("bench_peer: making the %s model file failed: %s" % (cfg, r.stderr.strip()[-300:]))
            model = os.path.join(d, "gpt2_124M.bin")
            shutil.move(os.path.join(d, "ck", "model_00000001.bin"), model)
            ours, theirs, banner = [], [], ""
            for _ in range(a.rounds):
                theirs += peer_run(peer, d, a.steps)
                t, banner = our_run(binary, model, a.steps)
                ours += t
                print("%s: llm.c %s, leanstep %s" % (cfg, ["%.0f" % x for x in theirs[-a.steps:]], ["%.0f" % x for x in t]),
                      file=sys.stderr)
            rows.append((cfg, statistics.median(theirs), min(theirs), max(theirs), statistics.median(ours), min(ours),
                         max(ours)))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("CPU trainer vs llm.c's train_gpt2.c, B=4 T=64, ms per step: median (range) of %d steps x %d rounds, taking turns; "
          "%d cores, environment untouched (OPENBLAS_CORETYPE %s, OMP_NUM_THREADS %s)"
          % (a.steps, a.rounds, os.cpu_count(), os.environ.get("OPENBLAS_CORETYPE", "unset"),
             os.environ.get("OMP_NUM_THREADS", "unset")))
    print(banner)
    print()
    print("| model | llm.c ms/step | leanstep ms/step | speed-up |")
    print("|---|---|---|---|")
    for cfg, tm, tlo, thi, om, olo, ohi in rows:
        print("| %s | %.0f (%.0f-%.0f) | %.0f (%.0f-%.0f) | %.2fx |" % (cfg, tm, tlo, thi, om, olo, ohi, tm / om))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""test_guards.py: the numerical guards of a trainer (CPU, or the GPU one under the harness).

  - --inject-nan 3 (AdamW, and Muon): step 3's gradients hold a NaN; its update is skipped (log.jsonl says so, the
    norm is null), the model and optimizer state after step 3 equal those after step 2 bit for
    bit, the later steps train on (finite losses) and the run exits 0 counting one skip;
  - --inject-nan 2,3,4 --max-skips 3: the run stops at step 4 with exit 3 and a one-line error
    naming the last good checkpoint;
  - --loss-scale: a power-of-two scale changes no bit of the run; an overflow skips the step, halves
    the scale and is not a guard skip; good steps double it; the state file keeps it for -y;
  - -sg / -sl (z-scores over --outlier-window steps): the steps skipped are exactly those that a
    float64 re-implementation of the rule picks from the logged losses and norms.

  test_guards.py --bin build/train_gpt2
Exit status 1 if any check failed.
"""
import argparse
import json
import math
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from testlib import check, failures, write_shard  # noqa: E402

MODEL = "L2C32H2T64V2048"
HEADER_BYTES = 256 * 4  # model and state files: 256 int32 header, then the payload


def read(path):
    with open(path, "rb") as fh:
        return fh.read()


def records(run_dir):
    with open(os.path.join(run_dir, "log.jsonl")) as fh:
        return [x for x in (json.loads(line) for line in fh) if "loss" in x]


def expected_skips(recs, loss_z, norm_z, window):
    """The guard's rule in float64: z against the previous `window` finite values (population
    std), 0 until the window is full; NaN/Inf always skip; every finite value enters the window."""
    losses, norms, skips = [], [], []

    def z(win, x):
        if len(win) < window:
            return 0.0
        w = win[-window:]
        mean = sum(w) / window
        sd = math.sqrt(sum((v - mean) ** 2 for v in w) / window)
        return (x - mean) / sd if sd > 0 else 0.0

    for r in recs:
        loss, norm = r["loss"], r["norm"]
        bad = loss is None or norm is None
        skip = bad or (loss_z > 0 and z(losses, loss) > loss_z) or (norm_z > 0 and z(norms, norm) > norm_z)
        if loss is not None:
            losses.append(loss)
        if norm is not None:
            norms.append(norm)
        skips.append(bool(skip))
    return skips


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    a = ap.parse_args()
    binary = os.path.abspath(a.bin)
    tmp = tempfile.mkdtemp(prefix="leanstep_guard_")
    try:
        rng = random.Random(7)
        write_shard(os.path.join(tmp, "train.bin"), [rng.randrange(2048) for _ in range(20000)])
        base = ["-e", MODEL, "-i", os.path.join(tmp, "train.bin"), "-b", "2", "-t", "32", "-s", "0", "-v", "0",
                "-l", "1e-3", "--threads", "1"]
        help_text = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=60).stdout
        fp16 = "(fp16" in help_text  # the FP16 GPU build scales the loss by default: the guards' checks run without
        if fp16:
            base += ["--loss-scale", "0"]

        # one NaN step: with AdamW, and with Muon (its momentum and Newton-Schulz must not see it)
        for opt in ([], ["--optimizer", "muon"]):
            tag = " ".join(opt) or "adamw"
            d = os.path.join(tmp, "nan1" + "".join(opt))
            r = subprocess.run([binary] + base + ["-x", "6", "-n", "1", "-o", d, "--inject-nan", "3"] + opt,
                               capture_output=True, text=True, timeout=600)
            check(r.returncode == 0, "%s --inject-nan 3: the run exits 0 (exit %d: %s)" % (tag, r.returncode, r.stderr.strip()[-300:]))
            recs = records(d) if os.path.exists(os.path.join(d, "log.jsonl")) else []
            check([x.get("skipped", False) for x in recs] == [False, False, True, False, False, False],
                  "--inject-nan 3: log.jsonl marks step 3 (only) skipped: %s" % recs)
            if len(recs) == 6:
                check(recs[2]["norm"] is None, "the skipped step's norm is logged as null: %s" % recs[2])
                check(all(math.isfinite(x["loss"]) for x in recs) and all(x["norm"] is not None for i, x in enumerate(recs) if i != 2),
                      "every other step has a finite loss and norm")
            m2, m3 = (os.path.join(d, "model_%08d.bin" % s) for s in (2, 3))
            if os.path.exists(m2) and os.path.exists(m3):
                check(read(m2) == read(m3), "%s: the model after the skipped step 3 equals the model after step 2, bit for bit" % tag)
                check(read(os.path.join(d, "model_00000004.bin")) != read(m3), "step 4 updates the model again")
                s2, s3 = (read(os.path.join(d, "state_%08d_00000.bin" % s)) for s in (2, 3))
                check(s2[HEADER_BYTES:] == s3[HEADER_BYTES:], "%s: the optimizer state after step 3 equals that after step 2" % tag)
            else:
                check(False, "checkpoints 2 and 3 were written")
            check("step 3: update skipped, gradient norm is nan" in r.stdout, "the step's skip is printed with its reason")
            check("1 updates skipped" in r.stdout, "the summary counts the skip")

        # too many skips in a row: stop
        d = os.path.join(tmp, "nan3")
        r = subprocess.run([binary] + base + ["-x", "8", "-n", "1", "-o", d, "--inject-nan", "2,3,4", "--max-skips", "3"],
                           capture_output=True, text=True, timeout=600)
        err = r.stderr.strip().splitlines()
        check(r.returncode == 3, "3 skips in a row with --max-skips 3: exit 3 (exit %d)" % r.returncode)
        check(len(err) == 1 and "3 updates in a row skipped" in err[0] and "model_00000003.bin" in err[0],
              "a one-line error naming the last good checkpoint: %s" % err)
        check(not os.path.exists(os.path.join(d, "model_00000005.bin")), "no step after the stop")
        if os.path.exists(os.path.join(d, "model_00000003.bin")):
            check(read(os.path.join(d, "model_00000001.bin")) == read(os.path.join(d, "model_00000003.bin")),
                  "the last checkpoint holds the parameters of the last good step (1)")

        # loss scaling (llmc/run/loss_scale.h): a power-of-two scale changes no bit of an fp32 or bf16
        # run; an overflow (an injected NaN) skips the step as the guard does, halves S and counts
        # nothing towards --max-skips; W good steps double S; a resume continues S from the state file
        plain, scaled = os.path.join(tmp, "ls0"), os.path.join(tmp, "ls1")
        r0 = subprocess.run([binary] + base + ["-x", "6", "-n", "6", "-o", plain], capture_output=True, text=True, timeout=600)
        r1 = subprocess.run([binary] + base + ["-x", "6", "-n", "6", "-o", scaled, "--loss-scale", "1024"],
                            capture_output=True, text=True, timeout=600)
        def ln(run_dir):
            return [(x["loss"], x["norm"]) for x in records(run_dir)] if os.path.exists(os.path.join(run_dir, "log.jsonl")) else None
        if fp16:  # fp16 gradients round differently at each scale; the default scale is on and logged
            r2 = subprocess.run([binary] + base[:-2] + ["-x", "3", "-o", os.path.join(tmp, "ls_default")], capture_output=True,
                                text=True, timeout=600)
            recs = records(os.path.join(tmp, "ls_default")) if r2.returncode == 0 else []
            check("loss scaling: S = 65536, dynamic" in r2.stdout and [x.get("loss_scale") for x in recs] == [65536] * 3,
                  "FP16: loss scaling is on by default from 65536, and log.jsonl records S (%s)" % r2.stderr.strip()[-200:])
        else:
            same = r0.returncode == 0 and r1.returncode == 0 and ln(plain) == ln(scaled) and ln(plain) is not None
            check(same and read(os.path.join(plain, "model_00000006.bin")) == read(os.path.join(scaled, "model_00000006.bin")),
                  "--loss-scale 1024: the losses, norms and final model of the run without it, bit for bit (%s)" % r1.stderr.strip()[-200:])
        check(r0.returncode == 0 and all("loss_scale" not in x for x in records(plain)),
              "without loss scaling log.jsonl has no loss_scale")
        d = os.path.join(tmp, "ls2")
        ls = ["--loss-scale", "1024", "--loss-scale-window", "2"]
        r = subprocess.run([binary] + base + ["-x", "8", "-n", "1", "-o", d, "--inject-nan", "3,4", "--max-skips", "1"] + ls,
                           capture_output=True, text=True, timeout=600)
        check(r.returncode == 0, "overflows do not count towards --max-skips 1 (exit %d: %s)" % (r.returncode, r.stderr.strip()[-300:]))
        check("step 3: update skipped, gradient overflow at loss scale 2048 (now 1024" in r.stdout and
              "step 4: update skipped, gradient overflow at loss scale 1024 (now 512" in r.stdout,
              "S doubles after 2 good steps (2048), then halves at each overflow (1024, 512)")
        recs = records(d) if os.path.exists(os.path.join(d, "log.jsonl")) else []
        check([x.get("skipped", False) for x in recs] == [False, False, True, True, False, False, False, False],
              "log.jsonl marks the overflow steps 3 and 4 skipped: %s" % [x.get("skipped", False) for x in recs])
        check([x.get("loss_scale") for x in recs] == [1024, 2048, 1024, 512, 512, 1024, 1024, 2048],
              "log.jsonl records S after each step: %s" % [x.get("loss_scale") for x in recs])
        shown = [int(m.group(1)) for m in re.finditer(r"^step +(\d+)/\d+ \|.*\| loss scale \d+ \|", r.stdout, re.M)]
        check(shown == [2, 3, 4, 6, 8], "the step line shows S where it changed (steps %s)" % shown)

        def scale_of(step):  # the state file's header[20] (float) and [21] (good steps)
            h = read(os.path.join(d, "state_%08d_00000.bin" % step))[:HEADER_BYTES]
            return struct.unpack("<f", h[80:84])[0], struct.unpack("<i", h[84:88])[0]
        if all(os.path.exists(os.path.join(d, "state_%08d_00000.bin" % k)) for k in (2, 4, 5, 6)):
            check(read(os.path.join(d, "model_00000002.bin")) == read(os.path.join(d, "model_00000004.bin")),
                  "the model after the overflows equals the model after step 2, bit for bit")
            st2, st4 = (read(os.path.join(d, "state_%08d_00000.bin" % k))[HEADER_BYTES:] for k in (2, 4))
            check(st2 == st4, "the optimizer state after the overflows equals that after step 2")
            got = [scale_of(k) for k in (2, 4, 5, 6)]
            check(got == [(2048.0, 0), (512.0, 0), (512.0, 1), (1024.0, 0)],
                  "the state files record S and its good steps: %s" % got)
            # resume from step 5: the rest as in the run without a stop, S included
            end = scale_of(8)
            for k in (6, 7, 8):
                for f in ("DONE_%08d" % k, "model_%08d.bin" % k, "state_%08d_00000.bin" % k):
                    if os.path.exists(os.path.join(d, f)):
                        os.remove(os.path.join(d, f))
            rr = subprocess.run([binary] + base + ["-x", "8", "-n", "1", "-o", d, "-y", "1"] + ls, capture_output=True, text=True,
                                timeout=600)
            tail = [x for x in (records(d) if os.path.exists(os.path.join(d, "log.jsonl")) else []) if x["step"] > 5]
            check(rr.returncode == 0 and [x["loss"] for x in tail[-3:]] == [x["loss"] for x in recs[5:]],
                  "a resume from step 5: the losses of steps 6-8 as before (%s)" % rr.stderr.strip()[-200:])
            check(os.path.exists(os.path.join(d, "state_00000008_00000.bin")) and scale_of(8) == end == (2048.0, 0),
                  "a resume from step 5 continues with the saved S: S and its good steps at step 8 as before (%s)" % (end,))
        else:
            check(False, "the loss-scaling run wrote its checkpoints")

        # z-score skipping, checked against the rule re-implemented here
        for flags, lz, nz in ((["-sg", "0.5"], 0.0, 0.5), (["-sl", "0.3"], 0.3, 0.0)):
            d = os.path.join(tmp, "z" + flags[0])
            r = subprocess.run([binary] + base + ["-x", "16", "-o", d, "--outlier-window", "4", "--max-skips", "100"] + flags,
                               capture_output=True, text=True, timeout=600)
            check(r.returncode == 0, "%s: exit 0 (exit %d: %s)" % (flags, r.returncode, r.stderr.strip()[-300:]))
            recs = records(d) if os.path.exists(os.path.join(d, "log.jsonl")) else []
            got = [x.get("skipped", False) for x in recs]
            want = expected_skips(recs, lz, nz, 4)
            check(len(recs) == 16 and got == want, "%s --outlier-window 4: skipped steps %s, the rule says %s"
                  % (flags, [i + 1 for i, s in enumerate(got) if s], [i + 1 for i, s in enumerate(want) if s]))
            check(any(got) and not all(got[4:]), "%s: some steps skipped, some not (%d of 16)" % (flags, sum(got)))
            check(not any(got[:4]), "%s: no z-score skip before the window is full" % flags)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("test_guards (%s): %s" % (os.path.basename(binary), "%d failed" % len(failures) if failures else "all checks passed"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

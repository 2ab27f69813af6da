#!/usr/bin/env python3
"""test_cli.py: the trainer's command line, end to end.

  --help lists flags, and every listed flag parses with a valid value (--dry-run), a 0|1 flag also
  alone; bad values, unknown flags and out-of-range configs fail with exit 2 and a one-line message
  "leanstep: error: ..." naming the flag (an unknown flag near a known one: "did you mean"); a
  missing or corrupt model file, missing data, a missing HellaSwag file or an output directory that
  cannot be made fail with exit 1 naming the file, before the banner; a tiny training run with a
  checkpoint resumes bit-exactly (-y 1).
Usage: test_cli.py --bin build/train_gpt2. Exit status 1 if any check failed.
"""
import argparse
import os
import re
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from testlib import check, failures, write_shard  # noqa: E402

SMALL = "L2C32H2T64V512"  # its max sequence length is 64


def run(binary, args, cwd=None):
    return subprocess.run([binary] + args, capture_output=True, text=True, cwd=cwd, timeout=300)




def parse_help(text):
    """Rows '  -x, --long KIND help (default D, range [a, b])' -> list of dicts."""
    flags = []
    for line in text.splitlines():
        m = re.match(r"^\s+(?:-(\w+), )?\s*--([\w-]+)\s+(INT|FLOAT|STR|WORD|0\|1)?\s", line)
        if not m or m.group(2) == "help":
            continue
        f = {"short": m.group(1), "long": m.group(2), "kind": m.group(3)}
        r = re.search(r"range \[([-\d.e+]+), ([-\d.e+]+)\]", line)
        if r:
            f["min"], f["max"] = float(r.group(1)), float(r.group(2))
        c = re.search(r"one of ([\w -]+)\)", line)
        if c:
            f["choices"] = c.group(1).split()
        flags.append(f)
    return flags


def valid_value(f):
    if f["long"] == "model":
        return SMALL
    if f["long"] == "inject-nan":
        return "3,5"
    kind = f["kind"]
    if kind == "INT":
        return str(int(f["min"]))
    if kind == "FLOAT":
        return repr(f["min"])
    if kind == "WORD":
        return f["choices"][-1]
    if kind == "0|1":
        return "1" if f["long"] == "dry-run" else "0"
    return "some_value"




PROFILE_FAMILIES = ("encoder", "layernorm", "matmul", "matmul backward", "attention", "gelu", "classifier",
                    "global norm", "optimizer update", "communication")


def check_profile(binary, train, val):
    """--profile 1 (GPU trainer): a warm-up step, one profiled step of 2 micro-steps (-d 64), the
    table with every kernel family, calls that match the model (L = 2), and exit 0."""
    rr = run(binary, ["-e", SMALL, "-i", train, "-j", val, "-b", "2", "-t", "16", "-d", "64", "--threads", "1",
                      "--profile", "1"])
    check(rr.returncode == 0, "--profile 1 exits 0: %s" % rr.stderr.strip()[-300:])
    check(len(re.findall(r"^step\s+\d+/2 \|", rr.stdout, re.M)) == 2, "--profile: a warm-up step and the profiled one")
    check("val loss" not in rr.stdout and "generating" not in rr.stdout, "--profile: no val loss, no samples")
    rows = {}
    for m in re.finditer(r"^  ([a-z][a-z ]*?) +([\d.]+) +([\d.]+)%(?: +(\d+))?", rr.stdout, re.M):
        rows[m.group(1)] = (float(m.group(2)), float(m.group(3)), int(m.group(4)) if m.group(4) else None)
    missing = [f for f in PROFILE_FAMILIES + ("other", "step") if f not in rows]
    check(not missing, "--profile: table rows for every family, other and step (missing %s): %s" % (missing, rr.stdout[-1500:]))
    if missing:
        return
    # per micro-step: encoder fwd + bwd, 2 layernorms per layer + final in the forward and 2 per layer
    # backward + final, 4 matmuls per layer + the logits, 1 attention fwd + bwd per layer, the
    # classifier and its loss sum; per step: the norm's 2 calls and 1 update
    L, accum = 2, 2
    expect = {"encoder": 2 * accum, "layernorm": (2 * L + 1) * 2 * accum, "matmul": (4 * L + 1) * accum,
              "matmul backward": (4 * L + 1) * accum, "attention": 2 * L * accum, "classifier": 2 * accum,
              "global norm": 2, "optimizer update": 1, "communication": 0}
    for f, n in expect.items():
        check(rows[f][2] == n, "--profile: %s called %s times, expected %d" % (f, rows[f][2], n))
    total = sum(rows[f][0] for f in PROFILE_FAMILIES) + rows["other"][0]
    check(rows["step"][0] > 0 and abs(total - rows["step"][0]) <= 0.01 * rows["step"][0] + 0.01,
          "--profile: the families and other add up to the step (%.3f vs %.3f ms)" % (total, rows["step"][0]))


# The refused combinations of flags (those without meaning): each exits 1 before anything is
# allocated (--memory-report too), naming the flags; gpu: a GPU trainer's flag is in it.
# (dev/test/test_optim_matrix.py runs every optimizer x state x placement cell.)
REFUSED = [
    (["--optimizer", "sgd", "--momentum", "0", "--opt-state", "int8"], "plain SGD keeps no state", False),
    (["--muon-scale", "orig"], "are Muon options", False),
    (["--optimizer", "lion", "--muon-adamw-lr", "0.01"], "are Muon options", False),
    (["--offload-delay", "1"], "--offload-delay 1", True),
    (["--offload", "stream", "--offload-delay", "1"], "--offload-delay 1", True),
]
# Combinations the optimizer engine made possible (refused before it); gpu: a GPU trainer's flag is in it.
ACCEPTED = [
    (["-pn", "2", "-z", "1"], False),
    (["--optimizer", "lamb", "-pn", "2", "-z", "1"], False),
    (["--optimizer", "lamb", "-pn", "2", "-z", "1", "--offload", "stream"], True),
    (["--optimizer", "lion", "--badam", "2"], False),
    (["--opt-state", "int8", "--badam", "2"], False),
    (["--amsgrad", "1", "-pn", "2", "-z", "1"], False),
    (["--opt-state", "int8", "-pn", "2", "-z", "1"], False),
    (["-pn", "2", "-z", "1", "--badam", "2"], False),
    (["--badam", "2", "--offload", "stream"], True),
    (["--opt-state", "int8", "--offload", "stream"], True),
    (["-pn", "2", "-z", "1", "--offload", "stream", "--opt-state", "int8"], True),
    (["-pn", "2", "-z", "1", "--offload", "stream", "--opt-state", "4bit", "--amsgrad", "1"], True),
    (["--optimizer", "muon", "--badam", "2", "--muon-qkv", "joined", "--muon-plain", "1"], False),
    (["--optimizer", "muon", "--opt-state", "4bit", "-pn", "2", "-z", "1", "--offload", "stream"], True),
    (["--optimizer", "muon", "-pn", "2", "-z", "0", "--muon-adamw-lr", "0.003"], False),
    (["--optimizer", "muon", "--opt-state", "int8", "--badam", "2"], False),
    (["--optimizer", "muon", "-pn", "2", "-z", "1"], False),  # Muon needs whole matrices, not shards
    (["--optimizer", "muon", "-pn", "8", "-z", "1", "--opt-state", "bf16", "--badam", "2"], False),
    (["--optimizer", "muon", "-pn", "2", "-z", "1", "--offload", "stream"], True),
    (["-pn", "2", "-z", "1", "--badam", "2", "--offload", "cpu", "--opt-state", "4bit"], True),
    (["--optimizer", "lamb", "--offload", "cpu", "--offload-delay", "1"], True),
    (["--optimizer", "muon", "--offload", "cpu", "--opt-state", "int8"], True),  # Newton-Schulz on the host
    (["--optimizer", "muon", "-pn", "2", "-z", "1", "--offload", "cpu", "--offload-delay", "1"], True),
    (["--offload", "cpu", "--offload-delay", "1", "-pn", "2", "-z", "1", "--badam", "2"], True),
]


def check_refused(binary, gpu):
    base = ["--memory-report", "1", "-e", SMALL, "-t", "16"]
    for extra, words, gpu_only in REFUSED:
        if gpu_only and not gpu:
            continue
        r = run(binary, base + extra)
        check(r.returncode == 1 and words in r.stderr and len(r.stderr.strip().splitlines()) == 1,
              "%s is refused in one line naming the flags (exit %d: %s)" % (" ".join(extra), r.returncode, r.stderr.strip()))
    for extra, gpu_only in ACCEPTED:
        if gpu_only and not gpu:
            continue
        r = run(binary, base + extra)
        check(r.returncode == 0, "%s is accepted (exit %d: %s)" % (" ".join(extra), r.returncode, r.stderr.strip()))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    binary = os.path.abspath(ap.parse_args().bin)

    # --help and every flag it lists
    r = run(binary, ["--help"])
    check(r.returncode == 0, "--help exits 0")
    flags = parse_help(r.stdout)
    check(len(flags) >= 25, "--help lists the flags (found %d)" % len(flags))
    prec = next((p for p in ("fp32", "fp16", "bf16") if "(%s" % p in r.stdout), "fp32")  # the summary names the GPU build's
    for f in flags:
        for name in (["-" + f["short"]] if f["short"] else []) + ["--" + f["long"]]:
            value = "1" if f["long"] == "master-weights" and prec == "fp16" else valid_value(f)  # (-w 0: refused in fp16)
            args = ["--dry-run", "1", "-e", SMALL, "-t", "16", name, value]
            if f["long"] == "model":
                args = ["--dry-run", "1", "-t", "16", name, SMALL]
            if f["long"].startswith("muon-"):  # Muon's own options: with Muon
                args += ["--optimizer", "muon"]
            rr = run(binary, args)
            check(rr.returncode == 0, "flag %s %s parses (exit %d: %s)" % (name, value, rr.returncode, rr.stderr.strip()))
        name = "-" + f["short"] if f["short"] else "--" + f["long"]
        bad = []
        if f["kind"] in ("INT", "FLOAT"):
            bad = ["abc", "1x", str(f["max"] * 10 + 10), str(f["min"] - 10)]
        elif f["kind"] == "0|1":
            bad = ["2", "yes"]
        elif f["kind"] == "WORD":
            bad = ["bogus"]
        for value in bad:
            rr = run(binary, ["--dry-run", "1", "-e", SMALL, "-t", "16", name, value])
            ok = rr.returncode == 2 and name in rr.stderr and len(rr.stderr.strip().splitlines()) == 1 and \
                rr.stderr.startswith("leanstep: error: ")
            check(ok, "bad value %s %s fails with exit 2 and a one-line message naming the flag (exit %d: %r)" % (name, value, rr.returncode, rr.stderr))
    # config errors that need the model
    for args, flag in ((["-t", "65"], "-t"), (["-g", "100"], "-g"), (["-b", "0"], "-b"), (["-d", "100"], "-d"),
                       (["--inject-nan", "3,x"], "--inject-nan"), (["--inject-nan", "0"], "--inject-nan"),
                       (["--inject-nan", "2,"], "--inject-nan")):
        rr = run(binary, ["--dry-run", "1", "-e", SMALL, "-t", "16"] + args)
        check(rr.returncode == 2 and flag in rr.stderr, "%s fails naming %s (exit %d: %s)" % (args, flag, rr.returncode, rr.stderr.strip()))
    for args in (["-zz", "1"], ["--nope", "1"], ["-b"]):
        rr = run(binary, args)
        check(rr.returncode == 2 and args[0] in rr.stderr, "%s fails with exit 2 (exit %d)" % (args, rr.returncode))
    # an unknown flag near a known one names it; one that is near none does not guess
    for arg, near in (("-lr", "-l, --lr"), ("--dry", "--dry-run"), ("-dry-run", "--dry-run"), ("--seq-length", "-t, --seq-len"),
                      ("--batchsize", "-b, --batch-size"), ("-x0", "-x, --max-steps")):
        rr = run(binary, ["--dry-run", "1", "-e", SMALL, "-t", "16", arg, "1"])
        check(rr.returncode == 2 and ("did you mean %s?" % near) in rr.stderr and len(rr.stderr.strip().splitlines()) == 1,
              "unknown %s: one line, did you mean %s (exit %d): %s" % (arg, near, rr.returncode, rr.stderr.strip()))
    rr = run(binary, ["--dry-run", "1", "-e", SMALL, "-t", "16", "--zebra", "1"])
    check(rr.returncode == 2 and "did you mean" not in rr.stderr, "unknown --zebra: no guess: %s" % rr.stderr.strip())
    # a 0|1 flag alone means 1, before another flag or at the end; with a value it takes the value
    for args in (["--dry-run", "-e", SMALL, "-t", "16"], ["-e", SMALL, "-t", "16", "--dry-run"],
                 ["-e", SMALL, "-t", "16", "--dry-run", "--amsgrad"], ["--dry-run=1", "-e", SMALL, "-t", "16", "-a"]):
        rr = run(binary, args)
        check(rr.returncode == 0 and "memory" in rr.stdout and not re.search(r"^step ", rr.stdout, re.M),
              "%s: a 0|1 flag alone is on (exit %d: %s)" % (" ".join(args), rr.returncode, rr.stderr.strip()))
    rr = run(binary, ["--dry-run", "-e", SMALL, "-t", "16", "--amsgrad"])
    check(rr.returncode == 0 and "AMSGrad" in rr.stdout, "--amsgrad alone turns AMSGrad on: %s" % rr.stdout[-300:])
    if os.path.basename(binary).startswith("train_gpt2") and not os.path.basename(binary).startswith("train_gpt2cu"):
        rr = run(binary, ["--dry-run", "1", "-e", SMALL, "-t", "16", "-r", "1"])
        check(rr.returncode == 2 and "GPU trainer" in rr.stderr, "a GPU-only flag names the GPU trainer: %s" % rr.stderr.strip())
    if "gpt2cu" in os.path.basename(binary):
        # the harness reports an 80 GiB device: GPT-2 1558M at B=64 does not fit
        rr = run(binary, ["--dry-run", "1", "-e", "d48", "-b", "64", "-t", "1024"])
        check(rr.returncode == 1 and "largest batch that fits is -b" in rr.stderr,
              "out of device memory names the largest batch that fits: %s" % rr.stderr.strip()[-300:])
        # --attention: cudnn (flash, no T x T buffers) is the BF16 build's default; FP32 and FP16 have matmul only
        matmul_only = prec != "bf16"
        rr = run(binary, ["--dry-run", "1", "-e", SMALL, "-t", "16"])
        want = "attention matmul" if matmul_only else "attention cudnn"
        check(rr.returncode == 0 and want in rr.stdout, "the default is %s: %s" % (want, rr.stdout[-300:]))
        rr = run(binary, ["--dry-run", "1", "-e", SMALL, "-t", "16", "--attention", "cudnn"])
        if matmul_only:
            check(rr.returncode == 1 and "--attention" in rr.stderr and len(rr.stderr.strip().splitlines()) == 1,
                  "--attention cudnn in the %s build: one line naming the flag: %s" % (prec, rr.stderr.strip()))
        else:
            acts = {}
            for att in ("matmul", "cudnn"):
                rr = run(binary, ["--memory-report", "1", "-e", "d12", "-b", "16", "-t", "1024", "--attention", att])
                m = re.search(r"\| activations +\| +([\d.]+) \|", rr.stdout)
                acts[att] = float(m.group(1)) if rr.returncode == 0 and m else float("nan")
            check(acts["matmul"] - acts["cudnn"] >= 4.5e9 / 2**20,
                  "--attention cudnn: d12 B16 T1024 activations %.1f MiB, at least 4.5 GB below matmul's %.1f MiB"
                  % (acts["cudnn"], acts["matmul"]))
        # the oldest GPU of each build (the harness reports LEANSTEP_HARNESS_SM): one line naming the
        # compute capability; bf16 needs sm_80, fp16 and fp32 what CUDA 13 compiles for (sm_75)
        too_old, fits = ("75", "80") if prec == "bf16" else ("61", "75")
        for sm in (too_old, "70") if prec != "bf16" else (too_old,):
            rr = subprocess.run([binary, "--dry-run", "1", "-e", SMALL, "-t", "16"], capture_output=True, text=True, timeout=300,
                                env=dict(os.environ, LEANSTEP_HARNESS_SM=sm))
            cc = "compute capability %s.%s" % (sm[0], sm[1])
            check(rr.returncode == 1 and cc in rr.stderr and len(rr.stderr.strip().splitlines()) == 1,
                  "a GPU of sm_%s: one line naming its %s (exit %d: %s)" % (sm, cc, rr.returncode, rr.stderr.strip()))
        rr = subprocess.run([binary, "--dry-run", "1", "-e", SMALL, "-t", "16"], capture_output=True, text=True, timeout=300,
                            env=dict(os.environ, LEANSTEP_HARNESS_SM=fits))
        check(rr.returncode == 0, "a GPU of sm_%s runs the %s build (exit %d: %s)" % (fits, prec, rr.returncode, rr.stderr.strip()))
        if prec == "fp16":
            # fp16 keeps fp32 master weights (-w 0 refused) and scales the loss from 65536 by default
            rr = run(binary, ["--dry-run", "1", "-e", SMALL, "-t", "16", "-w", "0"])
            check(rr.returncode == 1 and "-w 0" in rr.stderr and len(rr.stderr.strip().splitlines()) == 1,
                  "-w 0 in the FP16 build: one line naming the flag: %s" % rr.stderr.strip())
            rr = run(binary, ["--help"])
            check(re.search(r"--loss-scale .*\(default 65536", rr.stdout) is not None,
                  "--help: --loss-scale defaults to 65536 in the FP16 build")
    # --memory-report -pn N: one of N processes' table (ZeRO-1: the optimizer state, fp32 AdamW's
    # 8 bytes/param, divided by N); -pn without the processes to go with it fails
    state_row = r"\| optimizer state +\| +[\d.]+ \| +([\d.]+) \|"
    rr = run(binary, ["--memory-report", "1", "-e", "d12", "-b", "4", "-t", "64"])
    m = re.search(state_row, rr.stdout)
    check(rr.returncode == 0 and m and m.group(1) == "8.00" and "AdamW m" not in rr.stdout,
          "--memory-report: one optimizer state row at 8.00 bytes/param for fp32 AdamW: %s" % (m.group(0) if m else rr.stdout[-400:]))
    rr = run(binary, ["--memory-report", "1", "-e", "d12", "-b", "4", "-t", "64", "-z", "1", "-pn", "4"])
    m = re.search(state_row, rr.stdout)
    check(rr.returncode == 0 and "per process of 4" in rr.stdout and m and m.group(1) == "2.00",
          "--memory-report -z 1 -pn 4: optimizer state at 2.00 bytes/param per process: %s" % (m.group(0) if m else rr.stdout[-400:]))
    rr = run(binary, ["--dry-run", "1", "-e", SMALL, "-t", "16", "-pn", "2"])
    check(rr.returncode == 2 and "-pn" in rr.stderr, "-pn 2 in a single process fails naming -pn: %s" % rr.stderr.strip())
    if "gpt2cu" in os.path.basename(binary):  # --offload's predicted step in the memory report
        for mode, want in (("cpu", r"undelayed: step [\d.]+ ms.*\n.*--offload-delay 1: step [\d.]+ ms, [\d.]+ ms hidden"),
                           ("stream", r"--offload stream: \d+ MiB of state and master weights up and down")):
            rr = run(binary, ["--memory-report", "1", "-e", "d12", "-b", "4", "-t", "64", "--offload", mode,
                              "--predict-host-threads", "8"])
            check(rr.returncode == 0 and re.search(want, rr.stdout) is not None and "offloaded to pinned host memory" in rr.stdout,
                  "--memory-report --offload %s: the host memory and the predicted step: %s" % (mode, rr.stdout[-600:]))
    if "gpt2cu" in os.path.basename(binary):  # 13B parameters: their state on the host fits no machine here
        rr = run(binary, ["--dry-run", "1", "-e", "L64C4096H32", "-t", "64", "-b", "1", "--offload", "cpu"])
        lines = rr.stderr.strip().splitlines()
        check(rr.returncode == 1 and len(lines) == 1 and "out of host memory" in lines[0] and "MiB available" in lines[0],
              "--offload cpu without the host memory for the state: one line naming the bytes (exit %d): %s"
              % (rr.returncode, rr.stderr.strip()[-400:]))
    rr = run(binary, ["--dry-run", "1", "-e", "L2C30H4", "-t", "16"])
    check(rr.returncode != 0 and "heads" in rr.stderr, "a bad descriptor fails naming the problem: %s" % rr.stderr.strip())

    with tempfile.TemporaryDirectory() as tmp:
        # missing / corrupt model file
        rr = run(binary, ["--dry-run", "1", "-t", "16", "-e", os.path.join(tmp, "nope.bin")])
        check(rr.returncode == 1 and "nope.bin" in rr.stderr, "missing model file names the file")
        junk = os.path.join(tmp, "junk.bin")
        with open(junk, "wb") as fh:
            fh.write(b"\0" * 2000)
        rr = run(binary, ["--dry-run", "1", "-t", "16", "-e", junk])
        check(rr.returncode == 1 and "junk.bin" in rr.stderr and "magic" in rr.stderr, "corrupt model file: %s" % rr.stderr.strip())
        # missing data
        rr = run(binary, ["-e", SMALL, "-t", "16", "-i", os.path.join(tmp, "none_*.bin"), "-x", "1"])
        check(rr.returncode == 1 and "make data" in rr.stderr, "missing data says how to get it: %s" % rr.stderr.strip())
        # bad paths stop the run before its banner: one line naming the flag, nothing on stdout
        blocker = os.path.join(tmp, "blocker")
        with open(blocker, "w") as fh:
            fh.write("x")
        for args, flag in ((["-i", os.path.join(tmp, "none_*.bin")], "flag -i:"), (["-o", os.path.join(blocker, "out")], "flag -o:"),
                           (["--hellaswag", "--hellaswag-file", os.path.join(tmp, "no.jsonl")], "flag --hellaswag-file:"),
                           (["-e", os.path.join(tmp, "none.bin")], "flag -e:")):
            rr = run(binary, ["-e", SMALL, "-t", "16", "-x", "1"] + args)
            lines = rr.stderr.strip().splitlines()
            check(rr.returncode == 1 and len(lines) == 1 and lines[0].startswith("leanstep: error: " + flag) and rr.stdout == "",
                  "%s: one line naming the flag before the banner (exit %d): %s | stdout %r"
                  % (" ".join(args), rr.returncode, rr.stderr.strip(), rr.stdout[:200]))

        # training, checkpoints and a bit-exact resume
        import random
        rng = random.Random(0)
        # a learnable stream: a fixed random cycle of 37 tokens
        cycle = [rng.randrange(512) for _ in range(37)]
        write_shard(os.path.join(tmp, "train.bin"), [cycle[i % 37] for i in range(4000)])
        write_shard(os.path.join(tmp, "val.bin"), [rng.randrange(512) for _ in range(1000)])
        variants = [[], ["--badam", "2"], ["--optimizer", "lion", "--beta2", "0.99", "-l", "3e-4"], ["--opt-state", "int8"],
                    ["--optimizer", "lamb"], ["--optimizer", "sgd", "--momentum", "0", "-l", "1e-1"]]
        if "gpt2cu" in os.path.basename(binary):  # the state in pinned host memory: streamed in chunks, or the
            variants.append(["--offload", "stream", "--offload-chunk", "5000"])  # CPU's update, delayed a step
            variants.append(["--offload", "cpu", "--offload-delay", "1", "--offload-delay-warmup", "2"])
        for extra in variants:
            tag = " ".join(extra) or "full AdamW"
            common = ["-e", SMALL, "-i", os.path.join(tmp, "train.bin"), "-j", os.path.join(tmp, "val.bin"),
                      "-b", "2", "-t", "16", "-x", "6", "-n", "3", "-v", "3", "-s", "0", "-l", "1e-3", "--threads", "1"] + extra
            a = os.path.join(tmp, "a" + "_".join(extra).replace("-", ""))
            b = os.path.join(tmp, "b" + "_".join(extra).replace("-", ""))
            ra = run(binary, common + ["-o", a])
            check(ra.returncode == 0, "%s: training run exits 0: %s" % (tag, ra.stderr.strip()))
            losses_a = re.findall(r"step\s+(\d+)/6 \| loss ([\d.]+)", ra.stdout)
            check(len(losses_a) == 6, "%s: six step lines (got %d)" % (tag, len(losses_a)))
            check(all(os.path.exists(os.path.join(a, f)) for f in ("model_00000003.bin", "state_00000003_00000.bin", "DONE_00000003", "model_00000006.bin", "main.log")),
                  "%s: checkpoints and main.log written: %s" % (tag, os.listdir(a) if os.path.isdir(a) else "no dir"))
            os.makedirs(b)
            if ra.returncode != 0:
                continue
            for f in ("model_00000003.bin", "state_00000003_00000.bin", "DONE_00000003"):
                with open(os.path.join(a, f), "rb") as src, open(os.path.join(b, f), "wb") as dst:
                    dst.write(src.read())
            rb = run(binary, common + ["-o", b, "-y", "1"])
            check(rb.returncode == 0 and "resumed from step 3" in rb.stdout, "%s: resume exits 0: %s" % (tag, rb.stderr.strip()))
            losses_b = re.findall(r"step\s+(\d+)/6 \| loss ([\d.]+)", rb.stdout)
            check(losses_b == losses_a[3:], "%s: resumed losses equal the uninterrupted run: %s vs %s" % (tag, losses_b, losses_a[3:]))
            if rb.returncode == 0:
                with open(os.path.join(a, "model_00000006.bin"), "rb") as fa, open(os.path.join(b, "model_00000006.bin"), "rb") as fb:
                    check(fa.read() == fb.read(), "%s: the resumed run's final model is bit-identical" % tag)
            losses = [float(x[1]) for x in losses_a]
            check(losses[-1] < losses[0], "%s: loss decreases over 6 steps: %s" % (tag, losses))
        rr = run(binary, common + ["-o", os.path.join(tmp, "empty"), "-y", "1"])
        check(rr.returncode == 0 and "no complete checkpoint" in rr.stdout and "starting from step 0" in rr.stdout,
              "-y 1 without checkpoints starts fresh, saying so: %s" % rr.stderr.strip()[-300:])
        check_refused(binary, "gpt2cu" in os.path.basename(binary))
        if "gpt2cu" in os.path.basename(binary):
            check_profile(binary, os.path.join(tmp, "train.bin"), os.path.join(tmp, "val.bin"))

    print("test_cli: %d flags; %s" % (len(flags), "%d failed" % len(failures) if failures else "all checks passed"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""test_cross_resume.py: -y resumes a checkpoint written in another precision, exactly.

  test_cross_resume.py --cpu build/train_gpt2 --fp32 build/train_gpt2cu_emu_fp32 --bf16 build/train_gpt2cu_emu_bf16

A writer trains 3 steps on TinyShakespeare and checkpoints; a reader of another kind (the CPU
trainer, the fp32 or the bf16 GPU build) resumes from that checkpoint (-y 1) and runs one step at
learning rate 0 (-l 0: the update leaves every parameter as loaded), checkpointing again. What the
reader loaded is then visible bit for bit in its checkpoint:
  - bf16 writer with master weights -> a reader without them (CPU, fp32 build): the reader's
    parameters are the writer's fp32 master weights (its model file holds only their bf16 rounding);
  - fp32 writer (CPU, fp32 build) -> bf16 reader: the reader's master weights are the writer's fp32
    parameters;
  - bf16 writer with -w 0 -> CPU reader: the parameters are the bf16 model file's, widened.
Rows cover plain AdamW, --offload (GPU), the optimizer family (Lion) and BAdam (cpu -> bf16: a run
check only, its master weights cover one block). The two fp32 readers of one bf16 checkpoint must also
print the same loss (1e-4 relative, the CPU/fp32 agreement of test_modes.py).

BAdam (--badam 2, check_badam): a resume reads the state of the block of the last update, the block
of step - 1, which a resume at a block switch (step 4: the next step starts a new block) tells apart
from the step's own block, and a resume mid-block (step 3) does not. At a switch with the blocks layer
0, layer 1, embeddings (the next block is of another size) and with --badam-embed 0 (layer 0, layer 1:
the next block is of the same size, so state read into the wrong block goes unnoticed by the file's
size check), and mid-block: the two fp32 readers (the CPU trainer, the fp32 build: each places the
bf16 writer's master weights of that block by its own code) hold the same parameters bit for bit
after one step at -l 0, and the bf16 build and the CPU trainer resumed from their own checkpoints
continue with their uninterrupted runs' losses to step 6, bit for bit.
Exit status 1 if any check failed.
"""
import argparse
import array
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from testlib import check, failures, step_losses  # noqa: E402

BASE = ["-e", "L2C16H2", "-b", "1", "-t", "16", "-v", "0", "-s", "0", "-n", "3"]
HEADER = 1024


def run(binary, args):
    env = dict(os.environ, OMP_NUM_THREADS="1")  # tiny model: threads would only spin
    return subprocess.run([binary] + args, capture_output=True, text=True, timeout=600, env=env)


def model_params(path):
    """A model file's parameters as a float32 array (bf16 widened exactly)."""
    with open(path, "rb") as f:
        data = f.read()
    version = struct.unpack_from("<i", data, 4)[0]
    body = data[HEADER:]
    if version == 3:
        return array.array("f", body)
    half = array.array("H", body)
    wide = array.array("I", (h << 16 for h in half))
    return array.array("f", wide.tobytes())


def state_master(path):
    """A state file's master weights (float32 array), or None when it has none."""
    with open(path, "rb") as f:
        data = f.read()
    if struct.unpack_from("<i", data, 14 * 4)[0] == 0:
        return None
    count = struct.unpack_from("<Q", data, 17 * 4)[0] or struct.unpack_from("<Q", data, 6 * 4)[0]
    return array.array("f", data[len(data) - 4 * count:])


def same_bits(a, b):
    return a is not None and b is not None and a.tobytes() == b.tobytes()


def copy_checkpoint(src, dst, step):
    os.makedirs(dst)
    for f in ("model_%08d.bin" % step, "state_%08d_00000.bin" % step, "DONE_%08d" % step):
        shutil.copy(os.path.join(src, f), dst)


def check_badam(bins, tmp):
    """BAdam's resume at a block switch and mid-block (see the module's doc)."""
    t0 = time.time()
    for ck, embed, where in ((4, "1", "at a block switch"), (4, "0", "at a block switch, --badam-embed 0"),
                             (3, "1", "mid-block")):
        flags = BASE[:-2] + ["--badam", "2", "--badam-embed", embed]  # (BASE's -n 3 replaced per checkpoint step)
        runs = {}
        for k in ("bf16", "cpu"):  # uninterrupted, checkpointing at ck
            d = os.path.join(tmp, "badam_%s_%d_%s" % (k, ck, embed))
            r = run(bins[k], flags + ["-x", "6", "-n", str(ck), "-o", d])
            check(r.returncode == 0 and len(step_losses(r.stdout)) == 6, "badam %s writer: 6 steps: %s" % (k, r.stderr.strip()[-300:]))
            runs[k] = (d, step_losses(r.stdout))
        if any(len(x[1]) != 6 for x in runs.values()):
            continue
        read = {}
        for k in ("cpu", "fp32"):  # the bf16 checkpoint, one step at -l 0
            d = os.path.join(tmp, "badam_read_%s_%d_%s" % (k, ck, embed))
            copy_checkpoint(runs["bf16"][0], d, ck)
            r = run(bins[k], flags + ["-x", str(ck + 1), "-l", "0", "-n", "1", "-y", "1", "-o", d])
            ok = r.returncode == 0 and "resumed from step %d" % ck in r.stdout
            check(ok, "badam bf16 -> %s %s (step %d): the reader resumes and exits 0: %s" % (k, where, ck, r.stderr.strip()[-300:]))
            read[k] = model_params(os.path.join(d, "model_%08d.bin" % (ck + 1))) if ok else None
        check(same_bits(read["cpu"], read["fp32"]), "badam bf16 -> cpu and fp32 %s (step %d): both readers hold the same "
              "parameters, bit for bit" % (where, ck))
        for k in ("bf16", "cpu"):  # each trainer from its own checkpoint
            d = os.path.join(tmp, "badam_resume_%s_%d_%s" % (k, ck, embed))
            copy_checkpoint(runs[k][0], d, ck)
            r = run(bins[k], flags + ["-x", "6", "-n", "0", "-y", "1", "-o", d])
            want = runs[k][1][ck:]
            check(r.returncode == 0 and step_losses(r.stdout) == want, "badam %s resumed %s (step %d): the uninterrupted "
                  "run's losses: %s vs %s (%s)" % (k, where, ck, step_losses(r.stdout), want, r.stderr.strip()[-300:]))
    print("badam resume at a block switch (step 4, with and without the embeddings' block) and mid-block (step 3): %s (%.1f s)"
          % ("ok" if not failures else "see above", time.time() - t0))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cpu", required=True)
    ap.add_argument("--fp32", required=True)
    ap.add_argument("--bf16", required=True)
    a = ap.parse_args()
    bins = {"cpu": os.path.abspath(a.cpu), "fp32": os.path.abspath(a.fp32), "bf16": os.path.abspath(a.bf16)}
    # writer, its extra flags, reader, its extra flags, what the reader must have loaded
    rows = [
        ("bf16", [], "cpu", [], "params = master"),
        ("bf16", [], "fp32", [], "params = master"),
        ("cpu", [], "bf16", [], "master = params"),
        ("fp32", [], "bf16", [], "master = params"),
        ("bf16", ["-w", "0"], "cpu", [], "params = model file"),
        ("bf16", ["--offload", "stream", "--offload-chunk", "100000"], "cpu", [], "params = master"),
        ("cpu", [], "bf16", ["--offload", "stream", "--offload-chunk", "100000"], "master = params"),
        ("bf16", ["--optimizer", "lion"], "cpu", ["--optimizer", "lion"], "params = master"),
        ("cpu", ["--optimizer", "lion"], "bf16", ["--optimizer", "lion"], "master = params"),
        ("cpu", ["--badam", "2"], "bf16", ["--badam", "2"], None),
    ]
    first_loss = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i, (wk, wflags, rk, rflags, expect) in enumerate(rows):
            tag = "%s %s -> %s %s" % (wk, " ".join(wflags), rk, " ".join(rflags))
            wdir, rdir = os.path.join(tmp, "w%d" % i), os.path.join(tmp, "r%d" % i)
            rw = run(bins[wk], BASE + wflags + ["-x", "3", "-o", wdir])
            check(rw.returncode == 0, "%s: the writer exits 0: %s" % (tag, rw.stderr.strip()[-300:]))
            if rw.returncode != 0:
                continue
            os.makedirs(rdir)
            for f in ("model_00000003.bin", "state_00000003_00000.bin", "DONE_00000003"):
                shutil.copy(os.path.join(wdir, f), rdir)
            rr = run(bins[rk], BASE + rflags + ["-x", "4", "-l", "0", "-n", "1", "-y", "1", "-o", rdir])
            ok = rr.returncode == 0 and "resumed from step 3" in rr.stdout
            check(ok, "%s: the reader resumes and exits 0: %s" % (tag, rr.stderr.strip()[-300:]))
            losses = step_losses(rr.stdout)
            check(len(losses) == 1 and all(math.isfinite(x) for x in losses), "%s: one step with a finite loss (%s)" % (tag, losses))
            if not ok:
                continue
            if not wflags and not rflags and rk in ("cpu", "fp32") and losses:
                first_loss[rk] = losses[0]
            written = model_params(os.path.join(wdir, "model_00000003.bin"))
            read_params = model_params(os.path.join(rdir, "model_00000004.bin"))
            if expect == "params = master":
                check(same_bits(read_params, state_master(os.path.join(wdir, "state_00000003_00000.bin"))),
                      "%s: the reader's parameters are the writer's master weights, bit for bit" % tag)
            elif expect == "params = model file":
                check(same_bits(read_params, written), "%s: the reader's parameters are the model file's, widened" % tag)
            elif expect == "master = params":
                check(same_bits(state_master(os.path.join(rdir, "state_00000004_00000.bin")), written),
                      "%s: the reader's master weights are the writer's fp32 parameters, bit for bit" % tag)
            print("%s: %s" % (tag, "ok" if not failures else "see above"))
        check_badam(bins, tmp)
    if "cpu" in first_loss and "fp32" in first_loss:
        c, g = first_loss["cpu"], first_loss["fp32"]
        check(abs(c - g) <= 1e-4 * abs(c), "bf16 checkpoint read by the CPU trainer and the fp32 build: losses %g and %g agree" % (c, g))
    print("test_cross_resume: %d rows; %s" % (len(rows), "%d failed" % len(failures) if failures else "all checks passed"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""test_golden_resume.py: checkpoints written by an earlier build keep resuming, to the same bits.

  test_golden_resume.py --bin build/train_gpt2 [--gpu-bin build/train_gpt2cu_emu_fp32]
  test_golden_resume.py --bin build/train_gpt2 --gpu-bin build/train_gpt2cu_emu_fp32 --regenerate
  test_golden_resume.py --bin OLD/build/train_gpt2 --record-blas

dev/test/data/golden_ckpt/ holds, for a few optimizer cells (CELLS), the step-2 checkpoint (model,
state, DONE) of a 4-step CPU trainer run on test_optim_matrix.py's tiny model and synthetic data,
and golden.json: each trainer's losses of steps 3 and 4 resumed from it (-y 1), as printed, and the
SHA-256 of the model file it writes at step 4. Each trainer given resumes each checkpoint and must
print those losses and write those bits. The fp32 GPU build writes the same file format as the CPU
trainer (only the crc32s differ), so it resumes the same files, with expectations of its own.

The checkpoints are the format and the numerics of the build that wrote them: a change that must
not change either (the optimizer's code, the state file's layout) passes this test unchanged.
--regenerate (only for a change that means to alter them) writes new checkpoints with --bin and
new expectations with every trainer given, after checking that the CPU trainer's resume is
bit-exact. About 2 CPU-seconds.

The CPU trainer's bits depend on OpenBLAS's kernels, which its core (chosen from the CPU) and
version decide: its model hashes are kept per BLAS ("OpenBLAS 0.3.21, core SkylakeX", as the
trainer's first line names it). On a BLAS with none recorded, its losses (as printed) are checked
and a line says its bits are not; --record-blas adds this BLAS's hashes with the --bin given
(build the commit that wrote the checkpoints: its bits are the earlier build's on this machine),
after checking its losses. The GPU trainer runs under the CPU harness, whose matmuls are its own:
its bits are the same on every machine.
"""
import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from testlib import check, failures, write_cyclic_data  # noqa: E402

GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "golden_ckpt")
# test_optim_matrix.py's run: model L2C16H2T16V512 (15,040 parameters), its synthetic data
DATA = (5, 512, 41, 9, 8000, 2000)  # write_cyclic_data's seed, vocab, period, noise_every, n_train, n_val
BASE = ["-e", "L2C16H2T16V512", "-b", "2", "-t", "16", "-x", "4", "-v", "0", "-s", "0", "-g", "16", "-l", "1e-3",
        "--seed", "7", "-n", "2"]
CKPT_STEP, STEPS = 2, 4
CELLS = {  # directory: the cell's flags
    "adamw_fp32": ["--opt-state", "fp32"],
    "adamw_int8": ["--opt-state", "int8"],
    "lion_bf16": ["--optimizer", "lion", "--opt-state", "bf16"],
    "muon_fp32": ["--optimizer", "muon", "--opt-state", "fp32"],
    # --badam 3: the resumed step 3 continues block 0's saved state, step 4 switches to block 1
    "adamw_fp32_badam": ["--opt-state", "fp32", "--badam", "3"],
}
CKPT_FILES = ["model_%08d.bin" % CKPT_STEP, "state_%08d_00000.bin" % CKPT_STEP, "DONE_%08d" % CKPT_STEP]
# one thread, the harness's default order: nothing but the code decides the bits
ENV = dict({k: v for k, v in os.environ.items() if not k.startswith("LEANSTEP_HARNESS_")}, OMP_NUM_THREADS="1")


def blas_of(out):
    """The BLAS the CPU trainer names on its first line: "OpenBLAS 0.3.21, core SkylakeX"."""
    m = re.search(r"(OpenBLAS \S+), core (\w+)", out)
    return "%s, core %s" % (m.group(1), m.group(2)) if m else "unknown BLAS"


def printed_losses(out):
    """The step lines' losses as printed (strings: compared exactly)."""
    return re.findall(r"^step\s+\d+/\d+ \| loss ([\d.]+)", out, re.M)


def sha256(path):
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def train(binary, trainer, flags, data, out_dir, resume):
    args = [binary] + BASE + ["-i", data[0], "-j", data[1], "-o", out_dir] + flags + (["-y", "1"] if resume else [])
    if trainer == "cpu":
        args += ["--threads", "1"]
    return subprocess.run(args, capture_output=True, text=True, timeout=300, env=ENV)


def resume(binary, trainer, cell, data, tmp):
    """Resumes the golden checkpoint of cell: (losses printed, model sha at STEPS, BLAS) or None."""
    d = os.path.join(tmp, "%s_%s" % (trainer, cell))
    os.makedirs(d)
    for f in CKPT_FILES:
        shutil.copy(os.path.join(GOLDEN, cell, f), d)
    r = train(binary, trainer, CELLS[cell], data, d, True)
    final = os.path.join(d, "model_%08d.bin" % STEPS)
    ok = r.returncode == 0 and "resumed from step %d" % CKPT_STEP in r.stdout and os.path.exists(final)
    check(ok, "%s %s: resumes the golden checkpoint and writes step %d: %s" % (trainer, cell, STEPS,
                                                                               (r.stderr or r.stdout).strip()[-400:]))
    return (printed_losses(r.stdout), sha256(final), blas_of(r.stdout)) if ok else None


def write_golden(golden):
    with open(os.path.join(GOLDEN, "golden.json"), "w") as fh:  # one line per cell
        cells = ",\n".join("  %s: %s" % (json.dumps(c), json.dumps(g)) for c, g in golden["cells"].items())
        fh.write('{"data": %s,\n "base": %s,\n "cells": {\n%s\n }\n}\n'
                 % (json.dumps(golden["data"]), json.dumps(golden["base"]), cells))


def record_blas(binary, golden, data, tmp):
    """Adds the CPU trainer's model hashes on this machine's BLAS (its losses must be the golden ones)."""
    blas = None
    for cell in CELLS:
        got = resume(binary, "cpu", cell, data, tmp)
        if got is None:
            continue
        want = golden["cells"][cell]["cpu"]
        check(got[0] == want["losses"], "cpu %s: resumed losses %s, golden %s" % (cell, got[0], want["losses"]))
        want["model_sha256"][got[2]] = got[1]
        blas = got[2]
    if failures:
        print("test_golden_resume: nothing recorded (%d failed)" % len(failures))
        return 1
    write_golden(golden)
    print("test_golden_resume: the CPU trainer's model hashes on %s recorded for %d cells" % (blas, len(CELLS)))
    return 0


def regenerate(bins, data, tmp):
    golden = {"data": list(DATA), "base": BASE, "cells": {}}
    for cell, flags in CELLS.items():
        w = os.path.join(tmp, "write_" + cell)
        r = train(bins["cpu"], "cpu", flags, data, w, False)
        check(r.returncode == 0, "cpu %s: the writer exits 0: %s" % (cell, r.stderr.strip()[-400:]))
        if r.returncode != 0:
            continue
        shutil.rmtree(os.path.join(GOLDEN, cell), ignore_errors=True)
        os.makedirs(os.path.join(GOLDEN, cell))
        for f in CKPT_FILES:
            shutil.copy(os.path.join(w, f), os.path.join(GOLDEN, cell))
        golden["cells"][cell] = {"flags": flags}
        for trainer, binary in bins.items():
            got = resume(binary, trainer, cell, data, tmp)
            if got is None:
                continue
            if trainer == "cpu":  # the goldens are those of a bit-exact resume
                want = (printed_losses(r.stdout)[CKPT_STEP:], sha256(os.path.join(w, "model_%08d.bin" % STEPS)))
                check(got[:2] == want, "cpu %s: the resumed run equals the uninterrupted one: %s vs %s" % (cell, got, want))
                golden["cells"][cell][trainer] = {"losses": got[0], "model_sha256": {got[2]: got[1]}}
            else:
                golden["cells"][cell][trainer] = {"losses": got[0], "model_sha256": got[1]}
    if failures:
        print("test_golden_resume: not regenerated (%d failed)" % len(failures))
        return 1
    write_golden(golden)
    size = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(GOLDEN) for f in fs)
    print("test_golden_resume: %d cells x %s regenerated in %s (%d bytes)" % (len(CELLS), "/".join(bins), GOLDEN, size))
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, help="the CPU trainer (build/train_gpt2)")
    ap.add_argument("--gpu-bin", help="the fp32 harness GPU trainer (build/train_gpt2cu_emu_fp32)")
    ap.add_argument("--regenerate", action="store_true", help="write new checkpoints and expectations (see above)")
    ap.add_argument("--record-blas", action="store_true", help="add the --bin CPU trainer's bits on this BLAS (see above)")
    a = ap.parse_args()
    bins = {"cpu": os.path.abspath(a.bin)}
    if a.gpu_bin:
        bins["gpu"] = os.path.abspath(a.gpu_bin)
    with tempfile.TemporaryDirectory(prefix="leanstep_golden_") as tmp:
        data = write_cyclic_data(tmp, *DATA)
        if a.regenerate:
            return regenerate(bins, data, tmp)
        with open(os.path.join(GOLDEN, "golden.json")) as fh:
            golden = json.load(fh)
        if a.record_blas:
            return record_blas(bins["cpu"], golden, data, tmp)
        check(golden["data"] == list(DATA) and golden["base"] == BASE and
              {c: g["flags"] for c, g in golden["cells"].items()} == CELLS,
              "golden.json was made with this script's data, flags and cells")
        done, unchecked = [], set()
        for cell in CELLS:
            for trainer, binary in bins.items():
                want = golden["cells"][cell].get(trainer)
                if want is None:
                    check(False, "%s %s: golden.json has no expectations for this trainer" % (trainer, cell))
                    continue
                got = resume(binary, trainer, cell, data, tmp)
                if got is None:
                    continue
                check(got[0] == want["losses"], "%s %s: resumed losses of steps %d-%d %s, golden %s"
                      % (trainer, cell, CKPT_STEP + 1, STEPS, got[0], want["losses"]))
                shas = want["model_sha256"]
                if trainer == "cpu" and got[2] not in shas:  # (bits: kept per BLAS)
                    unchecked.add(got[2])
                else:
                    golden_sha = shas[got[2]] if trainer == "cpu" else shas
                    check(got[1] == golden_sha, "%s %s: the step-%d model's bits changed (sha256 %s, golden %s)"
                          % (trainer, cell, STEPS, got[1][:16], golden_sha[:16]))
                done.append("%s %s" % (trainer, cell))
    for blas in sorted(unchecked):
        print("test_golden_resume: the CPU trainer's model bits are not checked on %s (none recorded: "
              "--record-blas); its losses are" % blas)
    print("test_golden_resume: %d resumes of %d golden checkpoints (%s); %s" % (
        len(done), len(CELLS), ", ".join(bins), "%d failed" % len(failures) if failures else "all checks passed"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

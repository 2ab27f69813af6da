#!/usr/bin/env python3
"""test_optim_matrix.py: every optimizer x state precision x placement cell of the optimizer engine,
run for a few steps by the CPU trainer and, when given, the harness GPU trainer.

  test_optim_matrix.py --bin build/train_gpt2 --mpi-bin build/train_gpt2_mpi \
      [--gpu-bin build/train_gpt2cu_emu_fp32] [--gpu-mpi-bin build/train_gpt2cu_emu_mpi_fp32] [--quick]
      [--record-hashes FILE] [--compare-hashes FILE] [--cells-only]

Cells: optimizer {adamw, adamw+amsgrad, sgd (momentum 0.9, the default), sgd-plain (--momentum 0:
no state), sgd+nesterov, lamb, lion, muon, adam-mini} x state {fp32, bf16, int8, fp16, 4bit} (--opt-state) x placement
{device (plain), badam (--badam 2), z1 (-z 1 over 2 processes, mpirun), offload (--offload stream in
chunks of 4096, GPU), host (--offload cpu: the CPU's update, GPU), and the placements combined:
z1+badam, badam+offload, z1+offload, badam+host, z1+host}: 450 cells. Each cell
trains a tiny model (L2C16H2T16V512, 15,040 parameters) for 4 steps on a synthetic learnable token
stream and must either
  - run: exit 0, 4 step lines with finite losses, losses after step 1 other than those of the same
    run at -l 0 (the update moved the model), and an "optimizer state" row in the memory table
    (none for sgd-plain; the trainers fatally check at start-up that the allocation equals the
    memory model, so a run that starts proves it; the row's bytes/param is checked against
    llmc/optim/state.h's figures for the whole-model view, BAdam's and each ZeRO-1 process's state
    must be smaller, and offloaded state must be reported in pinned host memory), or
  - be refused: exit != 0 before training, with a one-line message (one per rank under mpirun)
    naming a flag of the reason EXPECTED_REFUSED gives for the cell.
A cell expected to run that is refused, or expected refused that runs, fails. With a GPU build,
every cell it runs must give the CPU trainer's per-step losses within 1e-4 relative (both fp32; the
same seed, data and batches): the same cell, or for an offload cell the CPU trainer's cell without
--offload (the CPU trainer's state always is in host memory). A host cell (the CPU's update of the
GPU trainer's state) must also give the GPU's checkpoint of the same cell on the device, bit for bit
(model and state hashes), but Muon's (Newton-Schulz in fp32 on the host, in floatX on the device).
Resume: for a sample of cells (RESUME_CELLS) in each trainer, a 4-step run with checkpoints at steps
2 and 4 resumed from step 2 (-y 1) prints exactly the losses of steps 3-4 and writes a bit-identical
final model; a version-1 state file (AdamW m then v, written before the engine) made from an fp32
AdamW checkpoint resumes exactly as the version-2 file does and is refused by another optimizer;
resuming a checkpoint with another --optimizer or --opt-state is refused naming the flags.
Hashes (a guard for changes that must not change the numerics): with --record-hashes FILE or
--compare-hashes FILE every cell also checkpoints its final step (-o, -n 4), and each cell that ran
gets a line "TRAINER OPT/STATE/PLACE model SHA state SHA" (SHA-256 of the model file and of the state
files of all processes, in rank order). --record-hashes writes the lines; --compare-hashes fails
naming each cell whose bits differ from FILE's and each cell missing from either side (a FILE line
outside this run's cells and trainers is not compared). The bits are this machine's: its CPU and
OpenBLAS decide them. What decides them in a run is pinned: one OpenMP and BLAS thread per process
(OMP_NUM_THREADS=1, --threads 1), the harness's defaults (its LEANSTEP_HARNESS_* variables removed).
--cells-only leaves out the -z 1 reference runs and the resume checks (make optim-hashes).
Prints a table (cell, CPU result, GPU result, final loss, time) and a summary line. Exit 1 on any
failure. On 2 cores (--jobs 2): ~45 s for the CPU trainer alone, ~2 min with the GPU builds, ~5 s --quick.
"""
import argparse
import concurrent.futures
import hashlib
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from testlib import check, failures, step_losses, write_cyclic_data  # noqa: E402

MODEL = "L2C16H2T16V512"  # head size 8: the smallest the GPU kernels take
STEPS = 4
OPTIMIZERS = [  # name, flags
    ("adamw", []),
    ("adamw+amsgrad", ["--amsgrad", "1"]),
    ("sgd", ["--optimizer", "sgd"]),  # momentum 0.9 (the default): it has state
    ("sgd-plain", ["--optimizer", "sgd", "--momentum", "0"]),  # no state at all
    ("sgd+nesterov", ["--optimizer", "sgd", "--nesterov", "1"]),
    ("lamb", ["--optimizer", "lamb"]),
    ("lion", ["--optimizer", "lion"]),
    ("muon", ["--optimizer", "muon"]),  # Muon for the blocks' matrices, AdamW for the rest
    ("adam-mini", ["--optimizer", "adam-mini"]),  # one v per block of a tensor (llmc/params.h)
]
STATES = ["fp32", "bf16", "int8", "fp16", "4bit"]
PLACEMENTS = {  # name: (flags, processes)
    "device": ([], 1),
    "badam": (["--badam", "2"], 1),
    "z1": (["-z", "1"], 2),
    "offload": (["--offload", "stream", "--offload-chunk", "4096"], 1),  # 4 chunks of the 15,040 parameters
    "z1+badam": (["-z", "1", "--badam", "2"], 2),
    "badam+offload": (["--badam", "2", "--offload", "stream", "--offload-chunk", "4096"], 1),
    "z1+offload": (["-z", "1", "--offload", "stream", "--offload-chunk", "4096"], 2),
    "host": (["--offload", "cpu"], 1),
    "badam+host": (["--badam", "2", "--offload", "cpu"], 1),
    "z1+host": (["-z", "1", "--offload", "cpu"], 2),
}
OFFLOADED = ("offload", "host")  # placement parts whose state is in host memory

# The cells that are refused, and why: (optimizers, states, placements, trainers, kind, reason, flags).
# "*" matches every value; placements match when the cell's placement contains every part named
# ("z1" matches z1, z1+badam and z1+offload). kind: "no meaning" (the cell has nothing to do) or
# "not yet" (to be implemented; the goal is only "no meaning" rows). A refusal
# must name one of the flags of a matching row. The first row that matches names the kind, except
# that "no meaning" wins over "not yet".
EXPECTED_REFUSED = [
    ("*", "*", "offload", "cpu", "no meaning",
     "the CPU trainer's state is in host memory already (--offload is a GPU trainer flag)", ["--offload"]),
    ("*", "*", "host", "cpu", "no meaning",
     "the CPU trainer's update runs on the host already (--offload is a GPU trainer flag)", ["--offload"]),
    (("sgd-plain",), ("bf16", "int8", "fp16", "4bit"), "*", "*", "no meaning",
     "SGD without momentum has no state to store in bf16, int8, fp16 or 4bit", ["--opt-state", "--momentum"]),
    (("sgd", "sgd+nesterov", "lamb", "lion", "muon"), ("fp16",), "*", "*", "not yet",
     "fp16 state is AdamW's (m and sqrt(v) scaled by 2^14); the others take fp32, bf16 or int8", ["--opt-state", "--optimizer"]),
]

# Resume is bit-exact for these cells (BAdam with --badam 3 there: the resumed step 3 continues
# block 0's state, step 4 switches to block 1).
RESUME_CELLS = [("adamw", "int8", "device"), ("lion", "fp32", "badam"), ("adamw", "bf16", "z1"),
                ("sgd+nesterov", "fp32", "z1"), ("sgd-plain", "fp32", "z1"), ("adamw", "int8", "z1+offload"),
                ("adamw", "fp32", "device"), ("lion", "int8", "z1+badam"), ("lamb", "bf16", "offload"),
                ("adamw+amsgrad", "int8", "badam+offload"), ("lamb", "int8", "z1"), ("lamb", "bf16", "z1+offload"),
                ("muon", "bf16", "device"), ("muon", "fp32", "badam"), ("muon", "int8", "device"),
                ("muon", "bf16", "badam+offload"), ("muon", "int8", "z1"), ("muon", "fp32", "z1+badam"),
                ("adamw", "fp16", "z1+offload"), ("adamw+amsgrad", "fp16", "badam"), ("adamw", "4bit", "z1+offload"),
                ("adamw+amsgrad", "4bit", "badam+offload"), ("lion", "4bit", "device"), ("sgd+nesterov", "4bit", "z1"),
                ("lamb", "4bit", "z1+offload"), ("lamb", "4bit", "badam"), ("adam-mini", "fp32", "device"),
                ("adam-mini", "int8", "z1"), ("adam-mini", "bf16", "z1+badam"), ("adam-mini", "4bit", "badam"),
                ("muon", "4bit", "z1+offload"), ("muon", "4bit", "badam"), ("adamw", "int8", "z1+host"),
                ("lamb", "bf16", "badam+host"), ("adam-mini", "4bit", "host"), ("lion", "fp32", "z1+host"),
                ("muon", "int8", "host"), ("muon", "bf16", "z1+host")]

# Optimizer state bytes per parameter of the whole-model view (llmc/optim/state.h's banner): exact
# up to each buffer's 64-byte alignment, or (None) at least the number (int8's per-block scales and
# its small tensors kept in fp32, LAMB's per-block partial norms: large for a model this small).
STATE_BYTES = {
    ("adamw", "fp32"): 8, ("adamw", "bf16"): 4, ("adamw", "int8"): (None, 2), ("adamw", "4bit"): (None, 1),
    ("adamw+amsgrad", "fp32"): 12, ("adamw+amsgrad", "bf16"): 6, ("adamw", "fp16"): 4, ("adamw+amsgrad", "fp16"): 6,
    ("sgd", "fp32"): 4, ("sgd+nesterov", "fp32"): 4, ("lion", "fp32"): 4, ("lamb", "fp32"): (None, 8),
    ("sgd-plain", "fp32"): 0,  # no row in the memory table
    ("adam-mini", "fp32"): (None, 4), ("adam-mini", "bf16"): (None, 2),  # (m, and v per block)
}

MPI_ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1")
MPIRUN = ["mpirun", "-np", "2", "--oversubscribe", "--bind-to", "none"]


def matches(pattern, value):
    return pattern == "*" or value in pattern


def expected_refusal(opt, state, place, trainer):
    """(kind, reason, flags) of the refused cell for this trainer, or None when it must run."""
    rows = []
    for opts, states, places, trainers, kind, reason, flags in EXPECTED_REFUSED:
        p_ok = places == "*" or all(part in place.split("+") for part in places.split("+"))
        if matches(opts, opt) and matches(states, state) and p_ok and trainers in ("*", trainer):
            rows.append((kind, reason, flags))
    if not rows:
        return None
    kind = "no meaning" if any(r[0] == "no meaning" for r in rows) else "not yet"
    reason = [r[1] for r in rows if r[0] == kind][0]
    return kind, reason, [f for r in rows for f in r[2]]


def procs_of(trainer, place):
    """Processes a cell runs with (the CPU trainer refuses --offload before any MPI: one process)."""
    return 1 if trainer == "cpu" and offloaded(place) else PLACEMENTS[place][1]


def offloaded(place):
    return any(part in OFFLOADED for part in place.split("+"))


def on_device(place):
    """The placement without its offload: the cell whose state is on the device (or the CPU trainer's)."""
    parts = [p for p in place.split("+") if p not in OFFLOADED]
    return "+".join(parts) if parts else "device"


def cell_flags(opt, state, place):
    return dict(OPTIMIZERS)[opt] + ["--opt-state", state] + PLACEMENTS[place][0]


class Runner:
    def __init__(self, a, tmp):
        self.cpu, self.mpi = a.bin, a.mpi_bin
        self.gpu, self.gpu_mpi = a.gpu_bin, a.gpu_mpi_bin
        self.env = MPI_ENV
        if a.record_hashes or a.compare_hashes:  # hashes: the harness's own defaults (order, workers, seeds)
            self.env = {k: v for k, v in MPI_ENV.items() if not k.startswith("LEANSTEP_HARNESS_")}
        self.base = ["-e", MODEL, "-i", os.path.join(tmp, "train.bin"), "-j", os.path.join(tmp, "val.bin"), "-b", "2",
                     "-t", "16", "-x", str(STEPS), "-v", "0", "-s", "0", "-g", "16", "-l", "1e-3", "--seed", "7"]

    def binary(self, trainer, procs):
        if trainer == "cpu":
            return self.cpu if procs == 1 else self.mpi
        return self.gpu if procs == 1 else self.gpu_mpi

    def run(self, trainer, procs, flags, timeout=300):
        """(completed process, seconds); None when the binary for it was not given."""
        b = self.binary(trainer, procs)
        if b is None:
            return None, 0.0
        args = [b] + self.base + flags + (["--threads", "1"] if trainer == "cpu" else [])
        cmd = MPIRUN + args if procs > 1 else args
        t0 = time.time()
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=self.env)
        except subprocess.TimeoutExpired as e:
            r = subprocess.CompletedProcess(cmd, 124, e.stdout or "", "timed out after %d s" % timeout)
        return r, time.time() - t0


def error_lines(r, procs):
    """The trainer's error messages (under mpirun: without mpirun's own report around them)."""
    lines = [x.strip() for x in r.stderr.strip().splitlines() if x.strip()]
    if procs == 1:
        return lines
    return [x for x in lines if "error:" in x]


def state_bytes_per_param(out):
    m = re.search(r"^\| optimizer state\s*\|\s*[\d.]+ \|\s*([\d.]+) \|", out, re.M)
    return float(m.group(1)) if m else None


def judge(trainer, cell, r, procs, zero_lr):
    """Checks one run of a cell against the expectation; returns (result word, losses, state B/param)."""
    opt, state, place = cell
    tag = "%s %s/%s/%s" % (trainer, opt, state, place)
    want = expected_refusal(opt, state, place, trainer)
    if r.returncode == 0:
        losses = step_losses(r.stdout)
        bpp = state_bytes_per_param(r.stdout)
        ok = len(losses) == STEPS and all(math.isfinite(x) for x in losses)
        check(ok, "%s: %d step lines with finite losses (got %s)" % (tag, STEPS, losses))
        if want is not None:
            check(False, "%s: expected refused (%s: %s), but it ran" % (tag, want[0], want[1]))
        moved = zero_lr is not None and len(losses) == len(zero_lr) and losses[1:] != zero_lr[1:]
        check(zero_lr is None or moved, "%s: the update moved the model (losses %s vs -l 0 %s)" % (tag, losses, zero_lr))
        stateless = opt == "sgd-plain"
        no_row = stateless or "host" in place.split("+")  # (--offload cpu: no state on the device)
        check((bpp is None) == no_row, "%s: the memory table has %s 'optimizer state' row: %s"
              % (tag, "no" if no_row else "an", r.stdout[:1500]))
        if offloaded(place) and not stateless:
            check(re.search(r"offloaded to pinned host memory: .*optimizer state", r.stdout) is not None,
                  "%s: the state is in pinned host memory: %s" % (tag, r.stdout[:1500]))
        if want is not None:
            return "FAIL: ran", losses, bpp
        return ("ran" if ok and (zero_lr is None or moved) and (bpp is None) == no_row else "FAIL"), losses, bpp
    errs = error_lines(r, procs)
    text = " ".join(errs)
    if want is None:
        check(False, "%s: expected to run, refused (exit %d): %s" % (tag, r.returncode, (r.stderr or r.stdout).strip()[-400:]))
        return "FAIL: refused", [], None
    one_line = len(errs) == 1 if procs == 1 else 1 <= len(errs) <= 2 * procs
    named = any(f in text for f in want[2])
    trained = step_losses(r.stdout) != []
    check(one_line and named and not trained,
          "%s: refused before training with a one-line message naming one of %s (exit %d): %s"
          % (tag, want[2], r.returncode, r.stderr.strip()[-400:]))
    return ("refused (%s)" % want[0]) if one_line and named and not trained else "FAIL: message", [], None


def check_state_bytes(trainer, results):
    """The 'optimizer state' row of every run cell: the whole-model figure, and less with BAdam and ZeRO-1."""
    for (t, opt, state, place), (res, _, bpp, _) in sorted(results.items()):
        if t != trainer or res != "ran" or bpp is None:
            continue
        if place == "device" and (opt, state) in STATE_BYTES:
            want = STATE_BYTES[(opt, state)]
            if isinstance(want, tuple):
                check(bpp >= want[1], "%s %s/%s: optimizer state %.2f bytes/param, at least %d" % (trainer, opt, state, bpp, want[1]))
            else:  # a few 64-byte alignments of 15,040 parameters: < 0.05 bytes/param
                check(want <= bpp <= want + 0.05, "%s %s/%s: optimizer state %.2f bytes/param, expected %d (+ alignment)"
                      % (trainer, opt, state, bpp, want))
        if place in ("badam", "z1", "z1+badam"):  # less than without the placement (z1+badam: at most BAdam's)
            base = "badam" if place == "z1+badam" else "device"
            dev = results.get((t, opt, state, base))
            if dev and dev[0] == "ran" and dev[2] is not None and bpp is not None:
                check(bpp < dev[2] or (base == "badam" and bpp <= dev[2]), "%s %s/%s/%s: optimizer state %.2f bytes/param, "
                      "less than %s's %.2f" % (trainer, opt, state, place, bpp, base, dev[2]))
                # (Muon: the row holds its Newton-Schulz scratch too, which each process needs for its
                # largest matrix, and its parts share the state by whole matrices: test_optim checks that)
                if place == "z1" and state == "fp32" and opt not in ("lamb", "muon"):
                    check(abs(bpp - dev[2] / 2) <= 0.05, "%s %s/%s/z1: each of 2 processes holds half the state "
                          "(%.2f vs %.2f bytes/param)" % (trainer, opt, state, bpp, dev[2]))


def check_zero_one(runner, results, jobs):
    """Every z1 cell that ran gives the losses of one process at the same total batch (-d 64: two
    micro-batches, the dataloader gives micro-batch k to rank k), within 1e-5 relative (fp32:
    only the order of the gradient sums differs, as dev/test/test_mpi.py). Returns the worst."""
    todo = [k for k, v in results.items() if "z1" in k[3] and v[0] == "ran"]
    def one(k):
        t, opt, state, place = k
        flags = [x for i, x in enumerate(cell_flags(opt, state, place)) if x != "-z" and (i == 0 or cell_flags(opt, state, place)[i - 1] != "-z")]
        return runner.run(t, 1, flags + ["-d", "64"])
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        refs = dict(zip(todo, pool.map(one, todo)))
    worst = 0.0
    for k, (r, _) in sorted(refs.items()):
        got, ref = results[k][1], step_losses(r.stdout) if r.returncode == 0 else []
        diff = max((abs(x - y) / abs(y) for x, y in zip(got, ref)), default=1.0) if len(ref) == len(got) else 1.0
        worst = max(worst, diff)
        check(diff <= 1e-5, "%s %s: -z 1 over 2 processes gives the losses of one process at the same total batch "
              "(worst %.1e): %s vs %s (%s)" % (k[0], "/".join(k[1:]), diff, got, ref, r.stderr.strip()[-200:]))
    return worst if todo else None


def close(a, b, rtol):
    return len(a) == len(b) and all(abs(x - y) <= rtol * abs(y) for x, y in zip(a, b))


# ----------------------------------------------------------------------------
# hashes of the final checkpoints

def checkpoint_hashes(d, procs):
    """(model sha256, sha256 of the state files in rank order) of d's step-STEPS checkpoint, or None."""
    model = os.path.join(d, "model_%08d.bin" % STEPS)
    states = [os.path.join(d, "state_%08d_%05d.bin" % (STEPS, k)) for k in range(procs)]
    if not all(os.path.exists(f) for f in [model] + states):
        return None
    with open(model, "rb") as fh:
        hm = hashlib.sha256(fh.read()).hexdigest()
    hs = hashlib.sha256()
    for f in states:
        with open(f, "rb") as fh:
            hs.update(fh.read())
    return hm, hs.hexdigest()


def machine_name():
    try:
        with open("/proc/cpuinfo") as fh:
            return re.search(r"^model name\s*:\s*(.*)$", fh.read(), re.M).group(1).strip()
    except (OSError, AttributeError):
        return "unknown"


def write_hashes(path, hashes):
    with open(path, "w") as fh:
        fh.write("# test_optim_matrix.py --record-hashes: SHA-256 of each cell's final checkpoint (step %d):\n"
                 "# the model file, and the state files of all processes in rank order.\n"
                 "# recorded on: %s (the bits are this CPU's and OpenBLAS build's)\n" % (STEPS, machine_name()))
        for k in sorted(hashes):
            fh.write("%s model %s state %s\n" % (k, hashes[k][0], hashes[k][1]))
    print("hashes: %d cells written to %s" % (len(hashes), path))


def read_hashes(path):
    """{"TRAINER OPT/STATE/PLACE": (model sha, state sha)} of a --record-hashes file."""
    got = {}
    with open(path) as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip() or line.startswith("#"):
                continue
            w = line.split()
            if len(w) != 6 or w[2] != "model" or w[4] != "state":
                raise SystemExit("%s:%d: not a hash line: %s" % (path, n, line.strip()))
            got["%s %s" % (w[0], w[1])] = (w[3], w[5])
    return got


def compare_hashes(path, hashes, selection):
    """Every cell that ran here has FILE's bits, and every FILE cell of this run's selection (cell
    and trainer {key: result}) ran here."""
    want = read_hashes(path)
    equal = 0
    for k in sorted(hashes):
        if k not in want:
            check(False, "hashes: %s ran, but %s has no line for it" % (k, path))
            continue
        changed = [name for i, name in enumerate(("model", "state")) if hashes[k][i] != want[k][i]]
        check(not changed, "hashes: %s: the %s bits changed (%s)" % (k, " and ".join(changed), path))
        equal += not changed
    missing = [k for k in sorted(want) if k not in hashes and k in selection]
    for k in missing:
        check(False, "hashes: %s is in %s, but did not run here (%s)" % (k, path, selection[k]))
    outside = sum(k not in selection for k in want)
    print("hashes vs %s: %d of %d cells bit-identical, %d missing here%s" % (
        path, equal, len(hashes), len(missing), ", %d of its lines outside this run's cells (not compared)" % outside
        if outside else ""))


# ----------------------------------------------------------------------------
# resume

def state_v2_to_v1(path, n):
    """Rewrites a version-2 fp32 AdamW state file (no master weights) as version 1 wrote it:
    header[1] = 1, [5] = 1, [6..7] = n parameters, [19] = 0, then m and v (n floats each; in the
    engine's block v starts at the 64-byte boundary after m), the crc32 of both in [16]."""
    with open(path, "rb") as fh:
        raw = fh.read()
    h = list(struct.unpack("<256i", raw[:1024]))
    words = struct.unpack("<Q", raw[24:32])[0]
    check(h[1] == 2 and h[14] == 0 and len(raw) == 1024 + 4 * words, "%s: a version-2 state file without master weights" % path)
    block = raw[1024:]
    v_at = (4 * n + 63) // 64 * 64
    payload = block[:4 * n] + block[v_at:v_at + 4 * n]
    h[1], h[5], h[19] = 1, 1, 0
    hb = bytearray(struct.pack("<256i", *h))
    struct.pack_into("<Q", hb, 24, n)
    struct.pack_into("<I", hb, 64, zlib.crc32(payload))
    with open(path, "wb") as fh:
        fh.write(bytes(hb) + payload)


def resume_flags(opt, state, place):
    """The cell's flags, with --badam 3 (see RESUME_CELLS)."""
    f = cell_flags(opt, state, place)
    return [("3" if i > 0 and f[i - 1] == "--badam" else x) for i, x in enumerate(f)]


def check_resume(runner, trainer, cell, tmp, num_params):
    opt, state, place = cell
    flags = resume_flags(opt, state, place)
    procs = PLACEMENTS[place][1]
    tag = "%s resume %s/%s/%s" % (trainer, opt, state, place)
    if runner.binary(trainer, procs) is None or expected_refusal(opt, state, place, trainer) is not None:
        return None
    name = "%s_%s_%s_%s" % (trainer, opt, state, place)
    da, db = os.path.join(tmp, "ra_" + name), os.path.join(tmp, "rb_" + name)
    ra, _ = runner.run(trainer, procs, flags + ["-o", da, "-n", "2"])
    check(ra.returncode == 0, "%s: the checkpointed run exits 0: %s" % (tag, ra.stderr.strip()[-300:]))
    if ra.returncode != 0:
        return False
    ranks = ["state_00000002_%05d.bin" % k for k in range(procs)]
    os.makedirs(db)
    for f in ["model_00000002.bin", "DONE_00000002"] + ranks:
        if not os.path.exists(os.path.join(da, f)):
            check(False, "%s: checkpoint file %s written" % (tag, f))
            return False
        shutil.copy(os.path.join(da, f), db)
    pristine = os.path.join(tmp, "rp_" + name)
    shutil.copytree(db, pristine)
    rb, _ = runner.run(trainer, procs, flags + ["-o", db, "-n", "2", "-y", "1"])
    la, lb = step_losses(ra.stdout), step_losses(rb.stdout)
    ok = rb.returncode == 0 and "resumed from step 2" in rb.stdout and len(la) == STEPS and lb == la[2:]
    check(ok, "%s: steps 3-4 resumed from step 2 equal the uninterrupted run: %s vs %s (%s)" % (tag, lb, la[2:], rb.stderr.strip()[-300:]))
    same = False
    if rb.returncode == 0:
        with open(os.path.join(da, "model_00000004.bin"), "rb") as fa, open(os.path.join(db, "model_00000004.bin"), "rb") as fb:
            same = fa.read() == fb.read()
    check(same, "%s: the resumed run's final model is bit-identical" % tag)
    ok = ok and same
    if cell == ("adamw", "fp32", "device"):  # a version-1 state file: read into the engine's m and v
        dv = os.path.join(tmp, "rv1_" + name)
        shutil.copytree(pristine, dv)
        state_v2_to_v1(os.path.join(dv, ranks[0]), num_params)
        rv, _ = runner.run(trainer, procs, flags + ["-o", dv, "-n", "2", "-y", "1"])
        v1_ok = rv.returncode == 0 and step_losses(rv.stdout) == la[2:]
        check(v1_ok, "%s: a version-1 state file (m, v) resumes as the version-2 one: %s vs %s (%s)"
              % (tag, step_losses(rv.stdout), la[2:], rv.stderr.strip()[-300:]))
        shutil.rmtree(dv)
        shutil.copytree(pristine, dv)
        state_v2_to_v1(os.path.join(dv, ranks[0]), num_params)
        rl, _ = runner.run(trainer, procs, cell_flags("lion", "fp32", "device") + ["-o", dv, "-n", "2", "-y", "1"])
        check(rl.returncode != 0 and "version 1" in rl.stderr and len(error_lines(rl, 1)) == 1,
              "%s: a version-1 AdamW state file is refused by --optimizer lion naming the version: %s" % (tag, rl.stderr.strip()[-300:]))
        ok = ok and v1_ok
    # another optimizer, another state precision: refused, naming the flags
    others = [("lion", "fp32") if opt != "lion" else ("adamw", "fp32"), (opt, "fp32" if state != "fp32" else "bf16")]
    for o2, s2 in others:
        if expected_refusal(o2, s2, place, trainer) is not None:
            continue
        dw = os.path.join(tmp, "rw_%s_%s_%s" % (name, o2, s2))
        shutil.copytree(pristine, dw)
        f2 = resume_flags(o2, s2, place)
        rw, _ = runner.run(trainer, procs, f2 + ["-o", dw, "-n", "2", "-y", "1"])
        errs = " ".join(error_lines(rw, procs))
        named = "--optimizer" in errs and "--opt-state" in errs
        check(rw.returncode != 0 and named and step_losses(rw.stdout) == [],
              "%s: resuming with --optimizer %s --opt-state %s is refused naming --optimizer and --opt-state: %s"
              % (tag, o2, s2, rw.stderr.strip()[-300:]))
        ok = ok and rw.returncode != 0 and named
    return ok


# ----------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, help="the CPU trainer (build/train_gpt2)")
    ap.add_argument("--mpi-bin", help="the CPU trainer's MPI build (build/train_gpt2_mpi): the -z 1 cells")
    ap.add_argument("--gpu-bin", help="the harness GPU trainer, fp32 (build/train_gpt2cu_emu_fp32)")
    ap.add_argument("--gpu-mpi-bin", help="its MPI build (build/train_gpt2cu_emu_mpi_fp32): the GPU's -z 1 cells")
    ap.add_argument("--quick", action="store_true", help="a sample: each optimizer x state in one placement")
    ap.add_argument("--jobs", type=int, default=2, help="runs side by side (default 2)")
    ap.add_argument("--only", help="the cells whose optimizer/state/placement name contains this (debugging)")
    ap.add_argument("--record-hashes", metavar="FILE", help="write the SHA-256 of each cell's final checkpoint to FILE")
    ap.add_argument("--compare-hashes", metavar="FILE", help="fail on each cell whose checkpoint bits differ from FILE's")
    ap.add_argument("--cells-only", action="store_true", help="no -z 1 reference runs and resume checks")
    a = ap.parse_args()
    for k in ("bin", "mpi_bin", "gpu_bin", "gpu_mpi_bin"):
        path = getattr(a, k)
        if path is not None:
            if not os.path.exists(path):
                print("test_optim_matrix: --%s %s does not exist" % (k.replace("_", "-"), path))
                return 1
            setattr(a, k, os.path.abspath(path))
    if a.compare_hashes and not os.path.exists(a.compare_hashes):
        print("test_optim_matrix: --compare-hashes %s does not exist (make optim-hashes records one)" % a.compare_hashes)
        return 1
    if shutil.which("mpirun") is None:
        a.mpi_bin = a.gpu_mpi_bin = None
    if a.mpi_bin is None:
        print("note: no --mpi-bin (or no mpirun): the CPU trainer's z1 cells are skipped")
    if a.gpu_bin and a.gpu_mpi_bin is None:
        print("note: no --gpu-mpi-bin (or no mpirun): the GPU trainer's z1 cells are skipped")
    t_start = time.time()
    tmp = tempfile.mkdtemp(prefix="leanstep_optim_matrix_")
    try:
        write_cyclic_data(tmp, 5, 512, 41, 9, 8000, 2000)
        runner = Runner(a, tmp)
        cells = [(o, s, p) for o, _ in OPTIMIZERS for s in STATES for p in PLACEMENTS]
        if a.quick:  # each optimizer x state once, the placements in turn
            names = list(PLACEMENTS)
            cells = [(o, s, names[(i * 3 + j) % len(names)]) for i, (o, _) in enumerate(OPTIMIZERS) for j, s in enumerate(STATES)]
        if a.only:
            cells = [c for c in cells if a.only in "/".join(c)]
        trainers = ["cpu"] + (["gpu"] if a.gpu_bin else [])
        # the losses of the same runs at -l 0 (one and two processes): an update must move the model
        zero_lr = {}
        for t in trainers:
            for procs in (1, 2):
                r, _ = runner.run(t, procs, ["-l", "0"])
                if r is not None:
                    check(r.returncode == 0, "%s, %d process(es), -l 0: exit 0: %s" % (t, procs, r.stderr.strip()[-300:]))
                    zero_lr[(t, procs)] = step_losses(r.stdout) if r.returncode == 0 else None
        # every cell in each trainer, side by side
        jobs = [(t, c) for c in cells for t in trainers]
        hashing = a.record_hashes or a.compare_hashes
        def ckpt_dir(t, c):  # the final checkpoint (-n STEPS writes only that one), when hashing
            return os.path.join(tmp, "h_%s_%s" % (t, "_".join(c)))
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
            futs = {(t, c): pool.submit(runner.run, t, procs_of(t, c[2]), cell_flags(*c) +
                                        (["-o", ckpt_dir(t, c), "-n", str(STEPS)] if hashing else [])) for t, c in jobs}
        results = {}  # (trainer, opt, state, place) -> (result, losses, state bytes/param, seconds)
        hashes = {}  # "trainer opt/state/place" -> (model sha, state sha)
        for (t, c), fut in futs.items():
            r, secs = fut.result()
            procs = procs_of(t, c[2])
            if r is None:
                results[(t,) + c] = ("skipped (no %s)" % ("--mpi-bin" if t == "cpu" else "--gpu-mpi-bin"), [], None, 0.0)
                continue
            res, losses, bpp = judge(t, c, r, procs, zero_lr.get((t, procs)))
            results[(t,) + c] = (res, losses, bpp, secs)
            if hashing and r.returncode == 0:
                h = checkpoint_hashes(ckpt_dir(t, c), procs)
                check(h is not None, "%s %s: its final checkpoint was written (-o, -n %d)" % (t, "/".join(c), STEPS))
                if h is not None:
                    hashes["%s %s" % (t, "/".join(c))] = h
        # the CPU's update of the GPU trainer's state: the device's bits (Muon's: not its Newton-Schulz,
        # fp32 on the host, in floatX on the device; test_gpt2.cu holds it to the float64 reference)
        for key, h in sorted(hashes.items()):
            t, c = key.split(" ")
            o, s_, p = c.split("/")
            if t == "gpu" and "host" in p.split("+") and o != "muon":
                dev = hashes.get("gpu %s/%s/%s" % (o, s_, on_device(p)))
                check(dev is None or dev == h, "gpu %s: checkpoint bits equal the on-device cell %s's" % (c, on_device(p)))
        for t in trainers:
            check_state_bytes(t, results)
        z1_worst = None if a.cells_only else check_zero_one(runner, results, a.jobs)
        # CPU and GPU trainers: the same losses per cell (an offload cell: the CPU trainer's cell
        # without --offload, where the state always is in host memory)
        compared, worst = 0, 0.0
        for c in cells:
            on_cpu = (c[0], c[1], on_device(c[2]))
            rc, rg = results.get(("cpu",) + on_cpu), results.get(("gpu",) + c)
            if rc and rg and rc[0] == "ran" and rg[0] == "ran":
                check(close(rg[1], rc[1], 1e-4), "GPU %s: losses %s equal the CPU trainer's %s (%s; 1e-4 relative)"
                      % ("/".join(c), rg[1], rc[1], "/".join(on_cpu)))
                compared += 1
                worst = max([worst] + [abs(x - y) / abs(y) for x, y in zip(rg[1], rc[1])])
        # the table
        print("\n| %-32s | %-22s | %-22s | %-10s | %-12s |" % ("cell (optimizer/state/placement)", "CPU", "GPU", "final loss", "time (s)"))
        print("|%s|%s|%s|%s|%s|" % ("-" * 34, "-" * 24, "-" * 24, "-" * 12, "-" * 14))
        for c in cells:
            rc = results.get(("cpu",) + c)
            rg = results.get(("gpu",) + c, ("-", [], None, 0.0))
            loss = (rc[1] or rg[1] or [float("nan")])[-1]
            secs = "%.1f" % rc[3] + (" / %.1f" % rg[3] if a.gpu_bin else "")
            print("| %-32s | %-22s | %-22s | %10s | %-12s |" % ("/".join(c), rc[0], rg[0], "%.6f" % loss if math.isfinite(loss) else "-", secs))
        # refusal reasons
        print("\nrefused cells, by the first reason EXPECTED_REFUSED gives")
        seen = {}
        for (t, o, s, p), (res, _, _, _) in sorted(results.items()):
            if res.startswith("refused"):
                w = expected_refusal(o, s, p, t)
                seen.setdefault((w[0], w[1]), []).append("%s:%s/%s/%s" % (t, o, s, p))
        for (kind, reason), where in sorted(seen.items()):
            trainers_of = sorted(set(w.split(":")[0] for w in where))
            print("  %-10s %3d cell(s), %-7s %s" % (kind, len(where), "/".join(trainers_of) + ":", reason))
        # resume
        num_params = None
        r, _ = runner.run("cpu", 1, ["--dry-run", "1"])
        m = re.search(r"(\d+) parameters", r.stdout)
        num_params = int(m.group(1)) if m else 0
        resumed = []
        for t in trainers if not a.cells_only else []:
            for c in RESUME_CELLS:
                if a.quick and c not in (("adamw", "fp32", "device"), ("lion", "fp32", "badam")):
                    continue
                if a.only and a.only not in "/".join(c):
                    continue
                got = check_resume(runner, t, c, tmp, num_params)
                if got is not None:
                    resumed.append("%s %s: %s" % (t, "/".join(c), "bit-exact" if got else "FAIL"))
        if resumed:
            print("\nresume from step 2: " + "; ".join(resumed))
        if a.record_hashes:
            write_hashes(a.record_hashes, hashes)
        if a.compare_hashes:
            selection = {"%s %s" % (k[0], "/".join(k[1:])): v[0] for k, v in results.items() if not v[0].startswith("skipped")}
            compare_hashes(a.compare_hashes, hashes, selection)
        # summary
        took = time.time() - t_start
        for t in trainers:
            mine = [v[0] for k, v in results.items() if k[0] == t]
            print("%s: %d cells: %d run, %d refused (no meaning), %d refused (not yet), %d skipped, %d failed" % (
                t.upper(), len(mine), mine.count("ran"), mine.count("refused (no meaning)"), mine.count("refused (not yet)"),
                sum(x.startswith("skipped") for x in mine), sum(x.startswith("FAIL") for x in mine)))
        if compared:
            print("CPU vs GPU: %d cells compared, worst relative loss difference %.1e" % (compared, worst))
        if z1_worst is not None:
            print("-z 1 vs one process at the same total batch: worst relative loss difference %.1e" % z1_worst)
        print("test_optim_matrix: %d cells x %d trainer(s) in %.0f s; %s" % (
            len(cells), len(trainers), took, "%d failed" % len(failures) if failures else "all checks passed"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

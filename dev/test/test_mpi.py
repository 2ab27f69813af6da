#!/usr/bin/env python3
"""test_mpi.py: data-parallel training of the CPU trainer over MPI (OpenMPI's mpirun).

With the same total batch, `mpirun -np 2` with -z 0 (gradient all-reduce) and with -z 1 (ZeRO-1:
reduce-scatter, sharded AdamW, all-gather) must give the losses of one process for 10 steps:
within 1e-5 relative per step (fp32: only the order of the gradient sums differs between one
process accumulating two micro-batches and two processes reducing theirs, a few ulps that AdamW
can amplify a little over 10 steps; docs/distributed.md, "Tests"). ZeRO-1 halves the per-process
optimizer state (fp32 AdamW's m and v: 8 bytes/param, 4 per process), exactly as the memory model says; a checkpoint written by 2 ranks resumes with 2 ranks
bit-exactly; mismatched flags and a wrong process count are refused with a message; a rank killed
with SIGKILL ends the job (mpirun exits non-zero naming the rank) instead of hanging it.
ZeRO-1's gradient norm (check_shard_norm): over 3 processes, -z 1's norm, summed shard by shard, is
-z 0's, on a model whose shard boundaries fall inside weight matrices with gradients.

  test_mpi.py --mpi-bin build/train_gpt2_mpi --bin build/train_gpt2
"""
import argparse
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from testlib import check, failures, kill_one_rank, step_losses, write_cyclic_data  # noqa: E402

MODEL = "L2C32H2T64V2048"






def mpirun(n, args, timeout=600):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1")
    cmd = ["mpirun", "-np", str(n), "--oversubscribe", "--bind-to", "none"] + args
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


losses = step_losses


def bytes_per_param(out):
    """The bytes/param column of the memory table's rows that have one."""
    return {m.group(1): float(m.group(2)) for m in re.finditer(
        r"^\| (optimizer state|gradients|parameters)\s*\|\s*[\d.]+ \|\s*([\d.]+) \|", out, re.M)}


# ZeRO-1's gradient norm: each process sums the squares of its shard of the summed gradients, -z 0
# all of them. The model has 17,952 parameters (wte 3,072 of them), 3 shards of 5,984: the boundaries,
# 5,984 and 11,968, fall inside qkvw and fcw (layer 1), whose elements there have gradients (not in
# wte rows or wpe rows that no token reaches, which are 0 and hide a shard sum that skips them). The
# pre-clip norms of 2 steps (log.jsonl, 9 digits) agree within 5e-7 relative (6 fp32 ulps: the 3
# processes' gradient sums may round in another order; measured 0 here, <= 1.7e-7 on other models);
# a shard sum that misses its last element moves them by 6.3e-6 and 1.1e-5.
SHARD_NORM_MODEL, SHARD_NORM_PARAMS, SHARD_NORM_TOL = "L2C24H3T16V128", 17952, 5e-7


def log_norms(d):
    with open(os.path.join(d, "log.jsonl")) as fh:
        return [r["norm"] for r in map(json.loads, fh) if "norm" in r]


def check_shard_norm(mpirun_fn, binary, tmp, vocab_data):
    """-np 3: -z 1's gradient norm equals -z 0's (SHARD_NORM_*). vocab_data: (train, val) shards of
    tokens below 128."""
    t0 = time.time()
    args = [binary, "-e", SHARD_NORM_MODEL, "-i", vocab_data[0], "-j", vocab_data[1], "-b", "2", "-t", "16", "-d", "96",
            "-x", "2", "-v", "0", "-s", "0", "-g", "8", "-l", "2e-3"]
    norms = {}
    for z in (0, 1):
        d = os.path.join(tmp, "shard_norm_z%d" % z)
        r = mpirun_fn(3, args + ["-z", str(z), "-o", d])
        check(r.returncode == 0 and "%d parameters" % SHARD_NORM_PARAMS in r.stdout,
              "-np 3 -z %d on %s: exit 0, %d parameters: %s" % (z, SHARD_NORM_MODEL, SHARD_NORM_PARAMS, r.stderr.strip()[-300:]))
        norms[z] = log_norms(d) if r.returncode == 0 else []
    worst = max((abs(a - b) / a for a, b in zip(norms[0], norms[1])), default=1.0)
    check(len(norms[0]) == 2 and len(norms[1]) == 2 and worst <= SHARD_NORM_TOL,
          "-np 3: -z 1's gradient norms are -z 0's within %.0e (worst %.2e): %s vs %s" % (SHARD_NORM_TOL, worst, norms[1], norms[0]))
    print("-np 3 -z 1: gradient norms %s, -z 0's %s: worst relative difference %.2e (%.1f s)"
          % (norms[1], norms[0], worst, time.time() - t0))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mpi-bin", required=True)
    ap.add_argument("--bin", required=True)
    a = ap.parse_args()
    mpi_bin, one_bin = os.path.abspath(a.mpi_bin), os.path.abspath(a.bin)
    tmp = tempfile.mkdtemp(prefix="leanstep_mpi_")
    try:
        write_cyclic_data(tmp, 3, 2048, 53, 7, 30000, 5000)
        # total batch 2 x 4 x 32 = 256 tokens: one process accumulates two micro-batches, two
        # processes take one each; the dataloader gives micro-batch k of step s to rank k
        base = ["-e", MODEL, "-i", os.path.join(tmp, "train.bin"), "-j", os.path.join(tmp, "val.bin"), "-b", "4", "-t", "32",
                "-d", "256", "-x", "10", "-v", "5", "-m", "4", "-s", "0", "-l", "2e-3", "-c", "0.1", "--threads", "1"]
        r1 = subprocess.run([one_bin] + base, capture_output=True, text=True, timeout=600, env=dict(os.environ, OMP_NUM_THREADS="1"))
        check(r1.returncode == 0, "one process: exit 0: %s" % r1.stderr.strip())
        ref = losses(r1.stdout)
        check(len(ref) == 10, "one process: 10 steps")
        results = {}
        for z in (0, 1):
            r = mpirun(2, [mpi_bin] + base + ["-z", str(z)])
            check(r.returncode == 0, "-np 2 -z %d: exit 0: %s" % (z, r.stderr.strip()[-500:]))
            got = losses(r.stdout)
            check(len(got) == 10, "-np 2 -z %d: 10 steps (got %d)" % (z, len(got)))
            worst = max((abs(x - y) / abs(x) for x, y in zip(ref, got)), default=1.0)
            bitwise = got == ref
            check(worst <= 1e-5, "-np 2 -z %d: losses within 1e-5 of one process (worst %.2e): %s vs %s" % (z, worst, got, ref))
            results[z] = (worst, bitwise)
            print("-np 2 -z %d: worst relative difference to one process %.2e over 10 steps (printed losses %s)" %
                  (z, worst, "identical" if bitwise else "differ in the last digits"))
        # memory: ZeRO-1 halves the optimizer state per process; the memory model says so, and the
        # trainer checks its allocation against the model at start-up; here the printed tables (the
        # state of 93,056 parameters: 8.00 bytes/param with one process, the 46,528 of a shard
        # 4.00; 64-byte alignment adds < 0.005)
        rm1 = subprocess.run([one_bin] + base + ["--dry-run", "1"], capture_output=True, text=True)
        rz = mpirun(2, [mpi_bin] + base + ["-z", "1", "--dry-run", "1"])
        m1, mz = bytes_per_param(rm1.stdout), bytes_per_param(rz.stdout)
        s1, sz = m1.get("optimizer state", -1.0), mz.get("optimizer state", -1.0)
        check(rm1.returncode == 0 and s1 == 8.0 and "AdamW m" not in rm1.stdout,
              "one process: one optimizer state row at 8.00 bytes/param for fp32 AdamW (got %.2f)" % s1)
        check(rz.returncode == 0 and sz == 4.0, "ZeRO-1 over 2 processes: the optimizer state per process is half of "
              "one process's, 4.00 bytes/param (got %.2f)" % sz)
        print("memory per process: optimizer state %.2f bytes/param with one process, %.2f with -np 2 -z 1" % (s1, sz))
        # checkpoint with 2 ranks (ZeRO-1: each rank's shard), resume with 2 ranks: bit-exact
        for z in (0, 1):
            da, db = os.path.join(tmp, "za%d" % z), os.path.join(tmp, "zb%d" % z)
            ck = base + ["-z", str(z), "-n", "5", "-v", "0"]
            ra = mpirun(2, [mpi_bin] + ck + ["-o", da])
            check(ra.returncode == 0, "-z %d checkpoint run: %s" % (z, ra.stderr.strip()[-300:]))
            os.makedirs(db)
            for f in ("model_00000005.bin", "state_00000005_00000.bin", "state_00000005_00001.bin", "DONE_00000005"):
                if os.path.exists(os.path.join(da, f)):
                    shutil.copy(os.path.join(da, f), os.path.join(db, f))
                else:
                    check(False, "-z %d: checkpoint file %s missing" % (z, f))
            rb = mpirun(2, [mpi_bin] + ck + ["-o", db, "-y", "1"])
            check(rb.returncode == 0 and losses(rb.stdout) == losses(ra.stdout)[5:], "-z %d: 2-rank resume reproduces steps 6-10: %s vs %s (%s)"
                  % (z, losses(rb.stdout), losses(ra.stdout)[5:], rb.stderr.strip()[-300:]))
            with open(os.path.join(da, "model_00000010.bin"), "rb") as fa, open(os.path.join(db, "model_00000010.bin"), "rb") as fb:
                check(fa.read() == fb.read(), "-z %d: the resumed final model is bit-identical" % z)
            if z == 1:  # the same checkpoint with another process count is refused
                rw = mpirun(1, [mpi_bin] + ck + ["-o", db, "-y", "1"])
                check(rw.returncode != 0 and "resume with the same count" in rw.stderr, "resuming 2-rank ZeRO-1 state with 1 rank is refused: %s" % rw.stderr.strip()[-300:])
        sn = os.path.join(tmp, "shard_norm")
        os.makedirs(sn)
        check_shard_norm(mpirun, mpi_bin, tmp, write_cyclic_data(sn, 3, 128, 53, 7, 30000, 5000))
        # mismatched flags across ranks
        env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        rm = subprocess.run(["mpirun", "--oversubscribe", "-np", "1", mpi_bin] + base + [":", "-np", "1", mpi_bin] + base + ["-l", "1e-3"],
                            capture_output=True, text=True, timeout=300, env=env)
        check(rm.returncode != 0 and "different flags" in rm.stderr, "mismatched flags across ranks are refused: %s" % rm.stderr.strip()[-300:])
        # a rank that dies (SIGKILL) mid-run: the job ends, non-zero, saying which rank; no hang
        for z in (0, 1):
            rc, err, secs = kill_one_rank(mpi_bin, base + ["-x", "1000000", "-z", str(z)])
            check(rc is not None and rc != 0 and "rank 1" in err,
                  "-z %d: SIGKILL of rank 1 ends the job with a non-zero exit naming the rank (exit %s after %.1f s): %s"
                  % (z, rc, secs, err.strip()[-300:]))
            print("-z %d: rank 1 killed: mpirun exited %s %.1f s later" % (z, rc, secs))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("test_mpi: %s" % ("%d failed" % len(failures) if failures else "all checks passed"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""test_mpi_gpu.py: the GPU trainer's data parallelism (train_gpt2.cu over llmc/dist/nccl_comm.cuh), run
under the CPU harness with NCCL's calls provided over MPI (dev/harness/cuda_harness_nccl.h), `mpirun -np 2`.

With the same total batch, -z 0 (gradient all-reduce, layer by layer during the backward pass)
and -z 1 (ZeRO-1: reduce-scatter, sharded AdamW, all-gather) must give the losses of one process
(the plain harness build) for 10 steps within 1e-5 relative per step (fp32; the losses are read
from log.jsonl with 9 digits, and the test says whether they are bitwise equal). The model
L2C32H2T63V512 has 43,872 parameters, not a multiple of 2 x 32, so ZeRO-1's padding is exercised.
Also: ZeRO-1's optimizer state per process (fp32 AdamW: m and v of one shard) is the memory
model's per-process figure (the trainer checks its allocation against the model at start-up), 2-rank checkpoints resume bit-exactly for
-z 0 and -z 1, a 2-rank ZeRO-1 checkpoint is refused by 1 process, the fs and tcp rendezvous
(without mpirun's help: -pi fs|tcp -pn 2 -pr R) train, mismatched flags (over MPI and over the
NCCL backend) fail with a message, a -d that the process count does not divide exits 2 naming
-d, a rank that stops responding makes the other exit non-zero within --comm-timeout, and
--profile counts the communication calls of -z 0 and -z 1, and over 3 processes -z 1's gradient norm,
summed shard by shard, is -z 0's on a model whose shard boundaries fall inside weight matrices with
gradients (test_mpi.py's check_shard_norm: the same model and tolerance), and -z 1 with BAdam and
--offload cpu --offload-delay 1 (the block's all-gather in a buffer of its own) gives one process's
losses within 1e-5, and so does -z 0 with --offload cpu (each layer's gradients down once summed).
With the bf16 builds: -z 0 and -z 1
within 1e-4 of one process, and Muon's -z 1 (whole matrices per process, unequal parts) gives
exactly -z 0's losses.

  test_mpi_gpu.py --mpi-bin build/train_gpt2cu_emu_mpi_fp32 --bin build/train_gpt2cu_emu_fp32
"""
import argparse
import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from testlib import check, failures, kill_one_rank, write_cyclic_data, write_shard, step_losses  # noqa: E402
from test_mpi import check_shard_norm  # noqa: E402

MODEL = "L2C32H2T63V512"
NUM_PARAMS = 43872
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1")
MPIRUN = ["mpirun", "--oversubscribe", "--bind-to", "none"]


def mpirun(n, args, timeout=300, extra=()):
    return subprocess.run(MPIRUN + list(extra) + ["-np", str(n)] + args, capture_output=True, text=True,
                          timeout=timeout, env=ENV)


def mpmd(per_rank, timeout=300):
    """One process per argument list (mpirun's MPMD form): ranks with different command lines."""
    cmd = list(MPIRUN)
    for i, args in enumerate(per_rank):
        cmd += ([":"] if i else []) + ["-np", "1"] + args
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=ENV)


def jsonl_losses(d):
    with open(os.path.join(d, "log.jsonl")) as fh:
        return [r["loss"] for r in map(json.loads, fh) if "loss" in r]


def bytes_per_param(out, row):
    m = re.search(r"^\| %s\s*\|\s*[\d.]+ \|\s*([\d.]+) \|" % re.escape(row), out, re.M)
    return float(m.group(1)) if m else -1.0


def vs_one_process(name, one_bin, mpi_bin, flags, steps, zero):
    """flags in one process and in 2 ranks at -z zero: their losses within 1e-5; (worst, bitwise)."""
    r1 = subprocess.run([one_bin] + flags, capture_output=True, text=True, timeout=300, env=ENV)
    r2 = mpirun(2, [mpi_bin] + flags + ["-z", zero])
    l1, l2 = step_losses(r1.stdout), step_losses(r2.stdout)
    worst = max((abs(x - y) / abs(x) for x, y in zip(l1, l2)), default=1.0)
    check(r1.returncode == 0 and r2.returncode == 0 and len(l1) == steps and len(l2) == steps and worst <= 1e-5,
          "%s -np 2 -z %s: the losses of one process within 1e-5 (worst %.2e): %s vs %s (%s %s)"
          % (name, zero, worst, l2, l1, tail(r1), tail(r2)))
    return worst, l1 == l2


def tail(r):
    return (r.stderr.strip() or r.stdout.strip())[-400:]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mpi-bin", required=True)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--mpi-bin-bf16", help="the bf16 builds: -z 0 and -z 1 against one process too")
    ap.add_argument("--bin-bf16")
    a = ap.parse_args()
    mpi_bin, one_bin = os.path.abspath(a.mpi_bin), os.path.abspath(a.bin)
    tmp = tempfile.mkdtemp(prefix="leanstep_mpi_gpu_")
    t_start = time.time()
    try:
        rng = random.Random(3)
        cycle = [rng.randrange(512) for _ in range(53)]
        write_shard(os.path.join(tmp, "train.bin"), [cycle[i % 53] if i % 7 else rng.randrange(512) for i in range(30000)])
        write_shard(os.path.join(tmp, "val.bin"), [rng.randrange(512) for _ in range(5000)])
        # total batch 4 x 2 x 32 = 256 tokens: one process accumulates four micro-batches, two
        # processes two each (so -z 0 reduces on the last micro-step only)
        base = ["-e", MODEL, "-i", os.path.join(tmp, "train.bin"), "-j", os.path.join(tmp, "val.bin"), "-b", "2", "-t", "32",
                "-d", "256", "-x", "10", "-v", "0", "-s", "0", "-g", "16", "-l", "2e-3", "-c", "0.1"]
        d1 = os.path.join(tmp, "one")
        r1 = subprocess.run([one_bin] + base + ["-n", "10", "-o", d1], capture_output=True, text=True, timeout=300, env=ENV)
        check(r1.returncode == 0, "one process: exit 0: %s" % tail(r1))
        ref = jsonl_losses(d1) if r1.returncode == 0 else []
        check(len(ref) == 10, "one process: 10 steps")
        check("%d parameters" % NUM_PARAMS in r1.stdout and NUM_PARAMS % 64 != 0, "the model's parameter count needs padding for 2 shards")
        runs = {}
        for z in (0, 1):
            d = os.path.join(tmp, "z%d" % z)
            r = mpirun(2, [mpi_bin] + base + ["-z", str(z), "-n", "5", "-o", d])
            runs[z] = (r, d)
            check(r.returncode == 0, "-np 2 -z %d: exit 0: %s" % (z, tail(r)))
            got = jsonl_losses(d) if r.returncode == 0 else []
            check(len(got) == 10, "-np 2 -z %d: 10 steps (got %d)" % (z, len(got)))
            worst = max((abs(x - y) / abs(x) for x, y in zip(ref, got)), default=1.0)
            check(worst <= 1e-5, "-np 2 -z %d: losses within 1e-5 of one process (worst %.2e): %s vs %s" % (z, worst, got, ref))
            print("-np 2 -z %d: worst relative loss difference to one process %.2e over 10 steps (%s)" %
                  (z, worst, "bitwise equal" if got == ref else "not bitwise"))
            with open(os.path.join(d1, "model_00000010.bin"), "rb") as fa, open(os.path.join(d, "model_00000010.bin"), "rb") as fb:
                print("-np 2 -z %d: final model %s the one-process model" % (z, "bit-identical to" if fa.read() == fb.read() else "differs from"))
        # memory per process: ZeRO-1 holds the optimizer state (fp32 AdamW: m and v, 8 bytes each
        # element) of one shard (the start-up check compared the allocation with the model); one
        # process holds all. m and v of the shard are multiples of 64 bytes, the block of 256.
        rz = runs[1][0].stdout
        shard = ((NUM_PARAMS + 1) // 2 + 31) // 32 * 32
        want = round(8.0 * shard / NUM_PARAMS, 2)
        one, per = bytes_per_param(r1.stdout, "optimizer state"), bytes_per_param(rz, "optimizer state")
        check(one == 8.0 and per == want and "AdamW m" not in r1.stdout,
              "optimizer state: 8.00 bytes/param with one process, %.2f per process with -np 2 -z 1 (got %.2f, %.2f)"
              % (want, one, per))
        print("memory per process: optimizer state %.2f bytes/param with one process, %.2f with -np 2 -z 1 (shard %d of %d parameters)"
              % (one, per, shard, NUM_PARAMS))
        check("memory per process (2 processes, -z 1)" in rz, "the memory table says it is per process")
        # 2-rank checkpoints resume bit-exactly
        for z in (0, 1):
            r, da = runs[z]
            db = os.path.join(tmp, "resume%d" % z)
            os.makedirs(db)
            for f in ("model_00000005.bin", "state_00000005_00000.bin", "state_00000005_00001.bin", "DONE_00000005"):
                src = os.path.join(da, f)
                check(os.path.exists(src), "-z %d: checkpoint file %s" % (z, f))
                if os.path.exists(src):
                    shutil.copy(src, db)
            rb = mpirun(2, [mpi_bin] + base + ["-z", str(z), "-n", "5", "-o", db, "-y", "1"])
            check(rb.returncode == 0 and step_losses(rb.stdout) == step_losses(r.stdout)[5:],
                  "-z %d: the 2-rank resume reproduces steps 6-10: %s vs %s (%s)" % (z, step_losses(rb.stdout), step_losses(r.stdout)[5:], tail(rb)))
            with open(os.path.join(da, "model_00000010.bin"), "rb") as fa, open(os.path.join(db, "model_00000010.bin"), "rb") as fb:
                check(fa.read() == fb.read(), "-z %d: the resumed final model is bit-identical" % z)
        # another optimizer of the engine with -z 0 and -z 1: the losses of one process (-z 0 bitwise;
        # -z 1 within 1e-5 as AdamW's above: the shard's gradients are summed in another order)
        fam = [x if x != "10" else "4" for x in base] + ["--optimizer", "lion"]
        rf1 = subprocess.run([one_bin] + fam, capture_output=True, text=True, timeout=300, env=ENV)
        rf2 = mpirun(2, [mpi_bin] + fam + ["-z", "0"])
        check(rf1.returncode == 0 and rf2.returncode == 0 and len(step_losses(rf2.stdout)) == 4 and
              step_losses(rf2.stdout) == step_losses(rf1.stdout),
              "lion -np 2 -z 0: the losses of one process: %s vs %s (%s)" % (step_losses(rf2.stdout), step_losses(rf1.stdout), tail(rf2)))
        rf3 = mpirun(2, [mpi_bin] + fam + ["-z", "1"])
        l1, l3 = step_losses(rf1.stdout), step_losses(rf3.stdout)
        worst = max((abs(x - y) / abs(x) for x, y in zip(l1, l3)), default=1.0)
        check(rf3.returncode == 0 and len(l3) == 4 and worst <= 1e-5,
              "lion -np 2 -z 1: the losses of one process within 1e-5 (worst %.2e): %s vs %s (%s)" % (worst, l3, l1, tail(rf3)))
        # --offload cpu --offload-delay 1 with -z 1 and BAdam: the delayed update of a block runs when
        # the gradient buffer holds the next step's gradients, so its all-gather has a buffer of its
        # own; the losses of one process (6 steps: 2 undelayed, block switches at 2 and 4)
        dl = [x if x != "10" else "6" for x in base] + ["--badam", "2", "--offload", "cpu", "--offload-delay", "1",
                                                      "--offload-delay-warmup", "2"]
        worst, _ = vs_one_process("--offload-delay 1 --badam 2", one_bin, mpi_bin, dl, 6, "1")
        print("--offload cpu --offload-delay 1 --badam 2 -np 2 -z 1: worst relative loss difference to one process %.2e over 6 steps"
              % worst)
        # --offload cpu with -z 0: each layer's gradients go down once its all-reduce has summed them
        # (the copy stream waits for the communication stream); the losses of one process
        hc = [x if x != "10" else "4" for x in base] + ["--offload", "cpu"]
        worst, bitwise = vs_one_process("--offload cpu", one_bin, mpi_bin, hc, 4, "0")
        print("--offload cpu -np 2 -z 0: worst relative loss difference to one process %.2e over 4 steps (%s)"
              % (worst, "bitwise equal" if bitwise else "not bitwise"))
        rw = mpirun(1, [mpi_bin] + base + ["-z", "1", "-o", os.path.join(tmp, "resume1"), "-y", "1"])
        check(rw.returncode != 0 and "resume with the same count" in rw.stderr, "a 2-rank ZeRO-1 checkpoint is refused by 1 process: %s" % tail(rw))
        # without mpirun's help: the fs and tcp rendezvous (the shim checks every rank got rank 0's id)
        short = [x if x != "10" else "3" for x in base]
        rdv = os.path.join(tmp, "rdv")
        os.makedirs(rdv)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        for how, extra, z in (("fs", ["-pf", rdv], "1"), ("tcp", ["-ps", "127.0.0.1:%d" % port], "0")):
            r = mpmd([[mpi_bin] + short + ["-z", z, "-pi", how, "-pn", "2", "-pr", str(k)] + extra for k in (0, 1)])
            check(r.returncode == 0 and step_losses(r.stdout) == step_losses(runs[int(z)][0].stdout)[:3],
                  "-pi %s: 3 steps, the losses of the mpi-bootstrapped run: %s (%s)" % (how, step_losses(r.stdout), tail(r)))
        check(os.listdir(rdv) == [], "-pi fs: rank 0 removed its rendezvous file: %s" % os.listdir(rdv))
        # bad input: mismatched flags (checked over MPI, and over NCCL with -pi fs), a -d the
        # process count does not divide, a rank that hangs
        r = mpmd([[mpi_bin] + short, [mpi_bin] + short + ["-l", "1e-3"]])
        check(r.returncode != 0 and "different flags" in r.stderr, "mismatched flags across ranks are refused: %s" % tail(r))
        r = mpmd([[mpi_bin] + short + ["-pi", "fs", "-pf", rdv, "-pn", "2", "-pr", "0"],
                  [mpi_bin] + short + ["-pi", "fs", "-pf", rdv, "-pn", "2", "-pr", "1", "-c", "0"]])
        check(r.returncode != 0 and "different flags" in r.stderr, "-pi fs: mismatched flags are refused: %s" % tail(r))
        r = mpirun(2, [mpi_bin] + [x if x != "256" else "320" for x in short])
        check(r.returncode != 0 and "flag -d" in r.stderr, "-d 320 over 2 processes of B*T = 64 exits naming -d: %s" % tail(r))
        # --profile with 2 processes: the communication row counts -z 0's all-reduce groups (one per
        # layer and one for the embeddings, on the last micro-step) and -z 1's reduce-scatter, norm
        # all-reduce and all-gather
        for z, calls in ((0, 3), (1, 3)):
            r = mpirun(2, [mpi_bin] + short + ["-z", str(z), "--profile", "1"])
            m = re.search(r"^  communication +[\d.]+ +[\d.]+% +(\d+)", r.stdout, re.M)
            check(r.returncode == 0 and m is not None and int(m.group(1)) == calls,
                  "-np 2 -z %d --profile 1: exit 0 and %d communication calls: %s" % (z, calls, m.group(0) if m else tail(r)))
        sn = os.path.join(tmp, "shard_norm")
        os.makedirs(sn)
        check_shard_norm(mpirun, mpi_bin, tmp, write_cyclic_data(sn, 3, 128, 53, 7, 30000, 5000))
        t0 = time.time()
        r = mpirun(2, [mpi_bin] + short + ["--comm-timeout", "3"], timeout=120, extra=["-x", "LEANSTEP_TEST_HANG=1:2"])
        took = time.time() - t0
        check(r.returncode != 0 and "did not complete within 3 s" in r.stderr and took < 60,
              "a hung rank: the other stops with a message within --comm-timeout (exit %d, %.0f s): %s" % (r.returncode, took, tail(r)))
        print("a hung rank: exit %d after %.1f s with --comm-timeout 3" % (r.returncode, took))
        # a rank that dies: mpirun ends the job, naming the rank (the other is blocked in a collective)
        rc, err, secs = kill_one_rank(mpi_bin, [x if x != "10" else "1000000" for x in base] + ["-z", "1"])
        check(rc is not None and rc != 0 and "rank 1" in err,
              "SIGKILL of rank 1 ends the job with a non-zero exit naming the rank (exit %s after %.1f s): %s" % (rc, secs, err.strip()[-300:]))
        print("a killed rank: mpirun exited %s %.1f s later" % (rc, secs))
        if a.mpi_bin_bf16 and a.bin_bf16:
            # bf16 with master weights: the gradient sums round to bf16 in another order than one
            # process's accumulation (within 1e-4 relative over 6 steps); ZeRO-1's sharded master
            # weights and stochastic rounding (keyed by the global element index) must give
            # exactly the losses of -z 0 when the update does not depend on the gradient norm
            # (--grad-clip 0): with clipping, ZeRO-1 sums the squares shard by shard, another
            # fp32 order, and a last-bit different clip scale moves the losses by ~1e-6
            six = [x if x != "10" else "6" for x in base] + ["--grad-clip", "0"]
            r1 = subprocess.run([os.path.abspath(a.bin_bf16)] + six, capture_output=True, text=True, timeout=300, env=ENV)
            ref = step_losses(r1.stdout)
            got = {}
            for z in (0, 1):
                r = mpirun(2, [os.path.abspath(a.mpi_bin_bf16)] + six + ["-z", str(z)])
                got[z] = step_losses(r.stdout)
                worst = max((abs(x - y) / abs(x) for x, y in zip(ref, got[z])), default=1.0)
                check(r.returncode == 0 and len(got[z]) == 6 and worst <= 1e-4, "bf16 -np 2 -z %d: 6 steps within 1e-4 of one process "
                      "(worst %.2e): %s vs %s (%s)" % (z, worst, got[z], ref, tail(r)))
                print("bf16 -np 2 -z %d: worst relative loss difference to one process %.2e over 6 steps" % (z, worst))
            check(got[0] == got[1], "bf16: -z 1 gives the losses of -z 0: %s vs %s" % (got[1], got[0]))
            # Muon: each process orthogonalizes the whole matrices of its part (group reduces to the
            # owners, group broadcasts back); the same update as -z 0's, bit for bit
            mu = {}
            for z in (0, 1):
                r = mpirun(2, [os.path.abspath(a.mpi_bin_bf16)] + six + ["--optimizer", "muon", "-l", "1e-2", "-z", str(z)])
                mu[z] = step_losses(r.stdout)
                check(r.returncode == 0 and len(mu[z]) == 6, "bf16 muon -np 2 -z %d: 6 steps: %s" % (z, tail(r)))
            check(mu[0] == mu[1], "bf16 muon: -z 1 gives the losses of -z 0: %s vs %s" % (mu[1], mu[0]))
            print("bf16 muon -np 2: -z 1 and -z 0 losses %s" % ("identical" if mu[0] == mu[1] else "differ"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("test_mpi_gpu: %s (%.0f s)" % ("%d failed" % len(failures) if failures else "all checks passed", time.time() - t_start))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

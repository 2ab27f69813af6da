"""testlib.py: what the end-to-end tests in dev/test share: a failure list with check(), the
writer of llm.c token shards and of small learnable synthetic data sets, the parser of the trainers' step
lines, and killing one rank of an mpirun job."""
import os
import re
import signal
import struct
import subprocess
import time

failures = []


def check(cond, what):
    """Records (and prints) a failed check; the test exits 1 when any failed."""
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def write_shard(path, tokens):
    """An llm.c token shard: 256 int32 header (magic 20240520, version 1, count), uint16 tokens."""
    with open(path, "wb") as fh:
        fh.write(struct.pack("<256i", *([20240520, 1, len(tokens)] + [0] * 253)))
        fh.write(struct.pack("<%dH" % len(tokens), *tokens))


def write_cyclic_data(d, seed, vocab, period, noise_every, n_train, n_val):
    """d/train.bin: a random cycle of `period` tokens (learnable), every noise_every-th token random;
    d/val.bin: random tokens. Returns their paths."""
    import random
    rng = random.Random(seed)
    cycle = [rng.randrange(vocab) for _ in range(period)]
    train, val = os.path.join(d, "train.bin"), os.path.join(d, "val.bin")
    write_shard(train, [cycle[i % period] if i % noise_every else rng.randrange(vocab) for i in range(n_train)])
    write_shard(val, [rng.randrange(vocab) for _ in range(n_val)])
    return train, val


def step_losses(out):
    """The losses of the step lines a trainer printed."""
    return [float(x) for x in re.findall(r"^step\s+\d+/\d+ \| loss ([\d.]+)", out, re.M)]


def rank_pids(binary, rank, tag=None):
    """The pids of the running `binary` processes that mpirun started as `rank` (with `tag`: only
    those whose environment has LEANSTEP_TEST_TAG=tag, i.e. this test's own mpirun: make test runs
    other tests, with their own mpiruns of the same binary, at the same time)."""
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            if os.readlink("/proc/%s/exe" % d) != binary:
                continue
            with open("/proc/%s/environ" % d, "rb") as fh:
                env = fh.read().split(b"\0")
        except OSError:
            continue
        if tag is not None and ("LEANSTEP_TEST_TAG=%s" % tag).encode() not in env:
            continue
        if ("OMPI_COMM_WORLD_RANK=%d" % rank).encode() in env:
            pids.append(int(d))
    return pids


def kill_one_rank(binary, args, timeout=120):
    """Starts 2 ranks, SIGKILLs rank 1 once step 2 is printed; returns (mpirun's exit, stderr, seconds)."""
    tag = "%d-%d" % (os.getpid(), time.monotonic_ns())  # this mpirun's ranks, no other test's
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1",
               LEANSTEP_TEST_TAG=tag)
    p = subprocess.Popen(["mpirun", "-np", "2", "--oversubscribe", "--bind-to", "none", "-x", "LEANSTEP_TEST_TAG",
                          binary] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    for line in p.stdout:
        if line.startswith("step    2/"):
            break
    pids = rank_pids(binary, 1, tag)
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    t0 = time.time()
    try:
        _, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        _, err = p.communicate()
        return None, "hung: still running %d s after the kill" % timeout, time.time() - t0
    return p.returncode if pids else None, err if pids else "no rank 1 process found", time.time() - t0

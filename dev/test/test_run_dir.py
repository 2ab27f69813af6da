#!/usr/bin/env python3
"""test_run_dir.py: a run directory (-o) and -y as a user's job scripts meet them, in each trainer given.

  - one run per directory: while a run trains into DIR, a second run into DIR (also named DIR/.)
    exits 1 at start-up with one line naming DIR and the first run's pid, prints nothing else and
    changes nothing in DIR; with --mpi-bin, both ranks of `mpirun -np 2` into that DIR exit 1 with
    rank 0's one line. Once the first run is SIGKILLed, the next run takes its lock over and says so
    in one line naming the dead pid.
  - -y 1 with no checkpoint in DIR (a new or an empty directory) starts from step 0, says so in one
    line, and trains exactly as the same run without -y (the same step lines).
  - -y 1 with a checkpoint at or past -x (step 4, -x 2 and -x 4) ends at once: one line says so, no
    step line, the val loss at step 4 (equal to the uninterrupted run's) and a sample, exit 0.
Usage: test_run_dir.py --bin build/train_gpt2 [--bin build/train_gpt2cu_emu_fp32 ...]
       [--mpi-bin build/train_gpt2_mpi]. Exit status 1 if any check failed.
"""
import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from testlib import check, failures, step_losses, write_cyclic_data  # noqa: E402

MODEL = "L2C32H2T64V512"


def run(cmd, timeout=300, env=None):
    """The finished process; one still running after `timeout` s is killed: returncode None."""
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        return subprocess.CompletedProcess(cmd, None, out, "still running after %d s" % timeout)


def listing(d):
    """Name -> (size, mtime) of every file in d."""
    return {n: (os.stat(os.path.join(d, n)).st_size, os.stat(os.path.join(d, n)).st_mtime_ns) for n in os.listdir(d)}


def val_lines(out):
    return re.findall(r"^val loss ([\d.]+) at step (\d+)", out, re.M)


def check_lock(binary, base, tmp, tag, mpi_bin):
    d = os.path.join(tmp, "locked")
    a = subprocess.Popen([binary] + base + ["-x", "100000", "-v", "0", "-o", d], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        started = False
        for line in a.stdout:  # the first step line: the owner has written its logs
            if line.startswith("step "):
                started = True
                break
        check(started, "%s: the first run trains" % tag)
        before = listing(d)
        for name in (d, os.path.join(d, ".")):
            t0 = time.time()
            r = run([binary] + base + ["-x", "3", "-o", name])
            lines = r.stderr.strip().splitlines()
            check(r.returncode == 1 and len(lines) == 1 and name in lines[0] and ("pid %d" % a.pid) in lines[0]
                  and lines[0].startswith("leanstep: error:"),
                  "%s: a second run into %s: exit 1, one line naming it and the owner's pid %d (exit %d): %s"
                  % (tag, name, a.pid, r.returncode, r.stderr.strip()[-400:]))
            check(r.stdout == "", "%s: the refused run prints nothing before its error: %r" % (tag, r.stdout[:300]))
            check(time.time() - t0 < 60, "%s: the refused run stops at start-up" % tag)
        if mpi_bin:
            env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1")
            r = run(["mpirun", "-np", "2", "--oversubscribe", "--bind-to", "none", mpi_bin] + base + ["-x", "3", "-o", d],
                    env=env)
            errs = [ln for ln in r.stderr.splitlines() if ln.startswith("leanstep: error:")]
            check(r.returncode != 0 and len(errs) == 1 and ("pid %d" % a.pid) in errs[0],
                  "mpirun -np 2 into a directory in use: every rank stops, one line (exit %d): %s"
                  % (r.returncode, r.stderr.strip()[-600:]))
        # (the owner's own files grow; the refused runs added none and truncated none)
        after = listing(d)
        check(set(after) == set(before) and all(after[n][0] >= before[n][0] for n in before),
              "%s: the refused runs left the directory as it was: %s -> %s" % (tag, sorted(before), sorted(after)))
    finally:
        a.send_signal(signal.SIGKILL)
        a.communicate()
    r = run([binary] + base + ["-x", "2", "-n", "2", "-o", d, "-y", "1"])
    took = [ln for ln in r.stdout.splitlines() if "taking over run.lock" in ln]
    check(r.returncode == 0 and len(took) == 1 and ("pid %d" % a.pid) in took[0],
          "%s: after SIGKILL the next run takes the lock over, one line naming pid %d (exit %d): %s %s"
          % (tag, a.pid, r.returncode, took, r.stderr.strip()[-300:]))
    with open(os.path.join(d, "run.lock")) as fh:
        check(fh.read() == "", "%s: a run that ended normally leaves run.lock empty" % tag)


def check_resume_fresh(binary, base, tmp, tag):
    plain = run([binary] + base + ["-x", "3", "-o", os.path.join(tmp, "plain")])
    check(plain.returncode == 0, "%s: a 3-step run exits 0: %s" % (tag, plain.stderr.strip()[-300:]))
    empty = os.path.join(tmp, "empty")
    os.makedirs(empty)
    for d in (os.path.join(tmp, "new", "nested"), empty):
        r = run([binary] + base + ["-x", "3", "-o", d, "-y", "1"])
        said = [ln for ln in r.stdout.splitlines() if ln.startswith("-y 1:")]
        check(r.returncode == 0 and len(said) == 1 and "starting from step 0" in said[0] and d in said[0],
              "%s: -y 1 into %s without a checkpoint starts fresh and says so in one line (exit %d): %s %s"
              % (tag, d, r.returncode, said, r.stderr.strip()[-300:]))
        check(step_losses(r.stdout) == step_losses(plain.stdout) and len(step_losses(r.stdout)) == 3,
              "%s: -y 1 without a checkpoint trains as without -y: %s vs %s"
              % (tag, step_losses(r.stdout), step_losses(plain.stdout)))


def check_resume_past(binary, base, tmp, tag):
    d = os.path.join(tmp, "done")
    full = run([binary] + base + ["-x", "4", "-n", "2", "-o", d])
    check(full.returncode == 0 and os.path.exists(os.path.join(d, "DONE_00000004")),
          "%s: a 4-step run with checkpoints at 2 and 4: %s" % (tag, full.stderr.strip()[-300:]))
    want = [v for v, s in val_lines(full.stdout) if s == "4"]
    for x in ("2", "4"):
        t0 = time.time()
        r = run([binary] + base + ["-x", x, "-o", d, "-y", "1", "-s", "1", "-g", "8"], timeout=60)
        said = [ln for ln in r.stdout.splitlines() if "at or past" in ln]
        vals = val_lines(r.stdout)
        check(r.returncode == 0 and len(said) == 1 and "step 4" in said[0],
              "%s: -y 1 -x %s with the checkpoint of step 4: exit 0 and one line saying so (exit %s): %s %s"
              % (tag, x, r.returncode, said, r.stderr.strip()[-300:]))
        check(step_losses(r.stdout) == [] and re.search(r"^summary: 0 steps \(4 to 4\)", r.stdout, re.M),
              "%s: -y 1 -x %s: no training step: %s" % (tag, x, r.stdout[-400:]))
        check(len(vals) == 1 and vals[0][1] == "4" and [vals[0][0]] == want and "generating:" in r.stdout,
              "%s: -y 1 -x %s: the val loss at step 4 (%s, the run's %s) and a sample" % (tag, x, vals, want))
        check(time.time() - t0 < 60, "%s: -y 1 -x %s ends at once" % (tag, x))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", action="append", required=True)
    ap.add_argument("--mpi-bin", help="the CPU trainer's MPI build: mpirun -np 2 into a directory in use")
    a = ap.parse_args()
    for i, b in enumerate(a.bin):
        binary = os.path.abspath(b)
        tag = os.path.basename(binary)
        with tempfile.TemporaryDirectory() as tmp:
            train, val = write_cyclic_data(tmp, 3, 512, 29, 7, 6000, 2000)
            base = ["-e", MODEL, "-i", train, "-j", val, "-b", "2", "-t", "16", "-v", "2", "-m", "2", "-s", "0",
                    "-l", "1e-3", "--threads", "1"]
            check_lock(binary, base, tmp, tag, os.path.abspath(a.mpi_bin) if a.mpi_bin and i == 0 else None)
            check_resume_fresh(binary, base, tmp, tag)
            check_resume_past(binary, base, tmp, tag)
    print("test_run_dir: %s" % ("%d failed" % len(failures) if failures else "all checks passed"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

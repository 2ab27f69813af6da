"""test_blas_env.py: the OpenBLAS core choice at start-up (llmc/run/blas_env.h), end to end.

Runs `test_blas_env --startup` (cpu_env_apply, then the BLAS line) and the CPU trainer's banner
(--dry-run) under the test hooks of LEANSTEP_BLAS_TEST: with OpenBLAS pretending to have fallen
back to Prescott, leanstep chooses the CPU's core and says so; when the self-check disagrees (a
reference 1% off), crashes (SIGILL) or OpenBLAS does not take the core, exactly one warning, the
program goes on with OpenBLAS's own choice and says why; the user's OPENBLAS_CORETYPE always wins.
Every run must end with exit status 0, after one re-execution (the wait policy and the core
together), or two when a failed self-check needs the process image without leanstep's core.

  python3 dev/test/test_blas_env.py --bin build/test_blas_env --trainer build/train_gpt2
"""
import argparse
import os
import re
import subprocess
import sys

from testlib import check, failures

CLEAN = ("OPENBLAS_CORETYPE", "LEANSTEP_BLAS_CORE", "LEANSTEP_BLAS_TEST", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT",
         "TEST_BLAS_ENV_RUNS")


def run(cmd, **env_extra):
    env = {k: v for k, v in os.environ.items() if k not in CLEAN}
    env.update(env_extra)
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


def runs(out):
    m = re.search(r"^runs: (\d+)$", out, re.M)
    return int(m.group(1)) if m else None


def warnings(err):
    return [line for line in err.splitlines() if line.startswith("warning:")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, help="build/test_blas_env")
    ap.add_argument("--trainer", required=True, help="build/train_gpt2")
    a = ap.parse_args()

    # what this machine's CPU would get when OpenBLAS falls back (the unit test prints it)
    rc, out, err = run([a.bin])
    check(rc == 0, "test_blas_env (the table and the self-check): exit %d\n%s%s" % (rc, out, err))
    dynamic = "DYNAMIC_ARCH" in out
    m = re.search(r"AVX2\+FMA (\d), AVX-512 (\d), BF16 (\d), AMD (\d)", out)
    check(m is not None, "test_blas_env names the CPU's features: %r" % out)
    if m is None:
        return 1
    avx2, avx512, bf16, amd = (int(x) for x in m.groups())
    expected = "Cooperlake" if avx512 and bf16 else "SkylakeX" if avx512 else ("Zen" if amd else "Haswell") if avx2 else None

    # untouched: OpenBLAS's own choice or leanstep's, no warning, the self-check passes
    rc, out, err = run([a.bin, "--startup"])
    check(rc == 0 and "self-check: passed" in out, "default start-up: exit %d\n%s%s" % (rc, out, err))
    check(not warnings(err), "default start-up warns: %r" % err)
    check(runs(out) == 2, "default start-up: one re-execution (the wait policy), got %s runs" % runs(out))
    rc, out, err = run([a.bin, "--startup"], OMP_WAIT_POLICY="passive")
    n = 2 if "chosen by leanstep" in out else 1  # (where leanstep sets the core, it runs again for that)
    check(rc == 0 and runs(out) == n, "OMP_WAIT_POLICY set: %d runs expected, got %s\n%s%s" % (n, runs(out), out, err))
    check(re.search(r"^BLAS: OpenBLAS \S+, core \S+ \((OpenBLAS's own choice|chosen by leanstep from cpuid)", out, re.M),
          "default start-up names the core and who chose it: %r" % out)

    # the user's OPENBLAS_CORETYPE wins, even where leanstep would choose
    for hook in ("", "pretend-fallback"):
        rc, out, err = run([a.bin, "--startup"], OPENBLAS_CORETYPE="Haswell", LEANSTEP_BLAS_TEST=hook)
        check(rc == 0 and "core Haswell (set by OPENBLAS_CORETYPE=Haswell)" in out and "OPENBLAS_CORETYPE=Haswell\n" in out
              and not warnings(err), "OPENBLAS_CORETYPE=Haswell (hook '%s'): exit %d\n%s%s" % (hook, rc, out, err))

    if expected is None:
        print("test_blas_env.py: this CPU has no AVX2 + FMA: leanstep chooses no core here; "
              "the fallback paths are checked on synthetic inputs only (test_blas_env)")
        return 1 if failures else 0
    if not dynamic:  # an OpenBLAS built for one CPU ignores OPENBLAS_CORETYPE
        rc, out, err = run([a.bin, "--startup"], LEANSTEP_BLAS_TEST="pretend-fallback")
        w = warnings(err)
        check(rc == 0 and runs(out) == 2 and len(w) == 1 and "did not take" in w[0],
              "OpenBLAS without DYNAMIC_ARCH: one warning that it did not take the core: exit %d\n%s%s" % (rc, out, err))
        print("test_blas_env.py: %s (OpenBLAS without DYNAMIC_ARCH: only the path where it ignores the core)"
              % ("FAILED" if failures else "ok"))
        return 1 if failures else 0

    # OpenBLAS fell back (pretended): leanstep's core, the self-check passes, no warning
    rc, out, err = run([a.bin, "--startup"], LEANSTEP_BLAS_TEST="pretend-fallback")
    check(rc == 0 and "core %s (chosen by leanstep from cpuid: OpenBLAS detected Prescott; self-check passed)" % expected in out
          and "OPENBLAS_CORETYPE=%s\n" % expected in out and not warnings(err),
          "pretend-fallback: leanstep chooses %s: exit %d\n%s%s" % (expected, rc, out, err))
    check(runs(out) == 2, "pretend-fallback: the core and the wait policy in one re-execution, got %s runs" % runs(out))

    # the check fails: one warning, OpenBLAS's own choice, the reason in the BLAS line
    # (a wrong or crashing kernel: the process runs again without it; one OpenBLAS ignored: no need)
    for hook, reason, n in (("corrupt", "expected", 3), ("crash", "crashed in", 3), ("not-taken", "did not take", 2)):
        rc, out, err = run([a.bin, "--startup"], LEANSTEP_BLAS_TEST="pretend-fallback," + hook)
        w = warnings(err)
        check(rc == 0 and "self-check: passed" in out, "%s: exit %d\n%s%s" % (hook, rc, out, err))
        check(runs(out) == n, "%s: %d runs expected, got %s" % (hook, n, runs(out)))
        check(len(w) == 1 and expected in w[0] and reason in w[0], "%s: one warning naming %s and '%s': %r" % (hook, expected, reason, err))
        check("OPENBLAS_CORETYPE=\n" in out, "%s: OPENBLAS_CORETYPE is dropped: %r" % (hook, out))
        check(re.search(r"core \S+ \(OpenBLAS's own choice; leanstep's %s rejected: [^)]*%s" % (expected, reason), out),
              "%s: the BLAS line says leanstep's %s was rejected and why: %r" % (hook, expected, out))

    # the trainer's banner names the core: chosen by leanstep, and after a failed check
    banner = r"^leanstep train_gpt2 \(CPU, fp32\), \d+ threads?, OpenBLAS \S+, core %s \(%s"
    rc, out, err = run([a.trainer, "-e", "L2C64H4", "--dry-run", "1"], LEANSTEP_BLAS_TEST="pretend-fallback")
    check(rc == 0 and re.search(banner % (expected, "chosen by leanstep"), out, re.M) and not warnings(err),
          "trainer, pretend-fallback: exit %d\n%s%s" % (rc, out, err))
    rc, out, err = run([a.trainer, "-e", "L2C64H4", "--dry-run", "1"], LEANSTEP_BLAS_TEST="pretend-fallback,corrupt")
    check(rc == 0 and re.search(banner % (r"\S+", "OpenBLAS's own choice; leanstep's %s rejected" % expected), out, re.M)
          and len(warnings(err)) == 1, "trainer, a failed self-check: exit %d\n%s%s" % (rc, out, err))

    print("test_blas_env.py: %s (the CPU's core: %s)" % ("FAILED" if failures else "ok", expected))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""test_gpu_check.py: rehearses dev/gpu_check.sh on a machine without a GPU (its --dry-run).

Checks that the script always leaves $OUT/summary.txt with one row per step, that a failing step
(GPU_CHECK_FAIL=NAME) is reported as FAILED with its last error line while the later steps still
get their rows and the exit status is 1, that a run killed by SIGTERM leaves a summary naming the
interruption, and that shellcheck finds nothing (when CI=true, a missing shellcheck is a failure).
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from testlib import check, failures  # noqa: E402

SCRIPT = "dev/gpu_check.sh"
STEPS = ["env", "build", "labs", "adamw-check", "adamw-bench", "test-bf16", "test-fp32", "test-fp16", "profile-d12",
         "train-d12", "train-fp16", "torch-step", "train-modes", "sample-eval"]


def run(out, extra_env=None):
    env = dict(os.environ, OUT=out)
    env.update(extra_env or {})
    p = subprocess.run(["bash", SCRIPT, "--dry-run"], env=env, capture_output=True, text=True, timeout=300)
    path = os.path.join(out, "summary.txt")
    summary = open(path).read() if os.path.exists(path) else ""
    return p.returncode, summary, p.stdout + p.stderr


def rows(summary):
    table = {}
    for line in summary.splitlines():
        parts = line.split(None, 2)
        if len(parts) == 3 and parts[1].endswith("s") and parts[1][:-1].isdigit():
            table[parts[0]] = parts[2]
    return table


def main():
    root = tempfile.mkdtemp(prefix="test_gpu_check.")
    try:
        out = os.path.join(root, "ok")
        os.makedirs(out)
        rc, summary, log = run(out)
        table = rows(summary)
        check(rc == 0, "dry run exits 0 (got %d): %s" % (rc, log[-400:]))
        for s in STEPS:
            check(s in table, "dry-run summary has a row for step %s" % s)
        check(all(v.startswith(("passed", "skipped")) for v in table.values()),
              "dry run: every row passed or skipped: %s" % table)
        check("no step failed" in summary, "dry-run summary ends with 'no step failed'")

        out = os.path.join(root, "fail")
        os.makedirs(out)
        rc, summary, log = run(out, {"GPU_CHECK_FAIL": "build"})
        table = rows(summary)
        check(rc == 1, "a failing step makes the script exit 1 (got %d)" % rc)
        check(table.get("build", "").startswith("FAILED (exit 1): error: build fails on purpose"),
              "the failing step's row names the failure and its last error line: %r" % table.get("build"))
        check("train-modes" in table, "the steps after a failure still get their rows")
        check("FAILED: build" in summary, "the summary's last line names the failed step")

        # killed from outside mid-run: the summary written so far stays, naming the interruption
        out = os.path.join(root, "kill")
        os.makedirs(out)
        env = dict(os.environ, OUT=out, GPU_CHECK_FAIL="none", GPU_CHECK_PAUSE="labs")
        p = subprocess.Popen(["bash", SCRIPT, "--dry-run"], env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        path = os.path.join(out, "summary.txt")
        deadline = time.time() + 60
        while time.time() < deadline and "build" not in rows(open(path).read() if os.path.exists(path) else ""):
            time.sleep(0.2)
        time.sleep(0.5)
        p.send_signal(signal.SIGTERM)
        rc = p.wait(timeout=60)
        summary = open(path).read() if os.path.exists(path) else ""
        table = rows(summary)
        check(rc != 0, "a run stopped by SIGTERM exits non-zero (got %d)" % rc)
        check("build" in table and "interrupted" in table,
              "a run stopped by SIGTERM keeps its finished rows and says it was interrupted: %s" % table)

        if shutil.which("shellcheck"):
            p = subprocess.run(["shellcheck", SCRIPT], capture_output=True, text=True)
            check(p.returncode == 0, "shellcheck %s is clean:\n%s" % (SCRIPT, p.stdout))
        elif os.environ.get("CI") == "true":
            check(False, "shellcheck is not installed (package shellcheck; dev/install_deps.sh installs it)")
        else:
            print("test_gpu_check: shellcheck not installed: not run")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    n = 4 + len(STEPS) + 4 + 2 + 1
    print("%d passed, %d failed" % (n - len(failures), len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""test_gpu_check.py: rehearses dev/gpu_check.sh as a GPU machine without network would run it.

The carry: `dev/gpu_carry.sh size` passes (every path in dev/gpu_carry.txt there, tree + carry at
most 48 MiB, printed) and fails over a smaller limit. The rehearsal: the files that travel (tracked,
and untracked ones git does not ignore) and the carried paths, nothing else, are copied to a new
folder, the carried cuDNN library made to look older than its sources, and `dev/gpu_check.sh
--dry-run` runs there: exit 0, one row per step, each passed or ready (the builds' `make -n` and
the references' `make -n ref` resolve without fetching or rebuilding the library, each trainer run's
flags pass the CPU harness build's --dry-run with --emu, no fetch or install tried), the predicted
seconds in the summary are the banner's and add up to at most the 420 s budget, and exactly
summary.txt and logs.tar.gz come back, the archive holding every step's log. Planted faults must
fail it: a carried path missing, a source of the library changed after its stamp, a step that
calls `make data`, a mistyped trainer flag (with --emu), a step failing (GPU_CHECK_FAIL: FAILED
with its last error line, the later steps still reported), and a run stopped by SIGTERM (its rows
kept, the interruption named, the summary on stdout). A decode-only build's sample-eval (no
encoder: a plain sample, its flags checked with --emu) passes. shellcheck finds nothing in either script
(when CI=true, a missing shellcheck is a failure).

usage: test_gpu_check.py --torch-python PY [--emu DIR]   (DIR: train_gpt2cu_emu_bf16 and _fp16)
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from testlib import check, failures  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SCRIPT = "dev/gpu_check.sh"
STEPS = ["env", "build-bf16", "profile-d12", "build-rest", "train-d12", "refs", "test-bf16", "adamw-check",
         "adamw-bench", "labs", "muon-bench", "test-fp32", "test-fp16", "profile-d12-muon", "train-fp16",
         "torch-step", "train-modes", "sample-eval", "ref-d12", "test-bf16-d12", "no-network"]
# the trainer runs the dry run gives to the harness build with --emu
EMU_STEPS = ["profile-d12", "train-d12", "profile-d12-muon", "train-fp16", "train-modes", "sample-eval"]
BUDGET = 420
N_CHECKS = 0
ARGS_ENV = {}  # TORCH_PYTHON, GPU_CHECK_EMU for every run


def ck(cond, what):
    global N_CHECKS
    N_CHECKS += 1
    check(cond, what)


def carried():
    out = subprocess.run(["bash", "dev/gpu_carry.sh", "list"], cwd=ROOT, capture_output=True, text=True, check=True)
    return out.stdout.split()


def make_copy(dest):
    """What a device run gets: the files that travel with the working tree, and the carried paths."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split("\0")
    for f in [f for f in files if f] + carried():
        src, dst = os.path.join(ROOT, f), os.path.join(dest, f)
        if os.path.isdir(src):
            shutil.copytree(src, dst, symlinks=True)
        elif os.path.exists(src):
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copy2(src, dst)
    # copies arrive in any order: the library older than its sources must still be used as it is
    os.utime(os.path.join(dest, "build/libleanstep_cudnn.so"), (1e9, 1e9))


def rows(summary):
    """step -> (predicted, status) from the summary's table"""
    table = {}
    for line in summary.splitlines():
        m = re.match(r"^(\S+)\s+(\d+s|-)\s+(\d+)s  (.*)$", line)
        if m:
            table[m.group(1)] = (m.group(2), m.group(4))
    return table


def banner_predictions():
    """step -> seconds from the script's banner table"""
    pred, inside = {}, False
    for line in open(os.path.join(ROOT, SCRIPT)):
        if re.match(r"^#\s+step\s+s\s+what", line):
            inside = True
            continue
        if inside:
            m = re.match(r"^#   (\S+)\s+(\d+)  ", line)
            if m:
                pred[m.group(1)] = int(m.group(2))
            elif not line.startswith("#      "):
                break
    return pred


def run(tree, out, env_extra=None):
    os.makedirs(out)
    env = dict(os.environ, OUT=out, **ARGS_ENV)
    env.update(env_extra or {})
    p = subprocess.run(["bash", SCRIPT, "--dry-run"], cwd=tree, env=env, capture_output=True, text=True,
                       timeout=300)
    path = os.path.join(out, "summary.txt")
    summary = open(path).read() if os.path.exists(path) else ""
    return p.returncode, summary, p.stdout + p.stderr


def archive_names(out):
    try:
        with tarfile.open(os.path.join(out, "logs.tar.gz")) as t:
            return {os.path.basename(n) for n in t.getnames()}
    except (OSError, tarfile.TarError):
        return set()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--torch-python", required=True, help="a Python with torch (the references' plans)")
    ap.add_argument("--emu", help="folder of the harness builds train_gpt2cu_emu_bf16 and _fp16")
    a = ap.parse_args()
    ARGS_ENV["TORCH_PYTHON"] = a.torch_python
    if a.emu:
        ARGS_ENV["GPU_CHECK_EMU"] = os.path.abspath(a.emu)

    # the carry's size, and its limit
    p = subprocess.run(["bash", "dev/gpu_carry.sh", "size"], cwd=ROOT, capture_output=True, text=True)
    print(p.stdout.strip())
    m = re.search(r"= ([0-9.]+) MiB of at most 48 MiB", p.stdout)
    ck(p.returncode == 0 and m and float(m.group(1)) <= 48, "tree + carry are present and at most 48 MiB: %s" % p.stderr)
    p = subprocess.run(["bash", "dev/gpu_carry.sh", "size"], cwd=ROOT, capture_output=True, text=True,
                       env=dict(os.environ, GPU_CARRY_MAX_MIB="1"))
    ck(p.returncode == 1 and "over GPU_CARRY_MAX_MIB=1" in p.stderr, "gpu_carry.sh size fails over its limit")
    ck(len(carried()) <= 8, "at most 8 carried paths (a device run takes 8)")

    root = tempfile.mkdtemp(prefix="test_gpu_check.")
    t0 = time.time()
    try:
        tree = os.path.join(root, "tree")
        make_copy(tree)

        # the rehearsal
        out = os.path.join(root, "ok")
        rc, summary, log = run(tree, out)
        table = rows(summary)
        ck(rc == 0, "dry run in the copy exits 0 (got %d): %s" % (rc, log[-600:]))
        for s in STEPS:
            ck(s in table, "the summary has a row for step %s" % s)
        allowed = ("passed", "ready")
        ck(all(v[1].startswith(allowed) for v in table.values()),
           "every row passed or ready: %s" % {k: v[1] for k, v in table.items() if not v[1].startswith(allowed)})
        if a.emu:
            for s in EMU_STEPS:
                ck(table.get(s, ("", ""))[1].startswith("passed (dry run: the harness trainer"),
                   "%s's trainer flags checked by the harness --dry-run: %s" % (s, table.get(s)))
        ck(table.get("no-network", ("", ""))[1].startswith("passed"), "no fetch or install tried")
        ck("no step failed" in summary, "the summary ends with 'no step failed'")
        ck(sorted(os.listdir(out)) == ["logs.tar.gz", "summary.txt"],
           "exactly summary.txt and logs.tar.gz come back: %s" % sorted(os.listdir(out)))
        names = archive_names(out)
        missing = [s for s in STEPS if s + ".log" not in names]
        ck(not missing, "logs.tar.gz holds every step's log (missing: %s)" % missing)
        banner = banner_predictions()
        summary_pred = {k: int(v[0][:-1]) for k, v in table.items() if v[0] != "-"}
        ck(banner == summary_pred, "the banner's predicted seconds are the summary's: %s vs %s" % (banner, summary_pred))
        ck(0 < sum(banner.values()) <= BUDGET, "the predictions add up to at most %d s: %d" % (BUDGET, sum(banner.values())))
        ck("(predicted: %d s)" % sum(banner.values()) in summary, "the summary states the predicted total")

        # planted: a carried path missing
        tok = os.path.join(tree, "data/gpt2_tokenizer.bin")
        shutil.move(tok, tok + ".away")
        rc, summary, _ = run(tree, os.path.join(root, "missing"))
        shutil.move(tok + ".away", tok)
        table = rows(summary)
        ck(rc == 1, "a carried path missing fails the dry run (got %d)" % rc)
        ck("data/gpt2_tokenizer.bin" in table.get("env", ("", ""))[1] and table["env"][1].startswith("FAILED"),
           "the env row names the missing carried path: %s" % (table.get("env"),))
        ck(table.get("sample-eval", ("", ""))[1].startswith("FAILED (dry run: the GPU machine would skip it"),
           "the step needing it fails the dry run: %s" % (table.get("sample-eval"),))

        # planted: a source of the library changed after its stamp
        cuh = os.path.join(tree, "llmc/kernels/cudnn_att.cuh")
        text = open(cuh).read()
        with open(cuh, "a") as fh:
            fh.write("// changed\n")
        rc, summary, _ = run(tree, os.path.join(root, "stale"))
        with open(cuh, "w") as fh:
            fh.write(text)
        ck(rc == 1 and "would be rebuilt: its sources changed" in rows(summary).get("env", ("", ""))[1],
           "a library whose sources changed after its stamp fails the dry run: %s" % (rows(summary).get("env"),))

        # planted: a step that calls `make data`
        rc, summary, _ = run(tree, os.path.join(root, "fetch"), {"GPU_CHECK_PLANT": "fetch"})
        table = rows(summary)
        ck(rc == 1 and table.get("planted-fetch", ("", ""))[1].startswith("FAILED"), "the planted `make data` fails")
        ck(re.search(r"FAILED \(1 call\(s\) refused, first: make .*data", table.get("no-network", ("", ""))[1]),
           "the no-network row names the refused call: %s" % (table.get("no-network"),))

        # planted: a mistyped trainer flag
        if a.emu:
            script = os.path.join(tree, SCRIPT)
            text = open(script).read()
            with open(script, "w") as fh:
                fh.write(text.replace('"--opt-state bf16"', '"--opt-state bf61"'))
            rc, summary, _ = run(tree, os.path.join(root, "flag"))
            with open(script, "w") as fh:
                fh.write(text)
            ck(rc == 1 and rows(summary).get("train-modes", ("", ""))[1].startswith("FAILED"),
               "a mistyped flag in train-modes fails the dry run: %s" % (rows(summary).get("train-modes"),))

        # a decode-only build (no PCRE2/cJSON headers): sample-eval samples without a prompt
        rc, summary, _ = run(tree, os.path.join(root, "decode"), {"GPU_CHECK_DECODE_ONLY": "1"})
        status = rows(summary).get("sample-eval", ("", ""))[1]
        ck(rc == 0 and status.startswith("passed (decode-only build: a plain sample"),
           "a decode-only build's sample-eval passes with a plain sample: %s" % status)

        # a failing step
        rc, summary, _ = run(tree, os.path.join(root, "fail"), {"GPU_CHECK_FAIL": "build-bf16"})
        table = rows(summary)
        ck(rc == 1, "a failing step makes the script exit 1 (got %d)" % rc)
        ck(table.get("build-bf16", ("", ""))[1].startswith("FAILED (exit 1): error: build-bf16 fails on purpose"),
           "the failing step's row names the failure and its last error line: %r" % (table.get("build-bf16"),))
        ck("train-modes" in table, "the steps after a failure still get their rows")
        ck("FAILED: build-bf16" in summary, "the summary names the failed step")

        # stopped from outside mid-run: the rows so far stay, on disk and on stdout
        out = os.path.join(root, "kill")
        os.makedirs(out)
        env = dict(os.environ, OUT=out, GPU_CHECK_PAUSE="labs", **ARGS_ENV)
        p = subprocess.Popen(["bash", SCRIPT, "--dry-run"], cwd=tree, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
        path = os.path.join(out, "summary.txt")
        deadline = time.time() + 60
        while time.time() < deadline and "adamw-bench" not in rows(open(path).read() if os.path.exists(path) else ""):
            time.sleep(0.2)
        time.sleep(0.5)
        p.send_signal(signal.SIGTERM)
        stdout, _ = p.communicate(timeout=60)
        table = rows(open(path).read() if os.path.exists(path) else "")
        ck(p.returncode != 0, "a run stopped by SIGTERM exits non-zero (got %d)" % p.returncode)
        ck("adamw-bench" in table and "interrupted" in table,
           "a run stopped by SIGTERM keeps its rows and says it was interrupted: %s" % list(table))
        ck("FAILED (signal during labs)" in table.get("interrupted", ("", ""))[1],
           "the interruption names the step in flight: %s" % (table.get("interrupted"),))
        ck("interrupted" in rows(stdout), "the stopped run prints its summary on stdout")
        ck("env.log" in archive_names(out), "the stopped run leaves the log archive")
        ck(sorted(os.listdir(out)) == ["logs.tar.gz", "summary.txt"], "no temp file left in OUT: %s" % os.listdir(out))

        for script in (SCRIPT, "dev/gpu_carry.sh"):
            if shutil.which("shellcheck"):
                p = subprocess.run(["shellcheck", script], cwd=ROOT, capture_output=True, text=True)
                ck(p.returncode == 0, "shellcheck %s is clean:\n%s" % (script, p.stdout))
            elif os.environ.get("CI") == "true":
                ck(False, "shellcheck is not installed (package shellcheck; dev/install_deps.sh installs it)")
            else:
                print("test_gpu_check: shellcheck not installed: not run")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print("test_gpu_check: %d passed, %d failed (%.1f s)" % (N_CHECKS - len(failures), len(failures), time.time() - t0))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""test_first_run.py: a trainer run as on a fresh machine.

  --bin (the CPU trainer) or --gpu-bin (a harness build of the GPU trainer):
    in a fresh copy of the source tree without data/, the trainer with its default data paths makes
    the data itself (`make data`, from the mirror: the repository's data/ as made by `make data`),
    tells so on one line, trains, prints a decoded sample, and its shards equal the repository's;
    a second run makes nothing. Paths given with -i, -j or --tokenizer that do not exist fail in one
    line naming the flag and the file, and nothing is fetched; a default -j missing beside a given -i
    names -j; a failing data step (a mirror without the files) and a directory that is not the source
    tree each end with one error line.
  --gpu-bin also: with LEANSTEP_HARNESS_DEVICES=0 (the harness plays a machine without a GPU) the
    trainer says so in one line naming `make train`, exit 1; --memory-report still works there.
  Always: the Makefile enables the multi-GPU build only with nccl.h and libnccl.so (make -n).
Usage: test_first_run.py [--bin build/train_gpt2] [--gpu-bin build/train_gpt2cu_emu_fp32]
       [--mirror data]. (`make train`, the README's first command: dev/test/test_readme.py.) Run from the repository root. Exit 1 if any check failed.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from testlib import check, failures, step_losses  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SHARDS = ("tinyshakespeare/tiny_shakespeare_train.bin", "tinyshakespeare/tiny_shakespeare_val.bin", "gpt2_tokenizer.bin")
TINY = ["-e", "L2C64H4", "-b", "2", "-t", "32", "-x", "2", "-v", "2", "-m", "2", "-s", "2", "-g", "8", "--threads", "1"]


def clean_env(**extra):
    """The environment of a user's shell: no make variables of the make that runs this test."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "LEANSTEP_DATA_MIRROR")}
    env.update(extra)
    return env


def run(cmd, cwd, env, timeout=600):
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout)


def error_lines(stderr):
    return [ln for ln in stderr.splitlines() if ln.startswith("leanstep: error:")]


def fresh_tree(tmp):
    """The source tree (Makefile, llmc/, dev/) copied with its mtimes, and build/prepare_data when it
    is there (up to date, so the data step does not rebuild it); no data/."""
    tree = os.path.join(tmp, "tree")
    os.makedirs(tree)
    shutil.copy2(os.path.join(ROOT, "Makefile"), tree)
    for d in ("llmc", "dev"):
        shutil.copytree(os.path.join(ROOT, d), os.path.join(tree, d), ignore=shutil.ignore_patterns("__pycache__"))
    prep = os.path.join(ROOT, "build", "prepare_data")
    if os.path.exists(prep):
        os.makedirs(os.path.join(tree, "build"))
        shutil.copy2(prep, os.path.join(tree, "build"))
    return tree


def same_file(a, b):
    with open(a, "rb") as fa, open(b, "rb") as fb:
        return fa.read() == fb.read()


def check_trainer(binary, mirror, tag):
    with tempfile.TemporaryDirectory() as tmp:
        tree = fresh_tree(tmp)
        env = clean_env(LEANSTEP_DATA_MIRROR=mirror)
        # given paths that do not exist: one line naming the flag and the file; nothing fetched
        none = os.path.join(tmp, "none_*.bin")
        for args, flag in ((["-i", none], "-i"), (["-j", none], "-j"), (["--tokenizer", none], "--tokenizer")):
            r = run([binary] + TINY + args, tree, env)
            errs = error_lines(r.stderr)
            check(r.returncode == 1 and len(errs) == 1 and ("flag %s:" % flag) in errs[0] and none in errs[0],
                  "%s: %s missing: one line naming the flag and the file (exit %d): %s" % (tag, flag, r.returncode, r.stderr.strip()))
        check(not os.path.exists(os.path.join(tree, "data")), "%s: nothing fetched for given paths" % tag)
        own = os.path.join(ROOT, "data", SHARDS[0])  # the repository's, made by `make data`
        if os.path.exists(own):  # a given -i with the default -j missing names -j
            r = run([binary] + TINY + ["-i", own], tree, env)
            errs = error_lines(r.stderr)
            check(r.returncode == 1 and len(errs) == 1 and "flag -j:" in errs[0] and SHARDS[1] in errs[0],
                  "%s: given -i, default -j missing: names -j (exit %d): %s" % (tag, r.returncode, r.stderr.strip()))
            check(not os.path.exists(os.path.join(tree, "data")), "%s: nothing fetched for a given -i" % tag)

        # not the source tree: one line saying where to run it
        empty = os.path.join(tmp, "empty")
        os.makedirs(empty)
        r = run([binary] + TINY, empty, env)
        errs = error_lines(r.stderr)
        check(r.returncode == 1 and len(errs) == 1 and SHARDS[0] in errs[0] and "leanstep directory" in errs[0],
              "%s: default data missing outside the source tree: one line (exit %d): %s" % (tag, r.returncode, r.stderr.strip()))

        # a data step that fails (a mirror without the files): the trainer's last line says so
        r = run([binary] + TINY, tree, clean_env(LEANSTEP_DATA_MIRROR=os.path.join(tmp, "no_mirror")))
        errs = error_lines(r.stderr)
        last = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""
        check(r.returncode == 1 and "`make data` failed" in last and any("no_mirror" in e for e in errs),
              "%s: a failing data step ends with one line naming it (exit %d): %s" % (tag, r.returncode, r.stderr.strip()[-600:]))

        # default paths, no data/: the trainer makes it, then trains and prints a decoded sample
        r = run([binary] + TINY, tree, env)
        made = [ln for ln in r.stdout.splitlines() if ln.startswith("data: ") and "make data" in ln]
        check(r.returncode == 0, "%s: first run with the default data missing exits 0: %s" % (tag, r.stderr.strip()[-600:]))
        check(len(made) == 1 and SHARDS[0] in made[0] and mirror in made[0],
              "%s: one line says the data is being made, and from where: %s" % (tag, made))
        check(len(step_losses(r.stdout)) == 2, "%s: two step lines after making the data" % tag)
        check("generating:" in r.stdout and "samples print token ids" not in r.stdout, "%s: a decoded sample" % tag)
        for s in SHARDS:
            p = os.path.join(tree, "data", s)
            ref = os.path.join(ROOT, "data", s)
            check(os.path.exists(p) and (not os.path.exists(ref) or same_file(p, ref)),
                  "%s: data/%s made, equal to the repository's" % (tag, s))
        r = run([binary] + TINY, tree, env)
        check(r.returncode == 0 and "make data" not in r.stdout, "%s: second run makes nothing: %s" % (tag, r.stderr.strip()[-300:]))


def check_no_gpu(binary):
    env = clean_env(LEANSTEP_HARNESS_DEVICES="0")
    with tempfile.TemporaryDirectory() as tmp:
        r = run([binary] + TINY, tmp, env)
        lines = r.stderr.strip().splitlines()
        check(r.returncode == 1 and len(lines) == 1 and lines[0].startswith("leanstep: error: no CUDA GPU found")
              and "`make train`" in lines[0], "no GPU: one line naming `make train`, exit 1 (exit %d): %s" % (r.returncode, r.stderr.strip()))
        check(r.stdout == "", "no GPU: nothing on stdout before the error: %r" % r.stdout[:200])
        check(not os.path.exists(os.path.join(tmp, "data")), "no GPU: no data made before the error")
        r = run([binary, "--memory-report", "1", "-e", "d12", "-b", "4", "-t", "64"], tmp, env)
        check(r.returncode == 0 and "GPU memory" in r.stdout, "no GPU: --memory-report still works: %s" % r.stderr.strip())


def check_nccl_detection():
    """make -n prints the nvcc line: -lnccl and -DUSE_NCCL only with both nccl.h and libnccl.so."""
    def dry(*vars):
        return run(["make", "-n", "-B", "--no-print-directory", "train_gpt2cu", "V=1"] + list(vars), ROOT, clean_env()).stdout
    out = dry("NCCL_LIBDIR=")
    has_inc = "nccl.h but no libnccl.so" in out
    check(("-lnccl" not in out and "-DUSE_NCCL" not in out), "nccl.h without libnccl.so: no -lnccl, no -DUSE_NCCL: %s" % out.strip()[-400:])
    check(has_inc or "nccl.h not found" in out, "the build line says why there is no NCCL: %s" % out.strip()[:300])
    out = dry("NCCL_INC=", "NCCL_LIBDIR=/usr/lib")
    check("-lnccl" not in out and "nccl.h not found" in out, "no nccl.h: no -lnccl: %s" % out.strip()[:300])
    out = dry("NCCL_INC=/usr/include/nccl.h", "NCCL_LIBDIR=/opt/nccl/lib/")
    check("-lnccl" in out and "-L/opt/nccl/lib/" in out and "-DUSE_NCCL" in out and "NCCL: several GPUs" in out,
          "nccl.h and libnccl.so: the multi-GPU build: %s" % out.strip()[:400])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", help="the CPU trainer (build/train_gpt2)")
    ap.add_argument("--gpu-bin", help="a harness build of the GPU trainer")
    ap.add_argument("--mirror", default=os.path.join(ROOT, "data"), help="the data mirror (default: data/)")
    a = ap.parse_args()
    mirror = os.path.abspath(a.mirror)
    if not os.path.exists(os.path.join(mirror, "tinyshakespeare", "input.txt")):
        print("FAIL: %s is no data mirror (run `make data` first)" % mirror)
        return 1
    check_nccl_detection()
    if a.bin:
        check_trainer(os.path.abspath(a.bin), mirror, os.path.basename(a.bin))
    if a.gpu_bin:
        check_no_gpu(os.path.abspath(a.gpu_bin))
        check_trainer(os.path.abspath(a.gpu_bin), mirror, os.path.basename(a.gpu_bin))
    if failures:
        print("test_first_run: %d check(s) failed" % len(failures))
        return 1
    print("test_first_run: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

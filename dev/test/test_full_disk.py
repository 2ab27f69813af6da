"""
test_full_disk.py: a checkpoint write that fails (full disk) leaves no temp file behind.

The CPU trainer runs under RLIMIT_FSIZE (with SIGXFSZ ignored, a write past the limit fails with
EFBIG, as on a full disk): its first checkpoint cannot be written. Expected: exit 1, one error line
naming the file, and neither model_*.bin nor its model_*.bin.tmp.<pid> in the output directory
(llmc/utils.h: ls_fatal removes the temp files of atomic writes in progress). prepare_corpus's
shards are checked the same way by corpus_check.py.

usage: python3 dev/test/test_full_disk.py --bin build/train_gpt2
"""
import argparse
import glob
import os
import resource
import signal
import subprocess
import sys
import tempfile


def small_disk():
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    a = ap.parse_args()
    fails = []
    with tempfile.TemporaryDirectory() as out:
        # L2C64H2: 3.4M parameters, a 13 MB model file, far past the 1 MiB limit; the log files stay small
        cmd = [a.bin, "-e", "L2C64H2", "-b", "2", "-t", "32", "-x", "2", "-v", "0", "-s", "0", "-n", "1", "-o", out]
        env = dict(os.environ, OMP_NUM_THREADS="1")
        r = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=small_disk, env=env, timeout=300)
        errs = [ln for ln in r.stderr.splitlines() if ln.startswith("leanstep: error:")]
        left = sorted(os.path.basename(p) for p in glob.glob(os.path.join(out, "model_*")))
        if r.returncode != 1 or len(errs) != 1 or "model_00000001.bin" not in errs[0]:
            fails.append(f"expected exit 1 and one error naming model_00000001.bin; got {r.returncode}: {r.stderr[-400:]!r}")
        if left:
            fails.append(f"left behind in the output directory: {left}")
        print(f"  checkpoint on a full disk: {errs[0] if errs else '(no error line)'}; left behind: {left or 'nothing'}")
    for f in fails:
        print("FAIL:", f)
    print("test_full_disk:", "PASS" if not fails else f"FAIL ({len(fails)})")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())

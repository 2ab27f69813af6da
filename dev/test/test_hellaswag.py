#!/usr/bin/env python3
"""test_hellaswag.py: HellaSwag evaluation (--hellaswag) in both trainers against tiktoken and the
PyTorch reference.

  test_hellaswag.py --bin build/train_gpt2 [--mpi-bin build/train_gpt2_mpi] [--gpu-bin build/train_gpt2cu_emu_fp32] \
      --model M.bin --tokenizer data/gpt2_tokenizer.bin --data-dir data [--torch-python /usr/bin/python3]

The official validation file is not needed: a file in its format (one JSON object per line with
"ctx", "endings", "label", and the fields the evaluation ignores) is made from TinyShakespeare's
words, with contexts long enough to be cut to -t, an ending too long for -t (left out), unicode
and quotes. tiktoken (rebuilt from the local encoder.json + vocab.bpe) tokenizes it as the
published evaluation does (" " + ending), the same truncation rule is applied, and the PyTorch
reference (gpt2_ref.py hellaswag, float64) scores it. Each trainer (`-x 0 -s 0 --hellaswag 1`) must
report the same examples, cuts and left-outs, and the same number of right answers by sum (acc) and
by mean (acc_norm); so must the CPU trainer with another -b (an example's rows split across
batches) and, with --mpi-bin, over 2 processes. A short training run evaluates at every -v step
and at the end and logs it (main.log "hella", log.jsonl). Bad files and flags stop with one line
naming the file (and line) or the flag. Exit 1 on any failure.
"""
import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from testlib import check, failures, write_shard  # noqa: E402
from tokenizer_check import build_encoding  # noqa: E402

T = 32
N = 40
REF = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference", "gpt2_ref.py")
MPI_ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1")
RESULT = re.compile(r"^hellaswag: acc [\d.]+ \((\d+)/(\d+)\), acc_norm [\d.]+ \((\d+)/(\d+)\)", re.M)
LOADED = re.compile(r"^hellaswag: (\d+) examples from .* \((\d+) with the context's start cut to fit -t \d+, (\d+) left out\)", re.M)


def make_examples(words, rng):
    """N examples in the official format; a few with long contexts, one with a long ending."""
    out = []
    for k in range(N):
        ctx_words = rng.randint(40, 60) if k % 7 == 3 else rng.randint(3, 18)
        start = rng.randrange(len(words) - 100)
        ctx = " ".join(words[start:start + ctx_words])
        if k == 5:
            ctx += " “naïve café” — 東京,"
        endings = []
        for i in range(4):
            n = 60 if (k == 11 and i == 2) else rng.randint(1, 9)
            s = rng.randrange(len(words) - 100)
            endings.append(" ".join(words[s:s + n]))
        out.append({"ind": k, "activity_label": "Shakespeare", "ctx_a": ctx, "ctx_b": "", "ctx": ctx, "split": "val",
                    "split_type": "indomain", "endings": endings, "label": rng.randrange(4), "source_id": "test-%d" % k})
    return out


def tokenize(enc, examples):
    """The published rendering and the trainers' rule for -t: (kept examples, cut, left out)."""
    kept, cut, out = [], 0, 0
    for ex in examples:
        ctx = enc.encode_ordinary(ex["ctx"])
        ends = [enc.encode_ordinary(" " + e) for e in ex["endings"]]
        most = max(len(e) for e in ends)
        if not ctx or most + 1 > T:
            out += 1
            continue
        if len(ctx) + most > T:
            ctx = ctx[len(ctx) - (T - most):]
            cut += 1
        kept.append({"ctx": ctx, "endings": ends, "label": ex["label"]})
    return kept, cut, out


def run(cmd, cwd, env=None):
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=900, env=env)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--mpi-bin")
    ap.add_argument("--gpu-bin")
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--data-dir", required=True, help="gpt2/encoder.json, gpt2/vocab.bpe, tinyshakespeare/input.txt")
    ap.add_argument("--torch-python", default="/usr/bin/python3")
    a = ap.parse_args()
    enc = build_encoding(os.path.abspath(a.data_dir))
    model, tok = os.path.abspath(a.model), os.path.abspath(a.tokenizer)
    with open(os.path.join(a.data_dir, "tinyshakespeare", "input.txt"), encoding="utf-8") as f:
        words = f.read().split()
    tmp = tempfile.mkdtemp(prefix="leanstep_hellaswag_")
    try:
        examples = make_examples(words, random.Random(11))
        path = os.path.join(tmp, "hellaswag_val.jsonl")
        with open(path, "w", encoding="utf-8") as f:
            for ex in examples:
                f.write(json.dumps(ex, ensure_ascii=False) + "\n")
        kept, cut, out = tokenize(enc, examples)
        check(cut >= 3 and out == 1, "the file exercises the cut to -t (%d) and a left-out example (%d)" % (cut, out))
        tj = os.path.join(tmp, "tokens.json")
        with open(tj, "w") as f:
            json.dump(kept, f)
        r = run([a.torch_python, REF, "hellaswag", "--model", model, "--examples", tj], tmp)
        check(r.returncode == 0, "reference: %s" % r.stderr.strip()[-300:])
        ref = json.loads(r.stdout) if r.returncode == 0 else {"acc": -1, "acc_norm": -1, "n": -1}
        want = (ref["acc"], ref["n"], ref["acc_norm"], ref["n"])
        print("reference (PyTorch float64): %d examples, %d cut to -t %d, %d left out; right: %d by sum, %d by mean"
              % (ref["n"], cut, T, out, ref["acc"], ref["acc_norm"]))
        base = ["-e", model, "-x", "0", "-v", "0", "-s", "0", "-t", str(T), "--tokenizer", tok, "--hellaswag", "1",
                "--hellaswag-file", path]
        runs = [("cpu -b 4", [os.path.abspath(a.bin)] + base + ["-b", "4"], None),
                ("cpu -b 3", [os.path.abspath(a.bin)] + base + ["-b", "3"], None)]
        if a.gpu_bin:
            runs.append(("gpu -b 4", [os.path.abspath(a.gpu_bin)] + base + ["-b", "4"], None))
        if a.mpi_bin and shutil.which("mpirun"):
            runs.append(("cpu -np 2", ["mpirun", "-np", "2", os.path.abspath(a.mpi_bin)] + base + ["-b", "4"], MPI_ENV))
        for name, cmd, env in runs:
            r = run(cmd, tmp, env)
            m, ld = RESULT.search(r.stdout), LOADED.search(r.stdout)
            got = tuple(int(x) for x in m.groups()) if m else None
            check(r.returncode == 0 and got == want, "%s: right answers (sum, mean) as PyTorch's: %s vs %s (%s)"
                  % (name, got, want, r.stderr.strip()[-300:]))
            check(ld is not None and (int(ld.group(1)), int(ld.group(2)), int(ld.group(3))) == (len(kept), cut, out),
                  "%s: %d examples, %d cut, %d left out, as the tokenization rule says: %s" % (name, len(kept), cut, out,
                                                                                            ld.group(0) if ld else None))
            print("%s: %s" % (name, m.group(0) if m else "no result"))
        # during training: with every val loss and at the end, logged
        train = os.path.join(tmp, "train.bin")
        write_shard(train, [random.Random(3).randrange(50257) for _ in range(4000)])
        d = os.path.join(tmp, "run")
        r = run([os.path.abspath(a.bin), "-e", model, "-i", train, "-j", train, "-x", "2", "-v", "1", "-m", "1", "-s", "0",
                 "-t", str(T), "-b", "4", "--tokenizer", tok, "--hellaswag", "1", "--hellaswag-file", path,
                 "--hellaswag-max", "8", "-o", d], tmp)
        check(r.returncode == 0 and len(RESULT.findall(r.stdout)) == 3, "training -x 2 -v 1: HellaSwag at steps 0, 1, 2 (%s)"
              % r.stderr.strip()[-300:])
        logged = []
        if os.path.exists(os.path.join(d, "log.jsonl")):
            with open(os.path.join(d, "log.jsonl")) as f:
                logged = [json.loads(x) for x in f if "hellaswag_acc_norm" in x]
        check(len(logged) == 3 and all(x["hellaswag_n"] == 8 for x in logged), "log.jsonl has the 3 evaluations of 8 examples: %s" % logged)
        main_log = open(os.path.join(d, "main.log")).read() if os.path.exists(os.path.join(d, "main.log")) else ""
        check(len(re.findall(r"^s:\d+ hella:[\d.]+$", main_log, re.M)) == 3, "main.log has llm.c's hella lines")
        # bad input
        bad = {"notjson": "{not json\n", "label": json.dumps(dict(examples[0], label=7)) + "\n",
               "endings": json.dumps(dict(examples[0], endings=["a", "b", "c"])) + "\n",
               "ctx": json.dumps(dict(examples[0], ctx=5)) + "\n", "empty": "\n\n"}
        for name, text in bad.items():
            p = os.path.join(tmp, "bad_%s.jsonl" % name)
            with open(p, "w") as f:
                f.write(json.dumps(examples[1]) + "\n" + text)
            r = run([os.path.abspath(a.bin)] + base[:-1] + [p], tmp)
            lines = [x for x in r.stderr.strip().splitlines() if x.strip()]
            where = p if name == "empty" else "%s line 2" % p
            if name == "empty":
                with open(p, "w") as f:
                    f.write("\n\n")
                r = run([os.path.abspath(a.bin)] + base[:-1] + [p], tmp)
                lines = [x for x in r.stderr.strip().splitlines() if x.strip()]
            check(r.returncode == 1 and len(lines) == 1 and where in lines[0],
                  "bad file (%s): exit 1 with one line naming %s: %s" % (name, where, r.stderr.strip()))
        r = run([os.path.abspath(a.bin)] + base[:-1] + [os.path.join(tmp, "missing.jsonl")], tmp)
        check(r.returncode == 1 and "--hellaswag-file" in r.stderr and "make hellaswag" in r.stderr,
              "a missing file names --hellaswag-file and `make hellaswag`: %s" % r.stderr.strip())
        r = run([os.path.abspath(a.bin)] + base + ["--hellaswag-max", "-5"], tmp)
        check(r.returncode == 2 and "--hellaswag-max" in r.stderr, "--hellaswag-max -5 is refused naming the flag")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("test_hellaswag: %s" % ("%d failed" % len(failures) if failures else "all checks passed"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""test_cudnn_graphs.py: the GPU trainer's forwards outside training (sampling, HellaSwag) build a
bounded number of cuDNN attention graphs, and give the same results as at their own shapes.

  test_cudnn_graphs.py --bin build/train_gpt2cu_emu_bf16 --cpu-bin build/train_gpt2 --model M.bin \
      --tokenizer data/gpt2_tokenizer.bin --data-dir data

With --attention cudnn (the bf16 default) every new (B, T) builds cuDNN graphs, hundreds of ms
each; sampling runs a forward at every length and HellaSwag one per batch (its rows, its longest
row). The trainer runs them at T a power of two from 64 (at most -t) and B 1 or -b
(gpt2_eval_shape), so a run builds at most |{1, -b}| x |{64, 128, ..., -t}| forward graphs. The
harness's stand-in of the library counts a graph per distinct direction and shape, as cuDNN's
cache does, and the trainer ends with "cuDNN attention: N graphs built".

Every run is repeated at the callers' own shapes (LEANSTEP_EVAL_SHAPES=exact: one graph per
shape): the samples (greedy and temperature 1, the ref model at -t 64 and a fresh T 128 model
whose sample crosses 64 and 128) and HellaSwag's right answers by sum and by mean (-b 7: a short
last batch) must be the same, padded and exact (the padding is beyond the real positions, which
causal attention keeps from it: under the harness their values are bitwise those of the exact
shapes), and the counts must be: padded within the bound, exact one per length or batch shape.
Independently of the padding, the greedy sample and HellaSwag's answers are the CPU trainer's
(fp32). Prints the graph counts of both. Exit 1 on any failure.
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
from testlib import check, failures  # noqa: E402
from test_hellaswag import RESULT, make_examples  # noqa: E402
from tokenizer_check import build_encoding  # noqa: E402

GRAPHS = re.compile(r"^cuDNN attention: (\d+) graphs? built$", re.M)
PROMPTS = ["ROMEO: what light through yonder", "naïve café, “quoted” — 東京"]
SAMPLE_BUDGET_S = 600


def sample_text(out):
    m = re.search(r"^generating:\n---\n(.*)\n---$", out, re.M | re.S)
    return m.group(1) if m else None


def run(cmd, cwd, exact=False):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("LEANSTEP_EVAL_SHAPES", None)
    if exact:
        env["LEANSTEP_EVAL_SHAPES"] = "exact"
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=SAMPLE_BUDGET_S, env=env)


def graphs(r):
    m = GRAPHS.search(r.stdout)
    return int(m.group(1)) if m else None


def pow2_lengths(t_max):
    """The lengths gpt2_eval_shape pads to: powers of two from 64 below -t, and -t."""
    out, t = [], 64
    while t < t_max:
        out.append(t)
        t *= 2
    return out + [t_max]


def eval_shape(b, t, model_b, model_t):
    """gpt2_eval_shape's rule (train_gpt2.cu) with cuDNN attention."""
    tp = next(x for x in pow2_lengths(model_t) if x >= t)
    return (model_b if 1 < b < model_b else b), tp


def hellaswag_batches(enc, examples, t_max, b):
    """(rows, longest row - 1) of each batch run_hellaswag makes of the rows (one process), with the
    trainers' rule for -t: examples whose ending does not fit are left out, long contexts cut."""
    lens = []
    for ex in examples:
        ctx = enc.encode_ordinary(ex["ctx"])
        ends = [enc.encode_ordinary(" " + x) for x in ex["endings"]]
        most = max(len(x) for x in ends)
        if not ctx or most + 1 > t_max:
            continue
        n = min(len(ctx), t_max - most)
        lens += [n + len(x) - 1 for x in ends]
    return [(len(lens[i:i + b]), max([1] + lens[i:i + b])) for i in range(0, len(lens), b)]


def padded_and_exact(name, cmd, cwd, shapes, model_b, model_t):
    """Runs cmd padded and at exact shapes (the forwards' (B, T) in `shapes`); checks both exit 0 and
    their graph counts: one per distinct shape, the padded ones within the bound. Returns both runs."""
    p, e = run(cmd, cwd), run(cmd, cwd, exact=True)
    check(p.returncode == 0 and e.returncode == 0, "%s: both runs exit 0 (%s | %s)"
          % (name, p.stderr.strip()[-300:], e.stderr.strip()[-300:]))
    bound = len({1, model_b}) * len(pow2_lengths(model_t))
    want_p, want_e = len({eval_shape(b, t, model_b, model_t) for b, t in shapes}), len(set(shapes))
    gp, ge = graphs(p), graphs(e)
    check(gp == want_p and gp <= bound, "%s: %s graphs padded, %d expected (bound %d)" % (name, gp, want_p, bound))
    check(ge == want_e, "%s: %s graphs at exact shapes, one per shape: %d" % (name, ge, want_e))
    print("%s: cuDNN attention graphs: %s padded (bound %d), %s at exact shapes" % (name, gp, bound, ge))
    return p, e


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, help="the bf16 harness GPU trainer (cuDNN attention by default)")
    ap.add_argument("--cpu-bin", required=True)
    ap.add_argument("--model", required=True, help="a model file of T 64 (build/ref/L2C64H4T64_model.bin)")
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--data-dir", required=True, help="gpt2/encoder.json, gpt2/vocab.bpe, tinyshakespeare/input.txt")
    a = ap.parse_args()
    gpu, cpu = os.path.abspath(a.bin), os.path.abspath(a.cpu_bin)
    model, tok = os.path.abspath(a.model), os.path.abspath(a.tokenizer)
    enc = build_encoding(os.path.abspath(a.data_dir))
    tmp = tempfile.mkdtemp(prefix="leanstep_cudnn_graphs_")
    try:
        # sampling the ref model: -g 32, every forward at (1, 64)
        gen = 32
        for prompt in PROMPTS:
            start = 1 + len(enc.encode_ordinary(prompt))  # <|endoftext|> and the prompt
            base = ["-e", model, "-x", "0", "-v", "0", "-t", "64", "-g", str(gen), "--tokenizer", tok, "--prompt", prompt]
            for mode in (["--top-k", "1"], ["--temperature", "1", "--seed", "7"]):
                name = "sample %r %s" % (prompt[:12], " ".join(mode))
                p, e = padded_and_exact(name, [gpu] + base + mode, tmp, [(1, t) for t in range(start, gen)], 1, 64)
                got, want = sample_text(p.stdout), sample_text(e.stdout)
                check(got is not None and got == want, "%s: the same text padded and exact: %r vs %r" % (name, got, want))
                if mode[0] == "--top-k":
                    c = run([cpu] + base + mode, tmp)
                    check(c.returncode == 0 and sample_text(c.stdout) == got, "%s: the CPU trainer's greedy text: %r vs %r"
                          % (name, sample_text(c.stdout), got))

        # a fresh model of T 128 sampled to 80 tokens: lengths padded to 64, then 128
        gen, prompt = 80, "hello"
        start = 1 + len(enc.encode_ordinary(prompt))
        cmd = [gpu, "-e", "L2C64H4T128", "-x", "0", "-v", "0", "-t", "128", "-g", str(gen), "--tokenizer", tok,
               "--prompt", prompt, "--temperature", "1", "--seed", "5"]
        p, e = padded_and_exact("sample T 128 -g 80", cmd, tmp, [(1, t) for t in range(start, gen)], 1, 128)
        got, want = sample_text(p.stdout), sample_text(e.stdout)
        check(got is not None and got == want, "sample T 128: the same text padded and exact: %r vs %r" % (got, want))

        # HellaSwag: 156 rows (39 examples kept at -t 64) in batches of 7, the last of 2, up to 64 tokens
        with open(os.path.join(a.data_dir, "tinyshakespeare", "input.txt"), encoding="utf-8") as f:
            words = f.read().split()
        examples = make_examples(words, random.Random(11))
        path = os.path.join(tmp, "hellaswag_val.jsonl")
        with open(path, "w", encoding="utf-8") as f:
            for ex in examples:
                f.write(json.dumps(ex, ensure_ascii=False) + "\n")
        batches = hellaswag_batches(enc, examples, 64, 7)
        check(batches[-1][0] < 7, "hellaswag: the last batch is short (%d rows)" % batches[-1][0])
        base = ["-e", model, "-x", "0", "-v", "0", "-s", "0", "-t", "64", "-b", "7", "--tokenizer", tok,
                "--hellaswag", "1", "--hellaswag-file", path]
        p, e = padded_and_exact("hellaswag -b 7", [gpu] + base, tmp, batches, 7, 64)
        c = run([cpu] + base, tmp)
        res = [RESULT.search(r.stdout) for r in (p, e, c)]
        got = [tuple(int(x) for x in m.groups()) if m else None for m in res]
        check(c.returncode == 0 and None not in got, "hellaswag: every run gives a result (%s)" % c.stderr.strip()[-300:])
        check(got[0] == got[1], "hellaswag: right answers (sum, mean) padded and exact: %s vs %s" % (got[0], got[1]))
        check(got[0] == got[2], "hellaswag: right answers (sum, mean) as the CPU trainer's: %s vs %s" % (got[0], got[2]))
        print("hellaswag -b 7: right answers (sum, n, mean, n) %s padded, %s exact, %s CPU trainer" % tuple(got))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("test_cudnn_graphs: %s" % ("%d failed" % len(failures) if failures else "all checks passed"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

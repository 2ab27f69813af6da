#!/usr/bin/env python3
"""test_sample.py: sampling a model without training (-x 0) with a prompt, in both trainers, against
tiktoken and the PyTorch reference.

  test_sample.py --bin build/train_gpt2 [--gpu-bin build/train_gpt2cu_emu_fp32] --model M.bin \
      --tokenizer data/gpt2_tokenizer.bin --data-dir data [--torch-python /usr/bin/python3]

For each prompt: tiktoken (rebuilt from the local encoder.json + vocab.bpe) encodes it, the PyTorch
reference (dev/reference/gpt2_ref.py generate, float64) continues <|endoftext|> + those ids greedily
to -g tokens, and each trainer run as a user would sample a checkpoint (`-e M.bin -x 0 -v 0
--prompt P --top-k 1`, and `--temperature 0`) must print exactly that text: the prompt encoded by
the C tokenizer as tiktoken does, the model's greedy choices as PyTorch's (the reference reports
the smallest gap between the two likeliest logits; the trainers' fp32 rounding is far below it).
The runs start in an empty directory: -x 0 needs no train data and must not start `make data`.
Also: a sampled (temperature 0.8, top-k 40) continuation is the same for the same --seed and starts
with the prompt; bad --prompt, --temperature and --top-k values exit non-zero with one line naming
the flag. Exit 1 on any failure.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from testlib import check, failures  # noqa: E402
from tokenizer_check import build_encoding  # noqa: E402

PROMPTS = ["ROMEO: what light through yonder", "naïve café, “quoted” — 東京"]
GEN = 24  # -g: tokens per sample, <|endoftext|> and the prompt included
REF = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference", "gpt2_ref.py")


def printable(text):
    """The trainers' printing of decoded bytes (llmc/io/tokenizer.h): invalid UTF-8 and control
    characters other than newline and tab become U+FFFD."""
    return "".join("\ufffd" if (ord(c) < 32 and c not in "\n\t") or 0x7f <= ord(c) <= 0x9f else c for c in text)


def sample_text(out):
    m = re.search(r"^generating:\n---\n(.*)\n---$", out, re.M | re.S)
    return m.group(1) if m else None


def run(binary, cwd, args):
    return subprocess.run([binary] + args, cwd=cwd, capture_output=True, text=True, timeout=600)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--gpu-bin")
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--data-dir", required=True, help="the directory of gpt2/encoder.json and gpt2/vocab.bpe")
    ap.add_argument("--torch-python", default="/usr/bin/python3")
    a = ap.parse_args()
    enc = build_encoding(os.path.abspath(a.data_dir))
    model, tok = os.path.abspath(a.model), os.path.abspath(a.tokenizer)
    bins = [("cpu", os.path.abspath(a.bin))] + ([("gpu", os.path.abspath(a.gpu_bin))] if a.gpu_bin else [])
    tmp = tempfile.mkdtemp(prefix="leanstep_sample_")
    try:
        base = ["-e", model, "-x", "0", "-v", "0", "-t", "32", "-g", str(GEN), "--tokenizer", tok]
        for prompt in PROMPTS:
            ids = enc.encode_ordinary(prompt)
            r = subprocess.run([a.torch_python, REF, "generate", "--model", model, "--prompt", ",".join(map(str, ids)),
                                "--length", str(GEN)], capture_output=True, text=True, timeout=600)
            check(r.returncode == 0, "reference generate: %s" % r.stderr.strip()[-300:])
            if r.returncode != 0:
                continue
            ref = json.loads(r.stdout)
            want = printable(enc.decode_bytes(ref["tokens"]).decode("utf-8", "replace"))
            for name, b in bins:
                for extra in (["--top-k", "1"], ["--temperature", "0"]):
                    out = run(b, tmp, base + ["--prompt", prompt] + extra)
                    got = sample_text(out.stdout)
                    check(out.returncode == 0 and got == want, "%s %s %r: the greedy sample is PyTorch's: %r vs %r (%s)"
                          % (name, " ".join(extra), prompt, got, want, out.stderr.strip()[-300:]))
                    check("prompt: %d tokens" % len(ids) in out.stdout, "%s: the prompt is %d tokens, as tiktoken's" % (name, len(ids)))
            print("prompt %r: %d tokens; greedy continuation of %d tokens matches PyTorch in %s (smallest top-2 logit gap %.3g)"
                  % (prompt, len(ids), GEN - 1 - len(ids), " and ".join(n for n, _ in bins), ref["margin"]))
        check(not os.path.exists(os.path.join(tmp, "data")), "-x 0 made no data/ (no train data needed)")
        # sampling: reproducible per seed, the prompt first
        for name, b in bins:
            s = ["--prompt", PROMPTS[0], "--temperature", "0.8", "--top-k", "40"]
            x, y = run(b, tmp, base + s + ["--seed", "5"]), run(b, tmp, base + s + ["--seed", "5"])
            tx, ty = sample_text(x.stdout), sample_text(y.stdout)
            check(x.returncode == 0 and tx is not None and tx == ty and tx.startswith(PROMPTS[0]),
                  "%s: a sample is the same for the same --seed and starts with the prompt: %r vs %r" % (name, tx, ty))
        # bad input: one line naming the flag, exit != 0
        long_prompt = " ".join(["word"] * 40)
        for args, flag in ((["--prompt", ""], "--prompt"), (["--prompt", long_prompt], "--prompt"),
                           (["--temperature", "-1"], "--temperature"), (["--top-k", "-2"], "--top-k"),
                           (["--temperature", "nan"], "--temperature"),
                           (["--prompt", "hi", "--tokenizer", os.path.join(tmp, "missing.bin")], "--tokenizer")):
            r = run(bins[0][1], tmp, base + args)
            lines = [x for x in r.stderr.strip().splitlines() if x.strip()]
            check(r.returncode != 0 and len(lines) == 1 and flag in lines[0],
                  "bad %s: exit != 0 with one line naming %s (exit %d): %s" % (args, flag, r.returncode, r.stderr.strip()))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("test_sample: %s" % ("%d failed" % len(failures) if failures else "all checks passed"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

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
the flag.

The sampling distribution (check_distribution): the CPU trainer samples SAMPLE_SEEDS x 63 tokens at
--temperature 2 --top-k 40 from a copy of the model whose logits are 20x larger (the final layernorm's
gain and bias scaled: the test model's logits spread only ~0.3 over its top 40, where any temperature
gives a near-uniform choice), printed as ids through a tokenizer file that decodes token i as "<i>".
The reference gives the float64 logits at every position of those samples (gpt2_ref.py logits), and
each draw must be among the 40 largest, and its randomized probability integral transform under
softmax(logits / 2) over them (the tokens in decreasing probability; u = P(before it) + w P(it), w
uniform from a fixed Python seed) uniform: the chi-square statistic of u over 8 equal bins is checked
against its 7-degrees-of-freedom tail at 1e-6, the false-failure probability of a correct sampler
(each draw's distribution is exact up to the trainer's fp32 logits, ~1e-6 relative). A temperature
applied as a product (logits * 2: peaked instead of flattened) gives a statistic in the hundreds. The
sampler (llmc/run/run.h) is shared by both trainers; the GPU trainer's logits are checked above.
Exit 1 on any failure.
"""
import argparse
import json
import math
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time

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


SAMPLE_SEEDS, SAMPLE_T, SAMPLE_K, LOGIT_SCALE = (1, 2, 3), 2.0, 40, 20.0
# draws whose 40th and 41st largest reference logits are closer than this are left out of the check:
# the trainer's fp32 logits may order them the other way (6 of the 189 draws here)
TOPK_GAP = 1e-3
CHI2_ALPHA = 1e-6


def scaled_model(src, dst, factor):
    """A copy of an fp32 model file (version 3) with every logit times factor: the final layernorm's
    gain and bias, the file's last 2C floats, multiplied by it."""
    with open(src, "rb") as f:
        data = bytearray(f.read())
    header = struct.unpack_from("<256i", data)
    check(header[1] == 3, "the test model is an fp32 model file (version %d)" % header[1])
    C = header[6]
    at = len(data) - 8 * C
    vals = struct.unpack_from("<%df" % (2 * C), data, at)
    struct.pack_into("<%df" % (2 * C), data, at, *(v * factor for v in vals))
    with open(dst, "wb") as f:
        f.write(data)


def id_tokenizer(path, vocab, eot):
    """A decoder file (llm.c's tokenizer format, version 2) where token i decodes to "<i>"."""
    with open(path, "wb") as f:
        f.write(struct.pack("<256I", *([20240328, 2, vocab, eot] + [0] * 252)))
        for i in range(vocab):
            b = b"<%d>" % i
            f.write(bytes([len(b)]) + b)


def chi2_sf_odd(x, dof):
    """P(chi-square with an odd dof > x), in closed form."""
    z = math.sqrt(x)
    term, total = z * math.sqrt(2.0 / math.pi) * math.exp(-x / 2.0), 0.0
    for r in range(1, (dof - 1) // 2 + 1):
        total += term
        term *= x / (2 * r + 1)
    return math.erfc(z / math.sqrt(2.0)) + total


def check_distribution(binary, model, torch_python, tmp):
    """The sampler's draws against softmax(logits / T) over the top k of the reference's logits."""
    t0 = time.time()
    scaled, tok = os.path.join(tmp, "scaled.bin"), os.path.join(tmp, "ids_tokenizer.bin")
    scaled_model(model, scaled, LOGIT_SCALE)
    id_tokenizer(tok, 50257, 50256)
    seqs = []
    for seed in SAMPLE_SEEDS:
        r = run(binary, tmp, ["-e", scaled, "-x", "0", "-v", "0", "-t", "64", "-g", "64", "--tokenizer", tok,
                              "--temperature", str(SAMPLE_T), "--top-k", str(SAMPLE_K), "--seed", str(seed)])
        text = sample_text(r.stdout)
        ids = [int(x) for x in re.findall(r"<(\d+)>", text or "")]
        check(r.returncode == 0 and len(ids) == 63, "--seed %d: a sample of 63 token ids (%d: %s)" % (seed, len(ids), r.stderr.strip()[-300:]))
        if len(ids) == 63:
            seqs.append([50256] + ids)
    if not seqs:
        return
    path = os.path.join(tmp, "samples.json")
    with open(path, "w") as f:
        json.dump([s[:-1] for s in seqs], f)
    r = subprocess.run([torch_python, REF, "logits", "--model", scaled, "--tokens", path, "--top", str(SAMPLE_K + 1)],
                       capture_output=True, text=True, timeout=600)
    check(r.returncode == 0, "reference logits: %s" % r.stderr.strip()[-300:])
    if r.returncode != 0:
        return
    ref = json.loads(r.stdout)
    coin = random.Random(11)
    us, outside, skipped = [], [], 0
    for seq, rows in zip(seqs, ref):
        for t, (ids, logits) in enumerate(rows):
            w, x = coin.random(), seq[t + 1]  # (w drawn for every draw: the same w whatever is skipped)
            if logits[SAMPLE_K - 1] - logits[SAMPLE_K] < TOPK_GAP:
                skipped += 1
                continue
            if x not in ids[:SAMPLE_K]:
                outside.append((t, x))
                continue
            p = [math.exp((l - logits[0]) / SAMPLE_T) for l in logits[:SAMPLE_K]]
            z, i = sum(p), ids.index(x)
            us.append((sum(p[:i]) + w * p[i]) / z)
    check(not outside, "every sampled token is among the %d likeliest: %d are not (position, id): %s"
          % (SAMPLE_K, len(outside), outside[:5]))
    bins = 8
    counts = [0] * bins
    for u in us:
        counts[min(int(u * bins), bins - 1)] += 1
    n = len(us)
    stat = sum((c - n / bins) ** 2 / (n / bins) for c in counts) if n else float("inf")
    pval = chi2_sf_odd(stat, bins - 1)
    check(n >= 150 and pval >= CHI2_ALPHA, "sampling at --temperature %g --top-k %d: the draws follow softmax(logits / %g) over "
          "the top %d: chi-square %.1f over %d bins of %d draws, p = %.2g (fails below %g; counts %s)"
          % (SAMPLE_T, SAMPLE_K, SAMPLE_T, SAMPLE_K, stat, bins, n, pval, CHI2_ALPHA, counts))
    print("sampling distribution (--temperature %g --top-k %d, %d draws, %d left out at a top-k tie): chi-square %.1f, "
          "p = %.2g; bins %s (%.1f s)" % (SAMPLE_T, SAMPLE_K, n, skipped, stat, pval, counts, time.time() - t0))


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
        check_distribution(bins[0][1], model, a.torch_python, tmp)
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

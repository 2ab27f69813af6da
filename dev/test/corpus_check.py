"""
corpus_check.py: checks prepare_corpus (dev/data/prepare_corpus.c) against tiktoken, token for token.

A corpus with Unicode, empty documents, a literal "<|endoftext|>", CRLF text and very long
documents (longer than a shard) is written as .txt, a directory of .txt, .jsonl and .jsonl.gz;
the shards of each must hold, in order, [EOT] + encode_ordinary(doc) for every document
(tiktoken's gpt2 encoding, rebuilt from the local data/gpt2 files). Also: shard sizes and names,
--val-fraction, --field, the output for 1, 2 and 3 threads byte for byte, the rerun (up to date;
changed input; stale shards removed), and the error paths: malformed JSON, a missing field,
invalid UTF-8 (file and line in a one-line error, exit 1; --skip-bad counts them), an unwritable
output directory and a full disk (RLIMIT_FSIZE): exit 1, no shard under a final name, no temp file;
SIGTERM while writing shards: no temp file, every shard whole. A corpus smaller than two shards
(split by documents, or one document's last tenth to val) and the command printed to train on it;
a directory with a dangling link, an unreadable file and files of other names (--all-files).

usage: python3 dev/test/corpus_check.py --bin build/prepare_corpus [--data data]
       python3 dev/test/corpus_check.py --bin build/prepare_corpus --bench MB [--threads N]
         (throughput against tiktoken's encode_ordinary_batch on TinyShakespeare repeated to MB)
Prints one PASS/FAIL line at the end; exits 1 on any failure.
"""
import argparse
import glob
import gzip
import json
import os
import re
import resource
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tokenizer_check import EOT, REPO, build_encoding  # noqa: E402

SHARD_TOKENS = 20000


def make_docs(data_dir):
    shakespeare = open(os.path.join(data_dir, "tinyshakespeare", "input.txt"), encoding="utf-8").read()
    unicode_txt = open(os.path.join(REPO, "dev", "test", "data", "unicode.txt"), encoding="utf-8").read()
    return [
        "Hello world, this is a document with a literal \\u0000 and \\\\u0000 in it.",
        "",
        unicode_txt,
        "Ünïcödé: 你好，世界 😀🚀 — naïve café ﬁ \u00a0nbsp\u3000ideographic",
        "a literal <|endoftext|> stays text\r\nwith CRLF\r\n",
        "",
        shakespeare[:300000],                 # ~70k tokens: longer than a shard
        "x" * 100000 + " " + "ab" * 50000,    # very long pieces
        "   \n\n\t  trailing whitespace   \n",
        shakespeare[300000:420000],
    ]


def read_shards(out, name):
    """[(split, index, tokens)] in shard-number order"""
    found = []
    for p in glob.glob(os.path.join(out, f"{name}_*_*.bin")):
        m = re.fullmatch(re.escape(name) + r"_(val|train)_(\d{6})\.bin", os.path.basename(p))
        if not m:
            continue
        raw = open(p, "rb").read()
        header = struct.unpack("<256i", raw[:1024])
        assert header[0] == 20240520 and header[1] == 1, p
        toks = list(struct.unpack(f"<{header[2]}H", raw[1024:]))
        assert len(raw) == 1024 + 2 * header[2], p
        found.append((int(m.group(2)), m.group(1), toks))
    return [(s, i, t) for i, s, t in sorted(found)]


def run(args, *cli, expect_rc=0, preexec=None):
    cmd = [args.bin, "--encoder", os.path.join(args.data, "gpt2", "encoder.json"),
           "--vocab", os.path.join(args.data, "gpt2", "vocab.bpe"), *cli]
    p = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=preexec)
    if expect_rc is not None and p.returncode != expect_rc:
        raise AssertionError(f"{' '.join(cmd)}: exit {p.returncode}, expected {expect_rc}\n{p.stdout}{p.stderr}")
    return p


def expected_tokens(enc, docs):
    out = []
    for d in docs:
        out += [EOT] + enc.encode_ordinary(d)
    return out


def first_diff(a, b):
    i = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return f"{len(a)} tokens vs {len(b)} expected, first difference at {i}: {a[i:i+5]} vs {b[i:i+5]}"


def write_forms(tmp, docs):
    forms = {}
    p = os.path.join(tmp, "one.txt")
    open(p, "w", encoding="utf-8", newline="").write(docs[6])
    forms["txt"] = ([p], [docs[6]])
    d = os.path.join(tmp, "dir")
    os.makedirs(os.path.join(d, "sub"))
    for i, doc in enumerate(docs):  # names sort as the documents' order; sub/ sorts after doc_*
        path = os.path.join(d, f"doc_{i:02d}.txt") if i < 7 else os.path.join(d, "sub", f"doc_{i:02d}.txt")
        open(path, "w", encoding="utf-8", newline="").write(doc)
    open(os.path.join(d, "README.md"), "w").write("not a corpus file\n")
    forms["dir"] = ([d], docs)
    lines = "".join(json.dumps({"id": i, "text": doc}, ensure_ascii=(i % 2 == 0)) + "\n" for i, doc in enumerate(docs))
    p = os.path.join(tmp, "c.jsonl")
    open(p, "w", encoding="utf-8").write(lines.replace("\n", "\n\n", 1))  # one blank line: skipped
    forms["jsonl"] = ([p], docs)
    p = os.path.join(tmp, "c.jsonl.gz")
    with gzip.open(p, "wt", encoding="utf-8") as f:
        f.write(lines)
    forms["jsonl.gz"] = ([p], docs)
    return forms


def check_forms(args, enc, tmp, docs, fails):
    forms = write_forms(tmp, docs)
    for form, (inputs, form_docs) in forms.items():
        out = os.path.join(tmp, "out_" + form.replace(".", "_"))
        outs = {}
        for threads in (1, 2, 3):
            if os.path.isdir(out):
                shutil.rmtree(out)
            run(args, "-o", out, "-n", "c", "--shard-tokens", str(SHARD_TOKENS), "--threads", str(threads), *inputs)
            outs[threads] = {os.path.basename(p): open(p, "rb").read() for p in glob.glob(os.path.join(out, "c_*.bin"))}
        if not (outs[1] == outs[2] == outs[3]):
            fails.append(f"{form}: the shards differ between 1, 2 and 3 threads")
        shards = read_shards(out, "c")
        got = [t for _, _, ts in shards for t in ts]
        want = expected_tokens(enc, form_docs)
        if got != want:
            fails.append(f"{form}: {first_diff(got, want)}")
        splits = [s for s, _, _ in shards]
        if splits != ["val"] + ["train"] * (len(shards) - 1) or [i for _, i, _ in shards] != list(range(len(shards))):
            fails.append(f"{form}: shards {[(s, i) for s, i, _ in shards]}: expected val_000000 then train_000001...")
        if any(len(ts) != SHARD_TOKENS for _, _, ts in shards[:-1]) or not 0 < len(shards[-1][2]) <= SHARD_TOKENS:
            fails.append(f"{form}: shard sizes {[len(ts) for _, _, ts in shards]}, expected {SHARD_TOKENS} but the last")
        print(f"  {form}: {len(form_docs)} docs, {len(got)} tokens in {len(shards)} shards: "
              f"{'ok' if got == want else 'MISMATCH'}")
    return forms


def check_val_fraction_and_field(args, enc, tmp, docs, fails):
    p = os.path.join(tmp, "field.jsonl")
    with open(p, "w", encoding="utf-8") as f:
        for doc in docs:
            f.write(json.dumps({"content": doc, "text": 7}) + "\n")
    out = os.path.join(tmp, "out_frac")
    run(args, "-o", out, "--field", "content", "--val-fraction", "0.3", "--shard-tokens", str(SHARD_TOKENS), p)
    frac = 0.3
    val_docs = [d for i, d in enumerate(docs) if int((i + 1) * frac) > int(i * frac)]
    train_docs = [d for i, d in enumerate(docs) if not int((i + 1) * frac) > int(i * frac)]
    shards = read_shards(out, "out_frac")
    for split, split_docs in (("val", val_docs), ("train", train_docs)):
        got = [t for s, _, ts in shards if s == split for t in ts]
        want = expected_tokens(enc, split_docs)
        if got != want:
            fails.append(f"--val-fraction 0.3 --field content: {split}: {first_diff(got, want)}")
    if [i for _, i, _ in shards] != list(range(len(shards))):
        fails.append(f"--val-fraction: shard numbers {[i for _, i, _ in shards]} not 0..n-1")
    print(f"  --val-fraction 0.3 --field content: {len(val_docs)} val docs, {len(train_docs)} train docs")


def check_rerun(args, enc, tmp, forms, fails):
    inputs, _ = forms["jsonl"]
    out = os.path.join(tmp, "out_rerun")
    cli = ["-o", out, "--shard-tokens", str(SHARD_TOKENS), *inputs]
    run(args, *cli)
    mtimes = {p: os.stat(p).st_mtime_ns for p in glob.glob(os.path.join(out, "*.bin"))}
    p = run(args, *cli)
    if "up to date" not in p.stdout:
        fails.append(f"rerun with the same inputs: expected 'up to date', got {p.stdout!r}")
    p = run(args, "-f", *cli)  # everything made again: every shard already on disk, none rewritten
    now = {q: os.stat(q).st_mtime_ns for q in glob.glob(os.path.join(out, "*.bin"))}
    if now != mtimes or f"({len(mtimes)} already on disk)" not in p.stdout:
        fails.append(f"rerun with -f: shards rewritten or not reported as on disk: {p.stdout!r}")
    with open(inputs[0], "a", encoding="utf-8") as f:  # a changed input: made again, with the new document
        f.write(json.dumps({"text": "one more document"}) + "\n")
    p = run(args, *cli)
    got = [t for _, _, ts in read_shards(out, "out_rerun") for t in ts]
    want = [EOT] + enc.encode_ordinary("one more document")
    if "up to date" in p.stdout or got[-len(want):] != want:
        fails.append(f"rerun after the input changed: not made again with the new document: {p.stdout!r}")
    run(args, "-o", out, "--shard-tokens", str(4 * SHARD_TOKENS), *inputs)  # fewer shards: the rest removed
    left = sorted(os.path.basename(q) for q in glob.glob(os.path.join(out, "*.bin")))
    n_expect = len(read_shards(out, "out_rerun"))
    if len(left) != n_expect or any(len(ts) > 4 * SHARD_TOKENS for _, _, ts in read_shards(out, "out_rerun")):
        fails.append(f"rerun with larger shards: stale shards left: {left}")
    print(f"  rerun: up to date, -f rewrites nothing ({len(mtimes)} shards), a changed input is made again, "
          "stale shards removed")


def no_leftovers(out, what, fails):
    tmps = glob.glob(os.path.join(out, "*.tmp.*"))
    bins = glob.glob(os.path.join(out, "*.bin"))
    if tmps or bins:
        fails.append(f"{what}: left behind {sorted(map(os.path.basename, tmps + bins))}")


def check_errors(args, enc, tmp, docs, fails):
    good = json.dumps({"text": "fine"})
    cases = [
        ("bad.jsonl", (good + "\n" + good + "\n{\"text\": \"unterminated\n" + good + "\n").encode(),
         r"bad\.jsonl:3: malformed JSON"),
        ("nofield.jsonl", (good + "\n" + json.dumps({"body": "x"}) + "\n").encode(), r'nofield\.jsonl:2: no string field "text"'),
        ("utf8.jsonl", (good + "\n" + good + "\n").encode() + b'{"text": "ok \xff bad"}\n', r"utf8\.jsonl:3: invalid UTF-8"),
        ("nul.jsonl", (good + "\n" + '{"text": "a\\\\u0000 is text", "x": "\\u0000"}\n').encode(), r"nul\.jsonl:2: \\u0000 in a JSON string"),
        ("utf8.txt", b"line one\nline two \xc3\x28\n", r"utf8\.txt:2: invalid UTF-8 \(byte 0xc3"),
        ("surrogate.txt", b"ok\n\xed\xa0\x80\n", r"surrogate\.txt:2: invalid UTF-8"),
    ]
    for name, data, pattern in cases:
        p = os.path.join(tmp, name)
        open(p, "wb").write(data)
        out = os.path.join(tmp, "out_err")
        shutil.rmtree(out, ignore_errors=True)
        r = run(args, "-o", out, p, expect_rc=None)
        lines = r.stderr.strip().splitlines()
        if r.returncode != 1 or len(lines) != 1 or not re.search(pattern, lines[0]):
            fails.append(f"{name}: expected exit 1 and one line matching {pattern!r}; got {r.returncode}: {r.stderr!r}")
        no_leftovers(out, name, fails)
        print(f"  {name}: {lines[-1] if lines else '(no message)'}")
    # --skip-bad: the bad lines are skipped and counted, the good ones kept
    p = os.path.join(tmp, "mixed.jsonl")
    open(p, "wb").write((good + "\n").encode() + b'{"text": "\xff"}\n{oops\n' + (json.dumps({"text": docs[3]}) + "\n").encode())
    out = os.path.join(tmp, "out_skip")
    r = run(args, "-o", out, "--skip-bad", p)
    got = {s: [t for s2, _, ts in read_shards(out, "out_skip") if s2 == s for t in ts] for s in ("train", "val")}
    if got != {"train": expected_tokens(enc, ["fine"]), "val": expected_tokens(enc, [docs[3]])} or "2 skipped" not in r.stdout:
        fails.append(f"--skip-bad: expected 2 skipped and the 2 good documents (train, val); got {r.stdout!r}")
    # an output directory that cannot be created (a file is in the way; root ignores permissions)
    blocker = os.path.join(tmp, "blocker")
    open(blocker, "w").write("x")
    r = run(args, "-o", os.path.join(blocker, "out"), p, expect_rc=1)
    if len(r.stderr.strip().splitlines()) != 1 or "-o " not in r.stderr or "cannot create directory" not in r.stderr:
        fails.append(f"unwritable -o: expected one line naming -o; got {r.stderr!r}")
    print(f"  unwritable -o: {r.stderr.strip()}")
    # a full disk: the shard write fails (RLIMIT_FSIZE, SIGXFSZ ignored: write() returns EFBIG)

    def small_disk():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (30000, 30000))
    out = os.path.join(tmp, "out_full")
    r = run(args, "-o", out, "--shard-tokens", str(SHARD_TOKENS), forms_path(tmp), expect_rc=1, preexec=small_disk)
    if len(r.stderr.strip().splitlines()) != 1 or ".tmp." not in r.stderr:
        fails.append(f"full disk: expected one line naming the temp file; got {r.stderr!r}")
    no_leftovers(out, "full disk", fails)
    print(f"  full disk: {r.stderr.strip()}")


def split_of(args, out, name):
    """{split: tokens} of a run's shards"""
    got = {"train": [], "val": []}
    for split, _, ts in read_shards(out, name):
        got[split] += ts
    return got


def check_small_corpus(args, enc, tmp, docs, fails):
    """A corpus that does not fill two shards: split by documents (k = max(1, round(n/10)) evenly
    spaced, the last always val), said in one line; one document: its last tenth is val; the
    printed command has -b/-t only where a shard is shorter than B*T+1 = 257 tokens."""
    small = [d for d in docs if d] * 3  # 24 documents: 2 to val (11 and 23)
    p = os.path.join(tmp, "small.jsonl")
    with open(p, "w", encoding="utf-8") as f:
        for d in small:
            f.write(json.dumps({"text": d}) + "\n")
    out = os.path.join(tmp, "out_small")
    r = run(args, "-o", out, p)
    n, k = len(small), max(1, (len(small) + 5) // 10)
    is_val = [(i + 1) * k // n > i * k // n for i in range(n)]
    want = {"val": expected_tokens(enc, [d for d, v in zip(small, is_val) if v]),
            "train": expected_tokens(enc, [d for d, v in zip(small, is_val) if not v])}
    said = [ln for ln in r.stdout.splitlines() if "do not fill two shards" in ln]
    if split_of(args, out, "out_small") != want or len(said) != 1 or f"{k} of {n} to val" not in said[0]:
        fails.append(f"small corpus: expected {k} of {n} documents to val, said in one line: {r.stdout!r}")
    hint = [ln for ln in r.stdout.splitlines() if "train with" in ln]
    if len(hint) != 1 or not hint[0].endswith(f"./train_gpt2 -i '{out}/out_small_train_*.bin' -j '{out}/out_small_val_*.bin'"):
        fails.append(f"small corpus: the command to train with: {hint}")
    one = os.path.join(tmp, "one_doc.txt")
    open(one, "w", encoding="utf-8").write(docs[9])
    out = os.path.join(tmp, "out_one")
    r = run(args, "-o", out, one)
    toks = expected_tokens(enc, [docs[9]])
    n_val = max(1, len(toks) // 10)
    if split_of(args, out, "out_one") != {"train": toks[:-n_val], "val": toks[-n_val:]} or "in one document" not in r.stdout:
        fails.append(f"one document: expected its last {n_val} tokens to val: {r.stdout!r}")
    tiny = os.path.join(tmp, "tiny.jsonl")  # val: one short document (< 257 tokens): -b 1 -t in the command
    with open(tiny, "w", encoding="utf-8") as f:
        f.write(json.dumps({"text": docs[9]}) + "\n" + json.dumps({"text": "a short one"}) + "\n")
    r = run(args, "-o", os.path.join(tmp, "out_tiny"), tiny)
    short = len(expected_tokens(enc, ["a short one"]))
    if not re.search(r"train with \./train_gpt2 -i .* -b 1 -t %d$" % (short - 1), r.stdout, re.M):
        fails.append(f"a val shard of {short} tokens: the command to train with has -b 1 -t {short - 1}: {r.stdout!r}")
    print(f"  small corpus: {k} of {n} documents to val; one document: its last {n_val} tokens; "
          f"a {short}-token shard: -b 1 -t {short - 1}")


def check_directories(args, enc, tmp, fails):
    """In a directory: a dangling link and a file that cannot be opened are skipped and counted;
    files of other names are skipped, or read as text with --all-files. (Opening as root ignores
    permissions: that part runs as nobody when the test runs as root.)"""
    d = os.path.join(tmp, "tree")
    os.makedirs(os.path.join(d, "docs"))
    texts = {"a.txt": "first text", "LICENSE": "a license text without an extension", "docs/b.txt": "second text",
             "secret.txt": "not readable", "notes.md": "markdown"}
    for name, text in texts.items():
        open(os.path.join(d, name), "w", encoding="utf-8").write(text)
    os.symlink(os.path.join(tmp, "nowhere"), os.path.join(d, "dangling.txt"))
    os.chmod(os.path.join(d, "secret.txt"), 0)
    out = os.path.join(tmp, "out_tree")
    os.makedirs(out)
    for p in (tmp, d, os.path.join(d, "docs"), out):
        os.chmod(p, 0o777)
    nobody = None
    if os.geteuid() == 0:
        def nobody():
            os.setgid(65534)
            os.setuid(65534)
    else:
        nobody = None
    r = run(args, "-o", out, "-n", "plain", d, expect_rc=None, preexec=nobody)
    got = sorted(t for ts in split_of(args, out, "plain").values() for t in ts)
    want = sorted(expected_tokens(enc, [texts["a.txt"], texts["docs/b.txt"]]))
    if r.returncode != 0 or got != want or "skipped 2 files that are not" not in r.stdout or \
            "1 dangling links, 1 that cannot be opened" not in r.stdout:
        fails.append(f"a directory with a dangling link, an unreadable file and other names: exit {r.returncode}, "
                     f"{r.stdout!r} {r.stderr!r}")
    r = run(args, "-o", out, "-n", "all", "--all-files", d, expect_rc=None, preexec=nobody)
    got = sorted(t for ts in split_of(args, out, "all").values() for t in ts)
    want = sorted(expected_tokens(enc, [texts[n] for n in ("LICENSE", "a.txt", "docs/b.txt", "notes.md")]))
    if r.returncode != 0 or got != want:
        fails.append(f"--all-files: expected the 4 readable files: exit {r.returncode}, {r.stdout!r} {r.stderr!r}")
    r = run(args, "-o", out, os.path.join(d, "secret.txt"), expect_rc=None, preexec=nobody)
    if r.returncode != 1 or "secret.txt" not in r.stderr:
        fails.append(f"an unreadable file named on the command line: exit 1 naming it; got {r.returncode} {r.stderr!r}")
    for cli, what in ((["--bogus", "x.txt"], "unknown flag --bogus"), ([], "no INPUT given")):
        r = run(args, *cli, expect_rc=None)
        lines = r.stderr.strip().splitlines()
        if r.returncode != 2 or len(lines) != 1 or not lines[0].startswith("leanstep: error:") or what not in lines[0]:
            fails.append(f"{cli}: exit 2 and one line '{what}'; got {r.returncode} {r.stderr!r}")
    print("  directories: a dangling link and an unreadable file skipped and counted; --all-files; usage errors")


def check_signal(args, tmp, fails):
    """SIGTERM while shards are being written: no temp file left, every shard whole. The signal lands
    inside a shard write in about 1 of 3 runs (measured without the handler), else between writes."""
    text = open(os.path.join(args.data, "tinyshakespeare", "input.txt"), encoding="utf-8").read()
    p = os.path.join(tmp, "big.jsonl")
    with open(p, "w", encoding="utf-8") as f:
        for _ in range(4):
            for s in text.split("\n\n"):
                f.write(json.dumps({"text": s}) + "\n")
    out = os.path.join(tmp, "out_sig")
    cmd = [args.bin, "--encoder", os.path.join(args.data, "gpt2", "encoder.json"),
           "--vocab", os.path.join(args.data, "gpt2", "vocab.bpe"), "-o", out, "--shard-tokens", "2000", p]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline and len(glob.glob(os.path.join(out, "*.bin"))) < 20 and proc.poll() is None:
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    rc = proc.wait()
    tmps = glob.glob(os.path.join(out, "*.tmp.*"))
    shards = read_shards(out, "out_sig")  # asserts every header matches its file size
    if rc != -signal.SIGTERM or tmps:
        fails.append(f"SIGTERM: exit {rc} (expected {-signal.SIGTERM}), temp files left: {tmps}")
    print(f"  SIGTERM after {len(shards)} shards: no temp file left, all whole")


def forms_path(tmp):
    return os.path.join(tmp, "c.jsonl")


def bench(args, mb, threads):
    enc = build_encoding(args.data)
    text = open(os.path.join(args.data, "tinyshakespeare", "input.txt"), encoding="utf-8").read()
    sections = text.split("\n\n")
    docs = []
    size = 0
    while size < mb * 1e6:
        for s in sections:
            docs.append(s)
            size += len(s.encode()) + 2
    tmp = tempfile.mkdtemp(prefix="corpus_bench_")
    try:
        p = os.path.join(tmp, "bench.jsonl")
        with open(p, "w", encoding="utf-8") as f:
            for d in docs:
                f.write(json.dumps({"text": d}) + "\n")
        nbytes = sum(len(d.encode()) for d in docs)
        t = time.perf_counter()
        want = enc.encode_ordinary_batch(docs, num_threads=threads)
        t_tik = time.perf_counter() - t
        n_tok = sum(len(x) + 1 for x in want)
        out = os.path.join(tmp, "out")
        t = time.perf_counter()
        run(args, "-o", out, "--threads", str(threads), p)
        t_c = time.perf_counter() - t
        got = [t for _, _, ts in read_shards(out, "out") for t in ts]
        same = got == [t for x in want for t in [EOT] + x]
        print(f"corpus: {len(docs):,} documents, {nbytes / 1e6:.1f} MB of text, {n_tok:,} tokens, {threads} threads")
        print(f"tiktoken encode_ordinary_batch: {t_tik:.2f} s, {nbytes / 1e6 / t_tik:.1f} MB/s (in memory, no I/O)")
        print(f"prepare_corpus (read JSONL, encode, write shards): {t_c:.2f} s, {nbytes / 1e6 / t_c:.1f} MB/s; "
              f"tokens {'identical' if same else 'DIFFER'}")
        return same
    finally:
        shutil.rmtree(tmp)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--data", default=os.path.join(REPO, "data"))
    ap.add_argument("--bench", type=float, default=0.0, help="MB of text for the throughput comparison")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    args = ap.parse_args()
    if args.bench > 0:
        ok = bench(args, args.bench, args.threads)
        print("corpus bench:", "PASS" if ok else "FAIL")
        sys.exit(0 if ok else 1)
    enc = build_encoding(args.data)
    fails = []
    tmp = tempfile.mkdtemp(prefix="corpus_check_")
    try:
        docs = make_docs(args.data)
        forms = check_forms(args, enc, tmp, docs, fails)
        check_val_fraction_and_field(args, enc, tmp, docs, fails)
        check_rerun(args, enc, tmp, forms, fails)
        check_errors(args, enc, tmp, docs, fails)
        check_small_corpus(args, enc, tmp, docs, fails)
        check_directories(args, enc, tmp, fails)
        check_signal(args, tmp, fails)
    except AssertionError as e:
        fails.append(str(e))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for f in fails:
        print("FAIL:", f)
    print("corpus_check:", "PASS" if not fails else f"FAIL ({len(fails)})")
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()

"""
tokenizer_check.py: checks leanstep's C tokenizer and data step against tiktoken, id for id.

tiktoken's "gpt2" encoding is rebuilt from the LOCAL encoder.json + vocab.bpe (nothing is
downloaded); then token ids from the C encoder (`test_tokenizer encode FILE`) must equal
tiktoken's encode_ordinary on: TinyShakespeare, dev/test/data/unicode.txt, a seeded random text,
and a sweep over every assigned code point. The decoder file and the shards written by
prepare_data are checked too (llm.c's section scheme, 338,028 tokens), and prepare_data's error
paths (missing or corrupt mirror files) and its up-to-date check.

usage: python3 dev/test/tokenizer_check.py --bin build/test_tokenizer [--prepare build/prepare_data]
           [--data data]
Prints one PASS/FAIL line at the end; exits 1 on any failure. To add a check: write a function
that returns a list of failure strings and add it to CHECKS.
"""
import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import unicodedata

os.environ["TIKTOKEN_CACHE_DIR"] = ""  # read the local files as they are; no cache writes
import tiktoken  # noqa: E402
import tiktoken.load  # noqa: E402

# GPT-2's pattern as tiktoken 0.x spells it (tiktoken_ext/openai_public.py, r50k_pat_str); copied
# here so that the check does not depend on tiktoken_ext's layout.
GPT2_PAT = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
EOT = 50256
SHA_ENCODER = "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"
SHA_VOCAB = "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def build_encoding(data_dir):
    ranks = tiktoken.load.data_gym_to_mergeable_bpe_ranks(
        vocab_bpe_file=os.path.join(data_dir, "gpt2", "vocab.bpe"),
        encoder_json_file=os.path.join(data_dir, "gpt2", "encoder.json"),
        vocab_bpe_hash=SHA_VOCAB,
        encoder_json_hash=SHA_ENCODER,
    )
    return tiktoken.Encoding("gpt2-local", pat_str=GPT2_PAT, mergeable_ranks=ranks,
                             special_tokens={"<|endoftext|>": EOT}, explicit_n_vocab=50257)


def c_ids(args, *cli):
    out = subprocess.run([args.bin, *cli], capture_output=True, check=True).stdout
    return [int(x) for x in out.split()]


def compare(enc, name, got, want):
    if got == want:
        return []
    i = next((k for k, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
    lo = max(0, i - 3)
    return [f"{name}: C gives {len(got)} tokens, tiktoken {len(want)}; first difference at token {i}: "
            f"C {got[lo:i + 3]} vs tiktoken {want[lo:i + 3]} around {enc.decode(want[lo:i + 3])!r}"]


def check_file(args, enc, name, path):
    text = open(path, "rb").read().decode("utf-8")  # bytes as they are: no newline translation
    return compare(enc, name, c_ids(args, "encode", path, args.data), enc.encode_ordinary(text))


def check_shakespeare(args, enc, tmp):
    return check_file(args, enc, "TinyShakespeare", os.path.join(args.data, "tinyshakespeare", "input.txt"))


def check_unicode_txt(args, enc, tmp):
    path = os.path.join(REPO, "dev", "test", "data", "unicode.txt")
    fails = check_file(args, enc, "unicode.txt", path)
    # the same through a tokenizer loaded from the decoder file alone
    text = open(path, "rb").read().decode("utf-8")
    got = c_ids(args, "encode-bin", os.path.join(args.data, "gpt2_tokenizer.bin"), path)
    return fails + compare(enc, "unicode.txt via gpt2_tokenizer.bin", got, enc.encode_ordinary(text))


def check_random_text(args, enc, tmp):
    rng = random.Random(1234)
    palette = (list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") +
               list("     \t\n\n\r'''\".,;:!?-_()[]{}<>/\\@#$%^&*+=~`|") +
               list("éèêëçñüöäßøåæœÆØÅ") + list("αβγδεЖЗИЙКЛ") + list("日本語中文字한국어") +
               ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "\r\n", "\u00a0", "\u3000", "\u2028",
                "\u0301", "\u200d", "🙂", "👍🏽", "🧑‍💻", "٣", "१", "½", "\ufeff"])
    text = "".join(rng.choice(palette) for _ in range(200_000))
    path = os.path.join(tmp, "random.txt")
    open(path, "w", encoding="utf-8", newline="").write(text)
    return check_file(args, enc, "random text (seed 1234)", path)


def check_codepoint_sweep(args, enc, tmp):
    # PCRE2 10.42 knows Unicode 14; tiktoken's Rust regex knows a later version. Code points
    # assigned after 14.0 may be split differently (a known, documented limitation), so the sweep
    # covers what this Python's unicodedata calls assigned, when that is Unicode <= 14.
    if tuple(int(x) for x in unicodedata.unidata_version.split(".")) > (14, 0, 0):
        print(f"tokenizer_check: note: Python's Unicode is {unicodedata.unidata_version}; "
              "code point sweep limited to the BMP")
        top = 0x10000
    else:
        top = 0x110000
    parts = []
    for cp in range(top):
        if 0xD800 <= cp < 0xE000 or unicodedata.category(chr(cp)) == "Cn":
            continue
        ch = chr(cp)
        parts.append(f"{ch}a {ch}{ch}'s 1{ch}\n")
    path = os.path.join(tmp, "sweep.txt")
    open(path, "w", encoding="utf-8", newline="").write("".join(parts))
    return check_file(args, enc, "code point sweep", path)


def check_decoder_file(args, enc, tmp):
    path = os.path.join(args.data, "gpt2_tokenizer.bin")
    raw = open(path, "rb").read()
    header = [int.from_bytes(raw[4 * i:4 * i + 4], "little") for i in range(4)]
    if header != [20240328, 2, 50257, EOT]:
        return [f"{path}: header {header}, want [20240328, 2, 50257, 50256]"]
    at = 1024
    for i in range(50257):
        n = raw[at]
        if raw[at + 1:at + 1 + n] != enc.decode_single_token_bytes(i):
            return [f"{path}: token {i} is {raw[at + 1:at + 1 + n]!r}, tiktoken has {enc.decode_single_token_bytes(i)!r}"]
        at += 1 + n
    return [] if at == len(raw) else [f"{path}: {len(raw) - at} bytes after the last token"]


def read_shard(path):
    raw = open(path, "rb").read()
    header = [int.from_bytes(raw[4 * i:4 * i + 4], "little", signed=True) for i in range(3)]
    n = header[2]
    if header[:2] != [20240520, 1] or len(raw) != 1024 + 2 * n:
        raise ValueError(f"{path}: bad header {header} for {len(raw)} bytes")
    return [int.from_bytes(raw[1024 + 2 * i:1026 + 2 * i], "little") for i in range(n)]


def check_shards(args, enc, tmp):
    # llm.c's dev/data/tinyshakespeare.py, step for step
    text = open(os.path.join(args.data, "tinyshakespeare", "input.txt"), "r", encoding="utf-8").read()
    sections = text.split("\n\n")
    want = []
    for i, s in enumerate(sections):
        want.append(EOT)
        want.extend(enc.encode_ordinary(s + "\n\n" if i != len(sections) - 1 else s))
    fails = []
    if (len(sections), len(want)) != (7222, 338028):
        fails.append(f"reference split: {len(sections)} sections, {len(want)} tokens; want 7222, 338028")
    d = os.path.join(args.data, "tinyshakespeare")
    val = read_shard(os.path.join(d, "tiny_shakespeare_val.bin"))
    train = read_shard(os.path.join(d, "tiny_shakespeare_train.bin"))
    if (len(val), len(train)) != (32768, 305260):
        fails.append(f"shards hold {len(val)} val + {len(train)} train tokens; want 32768 + 305260")
    return fails + compare(enc, "shards (val + train)", val + train, want)


def run_prepare(args, out_dir, mirror, expect_fatal=False):
    env = dict(os.environ, LEANSTEP_DATA_MIRROR=mirror)
    if expect_fatal:
        env["ASAN_OPTIONS"] = "detect_leaks=0"  # a fatal exit frees nothing on purpose
    r = subprocess.run([args.prepare, "-o", out_dir], capture_output=True, text=True, env=env, timeout=300)
    return r.returncode, r.stdout, r.stderr


def check_prepare_data(args, enc, tmp):
    if not args.prepare:
        return []
    fails = []

    def expect_error(what, out_dir, mirror, must_contain):
        rc, _, err = run_prepare(args, out_dir, mirror, expect_fatal=True)
        lines = err.splitlines()
        if rc != 1 or len(lines) != 1 or not all(s in err for s in must_contain):
            fails.append(f"prepare_data {what}: want exit 1 and one line naming {must_contain}, got {rc}: {err!r}")

    empty = os.path.join(tmp, "empty_mirror")
    os.makedirs(empty)
    expect_error("with an empty mirror", os.path.join(tmp, "out1"), empty,
                 ["LEANSTEP_DATA_MIRROR", "tinyshakespeare/input.txt", "https://"])
    bad = os.path.join(tmp, "bad_mirror")
    shutil.copytree(args.data, bad, ignore=shutil.ignore_patterns("*.bin", "*.tmp.*"))
    with open(os.path.join(bad, "gpt2", "vocab.bpe"), "r+b") as f:
        f.seek(100)
        f.write(b"#")
    expect_error("with a corrupt mirror file", os.path.join(tmp, "out2"), bad,
                 [os.path.join(bad, "gpt2", "vocab.bpe"), "sha256"])

    expect_error("with an empty URL mirror", os.path.join(tmp, "out4"), "file://" + os.path.abspath(empty),
                 ["file://", "tinyshakespeare/input.txt"])

    out = os.path.join(tmp, "out3")
    # data/ has the mirror layout; as a file:// URL it goes through the libcurl download path
    rc, stdout, err = run_prepare(args, out, "file://" + os.path.abspath(args.data))
    if rc != 0:
        return fails + [f"prepare_data -o {out}: exit {rc}: {err}"]
    for rel in ["tinyshakespeare/tiny_shakespeare_val.bin", "tinyshakespeare/tiny_shakespeare_train.bin",
                "gpt2_tokenizer.bin"]:
        if open(os.path.join(out, rel), "rb").read() != open(os.path.join(args.data, rel), "rb").read():
            fails.append(f"prepare_data -o {out}: {rel} differs from {args.data}/{rel}")
    t0 = time.time()
    rc, stdout, err = run_prepare(args, out, "")
    if rc != 0 or "up to date" not in stdout:
        fails.append(f"prepare_data second run should be a no-op (without mirror or network): {rc} {stdout!r} {err!r}")
    elif time.time() - t0 > 2.0:
        fails.append(f"prepare_data no-op took {time.time() - t0:.1f} s")
    # a local file with the wrong sha256 is fetched again, and the outputs rebuilt
    with open(os.path.join(out, "gpt2", "vocab.bpe"), "ab") as f:
        f.write(b"x")
    rc, stdout, err = run_prepare(args, out, args.data)  # as a directory this time
    if rc != 0 or "fetching it again" not in stdout or "tokens in" not in stdout:
        fails.append(f"prepare_data should replace a corrupt local file and retokenize: {rc} {stdout!r} {err!r}")
    leftovers = [f for _, _, fs in os.walk(out) for f in fs if ".tmp." in f]
    if leftovers:
        fails.append(f"prepare_data left temp files: {leftovers}")
    return fails


CHECKS = [check_shakespeare, check_unicode_txt, check_random_text, check_codepoint_sweep,
          check_decoder_file, check_shards, check_prepare_data]


def main():
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("--bin", required=True, help="build/test_tokenizer")
    ap.add_argument("--prepare", default="", help="build/prepare_data (its error paths are tested too)")
    ap.add_argument("--data", default="data", help="what `make data` filled (default: data)")
    args = ap.parse_args()
    for f in ["gpt2/encoder.json", "gpt2/vocab.bpe", "tinyshakespeare/input.txt", "gpt2_tokenizer.bin"]:
        if not os.path.exists(os.path.join(args.data, f)):
            sys.exit(f"tokenizer_check: {os.path.join(args.data, f)} missing; run `make data` first")
    enc = build_encoding(args.data)
    failures = []
    with tempfile.TemporaryDirectory(prefix="leanstep_tokcheck_") as tmp:
        for check in CHECKS:
            t0 = time.time()
            try:
                fails = check(args, enc, tmp)
            except (subprocess.CalledProcessError, OSError, ValueError) as e:
                detail = getattr(e, "stderr", b"") or b""
                fails = [f"{check.__name__}: {e} {detail.decode(errors='replace').strip()}"]
            status = "ok" if not fails else "FAIL"
            print(f"tokenizer_check: {check.__name__[6:]:<16} {status} ({time.time() - t0:.1f} s)")
            for f in fails:
                print(f"  {f}")
            failures += fails
    print(f"tokenizer_check: {'PASS' if not failures else 'FAIL'} ({len(CHECKS)} checks, {len(failures)} failures)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()

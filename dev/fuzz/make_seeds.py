#!/usr/bin/env python3
"""
make_seeds.py: writes the generated seed inputs of the fuzz targets (dev/fuzz/corpus/<target>/
seed-*), small valid (and a few nearly valid) files in each format, so that the fuzzers start
from inputs that get past the first checks. Regression inputs (regress-*) are not touched.
Standard library only. Usage: python3 dev/fuzz/make_seeds.py dev/fuzz/corpus
"""
import json
import os
import struct
import sys
import zlib

MODEL_MAGIC, STATE_MAGIC, SHARD_MAGIC, TOKENIZER_MAGIC = 20240326, 20240527, 20240520, 20240328
CHECKSUM_TAG = 0x4B43534C  # llmc/io/checkpoint.h: header slots (tag, crc32) = model [8], [9]; state [15], [16]


def with_checksum(header, payload, slot):
    """header with CHECKSUM_TAG and the crc32 of payload in slots (slot, slot + 1)."""
    h = bytearray(header)
    struct.pack_into("<iI", h, 4 * slot, CHECKSUM_TAG, zlib.crc32(payload))
    return bytes(h) + payload


def header(*ints):
    h = list(ints) + [0] * (256 - len(ints))
    return struct.pack("<256i", *h)


def n_params(L, C, T, V):
    Vp = (V + 127) // 128 * 128
    return Vp * C + T * C + L * (12 * C * C + 13 * C) + 2 * C


def model_files():
    L, C, H, T, V = 1, 16, 2, 4, 2
    n = n_params(L, C, T, V)
    h3 = header(MODEL_MAGIC, 3, T, V, L, H, C, (V + 127) // 128 * 128)
    h5 = header(MODEL_MAGIC, 5, T, V, L, H, C, (V + 127) // 128 * 128)
    vals = [((i * 2654435761) % 1000 - 500) / 1000.0 for i in range(n)]
    fp32 = struct.pack(f"<{n}f", *vals)
    bf16 = b"".join(fp32[4 * i + 2:4 * i + 4] for i in range(n))  # truncation is fine for a seed
    return {"seed-fp32-crc.bin": with_checksum(h3, fp32, 8), "seed-bf16.bin": h5 + bf16, "seed-header-only.bin": h3}


def state_files():
    n = 8
    out = {}
    # version 1 (before the optimizer engine): AdamW m, v (and master), or one block (has_m_v 2)
    for master, has_m_v, arrays in ((0, 1, 2), (1, 1, 3), (0, 2, 1)):
        h = struct.pack("<6iQQQQi", STATE_MAGIC, 1, 1, 0, 5, has_m_v, n, 0, 3, 42, master)
        h += b"\0" * (1024 - len(h))
        payload = struct.pack(f"<{arrays * n}f", *range(arrays * n))
        name = f"seed-master{master}.bin" if has_m_v == 1 else "seed-state-block.bin"
        out[name] = with_checksum(h, payload, 15) if master or has_m_v == 2 else h + payload
    # version 2: one optimizer state block of `words` words, the optimizer tag in [19]
    # (optim_engine_tag: kind | state << 4 | amsgrad << 8 | momentum << 9 | nesterov << 10),
    # master weights (their own count in [17..18]) or none; always checksummed
    ADAMW, SGD, LION, FP32, INT8 = 0, 1, 3, 0, 2
    for name, words, tag, nm in (("seed-v2-adamw.bin", 2 * n, ADAMW | FP32 << 4, 0),
                                 ("seed-v2-int8-master.bin", 12, ADAMW | INT8 << 4, n),
                                 ("seed-v2-sgd-nesterov.bin", n, SGD | 1 << 9 | 1 << 10, 0),
                                 ("seed-v2-lion-empty.bin", 0, LION, 0)):
        h = struct.pack("<6iQQQQi", STATE_MAGIC, 2, 1, 0, 5, 1, words, 0, 3, 42, 1 if nm else 0)
        h += b"\0" * (4 * 17 - len(h)) + struct.pack("<Qi", nm, tag)
        h += b"\0" * (1024 - len(h))
        payload = struct.pack(f"<{words + nm}f", *range(words + nm))
        out[name] = with_checksum(h, payload, 15)
    return out


def shard(tokens):
    return header(SHARD_MAGIC, 1, len(tokens)) + struct.pack(f"<{len(tokens)}H", *tokens)


def shard_files():
    toks = [(i * 7919) % 300 for i in range(200)]
    one = shard(toks)
    two_a, two_b = shard(toks[:90]), shard(toks[90:])
    # settings: B-1, T-1, flags, vocab-1 (LE), split (LE), batches-1
    s1 = bytes([1, 15, 0x10, 0x2B, 0x01, 0, 0, 5])  # B=2 T=16 shuffle vocab=300
    split = len(two_a)
    s2 = bytes([0, 7, 0x21 | 0x04, 0x2B, 0x01, split & 255, split >> 8, 9])  # 2 procs, rank 1, 2 shards
    return {"seed-one.bin": s1 + one, "seed-two.bin": s2 + two_a + two_b,
            "seed-vocab-small.bin": bytes([0, 3, 0, 9, 0, 0, 0, 0]) + one}


def byte_alphabet():
    """GPT-2's bytes -> printable unicode characters."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cps, n = {}, 0
    for b in range(256):
        if b in printable:
            cps[b] = b
        else:
            cps[b] = 256 + n
            n += 1
    return {b: chr(c) for b, c in cps.items()}


SAMPLE = ("First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n"
          "You are all resolved rather to die than to famish? We're resolved; it's 1234 times.\n")


def train_bpe(text, merges):
    """A tiny byte-level BPE: the most frequent adjacent pair inside words, merges times."""
    words = [list(w.encode()) for w in text.replace("\n", " \n ").split(" ") if w]
    words = [[bytes([b]) for b in w] for w in words]
    vocab, out = [bytes([b]) for b in range(256)], []
    for _ in range(merges):
        counts = {}
        for w in words:
            for a, b in zip(w, w[1:]):
                counts[(a, b)] = counts.get((a, b), 0) + 1
        counts = {p: c for p, c in counts.items() if p[0] + p[1] not in vocab}  # tokens stay unique
        if not counts:
            break
        (a, b), _ = max(counts.items(), key=lambda kv: (kv[1], kv[0]))
        out.append((a, b))
        vocab.append(a + b)
        for w in words:
            i = 0
            while i + 1 < len(w):
                if w[i] == a and w[i + 1] == b:
                    w[i:i + 2] = [a + b]
                i += 1
    return vocab, out


def tokenizer_files():
    vocab, merges = train_bpe(SAMPLE, 40)
    eot = len(vocab)
    alpha = byte_alphabet()
    enc = {"".join(alpha[c] for c in tok): i for i, tok in enumerate(vocab)}
    enc["<|endoftext|>"] = eot
    encoder_json = json.dumps(enc, ensure_ascii=False).encode()
    bpe = "#version: 0.2\n" + "".join("".join(alpha[c] for c in a) + " " + "".join(alpha[c] for c in b) + "\n"
                                      for a, b in merges)
    toks = vocab + [b"<|endoftext|>"]
    decoder = header(TOKENIZER_MAGIC, 2, len(toks), eot)
    decoder += b"".join(bytes([len(t)]) + t for t in toks)
    small = header(TOKENIZER_MAGIC, 2, 3, 2) + b"\x01a\x02bc\x03\xe2\x82\xac"
    return ({"seed-sample.bin": decoder, "seed-three-tokens.bin": small},
            {"seed-sample.bin": encoder_json + b"\0" + bpe.encode(),
             "seed-no-merges.bin": encoder_json + b"\0#version: 0.2\n"})


def encode_inputs():
    return {
        "seed-english.txt": SAMPLE.encode(),
        "seed-unicode.txt": "Grüße, 東京! Ünïcödé — naïve café 😀 ٣٤ x\u00a0y\u3000z".encode(),
        "seed-special.txt": b"a<|endoftext|>b <|endoftext|><|endoftext|\n<|end",
        "seed-invalid-utf8.txt": b"ok \xff\xfe bad \xc3( \xe2\x82 \xf0\x9f\x98 end\x00\x01",
        "seed-spaces.txt": b"   x  \n\n\t  y \r\n  's 're 've 'm 'll 'd 1234567 !!!?",
    }


def cli_inputs():
    def cl(trainer, *args):
        return bytes([trainer]) + b"\0".join(a.encode() for a in args)
    return {
        "seed-cpu.bin": cl(0, "-e", "L2C64H4T128V1000", "-b", "4", "-t", "64", "-l", "1e-3", "-k", "wsd", "--memory-report", "1"),
        "seed-gpu.bin": cl(1, "--model=d12", "-b", "8", "-t", "1024", "-d", "524288", "-r", "2", "--offload", "stream"),
        "seed-badam.bin": cl(0, "-e", "L4C64H4", "--badam", "10", "--badam-order", "random", "-t", "32"),
        "seed-help.bin": cl(0, "-x", "10", "--help"),
        "seed-bad.bin": cl(0, "-b", "0x10", "--nope", "-q"),
    }


def safetensors(tensors, meta=None):
    hdr, data = {}, b""
    if meta:
        hdr["__metadata__"] = meta
    for name, dtype, shape, raw in tensors:
        hdr[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def safetensors_inputs():
    f32 = struct.pack("<6f", *range(6))
    return {
        "seed-two.bin": safetensors([("wte.weight", "F32", [2, 3], f32), ("b", "BF16", [3], b"\0\x3f" * 3)],
                                    {"format": "pt"}),
        "seed-empty.bin": safetensors([]),
        "seed-zero-dim.bin": safetensors([("z", "F16", [0, 4], b""), ("x", "I64", [1], b"\1" * 8)]),
    }


def main(out):
    tok_file, tok_bpe = tokenizer_files()
    sets = {"model_file": model_files(), "state_file": state_files(), "shard": shard_files(),
            "tokenizer_file": tok_file, "tokenizer_bpe": tok_bpe, "encode": encode_inputs(),
            "cli": cli_inputs(), "safetensors": safetensors_inputs()}
    for target, files in sets.items():
        d = os.path.join(out, target)
        os.makedirs(d, exist_ok=True)
        for name in os.listdir(d):
            if name.startswith("seed-"):
                os.remove(os.path.join(d, name))
        for name, data in files.items():
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)
        print(f"{target}: {len(files)} seeds, {sum(map(len, files.values()))} bytes")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "dev/fuzz/corpus")

#!/usr/bin/env python3
"""
test_export.py: the Hugging Face export/import test (make test-export).

Runs build/hf_convert on the reference test model (written by dev/reference/gpt2_ref.py init)
and checks, for the fp32 model file and a bf16 (version 5) copy of it:
  1. the safetensors file, read with the `safetensors` package, holds exactly the expected names
     (transformer.*, no lm_head), dtypes and shapes, and every tensor is bit for bit the llm.c
     tensor in Hugging Face's layout (Conv1D weights transposed, wte without its padded rows);
     config.json describes the model;
  2. a hand-written loader that follows Hugging Face's layout (the transposes undone) into
     gpt2_ref.py's model gives exactly the reference's logits;
  3. transformers' GPT2LMHeadModel.from_pretrained loads the directory with no missing, unexpected
     or mismatched keys, lm_head tied to wte, and its logits match gpt2_ref.py's forward within
     1e-4 (absolute);
  4. import gives back the model file byte for byte (a file without a checksum gains one and is
     otherwise identical; a corrupt one is refused), also from what transformers' save_pretrained
     writes and from a hub-style file (no "transformer." prefix, attention-mask buffers); an F16
     checkpoint imports to an fp32 file with the exactly widened values;
  5. broken files are rejected with one line that names the file: the header's length, JSON,
     dtype, shape/offset agreement, overlaps, gaps, truncation, duplicates, unknown fields,
     missing or misshapen tensors, an untied lm_head, a config that is not GPT-2's.
Prints one line per check and "N passed, 0 failed"; exits 1 on the first failure.
Needs torch, numpy, safetensors and transformers (build/hfvenv, see dev/export/rules.mk).
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile
import zlib

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
import gpt2_ref  # noqa: E402

from safetensors.torch import load_file, save_file  # noqa: E402

PASSED = []
LAYER = [("ln_1.weight", "ln1w", False), ("ln_1.bias", "ln1b", False), ("attn.c_attn.weight", "qkvw", True),
         ("attn.c_attn.bias", "qkvb", False), ("attn.c_proj.weight", "attprojw", True),
         ("attn.c_proj.bias", "attprojb", False), ("ln_2.weight", "ln2w", False), ("ln_2.bias", "ln2b", False),
         ("mlp.c_fc.weight", "fcw", True), ("mlp.c_fc.bias", "fcb", False), ("mlp.c_proj.weight", "fcprojw", True),
         ("mlp.c_proj.bias", "fcprojb", False)]


class Failed(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failed(what)


def passed(what):
    PASSED.append(what)
    print(f"  ok  {what}", flush=True)


def run(args, expect_ok=True):
    p = subprocess.run(args, capture_output=True, text=True)
    if expect_ok and p.returncode != 0:
        raise Failed(f"{' '.join(args)} failed ({p.returncode}): {p.stderr.strip()}")
    return p


def hf_layout(cfg, P, prefix="transformer."):
    """The reference's parameters as Hugging Face's GPT-2 state dict (no lm_head)."""
    out = {prefix + "wte.weight": P["wte"][:cfg.V], prefix + "wpe.weight": P["wpe"]}
    for i in range(cfg.L):
        for hf, ours, transpose in LAYER:
            t = P[ours][i]
            out[f"{prefix}h.{i}.{hf}"] = t.t() if transpose else t
    out[prefix + "ln_f.weight"] = P["lnfw"]
    out[prefix + "ln_f.bias"] = P["lnfb"]
    return {k: v.contiguous() for k, v in out.items()}


def load_hf_layout(cfg, sd, prefix="transformer."):
    """A hand-written loader: Hugging Face's GPT-2 layout -> gpt2_ref.py's parameters (fp32)."""
    sd = {k: v.float() for k, v in sd.items()}
    P = {"wte": torch.zeros(cfg.Vp, cfg.C), "wpe": sd[prefix + "wpe.weight"],
         "lnfw": sd[prefix + "ln_f.weight"], "lnfb": sd[prefix + "ln_f.bias"]}
    P["wte"][:cfg.V] = sd[prefix + "wte.weight"]
    for hf, ours, transpose in LAYER:
        ts = [sd[f"{prefix}h.{i}.{hf}"] for i in range(cfg.L)]
        P[ours] = torch.stack([t.t() if transpose else t for t in ts]).contiguous()
    return P


def same_bits(a, b):
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    view = torch.int16 if a.element_size() == 2 else torch.int32
    return torch.equal(a.contiguous().view(view), b.contiguous().view(view))


CHECKSUM_TAG = 0x4B43534C  # llmc/io/checkpoint.h: model header slots 8 (tag) and 9 (crc32 of the data)


def write_model_file(dst, header, payload, checksum=True):
    """A model file as the trainers write it (checksum=True) or as llm.c does (no checksum)."""
    header = bytearray(header)
    struct.pack_into("<iI", header, 32, CHECKSUM_TAG if checksum else 0, zlib.crc32(payload) if checksum else 0)
    with open(dst, "wb") as f:
        f.write(bytes(header) + payload)


def to_bf16_model(src, dst):
    """A version 5 copy of an fp32 model file (round to nearest even, like llmc/io/checkpoint.h)."""
    raw = open(src, "rb").read()
    header = bytearray(raw[:1024])
    struct.pack_into("<i", header, 4, 5)
    u = np.frombuffer(raw[1024:], dtype="<u4").astype(np.uint64)
    bf = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")
    write_model_file(dst, header, bf.tobytes())


def check_export(tool, model, out_dir, label):
    cfg, P = gpt2_ref.read_model(model)
    run([tool, "export", model, out_dir])
    bf16 = open(model, "rb").read()[4:8] == struct.pack("<i", 5)
    # 1. names, dtypes, shapes, bits
    sd = load_file(os.path.join(out_dir, "model.safetensors"))
    want = hf_layout(cfg, P)
    check(set(sd) == set(want), f"{label}: names differ: {sorted(set(sd) ^ set(want))[:5]}")
    dtype = torch.bfloat16 if bf16 else torch.float32
    for k, v in want.items():
        check(sd[k].dtype == dtype, f"{label}: {k} is {sd[k].dtype}, want {dtype}")
        check(tuple(sd[k].shape) == tuple(v.shape), f"{label}: {k} has shape {tuple(sd[k].shape)}, want {tuple(v.shape)}")
        check(same_bits(sd[k].float() if bf16 else sd[k], v), f"{label}: {k} differs from the model file")
    with open(os.path.join(out_dir, "model.safetensors"), "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        meta = json.loads(f.read(n))["__metadata__"]
    check(meta == {"format": "pt"}, f"{label}: metadata {meta}")
    conf = json.load(open(os.path.join(out_dir, "config.json")))
    expect = {"n_layer": cfg.L, "n_head": cfg.H, "n_embd": cfg.C, "n_positions": cfg.maxT, "vocab_size": cfg.V,
              "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5, "model_type": "gpt2",
              "tie_word_embeddings": True, "torch_dtype": "bfloat16" if bf16 else "float32"}
    for k, v in expect.items():
        check(conf.get(k) == v, f"{label}: config.json {k} = {conf.get(k)!r}, want {v!r}")
    passed(f"{label}: {len(sd)} tensors bit for bit in Hugging Face's layout (safetensors {dtype}), config.json")
    # 2. the hand-written loader
    torch.manual_seed(0)
    B, T = 2, min(16, cfg.maxT)
    inputs = torch.randint(0, cfg.V, (B, T))
    with torch.no_grad():
        ref = gpt2_ref.gpt2_forward(cfg, P, inputs)
        mine = gpt2_ref.gpt2_forward(cfg, load_hf_layout(cfg, sd), inputs)
    check(torch.equal(ref, mine), f"{label}: hand-written HF-layout loader gives other logits")
    passed(f"{label}: hand-written HF-layout loader -> gpt2_ref.py logits identical")
    # 3. transformers
    from transformers import GPT2LMHeadModel
    hf, info = GPT2LMHeadModel.from_pretrained(out_dir, torch_dtype=torch.float32, output_loading_info=True)
    for k in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        check(not info[k], f"{label}: transformers: {k} {info[k]}")
    check(hf.lm_head.weight.data_ptr() == hf.transformer.wte.weight.data_ptr(), f"{label}: lm_head not tied")
    hf.eval()
    with torch.no_grad():
        logits = hf(inputs).logits
    diff = (logits - ref).abs().max().item()
    check(diff <= 1e-4, f"{label}: transformers logits differ from gpt2_ref.py by {diff:.3g} (> 1e-4)")
    passed(f"{label}: transformers GPT2LMHeadModel loads it; logits vs gpt2_ref.py max |diff| {diff:.2e} <= 1e-4")
    # 4. import back
    back = os.path.join(out_dir, "back.bin")
    run([tool, "import", out_dir, back])
    check(open(back, "rb").read() == open(model, "rb").read(), f"{label}: export -> import is not byte-identical")
    passed(f"{label}: export -> import gives the model file byte for byte")
    return cfg, P, hf


def check_import_variants(tool, model, work, cfg, P, hf):
    original = open(model, "rb").read()
    # what transformers itself writes
    saved = os.path.join(work, "saved")
    hf.save_pretrained(saved, safe_serialization=True)
    run([tool, "import", saved, os.path.join(work, "saved.bin")])
    check(open(os.path.join(work, "saved.bin"), "rb").read() == original, "import of save_pretrained output differs")
    passed("import of transformers' save_pretrained output: the model file byte for byte")
    # a hub-style file: no prefix, attention-mask buffers, an explicit tied lm_head
    hub = os.path.join(work, "hub")
    os.makedirs(hub)
    sd = hf_layout(cfg, P, prefix="")
    for i in range(cfg.L):
        sd[f"h.{i}.attn.bias"] = torch.tril(torch.ones(cfg.maxT, cfg.maxT)).view(1, 1, cfg.maxT, cfg.maxT)
    sd["lm_head.weight"] = sd["wte.weight"].clone()
    save_file(sd, os.path.join(hub, "model.safetensors"), metadata={"format": "pt"})
    json.dump(json.load(open(os.path.join(saved, "config.json"))), open(os.path.join(hub, "config.json"), "w"))
    run([tool, "import", os.path.join(hub, "model.safetensors"), os.path.join(work, "hub.bin")])
    check(open(os.path.join(work, "hub.bin"), "rb").read() == original, "import of a hub-style file differs")
    passed("import of a hub-style file (no prefix, mask buffers, tied lm_head): byte for byte")
    # F16 -> fp32 file, exactly widened
    f16 = os.path.join(work, "f16")
    os.makedirs(f16)
    sd16 = {k: v.half() for k, v in hf_layout(cfg, P).items()}
    save_file(sd16, os.path.join(f16, "model.safetensors"), metadata={"format": "pt"})
    json.dump(json.load(open(os.path.join(saved, "config.json"))), open(os.path.join(f16, "config.json"), "w"))
    run([tool, "import", f16, os.path.join(work, "f16.bin")])
    cfg16, P16 = gpt2_ref.read_model(os.path.join(work, "f16.bin"))
    want = load_hf_layout(cfg, sd16)
    check(open(os.path.join(work, "f16.bin"), "rb").read()[4:8] == struct.pack("<i", 3), "F16 import is not fp32")
    check(all(same_bits(P16[k], want[k]) for k in want), "F16 import: values are not the exact widening")
    passed("import of an F16 checkpoint: an fp32 model file with the exactly widened values")


def check_llmc_file(tool, llmc_model, work):
    """A model file without a checksum (as llm.c and gpt2_ref.py write it) exports, and comes back
    identical but for the checksum now in its header; a corrupted checksummed file is refused."""
    out = os.path.join(work, "llmc")
    run([tool, "export", llmc_model, out])
    run([tool, "import", out, os.path.join(work, "llmc.bin")])
    a, b = open(llmc_model, "rb").read(), open(os.path.join(work, "llmc.bin"), "rb").read()
    tag, crc = struct.unpack_from("<iI", b, 32)
    check(a[:32] == b[:32] and a[40:] == b[40:], "llm.c file: export -> import changed more than the checksum slots")
    check(tag == CHECKSUM_TAG and crc == zlib.crc32(b[1024:]), "llm.c file: import did not write a valid checksum")
    bad = bytearray(b)
    bad[5000] ^= 1
    with open(os.path.join(work, "corrupt.bin"), "wb") as f:
        f.write(bytes(bad))
    p = run([tool, "export", os.path.join(work, "corrupt.bin"), os.path.join(work, "corrupt")], expect_ok=False)
    check(p.returncode == 1 and "checksum mismatch" in p.stderr, f"corrupt model file exported: {p.stderr.strip()!r}")
    passed("llm.c file (no checksum): export -> import identical but for the checksum it gains; a corrupt file is refused")


# ----------------------------------------------------------------------------------------------
# strict validation: hand-made broken files

def raw_safetensors(entries, meta=None, pad_to=8, header_override=None):
    """entries: list of (name, dtype, shape, bytes, offsets or None)."""
    hdr, data = {}, b""
    if meta is not None:
        hdr["__metadata__"] = meta
    for name, dtype, shape, raw, offs in entries:
        hdr[name] = {"dtype": dtype, "shape": shape, "data_offsets": offs or [len(data), len(data) + len(raw)]}
        data += raw
    h = header_override if header_override is not None else json.dumps(hdr).encode()
    h += b" " * (-len(h) % pad_to)
    return struct.pack("<Q", len(h)) + h + data


def check_rejections(tool, work, cfg, P):
    good_dir = os.path.join(work, "fp32")
    good = open(os.path.join(good_dir, "model.safetensors"), "rb").read()
    conf = open(os.path.join(good_dir, "config.json")).read()
    n = struct.unpack("<Q", good[:8])[0]
    hdr = json.loads(good[8:8 + n])
    data = good[8 + n:]
    names = [k for k in hdr if k != "__metadata__"]
    first = min(names, key=lambda k: hdr[k]["data_offsets"][0])

    def with_header(h, data_=data):
        text = json.dumps(h).encode()
        text += b" " * (-len(text) % 8)
        return struct.pack("<Q", len(text)) + text + data_

    def edit(fn):
        h = json.loads(json.dumps(hdr))
        fn(h)
        return with_header(h)

    f32 = lambda k: np.arange(k, dtype="<f4").tobytes()  # noqa: E731
    cases = [
        ("too short", b"\x01\x02", "too short"),
        ("header length beyond the file", struct.pack("<Q", 1 << 40) + good[8:], "does not fit"),
        ("not JSON", struct.pack("<Q", 16) + b'{"a": [1,}      ', "not valid JSON"),
        ("not UTF-8", struct.pack("<Q", 8) + b'{"\xff":1} ', "UTF-8"),
        ("bytes after the JSON", struct.pack("<Q", 8) + b"{}    x ", "after the header"),
        ("unknown dtype", edit(lambda h: h[first].update(dtype="F33")), "unknown dtype"),
        ("span vs shape", edit(lambda h: h[first].update(shape=[h[first]["shape"][0] - 1] + h[first]["shape"][1:])),
         "span"),
        ("unknown field", edit(lambda h: h[first].update(extra=1)), "unknown field"),
        ("negative size", edit(lambda h: h[first].update(shape=[-1])), "shape[0]"),
        ("begin > end", edit(lambda h: h[first].update(data_offsets=[8, 4])), "begin <= end"),
        ("duplicate name", raw_safetensors([], header_override=b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
                                                               b'"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}')
         + f32(2), "appears twice"),
        ("overlap", raw_safetensors([("a", "F32", [2], f32(2), [0, 8]), ("b", "F32", [2], b"", [4, 12])]) + f32(1),
         "overlaps"),
        ("gap", raw_safetensors([("a", "F32", [1], f32(1), [0, 4]), ("b", "F32", [1], f32(2), [8, 12])]), "gap"),
        ("truncated data", good[:-4], "truncated"),
        ("trailing bytes", good + b"\0\0\0\0", "trailing"),
        ("offsets beyond the file", raw_safetensors([("a", "F32", [4], f32(2), [0, 16])]), "truncated"),
        ("metadata not strings", raw_safetensors([], meta={"format": 1}), "__metadata__"),
    ]
    # tensor-level problems, in otherwise valid files
    st_cases = []
    sd = load_file(os.path.join(good_dir, "model.safetensors"))
    dropped = dict(sd)
    del dropped["transformer.h.0.mlp.c_fc.bias"]
    st_cases.append(("missing tensor", dropped, "missing tensor 'transformer.h.0.mlp.c_fc.bias'"))
    wrong = dict(sd)
    wrong["transformer.h.1.attn.c_attn.weight"] = sd["transformer.h.1.attn.c_attn.weight"].t().contiguous()
    st_cases.append(("transposed c_attn", wrong, "has shape"))
    extra = dict(sd)
    extra["transformer.h.9.ln_1.weight"] = sd["transformer.ln_f.weight"].clone()
    st_cases.append(("a layer too many", extra, "unexpected tensor"))
    untied = dict(sd)
    untied["lm_head.weight"] = sd["transformer.wte.weight"] * 2
    st_cases.append(("untied lm_head", untied, "lm_head.weight differs"))
    ints = dict(sd)
    ints["transformer.ln_f.bias"] = sd["transformer.ln_f.bias"].to(torch.int32)
    st_cases.append(("integer tensor", ints, "expected F32, BF16 or F16"))

    bad = os.path.join(work, "bad")
    os.makedirs(bad, exist_ok=True)
    with open(os.path.join(bad, "config.json"), "w") as f:
        f.write(conf)
    path = os.path.join(bad, "model.safetensors")
    count = 0
    for what, blob, needle in cases + st_cases:
        if isinstance(blob, dict):
            save_file(blob, path, metadata={"format": "pt"})
        else:
            with open(path, "wb") as f:
                f.write(blob)
        p = run([tool, "import", path, os.path.join(bad, "out.bin")], expect_ok=False)
        lines = p.stderr.strip().splitlines()
        check(p.returncode == 1, f"rejection '{what}': exit status {p.returncode}, stderr {p.stderr.strip()!r}")
        check(len(lines) == 1 and lines[0].startswith("leanstep: error: "), f"rejection '{what}': not one line: {lines}")
        check(path in lines[0] and needle in lines[0], f"rejection '{what}': message {lines[0]!r} lacks the file or '{needle}'")
        check(not os.path.exists(os.path.join(bad, "out.bin")), f"rejection '{what}': an output file was written")
        count += 1
    # config problems
    save_file(sd, path, metadata={"format": "pt"})
    for what, change, needle in [("relu", {"activation_function": "relu"}, "activation_function"),
                                 ("eps", {"layer_norm_epsilon": 1e-6}, "layer_norm_epsilon"),
                                 ("n_head", {"n_head": 5}, "heads"),
                                 ("no n_layer", {"n_layer": None}, "n_layer"),
                                 ("untied", {"tie_word_embeddings": False}, "tie_word_embeddings")]:
        c = json.loads(conf)
        c.update(change)
        with open(os.path.join(bad, "config.json"), "w") as f:
            json.dump(c, f)
        p = run([tool, "import", path, os.path.join(bad, "out.bin")], expect_ok=False)
        lines = p.stderr.strip().splitlines()
        check(p.returncode == 1 and len(lines) == 1 and "config.json" in lines[0] and needle in lines[0],
              f"config rejection '{what}': {p.returncode} {lines}")
        count += 1
    passed(f"{count} broken files and configs rejected, each with one line naming the file and the problem")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, help="build/hf_convert")
    ap.add_argument("--model", required=True, help="an fp32 llm.c model file (gpt2_ref.py init)")
    a = ap.parse_args()
    torch.set_num_threads(max(1, len(os.sched_getaffinity(0))))
    try:
        with tempfile.TemporaryDirectory() as work:
            model = os.path.join(work, "model.bin")  # the reference model as the trainers write it
            raw = open(a.model, "rb").read()
            write_model_file(model, raw[:1024], raw[1024:])
            fp32_dir = os.path.join(work, "fp32")
            cfg, P, hf = check_export(a.bin, model, fp32_dir, "fp32")
            bf16_model = os.path.join(work, "model_bf16.bin")
            to_bf16_model(a.model, bf16_model)
            check_export(a.bin, bf16_model, os.path.join(work, "bf16"), "bf16")
            check_import_variants(a.bin, model, work, cfg, P, hf)
            check_llmc_file(a.bin, a.model, work)
            check_rejections(a.bin, work, cfg, P)
    except Failed as e:
        print(f"FAIL {e}")
        print(f"{len(PASSED)} passed, 1 failed")
        return 1
    print(f"{len(PASSED)} passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

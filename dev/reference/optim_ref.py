#!/usr/bin/python3
"""
optim_ref.py: the CPU optimizer family of leanstep (llmc/optim/optim.h, llmc/optim/state.h) against
PyTorch, on fresh random tensors of several shapes, 5 steps each. Exits 1 on any mismatch.

  SGD    torch.optim.SGD(momentum, dampening, nesterov), plain SGD too
  AdamW  torch.optim.AdamW(amsgrad=True and False)
  LAMB   not in PyTorch 1.13: written below in torch ops from You et al. 2019 ("Large Batch
         Optimization for Deep Learning: Training BERT in 76 minutes", Algorithm 2 with phi = id)
  Lion   not in PyTorch 1.13: written below in torch ops from Chen et al. 2023 ("Symbolic Discovery
         of Optimization Algorithms", Algorithm 2)
  Muon   not in PyTorch 1.13: written below in torch ops from its published description (momentum,
         Nesterov, Newton-Schulz with the quintic (3.4445, -4.7750, 2.0315), 5 steps, in float64;
         AdamW for the vectors), on tall, wide, square and stacked (qkv-like) matrices. Also the
         Newton-Schulz output's properties on matrices of known spectrum (test_optim --ns).
  Adam-mini  not in PyTorch 1.13: written below in torch ops from Zhang et al. 2024 ("Adam-mini: Use
         Fewer Learning Rates To Gain More", Algorithm 1 with the Transformer partition): one v per
         block, the block's mean of g^2; blocks from the shapes alone: a (3, R, C) tensor is qkv (q
         and k per head of R / 4 rows, v per row), a matrix per row, a vector one block.
Three parameter groups, as leanstep's segments: 2-D weights with weight decay, vectors without,
and a group with half the learning rate (lr_mult 0.5). Weight decay is DECOUPLED in leanstep for
every optimizer (p -= lr * wd * p, as AdamW); torch.optim.SGD's weight_decay adds wd * p to the
gradient instead, so the SGD reference uses weight_decay=0 and applies p *= 1 - lr * wd before
each step (the same arithmetic as leanstep's p -= lr * (d + wd * p)).

The C side runs through `test_optim --run` (raw float32 files: parameters, then the gradients of
every step in; the parameters after every step out). PyTorch runs in float64 from the same float32
parameters, gradients and hyperparameters (betas, eps, lr rounded to float32 first), so the
difference is leanstep's fp32 rounding. Tolerance: |c - ref| <= 1e-6 t |ref| + 1e-5 t lr at step t
(a few fp32 roundings of p per step, a few ulps of the lr-sized update; the fp32 bias correction
1 / (1 - beta2^t) has up to ~3e-5 relative error at small t, which moves AdamW's update by
~1.5e-5 lr: within the budget). Lion: sign(c) is discontinuous at 0, so an element whose float64 c
is nonzero but within 1e-5 of the size of its terms is excluded from then on (counted; must stay
under 0.1%).

usage: /usr/bin/python3 dev/reference/optim_ref.py --bin build/test_optim [-v]
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

STEPS = 5
RTOL, ATOL_LR = 1e-6, 1e-5
# Muon with bf16 / int8 state: the stored momentum is off by up to 2^-8 (bf16, stochastic) or half
# a code gap of the block's absmax (int8, 0.0072) relative, the AdamW tensors' m and v likewise, and
# the Newton-Schulz output moves about as much: per step an element moves by lr * s * |X| with s
# up to 0.2 sqrt(130) = 2.3 and |X| ~ 1 / sqrt(min dim) <= 0.5, so a few 1e-3 of lr per step;
# 4-bit: int8's bound times the ratio of the signed maps' widest half gaps, 0.1125 / 0.0072 = 15.6
MUON_LOWP_ATOL = {"bf16": 6e-3, "int8": 2e-2, "4bit": 0.3}
# and its AdamW tensors: AdamW's low-precision bounds (dev/cuda/optimizers.cu, dev/test/test_optim.c):
# p + 0.1 lr t (bf16), p + 0.5 lr t (int8: an element whose v quantizes toward 0 has |u| > 1),
# p + lr t (4bit: m off by up to 0.1125 of its group's max |m| moves |u| by up to ~0.1 of the
# group's largest, v read on its 1/16 grid of its row's and column's scale; measured up to 0.57 lr t)
ADAMW_LOWP_ATOL = {"bf16": 0.1, "int8": 0.5, "4bit": 1.0}

# (shapes, seed): odd sizes, single elements, a tensor over the int8 threshold and LAMB's blocks
SHAPE_SETS = [
    ([(64, 48), (48,), (7,), (33, 5), (1,), (300, 20), (20,)], 1),
    ([(129, 65), (3,), (1, 1), (4097,), (2, 3)], 2),
    ([(10, 10), (100,), (1000, 3), (11,)], 3),
]


def f32(x):
    return float(np.float32(x))


def groups_of(shapes):
    """Per tensor: (weight decay on?, lr_mult). 2-D (3-D: stacked): decay; every third tensor: lr_mult 0.5."""
    return [(len(s) >= 2, 0.5 if k % 3 == 2 else 1.0) for k, s in enumerate(shapes)]


def make_data(shapes, seed):
    g = torch.Generator().manual_seed(seed)
    params = [(torch.randn(s, generator=g) * 0.1 + (1.0 if len(s) == 1 and k % 2 else 0.0)).float()
              for k, s in enumerate(shapes)]
    grads = []
    for t in range(STEPS):
        scales = [10.0 ** (-4 + 2 * torch.rand(1, generator=g).item()) for _ in shapes]
        grads.append([(torch.randn(s, generator=g) * sc).float() for s, sc in zip(shapes, scales)])
    return params, grads


def muon_rows(shape):
    """A Muon matrix's (rows, parts) from a shape: (rows, cols) or (parts, rows / parts, cols); else None."""
    if len(shape) == 2:
        return shape[0], 1
    if len(shape) == 3:
        return shape[0] * shape[1], shape[0]
    return None


MINI_HEADS = 4  # the heads of Adam-mini's qkv-like (3, R, C) tensors


def mini_blocks(shape):
    """Adam-mini's blocks of a tensor as (first element, length) of its flat elements, from its shape."""
    n = int(np.prod(shape))
    if len(shape) == 1:
        return [(0, n)]
    cols = shape[-1]
    if len(shape) == 3:  # qkv: q and k per head, then v per row
        rows, hr = shape[1], shape[1] // MINI_HEADS
        return [(h * hr * cols, hr * cols) for h in range(2 * MINI_HEADS)] + \
               [((2 * rows + r) * cols, cols) for r in range(rows)]
    return [(r * cols, cols) for r in range(shape[0])]


def run_c(binary, cfg, shapes, params, grads, tmp):
    groups = groups_of(shapes)
    specs = []
    for sh, (dec, lm) in zip(shapes, groups):
        spec = "%d:%r:%r" % (int(np.prod(sh)), cfg["wd"] if dec else 0.0, lm)
        if cfg["kind"] == "muon" and muon_rows(sh) is not None:
            spec += ":%d:%d" % muon_rows(sh)
        if cfg["kind"] == "adam-mini" and len(sh) >= 2:
            rows, parts = muon_rows(sh)
            spec += ":%d:%d:%d" % (rows, parts, MINI_HEADS if parts == 3 else 0)
        specs.append(spec)
    segs = ",".join(specs)
    fin, fout = os.path.join(tmp, "in.bin"), os.path.join(tmp, "out.bin")
    with open(fin, "wb") as f:
        f.write(torch.cat([p.reshape(-1) for p in params]).numpy().astype(np.float32).tobytes())
        for gs in grads:
            f.write(torch.cat([x.reshape(-1) for x in gs]).numpy().astype(np.float32).tobytes())
    cmd = [binary, "--run", "--optimizer", cfg["kind"], "--lr", repr(cfg["lr"]), "--steps", str(STEPS),
           "--segments", segs, "--in", fin, "--out", fout]
    for k in ("beta1", "beta2", "eps", "momentum", "dampening"):
        if k in cfg:
            cmd += ["--" + k, repr(cfg[k])]
    if "adamw_lr_mult" in cfg:
        cmd += ["--adamw-lr-mult", repr(cfg["adamw_lr_mult"])]
    if "muon_scale" in cfg:
        cmd += ["--muon-scale", cfg["muon_scale"]]
    cmd += ["--muon-plain"] if cfg.get("muon_plain") else []
    cmd += ["--opt-state", cfg["state"]] if "state" in cfg else []
    cmd += ["--amsgrad"] if cfg.get("amsgrad") else []
    cmd += ["--nesterov"] if cfg.get("nesterov") else []
    subprocess.run(cmd, check=True)
    n = sum(int(np.prod(s)) for s in shapes)
    out = np.fromfile(fout, dtype=np.float32)
    assert out.size == STEPS * n, "test_optim --run wrote %d floats, expected %d" % (out.size, STEPS * n)
    return out.reshape(STEPS, n)


# ----------------------------------------------------------------------------
# references (float64)

def ref_torch_class(cfg, shapes, params, grads):
    """torch.optim.SGD / AdamW on float64 copies; returns the flat parameters after each step."""
    groups = groups_of(shapes)
    ps = [torch.nn.Parameter(p.double().clone()) for p in params]
    lr, wd = f32(cfg["lr"]), f32(cfg["wd"])
    pgroups = []
    for p, (dec, lm) in zip(ps, groups):
        pgroups.append({"params": [p], "lr": lr * lm, "weight_decay": wd if dec else 0.0})
    if cfg["kind"] == "adamw":
        opt = torch.optim.AdamW(pgroups, lr=lr, betas=(f32(cfg.get("beta1", 0.9)), f32(cfg.get("beta2", 0.95))),
                                eps=f32(cfg.get("eps", 1e-8)), amsgrad=bool(cfg.get("amsgrad")))
    else:
        for gr in pgroups:  # decoupled decay applied by hand below
            gr["decoupled_wd"] = gr["weight_decay"]
            gr["weight_decay"] = 0.0
        opt = torch.optim.SGD(pgroups, lr=lr, momentum=f32(cfg.get("momentum", 0.0)),
                              dampening=f32(cfg.get("dampening", 0.0)), nesterov=bool(cfg.get("nesterov")))
    out = []
    for t in range(STEPS):
        for p, g in zip(ps, grads[t]):
            p.grad = g.double().clone()
        if cfg["kind"] == "sgd":
            with torch.no_grad():
                for gr in opt.param_groups:
                    for p in gr["params"]:
                        p.mul_(1.0 - gr["lr"] * gr["decoupled_wd"])
        opt.step()
        out.append(torch.cat([p.detach().reshape(-1) for p in ps]).numpy().copy())
    return np.stack(out), None


def float64_state(params):
    """float64 copies of the parameters, and their first and second moments at 0."""
    ps = [p.double().clone() for p in params]
    return ps, [torch.zeros_like(p) for p in ps], [torch.zeros_like(p) for p in ps]


def ref_lamb(cfg, shapes, params, grads):
    """LAMB (You et al. 2019, Algorithm 2, phi = identity), per tensor, in torch ops."""
    groups = groups_of(shapes)
    b1, b2, eps = f32(cfg.get("beta1", 0.9)), f32(cfg.get("beta2", 0.999)), f32(cfg.get("eps", 1e-6))
    lr, wd = f32(cfg["lr"]), f32(cfg["wd"])
    ps, ms, vs = float64_state(params)
    out = []
    for t in range(1, STEPS + 1):
        for k, (dec, lm) in enumerate(groups):
            g = grads[t - 1][k].double()
            ms[k] = b1 * ms[k] + (1 - b1) * g
            vs[k] = b2 * vs[k] + (1 - b2) * g * g
            m_hat, v_hat = ms[k] / (1 - b1 ** t), vs[k] / (1 - b2 ** t)
            u = m_hat / (v_hat.sqrt() + eps) + (wd if dec else 0.0) * ps[k]
            pn, un = ps[k].norm().item(), u.norm().item()
            trust = pn / un if pn > 0 and un > 0 else 1.0
            ps[k] = ps[k] - lr * lm * trust * u
        out.append(torch.cat([p.reshape(-1) for p in ps]).numpy().copy())
    return np.stack(out), None


def ref_lion(cfg, shapes, params, grads):
    """Lion (Chen et al. 2023, Algorithm 2), in torch ops; also the mask of ambiguous signs."""
    groups = groups_of(shapes)
    b1, b2 = f32(cfg.get("beta1", 0.9)), f32(cfg.get("beta2", 0.99))
    lr, wd = f32(cfg["lr"]), f32(cfg["wd"])
    ps = [p.double().clone() for p in params]
    ms = [torch.zeros_like(p) for p in ps]
    excluded = [torch.zeros_like(p, dtype=torch.bool) for p in ps]
    out, masks = [], []
    for t in range(1, STEPS + 1):
        for k, (dec, lm) in enumerate(groups):
            g = grads[t - 1][k].double()
            t1, t2 = b1 * ms[k], (1 - b1) * g
            c = t1 + t2
            excluded[k] |= (c.abs() <= 1e-5 * (t1.abs() + t2.abs())) & (c != 0)
            ps[k] = ps[k] - lr * lm * (torch.sign(c) + (wd if dec else 0.0) * ps[k])
            ms[k] = b2 * ms[k] + (1 - b2) * g
        out.append(torch.cat([p.reshape(-1) for p in ps]).numpy().copy())
        masks.append(torch.cat([e.reshape(-1) for e in excluded]).numpy().copy())
    return np.stack(out), np.stack(masks)


NS_A, NS_B, NS_C = f32(3.4445), f32(-4.7750), f32(2.0315)


def newton_schulz(u, steps=5, eps=1e-7):
    """Muon's orthogonalization of a 2-D float64 tensor (the quintic, on the wide orientation)."""
    x = u / (u.norm() + f32(eps))
    tall = x.shape[0] > x.shape[1]
    if tall:
        x = x.T
    for _ in range(steps):
        a = x @ x.T
        b = NS_B * a + NS_C * (a @ a)
        x = NS_A * x + b @ x
    return x.T if tall else x


def ref_muon(cfg, shapes, params, grads):
    """Muon for the matrices (2-D; 3-D: stacked matrices orthogonalized apart), AdamW for the rest."""
    groups = groups_of(shapes)
    mu, nesterov = f32(cfg.get("momentum", 0.95)), not cfg.get("muon_plain")
    b1, b2, eps = f32(cfg.get("beta1", 0.9)), f32(cfg.get("beta2", 0.95)), f32(cfg.get("eps", 1e-8))
    lr, wd, amult = f32(cfg["lr"]), f32(cfg["wd"]), f32(cfg.get("adamw_lr_mult", 1.0))
    ps, ms, vs = float64_state(params)
    out = []
    for t in range(1, STEPS + 1):
        for k, (dec, lm) in enumerate(groups):
            g = grads[t - 1][k].double()
            d = wd if dec else 0.0
            if muon_rows(shapes[k]) is None:  # AdamW (torch.optim.AdamW's arithmetic)
                ms[k] = b1 * ms[k] + (1 - b1) * g
                vs[k] = b2 * vs[k] + (1 - b2) * g * g
                step_lr = lr * amult * lm
                denom = (vs[k] / (1 - b2 ** t)).sqrt() + eps
                ps[k] = ps[k] * (1 - step_lr * d) - step_lr * (ms[k] / (1 - b1 ** t)) / denom
                continue
            ms[k] = mu * ms[k] + g
            u = g + mu * ms[k] if nesterov else ms[k]
            mats = u.reshape(-1, shapes[k][-2], shapes[k][-1])
            o = torch.stack([newton_schulz(m) for m in mats]).reshape(shapes[k])
            r, c = shapes[k][-2], shapes[k][-1]
            scale = max(1.0, r / c) ** 0.5 if cfg.get("muon_scale") == "orig" else 0.2 * max(r, c) ** 0.5
            ps[k] = ps[k] * (1 - lr * lm * d) - lr * lm * f32(scale) * o
        out.append(torch.cat([p.reshape(-1) for p in ps]).numpy().copy())
    return np.stack(out), None


def ref_adam_mini(cfg, shapes, params, grads):
    """Adam-mini (Zhang et al. 2024, Algorithm 1), in torch ops: per block v from the mean of g^2."""
    groups = groups_of(shapes)
    b1, b2, eps = f32(cfg.get("beta1", 0.9)), f32(cfg.get("beta2", 0.95)), f32(cfg.get("eps", 1e-8))
    lr, wd = f32(cfg["lr"]), f32(cfg["wd"])
    ps, ms, _ = float64_state(params)
    vs = [torch.zeros(len(mini_blocks(sh)), dtype=torch.float64) for sh in shapes]
    out = []
    for t in range(1, STEPS + 1):
        for k, (dec, lm) in enumerate(groups):
            g = grads[t - 1][k].double().reshape(-1)
            h = torch.empty_like(g)
            for b, (a, n) in enumerate(mini_blocks(shapes[k])):
                vs[k][b] = b2 * vs[k][b] + (1 - b2) * torch.mean(g[a:a + n] * g[a:a + n])
                h[a:a + n] = vs[k][b].sqrt() / (1 - b2 ** t) ** 0.5 + eps
            ms[k] = b1 * ms[k] + (1 - b1) * g.reshape(ms[k].shape)
            step = lr * lm
            ps[k] = ps[k] * (1 - step * (wd if dec else 0.0)) - (step / (1 - b1 ** t)) * ms[k] / h.reshape(ms[k].shape)
        out.append(torch.cat([p.reshape(-1) for p in ps]).numpy().copy())
    return np.stack(out), None


# Adam-mini's problems: qkv-like stacks, matrices of odd shapes, vectors (one over the int8 threshold)
MINI_SHAPE_SETS = [
    ([(3, 16, 8), (64, 48), (48,), (7,), (33, 5), (1,), (300, 20)], 21),
    ([(3, 24, 24), (129, 65), (4097,), (2, 3)], 22),
]

# Muon's problems: tall, wide, square, stacked (3 x 16 x 16, as qkv), and vectors for AdamW
MUON_SHAPE_SETS = [
    ([(96, 32), (32,), (24, 80), (7,), (48, 48), (3, 16, 16), (1,)], 11),
    ([(130, 40), (40,), (3, 24, 24), (33, 65), (5,)], 12),
    ([(128, 64), (5000,), (3, 48, 48), (64,)], 13),  # over the int8 size threshold (4096): quantized
    ([(4500,), (64, 96), (6000,), (3, 32, 32), (8,)], 14),  # two quantized AdamW tensors (v packed after one)
]


def ns_properties(binary, tmp):
    """test_optim --ns on random matrices U diag(s) V^T with s log-uniform in [0.05, 1]: the output's
    singular values lie in [0.5, 1.5] (the quintic's documented band is about [0.7, 1.2]), its singular
    vectors are the input's (|U^T X V - diag| tiny: Newton-Schulz is an odd matrix polynomial), and it is
    close to the polar factor U V^T (spectral distance <= 0.5). Returns the number of failures."""
    failures = 0
    g = torch.Generator().manual_seed(5)
    for rows, cols in [(64, 64), (128, 48), (40, 100), (3, 200), (256, 256)]:
        k = min(rows, cols)
        qa, _ = torch.linalg.qr(torch.randn(rows, k, generator=g, dtype=torch.float64))
        qb, _ = torch.linalg.qr(torch.randn(cols, k, generator=g, dtype=torch.float64))
        sv = torch.exp(torch.empty(k, dtype=torch.float64).uniform_(np.log(0.05), 0.0, generator=g))
        a = (qa * sv) @ qb.T
        fin, fout = os.path.join(tmp, "ns_in.bin"), os.path.join(tmp, "ns_out.bin")
        a.float().numpy().tofile(fin)
        subprocess.run([binary, "--ns", str(rows), str(cols), "--in", fin, "--out", fout], check=True)
        x = torch.from_numpy(np.fromfile(fout, dtype=np.float32).reshape(rows, cols)).double()
        s_out = torch.linalg.svdvals(x)
        inner = qa.T @ x @ qb
        off = (inner - torch.diag(torch.diagonal(inner))).abs().max().item()
        polar = torch.linalg.matrix_norm(x - qa @ qb.T, ord=2).item()
        ok = s_out.min().item() >= 0.5 and s_out.max().item() <= 1.5 and off <= 1e-4 and polar <= 0.5
        failures += 0 if ok else 1
        print("  newton-schulz %4d x %-4d singular values in [%.3f, %.3f], off-diagonal %.1e, |X - UV^T|_2 %.3f  %s"
              % (rows, cols, s_out.min().item(), s_out.max().item(), off, polar, "ok" if ok else "FAIL"))
    return failures


CONFIGS = [
    ("sgd momentum 0.9", {"kind": "sgd", "lr": 0.05, "wd": 0.1, "momentum": 0.9}, ref_torch_class),
    ("sgd nesterov", {"kind": "sgd", "lr": 0.05, "wd": 0.1, "momentum": 0.9, "nesterov": True}, ref_torch_class),
    ("sgd momentum 0.8 dampening 0.1", {"kind": "sgd", "lr": 0.05, "wd": 0.1, "momentum": 0.8, "dampening": 0.1},
     ref_torch_class),
    ("sgd plain", {"kind": "sgd", "lr": 0.05, "wd": 0.1, "momentum": 0.0}, ref_torch_class),
    ("adamw amsgrad", {"kind": "adamw", "lr": 1e-3, "wd": 0.1, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8,
                       "amsgrad": True}, ref_torch_class),
    ("adamw", {"kind": "adamw", "lr": 1e-3, "wd": 0.1, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8}, ref_torch_class),
    ("lamb", {"kind": "lamb", "lr": 1e-2, "wd": 0.01, "beta1": 0.9, "beta2": 0.999, "eps": 1e-6}, ref_lamb),
    ("lion", {"kind": "lion", "lr": 1e-3, "wd": 0.1, "beta1": 0.9, "beta2": 0.99}, ref_lion),
    ("muon", {"kind": "muon", "lr": 2e-2, "wd": 0.1, "momentum": 0.95, "adamw_lr_mult": 0.1}, ref_muon),
    ("muon plain, orig scale", {"kind": "muon", "lr": 2e-2, "wd": 0.1, "momentum": 0.9, "muon_plain": True,
                                "muon_scale": "orig"}, ref_muon),
    # low-precision state against the same float64 Muon (see MUON_LOWP_ATOL)
    ("muon bf16 state", {"kind": "muon", "lr": 2e-2, "wd": 0.1, "momentum": 0.95, "state": "bf16"}, ref_muon),
    ("muon int8 state", {"kind": "muon", "lr": 2e-2, "wd": 0.1, "momentum": 0.95, "state": "int8"}, ref_muon),
    ("muon 4bit state", {"kind": "muon", "lr": 2e-2, "wd": 0.1, "momentum": 0.95, "state": "4bit"}, ref_muon),
    ("adam-mini", {"kind": "adam-mini", "lr": 1e-3, "wd": 0.1, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8}, ref_adam_mini),
    ("adam-mini bf16 state", {"kind": "adam-mini", "lr": 1e-3, "wd": 0.1, "state": "bf16"}, ref_adam_mini),
    ("adam-mini int8 state", {"kind": "adam-mini", "lr": 1e-3, "wd": 0.1, "state": "int8"}, ref_adam_mini),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", required=True, help="the test_optim binary (make build/test_optim)")
    ap.add_argument("-v", action="store_true", help="print every case")
    a = ap.parse_args()
    torch.set_default_dtype(torch.float32)
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, cfg, ref in CONFIGS:
            worst, excl_total, n_total, failed_before = 0.0, 0, 0, failures
            sets = {"muon": MUON_SHAPE_SETS, "adam-mini": MINI_SHAPE_SETS}.get(cfg["kind"], SHAPE_SETS)
            for shapes, seed in sets:
                params, grads = make_data(shapes, seed)
                got = run_c(a.bin, cfg, shapes, params, grads, tmp).astype(np.float64)
                want, excluded = ref(cfg, shapes, params, grads)
                lr = f32(cfg["lr"])
                atol_lr = ATOL_LR
                if cfg["kind"] == "adam-mini" and cfg.get("state") in ADAMW_LOWP_ATOL:  # m as AdamW's, v exact
                    atol_lr = ADAMW_LOWP_ATOL[cfg["state"]]
                elif cfg.get("state") in MUON_LOWP_ATOL:  # per element: a Muon matrix's, or an AdamW tensor's
                    atol_lr = np.concatenate([np.full(int(np.prod(sh)), MUON_LOWP_ATOL[cfg["state"]]
                                                      if muon_rows(sh) is not None else ADAMW_LOWP_ATOL[cfg["state"]])
                                              for sh in shapes])
                for t in range(STEPS):
                    tol = RTOL * (t + 1) * np.abs(want[t]) + atol_lr * (t + 1) * lr
                    ratio = np.abs(got[t] - want[t]) / tol
                    if excluded is not None:
                        ratio = np.where(excluded[t], 0.0, ratio)
                    ratio = np.where(np.isnan(ratio), np.inf, ratio)
                    bad = np.nonzero(ratio > 1.0)[0]
                    if bad.size:
                        i = bad[0]
                        print("  %s, shapes %s, step %d: %d elements out of tolerance, first [%d] got %.9g want %.9g "
                              "tol %.3g" % (name, shapes, t + 1, bad.size, i, got[t][i], want[t][i], tol[i]))
                        failures += 1
                        break
                    worst = max(worst, float(ratio.max()))
                n = got.shape[1]
                n_total += n
                if excluded is not None:
                    excl_total += int(excluded[-1].sum())
            ok_excl = excl_total * 1000 < n_total
            if failures > failed_before:  # a step out of tolerance (printed above)
                worst = float("inf")
            if not ok_excl:
                failures += 1
            extra = " (%d of %d excluded: sign of ~0)" % (excl_total, n_total) if cfg["kind"] == "lion" else ""
            print("  %-32s vs %-28s worst err/tol %.3f%s  %s" % (
                name, "torch.optim" if ref is ref_torch_class else "torch ops (" + cfg["kind"] + " paper)", worst,
                extra, "ok" if worst <= 1.0 and ok_excl else "FAIL"))
        failures += ns_properties(a.bin, tmp)
    print("optim_ref: %s" % ("all passed" if failures == 0 else "%d FAILED" % failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

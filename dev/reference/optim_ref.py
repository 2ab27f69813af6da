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

# (shapes, seed): odd sizes, single elements, a tensor over the int8 threshold and LAMB's blocks
SHAPE_SETS = [
    ([(64, 48), (48,), (7,), (33, 5), (1,), (300, 20), (20,)], 1),
    ([(129, 65), (3,), (1, 1), (4097,), (2, 3)], 2),
    ([(10, 10), (100,), (1000, 3), (11,)], 3),
]


def f32(x):
    return float(np.float32(x))


def groups_of(shapes):
    """Per tensor: (weight decay on?, lr_mult). 2-D: decay; every third tensor: lr_mult 0.5."""
    return [(len(s) == 2, 0.5 if k % 3 == 2 else 1.0) for k, s in enumerate(shapes)]


def make_data(shapes, seed):
    g = torch.Generator().manual_seed(seed)
    params = [(torch.randn(s, generator=g) * 0.1 + (1.0 if len(s) == 1 and k % 2 else 0.0)).float()
              for k, s in enumerate(shapes)]
    grads = []
    for t in range(STEPS):
        scales = [10.0 ** (-4 + 2 * torch.rand(1, generator=g).item()) for _ in shapes]
        grads.append([(torch.randn(s, generator=g) * sc).float() for s, sc in zip(shapes, scales)])
    return params, grads


def run_c(binary, cfg, shapes, params, grads, tmp):
    groups = groups_of(shapes)
    segs = ",".join("%d:%r:%r" % (int(np.prod(s)), cfg["wd"] if dec else 0.0, lm) for s, (dec, lm) in zip(shapes, groups))
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


def ref_lamb(cfg, shapes, params, grads):
    """LAMB (You et al. 2019, Algorithm 2, phi = identity), per tensor, in torch ops."""
    groups = groups_of(shapes)
    b1, b2, eps = f32(cfg.get("beta1", 0.9)), f32(cfg.get("beta2", 0.999)), f32(cfg.get("eps", 1e-6))
    lr, wd = f32(cfg["lr"]), f32(cfg["wd"])
    ps = [p.double().clone() for p in params]
    ms = [torch.zeros_like(p) for p in ps]
    vs = [torch.zeros_like(p) for p in ps]
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
            worst, excl_total, n_total = 0.0, 0, 0
            for shapes, seed in SHAPE_SETS:
                params, grads = make_data(shapes, seed)
                got = run_c(a.bin, cfg, shapes, params, grads, tmp).astype(np.float64)
                want, excluded = ref(cfg, shapes, params, grads)
                lr = f32(cfg["lr"])
                for t in range(STEPS):
                    tol = RTOL * (t + 1) * np.abs(want[t]) + ATOL_LR * (t + 1) * lr
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
            if not ok_excl:
                failures += 1
            extra = " (%d of %d excluded: sign of ~0)" % (excl_total, n_total) if cfg["kind"] == "lion" else ""
            print("  %-32s vs %-28s worst err/tol %.3f%s  %s" % (
                name, "torch.optim" if ref is ref_torch_class else "torch ops (" + cfg["kind"] + " paper)", worst,
                extra, "ok" if worst <= 1.0 and ok_excl else "FAIL"))
    print("optim_ref: %s" % ("all passed" if failures == 0 else "%d FAILED" % failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

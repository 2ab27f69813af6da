"""adamw_torch.py: times PyTorch's CPU torch.optim.AdamW on GPT-2's parameter shapes (called by
adamw_bench.c in the same run). Prints 'torch_adamw_ms <median ms>'. Run with Debian's python3-torch.
Parameter groups as leanstep: weight decay on 2-D weights only. The fastest available
implementation is used (foreach=True where the installed version has it)."""
import argparse
import time
import torch

DESCS = {"d6": (6, 384), "d12": (12, 768), "d24": (24, 1024), "d36": (36, 1280), "d48": (48, 1600)}


def shapes(L, C, Vp=50304, maxT=1024):
    per_layer = [(C,), (C,), (3 * C, C), (3 * C,), (C, C), (C,), (C,), (C,), (4 * C, C), (4 * C,), (C, 4 * C), (C,)]
    out = [(Vp, C), (maxT, C)]
    for _ in range(L):
        out += per_layer
    return out + [(C,), (C,)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--desc", default="d12")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--threads", type=int, default=0)
    a = ap.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    L, C = DESCS[a.desc]
    params = [torch.nn.Parameter(torch.rand(s) * 0.01) for s in shapes(L, C)]
    for p in params:
        p.grad = torch.rand_like(p) * 0.001
    decay = [p for p in params if p.dim() == 2]
    no_decay = [p for p in params if p.dim() != 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
    try:
        opt = torch.optim.AdamW(groups, lr=1e-4, betas=(0.9, 0.95), eps=1e-8, foreach=True)
    except TypeError:
        opt = torch.optim.AdamW(groups, lr=1e-4, betas=(0.9, 0.95), eps=1e-8)
    times = []
    for r in range(a.repeats + 1):
        t0 = time.perf_counter()
        opt.step()
        t = time.perf_counter() - t0
        if r > 0:
            times.append(t)
    times.sort()
    print("torch_adamw_ms %.3f" % (1e3 * times[len(times) // 2]))


if __name__ == "__main__":
    main()

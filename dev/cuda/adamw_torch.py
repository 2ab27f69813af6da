#!/usr/bin/env python3
"""adamw_torch.py: times torch.optim.AdamW(fused=True) for dev/cuda/adamw.cu --bench --torch.

Builds the same tensors as the lab (GPT-2 124M's parameter list with --gpt2, else one tensor of n
elements), fp32 parameters, gradients and state, weight decay 0.1 on the 2-D tensors, and prints
one line: "torch_adamw_fused_ms <median ms per step>" (CUDA events, L2 flushed before each step).
Exits 3 with a reason when torch or a CUDA device is missing.
"""
import argparse
import sys


def gpt2_shapes(V=50304, C=768, L=12, T=1024):
    shapes = [(V, C), (T, C)]
    for _ in range(L):
        shapes += [(C,), (C,), (3 * C, C), (3 * C,), (C, C), (C,), (C,), (C,), (4 * C, C), (4 * C,), (C, 4 * C), (C,)]
    return shapes + [(C,), (C,)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=124475904, help="elements (one tensor) unless --gpt2")
    ap.add_argument("--gpt2", action="store_true", help="GPT-2 124M's parameter list")
    ap.add_argument("-r", "--repeats", type=int, default=20)
    args = ap.parse_args()
    try:
        import torch
    except ImportError as e:
        print(f"torch is not importable: {e}")
        return 3
    if not torch.cuda.is_available():
        print("torch sees no CUDA device")
        return 3
    shapes = gpt2_shapes() if args.gpt2 else [(args.n,)]
    gen = torch.Generator(device="cuda").manual_seed(0)
    params = []
    for s in shapes:
        p = torch.nn.Parameter(torch.randn(s, device="cuda", generator=gen) * 0.02)
        p.grad = torch.randn(s, device="cuda", generator=gen) * 1e-3
        params.append(p)
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    try:
        opt = torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.95), eps=1e-8, fused=True)
    except (TypeError, RuntimeError) as e:
        print(f"torch.optim.AdamW(fused=True) unavailable: {e}")
        return 3
    flush = torch.empty(2 * 64 * 2**20, dtype=torch.uint8, device="cuda")
    for _ in range(3):
        opt.step()
    times = []
    for _ in range(args.repeats):
        flush.zero_()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        opt.step()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    print(f"torch {torch.__version__}, {sum(p.numel() for p in params)} parameters in {len(params)} tensors")
    print(f"torch_adamw_fused_ms {times[len(times) // 2]:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

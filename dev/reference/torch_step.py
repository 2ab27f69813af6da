#!/usr/bin/env python3
"""torch_step.py: times one PyTorch training step of GPT-2 on a GPU, the peer of train_gpt2cu's step.

The same model and step as train_gpt2cu -e d12 -b 16 -t 1024: GPT-2 124M (vocabulary padded to
50304, tied embeddings), bf16 autocast with fp32 master parameters, causal attention through
F.scaled_dot_product_attention (flash), cross-entropy loss, gradient clipping at 1.0 and
torch.optim.AdamW(fused=True). Random tokens: the timing does not depend on the data.

Prints "torch_step_ms <median> tok_s <tokens per second> compiled <0|1>" after a table of the
timed steps. With --compile the model goes through torch.compile first (a minute or more).
Exits 3 with a reason when torch or a CUDA device is missing.

usage: torch_step.py [-b B] [-t T] [-n STEPS] [--compile]
"""
import argparse
import math
import statistics
import sys
import time


def build_model(torch, L, C, NH, V, T):
    nn = torch.nn
    F = torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(C)
            self.qkv = nn.Linear(C, 3 * C)
            self.proj = nn.Linear(C, C)
            self.ln2 = nn.LayerNorm(C)
            self.fc = nn.Linear(C, 4 * C)
            self.fcproj = nn.Linear(4 * C, C)

        def forward(self, x):
            B, T_, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
            q, k, v = (t.view(B, T_, NH, C // NH).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(B, T_, C))
            return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(V, C)
            self.wpe = nn.Embedding(T, C)
            self.blocks = nn.ModuleList([Block() for _ in range(L)])
            self.lnf = nn.LayerNorm(C)

        def forward(self, idx, targets):
            pos = torch.arange(idx.shape[1], device=idx.device)
            x = self.wte(idx) + self.wpe(pos)
            for b in self.blocks:
                x = b(x)
            logits = self.lnf(x) @ self.wte.weight.t()  # tied output head
            return F.cross_entropy(logits.float().view(-1, V), targets.view(-1))

    return GPT()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-b", type=int, default=16)
    ap.add_argument("-t", type=int, default=1024)
    ap.add_argument("-n", type=int, default=20, help="timed steps (after 5 warm-up steps)")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model first")
    a = ap.parse_args()
    try:
        import torch
    except ImportError as e:
        print(f"torch is not importable: {e}")
        return 3
    if not torch.cuda.is_available():
        print("torch sees no CUDA device")
        return 3
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    dev = "cuda"
    L, C, NH, V = 12, 768, 12, 50304
    model = build_model(torch, L, C, NH, V, 1024).to(dev)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    step_model = torch.compile(model) if a.compile else model
    idx = torch.randint(0, 50257, (a.b, a.t), device=dev)
    tgt = torch.randint(0, 50257, (a.b, a.t), device=dev)
    times = []
    for i in range(5 + a.n):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
            loss = step_model(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        ms = (time.perf_counter() - t0) * 1e3
        if i >= 5:
            times.append(ms)
        if not math.isfinite(loss.item()):
            print(f"step {i}: loss is not finite")
            return 1
    med = statistics.median(times)
    print(f"torch {torch.__version__}, GPU {torch.cuda.get_device_name()}, B={a.b} T={a.t}, {a.n} timed steps")
    print(f"ms per step: min {min(times):.2f} median {med:.2f} max {max(times):.2f}")
    print(f"torch_step_ms {med:.3f} tok_s {a.b * a.t / med * 1e3:.0f} compiled {int(a.compile)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

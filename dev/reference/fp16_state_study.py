#!/usr/bin/python3
"""
fp16_state_study.py: can AdamW's m and v be stored in fp16 (`--opt-state fp16`), and is
it true that "fp16 momentum needs beta1 > 0.9 to avoid underflow"?

Trains GPT-2 (default: d12, 124M parameters, the trainers' random init) with fp32 AdamW on
TinyShakespeare and keeps, beside the real state, shadow states that are stored in fp16 after every
step (round to nearest, then read back for the next step: what a kernel storing fp16 would see),
for several beta1 (beta2 0.95), in three layouts:
  plain    m and v as fp16
  sqrt     m as fp16, v stored as sqrt(v) (the same dynamic range as m and the gradients)
  scaled   m * 2^14 and sqrt(v) * 2^14 as fp16: with the gradients clipped to norm <= 1 every |g|,
           |m| and sqrt(v) is <= 1, so nothing overflows (65504) and fp16's normal range starts at
           6.1e-5 / 2^14 = 3.7e-9 instead of 6.1e-5
For each, after the last step, against the fp32 shadow of the same beta1:
  m lost      the fraction of the elements whose fp32 m is not 0 where the fp16 one is 0
  m coarse    the fraction whose fp16 m is off by more than 2^-9 relative (fp16 keeps 2^-11:
              these lost bits to subnormals, or stagnated: increments under half an ulp vanish)
  v lost      the same for v (plain: v itself; sqrt, scaled: sqrt(v))
  update err  the relative L2 error of the update direction m_hat / (sqrt(v_hat) + eps)
and the gradients' magnitudes (the median |g| and the fraction under fp16's smallest normal).

  /usr/bin/python3 dev/reference/fp16_state_study.py --train data/tinyshakespeare/tiny_shakespeare_train.bin
      [--model d12 | --layers L --channels C --heads H] [--steps 20] [--batch 4] [--seq 64]
"""
import argparse
import math
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt2_ref import Config, gpt2_forward, gpt2_loss, init_params, read_shard, set_threads  # noqa: E402

SCALE = 2.0 ** 14
FP16_MIN_NORMAL = 2.0 ** -14


def to_fp16(x):
    """x as fp16 storage (round to nearest even), read back as fp32."""
    return x.half().float()


class Shadow:
    """The state of one (beta1, layout) stored in fp16 (m, and v or sqrt(v), as stored values)."""

    def __init__(self, n, layout):
        self.layout = layout
        self.m = torch.zeros(n, dtype=torch.float16)
        self.v = torch.zeros(n, dtype=torch.float16)

    def step(self, g, beta1, beta2):
        s = SCALE if self.layout == "scaled" else 1.0
        m = self.m.float() / s
        m.mul_(beta1).add_(g, alpha=1.0 - beta1)
        self.m = (m * s).half()
        if self.layout == "plain":
            v = self.v.float()
            v.mul_(beta2).addcmul_(g, g, value=1.0 - beta2)
            self.v = v.half()
        else:
            r = self.v.float() / s
            v = r * r
            v.mul_(beta2).addcmul_(g, g, value=1.0 - beta2)
            self.v = (v.sqrt() * s).half()

    def read(self):
        """(m, v) in fp32 units."""
        s = SCALE if self.layout == "scaled" else 1.0
        m = self.m.float() / s
        v = self.v.float() if self.layout == "plain" else (self.v.float() / s) ** 2
        return m, v


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--train", required=True, help="a token shard (make data)")
    ap.add_argument("--model", default="d12", help="d12 or custom (then --layers/--channels/--heads)")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--channels", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--lr", type=float, default=6e-4)
    ap.add_argument("--beta1", type=float, nargs="+", default=[0.8, 0.9, 0.95, 0.99])
    ap.add_argument("--beta2", type=float, default=0.95)
    ap.add_argument("--eps", type=float, default=1e-8)
    a = ap.parse_args()
    set_threads()
    cfg = Config(a.layers, a.channels, a.heads, 1024, 50257)
    params = init_params(cfg, 42)
    for p in params.values():
        p.requires_grad_(True)
    names = list(params.keys())
    n = sum(params[k].numel() for k in names)
    tokens = read_shard(a.train)
    B, T = a.batch, a.seq
    layouts = ("plain", "sqrt", "scaled")
    m32 = {b1: torch.zeros(n) for b1 in a.beta1}
    v32 = torch.zeros(n)
    shadows = {(b1, lay): Shadow(n, lay) for b1 in a.beta1 for lay in layouts}
    # the real training: fp32 AdamW with beta1 0.9 (its own state), clip 1.0
    opt = torch.optim.AdamW([params[k] for k in names], lr=a.lr, betas=(0.9, a.beta2), eps=a.eps, weight_decay=0.0)
    print("fp16 AdamW state study: %s (%d parameters), B=%d T=%d, %d steps, lr %g, beta2 %g, eps %g, clip 1.0"
          % (a.model, n, B, T, a.steps, a.lr, a.beta2, a.eps))
    t0 = time.time()
    for step in range(1, a.steps + 1):
        off = (step - 1) * B * T
        x = tokens[off:off + B * T + 1]
        inputs, targets = x[:-1].view(B, T), x[1:].view(B, T)
        for p in params.values():
            p.grad = None
        loss = gpt2_loss(gpt2_forward(cfg, params, inputs), targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_([params[k] for k in names], 1.0)
        g = torch.cat([params[k].grad.reshape(-1) for k in names])
        for b1 in a.beta1:
            m32[b1].mul_(b1).add_(g, alpha=1.0 - b1)
        v32.mul_(a.beta2).addcmul_(g, g, value=1.0 - a.beta2)
        for (b1, _), sh in shadows.items():
            sh.step(g, b1, a.beta2)
        opt.step()
        print("step %d: loss %.4f (%.0f s)" % (step, loss.item(), time.time() - t0), flush=True)
    gabs = g.abs()
    print("last step's clipped gradients: median |g| %.3g, max %.3g; %.1f%% under fp16's smallest normal 6.1e-5, %.1f%% under "
          "its smallest subnormal 6.0e-8" % (gabs.median().item(), gabs.max().item(),
                                           100.0 * (gabs < FP16_MIN_NORMAL).float().mean().item(),
                                           100.0 * (gabs < 2.0 ** -24).float().mean().item()))
    print("%-6s %-7s %9s %9s %9s %11s" % ("beta1", "layout", "m lost", "m coarse", "v lost", "update err"))
    bc2 = 1.0 - a.beta2 ** a.steps
    for b1 in a.beta1:
        bc1 = 1.0 - b1 ** a.steps
        ref_m = m32[b1]
        u_ref = (ref_m / bc1) / ((v32 / bc2).sqrt() + a.eps)
        nz_m, nz_v = ref_m != 0, v32 != 0
        for lay in layouts:
            m, v = shadows[(b1, lay)].read()
            lost_m = ((m == 0) & nz_m).float().sum().item() / max(1, nz_m.sum().item())
            coarse_m = (((m - ref_m).abs() > 2.0 ** -9 * ref_m.abs()) & nz_m).float().sum().item() / max(1, nz_m.sum().item())
            lost_v = ((v == 0) & nz_v).float().sum().item() / max(1, nz_v.sum().item())
            u = (m / bc1) / ((v / bc2).sqrt() + a.eps)
            err = ((u - u_ref).norm() / u_ref.norm()).item()
            print("%-6g %-7s %8.2f%% %8.2f%% %8.2f%% %11.3g" % (b1, lay, 100 * lost_m, 100 * coarse_m, 100 * lost_v, err))
    return 0


if __name__ == "__main__":
    sys.exit(main())

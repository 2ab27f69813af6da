#!/usr/bin/python3
"""
gpt2_ref.py: the independent PyTorch reference that leanstep's C/CUDA trainers are tested against.

A self-contained GPT-2 (no transformers), all float32, reading and writing llm.c's binary formats:
  init   writes a random model file with a fully specified initialisation (seeded torch.Generator,
         tensors in file order), so a C reimplementation of mt19937 + normal_ can match it bit for bit.
  perturb  rewrites a model file with random biases and layernorm gains and biases (init leaves
         them 0 and 1, where a trainer that ignores them, or reads another layer's, is still exact).
  state  loads a model file, runs forward/backward on a seeded random batch and writes llm.c's
         debug-state file (inputs, targets, logits, loss, gradients), then appends the losses of
         `--steps` AdamW steps on that batch.
  train  trains on one batch with a learning-rate schedule and writes each step's loss, gradient
         norm and lr and the val losses (JSON): the training loop's reference.
  check  self-tests: `init` bit for bit against a written-out spec of its RNG (mt19937 + Box-Muller
         with libm), model file I/O, the GPT-2 forward and backward against a second, naive
         float64 implementation in this file (plus a finite-difference check of the naive one),
         and the hand-written AdamW against torch.optim.AdamW. Exits 1 on any failure.

Run it with Debian's /usr/bin/python3 (PyTorch 1.13). Formats and numerics are documented in
dev/reference/README.md; the contract lives in the functions below, which say what they assume.
To add a check: write a check_* function that raises CheckFailed and list it in CHECKS.
"""
import argparse
import ctypes
import ctypes.util
import json
import math
import os
import subprocess
import sys
import tempfile
import time

# `init` pins PyTorch's scalar CPU kernels, which must happen before torch is imported. Why: for a
# contiguous float32 tensor of >= 16 elements, normal_ fills uniforms and transforms them with
# Box-Muller; the AVX2/AVX512 kernels use SLEEF's vectorised logf/sincosf, which differ from libm
# by ulps, the scalar kernel uses libm. Pinned, the init is the same on every machine and a C
# reimplementation with libm can match it bit for bit (see check_init_rng).
if len(sys.argv) > 1 and sys.argv[1] == "init":
    os.environ["ATEN_CPU_CAPABILITY"] = "default"

import numpy as np
import torch
import torch.nn.functional as F

MODEL_MAGIC = 20240326
MODEL_VERSION_FP32 = 3
MODEL_VERSION_BF16 = 5
STATE_MAGIC = 20240327
STATE_VERSION = 2
HEADER_INTS = 256
HEADER_BYTES = HEADER_INTS * 4
LN_EPS = 1e-5
INIT_STD = 0.02

# The 16 parameter tensors in file order. Shapes in PyTorch order; linear weights are (out, in).
PARAM_NAMES = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
               "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"]
# AdamW applies weight decay to these 2-D weight matrices only, never to layernorm params or biases.
DECAYED = {"wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw"}
LN_WEIGHTS = {"ln1w", "ln2w", "lnfw"}


class RefError(Exception):
    """A user-facing error (bad file, bad flag): printed as one line, exit status 1."""


class CheckFailed(Exception):
    """A self-test in `check` mode did not hold."""


class Config:
    def __init__(self, n_layer, channels, n_head, max_seq, vocab, padded_vocab=None):
        self.L, self.C, self.H, self.maxT, self.V = n_layer, channels, n_head, max_seq, vocab
        self.Vp = padded_vocab if padded_vocab is not None else (vocab + 127) // 128 * 128

    def validate(self, where):
        for name, val in (("layers", self.L), ("channels", self.C), ("heads", self.H),
                          ("max_seq", self.maxT), ("vocab", self.V)):
            if val <= 0:
                raise RefError(f"{where}: {name} must be positive, got {val}")
        if self.C % self.H != 0:
            raise RefError(f"{where}: channels {self.C} not divisible by heads {self.H}")
        if self.Vp < self.V:
            raise RefError(f"{where}: padded vocab {self.Vp} < vocab {self.V}")

    def shapes(self):
        """(name, shape) of the 16 tensors in file order."""
        L, C, maxT, Vp = self.L, self.C, self.maxT, self.Vp
        return [("wte", (Vp, C)), ("wpe", (maxT, C)), ("ln1w", (L, C)), ("ln1b", (L, C)),
                ("qkvw", (L, 3 * C, C)), ("qkvb", (L, 3 * C)), ("attprojw", (L, C, C)),
                ("attprojb", (L, C)), ("ln2w", (L, C)), ("ln2b", (L, C)), ("fcw", (L, 4 * C, C)),
                ("fcb", (L, 4 * C)), ("fcprojw", (L, C, 4 * C)), ("fcprojb", (L, C)),
                ("lnfw", (C,)), ("lnfb", (C,))]

    def num_params(self):
        return sum(math.prod(s) for _, s in self.shapes())


# ----------------------------------------------------------------------------------------------
# model file I/O

def init_params(cfg, seed):
    """The initialisation contract (dev/reference/README.md): one torch.Generator seeded with
    `seed`, walked tensor by tensor in file order and layer by layer inside each tensor. Layernorm weights = 1 and
    all biases = 0 consume no random numbers; each weight block is a contiguous float32 tensor filled
    with .normal_(0, std, generator=g): wte's first V rows as one (V, C) block (rows V..Vp-1 stay
    zero), wpe as one (maxT, C) block, and the per-layer matrices one (out, in) block per layer.
    std = 0.02, except attprojw/fcprojw: 0.02 / sqrt(2 L) (float64, passed as a Python float)."""
    g = torch.Generator()
    g.manual_seed(seed)
    proj_std = INIT_STD / math.sqrt(2.0 * cfg.L)
    params = {}
    for name, shape in cfg.shapes():
        t = torch.zeros(shape, dtype=torch.float32)
        if name in LN_WEIGHTS:
            t.fill_(1.0)
        elif name == "wte":
            block = torch.empty((cfg.V, cfg.C), dtype=torch.float32)
            block.normal_(0.0, INIT_STD, generator=g)
            t[:cfg.V] = block
        elif name == "wpe":
            t.normal_(0.0, INIT_STD, generator=g)
        elif name in ("qkvw", "fcw", "attprojw", "fcprojw"):
            std = proj_std if name in ("attprojw", "fcprojw") else INIT_STD
            for l in range(cfg.L):
                t[l].normal_(0.0, std, generator=g)  # t[l] is a contiguous (out, in) block
        params[name] = t
    return params


def write_model(path, cfg, params):
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[:8] = [MODEL_MAGIC, MODEL_VERSION_FP32, cfg.maxT, cfg.V, cfg.L, cfg.H, cfg.C, cfg.Vp]
    with open(path, "wb") as f:
        f.write(header.tobytes())
        for name, shape in cfg.shapes():
            assert tuple(params[name].shape) == shape, name
            f.write(params[name].detach().contiguous().numpy().astype("<f4").tobytes())


def read_model(path):
    """Reads a version 3 (fp32) or 5 (bf16, converted exactly to float32) model file. The file size
    must equal the header plus the tensors that its header implies."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            raw = f.read(HEADER_BYTES)
            if len(raw) < HEADER_BYTES:
                raise RefError(f"{path}: too short for a model header ({size} bytes)")
            h = np.frombuffer(raw, dtype="<i4")
            if h[0] != MODEL_MAGIC:
                raise RefError(f"{path}: bad magic {h[0]} (want {MODEL_MAGIC}); not an llm.c model file")
            if h[1] not in (MODEL_VERSION_FP32, MODEL_VERSION_BF16):
                raise RefError(f"{path}: unsupported version {h[1]} (want 3 = fp32 or 5 = bf16)")
            cfg = Config(int(h[4]), int(h[6]), int(h[5]), int(h[2]), int(h[3]), int(h[7]))
            cfg.validate(path)
            elem = 4 if h[1] == MODEL_VERSION_FP32 else 2
            want = HEADER_BYTES + cfg.num_params() * elem
            if size != want:
                raise RefError(f"{path}: size {size} bytes, but its header implies {want}")
            params = {}
            for name, shape in cfg.shapes():
                n = math.prod(shape)
                if elem == 4:
                    a = np.fromfile(f, dtype="<f4", count=n)
                else:  # bf16 is the top half of a float32
                    a = (np.fromfile(f, dtype="<u2", count=n).astype(np.uint32) << 16).view(np.float32)
                params[name] = torch.from_numpy(a.astype(np.float32, copy=False)).reshape(shape)
    except OSError as e:
        raise RefError(f"{path}: {e.strerror}") from None
    return cfg, params


# ----------------------------------------------------------------------------------------------
# GPT-2, the reference forward (float32, autograd for backward)

# Bugs `state --inject-bug` plants in the forward pass, so that a test can show that the trainers'
# checks fail on a reference that is wrong in each of these ways (make test-ref-mutants).
INJECTABLE_BUGS = {
    "ignore-ln-weights": "every layernorm ignores its gain and bias",
    "layer0-params": "every layer uses layer 0's layernorm parameters and biases",
    "ignore-biases": "every linear layer ignores its bias",
}


def gpt2_forward(cfg, P, inputs, bug=None):
    """inputs (B,T) int64 -> logits (B,T,V). The lm_head is tied to wte's first V rows.
    bug: None, or one of INJECTABLE_BUGS (tests of the tests only)."""
    B, T = inputs.shape
    C, H, hs = cfg.C, cfg.H, cfg.C // cfg.H
    causal = torch.ones(T, T, dtype=torch.bool).triu(1)  # True above the diagonal: masked
    # Per-layer views through one unbind per tensor: indexing P[name][l] in the loop would make
    # backward materialise a full-size zero gradient per layer (L times the work).
    Pl = {k: P[k].unbind(0) for k in PARAM_NAMES if P[k].dim() > 1 and k not in ("wte", "wpe")}
    if bug is not None:
        P = dict(P)
        small = {"ln1w", "ln1b", "ln2w", "ln2b", "qkvb", "attprojb", "fcb", "fcprojb"}
        for k in small:
            if bug == "ignore-ln-weights" and k.startswith("ln"):
                Pl[k] = [None] * cfg.L
            elif bug == "layer0-params":
                Pl[k] = [Pl[k][0]] * cfg.L
            elif bug == "ignore-biases" and not k.startswith("ln"):
                Pl[k] = [None] * cfg.L
        if bug == "ignore-ln-weights":
            P["lnfw"], P["lnfb"] = None, None
    x = F.embedding(inputs, P["wte"]) + P["wpe"][:T]                      # (B,T,C)
    for l in range(cfg.L):
        h = F.layer_norm(x, (C,), Pl["ln1w"][l], Pl["ln1b"][l], LN_EPS)
        qkv = F.linear(h, Pl["qkvw"][l], Pl["qkvb"][l])                    # (B,T,3C)
        q, k, v = (t.view(B, T, H, hs).transpose(1, 2) for t in qkv.split(C, dim=2))  # (B,H,T,hs)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))            # (B,H,T,T)
        att = att.masked_fill(causal, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + F.linear(y, Pl["attprojw"][l], Pl["attprojb"][l])
        h = F.layer_norm(x, (C,), Pl["ln2w"][l], Pl["ln2b"][l], LN_EPS)
        h = F.gelu(F.linear(h, Pl["fcw"][l], Pl["fcb"][l]), approximate="tanh")  # (B,T,4C)
        x = x + F.linear(h, Pl["fcprojw"][l], Pl["fcprojb"][l])
    x = F.layer_norm(x, (C,), P["lnfw"], P["lnfb"], LN_EPS)
    return F.linear(x, P["wte"][:cfg.V])                                    # (B,T,V)


def gpt2_loss(logits, targets):
    """Mean cross-entropy over all B*T positions."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


# ----------------------------------------------------------------------------------------------
# the naive second implementation, for `check` only: explicit loops, math spelled out differently

def naive_forward(cfg, P, inputs):
    B, T = inputs.shape
    C, H, hs = cfg.C, cfg.H, cfg.C // cfg.H

    def layernorm(x, w, b):
        mu = x.sum(-1, keepdim=True) / C
        d = x - mu
        var = (d * d).sum(-1, keepdim=True) / C
        return d / torch.sqrt(var + LN_EPS) * w + b

    def linear(x, w, b):
        return torch.einsum("bti,oi->bto", x, w) + b

    def gelu(x):
        inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)
        return x * (0.5 + 0.5 * torch.tanh(inner))

    x = P["wte"][inputs] + P["wpe"][:T].unsqueeze(0)
    for l in range(cfg.L):
        qkv = linear(layernorm(x, P["ln1w"][l], P["ln1b"][l]), P["qkvw"][l], P["qkvb"][l])
        rows = []
        for b in range(B):
            heads = []
            for hd in range(H):
                q = qkv[b, :, hd * hs:(hd + 1) * hs]
                k = qkv[b, :, C + hd * hs:C + (hd + 1) * hs]
                v = qkv[b, :, 2 * C + hd * hs:2 * C + (hd + 1) * hs]
                outs = []
                for t in range(T):  # position t attends to 0..t
                    s = (k[:t + 1] * q[t]).sum(-1) / math.sqrt(hs)
                    e = torch.exp(s - s.max())
                    outs.append((e.unsqueeze(1) * v[:t + 1]).sum(0) / e.sum())
                heads.append(torch.stack(outs))                      # (T,hs)
            rows.append(torch.cat(heads, dim=1))                     # (T,C)
        y = torch.stack(rows)                                        # (B,T,C)
        x = x + linear(y, P["attprojw"][l], P["attprojb"][l])
        h = gelu(linear(layernorm(x, P["ln2w"][l], P["ln2b"][l]), P["fcw"][l], P["fcb"][l]))
        x = x + linear(h, P["fcprojw"][l], P["fcprojb"][l])
    x = layernorm(x, P["lnfw"], P["lnfb"])
    return torch.einsum("btc,vc->btv", x, P["wte"][:cfg.V])


def naive_loss(logits, targets):
    m = logits.max(-1, keepdim=True).values
    lse = m.squeeze(-1) + torch.log(torch.exp(logits - m).sum(-1))
    picked = torch.gather(logits, -1, targets.unsqueeze(-1)).squeeze(-1)
    return (lse - picked).mean()


# ----------------------------------------------------------------------------------------------
# AdamW, written out so the contract is explicit

class AdamW:
    """The update of step t = step + 1, all tensor math in float32 (Python-float coefficients are
    rounded to float32 when they meet a tensor, as PyTorch does):
      n = sqrt(sum over all params of sum(g^2)), accumulated in float64
      if grad_clip > 0 and n > grad_clip: g = g * float32(grad_clip / n)
      m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
      m_hat = m / (1 - beta1^t);  v_hat = v / (1 - beta2^t)
      p = p - lr (m_hat / (sqrt(v_hat) + eps) + wd p), wd = weight_decay for DECAYED names, else 0.
    Constant lr."""

    def __init__(self, params, lr, beta1, beta2, eps, weight_decay, grad_clip):
        self.params = params
        self.lr, self.beta1, self.beta2, self.eps = lr, beta1, beta2, eps
        self.weight_decay, self.grad_clip = weight_decay, grad_clip
        self.m = {k: torch.zeros_like(p) for k, p in params.items()}
        self.v = {k: torch.zeros_like(p) for k, p in params.items()}

    @staticmethod
    def grad_norm(params):
        """sqrt(sum of per-tensor squared L2 norms), each computed in float64."""
        return math.sqrt(sum(float(torch.linalg.vector_norm(p.grad, dtype=torch.float64)) ** 2
                             for p in params.values()))

    def clipped_grads(self):
        """(the global norm, each parameter's gradient after the clip)."""
        norm = self.grad_norm(self.params)
        scale = self.grad_clip / norm if self.grad_clip > 0 and norm > self.grad_clip else None
        return norm, {k: p.grad if scale is None else p.grad * scale for k, p in self.params.items()}

    def adamw_tensor(self, name, p, g, t):
        """One tensor's AdamW update at step t (in-place ops: a few passes over its memory)."""
        m, v = self.m[name], self.v[name]
        m.mul_(self.beta1).add_(g, alpha=1.0 - self.beta1)
        v.mul_(self.beta2).addcmul_(g, g, value=1.0 - self.beta2)
        upd = (m / (1.0 - self.beta1 ** t)).div_((v / (1.0 - self.beta2 ** t)).sqrt_().add_(self.eps))
        if name in DECAYED:
            upd.add_(p, alpha=self.weight_decay)
        p.add_(upd, alpha=-self.lr)

    @torch.no_grad()
    def step(self, step):
        """Updates the params from their .grad; returns the global grad norm before clipping."""
        norm, grads = self.clipped_grads()
        for name, p in self.params.items():
            self.adamw_tensor(name, p, grads[name], step + 1)
        return norm


# Muon, written out from its published description (llmc/optim/muon.h is the C side)

MUON_MATRICES = ("qkvw", "attprojw", "fcw", "fcprojw")  # per layer (L, rows, cols); qkv: 3 stacked
NS_COEFFS = (3.4445, -4.7750, 2.0315)


def newton_schulz64(u, steps=5, eps=1e-7):
    """The quintic Newton-Schulz iteration in float64 on the wide orientation of u (2-D)."""
    a, b, c = (float(np.float32(k)) for k in NS_COEFFS)  # the C side's float32 constants
    x = u.double() / (float(torch.linalg.matrix_norm(u.double())) + float(np.float32(eps)))
    tall = x.shape[0] > x.shape[1]
    if tall:
        x = x.T
    for _ in range(steps):
        A = x @ x.T
        x = a * x + (b * A + c * (A @ A)) @ x
    return x.T if tall else x


class Muon(AdamW):
    """Muon for the transformer blocks' weight matrices, AdamW (the class above) for the rest, the
    same clip. Per layer matrix W with gradient g: B = momentum B + g; U = g + momentum B (Nesterov);
    X = Newton-Schulz(U) in float64 (qkv: q, k, v apart); W = W (1 - lr wd) - lr s X, with
    s = 0.2 sqrt(max(rows, cols)). Momentum and parameters in float32."""

    def __init__(self, params, lr, momentum, beta1, beta2, eps, weight_decay, grad_clip):
        super().__init__(params, lr, beta1, beta2, eps, weight_decay, grad_clip)
        self.momentum = momentum

    @torch.no_grad()
    def step(self, step):
        norm, grads = self.clipped_grads()
        for name, p in self.params.items():
            g, m = grads[name], self.m[name]
            if name not in MUON_MATRICES:
                self.adamw_tensor(name, p, g, step + 1)
                continue
            m.mul_(self.momentum).add_(g)
            u = g + self.momentum * m
            parts = 3 if name == "qkvw" else 1
            L, rows, cols = u.shape
            r = rows // parts
            x = torch.stack([newton_schulz64(mat) for mat in u.reshape(L * parts, r, cols)]).reshape(u.shape)
            s = float(np.float32(0.2 * math.sqrt(max(r, cols))))
            wd = self.weight_decay if name in DECAYED else 0.0
            p.mul_(1.0 - self.lr * wd).add_(x.float(), alpha=-self.lr * s)
        return norm


# Adam-mini, written out from its published description (Zhang et al. 2024; llmc/params.h holds the
# C side's partition)

class AdamMini(AdamW):
    """AdamW's m per element, one v per block: the block's mean of g^2, v = beta2 v + (1 - beta2)
    mean; p = p - lr (m_hat / (sqrt(v_hat) + eps) + wd p). The blocks, from the names and shapes
    (Transformer partition): wte, wpe per row (a token's, a position's); qkvw per layer: q and k per
    head (C / H rows each), v per row; attprojw, fcw, fcprojw per layer per row (an output neuron);
    a vector per layer (lnf: the whole tensor). The means in float64."""

    def __init__(self, params, heads, lr, beta1, beta2, eps, weight_decay, grad_clip):
        super().__init__(params, lr, beta1, beta2, eps, weight_decay, grad_clip)
        self.heads = heads
        self.v = {k: None for k in params}

    def block_means(self, name, g):
        """Each element's block mean of g^2 (float64, broadcast to g's shape)."""
        g2 = g.double() * g.double()
        if name == "qkvw":  # (L, 3C, C)
            L, rows, cols = g2.shape
            c = rows // 3
            qk = g2[:, :2 * c].reshape(L, 2 * self.heads, -1).mean(-1, keepdim=True)
            qk = qk.expand(L, 2 * self.heads, (c // self.heads) * cols).reshape(L, 2 * c, cols)
            return torch.cat([qk, g2[:, 2 * c:].mean(-1, keepdim=True).expand(L, c, cols)], dim=1)
        if g2.dim() == 1 or name in ("lnfw", "lnfb"):
            return g2.mean().expand(g2.shape)
        return g2.mean(-1, keepdim=True).expand(g2.shape)  # rows of matrices; a layer's vector

    @torch.no_grad()
    def step(self, step):
        norm, grads = self.clipped_grads()
        t = step + 1
        for name, p in self.params.items():
            g, m = grads[name], self.m[name]
            mean = self.block_means(name, g)
            v = (1.0 - self.beta2) * mean if self.v[name] is None else self.beta2 * self.v[name] + (1.0 - self.beta2) * mean
            self.v[name] = v
            m.mul_(self.beta1).add_(g, alpha=1.0 - self.beta1)
            upd = (m.double() / (1.0 - self.beta1 ** t)) / ((v / (1.0 - self.beta2 ** t)).sqrt() + self.eps)
            wd = self.weight_decay if name in DECAYED else 0.0
            p.add_((upd + wd * p.double()).float(), alpha=-self.lr)
        return norm


# ----------------------------------------------------------------------------------------------
# subcommands

def set_threads():
    torch.set_num_threads(len(os.sched_getaffinity(0)))


def cpu_capability():
    """The kernel set PyTorch dispatches to, e.g. 'NO AVX' (scalar) or 'AVX2'."""
    for line in torch.__config__.show().splitlines():
        if "CPU capability usage:" in line:
            return line.split(":", 1)[1].strip()
    return "unknown"


def cmd_init(a):
    t0 = time.time()
    cfg = Config(a.layers, a.channels, a.heads, a.max_seq, a.vocab)
    cfg.validate("init")
    if min(cfg.V * cfg.C, cfg.maxT * cfg.C, cfg.C * cfg.C) < 16:
        raise RefError("init: every random block (V*C, maxT*C, C*C) needs >= 16 elements "
                       "(smaller tensors take a different normal_ algorithm in PyTorch)")
    if cpu_capability() not in ("NO AVX", "DEFAULT"):
        raise RefError(f"init: PyTorch uses '{cpu_capability()}' kernels; set ATEN_CPU_CAPABILITY=default")
    write_model(a.out, cfg, init_params(cfg, a.seed))
    print(f"init: {a.out}: L={cfg.L} C={cfg.C} H={cfg.H} maxT={cfg.maxT} V={cfg.V} Vp={cfg.Vp} "
          f"params={cfg.num_params()} seed={a.seed} wall={time.time() - t0:.2f}s")


# Biases and layernorm biases ~ N(0, PERTURB_STD), layernorm gains ~ 1 + N(0, PERTURB_STD): large
# enough that ignoring any of them, or taking layer 0's for every layer, moves the loss by far more
# than the trainers' tolerance (docs/tests.md), small enough to leave the model an ordinary GPT-2.
PERTURB_STD = 0.1
PERTURBED = {"ln1w", "ln1b", "qkvb", "attprojb", "ln2w", "ln2b", "fcb", "fcprojb", "lnfw", "lnfb"}


def cmd_perturb(a):
    cfg, params = read_model(a.model)
    g = torch.Generator()
    g.manual_seed(a.seed)
    for name, shape in cfg.shapes():
        if name in PERTURBED:
            noise = torch.randn(shape, generator=g) * PERTURB_STD
            params[name] = (1.0 + noise) if name in LN_WEIGHTS else noise
    write_model(a.out, cfg, params)
    print(f"perturb: {a.out}: biases and layernorm parameters of {a.model} drawn with std {PERTURB_STD}, seed {a.seed}")


def cmd_generate(a):
    """Greedy continuation in float64 of <|endoftext|> (50256, or 0 for a smaller vocabulary) and
    the prompt's ids: a JSON line {"tokens": [...], "margin": the smallest gap between the two
    likeliest logits over the steps} (a gap near the trainers' rounding makes a comparison moot)."""
    cfg, params = read_model(a.model)
    P = {k: v.double() for k, v in params.items()}
    tokens = [50256 if cfg.V > 50256 else 0] + [int(x) for x in a.prompt.split(",") if x != ""]
    if any(t < 0 or t >= cfg.V for t in tokens) or a.length > cfg.maxT or len(tokens) >= a.length:
        raise RefError(f"generate: prompt ids outside the vocabulary, or no room in --length {a.length} (max {cfg.maxT})")
    margin = float("inf")
    with torch.no_grad():
        while len(tokens) < a.length:
            logits = gpt2_forward(cfg, P, torch.tensor([tokens], dtype=torch.int64))[0, -1]
            top2 = torch.topk(logits, 2).values
            margin = min(margin, float(top2[0] - top2[1]))
            tokens.append(int(torch.argmax(logits)))
    print(json.dumps({"tokens": tokens[1:], "margin": margin}))


def cmd_logits(a):
    """The next-token logits in float64 at every position of token sequences (--tokens: a JSON file,
    a list of lists of ids, each at most maxT long): a JSON line, per sequence a list with, per
    position t, [ids, logits] of the --top largest logits of the token after tokens[0..t] (largest
    first; the lower id first among equal values). A sampler's choices are checked against softmax(logits /
    temperature) over its top-k with these (dev/test/test_sample.py)."""
    import json
    cfg, params = read_model(a.model)
    P = {k: v.double() for k, v in params.items()}
    with open(a.tokens) as f:
        seqs = json.load(f)
    out = []
    with torch.no_grad():
        for seq in seqs:
            if not seq or len(seq) > cfg.maxT or any(t < 0 or t >= cfg.V for t in seq):
                raise RefError(f"logits: a sequence of {len(seq)} tokens, or ids outside the vocabulary (maxT {cfg.maxT})")
            logits = gpt2_forward(cfg, P, torch.tensor([seq], dtype=torch.int64))[0]
            vals, ids = torch.topk(logits, min(a.top + 1, cfg.V), dim=1)  # (one more: equals across the cut)
            rows = []
            for v, i in zip(vals.tolist(), ids.tolist()):
                top = sorted(zip(v, i), key=lambda e: (-e[0], e[1]))[:a.top]
                rows.append([[e[1] for e in top], [e[0] for e in top]])
            out.append(rows)
    print(json.dumps(out))


def cmd_hellaswag(a):
    """HellaSwag scoring in float64 of already tokenized examples (a JSON file: a list of
    {"ctx": [ids], "endings": [[ids] x 4], "label": k}): each ending after the context, its loss
    summed over its tokens; the answer is the lowest sum (acc) or mean (acc_norm), the first on a tie.
    Prints a JSON line {"acc": right, "acc_norm": right, "n": examples, "pred": [...], "pred_norm": [...]}."""
    cfg, params = read_model(a.model)
    P = {k: v.double() for k, v in params.items()}
    with open(a.examples) as f:
        examples = json.load(f)
    right = right_norm = 0
    preds, preds_norm = [], []
    with torch.no_grad():
        for ex in examples:
            ctx, sums, means = ex["ctx"], [], []
            for end in ex["endings"]:
                row = torch.tensor([ctx + end], dtype=torch.int64)
                logits = gpt2_forward(cfg, P, row[:, :-1])[0]
                losses = torch.nn.functional.cross_entropy(logits, row[0, 1:], reduction="none")
                s = float(losses[len(ctx) - 1:].sum())
                sums.append(s)
                means.append(s / len(end))
            p, pn = min(range(4), key=lambda i: (sums[i], i)), min(range(4), key=lambda i: (means[i], i))
            preds.append(p)
            preds_norm.append(pn)
            right += p == ex["label"]
            right_norm += pn == ex["label"]
    print(json.dumps({"acc": right, "acc_norm": right_norm, "n": len(examples), "pred": preds, "pred_norm": preds_norm}))


def make_batch(cfg, B, T, seed):
    """x = randint(0, V, (B, T+1)) from a Generator seeded with `seed`; inputs = x[:, :-1],
    targets = x[:, 1:]."""
    g = torch.Generator()
    g.manual_seed(seed)
    x = torch.randint(0, cfg.V, (B, T + 1), generator=g)
    return x[:, :-1].contiguous(), x[:, 1:].contiguous()


def cmd_state(a):
    t0 = time.time()
    cfg, params = read_model(a.model)
    if a.batch <= 0 or a.seq <= 0:
        raise RefError(f"--batch and --seq must be positive (got {a.batch}, {a.seq})")
    if a.seq > cfg.maxT:
        raise RefError(f"--seq {a.seq} exceeds the model's max_seq_len {cfg.maxT} ({a.model})")
    if a.steps < 1:
        raise RefError(f"--steps must be >= 1 (got {a.steps})")
    B, T = a.batch, a.seq
    inputs, targets = make_batch(cfg, B, T, a.seed)
    for p in params.values():
        p.requires_grad_(True)
    if a.optimizer == "muon":
        opt = Muon(params, a.lr, a.momentum, a.beta1, a.beta2, a.eps, a.weight_decay, a.grad_clip)
    elif a.optimizer == "adam-mini":
        opt = AdamMini(params, cfg.H, a.lr, a.beta1, a.beta2, a.eps, a.weight_decay, a.grad_clip)
    else:
        opt = AdamW(params, a.lr, a.beta1, a.beta2, a.eps, a.weight_decay, a.grad_clip)
    losses, norms = [], []
    tmp = a.out + ".tmp"
    with open(tmp, "wb") as f:
        for step in range(a.steps):
            for p in params.values():
                p.grad = None
            logits = gpt2_forward(cfg, params, inputs, a.inject_bug)
            loss = gpt2_loss(logits, targets)
            loss.backward()
            for p in params.values():  # a parameter an injected bug ignores has no gradient
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
            losses.append(loss.item())
            if step == 0:
                header = np.zeros(HEADER_INTS, dtype="<i4")
                header[:4] = [STATE_MAGIC, STATE_VERSION, B, T]
                f.write(header.tobytes())
                f.write(inputs.numpy().astype("<i4").tobytes())
                f.write(targets.numpy().astype("<i4").tobytes())
                f.write(logits.detach().numpy().astype("<f4").tobytes())
                f.write(np.array([loss.item()], dtype="<f4").tobytes())
                for name, _ in cfg.shapes():
                    f.write(params[name].grad.numpy().astype("<f4").tobytes())
            del logits, loss
            if step + 1 < a.steps:  # the update after the last recorded loss is unobservable
                norms.append(opt.step(step))
            elif step == 0:
                norms.append(opt.grad_norm(params))
        f.write(np.array([a.steps], dtype="<i4").tobytes())
        f.write(np.array(losses, dtype="<f4").tobytes())
    os.replace(tmp, a.out)
    print(f"state: {a.out}: loss[0]={losses[0]:.6f} loss[{a.steps - 1}]={losses[-1]:.6f} "
          f"steps={a.steps} gradnorm[0]={norms[0]:.6f} B={B} T={T} wall={time.time() - t0:.2f}s")


# ---- train: the training loop's contract (schedule, accumulation, clipping, val loss) on one batch

def read_shard(path):
    """An llm.c token shard: 256 int32 header (magic 20240520, version 1, count), uint16 tokens."""
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(HEADER_BYTES), dtype="<i4")
        if header[0] != 20240520 or header[1] != 1:
            raise RefError(f"{path}: not an llm.c token shard (magic {header[0]}, version {header[1]})")
        tokens = np.frombuffer(f.read(), dtype="<u2")
    if len(tokens) != header[2]:
        raise RefError(f"{path}: header says {header[2]} tokens, the file holds {len(tokens)}")
    return torch.from_numpy(tokens.astype(np.int64))


def lr_at(a, step):
    """The learning rate of step `step` (from 0) of a run of a.steps steps, from the schedule's
    definition (docs/cpu-trainer.md, llmc/optim/schedulers.h): linear warmup lr*(step+1)/warmup,
    then cosine or linear decay to lr*final_frac over the remaining steps, constant, or wsd (flat,
    then the last 20% of the run cooling down with the 1-sqrt shape)."""
    lr, lr_min = a.lr, a.lr * a.final_frac
    if step < a.warmup:
        return lr * (step + 1) / a.warmup
    span = a.steps - a.warmup
    if span <= 1:
        return lr if a.schedule == "constant" else lr_min
    progress = min(1.0, (step - a.warmup) / (span - 1))
    if a.schedule == "cosine":
        return lr_min + 0.5 * (1.0 + math.cos(math.pi * progress)) * (lr - lr_min)
    if a.schedule == "linear":
        return lr - progress * (lr - lr_min)
    if a.schedule == "constant":
        return lr
    decay = int(0.2 * a.steps)  # wsd
    start = a.steps - decay
    if decay < 1 or step < start:
        return lr
    return lr_min + (1.0 - math.sqrt((step - start + 1) / decay)) * (lr - lr_min)


def cmd_train(a):
    """Trains on the first B*T+1 tokens of the train shard, every step (a shard of exactly that many
    tokens gives a trainer the same batch every step, however it splits it into micro-batches or
    processes), and writes JSON: per step loss, pre-clip gradient norm and lr; val losses (the mean
    over the first --val-max windows of B*T+1 tokens of the val shard, all with -1) at step 0, every
    --val-every steps and at the last step."""
    import json
    cfg, params = read_model(a.model)
    B, T = a.batch, a.seq
    train = read_shard(a.train)
    val = read_shard(a.val)
    if len(train) < B * T + 1:
        raise RefError(f"{a.train}: {len(train)} tokens, fewer than B*T+1 = {B * T + 1}")
    x = train[:B * T + 1]
    inputs, targets = x[:-1].view(B, T), x[1:].view(B, T)
    nval = (len(val) - 1) // (B * T)
    if a.val_max >= 0:
        nval = min(nval, a.val_max)
    for p in params.values():
        p.requires_grad_(True)
    opt = AdamW(params, a.lr, a.beta1, a.beta2, a.eps, a.weight_decay, a.grad_clip)
    out = {"train": [], "val": []}

    def val_loss(step):
        with torch.no_grad():
            total = 0.0
            for i in range(nval):
                w = val[i * B * T:(i + 1) * B * T + 1]
                total += float(gpt2_loss(gpt2_forward(cfg, params, w[:-1].view(B, T)), w[1:].view(B, T)))
        out["val"].append({"step": step, "val_loss": total / nval})

    for step in range(a.steps):
        if a.val_every > 0 and step % a.val_every == 0:
            val_loss(step)
        for p in params.values():
            p.grad = None
        loss = gpt2_loss(gpt2_forward(cfg, params, inputs), targets)
        loss.backward()
        opt.lr = lr_at(a, step)
        norm = opt.step(step)
        out["train"].append({"step": step + 1, "loss": loss.item(), "norm": norm, "lr": opt.lr})
    if a.val_every > 0:
        val_loss(a.steps)
    with open(a.out + ".tmp", "w") as f:
        json.dump(out, f)
    os.replace(a.out + ".tmp", a.out)
    print(f"train: {a.out}: {a.steps} steps, loss {out['train'][0]['loss']:.6f} -> {out['train'][-1]['loss']:.6f}")


# ---- check

def random_params(cfg, seed, scale=0.3):
    """Params far from init (biases and layernorm weights random too), so that attention is not
    uniform and GELU is not linear: a bug in either shows up. wte padded rows stay zero."""
    g = torch.Generator()
    g.manual_seed(seed)
    P = {}
    for name, shape in cfg.shapes():
        t = torch.randn(shape, generator=g) * scale
        if name in LN_WEIGHTS:
            t += 1.0
        if name == "wte":
            t[cfg.V:] = 0.0
        P[name] = t
    return P


def close(a, b, atol, rtol):
    """max over elements of |a-b| / (atol + rtol |b|); <= 1 means close."""
    return float(((a.double() - b.double()).abs() / (atol + rtol * b.double().abs())).max())


def check_forward_backward():
    cfg = Config(n_layer=2, channels=16, n_head=4, max_seq=12, vocab=100)  # Vp = 128
    P = random_params(cfg, seed=1)
    inputs, targets = make_batch(cfg, 2, 9, seed=2)  # T < maxT exercises the wpe slice
    P32 = {k: v.clone().requires_grad_(True) for k, v in P.items()}
    P64 = {k: v.double().requires_grad_(True) for k, v in P.items()}
    logits32 = gpt2_forward(cfg, P32, inputs)
    loss32 = gpt2_loss(logits32, targets)
    loss32.backward()
    logits64 = naive_forward(cfg, P64, inputs)
    loss64 = naive_loss(logits64, targets)
    loss64.backward()
    r = close(logits32, logits64, 1e-5, 1e-5)
    if r > 1.0:
        raise CheckFailed(f"logits differ from the naive forward (max err/tol {r:.3g})")
    if abs(loss32.item() - loss64.item()) > 1e-5 * (1 + abs(loss64.item())):
        raise CheckFailed(f"loss {loss32.item()} vs naive {loss64.item()}")
    for name in PARAM_NAMES:
        g32, g64 = P32[name].grad, P64[name].grad
        r = close(g32, g64, 1e-5 * float(g64.abs().max()), 1e-4)
        if r > 1.0:
            raise CheckFailed(f"grad of {name} differs from the naive backward (max err/tol {r:.3g})")
    if P32["wte"].grad[cfg.V:].abs().max() != 0:
        raise CheckFailed("wte grad padded rows are not zero")
    # the naive backward itself against central finite differences along a random direction
    g = torch.Generator()
    g.manual_seed(3)
    d = {k: torch.randn(v.shape, generator=g, dtype=torch.float64) for k, v in P.items()}
    eps = 1e-6
    with torch.no_grad():
        lp = naive_loss(naive_forward(cfg, {k: P64[k] + eps * d[k] for k in P}, inputs), targets)
        lm = naive_loss(naive_forward(cfg, {k: P64[k] - eps * d[k] for k in P}, inputs), targets)
    fd = (lp - lm).item() / (2 * eps)
    an = sum(float((P64[k].grad * d[k]).sum()) for k in P)
    if abs(fd - an) > 1e-6 * (1 + abs(an)):
        raise CheckFailed(f"directional derivative: finite difference {fd} vs autograd {an}")
    return f"logits/loss/16 grads match naive float64 GPT-2; finite-diff {fd:.6f} vs {an:.6f}"


def check_adamw():
    cfg = Config(n_layer=2, channels=16, n_head=4, max_seq=8, vocab=100)
    inputs, targets = make_batch(cfg, 2, 8, seed=5)
    hp = dict(lr=1e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1)
    base = random_params(cfg, seed=4)
    notes = []
    for steps, grad_clip in ((1, 1e6), (3, 1e-3)):  # the first never clips, the second always
        mine = {k: v.clone().requires_grad_(True) for k, v in base.items()}
        ref = {k: v.clone().requires_grad_(True) for k, v in base.items()}
        opt = AdamW(mine, grad_clip=grad_clip, **hp)
        groups = [{"params": [ref[k] for k in PARAM_NAMES if k in DECAYED],
                   "weight_decay": hp["weight_decay"]},
                  {"params": [ref[k] for k in PARAM_NAMES if k not in DECAYED], "weight_decay": 0.0}]
        topt = torch.optim.AdamW(groups, lr=hp["lr"], betas=(hp["beta1"], hp["beta2"]),
                                 eps=hp["eps"], foreach=False)
        for step in range(steps):
            # both optimizers see the same gradients, so only their arithmetic is compared
            for p in mine.values():
                p.grad = None
            gpt2_loss(gpt2_forward(cfg, mine, inputs), targets).backward()
            for k in PARAM_NAMES:
                ref[k].grad = mine[k].grad.clone()
            norm = opt.step(step)
            clipped = norm > grad_clip
            if clipped != (grad_clip < 1.0):
                raise CheckFailed(f"test setup: norm {norm} vs clip {grad_clip}")
            if clipped:  # torch's AdamW has no clipping: scale its grads by the same factor
                for p in ref.values():
                    p.grad.mul_(grad_clip / norm)
            topt.step()
        err = max(float((mine[k] - ref[k]).abs().max()) for k in PARAM_NAMES)
        if err > 1e-6:
            raise CheckFailed(f"AdamW ({steps} steps, clip {grad_clip}) vs torch.optim.AdamW: "
                              f"max |diff| {err:.3g} > 1e-6")
        notes.append(f"{steps} step(s) clip={grad_clip}: max|diff|={err:.1e}")
    return "AdamW matches torch.optim.AdamW (2 groups): " + ", ".join(notes)


def check_init_and_io():
    cfg = Config(n_layer=2, channels=32, n_head=4, max_seq=16, vocab=200)  # Vp = 256
    P = init_params(cfg, seed=7)
    if any(not torch.equal(P[k], init_params(cfg, seed=7)[k]) for k in PARAM_NAMES):
        raise CheckFailed("init is not deterministic")
    for name in PARAM_NAMES:
        t = P[name]
        if name in LN_WEIGHTS and not bool((t == 1).all()):
            raise CheckFailed(f"{name} not all ones")
        if name not in LN_WEIGHTS and name not in DECAYED and bool(t.abs().max() != 0):
            raise CheckFailed(f"bias {name} not all zero")
    if bool(P["wte"][cfg.V:].abs().max() != 0):
        raise CheckFailed("wte padded rows not zero")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "m.bin")
        write_model(path, cfg, P)
        if os.path.getsize(path) != HEADER_BYTES + 4 * cfg.num_params():
            raise CheckFailed("model file size")
        cfg2, P2 = read_model(path)
        if (cfg2.L, cfg2.C, cfg2.H, cfg2.maxT, cfg2.V, cfg2.Vp) != (cfg.L, cfg.C, cfg.H, cfg.maxT, cfg.V, cfg.Vp):
            raise CheckFailed("model header round trip")
        if any(not torch.equal(P[k], P2[k]) for k in PARAM_NAMES):
            raise CheckFailed("fp32 model round trip")
        # a bf16 file (version 5) reads back as the bf16-rounded values
        raw = open(path, "rb").read()
        hdr = np.frombuffer(raw[:HEADER_BYTES], dtype="<i4").copy()
        hdr[1] = MODEL_VERSION_BF16
        bf = torch.cat([P[k].reshape(-1) for k in PARAM_NAMES]).bfloat16()
        bits = bf.view(torch.int16).numpy().astype("<i2")
        with open(path + "5", "wb") as f:
            f.write(hdr.tobytes() + bits.tobytes())
        _, P5 = read_model(path + "5")
        if any(not torch.equal(P[k].bfloat16().float(), P5[k]) for k in PARAM_NAMES):
            raise CheckFailed("bf16 model read")
        # bad files are rejected with a message naming the file
        bad = {"magic": bytes(4) + raw[4:], "version": raw[:4] + bytes(4) + raw[8:],
               "size": raw[:-4], "header": raw[:100]}
        for what, data in bad.items():
            with open(path + what, "wb") as f:
                f.write(data)
            try:
                read_model(path + what)
            except RefError as e:
                if path + what not in str(e):
                    raise CheckFailed(f"error for bad {what} does not name the file: {e}")
            else:
                raise CheckFailed(f"a model file with bad {what} was accepted")
    return "init deterministic, ones/zeros/padding as specified; fp32+bf16 read, bad files rejected"


def check_init_loss():
    cfg = Config(n_layer=2, channels=64, n_head=4, max_seq=32, vocab=50257)
    P = init_params(cfg, seed=0)
    inputs, targets = make_batch(cfg, 2, 16, seed=0)
    with torch.no_grad():
        loss = gpt2_loss(gpt2_forward(cfg, P, inputs), targets).item()
    if abs(loss - math.log(cfg.V)) > 0.1:
        raise CheckFailed(f"loss at init {loss} far from ln(V) = {math.log(cfg.V)}")
    return f"loss at init {loss:.4f} ~ ln(V) {math.log(cfg.V):.4f}"


class MT19937:
    """The standard 32-bit Mersenne Twister, seeded as PyTorch seeds its CPU generator."""

    def __init__(self, seed):
        self.mt = [seed & 0xFFFFFFFF]
        for i in range(1, 624):
            self.mt.append((1812433253 * (self.mt[-1] ^ (self.mt[-1] >> 30)) + i) & 0xFFFFFFFF)
        self.i = 624

    def next_u32(self):
        if self.i == 624:
            mt = self.mt
            for k in range(624):
                y = (mt[k] & 0x80000000) | (mt[(k + 1) % 624] & 0x7FFFFFFF)
                mt[k] = mt[(k + 397) % 624] ^ (y >> 1) ^ (0x9908B0DF if y & 1 else 0)
            self.i = 0
        y = self.mt[self.i]
        self.i += 1
        y ^= y >> 11
        y ^= (y << 7) & 0x9D2C5680
        y ^= (y << 15) & 0xEFC60000
        return y ^ (y >> 18)


def libm_float_functions():
    """logf, cosf, sinf from the C library, as a C reimplementation of `init` would call them."""
    libm = ctypes.CDLL(ctypes.util.find_library("m"))
    fns = []
    for name in ("logf", "cosf", "sinf"):
        fn = getattr(libm, name)
        fn.argtypes, fn.restype = [ctypes.c_float], ctypes.c_float
        fns.append(lambda x, fn=fn: np.float32(fn(float(x))))
    return fns


def spec_normal_(mt, n, std):
    """The normal_ that `init` relies on (PyTorch's scalar kernel, float32, n >= 16, mean 0):
    u[i] = (next_u32() & 0xFFFFFF) / 2^24 for i < n; then for each full group of 16 at offset o,
    for j < 8: u1 = 1 - u[o+j], u2 = u[o+8+j], r = sqrtf(-2 logf(u1)),
    theta = float(2 pi u2) (product in double, rounded to float), out[o+j] = r cosf(theta) std,
    out[o+8+j] = r sinf(theta) std (float products, left to right). If n % 16 != 0, 16 fresh
    uniforms replace the last 16 outputs and that group is transformed the same way."""
    f32 = np.float32
    logf, cosf, sinf = libm_float_functions()

    def group(u):
        out = [f32(0)] * 16
        for j in range(8):
            r = np.sqrt(f32(-2.0) * logf(f32(1.0) - u[j]))
            theta = f32(2.0 * math.pi * float(u[j + 8]))
            out[j] = (r * cosf(theta)) * f32(std)
            out[j + 8] = (r * sinf(theta)) * f32(std)
        return out

    def uniforms(k):
        return [f32((mt.next_u32() & 0xFFFFFF) / 16777216.0) for _ in range(k)]

    u = uniforms(n)
    out = []
    for o in range(0, n - 15, 16):
        out += group(u[o:o + 16])
    if n % 16:
        out = out[:n - 16] + group(uniforms(16))
    return np.array(out, dtype=np.float32)


def check_init_rng():
    """`init` (run as a subprocess, as users run it) against spec_normal_ bit for bit, on a config
    whose blocks are not multiples of 16 (the vectorised SLEEF kernels would fail this)."""
    cfg = Config(n_layer=2, channels=12, n_head=3, max_seq=5, vocab=21)
    seed = 1234
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "m.bin")
        args = ["init", "--layers", "2", "--channels", "12", "--heads", "3", "--max-seq", "5",
                "--vocab", "21", "--seed", str(seed), "--out", path]
        r = subprocess.run([sys.executable, os.path.abspath(__file__)] + args,
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise CheckFailed(f"init failed: {r.stderr.strip()}")
        _, P = read_model(path)
    mt = MT19937(seed)
    proj_std = INIT_STD / math.sqrt(2.0 * cfg.L)
    got, want = [], []
    got.append(P["wte"][:cfg.V].reshape(-1).numpy())
    want.append(spec_normal_(mt, cfg.V * cfg.C, INIT_STD))
    got.append(P["wpe"].reshape(-1).numpy())
    want.append(spec_normal_(mt, cfg.maxT * cfg.C, INIT_STD))
    for name in ("qkvw", "attprojw", "fcw", "fcprojw"):  # file order
        std = proj_std if name in ("attprojw", "fcprojw") else INIT_STD
        for l in range(cfg.L):
            got.append(P[name][l].reshape(-1).numpy())
            want.append(spec_normal_(mt, got[-1].size, std))
    got, want = np.concatenate(got), np.concatenate(want)
    if got.size != want.size:
        raise CheckFailed(f"init wrote {got.size} random values, the spec {want.size}")
    ulps = np.abs(got.view(np.int32).astype(np.int64) - want.view(np.int32).astype(np.int64))
    exact = float((ulps == 0).mean())
    if ulps.max() > 0:
        raise CheckFailed(f"init vs the normal_ spec: max {ulps.max()} ulp, {100 * exact:.1f}% exact")
    return f"init follows the mt19937 + Box-Muller spec: {got.size} values, {100 * exact:.2f}% exact, max {ulps.max()} ulp"


CHECKS = [check_init_rng, check_init_and_io, check_forward_backward, check_adamw, check_init_loss]


def cmd_check(_a):
    t0 = time.time()
    failed = 0
    for fn in CHECKS:
        try:
            print(f"check: {fn.__name__}: ok: {fn()}")
        except CheckFailed as e:
            print(f"check: {fn.__name__}: FAILED: {e}")
            failed += 1
    print(f"check: {len(CHECKS) - failed}/{len(CHECKS)} passed, wall={time.time() - t0:.2f}s")
    return 1 if failed else 0


def seed_type(text):
    seed = int(text)
    if not 0 <= seed < 2 ** 32:
        raise argparse.ArgumentTypeError(f"seed {seed} not in [0, 2^32)")
    return seed


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="gpt2_ref.py", description=__doc__.split("\n")[1])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("init", help="write a randomly initialised model file (fp32)")
    p.add_argument("--layers", type=int, required=True)
    p.add_argument("--channels", type=int, required=True)
    p.add_argument("--heads", type=int, required=True)
    p.add_argument("--max-seq", type=int, required=True)
    p.add_argument("--vocab", type=int, required=True)
    p.add_argument("--seed", type=seed_type, required=True)
    p.add_argument("--out", required=True)
    p = sub.add_parser("perturb", help="randomise the biases and layernorm parameters of a model file")
    p.add_argument("--model", required=True)
    p.add_argument("--seed", type=seed_type, required=True)
    p.add_argument("--out", required=True)
    p = sub.add_parser("state", help="write llm.c's debug-state file + appended AdamW step losses")
    p.add_argument("--model", required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--seq", type=int, required=True)
    p.add_argument("--seed", type=seed_type, required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=0.95)
    p.add_argument("--eps", type=float, default=1e-8)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--optimizer", choices=["adamw", "muon", "adam-mini"], default="adamw",
                   help="the steps' optimizer (muon: Muon for the blocks' matrices, AdamW for the rest; "
                        "adam-mini: one v per block)")
    p.add_argument("--momentum", type=float, default=0.95, help="Muon's momentum (Nesterov)")
    p.add_argument("--inject-bug", choices=sorted(INJECTABLE_BUGS), default=None,
                   help="testing: write the state of a reference with this bug (make test-ref-mutants)")
    p = sub.add_parser("train", help="train on one batch with a schedule; per-step loss, norm, lr and val loss (JSON)")
    p.add_argument("--model", required=True)
    p.add_argument("--train", required=True, help="token shard: the batch is its first B*T+1 tokens")
    p.add_argument("--val", required=True, help="token shard: val batches are its windows of B*T+1 tokens")
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--seq", type=int, required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--lr", type=float, required=True)
    p.add_argument("--warmup", type=int, default=0)
    p.add_argument("--schedule", choices=["cosine", "linear", "constant", "wsd"], default="cosine")
    p.add_argument("--final-frac", type=float, default=1.0)
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=0.95)
    p.add_argument("--eps", type=float, default=1e-8)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--val-every", type=int, default=0)
    p.add_argument("--val-max", type=int, default=-1)
    p.add_argument("--out", required=True)
    p = sub.add_parser("generate", help="greedy continuation of a prompt (token ids), float64 (JSON line)")
    p.add_argument("--model", required=True)
    p.add_argument("--prompt", required=True, help="comma-separated token ids after <|endoftext|>")
    p.add_argument("--length", type=int, required=True, help="tokens in all, <|endoftext|> included (the trainers' -g)")
    p = sub.add_parser("logits", help="the largest next-token logits at every position of token sequences, float64 (JSON line)")
    p.add_argument("--model", required=True)
    p.add_argument("--tokens", required=True, help="JSON: a list of token id lists")
    p.add_argument("--top", type=int, required=True, help="how many of the largest logits per position")
    p = sub.add_parser("hellaswag", help="HellaSwag acc and acc_norm of tokenized examples, float64 (JSON line)")
    p.add_argument("--model", required=True)
    p.add_argument("--examples", required=True, help="JSON: [{ctx: [ids], endings: [[ids] x 4], label}]")
    sub.add_parser("check", help="self-tests; exit status 1 on failure")
    return ap.parse_args(argv)


def main(argv):
    a = parse_args(argv)
    set_threads()
    try:
        if a.cmd == "init":
            cmd_init(a)
        elif a.cmd == "state":
            cmd_state(a)
        elif a.cmd == "perturb":
            cmd_perturb(a)
        elif a.cmd == "train":
            cmd_train(a)
        elif a.cmd == "generate":
            cmd_generate(a)
        elif a.cmd == "logits":
            cmd_logits(a)
        elif a.cmd == "hellaswag":
            cmd_hellaswag(a)
        else:
            return cmd_check(a)
    except RefError as e:
        print(f"gpt2_ref.py: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

#!/usr/bin/env python3
"""quality_table.py: `make quality-table`, the quality-per-byte table. Trains the same small GPT-2 on
TinyShakespeare with the CPU trainer for each optimizer and state, at each learning rate of a sweep
(the same steps, data order and seed), and prints a Markdown table per optimizer at its best
learning rate: best final val loss, the first step whose val loss reaches full AdamW's best final
val loss (val every --val-every steps, so the step is a multiple of it), optimizer-state bytes per
parameter (the trainer's memory model, `--memory-report`), and wall time. The runs are independent:
--jobs of them side by side, each with --threads threads.

  quality_table.py --bin build/train_gpt2 [--steps 300] [--model L4C128H4] [--modes adamw,muon,...]
                   [--jobs 2 --threads 1] [--val-every 25] [--seeds 42,7] [--lrs 1e-3,3e-3] [--json FILE]

--seeds: each learning rate is run once per seed (the model's init and the data order); the sweep
shows each seed's val loss and their mean, and the best learning rate is the best mean. --lrs
replaces every mode's learning rates.

A mode the binary refuses (a flag or combination it does not have yet) is reported with its
one-line reason, not skipped silently.

--json FILE also writes the results (per mode: its name, the state bytes per parameter of this model
and of GPT-2 124M, each learning rate's val loss per seed and their mean, wall time) for
dev/plot/plot_frontier.py, which draws val loss against bytes per parameter (make quality-frontier).
"""
import argparse
import concurrent.futures
import json
import re
import subprocess
import sys
import time

ADAMW_LRS = ["1e-3", "3e-3", "1e-2"]
MODES = {  # key: (name, flags, learning rates)
    "adamw": ("AdamW fp32", [], ADAMW_LRS),
    "adamw-bf16": ("AdamW bf16", ["--opt-state", "bf16"], ADAMW_LRS),
    "adamw-fp16": ("AdamW fp16", ["--opt-state", "fp16"], ADAMW_LRS),
    "adamw-int8": ("AdamW int8", ["--opt-state", "int8"], ADAMW_LRS),
    "adamw-4bit": ("AdamW 4-bit", ["--opt-state", "4bit"], ADAMW_LRS),
    # the GPU trainer's --offload cpu --offload-delay 1 on the CPU trainer's schedule (10 steps undelayed)
    "adamw-delay": ("AdamW fp32, update delayed a step", ["--offload-delay", "1"], ["3e-4"] + ADAMW_LRS),
    "adamw-delay-50": ("AdamW fp32, delayed after 50 steps", ["--offload-delay", "1", "--offload-delay-warmup", "50"],
                       ["3e-4"] + ADAMW_LRS),
    "lion-4bit": ("Lion 4-bit", ["--optimizer", "lion", "--opt-state", "4bit"], ["1e-4", "3e-4", "1e-3"]),
    "lion": ("Lion", ["--optimizer", "lion"], ["1e-4", "3e-4", "1e-3"]),
    "muon": ("Muon fp32", ["--optimizer", "muon"], ADAMW_LRS + ["3e-2"]),  # (1e-2 was the best: past it too)
    "muon-joined": ("Muon fp32, qkv joined", ["--optimizer", "muon", "--muon-qkv", "joined"], ADAMW_LRS),
    "muon-bf16": ("Muon bf16", ["--optimizer", "muon", "--opt-state", "bf16"], ADAMW_LRS + ["3e-2"]),
    "muon-int8": ("Muon int8", ["--optimizer", "muon", "--opt-state", "int8"], ADAMW_LRS + ["3e-2"]),
    "muon-4bit": ("Muon 4-bit", ["--optimizer", "muon", "--opt-state", "4bit"], ADAMW_LRS + ["3e-2"]),
    "adam-mini": ("Adam-mini fp32", ["--optimizer", "adam-mini"], ["3e-4"] + ADAMW_LRS),  # (1e-3 was the best)
    "adam-mini-bf16": ("Adam-mini bf16", ["--optimizer", "adam-mini", "--opt-state", "bf16"], ADAMW_LRS),
    "adam-mini-int8": ("Adam-mini int8", ["--optimizer", "adam-mini", "--opt-state", "int8"], ADAMW_LRS),
    "adam-mini-4bit": ("Adam-mini 4-bit", ["--optimizer", "adam-mini", "--opt-state", "4bit"], ADAMW_LRS),
    "muon-badam": ("Muon + BAdam (K = 25)", ["--optimizer", "muon", "--badam", "25"], ADAMW_LRS),
    "badam": ("AdamW + BAdam (K = 25)", ["--badam", "25"], ADAMW_LRS),
    "sgd-nesterov": ("SGD, Nesterov momentum 0.9", ["--optimizer", "sgd", "--nesterov", "1"], ["1e-2", "3e-2", "1e-1"]),
    "lamb": ("LAMB", ["--optimizer", "lamb"], ["1e-3", "3e-3", "1e-2"]),
}
DEFAULT_MODES = "adamw,adamw-int8,lion,muon,muon-joined,muon-bf16,muon-int8,muon-badam"

STATE_RE = re.compile(r"^\| optimizer state\s*\|\s*([\d.]+)\s*\|\s*([\d.]+)", re.M)
VAL_RE = re.compile(r"^val loss ([\d.]+)", re.M)
STEP_RE = re.compile(r"^step\s+(\d+)/\d+ \|", re.M)


def run(binary, args):
    t0 = time.time()
    r = subprocess.run([binary] + args, capture_output=True, text=True, timeout=7200)
    return r, time.time() - t0


def val_curve(stdout, val_every):
    """(step, val loss) pairs: the trainer prints val loss before step 1 and after every val_every-th."""
    vals = [float(x) for x in VAL_RE.findall(stdout)]
    return [(k * val_every, v) for k, v in enumerate(vals)]


def one_run(binary, base, extra, lr, seed, val_every):
    r, secs = run(binary, base + ["--seed", seed] + extra + ["-l", lr])
    if r.returncode != 0:
        return {"lr": lr, "seed": seed, "error": (r.stderr.strip().splitlines() or ["failed"])[-1]}
    curve = val_curve(r.stdout, val_every)
    return {"lr": lr, "seed": seed, "final": curve[-1][1] if curve else None, "curve": curve, "secs": secs}


def merge_seeds(runs, seeds):
    """One entry per learning rate: each seed's final val loss, their mean, the mean curve; failed if any seed failed."""
    out = []
    for lr in sorted({r["lr"] for r in runs}, key=float):
        rs = sorted((r for r in runs if r["lr"] == lr), key=lambda r: seeds.index(r["seed"]))
        bad = [r for r in rs if "error" in r or r["final"] is None]
        if bad:
            out.append({"lr": lr, "error": bad[0].get("error", "no val loss")})
            continue
        n = min(len(r["curve"]) for r in rs)
        curve = [(rs[0]["curve"][i][0], sum(r["curve"][i][1] for r in rs) / len(rs)) for i in range(n)]
        out.append({"lr": lr, "finals": [r["final"] for r in rs], "final": sum(r["final"] for r in rs) / len(rs),
                    "curve": curve, "secs": sum(r["secs"] for r in rs) / len(rs)})
    return out


def fmt_loss(r):
    if "error" in r:
        return "failed"
    if len(r["finals"]) == 1:
        return "%.4f" % r["final"]
    return "%s; mean %.4f" % (" / ".join("%.4f" % f for f in r["finals"]), r["final"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--model", default="L4C128H4")
    ap.add_argument("--modes", default=DEFAULT_MODES)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--val-every", type=int, default=25)
    ap.add_argument("--seeds", default="42", help="comma-separated: each learning rate once per seed")
    ap.add_argument("--lrs", default=None, help="comma-separated learning rates for every mode (default: each mode's)")
    ap.add_argument("--json", default=None, help="also write the results to this file (dev/plot/plot_frontier.py)")
    a = ap.parse_args()
    seeds = a.seeds.split(",")
    lrs_of = lambda k: a.lrs.split(",") if a.lrs else MODES[k][2]
    if a.steps % a.val_every != 0:
        sys.exit("quality_table.py: --steps must be a multiple of --val-every")
    base = ["-e", a.model, "-b", "8", "-t", "64", "-x", str(a.steps), "-u", "20", "-k", "cosine", "-q", "0.1",
            "-c", "0.1", "-v", str(a.val_every), "-m", "10", "-s", "0", "--threads", str(a.threads)]
    keys = a.modes.split(",")
    for k in keys:
        if k not in MODES:
            sys.exit("quality_table.py: unknown mode %s (one of %s)" % (k, ", ".join(MODES)))
    # the state's bytes per parameter (and whether the binary takes the flags at all)
    state, state124, refused = {}, {}, {}
    for k in keys:
        rep, _ = run(a.bin, base + ["--seed", seeds[0]] + MODES[k][1] + ["-l", lrs_of(k)[0], "--memory-report", "1"])
        m = STATE_RE.search(rep.stdout)
        if rep.returncode != 0 or m is None:
            refused[k] = (rep.stderr.strip().splitlines() or ["failed"])[-1]
            continue
        state[k] = float(m.group(2))
        # the same flags' state at GPT-2 124M (the memory model only: nothing is allocated)
        rep, _ = run(a.bin, ["-e", "d12", "-b", "4", "-t", "64"] + MODES[k][1] + ["--memory-report", "1"])
        m = STATE_RE.search(rep.stdout)
        state124[k] = float(m.group(2)) if rep.returncode == 0 and m is not None else None
    results = {k: [] for k in keys}
    with concurrent.futures.ThreadPoolExecutor(max_workers=a.jobs) as pool:
        futs = {pool.submit(one_run, a.bin, base, MODES[k][1], lr, seed, a.val_every): k
                for k in keys if k not in refused for lr in lrs_of(k) for seed in seeds}
        for f in concurrent.futures.as_completed(futs):
            k = futs[f]
            res = f.result()
            results[k].append(res)
            print("%-28s lr %-6s seed %-4s %s" % (MODES[k][0], res["lr"], res["seed"], "val %.4f in %.0f s" % (
                res["final"], res["secs"]) if "error" not in res else res["error"]), file=sys.stderr)
    results = {k: merge_seeds(results[k], seeds) for k in keys}
    if a.json:
        out = {"model": a.model, "steps": a.steps, "seeds": seeds, "jobs": a.jobs, "threads": a.threads, "modes": {}}
        for k in keys:
            out["modes"][k] = {"name": MODES[k][0], "refused": refused.get(k), "state_bpp": state.get(k),
                               "state_bpp_124m": state124.get(k),
                               "lrs": [{key: r[key] for key in ("lr", "finals", "final", "secs", "error") if key in r}
                                       for r in results[k]]}
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    best = {}
    for k in keys:
        ok = [r for r in results[k] if "error" not in r and r["final"] is not None]
        if ok:
            best[k] = min(ok, key=lambda r: r["final"])
    target = best["adamw"]["final"] if "adamw" in best else None
    adamw_steps = None
    print("Model %s, B=8, T=64, %d steps on TinyShakespeare (%d tokens), cosine schedule (warmup 20, to 10%%), "
          "weight decay 0.1, seed(s) %s; val loss (10 batches) every %d steps; %d run(s) side by side, %d thread(s) each."
          % (a.model, a.steps, 8 * 64 * a.steps, ", ".join(seeds), a.val_every, a.jobs, a.threads))
    print()
    print("| optimizer | learning rates (val loss) | best val loss | steps to AdamW's best | state B/param | time (s) |")
    print("|---|---|---|---|---|---|")
    for k in keys:
        name = MODES[k][0]
        if k in refused:
            print("| %s | not run: %s | | | | |" % (name, refused[k]))
            continue
        sweep = ", ".join("%s (%s)" % (r["lr"], fmt_loss(r)) for r in results[k])
        if k not in best:
            print("| %s | %s | | | %.2f | |" % (name, sweep, state[k]))
            continue
        b = best[k]
        reach = next((s for s, v in b["curve"] if target is not None and v <= target), None)
        if k == "adamw":
            adamw_steps = reach
        reach_s = "not reached" if reach is None else "%d" % reach
        if reach is not None and adamw_steps:
            reach_s += " (%.0f%%)" % (100.0 * reach / adamw_steps)
        print("| %s | %s | %.4f (lr %s) | %s | %.2f | %.0f |" % (name, sweep, b["final"], b["lr"], reach_s, state[k],
                                                                b["secs"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""
plot_run.py: loss and throughput curves of a training run, as a PNG (make plot RUN=DIR).

    /usr/bin/python3 dev/plot/plot_run.py RUN_DIR [--out RUN_DIR/plot.png]

Reads RUN_DIR/log.jsonl when it exists (one JSON object per line; keys step, loss, val_loss,
lr, norm, ms, tok_s; a line may carry any subset, null for absent), else llm.c's
RUN_DIR/main.log ("s:<step> trl:<train loss>" and "s:<step> tel:<val loss>" lines). A resumed run
repeats steps: the later line wins. Draws train loss (raw, and smoothed with an exponential
moving average), val loss, and, from the JSONL log, throughput (tok/s), learning rate and
gradient norm. Each panel's scale is set by most of its values, not a lone spike: a value above
the top is drawn at the top edge as a triangle, and the largest is labelled with its value and step.
A resume (the trainer's {"resumed":true} record, or a step that does not follow the one before) is
a dashed vertical line on every panel. The learning rate's axis starts at 0. Needs matplotlib
(Debian: python3-matplotlib).
"""
import argparse
import json
import math
import os
import sys


class PlotError(Exception):
    pass


def read_jsonl(path):
    """(series {key: {step: value}}, resumes [step]): the steps at which the run resumed."""
    series, resumes, last = {}, [], None
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            if lineno == len(lines):  # the last line, cut short by a killed run: skip it
                break
            raise PlotError(f"{path}:{lineno}: not JSON ({e.msg})") from None
        if not isinstance(rec, dict) or not isinstance(rec.get("step"), int):
            raise PlotError(f"{path}:{lineno}: expected an object with an integer \"step\"")
        step = rec["step"]
        if rec.get("resumed") is True or ("loss" in rec and last is not None and step <= last):
            resume_at = step if rec.get("resumed") is True else step - 1
            if not resumes or resumes[-1] != resume_at:
                resumes.append(resume_at)
        if "loss" in rec:
            last = step
        for key, val in rec.items():
            if key != "step" and isinstance(val, (int, float)) and not isinstance(val, bool) and math.isfinite(val):
                series.setdefault(key, {})[rec["step"]] = float(val)
    return series, resumes


def read_main_log(path):
    names = {"trl": "loss", "tel": "val_loss"}
    series, resumes, last = {}, [], None
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            parts = line.split()
            if len(parts) != 2 or not parts[0].startswith("s:") or ":" not in parts[1]:
                if line.strip():
                    raise PlotError(f"{path}:{lineno}: expected 's:<step> trl:<loss>' or 's:<step> tel:<loss>'")
                continue
            key, val = parts[1].split(":", 1)
            try:
                step, v = int(parts[0][2:]), float(val)
            except ValueError:
                raise PlotError(f"{path}:{lineno}: bad number in {line.strip()!r}") from None
            if key == "trl":
                if last is not None and step <= last and (not resumes or resumes[-1] != step - 1):
                    resumes.append(step - 1)
                last = step
            if key in names and math.isfinite(v):
                series.setdefault(names[key], {})[step] = v
    return series, resumes


def read_run(run_dir):
    jsonl, main_log = os.path.join(run_dir, "log.jsonl"), os.path.join(run_dir, "main.log")
    if os.path.exists(jsonl):
        path, (series, resumes) = jsonl, read_jsonl(jsonl)
    elif os.path.exists(main_log):
        path, (series, resumes) = main_log, read_main_log(main_log)
    else:
        raise PlotError(f"{run_dir}: no log.jsonl or main.log (write one with the trainer's -o {run_dir})")
    if not series.get("loss") and not series.get("val_loss"):
        raise PlotError(f"{path}: no loss values yet")
    return path, {k: sorted(v.items()) for k, v in series.items()}, resumes


def ema(values, alpha):
    """Exponential moving average, bias-corrected so that it starts at the first value."""
    out, m = [], 0.0
    for i, v in enumerate(values):
        m = alpha * m + (1 - alpha) * v
        out.append(m / (1 - alpha ** (i + 1)))
    return out


def percentile(values, q):
    s = sorted(values)
    return s[min(len(s) - 1, max(0, int(round(q * (len(s) - 1)))))]


def mark_clipped(ax, points, top, color, what):
    """Values above the axis' top: triangles at the top edge, the largest labelled. Returns the label."""
    over = [(st, v) for st, v in points if v > top]
    if not over:
        return None
    ax.plot([st for st, _ in over], [top] * len(over), "^", color=color, markersize=6, clip_on=False, zorder=5)
    st, v = max(over, key=lambda sv: sv[1])
    label = f"{what} {v:.4g} at step {st} (off the scale)"
    first, last = points[0][0], points[-1][0]
    left = st - first <= (last - first) / 2  # the label runs into the panel, away from its edge
    ax.annotate(label, xy=(st, top), xytext=(6 if left else -6, -8), textcoords="offset points",
                ha="left" if left else "right", va="top", fontsize=8, color=color)
    return label


def lr_limits(lrs):
    """The learning rate's axis: from 0 to above its largest value (a constant rate is a flat line
    at its height, not the middle of a range around it)."""
    top = max(lrs) if lrs else 0.0
    return 0.0, (top * 1.15 if top > 0 else 1.0)


def plot(run_dir, out):
    """Draws the run into out; returns (source log, what was drawn: the clipped labels, the resumes,
    the lr axis)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    source, s, resumes = read_run(run_dir)
    drawn = {"clipped": [], "resumes": resumes, "lr_ylim": None}
    has_speed = bool(s.get("tok_s"))
    has_opt = bool(s.get("lr") or s.get("norm"))
    ncols = 1 + has_speed + has_opt
    fig, axes = plt.subplots(1, ncols, figsize=(5.6 * ncols, 4.2), squeeze=False)
    axes = axes[0]
    # loss
    ax = axes[0]
    train, val = s.get("loss", []), s.get("val_loss", [])
    if train:
        steps, loss = zip(*train)
        ax.plot(steps, loss, color="tab:blue", alpha=0.25, linewidth=0.8, label="train (per step)")
        if len(loss) >= 10:
            ax.plot(steps, ema(loss, 0.9), color="tab:blue", linewidth=1.8, label="train (EMA 0.9)")
    if val:
        vsteps, vloss = zip(*val)
        ax.plot(vsteps, vloss, "o-", color="tab:orange", markersize=4, linewidth=1.5, label="val")
        best = min(val, key=lambda sv: sv[1])
        ax.annotate(f"best val {best[1]:.3f} (step {best[0]})", xy=best, xytext=(-40, 28), textcoords="offset points",
                    ha="right", arrowprops={"arrowstyle": "->", "color": "gray"}, fontsize=9)
    every = [v for _, v in train] + [v for _, v in val]
    lo = min(every)
    # the top: every val point, but the train loss's 99th percentile (a lone spike would flatten the rest)
    hi = max([v for _, v in val] + ([percentile([v for _, v in train], 0.99)] if train else []))
    top = hi + 0.08 * (hi - lo + 1e-9)
    ax.set_ylim(lo - 0.05 * (hi - lo + 1e-9), top)
    drawn["clipped"].append(mark_clipped(ax, train, top, "tab:blue", "train loss"))
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats/token)")
    ax.set_title("loss")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper right", fontsize=9)
    col = 1
    # throughput
    if has_speed:
        ax = axes[col]
        col += 1
        steps, tok = zip(*s["tok_s"])
        ax.plot(steps, tok, color="tab:green", linewidth=1.0, label="tok/s")
        steady = list(tok[len(tok) // 10:]) or list(tok)
        med = percentile(steady, 0.5)
        ax.axhline(med, color="tab:green", linestyle="--", linewidth=0.8, label=f"median {med:,.0f} tok/s")
        top = max(percentile(tok, 0.99), med) * 1.15  # the slow first steps do not set the scale
        ax.set_ylim(0, top)
        drawn["clipped"].append(mark_clipped(ax, s["tok_s"], top, "tab:green", "tok/s"))
        ax.set_xlabel("step")
        ax.set_ylabel("tokens / s")
        ax.set_title("throughput")
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize=9)
    # learning rate and gradient norm
    if has_opt:
        ax = axes[col]
        handles = []
        if s.get("lr"):
            steps, lr = zip(*s["lr"])
            handles += ax.plot(steps, lr, color="tab:purple", linewidth=1.5, label="learning rate")
            drawn["lr_ylim"] = lr_limits(lr)
            ax.set_ylim(*drawn["lr_ylim"])
            ax.set_ylabel("learning rate")
            ax.ticklabel_format(axis="y", style="sci", scilimits=(-2, 2))
        if s.get("norm"):
            ax2 = ax.twinx() if s.get("lr") else ax
            steps, norm = zip(*s["norm"])
            handles += ax2.plot(steps, norm, color="tab:red", alpha=0.6, linewidth=0.8, label="grad norm")
            top = percentile(norm, 0.98) * 1.3
            ax2.set_ylim(0, top)
            ax2.set_ylabel("gradient norm")
            drawn["clipped"].append(mark_clipped(ax2, s["norm"], top, "tab:red", "grad norm"))
        ax.set_xlabel("step")
        ax.set_title("learning rate and gradient norm")
        ax.grid(alpha=0.3)
        ax.legend(handles=handles, loc="upper right", fontsize=9)
    for ax in axes:
        for k, st in enumerate(resumes):
            ax.axvline(st, color="gray", linestyle="--", linewidth=0.9, label="resumed" if k == 0 and ax is axes[0] else None)
            ax.annotate(f"resumed at {st}", xy=(st, 1.0), xycoords=("data", "axes fraction"), xytext=(3, -3),
                        textcoords="offset points", ha="left", va="top", fontsize=7, color="gray", rotation=90)
    drawn["clipped"] = [c for c in drawn["clipped"] if c]
    name = os.path.basename(os.path.abspath(run_dir))
    last = max(([train[-1][0]] if train else []) + ([val[-1][0]] if val else []))
    note = "" if has_speed else "; throughput needs log.jsonl"
    fig.suptitle(f"{name}: steps 0..{last} (from {os.path.basename(source)}{note})", fontsize=11)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return source, drawn


def main(argv):
    ap = argparse.ArgumentParser(description="plot a run's loss and throughput curves to a PNG")
    ap.add_argument("run_dir", help="the trainer's -o directory (log.jsonl or main.log)")
    ap.add_argument("--out", help="PNG to write (default RUN_DIR/plot.png)")
    a = ap.parse_args(argv)
    out = a.out or os.path.join(a.run_dir, "plot.png")
    try:
        source, drawn = plot(a.run_dir, out)
    except (PlotError, OSError) as e:
        print(f"leanstep: error: plot_run.py: {e}", file=sys.stderr)
        return 1
    notes = drawn["clipped"] + [f"resumed at step {st}" for st in drawn["resumes"]]
    print(f"plot: {source} -> {out}" + (f" ({'; '.join(notes)})" if notes else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

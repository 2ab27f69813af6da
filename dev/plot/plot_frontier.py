#!/usr/bin/python3
"""
plot_frontier.py: the quality-per-byte frontier of the optimizer's memory modes, from the results
dev/quality_table.py writes (--json), as a Markdown table on stdout and a PNG.

    /usr/bin/python3 dev/plot/plot_frontier.py RESULTS.json [MORE.json ...] --out frontier.png

Per mode, at its best learning rate (the lowest mean over the seeds): the mean final val loss,
each seed's, and the state bytes per parameter at GPT-2 124M (the trainer's memory model). The plot
puts val loss against bytes per parameter (log scale), each mode a point with a bar from its best
to its worst seed, and the frontier: the modes no other mode beats at fewer or as many bytes.
A mode in several files: the last file's. A file that is not quality_table.py's results, or no
mode with a result, is one line on stderr and exit status 1. Needs matplotlib (Debian:
python3-matplotlib).
"""
import argparse
import json
import sys


class FrontierError(Exception):
    pass


def load(paths):
    """{key: mode} of every file's modes, and the run's description (of the first file)."""
    modes, desc = {}, None
    for path in paths:
        try:
            with open(path) as f:
                d = json.load(f)
            if not isinstance(d, dict) or not isinstance(d.get("modes"), dict):
                raise ValueError("no 'modes' object")
        except (OSError, ValueError) as e:
            raise FrontierError("%s: not quality_table.py --json results (%s)" % (path, e))
        if desc is None:
            desc = "model %s, %s steps, seeds %s" % (d.get("model"), d.get("steps"), ", ".join(d.get("seeds", [])))
        modes.update(d["modes"])
    return modes, desc


def best_of(mode):
    """The learning rate's entry with the lowest mean final val loss, or None."""
    ok = [r for r in mode.get("lrs", []) if "error" not in r and r.get("final") is not None]
    return min(ok, key=lambda r: r["final"]) if ok else None


def points(modes):
    """(name, bytes per parameter at GPT-2 124M, mean, best seed, worst seed, lr, seconds) per mode with a result."""
    out = []
    for mode in modes.values():
        b = best_of(mode)
        if b is None or mode.get("state_bpp_124m") is None:
            continue
        out.append((mode["name"], mode["state_bpp_124m"], b["final"], min(b["finals"]), max(b["finals"]), b["lr"], b["secs"]))
    if not out:
        raise FrontierError("no mode with a result")
    return sorted(out, key=lambda p: (p[1], p[2]))


def frontier(pts):
    """The points no other point beats: none with fewer or as many bytes and a lower mean val loss."""
    front, best = [], float("inf")
    for p in pts:  # (by bytes, then loss)
        if p[2] < best:
            front.append(p)
            best = p[2]
    return front


def table(pts, front):
    lines = ["| mode | state B/param (GPT-2 124M) | best lr | val loss: mean (seeds) | on the frontier | time (s) |",
             "|---|---|---|---|---|---|"]
    for p in pts:
        lines.append("| %s | %.3f | %s | %.4f (%.4f .. %.4f) | %s | %s |" % (
            p[0], p[1], p[5], p[2], p[3], p[4], "yes" if p in front else "", "-" if p[6] is None else "%.0f" % p[6]))
    return "\n".join(lines)


def plot(pts, front, desc, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker  # noqa: F401 (matplotlib.ticker below)
    fig, ax = plt.subplots(figsize=(8, 5))
    for p in pts:
        ax.errorbar([p[1]], [p[2]], yerr=[[p[2] - p[3]], [p[4] - p[2]]], fmt="o", capsize=3,
                    color="tab:blue" if p in front else "tab:gray")
        ax.annotate(p[0], (p[1], p[2]), textcoords="offset points", xytext=(5, 4), fontsize=8)
    right = max(p[1] for p in pts) * 1.5  # (the frontier holds to the right of its last point)
    ax.step([p[1] for p in front] + [right], [p[2] for p in front] + [front[-1][2]], where="post", color="tab:blue",
            alpha=0.5, label="frontier: no mode lower at as few bytes")
    ax.set_xscale("log", base=2)
    ax.set_xlim(min(p[1] for p in pts) / 1.5, right)
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda x, _: "%g" % x))
    ax.set_xlabel("optimizer state, bytes per parameter (GPT-2 124M)")
    ax.set_ylabel("val loss at the best rate (mean; bar: seeds)")
    ax.set_title("quality per byte: " + desc, fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv):
    ap = argparse.ArgumentParser(description="the quality-per-byte frontier (dev/quality_table.py --json)")
    ap.add_argument("results", nargs="+")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    try:
        modes, desc = load(a.results)
        pts = points(modes)
    except FrontierError as e:
        print("plot_frontier: %s" % e, file=sys.stderr)
        return 1
    front = frontier(pts)
    print(table(pts, front))
    plot(pts, front, desc, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

#!/usr/bin/python3
"""
test_plot.py: make test-plot. Writes a synthetic log.jsonl (with a resumed stretch and a last line
cut short) and a main.log into temporary run directories, plots them with plot_run.py, and checks
that each gives a PNG of the expected layout, that JSONL is preferred when both exist, and that a
missing or malformed log is one line on stderr with exit status 1. Also what the plot marks: a
gradient-norm spike off the scale is labelled with its value and step, the resume (the trainer's
record, and a step that goes back in main.log) is found, and a constant learning rate's axis
starts at 0. And the quality frontier (plot_frontier.py): synthetic quality_table.py results in two
files give the right table (best learning rate by the seeds' mean, the frontier's modes) and a PNG;
a file that is not such results is one line on stderr and exit status 1.
"""
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import plot_frontier  # noqa: E402
import plot_run  # noqa: E402

PASSED = []


def check(cond, what):
    if not cond:
        print(f"FAIL {what}")
        print(f"{len(PASSED)} passed, 1 failed")
        sys.exit(1)


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    check(head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG")
    return struct.unpack(">II", head[16:24])


SPIKE = (57, 176.8)  # a gradient-norm spike: (step, norm)


def write_jsonl(path, steps):
    with open(path, "w") as f:
        for k, s in enumerate(list(range(steps)) + list(range(steps - 20, steps))):  # resumed: steps repeat
            if k == steps:
                f.write(json.dumps({"step": steps - 21, "resumed": True}) + "\n")
            norm = SPIKE[1] if s == SPIKE[0] else 1.0 + 0.1 * math.sin(s)
            rec = {"step": s, "loss": 4 + 6 * math.exp(-s / 30), "lr": 1e-3, "norm": norm, "ms": 100.0, "tok_s": 2560.0,
                   "val_loss": 4.1 + 6 * math.exp(-s / 30) if s % 25 == 0 else None}
            f.write(json.dumps(rec) + "\n")
        f.write('{"step": 9')  # a killed run's last line


def write_main_log(path, steps):
    with open(path, "w") as f:
        for s in range(steps):
            f.write(f"s:{s} trl:{4 + 6 * math.exp(-s / 30):f}\n")
            if s % 25 == 0:
                f.write(f"s:{s} tel:{4.1 + 6 * math.exp(-s / 30):f}\n")


def run(run_dir):
    return subprocess.run([sys.executable, os.path.join(HERE, "plot_run.py"), run_dir], capture_output=True, text=True)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        a, b, c = (os.path.join(tmp, n) for n in ("jsonl_run", "mainlog_run", "empty_run"))
        for d in (a, b, c):
            os.makedirs(d)
        write_jsonl(os.path.join(a, "log.jsonl"), 120)
        write_main_log(os.path.join(a, "main.log"), 10)  # ignored: the JSONL log wins
        write_main_log(os.path.join(b, "main.log"), 120)
        source, series, resumes = plot_run.read_run(a)
        check(source.endswith("log.jsonl") and len(series["loss"]) == 120 and len(series["val_loss"]) == 5,
              "JSONL: preferred, repeated steps merged, nulls and the cut last line skipped")
        check(resumes == [99], f"JSONL: the resume at step 99 found once, got {resumes}")
        PASSED.append(1)
        src, drawn = plot_run.plot(a, os.path.join(a, "direct.png"))
        label = f"grad norm {SPIKE[1]:.4g} at step {SPIKE[0]}"
        check(any(c.startswith(label) for c in drawn["clipped"]), f"the spike off the scale is labelled: {drawn['clipped']}")
        check(drawn["lr_ylim"][0] == 0.0 and 1e-3 < drawn["lr_ylim"][1] < 2e-3,
              f"a constant lr of 1e-3 on an axis from 0: {drawn['lr_ylim']}")
        check(plot_run.lr_limits([3e-4, 6e-4, 1e-4]) == (0.0, 6e-4 * 1.15), "lr axis: 0 to the largest rate + 15%")
        PASSED.append(1)
        p = run(a)
        check(p.returncode == 0, f"plot of a JSONL run failed: {p.stderr}")
        w, h = png_size(os.path.join(a, "plot.png"))
        check(w > 2.5 * h, f"JSONL run: expected three panels side by side, got {w}x{h}")
        PASSED.append(1)
        _, _, resumes = plot_run.read_run(b)
        check(resumes == [], f"main.log without a resume: none found, got {resumes}")
        with open(os.path.join(b, "main.log"), "a") as f:  # resumed from step 100: steps 101.. again
            for s in range(101, 110):
                f.write(f"s:{s} trl:{4 + 6 * math.exp(-s / 30):f}\n")
        _, _, resumes = plot_run.read_run(b)
        check(resumes == [100], f"main.log: a step that goes back is a resume (at 100), got {resumes}")
        p = run(b)
        check(p.returncode == 0 and "resumed at step 100" in p.stdout, f"plot of a main.log run failed: {p.stderr} {p.stdout}")
        w, h = png_size(os.path.join(b, "plot.png"))
        check(w < 2 * h, f"main.log run: expected one panel, got {w}x{h}")
        PASSED.append(1)
        p = run(c)
        check(p.returncode == 1 and len(p.stderr.strip().splitlines()) == 1 and "no log.jsonl or main.log" in p.stderr,
              f"empty run dir: {p.returncode} {p.stderr!r}")
        with open(os.path.join(c, "main.log"), "w") as f:
            f.write("s:1 trl:4.0\ngarbage line\n")
        p = run(c)
        check(p.returncode == 1 and "main.log:2" in p.stderr, f"malformed main.log: {p.returncode} {p.stderr!r}")
        PASSED.append(1)
    print("  ok  make plot: JSONL and main.log runs plotted, bad logs rejected in one line")
    test_frontier()
    print("  ok  plot_frontier: best rates by the seeds' mean, the frontier, the PNG; bad input in one line")
    print(f"{len(PASSED)} passed, 0 failed")


def mode(name, bpp, lrs):
    """A quality_table.py mode: lrs {lr: [val loss per seed]}."""
    return {"name": name, "state_bpp": bpp, "state_bpp_124m": bpp,
            "lrs": [{"lr": lr, "finals": f, "final": sum(f) / len(f), "secs": 10.0} for lr, f in lrs.items()]}


def test_frontier():
    with tempfile.TemporaryDirectory() as d:
        one = {"model": "L4C128H4", "steps": 300, "seeds": ["42", "7"], "modes": {
            "fp32": mode("AdamW fp32", 8.0, {"1e-3": [6.0, 6.1], "3e-3": [5.8, 5.9]}),
            "int8": mode("AdamW int8", 2.0, {"1e-3": [6.0, 6.0], "3e-3": [5.9, 6.0]}),
            "lion": mode("Lion", 4.0, {"3e-4": [6.2, 6.3]})}}
        two = {"model": "L4C128H4", "steps": 300, "seeds": ["42", "7"], "modes": {
            "4bit": mode("AdamW 4bit", 1.05, {"3e-3": [5.86, 5.9], "1e-2": [6.2, 6.1]}),
            "muon": dict(mode("Muon", 5.0, {}), lrs=[{"lr": "1e-2", "error": "refused"}])}}
        for name, d_ in (("one.json", one), ("two.json", two)):
            with open(os.path.join(d, name), "w") as f:
                json.dump(d_, f)
        modes, _ = plot_frontier.load([os.path.join(d, "one.json"), os.path.join(d, "two.json")])
        pts = plot_frontier.points(modes)
        check([p[0] for p in pts] == ["AdamW 4bit", "AdamW int8", "Lion", "AdamW fp32"],
              f"frontier: the modes with a result by bytes, got {[p[0] for p in pts]}")
        check([(p[0], p[5]) for p in pts if p[0] in ("AdamW fp32", "AdamW 4bit")] == [("AdamW 4bit", "3e-3"), ("AdamW fp32", "3e-3")],
              "frontier: the best rate is the lowest mean")
        front = plot_frontier.frontier(pts)
        check([p[0] for p in front] == ["AdamW 4bit", "AdamW fp32"], f"frontier: 4bit, then fp32, got {[p[0] for p in front]}")
        PASSED.append(1)
        out = os.path.join(d, "frontier.png")
        p = subprocess.run([sys.executable, os.path.join(HERE, "plot_frontier.py"), os.path.join(d, "one.json"),
                            os.path.join(d, "two.json"), "--out", out], capture_output=True, text=True)
        check(p.returncode == 0 and "| AdamW 4bit | 1.050 | 3e-3 | 5.8800 (5.8600 .. 5.9000) | yes |" in p.stdout,
              f"frontier table: {p.returncode} {p.stderr} {p.stdout}")
        w, h = png_size(out)
        check(w > h > 100, f"frontier PNG {w}x{h}")
        with open(os.path.join(d, "bad.json"), "w") as f:
            f.write("[1, 2]")
        p = subprocess.run([sys.executable, os.path.join(HERE, "plot_frontier.py"), os.path.join(d, "bad.json"), "--out", out],
                           capture_output=True, text=True)
        check(p.returncode == 1 and len(p.stderr.strip().splitlines()) == 1 and "bad.json" in p.stderr,
              f"bad results: {p.returncode} {p.stderr!r}")
        PASSED.append(1)


if __name__ == "__main__":
    main()

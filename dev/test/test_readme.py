#!/usr/bin/env python3
"""test_readme.py: the documented commands, run as written, in a fresh copy of the source tree.

The commands come from README.md and docs/*.md themselves, so that a change there changes what runs
here: every line of every code block of README.md (its "Quick start" among them), the first block of
the section "Any corpus: `prepare_corpus`" (docs/data.md), the AdamW lab's block (the one block that
starts a line with `make build/cuda/adamw`), and every `./train_gpt2` or `make plot` line anywhere
that uses make train's out/. A line ending in a backslash continues on the next. Each line must
match one rule below (a line no rule knows fails the test): it runs as written in the copy, or is
checked another way, or is skipped for a stated reason. Bounds on time, the only changes:
`make train` runs with TRAIN_STEPS=N from the environment (the Makefile's variable; the model file
is then out/model_<N>.bin, which the follow-up lines are read with), and a trainer line that trains
gets `-x 2 -m 2 -g 8` appended (later flags win). The copy gets the built binaries (make finds them
up to date), the data from the mirror (`make data`), notes/, books/ and fineweb/ for the corpus
lines (a dangling link and a file without an extension among them), and a HellaSwag file of three
examples in the official format.

Also: prepare_corpus's printed command trains as printed; every place in README.md and docs/*.md
that quotes the memory model's figures (d12's optimizer side, the 124M fp32 figures of
`make memory-table`, ZeRO-1 over 8 GPUs) quotes what `train_gpt2 --memory-report 1` and
`make memory-table` print, and each is quoted at least once.
Usage: test_readme.py --bin build/train_gpt2 --prepare-corpus build/prepare_corpus
       --memory-table build/memory_table [--lab build/cuda/adamw] [--gpu-bin build/train_gpt2cu_emu_fp32]
       [--steps 5]. Run from the repository root. Exit 1 if any check failed.
"""
import argparse
import gzip
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from testlib import check, failures, step_losses  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
CAPS = ["-x", "2", "-m", "2", "-g", "8"]


def clean_env(**extra):
    """A user's shell: no make variables of the make that runs this test, one OpenMP thread."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "TRAIN_STEPS")}
    env.update(extra)
    return env


def sh(line, cwd, env, timeout=600):
    t0 = time.time()
    try:
        r = subprocess.run(["bash", "-c", line], capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        r = subprocess.CompletedProcess(line, None, "", "still running after %d s" % timeout)
    print("  %5.1f s  %s" % (time.time() - t0, line))
    return r


# ----------------------------------------------------------------------------
# the documented commands

def sections(text):
    """{heading: body} of every ## and ### heading."""
    out, name, body = {}, None, []
    for line in text.splitlines():
        m = re.match(r"^#{2,3} (.+)$", line)
        if m:
            if name:
                out[name] = "\n".join(body)
            name, body = m.group(1).strip(), []
        else:
            body.append(line)
    if name:
        out[name] = "\n".join(body)
    return out


def blocks(text):
    """The lines of each fenced code block (``` or ```bash, indented or not); a line ending in a
    backslash is joined with the next, as the shell reads it."""
    out, cur, fenced = [], None, False
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("```"):
            if not fenced:
                cur = [] if s in ("```", "```bash", "```sh") else None  # (other languages: not commands)
            elif cur is not None:
                out.append(cur)
            fenced = not fenced
            continue
        if fenced and cur is not None:
            if cur and cur[-1].endswith("\\"):
                cur[-1] = cur[-1][:-1].rstrip() + " " + s
            else:
                cur.append(s)
    return out


def command(line):
    """A shell line without its trailing comment (the docs write `cmd   # what it does`)."""
    return re.sub(r"\s+#\s.*$", "", line).strip()


def doc_files():
    """README.md first, then docs/*.md: {path relative to the root: text}."""
    names = ["README.md"] + sorted(os.path.join("docs", f) for f in os.listdir(os.path.join(ROOT, "docs"))
                                   if f.endswith(".md"))
    return {n: open(os.path.join(ROOT, n), encoding="utf-8").read() for n in names}


def readme_commands(docs):
    readme = docs["README.md"]
    check("Quick start" in sections(readme), "README.md has the section 'Quick start'")
    lines = []
    for b in blocks(readme):  # README's every command
        lines += b
    corpus_name = "Any corpus: `prepare_corpus`"
    corpus = [blocks(sections(t)[corpus_name]) for t in docs.values() if corpus_name in sections(t)]
    check(len(corpus) == 1, "one file of README.md and docs/ has the section %r (%d)" % (corpus_name, len(corpus)))
    check(bool(corpus and corpus[0]), "the corpus section has its example block")
    lines += corpus[0][0] if corpus and corpus[0] else []
    labs = [b for t in docs.values() for b in blocks(t) if any(ln.startswith("make build/cuda/adamw") for ln in b)]
    check(len(labs) == 1, "README.md and docs/ have the AdamW lab's block, once (%d)" % len(labs))
    lines += labs[0] if labs else []
    for t in docs.values():  # the follow-ups of make train anywhere
        for b in blocks(t):
            lines += [ln for ln in b if re.match(r"^(\./train_gpt2 |make plot )", ln) and ("out/" in ln or "RUN=out" in ln)]
    seen, out = set(), []
    for ln in map(command, lines):
        if ln and not ln.startswith("#") and ln not in seen:
            seen.add(ln)
            out.append(ln)
    return out


# ----------------------------------------------------------------------------
# the copy of the tree

def copy_tree(tmp, a):
    tree = os.path.join(tmp, "tree")
    os.makedirs(os.path.join(tree, "build"))
    for f in ("Makefile", "README.md", "train_gpt2.c", "test_gpt2.c", "train_gpt2.cu", "test_gpt2.cu"):
        shutil.copy2(os.path.join(ROOT, f), tree)
    for d in ("llmc", "dev", "docs"):
        shutil.copytree(os.path.join(ROOT, d), os.path.join(tree, d), ignore=shutil.ignore_patterns("__pycache__"))
    if os.path.isdir(os.path.join(ROOT, "build", "deps")):  # the cuDNN frontend headers: the dependency step finds them
        shutil.copytree(os.path.join(ROOT, "build", "deps"), os.path.join(tree, "build", "deps"))
    # the built programs, newer than their sources: make finds them up to date
    now = time.time()
    built = [(a.bin, "train_gpt2"), (a.prepare_corpus, "build/prepare_corpus"),
             (os.path.join(ROOT, "build", "prepare_data"), "build/prepare_data"), (a.memory_table, "build/memory_table")]
    if a.lab:
        built += [(a.lab, "build/cuda/adamw")] + ([(a.lab + ".d", "build/cuda/adamw.d")] if os.path.exists(a.lab + ".d") else [])
    for src, dst in built:
        os.makedirs(os.path.dirname(os.path.join(tree, dst)), exist_ok=True)
        shutil.copy2(src, os.path.join(tree, dst))
        os.utime(os.path.join(tree, dst), (now, now))
    return tree


def write_inputs(tree, mirror):
    """notes/ and books/*.txt (TinyShakespeare's sections), fineweb/*.jsonl.gz, a HellaSwag file."""
    text = open(os.path.join(mirror, "tinyshakespeare", "input.txt"), encoding="utf-8").read()
    secs = text.split("\n\n")
    os.makedirs(os.path.join(tree, "notes", "2024"))
    os.makedirs(os.path.join(tree, "books"))
    os.makedirs(os.path.join(tree, "fineweb"))
    for i in range(4):
        with open(os.path.join(tree, "notes", "2024" if i % 2 else "", "note%d.txt" % i), "w", encoding="utf-8") as f:
            f.write("\n\n".join(secs[40 * i:40 * (i + 1)]))
    with open(os.path.join(tree, "notes", "LICENSE"), "w", encoding="utf-8") as f:  # no extension: skipped, counted
        f.write("a license text\n")
    os.symlink(os.path.join(tree, "nowhere.txt"), os.path.join(tree, "notes", "gone.txt"))  # dangling: skipped, counted
    for i in range(3):
        with open(os.path.join(tree, "books", "book%d.txt" % i), "w", encoding="utf-8") as f:
            f.write("\n\n".join(secs[1000 + 400 * i:1000 + 400 * (i + 1)]))
    for i in range(2):
        with gzip.open(os.path.join(tree, "fineweb", "part%d.jsonl.gz" % i), "wt", encoding="utf-8") as f:
            for s in secs[3000 + 600 * i:3000 + 600 * (i + 1)]:
                f.write(json.dumps({"text": s, "id": 7}) + "\n")
    os.makedirs(os.path.join(tree, "data", "hellaswag"))
    with open(os.path.join(tree, "data", "hellaswag", "hellaswag_val.jsonl"), "w", encoding="utf-8") as f:
        for k in range(3):
            f.write(json.dumps({"ctx": "ROMEO: " + secs[10 + k][:120], "label": k % 4,
                                "endings": [secs[20 + k + 4 * e][:60] for e in range(4)]}) + "\n")


# ----------------------------------------------------------------------------
# the rules

class Runner:
    def __init__(self, tree, a, env):
        self.tree, self.a, self.env = tree, a, env
        self.ran, self.skipped, self.trained = [], [], {}
        self.model = "out/model_%08d.bin" % a.steps

    def trainer(self, line):
        """A ./train_gpt2 line as written (make train's model at this run's step count), capped when it trains."""
        line = line.replace("out/model_00000200.bin", self.model)
        args = shlex.split(line)
        trains = not re.search(r"(^| )-x 0( |$)", line)
        cmd = " ".join(shlex.quote(x) for x in args + (CAPS if trains else []))
        if cmd in self.trained:  # (docs/data.md's fineweb line is prepare_corpus's printed command: run once)
            return self.trained[cmd]
        r = sh(cmd, self.tree, self.env)
        self.trained[cmd] = r
        check(r.returncode == 0, "%s: exit 0 (exit %s): %s" % (line, r.returncode, r.stderr.strip()[-400:]))
        if trains:
            check(len(step_losses(r.stdout)) == 2 and "val loss" in r.stdout and "generating:" in r.stdout,
                  "%s: two steps, the val loss and a sample: %s" % (line, r.stdout[-400:]))
        if "--hellaswag 1" in line:
            check(re.search(r"^hellaswag: acc [\d.]+ \(\d+/3\)", r.stdout, re.M) is not None,
                  "%s: the HellaSwag accuracy of 3 examples: %s" % (line, r.stdout[-400:]))
        elif "--prompt" in line:
            check("generating:" in r.stdout and "prompt:" in r.stdout, "%s: a sample after the prompt" % line)
        return r

    def make_train(self, line):
        r = sh(line, self.tree, dict(self.env, TRAIN_STEPS=str(self.a.steps), OMP_NUM_THREADS="2"))
        last = re.findall(r"^step\s+(\d+)/(\d+)", r.stdout, re.M)
        check(r.returncode == 0, "make train exits 0: %s" % (r.stdout + r.stderr).strip()[-800:])
        check("dependencies: ok" in r.stdout, "make train runs the dependency step")
        check(len(step_losses(r.stdout)) == self.a.steps and last and last[-1] == (str(self.a.steps),) * 2,
              "make train TRAIN_STEPS=%d: that many step lines" % self.a.steps)
        check("val loss" in r.stdout and "generating:" in r.stdout, "make train: val loss and a sample at the last step")
        for f in (self.model, "out/log.jsonl", "out/main.log", "out/DONE_%08d" % self.a.steps):
            check(os.path.exists(os.path.join(self.tree, f)), "make train writes %s" % f)
        check(re.search(r"last checkpoint out/model_%08d\.bin" % self.a.steps, r.stdout) is not None,
              "make train's summary names its model: %s" % (r.stdout.strip().splitlines() or [""])[-1])
        # run again: -y 1 finds the checkpoint at the last step and ends at once
        r = sh(line, self.tree, dict(self.env, TRAIN_STEPS=str(self.a.steps), OMP_NUM_THREADS="2"))
        check(r.returncode == 0 and "at or past the last step" in r.stdout and not step_losses(r.stdout),
              "make train again: ends at once, saying so: %s" % r.stdout[-300:])

    def plot(self, line):
        r = sh(line, self.tree, self.env)
        png = os.path.join(self.tree, "out", "plot.png")
        check(r.returncode == 0 and os.path.exists(png), "%s: out/plot.png (exit %s): %s" % (line, r.returncode, r.stderr[-300:]))

    def corpus(self, line):
        r = sh(line, self.tree, self.env)
        check(r.returncode == 0, "%s: exit 0: %s" % (line, r.stderr.strip()[-300:]))
        if "-o data/mytext" in line:
            check("1 dangling links" in r.stdout and "skipped 1 files that are not" in r.stdout,
                  "%s: the dangling link and LICENSE skipped and counted: %s" % (line, r.stdout))
        hint = re.findall(r"^prepare_corpus: train with (\./train_gpt2 .*)$", r.stdout, re.M)
        check(len(hint) == 1, "%s: prints the command to train with: %s" % (line, r.stdout[-400:]))
        if hint:
            self.trainer(hint[0])

    def gpu(self, line):
        """No GPU here: the flags of a train_gpt2cu line, through the harness build's --memory-report."""
        if not self.a.gpu_bin:
            self.skipped.append((line, "needs a GPU (no harness build given)"))
            return
        args = [a for a in shlex.split(line.split("&&")[-1].strip())[1:]]
        report = [] if "--memory-report 1" in line else ["--memory-report", "1"]
        r = sh(" ".join(shlex.quote(x) for x in [self.a.gpu_bin] + args + report), self.tree, self.env)
        check(r.returncode == 0 and "GPU memory" in r.stdout,
              "%s: its flags pass the harness build's --memory-report: %s" % (line, r.stderr.strip()[-300:]))

    def make_dry(self, line):
        r = sh(line.replace("make ", "make -n ", 1), self.tree, self.env)
        check(r.returncode == 0 and "nvcc" in r.stdout, "%s: make -n resolves to an nvcc build: %s" % (line, r.stderr[-300:]))

    def report(self, line):
        """A --memory-report line: the table, nothing trained."""
        r = sh(line, self.tree, self.env)
        check(r.returncode == 0 and "optimizer side" in r.stdout and not step_losses(r.stdout),
              "%s: the memory table (exit %s): %s" % (line, r.returncode, (r.stdout + r.stderr).strip()[-400:]))

    def memory_table(self, line):
        r = sh(line, self.tree, self.env)
        check(r.returncode == 0 and "OK: 0 row(s)" in r.stdout,
              "%s: every formula gives its published figure (exit %s): %s" % (line, r.returncode, r.stdout.strip()[-400:]))

    def lab_bench(self, line):
        r = sh(line, self.tree, self.env)
        check(r.returncode == 0 and "prod fp32" in r.stdout,
              "%s: the bench table (exit %s): %s" % (line, r.returncode, (r.stdout + r.stderr).strip()[-400:]))

    def shell(self, line):
        r = sh(line, self.tree, self.env)
        check(r.returncode == 0, "%s: exit 0 (exit %s): %s" % (line, r.returncode, (r.stdout + r.stderr).strip()[-400:]))

    def rules(self):
        return [
            (r"^make train$", self.make_train),
            (r"^make test$", "the whole suite, which runs this test"),
            (r"^\./train_gpt2 -e gpt2_124M\.bin", "needs GPT-2's published weights from the Hugging Face hub (network)"),
            (r"^\./train_gpt2 .*--memory-report 1", self.report),
            (r"^\./train_gpt2 ", self.trainer),
            (r"^make memory-table$", self.memory_table),
            (r"^make plot RUN=out$", self.plot),
            (r"^(make train_gpt2cu && )?\./train_gpt2cu( |$)", self.gpu),
            (r"^make data build/prepare_corpus$", self.shell),
            (r"^build/prepare_corpus ", self.corpus),
            (r"^make build/cuda/adamw && build/cuda/adamw --check$", self.shell if self.a.lab else "no harness lab given"),
            (r"^build/cuda/adamw --bench( |$)", self.lab_bench if self.a.lab else "no harness lab given"),
            (r"^make build/cuda-gpu/adamw$", self.make_dry),
            (r"^build/cuda-gpu/adamw ", "needs a GPU"),
        ]

    def run(self, line):
        for pattern, what in self.rules():
            if re.search(pattern, line):
                if isinstance(what, str):
                    self.skipped.append((line, what))
                else:
                    what(line)
                    self.ran.append(line)
                return
        check(False, "a documented command no rule of this test knows (add one): %s" % line)


# ----------------------------------------------------------------------------
# the memory figures of README.md and docs/ against the programs

def number(s):
    return float(s.replace(",", ""))


def check_memory_figures(docs, a):
    """Every quote of each figure, in every file, is what the programs print; each is quoted."""
    rep = subprocess.run([a.bin, "--memory-report", "1", "-e", "d12", "-b", "4", "-t", "64"], capture_output=True,
                         text=True, timeout=300).stdout
    table = subprocess.run([a.memory_table], capture_output=True, text=True, timeout=300).stdout
    m = re.search(r"optimizer side \(master weights, gradients, optimizer state\): ([\d.]+) MiB \(([\d.]+) MB\)", rep)
    rows = {}
    for line in table.splitlines():
        c = [x.strip() for x in line.split("|")[1:-1]]
        if len(c) == 6 and c[2].endswith(("MB", "MiB", "GB")):
            rows[(c[0], c[2].split()[-1])] = c[2]
    want = [rows.get((k, "MB")) for k in ("124M fp32: parameters", "124M fp32: AdamW m and v",
                                          "124M fp32: optimizer side (grad + m + v)", "124M fp32: parameter-related total")]
    zero = rows.get(("ours: 124M bf16 ZeRO-1 x8, per GPU", "MB"))
    check(m and all(want) and zero, "the programs print the figures: %s %s %s" % (m and m.groups(), want, zero))
    if not (m and all(want) and zero):
        return
    figures = [  # (what, pattern, the values the quote must hold)
        ("d12's optimizer side (--memory-report)",
         r"AdamW m \+ v add 12 bytes per parameter \(([\d,.]+) MiB = ([\d,.]+) MB\)",
         [float(m.group(1)), float(m.group(2))]),
        ("the 124M fp32 figures (make memory-table)",
         r"it prints ([\d.,]+) MB of parameters, ([\d.,]+) MB for AdamW's m and v alone, ([\d.,]+) MB with the "
         r"gradients, and ([\d.,]+) MB in all", [float(w.split()[0]) for w in want]),
        ("ZeRO-1 x8 per GPU (make memory-table)",
         r"ZeRO-1 over 8 GPUs holds [^.]*?: ([\d.,]+) MB per GPU instead of ([\d.,]+) MB",
         [float(zero.split()[0]), float(want[3].split()[0])]),
    ]
    for what, pattern, values in figures:
        quotes = 0
        for name, text in docs.items():
            for q in re.finditer(pattern, " ".join(text.split())):  # line breaks fall anywhere
                quotes += 1
                check([number(x) for x in q.groups()] == values,
                      "%s quotes %s as %s; the program prints %s" % (name, what, list(q.groups()), values))
        check(quotes > 0, "README.md or docs/ quotes %s" % what)
        print("  %d quote(s) of %s checked" % (quotes, what))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, help="the CPU trainer (build/train_gpt2)")
    ap.add_argument("--prepare-corpus", required=True)
    ap.add_argument("--memory-table", required=True)
    ap.add_argument("--lab", help="the AdamW lab's harness build (build/cuda/adamw)")
    ap.add_argument("--gpu-bin", help="a harness build of the GPU trainer: the train_gpt2cu lines' flags")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--mirror", default=os.path.join(ROOT, "data"))
    a = ap.parse_args()
    for k in ("bin", "prepare_corpus", "memory_table", "lab", "gpu_bin"):
        if getattr(a, k):
            setattr(a, k, os.path.abspath(getattr(a, k)))
    mirror = os.path.abspath(a.mirror)
    if not os.path.exists(os.path.join(mirror, "tinyshakespeare", "input.txt")):
        print("FAIL: %s is no data mirror (run `make data` first)" % mirror)
        return 1
    docs = doc_files()
    lines = readme_commands(docs)
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        tree = copy_tree(tmp, a)
        write_inputs(tree, mirror)
        runner = Runner(tree, a, clean_env(LEANSTEP_DATA_MIRROR=mirror, OMP_NUM_THREADS="1"))
        order = sorted(range(len(lines)), key=lambda i: not lines[i].startswith("make train"))  # make train first
        for i in order:
            runner.run(lines[i])
    check_memory_figures(docs, a)
    for line, why in runner.skipped:
        print("  skipped  %s  (%s)" % (line, why))
    check(len(runner.ran) >= 8, "most of the documented commands ran (%d)" % len(runner.ran))
    print("test_readme: %d documented commands run, %d skipped, %.0f s; %s" % (len(runner.ran), len(runner.skipped), time.time() - t0,
          "%d failed" % len(failures) if failures else "all checks passed"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""run_mutants.py: the mutant suite. Each dev/mutants/*.mut plants one realistic bug in the product
code; the checks it names, pieces of `make test`, must catch it. (docs/tests.md, "The mutant suite")

  run_mutants.py                 every mutant (make mutants)
  run_mutants.py --only gelu     the mutants whose name contains 'gelu' (or matches it as a glob)
  run_mutants.py --list          the mutants, their layers and files; a stale one is marked

In a temporary git worktree of HEAD (detached, under $TMPDIR: the product code and the tests are
HEAD's, so commit a test before asking it to catch a mutant; the .mut files are this checkout's),
with data/ made from LEANSTEP_DATA_MIRROR or this checkout's data/:
  1. every check of the chosen mutants runs once unmutated, and all must pass: a check that fails
     without the bug proves nothing when it fails with it;
  2. per mutant: the edit is applied (its find text must occur exactly once in the file, else the
     mutant is stale), its checks run in order until one fails (caught, by that check) or all pass
     (SURVIVED); the file is restored and touched, and what the checks built must then be out of
     date (make -q), so that the next check that needs it rebuilds it from the restored source.
A check `make [-s] TARGETS && COMMAND` builds first: a build that fails with the mutant is an error
(the mutant does not build), never a catch. A check that runs past the time limit counts as caught
(a hang fails CI as surely). The worktree is removed at the end, also on Ctrl-C.
Exit status 0 when every mutant is caught; 1 when one survived, is stale or does not build; 2 when
a check fails without any mutant.

A .mut file:
  # the bug, in one line
  file: the product file to edit (from the repository root)
  layer: kernels | optimizer | state | views | data | ... (the table's second column)
  check: a shell command run in the tree's root, exit 0 = pass (one line each, cheapest first;
         $PYTHON and $TORCH_PYTHON are set)
  timeout: seconds per check (optional, 600)
  --- find
  the exact text to replace: a line or a few, unique in the file
  --- replace
  its replacement
"""
import argparse
import fnmatch
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DEFAULT_TIMEOUT = 600
JOBS = min(2, os.cpu_count() or 1)  # make -j inside a check (the checks themselves run one at a time)


class MutantError(Exception):
    pass


class Mutant:
    def __init__(self, path):
        self.path = path
        self.name = os.path.basename(path)[:-len(".mut")]
        self.desc, self.file, self.layer, self.checks, self.timeout = "", None, "", [], DEFAULT_TIMEOUT
        self.find = self.replace = None
        block, lines = None, {"find": [], "replace": []}
        with open(path, encoding="utf-8") as fh:
            for n, line in enumerate(fh.read().split("\n"), 1):
                if line.startswith("--- "):
                    block = line[4:].strip()
                    if block not in lines:
                        raise MutantError("%s:%d: unknown block '%s' (find, replace)" % (path, n, block))
                    continue
                if block is not None:
                    lines[block].append(line)
                elif line.startswith("#") and not self.desc:
                    self.desc = line[1:].strip()
                elif line.strip() and not line.startswith("#"):
                    key, sep, value = line.partition(":")
                    key, value = key.strip(), value.strip()
                    if not sep or key not in ("file", "layer", "check", "timeout"):
                        raise MutantError("%s:%d: expected 'file:', 'layer:', 'check:' or 'timeout:'" % (path, n))
                    if key == "check":
                        self.checks.append(value)
                    elif key == "timeout":
                        self.timeout = int(value)
                    else:
                        setattr(self, key, value)
        for k in lines:  # (a block's trailing empty lines, the file's last newline among them, are not its text)
            while lines[k] and lines[k][-1] == "":
                lines[k].pop()
        self.find, self.replace = "\n".join(lines["find"]), "\n".join(lines["replace"])
        missing = [k for k, v in (("description", self.desc), ("file", self.file), ("layer", self.layer),
                                  ("check", self.checks), ("--- find", self.find)) if not v]
        if missing:
            raise MutantError("%s: missing %s" % (path, ", ".join(missing)))
        if self.find == self.replace:
            raise MutantError("%s: the replacement equals the find text" % path)

    def edited(self, root):
        """The file's text and its mutated text; MutantError when the find text is not there once."""
        with open(os.path.join(root, self.file), encoding="utf-8") as fh:
            text = fh.read()
        if text.count(self.find) != 1:
            raise MutantError("stale mutant %s: snippet not found exactly once in %s (%d times)"
                              % (self.name, self.file, text.count(self.find)))
        return text, text.replace(self.find, self.replace)


def split_check(check):
    """'make [-s] T1 T2 && rest' -> (['T1', 'T2'], 'rest'); anything else -> ([], check)."""
    m = re.match(r"^make((?:\s+-s)?)\s+([^&|;]+?)\s*&&\s*(.+)$", check, re.S)
    if not m:
        return [], check
    return m.group(2).split(), m.group(3)


def check_label(check):
    """A short name for the table: the test script, the program and its mode, or the test function."""
    _, rest = split_check(check)
    words = [w for w in rest.split() if not re.match(r"^[A-Z_][A-Z0-9_]*=", w)]
    if not words:
        return "?"
    if words[0] in ("python3", "$PYTHON", "$TORCH_PYTHON") and len(words) > 1:
        if words[1] == "-c":  # one function of a test script, called alone
            m = re.search(r"(\w+)\.(check_\w+)\(", rest)
            return "%s.%s" % (m.group(1), m.group(2)) if m else "python -c"
        return os.path.basename(words[1])
    mode = [w for w in words[1:2] if w.startswith("--")]
    return " ".join([os.path.basename(words[0])] + mode)


class Runner:
    def __init__(self, root, verbose):
        self.root, self.verbose = root, verbose
        self.env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"), MAKEFLAGS="-j%d" % JOBS)
        for k in ("MAKELEVEL", "MFLAGS", "MAKEOVERRIDES"):
            self.env.pop(k, None)
        self.env.setdefault("PYTHON", "python3")
        self.env.setdefault("TORCH_PYTHON", "/usr/bin/python3")
        self.proc = None

    def sh(self, cmd, timeout):
        """(exit status or 'timeout', output) of a shell command in the tree, its process group
        killed on a timeout."""
        self.proc = subprocess.Popen(["bash", "-c", cmd], cwd=self.root, env=self.env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, errors="replace", start_new_session=True)
        try:
            out, _ = self.proc.communicate(timeout=timeout)
            return self.proc.returncode, out
        except subprocess.TimeoutExpired:
            self.kill()
            out, _ = self.proc.communicate()
            return "timeout", out
        finally:
            self.proc = None

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def build(self, targets, timeout):
        return self.sh("make -s %s" % " ".join(targets), timeout) if targets else (0, "")

    def out_of_date(self, targets):
        """The targets make would rebuild now."""
        return [t for t in targets if self.sh("make -q %s" % t, 120)[0] != 0]


def tail(text, n=25):
    lines = text.rstrip().splitlines()
    return "\n".join("    " + x for x in lines[-n:])


def run_baseline(r, mutants):
    checks = []
    for m in mutants:
        for c in m.checks:
            if c not in checks:
                checks.append(c)
    print("baseline: %d checks of %d mutants, unmutated" % (len(checks), len(mutants)), flush=True)
    timeout = max(m.timeout for m in mutants)
    for c in checks:
        t0 = time.time()
        targets, rest = split_check(c)
        rc, out = r.build(targets, 3 * timeout)
        if rc == 0:
            rc, out2 = r.sh(rest, timeout)
            out += out2
        print("  %-6s %6.1f s  %s" % ("ok" if rc == 0 else "FAILED", time.time() - t0, c), flush=True)
        if rc != 0:
            print(tail(out, 40))
            return False
    return True


def run_mutant(r, m):
    """(outcome, check label or detail); outcome: 'caught', 'SURVIVED', 'ERROR'."""
    path = os.path.join(r.root, m.file)
    try:
        text, mutated = m.edited(r.root)
    except (MutantError, OSError) as e:
        return "ERROR", str(e)
    built = []
    outcome = ("SURVIVED", "-")
    try:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(mutated)
        for i, c in enumerate(m.checks):
            targets, rest = split_check(c)
            rc, out = r.build(targets, 3 * m.timeout)
            built += [t for t in targets if t not in built]
            if rc != 0:
                outcome = ("ERROR", "mutant does not build (%s)" % " ".join(targets))
                print(tail(out, 15))
                break
            rc, out = r.sh(rest, m.timeout)
            if re.search(r"^\S*%s:\d+:(\d+:)? error:" % re.escape(os.path.basename(m.file)), out, re.M):
                outcome = ("ERROR", "mutant does not build (check %d)" % (i + 1))
                print(tail(out, 15))
                break
            if rc != 0:
                label = check_label(c) + (" (timeout)" if rc == "timeout" else "")
                outcome = ("caught", label if len(m.checks) == 1 else "%s [%d]" % (label, i + 1))
                if r.verbose:
                    print(tail(out, 12))
                break
        else:
            print("  %s survived its checks; the last one printed:\n%s" % (m.name, tail(out, 12)))
    finally:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.utime(path)  # newer than anything built from the mutant: make rebuilds it
    if built and outcome[0] != "ERROR":
        stale = r.out_of_date(built)
        if not stale:
            return "ERROR", "no build of %s depends on %s: the checks never ran the mutant" % (" ".join(built), m.file)
    return outcome


def make_worktree():
    top = tempfile.mkdtemp(prefix="leanstep-mutants-")
    tree = os.path.join(top, "tree")
    subprocess.run(["git", "-C", REPO, "worktree", "add", "--detach", "--quiet", tree, "HEAD"], check=True)
    return top, tree


def remove_worktree(top, tree):
    subprocess.run(["git", "-C", REPO, "worktree", "remove", "--force", tree], stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    subprocess.run(["git", "-C", REPO, "worktree", "prune"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    shutil.rmtree(top, ignore_errors=True)


def make_data(r):
    """data/ of the tree: from LEANSTEP_DATA_MIRROR, else this checkout's data/ (the mirror's layout)."""
    mirror = os.environ.get("LEANSTEP_DATA_MIRROR") or ""
    if not mirror and os.path.exists(os.path.join(REPO, "data", "gpt2", "vocab.bpe")):
        mirror = os.path.join(REPO, "data")
    r.env["LEANSTEP_DATA_MIRROR"] = mirror
    rc, out = r.sh("make -s data", 900)
    if rc != 0:
        print("make data failed in the worktree:\n%s" % tail(out))
        return False
    return True


def main():
    ap = argparse.ArgumentParser(description="the mutant suite (docs/tests.md)")
    ap.add_argument("--only", help="mutants whose name contains PATTERN or matches it as a glob")
    ap.add_argument("--list", action="store_true", help="list the mutants (stale ones marked) and exit")
    ap.add_argument("--tree", help="run in this checkout instead of a temporary worktree (kept as it was)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary worktree (its path is printed)")
    ap.add_argument("--no-baseline", action="store_true", help="skip step 1 (while writing a mutant; not for a verdict)")
    ap.add_argument("-v", "--verbose", action="store_true", help="print the end of each catching check's output")
    a = ap.parse_args()

    try:
        mutants = [Mutant(os.path.join(HERE, f)) for f in sorted(os.listdir(HERE)) if f.endswith(".mut")]
    except MutantError as e:
        print("run_mutants: %s" % e)
        return 1
    if a.only:
        mutants = [m for m in mutants if a.only in m.name or fnmatch.fnmatch(m.name, a.only)]
    if not mutants:
        print("run_mutants: no mutant matches")
        return 1
    if a.list:
        for m in mutants:
            try:
                m.edited(REPO)
                state = ""
            except (MutantError, OSError) as e:
                state = "  STALE: %s" % e
            print("%-40s %-11s %-32s %s%s" % (m.name, m.layer, m.file, m.desc, state))
        return 0

    t_start = time.time()
    top, tree = (None, os.path.abspath(a.tree)) if a.tree else make_worktree()
    r = Runner(tree, a.verbose)
    rows = []

    def on_term(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_term)
    try:
        print("run_mutants: %d mutants in %s (HEAD %s)" % (len(mutants), tree, subprocess.run(
            ["git", "-C", tree, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()), flush=True)
        if top is not None and not make_data(r):  # (--tree: that checkout's own data/)
            return 2
        if not a.no_baseline and not run_baseline(r, mutants):
            print("run_mutants: a check fails without any mutant: fix it first")
            return 2
        print("baseline passed (%.0f s)" % (time.time() - t_start), flush=True)
        for m in mutants:
            t0 = time.time()
            outcome, detail = run_mutant(r, m)
            rows.append((m, outcome, detail, time.time() - t0))
            print("  %-40s %-8s %6.1f s  %s" % (m.name, outcome, rows[-1][3], detail), flush=True)
    except KeyboardInterrupt:
        r.kill()
        print("\nrun_mutants: interrupted")
        return 130
    finally:
        if top is not None:
            if a.keep:
                print("run_mutants: the worktree is kept: %s (git worktree remove --force %s)" % (tree, tree))
            else:
                remove_worktree(top, tree)

    print("\n| mutant | layer | caught by | s |\n|---|---|---|---|")
    for m, outcome, detail, secs in rows:
        what = detail if outcome == "caught" else "**%s**: %s" % (outcome, detail)
        print("| %s | %s | %s | %.0f |" % (m.name, m.layer, what, secs))
    bad = [m.name for m, outcome, _, _ in rows if outcome != "caught"]
    print("\n%d mutants: %d caught, %d not (%s); %.1f min in all"
          % (len(rows), len(rows) - len(bad), len(bad), ", ".join(bad) or "none", (time.time() - t_start) / 60))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

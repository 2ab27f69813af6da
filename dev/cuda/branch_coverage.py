#!/usr/bin/env python3
"""branch_coverage.py: every path that product kernels mark with LS_BRANCH("name")
(llmc/cuda/cuda_common.h) must have run in the lab checks. The CPU-harness builds count each
marked site and append "file:line name hits" to $LEANSTEP_BRANCH_LOG at exit; this reads those
lines, finds every LS_BRANCH site in llmc/ and fails, naming the site, if one never ran.

usage: branch_coverage.py LOG [--src llmc] [-q]
"""
import argparse
import os
import re
import sys

SITE = re.compile(r'\bLS_BRANCH\("([^"]+)"\)')


def sites_in(src):
    """{(path relative to the repository, line): name} of every LS_BRANCH("...") under src."""
    found = {}
    for root, _, files in os.walk(src):
        for f in sorted(files):
            if not f.endswith((".h", ".cuh", ".cu", ".c", ".cpp")):
                continue
            path = os.path.normpath(os.path.join(root, f))
            with open(path, encoding="utf-8") as fh:
                for n, line in enumerate(fh, 1):
                    for m in SITE.finditer(line):
                        found[(path, n)] = m.group(1)
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log")
    ap.add_argument("--src", default="llmc")
    ap.add_argument("-q", action="store_true", help="print only the summary and the failures")
    args = ap.parse_args()
    sites = sites_in(args.src)
    if not sites:
        sys.exit(f"error: no LS_BRANCH sites found under {args.src}")
    hits = {}
    try:
        with open(args.log, encoding="utf-8") as fh:
            for line in fh:
                where, name, count = line.split()
                path, _, n = where.rpartition(":")
                key = (os.path.normpath(path), int(n))
                hits[key] = hits.get(key, 0) + int(count)
    except FileNotFoundError:
        sys.exit(f"error: {args.log}: no branch log (were the labs built for the CPU harness and run "
                 "with LEANSTEP_BRANCH_LOG set?)")
    missed = 0
    for (path, n), name in sorted(sites.items()):
        h = hits.get((path, n), 0)
        if h == 0:
            missed += 1
        if h == 0 or not args.q:
            print(f"    {f'{path}:{n}':<34} {name:<28} {'NEVER RAN' if h == 0 else f'{h} runs'}")
    print(f"  kernel paths marked LS_BRANCH: {len(sites) - missed} of {len(sites)} ran in the lab checks"
          + ("" if missed == 0 else "  FAIL"))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())

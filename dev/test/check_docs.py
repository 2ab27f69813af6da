#!/usr/bin/env python3
"""check_docs.py: README.md and docs/*.md hold together.

For README.md and every docs/*.md:
  - every relative link ([text](path), [text](path#anchor), [label]: path) names an existing file,
    and every #anchor names a heading of its target file (GitHub's slugs: lowercase, punctuation
    removed except - and _, each space a -; a repeated heading gets -1, -2, ...);
  - no line is longer than 100 characters, lines of code blocks included (a line that is only a
    URL is allowed).
For every docs/*.md: a # title on line 1, then a one-line summary (line 3, between blank lines),
and a table of contents before the first ## heading, whose links are exactly its ## headings, in
order.
For README.md: at most 260 lines.
Headings, links and line lengths inside fenced code blocks are not links or headings.

Usage: check_docs.py [ROOT] (default: the repository this file is in). Prints one line per
failure (FILE:LINE: what) and exits 1 if there is any; else one summary line, exit 0.
"""
import glob
import os
import re
import sys

MAX_COLS = 100
README_MAX_LINES = 260
LINK = re.compile(r"(?<!!)\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^()\s]+)(?:\s+\"[^\"]*\")?\)")
REF_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s+(\S+)")
URL_ONLY = re.compile(r"^\s*[<(]?https?://\S+[>)]?\s*$")


def slug(heading):
    """GitHub's anchor of a heading's text."""
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)  # \w keeps letters, digits and _ of any script
    return s.replace(" ", "-")


def parse(path):
    """(lines, headings [(level, text, line number)], links [(target, line number)], in_code flags)."""
    lines = open(path, encoding="utf-8").read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    headings, links, code, fenced, fence = [], [], [], False, ""
    for i, line in enumerate(lines, 1):
        s = line.strip()
        m = re.match(r"^(`{3,}|~{3,})", s)
        if m and not fenced:  # an opening fence, with or without a language
            fenced, fence = True, m.group(1)
            code.append(True)
            continue
        if fenced and s.startswith(fence) and s.strip(fence[0]) == "":  # its closing fence
            fenced = False
            code.append(True)
            continue
        code.append(fenced)
        if fenced:
            continue
        h = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if h:
            headings.append((len(h.group(1)), h.group(2), i))
        text = re.sub(r"`[^`]*`", "", line)  # code spans hold no links
        for t in LINK.findall(text):
            links.append((t, i))
        r = REF_DEF.match(line)
        if r:
            links.append((r.group(1), i))
    return lines, headings, links, code


def anchors(headings):
    out, seen = set(), {}
    for _, text, _ in headings:
        base = slug(re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text))  # a link in a heading: its text
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else "%s-%d" % (base, n))
    return out


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    files = [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "*.md")))
    files = [f for f in files if os.path.exists(f)]
    parsed, fails = {}, []

    def fail(path, line, what):
        fails.append("%s:%d: %s" % (os.path.relpath(path, root), line, what))

    def get(path):
        if path not in parsed:
            parsed[path] = parse(path)
        return parsed[path]

    if not os.path.exists(os.path.join(root, "README.md")):
        fail(os.path.join(root, "README.md"), 0, "missing")
    for path in files:
        lines, headings, links, _ = get(path)
        rel = os.path.relpath(path, root)
        for i, line in enumerate(lines, 1):
            if len(line) > MAX_COLS and not URL_ONLY.match(line):
                fail(path, i, "line of %d characters (at most %d)" % (len(line), MAX_COLS))
        for target, i in links:
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # https:, mailto: ...: not checked
                continue
            file_part, _, anchor = target.partition("#")
            dest = path if not file_part else os.path.normpath(os.path.join(os.path.dirname(path), file_part))
            if not os.path.exists(dest):
                fail(path, i, "link to %s: no such file" % target)
                continue
            if anchor:
                if not dest.endswith(".md") or os.path.isdir(dest):
                    fail(path, i, "link to %s: an anchor into a file that is not Markdown" % target)
                elif anchor not in anchors(get(dest)[1]):
                    fail(path, i, "link to %s: no heading with that anchor in %s" % (target, os.path.relpath(dest, root)))
        if rel == "README.md":
            if len(lines) > README_MAX_LINES:
                fail(path, len(lines), "README.md has %d lines (at most %d)" % (len(lines), README_MAX_LINES))
            continue
        # docs/*.md: the table of contents lists the ## headings in order, before the first of them
        h2 = [(text, ln) for level, text, ln in headings if level == 2]
        first = h2[0][1] if h2 else len(lines) + 1
        toc = []
        for target, ln in links:
            if ln < first and target.startswith("#"):
                toc.append(target[1:])
        want = [slug(re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", t)) for t, _ in h2]
        if not toc:
            fail(path, 1, "no table of contents (links to its ## headings before the first one)")
        elif toc != want:
            missing = [w for w in want if w not in toc]
            extra = [t for t in toc if t not in want]
            what = "; ".join(x for x in ("missing: " + ", ".join(missing) if missing else "",
                                         "not a ## heading: " + ", ".join(extra) if extra else "",
                                         "out of order" if not missing and not extra else "") if x)
            fail(path, 1, "table of contents does not list the ## headings in order (%s)" % what)
        if not headings or headings[0][0] != 1 or headings[0][2] != 1:
            fail(path, 1, "does not start with a # title")
        # then a one-line summary: title, blank line, one line of text, blank line
        if len(lines) < 4 or lines[1] != "" or not lines[2].strip() or lines[2].startswith(("#", "-", "|")) \
                or lines[3] != "":
            fail(path, 3, "no one-line summary after the title (title, blank line, summary, blank line)")
    for f in fails:
        print(f)
    if fails:
        print("check_docs: %d failure(s) in %d files" % (len(fails), len(files)))
        return 1
    print("check_docs: %d files: links, anchors, tables of contents and line lengths ok" % len(files))
    return 0


if __name__ == "__main__":
    sys.exit(main())

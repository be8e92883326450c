#!/usr/bin/env python3
"""Check that the docs name only paths that exist; exit 1 with one line per missing path.

Reads every Markdown file the repository tracks (README.md, docs/, the manuals beside their
programs) and every path-like word in it: a word that starts with one of the project's top
folders (tensor/, nn/, examples/, ...) or is a top-level file, with or without backquotes.
Each must name a file or folder of the tree, or one a build makes (BUILT). Globs (`gen_*.py`,
`*.h5`) must match at least one file. Prints "docs paths: N references in M files ok" when
every one exists.
"""
import glob
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOP = ("tensor", "autograd", "nn", "data", "examples", "tests", "bench", "scripts", "docs", ".ci")
# paths under build/ or an install prefix that the docs name on purpose: the build makes them
BUILT = re.compile(r"^(build|build-\w+|runs|runs/.*|/.*)$")
PATH = re.compile(r"(?<![\w./-])((?:%s)/[\w./*{},-]*[\w*}])" % "|".join(re.escape(t) for t in TOP))


def tracked_markdown():
    """the Markdown files git tracks; outside a checkout, every one below the root but build trees"""
    try:
        out = subprocess.run(["git", "ls-files", "*.md"], cwd=ROOT, capture_output=True, text=True, check=True)
        return [p for p in out.stdout.split() if p]
    except (OSError, subprocess.CalledProcessError):
        found = []
        for top, dirs, names in os.walk(ROOT):
            dirs[:] = [d for d in dirs if not d.startswith((".", "build", "runs"))]
            found += [os.path.relpath(os.path.join(top, n), ROOT) for n in names if n.endswith(".md")]
        return sorted(found)


def expand_braces(path):
    """a/{b,c}.h -> [a/b.h, a/c.h]"""
    m = re.search(r"\{([^{}]*)\}", path)
    if not m:
        return [path]
    head, tail = path[: m.start()], path[m.end() :]
    return [p for alt in m.group(1).split(",") for p in expand_braces(head + alt + tail)]


def exists(path):
    path = path.rstrip("/.")
    if any(c in path for c in "*?["):
        return bool(glob.glob(os.path.join(ROOT, path)))
    return os.path.exists(os.path.join(ROOT, path))


def main():
    missing, refs, files = [], 0, tracked_markdown()
    for md in files:
        with open(os.path.join(ROOT, md), encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                for m in PATH.finditer(line):
                    for path in expand_braces(m.group(1)):
                        refs += 1
                        if not exists(path) and not BUILT.match(path):
                            missing.append(f"{md}:{lineno}: {path} does not exist")
    for line in missing:
        print(line)
    if missing:
        return 1
    print(f"docs paths: {refs} references in {len(files)} files ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())

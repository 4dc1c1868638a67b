#!/usr/bin/env python3
"""Every file a document names exists: the paths in backticks and the links of DESIGN.md,
README.md, the crates' READMEs and docs/ (not docs/results/, which records what was true then).

A backticked path from the repository root (`tree/src/table/format.rs`) must exist as written;
a shorter one (`db/mod.rs`, `version/lookup.rs`) under one of the source roots or beside the
document; a bare file name (`skiplist.rs`) somewhere. A link must reach a tracked file or
directory, and its `#anchor` a heading of the Markdown file it names.
"""
import os
import re
import subprocess
import sys

os.chdir(subprocess.check_output(["git", "rev-parse", "--show-toplevel"], text=True).strip())
files = set(subprocess.check_output(["git", "ls-files"], text=True).split())
dirs = {f.rsplit("/", n)[0] for f in files for n in range(1, f.count("/") + 1)}
names = {f.rsplit("/", 1)[-1] for f in files}
ROOTS = {"src", "tree", "tools", "raft", "docs", "tests", "examples", "benches", "fuzz", ".ci"}
SOURCE_ROOTS = ["src/", "tree/src/", "tools/src/", "raft/src/"]
PATH = re.compile(r"[\w.-]+(/[\w.-]+)*(\.(rs|md|py|toml|json)|/)")
TOKEN = re.compile(r"`([^`\s]+)`|\]\(([^)\s]+)\)")


def exists(path):
    path = os.path.normpath(path)
    return path in files or path in dirs


def anchors(path):
    # GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens.
    with open(path, encoding="utf-8") as f:
        return {re.sub(r"[^\w\- ]", "", l.lstrip("#").strip().lower()).replace(" ", "-")
                for l in f if l.startswith("#")}


def problem(doc, code, link):
    base = os.path.dirname(doc)
    if link is not None:
        if "://" in link or link.startswith("mailto:"):
            return None
        target, _, anchor = link.partition("#")
        target = os.path.normpath(os.path.join(base, target)) if target else doc
        if not exists(target):
            return f"link to {link}: no such file"
        if anchor and target.endswith(".md") and anchor not in anchors(target):
            return f"link to {link}: no such heading"
        return None
    if not PATH.fullmatch(code) or code.startswith("."):
        return None
    if "/" not in code.rstrip("/"):
        # A bare directory (`db/`) depends on the sentence; a bare file name must exist.
        return None if code.endswith("/") or code in names else f"{code}: no file of that name"
    if code.split("/", 1)[0] in ROOTS:
        # From the repository root, or from a crate's own (raft/README.md's `tests/...`).
        found = exists(code) or base and exists(os.path.join(base, code))
        return None if found else f"{code}: no such path"
    candidates = [r + code for r in SOURCE_ROOTS] + [os.path.join(base, code)]
    return None if any(exists(c) for c in candidates) else f"{code}: under no source root"


docs = sys.argv[1:] or sorted(
    f for f in files
    if f.endswith(".md") and f != "CHANGELOG.md" and not f.startswith(("docs/results/", "fuzz/"))
)
bad = 0
for doc in docs:
    with open(doc, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            for m in TOKEN.finditer(line):
                p = problem(doc, m.group(1), m.group(2))
                if p:
                    print(f"{doc}:{n}: {p}", file=sys.stderr)
                    bad += 1
sys.exit(1 if bad else 0)

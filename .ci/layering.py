#!/usr/bin/env python3
"""No circle of imports between a crate's rooms.

A room is a top-level module of a crate (`tree/src/table/`, `tree/src/key.rs`, `src/db/`): the
files of one room may import each other freely, but the rooms of a crate import each other
in one direction only, so each can be read, tested and changed with only the rooms below it
in mind. (Between crates, cargo holds the line: `bloomkv-tree` cannot import the engine.)

For every crate of the workspace (a directory with a Cargo.toml and src/lib.rs or
src/main.rs), this reads each `.rs` file under src/, takes the paths it names within the
crate — `use crate::...`, `use super::...`, and `crate::x::y` or `super::x` anywhere in code
— resolves each to the top-level module it lands in, and fails listing every cycle of that
graph with the imports that make it, file and line. Left out: comments (doc links are not
imports), `#[cfg(test)]` items and test-only modules (a test may use any layer), and the crate
root's `pub use` re-exports, which are the crate's facade: a path through one counts as a path
to the module it re-exports from.

Usage: `layering.py [ROOT]` checks the workspace at ROOT (default: this repository);
`layering.py --self-test` checks the checker on a fake crate with a cycle.
"""
import os
import re
import subprocess
import sys
import tempfile

ROOT_ROOM = "(crate root)"


def strip(text):
    """The code of `text` with comments, strings and char literals blanked (lines kept)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif c == "r" and re.match(r'r#*"', text[i:i + 8]) and not re.match(r"\w", text[i - 1:i] or " "):
            hashes = re.match(r'r(#*)"', text[i:]).group(1)
            end = text.find('"' + hashes, i + len(hashes) + 2)
            j = n if end < 0 else end + 1 + len(hashes)
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j + 1
        elif c == "'" and re.match(r"'(\\.[^']*|[^\\'])'", text[i:i + 12]):
            j = text.index("'", i + 2 if text[i + 1] == "\\" else i + 1)
            out.append("' '")
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def matching_brace(code, open_at):
    depth = 0
    for j in range(open_at, len(code)):
        if code[j] == "{":
            depth += 1
        elif code[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return len(code) - 1


def drop_test_items(code):
    """`code` without its `#[cfg(test)]` items, and the names of the test-only module files
    it declares (`#[cfg(test)] mod tests;`)."""
    test_files = []
    while True:
        m = re.search(r"#\[cfg\(test\)\]", code)
        if not m:
            return code, test_files
        semi, brace = code.find(";", m.end()), code.find("{", m.end())
        if brace < 0 or 0 <= semi < brace:
            end = semi
            decl = re.search(r"\bmod\s+(\w+)\s*;", code[m.end():semi + 1])
            if decl:
                test_files.append(decl.group(1))
        else:
            end = matching_brace(code, brace)
        code = code[:m.start()] + "\n" * code.count("\n", m.start(), end + 1) + code[end + 1:]


def expand_use(tree):
    """`a::{b, c::{d as e}}` -> ['a::b', 'a::c::d@e']: each path, `@` and its new name if
    renamed."""
    tree = re.sub(r"\s+", "", re.sub(r"\s+as\s+", "@", tree))
    brace = tree.find("{")
    if brace < 0:
        return [tree] if tree else []
    prefix, inner = tree[:brace], tree[brace + 1:tree.rfind("}")]
    parts, depth, start = [], 0, 0
    for j, c in enumerate(inner):
        depth += c == "{"
        depth -= c == "}"
        if c == "," and depth == 0:
            parts.append(inner[start:j])
            start = j + 1
    parts.append(inner[start:])
    return [prefix + p for part in parts for p in expand_use(part) if part]


def module_of(src, path):
    rel = os.path.relpath(path, src)[:-3].split(os.sep)
    if rel[-1] in ("mod", "lib", "main"):
        rel = rel[:-1]
    return rel


def crates(root):
    for d, dirs, names in os.walk(root):
        dirs[:] = [x for x in dirs if x not in ("target", ".git", "node_modules")]
        src = os.path.join(d, "src")
        if "Cargo.toml" in names and any(
            os.path.isfile(os.path.join(src, f)) for f in ("lib.rs", "main.rs")
        ):
            yield src


class Crate:
    def __init__(self, src):
        self.src = src
        self.files = {}  # path -> (module path, code without comments and tests)
        test_files = set()
        for d, _, names in sorted(os.walk(src)):
            for name in sorted(names):
                if name.endswith(".rs"):
                    path = os.path.join(d, name)
                    with open(path, encoding="utf-8") as f:
                        code, tests = drop_test_items(strip(f.read()))
                    module = module_of(src, path)
                    self.files[path] = (module, code)
                    base = os.path.dirname(path) if name in ("mod.rs", "lib.rs", "main.rs") \
                        else path[:-3]
                    for t in tests:
                        test_files.add(os.path.join(base, t + ".rs"))
                        test_files.add(os.path.join(base, t, "mod.rs"))
        for path in list(self.files):
            if path in test_files or any(path.startswith(t[:-6]) for t in test_files
                                         if t.endswith("mod.rs")):
                del self.files[path]
        self.rooms = {m[0] for m, _ in self.files.values() if m}
        # The crate root's re-exports: a name -> the room it comes from (None: another crate).
        self.aliases = {}
        root = next((c for p, (m, c) in self.files.items() if not m and
                     os.path.basename(p) in ("lib.rs", "main.rs")), "")
        for m in re.finditer(r"\buse\s+([^;]+);", root):
            for p in expand_use(m.group(1)):
                path, _, renamed = p.partition("@")
                segs = path.split("::")
                first = segs[1] if segs[0] in ("crate", "self") and len(segs) > 1 else segs[0]
                self.aliases[renamed or segs[-1]] = first if first in self.rooms else None

    def room(self, module, path):
        """The room `path` (`crate::a::b`, `super::x`, `self::y`) lands in from `module`."""
        segs = path.split("::")
        if segs[0] in ("crate", "$crate"):
            resolved = segs[1:]
        elif segs[0] in ("super", "self"):
            resolved = list(module)
            while segs and segs[0] in ("super", "self"):
                if segs.pop(0) == "super":
                    resolved = resolved[:-1]
            resolved += segs
        else:
            return None
        if not resolved or resolved[0] in ("", "*"):
            return ROOT_ROOM
        first = resolved[0]
        if first in self.rooms:
            return first
        if first in self.aliases:
            return self.aliases[first]
        return ROOT_ROOM

    def edges(self):
        """(from room, to room) -> [(file, line, path)]."""
        found = {}
        for path, (module, code) in sorted(self.files.items()):
            here = module[0] if module else ROOT_ROOM
            is_root = not module
            names = []
            for m in re.finditer(r"\b(pub(\([\w:]+\))?\s+)?use\s+([^;]+);", code):
                if is_root and m.group(1):
                    continue  # the facade's re-exports
                for p in expand_use(m.group(3)):
                    names.append((m.start(), p.partition("@")[0]))
            rest = re.sub(r"\buse\s+[^;]+;", lambda m: "\n" * m.group(0).count("\n"), code)
            for m in re.finditer(r"(?<![\w:])\$?(?:crate|super|self)(?:::\w+)+", rest):
                names.append((m.start(), m.group(0)))
            for at, p in names:
                to = self.room(module, p)
                if to and to != here:
                    line = code.count("\n", 0, at) + 1
                    uses = found.setdefault((here, to), [])
                    if (path, line, p) not in uses:
                        uses.append((path, line, p))
        return found


def cycles(edges):
    """The strongly connected components of more than one room, each sorted."""
    graph = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def check(root):
    """Problems found in the workspace at `root`, as lines."""
    problems = []
    for src in sorted(crates(root)):
        edges = Crate(src).edges()
        for comp in cycles(edges):
            shown = os.path.relpath(src, root)
            problems.append(f"{shown}: rooms in a cycle of imports: {', '.join(comp)}")
            for (a, b), uses in sorted(edges.items()):
                if a in comp and b in comp:
                    for path, line, p in uses[:3]:
                        rel = os.path.relpath(path, root)
                        problems.append(f"  {a} -> {b}: {rel}:{line}: {p}")
                    if len(uses) > 3:
                        problems.append(f"  {a} -> {b}: and {len(uses) - 3} more")
    return problems


def self_test():
    files = {
        "Cargo.toml": "[package]\nname = \"fake\"\n",
        "src/lib.rs": "mod low;\nmod high;\nmod other;\npub use low::Thing;\n"
                      "pub use high::Top;\npub fn helper() {}\n",
        # `low` uses `high` through a grouped use, `high` uses `low` through `super::`.
        "src/low/mod.rs": "pub mod item;\nuse crate::{high::{Top as T}, low::item};\n"
                          "pub struct Thing;\n",
        "src/low/item.rs": "use super::Thing;\n",
        "src/high.rs": "pub struct Top;\nfn f() -> super::low::Thing { super::low::Thing }\n",
        # None of these is an import of `high`: a comment, a doc link, a string, a test.
        "src/other.rs": "// crate::high::Top\n/// [`crate::high::Top`]\n"
                        "const S: &str = \"crate::high::Top\";\n"
                        "use crate::Thing;\n"
                        "#[cfg(test)]\nmod tests {\n    use crate::high::Top;\n}\n"
                        "#[cfg(test)]\nmod more;\n",
        "src/other/more.rs": "use crate::high::Top;\n",
    }
    with tempfile.TemporaryDirectory() as d:
        for name, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(d, name)), exist_ok=True)
            with open(os.path.join(d, name), "w", encoding="utf-8") as f:
                f.write(text)
        found = check(d)
        assert found and found[0] == "src: rooms in a cycle of imports: high, low", found
        edges = Crate(os.path.join(d, "src")).edges()
        assert set(edges) == {("low", "high"), ("high", "low"), ("other", "low")}, edges
        # Without `low`'s import of `high` the rooms form no cycle.
        with open(os.path.join(d, "src/low/mod.rs"), "w", encoding="utf-8") as f:
            f.write("pub mod item;\npub struct Thing;\n")
        assert check(d) == [], check(d)
    print("layering.py self-test: ok")


def main():
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        return 0
    root = sys.argv[1] if len(sys.argv) > 1 else subprocess.check_output(
        ["git", "rev-parse", "--show-toplevel"], text=True).strip()
    problems = check(root)
    for p in problems:
        print(p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Checks that no locked dependency needs a newer Rust than the crate that uses it declares.

Only one toolchain is at hand, so the MSRV cannot be checked by building with it. clippy's
`incompatible_msrv` lint covers our own code's std APIs; this covers the dependencies: for
each workspace member, every package its build pulls in (normal and build dependencies,
transitively, on Linux, macOS and Windows; not dev-dependencies, which only our tests need)
must declare a `rust-version` no newer than the member's, as `cargo metadata` reports it
from Cargo.lock. A package that declares none is counted, not failed: nothing says what it
needs.

On a failure: `cargo update -p NAME --precise VERSION` to an older release that fits, or
raise the member's `rust-version` if nothing older does.
"""

import json
import subprocess
import sys

PLATFORMS = ["x86_64-unknown-linux-gnu", "aarch64-apple-darwin", "x86_64-pc-windows-msvc"]


def version(text):
    return tuple(int(part) for part in text.split("."))


def main():
    cmd = ["cargo", "metadata", "--format-version", "1", "--locked"]
    for platform in PLATFORMS:
        cmd += ["--filter-platform", platform]
    meta = json.loads(subprocess.check_output(cmd))
    packages = {p["id"]: p for p in meta["packages"]}
    nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}

    failures = 0
    for member in meta["workspace_members"]:
        crate = packages[member]
        ours = crate.get("rust_version")
        if not ours:
            print(f"{crate['name']}: no rust-version declared")
            failures += 1
            continue
        seen, stack = set(), [member]
        while stack:
            for dep in nodes[stack.pop()]["deps"]:
                # `kind` is null for a normal dependency.
                if any(k["kind"] in (None, "build") for k in dep["dep_kinds"]):
                    if dep["pkg"] not in seen:
                        seen.add(dep["pkg"])
                        stack.append(dep["pkg"])
        undeclared = 0
        for dep in sorted(seen, key=lambda i: packages[i]["name"]):
            p = packages[dep]
            theirs = p.get("rust_version")
            if not theirs:
                undeclared += 1
            elif version(theirs) > version(ours):
                print(
                    f"{crate['name']} (rust-version {ours}) depends on "
                    f"{p['name']} {p['version']}, which needs Rust {theirs}"
                )
                failures += 1
        print(
            f"{crate['name']}: rust-version {ours}, {len(seen)} dependencies checked "
            f"({undeclared} declare none)"
        )
    if failures:
        sys.exit(f"msrv-deps: {failures} problem(s)")


if __name__ == "__main__":
    main()

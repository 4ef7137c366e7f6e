#!/usr/bin/env python3
"""Checks that the workspace's declared `rust-version` is honest: no locked dependency (normal,
build or dev — the tests build them all) declares a newer minimum than the workspace does.

Reads `cargo metadata --locked`; prints the offenders and exits 1 when the declaration is too
low. (A second toolchain cannot be installed here, so the check reads what each locked crate
declares instead of compiling with the old compiler.)
"""
import json
import subprocess
import sys


def version(text):
    """`1.89` and `1.89.0` are the same version."""
    parts = [int(p) for p in text.split(".")]
    return tuple(parts + [0] * (3 - len(parts)))


def main():
    meta = json.loads(subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--locked"],
        check=True, capture_output=True, text=True).stdout)
    members = set(meta["workspace_members"])
    declared = {p["rust_version"] for p in meta["packages"] if p["id"] in members and p.get("rust_version")}
    if len(declared) != 1:
        sys.exit(f"check-msrv: workspace members declare {sorted(declared) or 'no'} rust-version; want one")
    ours = declared.pop()
    newer = sorted((version(p["rust_version"]), p["name"], p["version"]) for p in meta["packages"]
                   if p.get("rust_version") and version(p["rust_version"]) > version(ours))
    if newer:
        for v, name, ver in newer:
            print(f"check-msrv: {name} {ver} needs Rust {'.'.join(map(str, v))}", file=sys.stderr)
        sys.exit(f"check-msrv: rust-version = \"{ours}\" is too low; raise it to "
                 f"{'.'.join(map(str, newer[-1][0]))}")
    print(f"check-msrv: rust-version {ours} covers every locked dependency")


if __name__ == "__main__":
    main()

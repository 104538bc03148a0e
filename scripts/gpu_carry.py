"""What a GPU run carries: the working tree as the device transfer copies it (tracked files and untracked
files git does not ignore) plus the bundle, against the transfer's 64 MiB. One line; exit 1 when over.

  python scripts/gpu_carry.py [--bundle .gpu_bundle] [--limit-mib 64]

Standard library only, any Python 3.8+: scripts/gpu_check.sh calls it before anything else. Where git or
the repository's .git is missing (the node gets a copy without it), the tree is every file outside the
bundle, .git and what .gitignore names by a plain pattern, which counts at least what was copied.
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import subprocess
import sys
from pathlib import Path

LIMIT_MIB = 64


def tree_files(repo: Path) -> list[Path]:
    """The files the transfer copies: git's view where there is one, else a walk that skips ignored paths."""
    try:
        listed = subprocess.run(
            ["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            capture_output=True,
            check=True,
        ).stdout
        return [repo / name for name in listed.decode().split("\0") if name and (repo / name).is_file()]
    except (OSError, subprocess.CalledProcessError):
        return _walk(repo)


def _ignore_patterns(repo: Path) -> list[str]:
    path = repo / ".gitignore"
    if not path.is_file():
        return []
    lines = (line.strip() for line in path.read_text(encoding="utf-8").splitlines())
    return [line.strip("/") for line in lines if line and not line.startswith(("#", "!"))]


def _walk(repo: Path) -> list[Path]:
    patterns = [*_ignore_patterns(repo), ".git"]

    def ignored(rel: str, name: str) -> bool:
        return any(fnmatch.fnmatch(name, p) or fnmatch.fnmatch(rel, p) for p in patterns)

    found = []
    for root, dirs, files in os.walk(repo):
        rel_root = os.path.relpath(root, repo)
        dirs[:] = [d for d in dirs if not ignored(os.path.normpath(os.path.join(rel_root, d)), d)]
        for name in files:
            rel = os.path.normpath(os.path.join(rel_root, name))
            if not ignored(rel, name):
                found.append(Path(root) / name)
    return found


def bundle_bytes(bundle: Path) -> int:
    return sum(p.stat().st_size for p in bundle.rglob("*") if p.is_file()) if bundle.is_dir() else 0


def carried(repo: Path, bundle: Path) -> tuple[int, int]:
    """(tree bytes, bundle bytes); bundle files the tree listing also holds are counted once."""
    inside = bundle.resolve()
    tree = 0
    for path in tree_files(repo):
        if inside in path.resolve().parents:
            continue
        tree += path.stat().st_size
    return tree, bundle_bytes(bundle)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    repo_default = Path(__file__).resolve().parent.parent
    ap.add_argument("--repo", type=Path, default=repo_default)
    ap.add_argument("--bundle", type=Path, default=None, help="default: REPO/.gpu_bundle")
    ap.add_argument("--limit-mib", type=float, default=LIMIT_MIB)
    args = ap.parse_args(argv)
    bundle = args.bundle if args.bundle is not None else args.repo / ".gpu_bundle"
    tree, packed = carried(args.repo, bundle)
    total = tree + packed
    limit = int(args.limit_mib * 2**20)
    verdict = "fits" if total <= limit else "OVER"
    print(
        f"carried: bundle {packed / 2**20:.1f} MiB + tree {tree / 2**20:.1f} MiB = {total / 2**20:.1f} MiB "
        f"{verdict} the {args.limit_mib:g} MiB transfer"
    )
    return 0 if total <= limit else 1


if __name__ == "__main__":
    sys.exit(main())

"""The content digest of a local file or folder the workflow reads but no rule writes.

    python -m pipeline.core.content_digest --path PATH --out resources/fingerprints/<key>.json

A base model given as a local folder (``model.base``, ``sieve.cross_encoder.base``,
``ar2.ranker.base``) and a dataset's local source file are read by the rules, but Snakemake would
judge them by their mtime, or (a base named by a string) not at all: new weights reran nothing, and
a source replaced by other content with an older mtime (``cp -p``, ``tar x``) neither. The rule
``fingerprint`` records the digest computed here as its param (a changed content reruns it, and so
everything that reads its output) and writes it to a small JSON file that those rules take as input
(an unchanged content with a new mtime reruns nothing: Snakemake compares a newer small input by
the checksum it recorded). docs/failures.md "Stale outputs".

A folder's digest covers every file under it but hidden ones (``.git``, ``.cache``), by relative path
and sha256. Hashing a large folder or file again at every plan is avoided by a cache keyed by each
file's size, mtime, ctime and inode (``ctime`` cannot be set back by ``cp -p`` or ``tar x``), kept in
``.snakemake/sieve-fingerprints.json`` of the working directory.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
from pathlib import Path

from pipeline.core.storage import file_sha256, write_json

CACHE = Path(".snakemake") / "sieve-fingerprints.json"


def _files(path: Path) -> list[tuple[str, Path]]:
    if path.is_file():
        return [(path.name, path)]
    out = []
    for root, dirs, names in os.walk(path):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(names):
            if not name.startswith("."):
                full = Path(root) / name
                out.append((full.relative_to(path).as_posix(), full))
    return out


def _stat_key(path: Path) -> list[int]:
    st = path.stat()
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


class _Cache:
    def __init__(self, path: Path | None):
        self.path, self.changed = path, False
        self.entries: dict[str, dict] = {}
        if path is not None:
            try:
                loaded = json.loads(path.read_text(encoding="utf-8"))
                self.entries = loaded if isinstance(loaded, dict) else {}
            except (OSError, ValueError):
                self.entries = {}

    def sha256(self, file: Path) -> str:
        key, stat = str(file.resolve()), _stat_key(file)
        entry = self.entries.get(key)
        if isinstance(entry, dict) and entry.get("stat") == stat and isinstance(entry.get("sha256"), str):
            return entry["sha256"]
        digest = file_sha256(file)
        self.entries[key] = {"stat": stat, "sha256": digest}
        self.changed = True
        return digest

    def save(self) -> None:
        if self.path is None or not self.changed:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(self.entries), encoding="utf-8")
            tmp.replace(self.path)
        except OSError:
            pass  # a cache only: the next plan hashes again


def fingerprint(path: str | os.PathLike, cache: Path | None = CACHE) -> dict:
    """{"path", "sha256" (of the whole), "files": {relative path: sha256}} of a file or folder."""
    path = Path(path)
    store = _Cache(cache)
    files = {name: store.sha256(full) for name, full in _files(path)}
    store.save()
    whole = hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()
    return {"path": str(path), "sha256": whole, "files": files}


def digest(path: str | os.PathLike, cache: Path | None = CACHE) -> str:
    """The sha256 of ``path``'s content (fingerprint's "sha256"); "missing" when it does not exist."""
    if not os.path.exists(path):
        return "missing"
    return fingerprint(path, cache)["sha256"]


def file_digest(path: str | os.PathLike, cache: Path | None = CACHE) -> str:
    """The sha256 of one file (through the same cache)."""
    store = _Cache(cache)
    sha = store.sha256(Path(path))
    store.save()
    return sha


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.core.content_digest", description=__doc__)
    parser.add_argument("--path", required=True, help="a local file or folder")
    parser.add_argument("--out", required=True, help="the JSON fingerprint to write")
    args = parser.parse_args(argv)
    if not os.path.exists(args.path):
        parser.error(f"{args.path}: no such file or folder")
    write_json(Path(args.out), fingerprint(args.path))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

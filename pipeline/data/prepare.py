"""Convert a dataset's source files into the canonical tables (resources/{dataset}/).

    python -m pipeline.data.prepare --dataset nq --format dpr \\
        --file corpus=downloads/nq/corpus --file train=downloads/nq/train \\
        --file dev=downloads/nq/dev --file test=downloads/nq/test --out-dir resources/nq

Writes corpus.parquet, queries.{train,dev,test}.parquet, qrels.{train,dev,test}.parquet,
negatives.train.parquet (empty when the source ships none) and, last, manifest.json (format, split
rule, options, source files with sha256, counts). Formats, roles and checks: docs/data.md.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path

from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

from pipeline.core.cli import check_writable, run_main, stage_parser, start_stage
from pipeline.core.config import ConfigError
from pipeline.core.storage import DataError, write_json
from pipeline.data.readers import FORMATS, BuildOptions, DatasetWriter, check_roles
from pipeline.data.splits import parse_split_spec

log = logging.getLogger("sieve.prepare_data")


def sha256_file(path: str | os.PathLike, progress: Progress | None = None) -> str:
    digest = hashlib.sha256()
    task = (
        progress.add_task(f"sha256 {Path(path).name}", total=os.path.getsize(path))
        if progress is not None
        else None
    )
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
            if progress is not None:
                progress.advance(task, len(chunk))
    return digest.hexdigest()


def parse_files(items: list[str]) -> dict[str, str]:
    files: dict[str, str] = {}
    for item in items:
        role, sep, path = item.partition("=")
        if not sep or not role or not path:
            raise ConfigError(f"--file {item!r}: expected ROLE=PATH")
        if role in files:
            raise ConfigError(f"--file: role {role!r} given twice")
        if not Path(path).is_file():
            raise DataError(f"source file for role {role!r} not found", file=path)
        files[role] = path
    return files


def _progress() -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TimeRemainingColumn())


def prepare(
    dataset: str,
    fmt: str,
    files: dict[str, str],
    out_dir: str | os.PathLike,
    options: BuildOptions,
    split_spec_raw: object = "none",
) -> dict:
    """Build the canonical tables of one dataset; return the manifest (also written, last)."""
    check_roles(fmt, files, dataset)
    if options.split is not None and fmt != "squad":
        raise ConfigError(
            f"datasets.{dataset}.split: only squad (and synthkb) datasets are split "
            f"by rule; {fmt} takes its splits from its files"
        )
    out_dir = Path(out_dir)
    check_writable(out_dir)  # before the sources are read (a 13 GB corpus takes minutes)
    out_dir.mkdir(parents=True, exist_ok=True)
    # manifest.json marks a complete set of tables: an old one must not vouch for a failed re-run.
    (out_dir / "manifest.json").unlink(missing_ok=True)
    with _progress() as progress:
        with DatasetWriter(out_dir) as writer:
            FORMATS[fmt].build(files, writer, options, progress)
            counts = writer.finish()
        sources = {
            role: {"path": str(path), "bytes": os.path.getsize(path), "sha256": sha256_file(path, progress)}
            for role, path in sorted(files.items())
        }
    manifest = {
        "dataset": dataset,
        "format": fmt,
        "split": split_spec_raw,
        "options": {"empty_positives": options.empty_positives},
        "files": sources,
        "counts": counts,
    }
    write_json(out_dir / "manifest.json", manifest)
    return manifest


def _summary(counts: dict) -> str:
    q, r = counts["queries"], counts["qrels"]
    parts = [f"{counts['corpus']:,} passages"]
    parts += [f"{s}: {q[s]:,} queries / {r[s]:,} qrels" for s in q]
    parts.append(f"{counts['negatives_train']:,} shipped negatives")
    notes = counts["notes"]
    if notes:
        parts.append("notes: " + ", ".join(f"{k}={v:,}" for k, v in notes.items()))
    return "; ".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser("pipeline.data.prepare", __doc__)
    parser.add_argument("--dataset", required=True, help="dataset name (for messages and manifest)")
    parser.add_argument("--format", required=True, choices=sorted(FORMATS))
    parser.add_argument(
        "--file",
        action="append",
        default=[],
        metavar="ROLE=PATH",
        help="a source file and its role (repeat); roles per format: docs/data.md",
    )
    parser.add_argument(
        "--split-spec",
        default='"none"',
        help='JSON: "none" (all queries test) or {"by": "article", "dev": 0.15, '
        '"test": 0.15, "seed": 0} (squad)',
    )
    parser.add_argument(
        "--empty-positives",
        choices=["error", "drop"],
        default="error",
        help="a train/dev record without positives: stop (default) or drop it, "
        "counted in the manifest (DPR's own loader drops them)",
    )
    parser.add_argument("--out-dir", required=True)
    parser.add_argument("--log", default=None)
    args = parser.parse_args(argv)
    start_stage(args.log)
    try:
        raw_split = json.loads(args.split_spec)
    except json.JSONDecodeError:
        raw_split = args.split_spec
    options = BuildOptions(empty_positives=args.empty_positives, split=parse_split_spec(raw_split))
    files = parse_files(args.file)
    manifest = prepare(args.dataset, args.format, files, args.out_dir, options, raw_split)
    log.info("%s (%s): %s", args.dataset, args.format, _summary(manifest["counts"]))
    return 0


if __name__ == "__main__":
    run_main(main)

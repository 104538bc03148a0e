"""Convert a dataset's source files into the canonical tables (resources/{dataset}/).

    python -m pipeline.data.prepare --dataset nq --format dpr \\
        --file corpus=downloads/nq/corpus --file train=downloads/nq/train \\
        --file dev=downloads/nq/dev --file test=downloads/nq/test --out-dir resources/nq

    # exactly what the workflow's job prepares: its settings document, then the same files
    python -m pipeline.workflow.jobs nq prepare > nq.json
    python -m pipeline.data.prepare --settings nq.json --file corpus=downloads/nq/corpus ... --out-dir resources/nq

The settings (dataset, format, split, empty_positives) are a document (--settings FILE, or
--settings-json as the rule passes it; schema: pipeline.core.settings.job_documents.PrepareJob), each flag over it.

Writes corpus.parquet, queries.{train,dev,test}.parquet, qrels.{train,dev,test}.parquet,
negatives.train.parquet (empty when the source ships none) and, last, manifest.json (format, split
rule, options, source files with sha256, counts). Formats, roles and checks: docs/data.md.
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

from pipeline.core.cli import check_writable, run_main, stage_parser, start_stage
from pipeline.core.config import ConfigError
from pipeline.core.jobs import add_settings_flags, merged_document
from pipeline.core.settings.base import default
from pipeline.core.settings.job_documents import PrepareJob
from pipeline.core.settings.validation import from_dict
from pipeline.core.storage import DataError, write_json
from pipeline.data.readers import FORMATS, BuildOptions, DatasetWriter, check_roles
from pipeline.data.settings import SplitUnits
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


def _as_given(split: object) -> object:
    """The split as the manifest records it: the config's value, keys in the contract's order (the
    document's JSON has its keys sorted), nothing added; the reader takes it parsed."""
    if not isinstance(split, dict):
        return split
    order = list(SplitUnits.model_fields)
    return dict(
        sorted(split.items(), key=lambda item: order.index(item[0]) if item[0] in order else len(order))
    )


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
    add_settings_flags(parser, PrepareJob, "the dataset (datasets.<name>)", {"split": "--split-spec"})
    parser.add_argument(
        "--file",
        action="append",
        default=[],
        metavar="ROLE=PATH",
        help="a source file and its role (repeat); roles per format: docs/data.md",
    )
    parser.add_argument("--out-dir", required=True)
    parser.add_argument("--log", default=None)
    args = parser.parse_args(argv)
    document = merged_document(PrepareJob, args)
    job = from_dict(PrepareJob, document, "settings")  # before any work: a bad document is one line
    start_stage(args.log)
    if job.format not in FORMATS:
        raise ConfigError(
            f"settings key 'format': {job.format} is not read from files (formats: {', '.join(sorted(FORMATS))})"
        )
    raw_split = _as_given(document.get("split", default(PrepareJob, "split")))
    options = BuildOptions(empty_positives=job.empty_positives, split=parse_split_spec(raw_split))
    files = parse_files(args.file)
    manifest = prepare(job.dataset, job.format, files, args.out_dir, options, raw_split)
    log.info("%s (%s): %s", job.dataset, job.format, _summary(manifest["counts"]))
    return 0


if __name__ == "__main__":
    run_main(main)

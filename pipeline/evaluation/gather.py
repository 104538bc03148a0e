"""Gather every method's metrics.json of a dataset into one JSON and one Markdown table.

    python -m pipeline.evaluation.gather --dataset squad --inputs results/squad/*/metrics.json \
        --out-json results/squad/metrics.json --out-md results/squad/metrics.md

The JSON maps method -> its split, n_queries, metrics and any extra fields its metrics.json carries
(notes, seeds, wall_time_s, ...). The table has one row per method (in input order) and the metric
columns in a fixed order: R@k by k, MRR@10, hit@k, recall@k, then the ``_all`` family, then the rest.
"""
from __future__ import annotations

import logging
import math
import os
from numbers import Real
from pathlib import Path
from typing import Sequence

from pipeline.core.cli import run_main, stage_parser, start_stage
from pipeline.core.storage import DataError, atomic_open, read_json_object, write_json
from pipeline.evaluation.metrics import metric_sort_key

log = logging.getLogger("sieve.gather_metrics")

REQUIRED = ("dataset", "method", "split", "n_queries", "metrics")


def read_metrics(path: str | os.PathLike) -> dict:
    """One method's metrics.json, checked for the fields gathering relies on."""
    path = Path(path)
    data = read_json_object(path, missing="file not found (did the evaluate rule run?)")
    for key in REQUIRED:
        if key not in data:
            raise DataError("missing field", file=path, field=key)
    if not isinstance(data["metrics"], dict):
        raise DataError("must be an object of metric name -> number", file=path, field="metrics")
    for name, value in data["metrics"].items():
        if isinstance(value, bool) or not isinstance(value, Real):
            raise DataError(f"metric value must be a number, got {value!r}", file=path,
                            field=f"metrics.{name}")
    return data


def gather(dataset: str, paths: Sequence[str | os.PathLike]) -> dict:
    """``{"dataset": D, "methods": {method: {split, n_queries, ..., metrics}}}`` in input order."""
    if not paths:
        raise DataError("no metrics files given", field="--inputs")
    methods: dict[str, dict] = {}
    sources: dict[str, str] = {}
    for path in paths:
        data = read_metrics(path)
        if data["dataset"] != dataset:
            raise DataError(f"dataset is {data['dataset']!r}, expected {dataset!r}", file=path,
                            field="dataset")
        method = data["method"]
        if method in methods:
            raise DataError(f"method {method!r} already read from {sources[method]}", file=path,
                            field="method")
        entry = {k: v for k, v in data.items() if k not in ("dataset", "method", "metrics")}
        entry["metrics"] = data["metrics"]
        methods[method] = entry
        sources[method] = str(path)
    return {"dataset": dataset, "methods": methods}


def _cell(value, std=None) -> str:
    if value is None:
        return "–"
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    return f"{value:.3f}" if std is None else f"{value:.3f} ± {std:.3f}"


FOOTNOTE = ("R@k: answer-match top-k accuracy over all queries; MRR@10, hit@k, recall@k: qrels (see "
            "docs/evaluation.md). – = not defined for this method/split. a ± b: mean ± sample std over seeds.")


def table_rows(gathered: dict) -> tuple[list[str], list[list[str]], list[str]]:
    """(header, one row of cells per method in input order, notes): metric columns in a fixed order."""
    methods = gathered["methods"]
    columns = sorted({name for entry in methods.values() for name in entry["metrics"]},
                     key=metric_sort_key)
    rows = []
    for method, entry in methods.items():
        std = entry.get("metrics_std") or {}
        rows.append([method, str(entry["split"]), str(entry["n_queries"])]
                    + [_cell(entry["metrics"].get(name), std.get(name)) for name in columns])
    notes = [f"{method}: {entry['notes']}" for method, entry in methods.items() if entry.get("notes")]
    return ["method", "split", "queries", *columns], rows, notes


def markdown_table(gathered: dict) -> str:
    """Methods as rows, metrics as columns (fixed order), 3 decimals; notes listed below."""
    header, rows, notes = table_rows(gathered)
    lines = [f"# {gathered['dataset']}: retrieval metrics", "",
             "| " + " | ".join(header) + " |",
             "|" + "|".join(["---"] * 3 + ["---:"] * (len(header) - 3)) + "|"]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    if notes:
        lines += ["", "Notes:", ""] + [f"- {note}" for note in notes]
    lines += ["", FOOTNOTE]
    return "\n".join(lines) + "\n"


def html_table(gathered: dict) -> str:
    """The same table as a small standalone HTML page (for `snakemake --report`)."""
    from html import escape

    header, rows, notes = table_rows(gathered)
    head = "".join(f"<th>{escape(c)}</th>" for c in header)
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in cells) + "</tr>" for cells in rows)
    paragraphs = [f"Notes: {'; '.join(notes)}"] if notes else []
    paragraphs.append(FOOTNOTE)
    return ("<!doctype html><meta charset='utf-8'><style>table{border-collapse:collapse;font:13px sans-serif}"
            "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}td:first-child{text-align:left}"
            f"</style><h3>{escape(gathered['dataset'])}: retrieval metrics</h3>"
            f"<table><tr>{head}</tr>{body}</table>"
            + "".join(f"<p>{escape(p)}</p>" for p in paragraphs))


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser("pipeline.evaluation.gather", "Gather the methods' metrics of one dataset.")
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--inputs", nargs="+", required=True, help="results/D/<method>/metrics.json")
    parser.add_argument("--out-json", required=True)
    parser.add_argument("--out-md", required=True)
    parser.add_argument("--out-html", help="the table as HTML (the Snakemake report shows it)")
    parser.add_argument("--log", help="append the log to this file")
    args = parser.parse_args(argv)
    start_stage(args.log)
    gathered = gather(args.dataset, args.inputs)
    table = markdown_table(gathered)
    write_json(args.out_json, gathered)
    with atomic_open(args.out_md, "w", encoding="utf-8") as handle:
        handle.write(table)
    if args.out_html:
        with atomic_open(args.out_html, "w", encoding="utf-8") as handle:
            handle.write(html_table(gathered))
    log.info("gathered %d methods for %s\n%s", len(gathered["methods"]), args.dataset, table)
    return 0


if __name__ == "__main__":
    run_main(main)

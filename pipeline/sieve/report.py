"""How well each filter catches false negatives: per-filter report and one comparison table per dataset.

    python -m pipeline.sieve.report report --decisions results/D/negatives/sieve_b0.5.parquet \
        --candidates results/D/sieve/candidates.parquet --dataset D --filter sieve \
        --out results/D/sieve/sieve/report.json
    python -m pipeline.sieve.report compare --dataset D --reports results/D/sieve/*/report.json \
        --out-json results/D/sieve/comparison.json --out-md results/D/sieve/comparison.md

Definitions (rows = candidates; "dropped" = not kept = flagged as false negative). Only rows whose
``is_false_negative`` is known (qrels_all or injected truth) count in precision/recall; "suspected"
rows (SQuAD) are reported on their own and never as truth.

- precision  = |dropped ∩ FN| / |dropped ∩ labelled|
- recall     = |dropped ∩ FN| / |FN|
- f1         = 2PR / (P + R)
- true_negative_retention = |kept ∩ TN| / |TN|
- sieve_out_rate = |dropped| / |all candidates|
- separation_auc = P(loss of a true negative > loss of a false negative) (+ half the ties), i.e. how
  well the scoring model's NCE loss separates the two groups (0.5 = not at all). Pooled over queries,
  so it depends on τ: a query's losses are shifted by its own logsumexp.
- separation_auc_per_query = the same AUC within each query (its true vs its false negatives),
  averaged over the queries that have both. Within a query the loss is a decreasing function of the
  score, so this one does not depend on τ: the statistic to compare scorers trained at different τ.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from pipeline.core.cli import run_main, stage_parser, start_stage
from pipeline.core.schemas import CANDIDATES_SCHEMA, FILTER_DECISIONS_SCHEMA
from pipeline.core.storage import DataError, atomic_open, read_json_object, read_table, write_json

log = logging.getLogger("sieve.sieve_report")

REQUIRED = ["qid", "pid", "rank", "kept", "is_false_negative", "fn_label_source"]
QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)
TABLE_COLUMNS = [
    ("filter", "filter"),
    ("sieve_out_rate", "sieve-out"),
    ("precision", "precision"),
    ("recall", "recall"),
    ("f1", "F1"),
    ("true_negative_retention", "TN kept"),
    ("suspected_dropped_rate", "suspected dropped"),
    ("separation_auc", "loss AUC"),
    ("separation_auc_per_query", "per-query AUC"),
]


def candidates_digest(qids, pids) -> str:
    """sha256 of the sorted (qid, pid) pairs: equal digests = the same candidate set."""
    pairs = sorted(f"{q}\t{p}" for q, p in zip(qids, pids))
    return hashlib.sha256("\n".join(pairs).encode("utf-8")).hexdigest()


def auc_greater(high, low) -> float | None:
    """P(h > l) + 0.5 P(h == l) for h from ``high``, l from ``low`` (Mann-Whitney U / n_h n_l)."""
    high = np.asarray(high, dtype=np.float64)
    low = np.sort(np.asarray(low, dtype=np.float64))
    if high.size == 0 or low.size == 0:
        return None
    below = np.searchsorted(low, high, side="left")
    at_or_below = np.searchsorted(low, high, side="right")
    return float((below + 0.5 * (at_or_below - below)).sum() / (high.size * low.size))


def per_query_auc(qids, loss, is_fn: np.ndarray, is_tn: np.ndarray) -> tuple[float | None, int]:
    """Mean over queries of P(loss of its true negative > loss of its false negative) (+ half the ties),
    over the queries with at least one of each; returns (mean, number of such queries)."""
    rows = is_fn | is_tn
    frame = pd.DataFrame({"qid": np.asarray(qids)[rows], "loss": np.asarray(loss, np.float64)[rows]})
    frame["tn"] = is_tn[rows]
    if frame["loss"].isna().any():
        raise ValueError("per-query AUC over a NaN loss")
    # Mann-Whitney within each query: U = sum of the true negatives' ranks - n_tn (n_tn + 1) / 2.
    frame["tn_rank"] = frame.groupby("qid")["loss"].rank(method="average").where(frame["tn"], 0.0)
    per_query = frame.groupby("qid").agg(n_tn=("tn", "sum"), n=("tn", "size"), tn_ranks=("tn_rank", "sum"))
    per_query["n_fn"] = per_query["n"] - per_query["n_tn"]
    both = per_query[(per_query["n_tn"] > 0) & (per_query["n_fn"] > 0)]
    if both.empty:
        return None, 0
    u = both["tn_ranks"] - both["n_tn"] * (both["n_tn"] + 1) / 2
    return float((u / (both["n_tn"] * both["n_fn"])).mean()), int(len(both))


def describe(values) -> dict | None:
    values = np.asarray(values, dtype=np.float64)
    values = values[~np.isnan(values)]
    if values.size == 0:
        return None
    out = {
        "n": int(values.size),
        "mean": float(values.mean()),
        "std": float(values.std()),
        "min": float(values.min()),
        "max": float(values.max()),
    }
    for q in QUANTILES:
        out[f"q{int(q * 100):02d}"] = float(np.quantile(values, q))
    out["median"] = out["q50"]
    return out


def _ratio(num: int, den: int) -> float | None:
    return float(num / den) if den else None


def detection_metrics(kept, is_false_negative) -> dict:
    """precision/recall/F1 of the dropped set and true-negative retention (see module doc)."""
    kept = np.asarray(kept, dtype=bool)
    truth = pd.array(is_false_negative, dtype="boolean")
    labelled = ~np.asarray(truth.isna())
    fn = labelled & np.asarray(truth.fillna(False), dtype=bool)
    tn = labelled & ~fn
    dropped = ~kept
    tp, fp = int((dropped & fn).sum()), int((dropped & tn).sum())
    precision, recall = _ratio(tp, tp + fp), _ratio(tp, int(fn.sum()))
    if precision is None or recall is None:
        f1 = None
    else:
        f1 = 0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall)
    return {
        "n_labelled": int(labelled.sum()),
        "n_false_negatives": int(fn.sum()),
        "n_true_negatives": int(tn.sum()),
        "true_positives": tp,
        "false_positives": fp,
        "precision": precision,
        "recall": recall,
        "f1": f1,
        "true_negative_retention": _ratio(int((kept & tn).sum()), int(tn.sum())),
    }


def group_masks(table: pd.DataFrame) -> dict[str, np.ndarray]:
    truth = table["is_false_negative"].astype("boolean")
    source = table["fn_label_source"].astype("string")
    known = ~np.asarray(truth.isna())
    is_fn = np.asarray(truth.fillna(False), dtype=bool)
    suspected = np.asarray(source.fillna("") == "suspected", dtype=bool)
    return {
        "false_negative": known & is_fn,
        "true_negative": known & ~is_fn,
        "suspected": suspected & ~known,
        "unlabeled": ~known & ~suspected,
    }


def detection_report(table: pd.DataFrame) -> dict:
    """The report of one filter's decisions table (columns REQUIRED, optional nce_loss/score/fallback)."""
    kept = table["kept"].to_numpy(bool)
    report = {
        "n_queries": int(table["qid"].nunique()),
        "n_candidates": int(len(table)),
        "n_kept": int(kept.sum()),
        "n_dropped": int((~kept).sum()),
        "sieve_out_rate": float((~kept).mean()) if len(table) else None,
    }
    kept_per_query = table.assign(k=kept).groupby("qid")["k"].sum()
    report["queries_with_nothing_kept"] = int((kept_per_query == 0).sum())
    report["mean_kept_per_query"] = float(kept_per_query.mean()) if len(kept_per_query) else None
    if "fallback" in table:
        report["fallback_queries"] = int(table["fallback"].astype(bool).sum())
    report.update(detection_metrics(kept, table["is_false_negative"]))
    source = table["fn_label_source"].astype("string").fillna("")
    report["by_label_source"] = {}
    for name in ("qrels_all", "injected"):
        rows = (source == name).to_numpy()
        if rows.any():
            sub = detection_metrics(kept[rows], table["is_false_negative"].to_numpy()[rows])
            report["by_label_source"][name] = {
                k: sub[k]
                for k in (
                    "n_false_negatives",
                    "n_true_negatives",
                    "precision",
                    "recall",
                    "true_negative_retention",
                )
            }
    masks = group_masks(table)
    n_susp = int(masks["suspected"].sum())
    report["suspected"] = {
        "n": n_susp,
        "dropped": int((~kept & masks["suspected"]).sum()),
        "dropped_rate": _ratio(int((~kept & masks["suspected"]).sum()), n_susp),
    }
    report["suspected_dropped_rate"] = report["suspected"]["dropped_rate"]
    for column, key in (("nce_loss", "loss_stats"), ("score", "score_stats")):
        if column in table and table[column].notna().any():
            values = table[column].to_numpy(np.float64)
            report[key] = {g: describe(values[m]) for g, m in masks.items()}
    report["separation_auc"] = report["separation_auc_per_query"] = None
    report["separation_queries"] = 0
    if "nce_loss" in table:
        loss = table["nce_loss"].to_numpy(np.float64)
        report["separation_auc"] = auc_greater(loss[masks["true_negative"]], loss[masks["false_negative"]])
        report["separation_auc_per_query"], report["separation_queries"] = per_query_auc(
            table["qid"].to_numpy(), loss, masks["false_negative"], masks["true_negative"]
        )
    return report


def read_decisions(path: str | os.PathLike) -> pd.DataFrame:
    """A filter's decisions (FILTER_DECISIONS_SCHEMA) or the sieve's (SIEVE_SCHEMA): the columns the two
    share have the same types, so the present ones are checked against the first."""
    table = read_table(path, schema=FILTER_DECISIONS_SCHEMA, optional=FILTER_DECISIONS_SCHEMA.names)
    for col in REQUIRED:
        if col not in table:
            raise DataError(f"missing column (has: {', '.join(table.columns)})", file=path, field=col)
    nulls = table["kept"].isna().to_numpy()
    if nulls.any():
        raise DataError("null value", file=path, record=int(np.argmax(nulls)), field="kept")
    return table


def build_report(
    decisions: str | os.PathLike, candidates: str | os.PathLike, dataset: str, filter_name: str
) -> dict:
    table = read_decisions(decisions)
    cands = read_table(candidates, ["qid", "pid"], schema=CANDIDATES_SCHEMA)
    digest = candidates_digest(table["qid"], table["pid"])
    expected = candidates_digest(cands["qid"], cands["pid"])
    if digest != expected or len(table) != len(cands):
        raise DataError(
            f"the decisions do not cover exactly the candidates of {candidates} "
            f"({len(table)} rows vs {len(cands)}); rerun the filter",
            file=decisions,
            field="pid",
        )
    return {
        "dataset": dataset,
        "filter": filter_name,
        "decisions": str(decisions),
        "candidates_digest": digest,
        **detection_report(table),
        **dev_margin(decisions),
    }


# The key of the decisions' Parquet metadata holding positive_aware_dev's choice (pipeline.sieve.filters).
DEV_MARGIN_KEY = b"dev_margin"


def dev_margin(decisions: str | os.PathLike) -> dict:
    """positive_aware_dev's choice (the margin, its grid and criterion, each margin's numbers on the dev
    candidates) from the decisions' metadata, as {"dev_margin": ...}; {} for the other filters."""
    meta = pq.read_schema(decisions).metadata or {}
    return {"dev_margin": json.loads(meta[DEV_MARGIN_KEY])} if DEV_MARGIN_KEY in meta else {}


REPORT_KEYS = (
    "dataset",
    "filter",
    "candidates_digest",
    "n_candidates",
    "n_queries",
    "n_false_negatives",
    "n_true_negatives",
)


def read_report(path: str | os.PathLike) -> dict:
    """A filter's report.json as ``compare`` reads it: an object with the keys it copies, texts and
    counts where they belong and the table's rates finite numbers or null (a probe's cases: a
    list, a missing key or bad UTF-8 were tracebacks, a text rate went into the table)."""
    report = read_json_object(path, missing="cannot read report (file not found)", keys=REPORT_KEYS)
    for key in ("dataset", "filter", "candidates_digest"):
        if not isinstance(report[key], str):
            raise DataError(f"must be a text, got {report[key]!r}", file=path, field=key)
    for key in ("n_candidates", "n_queries", "n_false_negatives", "n_true_negatives"):
        value = report[key]
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise DataError(f"must be a count (an integer >= 0), got {value!r}", file=path, field=key)
    for key, _ in TABLE_COLUMNS[1:]:
        value = report.get(key)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
        ):
            raise DataError(f"must be a finite number or null, got {value!r}", file=path, field=key)
    return report


def compare(reports: list[dict], sources: list[str]) -> dict:
    """One row per filter; all reports must be about the same candidates."""
    if not reports:
        raise DataError("no reports to compare")
    digest = reports[0]["candidates_digest"]
    for rep, src in zip(reports, sources):
        if rep["candidates_digest"] != digest:
            raise DataError(
                f"filter {rep['filter']!r} judged other candidates than {reports[0]['filter']!r}",
                file=src,
                field="candidates_digest",
            )
    rows = [
        {key: rep.get(key) for key, _ in TABLE_COLUMNS} | {"n_candidates": rep["n_candidates"]}
        for rep in reports
    ]
    out = {
        "dataset": reports[0]["dataset"],
        "candidates_digest": digest,
        "n_candidates": reports[0]["n_candidates"],
        "n_queries": reports[0]["n_queries"],
        "n_false_negatives": reports[0]["n_false_negatives"],
        "n_true_negatives": reports[0]["n_true_negatives"],
        "filters": rows,
    }
    by_name = {rep["filter"]: rep for rep in reports}
    if "sieve" in by_name and "sieve_no_ccr" in by_name:
        with_ccr, without = by_name["sieve"], by_name["sieve_no_ccr"]
        out["ccr_effect"] = {
            key: (
                None
                if with_ccr.get(key) is None or without.get(key) is None
                else with_ccr[key] - without[key]
            )
            for key in (
                "precision",
                "recall",
                "f1",
                "true_negative_retention",
                "sieve_out_rate",
                "separation_auc",
            )
        }
    return out


def _fmt(value) -> str:
    if value is None:
        return "–"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def comparison_markdown(comp: dict) -> str:
    lines = [
        f"# False-negative filters on {comp['dataset']}",
        "",
        f"{comp['n_candidates']} candidates of {comp['n_queries']} training queries "
        f"(same set for every filter, digest `{comp['candidates_digest'][:12]}`); "
        f"{comp['n_false_negatives']} known false negatives, {comp['n_true_negatives']} known "
        "true negatives.",
        "",
        "| " + " | ".join(label for _, label in TABLE_COLUMNS) + " |",
        "|" + "---|" * len(TABLE_COLUMNS),
    ]
    for row in comp["filters"]:
        lines.append("| " + " | ".join(_fmt(row.get(key)) for key, _ in TABLE_COLUMNS) + " |")
    if "ccr_effect" in comp:
        effect = ", ".join(f"{k} {v:+.3f}" for k, v in comp["ccr_effect"].items() if v is not None)
        lines += ["", f"CCR's contribution (sieve minus sieve_no_ccr): {effect}."]
    lines += [
        "",
        "Definitions: docs/sieve.md (precision/recall of the dropped set against the known "
        "false negatives; TN kept = true-negative retention; loss AUC = P(loss of a true "
        "negative > loss of a false negative)).",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser("pipeline.sieve.report", __doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p_rep = sub.add_parser("report", help="detection report of one filter")
    p_rep.add_argument("--decisions", required=True)
    p_rep.add_argument("--candidates", required=True)
    p_rep.add_argument("--dataset", required=True)
    p_rep.add_argument("--filter", required=True)
    p_rep.add_argument("--out", required=True)
    p_cmp = sub.add_parser("compare", help="comparison table of several filters' reports")
    p_cmp.add_argument("--dataset", required=True)
    p_cmp.add_argument("--reports", nargs="+", required=True)
    p_cmp.add_argument("--out-json", required=True)
    p_cmp.add_argument("--out-md", required=True)
    for p in (p_rep, p_cmp):
        p.add_argument("--log", default=None)
    args = parser.parse_args(argv)
    start_stage(args.log)
    if args.command == "report":
        report = build_report(args.decisions, args.candidates, args.dataset, args.filter)
        write_json(args.out, report)
        log.info(
            "%s/%s: precision %s recall %s TN kept %s sieve-out %s -> %s",
            args.dataset,
            args.filter,
            _fmt(report["precision"]),
            _fmt(report["recall"]),
            _fmt(report["true_negative_retention"]),
            _fmt(report["sieve_out_rate"]),
            args.out,
        )
        return 0
    reports = [read_report(path) for path in args.reports]
    comp = compare(reports, args.reports)
    if comp["dataset"] != args.dataset:
        raise DataError(
            f"reports are about dataset {comp['dataset']!r}, not {args.dataset!r}",
            file=args.reports[0],
            field="dataset",
        )
    write_json(args.out_json, comp)
    with atomic_open(args.out_md, "w", encoding="utf-8") as handle:
        handle.write(comparison_markdown(comp))
    log.info("comparison of %d filters -> %s", len(reports), args.out_md)
    return 0


if __name__ == "__main__":
    run_main(main)

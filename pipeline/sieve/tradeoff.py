"""Trade-off curves of the false-negative filters that decide on a continuous score: false-negative
recall against true-negative retention on the same candidates, as the threshold sweeps.

    python -m pipeline.sieve.tradeoff --decisions sieve=results/D/negatives/sieve_b0.5.parquet \
        positive_aware=results/D/sieve/positive_aware/decisions.parquet \
        cross_encoder=results/D/sieve/cross_encoder/decisions.parquet \
        --out-json results/D/sieve/tradeoff.json --out-png results/D/sieve/tradeoff.png

Each filter's *suspicion* (higher = more likely a false negative; a filter drops what is above its
threshold):

- sieve, sieve_b<β>, sieve_no_ccr: threshold − NCE loss of the candidate (Algorithm 1 drops where the
  loss is below the query's mean loss; = (s − mean s)/τ, the similarity minus the set's mean);
- positive_aware: the decisions' ``score``, the statistic its mode thresholds (s_neg / s_pos, ...);
- cross_encoder: its probability (RocketQA keeps a candidate as a negative only below ``threshold``).

The figure draws each curve with the random filter's diagonal (recall = 1 − retention: a filter that
drops candidates at random drops the same share of false and of true negatives); a curve above it
beats chance.

Per filter the JSON holds the curve (dropping the top-n most suspect candidates, n = 0..N, thinned to
``points``), its area, the filter's own operating point (its ``kept`` column) and the operating point
at the reference sieve-out rate (default: the ``sieve`` entry's), so filters compare at equal cost.
Needs known false negatives (synthkb's qrels_all or the injection simulation).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
import pyarrow as pa

from pipeline.core.cli import run_main, stage_parser, start_stage
from pipeline.core.plotting import palette_color
from pipeline.core.schemas import FILTER_DECISIONS_SCHEMA, SIEVE_SCHEMA
from pipeline.core.storage import DataError, read_table, refuse_repeat, write_json, write_png

log = logging.getLogger("sieve.tradeoff")


def _check_finite(values: np.ndarray, path: str | Path, field: str) -> None:
    """A NaN or infinite score (a nce_loss or threshold too) sorted anywhere and
    gave a curve, exit 0."""
    finite = np.isfinite(values)
    if not finite.all():
        bad = int(np.argmin(finite))
        raise DataError(f"must be a finite number, got {values[bad]}", file=path, record=bad, field=field)


def suspicion(name: str, decisions: pd.DataFrame, path: str | Path = "") -> np.ndarray:
    """The continuous score a filter drops on (higher = dropped first); see the module doc."""
    if name.startswith("sieve"):
        for col in ("nce_loss", "threshold"):
            if col not in decisions:
                raise DataError("a sieve's decisions need nce_loss and threshold", file=path, field=col)
        for col in ("nce_loss", "threshold"):
            _check_finite(decisions[col].to_numpy(np.float64), path, col)
        return (decisions["threshold"] - decisions["nce_loss"]).to_numpy(np.float64)
    if name in ("positive_aware", "cross_encoder"):
        score = decisions["score"].to_numpy(np.float64)
        _check_finite(score, path, "score")
        return score
    raise DataError(
        f"filter {name!r} has no continuous score (use sieve*, positive_aware, cross_encoder)",
        file=path,
        field="filter",
    )


def operating_point(dropped: np.ndarray, is_fn: np.ndarray) -> dict[str, float]:
    """FN recall, TN retention and sieve-out rate of a drop decision."""
    n_fn, n_tn = int(is_fn.sum()), int((~is_fn).sum())
    return {
        "fn_recall": float((dropped & is_fn).sum() / n_fn) if n_fn else float("nan"),
        "tn_retention": float((~dropped & ~is_fn).sum() / n_tn) if n_tn else float("nan"),
        "sieve_out_rate": float(dropped.mean()) if len(dropped) else 0.0,
    }


def tradeoff_curve(score: np.ndarray, is_fn: np.ndarray, points: int = 201) -> dict[str, list[float]]:
    """Dropping the n most suspect candidates for every n at a change of score (ties move together):
    FN recall, TN retention, sieve-out rate and the score threshold, thinned to about ``points``."""
    order = np.argsort(-score, kind="stable")
    s, fn = score[order], is_fn[order]
    cut = np.r_[np.flatnonzero(s[1:] != s[:-1]) + 1, len(s)]  # tie groups end here
    n_fn, n_tn = max(int(fn.sum()), 1), max(int((~fn).sum()), 1)
    cum_fn, cum_tn = np.cumsum(fn), np.cumsum(~fn)
    recall = np.r_[0.0, cum_fn[cut - 1] / n_fn]
    retention = np.r_[1.0, 1.0 - cum_tn[cut - 1] / n_tn]
    rate = np.r_[0.0, cut / len(s)]
    threshold = np.r_[np.inf, s[cut - 1]]
    keep = np.unique(np.linspace(0, len(rate) - 1, min(points, len(rate))).round().astype(int))
    return {
        "fn_recall": recall[keep].tolist(),
        "tn_retention": retention[keep].tolist(),
        "sieve_out_rate": rate[keep].tolist(),
        "threshold": threshold[keep].tolist(),
        "auc": float(np.trapezoid(recall, 1.0 - retention)),
    }


def at_rate(score: np.ndarray, is_fn: np.ndarray, rate: float) -> dict[str, float]:
    """The operating point dropping the round(rate·N) most suspect candidates (ties by order)."""
    n = int(round(rate * len(score)))
    dropped = np.zeros(len(score), dtype=bool)
    dropped[np.argsort(-score, kind="stable")[:n]] = True
    return {**operating_point(dropped, is_fn), "threshold": float(np.sort(score)[::-1][n - 1]) if n else None}


def score_columns(name: str, path: str | Path = "") -> tuple[pa.Schema, list[str]]:
    """The layout of filter ``name``'s decisions and the columns its suspicion reads."""
    if name.startswith("sieve"):
        return SIEVE_SCHEMA, ["nce_loss", "threshold"]
    if name in ("positive_aware", "cross_encoder"):
        return FILTER_DECISIONS_SCHEMA, ["score"]
    raise DataError(
        f"filter {name!r} has no continuous score (use sieve*, positive_aware, cross_encoder)",
        file=path,
        field="filter",
    )


def read_filter_decisions(name: str, path: str | Path) -> pd.DataFrame:
    """The columns the trade-off reads, checked against the filter's layout: a missing file or column
    was a pandas traceback, a text ``kept`` column ("yes"/"no") passed and every row counted as kept."""
    schema, scores = score_columns(name, path)
    df = read_table(path, ["qid", "pid", "kept", "is_false_negative", *scores], schema=schema)
    nulls = df["kept"].isna().to_numpy()
    if nulls.any():
        raise DataError("null value", file=path, record=int(np.argmax(nulls)), field="kept")
    return df


def build_tradeoff(decisions: dict[str, str], reference: str = "sieve", points: int = 201) -> dict:
    tables = {}
    for name, path in decisions.items():
        df = read_filter_decisions(name, path)
        if df["is_false_negative"].isna().any():
            raise DataError(
                "the trade-off needs the truth of every candidate (synthkb qrels_all or "
                "sieve.injection); this dataset has unlabelled candidates",
                file=path,
                field="is_false_negative",
            )
        if df.empty:
            raise DataError("no rows (no candidate was judged)", file=path)
        refuse_repeat(
            df,
            ["qid", "pid"],
            lambda row, df=df: f"candidate ({df['qid'].iloc[row]}, {df['pid'].iloc[row]}) judged twice",
            path,
            "pid",
        )
        tables[name] = (df, path)
    keys = {
        name: pd.util.hash_pandas_object(df[["qid", "pid"]], index=False).sum()
        for name, (df, _) in tables.items()
    }
    if len(set(keys.values())) > 1:
        raise DataError(
            f"the filters did not judge the same candidates ({sorted(keys)}): rerun them", field="pid"
        )
    if reference not in tables:
        raise DataError(f"reference filter {reference!r} is not among {sorted(tables)}", field="reference")
    ref_rate = float((~tables[reference][0]["kept"].to_numpy(bool)).mean())
    out: dict = {"reference": reference, "reference_sieve_out_rate": ref_rate, "filters": {}}
    for name, (df, path) in tables.items():
        score, is_fn = suspicion(name, df, path), df["is_false_negative"].to_numpy(bool)
        own = operating_point(~df["kept"].to_numpy(bool), is_fn)
        out["filters"][name] = {
            "default": own,
            "at_reference_rate": at_rate(score, is_fn, ref_rate),
            "curve": tradeoff_curve(score, is_fn, points),
        }
        out["n_candidates"], out["n_false_negatives"] = len(df), int(is_fn.sum())
    return out


def chance_line() -> tuple[list[float], list[float]]:
    """(TN retention, FN recall) of a filter that drops candidates at random: dropping a share d drops
    d of the false negatives and d of the true negatives, so recall = 1 − retention (area 0.5)."""
    return [1.0, 0.0], [0.0, 1.0]


def tradeoff_figure(result: dict):
    """The Figure of build_tradeoff's ``result``: a curve per filter (FN recall against TN retention),
    its default (o) and reference-rate (x) operating points, and the random filter's diagonal."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 6.2), layout="constrained")
    retention, recall = chance_line()
    ax.plot(retention, recall, color="0.45", ls="--", lw=1.0, label="random filter (chance), area 0.5")
    ax.text(0.98, 0.98, "better than chance", transform=ax.transAxes, ha="right", va="top", fontsize=8)
    ax.text(0.02, 0.02, "worse than chance", transform=ax.transAxes, ha="left", va="bottom", fontsize=8)
    for i, (name, entry) in enumerate(result["filters"].items()):
        color = palette_color(i)
        curve = entry["curve"]
        ax.plot(
            curve["tn_retention"], curve["fn_recall"], color=color, label=f"{name} (area {curve['auc']:.3f})"
        )
        ax.plot(entry["default"]["tn_retention"], entry["default"]["fn_recall"], "o", color=color)
        ax.plot(
            entry["at_reference_rate"]["tn_retention"],
            entry["at_reference_rate"]["fn_recall"],
            "x",
            color=color,
            markersize=8,
        )
    ax.set_xlabel("true-negative retention (kept / true negatives)")
    ax.set_ylabel("false-negative recall (dropped / false negatives)")
    ax.set_title(
        f"o = default threshold, x = at {result['reference']}'s sieve-out rate "
        f"{result['reference_sieve_out_rate']:.2f}",
        fontsize=9,
    )
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(-0.02, 1.02)
    ax.set_aspect("equal")
    ax.grid(alpha=0.3)
    # below the axes: inside, it hid the curves' worse-than-chance corner
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2)
    return fig


def plot_tradeoff(result: dict, out: str | Path) -> None:
    write_png(out, tradeoff_figure(result))


def main(argv: Sequence[str] | None = None) -> int:
    parser = stage_parser("pipeline.sieve.tradeoff", __doc__)
    parser.add_argument("--decisions", nargs="+", required=True, help="NAME=PATH of each filter's decisions")
    parser.add_argument(
        "--reference", default="sieve", help="filter whose sieve-out rate others are compared at"
    )
    parser.add_argument("--points", type=int, default=201)
    parser.add_argument("--out-json", required=True)
    parser.add_argument("--out-png", required=True)
    parser.add_argument("--log")
    args = parser.parse_args(argv)
    if args.points < 2:
        parser.error(f"argument --points: must be >= 2 (a curve's two ends), got {args.points}")
    start_stage(args.log)
    decisions = {}
    for item in args.decisions:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise DataError(f"expected NAME=PATH, got {item!r}", field="--decisions")
        decisions[name] = path
    result = build_tradeoff(decisions, args.reference, args.points)
    write_json(args.out_json, result)
    plot_tradeoff(result, args.out_png)
    for name, entry in result["filters"].items():
        log.info(
            "%s: default recall %.3f / TN kept %.3f; at rate %.3f: recall %.3f / TN kept %.3f; area %.3f",
            name,
            entry["default"]["fn_recall"],
            entry["default"]["tn_retention"],
            result["reference_sieve_out_rate"],
            entry["at_reference_rate"]["fn_recall"],
            entry["at_reference_rate"]["tn_retention"],
            entry["curve"]["auc"],
        )
    return 0


if __name__ == "__main__":
    run_main(main)

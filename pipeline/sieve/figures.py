"""Figures of the sieve stage (PNG, matplotlib Agg) and the numbers written beside them.

    python -m pipeline.sieve.figures --losses 0=results/D/sieve/sieve_b0/losses.parquet ... \
        --sieve 0=results/D/negatives/sieve_b0.parquet ... --comparison results/D/sieve/comparison.json \
        --out-dir results/D/figures

- ``figure1_nce_loss.png``: the paper's Figure 1 - per β, the distribution of the NCE loss of false
  negatives, hard negatives and in-batch negatives in one softmax; beside each panel the separation
  statistic AUC = P(loss of a hard negative > loss of a false negative) (0.5 = overlap, 1 = separated).
  The numbers are in ``figure1_separation.json``. Without known false negatives (SQuAD), the
  "suspected" group stands in for them and unlabeled candidates for the hard negatives.
- ``sieve_out_rate.png``: sieve-out rate (and false-negative recall / true-negative retention where the
  truth is known) per β.
- ``filters_precision_recall.png``: precision and recall of every filter of the comparison table.
"""

from __future__ import annotations

import logging
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from pipeline.core.cli import run_main, stage_parser, start_stage  # noqa: E402
from pipeline.core.schemas import SIEVE_LOSSES_SCHEMA  # noqa: E402
from pipeline.core.storage import DataError, read_json_object, read_table, write_json, write_png  # noqa: E402
from pipeline.sieve.report import auc_greater, detection_metrics, read_decisions  # noqa: E402

log = logging.getLogger("sieve.sieve_figures")

FIGURE1 = "figure1_nce_loss.png"
FIGURE1_JSON = "figure1_separation.json"
SIEVE_OUT = "sieve_out_rate.png"
FILTERS_PR = "filters_precision_recall.png"
COLORS = {"false negatives": "tab:red", "hard negatives": "tab:blue", "in-batch negatives": "tab:gray"}


def parse_keyed(items: list[str], flag: str) -> list[tuple[float, str]]:
    """['0.5=path', ...] -> [(0.5, 'path'), ...] sorted by β."""
    out = []
    for item in items:
        key, sep, path = item.partition("=")
        try:
            beta = float(key)
        except ValueError:
            beta = None
        if not sep or beta is None or not path:
            raise DataError(f"expected BETA=PATH, got {item!r}", field=flag)
        out.append((beta, path))
    return sorted(out)


def read_comparison(path: str | Path) -> dict:
    """comparison.json (pipeline.sieve.report compare) as plot_filters reads it."""
    comparison = read_json_object(path, keys=("dataset", "filters"))
    if not isinstance(comparison["filters"], list):
        raise DataError(
            f"must be a list of filter rows, got {type(comparison['filters']).__name__}",
            file=path,
            field="filters",
        )
    for i, row in enumerate(comparison["filters"]):
        if not isinstance(row, dict) or not isinstance(row.get("filter"), str):
            raise DataError("must be an object with a text 'filter'", file=path, record=i, field="filters")
        for key in ("precision", "recall", "true_negative_retention"):
            value = row.get(key)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value)
            ):
                raise DataError(
                    f"must be a finite number or null, got {value!r}", file=path, record=i, field=key
                )
    return comparison


def figure1_groups(losses: pd.DataFrame) -> dict[str, np.ndarray]:
    """The three groups of Figure 1 (suspected/unlabeled stand in when no truth is known)."""
    by = {
        g: losses.loc[losses["group"] == g, "nce_loss"].to_numpy(np.float64)
        for g in ("false_negative", "hard_negative", "suspected", "unlabeled", "in_batch")
    }
    fn = by["false_negative"] if by["false_negative"].size else by["suspected"]
    hard = by["hard_negative"] if by["hard_negative"].size else by["unlabeled"]
    return {"false negatives": fn, "hard negatives": hard, "in-batch negatives": by["in_batch"]}


def separation(groups: dict[str, np.ndarray]) -> dict:
    fn, hard, inb = groups["false negatives"], groups["hard negatives"], groups["in-batch negatives"]
    return {
        "n": {k: int(v.size) for k, v in groups.items()},
        "mean_loss": {k: (float(v.mean()) if v.size else None) for k, v in groups.items()},
        "auc_hard_vs_false_negative": auc_greater(hard, fn),
        "auc_in_batch_vs_false_negative": auc_greater(inb, fn),
        "auc_in_batch_vs_hard": auc_greater(inb, hard),
    }


def _save(fig, path: Path) -> None:
    write_png(path, fig, bbox_inches="tight")


def plot_figure1(losses: list[tuple[float, str]], out_dir: Path) -> dict:
    stats, panels = {}, []
    for beta, path in losses:
        table = read_table(path, ["group", "nce_loss"], schema=SIEVE_LOSSES_SCHEMA)
        if table.empty:
            raise DataError("no rows (Figure 1 needs the losses of the sieve's passages)", file=path)
        finite = np.isfinite(table["nce_loss"].to_numpy(np.float64))
        if not finite.all():
            bad = int(np.argmin(finite))
            raise DataError(
                f"must be finite, got {table['nce_loss'].iloc[bad]}", file=path, record=bad, field="nce_loss"
            )
        groups = figure1_groups(table)
        stats[f"{beta:g}"] = separation(groups)
        panels.append((beta, groups))
    all_values = np.concatenate([v for _, g in panels for v in g.values() if v.size] or [np.zeros(1)])
    bins = np.linspace(all_values.min(), all_values.max() + 1e-9, 50)
    fig, axes = plt.subplots(
        1, len(panels), figsize=(4.2 * len(panels), 3.8), squeeze=False, layout="constrained"
    )
    for ax, (beta, groups) in zip(axes[0], panels):
        for name, values in groups.items():
            if values.size:
                ax.hist(values, bins=bins, density=True, alpha=0.45, color=COLORS[name])
        auc = stats[f"{beta:g}"]["auc_hard_vs_false_negative"]
        ax.set_title(f"β = {beta:g}")
        counts = "/".join(str(v.size) for v in groups.values())
        ax.text(
            0.97,
            0.95,
            (f"AUC(hard > FN) = {auc:.3f}" if auc is not None else "AUC: n/a") + f"\nn = {counts}",
            transform=ax.transAxes,
            ha="right",
            va="top",
            fontsize=9,
            bbox={"facecolor": "white", "alpha": 0.8, "edgecolor": "none"},
        )
        ax.set_xlabel("NCE loss l(p)")
    axes[0][0].set_ylabel("density")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c, alpha=0.45) for c in COLORS.values()]
    fig.legend(handles, list(COLORS), loc="outside lower center", ncols=3, fontsize=9)
    fig.suptitle("NCE loss of false, hard and in-batch negatives (CCR-trained retriever per β)")
    _save(fig, out_dir / FIGURE1)
    return stats


def sieve_rates(sieves: list[tuple[float, str]]) -> list[dict]:
    rows = []
    for beta, path in sieves:
        table = read_decisions(path)
        if table.empty:
            raise DataError("no rows (no candidate was judged)", file=path)
        kept = table["kept"].to_numpy(bool)
        metrics = detection_metrics(kept, table["is_false_negative"])
        rows.append(
            {
                "beta": beta,
                "sieve_out_rate": float((~kept).mean()),
                "recall": metrics["recall"],
                "true_negative_retention": metrics["true_negative_retention"],
                "precision": metrics["precision"],
            }
        )
    return rows


def plot_sieve_out(rows: list[dict], out_dir: Path) -> None:
    fig, ax = plt.subplots(figsize=(5, 3.4))
    x = np.arange(len(rows))
    for key, label, marker in (
        ("sieve_out_rate", "sieve-out rate", "o"),
        ("recall", "FN recall", "s"),
        ("true_negative_retention", "TN retention", "^"),
    ):
        values = [r[key] for r in rows]
        if all(v is not None for v in values):
            ax.plot(x, values, marker=marker, label=label)
    ax.set_xticks(x, [f"{r['beta']:g}" for r in rows])
    ax.set_xlabel("β (CCR)")
    ax.set_ylim(0, 1.02)
    ax.axhline(0.5, color="lightgray", lw=0.8, zorder=0)
    ax.legend(fontsize=8)
    ax.set_title("Passage sieve per β")
    _save(fig, out_dir / SIEVE_OUT)


def plot_filters(comparison: dict, out_dir: Path) -> None:
    rows = comparison["filters"]
    x = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(max(5, 0.9 * len(rows) + 2), 3.6))
    width = 0.27
    for offset, key, label in (
        (-width, "precision", "precision"),
        (0, "recall", "recall"),
        (width, "true_negative_retention", "TN retention"),
    ):
        values = [r.get(key) if r.get(key) is not None else np.nan for r in rows]
        ax.bar(x + offset, values, width, label=label)
    ax.set_xticks(x, [r["filter"] for r in rows], rotation=30, ha="right")
    ax.set_ylim(0, 1.02)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.set_title(f"False-negative filters on {comparison['dataset']} (same candidates)")
    _save(fig, out_dir / FILTERS_PR)


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser("pipeline.sieve.figures", __doc__)
    parser.add_argument("--losses", nargs="+", required=True, help="BETA=losses.parquet (Figure 1)")
    parser.add_argument("--sieve", nargs="+", required=True, help="BETA=sieve_b<β>.parquet")
    parser.add_argument("--comparison", required=True, help="comparison.json (pipeline.sieve.report)")
    parser.add_argument("--out-dir", required=True)
    parser.add_argument("--log", default=None)
    args = parser.parse_args(argv)
    start_stage(args.log)
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    # Every input is read before the first figure is written: a bad comparison.json left Figure 1 and
    # the sieve-out figure behind, beside no JSON.
    losses, sieves = parse_keyed(args.losses, "losses"), parse_keyed(args.sieve, "sieve")
    comparison = read_comparison(args.comparison)
    rates = sieve_rates(sieves)
    stats = plot_figure1(losses, out_dir)
    plot_sieve_out(rates, out_dir)
    plot_filters(comparison, out_dir)
    write_json(
        out_dir / FIGURE1_JSON,
        {
            "separation_statistic": "AUC = P(loss of a hard negative > loss of a false negative)",
            "by_beta": stats,
            "sieve_by_beta": rates,
        },
    )
    for beta, entry in stats.items():
        log.info("β=%s: AUC(hard > FN) %s", beta, entry["auc_hard_vs_false_negative"])
    return 0


if __name__ == "__main__":
    run_main(main)

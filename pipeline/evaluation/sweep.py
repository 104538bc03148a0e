"""The noise sweep: how much the false negatives cost and how much each method wins back,
across synthkb datasets generated at several levels of the false-negative dial.

    python -m pipeline.evaluation.sweep --dataset synthkb_fn15_p0=results/synthkb_fn15_p0/metrics.json:resources/synthkb_fn15_p0/manifest.json ... \
        --methods dpr dpr_ccr dpr_sieve dpr_oracle --baseline dpr --oracle dpr_oracle --metric R@5 \
        --out-json results/sweeps/noise.json --out-png results/sweeps/noise.png

Per dataset: the measured false-negative share among mined candidates and the share stating the answer
without its string (the manifest's ``false_negatives.measured``), each method's mean and 95% t-interval
over its seeds, every method's paired difference with ``baseline`` (per seed, 95% t-interval), and the
share of the oracle gap a method closes, (method − baseline) / (oracle − baseline), on the means
(undefined where the oracle's gain is not shown: its interval reaches 0).
``--pairs '[["METHOD", "CONTROL"], ...]'`` (JSON) adds paired differences with other controls
(``pairs``; e.g. dpr_sieve − dpr_none and dpr_oracle − dpr_none, which train on the same
candidate pool, where dpr trains on BM25's top ranks) and, where the oracle is paired with the same
control, the share of that gap closed. With ``--sieve NAME=PARQUET`` (the dataset's sieve
report, sieve/sieve_b<β>/report.json) also what the sieve did on the data-prep candidates: their
false-negative share, the sieve-out rate, FN recall, true-negative retention and the loss AUC.
The figure: per paraphrase level (columns), the metric against the measured share (top) and each
method's paired difference with the baseline (bottom), 95% intervals as error bars.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from pathlib import Path
from typing import Callable, Sequence

from pipeline.core.cli import json_pairs, run_main, stage_parser, start_stage
from pipeline.core.settings.base import default
from pipeline.core.storage import DataError, atomic_open, read_json_object, write_json, write_png
from pipeline.evaluation.seed_stats import paired_difference
from pipeline.evaluation.settings import SweepSettings

log = logging.getLogger("sieve.sweep")


def per_seed(metrics: dict, method: str, metric: str, file: str) -> dict:
    """seed -> value of ``metric`` for ``method`` in a gathered metrics.json (one run: seed None)."""
    methods = metrics.get("methods", {})
    if not isinstance(methods, dict):
        raise DataError(
            f"must be an object of method -> entry, got {type(methods).__name__}", file=file, field="methods"
        )
    entry = methods.get(method)
    if entry is not None and not isinstance(entry, dict):
        raise DataError(
            f"must be an object, got {type(entry).__name__}", file=file, field=f"methods.{method}"
        )
    if entry is None:
        raise DataError(
            f"method {method!r} is not in the gathered metrics (add it to `methods`)",
            file=file,
            field="methods",
        )
    rows = entry.get("per_seed") or [{"seed": None, "metrics": entry.get("metrics", {})}]
    if not isinstance(rows, list):
        raise DataError(
            f"must be a list of runs, got {type(rows).__name__}",
            file=file,
            field=f"methods.{method}.per_seed",
        )
    out = {}
    for i, row in enumerate(rows):
        where = f"methods.{method}.per_seed"
        if not isinstance(row, dict) or not isinstance(row.get("metrics"), dict):
            raise DataError("must be an object with a 'metrics' object", file=file, record=i, field=where)
        if metric not in row["metrics"]:
            raise DataError(f"{method} has no {metric}", file=file, field=metric)
        value = row["metrics"][metric]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise DataError(
                f"must be a finite number, got {value!r}",
                file=file,
                record=i,
                field=f"{where}.metrics.{metric}",
            )
        if row.get("seed") in out:
            raise DataError(
                f"seed {row.get('seed')!r} given twice", file=file, record=i, field=f"{where}.seed"
            )
        out[row.get("seed")] = float(value)
    return out


def _interval(diff) -> dict:
    return {"mean": diff.mean, "ci_low": diff.ci_low, "ci_high": diff.ci_high, "n": diff.n}


def dataset_point(
    name: str,
    metrics_path: str,
    manifest_path: str,
    methods: Sequence[str],
    baseline: str,
    oracle: str,
    metric: str,
    pairs: Sequence[tuple[str, str]] = (),
) -> dict:
    metrics = read_json_object(metrics_path)
    manifest = read_json_object(manifest_path)
    false_negatives = manifest.get("false_negatives") or {}
    measured = false_negatives.get("measured") if isinstance(false_negatives, dict) else None
    if not isinstance(measured, dict) or "share" not in measured:
        raise DataError(
            "no measured false-negative share (a synthkb manifest written by this version)",
            file=manifest_path,
            field="false_negatives",
        )
    for key in ("share", "string_free_share"):
        value = measured.get(key)
        if (value is not None or key == "share") and (
            isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
        ):
            raise DataError(
                f"must be a finite number, got {value!r}",
                file=manifest_path,
                field=f"false_negatives.measured.{key}",
            )
    values = {m: per_seed(metrics, m, metric, metrics_path) for m in methods}
    point: dict = {
        "dataset": name,
        "fn_share": measured["share"],
        "fn_string_free_share": measured.get("string_free_share"),
        "requested": manifest["false_negatives"].get("requested"),
        "methods": {},
        "vs_baseline": {},
    }
    for m, by_seed in values.items():
        point["methods"][m] = _interval(paired_difference(by_seed, {s: 0.0 for s in by_seed}))
    base = values[baseline]
    for m in methods:
        if m != baseline:
            fixed = list(base) == [None]
            other = {s: base[None] for s in values[m]} if fixed else base
            point["vs_baseline"][m] = _interval(paired_difference(values[m], other))
    point["oracle_gap_closed"] = _gap_closed(point["vs_baseline"], oracle)
    if pairs:
        point["pairs"] = {control: {} for _, control in pairs}
        for method, control in pairs:
            point["pairs"][control][method] = _interval(paired_difference(values[method], values[control]))
        point["pairs_oracle_gap_closed"] = {c: _gap_closed(d, oracle) for c, d in point["pairs"].items()}
    return point


def _gap_closed(differences: dict, oracle: str) -> dict:
    """(method − control) / (oracle − control) on the means; None where the oracle's gain is not
    shown (its interval reaches 0; with one seed, where its mean is not above 0)."""
    gain = differences.get(oracle, {})
    low = gain.get("ci_low")
    shown = gain.get("mean") is not None and gain["mean"] > 0 and (low is None or low > 0)
    return {
        m: (d["mean"] / gain["mean"] if shown and d["mean"] is not None else None)
        for m, d in differences.items()
        if m != oracle
    }


def sieve_point(path: str | Path) -> dict:
    """What the sieve did on a dataset's data-prep candidates: its filter report (sieve/<name>/report.json,
    pipeline.sieve.report), which needs exact labels on every candidate (synthkb)."""
    report = read_json_object(
        path,
        keys=(
            "n_candidates",
            "n_labelled",
            "n_false_negatives",
            "sieve_out_rate",
            "recall",
            "true_negative_retention",
        ),
        missing="file not found (did the sieve_report rule run?)",
    )
    n = report["n_candidates"]
    if report["n_labelled"] != n:
        raise DataError(
            f"{n - report['n_labelled']} candidates without a false-negative label: the sweep "
            "needs exact labels (synthkb)",
            file=path,
            field="n_labelled",
        )
    return {
        "candidates": n,
        "fn_share": report["n_false_negatives"] / n if n else None,
        "sieve_out_rate": report["sieve_out_rate"],
        "fn_recall": report["recall"],
        "tn_kept": report["true_negative_retention"],
        "loss_auc": report.get("separation_auc"),
        "loss_auc_per_query": report.get("separation_auc_per_query"),
    }


def build_sweep(
    datasets: dict[str, tuple[str, str]],
    methods: Sequence[str],
    baseline: str,
    oracle: str,
    metric: str,
    sieves: dict[str, str] | None = None,
    pairs: Sequence[tuple[str, str]] = (),
) -> dict:
    for needed in (baseline, oracle, *(m for pair in pairs for m in pair)):
        if needed not in methods:
            raise DataError(f"{needed!r} must be one of the sweep's methods {list(methods)}", field="methods")
    points = [
        dataset_point(n, mp, fp, methods, baseline, oracle, metric, pairs) for n, (mp, fp) in datasets.items()
    ]
    unknown = sorted(set(sieves or {}) - set(datasets))
    if unknown:
        raise DataError(f"--sieve names datasets not in --dataset: {unknown}", field="--sieve")
    for point in points:
        if sieves and point["dataset"] in sieves:
            point["sieve"] = sieve_point(sieves[point["dataset"]])
    points.sort(key=lambda p: (round(p["fn_string_free_share"] or 0.0, 1), p["fn_share"]))  # as the figure
    return {
        "metric": metric,
        "baseline": baseline,
        "oracle": oracle,
        "pairs": [list(p) for p in pairs],
        "level": 0.95,
        "points": points,
    }


def plot_sweep(result: dict, out: str | Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = defaultdict(list)
    for p in result["points"]:
        panels[round(p["fn_string_free_share"] or 0.0, 1)].append(p)
    fig, axes = plt.subplots(2, len(panels), figsize=(5.2 * len(panels), 7.6), squeeze=False, sharex="col")
    metric, baseline = result["metric"], result["baseline"]
    for col, (para, points) in enumerate(sorted(panels.items())):
        points = sorted(points, key=lambda p: p["fn_share"])
        xs = [p["fn_share"] for p in points]
        methods = list(points[0]["methods"])
        for row, (key, label) in enumerate(
            (
                ("methods", f"test {metric} (mean, 95% interval over seeds)"),
                ("vs_baseline", f"{metric}: method − {baseline} (paired, 95%)"),
            )
        ):
            ax = axes[row][col]
            for i, method in enumerate(methods):
                if method not in points[0][key]:
                    continue
                _errorbars(ax, xs, [p[key][method] for p in points], f"C{i}", method)
            if row == 1:
                ax.axhline(0.0, color="black", linewidth=0.8)
                ax.set_xlabel("measured false-negative share of mined candidates")
            else:
                ax.set_title(f"≈{para:.0%} of false negatives without the answer string", fontsize=9)
            ax.set_ylabel(label, fontsize=9)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
    fig.tight_layout()
    write_png(out, fig)


def _errorbars(ax, xs: list[float], stats: list[dict], color: str, label: str) -> None:
    ys = [s["mean"] for s in stats]
    err = [
        [0 if s["ci_low"] is None else s["mean"] - s["ci_low"] for s in stats],
        [0 if s["ci_high"] is None else s["ci_high"] - s["mean"] for s in stats],
    ]
    ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, color=color, label=label)


def _interval_text(d: dict) -> str:
    if d.get("mean") is None or math.isnan(d["mean"]):
        return "–"
    if d.get("ci_low") is None:
        return f"{d['mean']:+.3f}"
    return f"{d['mean']:+.3f} [{d['ci_low']:+.3f}, {d['ci_high']:+.3f}]"


def _paired_table(
    points: list[dict],
    metric: str,
    control: str,
    paired: list[str],
    closers: list[str],
    of_point: Callable[[dict], tuple[dict, dict]],
) -> list[str]:
    """The Markdown table of each ``paired`` method's difference with ``control`` per level, then the
    share of the oracle gap each of ``closers`` closed; ``of_point(p)``: a point's differences and
    gap shares against ``control``."""
    head = ["dataset", "FN share", "string-free", f"{control} {metric}"]
    head += [f"{m} − {control}" for m in paired] + [f"{m}: oracle gap closed" for m in closers]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for p in points:
        free = p["fn_string_free_share"]
        row = [
            p["dataset"],
            f"{p['fn_share']:.1%}",
            "–" if free is None else f"{free:.0%}",
            f"{p['methods'][control]['mean']:.3f}",
        ]
        differences, closed = of_point(p)
        row += [_interval_text(differences[m]) for m in paired]
        row += ["–" if closed.get(m) is None else f"{closed[m]:+.2f}" for m in closers]
        lines.append("| " + " | ".join(row) + " |")
    return lines


def sweep_markdown(result: dict) -> str:
    """Two tables: each method's paired difference with the baseline per level (and the share of the
    oracle gap closed), and, where gathered, what the sieve did to the data-prep candidates."""
    metric, baseline, oracle = result["metric"], result["baseline"], result["oracle"]
    points = result["points"]
    others = [m for m in (points[0]["vs_baseline"] if points else {})]
    lines = [f"{metric}, mean over seeds; paired differences with {baseline}, 95% t-intervals.", ""]
    lines += _paired_table(
        points,
        metric,
        baseline,
        others,
        [m for m in others if m != oracle],
        lambda p: (p["vs_baseline"], p["oracle_gap_closed"]),
    )
    for control in dict.fromkeys(control for _, control in result.get("pairs", [])):
        paired = [m for m, c in result["pairs"] if c == control]
        closers = [m for m in paired if m != oracle and oracle in paired]
        lines += ["", f"Paired with {control}:", ""]
        lines += _paired_table(
            points,
            metric,
            control,
            paired,
            closers,
            lambda p, control=control: (p["pairs"][control], p["pairs_oracle_gap_closed"][control]),
        )
    sieved = [p for p in points if "sieve" in p]
    if sieved:
        lines += [
            "",
            "The sieve on the data-prep candidates (the negatives dpr_sieve trains on):",
            "",
            "| dataset | candidates | FN share | sieve-out | FN recall | TN kept | loss AUC | per-query AUC |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for p in sieved:
            s = p["sieve"]
            lines.append(
                f"| {p['dataset']} | {s['candidates']:,} | {s['fn_share']:.3f} | {s['sieve_out_rate']:.3f} "
                f"| {s['fn_recall']:.3f} | {s['tn_kept']:.3f} | "
                + " | ".join(
                    "–" if s.get(key) is None else format(s[key], ".3f")
                    for key in ("loss_auc", "loss_auc_per_query")
                )
                + " |"
            )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = stage_parser("pipeline.evaluation.sweep", __doc__)
    parser.add_argument("--dataset", nargs="+", required=True, metavar="NAME=METRICS:MANIFEST")
    parser.add_argument("--methods", nargs="+", required=True)
    parser.add_argument("--baseline", default=default(SweepSettings, "baseline"))
    parser.add_argument("--oracle", default=default(SweepSettings, "oracle"))
    parser.add_argument("--metric", default=default(SweepSettings, "metric"))
    parser.add_argument(
        "--pairs",
        default=[],
        type=json_pairs,
        metavar="JSON",
        help='paired differences with other controls, e.g. \'[["dpr_sieve", "dpr_none"]]\'',
    )
    parser.add_argument(
        "--sieve",
        nargs="+",
        default=[],
        metavar="NAME=REPORT",
        help="a dataset's sieve report (sieve/sieve_b<β>/report.json): its sieve-out "
        "rate, FN recall and TN retention on the data-prep candidates",
    )
    parser.add_argument("--out-json", required=True)
    parser.add_argument("--out-png", required=True)
    parser.add_argument("--out-md", help="also the tables as Markdown")
    parser.add_argument("--log")
    args = parser.parse_args(argv)
    start_stage(args.log)
    datasets = {}
    for item in args.dataset:
        name, sep, paths = item.partition("=")
        metrics, sep2, manifest = paths.partition(":")
        if not (sep and sep2 and name and metrics and manifest):
            raise DataError(f"expected NAME=METRICS:MANIFEST, got {item!r}", field="--dataset")
        datasets[name] = (metrics, manifest)
    sieves = {}
    for item in args.sieve:
        name, sep, path = item.partition("=")
        if not (sep and name and path):
            raise DataError(f"expected NAME=REPORT, got {item!r}", field="--sieve")
        sieves[name] = path
    result = build_sweep(datasets, args.methods, args.baseline, args.oracle, args.metric, sieves, args.pairs)
    write_json(args.out_json, result)
    plot_sweep(result, args.out_png)
    if args.out_md:
        with atomic_open(args.out_md) as handle:
            handle.write(sweep_markdown(result))
    for p in result["points"]:
        log.info(
            "%s (FN share %.3f): %s",
            p["dataset"],
            p["fn_share"],
            ", ".join(
                f"{m} {d['mean']:+.4f}"
                for m, d in p["vs_baseline"].items()
                if d["mean"] is not None and not math.isnan(d["mean"])
            ),
        )
        if "sieve" in p:
            log.info(
                "%s sieve: %s",
                p["dataset"],
                ", ".join(f"{k} {v:.3f}" for k, v in p["sieve"].items() if isinstance(v, float)),
            )
    return 0


if __name__ == "__main__":
    run_main(main)

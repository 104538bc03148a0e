"""AR2 learning curves: dev metrics per round, one colour per variant, the round each run selected
starred (★, the round whose retriever is tested), the starting DPR (round 0) as a dashed reference.

    python -m pipeline.ar2.learning_curve --variant plain=results/synthkb/ar2/plain/seed0 \
        --variant sieve=results/synthkb/ar2/sieve/seed0 --rounds 2 --out results/synthkb/figures/ar2_learning_curve.png

Reads only ``round{r}/round.json`` (and ``selection.json`` when the variant has been selected).
Labels ``{variant}/seed{s}`` (the ar2_learning_curve rule passes one per variant and seed) are grouped
by variant: each seed a thin line, their mean a thick one. Every dev panel's y-axis spans at least
MIN_SPAN of the metric, so that a few thousandths of noise do not fill the panel like a trend. Sieve
variants get one more panel: the sieve-out rate of each round (with false-negative recall and
true-negative retention where the truth is known), next to the paper's "a little under 0.5" per epoch.
"""

from __future__ import annotations

import logging
import math
import re
from pathlib import Path
from statistics import fmean
from typing import Any, Callable

from pipeline.core.cli import run_main, stage_parser, start_stage
from pipeline.core.jobs import add_settings_flags, job_settings
from pipeline.core.plotting import palette_color, span_limits
from pipeline.core.settings.job_documents import Ar2CurveJob
from pipeline.core.storage import DataError, read_json, read_json_object, write_png

log = logging.getLogger("sieve.learning_curve")

DEFAULT_METRICS = ("R@1", "R@5", "R@20", "MRR@10")
PAPER_SIEVE_OUT = 0.5  # reference.md §1: "usually a little under 0.5 per epoch"
MIN_SPAN = 0.05  # the least a dev panel's y-axis covers (metric units)
REFERENCE_COLOR = "0.4"  # the round-0 (DPR start) line
# (round.json sieve key, legend label, colour): the palette's last entries, apart from the variants'
SIEVE_SERIES = (
    ("sieve_out_rate", "sieve-out rate (dropped / candidates)", "#000000"),
    ("false_negative_recall", "FN recall (dropped / false negatives)", "#E69F00"),
    ("true_negative_retention", "TN kept (kept / true negatives)", "#56B4E9"),
)
VARIANT_STYLES = ("-", "--", "-.", ":")  # the sieve panel tells its variants apart by line style
SEED_LABEL = re.compile(r"(?P<variant>.+)/seed\d+")


def sieve_rows(curves: dict[str, list[dict]]) -> dict[str, list[tuple[int, dict]]]:
    """variant -> [(round, that round's sieve stats)] for the variants whose rounds sieve."""
    out = {
        v: [(r["round"], r["sieve"]) for r in rounds if isinstance(r.get("sieve"), dict)]
        for v, rounds in curves.items()
    }
    return {v: rows for v, rows in out.items() if rows}


def group_seeds(curves: dict[str, list[dict]]) -> dict[str, dict[str, list[dict]]]:
    """variant -> {label: rounds}, in the order of ``curves``: ``{variant}/seed{s}`` labels grouped
    under their variant, any other label a variant of its own."""
    groups: dict[str, dict[str, list[dict]]] = {}
    for label, rounds in curves.items():
        match = SEED_LABEL.fullmatch(label)
        groups.setdefault(match["variant"] if match else label, {})[label] = rounds
    return groups


def series(rounds: list[dict], value: Callable[[dict], Any]) -> tuple[list[int], list[float]]:
    """(rounds, values) of the rounds where ``value`` has a number."""
    pts = [(r["round"], float(v)) for r in rounds if (v := value(r)) is not None]
    return [x for x, _ in pts], [y for _, y in pts]


def mean_series(members: list[list[dict]], value: Callable[[dict], Any]) -> tuple[list[int], list[float]]:
    """Per round, the mean over the members (seeds) that have a value there."""
    by_round: dict[int, list[float]] = {}
    for rounds in members:
        for x, y in zip(*series(rounds, value)):
            by_round.setdefault(x, []).append(y)
    xs = sorted(by_round)
    return xs, [fmean(by_round[x]) for x in xs]


def read_rounds(variant_dir: str | Path, rounds: int) -> list[dict]:
    """round.json of rounds 0..rounds (all must exist)."""
    if rounds < 0:
        raise DataError(f"must be >= 0, got {rounds}", field="--rounds")
    out = []
    for r in range(rounds + 1):
        path = Path(variant_dir) / f"round{r}" / "round.json"
        out.append(
            check_round(read_json(path, missing="round summary not found (did the round finish?)"), r, path)
        )
    return out


def check_round(data: Any, expected: int, path: Path) -> dict:
    """A round.json as the readers use it: an object for round ``expected`` whose ``dev`` (where
    present) maps metric names to finite numbers (a probe's cases: a list, a missing ``round``, a
    text or NaN metric were tracebacks, or a NaN round was selected)."""
    if not isinstance(data, dict):
        raise DataError(f"must be a JSON object, got {type(data).__name__}", file=path)
    if data.get("round") != expected or isinstance(data.get("round"), bool):
        raise DataError(
            f"must be {expected} (the round of this folder), got {data.get('round')!r}",
            file=path,
            field="round",
        )
    dev = data.get("dev")
    if dev is not None and not isinstance(dev, dict):
        raise DataError(
            f"must be an object of metric -> number, got {type(dev).__name__}", file=path, field="dev"
        )
    for name, value in (dev or {}).items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise DataError(f"must be a finite number, got {value!r}", file=path, field=f"dev.{name}")
    return data


def read_selection(path: Path) -> dict:
    """selection.json (written by ar2_select): an object whose ``selected_round`` is an integer."""
    selection = read_json_object(path, keys=("selected_round",))
    if isinstance(selection["selected_round"], bool) or not isinstance(selection["selected_round"], int):
        raise DataError(
            f"must be an integer, got {selection['selected_round']!r}", file=path, field="selected_round"
        )
    if selection.get("reason") is not None and not isinstance(selection["reason"], str):
        raise DataError(f"must be a text, got {selection['reason']!r}", file=path, field="reason")
    return selection


def _dev(metric: str) -> Callable[[dict], Any]:
    return lambda r: r.get("dev", {}).get(metric)


def _sieve(key: str) -> Callable[[dict], Any]:
    return lambda r: (r.get("sieve") or {}).get(key)


def _draw(ax, members: dict[str, list[dict]], value, color: str, label: str, style: str = "-") -> list:
    """One series: each member (seed) thin when there are several, their mean (or the one member)
    thick with markers; returns the values drawn."""
    drawn: list[float] = []
    if len(members) > 1:
        for rounds in members.values():
            xs, ys = series(rounds, value)
            ax.plot(xs, ys, style, color=color, lw=0.8, alpha=0.5)
            drawn += ys
    xs, ys = mean_series(list(members.values()), value)
    if xs:
        ax.plot(xs, ys, style, marker="o", markersize=4.5, color=color, lw=2.0, label=label)
    return drawn + ys


def _round_axis(ax, last_round: int, first_label: str = "DPR") -> None:
    ticks = list(range(last_round + 1))
    ax.set_xticks(ticks, [f"0\n{first_label}" if t == 0 else str(t) for t in ticks])
    ax.set_xlim(-0.25, last_round + 0.25)
    ax.set_xlabel("round")
    ax.grid(alpha=0.3)


def learning_curve_figure(
    curves: dict[str, list[dict]],
    metrics=DEFAULT_METRICS,
    selected: dict[str, int] | None = None,
    title: str = "",
    selected_by: str = "",
):
    """(Figure, the metrics drawn: those present in some round). One dev panel per metric, a colour
    per variant (seeds grouped, see group_seeds), ★ on each run's selected round, the round-0 mean as
    the reference line; a sieve panel when some variant sieves."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    selected = selected or {}
    present = [m for m in metrics if any(m in r.get("dev", {}) for rs in curves.values() for r in rs)]
    if not present:
        present = sorted({m for rs in curves.values() for r in rs for m in r.get("dev", {})})[:4]
    groups = group_seeds(curves)
    colors = {variant: palette_color(i) for i, variant in enumerate(groups)}
    sieves = {v: members for v, members in groups.items() if sieve_rows(members)}
    last_round = max((r["round"] for rs in curves.values() for r in rs), default=0)
    n = max(len(present), 1) + bool(sieves)
    fig, axes = plt.subplots(1, n, figsize=(3.6 * n + (2.4 if sieves else 0), 4.3), squeeze=False)
    fig.set_layout_engine("constrained")
    dev_axes = axes[0][: max(len(present), 1)]
    reference_label = ""
    for ax, metric in zip(dev_axes, present):
        drawn = []
        for variant, members in groups.items():
            drawn += _draw(ax, members, _dev(metric), colors[variant], variant)
            for label, rounds in members.items():
                xs, ys = series(rounds, _dev(metric))
                if selected.get(label) in xs:
                    ax.plot(
                        [selected[label]],
                        [ys[xs.index(selected[label])]],
                        marker="*",
                        markersize=13,
                        color=colors[variant],
                        markeredgecolor="black",
                        markeredgewidth=0.5,
                        linestyle="none",
                        zorder=5,
                    )
        start = [y for rs in curves.values() for x, y in zip(*series(rs, _dev(metric))) if x == 0]
        if start:
            same = max(start) - min(start) < 1e-9  # every run starts from the same DPR
            reference = start[0] if same else fmean(start)
            reference_label = "round 0: the DPR start (reference)" + ("" if same else ", mean")
            ax.axhline(reference, color=REFERENCE_COLOR, ls="--", lw=1.0, zorder=1, label=reference_label)
            drawn.append(reference)
        ax.set_ylim(*span_limits(drawn, MIN_SPAN))
        ax.set_title(f"dev {metric}")
        _round_axis(ax, last_round)
    if not present:
        dev_axes[0].text(
            0.5, 0.5, "no dev metrics", ha="center", va="center", transform=dev_axes[0].transAxes
        )
    handles = [Line2D([], [], color=colors[v], lw=2.0, marker="o", markersize=4.5) for v in groups]
    labels = [v if len(m) == 1 else f"{v} (thick: mean of {len(m)} seeds)" for v, m in groups.items()]
    if any(len(m) > 1 for m in groups.values()):
        handles.append(Line2D([], [], color="0.3", lw=0.8, alpha=0.6))
        labels.append("thin: each seed")
    if any(selected.get(label) is not None for label in curves):
        handles.append(
            Line2D([], [], marker="*", markersize=12, color="0.6", markeredgecolor="black", linestyle="none")
        )
        how = f" ({selected_by})" if selected_by else ""
        labels.append(f"selected round{how}: its retriever is tested")
    if reference_label:
        handles.append(Line2D([], [], color=REFERENCE_COLOR, ls="--", lw=1.0))
        labels.append(reference_label)
    fig.legend(handles, labels, loc="outside lower center", ncol=min(len(handles), 3), fontsize=8)
    if sieves:
        ax = axes[0][-1]
        for j, (variant, members) in enumerate(sieves.items()):
            style = VARIANT_STYLES[j % len(VARIANT_STYLES)]
            for key, label, color in SIEVE_SERIES:
                named = label if len(sieves) == 1 else f"{variant}: {label}"
                _draw(ax, members, _sieve(key), color, named, style)
        ax.axhline(
            PAPER_SIEVE_OUT,
            color=REFERENCE_COLOR,
            lw=0.8,
            ls=":",
            label="paper: sieve-out a little under 0.5",
        )
        ax.set_ylim(0, 1)
        ax.set_title("sieve per round" + (f" ({next(iter(sieves))})" if len(sieves) == 1 else ""))
        _round_axis(ax, last_round, first_label="")
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    if title:
        fig.suptitle(title)
    return fig, present


def plot(
    curves: dict[str, list[dict]],
    out: str | Path,
    metrics=DEFAULT_METRICS,
    selected: dict[str, int] | None = None,
    title: str = "",
    selected_by: str = "",
) -> list[str]:
    """Write the PNG (learning_curve_figure); return the metrics drawn."""
    fig, present = learning_curve_figure(curves, metrics, selected, title, selected_by)
    write_png(out, fig)
    return present


def main(argv: list[str] | None = None) -> int:
    ap = stage_parser("pipeline.ar2.learning_curve", __doc__)
    ap.add_argument(
        "--variant",
        action="append",
        required=True,
        metavar="NAME=DIR",
        help="a variant's folder results/{dataset}/ar2/{variant} (repeatable)",
    )
    add_settings_flags(ap, Ar2CurveJob, "the rounds drawn (ar2.rounds)")
    ap.add_argument("--metrics", nargs="+", default=list(DEFAULT_METRICS))
    ap.add_argument("--title", default="")
    ap.add_argument("--out", required=True)
    ap.add_argument("--log")
    args = ap.parse_args(argv)
    job = job_settings(Ar2CurveJob, args)  # before any work: a bad document or flag is one line
    start_stage(args.log)
    curves, selected, reasons = {}, {}, []
    for spec in args.variant:
        name, sep, folder = spec.partition("=")
        if not sep:
            ap.error(f"--variant wants NAME=DIR, got {spec!r}")
        curves[name] = read_rounds(folder, job.rounds)
        sel = Path(folder) / "selection.json"
        if sel.exists():
            selection = read_selection(sel)
            selected[name] = selection["selected_round"]
            if selection.get("reason") and selection["reason"] not in reasons:
                reasons.append(selection["reason"])
    drawn = plot(curves, args.out, args.metrics, selected, args.title, "; ".join(reasons))
    log.info("learning curve (%s) -> %s", ", ".join(drawn), args.out)
    for variant, rows in sieve_rows(curves).items():
        log.info(
            "%s sieve-out rate per round: %s",
            variant,
            ", ".join(f"{r}: {s['sieve_out_rate']:.3f}" for r, s in rows),
        )
    return 0


if __name__ == "__main__":
    run_main(main)

"""The methods side by side in one figure (metrics.png beside metrics.md): for the metrics that tell the
methods apart (gather.headline_columns), one point per method with its 95% t-interval over
training seeds where it ran with several. A one-seed run gets no error bar: the paired tests over
queries in metrics.md compare such runs, not this figure. The x-axes start at 0 (a metric's own zero:
a cropped axis magnified the gaps); controls are grey and labelled, never the red "best"."""

from __future__ import annotations

import os
from dataclasses import dataclass

from pipeline.core.storage import write_png
from pipeline.evaluation.method_notes import method_notes
from pipeline.evaluation.seed_stats import t_half_width

LEVEL = 0.95
PANELS = 2  # the first headline metrics; more panels get too narrow to read the method names


@dataclass(frozen=True)
class MethodValue:
    method: str
    mean: float
    low: float | None  # the interval over seeds; None with fewer than 2 seeds
    high: float | None
    seeds: int


def method_values(gathered: dict, metric: str, level: float = LEVEL) -> list[MethodValue]:
    """Each gathered method's ``metric``: mean and the two-sided t-interval over its seeds (sample std,
    n − 1 degrees of freedom), in the order metrics.json lists the methods; methods without the metric
    are left out."""
    values = []
    for method, entry in gathered["methods"].items():
        mean = entry["metrics"].get(metric)
        if mean is None:
            continue
        seeds = len([s for s in entry.get("seeds") or [] if s is not None])
        std = (entry.get("metrics_std") or {}).get(metric)
        half = t_half_width(std, seeds, level)
        low, high = (None, None) if half is None else (mean - half, mean + half)
        values.append(MethodValue(method, float(mean), low, high, max(seeds, 1)))
    return values


def methods_figure(gathered: dict, metrics: list[str]):
    """The Figure: one panel per metric (at most PANELS), a row per method, the same rows in every
    panel (a method without the metric gets "no value" in its row), a point per method and error bars
    where seeds allow."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.transforms import blended_transform_factory

    metrics = metrics[:PANELS]
    if not metrics:
        raise ValueError("no metric to plot: every method has the same values (metrics.md lists them)")
    panels = {metric: {v.method: v for v in method_values(gathered, metric)} for metric in metrics}
    names = [name for name in gathered["methods"] if any(name in values for values in panels.values())]
    controls = {name for name, note in method_notes(gathered).items() if note.control}
    # one row per method, the first on top, shared by the panels: each panel used to number its own
    # methods, and with the y-axis shared the last panel's names labelled the others' points
    row = {name: len(names) - 1 - i for i, name in enumerate(names)}
    fig, axes = plt.subplots(
        1,
        len(metrics),
        figsize=(4.6 * len(metrics) + 1.6, 0.42 * max(len(names), 1) + 1.6),
        squeeze=False,
        sharey=True,
    )
    seeds = set()
    for ax, (metric, values) in zip(axes[0], panels.items()):
        best = max((v.mean for v in values.values() if v.method not in controls), default=None)
        for name, v in values.items():
            y = row[name]
            seeds.add(v.seeds)
            color = "0.6" if name in controls else "C3" if v.mean == best else "C0"
            err = None
            if v.low is not None:
                err = [[v.mean - v.low], [v.high - v.mean]]
            # points with their values written beside them; the axis starts at 0
            ax.errorbar(v.mean, y, xerr=err, fmt="o", color=color, capsize=3, linewidth=1, markersize=6)
            # beside the bar's end or its error bar, whichever reaches further
            ax.text(v.high if v.high is not None else v.mean, y, f" {v.mean:.3f}", va="center", fontsize=8)
        on_left = blended_transform_factory(ax.transAxes, ax.transData)
        for name in names:
            if name not in values:
                ax.text(0.02, row[name], "no value", transform=on_left, va="center", fontsize=8, color="0.5")
        labels = [f"{name} (control)" if name in controls else name for name in names]
        ax.set_yticks([row[name] for name in names], labels, fontsize=9)
        highs = [v.high if v.high is not None else v.mean for v in values.values()]
        # from 0 to a little past 1 (room for the value beside a point at 1), or past the largest value
        ax.set_xlim(0.0, max([1.0, *highs]) * 1.12)
        ax.set_ylim(-0.6, len(names) - 0.4)
        ax.set_title(metric, fontsize=10)
        ax.grid(alpha=0.3)
    many = sorted(s for s in seeds if s > 1)
    bars = (
        f"error bars: {LEVEL:.0%} t-interval over {', '.join(map(str, many))} seeds; none: one run"
        if many
        else "one run per method (no interval)"
    )
    bars += "; paired differences: metrics.md"
    split = next(iter(gathered["methods"].values())).get("split", "test")
    fig.suptitle(
        f"{gathered.get('dataset', '')}: {split} split, best in red (controls in grey, never best); {bars}",
        fontsize=9,
    )
    fig.tight_layout()
    return fig


def plot_methods(gathered: dict, metrics: list[str], out: str | os.PathLike) -> None:
    """Write methods_figure's PNG."""
    write_png(out, methods_figure(gathered, metrics))

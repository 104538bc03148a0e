"""AR2 learning curves: dev metrics per round, one line per variant, the selected round starred.

    python -m pipeline.ar2.learning_curve --variant plain=results/synthkb/ar2/plain/seed0 \
        --variant sieve=results/synthkb/ar2/sieve/seed0 --rounds 2 --out results/synthkb/figures/ar2_learning_curve.png

Reads only ``round{r}/round.json`` (and ``selection.json`` when the variant has been selected).
Round 0 is the starting retriever (DPR) and is drawn as the curves' first point. Sieve variants get
one more panel: the sieve-out rate of each round (with false-negative recall and true-negative
retention where the truth is known), next to the paper's "a little under 0.5" per epoch.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from pipeline.core.cli import run_main, stage_parser, start_stage
from pipeline.core.storage import read_json, write_png

log = logging.getLogger("sieve.learning_curve")

DEFAULT_METRICS = ("R@1", "R@5", "R@20", "MRR@10")
PAPER_SIEVE_OUT = 0.5  # reference.md §1: "usually a little under 0.5 per epoch"
SIEVE_SERIES = (
    ("sieve_out_rate", "sieve-out", "-"),
    ("false_negative_recall", "FN recall", "--"),
    ("true_negative_retention", "TN kept", ":"),
)


def sieve_rows(curves: dict[str, list[dict]]) -> dict[str, list[tuple[int, dict]]]:
    """variant -> [(round, that round's sieve stats)] for the variants whose rounds sieve."""
    out = {
        v: [(r["round"], r["sieve"]) for r in rounds if isinstance(r.get("sieve"), dict)]
        for v, rounds in curves.items()
    }
    return {v: rows for v, rows in out.items() if rows}


def read_rounds(variant_dir: str | Path, rounds: int) -> list[dict]:
    """round.json of rounds 0..rounds (all must exist)."""
    out = []
    for r in range(rounds + 1):
        path = Path(variant_dir) / f"round{r}" / "round.json"
        out.append(read_json(path, missing="round summary not found (did the round finish?)"))
    return out


def plot(
    curves: dict[str, list[dict]],
    out: str | Path,
    metrics=DEFAULT_METRICS,
    selected: dict[str, int] | None = None,
    title: str = "",
) -> list[str]:
    """Write the PNG; return the metrics actually drawn (those present in some round)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    present = [m for m in metrics if any(m in r.get("dev", {}) for rs in curves.values() for r in rs)]
    if not present:
        present = sorted({m for rs in curves.values() for r in rs for m in r.get("dev", {})})[:4]
    sieves = sieve_rows(curves)
    n = max(len(present), 1) + bool(sieves)
    fig, axes = plt.subplots(1, n, figsize=(3.6 * n, 3.2), squeeze=False)
    if sieves:
        ax = axes[0][-1]
        for variant, rows in sieves.items():
            i = list(curves).index(variant)  # the variant's colour in the other panels
            for key, label, style in SIEVE_SERIES:
                pts = [(r, s[key]) for r, s in rows if s.get(key) is not None]
                if pts:
                    ax.plot(*zip(*pts), style, marker="o", color=f"C{i}", label=f"{variant} {label}")
        ax.axhline(PAPER_SIEVE_OUT, color="gray", lw=0.8)
        ax.text(ax.get_xlim()[0], PAPER_SIEVE_OUT, " paper: a little under 0.5", fontsize=7, va="bottom")
        ax.set_ylim(0, 1)
        ax.set_title("sieve per round")
        ax.set_xlabel("round")
        ax.grid(alpha=0.3)
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.legend(fontsize=6)
    for ax, metric in zip(axes[0], present):
        for variant, rounds in curves.items():
            xs = [r["round"] for r in rounds if metric in r.get("dev", {})]
            ys = [r["dev"][metric] for r in rounds if metric in r.get("dev", {})]
            (line,) = ax.plot(xs, ys, marker="o", label=variant)
            chosen = (selected or {}).get(variant)
            if chosen is not None and chosen in xs:
                ax.plot(
                    [chosen],
                    [ys[xs.index(chosen)]],
                    marker="*",
                    markersize=14,
                    color=line.get_color(),
                    linestyle="none",
                )
        ax.set_title(f"dev {metric}")
        ax.set_xlabel("round (0 = DPR start)")
        ax.grid(alpha=0.3)
        ax.xaxis.get_major_locator().set_params(integer=True)
    if not present:
        axes[0][0].text(0.5, 0.5, "no dev metrics", ha="center", va="center")
    axes[0][0].legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
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
    ap.add_argument("--rounds", type=int, required=True, help="last round (config ar2.rounds)")
    ap.add_argument("--metrics", nargs="+", default=list(DEFAULT_METRICS))
    ap.add_argument("--title", default="")
    ap.add_argument("--out", required=True)
    ap.add_argument("--log")
    args = ap.parse_args(argv)
    start_stage(args.log)
    curves, selected = {}, {}
    for spec in args.variant:
        name, sep, folder = spec.partition("=")
        if not sep:
            ap.error(f"--variant wants NAME=DIR, got {spec!r}")
        curves[name] = read_rounds(folder, args.rounds)
        sel = Path(folder) / "selection.json"
        if sel.exists():
            selected[name] = json.loads(sel.read_text())["selected_round"]
    drawn = plot(curves, args.out, args.metrics, selected, args.title)
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

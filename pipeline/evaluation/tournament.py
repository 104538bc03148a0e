"""The tournament: which false-negative filter should a user run? Every contender trained on
the same candidate pool at every noise level, paired over seeds with the pool's unfiltered control
(``dpr_none``), measured against the oracle's gain and against the untrained model it started from.

    python -m pipeline.evaluation.tournament --configfile config.yaml config/overlays/tournament/tournament.yaml \
        --out-json results/sweeps/tournament.json --out-md results/sweeps/tournament.md \
        --out-png results/sweeps/tournament.png

Everything comes from the config's ``tournament`` section (the levels, the contenders, the baseline,
the oracle, the start and the metrics; pipeline.core.settings.TournamentSettings) and each level's
gathered ``results/<dataset>/metrics.json`` (``--metrics DATASET=PATH`` reads another file). Per level
× contender × metric: the mean over seeds with its 95% t-interval; the paired difference with the
baseline; the share of the oracle's gain, (m − baseline) / (oracle − baseline), with Fieller's interval
over the same seeds; the paired difference with the start (seed-free: its one run against each seed)
and with the demo's filter (``incumbent``); and the default filter by docs/results.md's rule
(``choose_default``; ``--levels`` builds the levels a run has finished, and then decides nothing). A
contender, seed or metric that is missing is an error naming the level and its file, except a
contender listed in the level's ``skip`` (not run there, e.g. the oracle on SQuAD, which has no
qrels_all): the table says "not run". The outputs are deterministic (same inputs, same bytes).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Mapping, Sequence

from pipeline.core.cli import run_main, stage_parser, start_stage
from pipeline.core.methods import method_table, reads_true_labels
from pipeline.core.settings.evaluation import TournamentSettings
from pipeline.core.settings.root import apply_defaults, section
from pipeline.core.settings.validation import from_dict
from pipeline.core.storage import DataError, atomic_open, read_json_object, write_json, write_png
from pipeline.evaluation.seed_stats import paired_difference, t_quantile
from pipeline.evaluation.sweep import per_seed

log = logging.getLogger("sieve.tournament")

LEVEL = 0.95


@dataclass(frozen=True)
class Share:
    """The share of the oracle's gain, (ā / b̄) for the per-seed gains a (method) and b (oracle) over
    the baseline, and its interval; ``ratio`` None where the oracle's gain is not shown."""

    ratio: float | None
    ci_low: float | None
    ci_high: float | None
    n: int


def _covariance(x: Sequence[float], y: Sequence[float]) -> float:
    mx, my = math.fsum(x) / len(x), math.fsum(y) / len(y)
    return math.fsum((a - mx) * (b - my) for a, b in zip(x, y)) / (len(x) - 1)


def oracle_share(gain: Mapping, oracle_gain: Mapping, level: float = LEVEL) -> Share:
    """(mean gain) / (mean oracle gain) over the seeds both have, with Fieller's interval: the ρ whose
    paired difference gain_s − ρ · oracle_gain_s has a t-interval (n − 1 df, the one of seed_stats)
    that contains 0. It is bounded exactly when the oracle's own gain is shown (its t-interval lies
    above 0); otherwise the share is None (as the noise sweep's oracle_gap_closed). With one seed:
    the ratio of the two differences, no interval."""
    seeds = [s for s in gain if s in oracle_gain]
    n = len(seeds)
    if n == 0:
        return Share(None, None, None, 0)
    a = [float(gain[s]) for s in seeds]
    b = [float(oracle_gain[s]) for s in seeds]
    mean_a, mean_b = math.fsum(a) / n, math.fsum(b) / n
    if n == 1:
        return Share(mean_a / mean_b if mean_b > 0 else None, None, None, 1)
    q2 = t_quantile(level, n - 1) ** 2 / n
    s_aa, s_bb, s_ab = _covariance(a, a), _covariance(b, b), _covariance(a, b)
    # (ā − ρ b̄)² ≤ q² (s_aa − 2ρ s_ab + ρ² s_bb) / n, a quadratic A ρ² − 2 B ρ + C ≤ 0
    quad_a = mean_b**2 - q2 * s_bb
    quad_b = mean_a * mean_b - q2 * s_ab
    quad_c = mean_a**2 - q2 * s_aa
    if mean_b <= 0 or quad_a <= 0:  # the oracle's interval reaches 0: the unit itself is not shown
        return Share(None, None, None, n)
    root = math.sqrt(max(quad_b**2 - quad_a * quad_c, 0.0))  # ≥ 0 when A > 0; rounding aside
    return Share(mean_a / mean_b, (quad_b - root) / quad_a, (quad_b + root) / quad_a, n)


def _interval(d) -> dict:
    return {"mean": d.mean, "ci_low": d.ci_low, "ci_high": d.ci_high, "n": d.n}


def _own_interval(values: Mapping) -> dict:
    """The mean over seeds and its t-interval (the method's spread; no pairing)."""
    return _interval(paired_difference(values, dict.fromkeys(values, 0.0), LEVEL))


def _level_settings(dataset: str, level: dict, settings: dict) -> dict:
    return {
        "dataset": dataset,
        "label": level["label"],
        "oracle": level.get("oracle") or settings["oracle"],
        "metrics": list(level.get("metrics") or settings["metrics"]),
        "skip": list(level.get("skip") or []),
    }


def check_settings(settings: dict) -> None:
    """What the tournament needs of its section: contenders, levels, and the controls among the
    contenders wherever they are used (a stale or skipped control would pair with nothing)."""
    if not settings["methods"]:
        raise DataError("no contenders: set tournament.methods", field="tournament.methods")
    if not settings["levels"]:
        raise DataError("no levels: set tournament.levels", field="tournament.levels")
    if settings["incumbent"] not in settings["methods"]:
        raise DataError(
            f"the incumbent {settings['incumbent']!r} must be a contender", field="tournament.incumbent"
        )
    for dataset, raw in settings["levels"].items():
        level = _level_settings(dataset, raw, settings)
        where = f"tournament.levels.{dataset}"
        unknown = [m for m in level["skip"] if m not in settings["methods"]]
        if unknown:
            raise DataError(f"skips {unknown}, which are not contenders", field=f"{where}.skip")
        for role, name in (("baseline", settings["baseline"]), ("oracle", level["oracle"])):
            if name not in settings["methods"] or name in level["skip"]:
                raise DataError(
                    f"the {role} {name!r} must be a contender run on {level['dataset']}", field=where
                )


def _values(metrics: dict, method: str, metric: str, file: str, seeds: list | None) -> dict:
    """seed -> value of ``method``'s runs; with ``seeds`` (the baseline's), exactly those seeds."""
    values = per_seed(metrics, method, metric, file)
    if seeds is not None and list(values) != seeds:
        missing = [s for s in seeds if s not in values]
        extra = [s for s in values if s not in seeds]
        raise DataError(
            f"{method} was run with seeds {list(values)}, the baseline with {seeds}"
            + (f": missing {missing}" if missing else "")
            + (f", not in the baseline {extra}" if extra else ""),
            file=file,
            field=f"methods.{method}.per_seed",
        )
    return values


def level_result(level: dict, settings: dict, metrics: dict, file: str) -> dict:
    """One level (a column): every contender's row; ``metrics`` is the dataset's gathered metrics.json."""
    baseline, start, oracle = settings["baseline"], settings["start"], level["oracle"]
    incumbent = settings["incumbent"]
    run = [m for m in settings["methods"] if m not in level["skip"]]
    gathered = metrics.get("methods") if isinstance(metrics.get("methods"), dict) else {}
    missing = [m for m in dict.fromkeys([*run, start]) if m not in gathered]
    if missing:
        raise DataError(
            f"level {level['label']!r} ({level['dataset']}) misses {', '.join(missing)}: add them to "
            f"the dataset's methods, or to the level's skip",
            file=file,
            field="methods",
        )
    out: dict = {
        "label": level["label"],
        "dataset": level["dataset"],
        "oracle": oracle,
        "metrics": level["metrics"],
        "primary": level["metrics"][0],
        "skip": level["skip"],
        "start": {},
        "rows": {},
    }
    for metric in level["metrics"]:
        base = _values(metrics, baseline, metric, file, None)
        seeds = list(base)
        if None in seeds:
            raise DataError(
                f"the baseline {baseline} has no per-seed runs (per_seed): nothing to pair over seeds",
                file=file,
                field=f"methods.{baseline}",
            )
        start_values = per_seed(metrics, start, metric, file)
        if list(start_values) == [None]:  # seed-free (zeroshot): its one run is every seed's start
            start_values = dict.fromkeys(seeds, start_values[None])
        elif list(start_values) != seeds:
            _values(metrics, start, metric, file, seeds)
        out["start"][metric] = _own_interval(start_values)
        out["seeds"] = seeds
        values = {m: _values(metrics, m, metric, file, seeds) for m in run}
        oracle_gain = {s: values[oracle][s] - base[s] for s in seeds}
        for m in settings["methods"]:
            row = out["rows"].setdefault(m, {"run": m in run, "metrics": {}})
            if m not in run:
                continue
            gain = {s: values[m][s] - base[s] for s in seeds}
            share = oracle_share(gain, oracle_gain)
            row["metrics"][metric] = {
                **_own_interval(values[m]),
                "vs_baseline": _interval(paired_difference(values[m], base, LEVEL)),
                "oracle_share": {"mean": share.ratio, "ci_low": share.ci_low, "ci_high": share.ci_high},
                "vs_start": _interval(paired_difference(values[m], start_values, LEVEL)),
                "vs_incumbent": (
                    _interval(paired_difference(values[m], values[incumbent], LEVEL))
                    if incumbent in run
                    else None
                ),
            }
    return out


def build_tournament(
    settings: dict, metrics_files: Mapping[str, str], only: Sequence[str] | None = None
) -> dict:
    """Every level of ``settings`` (the config's tournament section, defaults filled) from its
    dataset's gathered metrics (``metrics_files``: dataset -> path); with ``only``, those levels alone
    (a run that has not finished every level: the default is then not decided)."""
    check_settings(settings)
    unknown = [d for d in only or [] if d not in settings["levels"]]
    if unknown:
        raise DataError(
            f"{unknown} are not levels of tournament.levels {list(settings['levels'])}", field="--levels"
        )
    built = [d for d in settings["levels"] if only is None or d in only]
    levels = []
    for dataset in built:
        level = _level_settings(dataset, settings["levels"][dataset], settings)
        path = metrics_files[level["dataset"]]
        metrics = read_json_object(path, missing="file not found (did gather_metrics run for this dataset?)")
        levels.append(level_result(level, settings, metrics, str(path)))
    result = {
        "methods": list(settings["methods"]),
        "baseline": settings["baseline"],
        "start": settings["start"],
        "incumbent": settings["incumbent"],
        "level": LEVEL,
        "interval": "95% Student-t over seeds (paired by seed); oracle share: Fieller's interval",
        "levels": levels,
        "levels_left_out": [raw["label"] for d, raw in settings["levels"].items() if d not in built],
    }
    result["default"] = choose_default(result)
    return result


# ---- the default filter (docs/results.md: the rule was fixed before the table's numbers) -----------


def _shown(d: dict | None) -> int:
    """+1 where the interval lies above 0, −1 where it lies below, 0 where it holds 0 or is missing."""
    if d is None or d.get("ci_low") is None:
        return 0
    return 1 if d["ci_low"] > 0 else -1 if d["ci_high"] < 0 else 0


def true_label_methods() -> set[str]:
    """The contender names that read the true false-negative labels (the method table's oracles)."""
    return {name for name, m in method_table(apply_defaults({})).items() if reads_true_labels(m)}


def choose_default(result: dict) -> dict:
    """The rule of docs/results.md on each level's primary metric. A contender qualifies when it reads no
    true labels and its paired difference with the baseline is shown negative at no level; the qualifier
    shown above the baseline at the most levels wins (ties: the larger mean difference over its levels,
    then the table's order). The winner replaces the incumbent only if shown above it seed by seed at
    one level at least and below it at none, and only when every level is in ``result``."""
    incumbent, levels = result["incumbent"], result["levels"]
    oracles = true_label_methods()
    standing = {}
    for m in result["methods"]:
        if m in oracles:
            continue
        cells = {
            lv["dataset"]: lv["rows"][m]["metrics"][lv["primary"]]["vs_baseline"]
            for lv in levels
            if lv["rows"][m]["run"]
        }
        standing[m] = {
            "above": [d for d, c in cells.items() if _shown(c) > 0],
            "below": [d for d, c in cells.items() if _shown(c) < 0],
            "mean": math.fsum(c["mean"] for c in cells.values()) / len(cells) if cells else None,
        }
    qualified = [m for m, s in standing.items() if not s["below"] and s["mean"] is not None]
    ranking = sorted(qualified, key=lambda m: (-len(standing[m]["above"]), -standing[m]["mean"]))
    winner = ranking[0] if ranking else None
    against = {}
    if winner is not None and winner != incumbent:
        against = {
            lv["dataset"]: _shown(lv["rows"][winner]["metrics"][lv["primary"]]["vs_incumbent"])
            for lv in levels
            if lv["rows"][winner]["run"] and lv["rows"][incumbent]["run"]
        }
    beats = [d for d, s in against.items() if s > 0]
    loses = [d for d, s in against.items() if s < 0]
    decided = not result["levels_left_out"]
    replaced = decided and bool(beats) and not loses
    return {
        "decided": decided,
        "excluded": [m for m in result["methods"] if m in oracles],
        "standing": standing,
        "ranking": ranking,
        "winner": winner,
        "beats_incumbent_at": beats,
        "loses_to_incumbent_at": loses,
        "replaced": replaced,
        "default": winner if replaced else incumbent,
    }


def default_sentence(result: dict) -> str:
    """The decision in words: the winner, its standing, and whether it replaces the incumbent."""
    choice, incumbent, baseline = result["default"], result["incumbent"], result["baseline"]
    labels = {lv["dataset"]: lv["label"] for lv in result["levels"]}

    def named(datasets: list[str]) -> str:
        return "; ".join(labels[d] for d in datasets) or "none"  # labels hold commas

    winner = choice["winner"]
    left_out = result["levels_left_out"]
    head = "Default (docs/results.md's rule)"
    if left_out:
        head = (
            f"Not decided: {len(labels)} of {len(labels) + len(left_out)} levels (not in this table: "
            f"{'; '.join(left_out)}), and a level that has not finished decides nothing. Over these levels"
        )
    if winner is None:
        return (
            f"{head}: every contender is shown below {baseline} at some level; the demo's filter "
            f"{incumbent} stays, and the data support none."
        )
    s = choice["standing"][winner]
    text = (
        f"{head}: {winner} leads the contenders that read no true labels and are "
        f"shown below {baseline} at no level: above it at {len(s['above'])} of {len(labels)} levels "
        f"({named(s['above'])}), mean difference {s['mean']:+.3f} on the primary metric."
    )
    if winner == incumbent:
        return text + " It is the demo's filter, which stays."
    if choice["beats_incumbent_at"] and not choice["loses_to_incumbent_at"]:
        return text + (
            f" Seed by seed it is above the demo's filter {incumbent} at {named(choice['beats_incumbent_at'])} "
            f"and below it nowhere: it {'replaces' if choice['decided'] else 'would replace'} it."
        )
    return text + (
        f" Against the demo's filter {incumbent}, seed by seed: above at "
        f"{named(choice['beats_incumbent_at'])}, below at {named(choice['loses_to_incumbent_at'])}; "
        f"the data do not separate them and {incumbent} stays."
    )


# ---- the table and the figure --------------------------------------------------------------------


def _ranged(d: dict, spec: str, missing: str) -> str:
    """mean [low, high] in format ``spec``; the mean alone without an interval; ``missing`` without a mean."""
    if d.get("mean") is None:
        return missing
    if d.get("ci_low") is None:
        return format(d["mean"], spec)
    return f"{d['mean']:{spec}} [{d['ci_low']:{spec}}, {d['ci_high']:{spec}}]"


def _signed(d: dict) -> str:
    return _ranged(d, "+.3f", "–")


def _share(d: dict) -> str:
    return _ranged(d, ".0%", "n/a (oracle gain not shown)")


def _columns(result: dict) -> list[str]:
    """Every level's metrics, in order of first appearance (tournament.metrics first)."""
    return list(dict.fromkeys(m for level in result["levels"] for m in level["metrics"]))


def _matrix(result: dict, key: str, skip: str, standing: bool) -> list[str]:
    """Contenders × levels: each level's primary metric, the paired difference ``key`` of every row
    (``skip``: the method the difference is taken with, a dash); with ``standing``, the rule's count of
    levels shown above and below the baseline."""
    levels, choice = result["levels"], result["default"]
    head = ["contender", *[f"{lv['label']} ({lv['primary']})" for lv in levels]]
    head += [f"levels above / below {result['baseline']}"] if standing else []
    lines = ["| " + " | ".join(head) + " |", "|---" + "|---:" * (len(head) - 1) + "|"]
    for method in result["methods"]:
        cells = []
        for lv in levels:
            row = lv["rows"][method]
            if not row["run"]:
                cells.append("not run")
            else:
                cells.append("–" if method == skip else _signed(row["metrics"][lv["primary"]][key] or {}))
        if standing:
            s = choice["standing"].get(method)
            cells.append("true labels" if s is None else f"{len(s['above'])} / {len(s['below'])}")
        oracle_at = [lv["label"] for lv in levels if lv["oracle"] == method]
        ran = [lv for lv in levels if lv["rows"][method]["run"]]
        where = "" if len(oracle_at) == len(ran) else " at " + "; ".join(oracle_at)
        name = method + (f" (the oracle{where})" if oracle_at else "")
        lines.append("| " + " | ".join([name, *cells]) + " |")
    return lines


def tournament_summary(result: dict) -> str:
    """The two matrices the rule reads, contenders × levels on each level's primary metric: the paired
    difference with the baseline (with each contender's count of levels shown above and below it) and
    with the incumbent; then the decision."""
    baseline, incumbent = result["baseline"], result["incumbent"]
    lines = [
        f"Primary metric − {baseline} (the same pool, nothing dropped): the mean paired difference over "
        f"seeds [{LEVEL:.0%} Student-t interval]; shown above or below where the interval excludes 0.",
        "",
        *_matrix(result, "vs_baseline", baseline, standing=True),
        "",
        f"Primary metric − {incumbent} (the demo's filter, tournament.incumbent), seed by seed:",
        "",
        *_matrix(result, "vs_incumbent", incumbent, standing=False),
        "",
        default_sentence(result),
    ]
    return "\n".join(lines) + "\n"


def tournament_markdown(result: dict) -> str:
    """The summary (``tournament_summary``), then one table: a row per level × contender. Per metric
    the mean over seeds and the paired difference with the baseline; on the level's primary metric the
    share of the oracle's gain and the difference with the start."""
    baseline, start = result["baseline"], result["start"]
    columns = _columns(result)
    head = ["level (primary)", "method", *[f"{m}: mean (− {baseline})" for m in columns]]
    incumbent = result["incumbent"]
    head += [
        f"primary: share of the oracle's gain over {baseline}",
        f"primary: − {start}",
        f"primary: − {incumbent}",
    ]
    lines = [
        tournament_summary(result),
        "Every metric of every contender:",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "|".join(["---"] * 2 + ["---:"] * (len(head) - 2)) + "|",
    ]
    for level in result["levels"]:
        primary = level["primary"]
        label = f"{level['label']} ({primary})"
        for method, row in level["rows"].items():
            name = f"{method} (oracle)" if method == level["oracle"] else method
            if not row["run"]:
                lines.append("| " + " | ".join([label, name, *["not run"] * (len(head) - 2)]) + " |")
                continue
            cells = []
            for metric in columns:
                cell = row["metrics"].get(metric)
                if cell is None:
                    cells.append("–")
                else:
                    diff = "" if method == baseline else f" ({_signed(cell['vs_baseline'])})"
                    cells.append(f"{cell['mean']:.3f}{diff}")
            top = row["metrics"][primary]
            cells.append("–" if method in (baseline, level["oracle"]) else _share(top["oracle_share"]))
            cells.append(_signed(top["vs_start"]))
            cells.append("–" if method == incumbent else _signed(top["vs_incumbent"] or {}))
            lines.append("| " + " | ".join([label, name, *cells]) + " |")
    starts = "; ".join(
        f"{level['label']}: {level['start'][level['primary']]['mean']:.3f}" for level in result["levels"]
    )
    seeds = "; ".join(
        f"{level['label']}: {', '.join(map(str, level['seeds']))}" for level in result["levels"]
    )
    lines += [
        "",
        f"Mean over seeds; in brackets the paired difference with {baseline} (the same candidate pool, "
        f"nothing dropped) over the same seeds and its {LEVEL:.0%} Student-t interval. Share of the "
        f"oracle's gain: (method − {baseline}) / (oracle − {baseline}) on the level's primary metric, "
        "with Fieller's interval over the seeds; n/a where the oracle's own gain is not shown (its "
        f"interval reaches 0). − {start}: the paired difference with the untrained model the DPRs start "
        f"from (seed-free: its one run against each seed); below 0, the method ends below its start. "
        f"{start} on the primary metric: {starts}. Seeds: {seeds}. Every metric's share and difference "
        "with the start are in the JSON. not run: listed in the level's skip (tournament.levels). "
        f"− {incumbent}: the paired difference with the demo's filter (tournament.incumbent).",
    ]
    return "\n".join(lines) + "\n"


def plot_tournament(result: dict, out: str) -> None:
    """Two heatmaps, contenders × levels, on each level's primary metric: the paired difference with
    the baseline (annotated with its interval and the share of the oracle's gain) and with the start."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    baseline, start = result["baseline"], result["start"]
    methods, levels = result["methods"], result["levels"]
    panels = (("vs_baseline", f"− {baseline}"), ("vs_start", f"− {start} (the untrained start)"))
    fig, axes = plt.subplots(
        1, 2, figsize=(2.3 * len(levels) * 2 + 4.5, 0.62 * len(methods) + 2.2), squeeze=False
    )
    for ax, (key, title) in zip(axes[0], panels):
        grid = np.full((len(methods), len(levels)), np.nan)
        for j, level in enumerate(levels):
            for i, m in enumerate(methods):
                row = level["rows"][m]
                if row["run"] and not (key == "vs_baseline" and m == baseline):
                    grid[i, j] = row["metrics"][level["primary"]][key]["mean"]
        span = float(np.nanmax(np.abs(grid))) if np.isfinite(grid).any() else 0.0
        span = span or 1.0
        ax.imshow(grid, cmap="RdBu", vmin=-span, vmax=span, aspect="auto")
        for j, level in enumerate(levels):
            for i, m in enumerate(methods):
                row = level["rows"][m]
                if not row["run"] or (key == "vs_baseline" and m == baseline):
                    word = "not run" if not row["run"] else "the baseline"
                    ax.text(j, i, word, ha="center", va="center", fontsize=7, color="grey")
                    continue
                cell = row["metrics"][level["primary"]]
                text = _signed(cell[key]).replace(" [", "\n[")
                if m == level["oracle"]:
                    text += "\n(the oracle)"
                elif key == "vs_baseline":
                    share = cell["oracle_share"]["mean"]
                    text += "\n" + ("oracle gain n/a" if share is None else f"{share:.0%} of oracle")
                dark = abs(grid[i, j]) > 0.6 * span  # white on the saturated ends of the colour map
                ax.text(
                    j, i, text, ha="center", va="center", fontsize=6.5, color="white" if dark else "black"
                )
        ax.set_xticks(range(len(levels)), [f"{lv['label']}\n{lv['primary']}" for lv in levels], fontsize=8)
        ax.set_yticks(range(len(methods)), methods, fontsize=8)
        ax.set_title(f"primary metric {title}\nmean [{LEVEL:.0%} interval over seeds]", fontsize=9)
    fig.tight_layout()
    write_png(out, fig, metadata={"Software": None})


def metrics_files(settings: dict, given: Sequence[str]) -> dict[str, str]:
    """dataset -> gathered metrics.json: results/<dataset>/metrics.json unless ``given`` names another
    (DATASET=PATH)."""
    # the workflow's layout (pipeline.workflow.paths.dataset_metrics; tests/test_tournament.py holds
    # them equal): the evaluation family is below the workflow's glue
    files = {dataset: f"results/{dataset}/metrics.json" for dataset in settings["levels"]}
    for item in given:
        name, sep, path = item.partition("=")
        if not (sep and name and path):
            raise DataError(f"expected DATASET=PATH, got {item!r}", field="--metrics")
        if name not in files:
            raise DataError(
                f"{name!r} is not a dataset of tournament.levels {list(files)}", field="--metrics"
            )
        files[name] = path
    return files


def settings_from(args) -> dict:
    """The tournament section: from the config files (by hand) or as JSON (the rule passes it)."""
    import json

    if args.settings is not None:
        return from_dict(TournamentSettings, json.loads(args.settings), "tournament").model_dump()
    from pipeline.core.config import load_config

    config = load_config(args.configfile[1:], base=args.configfile[0])  # validated, defaults filled
    return section(config, "tournament").model_dump()


def main(argv: Sequence[str] | None = None) -> int:
    parser = stage_parser("pipeline.evaluation.tournament", __doc__)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--configfile", nargs="+", help="config.yaml, then the overlays, in order")
    source.add_argument("--settings", help="the tournament section as JSON (what the rule passes)")
    parser.add_argument("--metrics", nargs="*", default=[], metavar="DATASET=PATH")
    parser.add_argument(
        "--levels",
        nargs="+",
        metavar="DATASET",
        help="these levels alone (a run that has not finished them all; the default is then not decided)",
    )
    parser.add_argument("--out-json", required=True)
    parser.add_argument("--out-md", required=True)
    parser.add_argument("--out-png", required=True)
    parser.add_argument("--log")
    args = parser.parse_args(argv)
    start_stage(args.log, libraries=())
    settings = settings_from(args)
    result = build_tournament(settings, metrics_files(settings, args.metrics), args.levels)
    write_json(args.out_json, result)
    with atomic_open(args.out_md, "w", encoding="utf-8") as handle:
        handle.write(tournament_markdown(result))
    plot_tournament(result, args.out_png)
    for level in result["levels"]:
        p = level["primary"]
        log.info(
            "%s (%s): %s",
            level["label"],
            p,
            ", ".join(
                f"{m} {_signed(r['metrics'][p]['vs_baseline'])}" for m, r in level["rows"].items() if r["run"]
            ),
        )
    return 0


if __name__ == "__main__":
    run_main(main)

"""The tournament: which false-negative filter should a user run? Every contender trained on
the same candidate pool at every noise level, paired over seeds with the pool's unfiltered control
(``dpr_none``), measured against the oracle's gain and against the untrained model it started from.

    python -m pipeline.evaluation.tournament --configfile config.yaml config/overlays/tournament/tournament.yaml \
        --out-json results/sweeps/tournament.json --out-md results/sweeps/tournament.md \
        --out-png results/sweeps/tournament.png

Everything comes from the config's ``tournament`` section (the levels, the contenders, the baseline,
the oracle, the start, the references and the metrics; pipeline.evaluation.settings.TournamentSettings) and
each level's gathered ``results/<dataset>/metrics.json`` (``--metrics DATASET=PATH`` reads another
file). Per level × row (the start and the references, BM25, then the contenders) × metric: the mean
over seeds with its 95% t-interval; the paired difference with the baseline, its p and, on the primary
metric, Holm's correction over the whole matrix (``correct_matrix``); the share of the oracle's gain,
(m − baseline) / (oracle − baseline), with Fieller's interval over the same seeds; the paired difference
with the start (seed-free: its one run against each seed), with the demo's filter (``incumbent``,
information only) and with each reference (BM25); what each contender's filter did to the pool
(``--detections``: its drop rate and, with true labels, detection precision and recall); the default
by docs/results.md's rule, version 2 (``choose_default``; ``--levels`` builds the levels a run has
finished, and then decides nothing); and the goals of the defaults at each level (``level_goals``,
pipeline.evaluation.goals). A
contender, seed or metric that is missing is an error naming the level and its file, except a
contender listed in the level's ``skip`` (not run there, e.g. the oracle on SQuAD, which has no
qrels_all): the table says "not run". The outputs are deterministic (same inputs, same bytes).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Mapping, Sequence

from scipy import stats

from pipeline.core.cli import run_main, stage_parser, start_stage
from pipeline.core.methods import Method, method_table, reads_true_labels, runs
from pipeline.core.settings.root import apply_defaults, section
from pipeline.core.settings.validation import from_dict
from pipeline.core.storage import (
    DataError,
    atomic_open,
    read_json_object,
    refuse_overwriting_inputs,
    write_json,
    write_png,
)
from pipeline.evaluation.goals import HYBRID_MARGIN_GOAL, ORACLE_SHARE_GOAL
from pipeline.evaluation.seed_stats import paired_difference, t_quantile
from pipeline.evaluation.settings import TournamentSettings
from pipeline.evaluation.sweep import per_seed
from pipeline.sieve.settings import FILTER_CONTRACTS

log = logging.getLogger("sieve.tournament")

LEVEL = 0.95
# What a level's column decides: the workflow's filter, or sieve-clean's (TournamentLevel.decides).
DECISIONS = ("workflow", "clean")


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
        "decides": level.get("decides") or "workflow",
    }


def _references(settings: dict) -> list[str]:
    """The rows shown beside the contenders and never chosen: the start, then tournament.references."""
    return [
        m for m in dict.fromkeys([settings["start"], *settings["references"]]) if m not in settings["methods"]
    ]


def check_contenders_and_levels(settings: dict) -> None:
    """Rows and columns at all: what every table over the tournament section needs."""
    if not settings["methods"]:
        raise DataError("no contenders: set tournament.methods", field="tournament.methods")
    if not settings["levels"]:
        raise DataError("no levels: set tournament.levels", field="tournament.levels")


def check_settings(settings: dict) -> None:
    """What the tournament needs of its section: contenders, levels, and the controls among the
    contenders wherever they are used (a stale or skipped control would pair with nothing)."""
    check_contenders_and_levels(settings)
    if settings["incumbent"] not in settings["methods"]:
        raise DataError(
            f"the incumbent {settings['incumbent']!r} must be a contender", field="tournament.incumbent"
        )
    for dataset, raw in settings["levels"].items():
        level = _level_settings(dataset, raw, settings)
        where = f"tournament.levels.{dataset}"
        rows = [*settings["methods"], *_references(settings)]
        unknown = [m for m in level["skip"] if m not in rows]
        if unknown:
            raise DataError(
                f"skips {unknown}, which are neither contenders nor references", field=f"{where}.skip"
            )
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


def _seed_free_or_paired(metrics: dict, method: str, metric: str, file: str, seeds: list) -> dict:
    """seed -> value: a seed-free run (bm25, zeroshot) is its one run against each seed; a trained
    one must have exactly the baseline's seeds."""
    values = per_seed(metrics, method, metric, file)
    if list(values) == [None]:
        return dict.fromkeys(seeds, values[None])
    return _values(metrics, method, metric, file, seeds)


def level_result(
    level: dict, settings: dict, metrics: dict, file: str, detections: Mapping[str, dict] | None = None
) -> dict:
    """One level (a column): every contender's and reference's row; ``metrics`` is the dataset's
    gathered metrics.json, ``detections`` contender -> what its filter did there (``detection``)."""
    baseline, start, oracle = settings["baseline"], settings["start"], level["oracle"]
    incumbent = settings["incumbent"]
    references = _references(settings)
    run = [m for m in settings["methods"] if m not in level["skip"]]
    shown = [m for m in references if m not in level["skip"]]
    gathered = metrics.get("methods") if isinstance(metrics.get("methods"), dict) else {}
    missing = [m for m in dict.fromkeys([*run, start, *shown]) if m not in gathered]
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
        "decides": level["decides"],
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
        start_values = _seed_free_or_paired(metrics, start, metric, file, seeds)
        out["start"][metric] = _own_interval(start_values)
        out["seeds"] = seeds
        values = {m: _values(metrics, m, metric, file, seeds) for m in run}
        values |= {m: _seed_free_or_paired(metrics, m, metric, file, seeds) for m in shown}
        oracle_gain = {s: values[oracle][s] - base[s] for s in seeds}
        for m in [*references, *settings["methods"]]:
            row = out["rows"].setdefault(m, {"run": m in values, "reference": m in references, "metrics": {}})
            if m not in values:
                continue
            gain = {s: values[m][s] - base[s] for s in seeds}
            share = oracle_share(gain, oracle_gain) if m not in references else Share(None, None, None, 0)
            diff = paired_difference(values[m], base, LEVEL)
            row["metrics"][metric] = {
                **_own_interval(values[m]),
                "vs_baseline": {**_interval(diff), "std": diff.std, "p": paired_p_value(diff)},
                "oracle_share": {"mean": share.ratio, "ci_low": share.ci_low, "ci_high": share.ci_high},
                "vs_start": _interval(paired_difference(values[m], start_values, LEVEL)),
                "vs_references": {
                    r: _interval(paired_difference(values[m], values[r], LEVEL)) for r in shown if r != m
                },
                "vs_incumbent": (
                    _interval(paired_difference(values[m], values[incumbent], LEVEL))
                    if incumbent in run
                    else None
                ),
            }
    for m, row in out["rows"].items():
        row["detection"] = (detections or {}).get(m) if row["run"] else None
    return out


# ---- what each filter did to the candidate pool (its detection report) --------------------------


ACTIONS = ("drops", "relabels")


def detection(report: Mapping, action: str, file: str) -> dict:
    """What a contender's filter did at a level, from its report (results/<dataset>/sieve/<negatives>/
    report.json, pipeline.sieve.report): the share of the candidate pool it dropped (relabel: turned
    into positives) and, where every candidate has a true label (synthkb's qrels_all), the precision
    and recall of those decisions as false-negative detection and the share of true negatives kept."""
    for key in (
        "n_candidates",
        "n_labelled",
        "sieve_out_rate",
        "precision",
        "recall",
        "true_negative_retention",
    ):
        if key not in report:
            raise DataError(f"a filter report without {key!r}", file=file, field=key)
    labelled = report["n_candidates"] > 0 and report["n_labelled"] == report["n_candidates"]
    return {
        "report": file,
        "action": action,
        "n_candidates": report["n_candidates"],
        "drop_rate": report["sieve_out_rate"],
        "precision": report["precision"] if labelled else None,
        "recall": report["recall"] if labelled else None,
        "tn_kept": report["true_negative_retention"] if labelled else None,
    }


def level_item(item: str, shape: str, settings: Mapping, flag: str) -> tuple[list[str], str]:
    """(the parts before '=', the path) of a flag's ``item`` shaped as ``shape`` (DATASET:A:B=PATH: as
    many parts, none empty), its DATASET a level of ``settings``; else a DataError naming ``flag``."""
    key, sep, path = item.partition("=")
    parts = key.split(":")
    if not (sep and path and len(parts) == shape.count(":") + 1 and all(parts)):
        raise DataError(f"expected {shape}, got {item!r}", field=flag)
    if parts[0] not in settings["levels"]:
        raise DataError(f"{parts[0]!r} is not a level of tournament.levels", field=flag)
    return parts, path


def read_detections(given: Sequence[str], settings: dict) -> dict[str, dict[str, dict]]:
    """dataset -> contender -> detection, from ``given`` DATASET:METHOD:ACTION=REPORT (what the rule
    passes; ACTION drops or relabels, what the contender does with the filter's flagged candidates)."""
    out: dict[str, dict[str, dict]] = {}
    for item in given:
        (dataset, method, action), path = level_item(
            item, "DATASET:METHOD:ACTION=REPORT", settings, "--detections"
        )
        if method not in settings["methods"]:
            raise DataError(f"{method!r} is not a contender (tournament.methods)", field="--detections")
        if action not in ACTIONS:
            raise DataError(f"{action!r}: the action is one of {', '.join(ACTIONS)}", field="--detections")
        report = read_json_object(path, missing="file not found (did the sieve_report rule run?)")
        out.setdefault(dataset, {})[method] = detection(report, action, path)
    return out


def build_tournament(
    settings: dict,
    metrics_files: Mapping[str, str],
    only: Sequence[str] | None = None,
    detections: Mapping[str, Mapping[str, dict]] | None = None,
) -> dict:
    """Every level of ``settings`` (the config's tournament section, defaults filled) from its
    dataset's gathered metrics (``metrics_files``: dataset -> path); with ``only``, those levels alone
    (a run that has not finished every level: the default is then not decided); ``detections``:
    dataset -> contender -> what its filter did (``read_detections``)."""
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
        levels.append(level_result(level, settings, metrics, str(path), (detections or {}).get(dataset)))
    result = {
        "methods": list(settings["methods"]),
        "references": _references(settings),
        "alpha": settings["alpha"],
        "label_readers": {m: r for m in settings["methods"] if (r := label_reading(m)) is not None},
        "baseline": settings["baseline"],
        "start": settings["start"],
        "incumbent": settings["incumbent"],
        "level": LEVEL,
        "interval": "95% Student-t over seeds (paired by seed); oracle share: Fieller's interval; "
        "corrected: Holm over the matrix's tests (rows × levels on the primary metric)",
        "levels": levels,
        "levels_left_out": [raw["label"] for d, raw in settings["levels"].items() if d not in built],
        "decisions": _decisions(settings),
    }
    result["holm"] = correct_matrix(result)
    for decision, key in (
        ("workflow", "default"),
        ("clean", "clean_default"),
    ):  # a decision without levels: None
        result[key] = choose_default(result, decision) if result["decisions"][decision] else None
    result["goals"] = level_goals(result)
    return result


def _decisions(settings: dict) -> dict[str, dict[str, str]]:
    """decision -> {dataset: label} of every level of ``settings`` (built or not), in the table's order:
    the columns that decide the workflow's filter and those that decide sieve-clean's."""
    out: dict[str, dict[str, str]] = {kind: {} for kind in DECISIONS}
    for dataset, raw in settings["levels"].items():
        level = _level_settings(dataset, raw, settings)
        out[level["decides"]][dataset] = level["label"]
    return out


def _decision_of(result: dict, level: dict) -> dict:
    """The decision a level's column belongs to (``result["default"]`` or ``result["clean_default"]``)."""
    return result["clean_default"] if level["decides"] == "clean" else result["default"]


# ---- the goals of the defaults at each level (pipeline.evaluation.goals) --------------------------------


def _not_shown_below(d: dict) -> str:
    """Goal 1's verdict on a paired difference: not met where its interval lies below 0; without an
    interval (one seed) a mean below 0 decides nothing."""
    if d.get("ci_high") is None:
        return "met" if d["mean"] >= 0 else "undecided"
    return "not met" if d["ci_high"] < 0 else "met"


def _at_least(value: float | None, goal: float) -> str:
    return "n/a" if value is None else "met" if value >= goal else "not met"


def level_goals(result: dict) -> list[dict]:
    """The goals of the defaults (pipeline.evaluation.goals) at each level, on its primary metric: for
    the rule's leader and the demo's filter, whether each is shown below the start or below the
    baseline (the uncorrected interval: the stricter reading of a promise not to leave users worse off)
    and the share of the oracle's gain it closes (on the means; n/a where the oracle's gain is not
    shown); for each hybrid contender, its paired difference with BM25 against the hybrid's margin."""
    table = method_table(apply_defaults({}))  # a name's kind does not depend on the settings
    hybrids = [m for m in result["methods"] if m in table and table[m].kind == "hybrid"]
    bm25 = next((r for r in result["references"] if r in table and table[r].kind == "bm25"), None)
    out = []
    for lv in result["levels"]:
        primary = lv["primary"]
        entry: dict = {"dataset": lv["dataset"], "label": lv["label"], "metric": primary}
        entry["models"] = {}
        models = list(dict.fromkeys([_decision_of(result, lv)["leader"], result["incumbent"]]))
        for m in models:
            if not lv["rows"][m]["run"]:
                continue
            cell = lv["rows"][m]["metrics"][primary]
            share = cell["oracle_share"]
            entry["models"][m] = {
                "vs_start": {**cell["vs_start"], "goal": _not_shown_below(cell["vs_start"])},
                "vs_baseline": {
                    **{k: cell["vs_baseline"][k] for k in ("mean", "ci_low", "ci_high", "n")},
                    "goal": _not_shown_below(cell["vs_baseline"]),
                },
                "oracle_share": {**share, "goal": _at_least(share["mean"], ORACLE_SHARE_GOAL)},
            }
        entry["hybrids"] = {}
        for h in hybrids:
            if (
                bm25 is None
                or not lv["rows"][h]["run"]
                or bm25 not in lv["rows"][h]["metrics"][primary]["vs_references"]
            ):
                continue
            d = lv["rows"][h]["metrics"][primary]["vs_references"][bm25]
            entry["hybrids"][h] = {"vs": bm25, **d, "goal": _at_least(d["mean"], HYBRID_MARGIN_GOAL)}
        out.append(entry)
    return out


def goals_lines(result: dict) -> list[str]:
    """The goals table: a row per level and model, then one per level and hybrid."""
    baseline, start = result["baseline"], result["start"]
    lines = [
        "The goals of the defaults (docs/results.md) at each level, on its primary metric: for the first of "
        "the rule at the level's decision (the default once decided; sieve-clean's at a level that decides "
        f"it) and the demo's filter ({result['incumbent']}), whether it is shown below {start} or "
        f"below {baseline} (goal 1: not shown below; the {LEVEL:.0%} interval uncorrected, the stricter "
        f"reading), and the share of the oracle's gain it closes (goal 2: at least "
        f"{ORACLE_SHARE_GOAL:.0%}, on the means, with Fieller's interval; n/a where the oracle's gain is "
        "not shown).",
        "",
        f"| level (primary) | model | goal 1: − {start} | goal 1: − {baseline} | goal 2: share of the oracle's gain |",
        "|---|---|---:|---:|---:|",
    ]
    hybrid_rows = []
    for g in result["goals"]:
        level = f"{g['label']} ({g['metric']})"
        for m, v in g["models"].items():
            cells = [
                f"{v['vs_start']['goal']}: {_signed(v['vs_start'])}",
                f"{v['vs_baseline']['goal']}: {_signed(v['vs_baseline'])}",
                _share(v["oracle_share"])
                if v["oracle_share"]["goal"] == "n/a"
                else f"{v['oracle_share']['goal']}: {_share(v['oracle_share'])}",
            ]
            lines.append("| " + " | ".join([level, m, *cells]) + " |")
        for h, d in g["hybrids"].items():
            hybrid_rows.append(f"| {level} | {h} | {d['goal']}: {_signed(d)} |")
    if hybrid_rows:
        lines += [
            "",
            f"Goal 3, BM25 fused with a trained model: its paired difference with BM25 (at least "
            f"+{HYBRID_MARGIN_GOAL:.2f} on the mean; the goal is set on SQuAD-36's R@1, shown at every "
            "level).",
            "",
            "| level (primary) | hybrid | − bm25 |",
            "|---|---|---:|",
            *hybrid_rows,
        ]
    return lines


# ---- the default filter (docs/results.md, the rule's version 2, fixed before its numbers) ------------


def paired_p_value(diff) -> float | None:
    """Two-sided p of the paired t-test of "no difference" (n − 1 df); None below two seeds. With no
    spread: 0 for a non-zero mean (every seed the same gain), 1 for none."""
    if diff.n < 2 or diff.std is None:
        return None
    if diff.std == 0:
        return 0.0 if diff.mean != 0 else 1.0
    t = diff.mean / (diff.std / math.sqrt(diff.n))
    return float(2.0 * stats.t.sf(abs(t), diff.n - 1))


def holm(pvalues: Sequence[float], alpha: float) -> list[dict]:
    """Holm's step-down over ``pvalues`` (a family), in their order: per test whether it is rejected,
    its step in Holm's order (1 = smallest p; equal p keep their order) and the confidence level of
    its corrected interval: 1 − α / (m − k + 1) at a rejected step k, and for every test from the
    first step j not rejected on, that step's 1 − α / (m − j + 1), so the corrected interval excludes
    0 exactly where Holm rejects."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    out: list[dict] = [{} for _ in pvalues]
    stopped = None  # the level of the first step not rejected
    for step, i in enumerate(order, start=1):
        threshold = alpha / (m - step + 1)
        if stopped is None and pvalues[i] > threshold:
            stopped = 1.0 - threshold
        rejected = stopped is None
        out[i] = {"rejected": rejected, "step": step, "level": 1.0 - threshold if rejected else stopped}
    return out


def _cells(result: dict) -> list[tuple[dict, str, dict]]:
    """(level, row, its primary metric's difference with the baseline) for every test of the matrix:
    each row but the baseline (contenders and references) at each level it ran."""
    baseline = result["baseline"]
    return [
        (lv, m, lv["rows"][m]["metrics"][lv["primary"]]["vs_baseline"])
        for lv in result["levels"]
        for m in [*result["references"], *result["methods"]]
        if m != baseline and lv["rows"][m]["run"]
    ]


def correct_matrix(result: dict) -> dict:
    """Holm over the matrix's tests (``_cells``) at tournament.alpha: each cell's ``corrected`` (its
    interval at Holm's level, the step, and ``shown``: +1 / −1 where rejected above / below 0, else
    0). A cell without a test (one seed) is no member of the family and is never shown."""
    alpha = result["alpha"]
    tested = [(lv, m, cell) for lv, m, cell in _cells(result) if cell["p"] is not None]
    decisions = holm([cell["p"] for _, _, cell in tested], alpha)
    for (_, _, cell), d in zip(tested, decisions):
        half = t_quantile(d["level"], cell["n"] - 1) * cell["std"] / math.sqrt(cell["n"])
        sign = (1 if cell["mean"] > 0 else -1) if d["rejected"] else 0
        cell["corrected"] = {
            "ci_low": cell["mean"] - half,
            "ci_high": cell["mean"] + half,
            "level": d["level"],
            "step": d["step"],
            "shown": sign,
        }
    for _, _, cell in _cells(result):
        cell.setdefault("corrected", None)
    return {"alpha": alpha, "tests": len(tested), "rejected": sum(d["rejected"] for d in decisions)}


def _shown(d: dict | None) -> int:
    """Holm's decision on a cell: +1 shown above 0, −1 below, 0 not shown (or no test)."""
    return 0 if d is None or d.get("corrected") is None else d["corrected"]["shown"]


def true_label_methods() -> set[str]:
    """The contender names that read the true false-negative labels (the method table's oracles)."""
    return {name for name, m in method_table(apply_defaults({})).items() if reads_true_labels(m)}


def _reads(m: Method, table: dict[str, Method]) -> str | None:
    if reads_true_labels(m):
        return "reads the true labels (qrels_all)"
    contract = FILTER_CONTRACTS.get(m.filter) if m.filter is not None else None  # sieve_b<β>: none
    if contract is not None and contract.labels == "dev":
        return (
            "picks its setting on the dev queries' every-candidate truth (qrels_all; answer match without it)"
        )
    base = m.base if m.kind == "hybrid" else m.miner
    inner = runs(table).get(base) if base is not None else None
    return _reads(inner, table) if inner is not None else None


def label_reading(name: str) -> str | None:
    """Why contender ``name`` reads labels a user's data lacks, or None: an oracle, a model chosen by
    the true dev labels, a filter that tunes itself on the dev queries' true false negatives
    (positive_aware_dev: a user's dev qrels hold the annotated positives, not the false negatives among
    the candidates), or what is built on one of these (a hybrid, a DPR on its mined negatives). By the
    method table at the defaults: which filter a name uses does not depend on β or the sieve's tag."""
    table = method_table(apply_defaults({}))
    m = table.get(name)
    return None if m is None else _reads(m, table)


def _mean_ranks(levels: list[dict], tied: list[str]) -> dict[str, float]:
    """The tie-break: at each level the ``tied`` contenders it ran, ranked by their mean primary metric
    over seeds (1 = highest, equal means share the average rank); per contender the mean of its ranks
    over the levels it ran. Ranks within a level, so metrics of different kinds are never added."""
    ranks: dict[str, list[float]] = {m: [] for m in tied}
    for lv in levels:
        means = {m: lv["rows"][m]["metrics"][lv["primary"]]["mean"] for m in tied if lv["rows"][m]["run"]}
        for m, v in means.items():
            above = sum(1 for w in means.values() if w > v)
            equal = sum(1 for w in means.values() if w == v)
            ranks[m].append(above + (equal + 1) / 2)
    return {m: math.fsum(r) / len(r) for m, r in ranks.items() if r}


def choose_default(result: dict, decides: str = "workflow") -> dict:
    """docs/results.md's rule (version 2) on each level's primary metric, Holm-corrected: a contender
    that reads no labels a user lacks and is shown below the baseline at no level qualifies; the most
    levels shown above the baseline leads; tied leaders are reported as tied and ordered by their mean
    within-level rank, then by the table's order (said when it decides). If no contender is shown above
    the baseline anywhere, the default is the baseline (drop nothing). Nothing is privileged.

    Over the levels of one decision (``decides``, the level's setting): ``workflow``, the workflow's
    filter, or ``clean``, sieve-clean's; a contender run at none of them is not a candidate there."""
    baseline = result["baseline"]
    levels = [lv for lv in result["levels"] if lv["decides"] == decides]
    readers = result["label_readers"]
    standing = {}
    for m in result["methods"]:
        if m in readers or not any(lv["rows"][m]["run"] for lv in levels):
            continue
        cells = {
            lv["dataset"]: lv["rows"][m]["metrics"][lv["primary"]]["vs_baseline"]
            for lv in levels
            if lv["rows"][m]["run"]
        }
        standing[m] = {
            "above": [d for d, c in cells.items() if m != baseline and _shown(c) > 0],
            "below": [d for d, c in cells.items() if m != baseline and _shown(c) < 0],
        }
    qualified = [m for m, st in standing.items() if not st["below"]]
    top = max((len(standing[m]["above"]) for m in qualified), default=0)
    tied = [m for m in qualified if len(standing[m]["above"]) == top] if top > 0 else []
    mean_rank = _mean_ranks(levels, tied) if len(tied) > 1 else {}
    if not tied:
        leader, first = baseline, [baseline]
    elif len(tied) == 1:
        leader, first = tied[0], tied
    else:
        best = min(mean_rank.values())
        first = [m for m in tied if math.isclose(mean_rank[m], best, rel_tol=0, abs_tol=1e-12)]
        leader = first[0]
    built = {lv["dataset"] for lv in result["levels"]}
    decided = all(d in built for d in result["decisions"][decides])
    return {
        "rule": "docs/results.md, version 2",
        "decides": decides,
        "levels": [lv["dataset"] for lv in levels],
        "decided": decided,
        "excluded": list(readers),
        "standing": standing,
        "out": [m for m, st in standing.items() if st["below"]],
        "top": top,
        "tied": tied,
        "tie_break": "mean within-level rank of the mean primary metric (1 = highest), then the table's order",
        "mean_rank": mean_rank,
        "tie_stands": len(first) > 1,
        "leader": leader,
        "default": leader if decided else None,
    }


def default_sentence(result: dict, decides: str = "workflow") -> str:
    """The decision in words (``decides``: the workflow's filter or sieve-clean's): who is out and why,
    who leads, the tie and its tie-break."""
    choice = result["clean_default"] if decides == "clean" else result["default"]
    baseline = result["baseline"]
    levels = [lv for lv in result["levels"] if lv["decides"] == decides]
    labels = {lv["dataset"]: lv["label"] for lv in levels}
    holm_note = (
        f"Holm over the matrix's {result['holm']['tests']} tests at α {result['alpha']:g}, "
        f"{result['holm']['rejected']} rejected"
    )

    def named(datasets: list[str]) -> str:
        return "; ".join(labels[d] for d in datasets) or "none"  # labels hold commas

    left_out = [label for d, label in result["decisions"][decides].items() if d not in labels]
    if decides == "clean":
        what = "The default of sieve-clean (over the levels whose candidates a dense model mined)"
    else:
        what = "The workflow's default" if result["decisions"]["clean"] else "Default"
    if not labels:
        absent = "its one level is not" if len(left_out) == 1 else f"none of its {len(left_out)} levels is"
        return f"{what}, not decided: {absent} in this table ({'; '.join(left_out)})."
    head = f"{what} (docs/results.md's rule, version 2; {holm_note})"
    if left_out:
        head = (
            f"{what}, not decided: {len(labels)} of {len(labels) + len(left_out)} levels (not in this "
            f"table: {'; '.join(left_out)}), and a level that has not finished decides nothing "
            f"({holm_note}). Over these levels"
        )
    parts = []
    if choice["excluded"]:
        parts.append(f"Never chosen (they read labels a user lacks): {', '.join(choice['excluded'])}.")
    if choice["out"]:
        parts.append(f"Out, shown below {baseline} somewhere: {', '.join(choice['out'])}.")
    for ref in result["references"]:
        cells = [
            (lv["dataset"], lv["rows"][ref]["metrics"][lv["primary"]]["vs_baseline"])
            for lv in levels
            if lv["rows"][ref]["run"]
        ]
        above = [d for d, c in cells if _shown(c) > 0]
        below = [d for d, c in cells if _shown(c) < 0]
        parts.append(
            f"The reference {ref} is shown above {baseline} at {named(above)} and below it at {named(below)}."
        )
    verb = "is" if choice["decided"] else "would be"
    leader = choice["leader"]
    if not choice["tied"]:
        parts.append(
            f"No contender is shown above {baseline} at any level: the default {verb} {baseline}, "
            "no filter (the data show none worth running)."
        )
    elif len(choice["tied"]) == 1:
        above = choice["standing"][leader]["above"]
        parts.append(
            f"{leader} is shown above {baseline} at {len(above)} of {len(labels)} levels ({named(above)}), "
            f"more than any other, and below it at none: the default {verb} {leader}."
        )
    else:
        ranks = ", ".join(f"{m} {choice['mean_rank'][m]:.2f}" for m in choice["tied"])
        parts.append(
            f"Tied, each shown above {baseline} at {choice['top']} of {len(labels)} levels and below it at "
            f"none: {', '.join(choice['tied'])}. Tie-break ({choice['tie_break']}): {ranks}."
        )
        if choice["tie_stands"]:
            equal = [
                m for m in choice["tied"] if math.isclose(choice["mean_rank"][m], choice["mean_rank"][leader])
            ]
            parts.append(
                f"{' and '.join(equal)} share the best mean rank: the tie stands, and the table's order "
                f"puts {leader} first: the default {verb} {leader}."
            )
        else:
            parts.append(f"The default {verb} {leader}.")
    return f"{head}: " + " ".join(parts)


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


def _row_name(result: dict, method: str) -> str:
    """The row's name with what it is: the oracle (where), a reference, a reader of labels."""
    levels = result["levels"]
    oracle_at = [lv["label"] for lv in levels if lv["oracle"] == method]
    ran = [lv for lv in levels if lv["rows"][method]["run"]]
    where = "" if len(oracle_at) == len(ran) else " at " + "; ".join(oracle_at)
    notes = [f"the oracle{where}"] if oracle_at else []
    if method in result["references"]:
        notes.append("reference")
    if method in result["label_readers"]:
        notes.append("reads labels")
    return method + (f" ({', '.join(notes)})" if notes else "")


def _holm_cell(d: dict) -> str:
    """The uncorrected interval, then Holm's; an arrow where Holm shows the difference."""
    text = _signed(d)
    corrected = d.get("corrected")
    if corrected is None:
        return text
    arrow = {1: "↑ ", -1: "↓ ", 0: ""}[corrected["shown"]]
    return f"{arrow}{text}; Holm [{corrected['ci_low']:+.3f}, {corrected['ci_high']:+.3f}]"


def _detection_cell(d: dict | None) -> str:
    if d is None:
        return "–"
    verb = "relabelled" if d["action"] == "relabels" else "dropped"
    text = f"{verb} {d['drop_rate']:.1%}"
    if d["precision"] is not None or d["recall"] is not None:
        p = "–" if d["precision"] is None else f"{d['precision']:.2f}"
        r = "–" if d["recall"] is None else f"{d['recall']:.2f}"
        text += f" (P {p}, R {r})"
    return text


def _matrix(result: dict, key: str, skip: str, standing: bool) -> list[str]:
    """Rows (references, then contenders) × levels: each level's primary metric, the paired difference
    ``key`` of every row (``skip``: the method the difference is taken with, a dash; ``detection``:
    what the row's filter did instead); with ``standing``, the rule's count of levels shown above and
    below the baseline (corrected)."""
    levels = result["levels"]
    choices = [c for c in (result["default"], result["clean_default"]) if c is not None and c["levels"]]
    head = ["row", *[f"{lv['label']} ({lv['primary']})" for lv in levels]]
    both = " (workflow; sieve-clean)" if len(choices) > 1 else ""
    head += [f"levels above / below {result['baseline']} (Holm){both}"] if standing else []
    lines = ["| " + " | ".join(head) + " |", "|---" + "|---:" * (len(head) - 1) + "|"]
    for method in [*result["references"], *result["methods"]]:
        cells = []
        for lv in levels:
            row = lv["rows"][method]
            if not row["run"]:
                cells.append("not run")
            elif key == "detection":
                cells.append(_detection_cell(row["detection"]))
            elif method == skip:
                cells.append("–")
            elif key == "vs_baseline":
                cells.append(_holm_cell(row["metrics"][lv["primary"]][key]))
            else:
                cells.append(_signed(row["metrics"][lv["primary"]][key] or {}))
        if standing:
            if method in result["references"]:
                cells.append("reference, not chosen")
            elif method in result["label_readers"]:
                cells.append("reads labels, not chosen")
            else:
                counts = [c["standing"].get(method) for c in choices]
                cells.append(
                    "; ".join(
                        "not run" if s is None else f"{len(s['above'])} / {len(s['below'])}" for s in counts
                    )
                )
        lines.append("| " + " | ".join([_row_name(result, method), *cells]) + " |")
    return lines


def tournament_summary(result: dict) -> str:
    """The matrices, rows × levels on each level's primary metric: the paired difference with the
    baseline, uncorrected and Holm-corrected, with each contender's count of levels shown above and
    below it (the rule reads this one); what each filter did to the pool; the paired difference with
    the demo's current filter (information only); then the decision."""
    baseline, incumbent = result["baseline"], result["incumbent"]
    holm_note = (
        f"Holm over the matrix's {result['holm']['tests']} tests (every row but {baseline} × the levels "
        f"it ran) at α {result['alpha']:g}"
    )
    lines = [
        f"Primary metric − {baseline} (the same pool, nothing dropped): the mean paired difference over "
        f"seeds [{LEVEL:.0%} Student-t interval, uncorrected]; Holm [the interval at Holm's level]: "
        f'{holm_note}; ↑ / ↓ where Holm shows it above / below ("shown" always means corrected). '
        "BM25 and zero-shot are seed-free: their one run against each seed.",
        "",
        *_matrix(result, "vs_baseline", baseline, standing=True),
        "",
        "What each contender's filter did to the candidate pool at each level: the share of the pool "
        "dropped (relabel: turned into positives) and, where every candidate has a true label (synthkb's "
        "qrels_all), the precision and recall of those decisions as false-negative detection; – where "
        "the row has no filter decisions (references, in-loss masking, mined negatives) or none was given.",
        "",
        *_matrix(result, "detection", "", standing=False),
        "",
        f"Primary metric − {incumbent} (the demo's filter today, tournament.incumbent), seed by seed; "
        "information only, the rule does not read it:",
        "",
        *_matrix(result, "vs_incumbent", incumbent, standing=False),
        *(line for d in DECISIONS if result["decisions"][d] for line in ("", default_sentence(result, d))),
        "",
        *goals_lines(result),
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
            name = _row_name(result, method)
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
            plain = method in (baseline, level["oracle"], *result["references"])
            cells.append("–" if plain else _share(top["oracle_share"]))
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
    methods, levels = [*result["references"], *result["methods"]], result["levels"]
    panels = (("vs_baseline", f"− {baseline}"), ("vs_start", f"− {start}\n(the untrained start)"))
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
        "--detections",
        nargs="*",
        default=[],
        metavar="DATASET:METHOD:ACTION=REPORT",
        help="a contender's filter report at a level (results/<dataset>/sieve/<negatives>/report.json); "
        "ACTION: drops or relabels",
    )
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
    files = metrics_files(settings, args.metrics)
    inputs = {f"--metrics {d}": p for d, p in files.items()}
    inputs.update(
        {f"--detections {item.split('=', 1)[0]}": item.split("=", 1)[-1] for item in args.detections}
    )
    outputs = {
        "--out-json": args.out_json,
        "--out-md": args.out_md,
        "--out-png": args.out_png,
        "--log": args.log,
    }
    refuse_overwriting_inputs(outputs, inputs)
    detections = read_detections(args.detections, settings)
    result = build_tournament(settings, files, args.levels, detections)
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

"""The selections' table: does model selection on dev keep the start when training hurts, and does it
choose as the truth would?

    python -m pipeline.evaluation.selections --settings "$(tournament section as JSON)" \\
        --selections synthkb_fn30_p50:dpr_none_wise:0=results/synthkb_fn30_p50/models/dpr_none_wise/selection.json ... \\
        --metrics synthkb_fn30_p50=results/synthkb_fn30_p50/metrics.json ... \\
        --out-json results/sweeps/tournament_selections.json --out-md results/sweeps/tournament_selections.md

A selection contender is a method of tournament.methods that chooses, on dev, among the model its
training started from, the training's snapshots, WiSE-FT interpolations and the trained model
(pipeline.training.select_model, which writes ``selection.json`` into the chosen folder). For every
level (tournament.levels) × selection contender not skipped there: the dev labels that chose (the
annotated dev qrels, or the truth: qrels_all), each seed's chosen candidate and the count of each
kind, the mean dev metric of the chosen candidate, the trained model and the start (the records'
``scored``), and on test (the level's primary metric, from its gathered metrics.json) the selection,
the trained model it selects from and the start, with the paired differences over seeds; the seeds
where the trained model is below the start on test, and how often the start was kept there. Where a
trained model has a selection by each kind of labels, per seed whether they chose the same candidate
and whether the annotated labels chose one later in the tie order (nearer the trained model) than
the truth did: the model that learned the annotations' false negatives.

The method table (at the defaults, as the tournament's label readers) says which model a selection
selects from and by which labels. A missing or malformed record field is one line naming the file,
the record and the field. The outputs are deterministic (same inputs, same bytes).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

from pipeline.core.cli import run_main, stage_parser, start_stage
from pipeline.core.methods import Method, method_table
from pipeline.core.settings.root import apply_defaults
from pipeline.core.storage import (
    DataError,
    atomic_open,
    read_json_object,
    refuse_overwriting_inputs,
    write_json,
)
from pipeline.evaluation.seed_stats import paired_difference
from pipeline.evaluation.sweep import per_seed
from pipeline.evaluation.tournament import check_contenders_and_levels, level_item, settings_from

log = logging.getLogger("sieve.selections")

# Written by pipeline.training.select_model into the chosen model's folder; read here.
SELECTION_FILE = "selection.json"
# The kinds of candidate a selection scores, in their tie order.
CANDIDATE_KINDS = ("start", "snapshot", "interpolation", "trained")
TIE_ORDER = "start < snapshots by step < interpolations by alpha < trained model"
LABELS = {"dev": "annotated dev qrels", "truth": "true dev labels (qrels_all)"}
LEVEL = 0.95


def candidate_order(kind: str, step: int | None, alpha: float | None) -> tuple:
    """A candidate's place in the tie order (TIE_ORDER): among equal dev metrics the first is kept, so
    the later a chosen candidate, the nearer the trained model."""
    return (CANDIDATE_KINDS.index(kind), step or 0, alpha or 0.0)


@dataclass(frozen=True)
class Choice:
    """What one selection record (one seed's selection.json) chose, and the dev metric of the chosen
    candidate, the trained model and the start."""

    chosen: str
    kind: str
    step: int | None
    alpha: float | None
    metric: str
    dev_chosen: float
    dev_trained: float
    dev_start: float
    file: str = ""

    def order(self) -> tuple:
        return candidate_order(self.kind, self.step, self.alpha)


def _number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


def read_choice(record: Mapping, file: str) -> Choice:
    """A selection record's choice, checked: each field the table reads, with the file and field of
    the first that is missing or malformed."""
    for key in ("chosen", "chosen_kind", "metric", "scored"):
        if key not in record:
            raise DataError("missing key (is this a selection.json?)", file=file, field=key)
    kind = record["chosen_kind"]
    if kind not in CANDIDATE_KINDS:
        raise DataError(
            f"must be one of {', '.join(CANDIDATE_KINDS)}, got {kind!r}", file=file, field="chosen_kind"
        )
    step, alpha = record.get("chosen_step"), record.get("chosen_alpha")
    if kind == "snapshot" and (isinstance(step, bool) or not isinstance(step, int)):
        raise DataError(f"a snapshot's step must be an integer, got {step!r}", file=file, field="chosen_step")
    if kind == "interpolation" and not (_number(alpha) and 0 < alpha < 1):
        raise DataError(
            f"an interpolation's alpha must be a number in (0, 1), got {alpha!r}",
            file=file,
            field="chosen_alpha",
        )
    if not isinstance(record["metric"], str) or not record["metric"]:
        raise DataError(f"must be a metric's name, got {record['metric']!r}", file=file, field="metric")
    scored = record["scored"]
    if not isinstance(scored, list) or not scored:
        raise DataError("must be a non-empty list of scored candidates", file=file, field="scored")
    by_name: dict[str, float] = {}
    by_kind: dict[str, float] = {}
    for i, entry in enumerate(scored):
        if not isinstance(entry, dict):
            raise DataError("must be an object", file=file, record=i, field="scored")
        for key in ("name", "kind", "dev_metric"):
            if key not in entry:
                raise DataError("missing key", file=file, record=i, field=f"scored.{key}")
        if entry["kind"] not in CANDIDATE_KINDS:
            raise DataError(
                f"must be one of {', '.join(CANDIDATE_KINDS)}, got {entry['kind']!r}",
                file=file,
                record=i,
                field="scored.kind",
            )
        if not _number(entry["dev_metric"]):
            raise DataError(
                f"must be a finite number, got {entry['dev_metric']!r}",
                file=file,
                record=i,
                field="scored.dev_metric",
            )
        if entry["name"] in by_name:
            raise DataError(
                f"candidate {entry['name']!r} scored twice", file=file, record=i, field="scored.name"
            )
        by_name[entry["name"]] = float(entry["dev_metric"])
        if entry["kind"] in ("start", "trained"):
            by_kind[entry["kind"]] = float(entry["dev_metric"])
    for end in ("start", "trained"):
        if end not in by_kind:
            raise DataError(f"no {end} candidate was scored", file=file, field="scored")
    chosen = record["chosen"]
    kinds = {entry["name"]: entry["kind"] for entry in scored}
    if chosen not in by_name or kinds[chosen] != kind:
        raise DataError(
            f"{chosen!r} ({kind}) is not among the scored candidates {list(by_name)}",
            file=file,
            field="chosen",
        )
    return Choice(
        chosen=chosen,
        kind=kind,
        step=step if kind == "snapshot" else None,
        alpha=float(alpha) if _number(alpha) else None,
        metric=record["metric"],
        dev_chosen=by_name[chosen],
        dev_trained=by_kind["trained"],
        dev_start=by_kind["start"],
        file=file,
    )


# ---- which contenders are selections, of what -------------------------------------------------------


def trained_of(m: Method, table: Mapping[str, Method], prefer: Sequence[str] = ()) -> str:
    """The method whose trained model selection ``m`` chooses from: the table's method that is ``m``
    but for its name, folders and selection. Where several names train that one model (dpr_sieve is
    dpr_sieve_no_ccr at the defaults), the one among ``prefer`` (the tournament's contenders, whose
    metrics the level has), else the first: an alias trains the same run folder."""
    found = [
        name
        for name, t in table.items()
        if t.selects is None
        and replace(m, name=t.name, run=t.run, model=t.model, selects=None, labels=None) == t
    ]
    preferred = [name for name in found if name in prefer]
    if len(preferred) == 1:
        return preferred[0]
    if found and len({table[name].run for name in found}) == 1:
        return found[0]
    raise DataError(
        f"{m.name} selects from models/{m.selects}, which {len(found)} methods train ({found})",
        field="tournament.methods",
    )


# What this table reads of the tournament section (its rule passes no more): a change to the rest (the
# default's rule, its controls, a level's oracle or decision) leaves the table as it was.
READ = ("methods", "start", "metrics")
READ_PER_LEVEL = ("label", "metrics", "skip")


def selection_settings(section: Mapping) -> dict:
    """The part of the tournament section (defaults filled) that the selections' table reads."""
    return {
        **{key: section[key] for key in READ},
        "levels": {d: {k: level.get(k) for k in READ_PER_LEVEL} for d, level in section["levels"].items()},
    }


def selection_contenders(settings: Mapping, table: Mapping[str, Method] | None = None) -> dict[str, dict]:
    """contender -> {trained, labels} for each contender of ``settings`` (the tournament section) that is a
    model selection on dev, by the method table (default: at the defaults)."""
    table = table if table is not None else method_table(apply_defaults({}))
    out = {}
    for name in settings["methods"]:
        m = table.get(name)
        if m is not None and m.selects is not None:
            out[name] = {"trained": trained_of(m, table, settings["methods"]), "labels": m.labels}
    return out


# ---- the summaries ------------------------------------------------------------------------------------


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values)


def _interval(a: Mapping, b: Mapping) -> dict:
    d = paired_difference(a, b, LEVEL)
    return {"mean": d.mean, "ci_low": d.ci_low, "ci_high": d.ci_high, "n": d.n}


def summarize_selection(choices: Mapping[int, Choice], test: Mapping[str, Mapping[int, float]]) -> dict:
    """One contender at one level: ``choices`` seed -> its Choice, ``test`` selection / trained / start
    -> seed -> the test primary metric. Per seed the chosen candidate; the count of each kind; the
    mean dev metric of the chosen candidate, the trained model and the start; the mean test metric of
    the three, the selection's paired differences with the trained model and the start; and the seeds
    where training hurt on test (trained below start), with how many of those kept the start."""
    seeds = sorted(choices)
    metric = choices[seeds[0]].metric
    for s in seeds:
        if choices[s].metric != metric:
            raise DataError(
                f"chose by {choices[s].metric}, seed {seeds[0]}'s selection by {metric}: one contender's "
                "seeds must be chosen alike",
                file=choices[s].file,
                field="metric",
            )
    hurt = [s for s in seeds if test["trained"][s] < test["start"][s]]
    return {
        "seeds": seeds,
        "per_seed": [
            {
                "seed": s,
                "chosen": choices[s].chosen,
                "kind": choices[s].kind,
                "dev": {
                    "chosen": choices[s].dev_chosen,
                    "trained": choices[s].dev_trained,
                    "start": choices[s].dev_start,
                },
                "test": {row: test[row][s] for row in ("selection", "trained", "start")},
            }
            for s in seeds
        ],
        "counts": {kind: sum(choices[s].kind == kind for s in seeds) for kind in CANDIDATE_KINDS},
        "dev_metric": metric,
        "dev": {
            "chosen": _mean([choices[s].dev_chosen for s in seeds]),
            "trained": _mean([choices[s].dev_trained for s in seeds]),
            "start": _mean([choices[s].dev_start for s in seeds]),
        },
        "test": {row: _mean([test[row][s] for s in seeds]) for row in ("selection", "trained", "start")},
        "vs_trained": _interval({s: test["selection"][s] for s in seeds}, test["trained"]),
        "vs_start": _interval({s: test["selection"][s] for s in seeds}, test["start"]),
        "training_hurt": {"seeds": hurt, "kept_start": [s for s in hurt if choices[s].kind == "start"]},
    }


def compare_labels(dev: Mapping[int, Choice], truth: Mapping[int, Choice]) -> dict:
    """The annotated dev labels' choice against the truth's, over the seeds both have: per seed whether
    they are the same candidate and which is later in the tie order; ``dev_later`` counts the seeds
    where the annotated labels chose nearer the trained model (the annotation-learner) than the truth."""
    seeds = sorted(set(dev) & set(truth))
    rows = [
        {
            "seed": s,
            "dev": dev[s].chosen,
            "truth": truth[s].chosen,
            "same": dev[s].chosen == truth[s].chosen,
            "dev_later": dev[s].order() > truth[s].order(),
            "truth_later": truth[s].order() > dev[s].order(),
        }
        for s in seeds
    ]
    return {
        "seeds": seeds,
        "per_seed": rows,
        "same": sum(r["same"] for r in rows),
        "dev_later": sum(r["dev_later"] for r in rows),
        "truth_later": sum(r["truth_later"] for r in rows),
    }


def _test_values(
    metrics: dict, method: str, metric: str, file: str, seeds: Sequence[int]
) -> dict[int, float]:
    """seed -> the method's test metric: a single run (seed-free, or one training seed) stands for
    every seed; a seeded method must have each of ``seeds``."""
    values = per_seed(metrics, method, metric, file)
    if list(values) == [None]:
        return dict.fromkeys(seeds, values[None])
    missing = [s for s in seeds if s not in values]
    if missing:
        raise DataError(
            f"{method} has no run of seed {missing[0]} (its seeds: {list(values)})",
            file=file,
            field=f"methods.{method}.per_seed",
        )
    return {s: values[s] for s in seeds}


def level_selections(
    dataset: str,
    settings: Mapping,
    contenders: Mapping[str, dict],
    choices: Mapping[str, Mapping[int, Choice]],
    metrics: dict,
    file: str,
) -> dict:
    """One level: each selection contender run there (``choices``: contender -> seed -> Choice) summarized
    against the level's gathered ``metrics``, and the dev-vs-truth comparison of each trained model
    that has both."""
    level = settings["levels"][dataset]
    primary = (level.get("metrics") or settings["metrics"])[0]
    skip = level.get("skip") or []
    start = settings["start"]
    rows = {}
    for name, about in contenders.items():
        if name in skip:
            continue
        seeds = sorted(choices.get(name, {}))
        if not seeds:
            raise DataError(
                f"no selection record of {name} at {dataset} (give --selections {dataset}:{name}:SEED=PATH)",
                field="--selections",
            )
        test = {
            "selection": _test_values(metrics, name, primary, file, seeds),
            "trained": _test_values(metrics, about["trained"], primary, file, seeds),
            "start": _test_values(metrics, start, primary, file, seeds),
        }
        rows[name] = {**about, **summarize_selection(choices[name], test)}
    pairs = []
    for trained in dict.fromkeys(about["trained"] for about in rows.values()):
        by = {rows[n]["labels"]: n for n in rows if rows[n]["trained"] == trained}
        if "dev" in by and "truth" in by:
            compared = compare_labels(choices[by["dev"]], choices[by["truth"]])
            pairs.append({"trained": trained, "dev": by["dev"], "truth": by["truth"], **compared})
    return {
        "dataset": dataset,
        "label": level["label"],
        "primary": primary,
        "metrics_file": file,
        "skip": [m for m in contenders if m in skip],
        "selections": rows,
        "dev_vs_truth": pairs,
    }


def parse_selections(given: Sequence[str], settings: Mapping, contenders: Mapping[str, dict]) -> dict:
    """dataset -> contender -> seed -> record path, from ``given`` DATASET:METHOD:SEED=PATH."""
    out: dict = {}
    for item in given:
        (dataset, method, seed), path = level_item(item, "DATASET:METHOD:SEED=PATH", settings, "--selections")
        if method not in contenders:
            raise DataError(
                f"{method!r} is not a selection contender of tournament.methods ({', '.join(contenders)})",
                field="--selections",
            )
        if method in (settings["levels"][dataset].get("skip") or []):
            raise DataError(f"{method} is skipped at {dataset}", field="--selections")
        if not seed.isdigit():
            raise DataError(f"the seed must be a non-negative integer, got {seed!r}", field="--selections")
        seeds = out.setdefault(dataset, {}).setdefault(method, {})
        if int(seed) in seeds:
            raise DataError(f"{dataset}:{method}:{seed} given twice", field="--selections")
        seeds[int(seed)] = path
    return out


def build_selections(
    settings: Mapping,
    paths: Mapping[str, Mapping[str, Mapping[int, str]]],
    metrics_files: Mapping[str, str],
    table: Mapping[str, Method] | None = None,
) -> dict:
    """Every level of ``settings`` (the tournament section): its selection records (``paths``: dataset ->
    contender -> seed -> selection.json) against its gathered metrics (``metrics_files``)."""
    check_contenders_and_levels(settings)
    contenders = selection_contenders(settings, table)
    if not contenders:
        raise DataError(
            "no contender of tournament.methods is a model selection on dev", field="tournament.methods"
        )
    levels = []
    for dataset in settings["levels"]:
        if dataset not in metrics_files:
            raise DataError(
                f"no metrics.json for {dataset} (give --metrics {dataset}=PATH)", field="--metrics"
            )
        file = str(metrics_files[dataset])
        metrics = read_json_object(file, missing="file not found (did gather_metrics run for this dataset?)")
        choices = {
            name: {
                seed: read_choice(
                    read_json_object(path, missing="file not found (did select_model run?)"), str(path)
                )
                for seed, path in by_seed.items()
            }
            for name, by_seed in paths.get(dataset, {}).items()
        }
        levels.append(level_selections(dataset, settings, contenders, choices, metrics, file))
    return {
        "question": "does model selection on dev keep the start when training hurts, and does it choose "
        "as the truth would?",
        "start": settings["start"],
        "contenders": contenders,
        "tie_order": TIE_ORDER,
        "level": LEVEL,
        "interval": "95% Student-t over seeds, paired by seed (the start: its one run against each seed)",
        "levels": levels,
    }


# ---- Markdown -------------------------------------------------------------------------------------------


def _f(value: float) -> str:
    return f"{value:.3f}"


def _diff(d: dict) -> str:
    if d["mean"] is None:
        return "—"
    if d["ci_low"] is None:
        return f"{d['mean']:+.3f}"
    return f"{d['mean']:+.3f} [{d['ci_low']:+.3f}, {d['ci_high']:+.3f}]"


def _seeds(n: int) -> str:
    return f"{n} seed" + ("" if n == 1 else "s")


def learner_sentence(level: dict) -> str | None:
    """The one plain sentence of a level where the annotated dev labels chose, in some seed, a
    candidate nearer the trained model than the truth did; None where they never did."""
    found = [p for p in level["dev_vs_truth"] if p["dev_later"]]
    if not found:
        return None
    counts = " and ".join(f"{p['dev_later']} of {_seeds(len(p['seeds']))} for {p['trained']}" for p in found)
    return (
        f"At {level['label']} the annotated dev labels chose a candidate nearer the trained model than the "
        f"true labels did in {counts}: there they picked the model that learned the annotations' false "
        "negatives."
    )


def selections_markdown(result: dict) -> str:
    """The table a user reads: per level, each selection's choices and what they are worth on test,
    then the annotated labels' choices against the truth's."""
    start = result["start"]
    lines = [
        "# Model selection on dev: what it chose",
        "",
        f"Does model selection on dev keep the start ({start}) when training hurts, and does it choose as "
        "the truth would? Each selection chose on dev among the start, the training's snapshots (step<k>), "
        f"WiSE-FT interpolations (alpha<a>) and the trained model; equal dev metrics go to the first in the "
        f"order {result['tie_order']}. Labels: dev = the annotated dev qrels a user has, truth = the true "
        "dev labels (qrels_all, synthetic data only; a label-reading control); each row's dev metric is "
        "measured against its own labels. Test differences: "
        f"{result['interval']}.",
        "",
    ]
    for level in result["levels"]:
        primary = level["primary"]
        lines += [f"## {level['label']} ({level['dataset']}), test {primary}", ""]
        if not level["selections"]:
            lines += ["No selection runs at this level (tournament.levels' skip).", ""]
            continue
        lines += [
            "| selection | labels | from | chosen per seed | start · snapshot · interpolation · trained "
            f"| dev metric: chosen / trained / start | test {primary}: selection / trained / {start} "
            f"| selection − trained | selection − {start} | trained below {start} (test): start kept |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for name, row in level["selections"].items():
            chosen = ", ".join(f"s{r['seed']} {r['chosen']}" for r in row["per_seed"])
            counts = " · ".join(str(row["counts"][k]) for k in CANDIDATE_KINDS)
            dev = " / ".join(_f(row["dev"][k]) for k in ("chosen", "trained", "start"))
            test = " / ".join(_f(row["test"][k]) for k in ("selection", "trained", "start"))
            hurt = row["training_hurt"]
            lines.append(
                f"| {name} | {row['labels']} | {row['trained']} | {chosen} | {counts} | {row['dev_metric']} {dev} | {test} "
                f"| {_diff(row['vs_trained'])} | {_diff(row['vs_start'])} "
                f"| {len(hurt['kept_start'])} of {len(hurt['seeds'])} |"
            )
        if level["skip"]:
            lines += ["", f"Not run here: {', '.join(level['skip'])}."]
        if level["dev_vs_truth"]:
            lines += [
                "",
                "| trained model | dev labels vs truth per seed | same choice | dev later (annotation-learner) "
                "| truth later |",
                "|---|---|---|---|---|",
            ]
            for p in level["dev_vs_truth"]:
                per = ", ".join(f"s{r['seed']} {r['dev']}/{r['truth']}" for r in p["per_seed"])
                n = len(p["seeds"])
                lines.append(
                    f"| {p['trained']} | {per} | {p['same']} of {n} | {p['dev_later']} of {n} | {p['truth_later']} of {n} |"
                )
            sentence = learner_sentence(level)
            lines += [
                "",
                sentence
                or "The annotated dev labels never chose nearer the trained model than the truth here.",
            ]
        lines.append("")
    return "\n".join(lines)


# ---- the stage ------------------------------------------------------------------------------------------


def metrics_paths(settings: Mapping, given: Sequence[str]) -> dict[str, str]:
    """dataset -> gathered metrics.json, from ``given`` DATASET=PATH."""
    files = {}
    for item in given:
        name, sep, path = item.partition("=")
        if not (sep and name and path):
            raise DataError(f"expected DATASET=PATH, got {item!r}", field="--metrics")
        if name not in settings["levels"]:
            raise DataError(
                f"{name!r} is not a dataset of tournament.levels {list(settings['levels'])}",
                field="--metrics",
            )
        files[name] = path
    return files


def main(argv: Sequence[str] | None = None) -> int:
    parser = stage_parser("pipeline.evaluation.selections", __doc__)
    parser.add_argument(
        "--settings", required=True, help="the tournament section as JSON (what the rule passes)"
    )
    parser.add_argument(
        "--selections",
        nargs="+",
        required=True,
        metavar="DATASET:METHOD:SEED=PATH",
        help="one seed's selection.json of a selection contender at a level",
    )
    parser.add_argument(
        "--metrics", nargs="+", required=True, metavar="DATASET=PATH", help="a level's gathered metrics.json"
    )
    parser.add_argument("--out-json", required=True)
    parser.add_argument("--out-md", required=True)
    parser.add_argument("--log")
    args = parser.parse_args(argv)
    start_stage(args.log, libraries=())
    try:
        settings = selection_settings(settings_from(argparse.Namespace(settings=args.settings)))
    except json.JSONDecodeError as error:
        raise DataError(f"not JSON: {error}", field="--settings") from None
    contenders = selection_contenders(settings)
    paths = parse_selections(args.selections, settings, contenders)
    files = metrics_paths(settings, args.metrics)
    inputs = {
        f"--selections {d}:{m}:{s}": p
        for d, by in paths.items()
        for m, seeds in by.items()
        for s, p in seeds.items()
    }
    inputs.update({f"--metrics {d}": p for d, p in files.items()})
    refuse_overwriting_inputs(
        {"--out-json": args.out_json, "--out-md": args.out_md, "--log": args.log}, inputs
    )
    result = build_selections(settings, paths, files)
    write_json(args.out_json, result)
    with atomic_open(args.out_md, "w", encoding="utf-8") as handle:
        handle.write(selections_markdown(result))
    for level in result["levels"]:
        sentence = learner_sentence(level)
        log.info("%s: %s", level["label"], sentence or "no annotation-learner pick")
    return 0


if __name__ == "__main__":
    run_main(main)

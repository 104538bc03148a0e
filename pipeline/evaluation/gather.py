"""Gather every method's metrics.json of a dataset into one JSON and one Markdown table.

    python -m pipeline.evaluation.gather --dataset squad --inputs results/squad/*/metrics.json \
        --out-json results/squad/metrics.json --out-md results/squad/metrics.md

The JSON maps method -> its split, n_queries, metrics and any extra fields its metrics.json carries
(notes, seeds, wall_time_s, ...). The table has one row per method (in input order) and the metric
columns in a fixed order: R@k by k, MRR@10, nDCG@10, hit@k, recall@k, then the ``_all`` family, then
the rest.

``--compare '[["METHOD", "BASELINE"], ...]'`` (JSON, the form of config ``eval.compare``) adds ``comparisons``: per pair, the paired difference
method − baseline of every metric over the seeds both were run with, and its 95% t interval
(pipeline.evaluation.seed_stats; docs/evaluation.md), shown in a second table. A pair with one
common seed has no interval over seeds; given the runs' per-query values (``--per-query
METHOD[@SEED]=PATH``, the evaluator's per_query.parquet), it gets a paired test over the test
queries instead (pipeline.evaluation.query_tests), labelled "(queries)".
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
from numbers import Real
from pathlib import Path
from typing import TYPE_CHECKING, Collection, Mapping, Sequence

from pipeline.core.cli import json_pairs, run_main, stage_parser, start_stage
from pipeline.core.storage import DataError, atomic_open, read_json_object, write_json
from pipeline.evaluation.method_notes import (
    DEFINITIONS,
    DISAGREE,
    PLUS_MINUS,
    below_start,
    best,
    method_notes,
    primary_metric,
)
from pipeline.evaluation.metrics import metric_sort_key
from pipeline.evaluation.plot_methods import plot_methods
from pipeline.evaluation.query_tests import (
    PERMUTATIONS,
    RNG_SEED,
    align_per_query,
    column_mean,
    paired_query_tests,
    read_per_query,
)
from pipeline.evaluation.seed_stats import common_seeds, paired_difference, t_half_width

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger("sieve.gather_metrics")

REQUIRED = ("dataset", "method", "split", "n_queries", "metrics")
LEVEL = 0.95
# method -> seed (None: the method's one run) -> its per_query.parquet
QueryFiles = Mapping[str, Mapping["int | None", "str | os.PathLike"]]


def read_metrics(path: str | os.PathLike) -> dict:
    """One method's metrics.json, checked for the fields gathering relies on."""
    path = Path(path)
    data = read_json_object(path, missing="file not found (did the evaluate rule run?)")
    for key in REQUIRED:
        if key not in data:
            raise DataError("missing field", file=path, field=key)
    _check_metric_values(data["metrics"], path, "metrics")
    if "metrics_std" in data:
        _check_metric_values(data["metrics_std"], path, "metrics_std")
    return data


def _check_metric_values(metrics, path: str | os.PathLike, field: str) -> None:
    if not isinstance(metrics, dict):
        raise DataError("must be an object of metric name -> number", file=path, field=field)
    for name, value in metrics.items():
        if isinstance(value, bool) or not isinstance(value, Real):
            raise DataError(
                f"metric value must be a number, got {value!r}", file=path, field=f"{field}.{name}"
            )
        # Python's json reads NaN and Infinity, which no evaluation writes; they went into metrics.md.
        if not math.isfinite(value):
            raise DataError(
                f"metric value must be a finite number, got {value!r}", file=path, field=f"{field}.{name}"
            )


def seed_runs(data: dict, path: str | os.PathLike) -> dict[int | None, dict]:
    """A method's runs as seed -> metrics: ``per_seed`` when the method was run with several seeds
    (seed_metrics), else its one run, under its ``seed`` / one-element ``seeds`` or None (not
    recorded)."""
    if "per_seed" not in data:
        seed = data.get("seed")
        if seed is None and isinstance(data.get("seeds"), list) and len(data["seeds"]) == 1:
            seed = data["seeds"][0]
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            seed = None  # a free-form seed field says nothing a pairing could rely on
        return {seed: data["metrics"]}
    entries = data["per_seed"]
    if not isinstance(entries, list) or not entries:
        raise DataError("must be a non-empty list of {seed, metrics}", file=path, field="per_seed")
    runs: dict[int | None, dict] = {}
    for i, entry in enumerate(entries):
        where = f"per_seed[{i}]"
        if not isinstance(entry, dict) or "seed" not in entry or "metrics" not in entry:
            raise DataError("must be an object with seed and metrics", file=path, field=where)
        seed = entry["seed"]
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise DataError(f"seed must be an integer, got {seed!r}", file=path, field=f"{where}.seed")
        if seed in runs:
            raise DataError(f"seed {seed} appears twice", file=path, field=f"{where}.seed")
        _check_metric_values(entry["metrics"], path, f"{where}.metrics")
        runs[seed] = entry["metrics"]
    return runs


def gather(
    dataset: str,
    paths: Sequence[str | os.PathLike | tuple[str, str | os.PathLike]],
    compare: Sequence[tuple[str, str]] = (),
    fixed: Collection[str] = (),
    per_query: QueryFiles | None = None,
) -> dict:
    """``{"dataset": D, "methods": {method: {split, n_queries, ..., metrics}}, "comparisons": [...]}``,
    methods in input order, one comparison per ``compare`` pair (method, baseline) whose two
    methods were both read. ``fixed``: methods with no training seed (their one run pairs with
    every seed of a trained method). A ``(name, path)`` input is gathered under the method name the
    config lists (e.g. dpr_ccr); the run it reads (dpr_ccr_b0.5) is kept as ``run`` when it differs.
    ``per_query``: the runs' per-query files, for the paired test over queries of a pair with one
    common seed (``None``: no such test, as before the files existed)."""
    if not paths:
        raise DataError("no metrics files given", field="--inputs")
    methods: dict[str, dict] = {}
    sources: dict[str, str] = {}
    runs: dict[str, dict] = {}
    for item in paths:
        name, path = item if isinstance(item, tuple) else (None, item)
        data = read_metrics(path)
        if data["dataset"] != dataset:
            raise DataError(
                f"dataset is {data['dataset']!r}, expected {dataset!r}", file=path, field="dataset"
            )
        method = name or data["method"]
        if method in methods:
            raise DataError(
                f"method {method!r} already read from {sources[method]}", file=path, field="method"
            )
        entry = {k: v for k, v in data.items() if k not in ("dataset", "method", "metrics")}
        if data["method"] != method:
            entry["run"] = data["method"]
        entry["metrics"] = data["metrics"]
        methods[method] = entry
        sources[method] = str(path)
        runs[method] = seed_runs(data, path)
    unknown = sorted(set(per_query or {}) - set(methods))
    if unknown:
        raise DataError(f"per-query files given for methods not gathered: {unknown}", field="--per-query")
    queries = None if per_query is None else QueryValues(per_query, runs, sources)
    comparisons = []
    for method, baseline in compare:
        missing = [m for m in (method, baseline) if m not in methods]
        if missing:
            log.info("comparison %s − %s left out: %s not gathered", method, baseline, " and ".join(missing))
            continue
        comparisons.append(compare_methods(method, baseline, methods, runs, fixed, queries))
    return {"dataset": dataset, "methods": methods, "comparisons": comparisons}


class QueryValues:
    """The runs' per-query files: which file holds a method's run of a seed, each read once and
    checked against the metrics the method reports for that seed."""

    def __init__(self, files: QueryFiles, runs: dict[str, dict], sources: dict[str, str]):
        self.files, self.runs, self.sources = files, runs, sources
        self._read: dict[str, pd.DataFrame] = {}

    def file(self, method: str, seed: int | None) -> str | None:
        """The per-query file of ``method``'s run paired at ``seed``: that seed's, else the method's one
        run's (a single run pairs under the other side's seed, and a seed-free baseline with every
        seed); None when no file was given for it."""
        given = self.files.get(method) or {}
        if seed in given:
            return str(given[seed])
        if len(self.runs[method]) == 1 and len(given) == 1:
            return str(next(iter(given.values())))
        return None

    def metrics(self, method: str, seed: int | None) -> dict:
        own = self.runs[method]
        return own[seed] if seed in own else next(iter(own.values()))

    def read(self, method: str, seed: int | None, names: Sequence[str]) -> pd.DataFrame:
        """The per-query table of ``method`` at ``seed``, refused when a column's mean is not the
        metric the method reports there (a per-query file left from another evaluation)."""
        path = self.file(method, seed)
        if path not in self._read:
            self._read[path] = read_per_query(path)
        table = self._read[path]
        reported = self.metrics(method, seed)
        for name in names:
            if name in table.columns and not math.isclose(
                column_mean(table, name), float(reported[name]), rel_tol=1e-9, abs_tol=1e-12
            ):
                raise DataError(
                    f"the mean of {name} over its queries is {column_mean(table, name)!r}, but "
                    f"{self.sources[method]} reports {reported[name]!r}: the two files come from "
                    "different evaluations; evaluate the run again",
                    file=path,
                    field=name,
                )
        return table


def _pairable(a: dict, b: dict, fixed_baseline: bool = False) -> tuple[dict, dict]:
    """One run against one run pairs (n = 1) even when a seed was not recorded: the key None
    takes the other side's seed. A ``fixed_baseline`` (a method with nothing random in it: bm25,
    zeroshot) has one run that is the same in every seed: it is paired with each seed of the
    method, and the interval is the method's spread over its seeds around that fixed value."""
    if fixed_baseline and len(b) == 1 and None not in a:
        return a, dict.fromkeys(a, next(iter(b.values())))
    if len(a) == 1 and len(b) == 1 and None in {*a, *b} and a.keys() != b.keys():
        seed = next(s for s in (*a, *b) if s is not None)
        return {seed: next(iter(a.values()))}, {seed: next(iter(b.values()))}
    return a, b


def compare_methods(
    method: str,
    baseline: str,
    methods: dict,
    runs: dict,
    fixed: Collection[str] = (),
    queries: QueryValues | None = None,
) -> dict:
    """One ``comparisons`` entry: method − baseline of every metric both have in every common seed
    (every seed of the method when the baseline is one of the seed-free methods ``fixed``), with the
    t interval over those seeds (``interval: "seeds"``). With one common seed there is none; then,
    given ``queries``, the paired test over the queries of that seed's two runs (``"queries"``)."""
    a, b = _pairable(runs[method], runs[baseline], baseline in fixed)
    seeds, only_a, only_b = common_seeds(a, b)
    names = [
        name
        for name in methods[method]["metrics"]
        if name in methods[baseline]["metrics"] and all(name in a[s] and name in b[s] for s in seeds)
    ]
    diffs = {}
    for name in sorted(names, key=metric_sort_key) if seeds else []:
        d = paired_difference({s: a[s][name] for s in seeds}, {s: b[s][name] for s in seeds}, LEVEL)
        diffs[name] = {"diff": d.mean, "std": d.std, "ci_low": d.ci_low, "ci_high": d.ci_high}
    entry = {
        "method": method,
        "baseline": baseline,
        "level": LEVEL,
        "n": len(seeds),
        "seeds": seeds,
        "only_method": only_a,
        "only_baseline": only_b,
    }
    if baseline in fixed:
        entry["baseline_fixed"] = True  # one seed-free run, the same in every pair
    entry["interval"] = "seeds" if len(seeds) > 1 else None
    if len(seeds) == 1 and diffs and queries is not None:
        missing = [m for m in (method, baseline) if queries.file(m, seeds[0]) is None]
        if missing:
            entry["no_query_test"] = (
                f"no per-query values for {' and '.join(missing)} (seed {_seed_list(seeds)}): "
                "no test over queries"
            )
        else:
            tested = query_comparison(method, baseline, seeds[0], list(diffs), queries)
            entry["interval"], entry["query_test"] = tested["interval"], tested["query_test"]
            diffs = tested["metrics"]
    if not seeds:
        entry["note"] = "no seed in common: nothing paired"
        log.info(
            "comparison %s − %s: no common seed (%s: %s, %s: %s)",
            method,
            baseline,
            method,
            list(a),
            baseline,
            list(b),
        )
    elif entry["interval"] == "queries":
        entry["note"] = "1 seed: interval and p-value over the test queries of one run each, not over seeds"
    elif len(seeds) == 1:
        entry["note"] = "1 seed: a difference of single runs, no interval"
    if seeds and (only_a or only_b):
        log.info(
            "comparison %s − %s: seeds left out (only %s: %s, only %s: %s)",
            method,
            baseline,
            method,
            only_a,
            baseline,
            only_b,
        )
    entry["metrics"] = diffs
    return entry


def query_comparison(
    method: str, baseline: str, seed: int | None, names: Sequence[str], queries: QueryValues
) -> dict:
    """The paired test over queries of the two runs of ``seed``, for the metrics ``names``: the
    ``interval``, ``query_test`` and ``metrics`` fields of a comparison entry."""
    files = queries.file(method, seed), queries.file(baseline, seed)
    a = queries.read(method, seed, names)
    b = queries.read(baseline, seed, names)
    values_a, values_b = align_per_query(a, b, files[0], files[1], names)
    tests = paired_query_tests(values_a, values_b, LEVEL, PERMUTATIONS, RNG_SEED)
    return {
        "interval": "queries",
        "query_test": {
            "seed": seed,
            "method_file": files[0],
            "baseline_file": files[1],
            "test": "paired t-interval; two-sided sign-flip randomisation test",
            "permutations": PERMUTATIONS,
            "rng_seed": RNG_SEED,
        },
        "metrics": {
            name: {
                "diff": t.mean,
                "std": t.std,
                "ci_low": t.ci_low,
                "ci_high": t.ci_high,
                "p_value": t.p_value,
                "n_queries": t.n,
                "exact": t.exact,
            }
            for name, t in zip(names, tests)
        },
    }


def _num(value, sign: str = "") -> str:
    if value is None:
        return "–"
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    return f"{value:{sign}.3f}"


def _cell(value, std=None, seeds: int = 0) -> str:
    """A mean, with its 95% t half-width over ``seeds`` seeds when there are several (the one ±
    convention of metrics.md)."""
    half = t_half_width(std, seeds, LEVEL)
    return _num(value) if half is None or value is None else f"{_num(value)} ± {_num(half)}"


FOOTNOTE = (
    "R@k: answer-match top-k accuracy over all queries (any passage in the top k holds an answer string); "
    "MRR@10, nDCG@10, hit@k, recall@k: qrels (recall@k: the share of a query's judged passages in the top "
    "k, a different recall from R@k); hit_all@k, MRR_all@10: qrels_all (see docs/evaluation.md). – = not "
    f"defined for this method/split. {PLUS_MINUS}."
)


def table_rows(gathered: dict) -> tuple[list[str], list[list[str]], list[str]]:
    """(header, one row of cells per method in input order, notes): metric columns in a fixed order."""
    methods = gathered["methods"]
    columns = sorted({name for entry in methods.values() for name in entry["metrics"]}, key=metric_sort_key)
    rows = []
    for method, entry in methods.items():
        std = entry.get("metrics_std") or {}
        seeds = len([s for s in entry.get("seeds") or [] if s is not None])
        rows.append(
            [method, str(entry["split"]), str(entry["n_queries"])]
            + [_cell(entry["metrics"].get(name), std.get(name), seeds) for name in columns]
        )
    notes = [f"{method}: {entry['notes']}" for method, entry in methods.items() if entry.get("notes")]
    return ["method", "split", "queries", *columns], rows, notes


# The headline table's columns, in this order of preference: exact-truth hits where the dataset knows
# every relevant passage (synthkb), then answer recall, then the annotated positives; at most
# HEADLINE_COLUMNS of those that tell the methods apart.
HEADLINE_PREFERENCE = (
    "hit_all@1",
    "hit_all@5",
    "R@1",
    "R@5",
    "MRR@10",
    "hit@1",
    "R@20",
    "MRR_all@10",
    "hit@5",
    "recall@5",
    "hit@20",
    "recall@20",
    "R@100",
    "hit@100",
)
HEADLINE_COLUMNS = 5
HEADLINE_FOOTNOTE = (
    "The primary metric first, then the metrics that tell these methods apart (a metric equal for every "
    "method, or equal to another column for every method, is left out: the full table below has them). "
    f"{PLUS_MINUS}. Bold: the best mean of the column among the methods that are not controls; "
    "(control): a method that isolates an effect (see Methods), never marked best."
)


def headline_footnote(gathered: dict) -> str:
    """The headline's footnote; where a pair was tested over queries, it says where that test is: a
    method's own spread over queries is no paired comparison, so the headline shows none."""
    if any(c.get("interval") == "queries" for c in gathered.get("comparisons") or []):
        return (
            f"{HEADLINE_FOOTNOTE} A method run with one seed has no interval here; the paired differences "
            "below compare such runs over the test queries, marked (queries)."
        )
    return HEADLINE_FOOTNOTE


def headline_columns(gathered: dict, most: int = HEADLINE_COLUMNS) -> list[str]:
    """The preferred metrics whose values (to 3 decimals) differ between methods and from every
    column already taken: on synthkb hit@k equals recall@k and R@100 is 1.000 for every dense method."""
    methods = list(gathered["methods"].values())
    taken: list[str] = []
    seen: set[tuple] = set()
    primary = primary_metric(gathered)
    for name in ([primary] if primary else []) + [n for n in HEADLINE_PREFERENCE if n != primary]:
        values = tuple(_num(entry["metrics"].get(name)) for entry in methods)
        if name == primary and any(v != "–" for v in values):
            pass  # the primary metric is shown, even where it does not separate the methods
        elif len(methods) > 1 and len(set(values)) == 1 or values in seen or all(v == "–" for v in values):
            continue
        taken.append(name)
        seen.add(values)
        if len(taken) == most:
            break
    return taken


def figure_fallback(gathered: dict) -> list[str]:
    """The metric to draw when no metric tells the methods apart (headline_columns is empty): the first
    preferred one any method has, else the first method's first; the figure is an output all the same."""
    methods = list(gathered["methods"].values())
    for name in HEADLINE_PREFERENCE:
        if any(entry["metrics"].get(name) is not None for entry in methods):
            return [name]
    return list(methods[0]["metrics"])[:1]


PRIMARY_TEXT = {
    "hit_all@1": "the share of test queries whose top-ranked passage states the answer's fact; any passage "
    "that states it counts (qrels_all), not only the annotated one",
    "R@1": "the share of test queries whose top-ranked passage contains an answer string (answer match)",
    "R@5": "the share of test queries with a passage containing an answer string in the top 5",
    "R@20": "the share of test queries with a passage containing an answer string in the top 20",
    "MRR@10": "the mean reciprocal rank of the annotated positive in the top 10 (qrels; this dataset has "
    "neither qrels_all nor answers)",
}


def primary_lines(gathered: dict) -> list[str]:
    """The paragraph above the headline: the primary metric, defined; the best method by it (controls
    left out); each trained method that ends below the model it started from."""
    primary = primary_metric(gathered)
    if primary is None:
        return []
    text = PRIMARY_TEXT.get(primary, primary)
    lines = [f"Primary metric: **{primary}**, {text}."]
    top = best(gathered, primary)
    if top is not None:
        lines[0] += f" Best by it, controls left out: **{top[0]} ({top[1]:.3f})**."
    below = below_start(gathered, primary)
    if below:
        lines += ["", *[f"- {sentence}." for sentence in below]]
    return [*lines, ""]


def definition_lines(gathered: dict) -> list[str]:
    """The metrics' definitions next to the table, and why annotated and exact relevance can disagree
    (when the dataset has both)."""
    names = {n.partition("@")[0] for e in gathered["methods"].values() for n in e["metrics"]}
    lines = ["Metrics (k = the cut-off):", ""]
    for label, text in DEFINITIONS.items():
        if any(part.partition("@")[0] in names for part in label.split(" / ")):
            lines.append(f"- {label}: {text}.")
    lines.append("")
    if "hit_all" in names and "MRR" in names:
        lines += [DISAGREE, ""]
    return lines


def method_lines(gathered: dict) -> list[str]:
    """One line per method: what it is and where its files are; a control says why it is one."""
    lines = []
    for name, note in method_notes(gathered).items():
        if note.what is None:
            lines.append(f"- {name}: not a method of the method table (files: see its metrics.json)")
            continue
        control = f" **Control**: {note.control}." if note.control else ""
        lines.append(f"- {name}: {note.what}; files {note.where}.{control}")
    return lines


def headline_rows(gathered: dict) -> tuple[list[str], list[list[str]]]:
    """(header, one row per method): the headline_columns with intervals over seeds, the best of each
    column among the methods that are not controls in bold; a control's name says so."""
    columns = headline_columns(gathered)
    methods = gathered["methods"]
    notes = method_notes(gathered)
    best = {
        name: max(
            (
                e["metrics"][name]
                for m, e in methods.items()
                if e["metrics"].get(name) is not None and notes[m].control is None
            ),
            default=None,
        )
        for name in columns
    }
    rows = []
    for method, entry in methods.items():
        seeds = [s for s in entry.get("seeds") or [] if s is not None]
        std = entry.get("metrics_std") or {}
        cells = []
        for name in columns:
            value = entry["metrics"].get(name)
            half = t_half_width(std.get(name), len(seeds), LEVEL)
            text = _num(value) if half is None or value is None else f"{_num(value)} ± {_num(half)}"
            top = value is not None and best[name] is not None and _num(value) == _num(best[name])
            cells.append(f"**{text}**" if top and notes[method].control is None else text)
        label = f"{method} (control)" if notes[method].control else method
        rows.append([label, str(len(seeds)) if len(seeds) > 1 else "1", *cells])
    return ["method", "seeds", *columns], rows


COMPARISON_TITLE = f"Paired differences (method − baseline), {LEVEL:.0%} CI over seeds"
COMPARISON_FOOTNOTE = (
    "d [lo, hi]: mean over the seeds both methods ran with of (method − baseline), and its two-sided "
    f"{LEVEL:.0%} Student-t interval (n − 1 degrees of freedom). An interval that contains 0 does not "
    "show a difference at this number of seeds; n/a (1 seed): one run each, no interval. "
    "docs/evaluation.md."
)


def comparison_title(gathered: dict) -> str:
    """The paired-difference table's title: over seeds, and over queries where a row says so."""
    if any(c.get("interval") == "queries" for c in gathered.get("comparisons") or []):
        return f"{COMPARISON_TITLE}, or over test queries where marked (queries)"
    return COMPARISON_TITLE


def _query_counts(comparisons: list[dict]) -> str:
    """'the 6 test queries', or with metrics over different queries (R@k over all, the qrels metrics over
    the judged ones) 'the test queries (6 for R@k; 5 for MRR@10, hit@k)'."""
    families: dict[int, list[str]] = {}
    for c in comparisons:
        for name, diff in c["metrics"].items():
            family, _, cut = name.partition("@")
            label = name if family.startswith(("MRR", "nDCG")) else f"{family}@k" if cut else name
            names = families.setdefault(diff["n_queries"], [])
            if label not in names:
                names.append(label)
    if len(families) == 1:
        return f"the {next(iter(families)):,} test queries"
    return "the test queries (" + "; ".join(f"{n:,} for {', '.join(f)}" for n, f in families.items()) + ")"


def comparison_footnotes(gathered: dict) -> list[str]:
    """The paragraphs under the paired differences; with tests over queries, what they are and are not."""
    tested = [c for c in gathered.get("comparisons") or [] if c.get("interval") == "queries"]
    if not tested:
        return [COMPARISON_FOOTNOTE]
    exact_up_to = PERMUTATIONS.bit_length() - 1  # 2^m sign flips fit in the budget up to m queries
    return [
        COMPARISON_FOOTNOTE,
        f"(queries): one seed in common, so no interval over seeds. Instead, over {_query_counts(tested)} "
        f"of one run each: {LEVEL:.0%} paired t-interval, two-sided sign-flip randomisation test, "
        f"{PERMUTATIONS:,} permutations (every sign flip when at most {exact_up_to} queries differ), "
        f"seed {RNG_SEED}; it shows the difference on these queries, not across training seeds.",
    ]


def _seed_list(seeds: list) -> str:
    return ", ".join("not recorded" if s is None else str(s) for s in seeds)


def _p_value(p: float) -> str:
    return "p<0.001" if p < 0.001 else f"p={p:.3f}"


def diff_cell(diff: dict | None, interval: str | None = "seeds") -> str:
    """A paired difference as a table cell: d [lo, hi] and its p-value, marked (queries) when the
    interval is over the test queries."""
    if diff is None:
        return "–"
    d = _num(diff["diff"], "+")
    if interval == "queries":
        low_high = (
            "n/a (1 query)" if diff["ci_low"] is None else f"{_num(diff['ci_low'])}, {_num(diff['ci_high'])}"
        )
        return f"{d} [{low_high}] {_p_value(diff['p_value'])} (queries)"
    if diff["ci_low"] is None:
        return f"{d} [n/a (1 seed)]"
    return f"{d} [{_num(diff['ci_low'])}, {_num(diff['ci_high'])}]"


def identical(comparison: dict) -> str | None:
    """What a comparison whose every paired difference is zero in every pair (mean and spread 0) says
    once, instead of a row of ``+0.000 [0.000, 0.000] p=1.000`` cells; None otherwise."""
    diffs = list(comparison["metrics"].values())
    interval = comparison.get("interval")
    if not diffs or interval not in ("queries", "seeds"):
        return None
    if any(d is None or d.get("diff") != 0 or d.get("std") != 0 for d in diffs):
        return None
    if interval == "queries":
        return "identical rankings, as these metrics see them: every metric equal on every test query"
    return "identical results: every metric equal in every seed"


def comparison_rows(gathered: dict) -> tuple[list[str], list[list[str]], list[str]]:
    """(header, one row per comparison, notes) of the paired-difference table; shared by Markdown
    and HTML like ``table_rows``."""
    comparisons = gathered.get("comparisons") or []
    columns = sorted({name for c in comparisons for name in c["metrics"]}, key=metric_sort_key)
    rows, notes = [], []
    for c in comparisons:
        label = f"{c['method']} − {c['baseline']}"
        seeds = f"{c['n']} ({_seed_list(c['seeds'])})" if c["n"] else "n/a (no common seed)"
        if c.get("baseline_fixed") and c["n"]:
            seeds += f"; {c['baseline']} seed-free"
        interval = c.get("interval", "seeds")
        same = identical(c)
        if same is not None and columns:
            rows.append([label, seeds, same, *[""] * (len(columns) - 1)])
        else:
            rows.append([label, seeds] + [diff_cell(c["metrics"].get(name), interval) for name in columns])
        if not c["n"]:
            notes.append(
                f"{label}: no common seed ({c['method']}: {_seed_list(c['only_method'])}; "
                f"{c['baseline']}: {_seed_list(c['only_baseline'])})"
            )
            continue
        for side, key in ((c["method"], "only_method"), (c["baseline"], "only_baseline")):
            if c[key]:
                notes.append(f"{label}: seed(s) {_seed_list(c[key])} only run for {side}, left out")
        if c.get("no_query_test"):
            notes.append(f"{label}: {c['no_query_test']}")
    return ["method − baseline", "n (seeds)", *columns], rows, notes


def markdown_grid(header: list[str], rows: list[list[str]], left: int) -> list[str]:
    """A Markdown table whose first ``left`` columns align left, the others right (numbers)."""
    return [
        "| " + " | ".join(header) + " |",
        "|" + "|".join(["---"] * left + ["---:"] * (len(header) - left)) + "|",
    ] + ["| " + " | ".join(cells) + " |" for cells in rows]


def markdown_table(gathered: dict) -> str:
    """Methods as rows, metrics as columns (fixed order), 3 decimals; notes listed below; then the
    paired differences, when there are comparisons."""
    lines = [f"# {gathered['dataset']}: retrieval metrics", "", *primary_lines(gathered)]
    header, rows = headline_rows(gathered)
    if len(header) > 2:
        lines += [*markdown_grid(header, rows, 2), "", headline_footnote(gathered), ""]
        lines += [*definition_lines(gathered), "## Methods", "", *method_lines(gathered), ""]
        lines += ["## All metrics", ""]
    header, rows, notes = table_rows(gathered)
    lines += markdown_grid(header, rows, 3)
    if notes:
        lines += ["", "Notes:", ""] + [f"- {note}" for note in notes]
    lines += ["", FOOTNOTE]
    header, rows, notes = comparison_rows(gathered)
    if rows:
        lines += ["", f"## {comparison_title(gathered)}", "", *markdown_grid(header, rows, 2)]
        if notes:
            lines += ["", "Notes:", ""] + [f"- {note}" for note in notes]
        for paragraph in comparison_footnotes(gathered):
            lines += ["", paragraph]
    return "\n".join(lines) + "\n"


def html_table(gathered: dict) -> str:
    """The same tables as a small standalone HTML page (for `snakemake --report`)."""
    from html import escape

    def section(header: list[str], rows: list[list[str]], notes: list[str], footnotes: list[str]) -> str:
        head = "".join(f"<th>{escape(c)}</th>" for c in header)
        body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in cells) + "</tr>" for cells in rows)
        paragraphs = [f"Notes: {'; '.join(notes)}"] if notes else []
        paragraphs += footnotes
        return f"<table><tr>{head}</tr>{body}</table>" + "".join(f"<p>{escape(p)}</p>" for p in paragraphs)

    page = (
        "<!doctype html><meta charset='utf-8'><style>table{border-collapse:collapse;font:13px sans-serif}"
        "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}td:first-child{text-align:left}"
        f"</style><h3>{escape(gathered['dataset'])}: retrieval metrics</h3>"
        + "".join(f"<p>{escape(line.replace('**', ''))}</p>" for line in primary_lines(gathered) if line)
        + section(*table_rows(gathered), [FOOTNOTE])
        + "<h4>Methods</h4>"
        + "".join(f"<p>{escape(line.replace('**', ''))}</p>" for line in method_lines(gathered))
    )
    header, rows, notes = comparison_rows(gathered)
    if rows:
        page += f"<h4>{escape(comparison_title(gathered))}</h4>" + section(
            header, rows, notes, comparison_footnotes(gathered)
        )
    return page


def _json_object(text: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("expected a JSON object")
    return value


def _named_path(value: str) -> str | tuple[str, str]:
    name, sep, path = value.partition("=")
    return (name, path) if sep and name and "/" not in name else value


def _query_file(value: str) -> tuple[str, int | None, str]:
    """METHOD=PATH (the method's one run) or METHOD@SEED=PATH (its run of that seed)."""
    key, sep, path = value.partition("=")
    method, at, seed = key.partition("@")
    if not sep or not path or not method or (at and not seed.isdigit()):
        raise argparse.ArgumentTypeError(f"expected METHOD=PATH or METHOD@SEED=PATH, got {value!r}")
    return method, int(seed) if at else None, path


def query_files(items: Sequence[tuple[str, int | None, str]]) -> dict[str, dict[int | None, str]]:
    """``--per-query`` items as method -> seed -> path; a (method, seed) given twice is an error."""
    files: dict[str, dict[int | None, str]] = {}
    for method, seed, path in items:
        seeds = files.setdefault(method, {})
        if seed in seeds:
            which = method if seed is None else f"{method}@{seed}"
            raise DataError(f"{which} given twice ({seeds[seed]} and {path})", field="--per-query")
        seeds[seed] = path
    return files


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser("pipeline.evaluation.gather", "Gather the methods' metrics of one dataset.")
    parser.add_argument("--dataset", required=True)
    parser.add_argument(
        "--inputs",
        nargs="+",
        required=True,
        type=_named_path,
        metavar="[METHOD=]PATH",
        help="results/D/<run>/metrics.json, gathered under METHOD when given (else its own method name)",
    )
    parser.add_argument("--out-json", required=True)
    parser.add_argument("--out-md", required=True)
    parser.add_argument("--out-html", help="the table as HTML (the Snakemake report shows it)")
    parser.add_argument("--out-png", help="the methods side by side on the headline metrics (a figure)")
    parser.add_argument(
        "--compare",
        default=[],
        type=json_pairs,
        metavar="JSON",
        help='[method, baseline] pairs, e.g. \'[["dpr", "zeroshot"]]\': paired differences method − baseline '
        "over common seeds (95%% t interval)",
    )
    parser.add_argument(
        "--fixed",
        nargs="*",
        default=[],
        metavar="METHOD",
        help="methods without a training seed (bm25, zeroshot): as a baseline, "
        "their one run is paired with every seed of the method",
    )
    parser.add_argument(
        "--per-query",
        nargs="*",
        type=_query_file,
        metavar="METHOD[@SEED]=PATH",
        help="the runs' per_query.parquet (evaluate --per-query): a pair with one common seed gets a "
        "paired test over queries; without this option it has no interval",
    )
    parser.add_argument(
        "--recipe",
        type=_json_object,
        metavar="JSON",
        help="the recipe in force (pipeline.core.recipes.recipe_record), kept in the JSON",
    )
    parser.add_argument("--log", help="append the log to this file")
    args = parser.parse_args(argv)
    start_stage(args.log)
    per_query = None if args.per_query is None else query_files(args.per_query)
    gathered = gather(args.dataset, args.inputs, args.compare, args.fixed, per_query)
    if args.recipe is not None:
        gathered["recipe"] = args.recipe
    table = markdown_table(gathered)
    write_json(args.out_json, gathered)
    with atomic_open(args.out_md, "w", encoding="utf-8") as handle:
        handle.write(table)
    if args.out_html:
        with atomic_open(args.out_html, "w", encoding="utf-8") as handle:
            handle.write(html_table(gathered))
    if args.out_png:
        plot_methods(gathered, headline_columns(gathered) or figure_fallback(gathered), args.out_png)
    log.info("gathered %d methods for %s -> %s", len(gathered["methods"]), args.dataset, args.out_md)
    # The headline as plain text on stdout: through the logger it was wrapped to the terminal's width.
    header, rows = headline_rows(gathered)
    sys.stdout.write("\n".join(markdown_grid(header, rows, 2)).replace("**", "") + "\n")
    return 0


if __name__ == "__main__":
    run_main(main)

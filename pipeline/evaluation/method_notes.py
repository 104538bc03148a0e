"""What metrics.md (and the README's results) say about the gathered methods besides their numbers:
the primary metric and its definition, which methods are controls (never "best"), where each
method's files are and what it is, and where a trained method ends below the model it started from.

Everything here is read from metrics.json as gather writes it: the method records come from the
recipe settings it keeps (``recipe.settings``: methods, ccr, sieve, ...), else from the contracts'
defaults, through pipeline.core.methods. Nothing here changes metrics.json.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from pipeline.core.methods import Method, control_reason, describe, folders, method_table, started_from
from pipeline.core.settings.root import apply_defaults
from pipeline.evaluation.seed_stats import paired_difference

# The primary metric: the first of these that a gathered method has. hit_all@1 where the dataset marks
# every passage that states the answer (qrels_all: synthkb); else R@1, the answer string in the top
# passage (datasets with answers: NQ, SQuAD; R@5 or R@20 when the evaluation's ks leave out 1); else
# MRR@10 over the annotated positives (qrels only: MS MARCO, BEIR).
# The first two count any passage that answers, so an unlabelled relevant passage ranked first (a false
# negative of the annotation) is no miss; MRR@10 is the fallback where nothing else is known.
PRIMARY_ORDER = ("hit_all@1", "R@1", "R@5", "R@20", "MRR@10")

DEFINITIONS = {
    "hit_all@k": "share of queries with any passage stating the answer's fact in the top k (qrels_all: "
    "every such passage of the corpus, known exactly on synthkb)",
    "MRR_all@10": "mean reciprocal rank of the first such passage in the top 10",
    "R@k": "share of queries with a passage containing an answer string in the top k (answer match; DPR's "
    "top-k retrieval accuracy, not recall@k)",
    "MRR@10": "mean reciprocal rank of the annotated positive (qrels: one passage per query) in the top 10",
    "nDCG@10": "normalised discounted cumulative gain over the annotated positives (qrels, binary relevance; "
    "BEIR's and MTEB's headline metric): the sum of 1/log2(rank + 1) over the positives in the top 10, "
    "divided by that sum for a ranking that puts them first",
    "hit@k / recall@k": "the annotated positives (qrels) in the top k: any of them / the share of them "
    "(recall@k is trec_eval's recall of the judged passages, not R@k)",
}

DISAGREE = (
    "Why MRR@10 and hit_all@1 can rank the methods in opposite orders: MRR@10 credits only the annotated "
    "positive, hit_all@1 any passage that states the fact. DPR-style training (and everything trained "
    "from it) learns to put the annotated passage first, so it gains MRR@10; BM25 and the zero-shot "
    "model never saw the annotation and often put another stating passage first, a hit for hit_all@1 "
    "and a miss for MRR@10. The primary metric counts what a user is served: a passage that answers."
)

PLUS_MINUS = "a ± h: mean over seeds and the 95% Student-t half-width over seeds (n − 1 degrees of freedom)"


@dataclass(frozen=True)
class MethodNote:
    name: str
    where: str | None  # its folders; None when the method table does not know the name
    what: str | None
    control: str | None  # why it is a control; None: a method or baseline (may be "best")
    start: str | None  # the gathered method whose model it was trained from


def primary_metric(gathered: dict) -> str | None:
    """The metric that decides (PRIMARY_ORDER's first that any gathered method has), else None."""
    methods = gathered["methods"].values()
    return next((m for m in PRIMARY_ORDER if any(m in e["metrics"] for e in methods)), None)


def _table(gathered: dict) -> dict[str, Method]:
    settings = (gathered.get("recipe") or {}).get("settings") or {}
    try:
        return method_table(apply_defaults(copy.deepcopy(settings)))
    except (KeyError, TypeError, ValueError):  # a hand-made metrics.json: the contracts' defaults
        return method_table(apply_defaults({}))


def method_notes(gathered: dict) -> dict[str, MethodNote]:
    """One note per gathered method, in metrics.json's order."""
    table = _table(gathered)
    dataset = gathered["dataset"]
    by_run = {entry.get("run", name): name for name, entry in gathered["methods"].items()}
    by_run.update({name: name for name in gathered["methods"] if name not in by_run})
    notes = {}
    for name in gathered["methods"]:
        m = table.get(name)
        if m is None:
            notes[name] = MethodNote(name, None, None, None, None)
            continue
        start = started_from(m)
        start_name = by_run.get(table[start].run) if start in table else None
        notes[name] = MethodNote(name, folders(m, dataset), describe(m), control_reason(m), start_name)
    return notes


def is_control(gathered: dict, name: str) -> bool:
    return method_notes(gathered)[name].control is not None


def best(gathered: dict, metric: str) -> tuple[str, float] | None:
    """The highest ``metric`` among the methods that are not controls (first in order on a tie)."""
    notes = method_notes(gathered)
    values = [
        (name, float(e["metrics"][metric]))
        for name, e in gathered["methods"].items()
        if notes[name].control is None and e["metrics"].get(metric) is not None
    ]
    return max(values, key=lambda item: item[1]) if values else None


def _by_seed(entry: dict, metric: str) -> dict:
    """seed -> ``metric`` of a gathered method's runs (``per_seed``), else its one run under None."""
    rows = entry.get("per_seed") or []
    values = {row.get("seed"): row["metrics"].get(metric) for row in rows if isinstance(row, dict)}
    if not values or None in values.values():
        return {None: entry["metrics"].get(metric)}
    return values


def start_difference(gathered: dict, name: str, start: str, metric: str) -> str:
    """The paired difference ``name`` − ``start`` over seeds and its 95% t-interval as words, or ''
    where the seeds allow none (one run each, or no seed in common). A start with one run and no
    recorded seed (zeroshot: nothing random in it) is every seed's start."""
    methods = gathered["methods"]
    runs, base = _by_seed(methods[name], metric), _by_seed(methods[start], metric)
    fixed = list(base) == [None] and None not in runs
    if fixed:
        base = dict.fromkeys(runs, base[None])
    d = paired_difference(runs, base)
    if d.ci_low is None:
        return ""
    text = f": {d.mean:+.3f} [{d.ci_low:+.3f}, {d.ci_high:+.3f}] over {d.n} seeds (paired, 95% t-interval" + (
        f"; {start} has no seed, its one run is every seed's start)" if fixed else ")"
    )
    if d.ci_high >= 0:
        text += "; the interval reaches 0: not shown beyond the seeds' spread"
    return text


def below_start(gathered: dict, metric: str) -> list[str]:
    """A sentence for each trained method whose ``metric`` ends below the model it started from's
    (to 3 decimals), e.g. "dpr_sieve (0.618) is below zeroshot (0.639), the model it was trained from",
    with the paired difference and its interval where the seeds allow one (start_difference)."""
    sentences = []
    methods = gathered["methods"]
    for name, note in method_notes(gathered).items():
        if note.start is None or note.start == name:
            continue
        value, start = methods[name]["metrics"].get(metric), methods[note.start]["metrics"].get(metric)
        if value is None or start is None or round(value, 3) >= round(start, 3):
            continue
        sentences.append(
            f"{name} ({value:.3f}) is below {note.start} ({start:.3f}), the model it was trained from"
            + start_difference(gathered, name, note.start, metric)
        )
    return sentences

"""What the evaluation and fusion rules (workflow/rules/evaluate.smk, hybrid.smk) look up: a run folder's
inputs and seeds, the TREC exports, every run's per-query file, and a hybrid's runs and weighted-sum
settings. Built on a ``WorkflowTables``, so that it is unit-tested and linted here rather than inside the
rule files.
"""

from __future__ import annotations

import re
import shlex
from typing import Any, Callable

from pipeline.core.methods import Method, closest
from pipeline.core.storage import DataError
from pipeline.evaluation.selections import SELECTION_FILE, selection_settings
from pipeline.evaluation.tournament import check_settings
from pipeline.workflow.documents import settings_flag
from pipeline.workflow.paths import (
    corpus,
    filter_report,
    method_metrics,
    model_dir,
    per_query,
    qrels,
    qrels_all,
    queries,
    retriever,
    run,
    run_dir,
    trec_qrels,
    trec_run,
)
from pipeline.workflow.tables import Wildcards, WorkflowTables

# A run folder: a method's, or one seed's of a seeded method ({method}/seed{s}).
RUN_FOLDER = r"[A-Za-z0-9_.]+(/seed\d+)?"


def qrels_all_arg(wildcards: Wildcards, input: Any) -> str:
    """params function: --qrels-all where the job has exact labels (synthetic data)."""
    return f"--qrels-all {shlex.quote(input.qrels_all)}" if "qrels_all" in input.keys() else ""


def fusion_arg(wildcards: Wildcards, input: Any) -> str:
    """params function: the weighted sum's chosen w, recorded in metrics.json."""
    return f"--fusion {shlex.quote(input.fusion)}" if "fusion" in input.keys() else ""


def fusion_choice(d: str, method: str, split: str, seed: int | str | None = None) -> str:
    """The weighted-sum hybrid's choice of w (chosen on hybrid.select_split) for its run of ``split``."""
    return f"{run_dir(d, method, seed)}/fusion.{split}.json"


def weighted_io(wildcards: Wildcards, input: Any, output: Any) -> str:
    """params function: fuse_weighted's dev files (those it has) and where its choice goes."""
    keys = ("dev_sparse", "dev_dense", "dev_queries", "dev_qrels", "corpus", "dev_qrels_all")
    args = [f"--{key.replace('_', '-')} {shlex.quote(input[key])}" for key in keys if key in input.keys()]
    return " ".join(args + [f"--choice-out {shlex.quote(output.choice)}"])


# What each fusion's job of pipeline.evaluation.hybrid reads: (config section, keys) per part of its document.
HYBRID_READS = {
    "rrf": (("hybrid", ("rrf_k",)), ("eval", ("depth",))),
    "wsum": (("hybrid", ("weights", "select_split", "select_metric")), ("eval", ("depth", "match"))),
}


def hybrid_job(config: dict, fusion: str) -> dict[str, Any]:
    """The document of a fuse_rrf (``fusion`` rrf) or fuse_weighted (wsum) job of a dataset whose resolved
    config is ``config`` (pipeline.core.settings.job_documents.HybridRrfJob, HybridWeightedJob)."""
    return {key: config[section][key] for section, keys in HYBRID_READS[fusion] for key in keys}


def evaluate_job(
    w: WorkflowTables, d: str, method: str, split: str | None = None, allow_missing_queries: bool = False
) -> dict[str, Any]:
    """The document of an evaluate job of dataset ``d`` (pipeline.core.settings.job_documents.EvaluateJob): the labels
    metrics.json carries (``method``), the evaluated split (default: the dataset's), eval's cut-offs and
    matching, and whether the run may miss a query."""
    return {
        "dataset": d,
        "method": method,
        "split": split or w.eval_split(d),
        "ks": list(w.cfg(d)["eval"]["ks"]),
        "match": w.cfg(d)["eval"]["match"],
        "allow_missing_queries": allow_missing_queries,
    }


class EvaluationRules:
    """The evaluation's lookups of one config (``w``): one per workflow, built in evaluate.smk."""

    def __init__(self, w: WorkflowTables):
        self.w = w
        self.config = w.config

    # ---- evaluate ------------------------------------------------------------------------------------

    def check_run(self, dataset: str, name: str) -> None:
        """A run folder asked for by a target names a run of the method table, or says which it meant."""
        runs, methods = self.w.runs[dataset], self.w.methods[dataset]
        if name in runs:
            return
        if name in methods:
            real = methods[name].run
            raise ValueError(
                f"{run_dir(dataset, name)}/: method {name}'s run folder is {real} (what tells its runs "
                f"apart is in the name): ask for {method_metrics(dataset, real)}"
            )
        raise ValueError(
            f"{run_dir(dataset, name)}/: unknown method or run {name!r} of dataset {dataset!r} "
            f"({closest(name, set(runs) | set(methods))})"
        )

    def evaluate_inputs(self, wildcards: Wildcards) -> dict[str, str]:
        """The run and the canonical tables of the evaluated split (+ qrels_all for synthetic data)."""
        dataset, split = wildcards.dataset, self.w.eval_split(wildcards.dataset)
        self.check_run(dataset, wildcards.run.partition("/seed")[0])
        inputs = {"run": run(dataset, wildcards.run, split), **self.w.split_tables(dataset, split)}
        method, _, seed = wildcards.run.partition("/seed")
        runs = self.w.runs[dataset]
        if method in runs and runs[method].fusion == "wsum":
            inputs["fusion"] = fusion_choice(dataset, method, split, seed or None)  # w goes in metrics.json
        return inputs

    def settings(self, wildcards: Wildcards) -> str:
        """params function: the evaluate job's document (evaluate_job), recorded and passed whole."""
        # BM25 leaves out a query that shares no term with the corpus (a miss); a dense run missing a
        # query is a broken search and stops the evaluation.
        method, bm25 = wildcards.run.split("/")[0], wildcards.run == "bm25"
        return settings_flag(evaluate_job(self.w, wildcards.dataset, method, allow_missing_queries=bm25))

    # ---- seeds, TREC exports, gathering ----------------------------------------------------------------

    def method_seeds(self, d: str, name: str) -> list[int | None]:
        """The seed of each of a run's folders: one per seed for AR2 methods (ar2.smk) and, with several
        training seeds, for the trained dense methods; else None (results/{d}/{run}/)."""
        if self.w.runs[d][name].kind == "ar2":
            return list(self.w.ar2_seeds(d))
        return list(self.w.training_seeds(d)) if name in self.w.seeded_runs(d) else [None]

    def trec_exports(self, wildcards: Wildcards) -> list[str]:
        """run.{split}.trec of every method (every seed), when config eval.trec_export asks for them."""
        if not self.config["eval"]["trec_export"]:
            return []
        d = wildcards.dataset
        split = self.w.eval_split(d)
        judged = [trec_qrels(d, split)] + (
            [trec_qrels(d, split, "qrels_all")] if d in self.w.synthetic else []
        )
        # a dict, not a set: each run once, in the order of `methods`
        folders = {self.w.run_of(d, m): None for m in self.w.cfg(d)["methods"]}
        return judged + [trec_run(d, r, split, seed) for r in folders for seed in self.method_seeds(d, r)]

    def query_values(self, d: str) -> list[tuple[str, int | None, str]]:
        """(method, seed, per-query file) of every run of every gathered method: gather_metrics tests a
        pair with one common seed over the queries of its two runs (seed None: the method's one run)."""
        return [
            (m, seed, per_query(d, self.w.run_of(d, m), seed))
            for m in self.w.cfg(d)["methods"]
            for seed in self.method_seeds(d, self.w.run_of(d, m))
        ]

    def gathered_metrics(self, wildcards: Wildcards) -> list[str]:
        """gather_metrics' input: the metrics.json of each method of `methods` (its run folder)."""
        d = wildcards.dataset
        return [method_metrics(d, self.w.run_of(d, m)) for m in self.w.cfg(d)["methods"]]

    def per_query_files(self, wildcards: Wildcards) -> list[str]:
        """gather_metrics' per-query input: query_values' files."""
        return [path for _, _, path in self.query_values(wildcards.dataset)]

    def gather_inputs_arg(self, wildcards: Wildcards, input: Any) -> str:
        """params function: each method's metrics under the name `methods` lists (its run folder may
        carry its β)."""
        return " ".join(
            shlex.quote(f"{m}={path}")
            for m, path in zip(self.w.cfg(wildcards.dataset)["methods"], input.metrics)
        )

    def per_query_arg(self, wildcards: Wildcards) -> str:
        """params function: every run's per-query values (method@seed where the method has seeds)."""
        return " ".join(
            shlex.quote(f"{m}={path}" if seed is None else f"{m}@{seed}={path}")
            for m, seed, path in self.query_values(wildcards.dataset)
        )

    def seed_metrics(self, wildcards: Wildcards) -> list[str]:
        """dense_seeds' input: the method's metrics.json of each training seed."""
        d = wildcards.dataset
        return [method_metrics(d, wildcards.method, seed) for seed in self.w.training_seeds(d)]

    def seeded_datasets(self) -> list[str]:
        """dense_seeds' dataset constraint: the datasets with several training seeds, escaped (a run
        seeded in one dataset is evaluated whole in a dataset with one seed)."""
        return sorted(re.escape(d) for d in self.w.datasets if self.w.seeded_runs(d))

    def seeded_methods(self) -> list[str]:
        """dense_seeds' method constraint: the seeded runs of every dataset, escaped."""
        return sorted({re.escape(r) for d in self.w.datasets for r in self.w.seeded_runs(d)})

    # ---- hybrids (hybrid.smk) ----------------------------------------------------------------------------

    def hybrid_methods(self, fusion: str) -> list[str]:
        """Hybrid method names of every dataset with this fusion (wildcard constraints)."""
        return [re.escape(r) for r in self.w.runs_of("hybrid", lambda m: m.fusion == fusion)]

    def hybrid_inputs(self, wildcards: Wildcards) -> dict[str, str]:
        """Both runs of the evaluated split; for the weighted sum also both dev runs and dev's judgements."""
        d, split = wildcards.dataset, wildcards.split
        record = self.w.runs[d][wildcards.method]
        fusion, base = record.fusion, record.base
        seed = getattr(wildcards, "seed", None)
        inputs = {"sparse": run(d, "bm25", split), "dense": run(d, base, split, seed)}
        if fusion == "wsum":
            dev = self.w.cfg(d)["hybrid"]["select_split"]
            if dev == split:
                raise ValueError(
                    f"{wildcards.method}: hybrid.select_split ({dev}) is the evaluated split of "
                    f"{d}; choose w on another split (e.g. dev with eval.split test)"
                )
            inputs.update(
                dev_sparse=run(d, "bm25", dev),
                dev_dense=run(d, base, dev, seed),
                dev_queries=queries(d, dev),
                dev_qrels=qrels(d, dev),
                corpus=corpus(d),
            )
            if d in self.w.synthetic:
                inputs["dev_qrels_all"] = qrels_all(d, dev)
        return inputs

    def hybrid_settings(self, fusion: str) -> Callable[[Wildcards], str]:
        """params function of fuse_rrf (``fusion`` rrf) or fuse_weighted (wsum): the job's document
        (hybrid_job), recorded and passed whole."""
        return lambda wildcards: settings_flag(hybrid_job(self.w.cfg(wildcards.dataset), fusion))


def tournament_settings(w: WorkflowTables) -> str:
    """The tournament rule's --settings: the config's tournament section as JSON (``_tournament``)."""
    import json

    return json.dumps(_tournament(w))  # in the config's order: the levels are the table's columns


def selections_settings(w: WorkflowTables) -> str:
    """The selections' table's --settings: the part of the tournament section it reads, so a setting it
    does not read (the default's rule, a level's decision) leaves its job alone."""
    import json

    return json.dumps(selection_settings(_tournament(w)))


def _tournament(w: WorkflowTables) -> dict:
    """The config's tournament section, once every level is a declared dataset whose `methods` build
    each contender it runs and the start (else the job would fail after hours of training on a name it
    never asked for)."""
    t = w.config["tournament"]
    problems = []
    for d, level in t["levels"].items():
        if d not in w.datasets:
            problems.append(f"{d}: not a dataset of `datasets` ({closest(d, list(w.datasets))})")
            continue
        skip = level.get("skip") or []
        wanted = [m for m in [*t["methods"], t["start"], *t["references"]] if m not in skip]
        missing = [m for m in dict.fromkeys(wanted) if m not in w.cfg(d)["methods"]]
        if missing:
            problems.append(f"{d}: {', '.join(missing)} not in its methods (add them, or to its skip)")
    try:  # contenders and levels at all; the controls and the incumbent among the contenders
        check_settings(t)
    except DataError as error:
        problems.append(str(error))
    if problems:
        raise ValueError("tournament: " + "; ".join(problems))
    return t


def tournament_detections(w: WorkflowTables) -> list[tuple[str, str, str, str]]:
    """(dataset, contender, action, report) for each contender at each level whose training acts on a
    filter's decisions (drops them, or relabels them as positives): the filter's detection report
    (sieve_report), what the tournament reads for its drop rate and detection precision and recall. A
    hybrid is its dense run's; a model selection its trained model's; in-loss masking (GIST) and mined
    negatives have no decisions."""
    out = []
    for d, name, m in _contenders_run(w):
        if m.kind == "hybrid":
            m = w.runs[d].get(m.base)
        if m is None or m.filter is None or m.guide is not None:
            continue
        out.append((d, name, "relabels" if m.relabel else "drops", filter_report(d, m.negatives)))
    return out


def _contenders_run(w: WorkflowTables) -> list[tuple[str, str, Method]]:
    """(dataset, contender, its method) at each level of tournament.levels, for each contender of
    tournament.methods the level runs (not in its skip; in the dataset's method table)."""
    t = w.config["tournament"]
    return [
        (d, name, w.methods[d][name])
        for d, level in t["levels"].items()
        for name in t["methods"]
        if name not in (level.get("skip") or []) and name in w.methods[d]
    ]


def tournament_selections(w: WorkflowTables) -> list[tuple[str, str, int, str, str]]:
    """(dataset, contender, seed, retriever.json, selection.json) for each contender of tournament.methods
    that is a model selection on dev (<trained>_wise*), at each level that runs it, for each training
    seed: the model folder's retriever.json is select_model's declared output (written last), the
    selection.json beside it what the selections' table reads."""
    out = []
    for d, name, m in _contenders_run(w):
        if m.selects is None:
            continue
        for seed in w.training_seeds(d):
            folder = w.seeded_model(m.model, seed)
            out.append((d, name, seed, retriever(d, folder), f"{model_dir(d, folder)}/{SELECTION_FILE}"))
    return out

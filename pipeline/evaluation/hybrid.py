"""Hybrid retrieval: fuse a BM25 run with a dense run (methods hybrid_rrf_<dense>, hybrid_wsum_<dense>).

    python -m pipeline.workflow.jobs D fuse_rrf > rrf.json
    python -m pipeline.evaluation.hybrid rrf --settings rrf.json --sparse results/D/bm25/run.test.parquet \
        --dense results/D/dpr/run.test.parquet [--rrf-k 60 ...: over the document] \
        --out results/D/hybrid_rrf_dpr/run.test.parquet

    python -m pipeline.workflow.jobs D fuse_weighted > weighted.json
    python -m pipeline.evaluation.hybrid weighted --settings weighted.json \
        --sparse .../bm25/run.test.parquet --dense .../dpr/run.test.parquet \
        --dev-sparse .../bm25/run.dev.parquet --dev-dense .../dpr/run.dev.parquet \
        --dev-queries resources/D/queries.dev.parquet --dev-qrels resources/D/qrels.dev.parquet \
        --corpus resources/D/corpus.parquet [--select-metric R@5 --weights 0 0.5 1 ...: over the document] \
        --out results/D/hybrid_wsum_dpr/run.test.parquet --choice-out results/D/hybrid_wsum_dpr/fusion.test.json

Each subcommand's settings (pipeline.core.settings.job_documents.HybridRrfJob, HybridWeightedJob) come as one document,
the workflow's job's (``--settings-json``) or a file (``--settings``), each flag over it.

The weighted sum's w is chosen on the dev split, never on the evaluated one; fusion.json records the
chosen w and the dev metric of every grid weight (fusion.{split}.json in the DAG). Formulas: pipeline.retrieval.fusion.
"""

from __future__ import annotations

import logging
import os
import re
from typing import Callable, Sequence

import pandas as pd

from pipeline.core.cli import run_main, stage_parser, start_stage
from pipeline.core.jobs import add_settings_flags, job_settings
from pipeline.core.schemas import RUN_SCHEMA
from pipeline.core.settings.job_documents import HybridRrfJob, HybridWeightedJob
from pipeline.core.storage import DataError, refuse_overwriting_inputs, write_json, write_table
from pipeline.data.answers import AnswerMatcher
from pipeline.evaluation.evaluate import (
    first_answer_hits,
    load_corpus,
    load_qrels,
    load_queries,
    prepare_answers,
    read_finite_run,
)
from pipeline.evaluation.metrics import qrels_metrics, top_k_accuracy
from pipeline.retrieval.fusion import choose_weight, normalised_union, rrf_fuse, weighted_fuse
from pipeline.retrieval.runs import ranked_lists

log = logging.getLogger("sieve.hybrid")

# What qrels_metrics / top_k_accuracy compute: MRR only at 10.
_METRIC = re.compile(r"^(?:(R|hit|hit_all|recall)@([1-9]\d*)|(MRR|MRR_all)@(10))$")


def dev_metric(
    queries: str | os.PathLike,
    qrels: str | os.PathLike,
    corpus: str | os.PathLike,
    pids: set[str],
    metric: str,
    match: str = "string",
    qrels_all: str | os.PathLike | None = None,
) -> Callable[[pd.DataFrame], float]:
    """A function run -> ``metric`` on the dev split, with the answers and qrels loaded once.

    ``metric``: R@k (answer match), hit@k, recall@k, MRR@10 (qrels) or hit_all@k / MRR_all@10
    (``qrels_all``, synthetic data)."""
    found = _METRIC.match(metric)
    if found is None:
        raise DataError(
            f"unknown selection metric {metric!r}: use R@k, hit@k, recall@k (k >= 1), MRR@10, "
            "hit_all@k or MRR_all@10",
            field="metric",
        )
    family = found.group(1) or found.group(3)
    k = int(found.group(2) or found.group(4))
    answers = load_queries(queries)
    if family == "R":
        matcher = AnswerMatcher(match)
        prepared = prepare_answers(answers, matcher, queries)
        found = load_corpus(corpus, pids, matcher)
        if len(found) < len(pids):
            unknown = sorted(pids - found)
            raise DataError(
                f"{len(unknown)} pids of the dev runs are not in the corpus (e.g. {unknown[0]!r})",
                file=corpus,
                field="pid",
            )
        if not any(answers.values()):
            raise DataError(
                f"{metric} needs answers, and no dev query has any", file=queries, field="answers"
            )

        def answer_metric(run: pd.DataFrame) -> float:
            hits = first_answer_hits(run, prepared, matcher)
            return top_k_accuracy([hits.get(q) for q in answers], [k])[metric]

        return answer_metric
    suffix = "_all" if family.endswith("_all") else ""
    path = qrels_all if suffix else qrels
    if path is None:
        raise DataError(f"{metric} needs qrels_all (synthetic data only)", field="metric")
    judged = load_qrels(path, set(answers))
    if not judged:
        raise DataError(f"{metric} needs qrels, and {path} has none for the dev queries", file=path)

    def qrels_metric(run: pd.DataFrame) -> float:
        return qrels_metrics(ranked_lists(run), judged, [k], suffix=suffix)[metric]

    return qrels_metric


def read_pair(sparse: str, dense: str, known: set[str] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Both runs, validated (their qids among ``known`` when given); the dense run must rank every
    query the sparse run ranks, and every one of ``known`` (BM25 may leave out a query that shares no
    term with the corpus, a dense search never does)."""
    sparse_run, dense_run = read_finite_run(sparse, known), read_finite_run(dense, known)
    missing = (set(sparse_run["qid"]) | (known or set())) - set(dense_run["qid"])
    if missing:
        raise DataError(
            f"{len(missing)} queries of the sparse run {sparse} are not in the dense run "
            f"(e.g. {sorted(missing)[0]!r}): were both runs made for the same split?",
            file=dense,
            field="qid",
        )
    return sparse_run, dense_run


def fuse_weighted(
    sparse: str,
    dense: str,
    dev_sparse: str,
    dev_dense: str,
    *,
    dev_queries: str,
    dev_qrels: str,
    corpus: str,
    select_metric: str,
    weights: Sequence[float],
    depth: int,
    match: str = "string",
    dev_qrels_all: str | None = None,
    select_split: str = "dev",
) -> tuple[pd.DataFrame, dict]:
    """(the evaluated split's fused run, the choice record): w chosen on dev, applied to the split."""
    dev_qids = set(load_queries(dev_queries))
    dev_union = normalised_union(*read_pair(dev_sparse, dev_dense, dev_qids))
    score = dev_metric(
        dev_queries, dev_qrels, corpus, set(dev_union["pid"]), select_metric, match, dev_qrels_all
    )
    weight, by_weight = choose_weight(dev_union, weights, score, depth=depth)
    log.info(
        "dev %s by weight: %s -> w = %g",
        select_metric,
        ", ".join(f"{w:g}: {v:.4f}" for w, v in by_weight.items()),
        weight,
    )
    fused = weighted_fuse(normalised_union(*read_pair(sparse, dense)), weight, depth=depth)
    choice = {
        "fusion": "weighted_sum",
        "normalisation": "min-max per query",
        "weight_dense": weight,
        "selected_on": select_split,
        "metric": select_metric,
        "dev_metric_by_weight": {f"{w:g}": v for w, v in by_weight.items()},
        "sparse": sparse,
        "dense": dense,
    }
    return fused, choice


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser("pipeline.evaluation.hybrid", __doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    helps = {
        "rrf": "reciprocal-rank fusion (no tuning)",
        "weighted": "weighted sum of min-max scores, w chosen on dev",
    }
    for name, contract in JOBS.items():
        cmd = sub.add_parser(name, help=helps[name])
        cmd.add_argument("--sparse", required=True, help="BM25 run of the evaluated split")
        cmd.add_argument("--dense", required=True, help="dense run of the evaluated split")
        cmd.add_argument("--out", required=True, help="fused run Parquet")
        cmd.add_argument("--log")
        add_settings_flags(cmd, contract, "settings")
    weighted = sub.choices["weighted"]
    for flag in ("--dev-sparse", "--dev-dense", "--dev-queries", "--dev-qrels", "--corpus", "--choice-out"):
        weighted.add_argument(flag, required=True)
    weighted.add_argument("--dev-qrels-all", help="synthetic data: qrels_all of dev (metrics hit_all@k)")
    args = parser.parse_args(argv)
    job = job_settings(JOBS[args.command], args)  # before any work: a bad document or flag is one line
    read = (
        "sparse",
        "dense",
        "dev_sparse",
        "dev_dense",
        "dev_queries",
        "dev_qrels",
        "corpus",
        "dev_qrels_all",
    )
    written = ("out", "choice_out", "log")
    refuse_overwriting_inputs(*({_flag(k): getattr(args, k, None) for k in keys} for keys in (written, read)))
    start_stage(args.log)
    if args.command == "rrf":
        fused = rrf_fuse(list(read_pair(args.sparse, args.dense)), k=job.rrf_k, depth=job.depth)
    else:
        runs = (args.sparse, args.dense, args.dev_sparse, args.dev_dense)
        dev = {key: getattr(args, key) for key in ("dev_queries", "dev_qrels", "corpus", "dev_qrels_all")}
        fused, choice = fuse_weighted(*runs, **dev, **job.model_dump())
        write_json(args.choice_out, choice)
    write_table(args.out, fused, schema=RUN_SCHEMA)
    log.info("wrote %s: %d queries, %d rows", args.out, fused["qid"].nunique(), len(fused))
    return 0


# Each subcommand's settings document (pipeline.core.settings); the rules pass it, a hand run may too.
JOBS = {"rrf": HybridRrfJob, "weighted": HybridWeightedJob}


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


if __name__ == "__main__":
    run_main(main)

"""Score a retrieval run: answer-match R@k and qrels metrics, one module for every dataset.

    python -m pipeline.evaluation.evaluate --run results/squad/bm25/run.test.parquet \
        --queries resources/squad/queries.test.parquet --qrels resources/squad/qrels.test.parquet \
        --corpus resources/squad/corpus.parquet --dataset squad --method bm25 --split test \
        --ks 1 5 20 100 --match string --out results/squad/bm25/metrics.json

    # exactly what the workflow's job scores: its settings document, then the same paths
    python -m pipeline.workflow.jobs squad evaluate --run bm25 > evaluate.json
    python -m pipeline.evaluation.evaluate --settings evaluate.json --run ... --out ...

The settings (dataset, method, split, ks, match, allow_missing_queries) are a document (--settings FILE,
or --settings-json as the rule passes it; schema: pipeline.core.settings.job_documents.EvaluateJob), each flag over it;
what neither gives is config section eval's default.

Writes ``{"dataset","method","split","n_queries","match","depth",...,"metrics":{...}}``. ``R@k`` is
present only when the queries carry answers (not MS MARCO); qrels metrics only when the qrels file has
rows (not DPR test qa.csv). Definitions: pipeline.evaluation.metrics and docs/evaluation.md.
``--per-query per_query.parquet`` also writes every query's value of each metric (qid + one column
per metric, null where the query is not in the metric's denominator): each metric of metrics.json is
the mean of its column, and gather's paired tests over queries read it.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from rich.progress import Progress

from pipeline.core.cli import check_writable, run_main, stage_parser, start_stage
from pipeline.core.jobs import add_settings_flags, job_settings
from pipeline.core.schemas import CORPUS_SCHEMA, QRELS_SCHEMA, QUERIES_SCHEMA, per_query_schema
from pipeline.core.settings.job_documents import EvaluateJob
from pipeline.core.storage import (
    DataError,
    check_unique,
    open_parquet,
    read_json_object,
    read_table,
    write_json,
    write_table,
)
from pipeline.data.answers import AnswerMatcher
from pipeline.evaluation.metrics import (
    mean_of,
    order_metrics,
    qrels_metrics_per_query,
    top_k_accuracy_per_query,
)
from pipeline.retrieval.runs import ranked_lists, read_run, refuse_first, write_trec

log = logging.getLogger("sieve.evaluate")

_BATCH_ROWS = 65_536
# Top-level keys evaluate owns; an --info file may add others but never overwrite these.
RESERVED_KEYS = ("dataset", "method", "split", "n_queries", "match", "depth", "metrics", "fusion")
# What a weighted-sum hybrid's choice record (pipeline.evaluation.hybrid, fusion.{split}.json) gives
# its metrics.json: the weight the numbers were made with and where it was chosen.
FUSION_KEYS = ("fusion", "weight_dense", "selected_on", "metric")


def load_queries(path: str | os.PathLike) -> dict[str, list[str]]:
    """qid -> answers (possibly empty), in file order."""
    df = read_table(path, columns=["qid", "answers"], schema=QUERIES_SCHEMA)
    if len(df) == 0:
        raise DataError("no queries to evaluate", file=path)
    check_unique(df, "qid", path)
    out: dict[str, list[str]] = {}
    for row, (qid, answers) in enumerate(zip(df["qid"], df["answers"])):
        if qid is None or (isinstance(qid, float) and np.isnan(qid)):
            raise DataError("null qid", file=path, record=row, field="qid")
        answers = [] if answers is None else list(answers)
        if any(a is None for a in answers):
            raise DataError(f"query {qid!r}: null answer string", file=path, record=row, field="answers")
        out[str(qid)] = answers
    return out


def load_qrels(path: str | os.PathLike, known_qids: set[str]) -> dict[str, set[str]]:
    """qid -> relevant pids (relevance >= 1). Rows with relevance < 1 are judgements of
    non-relevance: they neither add a relevant passage nor put a query into the denominator."""
    df = read_table(path, columns=["qid", "pid", "relevance"], schema=QRELS_SCHEMA)
    for col in ("qid", "pid", "relevance"):
        nulls = df[col].isna()
        if nulls.any():
            raise DataError("null value", file=path, record=int(nulls.idxmax()), field=col)
    if not pd.api.types.is_numeric_dtype(df["relevance"]):
        raise DataError(
            f"relevance must be an integer, got {df['relevance'].dtype}", file=path, field="relevance"
        )
    unknown = ~df["qid"].isin(known_qids)
    refuse_first(
        unknown, lambda row: f"qid {df.at[row, 'qid']!r} is not in the evaluated queries", path, "qid"
    )
    positive = df[df["relevance"] >= 1]
    return {qid: set(group) for qid, group in positive.groupby("qid", sort=False)["pid"]}


def load_corpus(path: str | os.PathLike, needed: set[str], matcher: AnswerMatcher | None) -> set[str]:
    """Stream the corpus; feed passages in ``needed`` to ``matcher``; return the pids found.

    Only the run's pids are kept, so memory follows the run, not the corpus. Without a matcher
    (no query has answers) only the pid column is read, to check the run's pids exist.
    """
    path = Path(path)
    columns = ["pid", "text"] if matcher is not None else ["pid"]
    parquet = open_parquet(path, columns, schema=CORPUS_SCHEMA)
    wanted = pa.array(sorted(needed), type=pa.string())
    found: set[str] = set()
    offset = 0
    with Progress(transient=True) as progress:
        task = progress.add_task("reading corpus", total=parquet.metadata.num_rows)
        for batch in parquet.iter_batches(batch_size=_BATCH_ROWS, columns=columns):
            pid_col = batch.column(0).cast(pa.string())
            mask = pc.is_in(pid_col, value_set=wanted)
            rows = np.flatnonzero(mask.to_numpy(zero_copy_only=False))
            if rows.size:
                pids = pid_col.take(pa.array(rows)).to_pylist()
                texts = (
                    batch.column(1).take(pa.array(rows)).to_pylist()
                    if matcher is not None
                    else [None] * len(pids)
                )
                for row, pid, text in zip(rows, pids, texts):
                    if pid in found:
                        raise DataError(
                            f"duplicate pid {pid!r}", file=path, record=offset + int(row), field="pid"
                        )
                    if matcher is not None:
                        if text is None:
                            raise DataError("null text", file=path, record=offset + int(row), field="text")
                        matcher.add_passage(pid, text)
                    found.add(pid)
            offset += batch.num_rows
            progress.update(task, advance=batch.num_rows)
    return found


def prepare_answers(
    answers: dict[str, list[str]], matcher: AnswerMatcher, queries_file: str | os.PathLike
) -> dict[str, list]:
    """qid -> prepared answers for every query, so a bad answer fails even if the run skips it."""
    prepared: dict[str, list] = {}
    for row, (qid, query_answers) in enumerate(answers.items()):  # answers keeps file order
        try:
            prepared[qid] = matcher.prepare_answers(query_answers)
        except ValueError as exc:
            raise DataError(f"query {qid!r}: {exc}", file=queries_file, record=row, field="answers") from None
    return prepared


def first_answer_hits(run: pd.DataFrame, prepared: dict[str, list], matcher: AnswerMatcher) -> dict[str, int]:
    """qid -> rank of the first passage containing an answer, for queries with a hit.

    ``run`` is sorted by (qid, rank); every pid in it has been added to ``matcher``.
    """
    qids = run["qid"].to_numpy()
    pids = run["pid"].to_numpy()
    ranks = run["rank"].to_numpy()
    starts = np.flatnonzero(np.r_[True, qids[1:] != qids[:-1]]) if len(run) else np.array([], int)
    ends = np.r_[starts[1:], len(run)]
    hits: dict[str, int] = {}
    with Progress(transient=True) as progress:
        task = progress.add_task("matching answers", total=len(starts))
        for start, end in zip(starts, ends):
            qid = qids[start]
            if prepared[qid]:
                for i in range(start, end):
                    if matcher.matches(prepared[qid], pids[i]):
                        hits[qid] = int(ranks[i])
                        break
            progress.update(task, advance=1)
    return hits


def read_finite_run(run_path: str | os.PathLike, known: set[str]) -> pd.DataFrame:
    """``read_run`` that also refuses NaN/inf scores, naming their usual cause."""
    advice = (
        "non-finite scores come from non-finite embeddings: the model diverged in training; "
        "retrain it, then encode and search again"
    )
    try:
        run = read_run(run_path, known)
    except DataError as exc:
        if exc.field != "score":
            raise
        # pandas reads NaN as null: say what a NaN score means, not just "null value".
        raise DataError(
            f"null or NaN score: {advice}", file=exc.file, record=exc.record, field="score"
        ) from None
    infinite = ~np.isfinite(run["score"].to_numpy(dtype=np.float64))
    if infinite.any():
        row = int(run.index[np.argmax(infinite)])
        raise DataError(
            f"non-finite score {run.at[row, 'score']}: {advice}", file=run_path, record=row, field="score"
        )
    return run


def check_ranked_queries(
    run: pd.DataFrame,
    answers: dict[str, list[str]],
    run_path: str | os.PathLike,
    queries_path: str | os.PathLike,
    allow_missing: bool,
) -> int:
    """How many evaluated queries have no row in the run; an error unless ``allow_missing``.

    A query left out of a run scores 0 everywhere, so a search that silently returned nothing
    (non-finite embeddings, an empty or broken index) would look like a bad model, not a bug.
    """
    ranked = set(run["qid"])
    missing = [qid for qid in answers if qid not in ranked]
    if not missing:
        return 0
    what = (
        f"{len(missing)} of {len(answers)} queries of {queries_path} have no row in the run "
        f"(e.g. qid {missing[0]!r})"
    )
    if not allow_missing:
        raise DataError(
            f"{what}: rerun the retrieval for them (a dense search with non-finite "
            "embeddings returns nothing), or pass --allow-missing-queries to count "
            "them as misses (e.g. BM25 queries sharing no term with the corpus)",
            file=run_path,
            field="qid",
        )
    log.warning("%s; they count as misses", what)
    return len(missing)


def corpus_size(path: str | os.PathLike) -> int:
    """Rows of the corpus (its Parquet footer; no data read)."""
    with open_parquet(path, ["pid"], schema=CORPUS_SCHEMA) as parquet:
        return parquet.metadata.num_rows


def check_depth(depth: int, ks: Sequence[int], n_passages: int, run_path: str | os.PathLike) -> None:
    """Refuse a cut-off deeper than the run: every metric at k would be its value at the run's depth.

    ``depth`` is the run's longest list. A run of a fixed depth ranks min(depth, corpus) passages for
    every query, so a cut-off k is measured only if the run reaches k, or the whole corpus when it
    holds fewer than k passages (then metrics at k are truly those at the corpus size). A run whose
    lists are result sets (BM25: only passages sharing a term, ``allow_missing_queries``) may end
    before k legitimately and is not checked here; eval.depth >= every k is checked with the config.
    """
    cutoff = max(ks)
    if depth < min(cutoff, n_passages):
        raise DataError(
            f"the run ranks at most {depth} passages per query, fewer than the cut-off {cutoff} of --ks "
            f"(the corpus has {n_passages}): every metric at {cutoff} would be its value at {depth}; "
            f"retrieve at depth >= {cutoff} (config eval.depth) or leave the cut-off out",
            file=run_path,
            field="rank",
        )


def evaluate(
    run_path: str | os.PathLike,
    queries_path: str | os.PathLike,
    qrels_path: str | os.PathLike,
    corpus_path: str | os.PathLike,
    ks: Sequence[int],
    match: str = "string",
    qrels_all_path: str | os.PathLike | None = None,
    allow_missing_queries: bool = False,
) -> tuple[dict, pd.DataFrame, pa.Table]:
    """(everything metrics.json holds except dataset/method/split, the validated run, the per-query
    values every metric is the mean of: ``per_query_table``, every evaluated query in file order, null
    where a query is not in a metric's denominator).

    A query of ``queries_path`` with no row in the run is an error unless ``allow_missing_queries``
    (then it counts as a miss and ``n_unranked_queries`` says how many). A run shallower than the
    largest of ``ks`` (and than the corpus) is an error too, unless ``allow_missing_queries`` says its
    lists are result sets that end where the matches end (``check_depth``).
    """
    answers = load_queries(queries_path)
    known = set(answers)
    run = read_finite_run(run_path, known)
    depth = int(run["rank"].max()) if len(run) else 0
    with_answers = sum(1 for a in answers.values() if a)
    matcher = AnswerMatcher(match) if with_answers else None
    prepared = prepare_answers(answers, matcher, queries_path) if matcher is not None else {}
    needed = set(run["pid"])
    found = load_corpus(corpus_path, needed, matcher)
    if len(found) < len(needed):
        refuse_first(
            ~run["pid"].isin(found),
            lambda row: (
                f"pid {run.at[row, 'pid']!r} is not in the corpus {corpus_path} "
                f"({len(needed) - len(found)} unknown pids)"
            ),
            run_path,
            "pid",
        )
    # After the inputs' own checks, so a bad answer or pid is reported as such first.
    unranked = check_ranked_queries(run, answers, run_path, queries_path, allow_missing_queries)
    if not allow_missing_queries:
        check_depth(depth, ks, corpus_size(corpus_path), run_path)

    info: dict = {
        "n_queries": len(answers),
        "match": match,
        "depth": depth,
        "n_ranked_queries": int(run["qid"].nunique()),
    }
    if unranked:
        info["n_unranked_queries"] = unranked
    per_query: dict[str, dict[str, float]] = {}
    if matcher is not None:
        if with_answers < len(answers):
            # Kept in the denominator (DPR: accuracy over ALL questions) but worth knowing about.
            log.warning(
                "%d of %d queries have no answers; they count as misses in R@k",
                len(answers) - with_answers,
                len(answers),
            )
            info["n_queries_without_answers"] = len(answers) - with_answers
        hits = first_answer_hits(run, prepared, matcher)
        values = top_k_accuracy_per_query([hits.get(qid) for qid in answers], ks)
        per_query.update({name: dict(zip(answers, column)) for name, column in values.items()})
    ranked = None
    for path, suffix, with_recall in ((qrels_path, "", True), (qrels_all_path, "_all", False)):
        if path is None:
            continue
        qrels = load_qrels(path, known)
        if not qrels:
            continue
        if ranked is None:
            ranked = ranked_lists(run)
        info[f"n_qrels{suffix}_queries"] = len(qrels)
        # nDCG@10 over the annotated qrels only: BEIR's and MTEB's figure, comparable across papers.
        per_query.update(
            qrels_metrics_per_query(
                ranked, qrels, ks, suffix=suffix, with_recall=with_recall, with_ndcg=not suffix
            )
        )
    if not per_query:
        raise DataError(
            "nothing to evaluate: no query has answers and the qrels are empty", file=queries_path
        )
    # Each metric is computed from the values written per query, so the two cannot disagree.
    info["metrics"] = order_metrics({name: mean_of(values.values()) for name, values in per_query.items()})
    return info, run, per_query_table(list(answers), {name: per_query[name] for name in info["metrics"]})


def per_query_table(qids: Sequence[str], per_query: Mapping[str, Mapping[str, float]]) -> pa.Table:
    """qid (in ``qids`` order), then one column per metric (in ``per_query`` order): the query's value,
    null when the query is not in the metric's denominator (not in the qrels)."""
    known = set(qids)
    for name, values in per_query.items():
        stray = next((qid for qid in values if qid not in known), None)
        if stray is not None:
            raise ValueError(f"{name}: qid {stray!r} is not among the evaluated queries")
    columns = {"qid": list(qids)}
    for name, values in per_query.items():
        columns[name] = [values.get(qid) for qid in qids]
    return pa.Table.from_pydict(columns, schema=per_query_schema(list(per_query)))


def _read_info(path: str) -> dict:
    info = read_json_object(path)
    clash = sorted(set(info) & set(RESERVED_KEYS))
    if clash:
        raise DataError(
            f"keys {clash} are written by the evaluator and cannot be overridden", file=path, field=clash[0]
        )
    return info


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser("pipeline.evaluation.evaluate", __doc__.split("\n")[0])
    parser.add_argument("--run", required=True, help="run Parquet: qid, pid, rank (1-based), score")
    parser.add_argument("--queries", required=True, help="queries Parquet: qid, text, answers")
    parser.add_argument("--qrels", required=True, help="qrels Parquet (may be empty)")
    parser.add_argument("--qrels-all", help="synthkb: qrels_all Parquet -> hit_all@k, MRR_all@10")
    parser.add_argument("--corpus", required=True, help="corpus Parquet: pid, title, text")
    add_settings_flags(parser, EvaluateJob, "settings (config section eval) and labels")
    parser.add_argument("--out", required=True, help="metrics JSON to write")
    parser.add_argument("--trec", help="also export the run as TREC (qid Q0 pid rank score method)")
    parser.add_argument(
        "--per-query",
        help="also write every query's value of each metric to this Parquet (qid + one column per metric)",
    )
    parser.add_argument("--info", help="JSON object of extra fields to carry (notes, seeds, ...)")
    parser.add_argument(
        "--fusion",
        help="a weighted-sum hybrid's fusion.{split}.json: its chosen weight is recorded under `fusion`",
    )
    parser.add_argument("--log", help="append the log to this file")
    args = parser.parse_args(argv)
    job = job_settings(EvaluateJob, args)  # before any work: a bad document or flag is one line
    start_stage(args.log)
    check_writable(args.out, args.trec, args.per_query)
    ks = sorted(job.ks)
    extra = _read_info(args.info) if args.info else {}
    if args.fusion:
        choice = read_json_object(args.fusion, keys=FUSION_KEYS)
        extra["fusion"] = {key: choice[key] for key in FUSION_KEYS}

    result, run, per_query = evaluate(
        args.run,
        args.queries,
        args.qrels,
        args.corpus,
        ks,
        job.match,
        args.qrels_all,
        allow_missing_queries=job.allow_missing_queries,
    )
    if args.trec:
        write_trec(run, args.trec, job.method, file=args.run)
        log.info("wrote %s", args.trec)
    metrics = result.pop("metrics")
    out = {
        "dataset": job.dataset,
        "method": job.method,
        "split": job.split,
        **result,
        **extra,
        "metrics": metrics,
    }
    if args.per_query:
        write_table(args.per_query, per_query)
        log.info("wrote %s", args.per_query)
    write_json(args.out, out)
    log.info(
        "%s/%s (%s, %d queries): %s",
        job.dataset,
        job.method,
        job.split,
        out["n_queries"],
        ", ".join(f"{k} {v:.4f}" for k, v in metrics.items()),
    )
    return 0


if __name__ == "__main__":
    run_main(main)

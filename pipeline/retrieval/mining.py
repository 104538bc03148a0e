"""Hard-negative mining from any ranking: BM25's (pipeline.retrieval.bm25 mine) or a dense retriever's
run of the train queries (rule mine_dense_negatives -> results/{dataset}/negatives/{model}.parquet).

    python -m pipeline.retrieval.mining --run results/D/negatives/dpr.run.train.parquet \
        --queries resources/D/queries.train.parquet --qrels resources/D/qrels.train.parquet \
        --corpus resources/D/corpus.parquet --negatives 100 [--exclude-answer-match] --source dpr \
        --out results/D/negatives/dpr.parquet

    # exactly what the workflow's job mines with: its settings document, then the same paths
    python -m pipeline.workflow.jobs D mine_dense_negatives > mine.json
    python -m pipeline.retrieval.mining --settings mine.json --run ... --source dpr --out ...

The settings (pipeline.core.settings.job_documents.MineJob, BM25 mining's too: bm25.negatives and
exclude_answer_match, eval.match) come as one document, the workflow's job's (``--settings-json``) or a
file (``--settings``), each flag over it; without either, the contract's.

Both miners apply one rule, so a dense negatives file is interchangeable with bm25.parquet (same schema,
MINED_NEGATIVES_SCHEMA): per train query, walk its ranking top-down, skip its annotated positives
(qrels relevance > 0), and keep candidates until ``negatives`` usable ones are found. With
``exclude_answer_match`` (the DPR/NQ recipe) a candidate containing an answer string is kept as a row
but marked ``excluded`` and does not count, so the list goes deeper; ``has_answer`` is recorded on every
row. A ranking too shallow to give ``negatives`` usable candidates is logged and counted
(``short_queries`` in the stats), never padded.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.core.cli import run_main, stage_parser, start_stage
from pipeline.core.jobs import add_settings_flags, job_settings
from pipeline.core.schemas import CORPUS_SCHEMA, MINED_NEGATIVES_SCHEMA, QRELS_SCHEMA, QUERIES_SCHEMA
from pipeline.core.settings.job_documents import MineJob
from pipeline.core.storage import DataError, open_parquet, read_table, write_json, write_table
from pipeline.data.answers import AnswerMatcher

log = logging.getLogger("sieve.mining")

CORPUS_BATCH = 20_000
# One query's ranking with positives removed: (qid, answers, [(pid, score), ...] best first).
Candidates = tuple[str, list[str], list[tuple[str, float]]]


def load_matcher(corpus_path: str | Path, pids: set[str], mode: str) -> AnswerMatcher:
    """An answer matcher holding only the passages in ``pids`` (the corpus is streamed)."""
    matcher = AnswerMatcher(mode)
    wanted = pa.array(sorted(pids), pa.string())
    parquet = open_parquet(corpus_path, ["pid", "text"], schema=CORPUS_SCHEMA)
    for batch in parquet.iter_batches(batch_size=CORPUS_BATCH, columns=["pid", "text"]):
        table = pa.Table.from_batches([batch])
        kept = table.filter(pc.is_in(table.column("pid"), value_set=wanted)).to_pydict()
        for pid, text in zip(kept["pid"], kept["text"]):
            matcher.add_passage(pid, text)
    return matcher


def read_positives(qrels_path: str | Path) -> dict[str, set[str]]:
    """qid -> its annotated positives (relevance > 0)."""
    qrels = read_table(qrels_path, ["qid", "pid", "relevance"], schema=QRELS_SCHEMA)
    return qrels[qrels["relevance"] > 0].groupby("qid")["pid"].apply(set).to_dict()


def train_positives(qids: Iterable[str], qrels_path: str | Path) -> tuple[dict[str, set[str]], list[str]]:
    """The annotated positives of each train query (read_positives) and the queries without any, in
    query order; those are warned about, not refused: their negatives are still mined."""
    positives = read_positives(qrels_path)
    missing = [q for q in qids if q not in positives]
    if missing:
        log.warning(
            "%d train queries have no positive in %s (first: %s); their negatives are still mined",
            len(missing),
            qrels_path,
            missing[0],
        )
    return positives, missing


def mining_depth(n_negatives: int, positives: dict[str, set[str]], exclude_answer_match: bool) -> int:
    """How deep to rank so that removing positives (and answer matches) still leaves n_negatives."""
    depth = n_negatives + max((len(p) for p in positives.values()), default=0)
    return depth * 3 if exclude_answer_match else depth


def negatives_table(
    candidates: Iterable[Candidates],
    matcher: AnswerMatcher,
    n_negatives: int,
    *,
    exclude_answer_match: bool,
    source: str,
    queries_path: str | Path,
) -> tuple[pa.Table, dict]:
    """(the negatives table, counts) from each query's positive-free ranking: see the module doc."""
    rows: dict[str, list] = {k: [] for k in MINED_NEGATIVES_SCHEMA.names}
    n_answer = short = 0
    for qid, answers, hits in candidates:
        try:
            prepared = matcher.prepare_answers(answers)
        except ValueError as exc:
            raise DataError(str(exc), file=queries_path, record=qid, field="answers") from None
        usable = 0
        for rank, (pid, score) in enumerate(hits, start=1):
            if usable >= n_negatives:
                break
            matched = bool(prepared) and matcher.matches(prepared, pid)
            excluded = exclude_answer_match and matched
            n_answer += matched
            usable += not excluded
            for key, value in zip(
                MINED_NEGATIVES_SCHEMA.names, (qid, pid, rank, score, source, matched, excluded)
            ):
                rows[key].append(value)
        short += usable < n_negatives
    return pa.table(rows, schema=MINED_NEGATIVES_SCHEMA), {"answer_matches": n_answer, "short_queries": short}


def mine_from_run(
    run_path: str | Path,
    queries_path: str | Path,
    qrels_path: str | Path,
    corpus_path: str | Path,
    n_negatives: int,
    out: str | Path,
    *,
    source: str,
    exclude_answer_match: bool = False,
    match: str = "string",
) -> dict:
    """Negatives of every train query from a run of the train queries (RUN_SCHEMA, best rank first)."""
    from pipeline.retrieval.runs import read_run

    queries = read_table(queries_path, ["qid", "text", "answers"], schema=QUERIES_SCHEMA)
    known = set(queries["qid"])
    run = read_run(run_path, known)
    positives, missing = train_positives(queries["qid"], qrels_path)
    unranked = known - set(run["qid"])
    if unranked:
        raise DataError(
            f"{len(unranked)} train queries have no row in the run (e.g. {sorted(unranked)[0]!r}): "
            "mine from a run of every train query",
            file=run_path,
            field="qid",
        )
    # Per-query slices of the run's arrays, walked lazily: no second copy of a run that at NQ scale
    # holds tens of millions of rows.
    run_qids, run_pids = run["qid"].to_numpy(), run["pid"].to_numpy()
    run_scores = run["score"].to_numpy(np.float64)
    starts = np.flatnonzero(np.r_[True, run_qids[1:] != run_qids[:-1]])
    bounds = dict(zip(run_qids[starts], zip(starts, np.r_[starts[1:], len(run_qids)])))
    answers_of = {q: (list(a) if a is not None else []) for q, a in zip(queries["qid"], queries["answers"])}
    needed = {pid for qid, (lo, hi) in bounds.items() if answers_of[qid] for pid in run_pids[lo:hi]}
    matcher = load_matcher(corpus_path, needed, match)

    def candidates():
        for qid in queries["qid"]:
            lo, hi = bounds[qid]
            pos = positives.get(qid, set())
            yield (
                qid,
                answers_of[qid],
                [(p, float(s)) for p, s in zip(run_pids[lo:hi], run_scores[lo:hi]) if p not in pos],
            )

    table, counts = negatives_table(
        candidates(),
        matcher,
        n_negatives,
        exclude_answer_match=exclude_answer_match,
        source=source,
        queries_path=queries_path,
    )
    write_table(out, table)
    stats = {
        "source": source,
        "queries": len(queries),
        "rows": table.num_rows,
        **counts,
        "run_depth": int(run["rank"].max()) if len(run) else 0,
        "negatives": n_negatives,
        "queries_without_positive": len(missing),
        "exclude_answer_match": exclude_answer_match,
    }
    if counts["short_queries"]:
        log.warning(
            "%d of %d queries got fewer than %d usable negatives: the run (depth %d) is too shallow",
            counts["short_queries"],
            len(queries),
            n_negatives,
            stats["run_depth"],
        )
    log.info("mined %s negatives: %s -> %s", source, stats, out)
    return stats


def main(argv: Sequence[str] | None = None) -> int:
    parser = stage_parser("pipeline.retrieval.mining", __doc__)
    for flag in ("--run", "--queries", "--qrels", "--corpus", "--out"):
        parser.add_argument(flag, required=True)
    parser.add_argument("--source", required=True, help="the miner's name, written in the `source` column")
    add_settings_flags(parser, MineJob, "mining (section bm25, eval.match)")
    parser.add_argument("--stats-out", help="also write the counts as JSON")
    parser.add_argument("--log")
    args = parser.parse_args(argv)
    job = job_settings(MineJob, args)  # before any work: a bad document or flag is one line
    start_stage(args.log)
    stats = mine_from_run(
        args.run,
        args.queries,
        args.qrels,
        args.corpus,
        job.negatives,
        args.out,
        source=args.source,
        exclude_answer_match=job.exclude_answer_match,
        match=job.match,
    )
    if args.stats_out:
        write_json(args.stats_out, stats)
    return 0


if __name__ == "__main__":
    run_main(main)

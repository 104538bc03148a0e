"""The candidate set every filter judges, with false-negative labels where the truth is known.

    python -m pipeline.workflow.jobs D sieve_candidates > candidates.json
    python -m pipeline.sieve.candidates --settings candidates.json \
        --negatives results/D/negatives/bm25.parquet \
        --qrels resources/D/qrels.train.parquet [--qrels-all resources/D/qrels_all.train.parquet] \
        --queries resources/D/queries.train.parquet --corpus resources/D/corpus.parquet \
        [--candidates 30 --pool 100 ...: over the document] --out results/D/sieve/candidates.parquet

The settings (pipeline.core.settings.job_documents.CandidatesJob) come as one document, the workflow's job's
(``--settings-json``) or a file (``--settings``), each flag over it.

Labels (``is_false_negative``, ``fn_label_source``), first rule that applies wins:

1. ``injected``: a known positive moved into the candidate list (the paper's simulation) -> true.
2. ``qrels_all``: the dataset ships exact truth (synthkb): true iff the pid is in the query's
   qrels_all, false otherwise.
3. ``injected`` (other rows of an injected query, no qrels_all): false - the simulation assumes the
   mined candidates of that query are negatives.
4. ``suspected`` (SQuAD): same article as the positive (same title) and contains an answer string ->
   null: a suspicion is reported separately and never counted as truth.
5. otherwise null / null (truth unknown).
"""

from __future__ import annotations

import logging
import os

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.core.cli import run_main, stage_parser, start_stage
from pipeline.core.jobs import add_settings_flags, job_settings
from pipeline.core.schemas import CANDIDATES_SCHEMA
from pipeline.core.seeding import item_rng, stable_hash
from pipeline.core.settings.job_documents import CandidatesJob
from pipeline.core.storage import DataError, write_table
from pipeline.data.answers import AnswerMatcher
from pipeline.sieve.data import NegativesFile, iter_corpus, load_passages, read_positives, read_queries
from pipeline.sieve.passage_sieve import select_candidates

log = logging.getLogger("sieve.fn_labels")

FN_SOURCES = ("qrels_all", "injected", "suspected")


def injection_queries(eligible: list[str], fraction: float, seed: int) -> set[str]:
    """Exactly round(fraction * len(eligible)) queries, chosen by a seeded hash (order independent)."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"injection fraction must be in [0, 1], got {fraction}")
    n = int(round(fraction * len(eligible)))
    ranked = sorted(eligible, key=lambda q: (stable_hash(f"{seed}/inject/{q}"), q))
    return set(ranked[:n])


def inject_positives(
    cands: pd.DataFrame, positives: dict[str, list[str]], fraction: float, seed: int
) -> pd.DataFrame:
    """Move extra known positives into the candidate lists of a fraction of the eligible queries.

    Eligible: > 1 known positive. The first positive stays the training positive; every other one
    replaces a randomly chosen candidate slot (so the list length is unchanged), keeping that slot's
    rank, with ``source = "injected"`` and no source score. Adds a bool column ``injected``.
    """
    cands = cands.copy()
    cands["injected"] = False
    eligible = sorted(q for q in cands["qid"].unique() if len(positives.get(q, [])) > 1)
    chosen = injection_queries(eligible, fraction, seed)
    if not chosen:
        return cands
    for qid in sorted(chosen):
        rows = np.flatnonzero((cands["qid"] == qid).to_numpy())
        extra = positives[qid][1:][: len(rows)]
        slots = item_rng(seed, f"inject/{qid}").choice(len(rows), size=len(extra), replace=False)
        for pid, slot in zip(extra, slots):
            row = cands.index[rows[slot]]
            cands.loc[row, ["pid", "source", "injected"]] = [pid, "injected", True]
            cands.loc[row, "source_score"] = np.nan
            cands.loc[row, "has_answer"] = pd.NA
    log.info(
        "injection: %d of %d eligible queries, %d positives moved into candidate lists",
        len(chosen),
        len(eligible),
        int(cands["injected"].sum()),
    )
    return cands


def assign_labels(
    cands: pd.DataFrame, positives_all: dict[str, set[str]] | None, suspected: np.ndarray | None = None
) -> pd.DataFrame:
    """Add ``is_false_negative`` (nullable bool) and ``fn_label_source`` by the module's rules."""
    n = len(cands)
    is_fn = pd.array([pd.NA] * n, dtype="boolean")
    source = np.array([None] * n, dtype=object)
    injected = cands["injected"].to_numpy(bool) if "injected" in cands else np.zeros(n, bool)
    injected_q = set(cands.loc[injected, "qid"])
    qids, pids = cands["qid"].to_numpy(), cands["pid"].to_numpy()
    for i in range(n):
        if injected[i]:
            is_fn[i], source[i] = True, "injected"
        elif positives_all is not None and qids[i] in positives_all:
            is_fn[i], source[i] = pids[i] in positives_all[qids[i]], "qrels_all"
        elif qids[i] in injected_q:
            is_fn[i], source[i] = False, "injected"
        elif suspected is not None and suspected[i]:
            source[i] = "suspected"
    out = cands.copy()
    out["is_false_negative"] = is_fn
    out["fn_label_source"] = pd.array(source, dtype="string")
    return out


def suspected_mask(cands: pd.DataFrame, titles: pd.Series) -> np.ndarray:
    """SQuAD: the candidate is in the positive's article (same non-empty title) and has an answer."""
    cand_title = titles.reindex(cands["pid"]).to_numpy()
    pos_title = titles.reindex(cands["positive_pid"]).to_numpy()
    has_answer = cands["has_answer"].fillna(False).to_numpy(bool)
    same = np.array([bool(a) and a == b for a, b in zip(cand_title, pos_title)], dtype=bool)
    return same & has_answer


def fill_has_answer(
    cands: pd.DataFrame,
    queries: pd.DataFrame,
    corpus: str | os.PathLike,
    queries_path: str | os.PathLike,
    match: str,
) -> pd.DataFrame:
    """Compute has_answer (DPR matching) where the negatives file did not provide it."""
    answers = {q: list(a) if a is not None else [] for q, a in zip(queries["qid"], queries["answers"])}
    todo = cands["has_answer"].isna().to_numpy() & np.array([bool(answers[q]) for q in cands["qid"]])
    if not todo.any():
        return cands
    matcher = AnswerMatcher(match)
    for part in iter_corpus(corpus, set(cands.loc[todo, "pid"]), columns=("pid", "text")):
        for pid, text in zip(part["pid"], part["text"]):
            matcher.add_passage(pid, text)
    prepared: dict[str, list] = {}
    values = cands["has_answer"].copy()
    for i in np.flatnonzero(todo):
        qid, pid = cands["qid"].iat[i], cands["pid"].iat[i]
        if qid not in prepared:
            try:
                prepared[qid] = matcher.prepare_answers(answers[qid])
            except ValueError as exc:
                raise DataError(str(exc), file=queries_path, record=qid, field="answers") from None
        if pid not in matcher:
            raise DataError(f"candidate pid {pid!r} is not in the corpus", file=corpus, field="pid")
        values.iat[i] = matcher.matches(prepared[qid], pid)
    out = cands.copy()
    out["has_answer"] = values
    return out


def build_candidates(
    negatives: str | os.PathLike,
    qrels: str | os.PathLike,
    queries: str | os.PathLike,
    corpus: str | os.PathLike,
    *,
    candidates: int,
    pool: int,
    seed: int,
    qrels_all: str | os.PathLike | None = None,
    injection_fraction: float = 0.0,
    suspect_same_article: bool = False,
    match: str = "string",
    max_queries: int | None = None,
) -> pd.DataFrame:
    """The labelled candidate table (CANDIDATES_SCHEMA columns), sorted by qid then rank.

    The negatives table is streamed twice, never held whole: once by (qid, pid, excluded) to find
    the queries that can be sieved (and with ``max_queries`` the seeded sample among them), once
    by whole queries to select each one's candidates (NegativesFile), so memory holds the candidate
    rows kept (candidates x queries sieved), not the ~pool x queries rows of the table.
    """
    positives = read_positives(qrels)
    pos_sets = {q: set(p) for q, p in positives.items()}

    def annotated(rows: pd.DataFrame) -> np.ndarray:
        # object arrays: iterating Arrow-backed string columns costs ~0.6 us a value (a third of the time)
        qids, pids = rows["qid"].to_numpy(dtype=object), rows["pid"].to_numpy(dtype=object)
        return np.fromiter((p in pos_sets.get(q, ()) for q, p in zip(qids, pids)), bool, len(rows))

    negs_file = NegativesFile(negatives)
    last_row: dict[str, int] = {}
    sieved: set[str] = set()  # queries with a usable candidate and a positive
    no_positive: set[str] = set()
    n_annotated = 0
    for part in negs_file.batches(["qid", "pid", "excluded"]):
        last_row.update(zip(part["qid"].to_numpy(dtype=object), part.index))  # the last row stays
        if "excluded" in part:
            part = part[~part["excluded"].astype(bool)]
        marked = annotated(part)
        n_annotated += int(marked.sum())
        for qid in part.loc[~marked, "qid"].unique():
            (sieved if qid in positives else no_positive).add(qid)
    if n_annotated:
        log.warning(
            "%d rows of %s are annotated positives of their query; they are not candidates",
            n_annotated,
            negatives,
        )
    if no_positive:
        log.warning(
            "%d queries with negatives have no positive in %s and cannot be sieved (first: %s)",
            len(no_positive),
            qrels,
            min(no_positive),
        )
    if max_queries is not None and len(sieved) > max_queries:
        keep = sorted(sieved, key=lambda q: (stable_hash(f"{seed}/sieve-queries/{q}"), q))
        sieved = set(keep[:max_queries])
        log.info("max_queries: sieving a seeded sample of %d queries", max_queries)
    sieved_ids = pa.array(sorted(sieved), pa.string())  # once: Series.isin rebuilds its set per call
    parts = []
    for negs in negs_file.queries(last_row):
        negs = negs[~annotated(negs)]
        negs = negs[pc.is_in(pa.array(negs["qid"], pa.string()), value_set=sieved_ids).to_numpy(False)]
        parts.append(select_candidates(negs, n_candidates=candidates, pool=pool, seed=seed))
    # Each query's rows come from one piece, in (rank, pid) order: the final sort gives the one order.
    parts = [p for p in parts if len(p)] or parts[:1]
    cands = pd.concat(parts).reset_index(drop=True) if len(parts) > 1 else parts[0]
    cands = cands.rename(columns={"score": "source_score"})
    cands["positive_pid"] = cands["qid"].map(lambda q: positives[q][0])
    if injection_fraction > 0:
        cands = inject_positives(cands, positives, injection_fraction, seed)
    query_table = read_queries(queries, cands["qid"].unique())
    cands = fill_has_answer(cands, query_table, corpus, queries, match)
    suspected = None
    if suspect_same_article:
        titles = load_passages(corpus, set(cands["pid"]) | set(cands["positive_pid"]))["title"]
        suspected = suspected_mask(cands, titles)
    positives_all = None
    if qrels_all is not None:
        positives_all = {q: set(p) for q, p in read_positives(qrels_all).items()}
        missing = sorted(set(cands["qid"]) - set(positives_all))
        if missing:
            log.warning(
                "%d candidate queries are not in %s; their truth is unknown (first: %s)",
                len(missing),
                qrels_all,
                missing[0],
            )
    cands = assign_labels(cands, positives_all, suspected)
    return cands.sort_values(["qid", "rank"], kind="stable").reset_index(drop=True)


def candidates_table(cands: pd.DataFrame) -> pa.Table:
    return pa.Table.from_pandas(
        cands[CANDIDATES_SCHEMA.names], schema=CANDIDATES_SCHEMA, preserve_index=False
    )


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser("pipeline.sieve.candidates", __doc__)
    parser.add_argument("--negatives", required=True, help="negatives Parquet (bm25.parquet layout)")
    parser.add_argument("--qrels", required=True, help="qrels.train.parquet (annotated positives)")
    parser.add_argument("--qrels-all", default=None, help="qrels_all.train.parquet (exact truth)")
    parser.add_argument("--queries", required=True)
    parser.add_argument("--corpus", required=True)
    add_settings_flags(parser, CandidatesJob, "settings (config section sieve; --match: eval.match)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--log", default=None)
    args = parser.parse_args(argv)
    job = job_settings(CandidatesJob, args)  # before any work: a bad document or flag is one line
    start_stage(args.log)
    cands = build_candidates(
        args.negatives, args.qrels, args.queries, args.corpus, qrels_all=args.qrels_all, **job.model_dump()
    )
    write_table(args.out, candidates_table(cands))
    counts = cands["fn_label_source"].value_counts(dropna=False).to_dict()
    log.info(
        "%d candidates for %d queries -> %s; false negatives: %d; label sources: %s",
        len(cands),
        cands["qid"].nunique(),
        args.out,
        int(cands["is_false_negative"].fillna(False).sum()),
        counts,
    )
    return 0


if __name__ == "__main__":
    run_main(main)

"""Training examples for the dense retriever: queries, their positive, and sampled hard negatives.

Inputs (canonical tables, pipeline.core.storage):
- ``queries.train.parquet`` (qid, text) and ``qrels.train.parquet`` (qid, pid, relevance): the positive
  of a query is its highest-relevance row (ties -> first row); every relevance ≥ 1 row is a positive.
- a negatives table (``results/{dataset}/negatives/bm25.parquet``): qid, pid, rank and optionally
  ``excluded``; rows with excluded=True and pids that are positives of the query are never negatives.
  The candidates of a query are its first ``depth`` remaining rows by rank.
- ``corpus.parquet``: streamed once; only the passages that can appear in training are kept, as Arrow
  arrays (no per-string Python objects).

Randomness: the k hard negatives of a query in an epoch come from ``item_rng(seed, qid, epoch)`` and the
order of an epoch from a seeded permutation, so they do not depend on batch order, on the number of
ranks, or on where a run was resumed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.core.schemas import CORPUS_SCHEMA, MINED_NEGATIVES_SCHEMA, QRELS_SCHEMA, QUERIES_SCHEMA
from pipeline.core.seeding import item_rng
from pipeline.core.storage import DataError, check_unique, open_parquet, read_table

log = logging.getLogger("sieve.train_data")

_CORPUS_BATCH = 65_536


@dataclass
class Batch:
    """One (micro-)batch: Q queries and Q·(k+1) passages laid out [pos, neg1..negk] per query."""

    qids: list[str]
    query_texts: list[str]
    passage_titles: list[str]
    passage_texts: list[str]
    group_size: int
    # Only with extra positive slots (method dpr_relabel_<detector>): the store id of each passage
    # column (-1 for an empty slot) and each query's positive ids (its qrels positives).
    passage_ids: np.ndarray | None = None
    positive_sets: list[list[int]] | None = None


class PassageStore:
    """Titles and texts of a fixed set of passages, addressed by a dense integer id."""

    def __init__(self, pids: np.ndarray, titles: pa.Array, texts: pa.Array):
        self.pids = pids
        self.titles = titles
        self.texts = texts

    def __len__(self) -> int:
        return len(self.pids)

    @classmethod
    def from_corpus(
        cls, corpus_path: str | Path, pids: np.ndarray, source_of: Callable[[str], str] | None = None
    ) -> "PassageStore":
        """Stream the corpus keeping ``pids`` (unique); a pid not in the corpus is a DataError.

        ``source_of(pid)`` names the file that referenced a pid, for the error message.
        """
        corpus_path = Path(corpus_path)
        parquet = open_parquet(
            corpus_path,
            ["pid", "title", "text"],
            schema=CORPUS_SCHEMA,
            missing="file not found (did the data stage run?)",
        )
        wanted = pa.array(pids, type=pa.string())
        positions, titles, texts = [], [], []
        for batch in parquet.iter_batches(batch_size=_CORPUS_BATCH, columns=["pid", "title", "text"]):
            where = pc.index_in(batch.column(0), value_set=wanted)
            keep = pc.is_valid(where)
            if not pc.any(keep).as_py():
                continue
            positions.append(pc.filter(where, keep))
            titles.append(pc.filter(batch.column(1), keep).cast(pa.large_string()))
            texts.append(pc.filter(batch.column(2), keep).cast(pa.large_string()))
        pos = pa.concat_arrays(positions).to_numpy() if positions else np.zeros(0, dtype=np.int32)
        found = np.zeros(len(pids), dtype=bool)
        hits = np.bincount(pos, minlength=len(pids))
        if len(pos) and hits.max() > 1:
            dup = pids[int(np.argmax(hits))]
            raise DataError(
                f"pid {dup!r} occurs more than once; pids must be unique", file=corpus_path, field="pid"
            )
        found[pos] = True
        if not found.all():
            missing = pids[~found]
            where_from = source_of(missing[0]) if source_of else "a training input"
            raise DataError(
                f"{len(missing)} pid(s) referenced by {where_from} are not in the corpus "
                f"{corpus_path} (first: {missing[0]!r})",
                file=where_from,
                field="pid",
            )
        # Reorder so that row i holds pids[i].
        order = np.empty(len(pids), dtype=np.int64)
        order[pos] = np.arange(len(pos))
        title_arr = pa.concat_arrays(titles).take(pa.array(order))
        text_arr = pa.concat_arrays(texts).take(pa.array(order))
        return cls(pids, title_arr, text_arr)

    def get(self, ids: np.ndarray) -> tuple[list[str], list[str]]:
        idx = pa.array(np.asarray(ids, dtype=np.int64))
        return self.titles.take(idx).to_pylist(), self.texts.take(idx).to_pylist()


def load_queries_with_positives(
    queries_path: str | Path, qrels_path: str | Path, drop_without_positive: bool = False
) -> tuple[pd.DataFrame, pd.DataFrame, frozenset[str]]:
    """Return (queries sorted by qid with a ``positive`` column, all positive pairs, dropped qids).

    A train query without a positive is a DataError unless ``drop_without_positive``; dropped
    queries are counted and logged, never skipped silently.
    """
    queries = read_table(queries_path, columns=["qid", "text"], schema=QUERIES_SCHEMA)
    check_unique(queries, "qid", queries_path)
    for col in ("qid", "text"):
        if queries[col].isna().any():
            raise DataError(
                "null value", file=queries_path, record=int(queries[col].isna().idxmax()), field=col
            )
    qrels = read_table(qrels_path, columns=["qid", "pid", "relevance"], schema=QRELS_SCHEMA)
    for col in ("qid", "pid", "relevance"):
        if qrels[col].isna().any():
            raise DataError("null value", file=qrels_path, record=int(qrels[col].isna().idxmax()), field=col)
    unknown = ~qrels["qid"].isin(queries["qid"])
    if unknown.any():
        row = int(unknown.idxmax())
        raise DataError(
            f"qid {qrels.at[row, 'qid']!r} is not in {queries_path}", file=qrels_path, record=row, field="qid"
        )
    positives = qrels[qrels["relevance"] >= 1].reset_index(drop=True)
    # Highest relevance, ties -> first row: a stable sort keeps file order within equal relevance.
    best = (
        positives.assign(_row=np.arange(len(positives)))
        .sort_values(["relevance", "_row"], ascending=[False, True], kind="stable")
        .drop_duplicates("qid", keep="first")
        .set_index("qid")["pid"]
    )
    queries = queries.assign(positive=queries["qid"].map(best))
    missing = queries["positive"].isna()
    n_dropped = int(missing.sum())
    if n_dropped:
        first = queries.loc[missing, "qid"].iloc[0]
        if not drop_without_positive:
            raise DataError(
                f"train query {first!r} has no positive (no row with relevance >= 1); "
                f"{n_dropped} such queries in total. Fix the data or set the option to "
                f"drop them (drop_queries_without_positive)",
                file=qrels_path,
                record=f"qid {first}",
                field="qid",
            )
        log.warning(
            "dropped %d train queries without a positive in %s (first: %r)", n_dropped, qrels_path, first
        )
    dropped = frozenset(queries.loc[missing, "qid"])
    queries = queries[~missing].sort_values("qid", kind="stable").reset_index(drop=True)
    return queries, positives[["qid", "pid"]], dropped


def load_candidates(
    negatives_path: str | Path,
    queries: pd.DataFrame,
    positives: pd.DataFrame,
    depth: int,
    dropped: frozenset[str] = frozenset(),
) -> pd.DataFrame:
    """Rows (qid, pid, rank) usable as hard negatives: not excluded, not a positive, top ``depth``."""
    negatives_path = Path(negatives_path)
    if not negatives_path.exists():
        raise DataError("file not found (did the negative-mining stage run?)", file=negatives_path)
    # Mined, sieved and shipped negatives share these columns' types; shipped ones have no `excluded`.
    neg = read_table(
        negatives_path,
        columns=["qid", "pid", "rank", "excluded"],
        schema=MINED_NEGATIVES_SCHEMA,
        optional=("excluded",),
    )
    for col in neg.columns:
        if neg[col].isna().any():
            raise DataError(
                "null value", file=negatives_path, record=int(neg[col].isna().idxmax()), field=col
            )
    unknown = ~neg["qid"].isin(queries["qid"])
    if unknown.any():
        # Rows of queries dropped for lacking a positive are expected; any other qid is a mismatch
        # between the negatives and the train queries (e.g. mined for another split).
        stray = unknown & ~neg["qid"].isin(dropped)
        if stray.any():
            row = int(stray.idxmax())
            raise DataError(
                f"qid {neg.at[row, 'qid']!r} is not a train query",
                file=negatives_path,
                record=row,
                field="qid",
            )
        neg = neg[~unknown]
    if "excluded" in neg:
        neg = neg[~neg["excluded"].astype(bool)]
    is_pos = pd.MultiIndex.from_frame(neg[["qid", "pid"]]).isin(
        pd.MultiIndex.from_frame(positives[["qid", "pid"]])
    )
    neg = neg[~is_pos]
    neg = neg.sort_values(["qid", "rank"], kind="stable")
    neg = neg.drop_duplicates(["qid", "pid"], keep="first")
    return neg.groupby("qid", sort=False).head(depth)[["qid", "pid", "rank"]].reset_index(drop=True)


def sample_negatives(
    candidates: np.ndarray,
    k: int,
    rng: np.random.Generator,
    pool: np.ndarray | None = None,
    exclude: np.ndarray | None = None,
) -> np.ndarray:
    """k hard negatives from a query's candidates (without replacement when there are enough).

    Fewer than k candidates: all of them, topped up by draws with replacement. None at all: draws from
    ``pool`` (every query's candidates), rejecting the query's own positives (``exclude``).
    """
    if k == 0:
        return candidates[:0]
    n = len(candidates)
    if n >= k:
        return candidates[rng.choice(n, size=k, replace=False)]
    if n > 0:
        extra = candidates[rng.integers(0, n, size=k - n)]
        return np.concatenate([candidates[rng.permutation(n)], extra])
    if pool is None or len(pool) == 0:
        raise ValueError("no candidates and no pool to draw negatives from")
    banned = set(exclude.tolist()) if exclude is not None else set()
    out: list = []
    for _ in range(1000):  # rejection sampling; the pool is huge compared with one query's positives
        out.extend(p for p in pool[rng.integers(0, len(pool), size=k)] if p not in banned)
        if len(out) >= k:
            return np.asarray(out[:k], dtype=pool.dtype)
    raise ValueError("could not draw negatives: the pool holds only positives of this query")


def epoch_order(n: int, seed: int, epoch: int) -> np.ndarray:
    """The order queries are visited in an epoch: a seeded permutation, fresh each epoch."""
    return item_rng(seed, "__epoch_order__", epoch).permutation(n)


def micro_batch_indices(
    order: np.ndarray, micro_index: int, batch_size: int, rank: int = 0, world_size: int = 1
) -> np.ndarray:
    """This rank's slice of global micro-batch ``micro_index`` (contiguous, in rank order).

    Concatenating the ranks' slices gives exactly the single-process batch, so gathered in-batch
    negatives line up with the single-process layout (DistributedSampler-equivalent sharding).
    """
    if batch_size % world_size:
        raise ValueError(f"batch_size {batch_size} is not divisible by the {world_size} ranks")
    per_rank = batch_size // world_size
    start = micro_index * batch_size + rank * per_rank
    return order[start : start + per_rank]


@dataclass(frozen=True)
class TrainInputs:
    """The training tables: train queries, their qrels, mined negatives, the corpus (what TrainData
    reads and train_dense trains a retriever on; the cross_encoder filter's model trains on them too)."""

    queries: str | Path
    qrels: str | Path
    negatives: str | Path
    corpus: str | Path


class TrainData:
    """Queries + positives + candidate negatives + the passages they need, ready to batch."""

    def __init__(
        self,
        inputs: TrainInputs,
        *,
        depth: int,
        seed: int,
        drop_without_positive: bool = False,
    ):
        queries, positives, dropped = load_queries_with_positives(
            inputs.queries, inputs.qrels, drop_without_positive
        )
        if queries.empty:
            raise DataError("no train queries with a positive", file=inputs.queries)
        cand = load_candidates(inputs.negatives, queries, positives, depth, dropped)
        self.seed = seed
        self.negatives_path = str(inputs.negatives)
        self.n_dropped = len(dropped)
        self.qids: list[str] = queries["qid"].tolist()
        self.query_texts: list[str] = queries["text"].tolist()

        # Dense ids for every passage that can be trained on; candidates as a CSR over queries.
        all_pids = pd.concat([queries["positive"], cand["pid"], positives["pid"]], ignore_index=True)
        codes, uniques = pd.factorize(all_pids)
        uniques = np.asarray(uniques, dtype=object)
        n_q = len(queries)
        self.positive_ids = codes[:n_q].astype(np.int64)
        cand_codes = codes[n_q : n_q + len(cand)].astype(np.int64)
        pos_codes = codes[n_q + len(cand) :].astype(np.int64)
        q_index = pd.Index(self.qids)
        cand_q = q_index.get_indexer(cand["qid"])
        order = np.argsort(cand_q, kind="stable")  # keeps rank order within a query
        self._cand = cand_codes[order]
        self._cand_ptr = np.searchsorted(cand_q[order], np.arange(n_q + 1))
        pos_q = q_index.get_indexer(positives["qid"])
        keep = pos_q >= 0
        pos_order = np.argsort(pos_q[keep], kind="stable")
        self._pos = pos_codes[keep][pos_order]
        self._pos_ptr = np.searchsorted(pos_q[keep][pos_order], np.arange(n_q + 1))
        self._pool = np.unique(self._cand)

        counts = np.diff(self._cand_ptr)
        self.n_without_candidates = int((counts == 0).sum())
        self.n_short = int(((counts > 0) & (counts < depth)).sum())
        if self.n_without_candidates:
            log.warning(
                "%d train queries have no usable hard-negative candidate in %s; their "
                "negatives are drawn from the other queries' candidates",
                self.n_without_candidates,
                inputs.negatives,
            )

        positive_pids = set(positives["pid"])
        self.passages = PassageStore.from_corpus(
            inputs.corpus,
            uniques,
            source_of=lambda pid: str(inputs.qrels if pid in positive_pids else inputs.negatives),
        )
        log.info(
            "training data: %d queries (%d dropped), %d passages, %.1f candidates/query",
            n_q,
            self.n_dropped,
            len(uniques),
            counts.mean() if n_q else 0.0,
        )

    def __len__(self) -> int:
        return len(self.qids)

    def candidates(self, i: int) -> np.ndarray:
        return self._cand[self._cand_ptr[i] : self._cand_ptr[i + 1]]

    def negatives(self, i: int, k: int, epoch: int) -> np.ndarray:
        """Passage ids of query i's k hard negatives in ``epoch`` (deterministic per qid/epoch/seed)."""
        rng = item_rng(self.seed, self.qids[i], epoch)
        exclude = self._pos[self._pos_ptr[i] : self._pos_ptr[i + 1]]
        return sample_negatives(self.candidates(i), k, rng, pool=self._pool, exclude=exclude)

    def extra_positives(self, i: int, m: int, epoch: int) -> np.ndarray:
        """Up to ``m`` of query i's other positives (qrels rows besides its training positive: the
        relabelled ones), drawn per (seed, qid, epoch) without replacement; -1 fills the slots a query
        has no positive for (an empty slot, left out of every softmax: relabel_labels)."""
        others = self._pos[self._pos_ptr[i] : self._pos_ptr[i + 1]]
        others = others[others != self.positive_ids[i]]
        if len(others) > m:
            others = item_rng(self.seed, f"relabel/{self.qids[i]}", epoch).choice(
                others, size=m, replace=False
            )
        return np.concatenate([others, np.full(m - len(others), -1, dtype=np.int64)])

    def batch(self, indices: np.ndarray, k: int, epoch: int, extra_positives: int = 0) -> Batch:
        """Queries ``indices`` with their groups [positive, k hard negatives, ``extra_positives``
        slots of other positives]: the extras come last so that a group's positive stays its first column."""
        if k and len(self._pool) == 0:
            # sample_negatives would raise a bare ValueError deep in the first step.
            raise DataError(
                "no train query has a hard-negative candidate (a corpus of one passage, or every "
                f"candidate a positive): nothing to draw {k} negatives per query from; "
                "use negatives: 0 (in-batch negatives only) or a larger corpus",
                file=self.negatives_path,
            )
        ids = []
        for i in indices:
            ids.append(self.positive_ids[i])
            ids.extend(self.negatives(int(i), k, epoch).tolist())
            if extra_positives:
                ids.extend(self.extra_positives(int(i), extra_positives, epoch).tolist())
        ids_arr = np.asarray(ids, dtype=np.int64)
        empty = ids_arr < 0
        # An empty slot is encoded as an empty passage: it is in no row's softmax, so its text is moot.
        titles, texts = self.passages.get(np.where(empty, 0, ids_arr))
        for j in np.flatnonzero(empty):
            titles[j], texts[j] = "", ""
        labelled = extra_positives > 0
        return Batch(
            qids=[self.qids[i] for i in indices],
            query_texts=[self.query_texts[i] for i in indices],
            passage_titles=titles,
            passage_texts=texts,
            group_size=k + 1 + extra_positives,
            passage_ids=ids_arr if labelled else None,
            positive_sets=(
                [self._pos[self._pos_ptr[i] : self._pos_ptr[i + 1]].tolist() for i in indices]
                if labelled
                else None
            ),
        )

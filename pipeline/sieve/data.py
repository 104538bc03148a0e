"""Inputs of the sieve stage: validated negatives/qrels tables, streamed passages, cached embeddings.

The sieve scores every (query, candidate) pair of the training set, but a passage is usually a
candidate of many queries. ``encode_unique_passages`` therefore encodes each needed passage once,
streaming the corpus and writing embeddings into a memory-mapped array, so memory stays bounded by
the number of *distinct* candidate passages times the embedding width (on disk, not in RAM).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from rich.progress import Progress

from pipeline.core.schemas import CORPUS_SCHEMA, MINED_NEGATIVES_SCHEMA, QRELS_SCHEMA, QUERIES_SCHEMA
from pipeline.core.storage import (
    DataError,
    arrow_frame,
    check_unique,
    open_parquet,
    read_table,
    refuse_repeat,
)

log = logging.getLogger("sieve.sieve_data")

CORPUS_BATCH = 8_192


# ---- negatives and qrels -------------------------------------------------------------------------


def _first_null(df: pd.DataFrame, columns: Iterable[str], path: Path) -> None:
    for col in columns:
        nulls = df[col].isna().to_numpy()
        if nulls.any():
            raise DataError("null value", file=path, record=int(df.index[np.argmax(nulls)]), field=col)


NEGATIVES_COLUMNS = ["qid", "pid", "rank", "score", "source", "has_answer", "excluded"]
NEGATIVES_OPTIONAL = ("source", "has_answer", "excluded")
NEGATIVES_BATCH = 65_536  # rows per streamed piece (NegativesFile)


def _checked_negatives(df: pd.DataFrame, path: Path) -> pd.DataFrame:
    """read_negatives' checks and rows for ``df``, whose index is the file's row numbers."""
    _first_null(df, [c for c in ("qid", "pid", "rank", "score", "excluded") if c in df], path)
    bad_rank = (df["rank"] < 1).to_numpy()
    if bad_rank.any():
        row = int(np.argmax(bad_rank))
        raise DataError(
            f"rank {df['rank'].iat[row]} < 1 (ranks are 1-based)",
            file=path,
            record=int(df.index[row]),
            field="rank",
        )
    refuse_repeat(
        df,
        ["qid", "pid"],
        lambda row: f"duplicate (qid, pid) = ({df['qid'].iat[row]!r}, {df['pid'].iat[row]!r})",
        path,
        "pid",
    )
    if "excluded" in df:
        df = df[~df["excluded"].astype(bool)]
    out = df[["qid", "pid", "rank", "score"]].copy()
    out["rank"] = out["rank"].astype(np.int64)
    out["score"] = out["score"].astype(np.float64)
    out["has_answer"] = (
        df["has_answer"].astype("boolean")
        if "has_answer" in df
        else pd.array([pd.NA] * len(df), dtype="boolean")
    )
    out["source"] = df["source"].fillna(path.stem).astype(str) if "source" in df else path.stem
    return out


def read_negatives(path: str | os.PathLike) -> pd.DataFrame:
    """A negatives table (bm25.parquet layout), validated; rows marked ``excluded`` are removed.

    Required: qid, pid (string), rank (integer >= 1), score (number); optional: excluded (bool),
    has_answer (bool), source (string; default: the file's stem). A wrong type, a null, a rank < 1 or a duplicate (qid, pid) raises a DataError
    naming the file, the 0-based row and the column.
    """
    path = Path(path)
    df = read_table(path, NEGATIVES_COLUMNS, schema=MINED_NEGATIVES_SCHEMA, optional=NEGATIVES_OPTIONAL)
    return _checked_negatives(df, path).reset_index(drop=True)


class NegativesFile:
    """A negatives table read in pieces, never whole (at NQ scale ~100 rows per train question).

    ``batches`` streams columns; ``queries`` streams read_negatives' rows (same checks, same
    errors) in pieces that each hold every row of their queries, given where each query's last row
    is (``batches`` of qid tells): a query's rows need not be contiguous, a piece is handed out once
    the file has been read past the last row of each of its queries, so memory holds a piece and
    the rows of queries still open (for the miners' files, whose queries are contiguous: one piece).
    """

    def __init__(self, path: str | os.PathLike, batch_rows: int | None = None):
        self.path = Path(path)
        self.batch_rows = batch_rows or NEGATIVES_BATCH
        with open_parquet(
            self.path, NEGATIVES_COLUMNS, schema=MINED_NEGATIVES_SCHEMA, optional=NEGATIVES_OPTIONAL
        ) as parquet:
            self.columns = [c for c in NEGATIVES_COLUMNS if c in parquet.schema_arrow.names]

    def batches(self, columns: Sequence[str]) -> Iterator[pd.DataFrame]:
        """The file's ``columns`` (those present) in pieces indexed by the file's row numbers."""
        start = 0
        with open_parquet(self.path) as parquet:
            for batch in parquet.iter_batches(
                batch_size=self.batch_rows, columns=[c for c in columns if c in self.columns]
            ):
                frame = arrow_frame(pa.Table.from_batches([batch]))
                frame.index = pd.RangeIndex(start, start + len(frame))
                start += len(frame)
                yield frame

    def queries(self, last_row: dict[str, int]) -> Iterator[pd.DataFrame]:
        """read_negatives' rows in pieces of whole queries (``last_row``: qid -> its last row)."""
        last = pd.Series(last_row, dtype=np.int64)  # once: map() turns a dict into a Series per call
        waiting = None
        for part in self.batches(self.columns):
            waiting = part if waiting is None else pd.concat([waiting, part])
            done = waiting["qid"].map(last).to_numpy() <= part.index[-1]
            if done.any():
                yield _checked_negatives(waiting[done], self.path)
                waiting = waiting[~done]
        if waiting is None:  # no rows: one empty piece, typed as read_negatives' rows
            empty = MINED_NEGATIVES_SCHEMA.empty_table().select(self.columns)
            yield _checked_negatives(arrow_frame(empty), self.path)


def read_positives(path: str | os.PathLike) -> dict[str, list[str]]:
    """qid -> positive pids (relevance >= 1) ordered by relevance desc, file order among ties.

    The first pid is the query's training positive (the dense-stage contract).
    """
    path = Path(path)
    qrels = read_table(path, ["qid", "pid", "relevance"], schema=QRELS_SCHEMA)
    _first_null(qrels, ["qid", "pid", "relevance"], path)
    qrels = qrels.reset_index(drop=True)
    qrels["_row"] = np.arange(len(qrels))
    qrels = qrels[qrels["relevance"] >= 1].sort_values(
        ["qid", "relevance", "_row"], ascending=[True, False, True], kind="stable"
    )
    return {qid: list(dict.fromkeys(group["pid"])) for qid, group in qrels.groupby("qid", sort=False)}


def read_queries(path: str | os.PathLike, qids: Iterable[str] | None = None) -> pd.DataFrame:
    """qid, text, answers (list) of the wanted queries; every wanted qid must be present."""
    path = Path(path)
    queries = read_table(path, ["qid", "text", "answers"], schema=QUERIES_SCHEMA)
    check_unique(queries, "qid", path)
    _first_null(queries, ["qid", "text"], path)
    queries = queries.set_index("qid", drop=False)
    if qids is not None:
        wanted = list(dict.fromkeys(qids))
        missing = [q for q in wanted if q not in queries.index]
        if missing:
            raise DataError(
                f"{len(missing)} query ids used by the candidates are not in the queries "
                f"file (first: {missing[0]!r})",
                file=path,
                field="qid",
            )
        queries = queries.loc[wanted]
    return queries.reset_index(drop=True)


# ---- passages ------------------------------------------------------------------------------------


def iter_corpus(corpus_path: str | os.PathLike, pids: Iterable[str], columns=("pid", "title", "text")):
    """Stream the corpus, yielding DataFrames holding only the rows whose pid is in ``pids``."""
    wanted = pa.array(sorted(set(pids)), pa.string())
    parquet = open_parquet(corpus_path, list(columns), schema=CORPUS_SCHEMA)
    for batch in parquet.iter_batches(batch_size=CORPUS_BATCH, columns=list(columns)):
        table = pa.Table.from_batches([batch])
        kept = table.filter(pc.is_in(table.column("pid"), value_set=wanted))
        if kept.num_rows:
            yield arrow_frame(kept)


def load_passages(corpus_path: str | os.PathLike, pids: Iterable[str]) -> pd.DataFrame:
    """pid-indexed title/text of ``pids``; a pid missing from the corpus is a DataError."""
    pids = set(pids)
    parts = list(iter_corpus(corpus_path, pids))
    found = pd.concat(parts) if parts else pd.DataFrame(columns=["pid", "title", "text"])
    found = found.drop_duplicates("pid").set_index("pid")
    missing = pids - set(found.index)
    if missing:
        raise DataError(
            f"{len(missing)} passage ids are not in the corpus (first: {sorted(missing)[0]!r})",
            file=corpus_path,
            field="pid",
        )
    found["title"] = found["title"].fillna("")
    return found


def encode_unique_passages(
    retriever,
    corpus_path: str | os.PathLike,
    pids: Iterable[str],
    work_dir: str | os.PathLike,
    batch_size: int = 64,
) -> tuple[dict[str, int], np.ndarray]:
    """Encode each distinct pid once; return pid -> row and a float32 memmap [n_pids, dim] (L2-normalised).

    Rows are assigned in sorted-pid order, so the result does not depend on the corpus order.
    """
    order = sorted(set(pids))
    index = {pid: i for i, pid in enumerate(order)}
    dim = retriever.query_model.config.hidden_size
    path = Path(work_dir) / "passage_embeddings.npy"
    emb = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(len(order), dim))
    done = np.zeros(len(order), dtype=bool)
    with Progress(transient=True) as progress:
        task = progress.add_task("sieve: encoding candidate passages", total=len(order))
        for part in iter_corpus(corpus_path, index):
            part = part.drop_duplicates("pid")
            rows = np.fromiter((index[p] for p in part["pid"]), dtype=np.int64, count=len(part))
            vecs = retriever.encode_passages(
                part["title"].fillna("").tolist(), part["text"].tolist(), batch_size=batch_size
            )
            emb[rows] = normalize_rows(vecs)
            done[rows] = True
            progress.advance(task, len(part))
    if not done.all():
        first = order[int(np.argmin(done))]
        raise DataError(
            f"{int((~done).sum())} candidate/positive passage ids are not in the corpus (first: {first!r})",
            file=corpus_path,
            field="pid",
        )
    emb.flush()
    return index, emb


def normalize_rows(vecs: np.ndarray) -> np.ndarray:
    """L2-normalise rows (the sieve uses cosine similarity whatever the model's own setting)."""
    vecs = np.asarray(vecs, dtype=np.float32)
    norms = np.linalg.norm(vecs, axis=1, keepdims=True)
    return vecs / np.maximum(norms, 1e-12)

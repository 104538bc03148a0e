"""AR2 round inputs: exact top-k search over a retriever's corpus embeddings, negative mining.

A round's ``embeddings/`` folder is written by the encode_corpus / gather_embeddings rules (the shared
shard layout of ``pipeline.retrieval.embeddings``: fp16 shards + pids + manifest); exact search is that of
``pipeline.retrieval.search`` (torch backend: streams the shards, memory is one chunk plus queries x k
whatever the corpus size).

Mined negatives (``round{r}/negatives.parquet``) follow the BM25 negatives layout (qid, pid, rank,
score, source, has_answer, excluded) plus ``positive_score``, the mining retriever's similarity of the
query's training positive (SimANS needs s+). The query's annotated positives (every qrels row with
relevance >= 1) are removed; with ``exclude_answer_match`` the candidates that contain an answer
string are kept as rows but marked ``excluded`` (DPR/AR2 recipe for NQ/TQ), so the choice is auditable.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.core.schemas import AR2_NEGATIVES_SCHEMA, RUN_SCHEMA
from pipeline.core.storage import DataError, write_table
from pipeline.retrieval.embeddings import EmbeddingSet, read_rows
from pipeline.retrieval.mining import load_matcher

log = logging.getLogger("sieve.ar2_data")

_SEARCH_CHUNK = 65_536


# ---- encoding and search (pipeline.retrieval.encode / pipeline.retrieval.search) ---------------------------------------


def search(
    query_emb: np.ndarray, emb_dir: str | os.PathLike, k: int, chunk_rows: int = _SEARCH_CHUNK, device=None
) -> tuple[np.ndarray, np.ndarray]:
    """Exact inner-product top-k (``pipeline.retrieval.search.search_torch``): (pids [nq, k], scores), best
    first, ties broken by pid."""
    import torch

    from pipeline.retrieval.search import search_torch

    emb = EmbeddingSet(emb_dir)
    k = min(k, emb.count)
    device = torch.device(device) if device is not None else torch.device("cpu")
    rows, scores, pids = search_torch(
        emb_dir,
        np.asarray(query_emb, dtype=np.float32),
        k,
        chunk_rows=chunk_rows,
        device=device,
        progress=False,
    )
    ids = pids.to_numpy(zero_copy_only=False)
    return ids[rows], scores.astype(np.float32)


def run_table(qids: Sequence[str], pids: np.ndarray, scores: np.ndarray) -> pa.Table:
    """A run (RUN_SCHEMA) from search results, ranks 1..k per query."""
    nq, k = pids.shape
    return pa.table(
        {
            "qid": np.repeat(np.asarray(qids, dtype=object), k),
            "pid": pids.reshape(-1),
            "rank": np.tile(np.arange(1, k + 1, dtype=np.int32), nq),
            "score": scores.reshape(-1).astype(np.float32),
        },
        schema=RUN_SCHEMA,
    )


def lookup_embeddings(emb_dir: str | os.PathLike, pids: Sequence[str]) -> np.ndarray:
    """float32 embeddings of ``pids`` (in that order) from a gathered folder, one shard at a time."""
    emb = EmbeddingSet(emb_dir)
    wanted = pa.array(list(pids), pa.string())
    out = np.zeros((len(wanted), emb.dim), dtype=np.float32)
    found = np.zeros(len(wanted), dtype=bool)
    for shard in emb.shards:
        shard_ids = emb.ids([shard.index])
        pos = pc.index_in(wanted, value_set=shard_ids)  # row of each wanted pid in this shard
        hit = pc.is_valid(pos).to_numpy(zero_copy_only=False)
        if hit.any():
            rows = pc.filter(pos, pc.is_valid(pos)).to_numpy()
            emb.verify(shard)
            out[hit] = read_rows(shard.embeddings, rows).astype(np.float32)
            found |= hit
    if not found.all():
        first = wanted[int(np.argmin(found))].as_py()
        raise DataError(
            f"{int((~found).sum())} pids are not in the embeddings (first: {first!r})",
            file=Path(emb_dir) / "manifest.json",
            field="pid",
        )
    return out


# ---- mining -----------------------------------------------------------------------------------------


def mine_negatives(
    query_emb: np.ndarray,
    queries: pd.DataFrame,
    positives: dict[str, list[str]],
    emb_dir: str | os.PathLike,
    corpus_path: str | os.PathLike,
    *,
    top_k: int,
    exclude_answer_match: bool,
    match: str,
    source: str,
    queries_file: str | os.PathLike = "train queries",
    device=None,
) -> tuple[pa.Table, dict]:
    """Top-k of every train query minus its positives (+ answer-match flags); returns (table, stats).

    ``queries``: qid, text, answers in the order of ``query_emb`` rows; ``positives``: qid ->
    positive pids, the training positive first. Depth goes past ``top_k`` by the number of positives,
    so removing them still leaves ``top_k`` rows where the corpus allows.
    """
    extra = max((len(p) for p in positives.values()), default=0)
    pids, scores = search(query_emb, emb_dir, top_k + extra, device=device)
    qids = queries["qid"].tolist()
    pos_pids = [positives[q][0] for q in qids]
    pos_emb = lookup_embeddings(emb_dir, pos_pids)
    pos_scores = np.einsum("ij,ij->i", np.asarray(query_emb, np.float32), pos_emb)
    answers = [list(a) if a is not None else [] for a in queries["answers"]]
    needed = {pid for row, ans in zip(pids, answers) if ans for pid in row}
    matcher = load_matcher(corpus_path, needed, match) if needed else None
    cols: dict[str, list] = {name: [] for name in AR2_NEGATIVES_SCHEMA.names}
    n_matched = n_excluded = 0
    for i, qid in enumerate(qids):
        prepared = []
        if answers[i]:
            try:
                prepared = matcher.prepare_answers(answers[i])
            except ValueError as exc:
                raise DataError(str(exc), file=queries_file, record=f"qid {qid}", field="answers") from None
        pos = set(positives[qid])
        kept = [(pid, s) for pid, s in zip(pids[i], scores[i]) if pid not in pos][:top_k]
        for rank, (pid, score) in enumerate(kept, start=1):
            matched = bool(prepared) and matcher.matches(prepared, pid)
            excluded = exclude_answer_match and matched
            n_matched += matched
            n_excluded += excluded
            for name, value in zip(
                AR2_NEGATIVES_SCHEMA.names,
                (qid, pid, rank, float(score), source, matched, excluded, float(pos_scores[i])),
            ):
                cols[name].append(value)
    table = pa.table(cols, schema=AR2_NEGATIVES_SCHEMA)
    stats = {
        "queries": len(qids),
        "rows": table.num_rows,
        "answer_matches": n_matched,
        "excluded": n_excluded,
        "top_k": top_k,
        "exclude_answer_match": exclude_answer_match,
    }
    return table, stats


def stats_path(table: str | os.PathLike) -> Path:
    """Where a round table's statistics go: ``negatives.parquet`` -> ``negatives.stats.json``."""
    table = Path(table)
    return table.with_name(table.name.split(".")[0] + ".stats.json")


def write_negatives(path: str | os.PathLike, table: pa.Table) -> None:
    write_table(path, table, schema=AR2_NEGATIVES_SCHEMA)

"""The passage sieve inside an AR2 round (variants ``sieve`` and ``simans_sieve``).

The round's mined negatives become the sieve's candidates (``pipeline.sieve.candidates.build_candidates``:
``sieve.candidates`` sampled per query from the top ``sieve.pool``, false-negative labels where the
truth is known), scored by the sieve model and judged by ``pipeline.sieve.passage_sieve.sieve_table`` (Algorithm 1,
same rule, fallback and schema as the stand-alone sieve). The sieve model is chosen by
``ar2.sieve_init``:

- ``initial``: the CCR model trained once from DPR (``models/dpr_ccr_b{beta}``). Its corpus embeddings
  are already on disk (``embeddings/dpr_ccr_b{beta}``), so a round only encodes its train queries.
- ``warm``: the authors' scripts' loop: CCR fine-tuning of the warm-up checkpoint (``models/dpr``) on the
  round's negatives (``pipeline.training.train_dense`` with the ``ccr`` settings), then scoring with it
  (each distinct candidate passage encoded once).
- ``current``: the same fine-tuning, started from the round's own starting retriever (round r-1).
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

import pandas as pd
import pyarrow as pa

from pipeline.ar2.data import lookup_embeddings
from pipeline.core.schemas import SIEVE_SCHEMA
from pipeline.core.storage import DataError, write_table
from pipeline.retrieval.model import Retriever
from pipeline.sieve.candidates import build_candidates
from pipeline.sieve.data import normalize_rows, read_queries
from pipeline.sieve.passage_sieve import (
    Similarities,
    embedding_similarities,
    model_similarities,
    query_offsets,
    query_positives,
    sieve_table,
)

log = logging.getLogger("sieve.ar2_sieving")

SIEVE_INITS = ("initial", "current")


def cached_similarities(
    cands: pd.DataFrame,
    model_dir: str | os.PathLike,
    emb_dir: str | os.PathLike,
    queries_path: str | os.PathLike,
    *,
    batch_size: int = 64,
    temperature: float | None = None,
) -> Similarities:
    """Cosine similarities of candidates and positives from a model's stored corpus embeddings.

    Same result as ``pipeline.sieve.passage_sieve.model_similarities`` up to fp16 storage of the passage vectors,
    without re-encoding any passage.
    """
    qids, offsets = query_offsets(cands["qid"].to_numpy())
    retriever = Retriever.load(model_dir)
    if temperature is None:
        temperature = retriever.settings.temperature if retriever.settings.similarity == "cosine" else 1.0
    query_table = read_queries(queries_path, qids)
    q_emb = normalize_rows(retriever.encode_queries(query_table["text"].tolist(), batch_size=batch_size))
    needed = sorted(set(cands["pid"]) | set(query_positives(cands, offsets)))
    p_emb = normalize_rows(lookup_embeddings(emb_dir, needed))
    index = {pid: i for i, pid in enumerate(needed)}
    return embedding_similarities(cands, qids, offsets, q_emb, index, p_emb, temperature)


def sieve_round(
    negatives: str | os.PathLike,
    out: str | os.PathLike,
    *,
    queries: str | os.PathLike,
    qrels: str | os.PathLike,
    corpus: str | os.PathLike,
    sieve_cfg: dict,
    seed: int,
    model_dir: str | os.PathLike,
    model_embeddings: str | os.PathLike | None,
    qrels_all: str | os.PathLike | None = None,
    suspect_same_article: bool = False,
    match: str = "string",
) -> dict:
    """Sieve a round's negatives into ``out`` (SIEVE_SCHEMA); return statistics.

    ``model_embeddings``: the sieve model's gathered corpus embeddings (``initial``), or None to
    encode the candidates with ``model_dir`` (``current``).
    """
    cands = build_candidates(
        negatives,
        qrels,
        queries,
        corpus,
        n_candidates=int(sieve_cfg["candidates"]),
        pool=int(sieve_cfg["pool"]),
        seed=seed,
        qrels_all=qrels_all,
        suspect_same_article=suspect_same_article,
        match=match,
    )
    if cands.empty:
        raise DataError("no candidates to sieve (every mined row was excluded?)", file=negatives)
    batch_size = int(sieve_cfg.get("batch_size", 64))
    temperature = sieve_cfg.get("temperature")
    if model_embeddings is not None:
        sims = cached_similarities(
            cands, model_dir, model_embeddings, queries, batch_size=batch_size, temperature=temperature
        )
        table = sieve_table(
            cands, sims, strict=bool(sieve_cfg["strict"]), fallback=sieve_cfg["fallback"], seed=seed
        )
    else:
        out_dir = Path(out).parent
        with tempfile.TemporaryDirectory(prefix=".sieve-", dir=out_dir) as work:
            sims = model_similarities(
                cands, model_dir, corpus, queries, work, batch_size=batch_size, temperature=temperature
            )
            table = sieve_table(
                cands, sims, strict=bool(sieve_cfg["strict"]), fallback=sieve_cfg["fallback"], seed=seed
            )
            del sims  # release the memmap before its folder goes
    write_table(out, pa.Table.from_pandas(table, schema=SIEVE_SCHEMA, preserve_index=False))
    labelled = table["is_false_negative"].notna()
    stats = {
        "queries": int(table["qid"].nunique()),
        "candidates": len(table),
        "kept": int(table["kept"].sum()),
        "sieve_out_rate": float(1 - table["kept"].mean()),
        "fallback_queries": int(table["fallback"].sum()),
    }
    if labelled.any():
        fn = table["is_false_negative"].fillna(False).astype(bool) & labelled
        dropped = ~table["kept"]
        stats["false_negatives"] = int(fn.sum())
        stats["false_negative_recall"] = float((fn & dropped).sum() / fn.sum()) if fn.sum() else None
        tn = labelled & ~fn
        stats["true_negative_retention"] = float((tn & ~dropped).sum() / tn.sum()) if tn.sum() else None
    log.info("sieve: %s -> %s", stats, out)
    return stats


def kept_pairs(sieve_path: str | os.PathLike) -> pd.DataFrame:
    """(qid, pid) rows the sieve kept, in rank order."""
    from pipeline.core.storage import read_table

    table = read_table(sieve_path, columns=["qid", "pid", "rank", "kept"], schema=SIEVE_SCHEMA)
    return table[table["kept"].astype(bool)].sort_values(["qid", "rank"], kind="stable")[["qid", "pid"]]

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

The two fine-tunings are the DAG's rule ``ar2_train_sieve_model`` (train_ccr's rule on the round's
negatives); this module judges:

    python -m pipeline.ar2.sieving --negatives .../round2/negatives.parquet --out .../round2/sieve.parquet \
        --queries ... --qrels ... --corpus ... --model results/synthkb/models/dpr_ccr_b6 \
        [--embeddings results/synthkb/embeddings/dpr_ccr_b6] --seed 0 --candidates 30

    # exactly what the workflow's job sieves with: its settings document (the run's seed: --seed), then
    # the same paths
    python -m pipeline.workflow.jobs synthkb ar2_sieve --seed 0 > sieve.json
    python -m pipeline.ar2.sieving --settings sieve.json --negatives ... --out ...

The settings are a document (--settings FILE, or --settings-json as the rules pass it; schema:
pipeline.core.settings.job_documents.Ar2SieveJob), each flag over it; what neither gives is the contract's default.

``<out stem>.stats.json`` (sieve-out rate, false-negative recall where the truth is known) is written
before the table.
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

from pipeline.ar2.data import lookup_embeddings, stats_path
from pipeline.core.cli import add_job_flags, run_main, stage_parser
from pipeline.core.jobs import add_settings_flags, run_job
from pipeline.core.schemas import SIEVE_SCHEMA
from pipeline.core.settings.job_documents import Ar2SieveJob
from pipeline.core.storage import DataError, write_json, write_table
from pipeline.retrieval.encode import resolve_device
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


def cached_similarities(
    cands: pd.DataFrame,
    model_dir: str | os.PathLike,
    emb_dir: str | os.PathLike,
    queries_path: str | os.PathLike,
    *,
    batch_size: int = 64,
    temperature: float | None = None,
    device: str = "auto",
) -> Similarities:
    """Cosine similarities of candidates and positives from a model's stored corpus embeddings.

    Same result as ``pipeline.sieve.passage_sieve.model_similarities`` up to fp16 storage of the passage vectors,
    without re-encoding any passage.
    """
    qids, offsets = query_offsets(cands["qid"].to_numpy())
    retriever = Retriever.load(model_dir).to(resolve_device(device))
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
    job: Any,
    model_dir: str | os.PathLike,
    model_embeddings: str | os.PathLike | None,
    qrels_all: str | os.PathLike | None = None,
    device: str = "auto",
) -> dict:
    """Sieve a round's negatives into ``out`` (SIEVE_SCHEMA) with the settings ``job`` (an Ar2SieveJob),
    after its statistics (``stats_path``); return them.

    ``model_embeddings``: the sieve model's gathered corpus embeddings (``initial``), or None to
    encode the candidates with ``model_dir`` (``current``).
    """
    tick = time.perf_counter()
    cands = build_candidates(
        negatives,
        qrels,
        queries,
        corpus,
        candidates=job.candidates,
        pool=job.pool,
        seed=job.seed,
        qrels_all=qrels_all,
        suspect_same_article=job.suspect_same_article,
        match=job.match,
    )
    if cands.empty:
        raise DataError("no candidates to sieve (every mined row was excluded?)", file=negatives)
    scoring = dict(batch_size=job.batch_size, temperature=job.temperature, device=device)
    rule = dict(strict=job.strict, fallback=job.fallback, seed=job.seed)
    if model_embeddings is not None:
        sims = cached_similarities(cands, model_dir, model_embeddings, queries, **scoring)
        table = sieve_table(cands, sims, **rule)
    else:
        out_dir = Path(out).parent
        with tempfile.TemporaryDirectory(prefix=".sieve-", dir=out_dir) as work:
            sims = model_similarities(cands, model_dir, corpus, queries, work, **scoring)
            table = sieve_table(cands, sims, **rule)
            del sims  # release the memmap before its folder goes
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
    stats["wall_s"] = round(time.perf_counter() - tick, 3)
    write_json(stats_path(out), stats)
    write_table(out, pa.Table.from_pandas(table, schema=SIEVE_SCHEMA, preserve_index=False))
    log.info("sieve: %s -> %s", stats, out)
    return stats


def kept_pairs(sieve_path: str | os.PathLike) -> pd.DataFrame:
    """(qid, pid) rows the sieve kept, in rank order."""
    from pipeline.core.storage import read_table

    table = read_table(sieve_path, columns=["qid", "pid", "rank", "kept"], schema=SIEVE_SCHEMA)
    return table[table["kept"].astype(bool)].sort_values(["qid", "rank"], kind="stable")[["qid", "pid"]]


def build_parser() -> argparse.ArgumentParser:
    ap = stage_parser("pipeline.ar2.sieving", __doc__)
    ap.add_argument("--negatives", required=True, help="the round's mined negatives (pipeline.ar2.mine)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--queries", required=True)
    ap.add_argument("--qrels", required=True)
    ap.add_argument("--qrels-all", help="exact truth (synthkb): labels false negatives")
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--model", required=True, help="the sieve model's folder")
    ap.add_argument("--embeddings", help="its gathered corpus embeddings (default: encode the candidates)")
    add_settings_flags(ap, Ar2SieveJob, "settings (config section sieve, eval.match, the run's seed)")
    add_job_flags(ap)
    return ap


def _sieve(args: argparse.Namespace, job: Ar2SieveJob) -> None:
    sieve_round(
        args.negatives,
        args.out,
        queries=args.queries,
        qrels=args.qrels,
        corpus=args.corpus,
        job=job,
        model_dir=args.model,
        model_embeddings=args.embeddings,
        qrels_all=args.qrels_all,
        device=args.device,
    )


def main(argv: list[str] | None = None) -> int:
    return run_job(build_parser(), Ar2SieveJob, _sieve, argv)


if __name__ == "__main__":
    run_main(main)

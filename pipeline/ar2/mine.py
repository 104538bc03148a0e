"""AR2 mining: each train query's top ``ar2.top_k`` under a retriever and its corpus embeddings.

    python -m pipeline.ar2.mine --retriever results/synthkb/models/dpr \
        --embeddings results/synthkb/embeddings/dpr --queries resources/synthkb/queries.train.parquet \
        --qrels resources/synthkb/qrels.train.parquet --corpus resources/synthkb/corpus.parquet \
        --top-k 30 --source ar2/start --out results/synthkb/ar2/start/negatives.parquet

    # exactly what the workflow's job mines with: its settings document, then the same paths
    python -m pipeline.workflow.jobs synthkb ar2_mine > mine.json
    python -m pipeline.ar2.mine --settings mine.json --retriever ... --out ...

The settings are a document (--settings FILE, or --settings-json as the rules pass it; schema:
pipeline.core.settings.job_documents.Ar2MineJob), each flag over it; what neither gives is the contract's default.

The DAG runs it once per dataset with the DPR start (``ar2/start/negatives.parquet``: round 1 of every
AR2 variant and seed, and the trained ranker, read it) and once per later round with the previous
round's retriever and its sharded-then-gathered embeddings (``round{r}/negatives.parquet``). Layout and
rules: pipeline.ar2.data (positives removed, answer matches flagged, ``excluded`` with
``--exclude-answer-match``). ``<out stem>.stats.json`` is written before the table.
"""

from __future__ import annotations

import argparse
import logging
import time
from typing import Any

from pipeline.ar2.data import mine_negatives, stats_path, write_negatives
from pipeline.ar2.round_data import load_retriever
from pipeline.ar2.settings import RETRIEVER_OVERRIDE_KEYS, Ar2Settings
from pipeline.core.cli import add_job_flags, run_main, stage_parser
from pipeline.core.jobs import add_settings_flags, run_job
from pipeline.core.schemas import QUERIES_SCHEMA
from pipeline.core.settings.flags import pick
from pipeline.core.settings.job_documents import Ar2MineJob
from pipeline.core.storage import read_table, write_json
from pipeline.retrieval.encode import resolve_device
from pipeline.training.data import load_queries_with_positives

log = logging.getLogger("sieve.ar2_mine")


def mine_round(args: argparse.Namespace, job: Any) -> dict:
    """Mine with the settings ``job`` (an Ar2MineJob), write the stats then the table; return the stats."""
    device = resolve_device(args.device)
    retriever = load_retriever(args.retriever, pick(Ar2Settings, job, names=RETRIEVER_OVERRIDE_KEYS), device)
    tick = time.perf_counter()
    queries, positives, dropped = load_queries_with_positives(
        args.queries, args.qrels, drop_without_positive=True
    )
    answers = read_table(args.queries, columns=["qid", "answers"], schema=QUERIES_SCHEMA).set_index("qid")[
        "answers"
    ]
    queries = queries.assign(answers=queries["qid"].map(answers))
    # The training positive first, then the query's other annotated positives.
    pos_map = {q: [p] for q, p in zip(queries["qid"], queries["positive"])}
    for qid, pid in zip(positives["qid"], positives["pid"]):
        if qid in pos_map and pid not in pos_map[qid]:
            pos_map[qid].append(pid)
    q_emb = retriever.encode_queries(queries["text"].tolist())
    table, stats = mine_negatives(
        q_emb,
        queries,
        pos_map,
        args.embeddings,
        args.corpus,
        top_k=job.top_k,
        exclude_answer_match=job.exclude_answer_match,
        match=job.match,
        source=args.source,
        queries_file=args.queries,
        device=device,
    )
    stats.update(
        queries_without_positive=len(dropped),
        retriever=str(args.retriever),
        embeddings=str(args.embeddings),
        wall_s=round(time.perf_counter() - tick, 3),
    )
    write_json(stats_path(args.out), stats)
    write_negatives(args.out, table)
    log.info("mined %d rows for %d queries -> %s", stats["rows"], stats["queries"], args.out)
    return stats


def build_parser() -> argparse.ArgumentParser:
    ap = stage_parser("pipeline.ar2.mine", __doc__)
    ap.add_argument("--retriever", required=True, help="retriever folder that encodes the queries")
    ap.add_argument("--embeddings", required=True, help="its gathered corpus embeddings folder")
    ap.add_argument("--queries", required=True)
    ap.add_argument("--qrels", required=True)
    ap.add_argument("--corpus", required=True)
    add_settings_flags(ap, Ar2MineJob, "settings (config section ar2, eval.match)")
    ap.add_argument("--source", required=True, help="the value of the table's source column")
    ap.add_argument("--out", required=True)
    add_job_flags(ap)
    return ap


def main(argv: list[str] | None = None) -> int:
    return run_job(build_parser(), Ar2MineJob, mine_round, argv)


if __name__ == "__main__":
    run_main(main)

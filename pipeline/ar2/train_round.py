"""One AR2 round's training: ranker steps, then retriever steps, on the round's (sieved) negatives.

    python -m pipeline.ar2.train_round --round 2 --sampling uniform --seed 0 \
        --round-dir results/synthkb/ar2/sieve_b6/seed0/round2 \
        --mined results/synthkb/ar2/sieve_b6/seed0/round2/negatives.parquet \
        --sieve results/synthkb/ar2/sieve_b6/seed0/round2/sieve.parquet \
        --queries resources/synthkb/queries.train.parquet --qrels resources/synthkb/qrels.train.parquet \
        --corpus resources/synthkb/corpus.parquet --retriever .../round1/retriever \
        --ranker .../round1/ranker --carry .../round1/carry [settings flags: --retriever-steps 8 ...]

    # exactly what the workflow's job trains with: its settings document (the variant's sampling and the
    # run's seed: --variant, --seed), then the same paths
    python -m pipeline.workflow.jobs synthkb ar2_train --variant sieve --seed 0 > round.json
    python -m pipeline.ar2.train_round --settings round.json --round 2 --round-dir ... --mined ...

The settings are a document (--settings FILE, or --settings-json as the rules pass it; schema:
pipeline.core.settings.job_documents.Ar2TrainJob), each flag over it; what neither gives is the contract's default.

Writes into the round folder ``ranker/``, ``retriever/`` (complete once ``retriever.json`` exists),
``carry/state.pt`` (the optimizer and scheduler state the next round continues from: the schedules span
all rounds), ``train_log.jsonl`` and ``train.summary.json``. Round 1 has no ``--carry``; its ranker is
``--ranker`` (a trained one: ``ar2.ranker_init`` cross_encoder or listwise) or, without it, ar2.ranker's
base encoder with a new head.

A killed job rerun continues from ``train.ckpt/`` when that checkpoint was written for the same
settings, seed and input files (``train.ckpt/fingerprint.json``) and replays the remaining steps bit
for bit (pipeline.ar2.train); a checkpoint of anything else is discarded, never resumed. The
checkpoint folder goes once the round is complete.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import time
from pathlib import Path
from typing import Any

from pipeline.ar2.round_data import base_ranker, load_retriever, load_round_data
from pipeline.ar2.settings import AR2_TRAIN_KEYS, RETRIEVER_OVERRIDE_KEYS, Ar2Settings
from pipeline.ar2.train import CKPT_DIR, train_round, write_carry
from pipeline.core.cli import add_job_flags, run_main, stage_parser
from pipeline.core.config import ConfigError
from pipeline.core.distributed import DistInfo
from pipeline.core.fingerprint import file_id
from pipeline.core.jobs import add_settings_flags, run_job
from pipeline.core.precision import autocast_dtype, precision_name
from pipeline.core.settings.job_documents import Ar2TrainJob
from pipeline.core.settings.validation import from_dict
from pipeline.core.storage import write_json
from pipeline.retrieval.encode import resolve_device
from pipeline.retrieval.ranker import Ranker
from pipeline.training.data import load_queries_with_positives
from pipeline.training.engine import prepare_checkpoint_dir

log = logging.getLogger("sieve.ar2_train_round")

CARRY_DIR = "carry"
SUMMARY_FILE = "train.summary.json"


def _ranker(args: argparse.Namespace, settings: Ar2Settings, seed: int) -> Ranker:
    if args.ranker:
        ranker = Ranker.load(args.ranker)
        log.info("round %d: ranker from %s (%s)", args.round, args.ranker, ranker.settings)
        return ranker
    return base_ranker(settings, seed)


def train_one_round(args: argparse.Namespace, job: Any) -> dict:
    """Train with the settings ``job`` (an Ar2TrainJob), then write ranker/, retriever/, carry/ and the
    summary; return the summary."""
    device = resolve_device(args.device)
    values = job.model_dump(include=set(AR2_TRAIN_KEYS))
    settings = from_dict(Ar2Settings, values)
    round_dir = Path(args.round_dir)
    if args.round > 1 and not args.carry:
        raise ConfigError(f"round {args.round} needs --carry (round {args.round - 1}'s optimizer state)")
    tick = time.perf_counter()
    overrides = {k: values[k] for k in RETRIEVER_OVERRIDE_KEYS}
    retriever = load_retriever(args.retriever, overrides, device)
    ranker = _ranker(args, settings, job.seed).to(device)
    queries, _, dropped = load_queries_with_positives(args.queries, args.qrels, drop_without_positive=True)
    data = load_round_data(args.mined, args.sieve, queries, args.corpus, retriever.settings)
    ckpt = round_dir / CKPT_DIR
    prepare_checkpoint_dir(
        ckpt,
        {
            "round": args.round,
            "sampling": job.sampling,
            "seed": job.seed,
            "settings": values,
            # bf16 results depend on the machine's native support: no resume across precisions.
            "compute_precision": precision_name(autocast_dtype(device, settings.precision)),
            "inputs": [
                file_id(p)
                for p in (
                    args.mined,
                    args.sieve,
                    args.queries,
                    args.qrels,
                    args.corpus,
                    args.retriever,
                    args.ranker,
                    args.carry,
                )
            ],
        },
        DistInfo(device=device),
    )
    summary = train_round(
        retriever,
        ranker,
        data,
        settings,
        round_index=args.round,
        seed=job.seed,
        round_dir=round_dir,
        previous_ckpt=args.carry,
        sampling=job.sampling,
    )
    summary.update(
        queries=len(data.qids),
        train_queries_without_positive=len(dropped),
        ranker_init=args.ranker,
        wall_s=round(time.perf_counter() - tick, 3),
    )
    ranker.save(round_dir / "ranker")
    write_carry(ckpt, round_dir / CARRY_DIR)
    write_json(round_dir / SUMMARY_FILE, summary)
    retriever.to("cpu").save(round_dir / "retriever")  # retriever.json last: the round's model is complete
    shutil.rmtree(ckpt, ignore_errors=True)
    log.info("round %d trained in %.0f s -> %s", args.round, summary["wall_s"], round_dir)
    return summary


def build_parser() -> argparse.ArgumentParser:
    ap = stage_parser("pipeline.ar2.train_round", __doc__)
    ap.add_argument("--round", type=int, required=True, help="1-based")
    ap.add_argument("--round-dir", required=True)
    ap.add_argument(
        "--mined",
        required=True,
        help="the round's mined negatives (ar2/start/ or round{r}/negatives.parquet)",
    )

    ap.add_argument("--sieve", help="sieve variants: the round's sieve decisions (train on what it kept)")
    ap.add_argument("--queries", required=True)
    ap.add_argument("--qrels", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--retriever", required=True, help="the retriever the round starts from")
    ap.add_argument(
        "--ranker", help="the ranker the round starts from (default: ar2.ranker's base, new head)"
    )
    ap.add_argument("--carry", help="rounds >= 2: the previous round's carry/ folder")
    add_settings_flags(
        ap, Ar2TrainJob, "settings (config section ar2, the variant's sampling, the run's seed)"
    )
    add_job_flags(ap)
    return ap


def main(argv: list[str] | None = None) -> int:
    return run_job(build_parser(), Ar2TrainJob, train_one_round, argv, output="round_dir")


if __name__ == "__main__":
    run_main(main)

"""An AR2 round's record, ``round{r}/round.json``: its dev metrics and what each of its steps reported.

    python -m pipeline.ar2.round_summary --round 2 --variant sieve --dataset synthkb --seed 0 \
        --metrics .../round2/metrics.json --negatives-stats .../round2/negatives.stats.json \
        --sieve-stats .../round2/sieve.stats.json --train-summary .../round2/train.summary.json \
        --out .../round2/round.json

Round 0 is the start point (the DPR retriever and its embeddings, evaluated once per dataset in
``ar2/start/``): ``--start-retriever`` and ``--start-embeddings`` name them. Written last: selection
(pipeline.ar2.selection) and the learning curve read these files. ``wall_time_s`` sums the steps that
report a wall time (mining, sieve, training); corpus encoding is spread over shard jobs, whose times are
in Snakemake's benchmarks/ar2_encode_corpus/.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from pipeline.core.cli import run_main, stage_parser, start_stage
from pipeline.core.config import ConfigError
from pipeline.core.methods import VARIANT_METHODS, method_of
from pipeline.core.storage import DataError, write_json

log = logging.getLogger("sieve.ar2_round")

_STEPS = (("negatives", "mine"), ("sieve", "sieve"), ("train", "train"))


def _read(path: str | None) -> dict | None:
    if not path:
        return None
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise DataError("file not found (its rule has not run)", file=path) from None
    except json.JSONDecodeError as exc:
        raise DataError(f"not JSON ({exc.msg}, line {exc.lineno})", file=path) from None


def round_record(args: argparse.Namespace) -> dict:
    metrics = _read(args.metrics)
    record = {
        "round": args.round,
        "variant": args.variant,
        "method": method_of(args.variant),
        "dataset": args.dataset,
        "recipe": args.recipe,
        "seed": args.seed,
        "dev": metrics.get("metrics", {}),
    }
    if args.round == 0:
        record["start"] = {"retriever": args.start_retriever, "embeddings": args.start_embeddings}
    timings = {}
    for key, step in _STEPS:
        data = _read(getattr(args, f"{key}_stats" if key != "train" else "train_summary"))
        if data is not None:
            record[key] = data
            if data.get("wall_s") is not None:
                timings[step] = data["wall_s"]
    record["timings_s"] = timings
    record["wall_time_s"] = round(sum(timings.values()), 3)
    return record


def build_parser() -> argparse.ArgumentParser:
    ap = stage_parser("pipeline.ar2.round_summary", __doc__)
    ap.add_argument("--round", type=int, required=True)
    ap.add_argument("--variant", required=True, choices=sorted(VARIANT_METHODS))
    ap.add_argument("--dataset", default="")
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--recipe", help="the config recipe in force")
    ap.add_argument("--metrics", required=True, help="the round's dev metrics.json")
    ap.add_argument("--negatives-stats")
    ap.add_argument("--sieve-stats")
    ap.add_argument("--train-summary")
    ap.add_argument("--start-retriever", help="round 0: the retriever AR2 starts from")
    ap.add_argument("--start-embeddings", help="round 0: its gathered corpus embeddings")
    ap.add_argument("--out", required=True)
    ap.add_argument("--log")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    start_stage(args.log)
    if args.round == 0 and not (args.start_retriever and args.start_embeddings):
        raise ConfigError("round 0 needs --start-retriever and --start-embeddings")
    record = round_record(args)
    write_json(args.out, record)
    log.info(
        "round %d of %s: %s",
        args.round,
        args.variant,
        ", ".join(f"{k} {v:.4f}" for k, v in record["dev"].items()) or "no dev metrics",
    )
    return 0


if __name__ == "__main__":
    run_main(main)

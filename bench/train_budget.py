"""Training budget: examples per second of full fine-tuning vs ``train_layers`` (top layers over cached
lower-layer states), same model, same data, same steps, in one process.

Each variant trains a fresh MiniLM through the pipeline's own loop (``pipeline.training.loop.train``:
DPR's NCE, batch 16, k = 1 hard negative, in-batch negatives) on a freshly generated synthkb, for the
same number of steps. Reported per variant: the end-to-end time (cache fill included), the median
step time, and both as examples/s with the ratio to full fine-tuning (> 1 = faster). Variants run in
the order full, N..., then again in reverse, and the medians of both passes are used, so a drift in
machine load hits all alike.

    python bench/train_budget.py --quick                   # 60 entities, 8 steps: ~2 minutes on 2 cores
    python bench/train_budget.py --entities 320 --steps 60  # the demo's data and DPR step budget

The last lines are machine-readable: ``RESULT train_budget layers=<N> ratio=<end-to-end> step_ratio=<…>``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.retrieval.bm25 import main as bm25
from pipeline.retrieval.model import Retriever, RetrieverSettings
from pipeline.synthkb.generate import main as generate_synthkb
from pipeline.training.data import TrainData, TrainInputs
from pipeline.training.engine import LOG_FILE
from pipeline.training.loop import TrainConfig, train


def demo_train_data(work: Path, entities: int) -> tuple[TrainData, Path]:
    """A fresh synthkb under ``work`` and its DPR training data with BM25 hard negatives mined as the
    demo mines them (top 100, positives removed; k sampled from the top 30). Also used by
    bench/precision.py. Returns (data, synthkb folder)."""
    generate_synthkb(["--out-dir", str(work / "skb"), "--entities", str(entities), "--seed", "0"])
    skb = work / "skb"
    bm25(["index", "--corpus", str(skb / "corpus.parquet"), "--out-dir", str(work / "bm25")])
    bm25(
        [
            "mine",
            "--index-dir",
            str(work / "bm25"),
            "--queries",
            str(skb / "queries.train.parquet"),
            "--qrels",
            str(skb / "qrels.train.parquet"),
            "--corpus",
            str(skb / "corpus.parquet"),
            "--negatives",
            "100",
            "--out",
            str(work / "negatives.parquet"),
        ]
    )
    inputs = TrainInputs(
        skb / "queries.train.parquet",
        skb / "qrels.train.parquet",
        work / "negatives.parquet",
        skb / "corpus.parquet",
    )
    data = TrainData(inputs, depth=30, seed=0)
    return data, skb


def bench_config(steps: int, **variant) -> TrainConfig:
    """DPR's NCE at lr 2e-5, batch 16, k = 1, for ``steps`` steps with no checkpoint, plus what the
    variant changes (``train_layers`` here, ``precision`` in bench/precision.py)."""
    return TrainConfig(
        lr=2e-5, batch_size=16, hard_negatives=1, max_steps=steps, checkpoint_every=0, seed=0, **variant
    )


def run_variant(data: TrainData, train_layers: int | None, steps: int, work: Path) -> dict:
    retriever = Retriever.from_pretrained("minilm", RetrieverSettings(query_max_len=32, passage_max_len=128))
    cfg = bench_config(steps, train_layers=train_layers)
    ckpt = work / f"layers{train_layers}-{time.monotonic_ns()}"
    tick = time.perf_counter()
    train(retriever, data, cfg, checkpoint_dir=ckpt)
    total = time.perf_counter() - tick
    per_step = [16 / json.loads(line)["examples_per_s"] for line in (ckpt / LOG_FILE).open()]
    return {"total_s": total, "step_s": statistics.median(per_step)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="60 entities, 8 steps")
    ap.add_argument("--entities", type=int, default=320)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--layers", type=int, nargs="+", default=[2, 1], help="train_layers values to compare")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    if args.quick:
        args.entities, args.steps = 60, 8
    torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        data, _ = demo_train_data(work, args.entities)
        variants = [None, *args.layers]
        results: dict = {v: [] for v in variants}
        for order in (variants, list(reversed(variants))):
            for v in order:
                results[v].append(run_variant(data, v, args.steps, work))

    def med(v, key):
        return statistics.median(r[key] for r in results[v])

    examples = 16 * args.steps
    base_total, base_step = med(None, "total_s"), med(None, "step_s")
    print(
        f"synthkb entities={args.entities} train queries={len(data)} passages={len(data.passages)} "
        f"steps={args.steps} batch=16 k=1 threads={args.threads} (2 passes per variant)"
    )
    for v in variants:
        total, step = med(v, "total_s"), med(v, "step_s")
        name = "full fine-tuning" if v is None else f"train_layers={v}"
        print(
            f"{name:18s} end-to-end {total:7.1f} s = {examples / total:6.2f} ex/s (x{base_total / total:.2f}); "
            f"median step {step * 1000:7.0f} ms = {16 / step:6.2f} ex/s (x{base_step / step:.2f})"
        )
    for v in args.layers:
        print(
            f"RESULT train_budget layers={v} ratio={base_total / med(v, 'total_s'):.3f} "
            f"step_ratio={base_step / med(v, 'step_s'):.3f}"
        )


if __name__ == "__main__":
    main()

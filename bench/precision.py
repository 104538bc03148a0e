"""CPU precision: bf16 autocast vs fp32 for MiniLM training steps and corpus encoding, side by side.

Both through the pipeline's own code: training with ``pipeline.training.loop.train`` (DPR's NCE,
batch 16, k = 1 BM25 negative, in-batch negatives; ``precision`` fp32 vs bf16), encoding with
``pipeline.retrieval.encode.encode_buffer`` (``amp`` off vs on) over the synthkb corpus. Variants run
fp32, bf16, bf16, fp32 and the median of each pair is used, so a drift in machine load hits both.
Also reported: how close the bf16 embeddings are to fp32 (cosine per passage) and the training loss
of both after the same steps. On a CPU without native bf16 (pipeline.core.precision) both variants
compute fp32 and the script says so.

    python bench/precision.py --quick                     # 60 entities, 6 steps, 256 passages: ~2 min
    python bench/precision.py --entities 320 --steps 20   # the demo's corpus

The last lines are machine-readable: ``RESULT precision <what> ratio=<bf16 speed / fp32 speed>``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # the train_budget helper beside this file

from train_budget import bench_config, demo_train_data

from pipeline.core.precision import autocast_dtype, precision_name
from pipeline.retrieval.encode import encode_buffer
from pipeline.retrieval.model import Retriever, RetrieverSettings
from pipeline.training.data import TrainData
from pipeline.training.engine import LOG_FILE
from pipeline.training.loop import train

SETTINGS = RetrieverSettings(query_max_len=32, passage_max_len=128)


def train_variant(data: TrainData, precision: str, steps: int, work: Path) -> dict:
    retriever = Retriever.from_pretrained("minilm", SETTINGS)
    cfg = bench_config(steps, precision=precision)
    ckpt = work / f"{precision}-{time.monotonic_ns()}"
    train(retriever, data, cfg, checkpoint_dir=ckpt)
    log = [json.loads(line) for line in (ckpt / LOG_FILE).open()]
    return {"step_s": statistics.median(16 / r["examples_per_s"] for r in log), "last_loss": log[-1]["loss"]}


def encode_variant(corpus: pd.DataFrame, amp: bool) -> tuple[float, np.ndarray]:
    retriever = Retriever.from_pretrained("minilm", SETTINGS).eval()
    tick = time.perf_counter()
    emb = encode_buffer(
        retriever,
        corpus["text"].tolist(),
        corpus["title"].tolist(),
        batch_size=64,
        device=torch.device("cpu"),
        amp=amp,
        dtype=torch.float32,
    )
    return len(corpus) / (time.perf_counter() - tick), emb


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="60 entities, 6 steps, 256 passages")
    ap.add_argument("--entities", type=int, default=320)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--passages", type=int, default=1024, help="corpus rows encoded per variant")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    if args.quick:
        args.entities, args.steps, args.passages = 60, 6, 256
    torch.set_num_threads(args.threads)
    bf16 = precision_name(autocast_dtype("cpu", "bf16"))
    if bf16 == "fp32":
        print("this CPU has no native bf16: both variants compute fp32 (pipeline.core.precision)")

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        data, skb = demo_train_data(work, args.entities)
        corpus = pd.read_parquet(skb / "corpus.parquet").head(args.passages)
        trained: dict = {"fp32": [], "bf16": []}
        encoded: dict = {False: [], True: []}
        embeddings: dict = {}
        for precision in ("fp32", "bf16", "bf16", "fp32"):
            trained[precision].append(train_variant(data, precision, args.steps, work))
            rate, embeddings[precision] = encode_variant(corpus, precision == "bf16")
            encoded[precision == "bf16"].append(rate)

    step = {p: statistics.median(r["step_s"] for r in trained[p]) for p in trained}
    rate = {amp: statistics.median(v) for amp, v in encoded.items()}
    a, b = embeddings["fp32"], embeddings["bf16"]
    cosine = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    print(
        f"synthkb entities={args.entities} train queries={len(data)} steps={args.steps} batch=16 k=1 "
        f"passages encoded={len(corpus)} threads={args.threads}; 'bf16' computes {bf16} here"
    )
    print(
        f"train step   fp32 {step['fp32'] * 1000:6.0f} ms  bf16 {step['bf16'] * 1000:6.0f} ms  "
        f"x{step['fp32'] / step['bf16']:.2f}; loss after {args.steps} steps fp32 "
        f"{trained['fp32'][0]['last_loss']:.4f} bf16 {trained['bf16'][0]['last_loss']:.4f}"
    )
    print(
        f"encode       fp32 {rate[False]:6.1f} passages/s  bf16 {rate[True]:6.1f} passages/s  "
        f"x{rate[True] / rate[False]:.2f}; cosine(bf16, fp32) min {cosine.min():.6f} "
        f"mean {cosine.mean():.6f}"
    )
    print(f"RESULT precision train ratio={step['fp32'] / step['bf16']:.3f}")
    print(f"RESULT precision encode ratio={rate[True] / rate[False]:.3f} min_cosine={cosine.min():.6f}")


if __name__ == "__main__":
    main()

"""Controlled DPR runs on synthkb: why training from all-MiniLM-L6-v2 lowered retrieval.

    .venv/bin/python bench/dpr_recipes.py --variants zeroshot demo_noisy clean --seeds 0
    .venv/bin/python bench/dpr_recipes.py --quick            # smoke test: 2 tiny steps, 40 queries
    .venv/bin/python bench/dpr_recipes.py --list             # the variants and what each changes

One process, one run after the other. Each run trains DPR from ``minilm`` on synthkb train with the
pipeline's own training API (``load_init``, ``TrainData``, ``TrainConfig``, ``train``; the same calls
``train_retriever`` makes, minus writing the folder), then encodes the corpus and the queries and
searches exactly (one matrix product: 2,302 passages). What the API lacks is done here, never in
pipeline/: freezing weights (``requires_grad``), choosing another positive (a rewritten qrels file),
removing true false negatives (a rewritten negatives file) and masking in-batch positives (the loss
seen by the loop is wrapped).

Metrics per split (test, dev, and two train subsets; see ``evaluate_split``):
  hit_all@k  any qrels_all passage (exact truth: every passage that states the fact) in the top k
  R@k        DPR answer match in the top k (pipeline.evaluation)
  hit@k      the annotated passage (qrels) in the top k
One JSON line per run on stdout and appended to ``--out``; the top-5 of every query goes to
``<out dir>/runs/<variant>.s<seed>.parquet`` for failure analysis.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # the recipe_* helpers beside this file
from recipe_eval import evaluate_model
from recipe_inputs import (
    AuditedData,
    AuditedLoss,
    Inputs,
    freeze,
    write_negatives,
    write_qrels,
)

from pipeline.core.seeding import seed_everything
from pipeline.training.data import TrainInputs, epoch_order
from pipeline.training.engine import LOG_FILE
from pipeline.training.loop import (
    TrainConfig,
    schedule,
    train,
)
from pipeline.training.train_dense import load_init

log = logging.getLogger("bench.dpr_recipes")

# What `make demo` writes; the runs read them, never change them.
DATA = Path("resources/synthkb")
NEGATIVES = Path("results/synthkb/negatives/bm25.parquet")
DEMO_MODEL = Path("results/synthkb/models/dpr")


@dataclass(frozen=True)
class Variant:
    """One training recipe. Defaults = the demo's dpr setting, except negatives (clean here)."""

    name: str
    doc: str
    train: bool = True
    init: str = "minilm"  # base encoder, or a trained retriever folder (no training then)
    lr: float = 2e-5
    steps: int = 60
    epochs: int = 1
    batch_size: int = 16
    k: int = 1  # hard negatives per query
    depth: int = 30  # sampled from the top `depth` BM25 candidates
    in_batch: bool = True
    tau: float = 0.05
    warmup: float = 0.1
    # bm25: the mined file as the demo used it (true false negatives included);
    # clean: every qrels_all pair removed from the candidates (oracle: no false negative at all).
    negatives: str = "clean"
    # annotated: the one qrels passage (the passage the question was generated from, a uniform draw
    #   among those stating the fact); zs_best: the qrels_all passage the untrained model scores
    #   highest; title: a qrels_all passage of the article the question names (else annotated).
    positive: str = "annotated"
    # nce: the pipeline's loss; mask: in-batch columns holding a relevant passage of the query (its own
    #   positive elsewhere in the batch, or another qrels_all passage) leave its softmax;
    #   multi: those columns count as positives (-log of their summed probability).
    loss: str = "nce"
    # none | embeddings | top<N> (only the top N of the 6 layers train) | query_tower
    freeze: str = "none"


# The variant list. Each name changes ONE factor against `clean` (or `demo_noisy` for the negatives),
# so a difference between two rows is that factor's effect on this data.
VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in [
        Variant("zeroshot", "all-MiniLM-L6-v2, untrained", train=False),
        Variant(
            "demo_model",
            "the demo's trained dpr folder (results/synthkb/models/dpr), evaluated here: checks the "
            "evaluator",
            train=False,
            init=str(DEMO_MODEL),
        ),
        Variant(
            "demo_noisy",
            "the demo's dpr setting: lr 2e-5, 60 steps, batch 16, k=1 of top 30, "
            "in-batch, tau 0.05, mined negatives as is",
            negatives="bm25",
        ),
        Variant("clean", "demo setting, true false negatives removed (oracle negatives)"),
        # (1) labels
        Variant(
            "pos_zs_best",
            "clean; positive = the relevant passage zero-shot ranks highest",
            positive="zs_best",
        ),
        Variant(
            "pos_title",
            "clean; positive = a relevant passage of the question's own article",
            positive="title",
        ),
        Variant(
            "multi_pos", "clean; every relevant passage in the batch is a positive (summed)", loss="multi"
        ),
        # (4) in-batch passages that are relevant to the query
        Variant("mask_pos", "clean; relevant passages elsewhere in the batch leave the softmax", loss="mask"),
        # (2) learning rate and tau
        Variant("lr1e-5", "clean, lr 1e-5", lr=1e-5),
        Variant("lr5e-6", "clean, lr 5e-6", lr=5e-6),
        Variant("lr2e-6", "clean, lr 2e-6", lr=2e-6),
        Variant("tau0.1", "clean, tau 0.1", tau=0.1),
        Variant("tau0.02", "clean, tau 0.02", tau=0.02),
        # (3) how much of the model moves
        Variant("frz_emb", "clean; word/position embeddings frozen", freeze="embeddings"),
        Variant("top2", "clean; only the top 2 of 6 layers train", freeze="top2"),
        Variant(
            "q_tower",
            "clean; separate towers, passage tower frozen (index = zero-shot's)",
            freeze="query_tower",
        ),
        # (5) steps / warm-up
        Variant("steps120", "clean, 120 steps (one epoch)", steps=120),
        Variant("steps240", "clean, 240 steps (two epochs)", steps=240, epochs=2),
        Variant("warm0.5", "clean, warm-up over half of the steps", warmup=0.5),
        Variant("k4_nobatch", "clean, k=4 hard negatives, no in-batch negatives", k=4, in_batch=False),
    ]
}


# ---- data ------------------------------------------------------------------------------------------


class Runner:
    def __init__(self, inputs: Inputs, out_dir: Path, quick: bool, threads: int):
        self.inputs, self.out_dir, self.quick = inputs, out_dir, quick
        self.work = Path(tempfile.mkdtemp(prefix="dpr_recipes_"))
        torch.set_num_threads(threads)
        self._zs: dict | None = None  # zero-shot corpus and query embeddings, computed once

    def zeroshot_embeddings(self) -> dict:
        # Cached on disk too (a later invocation reuses it): the untrained model never changes.
        cache = self.out_dir / "cache" / f"zeroshot{'.quick' if self.quick else ''}.npz"
        if self._zs is None and cache.exists():
            self._zs = dict(np.load(cache))
        if self._zs is None:
            retriever = load_init("minilm", {})
            _, _, corpus_emb, q_emb = evaluate_model(retriever, self.inputs, None, None)
            self._zs = {"corpus": corpus_emb, **q_emb}
        if not cache.exists():
            cache.parent.mkdir(parents=True, exist_ok=True)
            np.savez(cache, **self._zs)
        return self._zs

    def zs_best(self) -> dict[str, str]:
        """For each train question, the qrels_all passage the untrained model scores highest."""
        zs = self.zeroshot_embeddings()
        qdf = self.inputs.queries["train"]
        out = {}
        for qid, qe in zip(qdf["qid"], zs["train"]):
            # (--quick keeps a small corpus: passages outside it cannot be chosen)
            rel = sorted(p for p in self.inputs.qrels_all["train"][qid] if p in self.inputs.pid_index)
            if not rel:
                out[qid] = next(iter(self.inputs.qrels["train"][qid]))
                continue
            idx = [self.inputs.pid_index[p] for p in rel]
            out[qid] = rel[int(np.argmax(zs["corpus"][idx] @ qe))]
        return out

    def run(self, v: Variant, seed: int) -> dict:
        inputs = self.inputs
        if self.quick:
            v = replace(v, steps=min(v.steps, 2), batch_size=min(v.batch_size, 4))
        record: dict = {"variant": v.name, "seed": seed, "quick": self.quick, "settings": asdict(v)}
        t0 = time.perf_counter()
        seen: set[str] | None = None
        corpus_emb = None
        if not v.train:
            retriever = load_init(v.init, {})
            record.update(steps=0, train_s=0.0)
            if v.init == "minilm" and self._zs is not None:
                corpus_emb = self._zs["corpus"]
        else:
            seed_everything(seed)  # as train_retriever does, before the data and the model
            negatives = write_negatives(inputs, v.negatives, self.work)
            qrels = write_qrels(
                inputs, v.positive, self.work, self.zs_best() if v.positive == "zs_best" else None
            )
            cfg = TrainConfig(
                lr=v.lr,
                epochs=v.epochs,
                batch_size=v.batch_size,
                grad_accum=1,
                hard_negatives=v.k,
                negatives_depth=v.depth,
                in_batch=v.in_batch,
                warmup_ratio=v.warmup,
                weight_decay=0.0,
                max_grad_norm=2.0,
                max_steps=v.steps,
                checkpoint_every=0,
                precision="bf16",
                seed=seed,
            )
            tables = TrainInputs(
                str(inputs.data / "queries.train.parquet"),
                str(qrels),
                str(negatives),
                str(inputs.data / "corpus.parquet"),
            )
            data = AuditedData(
                tables,
                depth=v.depth,
                seed=seed,
                qrels_all=inputs.qrels_all["train"],
            )
            retriever = load_init(v.init, {"temperature": v.tau}, separate_towers=v.freeze == "query_tower")
            freeze(retriever, v.freeze)
            record["trainable_params"] = sum(p.numel() for p in retriever.parameters() if p.requires_grad)
            ckpt = Path(tempfile.mkdtemp(prefix="ckpt_", dir=self.work))
            train(
                retriever,
                data,
                cfg,
                checkpoint_dir=ckpt,
                loss=None if v.loss == "nce" else AuditedLoss(data, v.loss),
            )
            record["train_s"] = round(time.perf_counter() - t0, 1)
            per_epoch, total = schedule(len(data), cfg)
            record["steps"] = total
            # Which train questions the run trained on: epoch e visits epoch_order(e)[:per_epoch*bs].
            seen = set()
            for e in range(math.ceil(total / per_epoch)):
                n = min(total - e * per_epoch, per_epoch) * cfg.batch_size
                seen |= {data.qids[i] for i in epoch_order(len(data), seed, e)[:n]}
            steps_log = [json.loads(x) for x in (ckpt / LOG_FILE).read_text().splitlines()]
            losses = [s["nce"] for s in steps_log]
            record["loss_first5"] = round(float(np.mean(losses[:5])), 3)
            record["loss_last5"] = round(float(np.mean(losses[-5:])), 3)
            a = data.audit
            record["audit_per_query"] = {
                k: round(a[k] / max(a["queries"], 1), 4)
                for k in sorted(a)
                if k not in ("queries", "batches", "batches_with_inbatch_relevant")
            }
            record["audit_batches_with_inbatch_relevant"] = round(
                a["batches_with_inbatch_relevant"] / max(a["batches"], 1), 3
            )
            if v.freeze == "query_tower":
                corpus_emb = self.zeroshot_embeddings()["corpus"]  # the passage tower did not move
        t1 = time.perf_counter()
        metrics, ranked, corpus_emb_out, q_emb = evaluate_model(retriever, inputs, corpus_emb, seen)
        if v.name == "zeroshot" and self._zs is None:
            self._zs = {"corpus": corpus_emb_out, **q_emb}
            self.zeroshot_embeddings()  # writes the cache
        record["eval_s"] = round(time.perf_counter() - t1, 1)
        record.update(metrics)
        self.save_ranked(v.name, seed, ranked)
        return record

    def save_ranked(self, name: str, seed: int, ranked: dict[str, list[str]]) -> None:
        runs = self.out_dir / "runs"
        runs.mkdir(parents=True, exist_ok=True)
        rows = [(q, r, p) for q, lst in ranked.items() for r, p in enumerate(lst[:5], start=1)]
        pd.DataFrame(rows, columns=["qid", "rank", "pid"]).to_parquet(
            runs / f"{name}.s{seed}{'.quick' if self.quick else ''}.parquet", index=False
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--variants",
        nargs="+",
        default=["zeroshot", "demo_noisy", "clean"],
        help="names from --list (default: zeroshot demo_noisy clean)",
    )
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--out", default="results/bench/dpr_recipes.jsonl", help="JSONL file, appended to")
    ap.add_argument("--data", default=str(DATA), help="synthkb resources folder")
    ap.add_argument("--negatives", default=str(NEGATIVES), help="mined BM25 negatives of the train split")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument(
        "--quick",
        action="store_true",
        help="smoke test: <= 2 steps of 4 queries, 40 questions per split, small corpus "
        "(writes to <out>.quick.jsonl)",
    )
    ap.add_argument("--list", action="store_true", help="print the variants and exit")
    args = ap.parse_args(argv)
    if args.list:
        for v in VARIANTS.values():
            print(f"{v.name:12s} {v.doc}")
        return 0
    unknown = [n for n in args.variants if n not in VARIANTS]
    if unknown:
        ap.error(f"unknown variants {unknown}; see --list")
    logging.basicConfig(level=logging.WARNING)
    out = Path(args.out)
    if args.quick:
        out = out.with_suffix(".quick.jsonl")
    out.parent.mkdir(parents=True, exist_ok=True)
    inputs = Inputs(Path(args.data), Path(args.negatives), args.quick)
    runner = Runner(inputs, out.parent, args.quick, args.threads)
    try:
        for name in args.variants:
            for seed in [0] if not VARIANTS[name].train else args.seeds:
                record = runner.run(VARIANTS[name], seed)
                line = json.dumps(record)
                print(line, flush=True)
                with open(out, "a", encoding="utf-8") as handle:
                    handle.write(line + "\n")
    finally:
        shutil.rmtree(runner.work, ignore_errors=True)  # rewritten inputs and training logs
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

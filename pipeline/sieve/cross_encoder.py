"""RocketQA-style denoising cross-encoder for the ``cross_encoder`` filter: train it, then score pairs.

    python -m pipeline.workflow.jobs D train_cross_encoder > cross_encoder.json
    python -m pipeline.sieve.cross_encoder --settings cross_encoder.json \
        --negatives results/D/negatives/bm25.parquet \
        --qrels resources/D/qrels.train.parquet --queries resources/D/queries.train.parquet \
        --corpus resources/D/corpus.parquet [--steps 150 ...: over the document] \
        --out results/D/models/cross_encoder

The settings (pipeline.core.settings.job_documents.CrossEncoderJob) come as one document, the workflow's job's
(``--settings-json``) or a file (``--settings``), each flag over it.

The model is AR2's ranker architecture (pipeline.retrieval.ranker: base encoder, [CLS] -> Linear -> 1 logit),
fine-tuned from the same base as the retrievers, but *pointwise*: binary cross-entropy on
(query, positive) = 1 and (query, BM25 negative) = 0, so that sigmoid(logit) is a probability that the
filter can threshold (RocketQA keeps a negative only below 0.1). The BM25 negatives are noisy (they
contain the false negatives the filter is meant to find), exactly as in RocketQA's setting.

Sampling: epoch e visits the queries in a permutation drawn from (seed, e); the negative of query q in
epoch e is drawn from item_rng(seed, q, e) among its mined negatives.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from rich.progress import Progress

from pipeline.core.cli import add_job_flags, check_writable, run_main, stage_parser, start_stage
from pipeline.core.jobs import add_settings_flags, job_settings
from pipeline.core.seeding import item_rng, seed_everything
from pipeline.core.settings.job_documents import CrossEncoderJob
from pipeline.core.storage import DataError, atomic_open
from pipeline.sieve.data import load_passages, read_negatives, read_positives, read_queries
from pipeline.training.data import TrainInputs
from pipeline.training.engine import Engine, StepPlan, StepTrainer, adamw, fix_advice, linear_schedule

log = logging.getLogger("sieve.cross_encoder_filter")


def sample_pairs(
    negatives: dict[str, list[str]],
    positives: dict[str, list[str]],
    *,
    steps: int,
    batch_size: int,
    seed: int,
) -> list[list[tuple[str, str, float]]]:
    """The whole training plan: per step, (qid, pid, label) for batch_size queries x {pos, neg}."""
    qids = sorted(q for q in negatives if q in positives and negatives[q])
    if not qids:
        raise DataError("no training query has both a positive and a negative", field="qid")
    plan, epoch, order, cursor = [], 0, [], 0
    for _ in range(steps):
        batch = []
        while len(batch) < 2 * batch_size:
            if cursor >= len(order):
                order = list(np.random.default_rng([seed, epoch]).permutation(qids))
                cursor, epoch = 0, epoch + 1
            qid = order[cursor]
            cursor += 1
            negs = negatives[qid]
            neg = negs[int(item_rng(seed, qid, epoch - 1).integers(len(negs)))]
            batch += [(qid, positives[qid][0], 1.0), (qid, neg, 0.0)]
        plan.append(batch)
    return plan


def train_cross_encoder(
    inputs: TrainInputs,
    out: str | os.PathLike,
    *,
    base: str = "minilm",
    max_len: int = 128,
    steps: int = 150,
    batch_size: int = 16,
    lr: float = 2e-5,
    seed: int = 0,
    warmup_ratio: float = 0.1,
    precision: str = "bf16",
    recipe: str | None = None,
    device: str = "auto",
) -> dict:
    from pipeline.retrieval.encode import resolve_device
    from pipeline.retrieval.ranker import Ranker, RankerSettings

    check_writable(out)  # before the training, not by the save at its end
    seed_everything(seed)
    negs = read_negatives(inputs.negatives)
    positives = read_positives(inputs.qrels)
    ordered = negs.sort_values(["qid", "rank"], kind="stable").groupby("qid")["pid"].apply(list)
    # An annotated positive is never a training negative, even if a negatives file lists it.
    by_query = {q: [p for p in pids if p not in positives.get(q, ())] for q, pids in ordered.items()}
    plan = sample_pairs(by_query, positives, steps=steps, batch_size=batch_size, seed=seed)
    used_q = sorted({q for batch in plan for q, _, _ in batch})
    texts = read_queries(inputs.queries, used_q).set_index("qid")["text"]
    passages = load_passages(inputs.corpus, {p for batch in plan for _, p, _ in batch})
    ranker = Ranker.from_pretrained(base, RankerSettings(base=base, max_len=max_len), seed=seed)
    ranker.to(resolve_device(device)).train()
    # No checkpoint: a run is minutes. Clipping at 1.0 is RocketQA's, not a setting. Decay on every
    # weight and dropout from the seeded global stream: this trainer's recipe since it was written.
    engine = Engine(device=ranker.device, precision=precision, max_grad_norm=1.0, scale_fp16=False)
    optim = adamw(ranker, lr, 0.01, bert_groups=False)
    sched = linear_schedule(optim, steps, warmup_ratio)
    advice = fix_advice(
        f"lower sieve.cross_encoder.lr (now {lr:g})",
        fp16="sieve.cross_encoder.precision" if precision == "fp16" else None,
    )
    trainer = _PointwiseTrainer(ranker, plan, texts, passages, engine)
    trainer.optimizer, trainer.scheduler, trainer.advice = optim, sched, advice
    engine.fit(trainer, 0, steps, "cross-encoder: training")
    history = trainer.history
    engine.check_weights([ranker], steps, advice)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    info = {
        "base": base,
        "steps": steps,
        "batch_queries": batch_size,
        "lr": lr,
        "max_len": max_len,
        "seed": seed,
        "compute_precision": engine.compute_precision,
        "objective": "pointwise BCE: (q, positive)=1, (q, BM25 negative)=0",
        "loss_first_10": float(np.mean(history[:10])),
        "loss_last_10": float(np.mean(history[-10:])),
        "recipe": recipe,
    }
    with atomic_open(out / "train_info.json", "w") as handle:
        json.dump(info, handle, indent=2)
    ranker.save(out)  # ranker.json last: a folder with it is complete
    log.info("cross-encoder trained: %s -> %s", info, out)
    return info


class _PointwiseTrainer(StepTrainer):
    """The engine's view of the cross-encoder: step t trains on the plan's batch t with binary
    cross-entropy, (query, positive) = 1 and (query, negative) = 0."""

    def __init__(self, ranker, plan: list, texts: pd.Series, passages: pd.DataFrame, engine: Engine) -> None:
        self.model, self.plan, self.texts, self.passages, self.engine = ranker, plan, texts, passages, engine
        self.loss_fn = torch.nn.BCEWithLogitsLoss()
        self.history: list[float] = []  # each step's loss, for train_info.json

    def batches(self, step: int) -> StepPlan:
        return StepPlan([self.plan[step]], len(self.plan[step]))

    def loss(self, batch: list) -> tuple[torch.Tensor, dict]:
        qids, pids, labels = zip(*batch)
        enc = self.model.tokenize(
            [self.texts[q] for q in qids],
            self.passages.loc[list(pids), "title"].tolist(),
            self.passages.loc[list(pids), "text"].tolist(),
        )
        with self.engine.autocast():  # the encoder only: Ranker's head runs in fp32
            logits = self.model({k: v.to(self.model.device) for k, v in enc.items()})
        return self.loss_fn(logits.float(), torch.tensor(labels, device=logits.device)), {}

    def values(self, results: list) -> dict[str, float]:
        values = super().values(results)
        self.history.append(values["loss"])
        return values


def score_candidates(
    cands: pd.DataFrame,
    model: str | os.PathLike,
    corpus: str | os.PathLike,
    queries: str | os.PathLike,
    batch_size: int = 64,
    chunk: int = 4096,
    device: str = "auto",
) -> np.ndarray:
    """sigmoid(cross-encoder logit) of every candidate row, float64 in row order, scored on ``device``."""
    from pipeline.retrieval.encode import resolve_device
    from pipeline.retrieval.ranker import Ranker

    ranker = Ranker.load(model).to(resolve_device(device))
    texts = read_queries(queries, cands["qid"].unique()).set_index("qid")["text"]
    passages = load_passages(corpus, set(cands["pid"]))
    out = np.empty(len(cands), dtype=np.float64)
    began = last = time.perf_counter()
    with Progress(transient=True) as progress:
        task = progress.add_task("cross-encoder: scoring candidates", total=len(cands))
        for start in range(0, len(cands), chunk):
            part = cands.iloc[start : start + chunk]
            rows = passages.loc[part["pid"]]
            logits = ranker.score(
                texts.loc[part["qid"]].tolist(),
                rows["title"].tolist(),
                rows["text"].tolist(),
                batch_size=batch_size,
            )
            out[start : start + len(part)] = 1.0 / (1.0 + np.exp(-logits.astype(np.float64)))
            progress.advance(task, len(part))
            done, now = start + len(part), time.perf_counter()
            if done == len(cands) or now - last >= 60.0:
                last, rate = now, done / max(now - began, 1e-9)
                log.info(
                    "scored %d/%d candidate pairs (%.0f/s, ETA %ds)",
                    done,
                    len(cands),
                    rate,
                    (len(cands) - done) / rate,
                )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser("pipeline.sieve.cross_encoder", __doc__)
    parser.add_argument("--negatives", required=True)
    parser.add_argument("--qrels", required=True)
    parser.add_argument("--queries", required=True)
    parser.add_argument("--corpus", required=True)
    parser.add_argument(
        "--out", required=True, help="cross-encoder folder (pipeline.retrieval.ranker layout)"
    )
    add_settings_flags(parser, CrossEncoderJob, "training (config sieve.cross_encoder), the seed")
    parser.add_argument("--recipe", help="the config recipe in force (recorded in train_info.json)")
    add_job_flags(parser)
    args = parser.parse_args(argv)
    job = job_settings(CrossEncoderJob, args)  # before any work: a bad document or flag is one line
    start_stage(args.log, args.threads)
    train_cross_encoder(
        TrainInputs(args.queries, args.qrels, args.negatives, args.corpus),
        args.out,
        recipe=args.recipe,
        device=args.device,
        **job.model_dump(),
    )
    return 0


if __name__ == "__main__":
    run_main(main)

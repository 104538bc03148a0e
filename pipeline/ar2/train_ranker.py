"""The ranker AR2 starts from (``ar2.ranker_init: listwise``): AR2's ranker loss on the DPR start's own
candidates, trained once per dataset and seed before round 1, and scored against the retriever on dev.

    python -m pipeline.ar2.train_ranker --mined results/synthkb/ar2/start/negatives.parquet \
        --queries resources/synthkb/queries.train.parquet --qrels resources/synthkb/qrels.train.parquet \
        --corpus resources/synthkb/corpus.parquet --dev-run results/synthkb/ar2/start/run.dev.parquet \
        --dev-queries resources/synthkb/queries.dev.parquet --dev-qrels resources/synthkb/qrels.dev.parquet \
        --seed 0 --out results/synthkb/ar2/ranker/seed0 [settings flags: --listwise-steps 400 ...]

    # exactly what the workflow's job trains with: its settings document (the run's seed: --seed), then
    # the same paths
    python -m pipeline.workflow.jobs synthkb ar2_train_ranker --seed 0 > ranker.json
    python -m pipeline.ar2.train_ranker --settings ranker.json --mined ... --out ...

The settings are a document (--settings FILE, or --settings-json as the rules pass it; schema:
pipeline.core.settings.job_documents.Ar2RankerJob), each flag over it; what neither gives is the contract's default.
``--compare-metric`` (ar2.select_metric) is not one of them: it only names the metric the log line
compares, and a changed one retrains nothing.

AR2 co-trains a retriever G with a cross-encoder D and only helps when D ranks G's candidates better
than G does (with λ = 0, G distils D's softmax). The paper starts from a trained ranker; here it is
trained on exactly what round 1 trains on: each step takes ``listwise.batch_size`` train queries, the
positive and ``listwise.negatives`` negatives drawn uniformly from the DPR start's top ``ar2.top_k``
(positives removed), and minimises −log softmax(D(q, c))[d+] (pipeline.ar2.train's ranker step, its
own AdamW and linear warm-up/decay over ``listwise.steps``). Then D reranks the retriever's top
``listwise.rerank_depth`` dev passages: ``rerank.dev.json`` holds the retriever's and the ranker's
metrics on the same candidates side by side (``rerank.dev.parquet``: the reranked run), and the log
says which ranks better. Checkpoints and resume as every training stage (``<out>.ckpt/``).
"""

from __future__ import annotations

import argparse
import logging
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from pipeline.ar2.round_data import base_ranker, load_round_data
from pipeline.ar2.settings import AR2_RANKER_KEYS, Ar2Settings
from pipeline.ar2.train import batch_prior, build_batch, ranker_step
from pipeline.core.cli import add_job_flags, run_main, stage_parser
from pipeline.core.distributed import DistInfo
from pipeline.core.fingerprint import file_id
from pipeline.core.jobs import add_settings_flags, run_job
from pipeline.core.precision import autocast_dtype, precision_name
from pipeline.core.schemas import QUERIES_SCHEMA
from pipeline.core.settings.base import default
from pipeline.core.settings.job_documents import Ar2RankerJob
from pipeline.core.settings.validation import from_dict
from pipeline.core.storage import DataError, atomic_path, read_table, write_json, write_table
from pipeline.evaluation.evaluate import evaluate
from pipeline.retrieval.encode import resolve_device
from pipeline.retrieval.hf_folders import read_settings
from pipeline.retrieval.model import SETTINGS_FILE as RETRIEVER_SETTINGS
from pipeline.retrieval.model import RetrieverSettings
from pipeline.retrieval.ranker import Ranker
from pipeline.retrieval.runs import read_run
from pipeline.sieve.data import load_passages
from pipeline.training.data import load_queries_with_positives
from pipeline.training.engine import (
    LOG_FILE,
    Engine,
    StepPlan,
    StepRecord,
    StepTrainer,
    adamw,
    fix_advice,
    linear_schedule,
    prepare_checkpoint_dir,
    step_seed,
)

log = logging.getLogger("sieve.ar2_ranker")

RERANK_FILE = "rerank.dev.json"
# Training only: steps are drawn like AR2's rounds, from a stream of their own.
_ROUND = 0


def train_listwise(ranker: Ranker, data, settings: Ar2Settings, seed: int, ckpt: Path, device) -> dict:
    """Train ``ranker`` in place; resumable from ``ckpt`` (model, optimizer, scheduler, step)."""
    lw = settings.listwise
    batches = from_dict(Ar2Settings, {"batch_size": lw.batch_size, "negatives": lw.negatives})
    k1 = lw.negatives + 1
    # save_final: a job killed between the last step and the saved folder has nothing left to train.
    engine = Engine.from_settings(
        settings, device=device, checkpoint_dir=ckpt, save_final=True, scale_fp16=False
    )
    opt = adamw(ranker, lw.lr, settings.weight_decay)
    sched = linear_schedule(opt, lw.steps, lw.warmup_ratio)
    start = engine.resume({"ranker": ranker, "opt": opt, "sched": sched}, restore_rng=False)
    log.info(
        "listwise ranker: %d steps of %d queries x %d candidates, lr %g, computing in %s%s",
        lw.steps,
        lw.batch_size,
        k1,
        lw.lr,
        engine.compute_precision,
        f", resuming at step {start}" if start else "",
    )
    advice = fix_advice(
        f"lower ar2.listwise.lr (now {lw.lr:g})",
        clip="ar2.max_grad_norm" if settings.max_grad_norm <= 0 else None,
        fp16="ar2.precision" if settings.precision == "fp16" else None,
    )
    trainer = _ListwiseTrainer(ranker, data, batches, settings, seed, k1, device, engine)
    trainer.optimizer, trainer.scheduler, trainer.advice = opt, sched, advice
    engine.fit(trainer, start, lw.steps, "listwise ranker")
    ranker.eval()
    engine.check_weights([ranker], lw.steps, advice)
    return {"steps": lw.steps, "start_step": start, "compute_precision": engine.compute_precision}


class _ListwiseTrainer(StepTrainer):
    """The engine's view of the listwise ranker: step t's batch of queries x candidates (a pure function
    of seed and step, as a round's) and the ranker's listwise loss on it."""

    def __init__(
        self,
        ranker: Ranker,
        data,
        batches: Ar2Settings,
        settings: Ar2Settings,
        seed: int,
        k1: int,
        device,
        engine: Engine,
    ) -> None:
        self.model, self.data, self.batch_settings, self.settings = ranker, data, batches, settings
        self.seed, self.k1, self.device, self.engine = seed, k1, device, engine

    def batches(self, step: int) -> StepPlan:
        torch.manual_seed(step_seed(self.seed, _ROUND, step))
        batch = build_batch(self.data, self.batch_settings, "uniform", self.seed, _ROUND, step)
        prior = (
            batch_prior(batch, self.k1, self.device) if self.settings.ranker_prior == "retriever" else None
        )
        return StepPlan([(batch, prior)], len(batch.qids))

    def loss(self, item) -> tuple[torch.Tensor, dict]:
        batch, prior = item
        return ranker_step(self.model, batch, self.k1, self.device, self.engine.amp_dtype, prior)

    def record(self, step: int, values: dict[str, float], lr: float, eps: float) -> StepRecord:
        return StepRecord({"step": step + 1, **values, "lr": lr}, note=f" top1 {values['ranker_top1']:.2f}")


def rerank_run(
    ranker: Ranker, run: pd.DataFrame, queries_path, corpus_path, depth: int, prior_scale: float | None
) -> pd.DataFrame:
    """The top ``depth`` of ``run`` per query, ordered by the ranker (ties: the run's order). With a
    ``prior_scale`` D adds the run's own score in logit units (``ar2.ranker_prior: retriever``)."""
    top = run[run["rank"] <= depth].sort_values(["qid", "rank"], kind="stable").reset_index(drop=True)
    text = read_table(queries_path, columns=["qid", "text"], schema=QUERIES_SCHEMA).set_index("qid")["text"]
    passages = load_passages(corpus_path, top["pid"].unique())  # the candidates only, streamed
    scores = ranker.score(
        text.loc[top["qid"]].tolist(),
        passages.loc[top["pid"], "title"].fillna("").tolist(),
        passages.loc[top["pid"], "text"].tolist(),
    )
    scores = scores.astype(np.float64)
    if prior_scale is not None:
        scores = scores + prior_scale * top["score"].to_numpy(dtype=np.float64)
    top = top.assign(score=scores)
    top = top.sort_values(["qid", "score", "rank"], ascending=[True, False, True], kind="stable")
    top["rank"] = top.groupby("qid").cumcount() + 1
    return top[["qid", "pid", "rank", "score"]].reset_index(drop=True)


def compare_on_dev(
    ranker: Ranker, args: argparse.Namespace, job: Any, depth: int, out: Path, prior_scale: float | None
) -> dict:
    """The retriever's and the ranker's dev metrics on the same top-``depth`` candidates, at the cut-offs
    and answer matching of ``job`` (an Ar2RankerJob)."""
    run = read_run(args.dev_run)
    top = run[run["rank"] <= depth]
    work = out.with_name(out.name + ".rerank")
    work.mkdir(parents=True, exist_ok=True)
    retriever_run, ranker_run = work / "retriever.parquet", out / "rerank.dev.parquet"
    write_table(retriever_run, top.reset_index(drop=True))
    with torch.no_grad():
        write_table(ranker_run, rerank_run(ranker, run, args.dev_queries, args.corpus, depth, prior_scale))
    ks = sorted({k for k in job.ks if k <= depth})
    result = {}
    for name, path in (("retriever", retriever_run), ("ranker", ranker_run)):
        info, _, _ = evaluate(
            path, args.dev_queries, args.dev_qrels, args.corpus, ks, job.match, args.dev_qrels_all
        )
        result[name] = info["metrics"]
    shutil.rmtree(work, ignore_errors=True)
    result["candidates"] = depth
    result["queries"] = int(top["qid"].nunique())
    return result


def train_ranker(args: argparse.Namespace, job: Any) -> dict:
    """Train the ranker with the settings ``job`` (an Ar2RankerJob), compare it on dev, save it."""
    device = resolve_device(args.device)
    values = job.model_dump(include=set(AR2_RANKER_KEYS))
    settings = from_dict(Ar2Settings, values)
    out = Path(args.out)
    ckpt = out.with_name(out.name + ".ckpt")
    queries, _, dropped = load_queries_with_positives(args.queries, args.qrels, drop_without_positive=True)
    # The retriever's similarity sets the units of the mined scores (cos/τ or the dot product).
    retriever_settings = read_settings(Path(args.retriever) / RETRIEVER_SETTINGS, RetrieverSettings)
    if retriever_settings is None:
        raise DataError("not a retriever folder (no retriever.json)", file=args.retriever)
    scale = 1.0 / retriever_settings.temperature if retriever_settings.similarity == "cosine" else 1.0
    data = load_round_data(args.mined, None, queries, args.corpus, retriever_settings)
    prepare_checkpoint_dir(
        ckpt,
        {
            "seed": job.seed,
            "settings": values,
            "compute_precision": precision_name(autocast_dtype(device, settings.precision)),
            "inputs": [
                file_id(p) for p in (args.mined, args.queries, args.qrels, args.corpus, args.retriever)
            ],
        },
        DistInfo(device=device),
    )
    ranker = base_ranker(settings, job.seed).to(device)
    tick = time.perf_counter()
    summary = train_listwise(ranker, data, settings, job.seed, ckpt, device)
    summary.update(queries=len(data.qids), train_queries_without_positive=len(dropped))
    summary["train_s"] = round(time.perf_counter() - tick, 3)
    (out / "ranker.json").unlink(missing_ok=True)  # a folder without it is incomplete
    out.mkdir(parents=True, exist_ok=True)
    with atomic_path(out / LOG_FILE) as tmp:
        shutil.copyfile(ckpt / LOG_FILE, tmp)
    tick = time.perf_counter()
    prior = scale if settings.ranker_prior == "retriever" else None
    comparison = compare_on_dev(ranker, args, job, settings.listwise.rerank_depth, out, prior)
    comparison["eval_s"] = round(time.perf_counter() - tick, 3)
    write_json(out / RERANK_FILE, {**comparison, "train": summary, "settings": values})
    metric = args.compare_metric
    got = comparison["ranker"].get(metric), comparison["retriever"].get(metric)
    if None not in got:
        log.info(
            "dev, the retriever's top %d reranked: %s ranker %.4f vs retriever %.4f (%s)",
            comparison["candidates"],
            metric,
            got[0],
            got[1],
            "the ranker ranks better" if got[0] > got[1] else "the ranker does NOT rank better",
        )
    ranker.to("cpu").save(out)  # ranker.json last: the folder is complete once it exists
    shutil.rmtree(ckpt, ignore_errors=True)
    return comparison


def build_parser() -> argparse.ArgumentParser:
    ap = stage_parser("pipeline.ar2.train_ranker", __doc__)
    ap.add_argument(
        "--mined", required=True, help="the DPR start's mined train candidates (pipeline.ar2.mine)"
    )
    ap.add_argument("--retriever", required=True, help="the retriever that mined them (its similarity, τ)")
    ap.add_argument("--queries", required=True, help="train queries")
    ap.add_argument("--qrels", required=True, help="train qrels")
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--dev-run", required=True, help="the retriever's dev run (reranked)")
    ap.add_argument("--dev-queries", required=True)
    ap.add_argument("--dev-qrels", required=True)
    ap.add_argument("--dev-qrels-all", help="exact truth (synthkb)")
    add_settings_flags(
        ap, Ar2RankerJob, "settings (config section ar2, eval.ks and eval.match, the run's seed)"
    )
    ap.add_argument(
        "--compare-metric",
        default=default(Ar2Settings, "select_metric"),
        help="the dev metric the log compares (ar2.select_metric)",
    )
    ap.add_argument("--out", required=True, help="the ranker folder")
    add_job_flags(ap)
    return ap


def main(argv: list[str] | None = None) -> int:
    return run_job(build_parser(), Ar2RankerJob, train_ranker, argv)


if __name__ == "__main__":
    run_main(main)

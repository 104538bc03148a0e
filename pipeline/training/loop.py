"""The training loop shared by DPR (NCE) and CCR fine-tuning.

What is particular to it: gradient accumulation, DDP with gathered in-batch negatives, the frozen
lower layers' caches (train_layers) and the contrastive losses. Optimizer, schedule, precision,
clipping, finite checks, checkpoints, resume, the JSONL log and progress are the engine's
(pipeline.training.engine).

Exact resume: everything random is a function of (seed, step, rank) or (seed, qid, epoch). Dropout's
torch generator is re-seeded at the start of every optimizer step from (seed, step, rank) and the data
of step t is a pure function of t (epoch = t // steps_per_epoch, position = t % steps_per_epoch). A
run restarted from the checkpoint at step s therefore replays steps s+1... bit for bit, and ends with
the same weights as a run that was never interrupted.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch
from pydantic import Field, ValidationError
from rich import get_console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from torch.nn.parallel import DistributedDataParallel

from pipeline.core.config import ConfigError
from pipeline.core.distributed import DistInfo, all_gather_with_grad, all_reduce_mean
from pipeline.core.settings.validation import describe_errors
from pipeline.training.data import epoch_order, micro_batch_indices
from pipeline.training.engine import (
    Engine,
    StepPlan,
    StepRecord,
    StepTrainer,
    adamw,
    fix_advice,
    linear_schedule,
    step_seed,
)
from pipeline.training.frozen_layers import LowerStateCache, freeze_lower, run_layers
from pipeline.training.guides import Guide, batch_labels
from pipeline.training.losses import (
    ContrastiveLoss,
    build_loss,
    own_groups,
    positive_columns,
    similarity_scores,
)
from pipeline.training.settings import Objective, TrainSettings
from pipeline.training.snapshots import SNAPSHOT_DIR, save_snapshot, snapshot_steps

log = logging.getLogger("sieve.trainer")


class TrainConfig(Objective, TrainSettings):
    """What the loop trains with: the dpr/ccr section's settings (pipeline.core.settings) and a seed.
    Built in code, a bad value is a ConfigError naming the setting."""

    seed: int = 0
    # Relabel (dpr_relabel_<detector>): slots per query for its other qrels positives, trained with
    # multi-positive NCE; 0 = the plain layout [positive, k negatives].
    extra_positives: int = Field(0, ge=0)

    def __init__(self, **values) -> None:
        try:
            super().__init__(**values)
        except ValidationError as err:
            raise ConfigError(
                "training settings: " + "; ".join(describe_errors(err, root=TrainConfig))
            ) from None


class DualEncoder(torch.nn.Module):
    """A forward() over both towers, so DDP sees one call per micro-batch and syncs every weight.

    With ``frozen`` layers (train_layers), the inputs are cached lower-layer states ({"hidden",
    "attention_mask"}) and only the layers above them run.
    """

    def __init__(self, retriever: torch.nn.Module, frozen: int | None = None):
        super().__init__()
        self.retriever = retriever
        self.frozen = frozen

    def forward(self, queries: dict, passages: dict) -> tuple[torch.Tensor, torch.Tensor]:
        r = self.retriever
        if self.frozen is None:
            return r.embed_queries(queries), r.embed_passages(passages)
        return (self._upper(r.query_model, queries), self._upper(r.passage_tower, passages))

    def _upper(self, tower: torch.nn.Module, states: dict) -> torch.Tensor:
        hidden = run_layers(tower, states["hidden"], states["attention_mask"], self.frozen)
        return self.retriever.embed_hidden(hidden, states["attention_mask"])


class StateCaches:
    """The lower-layer caches of both towers (train_layers); texts are the keys."""

    def __init__(self, retriever, frozen: int):
        self.queries = LowerStateCache(
            retriever.query_model, frozen, lambda items: retriever.tokenize_queries(items)
        )
        self.passages = LowerStateCache(
            retriever.passage_tower,
            frozen,
            lambda items: retriever.tokenize_passages([t for t, _ in items], [x for _, x in items]),
        )

    def fill(self, data, device: torch.device, show: bool) -> None:
        """Every training text's lower states, before the first step (see frozen_layers)."""
        queries = list(dict.fromkeys(data.query_texts))
        titles, texts = data.passages.get(np.arange(len(data.passages), dtype=np.int64))
        pairs = list(dict.fromkeys(zip(titles, texts)))
        with Progress(
            TextColumn("[bold]cache lower layers"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            disable=not (show and get_console().is_terminal),  # off a terminal: one line cut at 80 columns
        ) as progress:
            task = progress.add_task("cache", total=len(queries) + len(pairs))
            step = lambda n: progress.advance(task, n)  # noqa: E731
            self.queries.fill(queries, queries, device, on_batch=step)
            self.passages.fill(pairs, pairs, device, on_batch=step)
        log.info(
            "lower-layer cache: %d queries, %d passages, %.2f GB",
            len(queries),
            len(pairs),
            (self.queries.bytes + self.passages.bytes) / 2**30,
        )

    def inputs(self, batch, device: torch.device) -> tuple[dict, dict]:
        qh, qm = self.queries.batch(batch.query_texts, batch.query_texts, device)
        pairs = list(zip(batch.passage_titles, batch.passage_texts))
        ph, pm = self.passages.batch(pairs, pairs, device)
        return {"hidden": qh, "attention_mask": qm}, {"hidden": ph, "attention_mask": pm}


def schedule(n_queries: int, cfg: TrainConfig) -> tuple[int, int]:
    """(optimizer steps per epoch, total steps); incomplete trailing micro-batches are not used."""
    micro = n_queries // cfg.batch_size
    per_epoch = micro // cfg.grad_accum
    if per_epoch == 0:
        raise ConfigError(
            f"{n_queries} training queries are fewer than one optimizer step needs "
            f"(batch_size {cfg.batch_size} x grad_accum {cfg.grad_accum})"
        )
    total = per_epoch * cfg.epochs
    return per_epoch, (min(total, cfg.max_steps) if cfg.max_steps > 0 else total)


def train(
    retriever: torch.nn.Module,
    data,
    cfg: TrainConfig,
    *,
    checkpoint_dir: str | Path,
    dist_info: DistInfo = DistInfo(),
    fingerprint: dict | None = None,
    on_step_end: Callable[[int], None] | None = None,
    loss: ContrastiveLoss | None = None,
    guide: Guide | None = None,
    snapshots: int = 0,
) -> dict:
    """Train ``retriever`` in place on ``data`` (a TrainData) with ``loss``; return a summary.

    ``loss``: the objective (pipeline.training.losses); None = the registered loss ``cfg`` selects
    (build_loss: NCE or CCR by beta/scale, multi-positive NCE with ``guide``, GIST's masking, or
    ``cfg.extra_positives``, relabelled positives).

    Writes ``checkpoint_dir/state.pt`` every ``checkpoint_every`` steps and the JSONL log
    ``checkpoint_dir/train_log.jsonl``; resumes from them when present and the fingerprint matches.
    ``on_step_end(step)`` runs after each optimizer step (and its checkpoint). ``snapshots``: the
    weights are kept at that many evenly spaced steps in ``checkpoint_dir/snapshots/``
    (pipeline.training.snapshots; the summary's ``snapshots`` lists the steps).
    """
    device = dist_info.device
    per_epoch, total = schedule(len(data), cfg)
    keep = set(snapshot_steps(total, snapshots))
    retriever.to(device)
    retriever.train()
    frozen, caches = _freeze(retriever, data, cfg, dist_info)
    engine = Engine.from_settings(cfg, device=device, checkpoint_dir=checkpoint_dir, dist_info=dist_info)
    optimizer = adamw(retriever, cfg.lr, cfg.weight_decay)
    scheduler = linear_schedule(optimizer, total, cfg.warmup_ratio)
    objective = _objective(cfg, loss, guide)
    # What decides the result; checkpoint_every does not, and the world size only changes dropout
    # masks (and, under bf16, rounding), so a run may resume on another number of GPUs. The precision
    # actually used is part of it: a checkpoint made in bf16 is not resumed on a host computing fp32.
    settings = cfg.model_dump(exclude={"checkpoint_every"})
    engine.prepare(
        {
            "config": settings,
            "loss": objective.describe(),
            "compute_precision": engine.compute_precision,
            # A checkpoint made without a snapshot this run keeps cannot give it back: start afresh.
            **({"snapshots": sorted(keep)} if keep else {}),
            **(fingerprint or {}),
        }
    )
    start = engine.resume({"model": retriever, "optimizer": optimizer, "scheduler": scheduler})
    if start:
        log.info("resuming at step %d of %d (epoch %d)", start, total, start // per_epoch)
    model: torch.nn.Module = DualEncoder(retriever, frozen)
    if dist_info.enabled:
        # The HF pooler is never used (we pool hidden states ourselves): let DDP skip unused weights.
        model = DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None, find_unused_parameters=True
        )
    log.info(
        "training %d steps (%d per epoch), %d queries/step, k=%d, in_batch=%s, loss %s, "
        "%d rank(s), computing in %s",
        total,
        per_epoch,
        cfg.batch_size * cfg.grad_accum,
        cfg.hard_negatives,
        cfg.in_batch,
        objective.describe(),
        dist_info.world_size,
        engine.compute_precision,
    )
    trainer = DenseTrainer(model, retriever, data, cfg, objective, engine, dist_info, caches, guide)
    trainer.optimizer, trainer.scheduler, trainer.per_epoch = optimizer, scheduler, per_epoch
    trainer.summary.update(
        steps=total,
        start_step=start,
        per_epoch=per_epoch,
        loss=objective.describe(),
        compute_precision=engine.compute_precision,
    )
    if keep:
        trainer.summary["snapshots"] = sorted(keep)

    def snapshot(done: int) -> None:
        if done in keep and dist_info.is_main:
            save_snapshot(retriever, Path(checkpoint_dir) / SNAPSHOT_DIR, done)

    engine.fit(
        trainer, start, total, "train", on_step_end=on_step_end, after_update=snapshot if keep else None
    )
    engine.check_weights([retriever], total, trainer.advice)
    return trainer.summary


def _freeze(retriever, data, cfg: TrainConfig, dist_info: DistInfo) -> tuple[int | None, StateCaches | None]:
    """train_layers: freeze the lower layers of both towers and cache their outputs (frozen_layers)."""
    if cfg.train_layers is None:
        return None, None
    towers = [retriever.query_model] + ([retriever.passage_model] if retriever.passage_model else [])
    frozen = [freeze_lower(t, cfg.train_layers) for t in towers][0]
    caches = StateCaches(retriever, frozen)
    caches.fill(data, dist_info.device, dist_info.is_main)
    log.info(
        "train_layers %d: %d lower layers and the embeddings frozen, their outputs cached",
        cfg.train_layers,
        frozen,
    )
    return frozen, caches


def _objective(cfg: TrainConfig, loss: ContrastiveLoss | None, guide: Guide | None) -> ContrastiveLoss:
    """The caller's ``loss``, else the registered loss the settings select; a caller's loss cannot
    take labelled columns (a guide or extra positives)."""
    if loss is None:
        return build_loss(cfg, guide.name if guide is not None else None)
    if guide is not None or cfg.extra_positives > 0:
        raise ConfigError(
            "a guide (GIST masking) or extra_positives (relabel) trains multi-positive NCE: no other "
            f"loss, beta 0 on the paper's scale (given beta {cfg.beta:g}, scale {cfg.scale})"
        )
    return loss


class DenseTrainer(StepTrainer):
    """The engine's view of DPR/CCR training: a step's micro-batches (a pure function of the step, see
    the module docstring), the contrastive loss of one, and the step's log line."""

    def __init__(
        self,
        model: torch.nn.Module,
        retriever: torch.nn.Module,
        data,
        cfg: TrainConfig,
        objective: ContrastiveLoss,
        engine: Engine,
        dist_info: DistInfo,
        caches: StateCaches | None,
        guide: Guide | None,
    ) -> None:
        self.ddp_model, self.model, self.data, self.cfg = model, retriever, data, cfg
        self.objective, self.engine, self.dist, self.caches, self.guide = (
            objective,
            engine,
            dist_info,
            caches,
            guide,
        )
        self.labelled = getattr(objective, "labelled", False)
        self.advice = _advice(cfg, engine.scaler is not None)
        self.order_cache: dict[int, np.ndarray] = {}
        self.summary: dict = {}
        self.per_epoch = 1

    def batches(self, step: int) -> StepPlan:
        cfg, rank, world = self.cfg, self.dist.rank, self.dist.world_size
        epoch, position = divmod(step, self.per_epoch)
        if epoch not in self.order_cache:
            self.order_cache.clear()
            self.order_cache[epoch] = epoch_order(len(self.data), cfg.seed, epoch)
        torch.manual_seed(step_seed(cfg.seed, step, rank))
        micro = [
            micro_batch_indices(
                self.order_cache[epoch], position * cfg.grad_accum + i, cfg.batch_size, rank, world
            )
            for i in range(cfg.grad_accum)
        ]
        # Each micro-batch is read when its forward runs, as it always was.
        return StepPlan(_Lazy(self.data, micro, cfg, epoch), cfg.batch_size * cfg.grad_accum, self.ddp_model)

    def loss(self, batch) -> tuple[torch.Tensor, dict]:
        return _micro_step(
            self.ddp_model,
            self.model,
            batch,
            self.cfg,
            self.objective,
            self.engine,
            self.dist.rank,
            self.caches,
            self.guide,
        )

    def values(self, results: list[tuple[torch.Tensor, dict]]) -> dict[str, float]:
        device = self.engine.device
        totals = torch.zeros(4, device=device)
        for value, parts in results:
            excluded = parts.get("excluded", torch.zeros((), device=device))
            totals += torch.stack([value, parts["nce"], parts["ccr_term"], excluded.to(device)])
        # Reduced before the update: every rank then sees the same loss, so a divergence stops
        # all ranks at the same step (none is left waiting in a collective).
        totals = all_reduce_mean(totals / self.cfg.grad_accum).tolist()
        values = {"loss": totals[0], "nce": totals[1], "ccr": totals[2]}
        if self.labelled:  # columns out of a query's softmax, per query: what the labels took out
            values["excluded"] = totals[3]
        return values

    def record(self, step: int, values: dict[str, float], lr: float, eps: float) -> StepRecord:
        epoch, position = divmod(step, self.per_epoch)
        record = {"step": step + 1, "epoch": epoch, **values, "lr": lr, "examples_per_s": round(eps, 3)}
        self.summary.update(last=record)
        return StepRecord(record, extra={"epoch": epoch, "position": position + 1})


class _Lazy(Sequence):
    """A step's micro-batches, each read from the data when it is indexed."""

    def __init__(self, data, indices: list, cfg: TrainConfig, epoch: int) -> None:
        self.data, self.indices, self.cfg, self.epoch = data, indices, cfg, epoch

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int):
        if not 0 <= i < len(self.indices):
            raise IndexError(i)
        return self.data.batch(self.indices[i], self.cfg.hard_negatives, self.epoch, self.cfg.extra_positives)


def _advice(cfg: TrainConfig, fp16: bool) -> str:
    """What to change, in the terms of the config (sections dpr and ccr share these settings)."""
    return fix_advice(
        f"lower the learning rate (lr of config section dpr or ccr, --lr; now {cfg.lr:g})",
        clip="max_grad_norm" if cfg.max_grad_norm <= 0 else None,
        fp16="precision" if fp16 else None,
    )


def _micro_step(
    model: torch.nn.Module,
    retriever: torch.nn.Module,
    batch,
    cfg: TrainConfig,
    objective: ContrastiveLoss,
    engine: Engine,
    rank: int,
    caches: StateCaches | None = None,
    guide: Guide | None = None,
) -> tuple[torch.Tensor, dict]:
    device = engine.device
    if caches is not None:
        queries, passages = caches.inputs(batch, device)
    else:
        queries = {k: v.to(device) for k, v in retriever.tokenize_queries(batch.query_texts).items()}
        passages = {
            k: v.to(device)
            for k, v in retriever.tokenize_passages(batch.passage_titles, batch.passage_texts).items()
        }
    with engine.autocast():
        q_emb, p_emb = model(queries, passages)
    n_local = len(batch.query_texts)
    if cfg.in_batch:
        # Global passage matrix in rank order; our queries' positives sit after the earlier ranks'.
        p_emb = all_gather_with_grad(p_emb)
        first = rank * n_local
    else:
        first = 0  # only the query's own group is in P: no communication needed
    settings = retriever.settings
    scores = similarity_scores(q_emb, p_emb, settings.similarity, settings.temperature)
    positives = positive_columns(n_local, batch.group_size, first, device=scores.device)
    if not getattr(objective, "labelled", False):
        return objective(scores, positives, batch.group_size, in_batch=cfg.in_batch)
    labels = batch_labels(batch, positives, scores.shape[1], first, in_batch=cfg.in_batch, guide=guide)
    value, parts = objective(scores, positives, batch.group_size, in_batch=cfg.in_batch, labels=labels)
    # In-batch off: the columns outside a query's group were never in its softmax (not counted).
    excluded = labels.exclude
    if not cfg.in_batch:
        excluded = excluded & own_groups(tuple(excluded.shape), batch.group_size, first, excluded.device)
    return value, {**parts, "excluded": excluded.sum(dim=1).double().mean()}

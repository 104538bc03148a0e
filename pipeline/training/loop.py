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
from contextlib import nullcontext
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from pydantic import Field, ValidationError
from rich import get_console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from torch.nn.parallel import DistributedDataParallel

from pipeline.core.config import ConfigError
from pipeline.core.distributed import DistInfo, all_gather, all_gather_with_grad, all_reduce_mean
from pipeline.core.settings import Objective, TrainSettings, describe_errors
from pipeline.training.data import epoch_order, micro_batch_indices
from pipeline.training.engine import Engine, adamw, fix_advice, linear_schedule, step_seed
from pipeline.training.frozen_layers import LowerStateCache, freeze_lower, run_layers
from pipeline.training.losses import (
    ColumnLabels,
    ContrastiveLoss,
    MultiPositiveNCELoss,
    gist_exclude,
    loss_for,
    one_positive,
    own_groups,
    positive_columns,
    relabel_labels,
    similarity_scores,
)

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


class Guide:
    """GISTEmbedLoss's guide (dpr_gist_<guide>): a frozen retriever folder that scores each micro-batch's
    queries against its passages. Eval mode (no dropout) and float32 without autocast: the same batch
    gets the same scores, so the mask is deterministic and a resumed run replays it."""

    def __init__(self, folder: str | Path, device: torch.device):
        from pipeline.retrieval.model import Retriever

        self.folder = str(folder)
        self.retriever = Retriever.load(folder).to(device).eval()
        for param in self.retriever.parameters():
            param.requires_grad_(False)
        self.device = device

    @torch.no_grad()
    def scores(self, batch, in_batch: bool) -> torch.Tensor:
        """[Q_local, N] guide scores, N = the (gathered, with in-batch negatives) passage columns."""
        r = self.retriever
        q = r.embed_queries({k: v.to(self.device) for k, v in r.tokenize_queries(batch.query_texts).items()})
        tokens = r.tokenize_passages(batch.passage_titles, batch.passage_texts)
        p = r.embed_passages({k: v.to(self.device) for k, v in tokens.items()})
        if in_batch:
            p = all_gather(p)
        return similarity_scores(q.float(), p.float(), r.settings.similarity, r.settings.temperature)


def batch_labels(
    batch, positives: torch.Tensor, n_columns: int, first: int, *, in_batch: bool, guide: Guide | None
) -> ColumnLabels:
    """The columns' labels of a micro-batch: the relabelled positives of its queries (a batch with
    extra positive slots), and the negatives the guide scores above a query's positive (guide)."""
    labels = one_positive((len(batch.query_texts), n_columns), positives)
    if batch.passage_ids is not None:
        ids = torch.as_tensor(batch.passage_ids, device=positives.device)
        labels = relabel_labels(
            all_gather(ids) if in_batch else ids, batch.positive_sets, batch.group_size, first
        )
    if guide is not None:
        above = gist_exclude(guide.scores(batch, in_batch).to(positives.device), positives)
        labels = ColumnLabels(labels.positive, labels.exclude | (above & ~labels.positive))
    return labels


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
) -> dict:
    """Train ``retriever`` in place on ``data`` (a TrainData) with ``loss``; return a summary.

    ``loss``: the objective (pipeline.training.losses); None = the one ``cfg``'s beta/scale name, or
    multi-positive NCE with ``guide`` (GIST's masking) or ``cfg.extra_positives`` (relabelled positives).

    Writes ``checkpoint_dir/state.pt`` every ``checkpoint_every`` steps and the JSONL log
    ``checkpoint_dir/train_log.jsonl``; resumes from them when present and the fingerprint matches.
    ``on_step_end(step)`` runs after each optimizer step (and its checkpoint).
    """
    checkpoint_dir = Path(checkpoint_dir)
    device = dist_info.device
    world, rank = dist_info.world_size, dist_info.rank
    k = cfg.hard_negatives
    per_epoch, total = schedule(len(data), cfg)
    examples_per_step = cfg.batch_size * cfg.grad_accum

    retriever.to(device)
    retriever.train()
    frozen, caches = None, None
    if cfg.train_layers is not None:
        towers = [retriever.query_model] + ([retriever.passage_model] if retriever.passage_model else [])
        frozen = [freeze_lower(t, cfg.train_layers) for t in towers][0]
        caches = StateCaches(retriever, frozen)
        caches.fill(data, device, dist_info.is_main)
        log.info(
            "train_layers %d: %d lower layers and the embeddings frozen, their outputs cached",
            cfg.train_layers,
            frozen,
        )
    engine = Engine.from_settings(cfg, device=device, checkpoint_dir=checkpoint_dir, dist_info=dist_info)
    optimizer = adamw(retriever, cfg.lr, cfg.weight_decay)
    scheduler = linear_schedule(optimizer, total, cfg.warmup_ratio)

    # What decides the result; checkpoint_every does not, and the world size only changes dropout
    # masks (and, under bf16, rounding), so a run may resume on another number of GPUs. The precision
    # actually used is part of it: a checkpoint made in bf16 is not resumed on a host computing fp32.
    labelled = guide is not None or cfg.extra_positives > 0
    if labelled and (loss is not None or cfg.beta != 0 or cfg.scale != "paper"):
        raise ConfigError(
            "a guide (GIST masking) or extra_positives (relabel) trains multi-positive NCE: no other "
            f"loss, beta 0 on the paper's scale (given beta {cfg.beta:g}, scale {cfg.scale})"
        )
    if labelled:
        objective = MultiPositiveNCELoss(
            relabel=cfg.extra_positives > 0, guide=Path(guide.folder).name if guide is not None else None
        )
    else:
        objective = loss if loss is not None else loss_for(cfg.beta, cfg.scale)
    settings = cfg.model_dump(exclude={"checkpoint_every"})
    engine.prepare(
        {
            "config": settings,
            "loss": objective.describe(),
            "compute_precision": engine.compute_precision,
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
        examples_per_step,
        k,
        cfg.in_batch,
        objective.describe(),
        world,
        engine.compute_precision,
    )

    advice = _advice(cfg, engine.scaler is not None)
    order_cache: dict[int, np.ndarray] = {}
    summary = {
        "steps": total,
        "start_step": start,
        "per_epoch": per_epoch,
        "loss": objective.describe(),
        "compute_precision": engine.compute_precision,
    }
    with engine.run(start, total, "train") as run:
        for step in range(start, total):
            run.begin()
            epoch, position = divmod(step, per_epoch)
            if epoch not in order_cache:
                order_cache.clear()
                order_cache[epoch] = epoch_order(len(data), cfg.seed, epoch)
            torch.manual_seed(step_seed(cfg.seed, step, rank))
            totals = torch.zeros(4, device=device)
            for micro in range(cfg.grad_accum):
                idx = micro_batch_indices(
                    order_cache[epoch], position * cfg.grad_accum + micro, cfg.batch_size, rank, world
                )
                batch = data.batch(idx, k, epoch, cfg.extra_positives)
                sync = micro == cfg.grad_accum - 1 or not dist_info.enabled
                with model.no_sync() if not sync else nullcontext():
                    value, parts = _micro_step(
                        model, retriever, batch, cfg, objective, engine, rank, caches, guide
                    )
                    engine.backward(value / cfg.grad_accum)
                excluded = parts.get("excluded", torch.zeros((), device=device))
                totals += torch.stack([value.detach(), parts["nce"], parts["ccr_term"], excluded.to(device)])
            # Reduced before the update: every rank then sees the same loss, so a divergence stops
            # all ranks at the same step (none is left waiting in a collective).
            totals = all_reduce_mean(totals / cfg.grad_accum).tolist()
            done = step + 1
            values = {"loss": totals[0], "nce": totals[1], "ccr": totals[2]}
            if labelled:  # columns out of a query's softmax, per query: what the labels took out
                values["excluded"] = totals[3]
            lr = engine.step(done, optimizer, scheduler, values, model=retriever, advice=advice)
            eps = run.rate(examples_per_step)
            record = {"step": done, "epoch": epoch, **values, "lr": lr, "examples_per_s": round(eps, 3)}
            run.end(done, record, lr=lr, eps=eps, extra={"epoch": epoch, "position": position + 1})
            summary.update(last=record)
            if on_step_end is not None:
                on_step_end(done)
    engine.check_weights([retriever], total, advice)
    return summary


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
    if not isinstance(objective, MultiPositiveNCELoss):
        return objective(scores, positives, batch.group_size, in_batch=cfg.in_batch)
    labels = batch_labels(batch, positives, scores.shape[1], first, in_batch=cfg.in_batch, guide=guide)
    value, parts = objective(scores, positives, batch.group_size, in_batch=cfg.in_batch, labels=labels)
    # In-batch off: the columns outside a query's group were never in its softmax (not counted).
    excluded = labels.exclude
    if not cfg.in_batch:
        excluded = excluded & own_groups(tuple(excluded.shape), batch.group_size, first, excluded.device)
    return value, {**parts, "excluded": excluded.sum(dim=1).double().mean()}

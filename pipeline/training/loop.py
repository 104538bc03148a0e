"""The training loop shared by DPR (NCE) and CCR fine-tuning.

AdamW, linear warm-up/decay, gradient clipping and accumulation, autocast (pipeline.core.precision:
bf16/fp16 on CUDA, bf16 on a CPU with native bf16), checkpoints every N steps, exact resume, DDP with
gathered in-batch negatives, a rich progress bar and a JSONL log.

Exact resume: everything random is a function of (seed, step, rank) or (seed, qid, epoch). Dropout's
torch generator is re-seeded at the start of every optimizer step from (seed, step, rank) and the data
of step t is a pure function of t (epoch = t // steps_per_epoch, position = t % steps_per_epoch). A
run restarted from the checkpoint at step s therefore replays steps s+1... bit for bit, and ends with
the same weights as a run that was never interrupted.
"""

from __future__ import annotations

import json
import logging
import math
import shutil
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from pydantic import ValidationError
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from torch.nn.parallel import DistributedDataParallel
from transformers import get_linear_schedule_with_warmup

from pipeline.core.config import ConfigError
from pipeline.core.distributed import DistInfo, all_gather_with_grad, all_reduce_mean, barrier
from pipeline.core.precision import autocast, autocast_dtype, precision_name
from pipeline.core.settings import Objective, TrainSettings, describe_errors
from pipeline.core.storage import DataError, atomic_open, write_json
from pipeline.training.checkpoint import load_checkpoint, save_checkpoint
from pipeline.training.data import epoch_order, micro_batch_indices
from pipeline.training.frozen_layers import LowerStateCache, freeze_lower, run_layers
from pipeline.training.losses import ContrastiveLoss, loss_for, positive_columns, similarity_scores

log = logging.getLogger("sieve.trainer")

FINGERPRINT_FILE = "fingerprint.json"
LOG_FILE = "train_log.jsonl"


class TrainConfig(Objective, TrainSettings):
    """What the loop trains with: the dpr/ccr section's settings (pipeline.core.settings) and a seed.
    Built in code, a bad value is a ConfigError naming the setting."""

    seed: int = 0

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
            disable=not show,
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


def step_seed(seed: int, step: int, rank: int) -> int:
    return int(np.random.SeedSequence([seed, step, rank]).generate_state(1)[0])


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


def adamw(model: torch.nn.Module, lr: float, weight_decay: float) -> torch.optim.Optimizer:
    """AdamW without weight decay on biases and LayerNorm weights (the BERT recipe)."""
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if param.requires_grad:
            (no_decay if param.ndim < 2 or "LayerNorm" in name else decay).append(param)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    # torch's fused kernel updates every parameter in one pass instead of a loop over tensors: on the
    # project's CPU 14 ms against 81 ms a step for MiniLM's 22.7M parameters, 4-6% of a DPR step
    # (bench/train_throughput.py; sentence-transformers' trainer uses it by default).
    params = decay + no_decay
    fused = bool(params) and all(p.device.type in ("cpu", "cuda") and p.is_floating_point() for p in params)
    return torch.optim.AdamW(groups, lr=lr, fused=fused or None)


def prepare_checkpoint_dir(directory: Path, fingerprint: dict, dist_info: DistInfo) -> None:
    """Start fresh when a checkpoint was written for other settings or inputs (never resume it)."""
    if dist_info.is_main:
        path = directory / FINGERPRINT_FILE
        recorded = _read_fingerprint(path) if path.exists() else fingerprint
        if recorded is None:
            # Which settings the checkpoint was made under cannot be known: resuming it could mix
            # two configurations, so its progress is given up, as for a mismatch.
            log.warning(
                "%s is damaged (not the JSON this stage writes): starting afresh in %s", path, directory
            )
            shutil.rmtree(directory)
        elif recorded != fingerprint:
            log.warning("checkpoint in %s was written for other settings/inputs: starting afresh", directory)
            shutil.rmtree(directory)
        if not path.exists():
            write_json(path, fingerprint)
    barrier()


def _read_fingerprint(path: Path) -> dict | None:
    """The recorded fingerprint, or None when the file is not a readable JSON object."""
    try:
        recorded = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return recorded if isinstance(recorded, dict) else None


def truncate_log(path: Path, step: int) -> None:
    """Drop the JSONL log lines of steps after ``step``: a resumed run logs them again.

    A damaged last line (a full disk or a kill during the per-step append) is dropped with a warning:
    each step's line is written before its checkpoint, so a line that did not finish belongs to a step
    after the last checkpoint, which the resumed run logs again. Damage before the last line is not
    what an interrupted append leaves: a DataError naming the line.
    """
    if not path.exists():
        return
    raw = path.read_text(encoding="utf-8", errors="replace").splitlines()
    lines = []
    for number, line in enumerate(raw, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            logged = record["step"]
            if not isinstance(logged, int):
                raise TypeError(type(logged).__name__)
        except (ValueError, KeyError, TypeError) as exc:
            if number == len(raw):
                log.warning(
                    "%s: line %d is incomplete (%s); dropped, its step is logged again", path, number, exc
                )
                continue
            raise DataError(
                f"line {number} is not a step record ({type(exc).__name__}: {exc}); only the last line "
                "can be cut short by an interrupted run: delete the checkpoint folder to start afresh",
                file=path,
            ) from None
        if logged <= step:
            lines.append(line)
    with atomic_open(path, "w", encoding="utf-8") as handle:
        handle.write("".join(line + "\n" for line in lines))


class ProgressLines:
    """A plain log line every ``every`` steps or ``seconds`` (step, loss, lr, examples/s, ETA): the rich
    bar draws only on a terminal, so a job under Snakemake or SLURM would print nothing for minutes."""

    def __init__(self, start: int, total: int, every: int | None = None, seconds: float = 60.0):
        self.start, self.total = start, total
        self.every = every or max(1, (total - start) // 10)
        self.seconds = seconds
        self.began = self.last = time.perf_counter()

    def __call__(self, done: int, loss: float, lr: float, eps: float) -> str | None:
        now = time.perf_counter()
        if not (
            done == self.total or (done - self.start) % self.every == 0 or now - self.last >= self.seconds
        ):
            return None
        self.last = now
        rate = (now - self.began) / max(done - self.start, 1)
        eta = rate * (self.total - done)
        line = (
            f"step {done}/{self.total} ({100 * done / max(self.total, 1):.0f}%) loss {loss:.4f} lr {lr:.2e} "
            f"{eps:.1f} ex/s, {rate:.2f} s/step, ETA {int(eta // 60)}m{int(eta % 60):02d}s"
        )
        log.info(line)
        return line


def _progress(enabled: bool) -> Progress:
    return Progress(
        TextColumn("[bold]train"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("loss {task.fields[loss]:.4f} lr {task.fields[lr]:.2e} {task.fields[eps]:.1f} ex/s"),
        TimeRemainingColumn(),
        disable=not enabled,
    )


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
) -> dict:
    """Train ``retriever`` in place on ``data`` (a TrainData) with ``loss``; return a summary.

    ``loss``: the objective (pipeline.training.losses); None = the one ``cfg``'s beta/scale name.

    Writes ``checkpoint_dir/state.pt`` every ``checkpoint_every`` steps and the JSONL log
    ``checkpoint_dir/train_log.jsonl``; resumes from them when present and the fingerprint matches.
    ``on_step_end(step)`` runs after each optimizer step (and its checkpoint).
    """
    checkpoint_dir = Path(checkpoint_dir)
    device = dist_info.device
    world, rank = dist_info.world_size, dist_info.rank
    k = cfg.hard_negatives
    similarity = retriever.settings.similarity
    temperature = retriever.settings.temperature
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
    optimizer = adamw(retriever, cfg.lr, cfg.weight_decay)
    scheduler = get_linear_schedule_with_warmup(optimizer, int(cfg.warmup_ratio * total), total)
    amp_dtype = autocast_dtype(device, cfg.precision)
    scaler = torch.amp.GradScaler("cuda") if amp_dtype == torch.float16 else None

    # What decides the result; checkpoint_every does not, and the world size only changes dropout
    # masks (and, under bf16, rounding), so a run may resume on another number of GPUs. The precision
    # actually used is part of it: a checkpoint made in bf16 is not resumed on a host computing fp32.
    objective = loss if loss is not None else loss_for(cfg.beta, cfg.scale)
    settings = cfg.model_dump(exclude={"checkpoint_every"})
    fingerprint = {
        "config": settings,
        "loss": objective.describe(),
        "compute_precision": precision_name(amp_dtype),
        **(fingerprint or {}),
    }
    prepare_checkpoint_dir(checkpoint_dir, fingerprint, dist_info)
    modules = {"model": retriever, "optimizer": optimizer, "scheduler": scheduler, "scaler": scaler}
    resumed = load_checkpoint(checkpoint_dir, modules=modules)
    start = resumed["step"] if resumed else 0
    log_path = checkpoint_dir / LOG_FILE
    if dist_info.is_main:
        truncate_log(log_path, start)
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
        precision_name(amp_dtype),
    )

    order_cache: dict[int, np.ndarray] = {}
    summary = {
        "steps": total,
        "start_step": start,
        "per_epoch": per_epoch,
        "loss": objective.describe(),
        "compute_precision": precision_name(amp_dtype),
    }
    with (
        _progress(dist_info.is_main) as progress,
        open(log_path, "a", encoding="utf-8") if dist_info.is_main else _Null() as log_file,
    ):
        task = progress.add_task(
            "train", total=total, completed=start, loss=0.0, lr=scheduler.get_last_lr()[0], eps=0.0
        )
        progress_lines = ProgressLines(start, total)
        for step in range(start, total):
            tick = time.perf_counter()
            epoch, position = divmod(step, per_epoch)
            if epoch not in order_cache:
                order_cache.clear()
                order_cache[epoch] = epoch_order(len(data), cfg.seed, epoch)
            torch.manual_seed(step_seed(cfg.seed, step, rank))
            optimizer.zero_grad(set_to_none=True)
            totals = torch.zeros(3, device=device)
            for micro in range(cfg.grad_accum):
                idx = micro_batch_indices(
                    order_cache[epoch], position * cfg.grad_accum + micro, cfg.batch_size, rank, world
                )
                batch = data.batch(idx, k, epoch)
                sync = micro == cfg.grad_accum - 1 or not dist_info.enabled
                ctx = model.no_sync() if not sync else _Null()
                with ctx:
                    value, parts = _micro_step(
                        model,
                        retriever,
                        batch,
                        cfg,
                        objective,
                        device,
                        similarity,
                        temperature,
                        rank,
                        amp_dtype,
                        caches,
                    )
                    scaled = value / cfg.grad_accum
                    (scaler.scale(scaled) if scaler else scaled).backward()
                totals += torch.stack([value.detach(), parts["nce"], parts["ccr_term"]])
            # Reduced before the update: every rank then sees the same loss, so a divergence stops
            # all ranks at the same step (none is left waiting in a collective).
            totals = all_reduce_mean(totals / cfg.grad_accum).tolist()
            done = step + 1
            if scaler:
                scaler.unscale_(optimizer)
            grad_norm = grad_total_norm(retriever.parameters(), cfg.max_grad_norm)
            # fp16's GradScaler skips steps with inf gradients by design; the loss still must be finite.
            check_finite_step(
                done,
                {"loss": totals[0], "nce": totals[1], "ccr": totals[2]},
                grad_norm=None if scaler else grad_norm,
                advice=_advice(cfg, scaler is not None),
                log_file=log_path,
            )
            if scaler:
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
            lr = scheduler.get_last_lr()[0]
            scheduler.step()
            eps = examples_per_step / max(time.perf_counter() - tick, 1e-9)
            record = {
                "step": done,
                "epoch": epoch,
                "loss": totals[0],
                "nce": totals[1],
                "ccr": totals[2],
                "lr": lr,
                "examples_per_s": round(eps, 3),
            }
            if dist_info.is_main:
                # allow_nan=False: the log stays strict JSON (the checks above keep it finite).
                log_file.write(json.dumps(record, allow_nan=False) + "\n")
                log_file.flush()
            progress.update(task, completed=done, loss=totals[0], lr=lr, eps=eps)
            if dist_info.is_main:
                progress_lines(done, float(totals[0]), lr, eps)
            if cfg.checkpoint_every and done % cfg.checkpoint_every == 0 and done < total:
                if dist_info.is_main:
                    save_checkpoint(
                        checkpoint_dir,
                        step=done,
                        modules=modules,
                        extra={"epoch": epoch, "position": position + 1},
                    )
                barrier()
            summary.update(last=record)
            if on_step_end is not None:
                on_step_end(done)
    check_finite_weights(retriever, total, _advice(cfg, scaler is not None))
    return summary


# ---- divergence -----------------------------------------------------------------------------------


def grad_total_norm(parameters, max_norm: float) -> float:
    """The gradients' total L2 norm, clipped to ``max_norm`` when it is > 0.

    Without clipping the norm is still computed (max_norm inf: the gradients are multiplied by
    exactly 1.0), so a non-finite gradient is seen before the optimizer applies it.
    """
    limit = max_norm if max_norm > 0 else float("inf")
    return float(torch.nn.utils.clip_grad_norm_(parameters, limit))


def check_finite_step(
    step: int,
    parts: dict[str, float],
    *,
    grad_norm: float | None,
    advice: str,
    log_file: str | Path | None = None,
) -> None:
    """Raise ConfigError when a loss part or the gradient norm of optimizer step ``step`` (1-based,
    as in the log) is NaN or infinite: training has diverged and every later step would be NaN.

    Called before the optimizer step, so the diverged step's update is never applied or saved.
    """
    bad_grad = grad_norm is not None and not math.isfinite(grad_norm)
    if all(math.isfinite(value) for value in parts.values()) and not bad_grad:
        return
    shown = ", ".join(f"{name} {value:.6g}" for name, value in parts.items())
    if grad_norm is not None:
        shown += f", gradient norm {grad_norm:.6g}"
    where = f"; {log_file} holds the steps before it" if log_file is not None else ""
    raise ConfigError(
        f"training diverged at step {step} ({shown}): nothing of this step was "
        f"applied or saved{where}. {advice}"
    )


def check_finite_weights(model: torch.nn.Module, step: int, advice: str) -> None:
    """Refuse to hand on weights that hold NaN/inf (e.g. an update that overflowed float32)."""
    for name, param in model.named_parameters():
        if not bool(torch.isfinite(param).all()):
            raise ConfigError(
                f"training diverged: weight {name!r} is not finite after step "
                f"{step}; the model was not saved. {advice}"
            )


def _advice(cfg: TrainConfig, fp16: bool) -> str:
    """What to change, in the terms of the config (sections dpr and ccr share these settings)."""
    tips = [f"lower the learning rate (lr of config section dpr or ccr, --lr; now {cfg.lr:g})"]
    if cfg.max_grad_norm <= 0:
        tips.append("clip gradients (max_grad_norm > 0; now off)")
    if fp16:
        tips.append("use precision bf16 or fp32 instead of fp16")
    return "To fix it: " + "; ".join(tips) + "."


def _micro_step(
    model,
    retriever,
    batch,
    cfg: TrainConfig,
    objective: ContrastiveLoss,
    device,
    similarity,
    temperature,
    rank,
    amp_dtype,
    caches: StateCaches | None = None,
):
    if caches is not None:
        queries, passages = caches.inputs(batch, device)
    else:
        queries = {k: v.to(device) for k, v in retriever.tokenize_queries(batch.query_texts).items()}
        passages = {
            k: v.to(device)
            for k, v in retriever.tokenize_passages(batch.passage_titles, batch.passage_texts).items()
        }
    with autocast(device, amp_dtype):
        q_emb, p_emb = model(queries, passages)
    n_local = len(batch.query_texts)
    if cfg.in_batch:
        # Global passage matrix in rank order; our queries' positives sit after the earlier ranks'.
        p_emb = all_gather_with_grad(p_emb)
        first = rank * n_local
    else:
        first = 0  # only the query's own group is in P: no communication needed
    scores = similarity_scores(q_emb, p_emb, similarity, temperature)
    positives = positive_columns(n_local, batch.group_size, first, device=scores.device)
    return objective(scores, positives, batch.group_size, in_batch=cfg.in_batch)


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None

    def write(self, _text: str) -> None:
        return None

    def flush(self) -> None:
        return None

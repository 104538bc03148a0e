"""The training engine every trainer shares: DPR/CCR (training.loop), AR2's rounds and listwise ranker
(ar2.train, ar2.train_ranker) and the cross-encoder filter (sieve.cross_encoder).

A trainer brings its batches, its loss and its step's randomness; the engine owns the rest, written
once: AdamW (fused, the BERT decay groups), the linear warm-up/decay schedule, autocast in the
configured precision (with fp16's GradScaler), gradient clipping, the finite checks with advice in
config terms, the checkpoint folder (fingerprint, atomic ``state.pt``, resume), the per-step JSONL log
(cut back to the checkpoint on resume, a half-written last line tolerated), progress (a rich bar on
a terminal, plain log lines everywhere else) and the job's time limit: a run that would not finish
before it checkpoints and exits with EXIT_CONTINUE, and the next attempt resumes (see JobDeadline).

The step loop itself is the engine's too (Engine.fit); a trainer is a StepTrainer::

    engine = Engine(device=..., precision=..., max_grad_norm=..., checkpoint_dir=ckpt)
    optimizer = adamw(model, lr, weight_decay); scheduler = linear_schedule(optimizer, total, ratio)
    start = engine.resume({"model": model, "optimizer": optimizer, "scheduler": scheduler})
    engine.fit(trainer, start, total, "train")  # trainer: batches(step), loss(batch), update(step), record(...)
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import subprocess
import time
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence

import numpy as np
import torch
import torch.distributed
from rich import get_console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from torch.nn.parallel import DistributedDataParallel
from transformers import get_linear_schedule_with_warmup

from pipeline.core.config import ConfigError
from pipeline.core.distributed import DistInfo, barrier
from pipeline.core.precision import autocast, autocast_dtype, precision_name
from pipeline.core.storage import DataError, atomic_open, write_json
from pipeline.training.checkpoint import load_checkpoint, save_checkpoint

log = logging.getLogger("sieve.trainer")

FINGERPRINT_FILE = "fingerprint.json"
LOG_FILE = "train_log.jsonl"

# sysexits.h's EX_TEMPFAIL ("a temporary failure; the user is invited to retry"): the run stopped
# before its job's time limit with its progress checkpointed, and the same command continues it.
EXIT_CONTINUE = 75
# The time a stop leaves before the limit is at least this, and at least twice the slowest step plus
# checkpoint seen so far: SLURM kills at the limit (after KillWait, often 30 s), and a step that
# started too late would lose everything since the last checkpoint.
MIN_MARGIN_S = 300.0
DEADLINE_ENV = "SIEVE_DEADLINE"
MARGIN_ENV = "SIEVE_DEADLINE_MARGIN"


# ---- optimizer, schedule, step randomness ----------------------------------------------------------


def adamw(
    model: torch.nn.Module, lr: float, weight_decay: float, *, bert_groups: bool = True
) -> torch.optim.Optimizer:
    """AdamW without weight decay on biases and LayerNorm weights (the BERT recipe), fused.

    ``bert_groups=False``: decay on every parameter and torch's default (unfused) kernel, the
    cross-encoder filter's optimizer since it was written; kept so that its models stay the same.
    """
    if not bert_groups:
        return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
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


def linear_schedule(
    optimizer: torch.optim.Optimizer, total: int, warmup_ratio: float
) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up over ``warmup_ratio`` of ``total`` steps, then linear decay to 0 at ``total``."""
    # max(total, 1): a horizon of 0 steps (an AR2 phase switched off) would divide by zero.
    return get_linear_schedule_with_warmup(optimizer, int(warmup_ratio * total), max(total, 1))


def step_seed(*keys: int) -> int:
    """The torch seed of one step (dropout), from e.g. (seed, step, rank) or (seed, round, step): a
    step's randomness then does not depend on where a run started, so a resumed run replays it."""
    return int(np.random.SeedSequence(list(keys)).generate_state(1)[0])


# ---- finite checks ---------------------------------------------------------------------------------


def grad_total_norm(parameters: Iterable[torch.nn.Parameter], max_norm: float) -> float:
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


def fix_advice(lr: str, *, clip: str | None = None, fp16: str | None = None, scope: str = "") -> str:
    """What to change after a divergence, in the trainer's config terms: ``lr`` names the learning
    rate to lower; ``clip`` the max_grad_norm setting when clipping is off; ``fp16`` the precision
    setting when it is fp16."""
    tips = [lr]
    if clip:
        tips.append(f"clip gradients ({clip} > 0; now off)")
    if fp16:
        tips.append(f"use {fp16} bf16 or fp32 instead of fp16")
    return f"To fix it{scope}: " + "; ".join(tips) + "."


# ---- checkpoint folder and log ---------------------------------------------------------------------


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


# ---- progress --------------------------------------------------------------------------------------


class ProgressLines:
    """A plain log line every ``every`` steps or ``seconds`` (step, loss, lr, examples/s, ETA): the rich
    bar draws only on a terminal, so a job under Snakemake or SLURM would print nothing for minutes."""

    def __init__(self, start: int, total: int, every: int | None = None, seconds: float = 60.0):
        self.start, self.total = start, total
        self.every = every or max(1, (total - start) // 10)
        self.seconds = seconds
        self.began = self.last = time.perf_counter()

    def __call__(self, done: int, loss: float, lr: float, eps: float, note: str = "") -> str | None:
        now = time.perf_counter()
        if not (
            done == self.total or (done - self.start) % self.every == 0 or now - self.last >= self.seconds
        ):
            return None
        self.last = now
        rate = (now - self.began) / max(done - self.start, 1)
        eta = rate * (self.total - done)
        line = (
            f"step {done}/{self.total} ({100 * done / max(self.total, 1):.0f}%) loss {loss:.4f}{note} "
            f"lr {lr:.2e} {eps:.1f} ex/s, {rate:.2f} s/step, ETA {int(eta // 60)}m{int(eta % 60):02d}s"
        )
        log.info(line)
        return line


def progress_bar(enabled: bool = True) -> Progress:
    """The engine's rich bar: the run's label (its description), steps, loss, lr and examples/s. On a
    terminal only: elsewhere (a job's output file) rich drew nothing until the end and then one line cut
    at 80 columns ("6…/60", "0:…"); ProgressLines' plain lines show the progress there."""
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("loss {task.fields[loss]:.4f} lr {task.fields[lr]:.2e} {task.fields[eps]:.1f} ex/s"),
        TimeRemainingColumn(),
        disable=not (enabled and get_console().is_terminal),
    )


# ---- the job's time limit --------------------------------------------------------------------------


class TimeLimitStop(SystemExit):
    """A run stopped before its job's time limit, its progress in the checkpoint: the process exits
    with EXIT_CONTINUE and no traceback (a SystemExit passes the stages' error handling), its outputs
    unwritten, so the workflow reruns the job (Snakemake's ``retries``) and the rerun resumes."""

    def __init__(self, step: int, total: int) -> None:
        super().__init__(EXIT_CONTINUE)
        self.step, self.total = step, total


def _parse_time(text: str, what: str) -> float:
    """Seconds since the epoch of ``text``: a number (epoch seconds) or an ISO 8601 time (local time
    when it names no zone, as squeue prints it)."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise ConfigError(
            f"{what}: {text!r} is not a time (expected seconds since the epoch or an ISO 8601 time, "
            "e.g. 2026-11-29T10:00:00)"
        ) from None


def _slurm_end_time(job_id: str, env: Mapping[str, str]) -> float | None:
    """The end time SLURM holds for ``job_id`` (squeue, which sees a limit changed after the start),
    else the job's SLURM_JOB_END_TIME; None when the job has no limit or neither can be read."""
    try:
        result = subprocess.run(
            ["squeue", "-h", "-j", job_id, "-o", "%e"], capture_output=True, text=True, timeout=60
        )
        text = result.stdout.strip() if result.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        text = ""
    if text:
        if text.upper() in ("UNLIMITED", "NONE", "N/A", "INVALID"):
            return None
        try:
            return datetime.fromisoformat(text).timestamp()
        except ValueError:
            pass
    fallback = env.get("SLURM_JOB_END_TIME", "").strip()
    if fallback.isdigit() and int(fallback) > 0:
        return float(fallback)
    log.warning(
        "SLURM job %s: its end time could not be read (squeue -j %s -o %%e said %r): training cannot "
        "stop before the time limit, a timeout loses the steps since the last checkpoint; set %s to the "
        "end time to enable the stop",
        job_id,
        job_id,
        text,
        DEADLINE_ENV,
    )
    return None


class JobDeadline:
    """When the job must have stopped: ``SIEVE_DEADLINE`` (epoch seconds or ISO 8601; tests and
    schedulers other than SLURM), else the end time of the SLURM job the process runs in, else none.

    ``due(step_s)`` says whether the run has to stop now: the time left is under the margin, the
    larger of ``SIEVE_DEADLINE_MARGIN`` (seconds, default MIN_MARGIN_S) and twice the slowest step
    plus checkpoint observed.
    """

    def __init__(self, end: float | None, source: str, margin: float = MIN_MARGIN_S) -> None:
        self.end, self.source, self.margin = end, source, margin
        self.slowest = 0.0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> JobDeadline:
        env = os.environ if environ is None else environ
        margin = MIN_MARGIN_S
        if env.get(MARGIN_ENV, "").strip():
            try:
                margin = float(env[MARGIN_ENV])
            except ValueError:
                margin = -1.0
            if not (0 <= margin < math.inf):
                raise ConfigError(f"{MARGIN_ENV}={env[MARGIN_ENV]!r}: expected seconds >= 0")
        explicit = env.get(DEADLINE_ENV, "").strip()
        if explicit:
            return cls(_parse_time(explicit, DEADLINE_ENV), DEADLINE_ENV, margin)
        job_id = env.get("SLURM_JOB_ID", "").strip()
        if job_id:
            return cls(_slurm_end_time(job_id, env), f"SLURM job {job_id}", margin)
        return cls(None, "none", margin)

    def observe(self, seconds: float) -> None:
        """A step (with its checkpoint, if one was written) took ``seconds``."""
        self.slowest = max(self.slowest, seconds)

    def left(self, now: float | None = None) -> float:
        return math.inf if self.end is None else self.end - (time.time() if now is None else now)

    def due(self, now: float | None = None) -> bool:
        return self.left(now) < max(self.margin, 2 * self.slowest)


# ---- the engine ------------------------------------------------------------------------------------


class EngineSettings(Protocol):
    """What a config section gives the engine (dpr/ccr's TrainSettings, ar2's Ar2Settings)."""

    precision: str
    max_grad_norm: float
    checkpoint_every: int


class Engine:
    """One training run's machinery: precision, the update of an optimizer step, the checkpoint folder.

    ``checkpoint_dir`` None: no checkpoint and no JSONL log (a run that is short enough to redo).
    ``log_path``: the JSONL log, by default ``checkpoint_dir/train_log.jsonl``.
    ``checkpoint_every`` N > 0: ``state.pt`` after every N-th step; ``save_final`` also after the last
    one (AR2 carries the final optimizer state into the next round; a stage that writes its model
    right after training has no use for it). Under DDP only the main rank writes.
    ``scale_fp16``: fp16 autocast with a GradScaler (the retriever loop); the AR2 and cross-encoder
    trainers have always run fp16 unscaled, and a scaler would change what they compute.
    ``deadline``: when the job ends (default JobDeadline.from_env()); with a checkpoint folder, a run
    that would not finish before it checkpoints and raises TimeLimitStop. Without one the limit is
    not watched (a run short enough to redo).
    """

    def __init__(
        self,
        *,
        device: torch.device | str,
        precision: str,
        max_grad_norm: float,
        checkpoint_dir: str | Path | None = None,
        checkpoint_every: int = 0,
        save_final: bool = False,
        log_path: str | Path | None = None,
        dist_info: DistInfo | None = None,
        scale_fp16: bool = True,
        deadline: JobDeadline | None = None,
    ) -> None:
        self.device = torch.device(device)
        self.dist = dist_info or DistInfo(device=self.device)
        self.amp_dtype = autocast_dtype(self.device, precision)
        self.compute_precision = precision_name(self.amp_dtype)
        self.scaler = torch.amp.GradScaler("cuda") if scale_fp16 and self.amp_dtype == torch.float16 else None
        self.max_grad_norm = max_grad_norm
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir is not None else None
        self.checkpoint_every = checkpoint_every
        self.save_final = save_final
        if log_path is None and self.checkpoint_dir is not None:
            log_path = self.checkpoint_dir / LOG_FILE
        self.log_path = Path(log_path) if log_path is not None else None
        self.modules: dict[str, Any] = {}
        if self.checkpoint_dir is None:
            self.deadline = JobDeadline(None, "none")
        else:
            self.deadline = deadline or JobDeadline.from_env()
        if self.deadline.end is not None and self.dist.is_main:
            log.info(
                "time limit (%s): %s, %.0f s from now; training stops at least %.0f s before it",
                self.deadline.source,
                datetime.fromtimestamp(self.deadline.end).isoformat(timespec="seconds"),
                self.deadline.left(),
                self.deadline.margin,
            )

    @classmethod
    def from_settings(
        cls,
        settings: EngineSettings,
        *,
        device: torch.device | str,
        checkpoint_dir: str | Path,
        **options: Any,
    ) -> Engine:
        """An engine with a config section's precision, clipping and checkpoint cadence."""
        return cls(
            device=device,
            precision=settings.precision,
            max_grad_norm=settings.max_grad_norm,
            checkpoint_dir=checkpoint_dir,
            checkpoint_every=settings.checkpoint_every,
            **options,
        )

    def autocast(self) -> AbstractContextManager:
        """Autocast for the encoder forwards; what runs outside it stays fp32."""
        return autocast(self.device, self.amp_dtype)

    def prepare(self, fingerprint: dict) -> None:
        """Discard a checkpoint written for another fingerprint, then record this one."""
        assert self.checkpoint_dir is not None, "prepare() needs a checkpoint_dir"
        prepare_checkpoint_dir(self.checkpoint_dir, fingerprint, self.dist)

    def resume(self, modules: dict[str, Any], *, restore_rng: bool = True) -> int:
        """Restore ``modules`` (saved by name with every checkpoint; the GradScaler joins them) from the
        checkpoint, cut the log back to its step; return the step to start from (0: none)."""
        self.modules = {**modules, "scaler": self.scaler} if self.scaler is not None else dict(modules)
        if self.checkpoint_dir is None:
            return 0
        resumed = load_checkpoint(self.checkpoint_dir, modules=self.modules, restore_rng=restore_rng)
        start = resumed["step"] if resumed else 0
        if self.dist.is_main:
            truncate_log(self.log_path, start)
        return start

    def backward(self, loss: torch.Tensor) -> None:
        (self.scaler.scale(loss) if self.scaler else loss).backward()

    def step(
        self,
        done: int,
        optimizer: torch.optim.Optimizer,
        scheduler: torch.optim.lr_scheduler.LRScheduler,
        parts: dict[str, float],
        *,
        model: torch.nn.Module,
        advice: str,
    ) -> float:
        """Clip ``model``'s gradients, check the step (``parts``: its loss values) and apply it; return
        the learning rate it used. ``done``: the step's number, 1-based."""
        if self.scaler:
            self.scaler.unscale_(optimizer)
        grad_norm = grad_total_norm(model.parameters(), self.max_grad_norm)
        # Before the update: a NaN loss or gradient would otherwise poison every later step. fp16's
        # GradScaler skips steps with inf gradients by design; the loss still must be finite.
        check_finite_step(
            done,
            parts,
            grad_norm=None if self.scaler else grad_norm,
            advice=advice,
            log_file=self.log_path,
        )
        if self.scaler:
            self.scaler.step(optimizer)
            self.scaler.update()
        else:
            optimizer.step()
        lr = scheduler.get_last_lr()[0]
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        return lr

    def fit(
        self,
        trainer: StepTrainer,
        start: int,
        total: int,
        label: str,
        *,
        on_step_end: Callable[[int], None] | None = None,
        after_update: Callable[[int], None] | None = None,
    ) -> None:
        """Run the optimizer steps ``start`` .. ``total`` - 1 of ``trainer``: per step its micro-batches,
        each forward and backward (the loss divided by their number: gradient accumulation), the update
        with clipping and finite checks, the log line, progress, the checkpoint and the time-limit stop.
        ``on_step_end(done)`` runs after each step (and its checkpoint); ``after_update(done)`` after
        its update and before its log line and checkpoint, so what it writes is never of a step a
        resume skips (a kill in between resumes from an earlier checkpoint and replays the step)."""
        with self.run(start, total, label) as run:
            for step in range(start, total):
                run.begin()
                plan = trainer.batches(step)
                results = []
                last = len(plan.batches) - 1
                for index, batch in enumerate(plan.batches):
                    # Under DDP only the last micro-batch's backward syncs the gradients.
                    ddp = isinstance(plan.sync_model, DistributedDataParallel) and index != last
                    with plan.sync_model.no_sync() if ddp else nullcontext():
                        value, parts = trainer.loss(batch)
                        self.backward(value / len(plan.batches))
                    results.append((value.detach(), parts))
                done = step + 1
                values = trainer.values(results)
                model, optimizer, scheduler, advice = trainer.update(step)
                lr = self.step(done, optimizer, scheduler, values, model=model, advice=advice)
                eps = run.rate(plan.examples)
                end = trainer.record(step, values, lr, eps)
                if after_update is not None:
                    after_update(done)
                run.end(done, end.record, lr=lr, eps=eps, label=end.label, note=end.note, extra=end.extra)
                if on_step_end is not None:
                    on_step_end(done)

    def check_weights(self, models: Iterable[torch.nn.Module], step: int, advice: str) -> None:
        """Refuse to hand on trained weights that are not finite (see check_finite_weights)."""
        for model in models:
            check_finite_weights(model, step, advice)

    def run(self, start: int, total: int, label: str) -> Run:
        """The steps ``start`` .. ``total`` - 1 of this run, as a context: log file and progress open."""
        return Run(self, start, total, label)

    def save(self, step: int, extra: dict[str, Any] | None = None) -> None:
        assert self.checkpoint_dir is not None
        if self.dist.is_main:
            save_checkpoint(self.checkpoint_dir, step=step, modules=self.modules, extra=extra)
        barrier()


class Run:
    """The per-step bookkeeping of one run: the JSONL log, progress, the checkpoint cadence."""

    def __init__(self, engine: Engine, start: int, total: int, label: str) -> None:
        self.engine, self.start, self.total, self.label = engine, start, total, label
        self.tick = time.perf_counter()

    def __enter__(self) -> Run:
        main = self.engine.dist.is_main
        path = self.engine.log_path
        self._log = open(path, "a", encoding="utf-8") if path is not None and main else None
        self._progress = progress_bar(main)
        self._progress.__enter__()
        self._task = self._progress.add_task(
            self.label, total=self.total, completed=self.start, loss=0.0, lr=0.0, eps=0.0
        )
        self._lines = ProgressLines(self.start, self.total) if main else None
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.__exit__(*exc)
        if self._log is not None:
            self._log.close()

    def begin(self) -> None:
        """A step starts (its examples/s are measured from here)."""
        self.tick = time.perf_counter()

    def rate(self, examples: int) -> float:
        """Examples per second of the step so far."""
        return examples / max(time.perf_counter() - self.tick, 1e-9)

    def end(
        self,
        done: int,
        record: dict[str, Any],
        *,
        lr: float,
        eps: float,
        label: str | None = None,
        note: str = "",
        extra: dict[str, Any] | None = None,
    ) -> None:
        """Log step ``done``'s ``record``, show progress, and checkpoint when it is due (``extra``: kept
        in the checkpoint beside the modules). ``label`` renames the bar (e.g. an AR2 phase);
        ``note`` adds to the plain progress line."""
        if self._log is not None:
            # allow_nan=False: the log stays strict JSON (the finite checks keep it finite). Written
            # before the checkpoint, so a line cut short is always of a step the resume replays.
            self._log.write(json.dumps(record, allow_nan=False) + "\n")
            self._log.flush()
        loss = float(record["loss"])
        self._progress.update(
            self._task, completed=done, loss=loss, lr=lr, eps=eps, description=label or self.label
        )
        if self._lines is not None:
            self._lines(done, loss, lr, eps, note)
        engine = self.engine
        every = engine.checkpoint_every
        saved = engine.checkpoint_dir is not None and (
            (every and done % every == 0 and done < self.total) or (engine.save_final and done == self.total)
        )
        if saved:
            engine.save(done, extra)
        deadline = engine.deadline
        if deadline.end is None or done >= self.total:
            return
        # The slowest step so far, with its checkpoint: the stop below writes one more.
        deadline.observe(time.perf_counter() - self.tick)
        if not self._stop_due():
            return
        if not saved:
            engine.save(done, extra)
        if engine.dist.is_main:
            log.warning(
                "stopped at step %d of %d before the job's time limit (%s, %.0f s left); the next attempt "
                "continues from the checkpoint in %s",
                done,
                self.total,
                deadline.source,
                deadline.left(),
                engine.checkpoint_dir,
            )
        raise TimeLimitStop(done, self.total)

    def _stop_due(self) -> bool:
        """Whether to stop now; under DDP every rank stops if any must (one rank alone would hang the
        others in their next collective)."""
        due = self.engine.deadline.due()
        if (
            self.engine.dist.enabled
            and torch.distributed.is_available()
            and torch.distributed.is_initialized()
        ):
            flag = torch.tensor([1.0 if due else 0.0], device=self.engine.device)
            torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
            due = bool(flag.item() > 0)
        return due


# ---- what a trainer gives the engine's step loop ---------------------------------------------------


@dataclass
class StepPlan:
    """One optimizer step's micro-batches (several: gradient accumulation), the examples they hold
    (for examples/s), and the DDP-wrapped model whose gradient sync waits for the last of them."""

    batches: Sequence[Any]
    examples: int
    sync_model: torch.nn.Module | None = None


@dataclass
class StepRecord:
    """A step's JSONL ``record`` and what Run.end shows or keeps of it (see Run.end)."""

    record: dict[str, Any]
    label: str | None = None
    note: str = ""
    extra: dict[str, Any] | None = None


class StepTrainer:
    """What a trainer brings to Engine.fit: its batches, its loss and what it logs. The defaults fit a
    trainer of one model and one optimizer, one micro-batch a step, whose loss parts are floats."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    advice: str

    def batches(self, step: int) -> StepPlan:
        """Step ``step``'s (0-based) micro-batches; seeds the step's randomness first where it must."""
        raise NotImplementedError

    def loss(self, batch: Any) -> tuple[torch.Tensor, dict[str, Any]]:
        """The forward of one micro-batch: its loss (to differentiate) and its parts for the log."""
        raise NotImplementedError

    def values(self, results: list[tuple[torch.Tensor, dict[str, Any]]]) -> dict[str, float]:
        """The step's logged loss values from its micro-batches' results (checked to be finite)."""
        (value, parts), *_ = results
        return {"loss": float(value.detach()), **parts}

    def update(
        self, step: int
    ) -> tuple[torch.nn.Module, torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler, str]:
        """The model to clip, the optimizer and schedule that apply step ``step``, the divergence advice."""
        return self.model, self.optimizer, self.scheduler, self.advice

    def record(self, step: int, values: dict[str, float], lr: float, eps: float) -> StepRecord:
        """The log line of step ``step`` (0-based) and its progress display."""
        return StepRecord({"step": step + 1, **values, "lr": lr})

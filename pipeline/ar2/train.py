"""One AR2 training round: ranker steps then retriever steps, resumable, with carried optimizer state.

Step t of round r (0-based) trains on ``query_batch(..., r, t)`` with negatives
``step_negatives(qid, ..., r, t)`` and re-seeds torch (dropout) from (seed, r, t), so the data and
randomness of a step are pure functions of (seed, round, step): a round restarted from its checkpoint
at step s replays steps s+1... bit for bit and ends with the weights of an uninterrupted run.

Optimizers (AdamW) and linear warm-up/decay schedulers, one pair for the retriever G and one for the
ranker D, span all rounds (total steps = rounds x steps per round); their state is saved in the
round's checkpoint and loaded by the next round, so the learning rate continues where it stopped.
The ranker's warm-up (round 1 only: AR2 warms its ranker in a separate run before co-training) has
its own optimizer and schedule over the warm-up steps, at ``ranker_warmup_lr``.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from pipeline.ar2.losses import RetrieverLoss, candidate_logits, positive_top1
from pipeline.ar2.sampling import (
    RANKER,
    RETRIEVER,
    SAMPLING_METHODS,
    phase_at,
    query_batch,
    step_negatives,
)
from pipeline.ar2.settings import Ar2Settings
from pipeline.core.precision import autocast
from pipeline.core.settings.flags import check_choice
from pipeline.core.storage import atomic_path
from pipeline.retrieval.ranker import listwise_loss
from pipeline.training.checkpoint import STATE_FILE, load_checkpoint, read_checkpoint
from pipeline.training.engine import (
    LOG_FILE,
    Engine,
    StepPlan,
    StepRecord,
    StepTrainer,
    adamw,
    fix_advice,
    linear_schedule,
    step_seed,
)

log = logging.getLogger("sieve.ar2_train")

CKPT_DIR = "train.ckpt"
RANKER_WARMUP = "ranker_warmup"


def total_steps(settings: Ar2Settings) -> tuple[int, int]:
    """(ranker, retriever) optimizer steps over all rounds: the schedulers' horizons."""
    return settings.rounds * settings.ranker_steps, settings.rounds * settings.retriever_steps


def round_steps(settings: Ar2Settings, round_index: int) -> tuple[int, int, int]:
    """(warm-up ranker steps, ranker steps, retriever steps) of round ``round_index`` (1-based)."""
    return (
        settings.ranker_warmup_steps if round_index == 1 else 0,
        settings.ranker_steps,
        settings.retriever_steps,
    )


@dataclass
class RoundData:
    """What a round trains on. ``pools[qid]`` = (negative pids, their mining-retriever logits)."""

    qids: list[str]  # sorted
    query_text: dict[str, str]
    positive: dict[str, str]
    positive_logit: dict[str, float]
    pools: dict[str, tuple[np.ndarray, np.ndarray]]
    passages: dict[str, tuple[str, str]]  # pid -> (title, text)


@dataclass
class StepBatch:
    """A step's B queries x (1 + k) candidate rows, positive first: the query text of each row, the
    passages, and each row's logit under the retriever that mined it (``priors``)."""

    qids: list[str]
    queries: list[str]
    titles: list[str]
    texts: list[str]
    priors: list[float]


def build_batch(
    data: RoundData, settings: Ar2Settings, sampling: str, seed: int, round_index: int, step: int
) -> StepBatch:
    """The step's queries and candidates (a pure function of seed, round and step)."""
    qids = query_batch(data.qids, settings.batch_size, seed, round_index, step)
    queries, titles, texts, priors = [], [], [], []
    for qid in qids:
        pool, logits = data.pools[qid]
        logit_of = dict(zip(pool.tolist(), logits.tolist()))
        negs = step_negatives(
            qid,
            pool,
            logits,
            data.positive_logit[qid],
            settings.negatives,
            sampling,
            settings.simans.a,
            settings.simans.b,
            seed,
            round_index,
            step,
            form=settings.simans.form,
        )
        priors += [data.positive_logit[qid], *(logit_of[pid] for pid in negs.tolist())]
        for pid in [data.positive[qid], *negs.tolist()]:
            title, text = data.passages[pid]
            queries.append(data.query_text[qid])
            titles.append(title)
            texts.append(text)
    return StepBatch(qids, queries, titles, texts, priors)


def train_round(
    retriever,
    ranker,
    data: RoundData,
    settings: Ar2Settings,
    *,
    round_index: int,
    seed: int,
    round_dir: str | Path,
    previous_ckpt: str | Path | None,
    sampling: str = "uniform",
    on_step_end: Callable[[int], None] | None = None,
    retriever_objective: RetrieverLoss | None = None,
) -> dict:
    """Train ``retriever`` and ``ranker`` in place for one round; return a summary.

    ``settings``: config ar2 (its contract); ``sampling``: the variant's negative sampling (uniform or
    simans). ``previous_ckpt``: the previous round's checkpoint folder (optimizer + scheduler state to
    carry over), or None for the first round. The round's own checkpoint is ``round_dir/train.ckpt``.
    ``retriever_objective``: what the retriever steps minimise; None = config ar2's λ and distillation
    temperature (``RetrieverLoss``).
    """
    # The settings validated themselves (the contract); the variant's sampling is not a setting.
    check_choice("ar2 sampling", sampling, SAMPLING_METHODS)
    objective = retriever_objective or RetrieverLoss(settings.adv_lambda, settings.distill_temperature)
    round_dir = Path(round_dir)
    round_dir.mkdir(parents=True, exist_ok=True)
    ckpt = round_dir / CKPT_DIR
    device = retriever.device
    n_warm, n_rank, n_ret = round_steps(settings, round_index)
    total = n_warm + n_rank + n_ret
    k1 = settings.negatives + 1

    engine = Engine.from_settings(
        settings,
        device=device,
        checkpoint_dir=ckpt,
        log_path=round_dir / LOG_FILE,
        save_final=True,  # write_carry hands the final optimizer state to the next round
        scale_fp16=False,
    )
    modules, optimizers = _optimizers(retriever, ranker, settings, n_warm)
    # Each step re-seeds torch itself, so the checkpoint's RNG streams are not restored.
    start = engine.resume(modules, restore_rng=False)
    if start == 0 and previous_ckpt is not None:
        carried = {name: modules[name] for name in CARRIED}
        # The previous round's state cannot be replaced by a fresh start: unreadable is an error.
        if load_checkpoint(previous_ckpt, modules=carried, restore_rng=False, unreadable="error") is None:
            raise FileNotFoundError(
                f"{previous_ckpt}: no checkpoint of the previous round to carry the optimizer state from"
            )
    if start:
        log.info("round %d: resuming at step %d of %d", round_index, start, total)
    log.info(
        "round %d: %d ranker steps (+%d warm-up) then %d retriever steps, %d queries x %d "
        "candidates, lambda=%g, sampling=%s, computing in %s",
        round_index,
        n_rank,
        n_warm,
        n_ret,
        settings.batch_size,
        k1,
        settings.adv_lambda,
        sampling,
        engine.compute_precision,
    )

    summary: dict = {
        "round": round_index,
        "steps": total,
        "ranker_steps": n_warm + n_rank,
        "retriever_steps": n_ret,
        "start_step": start,
        "compute_precision": engine.compute_precision,
    }
    trainer = _RoundTrainer(retriever, ranker, data, settings, sampling, seed, round_index, objective, engine)
    trainer.optimizers, trainer.phases = optimizers, (n_warm, n_rank, n_ret)
    trainer.device, trainer.summary = device, summary
    engine.fit(trainer, start, total, f"AR2 round {round_index}", on_step_end=on_step_end)
    retriever.eval()
    ranker.eval()
    # One advice for both: what made either diverge is in the log, phase by phase.
    engine.check_weights([retriever, ranker], total, _advice(settings, RETRIEVER))
    summary["top1"] = top1_by_phase(engine.log_path, round_index)
    return summary


def _optimizers(retriever, ranker, settings: Ar2Settings, n_warm: int) -> tuple[dict, dict]:
    """The round's checkpointed modules and, per phase, (model, optimizer, schedule): two optimizers,
    one per model, whose schedules span all rounds (total steps = rounds x steps), and round 1's
    warm-up optimizer for the ranker over the ``n_warm`` warm-up steps alone."""
    tot_d, tot_g = total_steps(settings)
    opt_g = adamw(retriever, settings.retriever_lr, settings.weight_decay)
    opt_d = adamw(ranker, settings.ranker_lr, settings.weight_decay)
    modules = {
        "retriever": retriever,
        "ranker": ranker,
        "opt_retriever": opt_g,
        "opt_ranker": opt_d,
        "sched_retriever": linear_schedule(opt_g, tot_g, settings.warmup_ratio),
        "sched_ranker": linear_schedule(opt_d, tot_d, settings.warmup_ratio),
    }
    optimizers = {
        RETRIEVER: (retriever, opt_g, modules["sched_retriever"]),
        RANKER: (ranker, opt_d, modules["sched_ranker"]),
    }
    if n_warm:
        opt_w = adamw(ranker, settings.ranker_warmup_lr or settings.ranker_lr, settings.weight_decay)
        sched_w = linear_schedule(opt_w, n_warm, settings.warmup_ratio)
        modules.update(opt_ranker_warmup=opt_w, sched_ranker_warmup=sched_w)
        optimizers[RANKER_WARMUP] = (ranker, opt_w, sched_w)
    return modules, optimizers


class _RoundTrainer(StepTrainer):
    """The engine's view of an AR2 round: step t's phase (ranker warm-up, ranker, retriever), its batch,
    the phase's loss and optimizer, and the round's log line."""

    def __init__(
        self,
        retriever,
        ranker,
        data: RoundData,
        settings: Ar2Settings,
        sampling: str,
        seed: int,
        round_index: int,
        objective: RetrieverLoss,
        engine: Engine,
    ) -> None:
        self.retriever, self.ranker, self.data, self.settings = retriever, ranker, data, settings
        self.sampling, self.seed, self.round_index, self.objective = sampling, seed, round_index, objective
        self.engine, self.k1 = engine, settings.negatives + 1
        self.phase = RANKER
        self.optimizers: dict = {}
        self.phases = (0, 0, 0)
        self.summary: dict = {}

    def batches(self, step: int) -> StepPlan:
        n_warm, n_rank, n_ret = self.phases
        phase = phase_at(step, n_warm + n_rank, n_ret)
        self.phase = RANKER_WARMUP if phase == RANKER and step < n_warm else phase
        torch.manual_seed(step_seed(self.seed, self.round_index, step))
        batch = build_batch(self.data, self.settings, self.sampling, self.seed, self.round_index, step)
        prior = (
            batch_prior(batch, self.k1, self.device) if self.settings.ranker_prior == "retriever" else None
        )
        return StepPlan([(batch, prior)], len(batch.qids))

    def loss(self, item) -> tuple[torch.Tensor, dict]:
        batch, prior = item
        amp_dtype = self.engine.amp_dtype
        if self.phase != RETRIEVER:
            self.retriever.eval()
            return ranker_step(self.ranker, batch, self.k1, self.device, amp_dtype, prior)
        r = self.retriever
        return _retriever_step(
            r,
            self.ranker,
            batch,
            self.data,
            prior,
            self.k1,
            self.objective,
            r.settings.similarity,
            r.settings.temperature,
            self.device,
            amp_dtype,
        )

    def update(self, step: int):
        model, opt, sched = self.optimizers[self.phase]
        return model, opt, sched, _advice(self.settings, self.phase)

    def record(self, step: int, values: dict[str, float], lr: float, eps: float) -> StepRecord:
        record = {
            "round": self.round_index,
            "step": step + 1,
            "phase": self.phase,
            **values,
            "lr": lr,
            "examples_per_s": round(eps, 3),
        }
        self.summary["last"] = record
        return StepRecord(
            record,
            label=f"AR2 round {self.round_index} {self.phase}",
            note=_top1_note(values),
            extra={"round": self.round_index},
        )


def _top1_note(parts: dict[str, float]) -> str:
    """The step's top-1 accuracies for the plain progress line."""
    return "".join(f" {key} {parts[key]:.2f}" for key in ("ranker_top1", "retriever_top1") if key in parts)


def top1_by_phase(log_path: Path, round_index: int) -> dict[str, dict[str, float]]:
    """Mean ranker/retriever top-1 accuracy on the steps' own candidates, per phase, from the round's
    train_log.jsonl (all steps, also across a resume)."""
    sums: dict[str, dict[str, list[float]]] = {}
    with open(log_path, encoding="utf-8") as handle:
        for line in handle:
            record = json.loads(line)
            if record.get("round") != round_index:
                continue
            for key in ("ranker_top1", "retriever_top1"):
                if key in record:
                    sums.setdefault(record["phase"], {}).setdefault(key, []).append(record[key])
    return {
        phase: {key: float(np.mean(values)) for key, values in keys.items()} for phase, keys in sums.items()
    }


def _advice(settings: Ar2Settings, phase: str) -> str:
    """What to change for the optimizer of ``phase``, in config terms (section ar2)."""
    key, lr = {
        RETRIEVER: ("retriever_lr", settings.retriever_lr),
        RANKER: ("ranker_lr", settings.ranker_lr),
        RANKER_WARMUP: ("ranker_warmup_lr", settings.ranker_warmup_lr or settings.ranker_lr),
    }[phase]
    return fix_advice(
        f"lower ar2.{key} (now {lr:g})",
        clip="ar2.max_grad_norm" if settings.max_grad_norm <= 0 else None,
        fp16="ar2.precision" if settings.precision == "fp16" else None,
        scope=f" ({phase} phase)",
    )


# Autocast covers the encoder forwards only: embeddings, logits, losses and softmaxes stay fp32
# (Retriever.embed_hidden and Ranker.forward leave autocast for pooling and the head).
def batch_prior(batch: StepBatch, k1: int, device) -> torch.Tensor:
    """The mining retriever's logits of the batch's candidates, [B, k1]."""
    return torch.tensor(batch.priors, dtype=torch.float32, device=device).view(-1, k1)


def ranker_logits(ranker, batch: StepBatch, k1: int, device, amp_dtype, prior) -> torch.Tensor:
    """D's logits [B, k1]: the cross-encoder's, plus the mining retriever's (``prior``) with
    ``ar2.ranker_prior: retriever``."""
    tokens = {k: v.to(device) for k, v in ranker.tokenize(batch.queries, batch.titles, batch.texts).items()}
    with autocast(device, amp_dtype):
        logits = ranker(tokens).float().view(-1, k1)
    return logits if prior is None else logits + prior


def ranker_step(
    ranker, batch: StepBatch, k1: int, device, amp_dtype, prior=None
) -> tuple[torch.Tensor, dict]:
    """AR2's ranker loss on a batch of B queries x ``k1`` candidates (positive first): (loss, its parts)."""
    ranker.train()
    logits = ranker_logits(ranker, batch, k1, device, amp_dtype, prior)
    loss = listwise_loss(logits)
    return loss, {"ranker_ce": float(loss.detach()), "ranker_top1": positive_top1(logits.detach())}


def _retriever_step(
    retriever,
    ranker,
    batch: StepBatch,
    data: RoundData,
    prior,
    k1,
    objective: RetrieverLoss,
    similarity,
    temperature,
    device,
    amp_dtype,
):
    retriever.train()
    ranker.eval()  # D is fixed during G's steps: no dropout, no gradient
    with torch.no_grad():
        r_logits = ranker_logits(ranker, batch, k1, device, amp_dtype, prior)
    q_tok = {
        k: v.to(device)
        for k, v in retriever.tokenize_queries([data.query_text[q] for q in batch.qids]).items()
    }
    p_tok = {k: v.to(device) for k, v in retriever.tokenize_passages(batch.titles, batch.texts).items()}
    with autocast(device, amp_dtype):
        q_emb = retriever.embed_queries(q_tok)
        p_emb = retriever.embed_passages(p_tok).view(len(batch.qids), k1, -1)
    g_logits = candidate_logits(q_emb, p_emb, similarity, temperature)
    loss, parts = objective(g_logits, r_logits)
    return loss, {
        **parts,
        "ranker_top1": positive_top1(r_logits),
        "retriever_top1": positive_top1(g_logits.detach()),
    }


CARRIED = ("opt_retriever", "opt_ranker", "sched_retriever", "sched_ranker")


def write_carry(ckpt_dir: str | Path, carry_dir: str | Path) -> Path:
    """Write what the next round loads (optimizer + scheduler state; the weights are in ``retriever/``
    and ``ranker/``) from a finished round's checkpoint into ``carry_dir/state.pt``, leaving the
    checkpoint as it is (a job killed here resumes from it)."""
    payload = read_checkpoint(Path(ckpt_dir) / STATE_FILE)  # weights_only: never runs code from the file
    payload["state"] = {k: v for k, v in payload["state"].items() if k in CARRIED}
    payload["extra"] = {**payload.get("extra", {}), "carried": True}
    path = Path(carry_dir) / STATE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as handle:  # a path would name the zip's inner folder after tmp
            torch.save(payload, handle)
    return path

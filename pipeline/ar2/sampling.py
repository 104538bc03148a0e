"""What an AR2 step trains on: the phase schedule, the query batch and the sampled negatives.

Everything is a function of (seed, round, step, qid) only, so a round resumed at step s draws exactly
the batches and negatives an uninterrupted run draws at step s, whatever happened before.

- Schedule: within a round, ``ranker_steps`` ranker steps come first, then ``retriever_steps``
  retriever steps (AR2: ~500 then ~1500 per 2000-step block, one block per index refresh). Round 1
  may prepend ``ranker_warmup_steps`` extra ranker steps (a ranker that starts from the base model).
- Query batches: step s takes positions [s·B, (s+1)·B) of an endless stream of permutations of the
  sorted train qids; permutation e of round r is drawn from ``item_rng(seed, "round<r>", e)``.
- Negatives: k per query and step from the query's pool (mined top-K minus positives, minus what the
  sieve dropped), drawn from ``item_rng(seed, "<qid>#round<r>", step)``; ``uniform`` or ``simans``
  weights w_i ∝ exp(−a·(s_i − s_+ − b)²), s = the mining retriever's logits (docs/ar2.md).
"""

from __future__ import annotations

from typing import Sequence, get_args

import numpy as np

from pipeline.ar2.settings import SimansSettings
from pipeline.core.seeding import item_rng
from pipeline.core.settings.job_documents import Ar2TrainJob

RANKER = "ranker"
RETRIEVER = "retriever"
SAMPLING_METHODS = get_args(Ar2TrainJob.model_fields["sampling"].annotation)  # uniform, simans: a round's job
SIMANS_FORMS = get_args(SimansSettings.model_fields["form"].annotation)  # square, abs: config ar2.simans.form


def round_phases(ranker_steps: int, retriever_steps: int, warmup_steps: int = 0) -> list[str]:
    """The phase of every step of one round: all ranker steps, then all retriever steps."""
    for name, value in (
        ("ranker_steps", ranker_steps),
        ("retriever_steps", retriever_steps),
        ("warmup_steps", warmup_steps),
    ):
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")
    return [RANKER] * (warmup_steps + ranker_steps) + [RETRIEVER] * retriever_steps


def phase_at(step: int, ranker_steps: int, retriever_steps: int, warmup_steps: int = 0) -> str:
    """Phase of step ``step`` (0-based within the round), without building the list."""
    n_ranker = warmup_steps + ranker_steps
    if not 0 <= step < n_ranker + retriever_steps:
        raise IndexError(f"step {step} outside a round of {n_ranker + retriever_steps} steps")
    return RANKER if step < n_ranker else RETRIEVER


def query_batch(qids: Sequence[str], batch_size: int, seed: int, round_index: int, step: int) -> list[str]:
    """The ``batch_size`` qids of step ``step``: a slice of an endless stream of permutations.

    ``qids`` must be sorted (the caller's order must not matter). Within a pass every query is used
    once; a batch that crosses a pass boundary takes the end of one permutation and the start of the
    next, so with fewer queries than the batch size a query can appear twice.
    """
    n = len(qids)
    if n == 0:
        raise ValueError("no training queries")
    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    out: list[str] = []
    pos = step * batch_size
    end = pos + batch_size
    cache: dict[int, np.ndarray] = {}
    while pos < end:
        epoch, offset = divmod(pos, n)
        if epoch not in cache:
            cache[epoch] = item_rng(seed, f"round{round_index}", epoch).permutation(n)
        take = min(end - pos, n - offset)
        out.extend(qids[i] for i in cache[epoch][offset : offset + take])
        pos += take
    return out


def sampling_weights(
    scores: np.ndarray,
    positive_score: float,
    method: str,
    a: float = 0.5,
    b: float = 0.0,
    form: str = "square",
) -> np.ndarray:
    """Normalised sampling probabilities of a query's pool.

    ``simans``: w_i ∝ exp(−a·(s_i − s_+ − b)²) (form ``square``, SimANS on NQ/TQ) or
    exp(−a·|s_i − s_+ − b|) (form ``abs``: SimANS on MS MARCO uses a = 3, b = 0); reference.md
    section 2. Computed in log space, so a large ``a`` or scale cannot underflow every weight to zero.
    """
    scores = np.asarray(scores, dtype=np.float64)
    if scores.ndim != 1 or scores.size == 0:
        raise ValueError("scores must be a non-empty 1-D array")
    if method == "uniform":
        return np.full(scores.size, 1.0 / scores.size)
    if method != "simans":
        raise ValueError(f"sampling must be one of {SAMPLING_METHODS}, got {method!r}")
    if a < 0:
        raise ValueError("simans a must be >= 0")
    if form not in SIMANS_FORMS:
        raise ValueError(f"simans form must be one of {SIMANS_FORMS}, got {form!r}")
    gap = scores - positive_score - b
    log_w = -a * (gap**2 if form == "square" else np.abs(gap))
    w = np.exp(log_w - log_w.max())
    return w / w.sum()


def sample_negatives(pool: np.ndarray, probs: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """k distinct pool entries drawn with ``probs`` (sequentially, without replacement).

    A pool smaller than k is used whole and topped up by drawing with replacement, so every query
    keeps k+1 candidates (the tensors stay rectangular); the caller counts such queries.
    """
    pool = np.asarray(pool)
    if pool.size == 0:
        raise ValueError("empty negative pool")
    if k < 1:
        raise ValueError("k must be >= 1")
    nonzero = int(np.count_nonzero(probs))
    if nonzero >= k:
        return pool[rng.choice(pool.size, size=k, replace=False, p=probs)]
    # Everything with weight first (shuffled), then with replacement for the remainder.
    first = rng.permutation(np.flatnonzero(probs))
    extra = rng.choice(pool.size, size=k - first.size, replace=True, p=probs)
    return pool[np.concatenate([first, extra])]


def step_negatives(
    qid: str,
    pool: np.ndarray,
    scores: np.ndarray,
    positive_score: float,
    k: int,
    method: str,
    a: float,
    b: float,
    seed: int,
    round_index: int,
    step: int,
    form: str = "square",
) -> np.ndarray:
    """The k negatives of ``qid`` at ``step`` of round ``round_index`` (deterministic)."""
    probs = sampling_weights(scores, positive_score, method, a, b, form)
    rng = item_rng(seed, f"{qid}#round{round_index}", step)
    return sample_negatives(pool, probs, k, rng)

"""Contrastive losses as pure functions of a score matrix (reference.md §1).

Layout used everywhere: Q queries and Q·(k+1) passages laid out query by query,
``[q0: pos, neg1..negk, q1: pos, neg1..negk, ...]``. Under DDP the passage axis is the GLOBAL batch
(all ranks' passages concatenated in rank order), so the positive of local query i on rank r is column
``(r·Q_local + i)·(k+1)``; ``positive_columns`` computes it.

For one query, P is the set of passages in its softmax: its own positive and k hard negatives, plus
every other passage of the (global) batch when in-batch negatives are on. With s = similarity
(divided by τ for cosine):

    l(p)      = -log softmax_P(s)[p]
    nce       = l(p+)
    ccr_term  = mean_{p∈P} l(p)
    l_RCL     = l(p+) - β · ccr_term                 (scale "paper", the default)

β is always relative to NCE. ``scale="released_code"`` divides the whole loss by |P|: the authors' code
sums an nll-plus-regulariser matrix of shape Q×|P| and divides by Q·|P|, i.e. computes
``l(p+)/|P| − f_beta·ccr_term`` with no β of its own, which is this scale at β = |P|·f_beta (6 at k = 5
and f_beta 1, the branch of the paper's tables; 0.6 at f_beta 0.1). |P| = k+1 without in-batch negatives.

Gradient on a negative j with softmax probability p_j (scale paper): ∂l_RCL/∂s_j = (1−β)·p_j + β/|P|.
For β ≤ 1 it is positive for every negative (descent pushes them all down); for β > 1 the negatives
with p_j > β/((β−1)·|P|) are lifted toward the positive (docs/training.md).
All functions average over queries; β=0 with scale "paper" is exactly NCE.

The training loop takes a loss *object* (``ContrastiveLoss``): ``NCELoss`` or ``CCRLoss`` built from
the config by ``loss_for``, or any callable of the same signature that a caller brings (bench/ masks
known false negatives that way), so the loop never decides which loss it runs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Protocol, get_args

import torch
import torch.nn.functional as F

from pipeline.core.settings import Objective

SCALES = get_args(Objective.model_fields["scale"].annotation)  # paper, released_code: config ccr.scale


def _at_least_fp32(x: torch.Tensor) -> torch.Tensor:
    # Softmax over many columns in bf16/fp16 (autocast) loses the small CCR differences.
    return x.to(torch.promote_types(x.dtype, torch.float32))


def similarity_scores(
    queries: torch.Tensor, passages: torch.Tensor, similarity: str, temperature: float = 1.0
) -> torch.Tensor:
    """s = q·p, divided by τ for cosine (embeddings are already L2-normalised by the model)."""
    scores = _at_least_fp32(queries) @ _at_least_fp32(passages).T
    if similarity == "cosine":
        return scores / temperature
    if similarity == "dot":
        return scores
    raise ValueError(f"similarity must be 'cosine' or 'dot', got {similarity!r}")


def positive_columns(
    n_queries: int, group_size: int, first_query: int = 0, device: torch.device | None = None
) -> torch.Tensor:
    """Column of each query's positive: (first_query + i)·(k+1); first_query = global index offset."""
    return (torch.arange(n_queries, device=device) + first_query) * group_size


def candidate_scores(
    scores: torch.Tensor, positives: torch.Tensor, group_size: int, in_batch: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Restrict each query's row to its set P; return (scores over P, index of p+ within P).

    Without in-batch negatives P is the query's own group of k+1 columns starting at its positive.
    """
    if in_batch:
        return scores, positives
    offsets = torch.arange(group_size, device=scores.device)
    cols = positives.unsqueeze(1) + offsets.unsqueeze(0)
    if int(cols.max()) >= scores.shape[1]:
        raise ValueError(
            f"group of {group_size} passages from column {int(positives.max())} "
            f"exceeds the {scores.shape[1]} columns of the score matrix"
        )
    return scores.gather(1, cols), torch.zeros_like(positives)


def rcl_loss(
    scores: torch.Tensor,
    positives: torch.Tensor,
    beta: float = 0.0,
    scale: str = "paper",
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Robust contrastive loss over ``scores`` [Q, |P|] (every column is in P) with p+ at ``positives``.

    Returns (loss, {"nce": mean l(p+), "ccr_term": mean_q mean_{p∈P} l(p)}); parts are detached.
    """
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")
    if scores.dim() != 2 or positives.shape != (scores.shape[0],):
        raise ValueError(
            f"expected scores [Q, N] and positives [Q], got {tuple(scores.shape)} "
            f"and {tuple(positives.shape)}"
        )
    log_probs = F.log_softmax(_at_least_fp32(scores), dim=1)
    nce = -log_probs.gather(1, positives.unsqueeze(1)).squeeze(1).mean()
    ccr_term = -log_probs.mean(dim=1).mean()
    loss = nce - beta * ccr_term
    if scale == "released_code":
        loss = loss / scores.shape[1]
    return loss, {"nce": nce.detach(), "ccr_term": ccr_term.detach()}


def contrastive_loss(
    scores: torch.Tensor,
    positives: torch.Tensor,
    group_size: int,
    *,
    in_batch: bool = True,
    beta: float = 0.0,
    scale: str = "paper",
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """NCE (β=0) or CCR loss for queries against the (global) passage batch.

    ``scores``: [Q, N] similarity/τ of the queries against all N passages of the batch;
    ``positives``: [Q] global column of each query's positive (``positive_columns``);
    ``group_size``: k+1, the positive plus its hard negatives.
    """
    cand, pos = candidate_scores(scores, positives, group_size, in_batch)
    return rcl_loss(cand, pos, beta=beta, scale=scale)


# ---- losses as objects: what the training loop is given ------------------------------------------


class ContrastiveLoss(Protocol):
    """A loss over a query × passage score matrix, called once per micro-batch by the loop.

    ``scores`` [Q, N], ``positives`` [Q] (global columns), ``group_size`` k+1; returns the loss and
    its detached parts {"nce", "ccr_term"} for the training log. ``describe()`` is what the run
    records of it (fingerprint and train_info.json).
    """

    def __call__(
        self, scores: torch.Tensor, positives: torch.Tensor, group_size: int, *, in_batch: bool
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]: ...

    def describe(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class NCELoss:
    """l(p+): InfoNCE over P (DPR's loss)."""

    def __call__(
        self, scores: torch.Tensor, positives: torch.Tensor, group_size: int, *, in_batch: bool
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        return contrastive_loss(scores, positives, group_size, in_batch=in_batch)

    def describe(self) -> dict[str, Any]:
        return {"loss": "nce"}


@dataclass(frozen=True)
class CCRLoss:
    """l(p+) − β·mean_{p∈P} l(p) (``scale`` paper), or the same divided by |P| (released_code)."""

    beta: float
    scale: str = "paper"

    def __post_init__(self) -> None:
        if self.scale not in SCALES:
            raise ValueError(f"scale must be one of {SCALES}, got {self.scale!r}")

    def __call__(
        self, scores: torch.Tensor, positives: torch.Tensor, group_size: int, *, in_batch: bool
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        return contrastive_loss(
            scores,
            positives,
            group_size,
            in_batch=in_batch,
            beta=self.beta,
            scale=self.scale,
        )

    def describe(self) -> dict[str, Any]:
        return {"loss": "ccr", **asdict(self)}


def loss_for(beta: float = 0.0, scale: str = "paper") -> NCELoss | CCRLoss:
    """The loss a dpr/ccr section's objective settings name: NCE exactly when β is 0 on the paper's
    scale (released_code divides even NCE by |P|), else CCR."""
    if beta == 0 and scale == "paper":
        return NCELoss()
    return CCRLoss(beta=beta, scale=scale)

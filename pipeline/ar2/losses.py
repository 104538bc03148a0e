"""AR2 losses as pure functions of candidate logits (reference.md section 2; docs/ar2.md).

Layout: every query has n candidates in a fixed order, the positive first (column ``positive``, 0 by
default), so all tensors are [queries, n].

- Retriever G: ``g`` = s_G(q, d), its logits over the candidates: the dot product q·d for
  ``similarity: dot`` (AR2: "dot product, no temperature"), cos(q, d)/τ for ``similarity: cosine``
  (embeddings already L2-normalised; τ from the retriever's settings). p_G = softmax(g).
- Ranker D: ``r_logits`` = D(q, d), the cross-encoder logits. Ranker loss: listwise cross-entropy
  with the positive as target (``pipeline.retrieval.ranker.listwise_loss``).
- Distillation: CE(p_D, p_G) = -Σ_d p_D(d) log p_G(d), with p_D = softmax(D / T_distill). It differs
  from KL(p_D || p_G) by the entropy of p_D, a constant for G, so the gradients are the KL's.
- Adversarial: adv = Σ_d r(d) · log p_G(d) with r(d) = log σ(D(q, d+) − D(q, d)), treated as a
  constant (no gradient into D). Sign convention: the loss is *minimised*. r(d) ≤ 0 and
  |r(d)| = softplus(D(q, d) − D(q, d+)) grows with how much the ranker believes in d, so minimising
  adv raises p_G for the candidates the ranker finds hardest: G learns to propose negatives that fool D,
  i.e. G minimises E_{d~p_G}[log p_D(d+ | {d+, d})], the minimax objective of AR2 (Zhang et al. 2022).
  The sum runs over every candidate, the positive included (r(d+) = log ½), as in the released AR2
  code. adv ≥ 0 always.
- Retriever loss: λ·adv + (1−λ)·distill. Every term is averaged over queries (the released code sums
  adv over the batch instead, which scales it by the batch size relative to distill; see docs/ar2.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


def candidate_logits(
    queries: torch.Tensor, passages: torch.Tensor, similarity: str, temperature: float = 1.0
) -> torch.Tensor:
    """G's logits [Q, n] of queries [Q, dim] against their own candidates [Q, n, dim].

    No in-batch negatives: each query's softmax runs over its own n candidates (AR2).
    """
    if (
        queries.dim() != 2
        or passages.dim() != 3
        or passages.shape[0] != queries.shape[0]
        or passages.shape[2] != queries.shape[1]
    ):
        raise ValueError(
            f"expected queries [Q, dim] and passages [Q, n, dim], got "
            f"{tuple(queries.shape)} and {tuple(passages.shape)}"
        )
    scores = torch.einsum("qh,qnh->qn", queries.float(), passages.float())
    if similarity == "cosine":
        if temperature <= 0:
            raise ValueError("temperature must be > 0")
        return scores / temperature
    if similarity == "dot":
        return scores
    raise ValueError(f"similarity must be 'cosine' or 'dot', got {similarity!r}")


def _check_pair(g_logits: torch.Tensor, r_logits: torch.Tensor) -> None:
    if g_logits.dim() != 2 or g_logits.shape != r_logits.shape:
        raise ValueError(
            f"retriever and ranker logits must both be [queries, candidates], got "
            f"{tuple(g_logits.shape)} and {tuple(r_logits.shape)}"
        )


def distill_loss(g_logits: torch.Tensor, r_logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Mean over queries of -Σ_d softmax(D/T)(d) · log softmax(g)(d); no gradient into D."""
    _check_pair(g_logits, r_logits)
    if temperature <= 0:
        raise ValueError("distillation temperature must be > 0")
    target = F.softmax(r_logits.detach().float() / temperature, dim=1)
    return -(target * F.log_softmax(g_logits.float(), dim=1)).sum(dim=1).mean()


def adversarial_rewards(r_logits: torch.Tensor, positive: int = 0) -> torch.Tensor:
    """r(d) = log σ(D(q, d+) − D(q, d)) for every candidate (≤ 0; log ½ at the positive), detached."""
    r_logits = r_logits.detach().float()
    return F.logsigmoid(r_logits[:, positive : positive + 1] - r_logits)


def adversarial_loss(g_logits: torch.Tensor, r_logits: torch.Tensor, positive: int = 0) -> torch.Tensor:
    """Mean over queries of Σ_d r(d) · log p_G(d); minimised (see the module docstring)."""
    _check_pair(g_logits, r_logits)
    rewards = adversarial_rewards(r_logits, positive)
    return (rewards * F.log_softmax(g_logits.float(), dim=1)).sum(dim=1).mean()


def positive_top1(logits: torch.Tensor, positive: int = 0) -> float:
    """Mean top-1 accuracy of the positive over queries; ``logits`` is [queries, candidates]. A tie at
    the top counts 1/(number tied) when the positive is among them, so a uniform scorer gets chance,
    1/candidates. Comparing the ranker's and the retriever's value on the same candidates says whether
    distillation can teach the retriever anything."""
    top = logits.max(dim=1, keepdim=True).values
    at_top = (logits == top).float()
    return float((at_top[:, positive] / at_top.sum(dim=1)).mean())


def retriever_loss(
    g_logits: torch.Tensor,
    r_logits: torch.Tensor,
    adv_lambda: float,
    distill_temperature: float = 1.0,
    positive: int = 0,
) -> tuple[torch.Tensor, dict[str, float]]:
    """λ·adv + (1−λ)·distill, and the detached parts {'adv', 'distill'} for the training log.

    With λ = 0 (the sieve paper's runs) the adversarial term is not computed at all.
    """
    if not 0.0 <= adv_lambda <= 1.0:
        raise ValueError(f"adv_lambda must be in [0, 1], got {adv_lambda}")
    distill = distill_loss(g_logits, r_logits, distill_temperature)
    parts = {"distill": float(distill.detach())}
    if adv_lambda == 0.0:
        return distill, parts
    adv = adversarial_loss(g_logits, r_logits, positive)
    parts["adv"] = float(adv.detach())
    return adv_lambda * adv + (1.0 - adv_lambda) * distill, parts


@dataclass(frozen=True)
class RetrieverLoss:
    """What AR2's retriever steps minimise, as an object ``train_round`` is given: λ·adv + (1−λ)·distill
    (``retriever_loss``). Built from config ar2 by default; a caller may pass another of the same call."""

    adv_lambda: float = 0.0
    distill_temperature: float = 1.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.adv_lambda <= 1.0:
            raise ValueError(f"adv_lambda must be in [0, 1], got {self.adv_lambda}")

    def __call__(
        self, g_logits: torch.Tensor, r_logits: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, float]]:
        return retriever_loss(g_logits, r_logits, self.adv_lambda, self.distill_temperature)

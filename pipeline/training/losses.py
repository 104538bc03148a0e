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

The training loop takes a loss *object* (``ContrastiveLoss``): one of the registered losses, built
from the job's settings by ``build_loss``, or any callable of the same signature that a caller brings
(bench/ masks known false negatives that way), so the loop never decides which loss it runs. A loss
joins the registry with ``@register_loss``: its ``name`` (what the run records), ``claims`` (whether
a job's settings select it; exactly one loss may claim a job) and ``from_settings`` (how it is built).

Labelled columns (methods dpr_gist_<guide> and dpr_relabel_<detector>, docs/training.md): a
``ColumnLabels`` says per query which columns are its positives (P+) and which leave its softmax
(excluded: logit −inf). ``multi_positive_nce`` is then

    l(q) = −log Σ_{p∈P+(q)} e^{s_qp} / Σ_{j∈P(q)} e^{s_qj}       P(q) = the columns not excluded

MIL-NCE's form (Miech et al., CVPR 2020), the sum inside the log: the query may put its mass on any of
its positives, so a relabelled passage that is not relevant after all (a detector's false alarm) costs
little, where the per-positive average (SupCon's L_out, Khosla et al. 2020) would pull the query to
each one equally. With one positive and nothing excluded it is NCE exactly (same log-softmax, and the
log-sum-exp of one term is that term). ``gist_exclude`` is GISTEmbedLoss's rule (a guide model's score
of a negative above the guide's score of the query's positive removes it), ``relabel_labels`` the
relabelled positives' columns.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, ClassVar, Protocol, Sequence, get_args

import torch
import torch.nn.functional as F

from pipeline.core.config import ConfigError
from pipeline.training.settings import Objective

SCALES = get_args(Objective.model_fields["scale"].annotation)  # paper, released_code: config ccr.scale
CCR_SCALES = ("paper", "released_code")  # the scales CCRLoss computes (a new scale may be another loss's)


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


class LossSettings(Protocol):
    """What a job's settings give the loss registry (the loop's TrainConfig has these)."""

    beta: float
    scale: str
    extra_positives: int


class RegisteredLoss(ContrastiveLoss, Protocol):
    """A loss the settings can choose: registered under ``name`` with ``register_loss``."""

    name: ClassVar[str]

    @classmethod
    def claims(cls, settings: LossSettings, guide: str | None) -> bool: ...

    @classmethod
    def from_settings(cls, settings: LossSettings, guide: str | None) -> ContrastiveLoss: ...


LOSSES: dict[str, type[RegisteredLoss]] = {}


def register_loss(cls: type) -> type:
    """Add a loss class to the registry under its ``name`` (a name is registered once)."""
    if cls.name in LOSSES:
        raise ValueError(
            f"loss {cls.name!r} is registered twice ({LOSSES[cls.name].__name__}, {cls.__name__})"
        )
    LOSSES[cls.name] = cls
    return cls


def build_loss(settings: LossSettings, guide: str | None = None) -> ContrastiveLoss:
    """The loss a job's settings select (``guide``: the GIST guide folder's name, if any): the one
    registered loss that claims them; none or several is a ConfigError naming the settings."""
    claimed = [cls for cls in LOSSES.values() if cls.claims(settings, guide)]
    if len(claimed) == 1:
        return claimed[0].from_settings(settings, guide)
    if not claimed and not _plain(settings, guide):
        # What the shipped losses leave unclaimed: labelled columns with a CCR objective.
        raise ConfigError(
            "a guide (GIST masking) or extra_positives (relabel) trains multi-positive NCE: no other "
            f"loss, beta 0 on the paper's scale (given beta {settings.beta:g}, scale {settings.scale})"
        )
    names = ", ".join(cls.name for cls in claimed) or "none"
    raise ConfigError(
        f"training settings (beta {settings.beta:g}, scale {settings.scale}) select {len(claimed)} losses "
        f"({names}); exactly one must match: registered are {', '.join(LOSSES)}"
    )


def _plain(settings: LossSettings, guide: str | None) -> bool:
    """No labelled columns: the loss is a function of the score matrix alone."""
    return guide is None and settings.extra_positives == 0


@register_loss
@dataclass(frozen=True)
class NCELoss:
    """l(p+): InfoNCE over P (DPR's loss)."""

    name: ClassVar[str] = "nce"

    @classmethod
    def claims(cls, settings: LossSettings, guide: str | None) -> bool:
        # released_code divides even NCE by |P|: that is CCR's code path at beta 0.
        return _plain(settings, guide) and settings.beta == 0 and settings.scale == "paper"

    @classmethod
    def from_settings(cls, settings: LossSettings, guide: str | None) -> NCELoss:
        return cls()

    def __call__(
        self, scores: torch.Tensor, positives: torch.Tensor, group_size: int, *, in_batch: bool
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        return contrastive_loss(scores, positives, group_size, in_batch=in_batch)

    def describe(self) -> dict[str, Any]:
        return {"loss": "nce"}


@register_loss
@dataclass(frozen=True)
class CCRLoss:
    """l(p+) − β·mean_{p∈P} l(p) (``scale`` paper), or the same divided by |P| (released_code)."""

    name: ClassVar[str] = "ccr"
    beta: float
    scale: str = "paper"

    @classmethod
    def claims(cls, settings: LossSettings, guide: str | None) -> bool:
        nce = settings.beta == 0 and settings.scale == "paper"
        return _plain(settings, guide) and settings.scale in CCR_SCALES and not nce

    @classmethod
    def from_settings(cls, settings: LossSettings, guide: str | None) -> CCRLoss:
        return cls(beta=settings.beta, scale=settings.scale)

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


def loss_for(beta: float = 0.0, scale: str = "paper") -> ContrastiveLoss:
    """The loss a dpr/ccr section's objective settings name (NCE exactly when β is 0 on the paper's
    scale, else CCR), through the registry."""
    return build_loss(_Objective(beta, scale, 0))


@dataclass(frozen=True)
class _Objective:
    beta: float
    scale: str
    extra_positives: int


# ---- labelled columns: several positives, columns out of the softmax -----------------------------


@dataclass(frozen=True)
class ColumnLabels:
    """Per query (row) of a [Q, N] score matrix: ``positive`` [Q, N] bool, its positives P+ (at least
    one per row); ``exclude`` [Q, N] bool, the columns left out of its softmax (never a positive)."""

    positive: torch.Tensor
    exclude: torch.Tensor


def one_positive(shape: tuple[int, int], positives: torch.Tensor) -> ColumnLabels:
    """The labels of plain NCE: the column ``positives[q]`` of row q, nothing excluded."""
    positive = torch.zeros(shape, dtype=torch.bool, device=positives.device)
    positive[torch.arange(shape[0], device=positives.device), positives] = True
    return ColumnLabels(positive, torch.zeros_like(positive))


def multi_positive_nce(
    scores: torch.Tensor, labels: ColumnLabels
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """−log Σ_{p∈P+} e^{s_p} / Σ_{j not excluded} e^{s_j}, averaged over the rows (module docstring).

    Returns (loss, {"nce": the loss, "ccr_term": mean l(p) over the columns not excluded}), parts detached.
    """
    if scores.dim() != 2 or labels.positive.shape != scores.shape or labels.exclude.shape != scores.shape:
        raise ValueError(
            f"expected scores [Q, N] and labels of the same shape, got {tuple(scores.shape)}, "
            f"{tuple(labels.positive.shape)} and {tuple(labels.exclude.shape)}"
        )
    if not bool(labels.positive.any(dim=1).all()):
        raise ValueError("every row needs at least one positive column")
    if bool((labels.positive & labels.exclude).any()):
        raise ValueError("a positive column cannot be excluded from its row's softmax")
    minus_inf = torch.tensor(float("-inf"), dtype=torch.float64, device=scores.device)
    log_probs = F.log_softmax(_at_least_fp32(scores).masked_fill(labels.exclude, minus_inf), dim=1)
    per_query = -torch.logsumexp(log_probs.masked_fill(~labels.positive, minus_inf), dim=1)
    loss = per_query.mean()
    kept = ~labels.exclude
    ccr_term = -(log_probs.masked_fill(labels.exclude, 0.0).sum(dim=1) / kept.sum(dim=1)).mean()
    return loss, {"nce": loss.detach(), "ccr_term": ccr_term.detach()}


def gist_exclude(guide_scores: torch.Tensor, positives: torch.Tensor) -> torch.Tensor:
    """GISTEmbedLoss's rule: [Q, N] True where the guide scores a column strictly above its score of
    the row's positive (column ``positives[q]``); the positive itself (equal, not above) never is."""
    own = guide_scores.gather(1, positives.unsqueeze(1))
    return guide_scores > own


def own_groups(shape: tuple[int, int], group_size: int, first_query: int = 0, device=None) -> torch.Tensor:
    """[Q, N] True on each row's own group of columns [(first_query+i)·g, (first_query+i+1)·g)."""
    cols = torch.arange(shape[1], device=device).unsqueeze(0)
    lo = ((torch.arange(shape[0], device=device) + first_query) * group_size).unsqueeze(1)
    return (cols >= lo) & (cols < lo + group_size)


def relabel_labels(
    column_ids: torch.Tensor,
    positive_sets: Sequence[Sequence[int]],
    group_size: int,
    first_query: int = 0,
) -> ColumnLabels:
    """The labels of the relabelled positives for the local queries (row i = global query
    ``first_query + i``; its group is columns [(first_query+i)·g, (first_query+i+1)·g)).

    ``column_ids`` [N]: the passage id of each column, −1 for an empty slot; ``positive_sets[i]``:
    the ids of row i's positives (its qrels positive and the relabelled ones). Row i's positives are
    the columns of its own group that hold one of them. Every other column holding one of them (another
    query's positive, hard negative or relabelled slot) leaves row i's softmax, as do the empty slots:
    a passage is never pushed away from a query in the same step that pulls it toward it.
    """
    n_rows, n_cols = len(positive_sets), int(column_ids.shape[0])
    own = own_groups((n_rows, n_cols), group_size, first_query, column_ids.device)
    positive = torch.zeros((n_rows, n_cols), dtype=torch.bool, device=column_ids.device)
    exclude = torch.zeros_like(positive)
    empty = column_ids < 0
    for i, ids in enumerate(positive_sets):
        mine = torch.isin(
            column_ids, torch.as_tensor(list(ids), dtype=column_ids.dtype, device=column_ids.device)
        )
        positive[i] = mine & own[i] & ~empty
        exclude[i] = (mine & ~own[i]) | empty
    return ColumnLabels(positive, exclude)


def restrict_to_groups(labels: ColumnLabels, group_size: int, first_query: int = 0) -> ColumnLabels:
    """Without in-batch negatives P is the query's own group: every other column is excluded."""
    own = own_groups(tuple(labels.positive.shape), group_size, first_query, labels.positive.device)
    return ColumnLabels(labels.positive, labels.exclude | ~own)


@register_loss
@dataclass(frozen=True)
class MultiPositiveNCELoss:
    """``multi_positive_nce`` with the labels the loop builds for each micro-batch (``labels=``):
    the relabelled positives (``relabel``) and the guide's exclusions (``guide``). Named by what it
    is given, for the record (fingerprint, train_info.json)."""

    name: ClassVar[str] = "multi_positive_nce"
    labelled: ClassVar[bool] = True  # the loop hands it the micro-batch's ColumnLabels
    relabel: bool = False
    guide: str | None = None  # the guide folder's name: what masked the negatives

    @classmethod
    def claims(cls, settings: LossSettings, guide: str | None) -> bool:
        return not _plain(settings, guide) and settings.beta == 0 and settings.scale == "paper"

    @classmethod
    def from_settings(cls, settings: LossSettings, guide: str | None) -> MultiPositiveNCELoss:
        return cls(relabel=settings.extra_positives > 0, guide=guide)

    def __call__(
        self,
        scores: torch.Tensor,
        positives: torch.Tensor,
        group_size: int,
        *,
        in_batch: bool,
        labels: ColumnLabels | None = None,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        if labels is None:
            labels = one_positive(tuple(scores.shape), positives)
        if not in_batch:
            labels = restrict_to_groups(labels, group_size, int(positives[0]) // group_size)
        return multi_positive_nce(scores, labels)

    def describe(self) -> dict[str, Any]:
        return {"loss": "multi_positive_nce", **asdict(self)}

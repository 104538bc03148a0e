"""Sections dpr and ccr (what pipeline.training.train_dense trains with: the optimisation, the loss,
DPR's rcl and relabel variants) and ``TrainJob``, one train_dense run's settings document.
"""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import Field

from pipeline.core.settings.base import (
    MAX_EPOCHS,
    MAX_GRAD_ACCUM,
    MAX_LAYERS,
    MAX_NEGATIVES,
    BatchSize,
    ConfigError,
    Contract,
    JobResources,
    Negatives,
    Precision,
    Ranks,
    Seed,
    Share,
    Snapshots,
    Steps,
    default,
)
from pipeline.core.settings.validation import from_dict
from pipeline.retrieval.settings import RETRIEVER_KEYS, ModelSettings

# ---- training (sections dpr and ccr): what pipeline.training.train_dense trains with ------------


class TrainSettings(Contract):
    """Optimisation and data settings shared by DPR and CCR training (defaults: DPR's)."""

    lr: float = Field(2e-5, gt=0, description="peak learning rate (AdamW)")
    epochs: int = Field(1, ge=1, le=MAX_EPOCHS, description="passes over the training queries")
    batch_size: BatchSize = Field(
        16, description="GLOBAL queries per micro-batch (split over DDP ranks): the in-batch pool"
    )
    grad_accum: int = Field(1, ge=1, le=MAX_GRAD_ACCUM, description="micro-batches per optimizer step")
    hard_negatives: int = Field(
        1, ge=0, le=MAX_NEGATIVES, description="k: hard negatives per query, sampled per (qid, epoch, seed)"
    )
    negatives_depth: Ranks = Field(
        30,
        description="sample the k negatives from this many top candidates (non-excluded, positives removed)",
    )
    in_batch: bool = Field(
        True, description="other queries' passages are negatives too (gathered across GPUs)"
    )
    warmup_ratio: Share = Field(
        0.1, description="linear warm-up over this share of the steps, then linear decay"
    )
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay (not on biases and LayerNorm)")
    max_grad_norm: float = Field(2.0, ge=0, description="gradient clipping norm; 0 = no clipping")
    max_steps: Steps = Field(
        60,
        description="cap on optimizer steps; 0 = no cap (epochs decide). The demo's cap keeps its training "
        "within a CPU budget (step times, with their CPU and precision: docs/results.md)",
    )
    checkpoint_every: Steps = Field(
        50, description="optimizer steps between checkpoints (a rerun resumes there); 0 = never"
    )
    precision: Precision = Field(
        "bf16", description="autocast: as asked on CUDA; bf16 on a CPU with native bf16, else fp32"
    )
    drop_queries_without_positive: bool = Field(
        False, description="leave such train queries out (default: error)"
    )
    train_layers: Optional[int] = Field(
        None,
        ge=1,
        le=MAX_LAYERS,
        description="train only the top N transformer layers; the embeddings and lower layers stay "
        "frozen and their outputs are computed once per text and cached (CPU budget); null = all",
    )


class Objective(Contract):
    """The loss: NCE (beta 0) or CCR, l(p+) - beta * mean_{p in P} l(p). docs/training.md.

    beta is always relative to NCE (the paper's convention). The authors' code has no beta of its
    own: NCE/|P| - f_beta * l_CCR is scale released_code at beta = |P| * f_beta (6 at k = 5, f_beta 1).
    """

    beta: float = Field(
        0.0, ge=0, description="CCR beta relative to NCE; 0 = NCE; above 1 lifts the top negatives"
    )
    scale: Literal["paper", "released_code"] = Field(
        "paper",
        description="paper: l(p+) - beta*l_CCR; released_code: the same divided by |P| (the authors' "
        "NCE/|P| - f_beta*l_CCR with f_beta = beta/|P|)",
    )


class RclObjective(Objective):
    """The loss of method dpr_rcl: DPR's own training with CCR's regulariser in it (paper Table 5)."""

    beta: float = Field(
        0.5,
        gt=0,
        description="beta relative to NCE; P holds the in-batch negatives too (|P| = batch x (k+1)), so "
        "beta > 1 lifts only the negatives above beta/((beta-1)|P|)",
    )


class RelabelSettings(Contract):
    """Methods dpr_relabel_<detector> (RLHN's relabelling): a detector's false negatives become extra
    positives, trained with multi-positive NCE (docs/training.md "Relabel")."""

    extra_positives: Negatives = Field(
        1,
        description="slots per query for its relabelled positives, drawn per (seed, qid, epoch) beside its "
        "positive and k hard negatives; a query with fewer leaves the rest empty (in no softmax)",
    )


class DprSettings(JobResources, TrainSettings):
    """DPR warm-up: NCE over the positive, k BM25 hard negatives and in-batch negatives -> models/dpr
    (docs/training.md)."""

    skip: bool = Field(False, description="true: dpr = the pretrained model, no training")
    rcl: RclObjective = Field(
        RclObjective(),
        description="method dpr_rcl (paper Table 5: DPR + CCR): the dpr settings, trained with "
        "l(p+) - beta*l_CCR instead of NCE; its folders carry beta (dpr_rcl_b<beta>)",
    )
    relabel: RelabelSettings = Field(
        RelabelSettings(),
        description="methods dpr_relabel_<detector>: the dpr settings on the detector's kept negatives, its "
        "dropped candidates as extra positives (multi-positive NCE)",
    )


class CcrSettings(JobResources, Objective, TrainSettings):
    """CCR fine-tuning, the sieve model: l(p+) - beta * mean_{p in P} l(p) from models/dpr, cosine
    similarity -> models/dpr_ccr_b<beta> (docs/training.md). CCR's own defaults: the authors' regime
    (tau 1, k 5, no in-batch negatives) at a larger lr than the paper's 1e-7 so the demo's few steps
    move the model; recipes.paper has the paper's."""

    lr: float = Field(1e-5, gt=0, description="peak learning rate (AdamW)")
    hard_negatives: Negatives = Field(
        5, description="k: BM25 hard negatives per query in the CCR softmax (released code: 5; 3 MS MARCO)"
    )
    in_batch: bool = Field(
        False, description="other queries' passages in the softmax too (released code: off)"
    )
    max_steps: Steps = Field(20, description="cap on optimizer steps; 0 = no cap (epochs decide)")
    beta: float = Field(
        6,
        ge=0,
        description="CCR beta relative to NCE: <= 1 pushes every negative down, > 1 lifts the top ones. 6 is "
        "the authors' code ((k+1)·f_beta at k 5, f_beta 1; the paper writes 0.5, where the regulariser "
        "cannot lift a negative, docs/training.md); what it does on synthkb and SQuAD: docs/results.md",
    )
    temperature: float = Field(
        1.0, gt=0, description="tau of the CCR loss on cosine scores (released code: 1); saved with the model"
    )


class TrainJob(Contract):
    """One train_dense run's settings as one document: what the workflow's job hands the stage (its
    recorded param, as JSON) and what a run by hand reads (``--settings FILE``). A key it leaves out
    takes the default of config section ``section``; ``retriever`` overrides the settings of the
    folder training starts from (a key left out keeps the folder's)."""

    section: Literal["dpr", "ccr"] = Field("dpr", description="the config section the run trains as")
    seed: Seed = Field(0, description="training seed: sampling, dropout, shuffling")
    train: dict[str, Any] = Field({}, description="the section's training settings (TrainSettings' keys)")
    objective: dict[str, Any] = Field(
        {}, description="the loss (Objective's keys): NCE for dpr unless given (dpr.rcl), ccr's beta for ccr"
    )
    retriever: dict[str, Any] = Field(
        {}, description="model settings (RETRIEVER_KEYS and shared_towers) over those of the start"
    )
    relabel: Optional[dict[str, Any]] = Field(
        None,
        description="dpr.relabel's settings (RelabelSettings' keys): multi-positive NCE over the qrels' other "
        "positives (dpr_relabel_<detector>); null = NCE over the first positive",
    )
    snapshots: Snapshots = Field(
        0, description="weight snapshots kept at N evenly spaced steps (selection.checkpoints); 0 = none"
    )

    def relabel_settings(self) -> dict[str, Any] | None:
        """dpr.relabel's settings, complete and validated, or None when the run does not relabel."""
        if self.relabel is None:
            return None
        return _complete(RelabelSettings, tuple(RelabelSettings.model_fields), self.relabel, "relabel")

    def resolved(self) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        """(training settings, objective, retriever overrides), each complete and validated by its
        contract: unknown keys and bad values are a ConfigError naming them."""
        contract = DprSettings if self.section == "dpr" else CcrSettings
        objective_defaults = Objective if self.section == "dpr" else CcrSettings
        train = _complete(contract, tuple(TrainSettings.model_fields), self.train, "train")
        objective = _complete(objective_defaults, tuple(Objective.model_fields), self.objective, "objective")
        retriever = _checked(ModelSettings, (*RETRIEVER_KEYS, "shared_towers"), self.retriever, "retriever")
        return train, objective, retriever


def _checked(
    cls: type[Contract], names: tuple[str, ...], given: dict[str, Any], where: str
) -> dict[str, Any]:
    """``given`` (keys of ``names`` only), validated by ``cls`` over its defaults."""
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise ConfigError(
            f"settings key '{where}': unknown key(s) {', '.join(map(repr, unknown))} "
            f"(allowed keys: {', '.join(sorted(names))})"
        )
    validated = from_dict(cls, dict(given), where)
    return {name: getattr(validated, name) for name in names if name in given}


def _complete(
    cls: type[Contract], names: tuple[str, ...], given: dict[str, Any], where: str
) -> dict[str, Any]:
    """Every key of ``names``: ``given``'s, else ``cls``'s default; validated by ``cls``."""
    _checked(cls, names, given, where)
    validated = from_dict(cls, {**{n: default(cls, n) for n in names}, **given}, where)
    return {name: getattr(validated, name) for name in names}

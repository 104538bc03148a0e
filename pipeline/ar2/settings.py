"""Section ar2: AR2's rounds, its ranker, SimANS sampling, and which of its keys each AR2 rule reads."""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import Field

from pipeline.core.settings.base import (
    MAX_RANKS,
    MAX_ROUNDS,
    MAX_RUNS,
    MAX_STEPS,
    MEM_MB_HELP,
    RESOURCE_KEYS,
    BatchSize,
    Contract,
    Gpus,
    MemMb,
    Negatives,
    Precision,
    Ranks,
    Seed,
    Share,
    Steps,
    Threads,
    Tokens,
    Unique,
)
from pipeline.sieve.settings import SIEVE_DECISION_KEYS


class SimansSettings(Contract):
    """SimANS sampling of the simans* variants: w ∝ exp(-a·(s_i - s_+ - b)^2) (form abs: exp(-a·|…|)),
    s = the retriever's logits."""

    a: float = Field(0.5, ge=0, description="sharpness")
    b: float = Field(
        0.0, description="offset from the positive's score (NQ as the released code runs it: -1)"
    )
    form: Literal["square", "abs"] = Field("square", description="square or abs of the offset score")


class Ar2RankerSettings(Contract):
    """AR2's cross-encoder ranker: base encoder, [CLS] -> Linear -> 1 logit."""

    base: str = Field("minilm", min_length=1, description="HF encoder name or folder")
    max_len: Tokens = Field(128, description="tokens of a query-passage pair")


class Ar2ListwiseSettings(Contract):
    """The ranker AR2 starts from with ``ranker_init: listwise`` (pipeline.ar2.train_ranker): AR2's
    ranker loss on the DPR start's own train candidates, before round 1."""

    steps: int = Field(400, ge=1, le=MAX_STEPS, description="training steps")
    lr: float = Field(3e-5, gt=0, description="peak learning rate (AdamW)")
    batch_size: BatchSize = Field(8, description="queries per step")
    negatives: Negatives = Field(7, description="sampled negatives per query: 1 + k candidates")
    warmup_ratio: Share = Field(0.1, description="linear warm-up share, then linear decay")
    rerank_depth: int = Field(
        30, ge=2, le=MAX_RANKS, description="dev: the retriever's top n, reranked and scored"
    )


class Ar2Settings(Contract):
    """AR2 (adversarial retriever-ranker) on the mined negatives, with and without the passage sieve, in
    rounds results/{dataset}/ar2/{variant}/round{r}/ (round 0 = the DPR start); methods ar2, ar2_sieve,
    ar2_simans, ar2_simans_sieve. Demo-sized step counts; the paper's: recipes.paper (docs/ar2.md)."""

    rounds: int = Field(
        2,
        ge=1,
        le=MAX_ROUNDS,
        description="training rounds after round 0; each mines, (sieves), trains and re-encodes the corpus",
    )
    seeds: Optional[Unique(Seed, 1, MAX_RUNS)] = Field(
        None,
        description="AR2 runs, one per seed; null = the top-level `seeds`. Adding a seed runs only the new one",
    )
    top_k: Ranks = Field(
        30, description="retrieved per train query by the previous round's retriever (AR2: 100; MS MARCO 200)"
    )
    exclude_answer_match: bool = Field(
        False, description="true (NQ/TQ recipe): candidates containing an answer are not negatives"
    )
    negatives: Negatives = Field(
        3, description="k sampled negatives per query per step: 1 + k candidates (AR2: 15)"
    )
    batch_size: BatchSize = Field(4, description="queries per step")
    ranker_warmup_steps: Steps = Field(
        8, description="extra ranker steps at the start of round 1 (the ranker starts from the base model)"
    )
    ranker_warmup_lr: Optional[float] = Field(
        None, gt=0, description="own optimizer and schedule for the warm-up; null = ranker_lr"
    )
    ranker_steps: Steps = Field(
        4, description="ranker steps per round, first (AR2: ~500 of each 2000-step block)"
    )
    retriever_steps: Steps = Field(
        8, description="retriever steps per round, after the ranker's (AR2: ~1500)"
    )
    retriever_lr: float = Field(1e-5, gt=0, description="the retriever's peak learning rate")
    ranker_lr: float = Field(3e-5, gt=0, description="the ranker's peak learning rate")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay")
    warmup_ratio: Share = Field(
        0.1,
        description="linear warm-up/decay over all rounds' steps (optimizer and scheduler carried across rounds)",
    )
    max_grad_norm: float = Field(2.0, ge=0, description="gradient clipping norm; 0 = no clipping")
    adv_lambda: Share = Field(
        0.0, description="λ in λ·adv + (1-λ)·distill: 0.5 AR2's recipe, 0 the sieve paper's runs"
    )
    distill_temperature: float = Field(
        1.0,
        gt=0,
        description="the ranker's logits are divided by it before its softmax (distillation target)",
    )
    simans: SimansSettings = SimansSettings()
    ranker: Ar2RankerSettings = Ar2RankerSettings()
    ranker_init: Literal["base", "cross_encoder", "listwise"] = Field(
        "base",
        description="round 1's ranker: base (ar2.ranker.base with a new head), cross_encoder "
        "(models/cross_encoder, trained once with sieve.cross_encoder and shared by every variant and seed), "
        "or listwise (trained on the DPR start's candidates: ar2/ranker/seed<s>/, ar2.listwise)",
    )
    listwise: Ar2ListwiseSettings = Ar2ListwiseSettings()
    ranker_prior: Literal["none", "retriever"] = Field(
        "none",
        description="D's logit: the cross-encoder's (none, AR2) or the cross-encoder's plus the logit of the "
        "retriever that mined the candidates (retriever: D starts as that retriever, head at zero)",
    )
    similarity: Optional[Literal["cosine", "dot"]] = Field(
        None, description="G's score: null = the DPR retriever's | dot (AR2: dot product, no tau) | cosine"
    )
    temperature: Optional[float] = Field(None, gt=0, description="tau for cosine: null = the DPR retriever's")
    passage_max_len: Optional[Tokens] = Field(
        None, description="null = the DPR retriever's; an override applies to AR2's encoding and training"
    )
    sieve_init: Literal["initial", "warm", "current"] = Field(
        "initial",
        description="sieve variants' scorer: initial = the CCR model models/dpr_ccr_b<β>, trained once; warm = "
        "CCR retrained each round from the warm-up DPR on that round's candidates (the authors' scripts); "
        "current = CCR retrained each round from round r-1's retriever",
    )
    select_metric: str = Field(
        "R@5", min_length=1, description="dev metric that picks the reported round (MS MARCO: MRR@10)"
    )
    checkpoint_every: Steps = Field(25, description="steps; a crashed round resumes from its last checkpoint")
    keep_checkpoints: bool = Field(
        False, description="false: round r's optimizer state is deleted once round r+1 has trained"
    )
    precision: Precision = Field("bf16", description="as dpr.precision")
    encode_batch_size: BatchSize = Field(
        64, description="a round's corpus encoding (encode.shards parallel jobs, at ar2.precision)"
    )
    threads: Threads = Field(1, description="per AR2 job: two variants then run side by side on 2 cores")
    mem_mb: MemMb = Field(6000, description=MEM_MB_HELP)
    gpus: Gpus = Field(0, description="GPUs the job reserves")


# What each AR2 rule reads of config ar2 (workflow/rules/ar2.smk records exactly these as its params, so
# a changed setting reruns the rules that read it and nothing else). Left out everywhere: which runs
# exist (seeds), ar2_select's metric, keep_checkpoints (a Snakemake temp() choice) and the job's
# reservation.
RETRIEVER_OVERRIDE_KEYS = ("similarity", "temperature", "passage_max_len")
AR2_MINE_KEYS = ("top_k", "exclude_answer_match", *RETRIEVER_OVERRIDE_KEYS)
AR2_TRAIN_KEYS = tuple(
    k
    for k in Ar2Settings.model_fields
    if k
    not in (
        "seeds",
        "select_metric",
        "keep_checkpoints",
        "top_k",
        "exclude_answer_match",
        "sieve_init",
        "encode_batch_size",
        "listwise",
        *RESOURCE_KEYS,
    )
)
# The listwise ranker AR2 starts from (pipeline.ar2.train_ranker, ranker_init listwise).
AR2_RANKER_KEYS = (
    "ranker",
    "listwise",
    "ranker_prior",
    "weight_decay",
    "max_grad_norm",
    "checkpoint_every",
    "precision",
)
AR2_SIEVE_KEYS = ("candidates", "pool", *SIEVE_DECISION_KEYS)


def ar2_recorded_settings(ar2: dict[str, Any], sampling: str = "simans") -> dict[str, Any]:
    """The config ar2 keys an AR2 round's training reads (``AR2_TRAIN_KEYS``), recorded as its param.

    Left out besides: ``ranker`` when round 1's ranker is a trained one (``ranker_init`` cross_encoder
    or listwise: ar2.ranker then builds nothing in the round; the listwise ranker's rule records it), and ``simans`` for a variant that
    samples uniformly (``sampling``), which never reads it.
    """
    settings = {k: ar2[k] for k in AR2_TRAIN_KEYS if k in ar2}
    if ar2.get("ranker_init", "base") != "base":
        settings.pop("ranker", None)
    if sampling != "simans":
        settings.pop("simans", None)
    return settings

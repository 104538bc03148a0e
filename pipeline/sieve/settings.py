"""Section sieve: the passage sieve's candidates and decision, the false-negative filters compared with
it (``FILTER_CONTRACTS``, one entry per filter, and each filter's section sieve.<name>), and the
cleaning of a user's hard-negative file with one of them (config clean.<name>, ``CleanSpec``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal, Optional

from pydantic import Field, ValidationInfo, create_model, field_validator, model_validator

from pipeline.core.settings.base import (
    MAX_GRID_POINTS,
    MAX_RANKS,
    MAX_RUNS,
    MAX_STEPS,
    BatchSize,
    Contract,
    Gpus,
    MemMb,
    QueryCount,
    Ranks,
    Share,
    Threads,
    Tokens,
    Unique,
)


class InjectionSettings(Contract):
    fraction: Share = Field(
        0.0,
        description="simulation: share of queries with > 1 positive whose extra positives become candidates",
    )


class RankWindowSettings(Contract):
    start: int = Field(
        10,
        ge=0,
        le=MAX_RANKS,
        description="candidates ranked 1..start are dropped (FlagEmbedding samples past its top ranks the same way)",
    )


class PositiveAwareSettings(Contract):
    mode: Literal["relative", "difference", "absolute"] = Field(
        "relative",
        description="drop a candidate scoring above margin × s+ (relative, NV-Retriever), s+ − margin "
        "(difference), or margin (absolute)",
    )
    margin: float = Field(0.95, description="the mode's margin")


class AbsoluteMarginSettings(Contract):
    """sentence-transformers' ``absolute_margin`` (NV-Retriever's TopK-MarginPos): the positive_aware rule
    in its difference mode, a filter of its own so that the comparison holds it beside the relative one."""

    margin: float = Field(
        0.05,
        ge=0,
        description="drop a candidate scoring above s+ − margin (retriever cosine); 0.05: NV-Retriever's variant",
    )


class PositiveAwareDevSettings(Contract):
    """positive_aware's relative rule (drop s_neg > margin × s+) at the margin of a grid that best separates
    the dev queries' candidates: truth = qrels_all (synthkb), else answer match (docs/sieve.md)."""

    grid_min: float = Field(0.8, gt=0, description="smallest margin of the grid")
    grid_max: float = Field(1.0, gt=0, description="largest margin of the grid (1: drop only above s+)")
    grid_step: float = Field(0.01, gt=0, description="spacing of the grid's margins")
    criterion: Literal["youden", "f1"] = Field(
        "youden",
        description="what the margin maximises over the dev candidates: youden (false-negative recall − "
        "true negatives dropped share) or f1 (of the dropped set as false-negative detection); ties: the "
        "largest margin (the fewest drops)",
    )

    @model_validator(mode="after")
    def _ordered(self) -> "PositiveAwareDevSettings":
        if self.grid_max < self.grid_min:
            raise ValueError(f"grid_max {self.grid_max} is below grid_min {self.grid_min}")
        # grid() lists every margin: a step of 1e-300 asked for more margins than memory holds.
        points = (self.grid_max - self.grid_min) / self.grid_step + 1
        if points > MAX_GRID_POINTS:
            raise ValueError(
                f"grid_min {self.grid_min} to grid_max {self.grid_max} in steps of {self.grid_step} is "
                f"{points:.3g} margins, more than {MAX_GRID_POINTS:,}: raise grid_step"
            )
        return self

    def grid(self) -> list[float]:
        """The margins: grid_min, grid_min + step, ... up to grid_max (rounded to 10 decimals)."""
        n = int((self.grid_max - self.grid_min) / self.grid_step + 1e-9)
        return [round(self.grid_min + i * self.grid_step, 10) for i in range(n + 1)]


class CrossEncoderFilterSettings(Contract):
    threshold: float = Field(
        0.1,
        gt=0,
        le=1,
        description="RocketQA: a candidate stays a negative only if the cross-encoder's probability is below it",
    )
    base: str = Field("minilm", min_length=1, description="encoder the cross-encoder is fine-tuned from")
    max_len: Tokens = Field(128, description="tokens of a query-passage pair")
    steps: int = Field(150, ge=1, le=MAX_STEPS, description="training steps: its stated budget")
    batch_size: BatchSize = Field(
        16, description="queries per step (each gives one positive and one BM25-negative pair)"
    )
    lr: float = Field(2e-5, gt=0, description="peak learning rate (AdamW)")
    precision: Literal["bf16", "fp32"] = Field(
        "bf16", description="training autocast: bf16 on CUDA and on CPUs with native bf16, else fp32"
    )


# What the cross-encoder is trained with (its threshold is the filter's).
CROSS_ENCODER_TRAINING = ("base", "max_len", "steps", "batch_size", "lr", "precision")
# The sieve's decision keys of section sieve that a filter applying its rule reads (not batch_size).
SIEVE_RULE_KEYS = ("strict", "fallback", "temperature")


@dataclass(frozen=True)
class FilterContract:
    """What the config and the workflow must know of a false-negative filter: its settings (section
    sieve.<name>) and what it needs to run. Its code, description and builder are its module in
    pipeline.sieve.filters, which reads this entry (the config root cannot import the sieve)."""

    settings: type[Contract] | None = None  # its section sieve.<name>; None: it has no settings
    reads: tuple[str, ...] | None = None  # the fields of its section the filter reads (None: all)
    rule: bool = False  # reads the sieve's decision (SIEVE_RULE_KEYS of section sieve) and the seed
    # the model that scores its candidates: the DPR warm-up (retriever), the cross-encoder, or the start
    # model a user has (teacher: the method sieve.teacher names, zero-shot MiniLM by default)
    scorer: Literal["retriever", "cross_encoder", "teacher"] | None = None
    labels: Literal["true", "dev"] | None = None  # the truth it reads: every candidate's, or the dev queries'
    clean: bool = False  # sieve-clean runs it on a user's file (pipeline.sieve.clean)
    # Its settings' flags and job keys without the section's name (--start, --mode): those of the first
    # filters, kept for their users; a new filter's are prefixed (--toy-margin), so no two collide.
    bare: bool = False

    def fields(self) -> tuple[str, ...]:
        """The fields of its section it reads."""
        if self.settings is None:
            return ()
        return self.reads if self.reads is not None else tuple(self.settings.model_fields)


# The filters, in the order of the comparison's documentation and of sieve.filters' choices: one entry
# each, from which the names, the model filters, the cleaning command's filters, section sieve's
# per-filter sections and the filter and cleaning jobs' settings are derived.
FILTER_CONTRACTS: dict[str, FilterContract] = {
    "none": FilterContract(clean=True),
    "answer_match": FilterContract(),
    "oracle": FilterContract(labels="true", clean=True),
    "rank_window": FilterContract(RankWindowSettings, clean=True, bare=True),
    "positive_aware": FilterContract(PositiveAwareSettings, scorer="retriever", clean=True, bare=True),
    "absolute_margin": FilterContract(AbsoluteMarginSettings, scorer="retriever"),
    "positive_aware_dev": FilterContract(PositiveAwareDevSettings, scorer="retriever", labels="dev"),
    "cross_encoder": FilterContract(
        CrossEncoderFilterSettings, reads=("threshold",), scorer="cross_encoder", clean=True, bare=True
    ),
    "sieve": FilterContract(rule=True, scorer="retriever", clean=True),
    "sieve_no_ccr": FilterContract(rule=True, scorer="retriever"),
    # The same rules scored by the teacher (sieve.teacher) instead of a model trained on the noisy negatives.
    "sieve_teacher": FilterContract(rule=True, scorer="teacher", clean=True),
    "positive_aware_teacher": FilterContract(PositiveAwareSettings, scorer="teacher", clean=True),
    "positive_aware_teacher_sieve": FilterContract(
        PositiveAwareSettings, rule=True, scorer="teacher", clean=True
    ),
}
FILTER_NAMES = tuple(FILTER_CONTRACTS)
# The filters that run a model (a retriever or the cross-encoder): their jobs take sieve.gpus.
MODEL_FILTERS = tuple(n for n, c in FILTER_CONTRACTS.items() if c.scorer is not None)
# The filters that read every candidate's true false-negative label (an oracle: synthkb's qrels_all).
TRUE_LABEL_FILTERS = tuple(n for n, c in FILTER_CONTRACTS.items() if c.labels == "true")
# The filters that judge a file of (query, positive, negatives) rows (pipeline.sieve.clean).
CLEAN_FILTERS = tuple(n for n, c in FILTER_CONTRACTS.items() if c.clean)


class _SieveCandidatesSettings(Contract):
    """Section sieve up to its list of filters (SieveSettings, below, is the section)."""

    source: str = Field(
        "bm25",
        pattern=r"^[A-Za-z0-9_.-]+$",
        description="negatives file results/{dataset}/negatives/<source>.parquet (its non-excluded rows)",
    )
    scorer: Literal["ccr", "dpr"] = Field(
        "dpr",
        description="model scoring the sieve (the sieve filter, dpr_sieve, AR2's initial sieve): ccr = "
        "models/dpr_ccr_b<ccr.beta> (the paper; recipes.paper); dpr = models/dpr, no CCR (dpr_sieve is then "
        "dpr_sieve_no_ccr). How the filters compare: docs/results.md, the tournament",
    )
    teacher: str = Field(
        "zeroshot",
        pattern=r"^[A-Za-z0-9_.-]+$",
        description="method whose model scores the teacher-scored filters (sieve_teacher, "
        "positive_aware_teacher, positive_aware_teacher_sieve): the start model a user has; a dense method "
        "that reads no true labels and is not trained on the sieve's candidates (zeroshot, dpr, dpr_ccr)",
    )
    candidates: Ranks = Field(
        30, description="hard negatives per query judged by the sieve (released code: 30)"
    )
    pool: Ranks = Field(
        100, description="candidates are sampled per query (seeded) from the top <pool> ranks"
    )
    max_queries: Optional[QueryCount] = Field(
        None,
        description="seeded sample of train queries; null = all (the cross-encoder filter scores every "
        "candidate pair; its throughput, with the CPU: docs/results.md)",
    )

    @field_validator("pool")
    @classmethod
    def _pool_holds_the_candidates(cls, pool: int, info: ValidationInfo) -> int:
        # The candidates are drawn from the pool: a smaller pool judged fewer candidates than asked,
        # without a word.
        candidates = info.data.get("candidates")
        if candidates is not None and pool < candidates:
            raise ValueError(
                f"{pool} is smaller than sieve.candidates {candidates}: the candidates are drawn from the "
                f"top {pool} ranks, so the sieve would judge {pool} per query; raise pool or lower candidates"
            )
        return pool

    strict: bool = Field(False, description="keep iff loss > threshold (released code) instead of >= (paper)")
    fallback: Literal["random_one", "none"] = Field(
        "random_one",
        description="nothing survives: random_one keeps one random candidate (released code), none keeps none",
    )
    temperature: Optional[float] = Field(
        None,
        gt=0,
        description="tau of the reported losses; null = the model's. Decisions do not depend on tau",
    )
    betas: Unique(Annotated[float, Field(ge=0)], 0, MAX_RUNS) = Field(
        [0, 0.5, 1, 3, 6],
        description="β sweep (effective, relative to NCE): CCR models dpr_ccr_b<β>, sieve_b<β> filters, "
        "Figure 1, and the methods dpr_ccr_b<β>, dpr_sieve_b<β>; from the paper's 0.5 to the authors' 6",
    )
    in_batch: int = Field(
        30, ge=0, le=MAX_RANKS, description="in-batch negatives per query in Figure 1's softmax"
    )
    figure_queries: Optional[QueryCount] = Field(
        2000, description="queries sampled for Figure 1 (null = all)"
    )
    batch_size: BatchSize = Field(64, description="encoding batch size")
    injection: InjectionSettings = InjectionSettings()
    filters: Unique(Literal[FILTER_NAMES]) = Field(
        ["none", "answer_match", "rank_window", "positive_aware", "cross_encoder", "sieve", "sieve_no_ccr"],
        description="the filters compared on the sieve's candidates (sieve/comparison.md)",
    )


# Each filter with settings has its section sieve.<name>, in FILTER_CONTRACTS' order, after sieve.filters.
_SieveFilterSections = create_model(
    "_SieveFilterSections",
    __base__=_SieveCandidatesSettings,
    __module__=__name__,
    **{name: (c.settings, c.settings()) for name, c in FILTER_CONTRACTS.items() if c.settings is not None},
)


class SieveSettings(_SieveFilterSections):
    """Passage sieve (Algorithm 1) and the competing false-negative filters, on the same candidates:
    results/{dataset}/negatives/, results/{dataset}/sieve/ (docs/sieve.md)."""

    threads: Threads = Field(
        2, description="CPU threads of the jobs that run a model: the sieve, positive_aware, cross_encoder"
    )
    mem_mb: MemMb = Field(4000, description="memory those jobs reserve (MB)")
    gpus: Gpus = Field(
        0,
        description="GPUs of those jobs (the sieve's scoring, the model-based filters, the cross-encoder's "
        "training); the paper recipe: 1. AR2's own sieve takes ar2.gpus",
    )


# The sieve decision's own settings (the sieve_negatives rule, sieve_no_ccr, AR2's sieve, bench/).
SIEVE_DECISION_KEYS = ("strict", "fallback", "temperature", "batch_size")


# ---- cleaning a user's hard-negative dataset (pipeline.sieve.clean, docs/clean.md) ----------------

CLEAN_FORMATS = ("triplet", "n_tuple", "labeled_pair", "labeled_list", "tevatron", "flagembedding")
CLEAN_MODES = ("drop", "relabel", "mark")
CLEAN_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv")


class CleanSpec(Contract):
    """One hard-negative dataset of your own to clean (rule clean_negatives): the file, its filter and
    model; the filters' own settings are section sieve's (rank_window, positive_aware, cross_encoder,
    strict, fallback, batch_size)."""

    source: str = Field(
        min_length=1,
        description="the dataset file (.jsonl, .json, .parquet or .csv; relative to the repository root)",
    )
    format: Literal[("auto", *CLEAN_FORMATS)] = Field(
        "auto", description="its schema; auto = detected from the columns (docs/clean.md)"
    )
    filter: Literal[CLEAN_FILTERS] = Field("sieve", description="the false-negative filter")
    model: str = Field(
        "minilm",
        min_length=1,
        description="retriever (sieve, positive_aware; the teacher of sieve_teacher, positive_aware_teacher, "
        "positive_aware_teacher_sieve) or cross-encoder folder (cross_encoder) that scores the negatives; "
        "minilm = the offline all-MiniLM-L6-v2",
    )
    mode: Literal[CLEAN_MODES] = Field(
        "drop",
        description="what happens to a suspected false negative: drop it, relabel it as a positive "
        "(formats with several positives), or mark it (a verdict column)",
    )
    labels: Optional[str] = Field(
        None,
        min_length=1,
        description="known truth: every relevant passage of the queries it lists (columns query, passage); "
        "null = none (no recall or precision)",
    )
    near_duplicate: Share = Field(
        0.9,
        description="a negative whose word 3-gram Jaccard with a positive is at least this is "
        "duplicate_of_positive, before any model runs",
    )

    @field_validator("source")
    @classmethod
    def _suffix(cls, source: str) -> str:
        if not source.endswith(CLEAN_SUFFIXES):
            raise ValueError(
                f"{source!r}: the workflow cleans {', '.join(CLEAN_SUFFIXES)} files (a datasets folder: "
                "python -m pipeline.sieve.clean, or Dataset.to_parquet first)"
            )
        return source

"""One contract per config section: the only declaration of every setting's name, type, range,
default and help.

Each section of config.yaml is a pydantic model here (``extra="forbid"``, strict types, finite
numbers). Everything else is derived from these models:

- validation and defaults: ``pipeline.core.config.validate_config`` fills the defaults a config leaves
  out and validates the whole config against ``Config``; errors name the key path;
- the JSON schema (``config_schema()``; committed as workflow/schemas/config.schema.json for editors,
  tests/test_settings.py keeps it current);
- the CLI flags of a stage (``add_flags``) and a hand run's command line built from settings (``to_flags``:
  no rule's, each passes a settings document; bench/ccr_regime.py's).

A default is declared here and nowhere else: it is the demo's value (small step counts that run on 2
CPU cores); recipes and overlays change it for paper-scale runs. config.yaml restates none, and
docs/config.md, the reference users read, is generated from these models
(pipeline.core.settings_reference); tests/test_settings.py checks both.
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import posixpath
import shlex
import sys
import types
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Mapping, Optional, Sequence, Union, get_args, get_origin
from urllib.parse import unquote, urlparse

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    ValidationInfo,
    create_model,
    field_validator,
    model_validator,
)

PRECISIONS = ("bf16", "fp16", "fp32")
Precision = Literal["bf16", "fp16", "fp32"]


class ConfigError(ValueError):
    """The configuration is invalid; the message names the key path (re-exported by core.config)."""


# ---- building blocks ----------------------------------------------------------------------------


def _unique(values: list) -> list:
    seen = []
    for value in values:
        if value in seen:
            raise ValueError(f"{value!r} is listed twice")
        seen.append(value)
    return values


def Unique(item: Any, min_length: int = 0, max_length: int | None = None) -> Any:  # noqa: N802  (a type, spelled like one)
    """A list of ``item`` without repeats (at least ``min_length`` entries, at most ``max_length``)."""
    return Annotated[
        list[item],
        Field(min_length=min_length, max_length=max_length, json_schema_extra={"uniqueItems": True}),
        AfterValidator(_unique),
    ]


Name = Annotated[str, Field(pattern=r"^[A-Za-z0-9_]+$")]
# A method: a name of pipeline.core.methods' table (a β sweep's methods carry their β: dpr_ccr_b0.05).
# numpy's legacy seeding (np.random.seed, pipeline.core.seeding) takes 0 <= seed < 2**32: a larger
# seed passed the config and -n, then stopped the first training job after its upstream jobs ran.
Seed = Annotated[int, Field(ge=0, le=2**32 - 1)]
MethodName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.]+$")]
METRIC_PATTERN = r"^((R|hit|hit_all|recall)@[1-9][0-9]*|MRR(_all)?@10)$"
Metric = Annotated[str, Field(pattern=METRIC_PATTERN)]
Pair = Annotated[list[MethodName], Field(min_length=2, max_length=2)]
# Folders of resources/ and results/ that are not a dataset's.
RESERVED_FOLDERS = frozenset({"models", "prefetch", "fingerprints", "sweeps"})


# ---- upper bounds of counts ---------------------------------------------------------------------
# Every count has a ceiling where it is declared, so a slip (an extra digit, a value meant for another
# key) is refused by the config check, naming the key, instead of being found hours later by a job, or
# by Snakemake itself: encode.shards of 10^20 passed the check and `snakemake -n` then ran for 75 s into
# a MemoryError building that many jobs. Each ceiling is past what the largest corpus the project knows
# (Wikipedia, 21M passages; MS MARCO, 8.8M) or the largest machine needs, so a real run never meets one.
#
# Shards are jobs: 21M passages over 1,024 shards is ~20k passages a shard, about a minute of one GPU's
# encoding, and more shards only add job start-ups; the DAG grows with them too (`snakemake -n` of the
# demo already takes ~45 s at 1,000 shards).
MAX_SHARDS = 1024
# Ranks per query (run depth, mining depth, candidate pools, cut-offs): TREC and BEIR runs stop at 1,000.
MAX_RANKS = 10_000
# Negatives per query in one softmax (each a passage encoded per step): DPR 1, AR2 15, RocketQA 127.
MAX_NEGATIVES = 1_000
# Optimizer steps: the paper-scale runs take tens of thousands; 10^7 steps is months of training.
MAX_STEPS = 10_000_000
MAX_EPOCHS = 1_000
MAX_GRAD_ACCUM = 4_096
# Queries or passages per forward pass: 65,536 is past any GPU's memory at these sequence lengths.
MAX_BATCH = 65_536
# Passages read ahead and sorted by length (held in memory at once).
MAX_SORT_BUFFER = 10_000_000
# Passages of a corpus (a sample to train an index on cannot be larger).
MAX_PASSAGES = 100_000_000
# Queries sampled from a split (MS MARCO train: 503k queries).
MAX_QUERIES = 100_000_000
# synthkb entities: ~7.2 passages each, so 3M entities is a Wikipedia-sized corpus (21M passages).
MAX_ENTITIES = 3_000_000
# Tokens: the longest-context encoders (ModernBERT, jina v2) take 8,192; BERT's kind 512.
MAX_TOKENS = 8_192
MAX_LAYERS = 1_024
# FAISS's probes (IVF cells, HNSW breadth): an IVF65536 index has 65,536 cells to probe at most.
MAX_PROBES = 65_536
# Passages scored per chunk by the torch search: 2^24 rows of 768 fp16 dims are already 24 GiB.
MAX_CHUNK_ROWS = 2**24
# RRF's k is 60 in every system; at 10^6 the fusion is already a plain count of the lists a passage is in.
MAX_RRF_K = 1_000_000
# AR2 rounds: each re-encodes the corpus; the AR2 paper trains a handful.
MAX_ROUNDS = 100
# A job's reservation on one node: no node has more hardware threads, 16 TiB of memory or 64 GPUs.
MAX_THREADS = 1_024
MAX_MEM_MB = 2**24
MAX_GPUS = 64

# Attempts a training job gets (Snakemake's `retries` + 1 on the training rules). A run that would
# outlast its job's time limit checkpoints and exits before it (pipeline.training.engine), and the next
# attempt continues: the longest paper-recipe job, AR2's listwise ranker at ~45 h on an H200, needs 2
# segments under a 24 h cap, 4 under 12 h; 4 attempts also leave one for a node failure.
TRAINING_ATTEMPTS = 4
# Seeds and β values: each trains every method (or a CCR model and its sieve) again, so like shards
# they multiply the DAG; papers report 3 to 5 seeds and a handful of β.
MAX_RUNS = 100
# positive_aware_dev's grid: each margin is a pass over the dev candidates.
MAX_GRID_POINTS = 10_001


class Contract(BaseModel):
    """A config section: unknown keys, wrong types and non-finite numbers are errors (``from_dict``
    turns them into a ConfigError naming each key)."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


# ---- training (sections dpr and ccr): what pipeline.training.train_dense trains with ------------


class TrainSettings(Contract):
    """Optimisation and data settings shared by DPR and CCR training (defaults: DPR's)."""

    lr: float = Field(2e-5, gt=0, description="peak learning rate (AdamW)")
    epochs: int = Field(1, ge=1, le=MAX_EPOCHS, description="passes over the training queries")
    batch_size: int = Field(
        16,
        ge=1,
        le=MAX_BATCH,
        description="GLOBAL queries per micro-batch (split over DDP ranks): the in-batch pool",
    )
    grad_accum: int = Field(1, ge=1, le=MAX_GRAD_ACCUM, description="micro-batches per optimizer step")
    hard_negatives: int = Field(
        1, ge=0, le=MAX_NEGATIVES, description="k: hard negatives per query, sampled per (qid, epoch, seed)"
    )
    negatives_depth: int = Field(
        30,
        ge=1,
        le=MAX_RANKS,
        description="sample the k negatives from this many top candidates (non-excluded, positives removed)",
    )
    in_batch: bool = Field(
        True, description="other queries' passages are negatives too (gathered across GPUs)"
    )
    warmup_ratio: float = Field(
        0.1, ge=0, le=1, description="linear warm-up over this share of the steps, then linear decay"
    )
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay (not on biases and LayerNorm)")
    max_grad_norm: float = Field(2.0, ge=0, description="gradient clipping norm; 0 = no clipping")
    max_steps: int = Field(
        60,
        ge=0,
        le=MAX_STEPS,
        description="cap on optimizer steps; 0 = no cap (epochs decide). The demo's cap keeps its training "
        "within a CPU budget (step times, with their CPU and precision: docs/results.md)",
    )
    checkpoint_every: int = Field(
        50,
        ge=0,
        le=MAX_STEPS,
        description="optimizer steps between checkpoints (a rerun resumes there); 0 = never",
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


class JobResources(Contract):
    """What a job reserves (Snakemake resources/threads), not what it computes."""

    threads: int = Field(2, ge=1, le=MAX_THREADS, description="CPU threads of the job")
    mem_mb: int = Field(6000, ge=1, le=MAX_MEM_MB, description="memory the job reserves (MB)")
    gpus: int = Field(0, ge=0, le=MAX_GPUS, description="GPUs the job reserves (more than 1: torchrun DDP)")


RESOURCE_KEYS = tuple(JobResources.model_fields)


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

    extra_positives: int = Field(
        1,
        ge=1,
        le=MAX_NEGATIVES,
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
    hard_negatives: int = Field(
        5,
        ge=1,
        le=MAX_NEGATIVES,
        description="k: BM25 hard negatives per query in the CCR softmax (released code: 5; 3 MS MARCO)",
    )
    in_batch: bool = Field(
        False, description="other queries' passages in the softmax too (released code: off)"
    )
    max_steps: int = Field(
        20, ge=0, le=MAX_STEPS, description="cap on optimizer steps; 0 = no cap (epochs decide)"
    )
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


# ---- the other sections -------------------------------------------------------------------------


class EvalSettings(Contract):
    """What results/{dataset}/metrics.json measures (docs/evaluation.md)."""

    split: Literal["train", "dev", "test"] = Field(
        "test", description="evaluated split (datasets.<name>.eval_split overrides)"
    )
    match: Literal["string", "regex"] = Field(
        "string", description="DPR has_answer: string tokens, or regex (CuratedTREC)"
    )
    ks: Unique(Annotated[int, Field(ge=1, le=MAX_RANKS)], 1) = Field(
        [1, 5, 20, 100], description="cut-offs for R@k (answers), hit@k and recall@k (qrels)"
    )
    depth: int = Field(
        100, ge=1, le=MAX_RANKS, description="passages retrieved per query for evaluation runs"
    )

    @field_validator("depth")
    @classmethod
    def _deep_enough(cls, depth: int, info: ValidationInfo) -> int:
        # A cut-off deeper than the runs reported R@k = R@depth as if measured at k.
        deeper = [k for k in info.data.get("ks") or [] if k > depth]
        if deeper:
            raise ValueError(
                f"{depth} is shallower than the cut-off(s) {', '.join(map(str, sorted(deeper)))} of "
                f"eval.ks: R@{max(deeper)} would be R@{depth} under another name; raise eval.depth "
                f"to at least {max(deeper)} or leave those cut-offs out of eval.ks"
            )
        return depth

    trec_export: bool = Field(True, description="also write run.{split}.trec next to every evaluated run")
    compare: list[Pair] = Field(
        [
            ["dpr", "zeroshot"],
            ["dpr_oracle", "zeroshot"],
            ["dpr_oracle", "dpr"],
            ["dpr_oracle", "dpr_none"],
            ["dpr_sieve", "dpr_none"],
            ["dpr_ccr", "dpr"],
            ["dpr_sieve", "dpr"],
            ["dpr_ccr", "dpr_ccr_b0"],
            ["dpr_rcl", "dpr"],
            ["dpr_sieve", "dpr_sieve_no_ccr"],
            ["ar2_sieve", "ar2"],
            ["ar2_simans_sieve", "ar2_simans"],
            ["hybrid_wsum_dpr_sieve", "bm25"],
            ["hybrid_wsum_dpr_sieve", "dpr_sieve"],
        ],
        description="[method, baseline] pairs: paired difference, 95% interval over common seeds (metrics.md); "
        "a pair with a method not in `methods` is left out. bm25 and zeroshot have no seed: as a baseline "
        "their one run is paired with every seed of the method. dpr_none (DPR on the filters' own candidate "
        "pool) isolates a filter from the pool; dpr_ccr_b0 (the same CCR fine-tune at beta 0) isolates beta "
        "from tau, k and the extra steps; dpr_sieve_no_ccr (the same sieve scored by models/dpr) isolates CCR",
    )


@functools.lru_cache(maxsize=None)
def unknown_stemmer(name: str) -> str | None:
    """Why PyStemmer has no stemmer ``name`` (with the languages it has), or None when it has one (or
    is not installed here: the index job, which needs it, says so)."""
    try:
        import Stemmer  # PyStemmer
    except ImportError:
        return None
    known = Stemmer.algorithms()
    if name in known:
        return None
    return f"PyStemmer has no stemmer {name!r} ({_closest_names(name, known)}; null = no stemming)"


@functools.lru_cache(maxsize=None)
def unknown_stopwords(name: str) -> str | None:
    """Why bm25s has no stop-word list ``name`` (its own words), or None when it has one (or is not
    installed here). bm25s keeps no list of its names to show, so its refusal is quoted."""
    try:
        from bm25s.tokenization import Tokenizer
    except ImportError:
        return None
    try:
        Tokenizer(stopwords=name)
    except ValueError as err:
        return f"bm25s has no stop-word list {name!r} (bm25s: {' '.join(str(err).split())}; null = none)"
    return None


def _closest_names(name: str, known: Sequence[str]) -> str:
    """'did you mean ...? known: ...' for a misspelt ``name`` (pipeline.core.methods.closest's wording)."""
    import difflib

    near = difflib.get_close_matches(name, list(known), n=3)
    hint = f"did you mean {', '.join(map(repr, near))}? " if near else ""
    return f"{hint}known: {', '.join(known)}"


class Bm25Settings(Contract):
    """BM25 (bm25s): the bm25 method's runs and the mined hard negatives."""

    k1: float = Field(0.9, gt=0, description="Pyserini/Lucene default (MS MARCO tuned: 0.82)")
    b: float = Field(0.4, ge=0, le=1, description="Pyserini/Lucene default (MS MARCO tuned: 0.68)")
    stemmer: Optional[str] = Field("english", description="PyStemmer language; null = no stemming")
    stopwords: Optional[str] = Field("en", description="bm25s stop-word list; null = none")

    # Asked of the libraries themselves, so the names follow the installed versions: an unknown name
    # passed the config check and stopped index_bm25 after its upstream jobs had run.
    @field_validator("stemmer")
    @classmethod
    def _known_stemmer(cls, name: Optional[str]) -> Optional[str]:
        problem = None if name is None else unknown_stemmer(name)
        if problem:
            raise ValueError(problem)
        return name

    @field_validator("stopwords")
    @classmethod
    def _known_stopwords(cls, name: Optional[str]) -> Optional[str]:
        problem = None if name is None else unknown_stopwords(name)
        if problem:
            raise ValueError(problem)
        return name

    negatives: int = Field(
        100,
        ge=1,
        le=MAX_RANKS,
        description="BM25 negatives mined per train query (results/{dataset}/negatives/bm25.parquet)",
    )
    exclude_answer_match: bool = Field(
        False, description="mark passages holding an answer string excluded (the DPR recipe)"
    )


class ModelSettings(Contract):
    """The bi-encoder every dense method starts from (results/{dataset}/models/zeroshot is it,
    untrained; docs/training.md)."""

    base: str = Field(
        "minilm",
        min_length=1,
        description="HF encoder name or folder; minilm = the offline all-MiniLM-L6-v2 (already retrieval-tuned)",
    )
    pooling: Literal["mean", "cls"] = Field("mean", description="mean of the token states, or [CLS]")
    similarity: Literal["cosine", "dot"] = Field(
        "cosine", description="cosine or dot (DPR's); CCR always fine-tunes with cosine"
    )
    temperature: float = Field(
        0.05,
        gt=0,
        description="tau: cosine scores are divided by it in the loss (MiniLM was trained at 0.05)",
    )
    shared_towers: bool = Field(True, description="one encoder for queries and passages")
    query_max_len: int = Field(32, ge=4, le=MAX_TOKENS, description="query tokens")
    passage_max_len: int = Field(
        128, ge=8, le=MAX_TOKENS, description="passage tokens; passages are encoded as the pair (title, text)"
    )


# The model settings a retriever folder keeps and a training run may override (train_dense flags).
RETRIEVER_KEYS = ("pooling", "similarity", "temperature", "query_max_len", "passage_max_len")


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


class EncodeSettings(Contract):
    """Corpus encoding, scattered over shards and gathered (docs/encoding.md)."""

    shards: int = Field(
        2,
        ge=1,
        le=MAX_SHARDS,
        description="parallel encode_corpus jobs per model; shard i holds corpus rows [i*N/n, (i+1)*N/n)",
    )
    batch_size: int = Field(64, ge=1, le=MAX_BATCH, description="passages per forward pass")
    sort_buffer: int = Field(
        20000,
        ge=1,
        le=MAX_SORT_BUFFER,
        description="passages read ahead and sorted by token length (bounds the memory)",
    )
    amp: bool = Field(
        True,
        description="autocast: fp16 on CUDA, bf16 on a CPU with native bf16 (else fp32); stored fp16",
    )
    backend: Literal["torch", "openvino"] = Field(
        "torch",
        description="corpus encoding's forward pass: torch, or openvino (CPU jobs: the model compiled by "
        "OpenVINO in the same precision)",
    )
    gpus: int = Field(0, ge=0, le=MAX_GPUS, description="GPUs per encode job (Snakemake resource); 0 = CPU")
    threads: int = Field(
        1, ge=1, le=MAX_THREADS, description="CPU threads per encode job (shards x threads <= cores)"
    )
    mem_mb: int = Field(4000, ge=1, le=MAX_MEM_MB, description="memory the job reserves (MB)")


class IndexSettings(Contract):
    """The FAISS index over a model's corpus embeddings."""

    factory: str = Field(
        "Flat",
        min_length=1,
        description="FAISS index_factory: Flat | SQfp16 | IVF4096,Flat | HNSW32 | IVF65536,PQ64 ...",
    )
    shards: int = Field(
        1,
        ge=1,
        le=MAX_SHARDS,
        description="index parts, 1..encode.shards: > 1 = one index per group of embedding shards",
    )
    train_size: int = Field(
        100000, ge=1, le=MAX_PASSAGES, description="vectors sampled (seeded) to train IVF / PQ"
    )
    gpus: int = Field(
        0, ge=0, le=MAX_GPUS, description="GPUs per build_index job; used when faiss sees GPUs (`gpu` extra)"
    )
    threads: int = Field(2, ge=1, le=MAX_THREADS, description="CPU threads of the job")
    mem_mb: int = Field(8000, ge=1, le=MAX_MEM_MB, description="memory the job reserves (MB)")


class SearchSettings(Contract):
    """Dense search of the evaluated queries."""

    backend: Literal["faiss", "torch"] = Field(
        "faiss",
        description="faiss, or torch (exact; streams the fp16 shards, on CUDA when the job holds a GPU)",
    )
    batch_size: int = Field(128, ge=1, le=MAX_BATCH, description="queries per forward pass")
    nprobe: int = Field(32, ge=1, le=MAX_PROBES, description="IVF cells probed per query")
    ef_search: int = Field(128, ge=1, le=MAX_PROBES, description="HNSW search breadth")
    chunk_rows: int = Field(
        65536, ge=1, le=MAX_CHUNK_ROWS, description="torch backend: passages scored per chunk"
    )
    gpus: int = Field(
        0, ge=0, le=MAX_GPUS, description="GPUs per search job: query encoding, torch search, FAISS on GPU"
    )
    threads: int = Field(2, ge=1, le=MAX_THREADS, description="CPU threads of the job")
    mem_mb: int = Field(8000, ge=1, le=MAX_MEM_MB, description="memory the job reserves (MB)")


class HybridSettings(Contract):
    """Hybrid methods hybrid_rrf_<dense> and hybrid_wsum_<dense>: BM25's run fused with a dense run.
    rrf: sum of 1/(k + rank); wsum: w·dense + (1-w)·BM25 over per-query min-max scores, w picked on
    select_split by select_metric, never on the evaluated split (docs/evaluation.md)."""

    rrf_k: int = Field(
        60,
        ge=0,
        le=MAX_RRF_K,
        description="RRF constant k in 1/(k + rank); 60 is the RRF paper's (Elasticsearch, Vespa, OpenSearch)",
    )
    weights: Unique(Annotated[float, Field(ge=0, le=1)], 1) = Field(
        [i / 10 for i in range(11)],
        description="grid of dense weights w for hybrid_wsum_* (0 = BM25 alone, 1 = dense alone)",
    )
    select_split: Literal["train", "dev", "test"] = Field("dev", description="split on which w is chosen")
    select_metric: Metric = Field(
        "R@5",
        description="metric that chooses w: R@k | hit@k | recall@k | MRR@10 (MS MARCO) | hit_all@k, MRR_all@10 (synthkb)",
    )


def _keeps_both_ends(alphas: list[float]) -> list[float]:
    # 0 is the start model itself: without it the selection could not keep the start, which is
    # what it is for; 1 is the trained model, the choice a run without selection makes.
    missing = [end for end in (0, 1) if end not in alphas]
    if missing:
        raise ValueError(
            f"must include {' and '.join(map(str, missing))} (0: the start model, 1: the trained one)"
        )
    return alphas


class SelectionSettings(JobResources):
    """Model selection on dev (pipeline.training.select_model): WiSE-FT's weight-space interpolation
    theta(alpha) = (1 - alpha) theta_start + alpha theta_trained at each alpha, every one scored on the dev
    queries' candidates; the best is kept, ties to the smallest alpha (the closest to the start)."""

    alphas: Annotated[Unique(Annotated[float, Field(ge=0, le=1)], 2), AfterValidator(_keeps_both_ends)] = (
        Field(
            [0.0, 0.25, 0.5, 0.75, 1.0],
            description="interpolation weights tried (0 = the start model, 1 = the trained model; both required)",
        )
    )
    metric: Metric = Field(
        "hit@1",
        description="dev metric that chooses alpha: hit@k | recall@k | MRR@10 over the --qrels given (the truth "
        "file qrels_all: hit@1 is synthkb's primary metric hit_all@1) | R@k (answer match)",
    )

    @field_validator("gpus")
    @classmethod
    def _one_process(cls, gpus: int) -> int:
        # The stage has no DDP launch: a second GPU would be reserved and never used.
        if gpus > 1:
            raise ValueError(f"at most 1 (model selection runs one process), got {gpus}")
        return gpus


class SweepSettings(Contract):
    """The noise sweep results/sweeps/noise.{json,png} over synthkb datasets declared at dial levels:
    each method's metric against the measured false-negative share, paired differences with the
    baseline, the share of the oracle gap closed (sweep.smk; config/overlays/sweep/noise.yaml)."""

    datasets: Unique(str) = Field([], description="the synthkb datasets (dial levels) swept")
    methods: Unique(str, 1) = Field(
        ["dpr", "dpr_ccr", "dpr_sieve", "dpr_oracle"], description="methods swept"
    )
    baseline: str = Field("dpr", description="every method is paired with it")
    oracle: str = Field("dpr_oracle", description="the gap closed is measured against it")
    metric: Metric = Field("R@5", description="the swept metric")
    pairs: list[Annotated[list[str], Field(min_length=2, max_length=2)]] = Field(
        [],
        description="[method, control] pairs of sweep.methods compared besides the baseline "
        "(e.g. [dpr_sieve, dpr_none]: the same candidate pool)",
    )


class TournamentLevel(Contract):
    """One column of the tournament: a declared dataset at one noise level, and what differs there."""

    label: str = Field(description="the level as the table and figure name it (e.g. 30% p0.5)")
    oracle: Optional[MethodName] = Field(
        None,
        description="the oracle on this dataset (null: tournament.oracle); SQuAD has no qrels_all, so "
        "answer-match removal (dpr_answer_match) plays it there",
    )
    metrics: Optional[Unique(Metric, 1)] = Field(
        None, description="the metrics reported here (null: tournament.metrics); the first is the primary"
    )
    skip: Unique(MethodName) = Field(
        [],
        description="contenders not run on this dataset (e.g. dpr_oracle where there is no qrels_all): "
        "shown as not run, never silently",
    )


class TournamentSettings(Contract):
    """The tournament: every contender trained on the same candidate pool at every level,
    paired with the pool's unfiltered control, the oracle and the untrained start
    (results/sweeps/tournament.{json,md,png}; sweep.smk; config/overlays/tournament/)."""

    levels: dict[Name, TournamentLevel] = Field(
        {},
        description="dataset of `datasets` (a synthkb dial level, SQuAD-36) -> its column, in the table's "
        "order: {label, oracle (null: tournament.oracle), metrics (null: tournament.metrics), skip}",
    )
    methods: Unique(MethodName) = Field([], description="the contenders (rows), in the table's order")
    baseline: MethodName = Field(
        "dpr_none", description="the same-pool control every contender is paired with"
    )
    oracle: MethodName = Field(
        "dpr_oracle", description="the oracle whose gain over the baseline is the unit"
    )
    start: MethodName = Field("zeroshot", description="the untrained model the contenders start from")
    metrics: Unique(Metric, 1) = Field(
        ["hit_all@1", "hit_all@5", "R@5"], description="the metrics reported; the first is the primary"
    )
    incumbent: MethodName = Field(
        "dpr_sieve_no_ccr",
        description="the demo's filter (the sieve scored by models/dpr): the table's winner replaces it "
        "only by beating it seed by seed (docs/results.md, the tournament's rule)",
    )


class InjectionSettings(Contract):
    fraction: float = Field(
        0.0,
        ge=0,
        le=1,
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
    max_len: int = Field(128, ge=8, le=MAX_TOKENS, description="tokens of a query-passage pair")
    steps: int = Field(150, ge=1, le=MAX_STEPS, description="training steps: its stated budget")
    batch_size: int = Field(
        16,
        ge=1,
        le=MAX_BATCH,
        description="queries per step (each gives one positive and one BM25-negative pair)",
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
    scorer: Literal["retriever", "cross_encoder"] | None = None  # the model that scores its candidates
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
        "dpr_sieve_no_ccr). dpr: the filter tournament's choice (docs/results.md; its figures beside "
        "methods in config.yaml)",
    )
    candidates: int = Field(
        30, ge=1, le=MAX_RANKS, description="hard negatives per query judged by the sieve (released code: 30)"
    )
    pool: int = Field(
        100,
        ge=1,
        le=MAX_RANKS,
        description="candidates are sampled per query (seeded) from the top <pool> ranks",
    )
    max_queries: Optional[int] = Field(
        None,
        ge=1,
        le=MAX_QUERIES,
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
    figure_queries: Optional[int] = Field(
        2000, ge=1, le=MAX_QUERIES, description="queries sampled for Figure 1 (null = all)"
    )
    batch_size: int = Field(64, ge=1, le=MAX_BATCH, description="encoding batch size")
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

    threads: int = Field(
        2,
        ge=1,
        le=MAX_THREADS,
        description="CPU threads of the jobs that run a model: the sieve, positive_aware, cross_encoder",
    )
    mem_mb: int = Field(4000, ge=1, le=MAX_MEM_MB, description="memory those jobs reserve (MB)")
    gpus: int = Field(
        0,
        ge=0,
        le=MAX_GPUS,
        description="GPUs of those jobs (the sieve's scoring, the model-based filters, the cross-encoder's "
        "training); the paper recipe: 1. AR2's own sieve takes ar2.gpus",
    )


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
    max_len: int = Field(128, ge=8, le=MAX_TOKENS, description="tokens of a query-passage pair")


class Ar2ListwiseSettings(Contract):
    """The ranker AR2 starts from with ``ranker_init: listwise`` (pipeline.ar2.train_ranker): AR2's
    ranker loss on the DPR start's own train candidates, before round 1."""

    steps: int = Field(400, ge=1, le=MAX_STEPS, description="training steps")
    lr: float = Field(3e-5, gt=0, description="peak learning rate (AdamW)")
    batch_size: int = Field(8, ge=1, le=MAX_BATCH, description="queries per step")
    negatives: int = Field(
        7, ge=1, le=MAX_NEGATIVES, description="sampled negatives per query: 1 + k candidates"
    )
    warmup_ratio: float = Field(0.1, ge=0, le=1, description="linear warm-up share, then linear decay")
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
    top_k: int = Field(
        30,
        ge=1,
        le=MAX_RANKS,
        description="retrieved per train query by the previous round's retriever (AR2: 100; MS MARCO 200)",
    )
    exclude_answer_match: bool = Field(
        False, description="true (NQ/TQ recipe): candidates containing an answer are not negatives"
    )
    negatives: int = Field(
        3,
        ge=1,
        le=MAX_NEGATIVES,
        description="k sampled negatives per query per step: 1 + k candidates (AR2: 15)",
    )
    batch_size: int = Field(4, ge=1, le=MAX_BATCH, description="queries per step")
    ranker_warmup_steps: int = Field(
        8,
        ge=0,
        le=MAX_STEPS,
        description="extra ranker steps at the start of round 1 (the ranker starts from the base model)",
    )
    ranker_warmup_lr: Optional[float] = Field(
        None, gt=0, description="own optimizer and schedule for the warm-up; null = ranker_lr"
    )
    ranker_steps: int = Field(
        4, ge=0, le=MAX_STEPS, description="ranker steps per round, first (AR2: ~500 of each 2000-step block)"
    )
    retriever_steps: int = Field(
        8, ge=0, le=MAX_STEPS, description="retriever steps per round, after the ranker's (AR2: ~1500)"
    )
    retriever_lr: float = Field(1e-5, gt=0, description="the retriever's peak learning rate")
    ranker_lr: float = Field(3e-5, gt=0, description="the ranker's peak learning rate")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay")
    warmup_ratio: float = Field(
        0.1,
        ge=0,
        le=1,
        description="linear warm-up/decay over all rounds' steps (optimizer and scheduler carried across rounds)",
    )
    max_grad_norm: float = Field(2.0, ge=0, description="gradient clipping norm; 0 = no clipping")
    adv_lambda: float = Field(
        0.0, ge=0, le=1, description="λ in λ·adv + (1-λ)·distill: 0.5 AR2's recipe, 0 the sieve paper's runs"
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
    passage_max_len: Optional[int] = Field(
        None,
        ge=8,
        le=MAX_TOKENS,
        description="null = the DPR retriever's; an override applies to AR2's encoding and training",
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
    checkpoint_every: int = Field(
        25, ge=0, le=MAX_STEPS, description="steps; a crashed round resumes from its last checkpoint"
    )
    keep_checkpoints: bool = Field(
        False, description="false: round r's optimizer state is deleted once round r+1 has trained"
    )
    precision: Precision = Field("bf16", description="as dpr.precision")
    encode_batch_size: int = Field(
        64,
        ge=1,
        le=MAX_BATCH,
        description="a round's corpus encoding (encode.shards parallel jobs, at ar2.precision)",
    )
    threads: int = Field(
        1, ge=1, le=MAX_THREADS, description="per AR2 job: two variants then run side by side on 2 cores"
    )
    mem_mb: int = Field(6000, ge=1, le=MAX_MEM_MB, description="memory the job reserves (MB)")
    gpus: int = Field(0, ge=0, le=MAX_GPUS, description="GPUs the job reserves")


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
# The sieve decision's own settings (the sieve_negatives rule, sieve_no_ccr, AR2's sieve, bench/).
SIEVE_DECISION_KEYS = ("strict", "fallback", "temperature", "batch_size")
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


# ---- datasets and recipes -----------------------------------------------------------------------


def _file_form(value: Any) -> str:
    if isinstance(value, dict):
        return "file-path" if "path" in value and "url" not in value else "file-url"
    return "file-name"


# What pipeline.data.download can fetch (requests: HTTP only). Checked here, at start-up, because
# the downloader met another scheme only after its retries, with a "run again to resume".
URL_SCHEMES = ("http://", "https://")


def unsupported_url(url: str) -> str | None:
    """Why ``url`` cannot be downloaded, or None when it can."""
    if url.startswith(URL_SCHEMES):
        return None
    scheme = url.partition("://")[0] + "://" if "://" in url else "no scheme"
    return (
        f"{url!r}: {scheme} is not supported; downloads support {' and '.join(URL_SCHEMES)} "
        "(fetch other files yourself and give their local path)"
    )


class UrlFile(Contract):
    url: str = Field(pattern=r"^https?://")
    sha256: Optional[str] = Field(
        None,
        pattern=r"^[0-9a-f]{64}$",
        description="sha256 of the downloaded file (of the archive when member is set)",
    )
    member: Optional[str] = Field(
        None, min_length=1, description="file to extract from the .tar/.tar.gz/.zip archive at url"
    )

    @field_validator("url", mode="before")
    @classmethod
    def _downloadable(cls, url: Any) -> Any:
        # Before the pattern: its message would not say which schemes there are.
        problem = unsupported_url(url) if isinstance(url, str) else None
        if problem:
            raise ValueError(problem)
        return url

    @model_validator(mode="after")
    def _archive_name(self) -> "UrlFile":
        # An archive URL ending in '..' or '.' names no file: surely a typo (it named downloads/<dataset>
        # itself before downloads were keyed by URL; readers.sources.file_name now names it 'download').
        if self.member is not None:
            name = posixpath.basename(unquote(urlparse(self.url).path))
            if name in (".", ".."):
                raise ValueError(
                    f"{self.url!r}: an archive URL must end in a file name, not {name!r} "
                    "(it names the downloaded archive)"
                )
        return self


class PathFile(Contract):
    path: str = Field(min_length=1)
    member: Optional[str] = Field(
        None, min_length=1, description="file to extract from the local .tar/.tar.gz/.zip archive at path"
    )


# A local path (relative to the repository root; plain or gzipped), a URL (downloaded to
# downloads/by-url/<key>/<name>, resumable), or one member of a .tar/.tar.gz/.zip archive. docs/data.md.
FileSpec = Annotated[
    Union[
        Annotated[Annotated[str, Field(min_length=1)], Tag("file-name")],
        Annotated[UrlFile, Tag("file-url")],
        Annotated[PathFile, Tag("file-path")],
    ],
    Discriminator(_file_form),
]
# role -> file (multi-file formats); in the schema not itself a single file spec (no url/path key).
Roles = Annotated[
    dict[Annotated[str, Field(pattern=r"^[a-z_]+$")], FileSpec],
    Field(
        json_schema_extra={
            "additionalProperties": False,
            "not": {"anyOf": [{"required": ["url"]}, {"required": ["path"]}]},
        }
    ),
]


def _source_form(value: Any) -> str:
    if isinstance(value, dict) and "url" not in value and "path" not in value:
        return "file-roles"  # role -> file (multi-file formats)
    return "file-single"


Source = Annotated[
    Union[Annotated[FileSpec, Tag("file-single")], Annotated[Roles, Tag("file-roles")]],
    Discriminator(_source_form),
]


class SplitUnits(Contract):
    """Queries are split by a seeded hash of their unit: the first round(test*n) units are test, the
    next round(dev*n) dev, the rest train (a split with a fraction > 0 gets at least one unit)."""

    by: Literal["article", "entity", "query"] = Field(
        description="unit kept whole within one split (article: squad; entity: synthkb)"
    )
    dev: float = Field(0.0, ge=0, le=1)
    test: float = Field(0.0, ge=0, le=1)
    seed: Seed = 0

    @model_validator(mode="after")
    def _fractions(self) -> "SplitUnits":
        if self.dev + self.test > 1.0 + 1e-9:  # was found only by the job that splits
            raise ValueError(f"dev + test = {self.dev + self.test:g} > 1")
        return self


Split = Annotated[
    Union[Annotated[Literal["none"], Tag("split-none")], Annotated[SplitUnits, Tag("split-units")]],
    Discriminator(lambda v: "split-units" if isinstance(v, dict) else "split-none"),
]
SYNTHKB_ONLY = ("entities", "seed", "positive", "fn_share", "fn_paraphrase")
SPLIT_UNITS = {"squad": ("article", "query"), "synthkb": ("entity", "query")}  # formats split by rule


class DatasetSpec(Contract):
    """One dataset: its reader (format) and source, or the synthkb generator's settings."""

    format: Literal["dpr", "msmarco", "squad", "beir", "synthkb"]
    source: Optional[Source] = None
    split: Split = Field(
        "none",
        description="none: every query is a test query; synthkb's default: "
        "{by: entity, dev: 0.1, test: 0.2, seed: 0}",
    )
    entities: Optional[int] = Field(
        None, ge=10, le=MAX_ENTITIES, description="synthkb only: number of entities (~7.2 passages each)"
    )
    seed: Seed = Field(0, description="synthkb only: generator seed")
    positive: Literal["named_article", "source"] = Field(
        "named_article", description="synthkb only: the stating passage qrels annotates (docs/synthkb.md)"
    )
    fn_share: Optional[float] = Field(
        None,
        ge=0,
        le=1,
        description="synthkb only: the false-negative dial; null = the generator's own restatement rates",
    )
    fn_paraphrase: float = Field(
        0.0, ge=0, le=1, description="synthkb only: share of false negatives without the answer string"
    )
    eval_split: Optional[Literal["train", "dev", "test"]] = Field(None, description="null = eval.split")
    recipe: str = Field(
        "demo", description="the recipe (config recipes.<name>) that sets its training settings"
    )
    empty_positives: Literal["error", "drop"] = Field(
        "error",
        description="a DPR/Tevatron record without positives: error stops the preparation; drop leaves it out",
    )

    @model_validator(mode="after")
    def _format_keys(self) -> "DatasetSpec":
        given = self.model_fields_set
        # Which formats split by rule, and by what, was known only to the job that splits (prepare,
        # the generator): `snakemake -n` passed a DPR dataset with a split or synthkb split by article.
        units = SPLIT_UNITS.get(self.format, ())
        if isinstance(self.split, SplitUnits) and self.split.by not in units:
            if not units:
                raise ValueError(
                    f"split: only squad and synthkb datasets are split by rule; {self.format} takes "
                    "its splits from its files (split: none)"
                )
            raise ValueError(
                f"split.by: a {self.format} dataset splits by {' or '.join(map(repr, units))}, "
                f"not {self.split.by!r}"
            )
        if self.format == "synthkb":
            if "source" in given:
                raise ValueError("format synthkb is generated: it takes no 'source'")
            if self.entities is None:
                raise ValueError("format synthkb needs 'entities'")
        else:
            if self.source is None:
                raise ValueError(f"format {self.format} needs a 'source'")
            wrong = [key for key in SYNTHKB_ONLY if key in given]
            if wrong:
                raise ValueError(
                    f"{', '.join(map(repr, wrong))}: synthkb-only key(s) on a {self.format} dataset"
                )
        return self


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
        description="retriever (sieve, positive_aware) or cross-encoder folder (cross_encoder) that scores "
        "the negatives; minilm = the offline all-MiniLM-L6-v2",
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
    near_duplicate: float = Field(
        0.9,
        ge=0,
        le=1,
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


RECIPE_SECTIONS = ("model", "bm25", "dpr", "ccr", "sieve", "ar2", "hybrid")


class RecipeSpec(Contract):
    """A named recipe: partial sections deep-merged over the top-level ones for the datasets that
    declare it (pipeline/core/recipes.py); they are validated, merged, as the top-level sections."""

    extends: Optional[str] = Field(
        None, description="parent recipe: its settings first, this one's over them"
    )
    description: Optional[str] = None
    methods: Optional[Unique(MethodName)] = None
    model: Optional[dict] = None
    bm25: Optional[dict] = None
    dpr: Optional[dict] = None
    ccr: Optional[dict] = None
    sieve: Optional[dict] = None
    ar2: Optional[dict] = None
    hybrid: Optional[dict] = None


class Config(Contract):
    """The whole configuration (config.yaml deep-merged with overlays)."""

    seed: Seed = Field(0, description="names result folders (-s<seed>, seed<seed>)")
    seeds: Optional[Unique(Seed, 1, MAX_RUNS)] = Field(
        None,
        description="training seeds of every trained method (null = [seed]); ar2.seeds overrides for AR2",
    )
    methods: Unique(MethodName) = Field(
        description="methods that results/{dataset}/metrics.json builds and gathers"
    )
    recipes: dict[Name, RecipeSpec] = Field(
        {"demo": {}}, description="named training recipes (docs/recipes.md)"
    )
    datasets: Annotated[dict[Name, DatasetSpec], Field(min_length=1)]
    clean: dict[Name, CleanSpec] = Field(
        {}, description="hard-negative datasets of your own to clean: results/<name>/clean/ (docs/clean.md)"
    )
    eval: EvalSettings = EvalSettings()
    bm25: Bm25Settings = Bm25Settings()
    model: ModelSettings = ModelSettings()
    dpr: DprSettings = DprSettings()
    ccr: CcrSettings = CcrSettings()
    encode: EncodeSettings = EncodeSettings()
    index: IndexSettings = IndexSettings()
    search: SearchSettings = SearchSettings()
    hybrid: HybridSettings = HybridSettings()
    selection: SelectionSettings = SelectionSettings()
    sweep: SweepSettings = SweepSettings()
    tournament: TournamentSettings = TournamentSettings()
    sieve: SieveSettings = SieveSettings()
    ar2: Ar2Settings = Ar2Settings()

    @field_validator("datasets", "clean")
    @classmethod
    def _not_a_shared_folder(cls, named: dict, info: ValidationInfo) -> dict:
        # resources/<name>/ and results/<name>/ are a dataset's; these folders beside them belong to
        # the workflow (fetched models, prefetch summaries, content fingerprints, the sweeps).
        taken = sorted(set(named) & RESERVED_FOLDERS)
        if taken:
            raise ValueError(
                f"{', '.join(map(repr, taken))} names a folder the workflow keeps beside the datasets' "
                f"under resources/ and results/ ({', '.join(sorted(RESERVED_FOLDERS))}): choose another name"
            )
        return named

    @field_validator("index")
    @classmethod
    def _index_parts(cls, index: IndexSettings, info: ValidationInfo) -> IndexSettings:
        # An index part is a group of embedding shards: more parts than shards stopped build_index after
        # the corpus had been encoded.
        encode = info.data.get("encode")
        if encode is not None and index.shards > encode.shards:
            raise ValueError(
                f"shards {index.shards} is more than encode.shards {encode.shards}: an index part is a "
                "group of embedding shards; lower index.shards or raise encode.shards"
            )
        return index


# Config section -> its contract (the sections whose defaults fill every config).
SECTIONS: dict[str, type[Contract]] = {
    name: Config.model_fields[name].annotation
    for name in (
        "eval",
        "bm25",
        "model",
        "dpr",
        "ccr",
        "encode",
        "index",
        "search",
        "hybrid",
        "selection",
        "sweep",
        "tournament",
        "sieve",
        "ar2",
    )
}
TOP_LEVEL_DEFAULTS: dict[str, Any] = {
    key: Config.model_fields[key].default for key in ("seed", "seeds", "recipes", "clean")
}


def config_schema() -> dict:
    """The JSON schema of a config (workflow/schemas/config.schema.json is this, committed)."""
    schema = Config.model_json_schema()
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}


def defaults(cls: type[Contract]) -> dict[str, Any]:
    """The defaults of a section as plain config data (nested sections as dicts)."""
    return cls().model_dump()


def apply_defaults(config: dict) -> dict:
    """Fill, in place, every key of every section that the config leaves out; return ``config``.

    Values already present win, as given (an overlay's choice is never overwritten or converted);
    nested sections merge.
    """
    for key, value in TOP_LEVEL_DEFAULTS.items():
        config.setdefault(key, copy.deepcopy(value))
    for name, cls in SECTIONS.items():
        current = config.get(name, {})
        if isinstance(current, dict):  # anything else is left for validation to reject
            config[name] = _merge_defaults(defaults(cls), current)
    return config


def _merge_defaults(default: dict, given: dict) -> dict:
    out = dict(given)
    for key, value in default.items():
        if key not in out:
            out[key] = copy.deepcopy(value)
        elif isinstance(value, dict) and isinstance(out[key], dict):
            out[key] = _merge_defaults(value, out[key])
    return out


def section(config: dict, name: str) -> Contract:
    """The section ``name`` of a (defaults-filled) config as its contract."""
    return from_dict(SECTIONS[name], config.get(name) or {}, name)


def from_dict(
    cls: type[Contract], data: dict, where: str = "", given_by: Mapping[str, str] | None = None
) -> Contract:
    """``cls`` built from config data: nested sections too; unknown keys and bad values are a
    ConfigError naming each key (under ``where``, the section's own key path). ``given_by``: a field
    -> the flag a user typed it with, named before its key."""
    try:
        return cls.model_validate(data)
    except ValidationError as err:
        prefix = tuple(where.split(".")) if where else ()
        raise ConfigError("; ".join(describe_errors(err, prefix, cls, given_by))) from None


# ---- errors -------------------------------------------------------------------------------------

# Loc parts that name a branch of a tagged union, not a config key.
_UNION_TAGS = {
    "[key]",
    "file-name",
    "file-url",
    "file-path",
    "file-single",
    "file-roles",
    "split-none",
    "split-units",
}


def _key(loc: Sequence[Any]) -> str:
    parts = [str(part) for part in loc if part not in _UNION_TAGS]
    return ".".join(parts) if parts else "(top level)"


def _strip(hint: Any) -> Any:
    """``hint`` without Annotated and Optional (a union of one type and None is that type)."""
    while True:
        if get_origin(hint) is Annotated:
            hint = get_args(hint)[0]
            continue
        if get_origin(hint) in (Union, types.UnionType):
            args = [a for a in get_args(hint) if a is not type(None)]
            if len(args) == 1:
                hint = args[0]
                continue
        return hint


def _model_at(loc: Sequence[Any], root: type[BaseModel]) -> type[BaseModel] | None:
    """The contract that holds the keys at ``loc`` of ``root`` (to list them next to an unknown one)."""
    tagged = {"file-url": UrlFile, "file-path": PathFile, "split-units": SplitUnits}
    current: Any = root
    for part in loc:
        if part in _UNION_TAGS:
            current = tagged.get(part, current)
        elif isinstance(current, type) and issubclass(current, BaseModel) and part in current.model_fields:
            current = _strip(current.model_fields[part].annotation)
        elif get_origin(current) is dict:
            current = _strip(get_args(current)[1])
        else:
            return None
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def describe_errors(
    err: ValidationError,
    prefix: Sequence[Any] = (),
    root: type[BaseModel] | None = None,
    given_by: Mapping[str, str] | None = None,
) -> list[str]:
    """One line per problem: "config key 'dpr.lr': <what is wrong>"; unknown keys are listed with the
    keys allowed there. ``root``: the contract validated (default Config); ``prefix``: its key path;
    ``given_by``: a top-level field -> the flag that gave it ("--b (config key 'settings.b'): ...")."""
    lines: list[str] = []
    unknown: dict[tuple, list[str]] = {}
    for error in err.errors():
        loc = tuple(error["loc"])
        if error["type"] == "extra_forbidden":
            unknown.setdefault(loc[:-1], []).append(repr(str(loc[-1])))
            continue
        flag = (given_by or {}).get(str(loc[0])) if loc else None
        loc = (*prefix, *loc)
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "missing":
            message = "required key is missing"
        elif isinstance(error.get("input"), (str, int, float)) and error["type"] != "value_error":
            message += f", got {error['input']!r}"
            if error["type"] == "float_type" and _yaml_text_number(error["input"]):
                message += (
                    " (YAML, as PyYAML and so Snakemake read it, takes 1e-5 for text: write 1.0e-5 "
                    "or 0.00001)"
                )
        key = f"config key '{_key(loc)}'"
        lines.append(f"{flag} ({key}): {message}" if flag else f"{key}: {message}")
    for where, names in unknown.items():
        model = _model_at(where, root or Config)
        allowed = f" (allowed keys: {', '.join(sorted(model.model_fields))})" if model else ""
        lines.append(f"config key '{_key((*prefix, *where))}': unknown key(s) {', '.join(names)}{allowed}")
    return list(dict.fromkeys(lines))


def _yaml_text_number(value: Any) -> bool:
    """A string that is a number in scientific notation YAML 1.1 does not read as one (1e-5, 2e+3: its
    floats need a dot and a signed exponent), the spelling docs/config.md's defaults show."""
    if not isinstance(value, str) or "e" not in value.lower():
        return False
    try:
        float(value)
    except ValueError:
        return False
    return True


def default(cls: type[Contract], name: str) -> Any:
    """The default of setting ``name`` of ``cls``: what a stage's flag defaults to when it is run by
    hand, so that it computes what the workflow's job computes."""
    return copy.deepcopy(cls.model_fields[name].default)


# ---- CLI flags from fields: the parser (a stage) and the command line (rules) share one spelling --


def check_choice(name: str, value: Any, allowed: Sequence[Any]) -> None:
    """A ConfigError naming the setting unless ``value`` is one of ``allowed``."""
    if value not in allowed:
        raise ConfigError(f"{name} must be one of {', '.join(map(str, allowed))}, got {value!r}")


def flag_name(name: str) -> str:
    return "--" + name.replace("_", "-")


def _flag_type(cls: type[Contract], name: str) -> tuple[type, tuple | None, bool]:
    """(parser type, choices, optional) of a field: Optional[X] parses as X, Literal[...] as its values."""
    hint = cls.model_fields[name].annotation
    optional = type(None) in get_args(hint)
    args = [a for a in get_args(hint) if a is not type(None)]
    if get_origin(hint) is not None and get_origin(hint) is not Literal and len(args) == 1:
        hint = args[0]
    if get_origin(hint) is Literal:
        values = get_args(hint)
        return type(values[0]), values, optional
    return {float: float, int: int, str: str, bool: bool}.get(hint, str), None, optional


def _or_none(kind: type):
    """A parser of ``kind`` that reads "none" as None: how a command line says null."""

    def parse(text: str):
        return None if text.lower() in ("none", "null") else kind(text)

    parse.__name__ = kind.__name__  # argparse names the type in its errors
    return parse


def _dest(name: str, prefix: str) -> str:
    return f"{prefix}_{name}" if prefix else name


def _nested(hint: Any) -> bool:
    """A field that is a section of its own (ar2.simans): its flags carry its name as a prefix."""
    return isinstance(hint, type) and issubclass(hint, Contract)


def add_flags(
    group: argparse._ActionsContainer,
    cls: type[Contract],
    *,
    names: Sequence[str] | None = None,
    override: bool = False,
    prefix: str = "",
) -> None:
    """One flag per field of ``cls`` (or of ``names``), booleans as --x/--no-x, with the contract's
    help, choices and defaults; an optional field also takes "none". ``prefix``: a nested section's
    key (``injection`` -> --injection-fraction). ``override``: no default (None: the flag was not
    given, keep what is there)."""
    for name in names or cls.model_fields:
        field = cls.model_fields[name]
        if _nested(field.annotation):
            add_flags(group, field.annotation, override=override, prefix=_dest(name, prefix))
            continue
        kind, choices, optional = _flag_type(cls, name)
        default = None if override else field.default
        described = (field.description or "").replace("%", "%%")  # argparse formats help with %
        flag, dest = flag_name(_dest(name, prefix)), _dest(name, prefix)
        if kind is bool:
            group.add_argument(
                flag,
                dest=dest,
                action=argparse.BooleanOptionalAction,
                default=default,
                help=described or None,
            )
        else:
            shown = "" if override else f" (default: {default})"
            group.add_argument(
                flag,
                dest=dest,
                type=_or_none(kind) if optional else kind,
                default=default,
                choices=choices,
                help=f"{described}{shown}".lstrip() or None,
            )


def pick(
    cls: type[Contract], values: Any, prefix: str = "", names: Sequence[str] | None = None
) -> dict[str, Any]:
    """The fields of ``cls`` (or of ``names``) taken from a mapping or an object (contract, argparse
    namespace); from a namespace, nested sections and ``prefix``ed flags are read back as
    ``add_flags`` wrote them."""
    if isinstance(values, dict):
        return {name: values.get(name) for name in names or cls.model_fields}
    out = {}
    for name in names or cls.model_fields:
        hint = cls.model_fields[name].annotation
        if _nested(hint) and not isinstance(values, Contract):
            out[name] = pick(hint, values, _dest(name, prefix))
        else:
            out[name] = getattr(values, _dest(name, prefix))
    return out


def to_flags(
    cls: type[Contract], values: dict[str, Any], names: Sequence[str] | None = None, prefix: str = ""
) -> str:
    """The command-line spelling of ``values``' fields of ``cls`` (or of ``names``; keys ``values``
    lacks are left out): the inverse of ``add_flags``. A null is left out where it is the default,
    else spelled "none"; a nested section's fields carry its name as a prefix."""
    return " ".join(shlex.quote(x) for x in _flag_tokens(cls, values, names, prefix))


def _flag_tokens(
    cls: type[Contract], values: dict[str, Any], names: Sequence[str] | None, prefix: str
) -> list[str]:
    out: list[str] = []
    for name, field in cls.model_fields.items():
        if name not in values or (names is not None and name not in names):
            continue
        value, flag = values[name], flag_name(_dest(name, prefix))
        if _nested(field.annotation):
            out += _flag_tokens(field.annotation, value, None, _dest(name, prefix))
        elif isinstance(value, bool):
            out.append(flag if value else "--no-" + flag[2:])
        elif value is not None:
            out += [flag, str(value)]
        elif field.default is not None:
            out += [flag, "none"]
    return out


# ---- one job's settings document ---------------------------------------------------------------
# What a rule hands its stage as one JSON document (--settings-json) and a run by hand reads from a file
# (--settings FILE; pipeline.core.jobs): that job's settings only, so a changed setting reruns the jobs
# that read it and nothing else. Each field is its section's own (type, range, default and help taken
# from that contract, never restated); pipeline/workflow/*.py builds the documents from a dataset's
# resolved config. train_dense's document is TrainJob (above).


def fields_of(cls: type[Contract], *names: str, prefix: str = "") -> dict[str, tuple[Any, Any]]:
    """The fields ``names`` of ``cls`` as create_model takes them: (type, the field itself); ``prefix``:
    a nested section's key, so that its field keeps the name of its flag (injection -> injection_fraction)."""
    return {
        _dest(name, prefix): (cls.model_fields[name].annotation, copy.deepcopy(cls.model_fields[name]))
        for name in names
    }


def job_contract(name: str, doc: str, **fields: tuple[Any, Any]) -> type[Contract]:
    """A job document's contract: ``fields`` (fields_of), unknown keys and bad values refused."""
    return create_model(name, __base__=Contract, __doc__=doc, __module__=__name__, **fields)


# A synthkb dataset's split where its config gives none (the workflow's and a hand run's).
SYNTHKB_SPLIT: dict[str, Any] = {"by": "entity", "dev": 0.1, "test": 0.2, "seed": 0}
GenerateJob = job_contract(
    "GenerateJob",
    "pipeline.synthkb.generate: the generator settings of a synthkb dataset (datasets.<name>).",
    **fields_of(DatasetSpec, "entities", "seed", "positive", "fn_share", "fn_paraphrase"),
    split=(
        Split,
        Field(
            SYNTHKB_SPLIT,
            validate_default=True,
            description="the dataset's split; a synthkb dataset without one splits so",
        ),
    ),
)
PrepareJob = job_contract(
    "PrepareJob",
    "pipeline.data.prepare: how a declared dataset's sources become the canonical tables (datasets.<name>).",
    dataset=(Name, Field(description="the dataset's name (messages, manifest)")),
    **fields_of(DatasetSpec, "format", "split", "empty_positives"),
)
Bm25IndexJob = job_contract(
    "Bm25IndexJob",
    "pipeline.retrieval.bm25 index: the index's scoring and tokenisation (section bm25).",
    **fields_of(Bm25Settings, "k1", "b", "stemmer", "stopwords"),
)
# A run that reads no setting but its depth: BM25's (bm25 retrieve) and an AR2 method's (ar2_search).
RunDepthJob = job_contract(
    "RunDepthJob",
    "pipeline.retrieval.bm25 retrieve, pipeline.ar2.selection search: run depth (eval.depth).",
    **fields_of(EvalSettings, "depth"),
)
# One rule turns any ranking of the train queries into negatives (pipeline.retrieval.mining), BM25's and a
# dense method's alike, so both miners read one contract.
MineJob = job_contract(
    "MineJob",
    "pipeline.retrieval.bm25 mine, pipeline.retrieval.mining: negatives per train query (section bm25) and "
    "answer matching (eval.match).",
    **fields_of(Bm25Settings, "negatives", "exclude_answer_match"),
    **fields_of(EvalSettings, "match"),
)
SieveJob = job_contract(
    "SieveJob",
    "pipeline.sieve.passage_sieve: the decision's settings and Figure 1's losses (section sieve), the seed.",
    **fields_of(SieveSettings, *SIEVE_DECISION_KEYS, "in_batch", "figure_queries"),
    **fields_of(Config, "seed"),
)
CandidatesJob = job_contract(
    "CandidatesJob",
    "pipeline.sieve.candidates: how the candidates are drawn (section sieve; the injection a simulation of the "
    "train queries only), answer matching (eval.match), the seed.",
    **fields_of(SieveSettings, "candidates", "pool", "max_queries"),
    **fields_of(InjectionSettings, "fraction", prefix="injection"),
    **fields_of(EvalSettings, "match"),
    **fields_of(Config, "seed"),
    suspect_same_article=(
        bool,
        Field(
            False,
            description="label same-article answer-bearing candidates 'suspected' (a dataset of format squad)",
        ),
    ),
)
CrossEncoderJob = job_contract(
    "CrossEncoderJob",
    "pipeline.sieve.cross_encoder: how the cross_encoder filter's model is trained (sieve.cross_encoder; its "
    "threshold is the filter's), the seed.",
    **fields_of(CrossEncoderFilterSettings, *CROSS_ENCODER_TRAINING),
    **fields_of(Config, "seed"),
)


def filter_job_keys(name: str, clean: bool = False) -> dict[str, tuple[type[Contract], str]]:
    """Filter ``name``'s settings as a job document names them -> (their contract, its field): the fields
    of its section it reads (in FilterJob without the section's name where its contract says ``bare``;
    in CleanJob always with it, as sieve-clean's flags) and, for a filter applying the sieve's rule, the
    decision keys of section sieve."""
    c = FILTER_CONTRACTS[name]
    prefix = "" if c.bare and not clean else name
    keys: dict[str, tuple[type[Contract], str]] = {_dest(f, prefix): (c.settings, f) for f in c.fields()}
    if c.rule:
        keys |= {key: (SieveSettings, key) for key in SIEVE_RULE_KEYS}
    return keys


def _filters_fields(clean: bool) -> dict[str, tuple[Any, Any]]:
    """Every filter's settings as job fields (FILTER_CONTRACTS' order; CleanJob: sieve-clean's filters)."""
    fields: dict[str, tuple[Any, Any]] = {}
    owner: dict[str, tuple[type[Contract], str]] = {}
    for name, c in FILTER_CONTRACTS.items():
        if clean and not c.clean:
            continue
        for key, (cls, field) in filter_job_keys(name, clean).items():
            if owner.setdefault(key, (cls, field)) != (cls, field):
                raise TypeError(f"filter {name!r}: job key {key!r} is another filter's setting; prefix it")
            fields[key] = (cls.model_fields[field].annotation, copy.deepcopy(cls.model_fields[field]))
    return fields


FilterJob = job_contract(
    "FilterJob",
    "pipeline.sieve.filters: the seed and encoding batch size, and the settings of the filter run (section "
    "sieve: each filter's own, filter_job_keys); a job's document holds its own filter's only.",
    **fields_of(Config, "seed"),
    **fields_of(SieveSettings, "batch_size"),
    **_filters_fields(clean=False),
)
# A clean.<name> entry's job (rule clean_negatives) and a hand run of the cleaning command alike: the
# flags a user types (--filter, --rank-window-start, ...) are this contract's, so their defaults are too.
CleanJob = job_contract(
    "CleanJob",
    "pipeline.sieve.clean: the entry's format, filter, model, mode and near-duplicate threshold "
    "(clean.<name>), the settings its filter reads of section sieve (each filter's own, prefixed with its "
    "name: filter_job_keys; the sieve's decision and the seed) and the encoding batch size of a filter "
    "that runs a model; a job's document holds its own filter's only.",
    **fields_of(CleanSpec, "format", "filter", "model", "mode", "near_duplicate"),
    **_filters_fields(clean=True),
    **fields_of(SieveSettings, "batch_size"),
    **fields_of(Config, "seed"),
)
Ar2MineJob = job_contract(
    "Ar2MineJob",
    "pipeline.ar2.mine: what a round's mining reads of section ar2, and answer matching (eval.match).",
    **fields_of(Ar2Settings, *AR2_MINE_KEYS),
    **fields_of(EvalSettings, "match"),
)
EncodeJob = job_contract(
    "EncodeJob",
    "pipeline.retrieval.encode corpus, queries: how the forward passes run (section encode; an AR2 round's "
    "corpus at ar2.encode_batch_size and ar2.precision).",
    **fields_of(EncodeSettings, "batch_size", "sort_buffer", "amp", "backend"),
)
IndexJob = job_contract(
    "IndexJob",
    "pipeline.retrieval.index: the FAISS index's type, parts and training sample (section index), the seed "
    "(the sample's).",
    **fields_of(IndexSettings, "factory", "shards", "train_size"),
    **fields_of(Config, "seed"),
)
# ---- dense search (search_dense and its children, search_for_mining) --------------------------------
# The query encoding and search knobs: section search's (not the backend, which the job's input
# decides, nor the resources) and encode.amp (queries encoded as the corpus; AR2's dev search in fp32).
SEARCH_KEYS = ("batch_size", "nprobe", "ef_search", "chunk_rows")
SearchJob = job_contract(
    "SearchJob",
    "pipeline.retrieval.search: run depth (eval.depth), the query batch and the backend's search knobs "
    "(section search), autocast of the query encoding (encode.amp).",
    **fields_of(EvalSettings, "depth"),
    **fields_of(SearchSettings, *SEARCH_KEYS),
    **fields_of(EncodeSettings, "amp"),
)
# A mining search ranks the train queries as deep as mining its negatives needs (the depth follows from
# them and the train positives, read at run time), so its document has the negatives where SearchJob has
# the depth.
MiningSearchJob = job_contract(
    "MiningSearchJob",
    "pipeline.retrieval.search --mining-qrels: the query batch and search knobs (section search), autocast "
    "(encode.amp), and the negatives to be mined (section bm25), which set the depth.",
    **fields_of(SearchSettings, *SEARCH_KEYS),
    **fields_of(EncodeSettings, "amp"),
    **fields_of(Bm25Settings, "negatives", "exclude_answer_match"),
)
# ---- end of dense search ---------------------------------------------------------------------------
HybridRrfJob = job_contract(
    "HybridRrfJob",
    "pipeline.evaluation.hybrid rrf: the RRF constant (hybrid.rrf_k) and the fused run's depth (eval.depth).",
    **fields_of(HybridSettings, "rrf_k"),
    **fields_of(EvalSettings, "depth"),
)
HybridWeightedJob = job_contract(
    "HybridWeightedJob",
    "pipeline.evaluation.hybrid weighted: how w is chosen (section hybrid; not rrf_k), the fused run's depth and "
    "answer matching (eval.depth, eval.match).",
    **fields_of(HybridSettings, "weights", "select_split", "select_metric"),
    **fields_of(EvalSettings, "depth", "match"),
)
SelectModelJob = job_contract(
    "SelectModelJob",
    "pipeline.training.select_model: the interpolation weights and the dev metric (a selection section), the "
    "candidates re-scored per dev query and answer matching (eval.depth, eval.match), the forward pass's batch "
    "(encode.batch_size).",
    **fields_of(SelectionSettings, "alphas", "metric"),
    **fields_of(EvalSettings, "depth", "match"),
    **fields_of(EncodeSettings, "batch_size"),
)
EvaluateJob = job_contract(
    "EvaluateJob",
    "pipeline.evaluation.evaluate: what a run is scored with (section eval) and the labels metrics.json carries.",
    dataset=(Name, Field(description="the dataset's name, written into metrics.json")),
    method=(
        MethodName,
        Field(description="the method (its run folder's first part), written into metrics.json"),
    ),
    split=(
        EvalSettings.model_fields["split"].annotation,
        Field(description="the evaluated split (datasets.<name>.eval_split, else eval.split)"),
    ),
    **fields_of(EvalSettings, "ks", "match"),
    allow_missing_queries=(
        bool,
        Field(
            False,
            description="the run's lists are result sets (BM25): a query absent from it counts as a miss, and "
            "a list shorter than the cut-offs is accepted (fewer passages matched); else either is an error",
        ),
    ),
)


# ---- AR2's round jobs: the sieve, the listwise ranker, a round's training -----------------


def _ar2_run_seed() -> tuple[Any, Any]:
    """The seed field of an AR2 job: its run's ({seed} of the round folders), not the top-level seed."""
    return (
        Seed,
        Field(0, description="the AR2 run's seed (ar2.seeds, else seeds): sampling, dropout, the fallback"),
    )


Ar2SieveJob = job_contract(
    "Ar2SieveJob",
    "pipeline.ar2.sieving: how a sieve variant's round draws its candidates and decides (section sieve), "
    "answer matching (eval.match), the run's seed.",
    **fields_of(SieveSettings, *AR2_SIEVE_KEYS),
    **fields_of(EvalSettings, "match"),
    seed=_ar2_run_seed(),
    **fields_of(CandidatesJob, "suspect_same_article"),
)
Ar2RankerJob = job_contract(
    "Ar2RankerJob",
    "pipeline.ar2.train_ranker: what the listwise ranker (ar2.ranker_init listwise) reads of section ar2, "
    "the run's seed, and the dev metrics it is scored by (eval.ks, eval.match). ar2.select_metric, which "
    "only names the metric its log line compares, is no setting of the job (--compare-metric).",
    **fields_of(Ar2Settings, *AR2_RANKER_KEYS),
    seed=_ar2_run_seed(),
    **fields_of(EvalSettings, "ks", "match"),
)
Ar2TrainJob = job_contract(
    "Ar2TrainJob",
    "pipeline.ar2.train_round: every ar2 key a round's training reads (a document leaves out ar2.ranker "
    "when round 1's ranker is a trained one, and ar2.simans for uniform sampling: ar2_recorded_settings), "
    "the variant's negative sampling and the run's seed.",
    **fields_of(Ar2Settings, *AR2_TRAIN_KEYS),
    sampling=(
        Literal["uniform", "simans"],
        Field(description="the variant's negative sampling: uniform (plain, sieve) or simans (simans*)"),
    ),
    seed=_ar2_run_seed(),
)

Ar2SelectJob = job_contract(
    "Ar2SelectJob",
    "pipeline.ar2.selection select: the rounds an AR2 run trains (ar2.rounds) and the dev metric that picks "
    "its round (ar2.select_metric).",
    **fields_of(Ar2Settings, "rounds", "select_metric"),
)
Ar2CurveJob = job_contract(
    "Ar2CurveJob",
    "pipeline.ar2.learning_curve: the rounds drawn (ar2.rounds; the selected round comes with each info.json).",
    **fields_of(Ar2Settings, "rounds"),
)

if __name__ == "__main__":
    # python -m pipeline.core.settings > workflow/schemas/config.schema.json
    json.dump(config_schema(), sys.stdout, indent=1)
    sys.stdout.write("\n")

"""The building blocks every contract is made of: ``Contract`` (a config section: unknown keys, wrong
types and non-finite numbers refused), ``ConfigError``, the constrained types (``Unique``, ``Seed``,
``Metric``, ...), the ceilings of every count (``MAX_*``), a job's reservation (``JobResources``) and a
field's declared default (``default``).
"""

from __future__ import annotations

import copy
import types
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic.fields import FieldInfo

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
# Every stage's `mem_mb`: a rule whose need grows with the data asks what its sizes compute instead.
MEM_MB_HELP = (
    "memory the job reserves (MB) where its rule does not compute it from the dataset's sizes "
    "(build_index, the dense searches, AR2's included, and select_model do: docs/cluster.md section 3)"
)
MAX_GPUS = 64

# The counts most sections declare, each with its floor and ceiling once: a field says `top_k: Ranks =
# Field(30, description=...)`. A count whose floor differs (a cut-off that needs two ranks) states it.
Shards = Annotated[int, Field(ge=1, le=MAX_SHARDS)]
Ranks = Annotated[int, Field(ge=1, le=MAX_RANKS)]
Negatives = Annotated[int, Field(ge=1, le=MAX_NEGATIVES)]
Steps = Annotated[int, Field(ge=0, le=MAX_STEPS)]  # what 0 means (no cap, never, none), each field says
BatchSize = Annotated[int, Field(ge=1, le=MAX_BATCH)]
Threads = Annotated[int, Field(ge=1, le=MAX_THREADS)]
MemMb = Annotated[int, Field(ge=1, le=MAX_MEM_MB)]
Gpus = Annotated[int, Field(ge=0, le=MAX_GPUS)]
Tokens = Annotated[int, Field(ge=8, le=MAX_TOKENS)]  # a sequence length: room for the special tokens
Probes = Annotated[int, Field(ge=1, le=MAX_PROBES)]
QueryCount = Annotated[int, Field(ge=1, le=MAX_QUERIES)]
Share = Annotated[float, Field(ge=0, le=1)]  # a fraction or a probability

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


class JobResources(Contract):
    """What a job reserves (Snakemake resources/threads), not what it computes."""

    threads: Threads = Field(2, description="CPU threads of the job")
    mem_mb: MemMb = Field(6000, description=MEM_MB_HELP)
    gpus: Gpus = Field(0, description="GPUs the job reserves (more than 1: torchrun DDP)")


RESOURCE_KEYS = tuple(JobResources.model_fields)


def field_constraints(field: FieldInfo) -> list[Any]:
    """A field's bounds and lengths: its own, or for an optional one (``Optional[Ranks]``) its type's,
    which pydantic keeps inside the union."""
    if field.metadata:
        return list(field.metadata)
    members = [a for a in get_args(field.annotation) if a is not type(None)]
    if get_origin(field.annotation) in (Union, types.UnionType) and len(members) == 1:
        for item in getattr(members[0], "__metadata__", ()):
            found = item.metadata if isinstance(item, FieldInfo) else [item]
            if found:
                return list(found)
    return []


def bare_type(hint: Any) -> Any:
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


def default(cls: type[Contract], name: str) -> Any:
    """The default of setting ``name`` of ``cls``: what a stage's flag defaults to when it is run by
    hand, so that it computes what the workflow's job computes."""
    return copy.deepcopy(cls.model_fields[name].default)


# Snapshots a training run keeps for model selection (selection.checkpoints): each is one model's
# weights (MiniLM: 90 MB), so the bound keeps a typo from filling a disk.
Snapshots = Annotated[int, Field(ge=0, le=50)]

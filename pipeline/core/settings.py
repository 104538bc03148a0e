"""One contract per config section: field names and defaults of every section of config.yaml.

These dataclasses are the single source of the settings' names and defaults. The config schema
(workflow/schemas/config.schema.yaml) validates types and ranges and declares the same defaults
(tests/test_settings.py holds them equal); ``apply_defaults`` fills every key an overlay or a user's
own config leaves out, so rules index ``config[section][key]`` without fallbacks of their own; the
training CLI builds its flags from ``TrainSettings``/``Objective`` fields (``add_flags``) and the
rules build the matching command line from the same fields (``to_flags``).

Defaults are the demo recipe of config.yaml (small step counts that run on 2 CPU cores);
profiles and overlays (config/overlays/) change them for paper-scale runs.
"""
from __future__ import annotations

import argparse
import copy
import shlex
from dataclasses import MISSING, asdict, dataclass, field, fields, is_dataclass
from typing import Any, Optional, Sequence, get_type_hints

PRECISIONS = ("bf16", "fp16", "fp32")


class ConfigError(ValueError):
    """The configuration is invalid; the message names the key path (re-exported by core.config)."""


# ----------------------------------------------------------------------------------------------
# Training (sections dpr and ccr): what pipeline.training.train_dense trains with.


def _setting(default: Any, help: str, **metadata: Any) -> Any:
    return field(default=default, metadata={"help": help, **metadata})


@dataclass
class TrainSettings:
    """Optimisation and data settings shared by DPR and CCR training (defaults: DPR's)."""
    lr: float = _setting(2e-5, "peak learning rate (AdamW)")
    epochs: int = _setting(1, "passes over the training queries")
    batch_size: int = _setting(16, "GLOBAL queries per micro-batch (split over DDP ranks): the in-batch pool")
    grad_accum: int = _setting(1, "micro-batches per optimizer step")
    hard_negatives: int = _setting(1, "k: hard negatives per query, sampled per (qid, epoch, seed)")
    negatives_depth: int = _setting(30, "sample the k negatives from this many top candidates")
    in_batch: bool = _setting(True, "other queries' passages are negatives too (gathered across GPUs)")
    warmup_ratio: float = _setting(0.1, "linear warm-up over this share of the steps, then linear decay")
    weight_decay: float = _setting(0.0, "AdamW weight decay (not on biases and LayerNorm)")
    max_grad_norm: float = _setting(2.0, "gradient clipping norm; 0 = no clipping")
    max_steps: int = _setting(60, "cap on optimizer steps; 0 = no cap (epochs decide)")
    checkpoint_every: int = _setting(50, "optimizer steps between checkpoints; 0 = never")
    precision: str = _setting("bf16", "autocast: as asked on CUDA; bf16 on a CPU with native bf16, else fp32", choices=PRECISIONS)
    drop_queries_without_positive: bool = _setting(False, "leave such train queries out (default: error)")
    train_layers: Optional[int] = _setting(
        None, "train only the top N transformer layers; the embeddings and lower layers stay frozen "
              "and their outputs are computed once per text and cached (CPU budget); null = all")


@dataclass
class Objective:
    """The loss: NCE (beta 0) or CCR, l(p+) - beta * mean_{p in P} l(p). docs/training.md."""
    beta: float = _setting(0.0, "CCR beta; 0 = NCE")
    scale: str = _setting("paper", "CCR loss scale: paper, or released_code (loss / (k+1))",
                          choices=("paper", "released_code"))
    f_beta: float = _setting(1.0, "released_code only: effective beta = (k+1) * f_beta * beta")


@dataclass
class JobResources:
    """What a job reserves (Snakemake resources/threads), not what it computes."""
    threads: int = 2
    mem_mb: int = 6000
    gpus: int = 0


@dataclass
class DprSettings(JobResources, TrainSettings):
    skip: bool = False            # true: dpr = the pretrained model, no training


@dataclass
class CcrSettings(JobResources, Objective, TrainSettings):
    lr: float = 1e-5
    hard_negatives: int = 5
    in_batch: bool = False
    max_steps: int = 20
    beta: float = 0.5
    temperature: float = 1.0      # tau of the CCR loss on cosine scores; saved with the model


# ----------------------------------------------------------------------------------------------
# The other sections.


@dataclass
class EvalSettings:
    split: str = "test"
    match: str = "string"
    ks: list[int] = field(default_factory=lambda: [1, 5, 20, 100])
    depth: int = 100
    trec_export: bool = True
    # Paired comparisons [method, baseline] reported as mean difference with a 95% interval over
    # the seeds both were run with; a pair with a method not in `methods` is left out.
    compare: list[list[str]] = field(default_factory=lambda: [
        ["dpr", "zeroshot"], ["dpr_oracle", "zeroshot"], ["dpr_oracle", "dpr"], ["dpr_oracle", "dpr_none"],
        ["dpr_sieve", "dpr_none"], ["dpr_ccr", "dpr"], ["dpr_sieve", "dpr"], ["ar2_sieve", "ar2"],
        ["ar2_simans_sieve", "ar2_simans"]])


@dataclass
class Bm25Settings:
    k1: float = 0.9
    b: float = 0.4
    stemmer: Optional[str] = "english"
    stopwords: Optional[str] = "en"
    negatives: int = 100
    exclude_answer_match: bool = False


@dataclass
class ModelSettings:
    base: str = "minilm"
    pooling: str = "mean"
    similarity: str = "cosine"
    temperature: float = 0.05
    shared_towers: bool = True
    query_max_len: int = 32
    passage_max_len: int = 128


@dataclass
class EncodeSettings:
    shards: int = 2
    batch_size: int = 64
    sort_buffer: int = 20000
    amp: bool = True
    gpus: int = 0
    threads: int = 1
    mem_mb: int = 4000


@dataclass
class IndexSettings:
    factory: str = "Flat"
    shards: int = 1
    train_size: int = 100000
    gpus: int = 0
    threads: int = 2
    mem_mb: int = 8000


@dataclass
class SearchSettings:
    backend: str = "faiss"
    batch_size: int = 128
    nprobe: int = 32
    ef_search: int = 128
    chunk_rows: int = 65536
    gpus: int = 0
    threads: int = 2
    mem_mb: int = 8000


@dataclass
class HybridSettings:
    rrf_k: int = 60
    weights: list = field(default_factory=lambda: [i / 10 for i in range(11)])
    select_split: str = "dev"
    select_metric: str = "R@5"


@dataclass
class SweepSettings:
    datasets: list = field(default_factory=list)
    methods: list = field(default_factory=lambda: ["dpr", "dpr_ccr", "dpr_sieve", "dpr_oracle"])
    baseline: str = "dpr"
    oracle: str = "dpr_oracle"
    metric: str = "R@5"; pairs: list = field(default_factory=list)  # pairs: [method, control] besides the baseline


@dataclass
class InjectionSettings:
    fraction: float = 0.0


@dataclass
class RankWindowSettings:
    start: int = 10


@dataclass
class PositiveAwareSettings:
    mode: str = "relative"
    margin: float = 0.95


@dataclass
class CrossEncoderFilterSettings:
    threshold: float = 0.1
    base: str = "minilm"
    max_len: int = 128
    steps: int = 150
    batch_size: int = 16
    lr: float = 2e-5
    precision: str = "bf16"


@dataclass
class SieveSettings:
    source: str = "bm25"
    candidates: int = 30
    pool: int = 100
    max_queries: Optional[int] = None
    strict: bool = False
    fallback: str = "random_one"
    temperature: Optional[float] = None
    betas: list[float] = field(default_factory=lambda: [0, 0.05, 0.1, 0.5])
    in_batch: int = 30
    figure_queries: Optional[int] = 2000
    batch_size: int = 64
    injection: InjectionSettings = field(default_factory=InjectionSettings)
    filters: list[str] = field(default_factory=lambda: [
        "none", "answer_match", "rank_window", "positive_aware", "cross_encoder", "sieve", "sieve_no_ccr"])
    rank_window: RankWindowSettings = field(default_factory=RankWindowSettings)
    positive_aware: PositiveAwareSettings = field(default_factory=PositiveAwareSettings)
    cross_encoder: CrossEncoderFilterSettings = field(default_factory=CrossEncoderFilterSettings)


@dataclass
class SimansSettings:
    a: float = 0.5
    b: float = 0.0
    form: str = "square"


@dataclass
class Ar2RankerSettings:
    base: str = "minilm"
    max_len: int = 128


@dataclass
class Ar2Settings:
    rounds: int = 2
    seeds: Optional[list[int]] = None
    top_k: int = 30
    exclude_answer_match: bool = False
    negatives: int = 3
    batch_size: int = 4
    ranker_warmup_steps: int = 8
    ranker_warmup_lr: Optional[float] = None
    ranker_steps: int = 4
    retriever_steps: int = 8
    retriever_lr: float = 1e-5
    ranker_lr: float = 3e-5
    weight_decay: float = 0.0
    warmup_ratio: float = 0.1
    max_grad_norm: float = 2.0
    adv_lambda: float = 0.0
    distill_temperature: float = 1.0
    simans: SimansSettings = field(default_factory=SimansSettings)
    ranker: Ar2RankerSettings = field(default_factory=Ar2RankerSettings)
    ranker_init: str = "base"
    similarity: Optional[str] = None
    temperature: Optional[float] = None
    passage_max_len: Optional[int] = None
    sieve_init: str = "initial"
    select_metric: str = "R@5"
    checkpoint_every: int = 25
    keep_checkpoints: bool = False
    precision: str = "bf16"
    encode_batch_size: int = 64
    threads: int = 1
    mem_mb: int = 6000
    gpus: int = 0


# Config section -> its contract. `datasets` is not here: its keys depend on the format (schema).
SECTIONS: dict[str, type] = {
    "eval": EvalSettings, "bm25": Bm25Settings, "model": ModelSettings, "dpr": DprSettings,
    "ccr": CcrSettings, "encode": EncodeSettings, "index": IndexSettings, "search": SearchSettings,
    "hybrid": HybridSettings, "sweep": SweepSettings, "sieve": SieveSettings, "ar2": Ar2Settings,
}
# seeds: the training seeds of every trained method (dpr, dpr_ccr, dpr_sieve, dpr_<filter>, and AR2
# unless ar2.seeds says otherwise); null = [seed]. Several seeds give mean ± std and paired intervals.
# recipes: named partial sections a dataset declares (pipeline.core.recipes); demo is the top level.
TOP_LEVEL_DEFAULTS: dict[str, Any] = {"seed": 0, "seeds": None, "recipes": {"demo": {}}}


def defaults(cls: type) -> dict[str, Any]:
    """The defaults of a section as plain config data (nested sections as dicts)."""
    return asdict(cls())


def apply_defaults(config: dict) -> dict:
    """Fill, in place, every key of every section that the config leaves out; return ``config``.

    Values already present win (an overlay's choice is never overwritten); nested sections merge.
    """
    for key, value in TOP_LEVEL_DEFAULTS.items():
        config.setdefault(key, copy.deepcopy(value))
    for section, cls in SECTIONS.items():
        current = config.get(section, {})
        if isinstance(current, dict):  # anything else is left for the schema to reject
            config[section] = _merge_defaults(defaults(cls), current)
    return config


def _merge_defaults(default: dict, given: dict) -> dict:
    out = dict(given)
    for key, value in default.items():
        if key not in out:
            out[key] = copy.deepcopy(value)
        elif isinstance(value, dict) and isinstance(out[key], dict):
            out[key] = _merge_defaults(value, out[key])
    return out


def section(config: dict, name: str):
    """The section ``name`` of a (defaults-filled) config as its dataclass."""
    return from_dict(SECTIONS[name], config.get(name) or {})


def from_dict(cls: type, data: dict):
    """``cls`` built from config data: nested dataclasses recursively, unknown keys an error."""
    known = {f.name: f for f in fields(cls)}
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise KeyError(f"{cls.__name__}: unknown setting(s) {', '.join(unknown)}")
    hints = get_type_hints(cls)
    kwargs = {}
    for name, value in data.items():
        hint = hints[name]
        kwargs[name] = from_dict(hint, value) if is_dataclass(hint) and isinstance(value, dict) else value
    return cls(**kwargs)


# ----------------------------------------------------------------------------------------------
# CLI flags from fields: the parser (train_dense) and the command line (rules) share one spelling.


def check_choice(name: str, value: Any, allowed: Sequence[Any]) -> None:
    """A ConfigError naming the setting unless ``value`` is one of ``allowed``."""
    if value not in allowed:
        raise ConfigError(f"{name} must be one of {', '.join(map(str, allowed))}, got {value!r}")


def check_at_least_one(settings: Any, names: Sequence[str], prefix: str = "") -> None:
    """A ConfigError naming the first of ``names`` whose value on ``settings`` is below 1."""
    for name in names:
        if getattr(settings, name) < 1:
            raise ConfigError(f"{prefix}{name} must be >= 1, got {getattr(settings, name)}")


def flag_name(name: str) -> str:
    return "--" + name.replace("_", "-")


def _field_type(cls: type, name: str) -> type:
    hint = get_type_hints(cls)[name]
    # Optional[X] parses as X; None is the default, spelled by leaving the flag out.
    args = [a for a in getattr(hint, "__args__", ()) if a is not type(None)]
    if len(args) == 1:
        hint = args[0]
    return {float: float, int: int, str: str, bool: bool}.get(hint, str)


def add_flags(group: argparse._ActionsContainer, cls: type, *, defaults_from: type | None = None) -> None:
    """One flag per field of ``cls`` (booleans as --x/--no-x); defaults from ``defaults_from`` or ``cls``."""
    source = (defaults_from or cls)()
    for f in fields(cls):
        default = getattr(source, f.name)
        kind = _field_type(cls, f.name)
        if kind is bool:
            group.add_argument(flag_name(f.name), action=argparse.BooleanOptionalAction, default=default,
                               help=f.metadata.get("help"))
        else:
            group.add_argument(flag_name(f.name), type=kind, default=default,
                               choices=f.metadata.get("choices"),
                               help=f"{f.metadata.get('help', '')} (default: {default})".lstrip())


def pick(cls: type, values: Any) -> dict[str, Any]:
    """The fields of ``cls`` taken from a mapping or an object (argparse namespace, dataclass)."""
    get = values.get if isinstance(values, dict) else (lambda key: getattr(values, key))
    return {f.name: get(f.name) for f in fields(cls)}


def to_flags(cls: type, values: dict[str, Any]) -> str:
    """The command-line spelling of ``values``' fields of ``cls`` (the inverse of ``add_flags``)."""
    out = []
    for name, value in pick(cls, values).items():
        if isinstance(value, bool):
            out.append(flag_name(name) if value else "--no-" + name.replace("_", "-"))
        elif value is not None:
            out += [flag_name(name), str(value)]
    return " ".join(shlex.quote(x) for x in out)


assert all(f.default is not MISSING or f.default_factory is not MISSING
           for cls in SECTIONS.values() for f in fields(cls)), "every setting needs a default"

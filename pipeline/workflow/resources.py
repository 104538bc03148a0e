"""What a job reserves, computed from the data its plan knows: memory and disk per rule from the dataset's
sizes (passages, questions: resources/<dataset>/manifest.json when prepared, else the published sizes
in throughputs.yaml), the embedding dimension, the FAISS factory and the shards, times the per-unit
figures of resources.yaml and its headroom.

One function per resource: ``memory_mb`` and ``disk_mb`` (a rule whose need does not grow with the data
keeps its stage's ``mem_mb`` setting and gets no disk figure), ``cpu_hours`` for the BM25 stages whose
work is counted in resources.yaml. The rules call them through ``RuleResources``; the cost command and
tests/test_resources.py read the same functions, so a request and its check cannot drift.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Mapping

import yaml

from pipeline.core.settings.base import TRAINING_ATTEMPTS, ConfigError
from pipeline.retrieval.embeddings import SCORE_CHUNK

FIGURES = Path(__file__).with_name("resources.yaml")
THROUGHPUTS = Path(__file__).with_name("throughputs.yaml")  # published dataset sizes, encoder shapes
MIB = 1024 * 1024
# Resubmissions of a job that continues where it stopped at its time limit (training from its
# checkpoint, BM25 mining from its finished chunks): 1 + this many jobs of the cap each at most.
SEGMENT_RETRIES = TRAINING_ATTEMPTS - 1


@lru_cache(maxsize=1)
def figures() -> dict:
    return yaml.safe_load(FIGURES.read_text(encoding="utf-8"))


@lru_cache(maxsize=1)
def _published() -> dict:
    return yaml.safe_load(THROUGHPUTS.read_text(encoding="utf-8"))


def folder_architecture(name: str) -> dict | None:
    """Layers, hidden and intermediate sizes of an encoder folder (its config.json), None if not one."""
    import json

    config = Path(name) / "config.json"
    if not config.exists():
        return None
    c = json.loads(config.read_text(encoding="utf-8"))
    return {
        "layers": c["num_hidden_layers"],
        "hidden": c["hidden_size"],
        "intermediate": c["intermediate_size"],
        # what select_model's memory needs besides (absent: its stage's mem_mb setting stands)
        "heads": c.get("num_attention_heads"),
        "vocab": c.get("vocab_size"),
    }


def encoder_parameters(arch: Mapping[str, int | None]) -> int:
    """Weights of a BERT-shaped encoder: the embeddings (vocabulary, 512 positions, 2 token types, their
    LayerNorm), per layer the attention's four h x h projections, the feed-forward pair and two
    LayerNorms (4h^2 + 2hi + 9h + i), and the pooler (h^2 + h). MiniLM-L6: 22,713,216; BERT-base:
    109,482,240 (the published 22.7M and 110M)."""
    h, i = arch["hidden"], arch["intermediate"]
    embeddings = (arch["vocab"] + 512 + 2) * h + 2 * h
    layer = 4 * h * h + 2 * h * i + 9 * h + i
    return embeddings + arch["layers"] * layer + h * h + h


@dataclass(frozen=True)
class Sizes:
    """What a plan knows of a dataset before its jobs run."""

    passages: int
    queries: dict[str, int]
    dim: int
    # the encoder's shape (throughputs.yaml's architectures); None where only the dimension is known
    encoder: Mapping[str, int | None] | None = None

    @property
    def questions(self) -> int:
        return sum(self.queries.values())


def manifest_counts(manifest: Path) -> tuple[int, dict[str, int]] | None:
    """(passages, questions per split) of a dataset's manifest: prepare_dataset's (``corpus``,
    ``queries: {split: n}``) or synthkb's (``passages``, ``queries.<split>``); None if it has neither."""
    import json

    try:
        counts = json.loads(manifest.read_text(encoding="utf-8"))["counts"]
        passages = counts["corpus"] if "corpus" in counts else counts["passages"]
        queries = counts.get("queries")
        if not isinstance(queries, dict):
            queries = {k.split(".", 1)[1]: v for k, v in counts.items() if k.startswith("queries.")}
        return int(passages), {k: int(v) for k, v in queries.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def dataset_sizes(cfg: dict, dataset: str, root: Path = Path(".")) -> Sizes:
    """Passages and questions of ``dataset`` (its manifest where prepared, else the published sizes of
    throughputs.yaml) and the embedding dimension of the encoder its config names."""
    from pipeline.data.models import hub_name_of

    data = _published()
    counted = manifest_counts(root / "resources" / dataset / "manifest.json")
    if counted is None:
        published = data["datasets"].get(dataset)
        if published is None:
            raise ConfigError(f"no sizes for dataset {dataset!r}: not prepared, not in throughputs.yaml")
        counted = int(published["passages"]), {k: int(v) for k, v in published["queries"].items()}
    name = hub_name_of(cfg["model"]["base"])
    arch = data["architectures"].get(name) or folder_architecture(name)
    if arch is None:
        raise ConfigError(f"encoder {name!r}: not in throughputs.yaml's architectures, no config.json")
    return Sizes(counted[0], counted[1], int(arch["hidden"]), arch)


def _factory_parts(factory: str) -> list[str]:
    return [p.strip() for p in factory.split(",") if p.strip()]


def bytes_per_vector(factory: str, dim: int) -> float:
    """Bytes FAISS stores per vector for an index_factory string (see resources.yaml)."""
    parts = [p for p in _factory_parts(factory) if not re.fullmatch(r"(OPQ|PCA|L2norm|RR)\w*", p)]
    size, known = 0.0, bool(parts)
    for part in parts:
        if part == "Flat":
            size += 4 * dim
        elif part in ("SQfp16", "SQbf16"):
            size += 2 * dim
        elif part == "SQ8":
            size += dim
        elif part == "SQ4":
            size += dim / 2
        elif m := re.fullmatch(r"PQ(\d+)(?:x(\d+))?(?:fs)?", part):
            size += int(m[1]) * int(m[2] or 8) / 8
        elif re.fullmatch(r"IVF\d+(?:_HNSW\d+)?", part):
            size += 8
        elif m := re.fullmatch(r"HNSW(\d+)", part):
            size += 8 * int(m[1]) + (0 if len(parts) > 1 else 4 * dim)
        else:
            known = False
    return size if known else 4 * dim + 64


def _trained(factory: str) -> bool:
    return any(re.match(r"(IVF|PQ|OPQ|SQ[48])", p) for p in _factory_parts(factory))


def _line_mb(rule: str, units: float) -> float:
    line = figures()["memory_lines"][rule]
    return line["base_mib"] + line["per_unit_kib"] * units / 1024


def _units(rule: str, sizes: Sizes) -> float:
    unit = figures()["memory_lines"][rule]["unit"]
    return {
        "passages": sizes.passages,
        "passages + questions": sizes.passages + sizes.questions,
        "train questions": sizes.queries.get("train", 0),
        # the larger of the evaluated splits: a job evaluates one of them
        "evaluated questions": max(sizes.queries.get("dev", 0), sizes.queries.get("test", 0)),
    }[unit]


def index_part_mb(cfg: dict, sizes: Sizes) -> float:
    """MiB of the largest index part in memory: its vectors stored as the factory stores them."""
    parts = cfg["index"]["shards"]
    return bytes_per_vector(cfg["index"]["factory"], sizes.dim) * math.ceil(sizes.passages / parts) / MIB


def memory_mb(rule: str, cfg: dict, sizes: Sizes) -> int | None:
    """The memory a job of ``rule`` requests (MB, headroom included), or None where its need does not
    grow with the data (the stage's ``mem_mb`` setting stands)."""
    f = figures()
    if rule in f["memory_lines"]:
        need = _line_mb(rule, _units(rule, sizes))
    elif rule == "build_index":
        need = index_part_mb(cfg, sizes) + f["faiss_base_mib"]
        if _trained(cfg["index"]["factory"]):
            need += cfg["index"]["train_size"] * sizes.dim * 4 / MIB  # the fp32 training sample
    elif rule in ("search_dense", "search_dense_seed", "ar2_search", "ar2_search_dev", "ar2_search_dev_start",
                  "ar2_mine", "ar2_mine_start"):  # fmt: skip
        need = index_part_mb(cfg, sizes) + f["search_base_mib"]
    elif rule in ("select_model", "select_model_seed") and _whole_shape(sizes.encoder):
        need = selection_mib(cfg, sizes)
    else:
        return None
    return int(math.ceil(need * f["headroom"]["memory"] + f["job_runner_mib"]))


def _whole_shape(arch: Mapping[str, int | None] | None) -> bool:
    return arch is not None and None not in (arch.get("heads"), arch.get("vocab"))


def selection_mib(cfg: dict, sizes: Sizes) -> float:
    """MiB a model selection (pipeline.training.select_model) holds at its peak, resources.yaml's
    `selection` terms: the process, the encoder's fp32 weights `model_copies` times, each dev candidate
    passage's token arrays, text and embeddings (every dev run row a passage of its own at most), the run's
    rows, one scoring chunk and one forward batch's activations."""
    s, arch = figures()["selection"], sizes.encoder
    length, batch = cfg["model"]["passage_max_len"], cfg["encode"]["batch_size"]
    rows = sizes.queries.get("dev", 0) * cfg["eval"]["depth"]
    passages = min(rows, sizes.passages)
    per_passage = (
        length * (s["token_bytes"] + s["text_bytes_per_token"]) + s["embedding_copies"] * 4 * sizes.dim
    )
    activations = (
        batch
        * length
        * 4
        * (s["feed_forward_tensors"] * arch["intermediate"] + s["attention_tensors"] * arch["heads"] * length)
    )
    need = (
        s["model_copies"] * 4 * encoder_parameters(arch)
        + passages * per_passage
        + rows * s["row_bytes"]
        + min(rows, SCORE_CHUNK) * 2 * 4 * sizes.dim
        + activations
    )
    return s["base_mib"] + need / MIB


def disk_mb(rule: str, cfg: dict, sizes: Sizes) -> int | None:
    """MB a job of ``rule`` writes (headroom included), or None where it is small."""
    d = figures()["disk"]
    if rule in ("encode_corpus", "ar2_encode_corpus"):
        need = (
            math.ceil(sizes.passages / cfg["encode"]["shards"]) * sizes.dim * d["embeddings_per_value"] / MIB
        )
    elif rule == "build_index":
        need = bytes_per_vector(cfg["index"]["factory"], sizes.dim) * sizes.passages / MIB
    elif rule == "index_bm25":
        need = sizes.passages * d["bm25_index_per_passage"] / MIB
    elif rule == "mine_bm25_negatives":
        rows = sizes.queries.get("train", 0) * cfg["bm25"]["negatives"]
        need = rows * d["negatives_per_row"] / MIB
    else:
        return None
    return int(math.ceil(max(need, 1) * figures()["headroom"]["disk"]))


def cpu_hours(rule: str, sizes: Sizes) -> float | None:
    """CPU hours of a BM25 stage's work at resources.yaml's measured rate, None for other rules."""
    rate = figures()["cpu_seconds"].get(rule)
    if rate is None:
        return None
    work = {
        "train questions x passages": sizes.queries.get("train", 0) * sizes.passages,
        "test questions x passages": sizes.queries.get("test", 0) * sizes.passages,
        "passages": sizes.passages,
        "passages + questions": sizes.passages + sizes.questions,
    }[rate["unit"]]
    return work * rate["per_unit"] / 3600


class RuleResources:
    """The rules' resource callables over the workflow's per-dataset configs (``cfg(dataset)``)."""

    def __init__(self, cfg, root: Path = Path(".")) -> None:
        self._cfg = cfg
        self._root = root
        self._sizes: dict[str, Sizes | None] = {}

    def sizes(self, dataset: str) -> Sizes | None:
        # Keyed by whether the manifest exists: planned with published sizes, a prepared dataset's jobs
        # are sized by its manifest when Snakemake evaluates them.
        manifest = self._root / "resources" / dataset / "manifest.json"
        key = f"{dataset}:{manifest.exists()}"
        if key not in self._sizes:
            try:
                self._sizes[key] = dataset_sizes(self._cfg(dataset), dataset, self._root)
            except ConfigError:
                # A dataset of the user's own, neither prepared nor in throughputs.yaml: nothing to size
                # it by until its manifest exists.
                self._sizes[key] = None
        return self._sizes[key]

    def of(self, rule: str, base: dict | None = None, fallback_mb: int = 4000) -> dict:
        """``rule``'s resources: ``base`` (e.g. gpu_resources' GPUs and the stage's ``mem_mb`` setting) with
        the memory and disk computed from the data where they grow with it; the memory falls back to
        ``base``'s ``mem_mb`` (else ``fallback_mb``) where they do not or the sizes are unknown."""
        base = dict(base or {})
        fallback = base.pop("mem_mb", None)

        def mem(wildcards) -> int:
            sizes = self.sizes(wildcards.dataset)
            computed = memory_mb(rule, self._cfg(wildcards.dataset), sizes) if sizes else None
            if computed is not None:
                return computed
            return fallback(wildcards) if callable(fallback) else (fallback or fallback_mb)

        def disk(wildcards) -> int:
            sizes = self.sizes(wildcards.dataset)
            return (disk_mb(rule, self._cfg(wildcards.dataset), sizes) if sizes else None) or 1000

        return {**base, "mem_mb": mem, "disk_mb": disk}

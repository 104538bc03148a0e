"""Sections bm25, model, encode, index, search and hybrid: the sparse and dense retrievers, how a corpus
is encoded, indexed and searched, and the fusion of BM25's run with a dense one.
"""

from __future__ import annotations

import functools
from typing import Annotated, Literal, Optional, Sequence

from pydantic import Field, field_validator

from pipeline.core.settings.base import (
    MAX_CHUNK_ROWS,
    MAX_PASSAGES,
    MAX_RRF_K,
    MAX_SORT_BUFFER,
    MAX_TOKENS,
    MEM_MB_HELP,
    BatchSize,
    Contract,
    Gpus,
    MemMb,
    Metric,
    Probes,
    Ranks,
    Shards,
    Share,
    Threads,
    Tokens,
    Unique,
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
    b: Share = Field(0.4, description="Pyserini/Lucene default (MS MARCO tuned: 0.68)")
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

    negatives: Ranks = Field(
        100, description="BM25 negatives mined per train query (results/{dataset}/negatives/bm25.parquet)"
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
    passage_max_len: Tokens = Field(
        128, description="passage tokens; passages are encoded as the pair (title, text)"
    )


# The model settings a retriever folder keeps and a training run may override (train_dense flags).
RETRIEVER_KEYS = ("pooling", "similarity", "temperature", "query_max_len", "passage_max_len")


class EncodeSettings(Contract):
    """Corpus encoding, scattered over shards and gathered (docs/encoding.md)."""

    shards: Shards = Field(
        2,
        description="parallel encode_corpus jobs per model; shard i holds corpus rows [i*N/n, (i+1)*N/n)",
    )
    batch_size: BatchSize = Field(64, description="passages per forward pass")
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
    gpus: Gpus = Field(0, description="GPUs per encode job (Snakemake resource); 0 = CPU")
    threads: Threads = Field(1, description="CPU threads per encode job (shards x threads <= cores)")
    mem_mb: MemMb = Field(4000, description=MEM_MB_HELP)


class IndexSettings(Contract):
    """The FAISS index over a model's corpus embeddings."""

    factory: str = Field(
        "Flat",
        min_length=1,
        description="FAISS index_factory: Flat | SQfp16 | IVF4096,Flat | HNSW32 | IVF65536,PQ64 ...",
    )
    shards: Shards = Field(
        1, description="index parts, 1..encode.shards: > 1 = one index per group of embedding shards"
    )
    train_size: int = Field(
        100000, ge=1, le=MAX_PASSAGES, description="vectors sampled (seeded) to train IVF / PQ"
    )
    gpus: Gpus = Field(0, description="GPUs per build_index job; used when faiss sees GPUs (`gpu` extra)")
    threads: Threads = Field(2, description="CPU threads of the job")
    mem_mb: MemMb = Field(8000, description=MEM_MB_HELP)


class SearchSettings(Contract):
    """Dense search of the evaluated queries."""

    backend: Literal["faiss", "torch"] = Field(
        "faiss",
        description="faiss, or torch (exact; streams the fp16 shards, on CUDA when the job holds a GPU)",
    )
    batch_size: BatchSize = Field(128, description="queries per forward pass")
    nprobe: Probes = Field(32, description="IVF cells probed per query")
    ef_search: Probes = Field(128, description="HNSW search breadth")
    chunk_rows: int = Field(
        65536, ge=1, le=MAX_CHUNK_ROWS, description="torch backend: passages scored per chunk"
    )
    gpus: Gpus = Field(0, description="GPUs per search job: query encoding, torch search, FAISS on GPU")
    threads: Threads = Field(2, description="CPU threads of the job")
    mem_mb: MemMb = Field(8000, description=MEM_MB_HELP)


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

"""Sentence-transformers files inside a retriever folder, so the ecosystem loads it as it is.

Why: the folder's root is a plain Hugging Face encoder (the query tower, ``Retriever.save``), which
sentence-transformers alone would load with default modules (mean pooling, no normalisation, the
tokenizer's 512-token limit, no (title, text) pairs), so its embeddings would not be the pipeline's.
``write_st_files`` writes, next to what ``Retriever.load`` reads, the configuration files of
sentence-transformers 6.x (format of 6.2.0) that make::

    model = SentenceTransformer("results/synthkb/models/dpr")          # the retriever folder
    q = model.encode_query(["who founded the Arden Guild?"])           # = the pipeline's query embeddings
    p = model.encode_document([("Arden Guild", "The Arden Guild was founded by ...")])  # passages

give the pipeline's embeddings (``Retriever.encode_queries`` / ``encode_passages``, the corpus encoder
``pipeline.retrieval.encode``). Passages must be passed as ``(title, text)`` pairs, with ``""`` for a
missing title: the pipeline tokenises the pair ``[CLS] title [SEP] text [SEP]`` (longest-first
truncation), which a plain string cannot reproduce. ``encode`` without a task is ``encode_document``.

Layout (no weight is written twice; the towers stay where ``Retriever.save`` put them)::

    modules.json                       Transformer (or Router) -> Pooling [-> Normalize for cosine]
    config_sentence_transformers.json  similarity_fn_name (cosine | dot), empty query/document prompts
    router_config.json                 separate towers only: route "query" -> the root's encoder (".")
                                       "document" (also the default route) -> passage_encoder/
    sentence_bert_config.json          per tower (root, passage_encoder/): query_length =
                                       query_max_len, document_length = max_seq_length = passage_max_len
    1_Pooling/config.json              mean | cls, as ``retriever.json``'s pooling
    2_Normalize/config.json            only with similarity: cosine

Shared towers need one Transformer module with two lengths: sentence-transformers 6 applies the
Transformer's ``query_length`` under ``task="query"`` (``encode_query``) and ``document_length`` under
``task="document"``, so queries and passages are truncated as the pipeline truncates them. The modules
reference the towers by relative path (``""`` or ``"."`` for the root, as a standard folder does; ``..``
ST refuses). The tokenizer files are not touched: the pipeline passes its lengths explicitly, ST reads
``max_seq_length`` from ``sentence_bert_config.json``. Folders saved before the query tower moved to
the root keep it in ``query_encoder/`` with these files pointing there, and load as they are.

This module writes JSON only and never imports sentence-transformers (a test extra, not a pipeline
dependency): ``tests/test_st_folders.py`` loads the folders with it and compares the embeddings.
Every file is written atomically; ``modules.json`` (what makes ST treat the folder as its own) goes
last, and ``Retriever.save`` writes ``retriever.json`` after all of them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import torch
import transformers

from pipeline.core.storage import write_json


class RetrieverSettings(Protocol):
    """What these files need of a retriever's settings (pipeline.retrieval.model.RetrieverSettings,
    which imports this module: a structural type keeps the import one-way)."""

    pooling: str
    similarity: str
    shared_towers: bool
    query_max_len: int
    passage_max_len: int


ST_VERSION = "6.2.0"  # the sentence-transformers format these files follow
QUERY_ROUTE = "."  # the Router's module for the query tower: the folder's root
PASSAGE_TOWER = "passage_encoder"  # the passage tower's sub-folder (separate towers only)
POOLING_DIR = "1_Pooling"
NORMALIZE_DIR = "2_Normalize"
MODULES_FILE = "modules.json"
ROUTER_FILE = "router_config.json"
TRANSFORMER_CONFIG = "sentence_bert_config.json"

_TYPES = {
    "transformer": "sentence_transformers.base.modules.transformer.Transformer",
    "router": "sentence_transformers.base.modules.router.Router",
    "pooling": "sentence_transformers.sentence_transformer.modules.pooling.Pooling",
    "normalize": "sentence_transformers.base.modules.normalize.Normalize",
}


def transformer_config(settings: RetrieverSettings) -> dict[str, Any]:
    """A tower's ``sentence_bert_config.json``: text-only feature extraction, the pipeline's lengths.

    ``query_length``/``document_length`` apply under ``encode_query``/``encode_document``;
    ``max_seq_length`` (the passage length) applies to ``encode`` without a task.
    """
    return {
        "transformer_task": "feature-extraction",
        "modality_config": {"text": {"method": "forward", "method_output_name": "last_hidden_state"}},
        "module_output_name": "token_embeddings",
        "max_seq_length": settings.passage_max_len,
        "query_length": settings.query_max_len,
        "document_length": settings.passage_max_len,
    }


def model_config(settings: RetrieverSettings) -> dict[str, Any]:
    """``config_sentence_transformers.json``: the similarity, and empty prompts for both tasks (none is
    prepended; an empty "query"/"document" prompt also keeps ST from any default prompt)."""
    return {
        "__version__": {
            "sentence_transformers": ST_VERSION,
            "transformers": transformers.__version__,
            "pytorch": torch.__version__,
        },
        "model_type": "SentenceTransformer",
        "prompts": {"query": "", "document": ""},
        "default_prompt_name": None,
        "similarity_fn_name": settings.similarity,
    }


def router_config() -> dict[str, Any]:
    """Separate towers: each task routed to its own tower; a call without a task is a document."""
    return {
        "types": {QUERY_ROUTE: _TYPES["transformer"], PASSAGE_TOWER: _TYPES["transformer"]},
        "structure": {"query": [QUERY_ROUTE], "document": [PASSAGE_TOWER]},
        "parameters": {"default_route": "document", "allow_empty_key": True, "route_mappings": {}},
    }


def modules(settings: RetrieverSettings) -> list[dict[str, Any]]:
    """``modules.json``: the encoder (one tower, or a Router over two), pooling, normalisation."""
    # At path "" (the folder itself): the Transformer reads the root's files, the Router its modules'
    # paths relative to the root ("." the root's encoder, passage_encoder/).
    first = _TYPES["transformer"] if settings.shared_towers else _TYPES["router"]
    chain = [("", first), (POOLING_DIR, _TYPES["pooling"])]
    if settings.similarity == "cosine":
        chain.append((NORMALIZE_DIR, _TYPES["normalize"]))
    return [{"idx": i, "name": str(i), "path": path, "type": kind} for i, (path, kind) in enumerate(chain)]


def write_st_files(folder: str | Path, settings: RetrieverSettings, hidden_size: int) -> None:
    """Make the retriever folder ``folder`` (towers already saved) loadable by ``SentenceTransformer``.

    ``hidden_size`` is the towers' output width (the Pooling module's embedding dimension). Files of a
    layout the settings no longer use (a router for shared towers, the Normalize module for dot
    similarity) are removed, so a re-saved folder never carries stale modules.
    """
    folder = Path(folder)
    towers = [folder] if settings.shared_towers else [folder, folder / PASSAGE_TOWER]
    for tower in towers:
        write_json(tower / TRANSFORMER_CONFIG, transformer_config(settings))
    write_json(
        folder / POOLING_DIR / "config.json",
        {"embedding_dimension": hidden_size, "pooling_mode": settings.pooling, "include_prompt": True},
    )
    normalize = folder / NORMALIZE_DIR / "config.json"
    if settings.similarity == "cosine":
        write_json(
            normalize, {"module_input_name": "sentence_embedding", "module_output_name": "sentence_embedding"}
        )
    else:
        normalize.unlink(missing_ok=True)
    if settings.shared_towers:
        (folder / ROUTER_FILE).unlink(missing_ok=True)
    else:
        write_json(folder / ROUTER_FILE, router_config())
    write_json(folder / "config_sentence_transformers.json", model_config(settings))
    write_json(folder / MODULES_FILE, modules(settings))

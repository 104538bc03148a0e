"""A saved retriever folder loads in sentence-transformers as it is and gives the pipeline's embeddings:
``SentenceTransformer(folder).encode_query(queries)`` / ``.encode_document([(title, text), ...])`` equal
``Retriever.encode_queries`` / ``encode_passages`` and the corpus encoder (``encode_buffer``), with the
pipeline's pooling, normalisation, per-side max lengths and shared or separate towers."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from sentence_transformers import SentenceTransformer

from pipeline.retrieval.encode import encode_buffer
from pipeline.retrieval.model import Retriever, RetrieverSettings

TOL = 1e-5
LONG = " ".join(["the river market of the old stone bridge in winter"] * 6)  # > every max length here
QUERIES = ["who built the copper lantern?", "violin", LONG, "what is the capital of topic 3 " * 3]
TITLES = ["Article 1", "", None, "A rather long title about the harbor forest and its engine"]
TEXTS = ["The lantern was made of copper by a smith.", "A violin in the harbor.", LONG, "Short text."]


def _retriever(model_dir, settings: RetrieverSettings) -> Retriever:
    retriever = Retriever.from_pretrained(str(model_dir), settings)
    if retriever.passage_model is not None:
        # Separate towers start as copies of one encoder: make them differ, so a passage embedding
        # computed by the query tower (a wrong route) cannot pass.
        generator = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for param in retriever.passage_model.parameters():
                param.add_(0.05 * torch.randn(param.shape, generator=generator))
    return retriever


def _max_diff(a: np.ndarray, b: np.ndarray) -> float:
    assert a.shape == b.shape
    return float(np.abs(a.astype(np.float64) - b.astype(np.float64)).max())


@pytest.mark.parametrize(
    "pooling, similarity, shared",
    [
        ("mean", "cosine", True),  # the pipeline's default
        ("cls", "dot", False),  # the other pooling, unnormalised, a Router over two towers
        ("cls", "cosine", False),
    ],
)
def test_sentence_transformer_gives_the_pipeline_embeddings(
    tmp_path, tiny_model_dir, pooling, similarity, shared
):
    settings = RetrieverSettings(
        base="tiny",
        pooling=pooling,
        similarity=similarity,
        shared_towers=shared,
        query_max_len=8,
        passage_max_len=24,
    )
    folder = tmp_path / "retriever"
    _retriever(tiny_model_dir(tmp_path), settings).save(folder)
    # No weight written twice: one weights file per tower, where Retriever.save put it.
    weights = sorted(p.relative_to(folder).parent.as_posix() for p in folder.rglob("*.safetensors"))
    assert weights == (["query_encoder"] if shared else ["passage_encoder", "query_encoder"])
    assert (
        json.loads((folder / "config_sentence_transformers.json").read_text())["similarity_fn_name"]
        == similarity
    )

    pipeline = Retriever.load(folder).eval()  # as pipeline.retrieval.encode.load_retriever does
    model = SentenceTransformer(str(folder), device="cpu")
    assert model.similarity_fn_name == similarity

    queries_ref = pipeline.encode_queries(QUERIES)
    passages_ref = pipeline.encode_passages(TITLES, TEXTS)
    corpus_ref = encode_buffer(
        pipeline, TEXTS, TITLES, batch_size=3, device=torch.device("cpu"), amp=False, dtype=torch.float32
    )
    queries_st = model.encode_query(QUERIES, batch_size=3)
    pairs = [(title or "", text) for title, text in zip(TITLES, TEXTS)]
    passages_st = model.encode_document(pairs, batch_size=3)

    diffs = {
        "queries": _max_diff(queries_st, queries_ref),
        "passages": _max_diff(passages_st, passages_ref),
        "corpus encoder": _max_diff(passages_st, corpus_ref),
        "encode() = encode_document()": _max_diff(model.encode(pairs, batch_size=3), passages_ref),
    }
    print(f"max |ST - pipeline| ({pooling}, {similarity}, shared={shared}):", diffs)
    assert all(d < TOL for d in diffs.values()), diffs

    # The checks can fail: the same strings as documents (longer limit, and the passage tower when
    # separate) are not the queries' embeddings, and plain strings are not the (title, text) pairs.
    assert _max_diff(model.encode_document(QUERIES), queries_ref) > 1e-3
    assert _max_diff(model.encode_document(TEXTS), passages_ref) > 1e-3
    if similarity == "cosine":
        assert np.allclose(np.linalg.norm(queries_st, axis=1), 1.0, atol=1e-5)


def test_resaving_with_other_settings_leaves_no_stale_modules(tmp_path, tiny_model_dir):
    folder = tmp_path / "retriever"
    base = tiny_model_dir(tmp_path)
    _retriever(base, RetrieverSettings(similarity="cosine", shared_towers=False)).save(folder)
    assert (folder / "router_config.json").exists() and (folder / "2_Normalize").exists()
    _retriever(base, RetrieverSettings(similarity="dot", shared_towers=True)).save(folder)
    assert not (folder / "router_config.json").exists()
    assert not (folder / "2_Normalize" / "config.json").exists()
    paths = [m["path"] for m in json.loads((folder / "modules.json").read_text())]
    assert paths == ["query_encoder", "1_Pooling"]
    model = SentenceTransformer(str(folder), device="cpu")
    reference = Retriever.load(folder).encode_queries(QUERIES)
    assert _max_diff(model.encode_query(QUERIES), reference) < TOL

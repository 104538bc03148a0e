"""encode.backend openvino: the same embeddings as torch's forward pass, written the same way."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_encode import encode_all, encode_queries_fp32, make_corpus

from pipeline.retrieval import embeddings as E
from pipeline.retrieval import encode
from pipeline.retrieval.model import Retriever, RetrieverSettings, make_tiny_encoder
from pipeline.retrieval.openvino_tower import OpenVINOTower


@pytest.fixture(scope="module", params=["cosine", "dot"])
def retriever(request, tmp_path_factory):
    """Tiny towers; dot product with cls pooling too, so the test is not only about normalised means."""
    base = tmp_path_factory.mktemp("tiny")
    make_tiny_encoder(base / "hf", seed=0)
    pooling = "mean" if request.param == "cosine" else "cls"
    settings = RetrieverSettings(
        base="tiny", passage_max_len=40, query_max_len=12, similarity=request.param, pooling=pooling
    )
    Retriever.from_pretrained(str(base / "hf"), settings).save(base / "retriever")
    return Retriever.load(base / "retriever").eval()


def test_openvino_shards_equal_torch_shards(tmp_path, retriever):
    df = make_corpus(tmp_path / "corpus.parquet", n=120)
    encode_all(retriever, tmp_path / "corpus.parquet", tmp_path / "torch", 2, amp=False)
    manifest = encode_all(
        retriever, tmp_path / "corpus.parquet", tmp_path / "ov", 2, amp=False, backend="openvino"
    )
    assert manifest["count"] == len(df) and manifest["precision"] == "fp32"
    assert E.EmbeddingSet(tmp_path / "ov").ids().to_pylist() == df["pid"].tolist()
    want = np.concatenate([c for _, c in E.EmbeddingSet(tmp_path / "torch").iter_rows(1000)])
    got = np.concatenate([c for _, c in E.EmbeddingSet(tmp_path / "ov").iter_rows(1000)])
    # fp32 on both sides, stored fp16: equal up to the storage's rounding
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), atol=2e-3, rtol=2e-3)


def test_openvino_rerun_is_bitwise_deterministic(tmp_path, retriever):
    make_corpus(tmp_path / "corpus.parquet", n=60)
    m1 = encode_all(retriever, tmp_path / "corpus.parquet", tmp_path / "a", 2, amp=False, backend="openvino")
    m2 = encode_all(retriever, tmp_path / "corpus.parquet", tmp_path / "b", 2, amp=False, backend="openvino")
    assert [s["sha256"] for s in m1["shards"]] == [s["sha256"] for s in m2["shards"]]


def test_query_tower_matches_encode_queries(retriever):
    """The query kind traces embed_queries (query length, query tower), not the passage path."""
    texts = ["where is the river castle", "north bridge", "a museum in winter by the harbor lantern"]
    example = encode.tokenize_buffer(retriever, texts[:2], None)
    tower = OpenVINOTower(retriever, "query", example, "fp32", threads=1)
    got = encode_queries_fp32(retriever, texts, tower=tower)
    np.testing.assert_allclose(got, retriever.encode_queries(texts), atol=1e-5)


def test_openvino_refuses_a_gpu_device_and_an_unknown_backend(tmp_path, retriever):
    make_corpus(tmp_path / "corpus.parquet", n=10)
    with pytest.raises(ValueError, match="encode.backend openvino runs on the CPU"):
        encode.openvino_tower(retriever, "passage", torch.device("cuda"), amp=True)
    with pytest.raises(ValueError, match="backend must be one of"):
        encode.encode_table(retriever, tmp_path / "corpus.parquet", tmp_path / "x", 0, 1, backend="onnx")
    assert not (tmp_path / "x").exists()
    with pytest.raises(ValueError, match="fp32 or bf16"):
        OpenVINOTower(retriever, "passage", encode.tokenize_buffer(retriever, ["a"], ["t"]), "fp16")


def test_cli_backend_flag(tmp_path, retriever):
    folder = tmp_path / "model"
    retriever.save(folder)
    make_corpus(tmp_path / "corpus.parquet", n=30)
    common = [
        "--model",
        str(folder),
        "--corpus",
        str(tmp_path / "corpus.parquet"),
        "--shards",
        "1",
        "--shard",
        "0",
    ]
    for backend in ("torch", "openvino"):
        out = tmp_path / backend
        argv = ["corpus", *common, "--out-dir", str(out), "--no-amp", "--backend", backend, "--no-progress"]
        assert encode.main(argv + ["--device", "cpu"]) == 0
    a = np.load(tmp_path / "torch" / "shard0of1.npy").astype(np.float32)
    b = np.load(tmp_path / "openvino" / "shard0of1.npy").astype(np.float32)
    np.testing.assert_allclose(a, b, atol=2e-3, rtol=2e-3)

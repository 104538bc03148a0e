"""The promises of docs/failures.md that issue 28's list did not name, probed with hand-made bad input
(issue 28, remaining part): each test broke the promise before its fix."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.core.storage import DataError
from pipeline.retrieval import embeddings as E
from pipeline.retrieval import index as I
from pipeline.retrieval import search as S

# ---- FAISS index parts are checked against the sha256 recorded at build --------------------------


def _embedding_folder(folder: Path, n: int = 50, dim: int = 8, shards: int = 2) -> np.ndarray:
    """fp16 shards and a gathered manifest, as encode_corpus and gather write them."""
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((n, dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    pids = [f"p{i:03d}" for i in range(n)]
    for i in range(shards):
        start, end = E.shard_bounds(n, i, shards)
        npy, ids = E.shard_paths(folder, i, shards)
        with E.EmbeddingWriter(npy, ids, end - start, dim, precision="fp32") as writer:
            writer.write(pids[start:end], vectors[start:end])
    E.gather(folder, shards, model="random", source="random")
    return vectors


@pytest.fixture
def built_index(tmp_path) -> tuple[Path, np.ndarray]:
    vectors = _embedding_folder(tmp_path / "emb")
    I.build_index(tmp_path / "emb", tmp_path / "index", factory="Flat", shards=2, progress=False)
    return tmp_path / "index", vectors[:3]


def _same_size_garbage(path: Path) -> None:
    """The last 200 bytes (vectors of a Flat index) replaced by other finite floats: FAISS loads it."""
    data = bytearray(path.read_bytes())
    data[-200:] = np.random.default_rng(1).standard_normal(50).astype(np.float32).tobytes()
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", ["same size", "truncated", "pids replaced", "missing"])
def test_a_damaged_index_part_is_refused_naming_it(built_index, damage):
    index_dir, queries = built_index
    part = index_dir / "shard1of2.faiss"
    if damage == "same size":
        size = part.stat().st_size
        _same_size_garbage(part)
        assert part.stat().st_size == size
    elif damage == "truncated":
        part.write_bytes(part.read_bytes()[:200])
    elif damage == "pids replaced":  # same row count, other pids: the run would name wrong passages
        part = index_dir / "shard1of2.pids.parquet"
        pq.write_table(pa.table({"pid": [f"x{i}" for i in range(25)]}), part)
    else:
        part.unlink()
    with pytest.raises(DataError) as err:
        S.search_faiss(index_dir, queries, 5, progress=False)
    assert err.value.file == str(part), str(err.value)
    assert "delete the index folder and rerun build_index" in str(err.value)
    if damage != "missing":
        assert "sha256" in str(err.value)
    manifest = json.loads((index_dir / "index.json").read_text())
    assert all(len(e["sha256"]) == 64 and len(e["pids_sha256"]) == 64 for e in manifest["shards"])


def test_an_index_without_digests_is_read_and_a_truncated_part_still_names_the_file(built_index):
    # built before the digests were recorded: read unchecked, but FAISS's C++ assertion (a RuntimeError
    # traceback) becomes one line naming the part
    index_dir, queries = built_index
    manifest = json.loads((index_dir / "index.json").read_text())
    for entry in manifest["shards"]:
        entry.pop("sha256", None), entry.pop("pids_sha256", None)
    (index_dir / "index.json").write_text(json.dumps(manifest))
    rows, _, _ = S.search_faiss(index_dir, queries, 5, progress=False)
    assert rows.shape == (3, 5)
    part = index_dir / "shard0of2.faiss"
    part.write_bytes(part.read_bytes()[:200])
    with pytest.raises(DataError, match="not a readable FAISS index") as err:
        S.search_faiss(index_dir, queries, 5, progress=False)
    assert err.value.file == str(part)

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


# ---- config: every problem names its key, before anything reads the config ------------------------

REPO = Path(__file__).resolve().parent.parent


def _dry_run(tmp_path: Path, overlay_text: str, name: str = "overlay.yaml"):
    import subprocess
    import sys

    overlay = tmp_path / name
    overlay.write_text(overlay_text)
    command = [
        sys.executable,
        "-m",
        "snakemake",
        "-n",
        "--cores",
        "1",
        "--snakefile",
        str(REPO / "Snakefile"),
    ]
    command += ["--directory", str(tmp_path), "--configfile", str(overlay)]
    return subprocess.run(command, capture_output=True, text=True)


@pytest.mark.parametrize(
    "overlay, key",
    [
        ("datasets:\n  mine: squad\n", "config key 'datasets.mine': Input should be a valid dictionary"),
        ("datasets: null\n", "config key 'datasets': Input should be a valid dictionary"),
        ("datasets: [synthkb]\n", "config key 'datasets': Input should be a valid dictionary"),
    ],
)
def test_a_dataset_entry_that_is_not_a_mapping_is_named_by_the_config_check(tmp_path, overlay, key):
    # the rule files read every entry's format before validation: AttributeError, a traceback
    proc = _dry_run(tmp_path, overlay)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "AttributeError" not in out and key in out, out


def test_a_key_given_twice_in_an_overlay_is_refused_naming_file_line_and_key(tmp_path):
    # Snakemake reads overlays with PyYAML, which keeps the second `dpr:` block and drops the first
    # (lr 0.5 was silently not applied)
    proc = _dry_run(tmp_path, "dpr:\n  lr: 0.5\nbm25:\n  k1: 1.0\ndpr:\n  max_steps: 3\n")
    out = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode != 0
    assert f"{tmp_path / 'overlay.yaml'}: line 5, column 1: key 'dpr' given twice" in out, out
    assert "first at line 1" in out, out


@pytest.mark.parametrize(
    "text, where",
    [
        ("eval:\n  ks: [1, 5]\n  depth: 50\n  ks: [10]\n", "line 4, column 3: key 'ks' given twice"),
        ('{"dpr": {"lr": 0.5}, "dpr": {"max_steps": 3}}', "key 'dpr' given twice in one object"),
    ],
)
def test_load_config_refuses_repeated_keys_in_yaml_and_json(tmp_path, text, where):
    from pipeline.core.config import ConfigError, load_config

    path = tmp_path / "overlay.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config([path])
    assert str(err.value).startswith(f"{path}: {where}"), str(err.value)


def test_yaml_merge_keys_may_be_overridden_and_the_default_config_loads(tmp_path):
    # `<<: *anchor` then an own key of the same name is YAML's way of overriding: not a repeat
    from pipeline.core.config import _load_yaml, load_config

    path = tmp_path / "overlay.yaml"
    path.write_text("_base: &b {lr: 0.5, max_steps: 3}\ndpr: {<<: *b, max_steps: 4}\n")
    assert _load_yaml(path)["dpr"] == {"lr": 0.5, "max_steps": 4}
    assert load_config()["datasets"]["synthkb"]["format"] == "synthkb"

"""Sharded corpus encoding: slices, streaming, fp16 shards in corpus order, gather, errors."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from stage_args import encode_corpus

from pipeline.core.storage import DataError
from pipeline.retrieval import embeddings as E
from pipeline.retrieval import encode
from pipeline.retrieval.model import Retriever, RetrieverSettings, make_tiny_encoder

WORDS = "river castle north bridge museum winter orchestra granite harbor lantern".split()


@pytest.fixture(scope="module")
def retriever_dir(tmp_path_factory):
    base = tmp_path_factory.mktemp("tiny")
    make_tiny_encoder(base / "hf", seed=0)
    settings = RetrieverSettings(base="tiny", passage_max_len=40, query_max_len=12)
    folder = base / "retriever"
    Retriever.from_pretrained(str(base / "hf"), settings).save(folder)
    return folder


@pytest.fixture(scope="module")
def retriever(retriever_dir):
    return Retriever.load(retriever_dir).eval()


def make_corpus(path, n=230, row_group_size=37, seed=0):
    rng = np.random.default_rng(seed)
    df = pd.DataFrame(
        {
            "pid": [f"d{i}" for i in range(n)],
            # None and "" titles both mean "no title"; lengths vary widely so sorting matters.
            "title": [None if i % 11 == 0 else ("" if i % 7 == 0 else f"title {i % 5}") for i in range(n)],
            "text": [" ".join(rng.choice(WORDS, int(rng.integers(1, 60)))) for _ in range(n)],
        }
    )
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), path, row_group_size=row_group_size)
    return df


def encode_all(retriever, corpus, out_dir, shards, **kw):
    options = dict(batch_size=4, sort_buffer=25, device=torch.device("cpu"), progress=False)
    options.update(kw)
    for i in range(shards):
        encode.encode_table(retriever, corpus, out_dir, i, shards, **options)
    return E.gather(
        out_dir,
        shards,
        model="tiny",
        source=str(corpus),
        source_rows=pq.ParquetFile(corpus).metadata.num_rows,
    )


def test_shard_bounds_are_contiguous_and_balanced():
    assert [E.shard_bounds(10, i, 3) for i in range(3)] == [(0, 3), (3, 6), (6, 10)]
    assert [E.shard_bounds(2, i, 4) for i in range(4)] == [(0, 0), (0, 1), (1, 1), (1, 2)]
    with pytest.raises(ValueError):
        E.shard_bounds(10, 3, 3)


def test_iter_slice_crosses_row_groups(tmp_path):
    df = make_corpus(tmp_path / "c.parquet", n=100, row_group_size=13)
    got = [
        (first, chunk["pid"])
        for first, chunk in encode.iter_slice(tmp_path / "c.parquet", 20, 61, ["pid"], read_rows=7)
    ]
    pids = [p for _, chunk in got for p in chunk]
    assert pids == df["pid"].tolist()[20:61]
    assert got[0][0] == 20
    buffers = list(
        encode.iter_buffers(encode.iter_slice(tmp_path / "c.parquet", 0, 100, ["pid"], read_rows=7), 30)
    )
    assert [len(b["pid"]) for b in buffers] == [30, 30, 30, 10]


def test_sharded_encoding_matches_reference_in_corpus_order(tmp_path, retriever):
    df = make_corpus(tmp_path / "corpus.parquet")
    manifest = encode_all(retriever, tmp_path / "corpus.parquet", tmp_path / "emb", 3)
    assert manifest["count"] == len(df) and manifest["dim"] == 32 and manifest["dtype"] == "float16"
    assert [s["count"] for s in manifest["shards"]] == [76, 77, 77]
    for entry in manifest["shards"]:
        assert entry["sha256"] == E.file_sha256(tmp_path / "emb" / entry["embeddings"])
    loaded = E.EmbeddingSet(tmp_path / "emb")
    assert loaded.ids().to_pylist() == df["pid"].tolist()
    got = np.concatenate([chunk for _, chunk in loaded.iter_rows(50)])
    assert got.dtype == np.float16 and got.shape == (len(df), 32)
    reference = retriever.encode_passages(df["title"].fillna("").tolist(), df["text"].tolist())
    np.testing.assert_allclose(got.astype(np.float32), reference, atol=2e-3)
    # Cosine retriever: unit vectors (up to fp16 rounding).
    np.testing.assert_allclose(np.linalg.norm(got.astype(np.float32), axis=1), 1.0, atol=2e-3)


def test_result_does_not_depend_on_shards_or_buffer(tmp_path, retriever):
    make_corpus(tmp_path / "corpus.parquet", n=90)
    encode_all(retriever, tmp_path / "corpus.parquet", tmp_path / "a", 1, sort_buffer=1000, batch_size=16)
    encode_all(retriever, tmp_path / "corpus.parquet", tmp_path / "b", 4, sort_buffer=7)
    a = np.concatenate([c for _, c in E.EmbeddingSet(tmp_path / "a").iter_rows(1000)])
    b = np.concatenate([c for _, c in E.EmbeddingSet(tmp_path / "b").iter_rows(1000)])
    np.testing.assert_allclose(a.astype(np.float32), b.astype(np.float32), atol=2e-3)


def test_rerun_is_bitwise_deterministic(tmp_path, retriever):
    make_corpus(tmp_path / "corpus.parquet", n=60)
    m1 = encode_all(retriever, tmp_path / "corpus.parquet", tmp_path / "a", 2)
    m2 = encode_all(retriever, tmp_path / "corpus.parquet", tmp_path / "b", 2)
    assert [s["sha256"] for s in m1["shards"]] == [s["sha256"] for s in m2["shards"]]


@pytest.mark.parametrize("side", ["right", "left"])
def test_tokenize_buffer_equals_retriever_tokenization(retriever_dir, side, monkeypatch):
    """The Rust fast path gives the same ids/types/mask as Retriever.tokenize_* (truncation included)."""
    monkeypatch.setattr(encode, "TOKENIZE_CHUNK", 2)  # several chunks
    model = Retriever.load(retriever_dir)
    model.tokenizer.padding_side = side
    titles = ["Ünïcode title", "", None, "a very long title " * 10, "x"]
    texts = [
        "Some text, with punctuation!",
        "",
        "日本語のテキスト and more words " * 5,
        "short",
        " ".join(WORDS),
    ]
    cases = (
        (encode.tokenize_buffer(model, texts, titles), model.tokenize_passages(titles, texts)),
        (encode.tokenize_buffer(model, texts, None), model.tokenize_queries(texts)),
    )
    for got, want in cases:
        assert set(got) == set(want)
        for key in want:
            np.testing.assert_array_equal(got[key], want[key].numpy(), err_msg=f"{side} {key}")


def encode_queries_fp32(retriever, texts: list[str], **kw) -> np.ndarray:
    """encode_buffer on queries (no titles), two per batch, fp32 on the CPU; ``kw``: on_batch, tower."""
    cpu = dict(device=torch.device("cpu"), amp=False, dtype=torch.float32)
    return encode.encode_buffer(retriever, texts, None, batch_size=2, **cpu, **kw)


def test_encode_buffer_sorts_by_token_length_but_returns_input_order(retriever):
    texts = ["short", " ".join(WORDS * 3), "a b c", " ".join(WORDS)]
    seen = []
    out = encode_queries_fp32(retriever, texts, on_batch=seen.append)
    assert seen == [2, 2]
    np.testing.assert_allclose(out, retriever.encode_queries(texts), atol=1e-5)


def test_an_empty_buffer_is_no_rows_of_the_asked_dtype(retriever):
    dim = retriever.query_model.config.hidden_size
    assert encode_queries_fp32(retriever, []).shape == (0, dim)
    cpu = dict(device=torch.device("cpu"), batch_size=2)
    out = encode.encode_buffer(retriever, [], [], **cpu)  # passages, the default fp16 storage
    assert out.shape == (0, dim) and out.dtype == np.float16


def test_null_text_names_the_row_and_leaves_no_output(tmp_path, retriever):
    df = make_corpus(tmp_path / "corpus.parquet", n=50)
    df.loc[41, "text"] = None
    pq.write_table(
        pa.Table.from_pandas(df, preserve_index=False), tmp_path / "bad.parquet", row_group_size=10
    )
    with pytest.raises(DataError) as err:
        encode.encode_table(
            retriever,
            tmp_path / "bad.parquet",
            tmp_path / "emb",
            1,
            2,
            batch_size=4,
            sort_buffer=8,
            progress=False,
        )
    assert err.value.record == 41 and err.value.field == "text"
    assert "bad.parquet" in str(err.value)
    assert not any((tmp_path / "emb").glob("shard*")), "a failed shard must leave no output"


def test_missing_column_is_named(tmp_path, retriever):
    pq.write_table(pa.table({"pid": ["a"], "body": ["x"]}), tmp_path / "c.parquet")
    with pytest.raises(DataError, match="missing column") as err:
        encode.encode_table(retriever, tmp_path / "c.parquet", tmp_path / "emb", 0, 1, progress=False)
    assert err.value.field == "title"


def test_writer_refuses_wrong_row_count(tmp_path):
    with pytest.raises(ValueError, match="announced"):
        with E.EmbeddingWriter(tmp_path / "x.npy", tmp_path / "x.pids.parquet", 3, 2) as writer:
            writer.write(["a", "b"], np.ones((2, 2), np.float32))
    assert list(tmp_path.iterdir()) == []


def test_truncated_shard_is_rejected(tmp_path):
    with E.EmbeddingWriter(tmp_path / "x.npy", tmp_path / "x.pids.parquet", 4, 3) as writer:
        writer.write(list("abcd"), np.arange(12, dtype=np.float32).reshape(4, 3))
    np.testing.assert_array_equal(np.load(tmp_path / "x.npy"), np.arange(12).reshape(4, 3))
    data = (tmp_path / "x.npy").read_bytes()
    (tmp_path / "x.npy").write_bytes(data[:-2])
    with pytest.raises(DataError, match="truncated"):
        E.read_header(tmp_path / "x.npy")


def test_gather_checks_shards(tmp_path, retriever):
    make_corpus(tmp_path / "corpus.parquet", n=30)
    encode_all(retriever, tmp_path / "corpus.parquet", tmp_path / "emb", 2)
    with pytest.raises(DataError, match="the source has 31"):
        E.gather(tmp_path / "emb", 2, model="m", source="c", source_rows=31)
    with pytest.raises(DataError, match="not found"):
        E.gather(tmp_path / "emb", 3, model="m", source="c")
    # A pid repeated across shards would give duplicate (qid, pid) rows in runs.
    shard1 = tmp_path / "emb" / "shard1of2.pids.parquet"
    pq.write_table(
        pa.table({"pid": ["d0"] + [f"x{i}" for i in range(14)]}, metadata=pq.read_schema(shard1).metadata),
        shard1,
    )
    with pytest.raises(DataError, match="'d0' occurs more than once"):
        E.gather(tmp_path / "emb", 2, model="m", source="c")


def test_manifest_records_precision_and_refuses_mixed_shards(tmp_path, retriever):
    make_corpus(tmp_path / "corpus.parquet", n=40)
    manifest = encode_all(retriever, tmp_path / "corpus.parquet", tmp_path / "emb", 2, amp=False)
    assert manifest["precision"] == "fp32"
    assert [E.read_precision(tmp_path / "emb" / s["ids"]) for s in manifest["shards"]] == ["fp32"] * 2
    # Shard 1 re-encoded on a host whose autocast gives bf16: one index must not mix the two.
    _, ids = E.shard_paths(tmp_path / "emb", 1, 2)
    table = pq.read_table(ids)
    pq.write_table(table.replace_schema_metadata({E.PRECISION_KEY: b"bf16"}), ids)
    with pytest.raises(DataError, match=r"different compute precisions.*shard0of2.*fp32.*bf16"):
        E.gather(tmp_path / "emb", 2, model="tiny", source="c")
    # A shard written without a recorded precision (an older version) gathers with the others, as
    # unknown; so do shards that all lack it.
    pq.write_table(pq.read_table(ids).replace_schema_metadata(None), ids)
    assert E.gather(tmp_path / "emb", 2, model="tiny", source="c")["precision"] is None
    _, ids0 = E.shard_paths(tmp_path / "emb", 0, 2)
    pq.write_table(pq.read_table(ids0).replace_schema_metadata(None), ids0)
    assert E.gather(tmp_path / "emb", 2, model="tiny", source="c")["precision"] is None


def test_cli_corpus_gather_and_queries(tmp_path, retriever_dir, retriever):
    df = make_corpus(tmp_path / "corpus.parquet", n=40)
    cpu = ("--device", "cpu", "--batch-size", "8", "--no-progress")
    encode_corpus(retriever_dir, tmp_path / "corpus.parquet", tmp_path / "emb", 2, *cpu)
    manifest = json.loads((tmp_path / "emb" / "manifest.json").read_text())
    assert manifest["count"] == 40 and len(manifest["shards"]) == 2
    queries = pd.DataFrame(
        {"qid": ["q1", "q2", "q3"], "text": ["river castle", "winter", ""], "answers": [["x"], [], ["y"]]}
    )
    queries.to_parquet(tmp_path / "queries.parquet")
    assert (
        encode.main(
            [
                "queries",
                "--model",
                str(retriever_dir),
                "--queries",
                str(tmp_path / "queries.parquet"),
                "--out-dir",
                str(tmp_path / "qemb"),
                "--device",
                "cpu",
                "--no-progress",
            ]
        )
        == 0
    )
    qset = E.EmbeddingSet(tmp_path / "qemb")
    assert qset.id_field == "qid" and qset.ids().to_pylist() == ["q1", "q2", "q3"]
    got = next(qset.iter_rows(10))[1].astype(np.float32)
    np.testing.assert_allclose(got, retriever.encode_queries(queries["text"]), atol=2e-3)
    stored = np.concatenate([c for _, c in E.EmbeddingSet(tmp_path / "emb").iter_rows(100)])
    np.testing.assert_allclose(
        stored.astype(np.float32), retriever.encode_passages(df["title"].fillna(""), df["text"]), atol=2e-3
    )


def test_cli_bad_input_exits_2(tmp_path, retriever_dir, capsys):
    from pipeline.core.cli import run_main

    with pytest.raises(SystemExit) as exit_info:
        run_main(
            encode.main,
            [
                "corpus",
                "--model",
                str(retriever_dir),
                "--corpus",
                str(tmp_path / "missing.parquet"),
                "--out-dir",
                str(tmp_path / "e"),
                "--shard",
                "0",
                "--shards",
                "1",
                "--no-progress",
            ],
        )
    assert exit_info.value.code == 2
    assert "missing.parquet" in capsys.readouterr().err


# ---- issue 28.5: damaged files are found by the digests recorded when they were written -----------


def _garbage_of_the_same_size(path, seed=1):
    """Finite fp16 garbage over a .npy's data, header kept: passes every check but the digest."""
    (rows, dim), _, offset = E.read_header(path)
    garbage = np.random.default_rng(seed).standard_normal((rows, dim)).astype(E.DTYPE)
    with open(path, "r+b") as handle:
        handle.seek(offset)
        handle.write(garbage.tobytes())


def test_a_shard_overwritten_with_finite_garbage_is_refused_where_it_is_read(tmp_path, retriever, capsys):
    from pipeline.retrieval import index as I
    from pipeline.retrieval import search as S

    corpus = tmp_path / "corpus.parquet"
    make_corpus(corpus, n=60)
    folder = tmp_path / "emb"
    encode_all(retriever, corpus, folder, 2)
    damaged = folder / "shard1of2.npy"
    size = damaged.stat().st_size
    _garbage_of_the_same_size(damaged)
    assert damaged.stat().st_size == size
    with pytest.raises(DataError) as err:
        I.build_index(folder, tmp_path / "index", factory="Flat", progress=False)
    assert (
        err.value.file == str(damaged) and "sha256" in str(err.value) and "encode it again" in str(err.value)
    )
    assert not (tmp_path / "index" / "index.json").exists()
    queries = np.ones((3, 32), dtype=np.float32)
    with pytest.raises(DataError, match="sha256") as err:
        S.search_torch(folder, queries, 5, progress=False)
    assert err.value.file == str(damaged)
    # the pids too, and the rows an AR2 round looks up
    from pipeline.ar2.data import lookup_embeddings

    with pytest.raises(DataError, match="sha256"):
        lookup_embeddings(folder, ["d59"])
    pq.write_table(pa.table({"pid": [f"x{i}" for i in range(30)]}), folder / "shard0of2.pids.parquet")
    with pytest.raises(DataError, match="sha256") as err:
        E.EmbeddingSet(folder).ids()
    assert err.value.file == str(folder / "shard0of2.pids.parquet")


def test_an_intact_folder_is_hashed_as_it_is_read_and_without_digests_is_not_checked(tmp_path, retriever):
    corpus = tmp_path / "corpus.parquet"
    make_corpus(corpus, n=40)
    folder = tmp_path / "emb"
    manifest = encode_all(retriever, corpus, folder, 2)
    rows = np.concatenate([chunk for _, chunk in E.EmbeddingSet(folder).iter_rows(7)])
    assert rows.shape == (40, 32) and rows.flags.writeable
    for entry in manifest["shards"]:  # as `gather --no-checksums` writes it
        del entry["sha256"], entry["ids_sha256"]
    (folder / "manifest.json").write_text(json.dumps(manifest))
    _garbage_of_the_same_size(folder / "shard0of2.npy")
    assert len(list(E.EmbeddingSet(folder).iter_rows(7))) == 6


def _saved_retriever(tmp_path, shared=True):
    make_tiny_encoder(tmp_path / "hf", seed=0)
    folder = tmp_path / "retriever"
    Retriever.from_pretrained(str(tmp_path / "hf"), RetrieverSettings(shared_towers=shared)).save(folder)
    return folder


@pytest.mark.parametrize("tower", ["", "passage_encoder"])  # the query tower is the folder's root
@pytest.mark.parametrize("how", ["truncated", "same size"])
def test_a_damaged_model_file_is_refused_naming_it(tmp_path, how, tower):
    folder = _saved_retriever(tmp_path, shared=False)
    weights = folder / tower / "model.safetensors"
    data = bytearray(weights.read_bytes())
    if how == "truncated":
        weights.write_bytes(data[:100])
    else:
        data[-10:] = b"\x00" * 10
        weights.write_bytes(bytes(data))
    with pytest.raises(DataError) as err:
        Retriever.load(folder)
    assert err.value.file == str(weights), str(err.value)
    assert "delete the model folder" in str(err.value)


def test_a_truncated_model_without_recorded_digests_names_the_file(tmp_path):
    # a folder saved before the digests were recorded: safetensors' own error named no file
    folder = _saved_retriever(tmp_path)
    (folder / "checksums.json").unlink()
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(DataError) as err:
        Retriever.load(folder)
    assert err.value.file == str(weights) and "cannot load the model weights" in str(err.value)


def test_a_damaged_ranker_head_is_refused(tmp_path):
    from pipeline.retrieval.ranker import HEAD_FILE, Ranker, RankerSettings

    make_tiny_encoder(tmp_path / "hf", seed=0)
    Ranker.from_pretrained(str(tmp_path / "hf"), RankerSettings(max_len=16)).save(tmp_path / "ranker")
    head = tmp_path / "ranker" / HEAD_FILE
    head.write_bytes(head.read_bytes()[:-8] + b"\x00" * 8)
    with pytest.raises(DataError, match="sha256") as err:
        Ranker.load(tmp_path / "ranker")
    assert err.value.file == str(head)


def test_model_files_follow_the_umask(tmp_path):
    # issue 28.11: safetensors wrote model.safetensors 0600 whatever the umask
    import os

    old = os.umask(0o022)
    os.umask(old)
    folder = _saved_retriever(tmp_path)
    modes = {
        p.relative_to(folder).as_posix(): p.stat().st_mode & 0o777 for p in folder.rglob("*") if p.is_file()
    }
    assert "model.safetensors" in modes
    assert set(modes.values()) == {0o666 & ~old}, modes

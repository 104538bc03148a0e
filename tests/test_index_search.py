"""FAISS index building and dense search: backends agree, sharding is invisible, ties are ordered."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import torch
from stage_args import encode_corpus

from pipeline.core.config import ConfigError
from pipeline.retrieval import embeddings as E
from pipeline.retrieval import index as I
from pipeline.retrieval import search as S
from pipeline.retrieval.model import Retriever, RetrieverSettings, make_tiny_encoder
from pipeline.retrieval.runs import read_run


def write_embeddings(folder, vectors, pids, shards):
    """Write fp16 shards + manifest the way encode_corpus does."""
    for i in range(shards):
        start, end = E.shard_bounds(len(vectors), i, shards)
        npy, ids = E.shard_paths(folder, i, shards)
        with E.EmbeddingWriter(npy, ids, end - start, vectors.shape[1]) as writer:
            writer.write(pids[start:end], vectors[start:end])
    return E.gather(folder, shards, model="random", source="random")


def unit(x):
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture(scope="module")
def random_set(tmp_path_factory):
    """600 random unit vectors in 3 shards; pids are a shuffled numbering so pid order != row order."""
    rng = np.random.default_rng(0)
    vectors = unit(rng.standard_normal((600, 24)))
    pids = [f"p{j:04d}" for j in rng.permutation(600)]
    folder = tmp_path_factory.mktemp("emb")
    write_embeddings(folder, vectors, pids, 3)
    queries = unit(rng.standard_normal((40, 24)))
    return folder, queries, pids


def as_pids(rows, pids):
    return [[pids[r] for r in row if r >= 0] for row in rows]


def test_faiss_flat_and_torch_agree(tmp_path, random_set):
    folder, queries, pids = random_set
    I.build_index(folder, tmp_path / "flat", factory="Flat", progress=False)
    f_rows, f_scores, f_pids = S.search_faiss(tmp_path / "flat", queries, 10, progress=False)
    t_rows, t_scores, t_pids = S.search_torch(
        folder, queries, 10, chunk_rows=37, query_batch=16, progress=False
    )
    assert f_pids.to_pylist() == t_pids.to_pylist() == pids
    np.testing.assert_array_equal(f_rows, t_rows)
    np.testing.assert_allclose(f_scores, t_scores, atol=1e-6)
    # ... and both equal a brute-force numpy ranking over the stored fp16 vectors.
    stored = np.concatenate([c for _, c in E.EmbeddingSet(folder).iter_rows(1000)]).astype(np.float32)
    expected = np.argsort(-(queries @ stored.T), axis=1, kind="stable")[:, :10]
    np.testing.assert_array_equal(t_rows, expected)
    assert np.all(np.diff(t_scores, axis=1) <= 0)


@pytest.mark.parametrize("parts", [2, 3])
def test_sharded_index_equals_unsharded(tmp_path, random_set, parts):
    folder, queries, _ = random_set
    one = I.build_index(folder, tmp_path / "one", factory="Flat", progress=False)
    many = I.build_index(folder, tmp_path / "many", factory="Flat", shards=parts, progress=False)
    assert len(one["shards"]) == 1 and len(many["shards"]) == parts
    assert sum(s["count"] for s in many["shards"]) == 600
    rows1, scores1, _ = S.search_faiss(tmp_path / "one", queries, 25, progress=False)
    rows2, scores2, _ = S.search_faiss(tmp_path / "many", queries, 25, query_batch=7, progress=False)
    np.testing.assert_array_equal(rows1, rows2)
    np.testing.assert_allclose(scores1, scores2, atol=1e-6)


def test_a_rebuild_with_another_part_count_leaves_only_its_own_parts(tmp_path, random_set):
    """index.shards 1 -> 2 in the same folder (issue 28, item 1): the old shard0of1 files go."""
    folder, queries, _ = random_set
    out = tmp_path / "index"
    I.build_index(folder, out, factory="Flat", progress=False)
    (out / "notes.txt").write_text("not ours")
    manifest = I.build_index(folder, out, factory="Flat", shards=2, progress=False)
    listed = {name for entry in manifest["shards"] for name in (entry["index"], entry["pids"])}
    assert {p.name for p in out.iterdir()} == listed | {"index.json", "notes.txt"}
    rows, _, _ = S.search_faiss(out, queries, 5, progress=False)
    assert rows.shape == (len(queries), 5)


def test_shard_groups():
    assert I.shard_groups(3, 1) == [[0, 1, 2]]
    assert I.shard_groups(3, 3) == [[0], [1], [2]]
    assert I.shard_groups(5, 2) == [[0, 1], [2, 3, 4]]
    with pytest.raises(ConfigError, match="index.shards"):
        I.shard_groups(2, 3)


@pytest.mark.parametrize(
    "names", [["m", "c", "y", "z", "k", "q"], ["m", "z", "c", "y", "k", "q"], ["m", "z", "y", "c", "k", "q"]]
)
def test_ties_are_ordered_by_pid_everywhere(tmp_path, names):
    """Six passages share one vector: ranks follow pid order, and the cut at k keeps the smallest pids.

    Shard 1 (rows 10-19) holds three of them, the smallest pid at each position in turn: whichever
    two of three tied rows a plain top-2 returns, one case loses the smallest pid.
    """
    rng = np.random.default_rng(1)
    vectors = unit(rng.standard_normal((40, 8)))
    dup_rows = [3, 11, 13, 17, 25, 38]
    vectors[dup_rows] = vectors[3]
    pids = [f"x{i:02d}" for i in range(40)]
    for row, pid in zip(dup_rows, names):
        pids[row] = pid
    folder = tmp_path / "emb"
    write_embeddings(folder, vectors, pids, 4)
    query = vectors[3:4].astype(np.float32)
    I.build_index(folder, tmp_path / "one", factory="Flat", progress=False)
    I.build_index(folder, tmp_path / "four", factory="Flat", shards=4, progress=False)
    for k, expected in ((2, ["c", "k"]), (3, ["c", "k", "m"])):
        results = [
            S.search_faiss(tmp_path / "one", query, k, progress=False),
            S.search_faiss(tmp_path / "four", query, k, progress=False),
            S.search_torch(folder, query, k, chunk_rows=4, progress=False),
            S.search_torch(folder, query, k, chunk_rows=1000, progress=False),
        ]
        for rows, _, all_pids in results:
            assert as_pids(rows, all_pids.to_pylist()) == [expected]
    rows, _, all_pids = S.search_torch(folder, query, 8, chunk_rows=3, progress=False)
    assert as_pids(rows, all_pids.to_pylist())[0][:6] == ["c", "k", "m", "q", "y", "z"]


def test_topk_merge_by_hand():
    # rows 0..3 with pid ranks [2, 0, 3, 1]; tie between rows 0 and 1 at 0.5 -> row 1 (rank 0) first.
    top = S.TopK(1, 3, np.array([2, 0, 3, 1]))
    top.add(0, np.array([[0.5, 0.1]], np.float32), np.array([[0, 2]]))
    top.add(0, np.array([[0.5, 0.9, 0.0]], np.float32), np.array([[1, 3, -1]]))
    np.testing.assert_array_equal(top.rows, [[3, 1, 0]])
    np.testing.assert_allclose(top.scores, [[0.9, 0.5, 0.5]])


def test_chunk_candidates_keep_boundary_ties():
    scores = torch.tensor([[0.1, 0.7, 0.7, 0.7, 0.2], [0.9, 0.8, 0.1, 0.0, 0.3]])
    values, cols = S.chunk_candidates(scores, 2)
    assert values.shape[1] == 3  # widened for row 0's three-way tie at the cut
    assert sorted(cols[0].tolist()) == [1, 2, 3]
    assert cols[1].tolist()[:2] == [0, 1]


def test_ivf_exhaustive_equals_flat_and_approximate_indexes_work(tmp_path, random_set):
    folder, queries, _ = random_set
    I.build_index(folder, tmp_path / "flat", factory="Flat", progress=False)
    ivf = I.build_index(folder, tmp_path / "ivf", factory="IVF4,Flat", train_size=300, seed=3, progress=False)
    assert ivf["trained_on"] == 300
    flat_rows, _, _ = S.search_faiss(tmp_path / "flat", queries, 10, progress=False)
    ivf_rows, _, _ = S.search_faiss(tmp_path / "ivf", queries, 10, nprobe=4, progress=False)
    np.testing.assert_array_equal(ivf_rows, flat_rows)
    for factory in ("HNSW16", "IVF4,PQ4x4", "SQfp16"):
        I.build_index(folder, tmp_path / factory, factory=factory, train_size=600, progress=False)
        rows, scores, _ = S.search_faiss(tmp_path / factory, queries, 10, nprobe=4, progress=False)
        assert all(len(set(r)) == 10 and r.min() >= 0 for r in rows)
        assert np.all(np.diff(scores, axis=1) <= 0)


def test_bad_factory_and_untrainable_index_are_config_errors(tmp_path, random_set):
    folder, _, _ = random_set
    with pytest.raises(ConfigError, match="not a valid FAISS index_factory"):
        I.build_index(folder, tmp_path / "x", factory="NoSuchIndex", progress=False)
    with pytest.raises(ConfigError, match="cannot be trained on 20 vectors"):
        I.build_index(folder, tmp_path / "y", factory="IVF64,Flat", train_size=20, progress=False)
    assert not (tmp_path / "x" / "index.json").exists()


def test_run_table_drops_missing_and_ranks_from_one():
    import pyarrow as pa

    rows = np.array([[2, 0, -1], [1, -1, -1]])
    scores = np.array([[0.9, 0.4, -np.inf], [0.3, -np.inf, -np.inf]], np.float32)
    table = S.run_table(["qa", "qb"], rows, scores, pa.array(["a", "b", "c"]))
    assert table.to_pydict() == {
        "qid": ["qa", "qa", "qb"],
        "pid": ["c", "a", "b"],
        "rank": [1, 2, 1],
        "score": pytest.approx([0.9, 0.4, 0.3]),
    }


def test_search_cli_backends_write_identical_valid_runs(tmp_path, capsys):
    make_tiny_encoder(tmp_path / "hf", seed=0)
    model = tmp_path / "model"
    Retriever.from_pretrained(str(tmp_path / "hf"), RetrieverSettings(base="tiny", passage_max_len=32)).save(
        model
    )
    rng = np.random.default_rng(0)
    words = "alpha beta gamma delta omega sigma kappa".split()
    corpus = pd.DataFrame(
        {
            "pid": [f"d{i}" for i in range(30)],
            "title": ["t"] * 30,
            "text": [" ".join(rng.choice(words, 6)) for _ in range(30)],
        }
    )
    corpus.to_parquet(tmp_path / "corpus.parquet")
    queries = pd.DataFrame({"qid": ["q1", "q2"], "text": ["alpha beta", "omega"], "answers": [[], []]})
    queries.to_parquet(tmp_path / "queries.parquet")
    encode_corpus(model, tmp_path / "corpus.parquet", tmp_path / "emb", 2, "--device", "cpu", "--no-progress")
    assert (
        I.main(
            [
                "--embeddings",
                str(tmp_path / "emb"),
                "--out-dir",
                str(tmp_path / "idx"),
                "--shards",
                "2",
                "--no-progress",
            ]
        )
        == 0
    )
    common = [
        "--model",
        str(model),
        "--queries",
        str(tmp_path / "queries.parquet"),
        "--depth",
        "50",
        "--device",
        "cpu",
        "--no-progress",
    ]
    assert S.main(common + ["--out", str(tmp_path / "faiss.parquet"), "--index", str(tmp_path / "idx")]) == 0
    assert (
        S.main(
            common
            + [
                "--out",
                str(tmp_path / "torch.parquet"),
                "--backend",
                "torch",
                "--embeddings",
                str(tmp_path / "emb"),
                "--chunk-rows",
                "7",
            ]
        )
        == 0
    )
    faiss_run = read_run(tmp_path / "faiss.parquet", known_qids={"q1", "q2"})
    torch_run = read_run(tmp_path / "torch.parquet")
    assert len(faiss_run) == 60  # depth 50 > 30 passages: every passage, ranks 1..30
    assert faiss_run.groupby("qid")["rank"].max().tolist() == [30, 30]
    pd.testing.assert_frame_equal(faiss_run[["qid", "pid", "rank"]], torch_run[["qid", "pid", "rank"]])
    np.testing.assert_allclose(faiss_run["score"], torch_run["score"], atol=1e-6)
    assert pq.read_schema(tmp_path / "faiss.parquet").field("rank").type == "int32"
    # Mining depth: 3 negatives must survive q1's 5 positives -> top 8 (×3 = 24 with answer matches
    # excluded); the document of a mining search has no depth (MiningSearchJob).
    qrels = pd.DataFrame(
        {"qid": ["q1"] * 5 + ["q2"], "pid": [f"d{i}" for i in range(6)], "relevance": [1] * 6}
    )
    qrels.to_parquet(tmp_path / "qrels.parquet")
    mining = common[: common.index("--depth")] + [
        "--device",
        "cpu",
        "--no-progress",
        "--index",
        str(tmp_path / "idx"),
        "--settings-json",
        '{"negatives": 3}',
        "--mining-qrels",
        str(tmp_path / "qrels.parquet"),
    ]
    for extra, depth in (([], 8), (["--exclude-answer-match"], 24), (["--negatives", "4"], 9)):
        assert S.main(mining + extra + ["--out", str(tmp_path / "mine.parquet")]) == 0
        mined = read_run(tmp_path / "mine.parquet")
        assert mined.groupby("qid")["rank"].max().tolist() == [depth, depth]
    # negatives without the qrels, a depth with them: a setting the search would not read
    for argv, message in (
        (mining[:-2] + ["--negatives", "3"], "--negatives: not read by a search without --mining-qrels"),
        (mining + ["--depth", "5"], "--depth: not read by a mining search"),
    ):
        with pytest.raises(SystemExit):
            S.main(argv + ["--out", str(tmp_path / "x.parquet")])
        assert message in capsys.readouterr().err
    # the mining document is not a search's, nor the other way round: one line naming the key
    with pytest.raises(ConfigError, match="unknown key.*negatives"):
        S.main(mining[:-2] + ["--out", str(tmp_path / "x.parquet")])

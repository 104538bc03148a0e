"""Hybrid retrieval (pipeline.retrieval.fusion, pipeline.evaluation.hybrid): RRF and the weighted sum against hand-computed
values, the dev-chosen weight, and the CLI's outputs and errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipeline.core.schemas import CORPUS_SCHEMA, QRELS_SCHEMA, QUERIES_SCHEMA, RUN_SCHEMA
from pipeline.core.storage import DataError, write_table
from pipeline.evaluation import hybrid
from pipeline.retrieval import fusion
from pipeline.retrieval.runs import read_run


def _run(rows) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["qid", "pid", "rank", "score"])


def _ranked(qid: str, pids: str, scores: list[float], ranks: list[int] | None = None) -> list[tuple]:
    """Run rows of one query: its pids (a letter each) in row order, ranked 1..n unless ``ranks``."""
    return list(zip([qid] * len(pids), pids, ranks or range(1, len(pids) + 1), scores))


def _as_lists(run: pd.DataFrame) -> dict[str, list[str]]:
    return {q: g.sort_values("rank")["pid"].tolist() for q, g in run.groupby("qid")}


def test_rrf_matches_hand_computed_scores():
    sparse = _run([("q1", "a", 1, 9.0), ("q1", "b", 2, 8.0)])
    dense = _run([("q1", "b", 1, 0.9), ("q1", "c", 2, 0.8)])
    fused = fusion.rrf_fuse([sparse, dense], k=60, depth=10)
    assert fused["pid"].tolist() == ["b", "a", "c"]
    assert fused["rank"].tolist() == [1, 2, 3]
    np.testing.assert_allclose(fused["score"], [1 / 61 + 1 / 62, 1 / 61, 1 / 62], rtol=1e-6)
    assert fused["score"].dtype == np.float32 and fused["rank"].dtype == np.int32


def test_rrf_ties_are_broken_by_pid_whatever_the_row_order():
    one = fusion.rrf_fuse([_run([("q1", "y", 1, 1.0)]), _run([("q1", "x", 1, 1.0)])], depth=5)
    two = fusion.rrf_fuse([_run([("q1", "x", 1, 1.0)]), _run([("q1", "y", 1, 1.0)])], depth=5)
    assert one["pid"].tolist() == two["pid"].tolist() == ["x", "y"]


def test_rrf_truncates_to_depth_per_query():
    sparse = _run([("q1", p, r, 1.0) for r, p in enumerate("abcde", 1)] + [("q2", "z", 1, 1.0)])
    fused = fusion.rrf_fuse([sparse], depth=3)
    assert _as_lists(fused) == {"q1": ["a", "b", "c"], "q2": ["z"]}


def test_minmax_per_query_and_constant_queries():
    run = _run(_ranked("q1", "abc", [3.0, 2.0, 1.0]) + _ranked("q2", "de", [5.0, 5.0]))
    assert fusion.minmax_per_query(run).tolist() == [1.0, 0.5, 0.0, 1.0, 1.0]


def test_weighted_sum_matches_hand_computed_scores():
    # sparse normalised: a 1, b 0.5, c 0; dense normalised: b 1, d 0; missing -> 0.
    sparse = _run([("q1", "a", 1, 30.0), ("q1", "b", 2, 20.0), ("q1", "c", 3, 10.0)])
    dense = _run([("q1", "b", 1, 0.9), ("q1", "d", 2, 0.5)])
    union = fusion.normalised_union(sparse, dense)
    fused = fusion.weighted_fuse(union, 0.25, depth=10)
    expected = {"a": 0.75, "b": 0.25 + 0.375, "c": 0.0, "d": 0.0}
    assert fused["pid"].tolist() == ["a", "b", "c", "d"]  # c, d tie at 0: c is in a run
    np.testing.assert_allclose(fused["score"], [expected[p] for p in fused["pid"]], atol=1e-7)


@pytest.mark.parametrize("weight, source", [(0.0, "sparse"), (1.0, "dense")])
def test_the_grid_ends_reproduce_each_run(weight, source):
    rng = np.random.default_rng(0)
    pids = [f"p{i}" for i in range(8)]
    runs = {}
    for name in ("sparse", "dense"):
        scores = rng.normal(size=len(pids))
        order = np.argsort(-scores)
        runs[name] = _run([("q1", pids[i], r, scores[i]) for r, i in enumerate(order, 1)])
    fused = fusion.weighted_fuse(fusion.normalised_union(runs["sparse"], runs["dense"]), weight, depth=8)
    assert fused["pid"].tolist() == runs[source]["pid"].tolist()


@pytest.mark.parametrize(
    "weight, expected",
    [
        (0.0, {"q1": ["a", "b", "c", "d", "e"], "q2": ["x", "y"]}),  # BM25's order, then dense-only ones
        (1.0, {"q1": ["c", "d", "e", "a", "b"], "q2": ["x", "y"]}),
    ],
)  # the dense order, then BM25-only ones
def test_grid_ends_with_partial_overlap_and_a_query_bm25_left_out(weight, expected):
    sparse = _run([("q1", "a", 1, 3.0), ("q1", "b", 2, 2.0), ("q1", "c", 3, 1.0)])
    dense = _run(_ranked("q1", "cde", [0.9, 0.5, 0.1]) + _ranked("q2", "yx", [0.1, 0.9], ranks=[2, 1]))
    fused = fusion.weighted_fuse(fusion.normalised_union(sparse, dense), weight, depth=10)
    assert _as_lists(fused) == expected


def test_weight_outside_unit_interval_is_refused():
    union = fusion.normalised_union(_run([("q1", "a", 1, 1.0)]), _run([("q1", "a", 1, 1.0)]))
    with pytest.raises(ValueError, match="in \\[0, 1\\]"):
        fusion.weighted_fuse(union, 1.5)


def test_choose_weight_takes_the_best_and_the_first_of_ties():
    union = fusion.normalised_union(
        _run([("q1", "a", 1, 2.0), ("q1", "b", 2, 1.0)]), _run([("q1", "b", 1, 2.0), ("q1", "a", 2, 1.0)])
    )

    def b_first(run):  # 1 when b is ranked first
        return float(run.sort_values("rank")["pid"].iloc[0] == "b")

    weight, scores = fusion.choose_weight(union, [0.0, 0.4, 0.6, 1.0], b_first)
    assert scores == {0.0: 0.0, 0.4: 0.0, 0.6: 1.0, 1.0: 1.0}
    assert weight == 0.6


# ---- the CLI on a tiny dataset ----------------------------------------------------------------------

CORPUS = [
    ("p1", "Paris", "Paris is the capital of France."),
    ("p2", "Lyon", "Lyon is a city."),
    ("p3", "Rome", "Rome is the capital of Italy."),
    ("p4", "Milan", "Milan is a city."),
]
QUERIES = [("d1", "capital of France?", ["Paris"]), ("d2", "capital of Italy?", ["Rome"])]
QRELS = [("d1", "p1", 1), ("d2", "p3", 1)]
# BM25 ranks a wrong passage first on both dev queries, the dense run the right one: w must lean dense.
DEV_SPARSE = [("d1", "p2", 1, 9.0), ("d1", "p1", 2, 1.0), ("d2", "p4", 1, 9.0), ("d2", "p3", 2, 1.0)]
DEV_DENSE = [("d1", "p1", 1, 0.9), ("d1", "p2", 2, 0.1), ("d2", "p3", 1, 0.9), ("d2", "p4", 2, 0.1)]


def _write(path: Path, rows, schema) -> str:
    write_table(path, pd.DataFrame(rows, columns=schema.names), schema)
    return str(path)


# What the weight is chosen on, by flag name: (file name, rows, schema).
DEV_TABLES = {
    "corpus": ("corpus", CORPUS, CORPUS_SCHEMA),
    "dev_queries": ("queries.dev", QUERIES, QUERIES_SCHEMA),
    "dev_qrels": ("qrels.dev", QRELS, QRELS_SCHEMA),
    "dev_sparse": ("bm25.dev", DEV_SPARSE, RUN_SCHEMA),
    "dev_dense": ("dense.dev", DEV_DENSE, RUN_SCHEMA),
}


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    tables = {
        name: _write(tmp_path / f"{file}.parquet", rows, schema)
        for name, (file, rows, schema) in DEV_TABLES.items()
    }
    return {**tables, "dir": str(tmp_path)}


# On the evaluated split BM25 is right and the dense run wrong: choosing w there would give w = 0.
TEST_SPARSE = [("t1", "p1", 1, 9.0), ("t1", "p2", 2, 1.0)]
TEST_DENSE = [("t1", "p2", 1, 0.9), ("t1", "p1", 2, 0.1)]


@pytest.mark.parametrize("metric, low", [("R@1", 0.0), ("hit@1", 0.0), ("MRR@10", 0.5)])
def test_weighted_cli_picks_w_on_dev_and_writes_a_valid_run(files, metric, low):
    out, choice = Path(files["dir"]) / "fused.parquet", Path(files["dir"]) / "fusion.json"
    sparse = _write(Path(files["dir"]) / "bm25.test.parquet", TEST_SPARSE, RUN_SCHEMA)
    dense = _write(Path(files["dir"]) / "dense.test.parquet", TEST_DENSE, RUN_SCHEMA)
    argv = [
        "weighted",
        "--sparse",
        sparse,
        "--dense",
        dense,
        "--out",
        str(out),
        "--choice-out",
        str(choice),
        "--select-metric",
        metric,
        "--weights",
        "0",
        "0.3",
        "0.7",
        "1",
        "--depth",
        "2",
    ]
    argv += [
        f"--{key.replace('_', '-')}={files[key]}"
        for key in ("dev_sparse", "dev_dense", "dev_queries", "dev_qrels", "corpus")
    ]
    assert hybrid.main(argv) == 0
    record = json.loads(choice.read_text())
    # w=0 and w=0.3 keep BM25's wrong top passage (0.3·0 + 0.7·1 > 0.3·1 + 0.7·0); 0.7 and 1 fix it.
    assert record["dev_metric_by_weight"] == {"0": low, "0.3": low, "0.7": 1.0, "1": 1.0}
    assert record["weight_dense"] == 0.7 and record["metric"] == metric and record["selected_on"] == "dev"
    assert _as_lists(read_run(out)) == {"t1": ["p2", "p1"]}  # w = 0.7 applied to the evaluated split
    # The evaluation of the fused run records the weight its numbers were made with.
    from pipeline.evaluation import evaluate
    from pipeline.evaluation.seed_metrics import aggregate_seeds

    test_queries = _write(
        Path(files["dir"]) / "queries.test.parquet", [("t1", "capital?", ["Paris"])], QUERIES_SCHEMA
    )
    test_qrels = _write(Path(files["dir"]) / "qrels.test.parquet", [("t1", "p1", 1)], QRELS_SCHEMA)
    metrics_path = Path(files["dir"]) / "metrics.json"
    assert (
        evaluate.main(
            [
                "--run",
                str(out),
                "--queries",
                test_queries,
                "--qrels",
                test_qrels,
                "--corpus",
                files["corpus"],
                "--dataset",
                "toy",
                "--method",
                "hybrid_wsum_x",
                "--split",
                "test",
                "--ks",
                "1",
                "--fusion",
                str(choice),
                "--out",
                str(metrics_path),
            ]
        )
        == 0
    )
    evaluated = json.loads(metrics_path.read_text())
    assert evaluated["fusion"] == {
        "fusion": "weighted_sum",
        "weight_dense": 0.7,
        "selected_on": "dev",
        "metric": metric,
    }
    other = {**evaluated, "fusion": {**evaluated["fusion"], "weight_dense": 0.3}}
    seeds = aggregate_seeds([evaluated, other], None, ["a", "b"], seeds=[0, 1])
    assert [s["fusion"]["weight_dense"] for s in seeds["per_seed"]] == [0.7, 0.3]
    assert "fusion" not in aggregate_seeds(
        [evaluated, evaluated], None, ["a", "b"], seeds=[0, 1]
    )  # per seed only


def _weighted(files, tmp_path, **override):
    paths = {key: files[key] for key in ("dev_sparse", "dev_dense", "dev_queries", "dev_qrels", "corpus")}
    paths.update(override)
    argv = [
        "weighted",
        "--sparse",
        files["dev_sparse"],
        "--dense",
        files["dev_dense"],
        "--out",
        str(tmp_path / "o.parquet"),
        "--choice-out",
        str(tmp_path / "o.json"),
    ]
    return hybrid.main(argv + [f"--{k.replace('_', '-')}={v}" for k, v in paths.items()])


def test_a_dev_run_with_a_foreign_query_names_the_file(files, tmp_path):
    bad = _write(tmp_path / "bad.parquet", DEV_DENSE + [("t9", "p1", 1, 0.5)], RUN_SCHEMA)
    with pytest.raises(DataError) as err:
        _weighted(files, tmp_path, dev_dense=bad)
    assert err.value.field == "qid" and str(err.value.file).endswith("bad.parquet")


def test_a_dense_dev_run_missing_a_query_is_refused(files, tmp_path):
    short = _write(tmp_path / "short.parquet", [r for r in DEV_DENSE if r[0] != "d2"], RUN_SCHEMA)
    with pytest.raises(DataError, match="not in the dense run"):
        _weighted(files, tmp_path, dev_dense=short)


def test_rrf_cli_refuses_runs_of_different_splits(files, tmp_path):
    other = _write(tmp_path / "dense.test.parquet", [("t1", "p1", 1, 0.5)], RUN_SCHEMA)
    with pytest.raises(DataError, match="same split") as err:
        hybrid.main(
            ["rrf", "--sparse", files["dev_sparse"], "--dense", other, "--out", str(tmp_path / "x.parquet")]
        )
    assert err.value.file is not None and err.value.field == "qid"
    assert not (tmp_path / "x.parquet").exists()


def test_unknown_selection_metric_is_a_clear_error(files):
    for metric in ("P@3", "MRR@5", "hit@0"):  # MRR is computed at 10 only
        with pytest.raises(DataError, match=f"unknown selection metric '{metric}'"):
            hybrid.dev_metric(files["dev_queries"], files["dev_qrels"], files["corpus"], {"p1"}, metric)


@pytest.mark.slow
def test_the_dag_refuses_to_choose_w_on_the_evaluated_split(tmp_path):
    from test_workflow import snakemake

    overlay = {"methods": ["bm25", "hybrid_wsum_zeroshot"], "eval": {"split": "dev"}}
    proc = snakemake(tmp_path, "-n", "results/synthkb/metrics.json", overlay=overlay, check=False)
    assert proc.returncode != 0
    assert "hybrid.select_split (dev) is the evaluated split" in proc.stdout + proc.stderr

"""bench/st_clean_vs_raw.py at a tiny size: the triplets it writes, and 2 training steps per run of the
whole comparison (prepare, BM25 negatives, sieve-clean, SentenceTransformerTrainer, the evaluator, the
paired interval). No timing is asserted, and the figures of a 2-step run mean nothing."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def bench():
    pytest.importorskip("sentence_transformers")
    spec = importlib.util.spec_from_file_location("st_clean_vs_raw", REPO / "bench" / "st_clean_vs_raw.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_squad_triplets_are_each_querys_top_bm25_negatives_in_rank_order(bench, tmp_path):
    data = tmp_path / "data"
    bench.prepare("squad36", data, entities=0, fn_share=None)
    negatives = bench.mine_bm25(data, tmp_path)
    raw, labels, counts = bench.write_triplets(data, negatives, tmp_path, n_negatives=3, n_queries=5, seed=0)
    assert labels is None  # SQuAD has no qrels_all: the report gets no FN recall
    rows = pq.read_table(raw).to_pydict()
    assert list(rows) == ["anchor", "positive", "negative"]
    assert counts == {"train_queries": 5, "triplets": 15}

    corpus = pd.read_parquet(data / "corpus.parquet")
    strings = dict(zip(corpus["pid"], map(bench.passage_string, corpus["title"], corpus["text"])))
    queries = pd.read_parquet(data / "queries.train.parquet")
    qid_of = dict(zip(queries["text"], queries["qid"]))
    qrels = pd.read_parquet(data / "qrels.train.parquet")
    mined = pd.read_parquet(negatives)
    for i in range(0, 15, 3):
        anchor = rows["anchor"][i]
        assert rows["anchor"][i : i + 3] == [anchor] * 3
        qid = qid_of[anchor]
        own = set(qrels.loc[qrels["qid"] == qid, "pid"])
        assert rows["positive"][i] in {strings[p] for p in own}
        ranked = mined[(mined["qid"] == qid) & ~mined["excluded"]].sort_values("rank")["pid"]
        expected = [strings[p] for p in ranked if p not in own][:3]
        assert rows["negative"][i : i + 3] == expected
        assert rows["positive"][i] not in expected


def test_two_steps_per_run_on_tiny_synthkb(bench, tmp_path):
    pytest.importorskip("accelerate")  # the trainer's; with datasets, in the dev extra
    out = tmp_path / "result.json"
    work = tmp_path / "work"
    argv = ["--dataset", "synthkb", "--entities", "40", "--fn-share", "none", "--tiny", "--steps", "2"]
    argv += ["--batch", "4", "--seeds", "0", "1", "--negatives", "4", "--train-queries", "8", "--no-zeroshot"]
    result = bench.main([*argv, "--work", str(work), "--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))

    assert result["counts"]["triplets"] == 32
    report = json.loads((work / "cleaned.report.json").read_text())
    # What was trained on as "cleaned" is the command's output: the kept negatives, one row each.
    assert result["counts"]["cleaned_triplets"] == report["decisions"]["kept"] < 32
    assert pq.read_metadata(work / "cleaned.parquet").num_rows == report["decisions"]["kept"]
    # synthkb's qrels_all of the train queries reached the command as labels: FN recall is reported.
    assert result["cleaning"]["detection"] is not None

    for variant in ("raw", "cleaned"):
        assert set(result["per_seed"][variant]) == {0, 1}
        for metrics in result["per_seed"][variant].values():
            assert {"hit_all@1", "hit_all@5", "R@5"} <= set(metrics)
            assert all(0.0 <= v <= 1.0 for v in metrics.values())
    for metric in ("hit_all@1", "hit_all@5", "R@5"):
        d = result["cleaned_minus_raw"][metric]
        per_seed = [
            result["per_seed"]["cleaned"][s][metric] - result["per_seed"]["raw"][s][metric] for s in (0, 1)
        ]
        assert d["n"] == 2 and d["mean"] == pytest.approx(sum(per_seed) / 2)
        assert d["ci_low"] <= d["mean"] <= d["ci_high"] and math.isfinite(d["ci_high"])
    assert result["settings"]["steps"] == 2 and result["machine"]["cpu"]

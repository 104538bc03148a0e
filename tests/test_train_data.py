"""Training examples: positives, negative exclusion, deterministic sampling, sharding, bad input."""

import numpy as np
import pandas as pd
import pytest

from pipeline.core.schemas import QRELS_SCHEMA
from pipeline.core.seeding import item_rng
from pipeline.core.storage import DataError, write_table
from pipeline.training.data import (
    TrainData,
    TrainInputs,
    epoch_order,
    load_queries_with_positives,
    micro_batch_indices,
    sample_negatives,
)


@pytest.fixture()
def files(tmp_path, make_train_files):
    return make_train_files(tmp_path, n_queries=6, n_passages=20, n_candidates=6)


def _data(paths, **kw):
    return TrainData(
        TrainInputs(**paths),
        depth=kw.pop("depth", 4),
        seed=kw.pop("seed", 0),
        **kw,
    )


def test_positive_is_highest_relevance_then_first_row(tmp_path, files):
    qrels = pd.DataFrame(
        {
            "qid": ["q000", "q000", "q000", "q001", "q001"] + [f"q00{i}" for i in (2, 3, 4, 5)],
            "pid": ["p005", "p007", "p008", "p001", "p009", "p002", "p003", "p004", "p005"],
            "relevance": [1, 2, 2, 1, 1, 1, 1, 1, 1],
        }
    )
    write_table(files["qrels"], qrels, QRELS_SCHEMA)
    queries, positives, dropped = load_queries_with_positives(files["queries"], files["qrels"])
    best = dict(zip(queries["qid"], queries["positive"]))
    assert best["q000"] == "p007" and best["q001"] == "p001"
    assert len(positives) == 9 and not dropped


def test_query_without_positive_is_an_error_naming_file_and_qid(files):
    qrels = pd.DataFrame(
        {"qid": ["q000", "q001", "q002"], "pid": ["p000", "p001", "p002"], "relevance": [1, 0, 1]}
    )
    write_table(files["qrels"], qrels, QRELS_SCHEMA)
    with pytest.raises(DataError) as err:
        _data(files)
    assert "q001" in str(err.value) and str(files["qrels"]) in str(err.value)
    data = _data(files, drop_without_positive=True)
    assert data.n_dropped == 4 and sorted(data.qids) == ["q000", "q002"]


def test_negatives_exclude_positives_and_excluded_rows(files):
    data = _data(files, depth=100)
    neg = pd.read_parquet(files["negatives"])
    for i, qid in enumerate(data.qids):
        cands = set(data.passages.pids[data.candidates(i)])
        rows = neg[neg["qid"] == qid]
        assert cands == set(rows.loc[~rows["excluded"] & (rows["pid"] != f"p{i:03d}"), "pid"])
        for epoch in range(3):
            picked = data.passages.pids[data.negatives(i, 3, epoch)]
            assert f"p{i:03d}" not in picked and len(set(picked)) == 3


def test_candidates_are_top_depth_by_rank(files):
    data = _data(files, depth=2)
    neg = pd.read_parquet(files["negatives"]).sort_values("rank")
    first = neg[(neg["qid"] == "q000") & ~neg["excluded"] & (neg["pid"] != "p000")]["pid"].tolist()[:2]
    assert data.passages.pids[data.candidates(data.qids.index("q000"))].tolist() == first


def test_sampling_is_per_query_epoch_and_seed(files):
    a, b = _data(files, seed=1), _data(files, seed=1)
    i = a.qids.index("q003")
    assert np.array_equal(a.negatives(i, 2, 5), b.negatives(i, 2, 5))
    draws = {tuple(a.negatives(i, 2, e)) for e in range(8)}
    assert len(draws) > 1  # a new draw each epoch
    # Order independence: the same stream as item_rng for that (seed, qid, epoch).
    expected = a.candidates(i)[item_rng(1, "q003", 5).choice(len(a.candidates(i)), 2, replace=False)]
    assert np.array_equal(a.negatives(i, 2, 5), expected)


def test_sample_negatives_short_and_empty_lists():
    rng = np.random.default_rng(0)
    short = sample_negatives(np.array([7, 8]), 5, rng)
    assert len(short) == 5 and set(short) == {7, 8}
    pool = np.array([1, 2, 3])
    drawn = sample_negatives(np.array([], dtype=int), 4, rng, pool=pool, exclude=np.array([2]))
    assert len(drawn) == 4 and 2 not in drawn
    with pytest.raises(ValueError):
        sample_negatives(np.array([], dtype=int), 1, rng, pool=np.array([2]), exclude=np.array([2]))


def test_batch_layout(files):
    data = _data(files)
    batch = data.batch(np.array([2, 0]), k=2, epoch=0)
    assert batch.qids == [data.qids[2], data.qids[0]] and batch.group_size == 3
    assert len(batch.passage_texts) == 6
    corpus = pd.read_parquet(files["corpus"]).set_index("pid")
    assert batch.passage_texts[0] == corpus.at[f"p{2:03d}", "text"]  # q002's positive first
    assert batch.passage_texts[3] == corpus.at["p000", "text"]


def test_epoch_order_and_rank_sharding():
    order = epoch_order(10, seed=0, epoch=1)
    assert sorted(order) == list(range(10)) and not np.array_equal(order, epoch_order(10, 0, 2))
    whole = micro_batch_indices(order, 1, 4)
    halves = [micro_batch_indices(order, 1, 4, rank=r, world_size=2) for r in (0, 1)]
    assert np.array_equal(np.concatenate(halves), whole)
    with pytest.raises(ValueError):
        micro_batch_indices(order, 0, 3, rank=0, world_size=2)


def test_pid_missing_from_corpus_names_the_referencing_file(files):
    neg = pd.read_parquet(files["negatives"])
    neg.loc[0, "pid"] = "nowhere"
    neg.loc[0, "excluded"] = False
    neg.loc[0, "rank"] = 0
    write_table(files["negatives"], neg)
    with pytest.raises(DataError) as err:
        _data(files)
    assert "nowhere" in str(err.value) and str(files["negatives"]) in str(err.value)


def test_negatives_for_an_unknown_query_are_an_error(files):
    neg = pd.read_parquet(files["negatives"])
    neg.loc[3, "qid"] = "q999"
    write_table(files["negatives"], neg)
    with pytest.raises(DataError, match="q999"):
        _data(files)

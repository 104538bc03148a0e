"""Hard-negative mining from a ranking (pipeline.retrieval.mining), shared by BM25 and dense mining,
and the dense mining rules end to end against a brute-force ranking."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pipeline.core.schemas import MINED_NEGATIVES_SCHEMA, RUN_SCHEMA
from pipeline.core.storage import DataError, write_table
from pipeline.retrieval import mining


def _run_of(path, rows):
    write_table(path, pd.DataFrame(rows, columns=RUN_SCHEMA.names), RUN_SCHEMA)
    return path


@pytest.fixture
def data(tmp_path, make_sieve_dataset):
    return make_sieve_dataset(tmp_path / "d", n_queries=4, n_filler=12, n_neg=6)


def _full_run(data, depth=8):
    """Every train query ranks its positive(s) first, then its false negative, then fillers d0, d1, ..."""
    qrels = pd.read_parquet(data["qrels"])
    rows = []
    for qid in sorted(pd.read_parquet(data["queries"])["qid"]):
        k = qid[1:]
        ranked = sorted(qrels[qrels.qid == qid]["pid"]) + [f"fn{k}"] + [f"d{j}" for j in range(10)]
        rows += [(qid, pid, r, float(100 - r)) for r, pid in enumerate(ranked[:depth], 1)]
    return rows


def test_positives_are_skipped_and_n_negatives_kept(data, tmp_path):
    run = _run_of(tmp_path / "run.parquet", _full_run(data))
    out = tmp_path / "negs.parquet"
    stats = mining.mine_from_run(run, data["queries"], data["qrels"], data["corpus"], 3, out, source="dense")
    negs = pd.read_parquet(out)
    assert list(negs.columns) == MINED_NEGATIVES_SCHEMA.names
    assert negs.merge(pd.read_parquet(data["qrels"]), on=["qid", "pid"]).empty
    assert negs[negs.qid == "q0"]["pid"].tolist() == ["fn0", "d0", "d1"]
    assert negs[negs.qid == "q0"]["rank"].tolist() == [1, 2, 3]  # rank among the non-positives
    assert set(negs["source"]) == {"dense"} and negs["has_answer"].sum() == 4  # each fnK states answerK
    assert not negs["excluded"].any()
    assert stats["short_queries"] == 0 and stats["answer_matches"] == 4


def test_answer_matches_are_marked_and_the_list_goes_deeper(data, tmp_path):
    run = _run_of(tmp_path / "run.parquet", _full_run(data))
    out = tmp_path / "negs.parquet"
    mining.mine_from_run(
        run, data["queries"], data["qrels"], data["corpus"], 3, out, source="dense", exclude_answer_match=True
    )
    q0 = pd.read_parquet(out).query("qid == 'q0'")
    assert q0["pid"].tolist() == ["fn0", "d0", "d1", "d2"]
    assert q0["excluded"].tolist() == [True, False, False, False]


def test_a_shallow_run_is_counted_not_padded(data, tmp_path):
    run = _run_of(tmp_path / "run.parquet", _full_run(data, depth=3))
    stats = mining.mine_from_run(
        run, data["queries"], data["qrels"], data["corpus"], 5, tmp_path / "negs.parquet", source="dense"
    )
    assert stats["short_queries"] == 4 and stats["run_depth"] == 3


def test_a_query_missing_from_the_run_is_an_error(data, tmp_path):
    rows = [r for r in _full_run(data) if r[0] != "q2"]
    run = _run_of(tmp_path / "run.parquet", rows)
    with pytest.raises(DataError, match="no row in the run") as err:
        mining.mine_from_run(
            run, data["queries"], data["qrels"], data["corpus"], 3, tmp_path / "negs.parquet", source="dense"
        )
    assert err.value.field == "qid" and not (tmp_path / "negs.parquet").exists()


def test_a_run_of_other_queries_is_an_error(data, tmp_path):
    run = _run_of(tmp_path / "run.parquet", _full_run(data) + [("t9", "d0", 1, 1.0)])
    with pytest.raises(DataError) as err:
        mining.mine_from_run(
            run, data["queries"], data["qrels"], data["corpus"], 3, tmp_path / "negs.parquet", source="dense"
        )
    assert err.value.field == "qid"


@pytest.mark.slow
def test_zeroshot_negatives_match_a_brute_force_ranking(tmp_path):
    """The DAG's negatives/zeroshot.parquet on tiny synthkb: the top non-positive passages of an exact
    cosine ranking computed here from the model's own embeddings, and never a positive."""
    import torch
    from test_workflow import TINY, snakemake

    from pipeline.retrieval.model import Retriever

    n = 10
    snakemake(
        tmp_path, "results/synthkb/negatives/zeroshot.parquet", overlay={**TINY, "bm25": {"negatives": n}}
    )
    negs = pd.read_parquet(tmp_path / "results/synthkb/negatives/zeroshot.parquet")
    resources = tmp_path / "resources/synthkb"
    qrels = pd.read_parquet(resources / "qrels.train.parquet")
    assert negs.merge(qrels, on=["qid", "pid"]).empty
    assert set(negs["source"]) == {"zeroshot"}

    corpus = pd.read_parquet(resources / "corpus.parquet")
    queries = pd.read_parquet(resources / "queries.train.parquet")
    retriever = Retriever.load(tmp_path / "results/synthkb/models/zeroshot")
    with torch.no_grad():
        p = (
            retriever.embed_passages(
                retriever.tokenize_passages(corpus["title"].tolist(), corpus["text"].tolist())
            )
            .float()
            .numpy()
        )
        q = retriever.embed_queries(retriever.tokenize_queries(queries["text"].tolist())).float().numpy()
    scores = q @ p.T
    positives = qrels.groupby("qid")["pid"].apply(set).to_dict()
    pids = corpus["pid"].to_numpy()
    mined = {qid: g.sort_values("rank") for qid, g in negs.groupby("qid")}
    assert set(mined) == set(queries["qid"])
    for i, qid in enumerate(queries["qid"]):
        order = np.argsort(-scores[i], kind="stable")
        expected = [pid for pid in pids[order] if pid not in positives.get(qid, set())][:n]
        got = mined[qid]
        assert len(got) == n
        if got["pid"].tolist() != expected:  # only a near-tie may swap neighbours
            # the DAG ranks with its fp16-stored embeddings, whose scores sit within the 1e-4 checked
            # below: two passages closer than that may come in either order
            exact = dict(zip(pids, scores[i]))
            np.testing.assert_allclose(
                [exact[x] for x in got["pid"]], [exact[x] for x in expected], atol=1e-4
            )
        np.testing.assert_allclose(
            got["score"].to_numpy(), [scores[i][pids.tolist().index(x)] for x in got["pid"]], atol=1e-4
        )

"""Metric functions against hand-computed values (reference.md section 5)."""

from __future__ import annotations

import pytest

from pipeline.evaluation.metrics import (
    hit_at_k,
    mean_of,
    mrr_at_k,
    order_metrics,
    qrels_metrics,
    qrels_metrics_per_query,
    recall_at_k,
    top_k_accuracy,
    top_k_accuracy_per_query,
)


def test_top_k_accuracy_counts_misses_in_the_denominator():
    # five questions: first hits at 1, 3, none (no hit or not retrieved), 20, 7
    got = top_k_accuracy([1, 3, None, 20, 7], [1, 5, 20, 100])
    assert got == {"R@1": 1 / 5, "R@5": 2 / 5, "R@20": 4 / 5, "R@100": 4 / 5}


def test_top_k_accuracy_boundary_rank_equal_to_k_is_a_hit():
    assert top_k_accuracy([5, 6], [5]) == {"R@5": 0.5}


def test_top_k_accuracy_rejects_empty_and_bad_k():
    with pytest.raises(ValueError, match="no questions"):
        top_k_accuracy([], [1])
    with pytest.raises(ValueError, match="positive integer"):
        top_k_accuracy([1], [0])


def test_mrr_denominator_is_the_qrels_queries():
    qrels = {"q1": {"a"}, "q2": {"b"}, "q3": {"c"}}
    ranked = {
        "q1": ["x", "a"],  # 1/2
        "q2": ["b"],  # 1
        # q3 absent from the run: 0, still counted
        "q4": ["c"],  # not in qrels: ignored, not in the denominator
    }
    assert mrr_at_k(ranked, qrels) == pytest.approx((0.5 + 1 + 0) / 3)


def test_mrr_uses_first_relevant_and_cuts_at_10():
    qrels = {"q": {"r1", "r2"}}
    at_10 = {"q": [f"n{i}" for i in range(9)] + ["r1", "r2"]}
    at_11 = {"q": [f"n{i}" for i in range(10)] + ["r1"]}
    assert mrr_at_k(at_10, qrels) == pytest.approx(0.1)
    assert mrr_at_k(at_11, qrels) == 0.0
    assert mrr_at_k({"q": ["r2", "r1"]}, qrels) == 1.0
    assert mrr_at_k(at_11, qrels, k=11) == pytest.approx(1 / 11)


def test_hit_and_recall_are_different_things():
    qrels = {"q1": {"a", "b", "c"}, "q2": {"d"}}
    ranked = {"q1": ["a", "x", "b", "y", "c"], "q2": ["z", "d"]}
    assert hit_at_k(ranked, qrels, 1) == 0.5
    assert hit_at_k(ranked, qrels, 2) == 1.0
    assert recall_at_k(ranked, qrels, 1) == pytest.approx((1 / 3 + 0) / 2)
    assert recall_at_k(ranked, qrels, 3) == pytest.approx((2 / 3 + 1) / 2)
    assert recall_at_k(ranked, qrels, 5) == 1.0


def test_missing_query_counts_zero_in_hit_and_recall():
    qrels = {"q1": {"a"}, "q2": {"b"}}
    ranked = {"q1": ["a"]}
    assert hit_at_k(ranked, qrels, 10) == 0.5
    assert recall_at_k(ranked, qrels, 10) == 0.5


def test_qrels_metrics_names_and_absence():
    qrels = {"q1": {"a"}}
    ranked = {"q1": ["x", "a"]}
    got = qrels_metrics(ranked, qrels, [1, 5])
    assert got == {"MRR@10": 0.5, "hit@1": 0.0, "hit@5": 1.0, "recall@1": 0.0, "recall@5": 1.0}
    got_all = qrels_metrics(ranked, qrels, [1, 5], suffix="_all", with_recall=False)
    assert got_all == {"MRR_all@10": 0.5, "hit_all@1": 0.0, "hit_all@5": 1.0}
    assert qrels_metrics(ranked, {}, [1, 5]) == {}


def test_per_query_values_are_what_the_metrics_average():
    assert top_k_accuracy_per_query([1, 3, None], [1, 5]) == {"R@1": [1.0, 0.0, 0.0], "R@5": [1.0, 1.0, 0.0]}
    qrels = {"q1": {"a", "b"}, "q2": {"c"}, "q3": {"d"}}
    ranked = {"q1": ["x", "a", "b"], "q2": ["c"]}  # q3 never ranked: 0 everywhere
    per_query = qrels_metrics_per_query(ranked, qrels, [1, 3], suffix="_all", with_recall=True)
    assert per_query == {
        "MRR_all@10": {"q1": 0.5, "q2": 1.0, "q3": 0.0},
        "hit_all@1": {"q1": 0.0, "q2": 1.0, "q3": 0.0},
        "hit_all@3": {"q1": 1.0, "q2": 1.0, "q3": 0.0},
        "recall_all@1": {"q1": 0.0, "q2": 1.0, "q3": 0.0},
        "recall_all@3": {"q1": 1.0, "q2": 1.0, "q3": 0.0},
    }
    means = qrels_metrics(ranked, qrels, [1, 3], suffix="_all")
    assert means == {name: mean_of(values.values()) for name, values in per_query.items()}
    with pytest.raises(ValueError, match="no values"):
        mean_of([])


def test_qrels_functions_reject_empty_judgements():
    with pytest.raises(ValueError, match="empty"):
        mrr_at_k({"q": ["a"]}, {})
    with pytest.raises(ValueError, match="no relevant"):
        recall_at_k({"q": ["a"]}, {"q": set()}, 5)


def test_metric_order_puts_answer_metrics_first_then_mrr():
    names = [
        "recall@5",
        "hit@100",
        "MRR_all@10",
        "R@100",
        "hit_all@5",
        "hit@5",
        "MRR@10",
        "R@5",
        "R@20",
        "R@1",
        "zeta",
        "recall@100",
    ]
    assert list(order_metrics(dict.fromkeys(names, 0.0))) == [
        "R@1",
        "R@5",
        "R@20",
        "R@100",
        "MRR@10",
        "hit@5",
        "hit@100",
        "recall@5",
        "recall@100",
        "MRR_all@10",
        "hit_all@5",
        "zeta",
    ]

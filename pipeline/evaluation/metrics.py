"""Retrieval metrics as pure functions (reference.md section 5). No I/O, no pandas.

Two families, named apart because the literature uses "recall" for both:

- answer match: ``R@k`` = top-k retrieval accuracy = fraction of ALL evaluated questions with at least
  one answer-matching passage in the top k (DPR). Input: the rank of each question's first match.
- qrels: ``MRR@10``, ``nDCG@10`` (binary relevance: BEIR's and MTEB's headline), ``hit@k`` (>= 1
  relevant in the top k; what papers call "R@50 / R@1k" on MS MARCO) and ``recall@k`` (trec_eval
  style: mean fraction of a query's relevant passages found in the top k). ``R@k`` and ``recall@k``
  are not the same recall: the first asks whether any passage in the top k holds an answer string,
  the second what share of the judged passages the top k holds.
  Every qrels metric averages over the queries in the qrels, so a query the run never answered
  counts as 0 instead of disappearing from the denominator.

Ranked lists are sequences of pids in rank order (rank 1 first); ties were already broken by the run's
``rank`` column, so the order given here is the order scored.

Each metric is the mean (``mean_of``) of its per-query values (``*_per_query``), which the evaluator
also writes out for paired tests over queries (pipeline.evaluation.query_tests).
"""

from __future__ import annotations

import math
from typing import Iterable, Mapping, Sequence

Ranked = Mapping[str, Sequence[str]]
Qrels = Mapping[str, "set[str] | frozenset[str]"]

MRR_K = 10
NDCG_K = 10


def _check_ks(ks: Iterable[int]) -> list[int]:
    ks = list(ks)
    for k in ks:
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"cut-off k must be a positive integer, got {k!r}")
    return ks


def _check_qrels(qrels: Qrels) -> None:
    if not qrels:
        raise ValueError("qrels are empty: qrels metrics are undefined")
    for qid, relevant in qrels.items():
        if not relevant:
            raise ValueError(f"query {qid!r} has no relevant passage in the qrels")


def mean_of(values: Iterable[float]) -> float:
    """The mean every metric is: the correctly rounded sum (``math.fsum``) over the count. A correctly
    rounded sum does not depend on the order of its terms, so a reader who averages a metric's
    per-query values with ``math.fsum`` gets the metric exactly, in whatever order it reads them."""
    values = list(values)
    if not values:
        raise ValueError("no values to average")
    return math.fsum(values) / len(values)


def top_k_accuracy_per_query(
    first_hit_ranks: Sequence[int | None], ks: Iterable[int]
) -> dict[str, list[float]]:
    """``R@k`` of each question (1.0: its first answer match is at rank <= k, else 0.0), in the order of
    ``first_hit_ranks`` (1-based rank, or None when nothing retrieved matches)."""
    ks = _check_ks(ks)
    if not first_hit_ranks:
        raise ValueError("no questions to evaluate")
    return {f"R@{k}": [1.0 if r is not None and r <= k else 0.0 for r in first_hit_ranks] for k in ks}


def top_k_accuracy(first_hit_ranks: Sequence[int | None], ks: Iterable[int]) -> dict[str, float]:
    """``R@k`` for each k: share of questions whose first answer match is at rank <= k.

    ``first_hit_ranks`` has one entry per evaluated question (1-based rank, or None when no retrieved
    passage matches or nothing was retrieved); its length is the denominator.
    """
    return {name: mean_of(values) for name, values in top_k_accuracy_per_query(first_hit_ranks, ks).items()}


def first_relevant_rank(ranked: Sequence[str], relevant: "set[str] | frozenset[str]") -> int | None:
    for i, pid in enumerate(ranked, start=1):
        if pid in relevant:
            return i
    return None


def mrr_per_query(ranked: Ranked, qrels: Qrels, k: int = MRR_K) -> dict[str, float]:
    """qrels query -> 1/rank of its first relevant passage within rank k, else 0."""
    _check_ks([k])
    _check_qrels(qrels)
    out = {}
    for qid, relevant in qrels.items():
        rank = first_relevant_rank(ranked.get(qid, ())[:k], relevant)
        out[qid] = 0.0 if rank is None else 1.0 / rank
    return out


def mrr_at_k(ranked: Ranked, qrels: Qrels, k: int = MRR_K) -> float:
    """Mean over qrels queries of 1/rank of the first relevant passage within rank k, else 0."""
    return mean_of(mrr_per_query(ranked, qrels, k).values())


def hit_per_query(ranked: Ranked, qrels: Qrels, k: int) -> dict[str, float]:
    """qrels query -> 1.0 when a relevant passage is in its top k, else 0.0."""
    _check_ks([k])
    _check_qrels(qrels)
    return {
        qid: 1.0 if any(pid in relevant for pid in ranked.get(qid, ())[:k]) else 0.0
        for qid, relevant in qrels.items()
    }


def hit_at_k(ranked: Ranked, qrels: Qrels, k: int) -> float:
    """Share of qrels queries with at least one relevant passage in the top k."""
    return mean_of(hit_per_query(ranked, qrels, k).values())


def recall_per_query(ranked: Ranked, qrels: Qrels, k: int) -> dict[str, float]:
    """qrels query -> |relevant in top k| / |relevant|."""
    _check_ks([k])
    _check_qrels(qrels)
    return {
        qid: len(set(ranked.get(qid, ())[:k]) & relevant) / len(relevant) for qid, relevant in qrels.items()
    }


def recall_at_k(ranked: Ranked, qrels: Qrels, k: int) -> float:
    """Mean over qrels queries of |relevant in top k| / |relevant| (trec_eval ``recall_k``)."""
    return mean_of(recall_per_query(ranked, qrels, k).values())


def ndcg_per_query(ranked: Ranked, qrels: Qrels, k: int = NDCG_K) -> dict[str, float]:
    """qrels query -> nDCG@k with binary relevance: the sum of 1/log2(rank + 1) over the relevant
    passages in its top k, over the same sum for a ranking that puts min(k, |relevant|) of them first
    (trec_eval's ``ndcg_cut_k`` and BEIR's with relevance 0/1)."""
    _check_ks([k])
    _check_qrels(qrels)
    out = {}
    for qid, relevant in qrels.items():
        gain = math.fsum(
            1.0 / math.log2(rank + 1)
            for rank, pid in enumerate(ranked.get(qid, ())[:k], start=1)
            if pid in relevant
        )
        ideal = math.fsum(1.0 / math.log2(rank + 1) for rank in range(1, min(k, len(relevant)) + 1))
        out[qid] = gain / ideal
    return out


def ndcg_at_k(ranked: Ranked, qrels: Qrels, k: int = NDCG_K) -> float:
    """Mean over qrels queries of nDCG@k with binary relevance (``ndcg_per_query``)."""
    return mean_of(ndcg_per_query(ranked, qrels, k).values())


def qrels_metrics_per_query(
    ranked: Ranked,
    qrels: Qrels,
    ks: Iterable[int],
    suffix: str = "",
    with_recall: bool = True,
    with_ndcg: bool = False,
) -> dict[str, dict[str, float]]:
    """metric -> qrels query -> value, for the metrics of ``qrels_metrics``; empty without qrels."""
    ks = _check_ks(ks)
    if not qrels:
        return {}
    out = {f"MRR{suffix}@{MRR_K}": mrr_per_query(ranked, qrels, MRR_K)}
    if with_ndcg:
        out[f"nDCG{suffix}@{NDCG_K}"] = ndcg_per_query(ranked, qrels, NDCG_K)
    for k in ks:
        out[f"hit{suffix}@{k}"] = hit_per_query(ranked, qrels, k)
    if with_recall:
        for k in ks:
            out[f"recall{suffix}@{k}"] = recall_per_query(ranked, qrels, k)
    return out


def qrels_metrics(
    ranked: Ranked,
    qrels: Qrels,
    ks: Iterable[int],
    suffix: str = "",
    with_recall: bool = True,
    with_ndcg: bool = False,
) -> dict[str, float]:
    """``MRR@10``, ``hit@k`` and (optionally) ``recall@k`` and ``nDCG@10``; empty when there are no qrels.

    ``suffix`` names a second judgement set: suffix "_all" gives ``MRR_all@10`` / ``hit_all@k``.
    Each is the mean of its ``qrels_metrics_per_query`` values.
    """
    per_query = qrels_metrics_per_query(ranked, qrels, ks, suffix, with_recall, with_ndcg)
    return {name: mean_of(values.values()) for name, values in per_query.items()}


# ---- presentation order -----------------------------------------------------------------------------

_FAMILY_ORDER = ("R", "MRR", "nDCG", "hit", "recall", "MRR_all", "nDCG_all", "hit_all", "recall_all")


def metric_sort_key(name: str) -> tuple:
    """R@k by k, MRR@10, nDCG@10, hit@k, recall@k, then the ``_all`` family, then anything else by name."""
    family, _, cut = name.partition("@")
    try:
        k = int(cut)
    except ValueError:
        k = math.inf
    if family in _FAMILY_ORDER:
        return (_FAMILY_ORDER.index(family), k, name)
    return (len(_FAMILY_ORDER), math.inf, name)


def order_metrics(metrics: Mapping[str, float]) -> dict[str, float]:
    return {name: metrics[name] for name in sorted(metrics, key=metric_sort_key)}

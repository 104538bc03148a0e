"""Retrieval metrics as pure functions (reference.md section 5). No I/O, no pandas.

Two families, named apart because the literature uses "recall" for both:

- answer match: ``R@k`` = top-k retrieval accuracy = fraction of ALL evaluated questions with at least
  one answer-matching passage in the top k (DPR). Input: the rank of each question's first match.
- qrels: ``MRR@10``, ``hit@k`` (>= 1 relevant in the top k; what papers call "R@50 / R@1k" on MS MARCO)
  and ``recall@k`` (trec_eval style: mean fraction of a query's relevant passages found in the top k).
  Every qrels metric averages over the queries in the qrels, so a query the run never answered
  counts as 0 instead of disappearing from the denominator.

Ranked lists are sequences of pids in rank order (rank 1 first); ties were already broken by the run's
``rank`` column, so the order given here is the order scored.
"""

from __future__ import annotations

import math
from typing import Iterable, Mapping, Sequence

Ranked = Mapping[str, Sequence[str]]
Qrels = Mapping[str, "set[str] | frozenset[str]"]

MRR_K = 10


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


def top_k_accuracy(first_hit_ranks: Sequence[int | None], ks: Iterable[int]) -> dict[str, float]:
    """``R@k`` for each k: share of questions whose first answer match is at rank <= k.

    ``first_hit_ranks`` has one entry per evaluated question (1-based rank, or None when no retrieved
    passage matches or nothing was retrieved); its length is the denominator.
    """
    ks = _check_ks(ks)
    n = len(first_hit_ranks)
    if n == 0:
        raise ValueError("no questions to evaluate")
    out = {}
    for k in ks:
        hits = sum(1 for r in first_hit_ranks if r is not None and r <= k)
        out[f"R@{k}"] = hits / n
    return out


def first_relevant_rank(ranked: Sequence[str], relevant: "set[str] | frozenset[str]") -> int | None:
    for i, pid in enumerate(ranked, start=1):
        if pid in relevant:
            return i
    return None


def mrr_at_k(ranked: Ranked, qrels: Qrels, k: int = MRR_K) -> float:
    """Mean over qrels queries of 1/rank of the first relevant passage within rank k, else 0."""
    _check_ks([k])
    _check_qrels(qrels)
    total = 0.0
    for qid, relevant in qrels.items():
        rank = first_relevant_rank(ranked.get(qid, ())[:k], relevant)
        if rank is not None:
            total += 1.0 / rank
    return total / len(qrels)


def hit_at_k(ranked: Ranked, qrels: Qrels, k: int) -> float:
    """Share of qrels queries with at least one relevant passage in the top k."""
    _check_ks([k])
    _check_qrels(qrels)
    hits = sum(
        1 for qid, relevant in qrels.items() if any(pid in relevant for pid in ranked.get(qid, ())[:k])
    )
    return hits / len(qrels)


def recall_at_k(ranked: Ranked, qrels: Qrels, k: int) -> float:
    """Mean over qrels queries of |relevant in top k| / |relevant| (trec_eval ``recall_k``)."""
    _check_ks([k])
    _check_qrels(qrels)
    total = 0.0
    for qid, relevant in qrels.items():
        found = len(set(ranked.get(qid, ())[:k]) & relevant)
        total += found / len(relevant)
    return total / len(qrels)


def qrels_metrics(
    ranked: Ranked, qrels: Qrels, ks: Iterable[int], suffix: str = "", with_recall: bool = True
) -> dict[str, float]:
    """``MRR@10``, ``hit@k`` and (optionally) ``recall@k``; empty when there are no qrels.

    ``suffix`` names a second judgement set: suffix "_all" gives ``MRR_all@10`` / ``hit_all@k``.
    """
    ks = _check_ks(ks)
    if not qrels:
        return {}
    out = {f"MRR{suffix}@{MRR_K}": mrr_at_k(ranked, qrels, MRR_K)}
    for k in ks:
        out[f"hit{suffix}@{k}"] = hit_at_k(ranked, qrels, k)
    if with_recall:
        for k in ks:
            out[f"recall{suffix}@{k}"] = recall_at_k(ranked, qrels, k)
    return out


# ---- presentation order -----------------------------------------------------------------------------

_FAMILY_ORDER = ("R", "MRR", "hit", "recall", "MRR_all", "hit_all", "recall_all")


def metric_sort_key(name: str) -> tuple:
    """R@k by k, MRR@10, hit@k, recall@k, then the ``_all`` family, then anything else by name."""
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

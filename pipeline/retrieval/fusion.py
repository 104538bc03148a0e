"""Sparse + dense fusion of two retrieval runs: reciprocal-rank fusion and a weighted sum of
per-query min-max normalised scores. Pure functions over run tables (RUN_SCHEMA columns).

RRF (Cormack, Clarke & Büttcher 2009): score(q, p) = Σ_runs 1 / (k + rank_run(q, p)); a passage
absent from a run contributes nothing. It needs no scores and no tuning, which is why practitioners
reach for it first.

Weighted sum: each run's scores are min-max normalised within the query (BM25 and cosine scores live
on unrelated scales), a passage absent from a run gets that run's minimum (0 after normalisation),
and score = w · dense + (1 - w) · sparse. w = 0 is the sparse run's order and w = 1 the dense run's
(up to ties), so a weight chosen on dev can fall back to either retriever alone.

Ranks: descending fused score; ties (frequent at the bottom of the weighted sum, where a run's last
passage and the passages it did not return all score 0) are broken by presence, w·[in dense] +
(1 - w)·[in sparse], then by the other weighting, (1 - w)·dense + w·sparse, then by pid. So w = 0
gives BM25's order followed by the dense-only passages in dense order (a query BM25 left out gets
the dense ranking), and w = 1 the dense order followed by the BM25-only passages in BM25 order.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import pandas as pd

from pipeline.core.settings.base import default
from pipeline.retrieval.settings import HybridSettings

RRF_K: int = default(HybridSettings, "rrf_k")  # 60, the RRF paper's (Elasticsearch, Vespa, OpenSearch)


def rank_fused(scores: pd.DataFrame, depth: int, tie_breaks: Sequence[str] = ()) -> pd.DataFrame:
    """(qid, pid, score[, tie-break columns]) -> a run: per qid the top ``depth`` by score desc, then
    each tie-break column desc, then pid; ranks 1..n."""
    if depth < 1:
        raise ValueError(f"depth must be >= 1, got {depth}")
    keys = ["qid", "score", *tie_breaks, "pid"]
    ordered = scores.sort_values(
        keys, ascending=[True, False, *[False] * len(tie_breaks), True], kind="stable"
    )
    ordered = ordered.assign(rank=ordered.groupby("qid", sort=False).cumcount() + 1)
    ordered = ordered[ordered["rank"] <= depth]
    return pd.DataFrame(
        {
            "qid": ordered["qid"].to_numpy(),
            "pid": ordered["pid"].to_numpy(),
            "rank": ordered["rank"].to_numpy(np.int32),
            "score": ordered["score"].to_numpy(np.float32),
        }
    )


def rrf_fuse(runs: Sequence[pd.DataFrame], *, k: int = RRF_K, depth: int = 100) -> pd.DataFrame:
    """Reciprocal-rank fusion of ``runs`` (each with qid, pid, rank)."""
    if not runs:
        raise ValueError("rrf_fuse needs at least one run")
    if k < 0:
        raise ValueError(f"RRF k must be >= 0, got {k}")
    parts = [
        pd.DataFrame(
            {
                "qid": r["qid"].to_numpy(),
                "pid": r["pid"].to_numpy(),
                "score": 1.0 / (k + r["rank"].to_numpy(np.float64)),
            }
        )
        for r in runs
    ]
    summed = (
        pd.concat(parts, ignore_index=True).groupby(["qid", "pid"], as_index=False, sort=False)["score"].sum()
    )
    return rank_fused(summed, depth)


def minmax_per_query(run: pd.DataFrame) -> pd.Series:
    """Scores mapped to [0, 1] within each query; a query whose scores are all equal maps to 1."""
    scores = run["score"].to_numpy(np.float64)
    grouped = run.assign(score=scores).groupby("qid", sort=False)["score"]
    low = grouped.transform("min").to_numpy()
    span = grouped.transform("max").to_numpy() - low
    safe = np.where(span > 0, span, 1.0)
    return pd.Series(np.where(span > 0, (scores - low) / safe, 1.0), index=run.index)


def normalised_union(sparse: pd.DataFrame, dense: pd.DataFrame) -> pd.DataFrame:
    """(qid, pid, sparse, dense): both runs' normalised scores over the union of their passages."""
    left = pd.DataFrame(
        {
            "qid": sparse["qid"].to_numpy(),
            "pid": sparse["pid"].to_numpy(),
            "sparse": minmax_per_query(sparse).to_numpy(),
            "in_sparse": 1.0,
        }
    )
    right = pd.DataFrame(
        {
            "qid": dense["qid"].to_numpy(),
            "pid": dense["pid"].to_numpy(),
            "dense": minmax_per_query(dense).to_numpy(),
            "in_dense": 1.0,
        }
    )
    return left.merge(right, on=["qid", "pid"], how="outer").fillna(
        {"sparse": 0.0, "dense": 0.0, "in_sparse": 0.0, "in_dense": 0.0}
    )


def weighted_fuse(union: pd.DataFrame, weight: float, *, depth: int = 100) -> pd.DataFrame:
    """The run of w · dense + (1 - w) · sparse over ``normalised_union``'s table."""
    if not 0.0 <= weight <= 1.0:
        raise ValueError(f"fusion weight must be in [0, 1], got {weight}")
    dense, sparse = union["dense"].to_numpy(), union["sparse"].to_numpy()
    table = pd.DataFrame(
        {
            "qid": union["qid"].to_numpy(),
            "pid": union["pid"].to_numpy(),
            "score": weight * dense + (1.0 - weight) * sparse,
            "presence": weight * union["in_dense"].to_numpy()
            + (1.0 - weight) * union["in_sparse"].to_numpy(),
            "other": (1.0 - weight) * dense + weight * sparse,
        }
    )
    return rank_fused(table, depth, tie_breaks=("presence", "other"))


def choose_weight(
    union: pd.DataFrame, grid: Sequence[float], metric: Callable[[pd.DataFrame], float], *, depth: int = 100
) -> tuple[float, dict[float, float]]:
    """The grid weight whose fused run scores highest under ``metric`` (ties: the first in grid order),
    and every weight's score."""
    if not grid:
        raise ValueError("the fusion weight grid is empty")
    scored = {float(w): float(metric(weighted_fuse(union, float(w), depth=depth))) for w in grid}
    best = max(scored.values())
    return next(w for w, value in scored.items() if value == best), scored

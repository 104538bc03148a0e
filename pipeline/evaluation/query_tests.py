"""Paired tests over queries: two runs evaluated on the same queries, one metric at a time.

The per-query values come from the evaluator's ``per_query.parquet`` (pipeline.evaluation.evaluate):
the value of each query for every metric, whose mean is the metric. For a metric and two runs A and B
the differences d_q = A_q − B_q over the metric's queries give

- the mean difference d̄ (= A's metric − B's metric up to rounding),
- the two-sided paired Student-t interval d̄ ± t(level, n − 1) · s_d / √n over the n queries,
- a two-sided paired randomisation (sign-flip) test: under "A and B are exchangeable on every query"
  each d_q is as likely to be −d_q, so p is the share of sign vectors ε with |Σ ε_q d_q| ≥ |Σ d_q|.
  With m queries that differ (d_q ≠ 0; the others add nothing whatever their sign), all 2^m sign
  vectors are enumerated when 2^m ≤ ``permutations`` (p = count / 2^m, exact); otherwise
  ``permutations`` sign vectors are drawn from ``numpy.random.default_rng(seed)`` and
  p = (1 + count) / (1 + permutations) (the observed vector counted once, so p is never 0).

Both describe these queries: the variation they measure is that of the test queries, not that of
training seeds (pipeline.evaluation.seed_stats), and they say nothing about another training run.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa

from pipeline.core.schemas import PER_QUERY_SCHEMA
from pipeline.core.storage import DataError, arrow_frame, open_parquet
from pipeline.evaluation.metrics import mean_of
from pipeline.evaluation.seed_stats import mean_std, t_half_width

LEVEL = 0.95
PERMUTATIONS = 10_000
RNG_SEED = 0
# Sign vectors evaluated per block: bounds the memory of a test over many queries (rows × queries).
_BLOCK = 256
# Two sign vectors whose sums are equal in exact arithmetic may differ in the last bits once summed in
# floating point; per-query metric values are fractions with small denominators, so distinct sums
# differ by far more than this.
_TIE = 1e-9


@dataclass(frozen=True)
class QueryTest:
    """a − b over the queries of one metric. ``std``, ``ci_low``, ``ci_high`` are None for one query."""

    mean: float
    std: float | None
    n: int
    ci_low: float | None
    ci_high: float | None
    p_value: float
    exact: bool  # every sign vector enumerated (else ``permutations`` drawn)
    permutations: int  # sign vectors evaluated: 2^m when exact, the number drawn otherwise
    level: float
    seed: int


def _check_settings(level: float, permutations: int, seed: int) -> None:
    if not 0.0 < level < 1.0:
        raise ValueError(f"confidence level must be in (0, 1), got {level}")
    if isinstance(permutations, bool) or not isinstance(permutations, int) or permutations < 1:
        raise ValueError(f"permutations must be a positive integer, got {permutations!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")


def _exact_count(diffs: np.ndarray, observed: float) -> tuple[int, int]:
    """(sign vectors with |sum| ≥ |observed|, 2^m) over every sign vector of the m differences."""
    m = len(diffs)
    # Row i of the sign matrix is the binary expansion of i: 0 -> +1, 1 -> −1.
    bits = (np.arange(2**m, dtype=np.int64)[:, None] >> np.arange(m, dtype=np.int64)) & 1
    sums = (1 - 2 * bits).astype(np.float64) @ diffs
    return int(np.count_nonzero(np.abs(sums) >= abs(observed) - _TIE)), 2**m


def _sampled_counts(diffs: np.ndarray, observed: np.ndarray, permutations: int, seed: int) -> np.ndarray:
    """Per column of ``diffs`` (queries × metrics), how many of ``permutations`` random sign vectors
    over the queries give |sum| ≥ |observed|. One sign vector serves every column, so each metric's
    test is the same whether it is run alone or with others on the same queries."""
    rng = np.random.default_rng(seed)
    counts = np.zeros(diffs.shape[1], dtype=np.int64)
    done = 0
    while done < permutations:
        rows = min(_BLOCK, permutations - done)
        signs = 1.0 - 2.0 * rng.integers(0, 2, size=(rows, diffs.shape[0]), dtype=np.int8)
        sums = signs @ diffs
        counts += np.count_nonzero(np.abs(sums) >= np.abs(observed) - _TIE, axis=0)
        done += rows
    return counts


def paired_query_tests(
    a: np.ndarray,
    b: np.ndarray,
    level: float = LEVEL,
    permutations: int = PERMUTATIONS,
    seed: int = RNG_SEED,
) -> list[QueryTest]:
    """One ``QueryTest`` per column of ``a`` − ``b`` (queries × metrics, the same query in the same row
    of both). NaN marks a query outside a metric's denominator (no qrels); it must be NaN in both.
    The random sign vectors range over all rows, so a metric on fewer queries uses its rows' signs."""
    _check_settings(level, permutations, seed)
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.ndim != 2 or a.shape != b.shape:
        raise ValueError(f"need two queries × metrics arrays of one shape, got {a.shape} and {b.shape}")
    present = ~np.isnan(a)
    if (present != ~np.isnan(b)).any():
        row, col = np.argwhere(present != ~np.isnan(b))[0]
        raise ValueError(f"query row {row}, metric column {col}: a value in one run and none in the other")
    if np.isinf(a[present]).any() or np.isinf(b[present]).any():
        raise ValueError("per-query values must be finite")
    diffs = np.where(present, a - b, 0.0)
    results: list[QueryTest | None] = []
    sampled: list[int] = []
    for col in range(diffs.shape[1]):
        d = diffs[present[:, col], col]
        n = len(d)
        if n == 0:
            raise ValueError(f"metric column {col}: no query has a value")
        mean, std = mean_std(d.tolist())
        half = t_half_width(std, n, level)
        low, high = (None, None) if half is None else (mean - half, mean + half)
        nonzero = d[d != 0.0]
        observed = math.fsum(d.tolist())
        if 2 ** len(nonzero) <= permutations:
            count, total = _exact_count(nonzero, observed)
            results.append(QueryTest(mean, std, n, low, high, count / total, True, total, level, seed))
        else:
            results.append(QueryTest(mean, std, n, low, high, math.nan, False, permutations, level, seed))
            sampled.append(col)
    if sampled:
        observed = np.array([math.fsum(diffs[:, col].tolist()) for col in sampled])
        counts = _sampled_counts(diffs[:, sampled], observed, permutations, seed)
        for col, count in zip(sampled, counts):
            test = results[col]
            results[col] = QueryTest(
                test.mean,
                test.std,
                test.n,
                test.ci_low,
                test.ci_high,
                (1 + int(count)) / (1 + permutations),
                False,
                permutations,
                level,
                seed,
            )
    return results


def paired_query_test(
    a: Sequence[float],
    b: Sequence[float],
    level: float = LEVEL,
    permutations: int = PERMUTATIONS,
    seed: int = RNG_SEED,
) -> QueryTest:
    """The paired test of one metric: ``a[i]`` and ``b[i]`` are the two runs' values of query i."""
    if len(a) != len(b):
        raise ValueError(f"need one value per query in both runs, got {len(a)} and {len(b)}")
    column = np.asarray(a, dtype=np.float64)[:, None], np.asarray(b, dtype=np.float64)[:, None]
    return paired_query_tests(*column, level, permutations, seed)[0]


# ---- per-query files ---------------------------------------------------------------------------------


def read_per_query(path: str | os.PathLike) -> pd.DataFrame:
    """A ``per_query.parquet`` (qid + one float column per metric), indexed by qid; a missing file or a
    bad qid or value is a DataError naming the file (and row and column)."""
    missing = (
        "file not found: the evaluate rule writes it beside metrics.json (a run evaluated before "
        "per-query files existed needs evaluating again)"
    )
    parquet = open_parquet(path, ["qid"], schema=PER_QUERY_SCHEMA, missing=missing)
    try:
        found = parquet.schema_arrow
        table = parquet.read()
    finally:
        parquet.close()
    if found.names[0] != "qid":
        raise DataError("the first column must be qid", file=path, field="qid")
    for column in found:
        if column.name != "qid" and not pa.types.is_floating(column.type):
            raise DataError(
                f"a metric column must hold floats, found {column.type}", file=path, field=column.name
            )
    df = arrow_frame(table)
    nulls = df["qid"].isna()
    if nulls.any():
        raise DataError("null qid", file=path, record=int(nulls.idxmax()), field="qid")
    duplicated = df["qid"].duplicated()
    if duplicated.any():
        row = int(duplicated.idxmax())
        raise DataError(f"qid {df.at[row, 'qid']!r} appears twice", file=path, record=row, field="qid")
    for name in df.columns[1:]:
        infinite = np.isinf(df[name].to_numpy(dtype=np.float64))
        if infinite.any():
            raise DataError("infinite value", file=path, record=int(np.argmax(infinite)), field=name)
    return df.set_index("qid")


def align_per_query(
    a: pd.DataFrame,
    b: pd.DataFrame,
    file_a: str | os.PathLike,
    file_b: str | os.PathLike,
    metrics: Sequence[str],
) -> tuple[np.ndarray, np.ndarray]:
    """The two runs' values of ``metrics`` as queries × metrics arrays, rows in ``a``'s qid order.

    Two runs can be paired only on the same queries: a qid in one file and not the other, or a query
    that has a metric's value in one and not in the other (different qrels), is a DataError naming
    both files."""
    only_a = a.index.difference(b.index, sort=False)
    only_b = b.index.difference(a.index, sort=False)
    if len(only_a) or len(only_b):
        example = (
            f"qid {only_a[0]!r} only in the first" if len(only_a) else f"qid {only_b[0]!r} only in the second"
        )
        raise DataError(
            f"the two runs were evaluated on different queries ({len(only_a)} only in {file_a}, "
            f"{len(only_b)} only in {file_b}; e.g. {example}): a paired test needs the same queries",
            file=file_a,
            field="qid",
        )
    for name in metrics:
        for df, path in ((a, file_a), (b, file_b)):
            if name not in df.columns:
                raise DataError(f"no column for metric {name!r}", file=path, field=name)
    b = b.loc[a.index]
    values_a = a[list(metrics)].to_numpy(dtype=np.float64)
    values_b = b[list(metrics)].to_numpy(dtype=np.float64)
    differ = np.isnan(values_a) != np.isnan(values_b)
    if differ.any():
        row, col = np.argwhere(differ)[0]
        raise DataError(
            f"qid {a.index[row]!r} has a {metrics[col]} value in only one of {file_a} and {file_b}: "
            "the two runs were evaluated against different judgements",
            file=file_a,
            field=metrics[col],
        )
    return values_a, values_b


def column_mean(df: pd.DataFrame, name: str) -> float:
    """The mean of a metric's per-query values over its queries (nulls left out), taken as the
    evaluator takes it (``mean_of``): it equals the metric in the metrics.json beside the file."""
    return mean_of(df[name].dropna().tolist())

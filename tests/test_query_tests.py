"""pipeline.evaluation.query_tests: the paired t-interval and sign-flip test over queries against
hand-computed values and brute-force enumeration, and the per-query files they read."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.core.schemas import per_query_schema
from pipeline.core.storage import DataError, write_table
from pipeline.evaluation.query_tests import (
    PERMUTATIONS,
    align_per_query,
    column_mean,
    paired_query_test,
    paired_query_tests,
    read_per_query,
)

T2 = 4.30265272974946  # t(0.975, 2)


def brute_force_p(diffs: list[float]) -> float:
    """Share of all 2^n sign vectors whose |sum| reaches the observed |sum| (exact fractions)."""
    observed = abs(sum(diffs))
    hits = sum(
        abs(sum(s * d for s, d in zip(signs, diffs))) >= observed
        for signs in itertools.product((1, -1), repeat=len(diffs))
    )
    return hits / 2 ** len(diffs)


# ---- hand-computed -----------------------------------------------------------------------------------


def test_three_queries_by_hand():
    # d = 1, 2, 3: the 8 sign vectors sum to 6, 4, 2, 0, 0, -2, -4, -6; |sum| >= 6 twice -> p = 2/8.
    # mean 2, sample std 1, half width t(2) · 1 / √3.
    test = paired_query_test([1.0, 2.0, 3.0], [0.0, 0.0, 0.0])
    assert (test.mean, test.std, test.n, test.p_value) == (2.0, 1.0, 3, 0.25)
    assert (test.exact, test.permutations, test.level, test.seed) == (True, 8, 0.95, 0)
    assert (test.ci_low, test.ci_high) == pytest.approx((2 - T2 / 3**0.5, 2 + T2 / 3**0.5))


def test_equal_differences_have_a_zero_width_interval():
    # d = 1, 1, 1 (a − b, not a alone): sums 3, 1 (×3), -1 (×3), -3 -> p = 2/8; std 0
    test = paired_query_test([1.0, 0.5, 1.0], [0.0, -0.5, 0.0])
    assert (test.mean, test.std, test.ci_low, test.ci_high, test.p_value) == (1.0, 0.0, 1.0, 1.0, 0.25)


def test_queries_that_do_not_differ_count_in_the_interval_not_in_the_enumeration():
    # d = 1, 0, 0, 2: the two zeros flip to themselves, so 2^2 sign vectors: 3, 1, -1, -3 -> p = 2/4.
    # The t-interval is over all 4 queries: mean 0.75, std √(2.75/3).
    test = paired_query_test([1.0, 0.0, 0.5, 2.0], [0.0, 0.0, 0.5, 0.0])
    assert (test.n, test.mean, test.p_value, test.permutations, test.exact) == (4, 0.75, 0.5, 4, True)
    std = math.sqrt(((0.25**2) * 1 + (0.75**2) * 2 + 1.25**2) / 3)
    assert test.std == pytest.approx(std)
    half = 3.18244630528371 * std / 2  # t(0.975, 3) · std / √4
    assert (test.ci_low, test.ci_high) == pytest.approx((0.75 - half, 0.75 + half))


def test_identical_runs_differ_by_nothing():
    test = paired_query_test([0.5, 1.0, 0.0], [0.5, 1.0, 0.0])
    assert (test.mean, test.std, test.ci_low, test.ci_high, test.p_value) == (0.0, 0.0, 0.0, 0.0, 1.0)
    assert test.permutations == 1  # the one (empty) sign vector


def test_one_query_has_no_interval():
    test = paired_query_test([1.0], [0.0])
    assert (test.mean, test.std, test.ci_low, test.ci_high, test.p_value) == (1.0, None, None, None, 1.0)


# ---- exact enumeration and sampling ------------------------------------------------------------------


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_exact_enumeration_equals_brute_force(seed):
    # 12 queries (2^12 = 4096 <= 10,000: enumerated), values in quarters so every sum is exact
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 5, size=12) / 4
    b = rng.integers(0, 5, size=12) / 4
    test = paired_query_test(a.tolist(), b.tolist())
    nonzero = [float(x - y) for x, y in zip(a, b) if x != y]
    assert test.exact and test.permutations == 2 ** len(nonzero)
    assert test.p_value == brute_force_p(nonzero)


def test_many_queries_are_sampled_close_to_the_exact_p():
    # 16 differing queries: 65,536 sign vectors > 10,000 -> 10,000 drawn; the brute-force p is within
    # sampling error (4 standard errors) of the drawn one.
    diffs = [1.0, -0.5, 0.25, 1.0, 0.75, -1.0, 0.5, 0.5, 1.0, -0.25, 0.5, 1.0, 0.25, -0.5, 1.0, 0.75]
    exact = brute_force_p(diffs)
    test = paired_query_test(diffs, [0.0] * len(diffs))
    assert not test.exact and test.permutations == PERMUTATIONS
    assert abs(test.p_value - exact) < 4 * math.sqrt(exact * (1 - exact) / PERMUTATIONS)
    # the same seed gives the same p; the draws count the observed vector once: (1 + count) / (1 + B)
    assert paired_query_test(diffs, [0.0] * len(diffs)) == test
    assert round(test.p_value * (PERMUTATIONS + 1)) == pytest.approx(test.p_value * (PERMUTATIONS + 1))


def test_a_sampled_p_is_never_zero():
    # 30 queries all better by 1: only 2 of 2^30 sign vectors reach |30|; none of 10,000 draws does
    test = paired_query_test([1.0] * 30, [0.0] * 30)
    assert test.p_value == 1 / (PERMUTATIONS + 1)
    assert paired_query_test([1.0] * 30, [0.0] * 30, permutations=99).p_value == 1 / 100


def test_metrics_tested_together_get_the_tests_they_get_alone():
    rng = np.random.default_rng(7)
    a = rng.integers(0, 2, size=(40, 3)).astype(float)  # hit@k-like 0/1 values
    b = rng.integers(0, 2, size=(40, 3)).astype(float)
    a[:, 2] = b[:, 2]  # a metric on which the runs agree
    together = paired_query_tests(a, b)
    alone = [paired_query_test(a[:, j].tolist(), b[:, j].tolist()) for j in range(3)]
    assert together == alone
    assert together[2].p_value == 1.0 and together[2].exact


def test_a_metric_outside_some_queries_is_tested_on_its_own():
    # column 1 is defined on the first 5 queries only (NaN: not in its denominator)
    a = np.array([[1, 1.0], [0, 0.5], [1, 1.0], [1, 0.0], [0, 1.0], [1, np.nan], [0, np.nan]])
    b = np.array([[0, 0.0], [0, 0.0], [1, 0.5], [0, 0.0], [1, 0.5], [1, np.nan], [1, np.nan]])
    _, sub = paired_query_tests(a, b)
    assert sub == paired_query_test(a[:5, 1].tolist(), b[:5, 1].tolist())
    assert sub.n == 5 and sub.p_value == brute_force_p([1.0, 0.5, 0.5, 0.5])
    b[0, 1] = np.nan
    with pytest.raises(ValueError, match="query row 0, metric column 1"):
        paired_query_tests(a, b)


@pytest.mark.parametrize(
    "kwargs,message",
    [({"level": 1.0}, "level"), ({"permutations": 0}, "permutations"), ({"seed": -1}, "seed")],
)
def test_bad_settings_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        paired_query_test([1.0, 0.0], [0.0, 0.0], **kwargs)


def test_unequal_lengths_are_refused():
    with pytest.raises(ValueError, match="one value per query"):
        paired_query_test([1.0, 0.0], [0.0])


# ---- per-query files ---------------------------------------------------------------------------------


def _per_query_file(path, rows: dict[str, list], metrics=("R@1", "MRR@10")):
    table = pa.Table.from_pydict(rows, schema=per_query_schema(list(metrics)))
    write_table(path, table)
    return path


def test_align_pairs_by_qid_and_refuses_other_queries(tmp_path):
    a = _per_query_file(
        tmp_path / "a.parquet",
        {"qid": ["q1", "q2", "q3"], "R@1": [1.0, 0.0, 1.0], "MRR@10": [1.0, None, 0.5]},
    )
    b = _per_query_file(
        tmp_path / "b.parquet",
        {"qid": ["q3", "q1", "q2"], "R@1": [0.0, 1.0, 1.0], "MRR@10": [0.25, 0.5, None]},
    )
    values_a, values_b = align_per_query(read_per_query(a), read_per_query(b), a, b, ["R@1", "MRR@10"])
    assert values_a.tolist()[0] == [1.0, 1.0] and values_b.tolist()[0] == [1.0, 0.5]  # q1 in both
    assert values_b[:, 0].tolist() == [1.0, 1.0, 0.0]
    other = _per_query_file(
        tmp_path / "c.parquet",
        {"qid": ["q1", "q2", "q4"], "R@1": [1.0, 0.0, 1.0], "MRR@10": [1.0, None, 0.5]},
    )
    with pytest.raises(DataError) as err:
        align_per_query(read_per_query(a), read_per_query(other), a, other, ["R@1"])
    assert str(a) in str(err.value) and str(other) in str(err.value)
    assert "different queries" in str(err.value) and "'q3' only in the first" in str(err.value)
    judged = _per_query_file(
        tmp_path / "d.parquet", {"qid": ["q1", "q2", "q3"], "R@1": [1.0, 0.0, 1.0], "MRR@10": [1.0, 0.0, 0.5]}
    )
    with pytest.raises(DataError, match="'q2' has a MRR@10 value in only one") as err:
        align_per_query(read_per_query(a), read_per_query(judged), a, judged, ["R@1", "MRR@10"])
    assert str(judged) in str(err.value)
    with pytest.raises(DataError, match="no column for metric 'hit@1'"):
        align_per_query(read_per_query(a), read_per_query(b), a, b, ["hit@1"])


def test_column_mean_leaves_out_the_queries_outside_the_metric(tmp_path):
    a = _per_query_file(
        tmp_path / "a.parquet",
        {"qid": ["q1", "q2", "q3"], "R@1": [1.0, 0.0, 1.0], "MRR@10": [1.0, None, 0.5]},
    )
    df = read_per_query(a)
    assert (column_mean(df, "R@1"), column_mean(df, "MRR@10")) == (2 / 3, 0.75)


def test_read_per_query_names_the_file_and_the_problem(tmp_path):
    with pytest.raises(DataError, match="evaluating again") as err:
        read_per_query(tmp_path / "absent.parquet")
    assert err.value.file == str(tmp_path / "absent.parquet")
    twice = _per_query_file(
        tmp_path / "twice.parquet", {"qid": ["q1", "q1"], "R@1": [1.0, 0.0], "MRR@10": [1.0, 0.0]}
    )
    with pytest.raises(DataError, match="'q1' appears twice") as err:
        read_per_query(twice)
    assert (err.value.record, err.value.field) == (1, "qid")
    words = tmp_path / "words.parquet"
    pq.write_table(pa.table({"qid": ["q1"], "R@1": ["high"]}), words)
    with pytest.raises(DataError, match="must hold floats") as err:
        read_per_query(words)
    assert err.value.field == "R@1"
    numbers = tmp_path / "numbers.parquet"
    pd.DataFrame({"qid": [1], "R@1": [1.0]}).to_parquet(numbers)
    with pytest.raises(DataError) as err:
        read_per_query(numbers)
    assert err.value.field == "qid"

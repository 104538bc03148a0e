"""pipeline.evaluation.seed_stats: the t quantile (scipy) against printed tables, paired differences by hand."""

from __future__ import annotations

import math

import pytest

from pipeline.evaluation.seed_stats import mean_std, paired_difference, t_quantile

# Two-sided 95% critical values as printed in t tables (3 decimals) ...
T_TABLE_95 = {1: 12.706, 2: 4.303, 4: 2.776, 9: 2.262, 29: 2.045}
# ... and to more digits (R: qt(0.975, df), qnorm(0.975)), to check more than the rounding.
T_PRECISE_95 = {
    1: 12.7062047361747,
    2: 4.30265272974946,
    9: 2.26215716279820,
    29: 2.04522964213270,
    math.inf: 1.95996398454005,
}


@pytest.mark.parametrize("df,expected", sorted(T_TABLE_95.items()))
def test_t_quantile_matches_the_t_table(df, expected):
    assert round(t_quantile(0.95, df), 3) == expected


@pytest.mark.parametrize("df,expected", sorted(T_PRECISE_95.items()))
def test_t_quantile_to_many_digits(df, expected):
    assert t_quantile(0.95, df) == pytest.approx(expected, rel=1e-10)


def test_t_quantile_other_levels_and_large_df():
    assert t_quantile(0.99, 1) == pytest.approx(63.6567411628715, rel=1e-10)
    assert t_quantile(0.90, 4) == pytest.approx(2.13184678632665, rel=1e-10)
    assert t_quantile(0.50, 3) == pytest.approx(0.764892328404345, rel=1e-10)
    # df -> infinity: the normal's 1.960
    for df in (1_000, 100_000, 10**9):
        assert t_quantile(0.95, df) == pytest.approx(1.95996, abs=2.5e-3)
    assert round(t_quantile(0.95, 100_000), 3) == 1.960
    assert t_quantile(0.95, 1_000) > t_quantile(0.95, 100_000) > t_quantile(0.95, math.inf)


def test_invalid_arguments():
    for level in (0.0, 1.0, 1.5, -0.1):
        with pytest.raises(ValueError, match="level"):
            t_quantile(level, 5)
    with pytest.raises(ValueError, match="degrees of freedom"):
        t_quantile(0.95, 0)


def test_mean_std_hand_computed():
    # mean 0.5; deviations -0.1, 0, 0.1 -> sum of squares 0.02 / (3-1) = 0.01 -> std 0.1
    mean, std = mean_std([0.4, 0.5, 0.6])
    assert mean == pytest.approx(0.5)
    assert std == pytest.approx(0.1)
    assert mean_std([0.7]) == (0.7, None)
    with pytest.raises(ValueError):
        mean_std([])


def test_paired_difference_hand_computed():
    # differences 0.03, 0.02, 0.01: mean 0.02, std 0.01, half width 4.303 · 0.01 / √3 = 0.02484
    a = {0: 0.43, 1: 0.44, 2: 0.42}
    b = {0: 0.40, 1: 0.42, 2: 0.41}
    d = paired_difference(a, b)
    assert (d.n, d.seeds, d.only_a, d.only_b, d.level) == (3, [0, 1, 2], [], [], 0.95)
    assert d.mean == pytest.approx(0.02, abs=1e-12)
    assert d.std == pytest.approx(0.01, abs=1e-12)
    half = 4.30265272974946 * 0.01 / math.sqrt(3)
    assert d.ci_low == pytest.approx(0.02 - half, abs=1e-12)
    assert d.ci_high == pytest.approx(0.02 + half, abs=1e-12)
    # pairing matters: the same values unpaired would spread far more than the differences do
    assert d.std < mean_std(list(a.values()))[1] + mean_std(list(b.values()))[1]
    # the level widens or narrows the interval with the matching quantile
    d90 = paired_difference(a, b, level=0.90)
    assert d90.ci_high - d90.mean == pytest.approx(2.91998558035372 * 0.01 / math.sqrt(3), abs=1e-12)


def test_paired_difference_sign_and_two_seeds():
    d = paired_difference({1: 0.5, 2: 0.7}, {1: 0.6, 2: 0.6})
    # differences -0.1, 0.1: mean 0, std √0.02, half width 12.706 · √0.02 / √2 = 1.2706
    assert d.mean == pytest.approx(0.0, abs=1e-15)
    # to the rel=1e-10 of the quantile tests: scipy before 1.17 differs from R in the 12th digit
    assert d.ci_high == pytest.approx(12.7062047361747 * 0.1, rel=1e-10)
    assert d.ci_low == pytest.approx(-d.ci_high)


def test_seed_in_one_method_only_is_left_out_and_reported():
    a = {0: 0.5, 1: 0.6, 3: 0.9}
    b = {2: 0.1, 1: 0.5, 0: 0.4}
    d = paired_difference(a, b)
    assert (d.n, d.seeds, d.only_a, d.only_b) == (2, [0, 1], [3], [2])
    assert d.mean == pytest.approx(0.1, abs=1e-12)
    assert d.std == pytest.approx(0.0, abs=1e-12)


def test_identical_runs_give_a_zero_width_interval():
    runs = {0: 0.31, 1: 0.35, 2: 0.29, 3: 0.4}
    d = paired_difference(runs, dict(runs))
    assert (d.mean, d.std, d.ci_low, d.ci_high, d.n) == (0.0, 0.0, 0.0, 0.0, 4)


def test_one_common_seed_has_no_interval():
    d = paired_difference({0: 0.5, 1: 0.6}, {1: 0.4})
    assert d.n == 1 and d.mean == pytest.approx(0.2)
    assert (d.std, d.ci_low, d.ci_high) == (None, None, None)
    assert (d.seeds, d.only_a, d.only_b) == ([1], [0], [])


def test_no_common_seed():
    d = paired_difference({0: 0.5}, {1: 0.4, 2: 0.3})
    assert (d.n, d.mean, d.std, d.ci_low, d.ci_high) == (0, None, None, None, None)
    assert (d.seeds, d.only_a, d.only_b) == ([], [0], [1, 2])
    assert paired_difference({}, {}).n == 0

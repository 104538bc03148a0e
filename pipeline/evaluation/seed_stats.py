"""Statistics over seeds: mean ± sample std, the Student-t quantile, and paired differences with a
t confidence interval.

Pure functions on plain numbers, no scipy (it is not a dependency). The t distribution goes through
the regularized incomplete beta function, evaluated by its continued fraction (modified Lentz), as in
Press et al., *Numerical Recipes* §6.4, and Abramowitz & Stegun 26.5.8 / 26.7.1:

    P(|T| > t) = I_x(df/2, 1/2),  x = df / (df + t²)
"""
from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field

# Below this, Lentz's method replaces a zero denominator (a tiny non-zero keeps the recurrence alive).
_TINY = 1e-300
_EPS = 1e-15
_MAX_TERMS = 100_000
# Beyond this many degrees of freedom lgamma's cancellation costs more digits than the normal
# approximation does (t quantiles there differ from the normal's by < 3e-7).
_NORMAL_DF = 1e7


def mean_std(values: Sequence[float]) -> tuple[float, float | None]:
    """(mean, sample standard deviation with ddof 1); the std is None for a single value."""
    n = len(values)
    if n == 0:
        raise ValueError("no values")
    mean = math.fsum(values) / n
    if n == 1:
        return mean, None
    var = math.fsum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, math.sqrt(var)


def _beta_continued_fraction(x: float, a: float, b: float) -> float:
    """The continued fraction of I_x(a, b) (without its prefactor); converges fast for
    x < (a + 1) / (a + b + 2)."""
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, _MAX_TERMS):
        # even term d_2m, then odd term d_2m+1 of the fraction
        for coeff in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                      -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + coeff * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + coeff / c
            c = c if abs(c) > _TINY else _TINY
            step = c * d
            h *= step
        if abs(step - 1.0) < _EPS:
            return h
    raise ArithmeticError(f"incomplete beta fraction did not converge (x={x}, a={a}, b={b})")


def regularized_beta(x: float, a: float, b: float, *, complement: float | None = None) -> float:
    """I_x(a, b) for 0 ≤ x ≤ 1, a, b > 0. ``complement`` = 1 − x when the caller has it exactly:
    near x = 1 the subtraction would lose the digits the tail depends on."""
    if not 0.0 <= x <= 1.0 or a <= 0 or b <= 0:
        raise ValueError(f"regularized_beta needs 0 <= x <= 1 and a, b > 0 (x={x}, a={a}, b={b})")
    y = 1.0 - x if complement is None else complement
    if x == 0.0 or y == 0.0:
        return 0.0 if x == 0.0 else 1.0
    log_front = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                 + a * math.log(x) + b * math.log(y))
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_continued_fraction(x, a, b) / a
    # I_x(a, b) = 1 − I_{1−x}(b, a): the other side is where the fraction converges
    return 1.0 - math.exp(log_front) * _beta_continued_fraction(y, b, a) / b


def t_two_sided_tail(t: float, df: float) -> float:
    """P(|T| > |t|) for Student's t with ``df`` degrees of freedom (df > 1e7, inf included: the
    normal)."""
    if df <= 0:
        raise ValueError(f"degrees of freedom must be > 0, got {df}")
    t = abs(t)
    if df > _NORMAL_DF:
        return math.erfc(t / math.sqrt(2.0))
    t2 = t * t
    return regularized_beta(df / (df + t2), df / 2.0, 0.5, complement=t2 / (df + t2))


def student_t_cdf(t: float, df: float) -> float:
    """P(T ≤ t)."""
    half_tail = 0.5 * t_two_sided_tail(t, df)
    return half_tail if t < 0 else 1.0 - half_tail


def t_quantile(level: float, df: float) -> float:
    """The two-sided Student-t critical value: the t > 0 with P(|T| ≤ t) = ``level``
    (level 0.95, df 9 -> 2.262). Bisection on the tail, which falls monotonically in t."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"confidence level must be in (0, 1), got {level}")
    alpha = 1.0 - level
    lo, hi = 0.0, 1.0
    while t_two_sided_tail(hi, df) > alpha:
        lo, hi = hi, hi * 2.0
    while hi - lo > 1e-13 * hi:
        mid = 0.5 * (lo + hi)
        if t_two_sided_tail(mid, df) > alpha:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def common_seeds(a: Mapping[Hashable, object], b: Mapping[Hashable, object]
                 ) -> tuple[list, list, list]:
    """(seeds in both, seeds only in ``a``, seeds only in ``b``), each in its mapping's order."""
    return ([s for s in a if s in b], [s for s in a if s not in b], [s for s in b if s not in a])


@dataclass(frozen=True)
class PairedDifference:
    """a − b over the seeds both were run with. ``mean``/``std``/``ci_*`` are None when undefined
    (no common seed; std and interval need n ≥ 2)."""

    mean: float | None
    std: float | None
    n: int
    ci_low: float | None
    ci_high: float | None
    level: float
    seeds: list = field(default_factory=list)
    only_a: list = field(default_factory=list)
    only_b: list = field(default_factory=list)


def paired_difference(a: Mapping[Hashable, float], b: Mapping[Hashable, float],
                      level: float = 0.95) -> PairedDifference:
    """Mean and sample std of a[s] − b[s] over the seeds s in both, with the two-sided t interval
    mean ± t(level, n − 1) · std / √n. Pairing by seed removes what the two runs of a seed share
    (data order, initialisation) from the spread; seeds in only one mapping are left out and listed."""
    seeds, only_a, only_b = common_seeds(a, b)
    n = len(seeds)
    if n == 0:
        return PairedDifference(None, None, 0, None, None, level, [], only_a, only_b)
    mean, std = mean_std([float(a[s]) - float(b[s]) for s in seeds])
    low = high = None
    if std is not None:
        half = t_quantile(level, n - 1) * std / math.sqrt(n)
        low, high = mean - half, mean + half
    return PairedDifference(mean, std, n, low, high, level, seeds, only_a, only_b)

"""Statistics over seeds: mean ± sample std and paired differences with a Student-t confidence
interval (the t quantile from scipy.stats)."""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field

from scipy import stats


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


def t_quantile(level: float, df: float) -> float:
    """The two-sided Student-t critical value: the t > 0 with P(|T| ≤ t) = ``level``
    (level 0.95, df 9 -> 2.262)."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"confidence level must be in (0, 1), got {level}")
    if df <= 0:
        raise ValueError(f"degrees of freedom must be > 0, got {df}")
    return float(stats.t.ppf(0.5 + level / 2.0, df))


def t_half_width(std: float | None, n: int, level: float = 0.95) -> float | None:
    """Half the width of the two-sided t interval of a mean of n values with sample std ``std``:
    t(level, n − 1) · std / √n; None when undefined (no std, or n < 2)."""
    if std is None or n < 2:
        return None
    return t_quantile(level, n - 1) * std / math.sqrt(n)


def common_seeds(a: Mapping[Hashable, object], b: Mapping[Hashable, object]) -> tuple[list, list, list]:
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


def paired_difference(
    a: Mapping[Hashable, float], b: Mapping[Hashable, float], level: float = 0.95
) -> PairedDifference:
    """Mean and sample std of a[s] − b[s] over the seeds s in both, with the two-sided t interval
    mean ± t(level, n − 1) · std / √n. Pairing by seed removes what the two runs of a seed share
    (data order, initialisation) from the spread; seeds in only one mapping are left out and listed."""
    seeds, only_a, only_b = common_seeds(a, b)
    n = len(seeds)
    if n == 0:
        return PairedDifference(None, None, 0, None, None, level, [], only_a, only_b)
    mean, std = mean_std([float(a[s]) - float(b[s]) for s in seeds])
    half = t_half_width(std, n, level)
    low, high = (None, None) if half is None else (mean - half, mean + half)
    return PairedDifference(mean, std, n, low, high, level, seeds, only_a, only_b)

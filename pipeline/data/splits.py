"""Deterministic train/dev/test splits of a set of units (articles, entities, queries).

Units are ordered by a keyed hash of ``(seed, unit)``; the first ``round(test * n)`` are test, the
next ``round(dev * n)`` dev, the rest train. So the assignment depends only on the seed and the set of
units, never on file order, and the split sizes are exact (not binomial: with 36 articles a hash
threshold could give anywhere between 2 and 9 test articles). A split asked for with a fraction > 0
gets at least one unit. Grouping (by article / entity) keeps every query of one unit in one split.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import Iterable

from pipeline.core.config import ConfigError


@dataclass(frozen=True)
class SplitSpec:
    by: str
    dev: float = 0.0
    test: float = 0.0
    seed: int = 0


def parse_split_spec(spec: object) -> SplitSpec | None:
    """``"none"`` (or None) -> None: every query is a test query; a mapping -> SplitSpec."""
    if isinstance(spec, str):
        try:
            spec = json.loads(spec)
        except json.JSONDecodeError:
            pass  # a bare word such as none
    if spec is None or spec == "none":
        return None
    if not isinstance(spec, dict):
        raise ConfigError(f"split: expected 'none' or {{by, dev, test, seed}}, got {spec!r}")
    unknown = set(spec) - {"by", "dev", "test", "seed"}
    if unknown:
        raise ConfigError(f"split: unknown key(s) {sorted(unknown)} (allowed: by, dev, test, seed)")
    if "by" not in spec:
        raise ConfigError("split: 'by' is required (article, entity or query)")
    out = SplitSpec(
        by=str(spec["by"]),
        dev=float(spec.get("dev", 0.0)),
        test=float(spec.get("test", 0.0)),
        seed=int(spec.get("seed", 0)),
    )
    for name in ("dev", "test"):
        value = getattr(out, name)
        if not 0.0 <= value <= 1.0:
            raise ConfigError(f"split.{name}: a fraction in [0, 1], got {value}")
    if out.dev + out.test > 1.0 + 1e-9:
        raise ConfigError(f"split: dev + test = {out.dev + out.test:g} > 1")
    return out


def unit_order_key(seed: int, unit: str) -> tuple[int, str]:
    digest = hashlib.sha256(f"{seed}\x00{unit}".encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big"), unit


def _size(fraction: float, n: int) -> int:
    if fraction <= 0.0:
        return 0
    return max(1, math.floor(fraction * n + 0.5))  # round half up, unlike round()'s half-to-even


def assign_splits(units: Iterable[str], dev: float, test: float, seed: int) -> dict[str, str]:
    """Map each distinct unit to "train", "dev" or "test" (see the module docstring)."""
    ordered = sorted(set(units), key=lambda u: unit_order_key(seed, u))
    n = len(ordered)
    n_test, n_dev = _size(test, n), _size(dev, n)
    if n_test + n_dev > n:
        raise ConfigError(
            f"split: {n} unit(s) cannot give {n_dev} dev and {n_test} test unit(s) "
            f"(dev={dev:g}, test={test:g})"
        )
    out = {}
    for i, unit in enumerate(ordered):
        out[unit] = "test" if i < n_test else "dev" if i < n_test + n_dev else "train"
    return out


def check_train_left(assignment: dict[str, str], dev: float, test: float, unit: str) -> None:
    """ConfigError when fractions below 1 (which ask for a train split) leave train no unit of a
    whole source: each fraction > 0 gets a unit, so a small source rounds train away, and training
    would only fail later, on an empty table. Fractions adding up to 1 mean no train split."""
    if not assignment or dev + test >= 1.0 - 1e-9 or "train" in assignment.values():
        return
    n_dev = sum(1 for split in assignment.values() if split == "dev")
    raise ConfigError(
        f"split: {len(assignment)} {unit}(s) leave none for train after {n_dev} dev and "
        f"{len(assignment) - n_dev} test {unit}(s) (dev={dev:g}, test={test:g}; a fraction > 0 gets "
        "at least one): add data, or set dev/test to 0, or to fractions adding up to 1 for a "
        "dataset without train"
    )

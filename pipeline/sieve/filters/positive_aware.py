"""``positive_aware``: NV-Retriever's rules, a candidate scored against its query's positive."""

from __future__ import annotations

import os
from typing import Any, Mapping, get_args

import numpy as np
import pandas as pd

from pipeline.sieve.filters._base import CandidateFilter, FilterInputs, FilterSetup, FilterSpec
from pipeline.sieve.settings import PositiveAwareSettings

POSITIVE_AWARE_MODES = get_args(PositiveAwareSettings.model_fields["mode"].annotation)


def positive_aware_keep(s_neg: np.ndarray, s_pos: np.ndarray, mode: str, margin: float) -> np.ndarray:
    """NV-Retriever's rules: True where the candidate stays a negative."""
    if mode == "relative":
        drop = s_neg > margin * s_pos
    elif mode == "difference":
        drop = s_neg > s_pos - margin
    elif mode == "absolute":
        drop = s_neg > margin
    else:
        raise ValueError(f"unknown positive_aware mode {mode!r} (expected one of {POSITIVE_AWARE_MODES})")
    return ~drop


def positive_aware_statistic(s_neg: np.ndarray, s_pos: np.ndarray, mode: str) -> np.ndarray:
    """The number each rule thresholds at its margin (drop iff statistic > margin, or > -margin for
    ``difference``): s_neg / s_pos (relative; +inf where s_pos <= 0, which the rule drops for any
    s_neg above a non-positive bound), s_neg - s_pos (difference), s_neg (absolute). It is the
    decisions' ``score``, so that the trade-off curve can sweep the margin."""
    if mode == "relative":
        safe = np.where(s_pos > 0, s_pos, 1.0)
        return np.where(s_pos > 0, s_neg / safe, np.inf)
    if mode == "difference":
        return s_neg - s_pos
    return np.asarray(s_neg, dtype=np.float64)


class PositiveAwareFilter(CandidateFilter):
    name = "positive_aware"

    def __init__(
        self, model: str | os.PathLike, mode: str = "relative", margin: float = 0.95, name: str | None = None
    ):
        if mode not in POSITIVE_AWARE_MODES:
            raise ValueError(f"unknown positive_aware mode {mode!r} (expected one of {POSITIVE_AWARE_MODES})")
        self.model, self.mode, self.margin = model, mode, margin
        if name is not None:  # the same rule under another filter's name (positive_aware_teacher)
            self.name = name

    def decide(self, inputs: FilterInputs) -> pd.DataFrame:
        sims = inputs.similarities(self.model)
        s_pos = np.repeat(sims.positive, np.diff(sims.offsets))
        keep = positive_aware_keep(sims.candidate, s_pos, self.mode, self.margin)
        return pd.DataFrame(
            {"score": positive_aware_statistic(sims.candidate, s_pos, self.mode), "kept": keep}
        )

    def reason(self, row: Mapping[str, Any], kept: bool) -> str:
        verdict = "kept" if kept else "suspected false negative"
        return f"{self.name} ({self.mode}, margin {self.margin:g}): statistic {row['score']:.4f}: {verdict}"


def build(setup: FilterSetup) -> PositiveAwareFilter:
    """positive_aware's rule under ``setup.name`` (positive_aware, positive_aware_teacher), its own section."""
    return PositiveAwareFilter(setup.model, setup.settings.mode, setup.settings.margin, name=setup.name)


FILTER = FilterSpec(
    "positive_aware",
    "s_neg > margin·s_pos (`relative`, NV-Retriever TopK-PercPos), s_neg > s_pos − margin (`difference`), "
    "s_neg > margin (`absolute`); cosine of `models/dpr`",
    build,
    score="the statistic the mode thresholds: s_neg/s_pos (relative; +inf where s_pos ≤ 0), s_neg − s_pos, s_neg",
    tradeoff=True,
)

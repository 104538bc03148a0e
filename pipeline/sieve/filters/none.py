"""``none``: keep everything (the noisy baseline)."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import pandas as pd

from pipeline.sieve.filters._base import CandidateFilter, FilterInputs, FilterSetup, FilterSpec


class NoFilter(CandidateFilter):
    name = "none"

    def decide(self, inputs: FilterInputs) -> pd.DataFrame:
        n = len(inputs.candidates)
        return pd.DataFrame({"score": np.full(n, np.nan), "kept": np.ones(n, dtype=bool)})

    def reason(self, row: Mapping[str, Any], kept: bool) -> str:
        return "no filter: kept"


def build(setup: FilterSetup) -> NoFilter:
    return NoFilter()


FILTER = FilterSpec("none", "never (the noisy baseline: every candidate stays a negative)", build)

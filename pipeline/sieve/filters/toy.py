"""``toy``: drop every ``every``-th candidate of a query's ranking (a demonstration filter)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from pipeline.sieve.filters._base import CandidateFilter, FilterInputs, FilterSetup, FilterSpec


class ToyFilter(CandidateFilter):
    name = "toy"

    def __init__(self, every: int):
        self.every = every

    def decide(self, inputs: FilterInputs) -> pd.DataFrame:
        rank = inputs.candidates["rank"].to_numpy(np.int64)
        return pd.DataFrame({"score": rank.astype(float), "kept": rank % self.every != 0})


def build(setup: FilterSetup) -> ToyFilter:
    return ToyFilter(setup.settings.every)


FILTER = FilterSpec("toy", "its rank is a multiple of `every`", build, score="rank")

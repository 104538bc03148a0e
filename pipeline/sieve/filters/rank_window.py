"""``rank_window``: FlagEmbedding's rule, drop the top ``start`` ranks of the source list."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import pandas as pd

from pipeline.sieve.filters._base import CandidateFilter, FilterInputs, FilterSetup, FilterSpec


class RankWindowFilter(CandidateFilter):
    name = "rank_window"

    def __init__(self, start: int = 10):
        if start < 0:
            raise ValueError("rank_window start must be >= 0")
        self.start = start

    def decide(self, inputs: FilterInputs) -> pd.DataFrame:
        rank = inputs.candidates["rank"].to_numpy(np.int64)
        return pd.DataFrame({"score": rank.astype(float), "kept": rank > self.start})

    def reason(self, row: Mapping[str, Any], kept: bool) -> str:
        verdict = "kept" if kept else "suspected false negative"
        return f"rank_window: rank {int(row['score'])} {'>' if kept else '<='} {self.start}: {verdict}"


def build(setup: FilterSetup) -> RankWindowFilter:
    return RankWindowFilter(setup.settings.start)


FILTER = FilterSpec(
    "rank_window",
    "its source rank ≤ `start` (FlagEmbedding skips the top ranks)",
    build,
    score="rank",
    refuses_formats={
        "flagembedding": "rank_window needs ranks; FlagEmbedding's hn_mine.py samples its negatives from a "
        "rank range in random order, so a position in neg is not a rank"
    },
    clean_help={
        "start": "rank_window: each set's negatives at positions 1..start in the file's order (the miner's "
        "ranks, sentence-transformers' range_min) are dropped; not for FlagEmbedding files, whose order is "
        "random"
    },
)

"""``absolute_margin``: sentence-transformers' rule, positive_aware's difference rule under its own name."""

from __future__ import annotations

import os

from pipeline.sieve.filters._base import FilterSetup, FilterSpec
from pipeline.sieve.filters.positive_aware import PositiveAwareFilter


class AbsoluteMarginFilter(PositiveAwareFilter):
    """sentence-transformers' ``absolute_margin``: positive_aware's difference rule, under its own name."""

    name = "absolute_margin"

    def __init__(self, model: str | os.PathLike, margin: float = 0.05):
        super().__init__(model, "difference", margin)


def build(setup: FilterSetup) -> AbsoluteMarginFilter:
    return AbsoluteMarginFilter(setup.model, setup.settings.margin)


FILTER = FilterSpec(
    "absolute_margin",
    "s_neg > s_pos − margin (sentence-transformers' `absolute_margin`, NV-Retriever's 0.05 variant): "
    "positive_aware's `difference` rule under its own name, so the comparison and the tournament hold it "
    "beside the relative one",
    build,
    score="s_neg − s_pos",
)

"""``cross_encoder``: RocketQA's rule, keep a candidate only below a cross-encoder's probability."""

from __future__ import annotations

import os
from typing import Any, Mapping

import pandas as pd

from pipeline.sieve.filters._base import CandidateFilter, FilterInputs, FilterSetup, FilterSpec


class CrossEncoderFilter(CandidateFilter):
    name = "cross_encoder"

    def __init__(self, model: str | os.PathLike, threshold: float = 0.1):
        self.model, self.threshold = model, threshold

    def decide(self, inputs: FilterInputs) -> pd.DataFrame:
        # the model library only where this filter runs (planning and the other filters start without it)
        from pipeline.sieve.cross_encoder import score_candidates

        prob = score_candidates(
            inputs.candidates,
            self.model,
            inputs.corpus,
            inputs.queries,
            batch_size=inputs.batch_size,
            device=inputs.device,
        )
        return pd.DataFrame({"score": prob, "kept": prob < self.threshold})

    def reason(self, row: Mapping[str, Any], kept: bool) -> str:
        verdict = "kept" if kept else "suspected false negative"
        return f"cross_encoder: probability {row['score']:.4f} {'<' if kept else '>='} {self.threshold:g}: {verdict}"


def build(setup: FilterSetup) -> CrossEncoderFilter:
    return CrossEncoderFilter(setup.model, setup.settings.threshold)


FILTER = FilterSpec(
    "cross_encoder",
    "the cross-encoder's probability ≥ `threshold` (RocketQA keeps a negative only below 0.1)",
    build,
    score="probability",
    tradeoff=True,
)

"""``answer_match``: DPR's rule, drop a candidate whose text contains an answer string."""

from __future__ import annotations

import pandas as pd

from pipeline.core.storage import DataError
from pipeline.sieve.filters._base import CandidateFilter, FilterInputs, FilterSetup, FilterSpec, log


class AnswerMatchFilter(CandidateFilter):
    name = "answer_match"

    def decide(self, inputs: FilterInputs) -> pd.DataFrame:
        cands = inputs.candidates
        if "has_answer" not in cands:
            raise DataError(
                "answer_match needs the has_answer column (written by pipeline.sieve.candidates)",
                field="has_answer",
            )
        known = cands["has_answer"].astype("boolean")
        if known.isna().any():
            log.warning(
                "answer_match: %d candidates have no answer to match (queries without answers); "
                "they are kept",
                int(known.isna().sum()),
            )
        hit = known.fillna(False).to_numpy(bool)
        return pd.DataFrame({"score": hit.astype(float), "kept": ~hit})


def build(setup: FilterSetup) -> AnswerMatchFilter:
    return AnswerMatchFilter()


FILTER = FilterSpec(
    "answer_match",
    "its text contains an answer string (DPR; `eval.match`)",
    build,
    score="1 = has answer",
    not_cleaning="answer_match needs each query's answer strings, which none of these formats carries",
)

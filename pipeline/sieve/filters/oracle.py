"""``oracle``: drop exactly the true false negatives, the upper bound of every filter."""

from __future__ import annotations

from typing import Any, Mapping

import pandas as pd

from pipeline.core.storage import DataError
from pipeline.sieve.filters._base import CandidateFilter, FilterInputs, FilterSetup, FilterSpec

EXACT_LABELS = ("qrels_all", "injected")


class OracleFilter(CandidateFilter):
    """Keeps exactly the candidates known not to be false negatives: only exact labels count."""

    name = "oracle"
    EXACT = EXACT_LABELS

    def decide(self, inputs: FilterInputs) -> pd.DataFrame:
        cands = inputs.candidates
        source = cands["fn_label_source"].astype("string")
        inexact = ~source.isin(self.EXACT).fillna(False).to_numpy(bool)
        if inexact.any():
            first = cands.loc[inexact].iloc[0]
            raise DataError(
                f"oracle needs exact false-negative labels (qrels_all or injected) for every candidate; "
                f"{int(inexact.sum())} of {len(cands)} have none (a dataset without qrels_all: use "
                f"answer_match, the answer-string approximation)",
                record=f"qid {first['qid']}, pid {first['pid']}",
                field="fn_label_source",
            )
        is_fn = cands["is_false_negative"].astype("boolean").to_numpy(bool)
        return pd.DataFrame({"score": is_fn.astype(float), "kept": ~is_fn})

    def reason(self, row: Mapping[str, Any], kept: bool) -> str:
        return f"oracle: {'a known true negative' if kept else 'a known false negative'}"


def build(setup: FilterSetup) -> OracleFilter:
    return OracleFilter()


FILTER = FilterSpec(
    "oracle",
    "it is a true false negative (`is_false_negative` from `qrels_all` or an injection); refuses "
    "candidates without exact labels, and the DAG refuses it on datasets without `qrels_all` while planning",
    build,
    score="1 = false negative",
)

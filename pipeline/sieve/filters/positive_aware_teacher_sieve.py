"""``positive_aware_teacher_sieve``: a candidate stays a negative only if both the sieve's rule and
positive_aware's keep it, both scored by the teacher (sieve.teacher) from one encoding."""

from __future__ import annotations

import os
from typing import Any, Mapping

import numpy as np
import pandas as pd

from pipeline.sieve.filters._base import CandidateFilter, FilterInputs, FilterSetup, FilterSpec
from pipeline.sieve.filters.positive_aware import positive_aware_keep, positive_aware_statistic
from pipeline.sieve.passage_sieve import sieve_table


class PositiveAwareTeacherSieveFilter(CandidateFilter):
    """Drops the union of what the sieve drops (after its fallback) and what positive_aware drops."""

    name = "positive_aware_teacher_sieve"

    def __init__(
        self,
        model: str | os.PathLike,
        *,
        mode: str = "relative",
        margin: float = 0.95,
        strict: bool = False,
        fallback: str = "random_one",
        seed: int = 0,
        temperature: float | None = None,
    ):
        self.model, self.mode, self.margin = model, mode, margin
        self.strict, self.fallback, self.seed, self.temperature = strict, fallback, seed, temperature

    def decide(self, inputs: FilterInputs) -> pd.DataFrame:
        sims = inputs.similarities(self.model, self.temperature)
        # The sieve's own decision, fallback included, so that this filter drops exactly the union of
        # sieve_teacher's and positive_aware_teacher's drops under the same settings.
        sieved = sieve_table(
            inputs.candidates, sims, strict=self.strict, fallback=self.fallback, seed=self.seed
        )
        s_pos = np.repeat(sims.positive, np.diff(sims.offsets))
        aware = positive_aware_keep(sims.candidate, s_pos, self.mode, self.margin)
        sieve_kept = sieved["kept"].to_numpy(bool)
        return pd.DataFrame(
            {
                "score": positive_aware_statistic(sims.candidate, s_pos, self.mode),
                "kept": sieve_kept & aware,
                "sieve_kept": sieve_kept,
                "aware_kept": aware,
                "loss": sieved["nce_loss"].to_numpy(),
                "threshold": sieved["threshold"].to_numpy(),
            }
        )

    def reason(self, row: Mapping[str, Any], kept: bool) -> str:
        if kept:
            return (
                f"{self.name}: kept by both: loss {row['loss']:.4f} vs threshold {row['threshold']:.4f}, "
                f"statistic {row['score']:.4f} within margin {self.margin:g} ({self.mode})"
            )
        who = []
        if not row["sieve_kept"]:
            who.append(f"the sieve (loss {row['loss']:.4f} below threshold {row['threshold']:.4f})")
        if not row["aware_kept"]:
            who.append(f"positive_aware ({self.mode}, margin {self.margin:g}: statistic {row['score']:.4f})")
        return f"{self.name}: suspected false negative: dropped by {' and '.join(who)}"


def build(setup: FilterSetup) -> PositiveAwareTeacherSieveFilter:
    return PositiveAwareTeacherSieveFilter(
        setup.model,
        mode=setup.settings.mode,
        margin=setup.settings.margin,
        seed=setup.seed,
        **setup.rule,
    )


FILTER = FilterSpec(
    "positive_aware_teacher_sieve",
    "what the sieve's rule or positive_aware's rule drops (the union), both scored by the teacher "
    "`models/{sieve.teacher}` (when cleaning a file: the model it names): what a practitioner with one start model would try",
    build,
    score="as positive_aware's (the sieve's loss is in a cleaning run's reason)",
)

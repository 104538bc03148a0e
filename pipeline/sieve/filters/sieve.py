"""``sieve``: Algorithm 1 (pipeline.sieve.passage_sieve), scored by the job's model."""

from __future__ import annotations

import os
from typing import Any, Mapping

import pandas as pd

from pipeline.core.schemas import SIEVE_SCHEMA
from pipeline.sieve.filters._base import CandidateFilter, FilterInputs, FilterSetup, FilterSpec
from pipeline.sieve.passage_sieve import sieve_table


class SieveFilter(CandidateFilter):
    """Algorithm 1; writes the full sieve layout (similarity, loss, threshold, fallback)."""

    schema = SIEVE_SCHEMA

    def __init__(
        self,
        model: str | os.PathLike,
        *,
        name: str = "sieve",
        strict: bool = False,
        fallback: str = "random_one",
        seed: int = 0,
        temperature: float | None = None,
    ):
        self.name, self.model = name, model
        self.strict, self.fallback, self.seed, self.temperature = strict, fallback, seed, temperature

    def decide(self, inputs: FilterInputs) -> pd.DataFrame:
        sims = inputs.similarities(self.model, self.temperature)
        return sieve_table(
            inputs.candidates, sims, strict=self.strict, fallback=self.fallback, seed=self.seed
        )

    def reason(self, row: Mapping[str, Any], kept: bool) -> str:
        verdict = "kept" if kept else "suspected false negative"
        if row["fallback"]:
            return f"{self.name}: nothing survived; kept by the random_one fallback"
        op = ">" if self.strict else ">="
        sign = op if kept else "<"
        if not kept and self.strict:
            sign = "<="
        return (
            f"{self.name}: loss {row['nce_loss']:.4f} {sign} threshold {row['threshold']:.4f} (mean over P): "
            f"{verdict}"
        )


def build(setup: FilterSetup) -> SieveFilter:
    """The sieve under ``setup.name`` (sieve, sieve_no_ccr: the same rule, another model)."""
    return SieveFilter(setup.model, name=setup.name, seed=setup.seed, **setup.rule)


FILTER = FilterSpec(
    "sieve",
    "Algorithm 1 with `models/dpr_ccr_b{ccr.beta}` (= `negatives/sieve_b{ccr.beta}.parquet`; each β of "
    "`sieve.betas` gives `sieve_b{β}`, models `dpr_ccr_b{β}`)",
    build,
    score="loss",
    tradeoff=True,
)

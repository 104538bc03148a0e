"""``sieve_no_ccr``: the sieve's rule scored by a model trained without CCR (the job's ``--model``)."""

from __future__ import annotations

from pipeline.sieve.filters._base import FilterSpec
from pipeline.sieve.filters.sieve import build

FILTER = FilterSpec(
    "sieve_no_ccr",
    "the same rule scored by `models/dpr` (no CCR): the ablation that shows what CCR adds; sieve layout",
    build,
    score="loss",
    tradeoff=True,
    not_cleaning="sieve_no_ccr is the sieve scored by a model without CCR: use --filter sieve --model <it>",
)

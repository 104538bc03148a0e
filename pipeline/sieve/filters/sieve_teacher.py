"""``sieve_teacher``: the sieve's rule scored by the teacher (sieve.teacher: the start model a user has)."""

from __future__ import annotations

from pipeline.sieve.filters._base import FilterSpec
from pipeline.sieve.filters.sieve import build

FILTER = FilterSpec(
    "sieve_teacher",
    "Algorithm 1 scored by the teacher `models/{sieve.teacher}` (zero-shot MiniLM by default; when cleaning "
    "a file: the model it names) instead of a model trained on the noisy negatives; sieve layout",
    build,
    score="loss",
    tradeoff=True,
)

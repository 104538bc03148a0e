"""``positive_aware_teacher``: NV-Retriever's positive-aware rule scored by the teacher (sieve.teacher),
under its own settings section: NV-Retriever tuned 0.95 on a teacher's scores, so a margin chosen for
models/dpr need not carry over."""

from __future__ import annotations

from pipeline.sieve.filters._base import FilterSpec
from pipeline.sieve.filters.positive_aware import build

FILTER = FilterSpec(
    "positive_aware_teacher",
    "positive_aware's rule (by default NV-Retriever's s_neg > 0.95·s_pos, as published: with a teacher) "
    "scored by the teacher `models/{sieve.teacher}` (when cleaning a file: the model it names)",
    build,
    score="as positive_aware's",
    tradeoff=True,
)

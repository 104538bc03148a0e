"""What an AR2 round records of config ar2 (the rule's --settings param): a change of it reruns the round."""
from __future__ import annotations

from dataclasses import fields
from typing import Any

from pipeline.core.settings import JobResources


def ar2_recorded_settings(ar2: dict[str, Any]) -> dict[str, Any]:
    """The config ar2 keys an AR2 round reads, recorded as the round's param (a change reruns it).

    Left out: which runs exist (seeds), ar2_select's metric, the job's reservation, and ``ranker``
    when round 1's ranker is models/cross_encoder (``ranker_init: cross_encoder``: ar2.ranker then
    builds nothing). Round 0, which only evaluates the DPR start, records them all the same:
    narrowing its record would rerun every existing AR2 chain once (round 0's round.json is part of
    round 1's fingerprint) to save one dev evaluation when a training setting changes.
    """
    resources = {f.name for f in fields(JobResources)}
    settings = {k: v for k, v in ar2.items() if k not in ("seeds", "select_metric", *resources)}
    if ar2.get("ranker_init") == "cross_encoder":
        settings.pop("ranker", None)
    return settings

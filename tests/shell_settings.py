"""The settings document a planned train_dense command carries (--settings-json, pipeline.workflow.jobs DATASET train_dpr|train_ccr|...)."""

from __future__ import annotations

import json
import shlex


def job_document(shell: str) -> dict:
    """The --settings-json document of a train_dense shell line."""
    words = shlex.split(shell.split("pipeline.training.train_dense", 1)[1].replace("$(dirname", "("))
    return json.loads(words[words.index("--settings-json") + 1])

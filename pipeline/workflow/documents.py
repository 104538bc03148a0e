"""A job's settings document as the rules pass it: one JSON value, recorded as the rule's param (a
changed setting reruns the job) and validated by the stage's contract (pipeline.core.settings). Each
family's glue (pipeline/workflow/<family>.py) builds its documents with these; pipeline.workflow.jobs
prints any job's document for a run by hand.
"""

from __future__ import annotations

import json
import shlex
from typing import Any, Sequence

from pipeline.core.settings.base import Contract, default


def as_json(document: dict[str, Any]) -> str:
    """The document as the rule records and passes it: JSON with sorted keys, so equal settings give
    equal params (Snakemake reruns a job whose params change)."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"), allow_nan=False)


def settings_flag(document: dict[str, Any]) -> str:
    """A job's settings document as its stage reads it."""
    return "--settings-json " + shlex.quote(as_json(document))


def from_entry(
    cls: type[Contract], entry: dict[str, Any], keys: Sequence[str] | None = None
) -> dict[str, Any]:
    """The fields ``keys`` of contract ``cls`` (default: all) as a config entry gives them, else the
    contract's defaults (a dataset's entry in the config has its defaults left out)."""
    return {key: entry[key] if key in entry else default(cls, key) for key in keys or cls.model_fields}

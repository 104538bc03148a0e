"""The settings document of a generate_synthkb job (pipeline.core.settings.job_documents.GenerateJob), built from the
dataset's entry in the config (workflow/rules/synthkb.smk passes it whole; a hand run reads it from a
file: python -m pipeline.workflow.jobs DATASET generate)."""

from __future__ import annotations

from typing import Any, Callable

from pipeline.core.settings.job_documents import GenerateJob
from pipeline.workflow.documents import from_entry, settings_flag
from pipeline.workflow.tables import Wildcards, WorkflowTables


def generate_job(spec: dict[str, Any]) -> dict[str, Any]:
    """The generator settings of a synthkb dataset whose config entry is ``spec``: each as the entry
    gives it, else the contract's default (a synthkb dataset without a split splits by entity)."""
    return from_entry(GenerateJob, spec)


def generate_settings(tables: WorkflowTables) -> Callable[[Wildcards], str]:
    """params function of generate_synthkb: the job's document, recorded and passed whole."""
    return lambda wildcards: settings_flag(generate_job(tables.datasets[wildcards.dataset]))

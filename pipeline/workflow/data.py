"""The settings document of a prepare_dataset job (pipeline.core.settings.job_documents.PrepareJob), built from the
dataset's entry in the config (workflow/rules/data.smk passes it whole; a hand run reads it from a file:
python -m pipeline.workflow.jobs DATASET prepare). The source files are the job's inputs, not settings."""

from __future__ import annotations

from typing import Any, Callable

from pipeline.core.settings.job_documents import PrepareJob
from pipeline.workflow.documents import from_entry, settings_flag
from pipeline.workflow.tables import Wildcards, WorkflowTables


def prepare_job(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """How dataset ``name`` (config entry ``spec``) is prepared: its format, split and empty_positives as
    the entry gives them, else the contract's defaults."""
    keys = [key for key in PrepareJob.model_fields if key != "dataset"]
    return {"dataset": name, **from_entry(PrepareJob, spec, keys)}


def prepare_settings(tables: WorkflowTables) -> Callable[[Wildcards], str]:
    """params function of prepare_dataset: the job's document, recorded and passed whole."""
    return lambda wildcards: settings_flag(prepare_job(wildcards.dataset, tables.datasets[wildcards.dataset]))

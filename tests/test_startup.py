"""Start-up (issue 38.2): a job pays for torch and transformers only when it runs a model, and planning
the DAG imports neither. On a GPU node the demo's small jobs spent ~20 s each starting; on 2 CPU cores
importing torch + transformers alone takes 3 s, of the ~0.4 s a model-free stage needs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "transformers", "faiss", "openvino")

# Stages that run no model, or load one only when a filter needs it (passage_sieve, filters).
MODEL_FREE_STAGES = (
    "pipeline.synthkb.generate",
    "pipeline.data.download",
    "pipeline.data.prepare",
    "pipeline.retrieval.bm25",
    "pipeline.retrieval.mining",
    "pipeline.retrieval.runs",
    "pipeline.evaluation.evaluate",
    "pipeline.evaluation.export_qrels",
    "pipeline.evaluation.gather",
    "pipeline.evaluation.hybrid",
    "pipeline.evaluation.seed_metrics",
    "pipeline.evaluation.sweep",
    "pipeline.sieve.candidates",
    "pipeline.sieve.passage_sieve",
    "pipeline.sieve.filters",
    "pipeline.sieve.report",
    "pipeline.sieve.figures",
    "pipeline.sieve.tradeoff",
    "pipeline.ar2.round_summary",
    "pipeline.ar2.learning_curve",
)


def _heavy_after(code: str) -> list[str]:
    probe = f"{code}\nimport sys\nprint(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.split()


@pytest.mark.parametrize("module", MODEL_FREE_STAGES)
def test_a_stage_without_a_model_starts_without_torch(module):
    assert _heavy_after(f"import {module}") == []


def test_planning_the_dag_imports_no_model_library(tmp_path):
    code = (
        "from snakemake.api import SnakemakeApi\n"
        "from snakemake.settings.types import OutputSettings, ResourceSettings\n"
        "with SnakemakeApi(OutputSettings(quiet={'all'})) as api:\n"
        f"    api.workflow(resource_settings=ResourceSettings(), snakefile=__import__('pathlib').Path({str(REPO / 'Snakefile')!r}),"
        f" workdir=__import__('pathlib').Path({str(tmp_path)!r}))._workflow\n"
    )
    assert _heavy_after(code) == []

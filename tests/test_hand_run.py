"""A stage run by hand with the workflow's settings document writes byte-identical output to the
workflow's job (issue 43's acceptance), for one stage of each family: synthkb generate, data prepare,
retrieval (BM25 index; the dense search, a mining search and the dense mining of zeroshot), training
(CCR), the passage sieve, AR2 mining and an AR2 round's sieve, evaluation.

The workflow runs once on tiny data (40 synthkb entities, the DPR fixture, DPR untrained, 2 CCR steps)
under an overlay that sets, for every stage, a setting away from its contract default, so a hand run that
fell back on defaults would write other bytes. Each job's command is taken from Snakemake's printout; its
inline document must equal, as a JSON value, what ``python -m pipeline.workflow.jobs DATASET STAGE`` prints, and the
same command with ``--settings <that printout>`` instead rewrites the job's outputs byte for byte.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_workflow import snakemake

from pipeline.core.config import deep_merge, load_config
from pipeline.core.methods import ar2_sieve_tag
from pipeline.core.settings.base import default
from pipeline.core.settings.job_documents import (
    Ar2MineJob,
    Ar2SieveJob,
    Bm25IndexJob,
    EvaluateJob,
    GenerateJob,
    MineJob,
    MiningSearchJob,
    PrepareJob,
    SearchJob,
    SieveJob,
)
from pipeline.training.settings import CcrSettings
from pipeline.workflow import paths

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
DPR = REPO / "tests" / "fixtures" / "dpr"
OVERLAY = {
    "methods": ["bm25", "zeroshot", "ar2_sieve"],
    "datasets": {
        "synthkb": {"entities": 40, "positive": "source"},
        "nqfix": {
            "format": "dpr",
            "empty_positives": "drop",
            "source": {
                "corpus": str(DPR / "psgs_w100.tsv"),
                "train": str(DPR / "biencoder-nq-train.json.gz"),
                "dev": str(DPR / "biencoder-nq-dev.json"),
                "test": str(DPR / "nq-test.qa.csv"),
            },
        },
    },
    "bm25": {"k1": 1.2, "b": 0.75, "negatives": 20},
    "eval": {"ks": [1, 3, 10], "depth": 50},
    "dpr": {"skip": True},
    "ccr": {"max_steps": 2},
    "sieve": {"in_batch": 5, "figure_queries": 40, "temperature": 0.5},
    "ar2": {"top_k": 10},
    "encode": {"shards": 1},
}
SIEVE = paths.negatives("synthkb", "sieve_b6")
# ar2_sieve's round 1 (seed 0) sieves ar2/start/negatives.parquet in its variant's folder
AR2_ROUND1 = paths.ar2_round_dir("synthkb", "sieve" + ar2_sieve_tag(deep_merge(load_config(), OVERLAY)), 0, 1)
# stage (the printer's name) -> (dataset, the stage's module and its first word, its outputs, a setting
# the overlay moves off its contract default: (contract, key, value); a training document nests it
# under "train")
STAGES = {
    "generate": (
        "synthkb",
        "pipeline.synthkb.generate",
        [paths.dataset_dir("synthkb")],
        (GenerateJob, "positive", "source"),
    ),
    "prepare": (
        "nqfix",
        "pipeline.data.prepare",
        [paths.dataset_dir("nqfix")],
        (PrepareJob, "empty_positives", "drop"),
    ),
    "bm25_index": (
        "synthkb",
        "pipeline.retrieval.bm25 index",
        [os.path.dirname(paths.bm25_index_checksums("synthkb"))],
        (Bm25IndexJob, "k1", 1.2),
    ),
    "train_ccr": (
        "synthkb",
        "pipeline.training.train_dense",
        [paths.model_dir("synthkb", "dpr_ccr_b6")],
        (CcrSettings, "max_steps", 2),
    ),
    "passage_sieve": (
        "synthkb",
        "pipeline.sieve.passage_sieve",
        [SIEVE, paths.train_negatives("synthkb", "sieve_b6"), paths.sieve_losses("synthkb", "sieve_b6")],
        (SieveJob, "in_batch", 5),
    ),
    "ar2_mine": (
        "synthkb",
        "pipeline.ar2.mine",
        [
            paths.ar2_start_file("synthkb", "negatives.parquet"),
            paths.ar2_start_file("synthkb", "negatives.stats.json"),
        ],
        (Ar2MineJob, "top_k", 10),
    ),
    "ar2_sieve": (
        "synthkb",
        "pipeline.ar2.sieving",
        [f"{AR2_ROUND1}/sieve.parquet", f"{AR2_ROUND1}/sieve.stats.json"],
        (Ar2SieveJob, "temperature", 0.5),
    ),
    "evaluate": (
        "synthkb",
        "pipeline.evaluation.evaluate",
        [paths.method_metrics("synthkb", "bm25"), paths.per_query("synthkb", "bm25")],
        (EvaluateJob, "ks", [1, 3, 10]),
    ),
    "search_dense": (
        "synthkb",
        "pipeline.retrieval.search",
        [paths.run("synthkb", "zeroshot", "test")],
        (SearchJob, "depth", 50),
    ),
    "search_for_mining": (
        "synthkb",
        "pipeline.retrieval.search",
        [paths.mining_run("synthkb", "zeroshot")],
        (MiningSearchJob, "negatives", 20),
    ),
    "mine_dense_negatives": (
        "synthkb",
        "pipeline.retrieval.mining",
        [paths.negatives("synthkb", "zeroshot")],
        (MineJob, "negatives", 20),
    ),
}
# What tells a stage's job from another job of its module in Snakemake's printout.
MARKS = {"evaluate": "bm25/run.", "search_dense": "zeroshot/run.test.", "search_for_mining": "--mining-qrels"}
# Measured, not computed: how long the job took.
TIMINGS = {"wall_s", "examples_per_s"}


@pytest.fixture(scope="module")
def workflow_run(tmp_path_factory) -> tuple[Path, dict[str, str], Path]:
    """(work folder, stage -> the job's shell command, the overlay file) after one run of the workflow."""
    work = tmp_path_factory.mktemp("hand_run")
    targets = [
        paths.dataset_manifest("nqfix"),
        paths.method_metrics("synthkb", "bm25"),
        SIEVE,
        paths.ar2_start_file("synthkb", "negatives.parquet"),
        f"{AR2_ROUND1}/sieve.parquet",
        paths.run("synthkb", "zeroshot", "test"),
        paths.negatives("synthkb", "zeroshot"),
    ]
    proc = snakemake(work, *targets, "-p", overlay=OVERLAY)
    commands: dict[str, str] = {}
    for line in (proc.stdout + proc.stderr).splitlines():
        if not line.startswith("Shell command: "):
            continue
        command = line.removeprefix("Shell command: ")
        for stage, (_, module, _, _) in STAGES.items():
            if stage == "train_ccr":  # the training launcher picks the interpreter and device first
                if f"-m {module} " in command and "models/dpr_ccr_b6" in command:
                    commands[stage] = command
                continue
            if command.startswith(f"python -m {module} ") and MARKS.get(stage, "") in command:
                assert stage not in commands, f"two {stage} jobs ran"
                commands[stage] = command
    assert set(commands) == set(STAGES), f"jobs not run: {set(STAGES) - set(commands)}"
    return work, commands, work / "overlay.yaml"


def _files(root: Path) -> dict[str, bytes]:
    if root.is_file():
        return {"": root.read_bytes()}
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _untimed(value: object) -> object:
    if isinstance(value, dict):
        return {k: _untimed(v) for k, v in value.items() if k not in TIMINGS}
    return value


def _comparable(name: str, data: bytes) -> object:
    if name.endswith((".stats.json", "train_info.json")):
        return _untimed(json.loads(data))
    if name.endswith("train_log.jsonl"):
        return [_untimed(json.loads(line)) for line in data.splitlines()]
    return data


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_a_hand_run_with_the_job_s_document_writes_the_job_s_bytes(workflow_run, stage):
    work, commands, overlay = workflow_run
    dataset, module, outputs, (contract, key, value) = STAGES[stage]
    printer = ["pipeline.workflow.jobs", dataset, stage]
    printed = subprocess.run(
        [sys.executable, "-m", *printer, "--configfile", str(overlay)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    document = json.loads(printed)
    # The overlay's value, not the default: a hand run on defaults would write other bytes.
    assert (document["train"] if stage == "train_ccr" else document)[key] == value != default(contract, key)
    # The job's inline document, as a JSON value (a β of the sweep is passed as 6.0 where the config
    # says 6: the same setting once validated)
    (inline,) = re.findall(r"--settings-json '[^']*'", commands[stage])
    assert json.loads(shlex.split(inline)[1]) == document, (
        f"the job's document is not the printed one:\n{commands[stage]}"
    )
    (work / f"{stage}.json").write_text(printed)
    by_hand = commands[stage].replace(inline, f"--settings {stage}.json")
    expected = {}
    for out in outputs:
        expected[out] = {name: _comparable(name or out, data) for name, data in _files(work / out).items()}
        assert expected[out], f"{out}: the job wrote nothing"
        target = work / out
        shutil.rmtree(target) if target.is_dir() else target.unlink()  # the hand run writes them anew
    env = dict(
        os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}", PYTHONPATH=str(REPO)
    )
    subprocess.run(["bash", "-c", by_hand], cwd=work, env=env, check=True, capture_output=True)
    for out in outputs:
        written = {name: _comparable(name or out, data) for name, data in _files(work / out).items()}
        assert written.keys() == expected[out].keys(), out
        differ = [name or out for name in written if written[name] != expected[out][name]]
        assert not differ, f"{stage}: the hand run wrote other bytes to {differ}"

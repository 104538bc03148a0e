"""The SLURM rehearsal: the user's cluster command (`snakemake --profile slurm results/<d>/metrics.json`)
with the paper recipe's rule shape (AR2 rounds with and without the CCR-scored sieve, two seeds, the
corpus encoded in shards) on a 40-entity synthkb, on a real SLURM that enforces what a production
cluster does (scripts/slurm_local.sh: memory cgroups, jobs without a network, partition time caps).

About 150 jobs: ~7 minutes run locally on 2 CPU cores, longer through SLURM; so it is not part of
`make test` (marker `rehearsal`, deselected by pyproject's addopts). Run it with `make rehearsal`.
The short checks of the same cluster (network, the under-requested control) are in tests/test_slurm.py
and run with every `make test`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from test_slurm import (  # noqa: F401
    _copy_repo,
    _enforced,
    _jobs_in_log,
    _python_shim,
    _squeue_jobs,
    site_partitions,
    slurm_cluster,
)

TARGET = "results/synthkb/metrics.json"
ROUNDS, SEEDS, SHARDS = 2, [0, 1], 2
# recipes.paper's rules, scaled to 2 CPU cores: MiniLM (the one model offline), a few steps per stage.
OVERLAY = {
    "seeds": SEEDS,
    "encode": {"shards": SHARDS},
    "datasets": {"synthkb": {"entities": 40, "recipe": "rehearsal"}},
    "recipes": {
        "rehearsal": {
            "extends": "paper",
            "description": "recipes.paper's rules on 2 CPU cores: MiniLM, a few steps each",
            "model": {"base": "minilm", "shared_towers": True, "query_max_len": 32, "passage_max_len": 64},
            "dpr": {
                "epochs": 1,
                "batch_size": 8,
                "max_steps": 3,
                "checkpoint_every": 2,
                "gpus": 0,
                "threads": 1,
                "mem_mb": 3000,
            },
            "ccr": {
                "epochs": 1,
                "batch_size": 8,
                "max_steps": 2,
                "checkpoint_every": 1,
                "gpus": 0,
                "threads": 1,
                "mem_mb": 3000,
            },
            "sieve": {"gpus": 0},
            "ar2": {
                "rounds": ROUNDS,
                "top_k": 10,
                "negatives": 3,
                "batch_size": 4,
                "listwise": {"steps": 2, "batch_size": 4, "negatives": 3, "rerank_depth": 10},
                "ranker_steps": 2,
                "retriever_steps": 2,
                "ranker": {"base": "minilm", "max_len": 64},
                "checkpoint_every": 1,
                "encode_batch_size": 64,
                "threads": 1,
                "gpus": 0,
                "mem_mb": 3000,
            },
        }
    },
}


def _cpu_profile(repo: Path) -> None:
    """The shipped profile with its GPU requests set to 0: this node has no GPU, and sbatch refuses
    --gpus on it. Everything else (runtimes, memory, threads, status polling) as shipped."""
    path = repo / "profiles" / "slurm" / "config.yaml"
    profile = yaml.safe_load(path.read_text())
    for resources in (profile.get("set-resources") or {}).values():
        for key in ("gpu", "gpus"):
            if key in resources:
                resources[key] = 0
    path.write_text(yaml.safe_dump(profile, sort_keys=False))


@pytest.mark.slurm
@pytest.mark.slow
@pytest.mark.rehearsal
def test_the_paper_recipe_shape_runs_through_the_slurm_profile(slurm_cluster, tmp_path):  # noqa: F811
    enforced = _enforced(slurm_cluster)
    repo = _copy_repo(tmp_path / "repo")
    (repo / "overlay.yaml").write_text(yaml.safe_dump(OVERLAY))
    _cpu_profile(repo)
    site_partitions(repo, slurm_cluster)
    record = tmp_path / "python_calls.tsv"
    _python_shim(tmp_path / "shim", record)
    venv_bin = str(Path(sys.executable).parent)
    env = dict(slurm_cluster, PATH=f"{tmp_path / 'shim'}:{venv_bin}:{os.environ.get('PATH', '')}")
    cmd = [
        sys.executable, "-m", "snakemake", "--cores", "2", "--max-threads", "2", "--profile", "slurm",
        "--slurm-init-seconds-before-status-checks", "2", "--slurm-keep-successful-logs",
        TARGET, "--configfile", "overlay.yaml",
    ]  # fmt: skip
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=7200)
    wall = time.monotonic() - start
    log = proc.stdout + proc.stderr
    (tmp_path / "snakemake.log").write_text(log)
    assert proc.returncode == 0, f"the rehearsal failed after {wall:.0f} s:\n{log[-8000:]}"

    jobs = _jobs_in_log(log)
    submitted = dict(re.findall(r"Job (\d+) has been submitted with SLURM jobid (\d+)", log))
    local = sorted({rule for is_local, rule, _ in jobs if is_local})
    counts: dict[str, int] = {}
    for _, rule, _ in jobs:
        counts[rule] = counts.get(rule, 0) + 1
    # the paper recipe's shape: every round of both AR2 variants for each seed, the corpus in shards
    assert counts.get("ar2_train") == ROUNDS * 2 * len(SEEDS), counts
    assert counts.get("ar2_sieve") == ROUNDS * len(SEEDS), counts
    assert counts.get("ar2_encode_corpus", 0) >= ROUNDS * 2 * len(SEEDS) * SHARDS, counts
    assert counts.get("train_ccr") == 1 and counts.get("train_dpr") == 1, counts

    # every job but the declared local rules went through sbatch and completed in SLURM
    controller = _squeue_jobs(slurm_cluster)
    states = {controller[s][0] for s in submitted.values()}
    assert states == {"COMPLETED"}, {s: controller[s] for s in submitted.values()}
    assert len(submitted) == len(jobs) - sum(1 for is_local, _, _ in jobs if is_local)
    calls = [line.split("\t", 1) for line in record.read_text().splitlines()]
    outside = [args for job, args in calls if job == "none"]
    assert not outside, f"stage commands ran outside a SLURM job: {outside[:3]}"

    metrics = json.loads((repo / TARGET).read_text())
    summary = {
        "jobs": len(jobs),
        "slurm_jobs": len(submitted),
        "local_rules": local,
        "wall_s": round(wall),
        "enforced": enforced,
        "methods": sorted(metrics.get("methods", metrics)),
    }
    print("rehearsal:", json.dumps(summary))
    (Path(os.environ.get("SIEVE_REHEARSAL_REPORT", tmp_path / "rehearsal.json"))).write_text(
        json.dumps(summary, indent=1)
    )

"""The Snakemake DAG end to end: dry runs of the declared datasets and of the conda deployment, a tiny
real run, no-op reruns."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
SNAKEMAKE = Path(sys.executable).with_name("snakemake")

pytestmark = pytest.mark.slow


def snakemake(
    workdir: Path, *args: str, overlay: dict | None = None, check: bool = True, search_path: str | None = None
) -> subprocess.CompletedProcess:
    # Targets go before --configfile: Snakemake 9 reads every later argument as another config file.
    cmd = [str(SNAKEMAKE), *args, "-s", str(REPO / "Snakefile"), "--directory", str(workdir), "--cores", "2"]
    if overlay is not None:
        path = workdir / "overlay.yaml"
        path.write_text(yaml.safe_dump(overlay))
        cmd += ["--configfile", str(path)]
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{search_path or os.environ.get('PATH', '')}")
    proc = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"snakemake {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
        )
    return proc


def jobs_in_dry_run(output: str) -> dict[str, int]:
    """Parse the 'Job stats' table of a dry run: rule -> count."""
    counts: dict[str, int] = {}
    in_table = False
    for line in output.splitlines():
        parts = line.split()
        if parts[:2] == ["job", "count"]:
            in_table = True
            continue
        if in_table:
            if len(parts) == 2 and parts[1].isdigit():
                if parts[0] != "total":
                    counts[parts[0]] = int(parts[1])
            elif parts and not set(parts[0]) <= {"-"}:
                break
    return counts


def test_nq_dry_run_lists_the_chain(tmp_path):
    proc = snakemake(tmp_path, "-n", "results/nq/bm25/metrics.json")
    jobs = jobs_in_dry_run(proc.stdout + proc.stderr)
    assert jobs.get("download", 0) >= 3, jobs
    for rule in ("prepare_dataset", "index_bm25", "retrieve_bm25", "evaluate"):
        assert jobs.get(rule) == 1, (rule, jobs)


def test_unknown_config_key_stops_the_workflow(tmp_path):
    proc = snakemake(
        tmp_path, "-n", "results/synthkb/metrics.json", overlay={"bm25": {"k_one": 1.0}}, check=False
    )
    assert proc.returncode != 0
    assert "bm25" in proc.stderr + proc.stdout and "k_one" in proc.stderr + proc.stdout


def test_ar2_seeds_are_separate_runs_averaged_into_the_method(tmp_path):
    overlay = {"methods": ["ar2", "ar2_sieve"], "ar2": {"seeds": [0, 1], "rounds": 1}}
    proc = snakemake(tmp_path, "-n", "results/synthkb/metrics.json", overlay=overlay)
    out = proc.stdout + proc.stderr
    jobs = jobs_in_dry_run(out)
    # 2 variants x 2 seeds x rounds 0..1; one evaluation per seed (none of the method: its
    # metrics.json is the seeds' mean); one mean per method
    assert jobs.get("ar2_round") == 8, jobs
    # each trained round a rule of its own: 2 variants x 2 seeds x round 1, DPR's candidates mined once,
    # each round's corpus encoded in encode.shards (2) parallel jobs
    assert jobs.get("ar2_train") == 4 and jobs.get("ar2_mine_start") == 1 and "ar2_mine" not in jobs, jobs
    assert jobs.get("ar2_encode_corpus") == 8 and jobs.get("ar2_gather_embeddings") == 4, jobs
    assert jobs.get("evaluate") == 4 and jobs.get("ar2_seeds") == 2, jobs
    for seed in (0, 1):
        # the sieve variant's folders carry its scorer (the demo's: models/dpr, no CCR)
        assert f"results/synthkb/ar2/sieve_no_ccr/seed{seed}/round1/round.json" in out
        assert f"results/synthkb/ar2_sieve_no_ccr/seed{seed}/run.test.parquet" in out


TINY = {"datasets": {"synthkb": {"entities": 40}}, "methods": ["bm25"]}


def test_tiny_synthkb_bm25_end_to_end_and_noop_rerun(tmp_path):
    snakemake(
        tmp_path, "results/synthkb/metrics.json", "results/synthkb/negatives/bm25.parquet", overlay=TINY
    )
    gathered = json.loads((tmp_path / "results/synthkb/metrics.json").read_text())
    bm25 = gathered["methods"]["bm25"] if "methods" in gathered else gathered["bm25"]
    metrics = bm25["metrics"] if "metrics" in bm25 else bm25
    for key in ("R@1", "R@5", "R@20", "MRR@10"):
        assert 0.0 <= metrics[key] <= 1.0
    assert metrics["R@5"] >= metrics["R@1"]
    assert (tmp_path / "results/synthkb/metrics.md").read_text().count("bm25") >= 1
    negatives = pd.read_parquet(tmp_path / "results/synthkb/negatives/bm25.parquet")
    qrels = pd.read_parquet(tmp_path / "resources/synthkb/qrels.train.parquet")
    assert len(negatives) > 0
    assert negatives.merge(qrels, on=["qid", "pid"]).empty  # annotated positives never mined
    # Unchanged inputs and params: nothing to do.
    proc = snakemake(
        tmp_path, "-n", "results/synthkb/metrics.json", "results/synthkb/negatives/bm25.parquet", overlay=TINY
    )
    assert "Nothing to be done" in proc.stdout + proc.stderr


# Snakemake needs a conda installation even to plan (`conda info --json` for the environments'
# location, `conda --version`, `conda config`); it creates nothing in a dry run. Where no conda is
# installed (this project's machines: it is neither on PyPI nor in Debian), this stand-in answers
# exactly those queries and refuses everything else, so the dry run below is Snakemake's own
# planning with the workflow's conda: lines and env files (it reads each file to name the env).
STAND_IN_CONDA = """#!/bin/sh
case "$*" in
  "info --json") printf '{"conda_prefix": "%s", "platform": "linux-64"}\\n' "$(dirname "$0")" ;;
  "--version") echo "conda 24.7.1" ;;
  "config --get channel_priority --json") echo '{"get": {"channel_priority": "strict"}}' ;;
  *) echo "stand-in conda: '$*' is not supported" >&2; exit 1 ;;
esac
"""


def conda_path(tmp_path: Path) -> str:
    """PATH with a conda on it: the installed one, else the stand-in."""
    path = os.environ.get("PATH", "")
    if shutil.which("conda"):
        return path
    stand_in = tmp_path / "stand-in-conda" / "conda"
    stand_in.parent.mkdir()
    stand_in.write_text(STAND_IN_CONDA)
    stand_in.chmod(0o755)
    return f"{stand_in.parent}:{path}"


def planned_envs(output: str) -> set[Path]:
    return {Path(env).resolve() for env in re.findall(r"Conda environment (\S+) will be created", output)}


def test_conda_deployment_plans_the_demo_with_the_workflow_envs(tmp_path):
    envs = REPO / "envs"
    work = tmp_path / "work"
    work.mkdir()
    path = conda_path(tmp_path)
    # The option takes several values: it goes after the targets.
    proc = snakemake(
        work, "-n", "results/synthkb/metrics.json", "--software-deployment-method", "conda", search_path=path
    )
    out = proc.stdout + proc.stderr
    assert jobs_in_dry_run(out).get("gather_metrics") == 1, out[-3000:]
    assert planned_envs(out) == {envs / "sieve-cpu.yaml"}, out[-3000:]
    # A job that holds GPUs (here given by --set-resources, as the slurm profile does) gets the CUDA build.
    proc = snakemake(
        work,
        "-n",
        "results/synthkb/metrics.json",
        "--set-resources",
        "train_dpr:gpus=1",
        "--software-deployment-method",
        "conda",
        search_path=path,
    )
    out = proc.stdout + proc.stderr
    assert planned_envs(out) == {envs / "sieve-cpu.yaml", envs / "sieve-cuda.yaml"}, out[-3000:]

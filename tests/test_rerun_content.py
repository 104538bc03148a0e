"""Reruns follow content, not mtimes or recorded paths (issue 39, items 3, 4, 7, 8).

What DVC and Bazel do: a content change reruns its dependents whatever the mtime says, and an
unchanged content reruns nothing whatever the mtime says. Snakemake judges an input by its mtime
first and, when it is newer than the output, by the checksum it recorded (files up to 1 MB; never a
folder): so what a rule loads from outside the workflow (a base model folder, a local source file)
reaches it as a small fingerprint file whose producer records the content's digest, and the BM25
index is declared by its checksums.json, not as a directory().
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
SNAKEMAKE = Path(sys.executable).with_name("snakemake")
TINY = {"format": "synthkb", "entities": 40, "seed": 0, "split": {"by": "entity", "dev": 0.1, "test": 0.2, "seed": 0}}

pytestmark = pytest.mark.slow


def snakemake(workdir: Path, overlay: dict, *args: str, check: bool = True) -> str:
    (workdir / "overlay.yaml").write_text(yaml.safe_dump(overlay))
    cmd = [str(SNAKEMAKE), *args, "-s", str(REPO / "Snakefile"), "--directory", str(workdir), "--cores", "2"]
    cmd += ["--configfile", str(workdir / "overlay.yaml")]
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
    proc = subprocess.run(cmd, check=False, cwd=workdir, env=env, capture_output=True, text=True)
    out = proc.stdout + proc.stderr
    if check:
        assert proc.returncode == 0, f"{' '.join(args)} failed:\n{out[-4000:]}"
    return out


def planned_rules(out: str) -> set[str]:
    """The rules of a dry run's job table (empty for 'Nothing to be done')."""
    rules, table = set(), False
    for line in out.splitlines():
        if line.startswith("Job stats:"):
            table = True
        elif table and line.strip().startswith("total"):
            break
        elif table and line.strip() and not line.startswith(("job", "-")):
            rules.add(line.split()[0])
    return rules


# ---- item 8: a copy of results/ away and back reruns nothing --------------------------------------


def test_a_copy_of_results_away_and_back_reruns_nothing(tmp_path):
    overlay = {"datasets": {"tiny": TINY}, "methods": ["bm25"]}
    targets = ["results/tiny/bm25/metrics.json", "results/tiny/negatives/bm25.parquet"]
    snakemake(tmp_path, overlay, *targets)
    # cp -r (no -p): every file gets a new mtime, the BM25 index's the newest
    shutil.copytree(tmp_path / "results", tmp_path / "away", copy_function=shutil.copy)
    shutil.rmtree(tmp_path / "results")
    time.sleep(0.05)
    shutil.copytree(tmp_path / "away", tmp_path / "results", copy_function=shutil.copy)
    later = time.time() + 5
    for path in (tmp_path / "results/tiny/bm25/index").rglob("*"):
        os.utime(path, (later, later))
    out = snakemake(tmp_path, overlay, "-n", *targets)
    assert planned_rules(out) == set(), out[-3000:]
    # an index rebuilt with other content still reruns what reads it
    checksums = tmp_path / "results/tiny/bm25/index/checksums.json"
    checksums.write_text(json.dumps({"sha256": {"other.npy": "0" * 64}}))
    out = snakemake(tmp_path, overlay, "-n", *targets)
    assert {"retrieve_bm25", "mine_bm25_negatives", "evaluate"} <= planned_rules(out), out[-3000:]

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
TINY = {
    "format": "synthkb",
    "entities": 40,
    "seed": 0,
    "split": {"by": "entity", "dev": 0.1, "test": 0.2, "seed": 0},
}

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


# ---- a workspace of recorded empty outputs (as tests/test_rerun_triggers.py builds it) -------------


def recorded_workspace(workdir: Path, overlay: dict, targets: list[str]) -> None:
    """Every output the targets need, created empty and recorded by `snakemake --touch` (params,
    inputs and their checksums, as a real run records them); nothing computed."""
    out = snakemake(workdir, overlay, "--summary", "--forceall", *targets)
    for line in out.splitlines():
        first = line.split("\t")[0]
        if first.startswith(("results/", "resources/", "downloads/")):
            path = workdir / first
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()
    snakemake(workdir, overlay, "--touch", "--forceall", *targets)
    assert planned_rules(snakemake(workdir, overlay, "-n", *targets)) == set()


def set_back(path: Path, seconds: float = 3600) -> None:
    """Content replaced with an older mtime (cp -p, tar x)."""
    old = time.time() - seconds
    os.utime(path, (old, old))


# ---- item 3: a local base folder's content is an input of what loads it ---------------------------


def test_a_local_base_folder_with_new_weights_reruns_what_loads_it(tmp_path):
    base = tmp_path / "my-encoder"
    base.mkdir()
    (base / "config.json").write_text('{"model_type": "bert"}')
    (base / "model.safetensors").write_bytes(b"weights v1")
    overlay = {
        "datasets": {"tiny": TINY},
        "methods": ["zeroshot", "dpr"],
        "model": {"base": str(base)},
        "sieve": {"cross_encoder": {"base": str(base)}},
        "ar2": {"ranker": {"base": "minilm"}},  # a name: no fingerprint
    }
    targets = [
        "results/tiny/models/zeroshot/retriever.json",
        "results/tiny/models/dpr/retriever.json",
        "results/tiny/models/cross_encoder/ranker.json",
    ]
    recorded_workspace(tmp_path, overlay, targets)
    # the same content with a new mtime (a copy of the folder) reruns nothing
    shutil.copytree(base, tmp_path / "copy")
    shutil.rmtree(base)
    shutil.copytree(tmp_path / "copy", base, copy_function=shutil.copy)
    assert planned_rules(snakemake(tmp_path, overlay, "-n", *targets)) == set()
    # new weights, an older mtime
    (base / "model.safetensors").write_bytes(b"weights v2")
    set_back(base / "model.safetensors")
    out = snakemake(tmp_path, overlay, "-n", *targets)
    assert planned_rules(out) >= {"init_zeroshot", "train_dpr", "train_cross_encoder"}, out[-3000:]
    assert {"generate_synthkb", "index_bm25", "mine_bm25_negatives"}.isdisjoint(planned_rules(out)), out[
        -3000:
    ]


# ---- item 4: a local source's content, whatever its mtime -----------------------------------------


def test_a_source_replaced_with_an_older_mtime_reruns_its_dataset(tmp_path):
    source = tmp_path / "data" / "toy.json"
    source.parent.mkdir()
    source.write_text('{"data": ["v1"]}')
    overlay = {
        "datasets": {
            "toy": {
                "format": "squad",
                "source": "data/toy.json",
                "split": {"by": "article", "dev": 0.2, "test": 0.2, "seed": 0},
            }
        },
        "methods": ["bm25"],
    }
    targets = ["results/toy/bm25/metrics.json"]
    recorded_workspace(tmp_path, overlay, targets)
    # cp of the same content: a new mtime reruns nothing
    shutil.copy(source, tmp_path / "toy.copy")
    shutil.copy(tmp_path / "toy.copy", source)
    assert planned_rules(snakemake(tmp_path, overlay, "-n", *targets)) == set()
    # other content with an older mtime (cp -p, tar x)
    source.write_text('{"data": ["v2"]}')
    set_back(source)
    out = snakemake(tmp_path, overlay, "-n", *targets)
    assert {"fingerprint", "prepare_dataset", "index_bm25", "evaluate"} <= planned_rules(out), out[-3000:]


# ---- item 7: a pinned sha256 is checked against the downloaded file, not recorded -----------------


def test_pinning_the_downloaded_files_digest_reruns_nothing_and_a_wrong_pin_is_named(tmp_path):
    import hashlib

    source = {"url": "https://example.org/toy.json"}
    overlay = {
        "datasets": {
            "toy": {
                "format": "squad",
                "source": source,
                "split": {"by": "article", "dev": 0.2, "test": 0.2, "seed": 0},
            }
        },
        "methods": ["bm25"],
    }
    targets = ["results/toy/bm25/metrics.json"]
    recorded_workspace(tmp_path, overlay, targets)
    from pipeline.data.readers.sources import url_file

    downloaded = tmp_path / url_file(source["url"])
    # docs/data.md: copy the digest of the downloaded file into the config
    source["sha256"] = hashlib.sha256(downloaded.read_bytes()).hexdigest()
    out = snakemake(tmp_path, overlay, "-n", *targets)
    assert planned_rules(out) == set(), out[-3000:]
    source["sha256"] = "0" * 64
    out = snakemake(tmp_path, overlay, "-n", *targets, check=False)
    assert f"{url_file(source['url'])} has sha256 {hashlib.sha256(b'').hexdigest()}" in out, out[-3000:]
    assert f"pins sha256 {'0' * 64}" in out, out[-3000:]

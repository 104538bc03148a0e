"""Issue 52's first hour, as a new user meets it: the sieve inspector before the demo ran and on
unlabelled data, and the metrics a reader of metrics.md expects (nDCG@10, the two recalls told apart,
a method identical to its baseline said once)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from pipeline.core.cli import run_main
from pipeline.core.schemas import CANDIDATES_SCHEMA, FILTER_DECISIONS_SCHEMA
from pipeline.core.storage import write_table
from pipeline.sieve import inspect_negatives as inspect

REPO = Path(__file__).resolve().parents[1]


def fails(main, argv, capsys, *names) -> str:
    """Run the stage in-process; it must exit 2 with one error line naming each of ``names``."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        run_main(main, [str(a) for a in argv])
    assert exc.value.code == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, lines
    for name in names:
        assert str(name) in lines[0], (name, lines[0])
    return lines[0]


# ---- the inspector before the demo -------------------------------------------------------------------


def test_inspect_before_the_demo_names_the_missing_decisions_and_the_command_once(tmp_path):
    """It said "0 sieve outputs (β = none); choose one with --beta or --filter", twice: the missing
    file is the demo's sieve decisions, which no --beta or --filter makes."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-m", "pipeline.sieve.inspect_negatives", "--dataset", "synthkb", "--sample", "3"]
    done = subprocess.run(
        [*argv, "--dropped"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert len(lines) == 1, lines
    assert "results/synthkb/sieve/sieve_no_ccr/decisions.parquet" in lines[0]
    assert "make demo" in lines[0] and ".venv/bin/snakemake" in lines[0]
    assert "choose one" not in lines[0]


def test_inspect_names_what_builds_a_missing_filter_or_beta(tmp_path, capsys):
    where = ["--results-dir", tmp_path / "results", "--resources-dir", tmp_path / "resources"]
    (tmp_path / "results" / "synthkb").mkdir(parents=True)
    line = fails(inspect.main, ["--dataset", "synthkb", *where, "--filter", "rank_window"], capsys)
    assert "sieve/rank_window/decisions.parquet" in line and "not built yet" in line
    line = fails(inspect.main, ["--dataset", "synthkb", *where, "--beta", "0.5"], capsys)
    assert "negatives/sieve_b0.5.parquet" in line and "not built yet" in line


@pytest.mark.parametrize("summary", [[], ["summary"]])
def test_an_undeclared_dataset_is_named_with_the_declared_ones(tmp_path, capsys, summary):
    argv = [*summary, "--dataset", "nosuch", "--results-dir", tmp_path / "results"]
    line = fails(inspect.main, argv, capsys, "'nosuch' is not declared", "synthkb", "nq", "--configfile")
    assert "sieve output" not in line


def test_summary_before_the_demo_names_the_candidates_and_the_command(tmp_path, capsys):
    argv = ["summary", "--dataset", "synthkb", "--results-dir", tmp_path / "results"]
    fails(
        inspect.main, argv, capsys, "results/synthkb/sieve/candidates.parquet", "not built yet", "snakemake"
    )


# ---- the summary on unlabelled data ------------------------------------------------------------------


def _unlabelled(tmp_path: Path, labels: list[bool | None]) -> Path:
    """A dataset's sieve candidates and the demo's sieve output, with these false-negative labels."""
    results = tmp_path / "results" / "mine"
    n = len(labels)
    common = {
        "qid": [f"q{i // 2}" for i in range(n)],
        "pid": [f"p{i}" for i in range(n)],
        "rank": [i % 2 + 1 for i in range(n)],
        "is_false_negative": labels,
        "fn_label_source": [None if label is None else "qrels_all" for label in labels],
        "positive_pid": [f"pos{i // 2}" for i in range(n)],
    }
    write_table(
        results / "sieve" / "candidates.parquet",
        pa.table(
            {f.name: common.get(f.name, [None] * n) for f in CANDIDATES_SCHEMA}, schema=CANDIDATES_SCHEMA
        ),
    )
    decisions = {**common, "kept": [i % 2 == 0 for i in range(n)]}
    write_table(
        results / "sieve" / "sieve_no_ccr" / "decisions.parquet",
        pa.table(
            {f.name: decisions.get(f.name, [None] * n) for f in FILTER_DECISIONS_SCHEMA},
            schema=FILTER_DECISIONS_SCHEMA,
        ),
    )
    return tmp_path / "results"


def _summary(results: Path, capsys, monkeypatch) -> str:
    monkeypatch.setenv("COLUMNS", "200")
    capsys.readouterr()
    assert inspect.main(["summary", "--dataset", "mine", "--results-dir", str(results)]) == 0
    return " ".join(capsys.readouterr().out.split())


def test_summary_of_unlabelled_data_says_precision_is_unknown_not_zero(tmp_path, capsys, monkeypatch):
    out = _summary(_unlabelled(tmp_path, [None] * 6), capsys, monkeypatch)
    assert "0.000" not in out, out
    assert "precision and FN recall unknown" in out and "no candidate has a false-negative label" in out
    assert "sieve_no_ccr 3 0.500 – unknown unknown unknown" in out


def test_summary_precision_counts_only_the_labelled_drops(tmp_path, capsys, monkeypatch):
    """report.py's definition (|dropped ∩ FN| / |dropped ∩ labelled|): the inspector divided by every
    drop, so an unlabelled drop counted as a wrong one."""
    # drops are rows 1, 3, 5: a false negative, an unlabelled one, a true negative
    labels = [False, True, False, None, False, False]
    out = _summary(_unlabelled(tmp_path, labels), capsys, monkeypatch)
    assert "of its 3 drops (2 labelled), a share of 0.500 were true false negatives (precision)" in out

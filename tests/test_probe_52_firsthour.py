"""Issue 52's first hour, as a new user meets it: the sieve inspector before the demo ran and on
unlabelled data, and the metrics a reader of metrics.md expects (nDCG@10, the two recalls told apart,
a method identical to its baseline said once)."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from stage_failures import fails

from pipeline.core.schemas import CANDIDATES_SCHEMA, FILTER_DECISIONS_SCHEMA
from pipeline.core.storage import write_table
from pipeline.workflow import inspect_negatives as inspect

REPO = Path(__file__).resolve().parents[1]


# ---- the inspector before the demo -------------------------------------------------------------------


def test_inspect_before_the_demo_names_the_missing_decisions_and_the_command_once(tmp_path):
    """It said "0 sieve outputs (β = none); choose one with --beta or --filter", twice: the missing
    file is the demo's sieve decisions, which no --beta or --filter makes."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    argv = [
        sys.executable,
        "-m",
        "pipeline.workflow.inspect_negatives",
        "--dataset",
        "synthkb",
        "--sample",
        "3",
    ]
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


# ---- nDCG@10 -----------------------------------------------------------------------------------------


def test_ndcg_at_10_is_binary_ndcg_by_hand():
    """BEIR's / MTEB's headline: gain 1/log2(rank + 1) per relevant passage in the top 10, over the gain
    of the ideal ranking of min(10, |relevant|) relevant passages; a query not ranked scores 0."""
    from pipeline.evaluation import metrics

    ranked = {
        "q1": ["x", "a", "y", "b"],  # two of three relevant, at ranks 2 and 4
        "q2": ["a"],  # its one relevant passage first: 1
        "q3": [f"n{i}" for i in range(10)] + ["a"],  # the relevant one at rank 11: past the cut-off
    }
    qrels = {"q1": {"a", "b", "c"}, "q2": {"a"}, "q3": {"a"}, "q4": {"a"}}  # q4 not ranked: 0
    q1 = (1 / math.log2(3) + 1 / math.log2(5)) / (1 + 1 / math.log2(3) + 1 / math.log2(4))
    assert q1 == pytest.approx(0.498189, abs=1e-6)
    per_query = metrics.ndcg_per_query(ranked, qrels, 10)
    assert per_query == pytest.approx({"q1": q1, "q2": 1.0, "q3": 0.0, "q4": 0.0})
    assert metrics.ndcg_at_k(ranked, qrels, 10) == pytest.approx((q1 + 1.0) / 4)
    # more relevant passages than the cut-off: the ideal ranking fills the top k
    many = {"q": {f"r{i}" for i in range(20)}}
    assert metrics.ndcg_at_k({"q": [f"r{i}" for i in range(10)]}, many, 10) == pytest.approx(1.0)
    assert metrics.ndcg_at_k({"q": ["x", "r0"]}, many, 1) == 0.0


def test_qrels_metrics_give_ndcg_after_mrr():
    from pipeline.evaluation import metrics

    ranked, qrels = {"q1": ["x", "a"]}, {"q1": {"a"}}
    got = metrics.qrels_metrics(ranked, qrels, [1], with_ndcg=True)
    assert list(metrics.order_metrics({**got, "R@1": 0.0})) == [
        "R@1",
        "MRR@10",
        "nDCG@10",
        "hit@1",
        "recall@1",
    ]
    assert got["nDCG@10"] == pytest.approx(1 / math.log2(3))


# ---- metrics.md: the two recalls, identical methods --------------------------------------------------


def _gathered(comparisons: list[dict]) -> dict:
    entry = {"split": "test", "n_queries": 4, "seeds": [None]}
    return {
        "dataset": "toy",
        "methods": {
            "bm25": {
                **entry,
                "metrics": {"R@1": 0.5, "MRR@10": 0.5, "nDCG@10": 0.6, "hit@1": 0.5, "recall@1": 0.25},
            },
            "dpr": {
                **entry,
                "metrics": {"R@1": 0.75, "MRR@10": 0.6, "nDCG@10": 0.7, "hit@1": 0.5, "recall@1": 0.5},
            },
        },
        "comparisons": comparisons,
    }


def _query_diff(diff: float, std: float, low: float, high: float, p: float) -> dict:
    return {
        "diff": diff,
        "std": std,
        "ci_low": low,
        "ci_high": high,
        "p_value": p,
        "n_queries": 4,
        "exact": True,
    }


def _comparison(method: str, baseline: str, diffs: dict) -> dict:
    return {
        "method": method, "baseline": baseline, "level": 0.95, "n": 1, "seeds": [None], "only_method": [],
        "only_baseline": [], "interval": "queries", "metrics": diffs,
    }  # fmt: skip


def test_metrics_md_tells_the_two_recalls_apart_and_defines_ndcg():
    from pipeline.evaluation.gather import markdown_table

    text = markdown_table(_gathered([]))
    lines = {line.split(":", 1)[0]: line for line in text.splitlines() if line.startswith("- ")}
    assert "not recall@k" in lines["- R@k"] and "answer string" in lines["- R@k"]
    assert "not R@k" in lines["- hit@k / recall@k"] and "share of them" in lines["- hit@k / recall@k"]
    assert "binary relevance" in lines["- nDCG@10"] and "BEIR" in lines["- nDCG@10"]
    assert "a different recall from R@k" in text


def test_a_method_identical_to_its_baseline_is_said_once():
    from pipeline.evaluation.gather import markdown_table

    names = ("R@1", "MRR@10", "nDCG@10", "hit@1", "recall@1")
    same = {name: _query_diff(0.0, 0.0, 0.0, 0.0, 1.0) for name in names}
    differs = {**same, "R@1": _query_diff(0.25, 0.5, -0.55, 1.05, 1.0)}
    text = markdown_table(_gathered([_comparison("dpr", "bm25", same), _comparison("bm25", "dpr", differs)]))
    rows = {
        line.split(" | ")[0]: line for line in text.splitlines() if line.startswith("| ") and " − " in line
    }
    assert "identical rankings" in rows["| dpr − bm25"]
    assert "p=1.000" not in rows["| dpr − bm25"]
    assert rows["| dpr − bm25"].count("|") == rows["| bm25 − dpr"].count("|")  # the table stays a table
    # a real difference keeps its cells, even where its other metrics are equal
    assert (
        "identical" not in rows["| bm25 − dpr"] and "+0.250 [-0.550, 1.050] p=1.000" in rows["| bm25 − dpr"]
    )


# ---- the pages' commands in a fresh shell ------------------------------------------------------------

DOCS = REPO / "docs"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
# A command a fresh shell of a plain clone cannot find: the venv's tools are called by path.
BARE = re.compile(
    r"^\s*(snakemake|sieve-clean|sieve-inspect|python -m|python (?:bench|scripts)/|pip install)\b"
)


def _commands(page: Path) -> list[str]:
    """The lines of a page's shell blocks (fenced bash/sh/untagged, and 4-space indented command lines)."""
    text = page.read_text(encoding="utf-8")
    lines = [
        line
        for lang, body in FENCE.findall(text)
        if lang in ("", "bash", "sh", "shell")
        for line in body.splitlines()
    ]
    lines += [line for line in text.splitlines() if line.startswith("    ") and BARE.match(line)]
    return lines


# docs/clean.md is left out here until its commands are changed the same way.
PAGES = ["README.md", *sorted(f"docs/{p.name}" for p in DOCS.glob("*.md"))]


@pytest.mark.parametrize("page", PAGES)
def test_every_command_of_the_pages_runs_in_a_fresh_shell(page):
    """`snakemake: command not found`: the pages showed bare commands while the README said nothing
    needs activating. Each now calls the venv's tools by path."""
    bare = [line.strip() for line in _commands(REPO / page) if BARE.match(line)]
    assert not bare, f"{page}: {bare}"


def test_the_readme_names_setup_the_demos_html_and_how_long_the_tests_take():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert "make setup" in text
    assert "results/synthkb/metrics.html" in text
    # The figure names the CPU it was measured on (the session machines differ: Xeon, EPYC, AVX2-only).
    assert re.search(r"`make test` took \d+ s in CI on [^.]*(Intel Xeon|AMD EPYC)", " ".join(text.split()))


def test_the_demo_builds_the_metrics_html_the_readme_names(workflow):
    """A rule of the loaded workflow writes it beside metrics.md (the README sends a new user there)."""
    from pipeline.workflow.paths import dataset_metrics

    outputs = [str(f) for rule in workflow.rules for f in rule.output]
    pattern = re.escape(dataset_metrics("{dataset}", "html")).replace(r"\{dataset\}", r"\{dataset(,[^}]*)?\}")
    assert any(re.fullmatch(pattern, output) for output in outputs), pattern
    assert dataset_metrics("synthkb", "html") == "results/synthkb/metrics.html"


def test_a_missing_file_of_other_sieve_settings_asks_for_their_overlay(tmp_path, capsys):
    """`make demo` builds the demo's sieve settings only; a tagged file needs the overlay that sets them."""
    argv = [
        "summary",
        "--dataset",
        "synthkb",
        "--results-dir",
        tmp_path / "results",
        "--settings",
        "_pool200",
    ]
    line = fails(inspect.main, argv, capsys, "candidates_pool200.parquet", "--configfile <the overlay")
    assert "make demo" not in line

"""Issue 40: what the README says is what a user's own run shows.

Every shell block of README.md runs as written in a copy of the repository's files (no ../shared, no
results of an earlier run, no activated venv), with the commands that would build or train
intercepted: the copy's `.venv/bin/snakemake` runs a dry run (`-n`), `make` prints its recipe (`-n`),
and `.venv/bin/python -m MODULE ...` checks that the module exists and its command line parses
(`--help`), except the README's own results script, which runs on the demo's metrics.json. The demo's
results block must equal what that script prints from docs/data/demo/metrics.json, and every relative
link resolves inside the repository.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.evaluation import readme_results

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DEMO_METRICS = REPO / "docs" / "data" / "demo" / "metrics.json"
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")

# Bash functions that stand in for the commands that would build or train (see the module docstring).
STANDINS = r"""
make() { command make -n "$@" >/dev/null; }
"""


def _blocks(language: str) -> list[str]:
    return [body for lang, body in BLOCK.findall(README.read_text(encoding="utf-8")) if lang == language]


def _repository_copy(root: Path) -> Path:
    """The repository's files (tracked and new, not ignored) as a fresh clone has them, and the demo's
    metrics.json where `make demo` writes it."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split("\0")
    clone = root / "clone"
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, clone / name)
    (clone / "results" / "synthkb").mkdir(parents=True)
    shutil.copy2(DEMO_METRICS, clone / "results" / "synthkb" / "metrics.json")
    # The venv `make demo` creates, as stand-ins run by the interpreter running the tests.
    bin_dir = clone / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    stand_ins = {
        "snakemake": f'exec "{sys.executable}" -m snakemake -n "$@"',
        "python": (
            'if [ "$1" = "-m" ] && [ "$2" != "pipeline.evaluation.readme_results" ]; then\n'
            f'    exec "{sys.executable}" -m "$2" --help >/dev/null\nfi\nexec "{sys.executable}" "$@"'
        ),
        "sieve-clean": f'exec "{sys.executable}" -m pipeline.sieve.clean --help >/dev/null',
    }
    for name, body in stand_ins.items():
        (bin_dir / name).write_text(f"#!/usr/bin/env bash\n{body}\n", encoding="utf-8")
        (bin_dir / name).chmod(0o755)
    return clone


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    return _repository_copy(tmp_path_factory.mktemp("readme"))


def test_the_readme_shows_shell_commands_and_no_shared_paths():
    text = README.read_text(encoding="utf-8")
    assert "../shared" not in text
    commands = "\n".join(_blocks("bash"))
    for expected in ("make demo", "make test", ".venv/bin/snakemake", "--profile profiles/slurm"):
        assert expected in commands
    # every command runs from a plain clone as written: none needs the venv activated first
    assert "activate" not in commands


@pytest.mark.parametrize("index", range(len(_blocks("bash"))))
def test_each_shell_block_of_the_readme_runs_as_written(clone, index):
    """Each block in a fresh shell whose PATH has no venv: the README calls the venv's tools by path."""
    blocks = _blocks("bash")
    script = "set -euo pipefail\n" + STANDINS + blocks[index]
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PYTHONPATH"] = str(clone)
    env["PATH"] = os.pathsep.join(
        p for p in os.environ["PATH"].split(os.pathsep) if Path(p) != Path(sys.executable).parent
    )
    result = subprocess.run(
        ["bash", "-c", script], cwd=clone, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, (
        f"README block {index}:\n{blocks[index]}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    )
    assert "never awaited" not in result.stderr


def test_the_readme_python_snippets_are_python():
    for snippet in _blocks("python"):
        ast.parse(snippet)


def test_the_demo_results_block_is_what_the_script_prints_from_the_demos_metrics():
    gathered = readme_results.read_json_object(DEMO_METRICS)
    block = readme_results.readme_block(README.read_text(encoding="utf-8"))
    assert block == readme_results.results_block(gathered), (
        "regenerate: python -m pipeline.evaluation.readme_results docs/data/demo/metrics.json"
    )
    assert readme_results.main([str(DEMO_METRICS), "--check", str(README)]) == 0


def test_the_first_screen_is_what_the_script_prints_from_the_demos_metrics():
    text = README.read_text(encoding="utf-8")
    gathered = readme_results.read_json_object(DEMO_METRICS)
    block = readme_results.readme_block(text, readme_results.FIRST_BEGIN, readme_results.FIRST_END)
    assert block == readme_results.first_screen(gathered), (
        "regenerate: python -m pipeline.evaluation.readme_results docs/data/demo/metrics.json --write README.md"
    )
    # under the title, before anything else a reader meets
    assert text.index(readme_results.FIRST_BEGIN) < text.index("## ")


def _metrics(pairs: dict | None = None, interval: str = "queries", **values: float) -> dict:
    """Hand-made gathered metrics: one hit_all@1 mean per method and, per (method, baseline), a paired
    difference (d, lo, hi) with its interval's kind."""
    comparisons = [
        {
            "method": m,
            "baseline": b,
            "interval": interval,
            "metrics": {"hit_all@1": {"diff": d, "ci_low": lo, "ci_high": hi, "p_value": 0.01}},
        }
        for (m, b), (d, lo, hi) in (pairs or {}).items()
    ]
    return {
        "dataset": "d",
        "methods": {
            m: {"split": "test", "n_queries": 10, "metrics": {"hit_all@1": v}} for m, v in values.items()
        },
        "comparisons": comparisons,
    }


# The demo's shape: BM25 ahead of every trained model, the filter winning back most of the cost.
DEMO_LIKE = dict(bm25=0.7, zeroshot=0.64, dpr_none=0.52, dpr_oracle=0.67, dpr_sieve=0.62, ar2_sieve=0.53)
COST = {("dpr_oracle", "dpr_none"): (0.15, 0.11, 0.19)}


def test_the_first_screen_says_what_the_false_negatives_cost_and_what_the_filter_wins_back():
    text = readme_results.first_screen(
        _metrics({**COST, ("dpr_sieve", "dpr_none"): (0.10, 0.06, 0.13)}, **DEMO_LIKE)
    )
    assert "scores 0.520 hit_all@1 and, with the false negatives removed by the true labels, 0.670" in text
    assert "the false negatives cost 0.150 [0.110, 0.190]" in text
    assert "wins back +0.100 [+0.060, +0.130], 67% of that cost" in text
    # the intervals' basis is said once: one seed's test queries are not retrains
    assert text.count("95% intervals over the 10 test queries of one training seed, not over retrains") == 1
    assert "ar2_sieve (0.530), ends below the untrained model it starts from (zeroshot, 0.640)" in text
    assert "and below BM25 (0.700)" in text
    # two or three plain sentences, one paragraph
    assert text.count(". ") + 1 <= 4 and text.endswith(".\n") and "\n" not in text[:-1]


def test_a_filter_that_loses_or_is_not_separated_is_said_so():
    loses = readme_results.first_screen(
        _metrics(
            {**COST, ("dpr_sieve", "dpr_none"): (-0.05, -0.08, -0.02)}, **{**DEMO_LIKE, "dpr_sieve": 0.47}
        )
    )
    assert (
        "the passage sieve, loses a further -0.050 [-0.080, -0.020] against the unfiltered candidates"
        in loses
    )
    assert "wins back" not in loses and "of that cost" not in loses
    level = readme_results.first_screen(
        _metrics({**COST, ("dpr_sieve", "dpr_none"): (0.01, -0.02, 0.04)}, **{**DEMO_LIKE, "dpr_sieve": 0.53})
    )
    assert "is not separated from the unfiltered candidates (+0.010 [-0.020, +0.040])" in level
    assert "wins back" not in level
    # a cost whose interval holds 0 is no cost shown, and there is nothing to win back a share of
    free = readme_results.first_screen(
        _metrics(
            {("dpr_oracle", "dpr_none"): (0.02, -0.01, 0.05), ("dpr_sieve", "dpr_none"): (0.03, 0.01, 0.05)},
            **{**DEMO_LIKE, "dpr_oracle": 0.54, "dpr_sieve": 0.55},
        )
    )
    assert "here the false negatives cost nothing that shows (0.020 [-0.010, 0.050])" in free
    assert "wins back +0.030 [+0.010, +0.050] (95% intervals" in free and "of that cost" not in free


def test_when_bm25_leads_the_first_screen_says_use_bm25_or_the_hybrid_as_its_interval_says():
    alone = readme_results.first_screen(_metrics(COST, **DEMO_LIKE))
    assert (
        "On this data BM25 (0.700) is ahead of every model trained here (the best, dpr_oracle, 0.670)"
        in alone
    )
    assert "use BM25 (this run measured no hybrid of BM25 and a trained model)." in alone
    tied = readme_results.first_screen(
        _metrics(
            {**COST, ("hybrid_wsum_dpr_sieve", "bm25"): (-0.01, -0.03, 0.01)},
            **DEMO_LIKE,
            hybrid_wsum_dpr_sieve=0.69,
        )
    )
    assert (
        "its hybrid with the trained model, hybrid_wsum_dpr_sieve (0.690), is not separated from it" in tied
    )
    assert tied.rstrip().endswith("use BM25 or the hybrid.")
    below = readme_results.first_screen(
        _metrics(
            {**COST, ("hybrid_wsum_dpr_sieve", "bm25"): (-0.05, -0.07, -0.03)},
            **DEMO_LIKE,
            hybrid_wsum_dpr_sieve=0.65,
        )
    )
    assert (
        "and of its hybrid with the trained model, hybrid_wsum_dpr_sieve (-0.050 [-0.070, -0.030]): use BM25."
        in below
    )
    # a trained control above BM25: BM25 is then only ahead of the final model and the untrained one
    oracle_ahead = readme_results.first_screen(_metrics(COST, **{**DEMO_LIKE, "dpr_oracle": 0.75}))
    assert "ahead of the default pipeline's final model and the untrained one" in oracle_ahead


def test_the_first_screen_names_the_hybrid_the_final_model_or_the_start_when_it_leads():
    hybrid = readme_results.first_screen(
        _metrics(
            {**COST, ("hybrid_wsum_dpr_sieve", "bm25"): (0.04, 0.02, 0.06)},
            **DEMO_LIKE,
            hybrid_wsum_dpr_sieve=0.74,
        )
    )
    assert (
        "BM25 fused with the trained model, hybrid_wsum_dpr_sieve (0.740), is ahead of BM25 (0.700) by "
        in hybrid
    )
    assert hybrid.rstrip().endswith("+0.040 [+0.020, +0.060]: use the hybrid.")
    level = readme_results.first_screen(
        _metrics(
            {**COST, ("hybrid_wsum_dpr_sieve", "bm25"): (0.01, -0.01, 0.03)},
            **DEMO_LIKE,
            hybrid_wsum_dpr_sieve=0.71,
        )
    )
    assert (
        "hybrid_wsum_dpr_sieve (0.710) is not separated from BM25 (0.700; +0.010 [-0.010, +0.030])" in level
    )
    trained = readme_results.first_screen(_metrics(COST, **{**DEMO_LIKE, "bm25": 0.5, "ar2_sieve": 0.75}))
    assert "ar2_sieve (0.750), ends above the untrained model" in trained and "above BM25 (0.500)" in trained
    assert "final model (ar2_sieve, 0.750) is ahead of bm25 (0.500) and zeroshot (0.640)" in trained
    assert "train with the defaults" in trained and "use BM25" not in trained
    start = readme_results.first_screen(_metrics(COST, **{**DEMO_LIKE, "bm25": 0.5}))
    assert (
        "the untrained model (zeroshot, 0.640) is ahead of the others: keep the model you start from" in start
    )
    # intervals over seeds are called that
    seeds = readme_results.first_screen(_metrics(COST, interval="seeds", **DEMO_LIKE))
    assert "(95% intervals over the training seeds)" in seeds and "test queries" not in seeds
    # a run without the controls says nothing it cannot back
    assert readme_results.first_screen(_metrics(bm25=0.5)) == "\n"


def test_changed_metrics_make_the_readmes_first_screen_stale(tmp_path, capsys):
    """Regenerated from docs/data/demo's metrics, the first screen equals the README's; from the same
    metrics with BM25 no longer ahead, it does not, and the check says so."""
    gathered = readme_results.read_json_object(DEMO_METRICS)
    text = README.read_text(encoding="utf-8")
    block = readme_results.readme_block(text, readme_results.FIRST_BEGIN, readme_results.FIRST_END)
    assert block == readme_results.first_screen(gathered)
    gathered["methods"]["bm25"]["metrics"]["hit_all@1"] = 0.3
    changed = tmp_path / "metrics.json"
    changed.write_text(json.dumps(gathered), encoding="utf-8")
    assert readme_results.first_screen(gathered) != block
    assert readme_results.main([str(changed), "--check", str(README)]) == 1
    assert "the first screen block differs" in capsys.readouterr().err


def test_a_stale_first_screen_fails_the_check(tmp_path, capsys):
    text = README.read_text(encoding="utf-8")
    stale = tmp_path / "README.md"
    stale.write_text(text.replace("the false negatives cost", "the false negatives cost about"))
    assert readme_results.main([str(DEMO_METRICS), "--check", str(stale)]) == 1
    assert "the first screen block differs" in capsys.readouterr().err
    assert readme_results.main([str(DEMO_METRICS), "--write", str(stale)]) == 0
    assert stale.read_text(encoding="utf-8") == text


def test_the_results_script_prints_the_primary_metric_controls_and_query_intervals(tmp_path, capsys):
    gathered = readme_results.read_json_object(DEMO_METRICS)
    text = readme_results.results_block(gathered)
    assert "Primary metric: **hit_all@1**" in text
    assert "dpr_oracle (control)" in text and "(control) | 1 | **" not in text
    if all(c.get("interval") == "queries" for c in gathered["comparisons"]):
        assert "not over training seeds" in text
    changed = tmp_path / "README.md"
    changed.write_text(
        README.read_text(encoding="utf-8").replace("Primary metric: **hit_all@1**", "Primary: R@1"),
        encoding="utf-8",
    )
    assert readme_results.main([str(DEMO_METRICS), "--check", str(changed)]) == 1
    assert "differs" in capsys.readouterr().err


@pytest.mark.parametrize("page", ["README.md", *sorted(p.name for p in (REPO / "docs").glob("*.md"))])
def test_every_relative_link_resolves_in_the_repository(page):
    path = REPO / page if page == "README.md" else REPO / "docs" / page
    missing = [
        target
        for target in LINK.findall(path.read_text(encoding="utf-8"))
        if "://" not in target and not target.startswith("mailto:") and not (path.parent / target).exists()
    ]
    assert not missing, f"{page}: links that do not resolve in a clone: {missing}"


def test_jobs_run_with_the_interpreter_running_snakemake(tmp_path):
    # `.venv/bin/snakemake` without an activated venv: the jobs' `python -m pipeline...` must still be
    # the venv's, so the Snakefile puts the interpreter running Snakemake first on their PATH.
    code = (
        "import os, sys\n"
        "from pathlib import Path\n"
        "from snakemake.api import SnakemakeApi\n"
        "from snakemake.settings.types import OutputSettings, ResourceSettings\n"
        "with SnakemakeApi(OutputSettings(quiet={'all'})) as api:\n"
        f"    api.workflow(resource_settings=ResourceSettings(), snakefile=Path({str(REPO / 'Snakefile')!r}),"
        f" workdir=Path({str(tmp_path)!r}))._workflow\n"
        "print(os.environ['PATH'].split(os.pathsep)[0] == os.path.dirname(sys.executable))\n"
    )
    env = {**os.environ, "PATH": "/usr/bin:/bin"}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().endswith("True")


def test_the_goals_are_met_only_where_the_run_shows_it():
    # paired intervals: one below 0 (shown below), one holding 0 (not shown below)
    shown = readme_results.goal_lines(
        _metrics(
            {
                ("ar2_sieve", "zeroshot"): (-0.11, -0.15, -0.07),
                ("ar2_sieve", "dpr_none"): (-0.01, -0.04, 0.02),
            },
            **DEMO_LIKE,
        ),
        "hit_all@1",
    )
    assert "- ar2_sieve not shown below zeroshot: not met, -0.110 [-0.150, -0.070] (queries)" in shown
    assert "- ar2_sieve not shown below dpr_none: met, -0.010 [-0.040, +0.020] (queries)" in shown
    # (0.62 - 0.52) / (0.67 - 0.52) = 67%
    assert "- dpr_sieve closes ≥ 90% of the oracle's gain: not met, 67%" in shown
    # no interval: a mean below decides nothing, a mean above is no loss
    means = readme_results.goal_lines(_metrics({}, **{**DEMO_LIKE, "dpr_sieve": 0.66}), "hit_all@1")
    assert "- ar2_sieve not shown below zeroshot: undecided, below on the means (0.530 vs 0.640)" in means[2]
    assert means[3] == "- ar2_sieve not shown below dpr_none: met, 0.530 vs 0.520 on the means"
    assert means[4] == "- dpr_sieve closes ≥ 90% of the oracle's gain: met, 93%"
    # a run without the methods states no goal
    assert readme_results.goal_lines(_metrics({}, bm25=0.7, zeroshot=0.6), "hit_all@1") == []

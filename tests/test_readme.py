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


def _metrics(**values: float) -> dict:
    return {
        "dataset": "d",
        "methods": {
            m: {"split": "test", "n_queries": 10, "metrics": {"hit_all@1": v}} for m, v in values.items()
        },
    }


def test_the_first_screen_says_what_false_negatives_cost_and_whether_training_paid():
    worse = readme_results.first_screen(
        _metrics(bm25=0.7, zeroshot=0.64, dpr_none=0.52, dpr_oracle=0.67, dpr_sieve=0.62, ar2_sieve=0.53)
    )
    assert "scores 0.520 hit_all@1" in worse and "the false negatives cost 0.150" in worse
    assert "wins back +0.100 (67% of it)" in worse
    assert "ar2_sieve (0.530), ends below the untrained model it starts from (zeroshot, 0.640)" in worse
    assert "and below BM25 (0.700)" in worse and "keep the model you start from, or BM25" in worse
    better = readme_results.first_screen(
        _metrics(bm25=0.5, zeroshot=0.6, dpr_none=0.6, dpr_oracle=0.7, dpr_sieve=0.68, ar2_sieve=0.75)
    )
    assert "ends above the untrained model" in better and "above BM25 (0.500)" in better
    assert "worth running" in better and "keep the model" not in better
    # a run without the controls says nothing it cannot back
    assert readme_results.first_screen(_metrics(bm25=0.5)) == "\n"


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

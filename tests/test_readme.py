"""Issue 40: what the README says is what a user's own run shows.

Every shell block of README.md runs as written in a copy of the repository's files (no ../shared, no
results of an earlier run), with the commands that would build or train intercepted: `snakemake` runs
as a dry run (`-n`), `make` prints its recipe (`-n`), and `python -m MODULE ...` checks that the module
exists and its command line parses (`--help`), except the README's own results script, which runs on the
demo's metrics.json. `. .venv/bin/activate` activates the interpreter running the tests (the copy has no
venv of its own; `make demo` creates it). The demo's results block must equal what that script prints
from docs/data/demo/metrics.json, and every relative link resolves inside the repository.
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
snakemake() { command snakemake -n "$@"; }
make() { command make -n "$@" >/dev/null; }
python() {
    if [ "$1" = "-m" ] && [ "$2" != "pipeline.evaluation.readme_results" ]; then
        command python -m "$2" --help >/dev/null
    else
        command python "$@"
    fi
}
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
    activate = clone / ".venv" / "bin" / "activate"
    activate.parent.mkdir(parents=True)
    activate.write_text(f'export PATH="{Path(sys.executable).parent}:$PATH"\n', encoding="utf-8")
    return clone


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    return _repository_copy(tmp_path_factory.mktemp("readme"))


def test_the_readme_shows_shell_commands_and_no_shared_paths():
    text = README.read_text(encoding="utf-8")
    assert "../shared" not in text
    commands = "\n".join(_blocks("bash"))
    for expected in ("make demo", "make test", ". .venv/bin/activate", "--profile profiles/slurm"):
        assert expected in commands


@pytest.mark.parametrize("index", range(len(_blocks("bash"))))
def test_each_shell_block_of_the_readme_runs_as_written(clone, index):
    """The blocks in order (the activation first), each with the earlier blocks' state: a block that
    needs the venv starts from `. .venv/bin/activate`, as a reader's shell would."""
    blocks = _blocks("bash")
    script = "set -euo pipefail\n" + STANDINS
    if index > 0 and ". .venv/bin/activate" not in blocks[index]:
        script += ". .venv/bin/activate\n"
    script += blocks[index]
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PYTHONPATH"] = str(clone)
    env["PATH"] = os.environ["PATH"]
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

"""The false-negative filters' registries: each filter is one module of pipeline/sieve/filters/ (its code,
description and builder) and one entry of pipeline.sieve.settings.FILTER_CONTRACTS (its settings and
needs, which the config reads); the workflow, the cleaning command and the docs find both. A toy filter
added as those two edits, in a copy of the package, is run by sieve-clean and planned by the workflow's
lookups with nothing else edited."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pipeline.core.settings.job_documents import FilterJob
from pipeline.core.storage import DataError
from pipeline.sieve import clean, filter_docs, filters
from pipeline.sieve.filters import FILTERS, CandidateFilter, FilterSetup, build_filter
from pipeline.sieve.settings import (
    CLEAN_FILTERS,
    FILTER_CONTRACTS,
    FILTER_NAMES,
    MODEL_FILTERS,
    SieveSettings,
)

REPO = Path(__file__).resolve().parents[1]


def test_every_declared_filter_has_its_module_and_every_module_its_declaration():
    assert list(FILTERS) == list(FILTER_NAMES) == list(FILTER_CONTRACTS)
    for name, spec in FILTERS.items():
        assert spec.name == name and spec.contract is FILTER_CONTRACTS[name]
        assert spec.description and spec.build
        # what sieve-clean says of a filter it does not run is the filter's own module's
        assert clean.NOT_APPLICABLE.get(name, "") == ("" if spec.contract.clean else spec.not_cleaning)


def test_a_filter_s_section_is_section_sieve_s_own():
    for name, contract in FILTER_CONTRACTS.items():
        if contract.settings is not None:
            assert SieveSettings.model_fields[name].annotation is contract.settings
            assert isinstance(getattr(SieveSettings(), name), contract.settings)
        else:
            assert name not in SieveSettings.model_fields


@pytest.mark.parametrize("name", FILTER_NAMES)
def test_the_model_a_filter_needs_is_the_model_its_builder_scores_with(name, tmp_path):
    job = FilterJob()
    dev = {"dev_candidates": tmp_path / "c", "dev_queries": tmp_path / "q"}
    if name in MODEL_FILTERS:
        with pytest.raises(DataError, match="needs --model"):
            build_filter(FilterSetup.from_job(name, job, **dev))
        built = build_filter(FilterSetup.from_job(name, job, model="the-model", **dev))
        assert built.model == "the-model"
    else:
        built = build_filter(FilterSetup.from_job(name, job))
    assert isinstance(built, CandidateFilter) and built.name == name
    if FILTER_CONTRACTS[name].labels == "dev":
        with pytest.raises(DataError, match="--dev-candidates"):
            build_filter(FilterSetup.from_job(name, job, model="the-model"))


def test_the_cleaning_command_offers_the_filters_that_judge_files(capsys):
    with pytest.raises(SystemExit):
        clean.main(["--help"])
    assert "{" + ",".join(CLEAN_FILTERS) + "}" in capsys.readouterr().out
    assert not set(CLEAN_FILTERS) & set(clean.NOT_APPLICABLE)
    assert set(CLEAN_FILTERS) == {n for n, c in FILTER_CONTRACTS.items() if c.clean}


def test_the_filter_stage_s_help_lists_every_filter_s_description(capsys):
    with pytest.raises(SystemExit):
        filters.main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    for name, spec in FILTERS.items():
        assert f"``{name}`` " + " ".join(spec.description.replace("`", "").split()) in out


def test_docs_sieve_md_holds_the_filters_own_table():
    # python -m pipeline.sieve.filter_docs docs/sieve.md after changing a filter's module
    text = (REPO / "docs/sieve.md").read_text(encoding="utf-8")
    assert filter_docs.update_document(text) == text
    for name in FILTERS:
        assert f"\n| `{name}` | " in text


# ---- a new filter: its module and its entry, nothing else ------------------------------------------

TOY_MODULE = '''\
"""``toy``: drop every ``every``-th candidate of a query's ranking (a demonstration filter)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from pipeline.sieve.filters._base import CandidateFilter, FilterInputs, FilterSetup, FilterSpec


class ToyFilter(CandidateFilter):
    name = "toy"

    def __init__(self, every: int):
        self.every = every

    def decide(self, inputs: FilterInputs) -> pd.DataFrame:
        rank = inputs.candidates["rank"].to_numpy(np.int64)
        return pd.DataFrame({"score": rank.astype(float), "kept": rank % self.every != 0})


def build(setup: FilterSetup) -> ToyFilter:
    return ToyFilter(setup.settings.every)


FILTER = FilterSpec("toy", "its rank is a multiple of `every`", build, score="rank")
'''
TOY_SETTINGS = """\
class ToySettings(Contract):
    every: int = Field(2, ge=1, description="a candidate whose rank is a multiple of it is dropped")


"""
TOY_ENTRY = '    "toy": FilterContract(ToySettings, clean=True),\n'


def add_toy_filter(root: Path) -> None:
    """The two edits that add a filter: its module, and its settings and entry in the sieve's registry
    (pipeline/sieve/settings.py)."""
    (root / "pipeline/sieve/filters/toy.py").write_text(TOY_MODULE, encoding="utf-8")
    settings = root / "pipeline/sieve/settings.py"
    text = settings.read_text(encoding="utf-8")
    contract, end = "\n@dataclass(frozen=True)\nclass FilterContract", "}\nFILTER_NAMES = "
    assert text.count(contract) == text.count(end) == 1
    text = text.replace(contract, "\n" + TOY_SETTINGS + contract.lstrip("\n")).replace(end, TOY_ENTRY + end)
    settings.write_text(text, encoding="utf-8")


TOY_CHECK = textwrap.dedent(
    """
    import json, sys
    from pipeline.core.config import load_config, validate_config
    from pipeline.core.methods import method_table
    from pipeline.core.settings.job_documents import CleanJob, FilterJob
    from pipeline.sieve.settings import CLEAN_FILTERS, FILTER_NAMES, SieveSettings
    from pipeline.core.settings_reference import reference
    from pipeline.sieve import clean
    from pipeline.sieve.filter_docs import filter_table
    from pipeline.sieve.filters import FILTERS
    from pipeline.workflow.sieve import clean_job, filter_job

    config = load_config()
    config["sieve"]["filters"] = ["none", "toy"]
    config["clean"] = {"mine": {"source": "mine.jsonl", "filter": "toy"}}
    validate_config(config, methods=lambda: method_table(config))
    found = {
        "names": "toy" in FILTER_NAMES and "toy" in FILTERS and "toy" in CLEAN_FILTERS,
        "section": SieveSettings().toy.every,
        "filter_job": filter_job(config, 5, "toy"),
        "clean_job": clean_job(config, "mine"),
        "flags": "toy_every" in FilterJob.model_fields and "toy_every" in CleanJob.model_fields,
        "method": "dpr_toy" in method_table(config),
        "docs": [row for row in filter_table().splitlines() if "toy" in row],
    }
    json.dump(found, sys.stdout)
    print()
    sys.stdout.write(reference())
    """
)


def test_a_toy_filter_is_its_module_and_its_entry(tmp_path):
    root = tmp_path / "repo"
    shutil.copytree(REPO / "pipeline", root / "pipeline", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "config.yaml", root / "config.yaml")
    add_toy_filter(root)

    def python(*argv: str) -> subprocess.CompletedProcess:
        done = subprocess.run([sys.executable, *argv], cwd=root, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-3000:]
        return done

    first, reference = python("-c", TOY_CHECK).stdout.split("\n", 1)
    found = json.loads(first)
    assert found == {
        "names": True,
        "section": 2,
        "filter_job": {"seed": 5, "batch_size": 64, "toy_every": 2},
        "clean_job": {
            "format": "auto",
            "filter": "toy",
            "mode": "drop",
            "near_duplicate": 0.9,
            "toy_every": 2,
        },
        "flags": True,
        "method": True,
        "docs": ["| `toy` | its rank is a multiple of `every` | rank | `sieve.toy` |"],
    }
    assert "`sieve.toy.every`" in reference  # docs/config.md, generated
    assert (
        "``toy`` its rank is a multiple of every" in python("-m", "pipeline.sieve.filters", "--help").stdout
    )
    assert "toy" in python("-m", "pipeline.sieve.clean", "--help").stdout

    rows = [{"anchor": "q", "positive": "p", **{f"negative_{i}": f"n{i} text" for i in (1, 2, 3, 4)}}]
    source = root / "mine.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    python(
        "-m",
        "pipeline.sieve.clean",
        "--input",
        "mine.jsonl",
        "--out",
        "out.jsonl",
        "--filter",
        "toy",
        "--toy-every",
        "2",
        "--mode",
        "mark",
    )
    import pandas as pd

    decided = pd.read_parquet(root / "out.decisions.parquet")
    assert decided["decision"].tolist() == ["kept", "dropped", "kept", "dropped"]
    assert decided["reason"].iat[1] == "toy: score 2.0000: suspected false negative"

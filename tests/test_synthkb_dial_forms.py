"""synthkb's false-negative dial: the answers' other forms, and its settings (schema, config, CLI)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from pipeline.core.cli import run_main
from pipeline.core.config import ConfigError, validate_config
from pipeline.data.answers import string_has_answer
from pipeline.data.settings import DatasetSpec
from pipeline.synthkb import generate as synthkb
from pipeline.synthkb.dial import Dial, knobs_at, make_dial
from pipeline.synthkb.draft import Knobs
from pipeline.synthkb.names import ORG_KINDS
from pipeline.synthkb.paraphrase import (
    GENRES,
    INDUSTRIES,
    OCCUPATIONS,
    ORG_ABBREVIATIONS,
    person_initial,
    year_words,
)
from pipeline.synthkb.world import GENRES as WORLD_GENRES
from pipeline.synthkb.world import INDUSTRIES as WORLD_INDUSTRIES
from pipeline.synthkb.world import OTHER_OCCUPATIONS, Layout, name_space
from pipeline.workflow.synthkb import generate_job

REPO = Path(__file__).resolve().parent.parent


# ---- other forms of the answers --------------------------------------------------------------------


@pytest.mark.parametrize(
    "year, words",
    [
        ("1883", "eighteen eighty-three"),
        ("1905", "nineteen oh-five"),
        ("1700", "seventeen hundred"),
        ("880", "eight eighty"),
        ("1005", "ten oh-five"),
        ("1000", "one thousand"),
        ("1810", "eighteen ten"),
        ("1999", "nineteen ninety-nine"),
    ],
)
def test_years_in_words(year, words):
    assert year_words(year) == words


def test_every_other_form_hides_the_answer_string():
    forms = [(str(y), year_words(str(y))) for y in range(880, 2001)]
    forms += list(OCCUPATIONS.items()) + list(GENRES.items()) + list(INDUSTRIES.items())
    forms += [(f"Vesk {kind}", f"Vesk {ORG_ABBREVIATIONS[kind]}") for kind in ORG_KINDS]
    forms += [("Varno Keltic", person_initial("Varno Keltic"))]
    for answer, form in forms:
        assert not string_has_answer([answer], f"It was the {form}."), (answer, form)
        assert string_has_answer([answer], f"It was the {answer}.")
    # Every literal value of the world has a form.
    assert set(OCCUPATIONS) == set(WORLD_GENRES) | set(OTHER_OCCUPATIONS)
    assert set(GENRES) == {g for genres in WORLD_GENRES.values() for g in genres}
    assert set(INDUSTRIES) == set(WORLD_INDUSTRIES) and set(ORG_ABBREVIATIONS) == set(ORG_KINDS)


def test_second_names_are_new_and_leave_every_other_name_unchanged():
    layout = Layout(400, 200)
    plain, extended = name_space(layout, 3), name_space(layout, 3, bynames=True)
    uses = {
        "city": layout.type_total("city"),
        "alias": layout.type_total("city"),
        "country": layout.type_total("country"),
        "org": layout.type_total("org"),
        "work": layout.type_total("work"),
    }
    others = {plain.root(use, i) for use, n in uses.items() for i in range(n)}
    assert all(plain.root(use, i) == extended.root(use, i) for use, n in uses.items() for i in range(n))
    bynames = {extended.byname(gid) for gid in range(layout.entities)}
    assert len(bynames) == layout.entities and not bynames & others
    with pytest.raises(IndexError):
        plain.byname(0)


def test_restatement_levels():
    base = Knobs()
    assert knobs_at(base, 1.0, 0.0) == base
    assert knobs_at(base, 0.0, 0.0).restate == 0 and knobs_at(base, 0.5, 0.0).cross_bio == 0.25
    assert knobs_at(base, 4.5, 0.2) == Knobs(echo=3.5, paraphrase=0.2)


# ---- settings ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, key",
    [
        ({"fn_share": -0.1}, "fn_share"),
        ({"fn_share": 1.5}, "fn_share"),
        ({"fn_share": "0.3"}, "fn_share"),
        ({"fn_share": True}, "fn_share"),
        ({"fn_share": float("nan")}, "fn_share"),
        ({"fn_paraphrase": None}, "fn_paraphrase"),
        ({"fn_paraphrase": 2}, "fn_paraphrase"),
        ({"fn_paraphrase": [0.5]}, "fn_paraphrase"),
    ],
)
def test_bad_values_are_refused_naming_the_setting(tmp_path, kwargs, key):
    with pytest.raises(ConfigError, match=key):
        make_dial(**kwargs)
    with pytest.raises(ConfigError, match=key):
        synthkb.generate(tmp_path / "synthkb", 20, 0, None, **kwargs)
    assert not (tmp_path / "synthkb" / "corpus.parquet").exists()


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["--fn-share", "1.2"], "--fn-share"),
        (["--fn-share", "-0.5"], "--fn-share"),
        (["--fn-share", "half"], "--fn-share"),
        (["--fn-share", "nan"], "--fn-share"),
        (["--fn-paraphrase", "none"], "--fn-paraphrase"),
        (["--fn-paraphrase", "3"], "--fn-paraphrase"),
    ],
)
def test_cli_refuses_bad_values_naming_the_flag(tmp_path, capsys, argv, flag):
    with pytest.raises(SystemExit) as exit_info:
        run_main(synthkb.main, ["--out-dir", str(tmp_path / "x"), "--entities", "20", "--seed", "0", *argv])
    err = capsys.readouterr().err
    # Not a number: the parser names the flag; out of range: the contract names the setting.
    assert exit_info.value.code == 2 and (
        f"argument {flag}" in err or f"'settings.{flag[2:].replace('-', '_')}'" in err
    )
    assert not (tmp_path / "x").exists()


def test_cli_help_shows_the_dial(capsys):
    with pytest.raises(SystemExit):
        synthkb.main(["--help"])
    out = capsys.readouterr().out
    assert "--fn-share" in out and "--fn-paraphrase" in out


def test_cli_passes_the_dial(tmp_path):
    out = tmp_path / "synthkb"
    assert (
        synthkb.main(
            [
                "--out-dir",
                str(out),
                "--entities",
                "20",
                "--seed",
                "0",
                "--fn-share",
                "none",
                "--fn-paraphrase",
                "0.3",
            ]
        )
        == 0
    )
    record = json.loads((out / "manifest.json").read_text())["false_negatives"]
    assert record["requested"] == {"fn_share": None, "fn_paraphrase": 0.3} and record["paraphrase"] > 0


def test_schema_config_and_generator_agree():
    fields = DatasetSpec.model_fields
    assert fields["fn_share"].default == Dial().fn_share is None
    assert fields["fn_paraphrase"].default == Dial().fn_paraphrase == 0.0
    # the demo's dataset turns the dial (30%, half string-free); the schema's default is the generator's
    config = yaml.safe_load((REPO / "config.yaml").read_text())["datasets"]["synthkb"]
    assert config["fn_share"] == 0.3 and config["fn_paraphrase"] == 0.5
    ok = {
        "methods": ["bm25"],
        "datasets": {"x": {"format": "synthkb", "entities": 10, "fn_share": 0.5, "fn_paraphrase": 1}},
    }
    validate_config(ok)
    for dataset, key in [
        ({"format": "synthkb", "entities": 10, "fn_share": 1.5}, "fn_share"),
        ({"format": "synthkb", "entities": 10, "fn_paraphrase": -1}, "fn_paraphrase"),
        ({"format": "synthkb", "entities": 10, "fn_paraphrase": None}, "fn_paraphrase"),
        ({"format": "squad", "source": "x.json", "fn_share": 0.3}, "fn_share"),
    ]:
        with pytest.raises(ConfigError, match=key):
            validate_config({"methods": ["bm25"], "datasets": {"x": dataset}})


def test_the_rule_passes_the_dial():
    rule = (REPO / "workflow" / "rules" / "synthkb.smk").read_text()
    assert "settings=generate_settings(workflow_tables)" in rule and "{params.settings}" in rule
    document = generate_job({"format": "synthkb", "entities": 10, "fn_share": 0.3, "fn_paraphrase": 0.5})
    assert (document["fn_share"], document["fn_paraphrase"]) == (0.3, 0.5)
    assert generate_job({"format": "synthkb", "entities": 10})["fn_share"] is None  # the generator's own

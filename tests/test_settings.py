"""One contract per config section (pipeline.core.settings): the schema, config.yaml, the defaults and
the CLI flags all come from it."""

from __future__ import annotations

import argparse
import json
import shlex
from typing import Optional

import jsonschema
import pytest
import yaml
from annotated_types import Ge, Le
from pydantic import Field

from pipeline.core.config import DEFAULT_CONFIG, REPO_ROOT, ConfigError, load_config, validate_config
from pipeline.core.settings.base import MAX_RANKS, Contract, Ranks, field_constraints
from pipeline.core.settings.flags import add_flags, to_flags
from pipeline.core.settings.root import (
    SECTIONS,
    TOP_LEVEL_DEFAULTS,
    apply_defaults,
    config_schema,
    defaults,
    section,
)
from pipeline.core.settings.validation import from_dict
from pipeline.core.settings_reference import reference
from pipeline.training.loop import TrainConfig
from pipeline.training.settings import CcrSettings, DprSettings, Objective, TrainSettings

SCHEMA_FILE = REPO_ROOT / "workflow" / "schemas" / "config.schema.json"


def test_the_committed_schema_is_generated_from_the_contract():
    assert json.loads(SCHEMA_FILE.read_text()) == config_schema(), (
        "workflow/schemas/config.schema.json is stale: python -m pipeline.core.settings > "
        "workflow/schemas/config.schema.json"
    )


def test_config_yaml_and_every_overlay_validate_against_the_json_schema_too():
    # The schema is what editors and other tools read: it must accept what the contract accepts.
    validator = jsonschema.Draft202012Validator(config_schema())
    for overlays in (
        [],
        ["config/overlays/squad/config.yaml"],
        ["config/overlays/sweep/noise.yaml"],
        ["config/overlays/tournament/tournament.yaml"],
        ["config/overlays/sieve/config.yaml"],
        [f"config/overlays/ar2/{name}.yaml" for name in ("learns", "learns_long", "table2_simans")],
        ["config/overlays/squad/config.yaml"]
        + [
            f"config/overlays/ar2/{name}.yaml"
            for name in ("learns", "learns_long", "squad", "squad_selfdistill")
        ],
    ):
        validator.validate(load_config([REPO_ROOT / o for o in overlays]))


def test_the_defaults_themselves_validate():
    config = {"methods": ["bm25"], "datasets": {"x": {"format": "synthkb", "entities": 10}}}
    validate_config(config)
    for name, cls in SECTIONS.items():
        assert config[name] == defaults(cls)


def _leaves(data: dict, where: str = ""):
    for key, value in data.items():
        path = f"{where}.{key}" if where else key
        if isinstance(value, dict):
            yield from _leaves(value, path)
        else:
            yield path, value


def test_config_yaml_restates_no_default():
    # A setting has one default, its contract's: config.yaml restating one is a second declaration
    # that drifts (ccr.beta once had four defaults in five places). Recipes pin a paper's values on
    # purpose and are not checked.
    given = yaml.safe_load(DEFAULT_CONFIG.read_text())
    defaults_ = apply_defaults({})
    restated = [
        f"{name}.{path}"
        for name in SECTIONS
        for path, value in _leaves(given.get(name) or {})
        if _lookup(defaults_[name], path) == (value,)
    ]
    restated += [
        key for key, value in TOP_LEVEL_DEFAULTS.items() if key != "recipes" and given.get(key, ...) == value
    ]
    assert not restated, f"config.yaml restates contract defaults: {restated}"


def _lookup(data: dict, path: str):
    for part in path.split("."):
        if not isinstance(data, dict) or part not in data:
            return ()
        data = data[part]
    return (data,)


def _fields(cls, where=""):
    for key, field in cls.model_fields.items():
        if isinstance(field.annotation, type) and issubclass(field.annotation, Contract):
            yield from _fields(field.annotation, f"{where}{key}.")
        else:
            yield f"{where}{key}", field


@pytest.mark.parametrize("name", sorted(SECTIONS))
def test_every_setting_says_what_it_does(name):
    # docs/config.md, generated from the contracts, is the reference users read.
    undocumented = [key for key, field in _fields(SECTIONS[name]) if not field.description]
    assert not undocumented, f"{name}: settings without a description: {undocumented}"


def test_the_reference_page_is_generated_from_the_contracts():
    page = REPO_ROOT / "docs" / "config.md"
    assert page.read_text() == reference(), (
        "docs/config.md is stale: python -m pipeline.core.settings_reference > docs/config.md"
    )


def _contracts(cls=Contract):
    for sub in cls.__subclasses__():
        yield sub
        yield from _contracts(sub)


def redeclared_copies() -> list[str]:
    """Fields a contract redeclares with the default its base already declares."""
    copies = []
    for cls in set(_contracts()):
        for name in cls.__dict__.get("__annotations__", {}):
            for base in cls.__mro__[1:]:
                if name in base.__dict__.get("__annotations__", {}):
                    if base.model_fields[name].default == cls.model_fields[name].default:
                        copies.append(f"{cls.__name__}.{name} (as in {base.__name__})")
                    break
    return copies


def test_a_subclass_redeclares_a_setting_only_to_change_its_default():
    # CCR's own lr or beta is a setting of its own; a redeclaration with the base's default is a copy.
    assert not redeclared_copies()

    class Copy(CcrSettings):
        lr: float = 1e-5  # CcrSettings' own

    try:
        assert redeclared_copies() == ["Copy.lr (as in CcrSettings)"]
    finally:
        del Copy


def test_apply_defaults_fills_only_what_is_missing_and_merges_nested_sections():
    config = {"dpr": {"lr": 1e-3}, "sieve": {"cross_encoder": {"steps": 7}}, "seed": 5, "ccr": {"beta": 1}}
    apply_defaults(config)
    assert config["seed"] == 5
    assert config["dpr"]["lr"] == 1e-3 and config["dpr"]["max_steps"] == DprSettings().max_steps
    assert config["sieve"]["cross_encoder"]["steps"] == 7
    assert config["sieve"]["cross_encoder"]["threshold"] == 0.1
    assert config["ar2"]["simans"] == {"a": 0.5, "b": 0.0, "form": "square"}
    # A value the config gives stays as given (an int β is not turned into 1.0 on its way to a path).
    assert type(config["ccr"]["beta"]) is int
    # Defaults are copies: filling one config never aliases another's lists.
    other = apply_defaults({})
    other["sieve"]["betas"].append(9)
    assert 9 not in apply_defaults({})["sieve"]["betas"]


def test_a_section_that_is_not_a_mapping_is_still_reported():
    config = {"methods": [], "datasets": {"x": {"format": "synthkb", "entities": 10}}, "dpr": 5}
    with pytest.raises(ConfigError, match="dpr"):
        validate_config(config)


@pytest.mark.parametrize(
    "key,value,message",
    [
        ("dpr.lr", float("nan"), r"'dpr\.lr': Input should be a finite number"),
        ("ccr.beta", float("inf"), r"'ccr\.beta': Input should be a finite number"),
        ("dpr.lr", "2e-5", r"'dpr\.lr': Input should be a valid number"),  # YAML 1.1 reads 2e-5 as text
        ("dpr.epochs", 1.5, r"'dpr\.epochs': Input should be a valid integer"),
        ("dpr.in_batch", 1, r"'dpr\.in_batch': Input should be a valid boolean"),
        ("ar2.seeds", [1, 1], r"'ar2\.seeds': .*1 is listed twice"),
        ("sieve.filters", ["sieve", "magic"], r"'sieve\.filters\.1'"),
    ],
)
def test_bad_values_are_named_with_their_key(key, value, message):
    config = load_config()
    *path, last = key.split(".")
    node = config
    for part in path:
        node = node[part]
    node[last] = value
    with pytest.raises(ConfigError, match=message):
        validate_config(config)


def test_section_builds_nested_contracts_and_rejects_unknown_keys():
    config = apply_defaults({})
    sieve = section(config, "sieve")
    assert sieve.cross_encoder.threshold == 0.1 and sieve.rank_window.start == 10
    with pytest.raises(ConfigError, match=r"'dpr': unknown key\(s\) 'learning_rate' \(allowed keys: .*lr"):
        from_dict(DprSettings, {"learning_rate": 1}, "dpr")


def test_ccr_and_dpr_share_the_training_fields_with_their_own_defaults():
    assert CcrSettings().lr == 1e-5 and DprSettings().lr == 2e-5
    assert not CcrSettings().in_batch and DprSettings().in_batch
    shared = set(TrainSettings.model_fields)
    assert shared <= set(CcrSettings.model_fields) and shared <= set(DprSettings.model_fields)
    assert "beta" not in DprSettings.model_fields  # DPR is NCE: no objective settings
    # CCR's own bounds: at least one hard negative (its softmax is over them).
    with pytest.raises(ConfigError, match=r"ccr\.hard_negatives"):
        from_dict(CcrSettings, {"hard_negatives": 0}, "ccr")
    assert from_dict(DprSettings, {"hard_negatives": 0}, "dpr").hard_negatives == 0


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser()
    add_flags(ap, TrainSettings)
    add_flags(ap, Objective)
    return ap


@pytest.mark.parametrize(
    "values",
    [
        defaults(CcrSettings),
        {
            **defaults(DprSettings),
            "in_batch": False,
            "drop_queries_without_positive": True,
            "lr": 3e-4,
            "train_layers": 2,
        },
    ],
)
def test_flags_round_trip_through_the_parser(values):
    values = {**defaults(Objective), **values}
    args = _parser().parse_args(
        shlex.split(to_flags(TrainSettings, values) + " " + to_flags(Objective, values))
    )
    for name in (*TrainSettings.model_fields, *Objective.model_fields):
        assert getattr(args, name) == values[name], name


def test_parser_defaults_are_the_contract_defaults():
    args = _parser().parse_args([])
    for name, field in TrainSettings.model_fields.items():
        assert getattr(args, name) == field.default
    assert args.beta == 0.0  # a bare train_dense call is NCE
    with pytest.raises(SystemExit):  # a Literal's values are the flag's choices
        _parser().parse_args(["--precision", "fp8"])


def test_train_config_is_the_contract_plus_a_seed():
    cfg = TrainConfig(**defaults(TrainSettings), **defaults(Objective), seed=3)
    assert cfg.lr == TrainSettings().lr and cfg.seed == 3
    with pytest.raises(ConfigError, match="precision"):
        TrainConfig(precision="fp8")
    with pytest.raises(ConfigError, match=r"'lr': Input should be a finite number"):
        TrainConfig(lr=float("nan"))


def test_top_level_defaults_are_declared_in_the_schema():
    props = config_schema()["properties"]
    for key, value in TOP_LEVEL_DEFAULTS.items():
        assert props[key].get("default") == value, key


def test_a_count_type_bounds_a_field_and_its_optional_form_alike():
    # Ranks declares its floor and ceiling once; an optional field keeps them inside the union, where the
    # config reference and the upper-bound check must still find them.
    class Depths(Contract):
        depth: Ranks = Field(30, description="d")
        cap: Optional[Ranks] = Field(None, description="c")

    for name in ("depth", "cap"):
        assert field_constraints(Depths.model_fields[name]) == [Ge(ge=1), Le(le=MAX_RANKS)]
    with pytest.raises(Exception, match="cap"):
        Depths(cap=MAX_RANKS + 1)
    assert Depths(cap=None).cap is None and Depths(depth=MAX_RANKS).depth == MAX_RANKS
    # and a command line reads the optional one as a number or "none", as it reads a plain optional int
    ap = argparse.ArgumentParser()
    add_flags(ap, Depths)
    assert vars(ap.parse_args(["--cap", "5"])) == {"depth": 30, "cap": 5}
    assert ap.parse_args(["--cap", "none"]).cap is None

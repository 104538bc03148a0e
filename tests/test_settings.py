"""One contract per config section (pipeline.core.settings): the schema, config.yaml, the defaults and
the CLI flags all come from it."""

from __future__ import annotations

import argparse
import json
import shlex

import jsonschema
import pytest
import yaml

from pipeline.core.config import DEFAULT_CONFIG, REPO_ROOT, ConfigError, load_config, validate_config
from pipeline.core.settings import (
    SECTIONS,
    TOP_LEVEL_DEFAULTS,
    CcrSettings,
    Contract,
    DprSettings,
    Objective,
    TrainSettings,
    add_flags,
    apply_defaults,
    config_schema,
    defaults,
    from_dict,
    section,
    to_flags,
)
from pipeline.training.loop import TrainConfig

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


@pytest.mark.parametrize("name", sorted(SECTIONS))
def test_config_yaml_documents_every_setting(name):
    # config.yaml is the reference users read: every setting appears there with a comment nearby.
    given = yaml.safe_load(DEFAULT_CONFIG.read_text())[name]

    def keys(cls, data, where):
        for key, field in cls.model_fields.items():
            assert key in data, f"config.yaml: {where}.{key} is missing"
            if isinstance(field.annotation, type) and issubclass(field.annotation, Contract):
                keys(field.annotation, data[key], f"{where}.{key}")

    keys(SECTIONS[name], given, name)


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

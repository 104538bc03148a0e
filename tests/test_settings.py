"""One contract per config section: the dataclasses, the schema's defaults and the CLI flags agree."""
from __future__ import annotations

import argparse
import shlex
from dataclasses import fields, is_dataclass
from typing import get_type_hints

import pytest
import yaml

from pipeline.core.config import DEFAULT_CONFIG, ConfigError, load_schema, validate_config
from pipeline.core.settings import (SECTIONS, TOP_LEVEL_DEFAULTS, CcrSettings, DprSettings, Objective, TrainSettings,
                                    add_flags, apply_defaults, defaults, from_dict, section, to_flags)
from pipeline.training.loop import TrainConfig


def _walk(cls: type, props: dict, where: str):
    """Yield (key path, dataclass default, schema property) for every leaf setting of ``cls``."""
    hints = get_type_hints(cls)
    names = {f.name for f in fields(cls)}
    assert names == set(props), (f"{where}: dataclass fields and schema properties differ: "
                                 f"only in dataclass {sorted(names - set(props))}, "
                                 f"only in schema {sorted(set(props) - names)}")
    values = defaults(cls)
    for f in fields(cls):
        if is_dataclass(hints[f.name]):
            yield from _walk(hints[f.name], props[f.name]["properties"], f"{where}.{f.name}")
        else:
            yield f"{where}.{f.name}", values[f.name], props[f.name]


@pytest.mark.parametrize("name", sorted(SECTIONS))
def test_schema_declares_the_dataclass_fields_with_the_same_defaults(name):
    props = load_schema()["properties"][name]["properties"]
    for key, default, prop in _walk(SECTIONS[name], props, name):
        assert "default" in prop, f"schema property {key} has no default (dataclass: {default!r})"
        assert prop["default"] == default and type(prop["default"]) is type(default), \
            f"{key}: schema default {prop['default']!r} != dataclass default {default!r}"


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
        hints = get_type_hints(cls)
        for f in fields(cls):
            assert f.name in data, f"config.yaml: {where}.{f.name} is missing"
            if is_dataclass(hints[f.name]):
                keys(hints[f.name], data[f.name], f"{where}.{f.name}")
    keys(SECTIONS[name], given, name)


def test_apply_defaults_fills_only_what_is_missing_and_merges_nested_sections():
    config = {"dpr": {"lr": 1e-3}, "sieve": {"cross_encoder": {"steps": 7}}, "seed": 5}
    apply_defaults(config)
    assert config["seed"] == 5
    assert config["dpr"]["lr"] == 1e-3 and config["dpr"]["max_steps"] == DprSettings().max_steps
    assert config["sieve"]["cross_encoder"]["steps"] == 7
    assert config["sieve"]["cross_encoder"]["threshold"] == 0.1
    assert config["ar2"]["simans"] == {"a": 0.5, "b": 0.0, "form": "square"}
    # Defaults are copies: filling one config never aliases another's lists.
    other = apply_defaults({})
    other["sieve"]["betas"].append(9)
    assert 9 not in apply_defaults({})["sieve"]["betas"]


def test_a_section_that_is_not_a_mapping_is_still_reported():
    config = {"methods": [], "datasets": {"x": {"format": "synthkb", "entities": 10}}, "dpr": 5}
    with pytest.raises(ConfigError, match="dpr"):
        validate_config(config)


def test_section_builds_nested_dataclasses_and_rejects_unknown_keys():
    config = apply_defaults({})
    sieve = section(config, "sieve")
    assert sieve.cross_encoder.threshold == 0.1 and sieve.rank_window.start == 10
    with pytest.raises(KeyError, match="unknown setting"):
        from_dict(DprSettings, {"learning_rate": 1})


def test_ccr_and_dpr_share_the_training_fields_with_their_own_defaults():
    assert CcrSettings().lr == 1e-5 and DprSettings().lr == 2e-5
    assert not CcrSettings().in_batch and DprSettings().in_batch
    shared = {f.name for f in fields(TrainSettings)}
    assert shared <= {f.name for f in fields(CcrSettings)} and shared <= {f.name for f in fields(DprSettings)}
    assert "beta" not in {f.name for f in fields(DprSettings)}  # DPR is NCE: no objective settings


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser()
    add_flags(ap, TrainSettings)
    add_flags(ap, Objective)
    return ap


@pytest.mark.parametrize("values", [
    defaults(CcrSettings),
    {**defaults(DprSettings), "in_batch": False, "drop_queries_without_positive": True, "lr": 3e-4},
])
def test_flags_round_trip_through_the_parser(values):
    values = {**defaults(Objective), **values}
    args = _parser().parse_args(shlex.split(to_flags(TrainSettings, values) + " "
                                            + to_flags(Objective, values)))
    for f in fields(TrainSettings) + fields(Objective):
        assert getattr(args, f.name) == values[f.name], f.name


def test_parser_defaults_are_the_dataclass_defaults():
    args = _parser().parse_args([])
    for f in fields(TrainSettings):
        assert getattr(args, f.name) == getattr(TrainSettings(), f.name)
    assert args.beta == 0.0  # a bare train_dense call is NCE


def test_train_config_is_the_contract_plus_a_seed():
    cfg = TrainConfig(**defaults(TrainSettings), **defaults(Objective), seed=3)
    assert cfg.lr == TrainSettings().lr and cfg.seed == 3
    with pytest.raises(ConfigError, match="precision"):
        TrainConfig(precision="fp8")


def test_top_level_defaults_are_declared_in_the_schema():
    props = load_schema()["properties"]
    for key, value in TOP_LEVEL_DEFAULTS.items():
        assert props[key].get("default") == value, key

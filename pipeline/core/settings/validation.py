"""Config data to a contract: ``from_dict`` validates, and ``describe_errors`` turns pydantic's errors into
one line per problem naming the key path (and, for an unknown key, the keys allowed there).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence, get_args, get_origin

from pydantic import BaseModel, ValidationError

from pipeline.core.settings.base import ConfigError, Contract, bare_type
from pipeline.data.settings import PathFile, SplitUnits, UrlFile


def from_dict(
    cls: type[Contract], data: dict, where: str = "", given_by: Mapping[str, str] | None = None
) -> Contract:
    """``cls`` built from config data: nested sections too; unknown keys and bad values are a
    ConfigError naming each key (under ``where``, the section's own key path). ``given_by``: a field
    -> the flag a user typed it with, named before its key."""
    try:
        return cls.model_validate(data)
    except ValidationError as err:
        prefix = tuple(where.split(".")) if where else ()
        raise ConfigError("; ".join(describe_errors(err, cls, prefix, given_by))) from None


# ---- errors -------------------------------------------------------------------------------------

# Loc parts that name a branch of a tagged union, not a config key.
_UNION_TAGS = {
    "[key]",
    "file-name",
    "file-url",
    "file-path",
    "file-single",
    "file-roles",
    "split-none",
    "split-units",
}


def _key(loc: Sequence[Any]) -> str:
    parts = [str(part) for part in loc if part not in _UNION_TAGS]
    return ".".join(parts) if parts else "(top level)"


def _model_at(loc: Sequence[Any], root: type[BaseModel]) -> type[BaseModel] | None:
    """The contract that holds the keys at ``loc`` of ``root`` (to list them next to an unknown one)."""
    tagged = {"file-url": UrlFile, "file-path": PathFile, "split-units": SplitUnits}
    current: Any = root
    for part in loc:
        if part in _UNION_TAGS:
            current = tagged.get(part, current)
        elif isinstance(current, type) and issubclass(current, BaseModel) and part in current.model_fields:
            current = bare_type(current.model_fields[part].annotation)
        elif get_origin(current) is dict:
            current = bare_type(get_args(current)[1])
        else:
            return None
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def describe_errors(
    err: ValidationError,
    root: type[BaseModel],
    prefix: Sequence[Any] = (),
    given_by: Mapping[str, str] | None = None,
) -> list[str]:
    """One line per problem: "config key 'dpr.lr': <what is wrong>"; unknown keys are listed with the
    keys allowed there. ``root``: the contract validated (Config: a whole config); ``prefix``: its key path;
    ``given_by``: a top-level field -> the flag that gave it ("--b (config key 'settings.b'): ...")."""
    lines: list[str] = []
    unknown: dict[tuple, list[str]] = {}
    for error in err.errors():
        loc = tuple(error["loc"])
        if error["type"] == "extra_forbidden":
            unknown.setdefault(loc[:-1], []).append(repr(str(loc[-1])))
            continue
        flag = (given_by or {}).get(str(loc[0])) if loc else None
        loc = (*prefix, *loc)
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "missing":
            message = "required key is missing"
        elif isinstance(error.get("input"), (str, int, float)) and error["type"] != "value_error":
            message += f", got {error['input']!r}"
            if error["type"] == "float_type" and _yaml_text_number(error["input"]):
                message += (
                    " (YAML, as PyYAML and so Snakemake read it, takes 1e-5 for text: write 1.0e-5 "
                    "or 0.00001)"
                )
        key = f"config key '{_key(loc)}'"
        lines.append(f"{flag} ({key}): {message}" if flag else f"{key}: {message}")
    for where, names in unknown.items():
        model = _model_at(where, root)
        allowed = f" (allowed keys: {', '.join(sorted(model.model_fields))})" if model else ""
        lines.append(f"config key '{_key((*prefix, *where))}': unknown key(s) {', '.join(names)}{allowed}")
    return list(dict.fromkeys(lines))


def _yaml_text_number(value: Any) -> bool:
    """A string that is a number in scientific notation YAML 1.1 does not read as one (1e-5, 2e+3: its
    floats need a dot and a signed exponent), the spelling docs/config.md's defaults show."""
    if not isinstance(value, str) or "e" not in value.lower():
        return False
    try:
        float(value)
    except ValueError:
        return False
    return True

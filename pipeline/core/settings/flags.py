"""A contract's fields as command-line flags: the parser of a stage (``add_flags``, read back by
``pick``) and the command line built from settings (``to_flags``) share one spelling.
"""

from __future__ import annotations

import argparse
import shlex
from typing import Any, Literal, Sequence, get_args, get_origin

from pipeline.core.settings.base import ConfigError, Contract, bare_type

# ---- CLI flags from fields: the parser (a stage) and the command line (rules) share one spelling --


def check_choice(name: str, value: Any, allowed: Sequence[Any]) -> None:
    """A ConfigError naming the setting unless ``value`` is one of ``allowed``."""
    if value not in allowed:
        raise ConfigError(f"{name} must be one of {', '.join(map(str, allowed))}, got {value!r}")


def flag_name(name: str) -> str:
    return "--" + name.replace("_", "-")


def _flag_type(cls: type[Contract], name: str) -> tuple[type, tuple | None, bool]:
    """(parser type, choices, optional) of a field: Optional[X] parses as X, Literal[...] as its values."""
    hint = cls.model_fields[name].annotation
    optional = type(None) in get_args(hint)
    hint = bare_type(hint)  # Optional[Share]: the union keeps the type's bounds with it
    if get_origin(hint) is list:  # a whole-section flag of a list field parses its items
        hint = bare_type(get_args(hint)[0])
    if get_origin(hint) is Literal:
        values = get_args(hint)
        return type(values[0]), values, optional
    return {float: float, int: int, str: str, bool: bool}.get(hint, str), None, optional


def _or_none(kind: type):
    """A parser of ``kind`` that reads "none" as None: how a command line says null."""

    def parse(text: str):
        return None if text.lower() in ("none", "null") else kind(text)

    parse.__name__ = kind.__name__  # argparse names the type in its errors
    return parse


def _dest(name: str, prefix: str) -> str:
    return f"{prefix}_{name}" if prefix else name


def _nested(hint: Any) -> bool:
    """A field that is a section of its own (ar2.simans): its flags carry its name as a prefix."""
    return isinstance(hint, type) and issubclass(hint, Contract)


def add_flags(
    group: argparse._ActionsContainer,
    cls: type[Contract],
    *,
    names: Sequence[str] | None = None,
    override: bool = False,
    prefix: str = "",
) -> None:
    """One flag per field of ``cls`` (or of ``names``), booleans as --x/--no-x, with the contract's
    help, choices and defaults; an optional field also takes "none". ``prefix``: a nested section's
    key (``injection`` -> --injection-fraction). ``override``: no default (None: the flag was not
    given, keep what is there)."""
    for name in names or cls.model_fields:
        field = cls.model_fields[name]
        if _nested(field.annotation):
            add_flags(group, field.annotation, override=override, prefix=_dest(name, prefix))
            continue
        kind, choices, optional = _flag_type(cls, name)
        default = None if override else field.default
        described = (field.description or "").replace("%", "%%")  # argparse formats help with %
        flag, dest = flag_name(_dest(name, prefix)), _dest(name, prefix)
        if kind is bool:
            group.add_argument(
                flag,
                dest=dest,
                action=argparse.BooleanOptionalAction,
                default=default,
                help=described or None,
            )
        else:
            shown = "" if override else f" (default: {default})"
            group.add_argument(
                flag,
                dest=dest,
                type=_or_none(kind) if optional else kind,
                default=default,
                choices=choices,
                help=f"{described}{shown}".lstrip() or None,
            )


def pick(
    cls: type[Contract], values: Any, prefix: str = "", names: Sequence[str] | None = None
) -> dict[str, Any]:
    """The fields of ``cls`` (or of ``names``) taken from a mapping or an object (contract, argparse
    namespace); from a namespace, nested sections and ``prefix``ed flags are read back as
    ``add_flags`` wrote them."""
    if isinstance(values, dict):
        return {name: values.get(name) for name in names or cls.model_fields}
    out = {}
    for name in names or cls.model_fields:
        hint = cls.model_fields[name].annotation
        if _nested(hint) and not isinstance(values, Contract):
            out[name] = pick(hint, values, _dest(name, prefix))
        else:
            out[name] = getattr(values, _dest(name, prefix))
    return out


def to_flags(
    cls: type[Contract], values: dict[str, Any], names: Sequence[str] | None = None, prefix: str = ""
) -> str:
    """The command-line spelling of ``values``' fields of ``cls`` (or of ``names``; keys ``values``
    lacks are left out): the inverse of ``add_flags``. A null is left out where it is the default,
    else spelled "none"; a nested section's fields carry its name as a prefix."""
    return " ".join(shlex.quote(x) for x in _flag_tokens(cls, values, names, prefix))


def _flag_tokens(
    cls: type[Contract], values: dict[str, Any], names: Sequence[str] | None, prefix: str
) -> list[str]:
    out: list[str] = []
    for name, field in cls.model_fields.items():
        if name not in values or (names is not None and name not in names):
            continue
        value, flag = values[name], flag_name(_dest(name, prefix))
        if _nested(field.annotation):
            out += _flag_tokens(field.annotation, value, None, _dest(name, prefix))
        elif isinstance(value, bool):
            out.append(flag if value else "--no-" + flag[2:])
        elif value is not None:
            out += [flag, str(value)]
        elif field.default is not None:
            out += [flag, "none"]
    return out

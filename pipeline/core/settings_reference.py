"""docs/config.md: every setting with its default, its type and range, and what it does, rendered from
the contracts (pipeline.core.settings), the only place a default is declared.

    python -m pipeline.core.settings_reference > docs/config.md

tests/test_settings.py fails when the committed page is not what this prints.
"""

from __future__ import annotations

import inspect
import json
import sys
import types
from typing import Any, Literal, Union, get_args, get_origin

import annotated_types
from pydantic.fields import FieldInfo

from pipeline.core.settings.base import Contract, field_constraints
from pipeline.core.settings.root import SECTIONS, Config
from pipeline.sieve.settings import CleanSpec

HEADER = """\
# Configuration reference

Generated from the contracts (each family's in `pipeline/<family>/settings.py`, composed in
`pipeline/core/settings/`; `python -m pipeline.core.settings_reference
> docs/config.md`); do not edit by hand. Each setting's default is declared there once: `config.yaml`
holds only what the demo and the declared datasets set (`methods`, `datasets`, `recipes`), and an
overlay (`--configfile overlay.yaml`) or a recipe (docs/recipes.md) changes the rest. An unknown key or
a value out of range stops the run at start-up with the key's path.

A recipe (`recipes.<name>`) may set the sections model, bm25, dpr, ccr, sieve, ar2 and hybrid, and
`methods`, for the datasets that declare it; the others are the same for every dataset.
"""

_BOUNDS = (
    (annotated_types.Ge, ">= {}", "ge"),
    (annotated_types.Gt, "> {}", "gt"),
    (annotated_types.Le, "<= {}", "le"),
    (annotated_types.Lt, "< {}", "lt"),
    (annotated_types.MinLen, "length >= {}", "min_length"),
    (annotated_types.MaxLen, "length <= {}", "max_length"),
)


def _type_name(hint: Any) -> str:
    """A config-file spelling of a field's type: int, float, one of a|b, list of int, or null."""
    origin = get_origin(hint)
    if origin is Literal:
        return " | ".join(str(v) for v in get_args(hint))
    if origin in (Union, types.UnionType):
        parts = [_type_name(a) for a in get_args(hint) if a is not type(None)]
        optional = type(None) in get_args(hint)
        return " or ".join(parts) + (" or null" if optional else "")
    if origin is list:
        (item,) = get_args(hint) or (Any,)
        return f"list of {_type_name(item)}"
    if origin is dict:
        return "mapping"
    metadata = getattr(hint, "__metadata__", None)
    if metadata is not None:  # Annotated[X, ...]
        return _type_name(get_args(hint)[0])
    return getattr(hint, "__name__", str(hint))


def _bounds(field: FieldInfo) -> str:
    found = []
    for kind, text, attribute in _BOUNDS:
        found += [
            text.format(getattr(item, attribute))
            for item in field_constraints(field)
            if isinstance(item, kind) and not (attribute == "min_length" and item.min_length == 0)
        ]
    return ", ".join(found)


def _default(value: Any) -> str:
    if isinstance(value, Contract):
        return ""
    text = json.dumps(value, ensure_ascii=False) if value is not None else "null"
    return f"`{text}`"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _rows(cls: type[Contract], prefix: str) -> list[str]:
    rows = []
    for name, field in cls.model_fields.items():
        key = f"{prefix}{name}"
        hint = field.annotation
        if isinstance(hint, type) and issubclass(hint, Contract):
            rows += _rows(hint, f"{key}.")
            continue
        kind = _type_name(hint)
        bounds = _bounds(field)
        shown = f"{kind} ({bounds})" if bounds else kind
        shown_default = "required" if field.is_required() else _default(field.default)
        rows.append(f"| `{key}` | {shown_default} | {_cell(shown)} | {_cell(field.description or '')} |")
    return rows


def _doc(cls: type[Contract]) -> str:
    return " ".join((inspect.getdoc(cls) or "").split())


def reference() -> str:
    """The Markdown page: the top-level keys, then one table per section."""
    out = [HEADER, "## Top level", "", "| key | default | type | meaning |", "|---|---|---|---|"]
    for name in ("seed", "seeds", "methods"):
        field = Config.model_fields[name]
        default = "required" if field.is_required() else _default(field.default)
        out.append(
            f"| `{name}` | {default} | {_cell(_type_name(field.annotation))} | {_cell(field.description or '')} |"
        )
    out += [
        "| `datasets` | required | mapping | datasets by name: format, source, split (docs/data.md) |",
        '| `recipes` | `{"demo": {}}` | mapping | named training recipes (docs/recipes.md) |',
        f"| `clean` | `{{}}` | mapping | {_cell(Config.model_fields['clean'].description or '')} |",
        "",
    ]
    for name, cls in SECTIONS.items():
        out += [f"## {name}", ""]
        if cls.__doc__ and cls.__doc__ is not Contract.__doc__:
            out += [_doc(cls), ""]
        out += ["| key | default | type | meaning |", "|---|---|---|---|", *_rows(cls, f"{name}."), ""]
    out += ["## clean.<name>", "", _doc(CleanSpec), ""]
    out += ["| key | default | type | meaning |", "|---|---|---|---|", *_rows(CleanSpec, "clean.<name>."), ""]
    return "\n".join(out).rstrip("\n") + "\n"


if __name__ == "__main__":
    sys.stdout.write(reference())

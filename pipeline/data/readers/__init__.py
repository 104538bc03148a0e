"""Readers of the dataset formats users already have on disk, and the roles each format takes.

A dataset is declared in config.yaml as ``format`` + ``source``; ``source`` maps roles (which file is
which) to local paths or downloads. ``pipeline.data.prepare`` calls the format's ``build`` with the
role -> local path mapping; the result is the canonical tables of docs/architecture.md.
Formats and their upstream layouts: docs/data.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

from pipeline.core.config import ConfigError
from pipeline.core.storage import SPLITS

from . import beir, dpr, msmarco, squad
from .base import BuildOptions
from .writer import DatasetWriter


@dataclass(frozen=True)
class FormatSpec:
    required: tuple[str, ...]
    optional: tuple[str, ...]
    any_of: tuple[str, ...]  # at least one of these must be given (else the dataset has no queries)
    build: Callable


_PER_SPLIT = tuple(f"{kind}_{s}" for s in SPLITS for kind in ("queries", "qrels"))

FORMATS: dict[str, FormatSpec] = {
    "dpr": FormatSpec(("corpus",), SPLITS, SPLITS, dpr.build),
    "msmarco": FormatSpec(("corpus",), _PER_SPLIT, tuple(f"queries_{s}" for s in SPLITS), msmarco.build),
    "squad": FormatSpec(("source",), (), (), squad.build),
    "beir": FormatSpec(("corpus",), ("queries", "train") + _PER_SPLIT, ("train",) + _PER_SPLIT, beir.build),
}


def check_roles(fmt: str, roles: Iterable[str], dataset: str = "") -> None:
    """ConfigError unless ``roles`` suits ``fmt`` (names the dataset, the role and what is allowed)."""
    where = f"datasets.{dataset}.source" if dataset else "source"
    if fmt not in FORMATS:
        raise ConfigError(f"{where}: format {fmt!r} has no reader (formats: {', '.join(FORMATS)})")
    spec = FORMATS[fmt]
    roles = set(roles)
    allowed = spec.required + spec.optional
    unknown = sorted(roles - set(allowed))
    if unknown:
        raise ConfigError(
            f"{where}: unknown role(s) {unknown} for format {fmt!r} (roles: {', '.join(allowed)})"
        )
    missing = [r for r in spec.required if r not in roles]
    if missing:
        raise ConfigError(f"{where}: format {fmt!r} needs the role(s) {missing}")
    if spec.any_of and not roles & set(spec.any_of):
        raise ConfigError(f"{where}: no queries: give at least one of {', '.join(spec.any_of)}")


__all__ = ["FORMATS", "FormatSpec", "check_roles", "BuildOptions", "DatasetWriter"]

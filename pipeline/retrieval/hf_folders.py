"""What the retriever and ranker folders share: a settings dataclass stored as JSON (written last, so
a folder that has it is complete) next to Hugging Face encoders (model + tokenizer) in sub-folders."""

from __future__ import annotations

import json
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any, TypeVar

from transformers import AutoModel, AutoTokenizer

from pipeline.core.storage import atomic_open

T = TypeVar("T")


def settings_from_dict(cls: type[T], data: dict, kind: str) -> T:
    """``cls(**data)``, refusing keys that are not fields of ``cls`` (``kind`` names it in the error)."""
    known = {f.name for f in fields(cls)}
    unknown = set(data) - known
    if unknown:
        raise ValueError(f"unknown {kind} settings {sorted(unknown)} (known: {sorted(known)})")
    return cls(**data)


def read_settings(path: str | Path, cls: type[T]) -> T | None:
    """The settings stored at ``path``, or None where the folder has none (not one of ours)."""
    path = Path(path)
    if not path.exists():
        return None
    return cls.from_dict(json.loads(path.read_text()))


def write_settings(path: str | Path, settings: Any) -> None:
    with atomic_open(path, "w") as handle:
        json.dump(asdict(settings), handle, indent=2)


def load_encoder(path: str | Path) -> tuple[Any, Any]:
    """(tokenizer, model) of a Hugging Face folder or hub name."""
    return AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path)


def save_encoder(folder: str | Path, model: Any, tokenizer: Any) -> None:
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)

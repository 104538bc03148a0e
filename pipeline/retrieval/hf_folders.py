"""What the retriever and ranker folders share: a settings dataclass stored as JSON (written last, so
a folder that has it is complete) next to Hugging Face encoders (model + tokenizer) in sub-folders."""

from __future__ import annotations

import json
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any, TypeVar

from safetensors import SafetensorError
from transformers import AutoModel, AutoTokenizer

from pipeline.core.storage import (
    CHECKSUMS,  # noqa: F401  (re-exported: the model folders' digests)
    DataError,
    atomic_open,
    follow_umask,
    write_checksums,
)
from pipeline.core.storage import verify_checksums as verify_folder_checksums

DAMAGED_HINT = "delete the model folder and rerun the rule that builds it"

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


def verify_checksums(folder: str | Path) -> None:
    """``storage.verify_checksums`` of a model folder (a base model's, without digests, passes)."""
    verify_folder_checksums(folder, DAMAGED_HINT)


def load_model(path: str | Path) -> Any:
    """A Hugging Face model from a folder (its recorded digests checked) or a hub name."""
    if Path(path).is_dir():
        verify_checksums(path)
    try:
        return AutoModel.from_pretrained(path)
    except (SafetensorError, OSError) as exc:
        # safetensors' own message ("incomplete metadata") names no file.
        weights = Path(path) / "model.safetensors"
        raise DataError(
            f"cannot load the model weights ({' '.join(str(exc).split())}): {DAMAGED_HINT}",
            file=weights if weights.exists() else path,
        ) from None


def load_encoder(path: str | Path) -> tuple[Any, Any]:
    """(tokenizer, model) of a Hugging Face folder or hub name."""
    model = load_model(path)
    return AutoTokenizer.from_pretrained(path), model


def save_encoder(folder: str | Path, model: Any, tokenizer: Any) -> None:
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    for path in Path(folder).iterdir():
        if path.is_file():
            follow_umask(path)
    write_checksums(folder)

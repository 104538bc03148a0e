"""What the retriever and ranker folders share: a settings dataclass stored as JSON (written last, so
a folder that has it is complete) next to Hugging Face encoders (model + tokenizer) in sub-folders."""

from __future__ import annotations

import json
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any, Iterable, TypeVar

from safetensors import SafetensorError
from transformers import AutoModel, AutoTokenizer

from pipeline.core.storage import (
    DataError,
    atomic_open,
    file_sha256,
    follow_umask,
    read_json_object,
    write_json,
)

CHECKSUMS = "checksums.json"
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


def write_checksums(folder: str | Path, names: Iterable[str] | None = None) -> None:
    """Record the sha256 of ``names`` (default: every file of ``folder``) in ``checksums.json``.

    Only the marker file (retriever.json, ranker.json) is a declared output, so Snakemake never
    notices a damaged weight file; the loaders compare these digests instead.
    """
    folder = Path(folder)
    if names is None:
        names = sorted(p.name for p in folder.iterdir() if p.is_file() and p.name != CHECKSUMS)
    write_json(folder / CHECKSUMS, {"sha256": {name: file_sha256(folder / name) for name in names}})


def verify_checksums(folder: str | Path) -> None:
    """Refuse a file of ``folder`` whose sha256 differs from the one recorded when it was written.

    A folder without ``checksums.json`` (a base model, one written by an older version) passes.
    """
    folder = Path(folder)
    path = folder / CHECKSUMS
    if not path.exists():
        return
    recorded = read_json_object(path, keys=("sha256",))["sha256"]
    if not isinstance(recorded, dict):
        raise DataError("must map file names to sha256 digests", file=path, field="sha256")
    for name, expected in recorded.items():
        if not (folder / name).exists():
            raise DataError(f"file missing: {DAMAGED_HINT}", file=folder / name)
        actual = file_sha256(folder / name)
        if actual != expected:
            raise DataError(
                f"sha256 {actual[:12]}… differs from {str(expected)[:12]}… recorded in {CHECKSUMS} when it "
                f"was saved (damaged or overwritten since): {DAMAGED_HINT}",
                file=folder / name,
            )


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

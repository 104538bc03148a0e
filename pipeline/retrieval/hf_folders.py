"""What the retriever and ranker folders share: a settings dataclass stored as JSON (written last, so
a folder that has it is complete) next to Hugging Face encoders (model + tokenizer): at the retriever
folder's root and in its ``passage_encoder/``, in the ranker folder's ``encoder/``."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any, TypeVar

from safetensors import SafetensorError
from transformers import AutoModel, AutoTokenizer

from pipeline.core.storage import (
    CHECKSUMS,
    DataError,
    atomic_open,
    follow_umask,
    write_checksums,
)
from pipeline.core.storage import verify_checksums as verify_folder_checksums
from pipeline.data.models import require_local

DAMAGED_HINT = "delete the model folder and rerun the rule that builds it"
STAGING = ".encoder."  # save_encoder's staging folder inside the target: .encoder.<random>.tmp

T = TypeVar("T")


class SettingError(ValueError):
    """A settings value a dataclass refuses, with the field it is in."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(message)


# The JSON types a settings field may hold, by its annotation (a float field takes an integer too).
_JSON_TYPES = {"str": (str,), "int": (int,), "float": (int, float), "bool": (bool,)}


def settings_from_dict(cls: type[T], data: dict, kind: str) -> T:
    """``cls(**data)``, refusing keys that are not fields of ``cls`` (``kind`` names it in the error)
    and values of another JSON type (SettingError naming the field)."""
    known = {f.name: f for f in fields(cls)}
    unknown = set(data) - set(known)
    if unknown:
        raise SettingError(
            sorted(unknown)[0], f"unknown {kind} settings {sorted(unknown)} (known: {sorted(known)})"
        )
    for name, value in data.items():
        kinds = _JSON_TYPES.get(str(known[name].type))
        # bool is an int to Python, not a number to a user writing JSON.
        if kinds is not None and (
            not isinstance(value, kinds) or (bool not in kinds and isinstance(value, bool))
        ):
            raise SettingError(name, f"expected {known[name].type}, got {json.dumps(value)}")
    return cls(**data)


def read_settings(path: str | Path, cls: type[T]) -> T | None:
    """The settings stored at ``path``, or None where the folder has none (not one of ours). A file that
    is not such settings is one DataError naming it (and the key where one is at fault)."""
    path = Path(path)
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:  # truncated, or not UTF-8
        raise DataError(f"not valid JSON ({exc}): {DAMAGED_HINT}", file=path) from None
    if not isinstance(data, dict):
        raise DataError(f"expected a JSON object, got {type(data).__name__}: {DAMAGED_HINT}", file=path)
    try:
        return cls.from_dict(data)
    except SettingError as exc:
        raise DataError(f"{exc}: {DAMAGED_HINT}", file=path, field=exc.field) from None


def write_settings(path: str | Path, settings: Any) -> None:
    with atomic_open(path, "w") as handle:
        json.dump(asdict(settings), handle, indent=2)


def verify_checksums(folder: str | Path) -> None:
    """``storage.verify_checksums`` of a model folder (a base model's, without digests, passes)."""
    verify_folder_checksums(folder, DAMAGED_HINT)


def _refused(exc: ValueError, path: str | Path) -> DataError:
    """transformers' refusal of a config (custom code it would have to run, an unknown model type),
    folded onto one line naming the config."""
    if isinstance(exc, DataError):
        return exc
    config = Path(path) / "config.json"
    why = " ".join(str(exc).split())
    if "trust_remote_code" in why:
        # Never trusted here: a model folder is data, and its code would run with the user's rights.
        why = (
            "its config needs code of its own (auto_map), which this pipeline never runs (trust_remote_code)"
        )
    return DataError(f"cannot load the model: {why}", file=config if config.exists() else path)


def load_model(path: str | Path) -> Any:
    """A Hugging Face model from a folder (its recorded digests checked) or a hub name (where the hub is
    reachable: jobs of the workflow get the prefetched folder and run with the hub off)."""
    require_local(path)
    if Path(path).is_dir():
        verify_checksums(path)
    try:
        return AutoModel.from_pretrained(path)
    except ValueError as exc:
        raise _refused(exc, path) from None
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
    try:
        return AutoTokenizer.from_pretrained(path), model
    except ValueError as exc:
        raise _refused(exc, path) from None


def recorded_names(folder: str | Path) -> set[str]:
    """The file names ``checksums.json`` of ``folder`` records (none where it is missing or unreadable)."""
    try:
        recorded = json.loads((Path(folder) / CHECKSUMS).read_text())["sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        return set()
    return set(recorded) if isinstance(recorded, dict) else set()


# How a tokenizer was loaded, not what it is: transformers keeps these load arguments (local_files_only
# from HF_HUB_OFFLINE, which cluster jobs set) and writes them into tokenizer_config.json, so the same
# training run by hand and as a job would save different bytes.
LOAD_ARGUMENTS = ("local_files_only", "cache_dir", "token", "use_auth_token", "force_download", "proxies")


def save_encoder(folder: str | Path, model: Any, tokenizer: Any) -> list[str]:
    """Write ``model`` and ``tokenizer`` (``save_pretrained``) into ``folder`` beside what else it holds,
    record their sha256 in its ``checksums.json`` and return the file names written.

    The libraries write into a staging folder inside ``folder`` whose files are then moved in, so the
    digests cover exactly the encoder's files (a retriever folder's root also holds ``retriever.json``,
    the sentence-transformers files and training logs). Files of an encoder saved there before (named
    in its ``checksums.json``) that this one does not write are removed: a stale weights file of
    another format or sharding could be the one a library loads.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob(f"{STAGING}*.tmp"):  # a killed save's (one writer per folder)
        shutil.rmtree(stale, ignore_errors=True)
    previous = recorded_names(folder)
    staging = Path(tempfile.mkdtemp(prefix=STAGING, suffix=".tmp", dir=folder))
    try:
        model.save_pretrained(staging)
        _save_tokenizer(tokenizer, staging)
        names = sorted(p.name for p in staging.iterdir())
        for name in names:
            if not (staging / name).is_file():
                raise ValueError(f"save_pretrained wrote a folder ({name}); only files are expected")
            follow_umask(staging / name)
            os.replace(staging / name, folder / name)
    except OSError as exc:
        # A full disk names no file, or a staging file the user never asked for: name the folder.
        if exc.filename is None or str(exc.filename).startswith(str(staging)):
            exc.filename = str(folder)
        raise
    except SafetensorError as exc:  # safetensors' own write error (a full disk among them)
        raise DataError(f"cannot write the model ({' '.join(str(exc).split())})", file=folder) from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    for name in sorted(previous - set(names)):
        (folder / name).unlink(missing_ok=True)
    write_checksums(folder, names)
    return names


def _save_tokenizer(tokenizer: Any, folder: Path) -> None:
    kwargs = getattr(tokenizer, "init_kwargs", None)
    if not isinstance(kwargs, dict):
        tokenizer.save_pretrained(folder)
        return
    loaded_with = {key: kwargs.pop(key) for key in LOAD_ARGUMENTS if key in kwargs}
    try:
        tokenizer.save_pretrained(folder)
    finally:
        kwargs.update(loaded_with)

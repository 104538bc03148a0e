"""Resumable training state: model, optimizer, scheduler, RNG streams and step, saved atomically.

A checkpoint directory holds ``state.pt`` (everything needed to continue bit-for-bit on CPU). It is
written to a temporary file and renamed, so a job killed mid-save leaves the previous checkpoint intact.
Randomness that decides *what* is trained on (negative sampling) is derived from ``(seed, id, epoch)``
(``pipeline.core.seeding.item_rng``) and does not live in the checkpoint; only framework RNG (dropout) does.

``state.pt`` holds tensors and plain Python values only and is read with ``weights_only=True``: a
checkpoint folder is user-chosen (``--checkpoint-dir``), and unpickling anything else could run code.
A file that does not load that way (damaged, truncated by a full disk, or written by a version that
pickled numpy arrays) is not a checkpoint: the stage starts afresh with a warning, or, where it cannot
(``unreadable="error"``), stops with a message that names the folder.
"""

from __future__ import annotations

import logging
import pickle
from pathlib import Path
from typing import Any, Literal

import torch

from pipeline.core.seeding import rng_state, set_rng_state
from pipeline.core.storage import DataError, atomic_path

log = logging.getLogger("sieve.checkpoint")

STATE_FILE = "state.pt"
_KEYS = ("step", "state", "rng", "extra")


def save_checkpoint(
    directory: str | Path, *, step: int, modules: dict[str, Any], extra: dict[str, Any] | None = None
) -> Path:
    """Save ``modules`` (anything with state_dict(): models, optimizers, schedulers, scalers)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    payload = {
        "step": step,
        "state": {name: obj.state_dict() for name, obj in modules.items() if obj is not None},
        "rng": rng_state(),
        "extra": extra or {},
    }
    path = directory / STATE_FILE
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as handle:  # a path would name the zip's inner folder after tmp
            torch.save(payload, handle)
    log.info("checkpoint saved at step %d -> %s", step, path)
    return path


def _load(path: Path) -> tuple[dict[str, Any] | None, str]:
    """(payload, "") or (None, why it is not a checkpoint)."""
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        # torch's own message suggests weights_only=False: exactly what must not be done here.
        return None, "it holds objects other than tensors and plain values, refused unread"
    except Exception as exc:  # torch raises many types for truncated, foreign or hostile files
        text = str(exc).strip()
        return None, f"{type(exc).__name__}: {text.splitlines()[0][:200] if text else 'unreadable'}"
    if not isinstance(payload, dict) or any(key not in payload for key in _KEYS):
        return None, f"expected a mapping with {', '.join(_KEYS)}"
    return payload, ""


def _not_a_checkpoint(why: str) -> str:
    return f"not a readable checkpoint ({why}); it is damaged or was written by an older version of sieve"


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    """The payload of a ``state.pt``, loaded without running code; a file that is not a checkpoint
    raises DataError naming it and the folder to delete."""
    path = Path(path)
    payload, why = _load(path)
    if payload is None:
        raise DataError(
            f"{_not_a_checkpoint(why)}: delete {path.parent} and run again to start that training afresh",
            file=path,
        )
    return payload


def load_checkpoint(
    directory: str | Path,
    *,
    modules: dict[str, Any],
    restore_rng: bool = True,
    unreadable: Literal["afresh", "error"] = "afresh",
) -> dict[str, Any] | None:
    """Restore ``modules`` in place from ``directory``; return {'step', 'extra'} or None if absent.

    An unreadable ``state.pt`` counts as absent, with a warning (``unreadable="afresh"``: the caller
    starts from step 0 and its next save replaces the file), or raises DataError
    (``unreadable="error"``: for a checkpoint the caller cannot do without).
    """
    path = Path(directory) / STATE_FILE
    if not path.exists():
        return None
    if unreadable == "error":
        payload = read_checkpoint(path)
    else:
        payload, why = _load(path)
        if payload is None:
            log.warning(
                "%s: %s; ignoring it: training starts afresh in %s", path, _not_a_checkpoint(why), path.parent
            )
            return None
    missing = [name for name, obj in modules.items() if obj is not None and name not in payload["state"]]
    if missing:
        raise ValueError(f"{path}: checkpoint has no state for {missing}; was it written by another stage?")
    for name, obj in modules.items():
        if obj is not None:
            obj.load_state_dict(payload["state"][name])
    if restore_rng:
        set_rng_state(payload["rng"])
    log.info("resumed from %s at step %d", path, payload["step"])
    return {"step": payload["step"], "extra": payload["extra"]}

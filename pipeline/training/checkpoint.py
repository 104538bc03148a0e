"""Resumable training state: model, optimizer, scheduler, RNG streams and step, saved atomically.

A checkpoint directory holds ``state.pt`` (everything needed to continue bit-for-bit on CPU). It is
written to a temporary file and renamed, so a job killed mid-save leaves the previous checkpoint intact.
Randomness that decides *what* is trained on (negative sampling) is derived from ``(seed, id, epoch)``
(``pipeline.core.seeding.item_rng``) and does not live in the checkpoint; only framework RNG (dropout) does.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

from pipeline.core.seeding import rng_state, set_rng_state
from pipeline.core.storage import atomic_path

log = logging.getLogger("sieve.checkpoint")

STATE_FILE = "state.pt"


def save_checkpoint(directory: str | Path, *, step: int, modules: dict[str, Any],
                    extra: dict[str, Any] | None = None) -> Path:
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
        torch.save(payload, tmp)
    log.info("checkpoint saved at step %d -> %s", step, path)
    return path


def load_checkpoint(directory: str | Path, *, modules: dict[str, Any],
                    restore_rng: bool = True) -> dict[str, Any] | None:
    """Restore ``modules`` in place from ``directory``; return {'step', 'extra'} or None if absent."""
    path = Path(directory) / STATE_FILE
    if not path.exists():
        return None
    payload = torch.load(path, map_location="cpu", weights_only=False)
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

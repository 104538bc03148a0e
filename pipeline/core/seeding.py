"""Seeded randomness: process-independent hashes, per-item random streams, framework RNG state.

Randomness that decides *what* is trained on (negative sampling, candidate sampling) is derived from
``(seed, id, epoch)`` with ``item_rng``, so it depends neither on order nor on the number of workers.
Only framework RNG (dropout) is global; ``rng_state``/``set_rng_state`` carry it through checkpoints.
"""
from __future__ import annotations

import hashlib
import random
from typing import Any

import numpy as np
import torch


def stable_hash(text: str) -> int:
    """A process-independent 63-bit hash (Python's hash() is salted per process)."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little") >> 1


def item_rng(seed: int, key: str, epoch: int = 0) -> np.random.Generator:
    """The random stream for one item (a query) in one epoch: independent of order and worker count."""
    return np.random.default_rng([seed, stable_hash(key), epoch])


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def rng_state() -> dict[str, Any]:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])

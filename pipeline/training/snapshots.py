"""Weight snapshots a training run keeps at chosen steps: candidates of model selection on dev
(pipeline.training.select_model) besides the start and the trained model.

A snapshot is ``snapshots/step<k>/model.safetensors``: the retriever's state_dict after optimizer step
``k``, nothing else (the settings, tokenizer and architecture are the trained folder's, which the
snapshot is loaded into). During training they live in the checkpoint folder; train_dense moves them
into the model folder with the model, so a folder with ``retriever.json`` has its snapshots complete.

Each is written after its step's update and before that step's log line and checkpoint: a run killed
in between resumes from an earlier checkpoint and writes it again, bit for bit the same (the resume
replays the steps exactly), and a checkpoint past step ``k`` implies snapshot ``k`` is on disk.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from pipeline.core.storage import DataError, atomic_path

SNAPSHOT_DIR = "snapshots"
WEIGHTS_FILE = "model.safetensors"
_STEP_DIR = re.compile(r"step([1-9][0-9]*)")


def snapshot_steps(total: int, count: int) -> list[int]:
    """``count`` steps evenly spaced inside a run of ``total`` steps: k * total // (count + 1) for
    k = 1..count, those in 1..total - 1 once each (the trained model is step ``total`` already)."""
    steps = {k * total // (count + 1) for k in range(1, count + 1)}
    return sorted(s for s in steps if 0 < s < total)


def step_folder(root: str | Path, step: int) -> Path:
    return Path(root) / f"step{step}"


def save_snapshot(model: torch.nn.Module, root: str | Path, step: int) -> Path:
    """Write ``model``'s weights as snapshot ``step`` under ``root`` (atomically: a kill leaves the
    previous file or none)."""
    folder = step_folder(root, step)
    folder.mkdir(parents=True, exist_ok=True)
    # Contiguous copies on the CPU: safetensors refuses tensors that share storage.
    tensors = {
        name: value.detach().to("cpu").contiguous().clone() for name, value in model.state_dict().items()
    }
    with atomic_path(folder / WEIGHTS_FILE) as tmp:
        save_file(tensors, str(tmp))
    return folder


def collect(source: str | Path, out: str | Path, steps: list[int], *, keep_source: bool) -> None:
    """Put the snapshots of ``steps`` from ``source`` (the checkpoint folder's) into ``out`` (the model
    folder's), replacing what ``out`` held; a missing one is an error, never a silent gap."""
    source, out = Path(source), Path(out)
    missing = [s for s in steps if not (step_folder(source, s) / WEIGHTS_FILE).is_file()]
    if missing:
        raise DataError(
            f"snapshot of step {missing[0]} is missing: delete the folder to train afresh",
            file=source,
        )
    shutil.rmtree(out, ignore_errors=True)
    if not steps:
        return
    if keep_source:
        shutil.copytree(source, out)
    else:
        shutil.move(str(source), str(out))


def list_snapshots(model_dir: str | Path) -> list[tuple[int, Path]]:
    """(step, weights file) of each snapshot in a trained folder, by step; none when it keeps none.
    An entry of another name, or a step folder without its weights, is a DataError naming it."""
    root = Path(model_dir) / SNAPSHOT_DIR
    if not root.is_dir():
        return []
    found = []
    for entry in sorted(root.iterdir()):
        match = _STEP_DIR.fullmatch(entry.name)
        if match is None or not entry.is_dir():
            raise DataError("not a snapshot folder (expected step<k>/ holding model.safetensors)", file=entry)
        weights = entry / WEIGHTS_FILE
        if not weights.is_file():
            raise DataError("snapshot folder without its weights", file=weights)
        found.append((int(match.group(1)), weights))
    return sorted(found)


def load_snapshot(path: str | Path) -> dict[str, torch.Tensor]:
    """The state_dict of one snapshot; a file that is not one is a DataError naming it."""
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError) as exc:
        text = str(exc).strip().splitlines()
        raise DataError(
            f"not a readable snapshot ({text[0] if text else type(exc).__name__})", file=path
        ) from None

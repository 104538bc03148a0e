"""Checkpoints load without running code from the file (issue 14.8), a damaged checkpoint names its
folder instead of a PyTorch traceback, an unwritable output is found before a long stage starts
(14.6), and temporary files left by a killed write are cleaned by the next write of that output
(14.7)."""

from __future__ import annotations

import logging
import os
import random
import tempfile

import numpy as np
import pytest
import torch
from transformers import get_linear_schedule_with_warmup

from pipeline.core.seeding import rng_state, set_rng_state
from pipeline.core.storage import DataError, atomic_path, write_json
from pipeline.training.checkpoint import STATE_FILE, load_checkpoint, save_checkpoint


def _modules(seed: int = 0) -> dict:
    torch.manual_seed(seed)
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = get_linear_schedule_with_warmup(opt, 2, 10)
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
    sched.step()
    return {"model": model, "optimizer": opt, "scheduler": sched, "scaler": torch.amp.GradScaler("cpu")}


class _Planted:
    """What a hostile state.pt holds: unpickling it with weights_only=False creates ``marker``."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return open, (self.marker, "w")


def _hostile_checkpoint(folder, marker) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(
        {"step": 1, "state": {}, "rng": rng_state(), "extra": {"x": _Planted(str(marker))}},
        folder / STATE_FILE,
    )


# ---- 14.8: weights_only ---------------------------------------------------------------------------


def test_a_checkpoint_loads_with_weights_only(tmp_path):
    path = save_checkpoint(tmp_path / "ckpt", step=3, modules=_modules(), extra={"epoch": 1})
    payload = torch.load(path, map_location="cpu", weights_only=True)
    assert payload["step"] == 3 and payload["extra"] == {"epoch": 1}


def test_rng_state_survives_a_weights_only_round_trip(tmp_path):
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    np.random.standard_normal()  # a cached Gaussian is part of numpy's state too
    torch.save(rng_state(), tmp_path / "rng.pt")
    expected = (random.random(), np.random.standard_normal(3).tolist(), torch.rand(3).tolist())
    set_rng_state(torch.load(tmp_path / "rng.pt", weights_only=True))
    assert (random.random(), np.random.standard_normal(3).tolist(), torch.rand(3).tolist()) == expected


def test_resume_restores_modules_and_rng_exactly(tmp_path):
    saved = _modules(seed=0)
    np.random.seed(7)
    save_checkpoint(tmp_path / "ckpt", step=5, modules=saved)
    draws = np.random.rand(4)
    fresh = _modules(seed=1)
    np.random.seed(99)
    info = load_checkpoint(tmp_path / "ckpt", modules=fresh)
    assert info == {"step": 5, "extra": {}}
    assert np.array_equal(np.random.rand(4), draws)
    assert torch.equal(fresh["model"].weight, saved["model"].weight)
    assert fresh["scheduler"].state_dict() == saved["scheduler"].state_dict()


def test_a_checkpoint_runs_no_code_when_loaded(tmp_path, caplog):
    marker = tmp_path / "pwned"
    _hostile_checkpoint(tmp_path / "ckpt", marker)
    with caplog.at_level(logging.WARNING, logger="sieve.checkpoint"):
        assert load_checkpoint(tmp_path / "ckpt", modules=_modules()) is None
    assert not marker.exists()
    assert str(tmp_path / "ckpt") in caplog.text


def test_ar2_carry_runs_no_code_either(tmp_path):
    from pipeline.ar2.train import write_carry

    marker = tmp_path / "pwned"
    _hostile_checkpoint(tmp_path / "ckpt", marker)
    with pytest.raises(DataError, match="not a readable checkpoint"):
        write_carry(tmp_path / "ckpt", tmp_path / "carry")
    assert not marker.exists() and not (tmp_path / "carry").exists()


# ---- 14.6: a damaged checkpoint ---------------------------------------------------------------------


def _truncated(tmp_path):
    path = save_checkpoint(tmp_path / "ckpt", step=2, modules=_modules())
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return tmp_path / "ckpt"


def test_truncated_checkpoint_starts_afresh_with_a_warning_naming_the_folder(tmp_path, caplog):
    folder = _truncated(tmp_path)
    with caplog.at_level(logging.WARNING, logger="sieve.checkpoint"):
        assert load_checkpoint(folder, modules=_modules()) is None
    assert str(folder) in caplog.text and "afresh" in caplog.text


def test_truncated_checkpoint_that_must_be_read_is_an_error_naming_the_folder(tmp_path):
    folder = _truncated(tmp_path)
    with pytest.raises(DataError, match=f"delete {folder}") as exc:
        load_checkpoint(folder, modules=_modules(), unreadable="error")
    assert str(folder / STATE_FILE) in str(exc.value)


# ---- 14.6: an unwritable output, found before the stage starts ------------------------------------


def test_unwritable_output_folder_is_found_before_the_stage_starts(tmp_path, monkeypatch):
    from pipeline.core import cli

    out = tmp_path / "results" / "model"
    cli.check_writable(out, tmp_path / "ckpt" / "state.pt")  # not there yet: fine, its parent is

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(cli.tempfile, "mkstemp", refuse)
    with pytest.raises(DataError, match="cannot write") as exc:
        cli.check_writable(out)
    assert str(tmp_path) in str(exc.value)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_read_only_folder(tmp_path):
    from pipeline.core.cli import check_writable

    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        with pytest.raises(DataError, match="cannot write"):
            check_writable(folder / "model")
    finally:
        folder.chmod(0o755)


def test_output_under_a_file_is_not_writable(tmp_path):
    from pipeline.core.cli import check_writable

    (tmp_path / "f").write_text("x")
    with pytest.raises(DataError, match="not a folder"):
        check_writable(tmp_path / "f" / "model")


# ---- 14.7: temporary files of a killed write --------------------------------------------------------


def _stale_temp(path) -> str:
    """A temporary file named as storage.atomic_path names them, left as a kill -9 leaves it."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    return tmp


def test_stale_temps_of_an_output_are_removed_and_no_others(tmp_path):
    from pipeline.core.temp_files import is_temp_of, remove_stale_temps

    out = tmp_path / "shard_000.npy"
    stale = [_stale_temp(out), _stale_temp(out)]
    others = [
        _stale_temp(tmp_path / "shard_001.npy"),
        _stale_temp(tmp_path / "shard_000.npy.ids"),
        _stale_temp(tmp_path / "shard"),
        tmp_path / ".shard_000.npy.notes.tmp",
    ]
    (tmp_path / ".shard_000.npy.notes.tmp").write_text("not ours")
    out.write_text("the output itself stays")
    removed = remove_stale_temps(out)
    assert sorted(map(str, removed)) == sorted(stale)
    assert not any(os.path.exists(p) for p in stale)
    assert all(os.path.exists(p) for p in others) and out.exists()
    with atomic_path(out) as tmp:  # the pattern is the one storage uses
        assert is_temp_of(tmp, out)
    assert remove_stale_temps(tmp_path / "missing" / "x") == []


def test_writing_an_output_cleans_its_stale_temps(tmp_path):
    out = tmp_path / "manifest.json"
    stale = _stale_temp(out)
    write_json(out, {"ok": True})
    assert not os.path.exists(stale)

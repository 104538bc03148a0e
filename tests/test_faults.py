"""kill -9, then the same command again: training, encoding and an AR2 round end with the files of an
uninterrupted run (issue 14).

Each case runs its CLI three times as a subprocess on tiny data: once uninterrupted, once killed by a
real SIGKILL at a chosen step (the process sends it to itself from a hook, so no Python cleanup runs:
no finally, no atexit, temporary files left behind), and once more with the very same command. The
two runs live in copies of one folder, so relative paths and inputs are identical. Files are compared
byte for byte, except where bytes record how the run went (assert_same_files): JSON timings and the
step a run started from, and the zip member names of .pt files, whose tensors are compared byte for
byte instead.

Already covered elsewhere, in process (an exception at a step, not a SIGKILL; weights compared in
memory): training resume in tests/test_train_resume.py (and test_frozen_layers.py), an AR2 round's
resume in tests/test_ar2_resume.py, a killed write's temporary files in
tests/test_checkpoint_safety.py, encoding's determinism in tests/test_encode.py.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from stage_args import encode_corpus

from pipeline.ar2.settings import Ar2Settings
from pipeline.core.settings.root import defaults
from pipeline.workflow.ar2 import ar2_train_job
from pipeline.workflow.documents import settings_flag

pytestmark = pytest.mark.slow

# Runs a stage's CLI as __main__ after wrapping one of its functions so that the process SIGKILLs
# itself at a step. argv: module, "train" | "ar2" | "encode", the step, the CLI's arguments.
KILLER = """
import os, runpy, signal, sys

module, kind, at = sys.argv[1], sys.argv[2], int(sys.argv[3])

def kill(step):
    if step == at:
        os.kill(os.getpid(), signal.SIGKILL)

if kind in ("train", "ar2"):  # after optimizer step `at` (and its checkpoint, if one is due)
    import importlib
    owner = importlib.import_module("pipeline.training.loop" if kind == "train" else "pipeline.ar2.train")
    name = "train" if kind == "train" else "train_round"
    wrapped = getattr(owner, name)
    setattr(owner, name, lambda *a, **kw: wrapped(*a, **{**kw, "on_step_end": kill}))
else:  # encode: after the k-th buffer has been appended to the shard's temporary file
    from pipeline.retrieval.embeddings import EmbeddingWriter
    write, calls = EmbeddingWriter.write, []
    def counted(self, *a, **kw):
        write(self, *a, **kw)
        calls.append(1)
        kill(len(calls))
    EmbeddingWriter.write = counted

sys.argv = [module, *sys.argv[4:]]
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""

# How a run went, not what it computed: wall clock, throughput, the step it started from. The only
# JSON fields allowed to differ.
RUN_KEYS = {"wall_time_s", "wall_s", "timings_s", "examples_per_s", "start_step"}


def _python(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], check=False, cwd=cwd, capture_output=True, text=True)


def run_cli(cwd: Path, module: str, args: list[str]) -> None:
    proc = _python(cwd, "-m", module, *args)
    assert proc.returncode == 0, proc.stderr[-3000:]


def run_killed(cwd: Path, module: str, kind: str, at: int, args: list[str]) -> None:
    proc = _python(cwd, "-c", KILLER, module, kind, str(at), *args)
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.stderr[-3000:])


def _without_run_keys(value):
    if isinstance(value, dict):
        return {k: _without_run_keys(v) for k, v in value.items() if k not in RUN_KEYS}
    if isinstance(value, list):
        return [_without_run_keys(v) for v in value]
    return value


def _json(path: Path):
    text = path.read_text()
    if path.suffix == ".jsonl":
        return [_without_run_keys(json.loads(line)) for line in text.splitlines()]
    data = json.loads(text)
    return _without_run_keys(data)


def _tensors_bytes(value):
    """A torch.save'd object with every tensor as (dtype, shape, raw bytes)."""
    import torch

    if isinstance(value, torch.Tensor):
        raw = value.contiguous().view(-1).view(torch.uint8).numpy().tobytes()
        return str(value.dtype), tuple(value.shape), raw
    if isinstance(value, dict):
        return {k: _tensors_bytes(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_tensors_bytes(v) for v in value]
    return value


def assert_same_files(reference: Path, resumed: Path, pt_unread: tuple[str, ...] = ()) -> int:
    """The same files under both folders, with the same bytes; JSON may differ in RUN_KEYS only. A
    .pt file is compared by its content (every tensor's bytes) but for its top-level keys
    ``pt_unread``: torch.save names the zip's inner folder after the (random) temporary file it
    writes, so its bytes differ between any two runs. Returns the number of files compared."""
    import torch

    files = sorted(p.relative_to(reference) for p in reference.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(resumed) for p in resumed.rglob("*") if p.is_file())
    for name in files:
        a, b = reference / name, resumed / name
        if a.read_bytes() == b.read_bytes():
            continue
        if a.suffix == ".pt":

            def load(path):
                payload = torch.load(path, map_location="cpu", weights_only=True)
                return _tensors_bytes({k: v for k, v in payload.items() if k not in pt_unread})

            assert load(a) == load(b), f"{name}: other tensors"
            continue
        assert a.suffix in (".json", ".jsonl"), f"{name} differs"
        assert _json(a) == _json(b), f"{name} differs beyond how the run went"
    return len(files)


# The commands, with paths relative to a workspace (see the fixture `base`).
DATA = [
    "--queries",
    "data/queries.train.parquet",
    "--qrels",
    "data/qrels.train.parquet",
    "--negatives",
    "data/bm25.parquet",
    "--corpus",
    "data/corpus.parquet",
]
TRAIN = [
    "--init",
    "tiny",
    *DATA,
    "--out",
    "models/dpr",
    "--batch-size",
    "4",
    "--hard-negatives",
    "2",
    "--negatives-depth",
    "5",
    "--epochs",
    "3",
    "--max-steps",
    "6",
    "--checkpoint-every",
    "2",
    "--lr",
    "1e-3",
    "--seed",
    "3",
    "--threads",
    "1",
]
ENCODE = [
    "corpus",
    "--model",
    "models/start",
    "--corpus",
    "data/corpus.parquet",
    "--out-dir",
    "embeddings/run",
    "--shard",
    "0",
    "--shards",
    "1",
    "--batch-size",
    "4",
    "--sort-buffer",
    "8",
    "--threads",
    "1",
    "--no-progress",
]
AR2_SETTINGS = {
    **defaults(Ar2Settings),
    "rounds": 1,
    "top_k": 8,
    "negatives": 2,
    "batch_size": 2,
    "ranker_warmup_steps": 2,
    "ranker_steps": 2,
    "retriever_steps": 4,
    "checkpoint_every": 2,
    "retriever_lr": 1e-3,
    "ranker_lr": 1e-3,
    "encode_batch_size": 8,
    "keep_checkpoints": True,
    "ranker": {"base": "tiny", "max_len": 32},
}
AR2_DATA = [
    "--queries",
    "data/queries.train.parquet",
    "--qrels",
    "data/qrels.train.parquet",
    "--corpus",
    "data/corpus.parquet",
]
MINE_START = [
    "--retriever",
    "models/start",
    "--embeddings",
    "embeddings/start",
    *AR2_DATA,
    "--top-k",
    "8",
    "--source",
    "ar2/start",
    "--out",
    "ar2/start/negatives.parquet",
    "--device",
    "cpu",
]
ROUND1 = [
    "--round",
    "1",
    "--round-dir",
    "ar2/round1",
    "--mined",
    "ar2/start/negatives.parquet",
    *AR2_DATA,
    "--retriever",
    "models/start",
    *shlex.split(settings_flag(ar2_train_job({"ar2": AR2_SETTINGS}, "plain", 0))),
    "--device",
    "cpu",
    "--threads",
    "1",
]


@pytest.fixture(scope="module")
def base(tmp_path_factory, make_train_files, tiny_model_dir) -> Path:
    """data/ (tiny training tables), tiny/ (a tiny encoder), models/start (a retriever folder),
    embeddings/start (its gathered corpus embeddings) and ar2/start/negatives.parquet (its mined train
    candidates: what AR2's round 1 trains on)."""
    from pipeline.ar2 import mine
    from pipeline.training import train_dense

    root = tmp_path_factory.mktemp("faults")
    cwd = os.getcwd()
    os.chdir(root)
    try:
        make_train_files(Path("data"))
        tiny_model_dir(Path("."))
        assert (
            train_dense.main(
                [
                    "--init-only",
                    "--base",
                    "tiny",
                    "--query-max-len",
                    "16",
                    "--passage-max-len",
                    "32",
                    "--out",
                    "models/start",
                ]
            )
            == 0
        )
        encode_corpus("models/start", "data/corpus.parquet", "embeddings/start", 2, "--no-progress")
        assert mine.main(MINE_START) == 0
    finally:
        os.chdir(cwd)
    return root


def _workspaces(base: Path, tmp_path: Path) -> tuple[Path, Path]:
    ref, killed = tmp_path / "reference", tmp_path / "killed"
    shutil.copytree(base, ref, copy_function=shutil.copy2)
    shutil.copytree(base, killed, copy_function=shutil.copy2)
    return ref, killed


def test_training_killed_at_step_5_resumes_to_the_same_model(base, tmp_path):
    ref, killed = _workspaces(base, tmp_path)
    run_cli(ref, "pipeline.training.train_dense", TRAIN)
    run_killed(killed, "pipeline.training.train_dense", "train", 5, TRAIN)
    assert (killed / "models/dpr.ckpt/state.pt").exists()
    assert not (killed / "models/dpr/retriever.json").exists()
    run_cli(killed, "pipeline.training.train_dense", TRAIN)
    info = json.loads((killed / "models/dpr/train_info.json").read_text())
    assert info["summary"]["start_step"] == 4  # resumed from the step-4 checkpoint, not from 0
    assert not (killed / "models/dpr.ckpt").exists()
    assert assert_same_files(ref / "models/dpr", killed / "models/dpr") >= 3


def test_encoding_killed_mid_shard_rewrites_the_same_shard(base, tmp_path):
    ref, killed = _workspaces(base, tmp_path)
    run_cli(ref, "pipeline.retrieval.encode", ENCODE)
    run_killed(killed, "pipeline.retrieval.encode", "encode", 2, ENCODE)  # 2 of 5 buffers written
    left = sorted(p.name for p in (killed / "embeddings/run").iterdir())
    assert left and all(name.endswith(".tmp") for name in left), left  # no shard, only temp files
    run_cli(killed, "pipeline.retrieval.encode", ENCODE)
    assert assert_same_files(ref / "embeddings/run", killed / "embeddings/run") == 2  # temps removed


def test_ar2_round_training_killed_in_the_retriever_phase_resumes_to_the_same_round(base, tmp_path):
    """The ar2_train rule's job (pipeline.ar2.train_round) killed at step 7 of 8: the same command
    resumes from the step-6 checkpoint and ends with the uninterrupted run's files."""
    ref, killed = _workspaces(base, tmp_path)
    run_cli(ref, "pipeline.ar2.train_round", ROUND1)
    run_killed(killed, "pipeline.ar2.train_round", "ar2", 7, ROUND1)  # checkpoint at 6 of 8 steps
    assert (killed / "ar2/round1/train.ckpt/state.pt").exists()
    assert not (killed / "ar2/round1/retriever/retriever.json").exists()
    run_cli(killed, "pipeline.ar2.train_round", ROUND1)
    summary = json.loads((killed / "ar2/round1/train.summary.json").read_text())
    assert summary["start_step"] == 6
    assert not (killed / "ar2/round1/train.ckpt").exists()  # gone once the round is complete
    # carry/state.pt hands optimizer and scheduler to the next round; its global RNG state is never
    # read (AR2 seeds every step and loads checkpoints with restore_rng=False).
    assert assert_same_files(ref / "ar2/round1", killed / "ar2/round1", pt_unread=("rng",)) >= 8

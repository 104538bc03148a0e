"""Jobs longer than the cluster's time limit run in segments: a training run stops before its job's
end time with its progress checkpointed (exit status EXIT_CONTINUE, outputs unwritten), the next
attempt resumes, and the result is the uninterrupted run's, bit for bit (tiny models, CPU).

``SIEVE_DEADLINE=0`` (an end time long past) makes every segment stop after one step: the strictest
cut, and one that does not depend on how fast this machine is.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from ar2_toy import TINY_ROUND, round_data, tiny_models

from pipeline.ar2.settings import Ar2Settings
from pipeline.ar2.train import train_round
from pipeline.ar2.train_ranker import train_listwise
from pipeline.core.cli import run_main
from pipeline.core.settings.base import ConfigError
from pipeline.retrieval.model import make_tiny_encoder
from pipeline.training import engine as engine_module
from pipeline.training.engine import EXIT_CONTINUE, JobDeadline, TimeLimitStop
from pipeline.training.train_dense import TrainInputs, train_retriever


def fails(check, *args, **kwargs) -> bool:
    """True when ``check`` raises AssertionError: for showing a check would catch the old behaviour."""
    try:
        check(*args, **kwargs)
    except AssertionError:
        return True
    return False


def _segments(run, monkeypatch, deadline: str = "0") -> tuple[object, list[int]]:
    """Call ``run`` until it finishes, the job's end time set to ``deadline``; return its result and
    the step each stopped attempt reported."""
    monkeypatch.setenv(engine_module.DEADLINE_ENV, deadline)
    stops = []
    for _ in range(100):
        try:
            result = run()
        except TimeLimitStop as stop:
            assert stop.code == EXIT_CONTINUE
            stops.append(stop.step)
            continue
        monkeypatch.delenv(engine_module.DEADLINE_ENV)
        return result, stops
    raise AssertionError("training never finished")


# ---- the deadline itself -------------------------------------------------------------------------


def test_the_deadline_comes_from_the_override_then_slurm_then_nowhere(monkeypatch, tmp_path):
    assert JobDeadline.from_env({}).end is None
    assert JobDeadline.from_env({"SIEVE_DEADLINE": "1800000000"}).end == 1800000000.0
    iso = JobDeadline.from_env({"SIEVE_DEADLINE": "2027-01-02T03:04:05+00:00"})
    assert iso.end == 1798859045.0
    with pytest.raises(ConfigError, match="SIEVE_DEADLINE.*not a time"):
        JobDeadline.from_env({"SIEVE_DEADLINE": "tomorrow"})
    with pytest.raises(ConfigError, match="SIEVE_DEADLINE_MARGIN"):
        JobDeadline.from_env({"SIEVE_DEADLINE_MARGIN": "-5"})

    # Inside a SLURM job: squeue's end time (a stand-in squeue on PATH prints one).
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    squeue = bin_dir / "squeue"
    squeue.write_text('#!/bin/sh\n[ "$3" = 4242 ] && echo 2027-01-02T03:04:05\n')
    squeue.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("TZ", "UTC")
    import time as time_module

    time_module.tzset()
    try:
        slurm = JobDeadline.from_env({"SLURM_JOB_ID": "4242"})
        assert slurm.end == 1798859045.0 and slurm.source == "SLURM job 4242"
        # squeue knows no such job: the job's own SLURM_JOB_END_TIME.
        assert JobDeadline.from_env({"SLURM_JOB_ID": "1", "SLURM_JOB_END_TIME": "1800000000"}).end == 1.8e9
        assert JobDeadline.from_env({"SLURM_JOB_ID": "1"}).end is None
    finally:
        monkeypatch.delenv("TZ")
        time_module.tzset()


def test_the_margin_grows_with_the_slowest_step():
    deadline = JobDeadline(end=10_000.0, source="test", margin=300.0)
    assert not deadline.due(now=9_000.0)  # 1,000 s left, margin 300 s
    assert deadline.due(now=9_750.0)
    deadline.observe(600.0)  # a step + checkpoint of 10 minutes: two of them must fit
    assert deadline.due(now=9_000.0)
    assert not JobDeadline(None, "none").due(now=1e12)


def test_a_stop_exits_with_the_continue_status_and_no_traceback(capsys):
    def main(argv):
        raise TimeLimitStop(3, 6)

    with pytest.raises(SystemExit) as exit_info:
        run_main(main, [])
    assert exit_info.value.code == EXIT_CONTINUE == 75
    assert "Traceback" not in capsys.readouterr().err


# ---- DPR/CCR: the retriever trainer, through the stage that writes the model ---------------------


@pytest.fixture(scope="module")
def dense_setup(tmp_path_factory, make_train_files, tiny_model_dir):
    root = tmp_path_factory.mktemp("segments")
    paths = make_train_files(root / "data")
    model_dir = tiny_model_dir(root)
    inputs = TrainInputs(**paths)
    return str(model_dir), inputs


# train_info.json records the run's summary (where the last attempt started) and examples/s,
# train_log.jsonl examples/s: measurements, not results; every other file must be identical.
_MEASURED = {"train_info.json", "train_log.jsonl"}


def _same_outputs(reference: Path, other: Path) -> None:
    names = sorted(str(p.relative_to(reference)) for p in reference.rglob("*") if p.is_file())
    assert names == sorted(str(p.relative_to(other)) for p in other.rglob("*") if p.is_file())
    for name in names:
        if name not in _MEASURED:
            assert (reference / name).read_bytes() == (other / name).read_bytes(), name
    ref_log = [json.loads(x) for x in (reference / "train_log.jsonl").read_text().splitlines()]
    log = [json.loads(x) for x in (other / "train_log.jsonl").read_text().splitlines()]
    drop = ("examples_per_s",)
    assert [{k: v for k, v in r.items() if k not in drop} for r in log] == [
        {k: v for k, v in r.items() if k not in drop} for r in ref_log
    ]


def test_dense_training_in_segments_writes_the_uninterrupted_model(
    dense_setup, resume_config, tmp_path, monkeypatch
):
    init, inputs = dense_setup
    cfg = resume_config()
    monkeypatch.delenv(engine_module.DEADLINE_ENV, raising=False)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    reference = tmp_path / "reference" / "dpr"
    train_retriever(init, inputs, reference, cfg)

    out = tmp_path / "segmented" / "dpr"
    attempts = []

    def attempt():
        try:
            return train_retriever(init, inputs, out, cfg)
        finally:
            # A stopped attempt leaves the model unwritten (the rule's output missing, so the workflow
            # reruns it) and its checkpoint in place (not an output, so nothing deletes it).
            attempts.append((out.exists(), (out.with_name("dpr.ckpt") / "state.pt").exists()))

    summary, stops = _segments(attempt, monkeypatch)
    assert stops == [1, 2, 3, 4, 5] and summary["start_step"] == 5 and summary["steps"] == 6
    assert attempts[:-1] == [(False, True)] * 5
    _same_outputs(reference, out)
    assert not out.with_name("dpr.ckpt").exists()  # removed once the model is written, as before


def test_a_far_deadline_changes_nothing(dense_setup, resume_config, tmp_path, monkeypatch):
    init, inputs = dense_setup
    monkeypatch.setenv(engine_module.DEADLINE_ENV, "4102444800")  # 2100-01-01
    summary = train_retriever(init, inputs, tmp_path / "m", resume_config())
    assert summary["start_step"] == 0 and summary["steps"] == 6


def test_the_old_engine_ignored_the_deadline(dense_setup, resume_config, tmp_path, monkeypatch):
    """What the segment test checks would have failed before: a run past its end time went on."""
    init, inputs = dense_setup
    monkeypatch.setenv(engine_module.DEADLINE_ENV, "0")

    def stops_before_the_end():
        try:
            train_retriever(init, inputs, tmp_path / "x", resume_config())
        except TimeLimitStop:
            return
        raise AssertionError("the run went past its end time")

    assert not fails(stops_before_the_end)
    monkeypatch.setattr(JobDeadline, "due", lambda self, now=None: False)  # the old behaviour
    assert fails(stops_before_the_end)


# ---- AR2: a round (retriever + ranker) and the listwise ranker -----------------------------------


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return str(make_tiny_encoder(tmp_path_factory.mktemp("tiny"), seed=0))


def _ar2_data():
    words = ["alpha", "beta", "gamma", "delta", "omega", "kappa", "sigma", "theta"]
    passages = {
        f"p{i}": (words[i % 8].title(), f"{words[i % 8]} {words[(i * 3) % 8]} fact {i}") for i in range(24)
    }
    return round_data(passages, {f"q{i}": f"what is {words[i % 8]}" for i in range(6)})


def _state(*models) -> dict[str, torch.Tensor]:
    return {f"{i}.{k}": v.clone() for i, m in enumerate(models) for k, v in m.state_dict().items()}


def _assert_same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


def test_an_ar2_round_in_segments_ends_with_the_uninterrupted_weights(tiny, tmp_path, monkeypatch):
    settings = Ar2Settings(**TINY_ROUND)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)

    def round_in(folder):
        retriever, ranker = tiny_models(tiny)  # a fresh process starts from the same weights
        kw = dict(round_index=1, seed=7, round_dir=folder, previous_ckpt=None, sampling="simans")
        summary = train_round(retriever, ranker, _ar2_data(), settings, **kw)
        return _state(retriever, ranker), summary

    reference, _ = round_in(tmp_path / "reference")
    (state, summary), stops = _segments(lambda: round_in(tmp_path / "segmented"), monkeypatch)
    # Every phase boundary is crossed by a stop: warm-up (1), ranker (2-4), retriever (5-8).
    assert stops == [1, 2, 3, 4, 5, 6, 7] and summary["start_step"] == 7
    _assert_same(reference, state)
    ref_log = (tmp_path / "reference" / "train_log.jsonl").read_text().splitlines()
    log = (tmp_path / "segmented" / "train_log.jsonl").read_text().splitlines()
    strip = lambda lines: [{k: v for k, v in json.loads(x).items() if k != "examples_per_s"} for x in lines]  # noqa: E731
    assert strip(log) == strip(ref_log)
    # The round's final checkpoint (carried into the next round) is the uninterrupted one's.
    ref_ckpt = torch.load(tmp_path / "reference" / "train.ckpt" / "state.pt", weights_only=False)
    ckpt = torch.load(tmp_path / "segmented" / "train.ckpt" / "state.pt", weights_only=False)
    assert ref_ckpt["step"] == ckpt["step"] == 8
    for name in ("opt_retriever", "opt_ranker"):
        for key, value in ref_ckpt["state"][name]["state"].items():
            for field, tensor in value.items():
                assert torch.equal(
                    torch.as_tensor(tensor), torch.as_tensor(ckpt["state"][name]["state"][key][field])
                )


def test_the_listwise_ranker_in_segments_ends_with_the_uninterrupted_weights(tiny, tmp_path, monkeypatch):
    settings = Ar2Settings(**{**TINY_ROUND, "listwise": {"steps": 5, "batch_size": 2, "negatives": 3}})
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)

    def listwise_in(folder):
        _, ranker = tiny_models(tiny)
        folder.mkdir(exist_ok=True)  # the stage's engine.prepare() makes it
        summary = train_listwise(ranker, _ar2_data(), settings, 7, folder, torch.device("cpu"))
        return _state(ranker), summary

    reference, _ = listwise_in(tmp_path / "reference.ckpt")
    (state, summary), stops = _segments(lambda: listwise_in(tmp_path / "segmented.ckpt"), monkeypatch)
    assert stops == [1, 2, 3, 4] and summary["start_step"] == 4
    _assert_same(reference, state)


# ---- the workflow reruns a stopped training job ---------------------------------------------------

_TRAINERS = ("pipeline.training.train_dense", "pipeline.ar2.train_round", "pipeline.ar2.train_ranker")


def test_every_training_rule_gets_the_attempts_its_segments_need(workflow):
    """A stop before the time limit is a failed attempt to Snakemake: without ``retries`` the run
    stops there (the checkpoint kept, the workflow failed). The zero-shot save trains nothing."""
    from pipeline.core.settings.base import TRAINING_ATTEMPTS

    training = [
        rule
        for rule in workflow.rules
        if rule.shellcmd and any(t in rule.shellcmd for t in _TRAINERS) and "--init-only" not in rule.shellcmd
    ]
    assert {r.name for r in training} >= {"train_dpr", "train_ccr", "ar2_train", "ar2_train_ranker"}
    assert {r.name: r._restart_times for r in training} == {r.name: TRAINING_ATTEMPTS - 1 for r in training}

"""AR2 rounds resume exactly: a crash mid-round, rerun, ends with the weights of an uninterrupted run.

Tiny random BERTs (MiniLM tokenizer) keep this to seconds on CPU.
"""

from __future__ import annotations

import json

import pytest
import torch
from ar2_toy import TINY_ROUND, round_data, tiny_models

from pipeline.ar2.settings import Ar2Settings
from pipeline.ar2.train import RoundData, train_round
from pipeline.retrieval.model import Retriever, make_tiny_encoder
from pipeline.retrieval.ranker import Ranker


class Crash(RuntimeError):
    pass


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return str(make_tiny_encoder(tmp_path_factory.mktemp("tiny"), seed=0))


def _data() -> RoundData:
    words = ["alpha", "beta", "gamma", "delta", "omega", "kappa", "sigma", "theta"]
    passages = {
        f"p{i}": (words[i % 8].title(), f"{words[i % 8]} {words[(i * 3) % 8]} fact {i}") for i in range(24)
    }
    return round_data(passages, {f"q{i}": f"what is {words[i % 8]}" for i in range(6)})


def _models(tiny, start=None):
    if start is None:
        return tiny_models(tiny)
    return Retriever.load(start / "retriever"), Ranker.load(start / "ranker")


def _state(retriever, ranker) -> dict[str, torch.Tensor]:
    out = {f"g.{k}": v.clone() for k, v in retriever.state_dict().items()}
    out.update({f"d.{k}": v.clone() for k, v in ranker.state_dict().items()})
    return out


def _assert_same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


def _run(tiny, round_dir, round_index, prev_ckpt=None, start=None, crash_at=None, **overrides):
    settings = Ar2Settings(**{**TINY_ROUND, **overrides})
    retriever, ranker = _models(tiny, start)

    def hook(step):
        if crash_at is not None and step == crash_at:
            raise Crash(f"simulated crash after step {step}")

    summary = train_round(
        retriever,
        ranker,
        _data(),
        settings,
        round_index=round_index,
        seed=7,
        round_dir=round_dir,
        previous_ckpt=prev_ckpt,
        sampling="simans",
        on_step_end=hook,
    )
    return retriever, ranker, summary


@pytest.fixture(scope="module")
def reference(tiny, tmp_path_factory):
    """Uninterrupted rounds 1 and 2 (round 1's models saved for round 2 to start from)."""
    root = tmp_path_factory.mktemp("reference")
    g1, d1, _ = _run(tiny, root / "round1", 1)
    g1.save(root / "round1" / "retriever")
    d1.save(root / "round1" / "ranker")
    state1 = _state(g1, d1)
    g2, d2, _ = _run(
        tiny, root / "round2", 2, prev_ckpt=root / "round1" / "train.ckpt", start=root / "round1"
    )
    return {"root": root, "round1": state1, "round2": _state(g2, d2)}


def test_crash_mid_round_resumes_to_identical_weights(tiny, reference, tmp_path):
    with pytest.raises(Crash):
        _run(tiny, tmp_path / "crashed", 1, crash_at=5)  # checkpoint at step 4, crash after 5
    g, d, summary = _run(tiny, tmp_path / "crashed", 1)
    assert summary["start_step"] == 4 and summary["steps"] == 8
    _assert_same(reference["round1"], _state(g, d))
    # The log was cut back to the checkpoint and replayed: one line per step, in order.
    lines = [json.loads(x) for x in (tmp_path / "crashed" / "train_log.jsonl").read_text().splitlines()]
    ref_log = reference["root"] / "round1" / "train_log.jsonl"
    ref = [json.loads(x) for x in ref_log.read_text().splitlines()]
    assert [x["step"] for x in lines] == list(range(1, 9))
    assert [x["phase"] for x in lines] == ["ranker_warmup"] + ["ranker"] * 3 + ["retriever"] * 4
    assert [x["loss"] for x in lines] == [x["loss"] for x in ref]


def test_crash_in_the_ranker_phase_resumes_too(tiny, reference, tmp_path):
    with pytest.raises(Crash):
        _run(tiny, tmp_path / "c", 1, crash_at=3)  # ranker phase; last checkpoint at step 2
    g, d, summary = _run(tiny, tmp_path / "c", 1)
    assert summary["start_step"] == 2
    _assert_same(reference["round1"], _state(g, d))


def test_optimizer_and_scheduler_state_carry_to_the_next_round(tiny, reference, tmp_path):
    root = reference["root"]
    state = torch.load(root / "round1" / "train.ckpt" / "state.pt", weights_only=False)
    assert state["state"]["sched_retriever"]["last_epoch"] == 4
    assert state["state"]["sched_ranker"]["last_epoch"] == 3  # the warm-up step has its own
    assert state["state"]["sched_ranker_warmup"]["last_epoch"] == 1
    state2 = torch.load(root / "round2" / "train.ckpt" / "state.pt", weights_only=False)
    assert state2["state"]["sched_retriever"]["last_epoch"] == 8
    assert state2["state"]["sched_ranker"]["last_epoch"] == 6
    assert "sched_ranker_warmup" not in state2["state"]  # round 2 has no warm-up
    # Adam's step counters continue too (not reset to the round's own steps).
    steps = [s["step"] for s in state2["state"]["opt_retriever"]["state"].values()]
    assert all(float(s) == 8 for s in steps)
    # The learning rate of round 2 continues the decay: the first retriever step of round 2 uses
    # the lr after 4 of 8 steps (warm-up int(0.1*8)=0): 1e-3 * (8-4)/8.
    log2 = [json.loads(x) for x in (root / "round2" / "train_log.jsonl").read_text().splitlines()]
    first_ret = next(x for x in log2 if x["phase"] == "retriever")
    assert first_ret["lr"] == pytest.approx(1e-3 * 4 / 8)
    # The warm-up ran at its own lr: 5e-4 at its first (and only) step (no warm-up share of 1 step).
    log1 = [json.loads(x) for x in (root / "round1" / "train_log.jsonl").read_text().splitlines()]
    assert log1[0]["phase"] == "ranker_warmup" and log1[0]["lr"] == pytest.approx(5e-4)

    # A crash in round 2 resumes to the same weights as well.
    with pytest.raises(Crash):
        _run(
            tiny,
            tmp_path / "round2b",
            2,
            prev_ckpt=root / "round1" / "train.ckpt",
            start=root / "round1",
            crash_at=5,
        )
    g3, d3, _ = _run(
        tiny, tmp_path / "round2b", 2, prev_ckpt=root / "round1" / "train.ckpt", start=root / "round1"
    )
    _assert_same(reference["round2"], _state(g3, d3))


def test_missing_previous_checkpoint_is_an_error(tiny, tmp_path):
    with pytest.raises(FileNotFoundError, match="previous round"):
        _run(tiny, tmp_path / "r2", 2, prev_ckpt=tmp_path / "nowhere")

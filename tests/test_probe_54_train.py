"""The training family as one engine and one loss registry: no trainer runs its own backward step,
Engine.fit computes what a hand-written accumulation loop computes, and a loss that registers itself
is what the DPR/CCR loop trains with, without an edit to the loop."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import torch

from pipeline.training import engine as engine_module
from pipeline.training import losses

PACKAGE = Path(engine_module.__file__).resolve().parents[1]


def test_no_trainer_calls_backward_outside_the_engine():
    calls = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == Path(engine_module.__file__).resolve():
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "backward":
                calls.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert calls == []


class _Linear(engine_module.StepTrainer):
    """y = w·x with a squared error; step t's micro-batches are fixed rows of a seeded matrix."""

    def __init__(self, model, optimizer, scheduler, data, micro: int) -> None:
        self.model, self.optimizer, self.scheduler, self.advice = model, optimizer, scheduler, "lower lr"
        self.data, self.micro = data, micro

    def batches(self, step: int) -> engine_module.StepPlan:
        rows = [self.data[(step * self.micro + i) % len(self.data)] for i in range(self.micro)]
        return engine_module.StepPlan(rows, len(rows))

    def loss(self, batch):
        return (self.model(batch[:-1]) - batch[-1]).pow(2).sum(), {}


def _setup():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    optimizer = engine_module.adamw(model, 0.1, 0.0)
    return model, optimizer, engine_module.linear_schedule(optimizer, 4, 0.25)


def test_fit_accumulates_micro_batches_as_a_hand_written_loop(tmp_path):
    data = torch.randn(8, 4, generator=torch.Generator().manual_seed(1))
    model, optimizer, scheduler = _setup()
    engine = engine_module.Engine(device="cpu", precision="fp32", max_grad_norm=1.0)
    engine.fit(_Linear(model, optimizer, scheduler, data, micro=2), 0, 4, "toy")

    reference, optimizer, scheduler = _setup()
    for step in range(4):
        for i in range(2):
            row = data[(step * 2 + i) % len(data)]
            ((reference(row[:-1]) - row[-1]).pow(2).sum() / 2).backward()
        torch.nn.utils.clip_grad_norm_(reference.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
    for mine, theirs in zip(model.parameters(), reference.parameters()):
        assert torch.equal(mine, theirs)


def test_a_registered_loss_is_what_the_loop_trains_with(
    monkeypatch, make_train_files, tiny_model_dir, tiny_retriever, resume_config, tmp_path
):
    from pipeline.training.data import TrainData, TrainInputs
    from pipeline.training.loop import train

    calls = []

    @dataclass(frozen=True)
    class Toy:
        name: ClassVar[str] = "toy"

        @classmethod
        def claims(cls, settings, guide) -> bool:
            return settings.beta == 0

        @classmethod
        def from_settings(cls, settings, guide) -> "Toy":
            return cls()

        def __call__(self, scores, positives, group_size, *, in_batch):
            calls.append(tuple(scores.shape))
            return losses.NCELoss()(scores, positives, group_size, in_batch=in_batch)

        def describe(self) -> dict:
            return {"loss": self.name}

    monkeypatch.setattr(losses, "LOSSES", {})
    losses.register_loss(Toy)
    paths = make_train_files(tmp_path / "data")
    cfg = resume_config(beta=0.0, max_steps=2)
    data = TrainData(TrainInputs(**paths), depth=cfg.negatives_depth, seed=3)
    summary = train(tiny_retriever(tiny_model_dir(tmp_path)), data, cfg, checkpoint_dir=tmp_path / "ckpt")
    assert summary["loss"] == {"loss": "toy"} and len(calls) == 2

"""A run killed after step 4 and resumed from its step-3 checkpoint ends with the exact weights of an
uninterrupted run (tiny model, CPU)."""

import json

import pytest
import torch

from pipeline.training.data import TrainData, TrainInputs
from pipeline.training.engine import LOG_FILE
from pipeline.training.loop import train


@pytest.fixture(scope="module")
def setup(tmp_path_factory, make_train_files, tiny_model_dir):
    root = tmp_path_factory.mktemp("resume")
    paths = make_train_files(root / "data")
    model_dir = tiny_model_dir(root)
    data = TrainData(TrainInputs(**paths), depth=5, seed=3)
    return root, model_dir, data


def _weights(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize(
    "grad_accum,cpu_bf16", [(1, "0"), (2, "0"), (1, "1")], ids=["fp32", "fp32-accum2", "bf16"]
)
def test_killed_run_resumes_to_identical_weights(
    resume_config, setup, tmp_path, grad_accum, cpu_bf16, tiny_retriever, train_until_crash, monkeypatch
):
    monkeypatch.setenv("SIEVE_CPU_BF16", cpu_bf16)  # "1": bf16 autocast (emulated on a CPU without it)
    _, model_dir, data = setup
    cfg = resume_config(grad_accum=grad_accum, batch_size=4 if grad_accum == 1 else 2)

    reference = tiny_retriever(model_dir)
    summary = train(reference, data, cfg, checkpoint_dir=tmp_path / "ref.ckpt")
    assert summary["steps"] == 6

    crashed = tiny_retriever(model_dir)
    train_until_crash(crashed, data, cfg, tmp_path / "run.ckpt")
    assert (tmp_path / "run.ckpt" / "state.pt").exists()

    resumed = tiny_retriever(model_dir)  # a fresh process would start from the base weights too
    summary = train(resumed, data, cfg, checkpoint_dir=tmp_path / "run.ckpt")
    assert summary["start_step"] == 3

    ref_w, res_w = _weights(reference), _weights(resumed)
    assert ref_w.keys() == res_w.keys()
    for name in ref_w:
        assert torch.equal(ref_w[name], res_w[name]), name
    # Training moved the weights (a resume test on an untouched model would prove nothing).
    start = _weights(tiny_retriever(model_dir))
    assert any(not torch.equal(start[n], ref_w[n]) for n in ref_w)

    steps = [json.loads(line)["step"] for line in (tmp_path / "run.ckpt" / LOG_FILE).open()]
    assert steps == [1, 2, 3, 4, 5, 6]
    ref_log = [json.loads(line) for line in (tmp_path / "ref.ckpt" / LOG_FILE).open()]
    res_log = [json.loads(line) for line in (tmp_path / "run.ckpt" / LOG_FILE).open()]
    assert [r["loss"] for r in ref_log] == [r["loss"] for r in res_log]
    assert {"step", "loss", "nce", "ccr", "lr", "examples_per_s"} <= set(ref_log[0])


def test_checkpoint_for_other_settings_is_not_resumed(
    resume_config, setup, tmp_path, tiny_retriever, train_until_crash
):
    _, model_dir, data = setup

    train_until_crash(tiny_retriever(model_dir), data, resume_config(), tmp_path / "c")
    summary = train(tiny_retriever(model_dir), data, resume_config(lr=5e-4), checkpoint_dir=tmp_path / "c")
    assert summary["start_step"] == 0


def test_checkpoint_of_another_compute_precision_is_not_resumed(
    resume_config, setup, tmp_path, tiny_retriever, train_until_crash, monkeypatch
):
    """Same config, but the crashed run computed in bf16 and this host computes fp32: start afresh."""
    _, model_dir, data = setup
    monkeypatch.setenv("SIEVE_CPU_BF16", "1")
    train_until_crash(tiny_retriever(model_dir), data, resume_config(), tmp_path / "c")
    monkeypatch.setenv("SIEVE_CPU_BF16", "0")
    summary = train(tiny_retriever(model_dir), data, resume_config(), checkpoint_dir=tmp_path / "c")
    assert summary["start_step"] == 0 and summary["compute_precision"] == "fp32"
    monkeypatch.setenv("SIEVE_CPU_BF16", "1")
    assert (
        train(
            tiny_retriever(model_dir),
            data,
            resume_config(),
            checkpoint_dir=tmp_path / "d",
        )["compute_precision"]
        == "bf16"
    )


def test_learning_rate_schedule_warms_up_then_decays(resume_config, setup, tmp_path, tiny_retriever):
    _, model_dir, data = setup
    train(
        tiny_retriever(model_dir),
        data,
        resume_config(max_steps=5, warmup_ratio=0.4, checkpoint_every=0),
        checkpoint_dir=tmp_path / "s",
    )
    lrs = [json.loads(line)["lr"] for line in (tmp_path / "s" / LOG_FILE).open()]
    # 2 warm-up steps of 5: lr = 1e-3 * (0, 1/2), then linear decay (1, 2/3, 1/3) * 1e-3.
    assert lrs == pytest.approx([0.0, 5e-4, 1e-3, 2e-3 / 3, 1e-3 / 3])


def test_the_loop_trains_with_the_loss_object_it_is_given(resume_config, setup, tmp_path, tiny_retriever):
    """A caller's loss replaces the config's (bench/ masks known false negatives this way): it is
    called once per micro-batch, its value is what the log records, and it is part of the run's
    record, so its checkpoint is never resumed under another loss."""
    from pipeline.training.losses import CCRLoss

    _, model_dir, data = setup

    class Halved:
        calls = 0

        def __call__(self, scores, positives, group_size, *, in_batch):
            Halved.calls += 1
            loss, parts = CCRLoss(beta=0.25)(scores, positives, group_size, in_batch=in_batch)
            return loss / 2, parts

        def describe(self):
            return {"loss": "halved_ccr"}

    cfg = resume_config(max_steps=3, checkpoint_every=0, grad_accum=2)
    summary = train(tiny_retriever(model_dir), data, cfg, checkpoint_dir=tmp_path / "h", loss=Halved())
    assert Halved.calls == 3 * 2
    assert summary["loss"] == {"loss": "halved_ccr"}
    logged = [json.loads(line) for line in (tmp_path / "h" / LOG_FILE).open()]
    default = train(tiny_retriever(model_dir), data, cfg, checkpoint_dir=tmp_path / "d")
    assert default["loss"] == {"loss": "ccr", "beta": 0.25, "scale": "paper"}
    reference = [json.loads(line) for line in (tmp_path / "d" / LOG_FILE).open()]
    # Same data, seed and start: the first step's loss is exactly half of the config's CCR loss.
    assert logged[0]["loss"] == pytest.approx(reference[0]["loss"] / 2, rel=1e-6)
    assert json.loads((tmp_path / "h" / "fingerprint.json").read_text())["loss"] == {"loss": "halved_ccr"}


def test_training_logs_a_plain_progress_line_every_tenth_of_the_run(
    resume_config, setup, tmp_path, tiny_retriever, caplog
):
    """Under Snakemake or SLURM (no terminal) the rich bar draws nothing until the end: the log gets a
    plain line (step, loss, lr, examples/s, ETA) every tenth of the steps, the last one included."""
    import logging

    _, model_dir, data = setup
    with caplog.at_level(logging.INFO, logger="sieve.trainer"):
        train(
            tiny_retriever(model_dir),
            data,
            resume_config(max_steps=5, checkpoint_every=0),
            checkpoint_dir=tmp_path / "p",
        )
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("step ")]
    assert [line.split()[1] for line in lines] == ["1/5", "2/5", "3/5", "4/5", "5/5"]
    assert "(100%)" in lines[-1] and "ex/s" in lines[-1] and "ETA 0m00s" in lines[-1]


def test_progress_lines_come_every_n_steps_or_after_a_pause():
    from pipeline.training.engine import ProgressLines

    lines = ProgressLines(start=10, total=110)  # a resumed run: a tenth of the 100 steps left
    assert [step for step in range(11, 111) if lines(step, 1.0, 1e-5, 3.0)] == list(range(20, 111, 10))
    slow = ProgressLines(start=0, total=1000, seconds=0.0)  # every step once a pause has passed
    assert slow(1, 1.0, 1e-5, 3.0) is not None


def test_adamw_is_fused_and_keeps_decay_off_biases_and_layernorm():
    """One fused pass over the parameters (bench/train_throughput.py: the per-tensor loop cost 4-6% of a
    step), with the BERT recipe's groups; on the fused path it computes AdamW as the loop does."""
    from pipeline.training.engine import adamw

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
    opt = adamw(model, lr=1e-2, weight_decay=0.1)
    assert all(group["fused"] for group in opt.param_groups)
    assert [len(g["params"]) for g in opt.param_groups] == [1, 3]  # Linear weight | bias, LayerNorm w, b
    assert [g["weight_decay"] for g in opt.param_groups] == [0.1, 0.0]
    twin = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
    twin.load_state_dict(model.state_dict())
    groups = [
        {"params": [twin[0].weight], "weight_decay": 0.1},
        {"params": [twin[0].bias, *twin[1].parameters()], "weight_decay": 0.0},
    ]
    loop = torch.optim.AdamW(groups, lr=1e-2, foreach=False)
    for _ in range(3):
        for net, optimizer in ((model, opt), (twin, loop)):
            optimizer.zero_grad()
            net(torch.ones(2, 4)).pow(2).sum().backward()
            optimizer.step()
    for a, b in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)

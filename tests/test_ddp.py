"""Two DDP ranks (gloo, CPU, spawned) reproduce the single-process loss and gradients.

The hard part is label alignment with k > 1 hard negatives: after gathering passages from all ranks,
local query i on rank r has its positive at global column (r·Q_local + i)·(k+1).
"""

import os
import socket

import pytest
import torch
import torch.multiprocessing as mp

from pipeline.core.distributed import all_gather_with_grad, all_reduce_mean, init_from_env, shutdown
from pipeline.training.losses import contrastive_loss, positive_columns, similarity_scores

WORLD = 2
Q, K, DIM = 6, 3, 8  # 6 global queries, 3 hard negatives each -> 24 passages


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _env(rank: int, port: int) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE=str(WORLD),
        LOCAL_RANK=str(rank),
    )


def _embeddings():
    gen = torch.Generator().manual_seed(0)
    q = torch.nn.functional.normalize(torch.randn(Q, DIM, generator=gen, dtype=torch.float64), dim=1)
    p = torch.nn.functional.normalize(
        torch.randn(Q * (K + 1), DIM, generator=gen, dtype=torch.float64), dim=1
    )
    return q, p


def _loss(q, p, n_first, in_batch, beta):
    scores = similarity_scores(q, p, "cosine", 0.1)
    pos = positive_columns(q.shape[0], K + 1, n_first)
    return contrastive_loss(scores, pos, K + 1, in_batch=in_batch, beta=beta)[0]


def _loss_worker(rank: int, port: int, out: str, in_batch: bool, beta: float) -> None:
    _env(rank, port)
    info = init_from_env(prefer_cuda=False)
    try:
        q_all, p_all = _embeddings()
        per_q, per_p = Q // WORLD, Q * (K + 1) // WORLD
        q = q_all[rank * per_q : (rank + 1) * per_q].clone().requires_grad_(True)
        p = p_all[rank * per_p : (rank + 1) * per_p].clone().requires_grad_(True)
        if in_batch:
            loss = _loss(q, all_gather_with_grad(p), rank * per_q, True, beta)
        else:
            loss = _loss(q, p, 0, False, beta)
        loss.backward()
        # DDP averages gradients over ranks; the global loss is the mean of the ranks' mean losses.
        torch.save(
            {"loss": all_reduce_mean(loss.detach()), "q_grad": q.grad / WORLD, "p_grad": p.grad / WORLD},
            f"{out}/rank{info.rank}.pt",
        )
    finally:
        shutdown()


@pytest.mark.parametrize("in_batch,beta", [(True, 0.0), (True, 0.5), (False, 0.5)])
def test_two_ranks_match_single_process(tmp_path, in_batch, beta):
    q, p = _embeddings()
    q.requires_grad_(True)
    p.requires_grad_(True)
    loss = _loss(q, p, 0, in_batch, beta)
    loss.backward()

    mp.spawn(_loss_worker, args=(_free_port(), str(tmp_path), in_batch, beta), nprocs=WORLD, join=True)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(WORLD)]
    for r in ranks:
        assert r["loss"].item() == pytest.approx(loss.item(), abs=1e-12)
    assert torch.allclose(torch.cat([r["q_grad"] for r in ranks]), q.grad, atol=1e-12)
    assert torch.allclose(torch.cat([r["p_grad"] for r in ranks]), p.grad, atol=1e-12)


def test_wrong_label_offset_would_be_caught():
    # Guard for the test itself: ignoring the rank offset gives another loss on rank 1's queries.
    q, p = _embeddings()
    right = _loss(q[Q // 2 :], p, Q // 2, True, 0.0)
    wrong = _loss(q[Q // 2 :], p, 0, True, 0.0)
    assert abs(right.item() - wrong.item()) > 1e-3


def _train_data(paths: dict):
    from pipeline.training.data import TrainData, TrainInputs

    return TrainData(TrainInputs(**paths), depth=5, seed=0)


def _train_worker(rank: int, port: int, root: str, paths: dict, cfg, tiny_retriever) -> None:
    from pathlib import Path

    from pipeline.training.loop import train

    _env(rank, port)
    torch.set_num_threads(1)
    info = init_from_env(prefer_cuda=False)
    try:
        root = Path(root)
        model = tiny_retriever(root / "tiny", dropout=False)
        train(model, _train_data(paths), cfg, checkpoint_dir=root / "ddp.ckpt", dist_info=info)
        if info.is_main:
            torch.save(model.state_dict(), root / "ddp_weights.pt")
    finally:
        shutdown()


def test_ddp_training_matches_single_process(
    tmp_path, make_train_files, tiny_model_dir, tiny_retriever, resume_config
):
    from pipeline.training.loop import train

    paths = make_train_files(tmp_path / "data")
    tiny_model_dir(tmp_path)
    # The resume tests' optimiser and batches for two steps of one epoch, no warmup or weight decay;
    # fp32: the check is the math (labels, gathers), bf16 rounds differently per batch shape.
    no_resume = dict(epochs=1, max_steps=2, checkpoint_every=0, warmup_ratio=0.0, weight_decay=0.0)
    cfg = resume_config(**no_resume, seed=0, beta=0.3, precision="fp32")
    single = tiny_retriever(tmp_path / "tiny", dropout=False)
    train(single, _train_data(paths), cfg, checkpoint_dir=tmp_path / "single.ckpt")

    # The worker gets the conftest helper as an argument: a spawned process has no fixtures.
    args = (_free_port(), str(tmp_path), paths, cfg, tiny_retriever)
    mp.spawn(_train_worker, args=args, nprocs=WORLD, join=True)
    ddp = torch.load(tmp_path / "ddp_weights.pt")
    start = tiny_retriever(tmp_path / "tiny").state_dict()
    moved = 0
    for name, value in single.state_dict().items():
        assert torch.allclose(ddp[name], value, atol=1e-6), name
        moved += not torch.equal(start[name], value)
    assert moved > 0

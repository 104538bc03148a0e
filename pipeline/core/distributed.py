"""DDP helpers: set up from torchrun's environment, and gather embeddings WITH their gradient.

Under ``torchrun --nproc_per_node=N`` each process sees RANK, WORLD_SIZE and LOCAL_RANK. Without them
everything here degrades to a single process (world size 1) so the same training code runs anywhere.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

log = logging.getLogger("sieve.distributed")


@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def init_from_env(prefer_cuda: bool = True) -> DistInfo:
    """Join the process group torchrun describes (nccl on GPUs, gloo on CPU); else one process."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = prefer_cuda and torch.cuda.is_available()
    if use_cuda:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    if world_size > 1 and not dist.is_initialized():
        backend = "nccl" if use_cuda else "gloo"
        dist.init_process_group(backend=backend, rank=rank, world_size=world_size)
        log.info(
            "DDP: rank %d/%d (local %d) on %s, backend %s", rank, world_size, local_rank, device, backend
        )
    return DistInfo(rank=rank, world_size=world_size, local_rank=local_rank, device=device)


def shutdown() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


class _GatherWithGrad(torch.autograd.Function):
    """all_gather whose backward routes each rank's share of the gradient back to it.

    Every rank's loss depends on every rank's embeddings (in-batch negatives), so the gradient of a
    local slice is the SUM over ranks of d(loss_r)/d(slice): all_reduce(sum), then take our slice.
    DDP then averages parameter gradients over ranks, which turns the sum of per-rank mean losses into
    the gradient of the global mean loss: exactly the single-process gradient.
    """

    @staticmethod
    def forward(ctx, tensor: torch.Tensor) -> torch.Tensor:
        world = dist.get_world_size()
        ctx.rank = dist.get_rank()
        ctx.rows = tensor.shape[0]
        parts = [torch.empty_like(tensor) for _ in range(world)]
        dist.all_gather(parts, tensor.contiguous())
        return torch.cat(parts, dim=0)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, op=dist.ReduceOp.SUM)
        start = ctx.rank * ctx.rows
        return grad[start : start + ctx.rows]


def all_gather_with_grad(tensor: torch.Tensor) -> torch.Tensor:
    """Concatenate every rank's ``tensor`` (same shape on all ranks) in rank order, differentiably."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return tensor
    return _GatherWithGrad.apply(tensor)


def all_gather(tensor: torch.Tensor) -> torch.Tensor:
    """Concatenate every rank's ``tensor`` (same shape on all ranks) in rank order, without gradient
    (ids, a frozen guide's embeddings)."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return tensor
    parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, tensor.contiguous())
    return torch.cat(parts)


def all_reduce_mean(value: torch.Tensor) -> torch.Tensor:
    """Mean of a (detached) tensor over ranks, for logging."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return value
    value = value.detach().clone()
    dist.all_reduce(value, op=dist.ReduceOp.SUM)
    return value / dist.get_world_size()


def barrier() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.barrier()

"""Train only the top layers of a BERT-style encoder over cached lower-layer states (``train_layers``).

With ``train_layers = N`` the token embeddings and the lower L - N transformer layers are frozen.
Their output for a text never changes during training, so it is computed once per distinct text (no
gradient, no dropout) and kept; every step then runs and back-propagates through the top N layers
only. The cache is filled before the first step, in a fixed order (by length, then text), so a text's
states do not depend on the batch it comes in and a resumed run ends with the exact weights of an
uninterrupted one. A step costs roughly N/L of a full step once the cache is warm, and about (L - N)/L·1/3 + N/L of
one in the first epoch (the lower forward without its backward). Full fine-tuning (``None``) stays the
paper-scale default: this is a CPU budget, and a different model (the lower layers keep their
pre-trained weights).

Memory: one float32 [tokens x hidden] matrix per distinct training text, held for the whole run
(synthkb: ~0.5 GB at MiniLM's 384 dimensions). ``max_cache_gb`` stops a run that would exceed it.
"""

from __future__ import annotations

import logging
from typing import Callable, Sequence

import torch

from pipeline.core.config import ConfigError

log = logging.getLogger("sieve.frozen_layers")


def encoder_layers(model: torch.nn.Module) -> torch.nn.ModuleList:
    """The transformer layers of a BERT-style HF model (``model.encoder.layer``)."""
    layers = getattr(getattr(model, "encoder", None), "layer", None)
    if not isinstance(layers, torch.nn.ModuleList) or not hasattr(model, "embeddings"):
        raise ConfigError(
            f"train_layers needs a BERT-style encoder (embeddings + encoder.layer); "
            f"{type(model).__name__} is not one: use train_layers: null"
        )
    return layers


def freeze_lower(model: torch.nn.Module, train_layers: int) -> int:
    """Freeze the embeddings and all but the top ``train_layers`` layers; return how many are frozen."""
    layers = encoder_layers(model)
    if not 1 <= train_layers <= len(layers):
        raise ConfigError(
            f"train_layers must be between 1 and the encoder's {len(layers)} layers, got {train_layers}"
        )
    frozen = len(layers) - train_layers
    for module in [model.embeddings, *layers[:frozen]]:
        for param in module.parameters():
            param.requires_grad_(False)
    return frozen


def _layer_mask(model: torch.nn.Module, hidden: torch.Tensor, attention_mask: torch.Tensor):
    # The mask in the form the layers expect (eager, sdpa, ...), built as the model's own forward does.
    mask, _ = model._create_attention_masks(
        attention_mask=attention_mask,
        encoder_attention_mask=None,
        embedding_output=hidden,
        encoder_hidden_states=None,
        past_key_values=None,
    )
    return mask


def run_layers(
    model: torch.nn.Module,
    hidden: torch.Tensor,
    attention_mask: torch.Tensor,
    start: int,
    stop: int | None = None,
) -> torch.Tensor:
    """Layers ``start:stop`` of the encoder on ``hidden`` (the output of layer ``start`` - 1)."""
    mask = _layer_mask(model, hidden, attention_mask)
    for layer in encoder_layers(model)[start:stop]:
        hidden = layer(hidden, mask)
    return hidden


@torch.no_grad()
def lower_states(model: torch.nn.Module, batch: dict[str, torch.Tensor], frozen: int) -> torch.Tensor:
    """The output of the frozen part (embeddings + ``frozen`` layers) for a tokenised batch."""
    was_training = model.training
    model.eval()  # no dropout: the cached state must not depend on when it was computed
    try:
        hidden = model.embeddings(input_ids=batch["input_ids"], token_type_ids=batch.get("token_type_ids"))
        return run_layers(model, hidden, batch["attention_mask"], 0, frozen)
    finally:
        model.train(was_training)


class LowerStateCache:
    """Lower-layer states per distinct text, computed on first use, as [tokens x hidden] float32."""

    def __init__(
        self,
        model: torch.nn.Module,
        frozen: int,
        tokenize: Callable[[list], dict[str, torch.Tensor]],
        max_cache_gb: float = 8.0,
    ):
        self.model, self.frozen, self.tokenize = model, frozen, tokenize
        self.max_bytes = max_cache_gb * 2**30
        self.states: dict[object, torch.Tensor] = {}
        self.bytes = 0

    def fill(
        self,
        keys: Sequence[object],
        items: Sequence[object],
        device: torch.device,
        batch_size: int = 64,
        on_batch: Callable[[int], None] | None = None,
    ) -> None:
        """Compute the states of every ``items[i]`` (named ``keys[i]``) not cached yet, in a fixed order."""
        todo = {k: item for k, item in zip(keys, items) if k not in self.states}
        order = sorted(todo, key=lambda k: (len(str(todo[k])), str(k)))
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            self._fill(chunk, [todo[k] for k in chunk], device)
            if on_batch is not None:
                on_batch(len(chunk))

    def batch(
        self, keys: Sequence[object], items: Sequence[object], device: torch.device
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(hidden [B, T, H] padded with zeros, attention mask [B, T]) for ``items`` named by ``keys``;
        texts not cached yet are computed first (one fixed-order fill)."""
        if any(k not in self.states for k in keys):
            self.fill(keys, items, device)
        rows = [self.states[k] for k in keys]
        width = max(r.shape[0] for r in rows)
        hidden = torch.zeros(len(rows), width, rows[0].shape[1], device=device)
        mask = torch.zeros(len(rows), width, dtype=torch.long, device=device)
        for i, r in enumerate(rows):
            hidden[i, : r.shape[0]] = r.to(device)
            mask[i, : r.shape[0]] = 1
        return hidden, mask

    def _fill(self, keys: list, items: list, device: torch.device) -> None:
        batch = {k: v.to(device) for k, v in self.tokenize(items).items()}
        states = lower_states(self.model, batch, self.frozen)
        lengths = batch["attention_mask"].sum(dim=1).tolist()
        for key, state, n in zip(keys, states, lengths):
            kept = state[: int(n)].float().cpu().clone()  # padding dropped: rows are re-padded per batch
            self.bytes += kept.numel() * 4
            self.states[key] = kept
        if self.bytes > self.max_bytes:
            raise ConfigError(
                f"train_layers: the lower-layer cache holds {self.bytes / 2**30:.1f} GB, over "
                f"its {self.max_bytes / 2**30:.1f} GB cap; train fewer distinct texts or "
                f"use train_layers: null (full fine-tuning)"
            )

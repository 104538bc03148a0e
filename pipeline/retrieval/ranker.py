"""The cross-encoder ranker D of AR2: base encoder, [CLS] vector -> Linear -> one relevance logit.

Input pair: the query as the first segment, the passage as ``title [SEP] text`` in the second (the
retriever encodes passages as the same (title, text) pair). Trained with a listwise cross-entropy
over the positive and k negatives (reference.md section 2, ``listwise_loss``).

Folder layout (``Ranker.save``)::

    encoder/          HF model + tokenizer
    head.pt           state dict of the Linear(hidden, 1) head
    ranker.json       settings; written last, so a folder with it is complete

Public API used by other stages (the sieve's optional cross-encoder filter, AR2)::

    ranker = Ranker.from_pretrained("minilm", RankerSettings(max_len=160), seed=0)
    ranker = Ranker.load(folder); ranker.save(folder)
    batch = ranker.tokenize(queries, titles, texts); logits = ranker(batch)      # torch [n]
    scores = ranker.score(queries, titles, texts, batch_size=64)                # numpy float32 [n]
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from pipeline.core.config import resolve_model_path
from pipeline.core.storage import atomic_path
from pipeline.retrieval.hf_folders import (
    SettingError,
    load_encoder,
    read_settings,
    save_encoder,
    settings_from_dict,
    verify_checksums,
    write_checksums,
    write_settings,
)

log = logging.getLogger("sieve.ranker")

SETTINGS_FILE = "ranker.json"
HEAD_FILE = "head.pt"
_MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


@dataclass
class RankerSettings:
    base: str = "minilm"  # where the encoder weights came from (for the record)
    max_len: int = 160  # tokens of query + title + text together (longest_first truncation)

    def __post_init__(self) -> None:
        if self.max_len < 8:
            raise SettingError("max_len", f"ranker max_len must be >= 8, got {self.max_len}")

    @classmethod
    def from_dict(cls, data: dict) -> "RankerSettings":
        return settings_from_dict(cls, data, "ranker")


def listwise_loss(logits: torch.Tensor, positive: int = 0) -> torch.Tensor:
    """Mean over queries of -log softmax(logits)[positive]; ``logits`` is [queries, candidates]."""
    if logits.dim() != 2:
        raise ValueError(f"listwise_loss expects [queries, candidates] logits, got {tuple(logits.shape)}")
    target = torch.full((logits.shape[0],), positive, dtype=torch.long, device=logits.device)
    return F.cross_entropy(logits.float(), target)


class Ranker(torch.nn.Module):
    """Cross-encoder: ``encoder`` ([CLS] hidden state) followed by ``head`` (Linear to one logit)."""

    def __init__(self, encoder: torch.nn.Module, head: torch.nn.Linear, tokenizer, settings: RankerSettings):
        super().__init__()
        self.encoder = encoder
        self.head = head
        self.tokenizer = tokenizer
        self.settings = settings

    # ---- construction and persistence ---------------------------------------------------------------

    @classmethod
    def from_pretrained(
        cls, name_or_path: str, settings: RankerSettings | None = None, seed: int = 0
    ) -> "Ranker":
        """A ranker with a new head on a base encoder ('minilm' = offline all-MiniLM-L6-v2).

        The head is initialised from its own generator seeded by ``seed`` (BERT's N(0, 0.02) init,
        zero bias), so the start point does not depend on whatever consumed the global RNG before.
        """
        settings = settings or RankerSettings(base=name_or_path)
        tokenizer, encoder = load_encoder(resolve_model_path(name_or_path))
        head = torch.nn.Linear(encoder.config.hidden_size, 1)
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            head.weight.copy_(torch.randn(head.weight.shape, generator=gen) * 0.02)
            head.bias.zero_()
        return cls(encoder, head, tokenizer, settings)

    @classmethod
    def load(cls, folder: str | Path) -> "Ranker":
        folder = Path(folder)
        settings = read_settings(folder / SETTINGS_FILE, RankerSettings)
        if settings is None:
            raise FileNotFoundError(
                f"{folder}: not a ranker folder (no {SETTINGS_FILE}; "
                "use Ranker.from_pretrained for a base model)"
            )
        tokenizer, encoder = load_encoder(folder / "encoder")
        verify_checksums(folder)  # the head
        head = torch.nn.Linear(encoder.config.hidden_size, 1)
        head.load_state_dict(torch.load(folder / HEAD_FILE, map_location="cpu", weights_only=True))
        return cls(encoder, head, tokenizer, settings)

    def save(self, folder: str | Path) -> None:
        """Write the folder; ``ranker.json`` goes last so a folder with it is complete."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        save_encoder(folder / "encoder", self.encoder, self.tokenizer)
        with atomic_path(folder / HEAD_FILE) as tmp:
            with open(tmp, "wb") as handle:  # a path would name the zip's folder after tmp
                torch.save({k: v.detach().cpu() for k, v in self.head.state_dict().items()}, handle)
        write_checksums(folder, [HEAD_FILE])
        write_settings(folder / SETTINGS_FILE, self.settings)

    # ---- tokenisation and forward --------------------------------------------------------------------

    def passage_string(self, title: str | None, text: str) -> str:
        title = title or ""
        return f"{title} {self.tokenizer.sep_token} {text}" if title else text

    def tokenize(
        self, queries: Sequence[str], titles: Sequence[str | None], texts: Sequence[str]
    ) -> dict[str, torch.Tensor]:
        """Tokenise (query, passage) pairs; all three sequences are aligned, one pair per position."""
        if not (len(queries) == len(titles) == len(texts)):
            raise ValueError(
                f"queries/titles/texts lengths differ: {len(queries)}/{len(titles)}/{len(texts)}"
            )
        passages = [self.passage_string(t, x) for t, x in zip(titles, texts)]
        return self.tokenizer(
            list(queries),
            passages,
            padding=True,
            truncation="longest_first",
            max_length=self.settings.max_len,
            return_tensors="pt",
        )

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Relevance logits, shape [pairs]."""
        inputs = {k: v for k, v in batch.items() if k in _MODEL_INPUTS}
        cls_vec = self.encoder(**inputs).last_hidden_state[:, 0]
        # The head in fp32 under any autocast: bf16 logits tie and coarsen the listwise softmax.
        with torch.autocast(cls_vec.device.type, enabled=False):
            return self.head(cls_vec.float()).squeeze(-1)

    @property
    def device(self) -> torch.device:
        return next(self.encoder.parameters()).device

    @torch.no_grad()
    def score(
        self, queries: Sequence[str], titles: Sequence[str | None], texts: Sequence[str], batch_size: int = 64
    ) -> np.ndarray:
        """Logits of every pair (eval mode, length-sorted batches), float32 in the input order."""
        n = len(queries)
        if not (n == len(titles) == len(texts)):
            raise ValueError(f"queries/titles/texts lengths differ: {n}/{len(titles)}/{len(texts)}")
        was_training = self.training
        self.eval()
        lengths = [len(q) + len(t or "") + len(x) for q, t, x in zip(queries, titles, texts)]
        order = np.argsort([-n_chars for n_chars in lengths], kind="stable")
        out = np.zeros(n, dtype=np.float32)
        try:
            for start in range(0, n, batch_size):
                idx = order[start : start + batch_size]
                batch = self.tokenize(
                    [queries[i] for i in idx], [titles[i] for i in idx], [texts[i] for i in idx]
                )
                batch = {k: v.to(self.device) for k, v in batch.items()}
                out[idx] = self.forward(batch).float().cpu().numpy()
        finally:
            self.train(was_training)
        return out

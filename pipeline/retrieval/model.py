"""The bi-encoder retriever: Hugging Face encoder(s) + pooling + similarity, saved as a plain folder.

Folder layout (``Retriever.save``)::

    config.json, model.safetensors, tokenizer files, checksums.json
                            the query tower (the only one when towers are shared): the root is a
                            Hugging Face model folder (AutoModel / AutoTokenizer.from_pretrained)
    modules.json, 1_Pooling/, ...   sentence-transformers files (pipeline.retrieval.st_folders)
    passage_encoder/        HF model + tokenizer, only when towers are separate
    retriever.json          settings (pooling, similarity, temperature, max lengths, towers); last

Folders saved before the query tower moved to the root keep it in ``query_encoder/``: ``load`` reads
them as they are, ``save`` over one removes ``query_encoder/`` (``Retriever.load(f).save(f)``
converts a folder in place).

Passages are encoded as the pair (title, text); queries as single texts. With ``similarity: cosine``
embeddings are L2-normalised, so a dot product of two embeddings is their cosine; the temperature τ is
applied by the losses, never baked into the embeddings.
"""

from __future__ import annotations

import logging
import math
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from transformers import AutoTokenizer, BertConfig, BertModel

from pipeline.core.config import resolve_model_path
from pipeline.retrieval.hf_folders import (
    SettingError,
    load_encoder,
    load_model,
    read_settings,
    save_encoder,
    settings_from_dict,
    write_settings,
)
from pipeline.retrieval.st_folders import PASSAGE_TOWER, write_st_files

log = logging.getLogger("sieve.model")

SETTINGS_FILE = "retriever.json"
LEGACY_QUERY_TOWER = "query_encoder"  # where folders saved before the root layout keep the query tower


@dataclass
class RetrieverSettings:
    base: str = "minilm"  # where the weights came from (for the record)
    pooling: str = "mean"  # mean | cls
    similarity: str = "cosine"  # cosine | dot
    temperature: float = 0.05  # τ used by the losses with cosine similarity
    shared_towers: bool = True
    query_max_len: int = 32
    passage_max_len: int = 128

    def __post_init__(self) -> None:
        if self.pooling not in ("mean", "cls"):
            raise SettingError("pooling", f"pooling must be 'mean' or 'cls', got {self.pooling!r}")
        if self.similarity not in ("cosine", "dot"):
            raise SettingError("similarity", f"similarity must be 'cosine' or 'dot', got {self.similarity!r}")
        # Not `<= 0`: NaN passes that, and the losses would divide by it.
        if not 0 < self.temperature < math.inf:
            raise SettingError(
                "temperature", f"temperature must be a finite number > 0, got {self.temperature}"
            )
        for name in ("query_max_len", "passage_max_len"):
            if getattr(self, name) < 1:
                raise SettingError(name, f"{name} must be >= 1, got {getattr(self, name)}")

    @classmethod
    def from_dict(cls, data: dict) -> "RetrieverSettings":
        return settings_from_dict(cls, data, "retriever")


def pool(hidden: torch.Tensor, attention_mask: torch.Tensor, pooling: str) -> torch.Tensor:
    """Mean over non-padding tokens, or the first ([CLS]) token."""
    # fp32 whatever the encoder computed in: a bf16 sum over hundreds of tokens loses digits.
    hidden = hidden.float()
    if pooling == "cls":
        return hidden[:, 0]
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)


class Retriever(torch.nn.Module):
    """Query and passage towers with one pooling/similarity setting."""

    def __init__(
        self,
        query_model: torch.nn.Module,
        passage_model: torch.nn.Module | None,
        tokenizer,
        settings: RetrieverSettings,
    ):
        super().__init__()
        self.settings = settings
        self.query_model = query_model
        # Registered only when separate, so state_dict()/parameters() hold each weight once.
        self.passage_model = passage_model if passage_model is not None else None
        self.tokenizer = tokenizer

    # ---- construction and persistence -------------------------------------------------------------

    @classmethod
    def from_pretrained(cls, name_or_path: str, settings: RetrieverSettings | None = None) -> "Retriever":
        """A fresh retriever from a base HF encoder ('minilm' = the offline all-MiniLM-L6-v2)."""
        settings = settings or RetrieverSettings(base=name_or_path)
        path = resolve_model_path(name_or_path)
        tokenizer, query_model = load_encoder(path)
        passage_model = None if settings.shared_towers else load_model(path)
        return cls(query_model, passage_model, tokenizer, settings)

    @classmethod
    def load(cls, folder: str | Path) -> "Retriever":
        """Load a folder written by ``save`` (or a plain HF model folder, with default settings)."""
        folder = Path(folder)
        settings = read_settings(folder / SETTINGS_FILE, RetrieverSettings)
        if settings is None:
            # A plain HF checkpoint (or 'minilm'): treat as a fresh retriever with default settings.
            return cls.from_pretrained(str(folder))
        tokenizer, query_model = load_encoder(query_tower_dir(folder))
        passage_model = None
        if not settings.shared_towers:
            passage_model = load_model(folder / PASSAGE_TOWER)
        return cls(query_model, passage_model, tokenizer, settings)

    def save(self, folder: str | Path) -> None:
        """Write the folder: the query tower at its root, the passage tower (separate towers) in
        ``passage_encoder/``, the sentence-transformers files; ``retriever.json`` goes last so a folder
        with it is complete. A tower saved there before that these settings do not use (a passage
        tower, an old-layout ``query_encoder/``) is removed, so no stale weights stay behind."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / SETTINGS_FILE).unlink(missing_ok=True)  # incomplete until rewritten
        save_encoder(folder, self.query_model, self.tokenizer)
        if self.passage_model is not None:
            save_encoder(folder / PASSAGE_TOWER, self.passage_model, self.tokenizer)
        else:
            shutil.rmtree(folder / PASSAGE_TOWER, ignore_errors=True)
        shutil.rmtree(folder / LEGACY_QUERY_TOWER, ignore_errors=True)
        write_st_files(folder, self.settings, self.query_model.config.hidden_size)  # ST-loadable
        write_settings(folder / SETTINGS_FILE, self.settings)

    # ---- tokenisation ------------------------------------------------------------------------------

    def tokenize_queries(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        return self.tokenizer(
            list(texts),
            padding=True,
            truncation=True,
            max_length=self.settings.query_max_len,
            return_tensors="pt",
        )

    def tokenize_passages(self, titles: Sequence[str], texts: Sequence[str]) -> dict[str, torch.Tensor]:
        titles = [t or "" for t in titles]
        return self.tokenizer(
            titles,
            list(texts),
            padding=True,
            truncation="longest_first",
            max_length=self.settings.passage_max_len,
            return_tensors="pt",
        )

    # ---- forward -------------------------------------------------------------------------------------

    @property
    def passage_tower(self) -> torch.nn.Module:
        return self.passage_model if self.passage_model is not None else self.query_model

    def _embed(self, model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        inputs = {k: v for k, v in batch.items() if k in ("input_ids", "attention_mask", "token_type_ids")}
        return self.embed_hidden(model(**inputs).last_hidden_state, batch["attention_mask"])

    def embed_hidden(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Pooled (and, for cosine, L2-normalised) embeddings from a tower's last hidden states."""
        with torch.autocast(hidden.device.type, enabled=False):
            emb = pool(hidden, attention_mask, self.settings.pooling)
            if self.settings.similarity == "cosine":
                emb = F.normalize(emb, p=2, dim=-1)
        return emb

    def embed_queries(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self._embed(self.query_model, batch)

    def embed_passages(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self._embed(self.passage_tower, batch)

    @property
    def device(self) -> torch.device:
        return next(self.query_model.parameters()).device

    # ---- inference helpers (small inputs; corpus encoding lives in pipeline.retrieval.encode) ---------------

    @torch.no_grad()
    def encode_queries(self, texts: Sequence[str], batch_size: int = 128) -> np.ndarray:
        return self._encode_sorted(list(texts), None, batch_size)

    @torch.no_grad()
    def encode_passages(
        self, titles: Sequence[str], texts: Sequence[str], batch_size: int = 64
    ) -> np.ndarray:
        return self._encode_sorted(list(texts), list(titles), batch_size)

    def _encode_sorted(self, texts: list[str], titles: list[str] | None, batch_size: int) -> np.ndarray:
        """Encode in length-sorted batches (less padding), returned in the input order, float32."""
        was_training = self.training
        self.eval()
        order = np.argsort([-len(t) for t in texts], kind="stable")
        dim = self.query_model.config.hidden_size
        out = np.zeros((len(texts), dim), dtype=np.float32)
        for start in range(0, len(texts), batch_size):
            idx = order[start : start + batch_size]
            if titles is None:
                batch = self.tokenize_queries([texts[i] for i in idx])
                emb = self.embed_queries(_to(batch, self.device))
            else:
                batch = self.tokenize_passages([titles[i] for i in idx], [texts[i] for i in idx])
                emb = self.embed_passages(_to(batch, self.device))
            out[idx] = emb.float().cpu().numpy()
        self.train(was_training)
        return out


def query_tower_dir(folder: str | Path) -> Path:
    """Where a retriever folder keeps its query tower: the root, or ``query_encoder/`` in a folder saved
    before the root layout (no ``config.json`` at the root)."""
    folder = Path(folder)
    legacy = folder / LEGACY_QUERY_TOWER
    if not (folder / "config.json").exists() and (legacy / "config.json").exists():
        log.debug("%s: old layout (query tower in %s/)", folder, LEGACY_QUERY_TOWER)
        return legacy
    return folder


def _to(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device) for k, v in batch.items()}


def make_tiny_encoder(out_dir: str | Path, seed: int = 0, hidden: int = 32, layers: int = 2) -> Path:
    """A tiny randomly initialised BERT with the MiniLM tokenizer, for tests and memory benchmarks."""
    out_dir = Path(out_dir)
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path("minilm"))
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=2,
        intermediate_size=hidden * 2,
        max_position_embeddings=512,
    )
    save_encoder(out_dir, BertModel(config), tokenizer)
    return out_dir

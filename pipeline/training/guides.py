"""GISTEmbedLoss's guide (methods dpr_gist_<guide>): a frozen retriever that scores each micro-batch's
queries against its passages, and the column labels the loop hands a labelled loss
(MultiPositiveNCELoss): the relabelled positives and the negatives the guide scores above a positive."""

from __future__ import annotations

from pathlib import Path

import torch

from pipeline.core.distributed import all_gather
from pipeline.training.losses import (
    ColumnLabels,
    gist_exclude,
    one_positive,
    relabel_labels,
    similarity_scores,
)


class Guide:
    """A frozen retriever folder (dpr_gist_<guide>). Eval mode (no dropout) and float32 without
    autocast: the same batch gets the same scores, so the mask is deterministic and a resumed run
    replays it."""

    def __init__(self, folder: str | Path, device: torch.device):
        from pipeline.retrieval.model import Retriever

        self.folder = str(folder)
        self.retriever = Retriever.load(folder).to(device).eval()
        for param in self.retriever.parameters():
            param.requires_grad_(False)
        self.device = device

    @property
    def name(self) -> str:
        """The guide folder's name: what the loss records as having masked the negatives."""
        return Path(self.folder).name

    @torch.no_grad()
    def scores(self, batch, in_batch: bool) -> torch.Tensor:
        """[Q_local, N] guide scores, N = the (gathered, with in-batch negatives) passage columns."""
        r = self.retriever
        q = r.embed_queries({k: v.to(self.device) for k, v in r.tokenize_queries(batch.query_texts).items()})
        tokens = r.tokenize_passages(batch.passage_titles, batch.passage_texts)
        p = r.embed_passages({k: v.to(self.device) for k, v in tokens.items()})
        if in_batch:
            p = all_gather(p)
        return similarity_scores(q.float(), p.float(), r.settings.similarity, r.settings.temperature)


def batch_labels(
    batch, positives: torch.Tensor, n_columns: int, first: int, *, in_batch: bool, guide: Guide | None
) -> ColumnLabels:
    """The columns' labels of a micro-batch: the relabelled positives of its queries (a batch with
    extra positive slots), and the negatives the guide scores above a query's positive (guide)."""
    labels = one_positive((len(batch.query_texts), n_columns), positives)
    if batch.passage_ids is not None:
        ids = torch.as_tensor(batch.passage_ids, device=positives.device)
        labels = relabel_labels(
            all_gather(ids) if in_batch else ids, batch.positive_sets, batch.group_size, first
        )
    if guide is not None:
        above = gist_exclude(guide.scores(batch, in_batch).to(positives.device), positives)
        labels = ColumnLabels(labels.positive, labels.exclude | (above & ~labels.positive))
    return labels

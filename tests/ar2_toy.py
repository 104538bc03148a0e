"""A tiny AR2 round for the training tests: toy passages and queries as RoundData, tiny random models,
and the small settings the resume tests train with (a few seconds on a CPU)."""

from __future__ import annotations

import numpy as np

from pipeline.ar2.train import RoundData
from pipeline.retrieval.model import Retriever, RetrieverSettings
from pipeline.retrieval.ranker import Ranker, RankerSettings

TINY_ROUND = dict(
    rounds=2,
    batch_size=2,
    negatives=3,
    ranker_steps=3,
    retriever_steps=4,
    ranker_warmup_steps=1,
    ranker_warmup_lr=5e-4,
    retriever_lr=1e-3,
    ranker_lr=1e-3,
    checkpoint_every=2,
    adv_lambda=0.5,
)
"""Ar2Settings of a tiny round: 1 warm-up, 3 ranker and 4 retriever steps, a checkpoint every 2."""


def round_data(passages: dict[str, tuple[str, str]], query_text: dict[str, str]) -> RoundData:
    """Query i's positive is the i-th passage (logit 0.5); its pool is every other passage, in order,
    with seeded random logits."""
    qids, pids = list(query_text), list(passages)
    rng = np.random.default_rng(0)
    pools = {}
    for i, q in enumerate(qids):
        pool = np.array([pid for j, pid in enumerate(pids) if j != i], dtype=object)
        pools[q] = (pool, rng.normal(size=len(pool)))
    return RoundData(
        qids=qids,
        query_text=query_text,
        positive={q: pids[i] for i, q in enumerate(qids)},
        positive_logit={q: 0.5 for q in qids},
        pools=pools,
        passages=passages,
    )


def tiny_models(tiny: str) -> tuple[Retriever, Ranker]:
    """A fresh retriever and ranker on the tiny encoder folder ``tiny`` (short inputs)."""
    retriever = Retriever.from_pretrained(
        tiny, RetrieverSettings(base="tiny", query_max_len=16, passage_max_len=24)
    )
    return retriever, Ranker.from_pretrained(tiny, RankerSettings(base="tiny", max_len=32), seed=0)

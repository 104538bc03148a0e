"""Round bookkeeping for AR2: variants, the retriever a round starts from, and a round's training data."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np
import pandas as pd

from pipeline.ar2.train import RoundData
from pipeline.core.schemas import AR2_NEGATIVES_SCHEMA, SIEVE_SCHEMA
from pipeline.core.storage import DataError, read_table
from pipeline.retrieval.model import Retriever
from pipeline.sieve.data import load_passages

log = logging.getLogger("sieve.ar2_round_data")


def base_ranker(settings, seed: int):
    """A ranker from ``ar2.ranker``'s base encoder with a new head. With ``ar2.ranker_prior:
    retriever`` the head starts at zero, so D starts as the retriever whose logits it adds."""
    import torch

    from pipeline.retrieval.ranker import Ranker, RankerSettings

    rs = settings.ranker
    ranker = Ranker.from_pretrained(rs.base, RankerSettings(base=rs.base, max_len=rs.max_len), seed=seed)
    if settings.ranker_prior == "retriever":
        with torch.no_grad():
            ranker.head.weight.zero_()
            ranker.head.bias.zero_()
    return ranker


def load_retriever(folder: str | Path, overrides: dict, device) -> Retriever:
    """A retriever with config ar2's overrides applied (``RETRIEVER_OVERRIDE_KEYS``: similarity, τ,
    passage length; None keeps the folder's own). A round saves them with its retriever, so later
    rounds inherit them and applying them again changes nothing."""
    retriever = Retriever.load(folder).to(device)
    for key, value in overrides.items():
        if value is not None:
            setattr(retriever.settings, key, value)
    retriever.settings.__post_init__()
    return retriever


def load_round_data(
    negatives: str | os.PathLike,
    sieve: str | os.PathLike | None,
    queries: pd.DataFrame,
    corpus: str | os.PathLike,
    retriever_settings,
) -> RoundData:
    """The round's training set: each query's positive and negative pool with G's logits.

    ``queries``: qid, text, positive (pipeline.training.data.load_queries_with_positives). The pool is
    the non-excluded mined negatives, restricted to what the sieve kept when ``sieve`` is given.
    Logits are in the units of G's softmax: cos/τ for cosine, the raw dot product for dot (SimANS
    weights are computed on them). Queries left with an empty pool are dropped and counted.
    """
    neg = read_table(
        negatives,
        columns=["qid", "pid", "rank", "score", "excluded", "positive_score"],
        schema=AR2_NEGATIVES_SCHEMA,
    )
    neg = neg[~neg["excluded"].astype(bool)]
    if sieve is not None:
        kept = read_table(sieve, columns=["qid", "pid", "kept"], schema=SIEVE_SCHEMA)
        kept = kept[kept["kept"].astype(bool)][["qid", "pid"]]
        neg = neg.merge(kept, on=["qid", "pid"], how="inner")
    neg = neg.sort_values(["qid", "rank"], kind="stable")
    scale = 1.0 / retriever_settings.temperature if retriever_settings.similarity == "cosine" else 1.0
    known = set(queries["qid"])
    stray = ~neg["qid"].isin(known)
    if stray.any():
        raise DataError(
            f"qid {neg['qid'][stray].iloc[0]!r} is not a train query with a positive",
            file=negatives,
            field="qid",
        )
    pools: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    pos_logit: dict[str, float] = {}
    for qid, group in neg.groupby("qid", sort=True):
        pools[qid] = (group["pid"].to_numpy(dtype=object), group["score"].to_numpy(dtype=np.float64) * scale)
        pos_logit[qid] = float(group["positive_score"].iloc[0]) * scale
    queries = queries[queries["qid"].isin(pools)]
    n_empty = len(known) - len(queries)
    if n_empty:
        log.warning(
            "%d train queries have no negative left in %s%s and are not trained on this round",
            n_empty,
            negatives,
            " after the sieve" if sieve is not None else "",
        )
    if queries.empty:
        raise DataError("no train query has a negative to train on", file=negatives)
    positive = dict(zip(queries["qid"], queries["positive"]))
    pids = set(positive.values()) | {p for pool, _ in pools.values() for p in pool}
    table = load_passages(corpus, pids)
    passages = {
        pid: (title or "", text) for pid, title, text in zip(table.index, table["title"], table["text"])
    }
    return RoundData(
        qids=sorted(positive),
        query_text=dict(zip(queries["qid"], queries["text"])),
        positive=positive,
        positive_logit=pos_logit,
        pools={q: pools[q] for q in positive},
        passages=passages,
    )

"""Small synthetic training inputs (canonical tables) and a tiny model, for the training tests."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from pipeline.core.storage import CORPUS_SCHEMA, QRELS_SCHEMA, QUERIES_SCHEMA, write_table
from pipeline.retrieval.model import Retriever, RetrieverSettings, make_tiny_encoder

WORDS = ("river castle engine forest music bridge winter paper garden silver doctor island "
         "market planet violin harbor desert lantern copper meadow").split()


def make_train_files(root: Path, n_queries: int = 12, n_passages: int = 40, n_candidates: int = 8,
                     seed: int = 0) -> dict[str, Path]:
    """corpus/queries/qrels/negatives under ``root``; query i's positive is passage i."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    pids = [f"p{i:03d}" for i in range(n_passages)]
    texts = [" ".join(rng.choice(WORDS, size=int(rng.integers(5, 12)))) for _ in pids]
    corpus = pd.DataFrame({"pid": pids, "title": [f"title {i % 5}" for i in range(n_passages)],
                           "text": texts})
    qids = [f"q{i:03d}" for i in range(n_queries)]
    queries = pd.DataFrame({"qid": qids, "text": [texts[i].split()[0] + " " + texts[i].split()[1]
                                                  for i in range(n_queries)],
                            "answers": [[] for _ in qids]})
    qrels = pd.DataFrame({"qid": qids, "pid": pids[:n_queries], "relevance": 1})
    rows = []
    for i, qid in enumerate(qids):
        # The positive itself is among the candidates (rank 1) and must never become a negative.
        cands = [pids[i]] + [pids[j] for j in rng.choice(n_passages, size=n_candidates, replace=False)
                             if j != i]
        for rank, pid in enumerate(cands, start=1):
            rows.append({"qid": qid, "pid": pid, "rank": rank, "score": float(100 - rank),
                         "source": "bm25", "has_answer": False, "excluded": rank == 2})
    negatives = pd.DataFrame(rows).astype({"rank": "int32", "score": "float32"})
    paths = {"corpus": root / "corpus.parquet", "queries": root / "queries.train.parquet",
             "qrels": root / "qrels.train.parquet", "negatives": root / "bm25.parquet"}
    write_table(paths["corpus"], corpus, CORPUS_SCHEMA)
    write_table(paths["queries"], queries, QUERIES_SCHEMA)
    write_table(paths["qrels"], qrels, QRELS_SCHEMA)
    write_table(paths["negatives"], negatives)
    return paths


def tiny_model_dir(root: Path, seed: int = 0) -> Path:
    out = root / "tiny"
    if not (out / "config.json").exists():
        make_tiny_encoder(out, seed=seed)
    return out


def tiny_retriever(model_dir: Path, similarity: str = "cosine", dropout: bool = True) -> Retriever:
    settings = RetrieverSettings(base=str(model_dir), similarity=similarity, temperature=0.1,
                                 query_max_len=16, passage_max_len=32)
    retriever = Retriever.from_pretrained(str(model_dir), settings)
    if not dropout:
        import torch
        for module in retriever.modules():
            if isinstance(module, torch.nn.Dropout):
                module.p = 0.0
    return retriever

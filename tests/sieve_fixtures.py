"""A small synthetic training set for the sieve/filters/inspect tests (tables written as Parquet).

Layout mirrors resources/{dataset}/ and results/{dataset}/negatives/bm25.parquet. Query qK asks for
"answerK"; its annotated positive and one more passage (a false negative, listed in qrels_all) state
it; the other passages are about other things. Titles group passages into "articles".
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from pipeline.core.storage import CORPUS_SCHEMA, QRELS_SCHEMA, QUERIES_SCHEMA, write_table

NEG_SCHEMA = pa.schema([("qid", pa.string()), ("pid", pa.string()), ("rank", pa.int32()),
                        ("score", pa.float32()), ("source", pa.string()), ("has_answer", pa.bool_()),
                        ("excluded", pa.bool_())])
WORDS = "river stone market winter garden engine bridge violin harbor forest lantern copper".split()


def make_dataset(root: Path, n_queries: int = 8, n_filler: int = 24, n_neg: int = 12,
                 seed: int = 0) -> dict[str, Path]:
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    corpus, queries, qrels, qrels_all = [], [], [], []
    for k in range(n_queries):
        title = f"Article {k % 3}"
        corpus.append((f"pos{k}", title, f"The {WORDS[k % len(WORDS)]} of topic {k} is answer{k} indeed."))
        corpus.append((f"fn{k}", title, f"Also known: topic {k} has answer{k} as its value."))
        # A second annotated positive for even queries (used by the injection tests).
        if k % 2 == 0:
            corpus.append((f"pos{k}b", title, f"Topic {k} again: answer{k}."))
        queries.append((f"q{k}", f"what is the value of topic {k}", [f"answer{k}"]))
        qrels.append((f"q{k}", f"pos{k}", 1))
        qrels_all += [(f"q{k}", f"pos{k}", 1), (f"q{k}", f"fn{k}", 1)]
        if k % 2 == 0:
            qrels.append((f"q{k}", f"pos{k}b", 1))
            qrels_all.append((f"q{k}", f"pos{k}b", 1))
    for j in range(n_filler):
        words = " ".join(rng.choice(WORDS, size=8))
        corpus.append((f"d{j}", f"Article {j % 4}", f"Filler passage {j}: {words}."))
    fillers = [f"d{j}" for j in range(n_filler)]
    negs = []
    for k in range(n_queries):
        pool = [f"fn{k}"] + list(rng.choice(fillers, size=n_neg - 1, replace=False))
        pool = list(rng.permutation(pool))
        for rank, pid in enumerate(pool, start=1):
            excluded = rank == 3 and k == 1   # one excluded row: must never become a candidate
            negs.append((f"q{k}", pid, rank, float(20 - rank), "bm25", pid.startswith("fn"), excluded))
    paths = {name: root / f"{name}.parquet" for name in
             ("corpus", "queries", "qrels", "qrels_all", "negatives")}
    write_table(paths["corpus"], pd.DataFrame(corpus, columns=CORPUS_SCHEMA.names), CORPUS_SCHEMA)
    write_table(paths["queries"], pd.DataFrame(queries, columns=QUERIES_SCHEMA.names), QUERIES_SCHEMA)
    write_table(paths["qrels"], pd.DataFrame(qrels, columns=QRELS_SCHEMA.names), QRELS_SCHEMA)
    write_table(paths["qrels_all"], pd.DataFrame(qrels_all, columns=QRELS_SCHEMA.names), QRELS_SCHEMA)
    write_table(paths["negatives"], pd.DataFrame(negs, columns=NEG_SCHEMA.names), NEG_SCHEMA)
    return paths


def make_retriever(folder: Path, seed: int = 0) -> Path:
    """A tiny random retriever folder (retriever.json + towers) for scoring tests."""
    from pipeline.retrieval.model import Retriever, RetrieverSettings, make_tiny_encoder

    base = make_tiny_encoder(folder.parent / f"{folder.name}-base", seed=seed)
    Retriever.from_pretrained(str(base), RetrieverSettings(base="tiny", temperature=0.05)).save(folder)
    return folder

"""Shared test inputs: small synthetic datasets written as the canonical Parquet tables, and tiny models.

Each is a factory fixture (``make_sieve_dataset(root)``, ``make_train_files(root)``, ...) so a test
chooses where its files go and with which sizes, and module-scoped fixtures can build them once.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
import pytest
from stage_args import flags

from pipeline.core.schemas import CORPUS_SCHEMA, MINED_NEGATIVES_SCHEMA, QRELS_SCHEMA, QUERIES_SCHEMA
from pipeline.core.storage import write_table


@pytest.fixture(autouse=True, scope="session")
def _cpu_precision_pinned():
    """Every test computes as on a CPU without native bf16 (fp32), whatever the host has, so results
    do not depend on the machine; tests of the bf16 path set SIEVE_CPU_BF16=1 themselves with
    monkeypatch (tests/test_precision.py, the bf16 resume tests). Session scope: module-scoped
    fixtures (reference runs) see it too; subprocesses inherit it."""
    previous = os.environ.get("SIEVE_CPU_BF16")
    os.environ["SIEVE_CPU_BF16"] = "0"
    yield
    if previous is None:
        os.environ.pop("SIEVE_CPU_BF16", None)
    else:
        os.environ["SIEVE_CPU_BF16"] = previous


WORDS = "river stone market winter garden engine bridge violin harbor forest lantern copper".split()
TRAIN_WORDS = (
    "river castle engine forest music bridge winter paper garden silver doctor island "
    "market planet violin harbor desert lantern copper meadow"
).split()


# ---- the sieve, filters and inspector tests ------------------------------------------------------


def _sieve_dataset(
    root: Path, n_queries: int = 8, n_filler: int = 24, n_neg: int = 12, seed: int = 0
) -> dict[str, Path]:
    """resources/{dataset}/-like tables plus a bm25.parquet-layout negatives file under ``root``.

    Query qK asks for "answerK"; its annotated positive and one more passage (a false negative,
    listed in qrels_all) state it; the other passages are about other things. Titles group passages
    into "articles".
    """
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
            excluded = rank == 3 and k == 1  # one excluded row: must never become a candidate
            negs.append((f"q{k}", pid, rank, float(20 - rank), "bm25", pid.startswith("fn"), excluded))
    paths = {
        name: root / f"{name}.parquet" for name in ("corpus", "queries", "qrels", "qrels_all", "negatives")
    }
    for name, rows, schema in (
        ("corpus", corpus, CORPUS_SCHEMA),
        ("queries", queries, QUERIES_SCHEMA),
        ("qrels", qrels, QRELS_SCHEMA),
        ("qrels_all", qrels_all, QRELS_SCHEMA),
        ("negatives", negs, MINED_NEGATIVES_SCHEMA),
    ):
        write_table(paths[name], pd.DataFrame(rows, columns=schema.names), schema)
    return paths


def _sieve_retriever(folder: Path, seed: int = 0) -> Path:
    """A tiny random retriever folder (retriever.json + towers) for scoring tests."""
    from pipeline.retrieval.model import Retriever, RetrieverSettings, make_tiny_encoder

    base = make_tiny_encoder(folder.parent / f"{folder.name}-base", seed=seed)
    Retriever.from_pretrained(str(base), RetrieverSettings(base="tiny", temperature=0.05)).save(folder)
    return folder


def _sieve_candidates(paths: dict[str, Path], out: Path) -> Path:
    """The candidates of a make_sieve_dataset folder (8 per query from the top 10), labelled by qrels_all."""
    from pipeline.sieve import candidates

    tables = ("negatives", "qrels", "qrels_all", "queries", "corpus")
    candidates.main(flags(paths, *tables, candidates=8, pool=10, out=out))
    return out


def _factory(function: Callable) -> Callable:
    """A session fixture whose value is ``function`` itself, registered under the name it is assigned
    to: the test calls it with its own folder and sizes (so module-scoped fixtures build once)."""
    return pytest.fixture(scope="session")(lambda: function)


make_sieve_dataset = _factory(_sieve_dataset)
make_retriever = _factory(_sieve_retriever)
make_sieve_candidates = _factory(_sieve_candidates)


# ---- the training tests ---------------------------------------------------------------------------


def _train_files(
    root: Path, n_queries: int = 12, n_passages: int = 40, n_candidates: int = 8, seed: int = 0
) -> dict[str, Path]:
    """corpus/queries/qrels/negatives under ``root``; query i's positive is passage i."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    pids = [f"p{i:03d}" for i in range(n_passages)]
    texts = [" ".join(rng.choice(TRAIN_WORDS, size=int(rng.integers(5, 12)))) for _ in pids]
    corpus = pd.DataFrame(
        {"pid": pids, "title": [f"title {i % 5}" for i in range(n_passages)], "text": texts}
    )
    qids = [f"q{i:03d}" for i in range(n_queries)]
    queries = pd.DataFrame(
        {
            "qid": qids,
            "text": [texts[i].split()[0] + " " + texts[i].split()[1] for i in range(n_queries)],
            "answers": [[] for _ in qids],
        }
    )
    qrels = pd.DataFrame({"qid": qids, "pid": pids[:n_queries], "relevance": 1})
    rows = []
    for i, qid in enumerate(qids):
        # The positive itself is among the candidates (rank 1) and must never become a negative.
        cands = [pids[i]] + [
            pids[j] for j in rng.choice(n_passages, size=n_candidates, replace=False) if j != i
        ]
        for rank, pid in enumerate(cands, start=1):
            rows.append(
                {
                    "qid": qid,
                    "pid": pid,
                    "rank": rank,
                    "score": float(100 - rank),
                    "source": "bm25",
                    "has_answer": False,
                    "excluded": rank == 2,
                }
            )
    negatives = pd.DataFrame(rows).astype({"rank": "int32", "score": "float32"})
    paths = {
        "corpus": root / "corpus.parquet",
        "queries": root / "queries.train.parquet",
        "qrels": root / "qrels.train.parquet",
        "negatives": root / "bm25.parquet",
    }
    write_table(paths["corpus"], corpus, CORPUS_SCHEMA)
    write_table(paths["queries"], queries, QUERIES_SCHEMA)
    write_table(paths["qrels"], qrels, QRELS_SCHEMA)
    write_table(paths["negatives"], negatives)
    return paths


def _tiny_model_dir(root: Path, seed: int = 0) -> Path:
    from pipeline.retrieval.model import make_tiny_encoder

    out = root / "tiny"
    if not (out / "config.json").exists():
        make_tiny_encoder(out, seed=seed)
    return out


def _tiny_retriever(model_dir: Path, similarity: str = "cosine", dropout: bool = True):
    """A fresh retriever on the tiny encoder; ``dropout=False`` makes its forward pass deterministic.

    A plain function (not only a fixture) because spawned DDP workers receive it as an argument.
    """
    import torch

    from pipeline.retrieval.model import Retriever, RetrieverSettings

    settings = RetrieverSettings(
        base=str(model_dir), similarity=similarity, temperature=0.1, query_max_len=16, passage_max_len=32
    )
    retriever = Retriever.from_pretrained(str(model_dir), settings)
    if not dropout:
        for module in retriever.modules():
            if isinstance(module, torch.nn.Dropout):
                module.p = 0.0
    return retriever


make_train_files = _factory(_train_files)
tiny_model_dir = _factory(_tiny_model_dir)
tiny_retriever = _factory(_tiny_retriever)


# ---- resume tests --------------------------------------------------------------------------------


RESUME_CONFIG = dict(
    lr=1e-3,
    epochs=3,
    batch_size=4,
    hard_negatives=2,
    max_steps=6,
    checkpoint_every=3,
    warmup_ratio=0.2,
    seed=3,
    beta=0.25,
    weight_decay=0.01,
)


@pytest.fixture(scope="session")
def resume_config() -> Callable[..., object]:
    """resume_config(**overrides): the resume tests' TrainConfig (6 steps, a checkpoint every 3)."""
    from pipeline.training.loop import TrainConfig

    return lambda **kw: TrainConfig(**{**RESUME_CONFIG, **kw})


@pytest.fixture(scope="session")
def crash_after() -> Callable[[int], Callable[[int], None]]:
    """crash_after(n): an ``on_step_end`` hook that kills a training loop once step n has finished
    (raises RuntimeError("simulated crash ...")); the checkpoint written before it stays."""

    def make(n: int) -> Callable[[int], None]:
        def hook(step: int) -> None:
            if step == n:
                raise RuntimeError(f"simulated crash after step {step}")

        return hook

    return make


@pytest.fixture(scope="session")
def train_until_crash(crash_after) -> Callable[..., None]:
    """train_until_crash(retriever, data, cfg, checkpoint_dir, **kw): the training loop killed once step 4
    has finished (with the resume tests' config, its step-3 checkpoint stays); ``kw`` goes to ``train``."""
    from pipeline.training.loop import train

    def run(retriever, data, cfg, checkpoint_dir, **kw) -> None:
        with pytest.raises(RuntimeError, match="simulated crash"):
            train(retriever, data, cfg, checkpoint_dir=checkpoint_dir, on_step_end=crash_after(4), **kw)

    return run


@pytest.fixture(scope="module")
def workflow(tmp_path_factory):
    """The Snakefile loaded by Snakemake's API (rules, their globals), with the default config."""
    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import OutputSettings, ResourceSettings

    with SnakemakeApi(OutputSettings()) as api:
        workflow_api = api.workflow(
            resource_settings=ResourceSettings(),
            snakefile=Path(__file__).resolve().parent.parent / "Snakefile",
            workdir=tmp_path_factory.mktemp("workdir"),
        )
        yield workflow_api._workflow
        del workflow_api  # back to the previous working directory

"""Divergence never passes silently (issue 14, item 2).

A non-finite loss or gradient stops DPR/CCR and AR2 training with an error naming the step, the loss
parts and what to change; train_log.jsonl stays strict JSON. Encoding, indexing, search and
evaluation refuse non-finite embeddings, and evaluation refuses runs that leave queries out.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from stage_args import encode_corpus, flags

from pipeline.core.cli import run_main
from pipeline.core.config import ConfigError
from pipeline.core.schemas import CORPUS_SCHEMA, QRELS_SCHEMA, QUERIES_SCHEMA, RUN_SCHEMA
from pipeline.core.storage import DataError, write_table
from pipeline.retrieval import embeddings as E
from pipeline.retrieval import encode
from pipeline.retrieval import index as I
from pipeline.retrieval import search as S
from pipeline.retrieval.model import Retriever, RetrieverSettings, make_tiny_encoder
from pipeline.training.data import TrainData, TrainInputs
from pipeline.training.engine import LOG_FILE
from pipeline.training.loop import TrainConfig, train
from pipeline.training.train_dense import main as train_main


def _strict_json_lines(path: Path) -> list[dict]:
    """Parse a JSONL file as strict JSON: NaN / Infinity tokens are errors, as in most parsers."""

    def refuse(token: str):
        raise ValueError(f"{path}: non-JSON token {token}")

    return [json.loads(line, parse_constant=refuse) for line in path.read_text().splitlines() if line.strip()]


# ---- training -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def train_inputs(tmp_path_factory, make_train_files, tiny_model_dir):
    root = tmp_path_factory.mktemp("divergence")
    return make_train_files(root / "data"), tiny_model_dir(root)


def _train_args(paths, tiny, out: Path, *extra: str) -> list[str]:
    tables = ("queries", "qrels", "negatives", "corpus")
    return [*flags(paths, *tables, init=tiny, out=out, batch_size=4, threads=1), *extra]


def test_train_dense_huge_lr_stops_with_step_loss_parts_and_advice(train_inputs, tmp_path, capsys):
    paths, tiny = train_inputs
    out = tmp_path / "dpr"
    with pytest.raises(SystemExit) as exc:
        run_main(train_main, _train_args(paths, tiny, out, "--lr", "1e10", "--max-steps", "3"))
    assert exc.value.code == 2
    err = capsys.readouterr().err
    # Step 1 is finite (the initial weights); the huge update makes step 2's loss NaN.
    assert "step 2" in err and "nce nan" in err and "ccr nan" in err, err
    assert "lr" in err and "1e+10" in err, err
    assert not (out / "retriever.json").exists()  # no diverged model for encode to pick up


def test_train_log_stays_strict_json_when_training_diverges(train_inputs, tmp_path):
    paths, tiny = train_inputs
    out = tmp_path / "dpr"
    try:
        run_main(train_main, _train_args(paths, tiny, out, "--lr", "1e10", "--max-steps", "3"))
    except SystemExit:
        pass
    logs = sorted(tmp_path.rglob(LOG_FILE))
    assert logs, "no training log written"
    for path in logs:
        records = _strict_json_lines(path)
        assert [r["step"] for r in records] == [1]  # the steps before the divergence, all finite


def test_non_finite_gradient_stops_training_before_the_update(train_inputs, tmp_path, tiny_retriever):
    paths, tiny = train_inputs
    data = TrainData(TrainInputs(**paths), depth=5, seed=0)
    retriever = tiny_retriever(tiny)
    # The loss stays finite; only the backward pass yields NaN (e.g. an overflow in a kernel).
    weight = retriever.query_model.embeddings.word_embeddings.weight
    weight.register_hook(lambda grad: grad * float("nan"))
    before = weight.detach().clone()
    cfg = TrainConfig(lr=1e-3, batch_size=4, hard_negatives=2, max_steps=2, seed=0)
    with pytest.raises(ConfigError, match=r"step 1.*gradient norm nan"):
        train(retriever, data, cfg, checkpoint_dir=tmp_path / "ckpt")
    assert torch.equal(weight.detach(), before)  # the optimizer never applied the NaN gradient


def test_ar2_round_stops_on_divergence(tmp_path):
    from ar2_toy import TINY_ROUND, round_data, tiny_models

    from pipeline.ar2.settings import Ar2Settings
    from pipeline.ar2.train import train_round

    tiny = str(make_tiny_encoder(tmp_path / "tiny", seed=0))
    passages = {f"p{i}": (f"T{i % 3}", f"alpha beta fact {i}") for i in range(12)}
    data = round_data(passages, {f"q{i}": f"what is q{i}" for i in range(4)})
    # The tiny round with the retriever phase alone (3 steps, no checkpoint, pure distillation) and a
    # learning rate that must blow up; ranker_warmup_lr is the default's, as no warm-up step runs.
    only_retriever = dict(
        rounds=1, ranker_steps=0, ranker_warmup_steps=0, ranker_warmup_lr=None, retriever_steps=3
    )
    diverging = dict(retriever_lr=1e10, max_grad_norm=1.0, checkpoint_every=0, adv_lambda=0.0)
    settings = Ar2Settings(**{**TINY_ROUND, **only_retriever, **diverging})
    retriever, ranker = tiny_models(tiny)
    with pytest.raises(ConfigError, match=r"step \d.*retriever_lr"):
        train_round(
            retriever,
            ranker,
            data,
            settings,
            round_index=1,
            seed=0,
            round_dir=tmp_path / "round1",
            previous_ckpt=None,
        )
    _strict_json_lines(tmp_path / "round1" / "train_log.jsonl")


# ---- encode / index / search ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """A healthy tiny retriever folder and a diverged copy (NaN weights, as after lr 1e10)."""
    root = tmp_path_factory.mktemp("models")
    make_tiny_encoder(root / "hf", seed=0)
    settings = RetrieverSettings(base="tiny", passage_max_len=32, query_max_len=12)
    good = Retriever.from_pretrained(str(root / "hf"), settings)
    good.save(root / "good")
    with torch.no_grad():
        good.query_model.embeddings.LayerNorm.weight.fill_(float("nan"))
    good.save(root / "diverged")
    return {"good": root / "good", "diverged": root / "diverged"}


def _corpus(tmp_path: Path, n: int = 20) -> Path:
    df = pd.DataFrame(
        {
            "pid": [f"d{i}" for i in range(n)],
            "title": [f"t{i % 3}" for i in range(n)],
            "text": [f"river castle number {i} winter" for i in range(n)],
        }
    )
    path = tmp_path / "corpus.parquet"
    write_table(path, df, CORPUS_SCHEMA)
    return path


def _queries(tmp_path: Path) -> Path:
    df = pd.DataFrame(
        {"qid": ["q1", "q2"], "text": ["river", "castle winter"], "answers": [["river"], ["castle"]]}
    )
    path = tmp_path / "queries.parquet"
    write_table(path, df, QUERIES_SCHEMA)
    return path


def test_encode_refuses_non_finite_embeddings(models, tmp_path, capsys):
    corpus = _corpus(tmp_path)
    where = dict(model=models["diverged"], corpus=corpus, out_dir=tmp_path / "emb", device="cpu")
    with pytest.raises(SystemExit) as exc:
        run_main(encode.main, ["corpus", *flags(**where, shard=0, shards=1), "--no-progress"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert str(models["diverged"]) in err and "non-finite" in err and "retrain" in err, err
    assert not list(tmp_path.glob("emb/*.npy"))  # no shard holding NaN for index/search to read


def test_search_refuses_non_finite_query_embeddings(models, tmp_path, capsys):
    corpus = _corpus(tmp_path)
    encode_corpus(models["good"], corpus, tmp_path / "emb", 1, "--device", "cpu", "--no-progress")
    with pytest.raises(SystemExit) as exc:
        run_main(
            S.main,
            [
                "--model",
                str(models["diverged"]),
                "--queries",
                str(_queries(tmp_path)),
                "--out",
                str(tmp_path / "run.parquet"),
                "--backend",
                "torch",
                "--embeddings",
                str(tmp_path / "emb"),
                "--device",
                "cpu",
                "--no-progress",
                "--depth",
                "5",
            ],
        )
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert str(models["diverged"]) in err and "non-finite" in err, err
    assert not (tmp_path / "run.parquet").exists()


def _nan_embeddings(folder: Path) -> Path:
    """A gathered embedding folder whose row 3 is NaN (written by a pre-fix encode)."""
    vectors = np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32)
    vectors[3] = np.nan
    npy, ids = E.shard_paths(folder, 0, 1)
    with E.EmbeddingWriter(npy, ids, 8, 4) as writer:
        writer.write([f"p{i}" for i in range(8)], vectors)
    E.gather(folder, 1, model="diverged", source="corpus")
    return npy


def test_search_refuses_non_finite_passage_embeddings(tmp_path):
    npy = _nan_embeddings(tmp_path / "emb")
    queries = np.ones((2, 4), np.float32)
    with pytest.raises(DataError, match=r"non-finite") as exc:
        S.search_torch(tmp_path / "emb", queries, 3, progress=False)
    assert str(npy) in str(exc.value) and "row 3" in str(exc.value)


def test_index_refuses_non_finite_passage_embeddings(tmp_path):
    npy = _nan_embeddings(tmp_path / "emb")
    with pytest.raises(DataError, match=r"non-finite") as exc:
        I.build_index(tmp_path / "emb", tmp_path / "index", factory="Flat", gpu=False, progress=False)
    assert str(npy) in str(exc.value)
    assert not (tmp_path / "index" / I.INDEX_MANIFEST).exists()


def test_search_refuses_queries_left_without_results(tmp_path):
    # What a FAISS index holding NaN vectors (built before this check) returns: -1 rows.
    rows = np.array([[0, 1], [-1, -1], [-1, -1]])
    with pytest.raises(DataError, match=r"2 of 3 queries.*'q2'"):
        S.check_every_query_ranked(["q1", "q2", "q3"], rows, n_passages=5, file=tmp_path / "run.parquet")
    S.check_every_query_ranked(["q1"], rows[:1], n_passages=5, file=tmp_path / "run.parquet")


# ---- evaluate -------------------------------------------------------------------------------------


def _eval_data(tmp_path: Path, run_rows) -> list[str]:
    corpus = [("p1", "A", "Paris is in France."), ("p2", "B", "Lyon is a city.")]
    queries = [("q1", "capital?", ["Paris"]), ("q2", "city?", ["Lyon"]), ("q3", "other?", ["x"])]
    qrels = [("q1", "p1", 1), ("q2", "p2", 1), ("q3", "p2", 1)]
    files = {}
    for name, rows, schema in (
        ("corpus", corpus, CORPUS_SCHEMA),
        ("queries", queries, QUERIES_SCHEMA),
        ("qrels", qrels, QRELS_SCHEMA),
        ("run", run_rows, RUN_SCHEMA),
    ):
        files[name] = tmp_path / f"{name}.parquet"
        write_table(files[name], pd.DataFrame(rows, columns=schema.names), schema)
    run = flags(files, *files, dataset="tiny", method="dpr", split="test", out=tmp_path / "metrics.json")
    return [*run, "--ks", "1", "2"]


def test_evaluate_refuses_a_run_missing_queries(tmp_path, capsys):
    from pipeline.evaluation import evaluate

    argv = _eval_data(tmp_path, [("q1", "p1", 1, 1.0), ("q1", "p2", 2, 0.5)])
    with pytest.raises(SystemExit) as exc:
        run_main(evaluate.main, argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "2 of 3 queries" in err and "'q2'" in err, err
    assert not (tmp_path / "metrics.json").exists()


def test_evaluate_counts_missing_queries_as_misses_only_when_asked(tmp_path):
    from pipeline.evaluation import evaluate

    argv = _eval_data(tmp_path, [("q1", "p1", 1, 1.0), ("q1", "p2", 2, 0.5)])
    assert evaluate.main([*argv, "--allow-missing-queries"]) == 0
    out = json.loads((tmp_path / "metrics.json").read_text())
    assert out["n_unranked_queries"] == 2
    assert out["metrics"]["R@1"] == pytest.approx(1 / 3)


def test_evaluate_names_non_finite_scores(tmp_path, capsys):
    from pipeline.evaluation import evaluate

    argv = _eval_data(
        tmp_path,
        [("q1", "p1", 1, float("nan")), ("q2", "p2", 1, float("nan")), ("q3", "p1", 1, float("inf"))],
    )
    with pytest.raises(SystemExit) as exc:
        run_main(evaluate.main, argv)
    assert exc.value.code == 2
    assert "non-finite" in capsys.readouterr().err

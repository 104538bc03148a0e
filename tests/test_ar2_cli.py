"""The AR2 round CLI end to end on a tiny dataset: rounds 0..1 (sieve variant), crash + resume,
settings change (the old round is moved aside, never overwritten), selection and the test run."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

import pipeline.ar2.run_round as ar2_cli
from pipeline.ar2 import selection as ar2_select
from pipeline.ar2.data import encode_corpus
from pipeline.core.config import ConfigError
from pipeline.core.schemas import CORPUS_SCHEMA, QRELS_SCHEMA, QUERIES_SCHEMA
from pipeline.core.settings import AR2_CCR_KEYS, Ar2Settings, CcrSettings, SieveSettings, defaults, to_flags
from pipeline.core.storage import write_table
from pipeline.retrieval.model import Retriever, RetrieverSettings, make_tiny_encoder
from pipeline.retrieval.runs import read_run

THINGS = ["apple", "river", "castle", "violin", "rocket", "garden", "lantern", "harbor", "desert", "comet"]
PLACES = ["Paris", "Lima", "Oslo", "Cairo", "Quito", "Seoul", "Perth", "Dakar", "Hanoi", "Bern"]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("ar2data")
    tiny = make_tiny_encoder(root / "tiny", seed=0)
    corpus = []
    for i, (t, p) in enumerate(zip(THINGS, PLACES)):
        corpus += [
            (f"d{i}a", t.title(), f"The {t} was made in {p} long ago."),
            (f"d{i}b", t.title(), f"People say the {t} comes from {p}."),  # a false negative
            (f"d{i}c", t.title(), f"The {t} is painted blue and green."),
        ]
    write_table(
        root / "corpus.parquet", pd.DataFrame(corpus, columns=["pid", "title", "text"]), CORPUS_SCHEMA
    )
    for split, idx in {"train": range(0, 6), "dev": range(6, 8), "test": range(8, 10)}.items():
        queries = pd.DataFrame(
            [(f"q{i}", f"where was the {THINGS[i]} made", [PLACES[i]]) for i in idx],
            columns=["qid", "text", "answers"],
        )
        write_table(root / f"queries.{split}.parquet", queries, QUERIES_SCHEMA)
        qrels = pd.DataFrame([(f"q{i}", f"d{i}a", 1) for i in idx], columns=["qid", "pid", "relevance"])
        write_table(root / f"qrels.{split}.parquet", qrels, QRELS_SCHEMA)
        qall = pd.DataFrame(
            [(f"q{i}", f"d{i}{s}", 1) for i in idx for s in "ab"], columns=["qid", "pid", "relevance"]
        )
        write_table(root / f"qrels_all.{split}.parquet", qall, QRELS_SCHEMA)
    start = Retriever.from_pretrained(
        str(tiny), RetrieverSettings(base="tiny", query_max_len=16, passage_max_len=32)
    )
    start.save(root / "dpr")
    encode_corpus(start, root / "corpus.parquet", root / "emb_dpr", batch_size=16, model_name="dpr")
    return root


def _settings(d: Path, **over) -> dict:
    s = {
        "rounds": 1,
        "top_k": 10,
        "exclude_answer_match": False,
        "negatives": 3,
        "batch_size": 2,
        "ranker_warmup_steps": 1,
        "ranker_warmup_lr": None,
        "ranker_steps": 2,
        "retriever_steps": 3,
        "retriever_lr": 1e-4,
        "ranker_lr": 1e-4,
        "weight_decay": 0.0,
        "warmup_ratio": 0.1,
        "max_grad_norm": 2.0,
        "adv_lambda": 0.5,
        "distill_temperature": 1.0,
        "simans": {"a": 0.5, "b": 0.0, "form": "square"},
        "ranker": {"base": str(d / "tiny"), "max_len": 48},
        "similarity": None,
        "temperature": None,
        "passage_max_len": None,
        "sieve_init": "initial",
        "checkpoint_every": 2,
        "keep_checkpoints": True,
        "precision": "bf16",
        "encode_batch_size": 16,
    }
    s.update(over)
    return s


def _round(d: Path, out: Path, r: int, settings: dict, variant: str = "sieve", extra=()) -> None:
    assert ar2_cli.main(_round_argv(d, out, r, settings, variant) + list(extra)) == 0


def _round_argv(d: Path, out: Path, r: int, settings: dict, variant: str = "sieve") -> list[str]:
    argv = [
        "--round",
        str(r),
        "--round-dir",
        str(out / variant / f"round{r}"),
        "--variant",
        variant,
        "--dataset",
        "tiny",
        *shlex.split(to_flags(Ar2Settings, settings)),
        "--seed",
        "0",
        "--corpus",
        str(d / "corpus.parquet"),
        "--train-queries",
        str(d / "queries.train.parquet"),
        "--train-qrels",
        str(d / "qrels.train.parquet"),
        "--train-qrels-all",
        str(d / "qrels_all.train.parquet"),
        "--dev-queries",
        str(d / "queries.dev.parquet"),
        "--dev-qrels",
        str(d / "qrels.dev.parquet"),
        *shlex.split(
            to_flags(
                SieveSettings,
                {"candidates": 6, "pool": 10, "strict": False, "fallback": "random_one", "batch_size": 16},
                prefix="sieve",
            )
        ),
        "--sieve-model",
        str(d / "dpr"),
        "--sieve-embeddings",
        str(d / "emb_dpr"),
        "--ks",
        "1",
        "5",
        "--depth",
        "10",
    ]
    argv += (
        ["--start-retriever", str(d / "dpr"), "--start-embeddings", str(d / "emb_dpr")]
        if r == 0
        else ["--prev-dir", str(out / variant / f"round{r - 1}")]
    )
    return argv


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    return Retriever.load(folder).state_dict()


def test_rounds_crash_resume_select(data, tmp_path, monkeypatch):
    settings = _settings(data)
    ref = tmp_path / "ref"
    _round(data, ref, 0, settings)
    _round(data, ref, 1, settings)
    r1 = ref / "sieve" / "round1"
    for name in (
        "negatives.parquet",
        "sieve.parquet",
        "retriever/retriever.json",
        "ranker/ranker.json",
        "embeddings/manifest.json",
        "run.dev.parquet",
        "metrics.json",
        "round.json",
        "train.ckpt/state.pt",
        "train_log.jsonl",
        "fingerprint.json",
    ):
        assert (r1 / name).exists(), name
    summary = json.loads((r1 / "round.json").read_text())
    assert summary["train"]["ranker_steps"] == 3 and summary["train"]["retriever_steps"] == 3
    assert summary["sieve"]["candidates"] == 36
    sieve = pd.read_parquet(r1 / "sieve.parquet")
    assert {"similarity", "nce_loss", "threshold", "kept", "is_false_negative"} <= set(sieve.columns)
    negatives = pd.read_parquet(r1 / "negatives.parquet")
    # The annotated positive (d{i}a) is never a negative of its query; the false negative can be.
    assert not any(p == f"d{q[1:]}a" for q, p in zip(negatives["qid"], negatives["pid"]))

    # A crash in the middle of round 1's training; the rerun skips mining and sieving and
    # finishes with the weights of the uninterrupted run.
    crashed = tmp_path / "crashed"
    _round(data, crashed, 0, settings)
    real_train = ar2_cli.train_round

    def crashing(*args, **kwargs):
        def hook(step):
            if step == 3:
                raise RuntimeError("simulated crash")

        return real_train(*args, **kwargs, on_step_end=hook)

    monkeypatch.setattr(ar2_cli, "train_round", crashing)
    with pytest.raises(RuntimeError, match="simulated crash"):
        _round(data, crashed, 1, settings)
    c1 = crashed / "sieve" / "round1"
    assert not (c1 / "round.json").exists() and (c1 / "negatives.parquet").exists()
    mined = (c1 / "negatives.parquet").stat().st_mtime_ns
    monkeypatch.setattr(ar2_cli, "train_round", real_train)
    _round(data, crashed, 1, settings)
    assert (c1 / "negatives.parquet").stat().st_mtime_ns == mined  # not redone
    ref_w, got_w = _weights(r1 / "retriever"), _weights(c1 / "retriever")
    assert all(torch.equal(ref_w[k], got_w[k]) for k in ref_w)
    emb_a, emb_b = np.load(r1 / "embeddings" / "shard0of1.npy"), np.load(c1 / "embeddings" / "shard0of1.npy")
    np.testing.assert_array_equal(emb_a, emb_b)

    # Other settings: the finished round is moved aside (kept) and rebuilt, not overwritten.
    _round(data, crashed, 1, _settings(data, retriever_steps=2))
    moved = [p for p in (crashed / "sieve").iterdir() if p.name.startswith("round1.old-")]
    assert len(moved) == 1 and (moved[0] / "retriever" / "retriever.json").exists()
    assert json.loads((c1 / "round.json").read_text())["train"]["retriever_steps"] == 2

    # A finished round keeps only the optimizer/scheduler state the next round loads; with
    # keep_checkpoints false it is deleted once that next round has finished.
    state = torch.load(r1 / "train.ckpt" / "state.pt", weights_only=False)
    assert set(state["state"]) == {"opt_retriever", "opt_ranker", "sched_retriever", "sched_ranker"}
    two = _settings(data, rounds=2, keep_checkpoints=False)
    keep = tmp_path / "keep"
    _round(data, keep, 0, two)
    _round(data, keep, 1, two)
    _round(data, keep, 2, two)
    assert not (keep / "sieve" / "round1" / "train.ckpt" / "state.pt").exists()
    assert (keep / "sieve" / "round2" / "train.ckpt" / "state.pt").exists()
    assert (keep / "sieve" / "round1" / "retriever" / "retriever.json").exists()

    # Selection among trained rounds, info.json for the gather step, the test run.
    info_path = tmp_path / "ar2_sieve" / "info.json"
    assert (
        ar2_select.main(
            [
                "select",
                "--variant-dir",
                str(ref / "sieve"),
                "--variant",
                "sieve",
                "--rounds",
                "1",
                "--metric",
                "R@5",
                "--info-out",
                str(info_path),
                "--figure",
                str(tmp_path / "fig.png"),
            ]
        )
        == 0
    )
    info = json.loads(info_path.read_text())
    assert info["selected_round"] == 1 and info["steps"] == {"ranker": 3, "retriever": 3, "total": 6}
    assert {"seed", "wall_time_s", "dev_metrics", "per_round"} <= set(info)
    assert (tmp_path / "fig.png").stat().st_size > 1000
    run_path = tmp_path / "ar2_sieve" / "run.test.parquet"
    assert (
        ar2_select.main(
            [
                "search",
                "--info",
                str(info_path),
                "--queries",
                str(data / "queries.test.parquet"),
                "--depth",
                "5",
                "--run-out",
                str(run_path),
            ]
        )
        == 0
    )
    run = read_run(run_path, {"q8", "q9"})
    assert len(run) == 10 and run["rank"].tolist()[:5] == [1, 2, 3, 4, 5]


def test_select_round_rules():
    rounds = [
        {"round": 0, "dev": {"R@5": 0.9}},
        {"round": 1, "dev": {"R@5": 0.5}},
        {"round": 2, "dev": {"R@5": 0.7}},
        {"round": 3, "dev": {"R@5": 0.7}},
    ]
    assert ar2_select.select_round(rounds, "R@5") == (2, "best dev R@5")  # round 0 never; ties: earlier
    with pytest.raises(ConfigError, match="MRR@10"):
        ar2_select.select_round(rounds, "MRR@10")
    no_dev = [{"round": 0, "dev": {}}, {"round": 1, "dev": {}}, {"round": 2, "dev": {}}]
    assert ar2_select.select_round(no_dev, "R@5")[0] == 2


def _ccr_flags(**changed) -> str:
    """The --ccr-* flags of a tiny CCR fine-tune (k 2 of the top 5, no in-batch negatives)."""
    tiny = {
        "batch_size": 2,
        "hard_negatives": 2,
        "in_batch": False,
        "negatives_depth": 5,
        "checkpoint_every": 0,
    }
    return to_flags(CcrSettings, {**defaults(CcrSettings), **tiny, **changed}, AR2_CCR_KEYS, prefix="ccr")


def test_sieve_init_current_fine_tunes_the_previous_retriever(data, tmp_path):
    settings = _settings(data, sieve_init="current", ranker_warmup_steps=0, ranker_steps=1, retriever_steps=1)
    ccr = _ccr_flags(beta=0.5, max_steps=2, temperature=1.0)
    _round(data, tmp_path, 0, settings)
    _round(data, tmp_path, 1, settings, extra=shlex.split(ccr))
    r1 = tmp_path / "sieve" / "round1"
    model = json.loads((r1 / "sieve_model" / "retriever.json").read_text())
    assert model["similarity"] == "cosine" and model["temperature"] == 1.0
    start = _weights(data / "dpr")
    tuned = _weights(r1 / "sieve_model")
    assert any(not torch.equal(start[k], tuned[k]) for k in start)  # CCR steps moved it
    assert pd.read_parquet(r1 / "sieve.parquet")["kept"].any()


def test_round_one_starts_from_a_trained_ranker_when_given(data, tmp_path):
    """--trained-ranker (ar2.ranker_init: cross_encoder): round 1's ranker is that folder's, not a new head."""
    from pipeline.retrieval.ranker import Ranker, RankerSettings

    init = tmp_path / "trained_ranker"
    trained = Ranker.from_pretrained(str(data / "tiny"), RankerSettings(base="tiny", max_len=40), seed=7)
    with torch.no_grad():
        for p in trained.parameters():
            p.add_(0.5)  # a ranker no fresh initialisation reproduces
    trained.save(init)
    settings = _settings(data, ranker_warmup_steps=0, ranker_steps=1, retriever_steps=1, ranker_lr=1e-12)
    _round(data, tmp_path, 0, settings, variant="plain")
    _round(data, tmp_path, 1, settings, variant="plain", extra=["--trained-ranker", str(init)])
    round_json = tmp_path / "plain" / "round1" / "round.json"
    assert json.loads(round_json.read_text())["ranker_init"] == str(init)
    # Killed after training, before round.json: the resumed round records where its ranker came from.
    round_json.unlink()
    _round(data, tmp_path, 1, settings, variant="plain", extra=["--trained-ranker", str(init)])
    assert json.loads(round_json.read_text())["ranker_init"] == str(init)
    after = Ranker.load(tmp_path / "plain" / "round1" / "ranker")
    assert after.settings.max_len == 40  # the trained ranker's own settings, not ar2.ranker's 48
    start = Ranker.load(init).state_dict()
    for key, value in after.state_dict().items():  # one step at lr 1e-12: the same weights
        torch.testing.assert_close(value, start[key], atol=1e-6, rtol=0)


def test_bad_round_inputs_name_the_file_and_field(data, tmp_path):
    from pipeline.ar2.round_data import load_round_data
    from pipeline.core.storage import DataError
    from pipeline.training.data import load_queries_with_positives

    queries, _, _ = load_queries_with_positives(data / "queries.train.parquet", data / "qrels.train.parquet")
    settings = RetrieverSettings()
    bad = tmp_path / "negatives.parquet"
    pd.DataFrame(
        {"qid": ["q0"], "pid": ["d1a"], "rank": [1], "score": [0.5], "excluded": [False]}
    ).to_parquet(bad)
    with pytest.raises(DataError, match="positive_score") as err:
        load_round_data(bad, None, queries, data / "corpus.parquet", settings)
    assert str(bad) in str(err.value)
    pd.DataFrame(
        {
            "qid": ["nope"],
            "pid": ["d1a"],
            "rank": [1],
            "score": [0.5],
            "excluded": [False],
            "positive_score": [0.9],
        }
    ).to_parquet(bad)
    with pytest.raises(DataError, match="'nope'"):
        load_round_data(bad, None, queries, data / "corpus.parquet", settings)
    with pytest.raises(DataError, match="previous round has no retriever"):
        ar2_cli.previous_state(tmp_path)


def test_an_unwritable_round_folder_is_refused_before_the_round_starts(data, tmp_path, capsys):
    from pipeline.core.cli import run_main

    blocker = tmp_path / "results"
    blocker.write_text("a file where the results folder should be")
    with pytest.raises(SystemExit) as exc:
        run_main(ar2_cli.main, _round_argv(data, blocker, 0, _settings(data)))
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert str(blocker) in err and "not a folder" in err, err


def test_sieve_init_warm_fine_tunes_the_warm_up_retriever_every_round(data, tmp_path):
    """The authors' scripts' loop: each round's CCR model starts from the warm-up DPR (--warm-retriever),
    not from the round's own retriever; without the folder the round is refused before any work."""
    settings = _settings(data, sieve_init="warm", ranker_warmup_steps=0, ranker_steps=1, retriever_steps=1)
    ccr = _ccr_flags(max_steps=1)
    _round(data, tmp_path, 0, settings)
    with pytest.raises(ConfigError, match="--warm-retriever"):
        _round(data, tmp_path, 1, settings, extra=shlex.split(ccr))
    warm = ["--warm-retriever", str(data / "dpr")]
    _round(data, tmp_path, 1, settings, extra=[*shlex.split(ccr), *warm])
    _round(data, tmp_path, 2, settings, extra=[*shlex.split(ccr), *warm])
    for r in (1, 2):
        info = json.loads((tmp_path / "sieve" / f"round{r}" / "sieve_model" / "train_info.json").read_text())
        assert info["init"] == str(data / "dpr")  # round 2 too: not round 1's retriever
    assert pd.read_parquet(tmp_path / "sieve" / "round2" / "sieve.parquet")["kept"].any()

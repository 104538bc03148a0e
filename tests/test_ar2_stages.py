"""AR2's round stages end to end on a tiny dataset, in the order workflow/rules/ar2.smk runs them: mining
with the DPR start, the sieve, training (crashed and resumed), corpus encoding, the dev evaluation and
the round's record; round 2 from round 1's retriever, ranker and optimizer state; selection and the
test run."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from stage_args import encode_corpus

from pipeline.ar2 import mine, round_summary, sieving, train_round
from pipeline.ar2 import selection as ar2_select
from pipeline.ar2.settings import Ar2Settings
from pipeline.core.config import ConfigError
from pipeline.core.schemas import CORPUS_SCHEMA, QRELS_SCHEMA, QUERIES_SCHEMA
from pipeline.core.settings.root import defaults
from pipeline.core.storage import write_table
from pipeline.evaluation import evaluate
from pipeline.retrieval import search
from pipeline.retrieval.model import Retriever, RetrieverSettings, make_tiny_encoder
from pipeline.retrieval.runs import read_run
from pipeline.workflow.ar2 import ar2_train_job
from pipeline.workflow.documents import settings_flag

THINGS = ["apple", "river", "castle", "violin", "rocket", "garden", "lantern", "harbor", "desert", "comet"]
PLACES = ["Paris", "Lima", "Oslo", "Cairo", "Quito", "Seoul", "Perth", "Dakar", "Hanoi", "Bern"]


def _encode(model: Path, corpus: Path, out: Path) -> None:
    """encode_corpus's two shard jobs, then gather_embeddings (the rules a round reuses)."""
    encode_corpus(model, corpus, out, 2, "--batch-size", "16", "--no-progress")


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
    _encode(root / "dpr", root / "corpus.parquet", root / "emb_dpr")
    return root


def _settings(d: Path, **over) -> dict:
    s = {
        **defaults(Ar2Settings),
        "rounds": 1,
        "top_k": 10,
        "negatives": 3,
        "batch_size": 2,
        "ranker_warmup_steps": 1,
        "ranker_steps": 2,
        "retriever_steps": 3,
        "retriever_lr": 1e-4,
        "ranker_lr": 1e-4,
        "adv_lambda": 0.5,
        "ranker": {"base": str(d / "tiny"), "max_len": 48},
        "checkpoint_every": 2,
        "keep_checkpoints": True,
    }
    s.update(over)
    return s


def _split(d: Path, split: str = "train") -> list[str]:
    return ["--queries", str(d / f"queries.{split}.parquet"), "--qrels", str(d / f"qrels.{split}.parquet")]


def _mine(d: Path, retriever: Path, embeddings: Path, out: Path) -> None:
    argv = ["--retriever", str(retriever), "--embeddings", str(embeddings), *_split(d)]
    argv += ["--corpus", str(d / "corpus.parquet"), "--top-k", "10", "--source", "test", "--out", str(out)]
    assert mine.main(argv) == 0


def _sieve(d: Path, negatives: Path, out: Path, model: Path, embeddings: Path | None) -> None:
    flags = {"candidates": 6, "pool": 10, "strict": False, "fallback": "random_one", "batch_size": 16}
    argv = [
        "--negatives",
        str(negatives),
        "--out",
        str(out),
        *_split(d),
        "--corpus",
        str(d / "corpus.parquet"),
    ]
    argv += ["--qrels-all", str(d / "qrels_all.train.parquet"), "--model", str(model)]
    argv += ["--settings-json", json.dumps({**flags, "seed": 0})]  # the rest: Ar2SieveJob's defaults
    if embeddings is not None:
        argv += ["--embeddings", str(embeddings)]
    assert sieving.main(argv) == 0


def _train_argv(
    d: Path, round_dir: Path, r: int, mined: Path, start: Path, settings: dict, **files
) -> list[str]:
    argv = ["--round", str(r), "--round-dir", str(round_dir)]
    argv += [
        "--mined",
        str(mined),
        *_split(d),
        "--corpus",
        str(d / "corpus.parquet"),
        "--retriever",
        str(start),
    ]
    # the document the workflow's job passes (a plain variant: uniform sampling), seed 0
    argv += shlex.split(settings_flag(ar2_train_job({"ar2": settings}, "plain", 0)))
    for name, path in files.items():
        argv += [f"--{name}", str(path)]
    return argv


def _search_dev(d: Path, retriever: Path, embeddings: Path, out: Path) -> None:
    """ar2_search_dev: exact search over the gathered shards, queries in fp32."""
    argv = ["--model", str(retriever), "--queries", str(d / "queries.dev.parquet"), "--out", str(out)]
    argv += [
        "--depth",
        "10",
        "--backend",
        "torch",
        "--embeddings",
        str(embeddings),
        "--settings-json",
        '{"amp": false}',
        "--no-progress",
    ]
    assert search.main(argv) == 0


def _dev(d: Path, round_dir: Path, retriever: Path, embeddings: Path, r: int) -> None:
    """ar2_search_dev + ar2_evaluate_dev + ar2_round."""
    run = round_dir / "run.dev.parquet"
    _search_dev(d, retriever, embeddings, run)
    argv = ["--run", str(run), *_split(d, "dev"), "--qrels-all", str(d / "qrels_all.dev.parquet")]
    argv += [
        "--corpus",
        str(d / "corpus.parquet"),
        "--dataset",
        "tiny",
        "--method",
        "ar2_sieve",
        "--split",
        "dev",
    ]
    assert evaluate.main([*argv, "--ks", "1", "5", "--out", str(round_dir / "metrics.json")]) == 0
    argv = [
        "--round",
        str(r),
        "--variant",
        "sieve",
        "--seed",
        "0",
        "--metrics",
        str(round_dir / "metrics.json"),
    ]
    if r == 0:
        argv += ["--start-retriever", str(retriever), "--start-embeddings", str(embeddings)]
    else:
        argv += [
            "--negatives-stats",
            str(round_dir / "negatives.stats.json"),
            "--sieve-stats",
            str(round_dir / "sieve.stats.json"),
        ]
        argv += ["--train-summary", str(round_dir / "train.summary.json")]
    assert round_summary.main([*argv, "--out", str(round_dir / "round.json")]) == 0


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    return Retriever.load(folder).state_dict()


def test_two_rounds_crash_resume_select(data, tmp_path, monkeypatch):
    settings = _settings(data, rounds=2)
    runs = tmp_path / "sieve"
    r0, r1, r2 = (runs / f"round{r}" for r in range(3))
    _dev(data, r0, data / "dpr", data / "emb_dpr", 0)
    assert json.loads((r0 / "round.json").read_text())["start"]["retriever"] == str(data / "dpr")

    # Round 1: DPR's candidates (in the DAG: ar2/start/, shared by variants and seeds), the sieve, training.
    _mine(data, data / "dpr", data / "emb_dpr", r1 / "negatives.parquet")
    negatives = pd.read_parquet(r1 / "negatives.parquet")
    # The annotated positive (d{i}a) is never a negative of its query; the false negative can be.
    assert not any(p == f"d{q[1:]}a" for q, p in zip(negatives["qid"], negatives["pid"]))
    _sieve(data, r1 / "negatives.parquet", r1 / "sieve.parquet", data / "dpr", data / "emb_dpr")
    sieve = pd.read_parquet(r1 / "sieve.parquet")
    assert {"similarity", "nce_loss", "threshold", "kept", "is_false_negative"} <= set(sieve.columns)
    argv1 = _train_argv(
        data, r1, 1, r1 / "negatives.parquet", data / "dpr", settings, sieve=r1 / "sieve.parquet"
    )

    # A crash in the middle of training, then the same command: the weights of an uninterrupted run.
    crashed = tmp_path / "crashed"
    argv_crashed = [str(crashed) if a == str(r1) else a for a in argv1]
    real_train = train_round.train_round

    def crashing(*args, **kwargs):
        def hook(step):
            if step == 3:
                raise RuntimeError("simulated crash")

        return real_train(*args, **kwargs, on_step_end=hook)

    monkeypatch.setattr(train_round, "train_round", crashing)
    with pytest.raises(RuntimeError, match="simulated crash"):
        train_round.main(argv_crashed)
    assert (crashed / "train.ckpt" / "state.pt").exists() and not (crashed / "retriever").exists()
    monkeypatch.setattr(train_round, "train_round", real_train)
    assert train_round.main(argv_crashed) == 0
    assert train_round.main(argv1) == 0
    ref_w, got_w = _weights(r1 / "retriever"), _weights(crashed / "retriever")
    assert all(torch.equal(ref_w[k], got_w[k]) for k in ref_w)
    assert json.loads((crashed / "train.summary.json").read_text())["start_step"] == 2
    assert not (r1 / "train.ckpt").exists()  # removed once the round is complete
    state = torch.load(r1 / "carry" / "state.pt", weights_only=True)
    assert set(state["state"]) == {"opt_retriever", "opt_ranker", "sched_retriever", "sched_ranker"}

    # A checkpoint written for other settings is discarded, never resumed.
    monkeypatch.setattr(train_round, "train_round", crashing)
    with pytest.raises(RuntimeError, match="simulated crash"):
        train_round.main(argv_crashed)
    monkeypatch.setattr(train_round, "train_round", real_train)
    other = _train_argv(
        data,
        crashed,
        1,
        r1 / "negatives.parquet",
        data / "dpr",
        _settings(data, rounds=2, retriever_steps=2),
        sieve=r1 / "sieve.parquet",
    )
    assert train_round.main(other) == 0
    summary = json.loads((crashed / "train.summary.json").read_text())
    assert summary["start_step"] == 0 and summary["retriever_steps"] == 2

    _encode(r1 / "retriever", data / "corpus.parquet", r1 / "embeddings")
    _dev(data, r1, r1 / "retriever", r1 / "embeddings", 1)
    record = json.loads((r1 / "round.json").read_text())
    assert record["train"]["ranker_steps"] == 3 and record["train"]["retriever_steps"] == 3
    assert record["sieve"]["candidates"] == 36 and set(record["timings_s"]) == {"mine", "sieve", "train"}

    # Round 2 mines with round 1's retriever and embeddings and continues its ranker and optimizers;
    # without round 1's optimizer state it is refused before any work.
    _mine(data, r1 / "retriever", r1 / "embeddings", r2 / "negatives.parquet")
    _sieve(data, r2 / "negatives.parquet", r2 / "sieve.parquet", data / "dpr", None)  # candidates encoded
    argv2 = _train_argv(
        data,
        r2,
        2,
        r2 / "negatives.parquet",
        r1 / "retriever",
        settings,
        sieve=r2 / "sieve.parquet",
        ranker=r1 / "ranker",
    )
    with pytest.raises(ConfigError, match="--carry"):
        train_round.main(argv2)
    assert train_round.main([*argv2, "--carry", str(r1 / "carry")]) == 0
    log = [json.loads(line) for line in (r2 / "train_log.jsonl").read_text().splitlines()]
    first = json.loads((r1 / "train_log.jsonl").read_text().splitlines()[-1])
    assert log[0]["phase"] == "ranker" and log[-1]["phase"] == "retriever"
    assert all(entry["round"] == 2 for entry in log) and first["round"] == 1
    _encode(r2 / "retriever", data / "corpus.parquet", r2 / "embeddings")
    _dev(data, r2, r2 / "retriever", r2 / "embeddings", 2)

    # Selection among trained rounds, info.json for the gather step, the test run.
    info_path = tmp_path / "ar2_sieve" / "info.json"
    argv = [
        "select",
        "--variant-dir",
        str(runs),
        "--variant",
        "sieve",
        "--rounds",
        "2",
        "--select-metric",
        "R@5",
    ]
    assert ar2_select.main([*argv, "--info-out", str(info_path), "--figure", str(tmp_path / "fig.png")]) == 0
    info = json.loads(info_path.read_text())
    assert info["selected_round"] in (1, 2)
    assert {"seed", "wall_time_s", "dev_metrics", "per_round"} <= set(info)
    assert (tmp_path / "fig.png").stat().st_size > 1000
    run_path = tmp_path / "ar2_sieve" / "run.test.parquet"
    argv = [
        "search",
        "--info",
        str(info_path),
        "--queries",
        str(data / "queries.test.parquet"),
        "--depth",
        "5",
    ]
    assert ar2_select.main([*argv, "--run-out", str(run_path)]) == 0
    run = read_run(run_path, {"q8", "q9"})
    assert len(run) == 10 and run["rank"].tolist()[:5] == [1, 2, 3, 4, 5]
    emb = np.concatenate([np.load(r2 / "embeddings" / f"shard{i}of2.npy") for i in (0, 1)])
    assert emb.shape[0] == 30


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


def test_round_one_starts_from_a_trained_ranker_when_given(data, tmp_path):
    """--ranker (ar2.ranker_init cross_encoder or listwise): round 1's ranker is that folder's, not a new head."""
    from pipeline.retrieval.ranker import Ranker, RankerSettings

    init = tmp_path / "trained_ranker"
    trained = Ranker.from_pretrained(str(data / "tiny"), RankerSettings(base="tiny", max_len=40), seed=7)
    with torch.no_grad():
        for p in trained.parameters():
            p.add_(0.5)  # a ranker no fresh initialisation reproduces
    trained.save(init)
    settings = _settings(data, ranker_warmup_steps=0, ranker_steps=1, retriever_steps=1, ranker_lr=1e-12)
    mined = tmp_path / "negatives.parquet"
    _mine(data, data / "dpr", data / "emb_dpr", mined)
    out = tmp_path / "round1"
    assert train_round.main(_train_argv(data, out, 1, mined, data / "dpr", settings, ranker=init)) == 0
    assert json.loads((out / "train.summary.json").read_text())["ranker_init"] == str(init)
    after = Ranker.load(out / "ranker")
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
    row = {
        "qid": ["nope"],
        "pid": ["d1a"],
        "rank": [1],
        "score": [0.5],
        "excluded": [False],
        "positive_score": [0.9],
    }
    pd.DataFrame(row).to_parquet(bad)
    with pytest.raises(DataError, match="'nope'"):
        load_round_data(bad, None, queries, data / "corpus.parquet", settings)
    with pytest.raises(DataError, match="its rule has not run"):
        round_summary.main(
            [
                "--round",
                "1",
                "--variant",
                "plain",
                "--seed",
                "0",
                "--metrics",
                str(tmp_path / "none.json"),
                "--out",
                str(tmp_path / "r.json"),
            ]
        )


def test_an_unwritable_round_folder_is_refused_before_training_starts(data, tmp_path, capsys):
    from pipeline.core.cli import run_main

    blocker = tmp_path / "results"
    blocker.write_text("a file where the results folder should be")
    argv = _train_argv(
        data, blocker / "round1", 1, tmp_path / "negatives.parquet", data / "dpr", _settings(data)
    )
    with pytest.raises(SystemExit) as exc:
        run_main(train_round.main, argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert str(blocker) in err and "not a folder" in err, err


def test_the_listwise_ranker_resumes_and_is_scored_beside_the_retriever(data, tmp_path, monkeypatch):
    """ar2.ranker_init listwise: the ranker trained on the DPR start's candidates, crashed and resumed to
    the weights of an uninterrupted run, then both rank the retriever's dev top n."""
    from pipeline.ar2 import train_ranker
    from pipeline.ar2.settings import AR2_RANKER_KEYS
    from pipeline.retrieval.ranker import Ranker

    mined, dev = tmp_path / "negatives.parquet", tmp_path / "run.dev.parquet"
    _mine(data, data / "dpr", data / "emb_dpr", mined)
    _search_dev(data, data / "dpr", data / "emb_dpr", dev)
    settings = _settings(
        data,
        listwise={
            "steps": 4,
            "lr": 1e-4,
            "batch_size": 2,
            "negatives": 3,
            "warmup_ratio": 0.1,
            "rerank_depth": 5,
        },
    )
    argv = [
        "--mined",
        str(mined),
        "--retriever",
        str(data / "dpr"),
        *_split(data),
        "--corpus",
        str(data / "corpus.parquet"),
        "--dev-run",
        str(dev),
    ]
    argv += [
        "--dev-queries",
        str(data / "queries.dev.parquet"),
        "--dev-qrels",
        str(data / "qrels.dev.parquet"),
    ]
    document = {**{key: settings[key] for key in AR2_RANKER_KEYS}, "seed": 0, "ks": [1, 5]}
    # a hand run's flags over the document, a nested section's key by key (the others stay the document's)
    document["listwise"] = {**document["listwise"], "steps": 9}
    argv += ["--settings-json", json.dumps(document), "--listwise-steps", "4"]
    assert train_ranker.main([*argv, "--out", str(tmp_path / "ref")]) == 0
    real, calls = train_ranker.ranker_step, []

    def crashing(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("simulated crash")
        return real(*args, **kwargs)

    monkeypatch.setattr(train_ranker, "ranker_step", crashing)
    with pytest.raises(RuntimeError, match="simulated crash"):
        train_ranker.main([*argv, "--out", str(tmp_path / "crashed")])
    monkeypatch.setattr(train_ranker, "ranker_step", real)
    assert train_ranker.main([*argv, "--out", str(tmp_path / "crashed")]) == 0
    report = json.loads((tmp_path / "crashed" / "rerank.dev.json").read_text())
    assert report["train"]["start_step"] == 2 and report["candidates"] == 5 and report["queries"] == 2
    assert report["train"]["steps"] == 4 and report["settings"]["listwise"] == settings["listwise"]
    assert set(report["retriever"]) == set(report["ranker"]) and "R@5" in report["ranker"]
    ref, got = Ranker.load(tmp_path / "ref").state_dict(), Ranker.load(tmp_path / "crashed").state_dict()
    assert all(torch.equal(ref[k], got[k]) for k in ref)
    reranked = pd.read_parquet(tmp_path / "crashed" / "rerank.dev.parquet")
    assert len(reranked) == 10 and sorted(reranked.groupby("qid")["rank"].max()) == [5, 5]
    assert not (tmp_path / "crashed.ckpt").exists()


def test_a_ranker_with_the_retriever_prior_starts_as_the_retriever(data):
    """ar2.ranker_prior retriever: D = cross-encoder + the mining retriever's logit, the head at zero, so
    before any step D's logits are the retriever's and it ranks exactly as the retriever does."""
    from pipeline.ar2.round_data import base_ranker
    from pipeline.ar2.train import StepBatch, batch_prior, ranker_logits
    from pipeline.core.settings.validation import from_dict

    settings = from_dict(
        Ar2Settings, {"ranker": {"base": str(data / "tiny"), "max_len": 32}, "ranker_prior": "retriever"}
    )
    ranker = base_ranker(settings, seed=0)
    batch = StepBatch(["q0"], ["where"] * 3, ["A", "B", "C"], ["x", "y", "z"], [12.5, 14.0, -3.0])
    prior = batch_prior(batch, 3, torch.device("cpu"))
    logits = ranker_logits(ranker, batch, 3, torch.device("cpu"), None, prior)
    assert torch.equal(logits, torch.tensor([[12.5, 14.0, -3.0]]))
    plain = base_ranker(
        from_dict(Ar2Settings, {"ranker": {"base": str(data / "tiny"), "max_len": 32}}), seed=0
    )
    assert plain.head.weight.abs().sum() > 0  # AR2's own ranker keeps BERT's initialisation

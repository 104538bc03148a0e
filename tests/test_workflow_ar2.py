"""pipeline/workflow/ar2.py: the AR2 rules' input files and flags, tested without Snakemake (issue 43.3)."""

from __future__ import annotations

import json
import re
import shlex
from types import SimpleNamespace

import pytest

from pipeline.ar2.settings import AR2_SIEVE_KEYS, ar2_recorded_settings
from pipeline.core.config import load_config, validate_config
from pipeline.core.methods import method_table
from pipeline.core.recipes import dataset_configs
from pipeline.workflow.ar2 import MINED_ROUND, TRAINED_ROUND, Ar2Rules
from pipeline.workflow.tables import WorkflowTables


class Named(dict):
    """What Snakemake hands a params function as ``input``: keys() and attribute access."""

    def __getattr__(self, name: str) -> str:
        return self[name]


def no_base(section, wildcards, name="base_model"):
    return {}


def local_base(section, wildcards, name="base_model"):
    return {name: f"resources/fingerprints/{section}.json"}


def jobs(overlay: dict | None = None, base_input=no_base) -> Ar2Rules:
    config = load_config()
    for key, value in (overlay or {}).items():
        config[key] = value
    validate_config(config, methods=lambda: method_table(config))
    return Ar2Rules(WorkflowTables(config, dataset_configs(config, methods=method_table)), base_input)


@pytest.fixture(scope="module")
def a() -> Ar2Rules:
    return jobs()


def wc(dataset="synthkb", variant="plain", seed="0", r="1", **more) -> SimpleNamespace:
    return SimpleNamespace(dataset=dataset, variant=variant, seed=seed, r=r, **more)


SEED0 = "results/synthkb/ar2/plain/seed0"


def test_wildcard_constraints(a):
    assert re.fullmatch(a.folders, "plain") and re.fullmatch(a.folders, "sieve_no_ccr")
    assert re.fullmatch(a.folders, "sieve_b0.5_warm") and not re.fullmatch(a.folders, "sieve_b0x5_warm")
    assert re.fullmatch(a.runs, "ar2_sieve_no_ccr") and not re.fullmatch(a.runs, "dpr")
    assert a.round_wildcards == {"variant": a.folders, "seed": r"\d+"}
    assert not a.keep_carry
    assert [r for r in range(12) if re.fullmatch(TRAINED_ROUND, str(r))] == list(range(1, 12))
    assert [r for r in range(12) if re.fullmatch(MINED_ROUND, str(r))] == list(range(2, 12))


def test_records(a):
    assert a.record("synthkb", "sieve_no_ccr").name == "ar2_sieve"
    assert a.sieves("synthkb", "sieve_no_ccr") and not a.sieves("synthkb", "plain")
    assert a.sieves("nq", "simans_sieve_b0.5_warm")
    assert a.variant(wc(variant="simans")) == "simans"
    assert a.method_name(wc(variant="sieve_no_ccr")) == "ar2_sieve"
    assert a.ar2_config(wc())["rounds"] == 2 and a.ar2_config(wc(dataset="nq"))["rounds"] == 16


def test_round_files(a):
    assert a.round_dir(wc(r="3")) == f"{SEED0}/round3"
    assert a.round_dir(wc(r="3"), 1) == f"{SEED0}/round1"
    # round 0 is the DPR start every variant and seed shares
    assert a.previous_model(wc(r="1")) == "results/synthkb/models/dpr/retriever.json"
    assert a.previous_model(wc(r="2")) == f"{SEED0}/round1/retriever/retriever.json"
    assert a.previous_embeddings(wc(r="1")).startswith("results/synthkb/")
    assert a.previous_embeddings(wc(r="3")) == f"{SEED0}/round2/embeddings/manifest.json"
    assert a.round_negatives(wc(r="1")) == "results/synthkb/ar2/start/negatives.parquet"
    assert a.round_negatives(wc(r="2")) == f"{SEED0}/round2/negatives.parquet"
    assert a.retriever_folder(wc()) == f"{SEED0}/round1/retriever"
    assert a.embeddings_folder(wc()) == f"{SEED0}/round1/embeddings"
    assert a.mine_source(wc(r="2")) == "ar2/plain/round2"


def test_round_shards(a):
    assert a.round_shard("npy") == (
        "results/{dataset}/ar2/{variant}/seed{seed}/round{r}/embeddings/shard{shard}of2.npy"
    )
    shards = a.round_shards()
    assert len(shards) == 4 and "{shard}" not in "".join(shards)
    assert shards[1].endswith("/embeddings/shard0of2.pids.parquet")


def test_mine_and_ranker_flags(a):
    flag, document = shlex.split(a.mine_flags(wc(dataset="nq")))
    assert flag == "--settings-json"  # one document, recorded and passed whole (issue 43)
    assert json.loads(document)["match"] == "string" and json.loads(document)["top_k"] == 100
    flag, ranker = shlex.split(a.ranker_flags(wc(seed="3")))
    ranker = json.loads(ranker)
    assert flag == "--settings-json" and (ranker["seed"], ranker["ks"], ranker["match"]) == (
        3,
        [1, 5, 20, 100],
        "string",
    )
    # the listwise ranker's ar2 keys, nested sections whole; select_metric only names the log's metric
    assert ranker["listwise"] == load_config()["ar2"]["listwise"] and "select_metric" not in ranker
    assert a.select_metric(wc(dataset="msmarco"), None) == "MRR@10"
    assert a.dev_qrels_all_flag(wc(), Named(dev_qrels_all="q.parquet")) == "--dev-qrels-all q.parquet"
    assert a.dev_qrels_all_flag(wc(), Named()) == ""


def test_sieve_inputs_and_flags(a):
    synth = a.sieve_inputs(wc(variant="sieve_no_ccr", r="1"))
    # sieve_init initial with sieve.scorer dpr: DPR judges, with its stored embeddings
    assert synth["model"] == "results/synthkb/models/dpr/retriever.json" and "model_embeddings" in synth
    assert synth["negatives"] == "results/synthkb/ar2/start/negatives.parquet" and "qrels_all" in synth
    nq = a.sieve_inputs(wc(dataset="nq", variant="sieve_b0.5_warm", r="2"))
    assert nq["model"] == "results/nq/ar2/sieve_b0.5_warm/seed0/round2/sieve_model/retriever.json"
    assert "model_embeddings" not in nq and "qrels_all" not in nq
    files = a.sieve_files(wc(), Named(model="m/retriever.json", model_embeddings="e/manifest.json"))
    assert files == "--model m --embeddings e"
    assert (
        a.sieve_files(wc(), Named(model="m/retriever.json", qrels_all="a b")) == "--model m --qrels-all 'a b'"
    )
    flag, document = shlex.split(a.sieve_flags(wc(seed="2")))
    sieve = json.loads(document)
    assert flag == "--settings-json" and (sieve["seed"], sieve["match"]) == (2, "string")
    assert sieve["candidates"] == load_config()["sieve"]["candidates"] and not sieve["suspect_same_article"]
    # the sieve's own keys only: the filters' settings (rank_window, ...) rerun no AR2 round
    assert set(sieve) == {*AR2_SIEVE_KEYS, "match", "seed", "suspect_same_article"}
    assert json.loads(shlex.split(a.sieve_flags(wc(dataset="squad")))[1])["suspect_same_article"]
    # sieve_init warm: the warm-up DPR; initial is never asked (only warm/current train a sieve model)
    assert a.sieve_model_start(wc(dataset="nq", r="3")) == "results/nq/models/dpr/retriever.json"


def test_select_and_curve_settings(a):
    # ar2_select reads the round count and the selecting metric, the learning curve the round count
    # of the job's dataset: nq's recipe trains 16 rounds, the demo's synthkb its own count
    flag, document = shlex.split(a.select_settings(wc(dataset="nq")))
    nq = a.w.cfg("nq")["ar2"]
    assert flag == "--settings-json" and nq["rounds"] == 16
    assert json.loads(document) == {"rounds": 16, "select_metric": nq["select_metric"]}
    synthkb = a.w.cfg("synthkb")["ar2"]["rounds"]
    assert synthkb != 16 and json.loads(shlex.split(a.curve_settings(wc()))[1]) == {"rounds": synthkb}


def test_sieve_model_start_current():
    a = jobs({"ar2": {**load_config()["ar2"], "sieve_init": "current"}})
    assert a.sieve_model_start(wc(r="3")) == f"{SEED0}/round2/retriever/retriever.json"


def test_ranker_inputs(a):
    inputs = a.ranker_inputs(wc())
    assert inputs["mined"] == "results/synthkb/ar2/start/negatives.parquet"
    assert inputs["dev_run"] == "results/synthkb/ar2/start/run.dev.parquet"
    assert "dev_qrels_all" in inputs and "base_ranker" not in inputs
    assert "dev_qrels_all" not in a.ranker_inputs(wc(dataset="nq"))
    with_base = jobs(base_input=local_base).ranker_inputs(wc())
    assert with_base["base_ranker"] == "resources/fingerprints/ar2.ranker.json"


def test_train_inputs(a):
    first = a.train_inputs(wc(r="1"))
    # synthkb: ranker_init base, no local base folder: no ranker file; round 1 starts from DPR
    assert "ranker" not in first and "carry" not in first and "sieve" not in first
    assert first["retriever"] == "results/synthkb/models/dpr/retriever.json"
    later = a.train_inputs(wc(variant="sieve_no_ccr", r="2"))
    base = "results/synthkb/ar2/sieve_no_ccr/seed0"
    assert later["ranker"] == f"{base}/round1/ranker/ranker.json"
    assert (
        later["carry"] == f"{base}/round1/carry/state.pt" and later["sieve"] == f"{base}/round2/sieve.parquet"
    )
    assert a.train_inputs(wc(dataset="nq", seed="1"))["ranker"] == "results/nq/ar2/ranker/seed1/ranker.json"
    assert jobs(base_input=local_base).train_inputs(wc())["base_ranker"].endswith("ar2.ranker.json")
    files = a.train_files(wc(), Named(retriever="r/retriever.json", sieve="s.parquet", carry="c/state.pt"))
    assert files == "--retriever r --sieve s.parquet --carry c"


def test_train_flags_and_amp(a):
    simans = json.loads(shlex.split(a.train_flags(wc(variant="simans", seed="4")))[1])
    assert (simans["sampling"], simans["seed"]) == ("simans", 4) and "simans" in simans
    plain = json.loads(shlex.split(a.train_flags(wc()))[1])
    # uniform sampling never reads ar2.simans: not recorded, so a changed one reruns no plain round
    assert (plain["sampling"], plain["seed"]) == ("uniform", 0) and "simans" not in plain
    assert plain == {
        **ar2_recorded_settings(load_config()["ar2"], "uniform"),
        "sampling": "uniform",
        "seed": 0,
    }
    # the round's corpus encoding: section encode's document at ar2.encode_batch_size and ar2.precision
    encode = json.loads(shlex.split(a.encode_settings(wc()))[1])
    ar2 = load_config()["ar2"]
    assert encode["amp"] and encode["batch_size"] == ar2["encode_batch_size"]
    assert encode["sort_buffer"] == load_config()["encode"]["sort_buffer"]
    fp32 = jobs({"ar2": {**ar2, "precision": "fp32"}})
    assert not json.loads(shlex.split(fp32.encode_settings(wc()))[1])["amp"]


def test_dev_and_round_records(a):
    dev = a.round_dev_inputs(wc(r="2"))
    assert dev["run"] == f"{SEED0}/round2/run.dev.parquet" and "qrels_all" in dev
    start = a.start_dev_inputs(wc(dataset="nq"))
    assert start["run"] == "results/nq/ar2/start/run.dev.parquet" and "qrels_all" not in start
    zero = a.round_record_inputs(wc(r="0"))
    assert zero["metrics"] == "results/synthkb/ar2/start/metrics.dev.json" and "start_model" in zero
    one = a.round_record_inputs(wc(variant="sieve_no_ccr", r="1"))
    assert one["negatives_stats"] == "results/synthkb/ar2/start/negatives.stats.json" and "sieve_stats" in one
    assert a.round_record_inputs(wc(r="2"))["negatives_stats"] == f"{SEED0}/round2/negatives.stats.json"
    files = a.round_record_files(wc(), Named(negatives_stats="n.json", train_summary="t.json", metrics="m"))
    assert files == "--negatives-stats n.json --train-summary t.json"
    files = a.round_record_files(
        wc(), Named(start_model="m/retriever.json", start_embeddings="e/manifest.json")
    )
    assert files == "--start-retriever m --start-embeddings e"


def test_per_method(a):
    w = SimpleNamespace(dataset="synthkb", method="ar2_sieve_no_ccr", seed="0")
    assert a.seed_rounds(w) == [
        f"results/synthkb/ar2/sieve_no_ccr/seed0/round{r}/round.json" for r in range(3)
    ]
    assert a.seed_dir(w) == "results/synthkb/ar2/sieve_no_ccr/seed0" and a.method_variant(w) == "sieve"
    assert a.seed_metrics(w) == ["results/synthkb/ar2_sieve_no_ccr/seed0/metrics.json"]
    assert a.seed_infos(w) == ["results/synthkb/ar2_sieve_no_ccr/seed0/info.json"]
    three = jobs({"seeds": [0, 1, 2]})
    assert len(three.seed_infos(w)) == 3


def test_learning_curve(a):
    curves = a.curves(SimpleNamespace(dataset="synthkb"))
    assert [label for label, _, _ in curves] == ["plain", "sieve"]
    assert a.curve_infos(SimpleNamespace(dataset="synthkb")) == [info for _, _, info in curves]
    assert a.curve_args(SimpleNamespace(dataset="synthkb")) == (
        "--variant plain=results/synthkb/ar2/plain/seed0 --variant sieve=results/synthkb/ar2/sieve_no_ccr/seed0"
    )
    seeded = jobs({"seeds": [0, 1]}).curves(SimpleNamespace(dataset="nq"))
    assert [label for label, _, _ in seeded] == [
        "simans/seed0",
        "simans/seed1",
        "simans_sieve/seed0",
        "simans_sieve/seed1",
    ]

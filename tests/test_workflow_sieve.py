"""pipeline/workflow/sieve.py and evaluation.py: the sieve's, evaluation's and hybrids' lookups, tested
without Snakemake on the default config (issue 43.3)."""

from __future__ import annotations

import json
import shlex
from types import SimpleNamespace

import pytest

from pipeline.core.config import load_config, validate_config
from pipeline.core.methods import method_table
from pipeline.core.recipes import dataset_configs
from pipeline.workflow.evaluation import (
    EvaluationRules,
    fusion_arg,
    fusion_choice,
    qrels_all_arg,
    weighted_io,
)
from pipeline.workflow.sieve import SieveRules, filter_model_arg, pairs_arg
from pipeline.workflow.tables import WorkflowTables


@pytest.fixture(scope="module")
def w() -> WorkflowTables:
    config = load_config()
    validate_config(config, methods=lambda: method_table(config))
    return WorkflowTables(config, dataset_configs(config, methods=method_table))


@pytest.fixture(scope="module")
def s(w) -> SieveRules:
    return SieveRules(w)


@pytest.fixture(scope="module")
def e(w) -> EvaluationRules:
    return EvaluationRules(w)


class Namedlist(dict):
    """Snakemake's input/output namespace as the params functions read it: keys(), [key], .key."""

    def __init__(self, fromdict: dict):
        super().__init__(fromdict)

    def __getattr__(self, key: str) -> str:
        return self[key]


def job(**wildcards) -> SimpleNamespace:
    return SimpleNamespace(**wildcards)


def test_the_default_sources_pass_the_start_up_check(s):
    s.check_sources()
    assert s.sieve_config("synthkb") is s.w.cfg("synthkb")["sieve"]


def test_candidates_read_the_sources_negatives_with_exact_labels_on_synthkb(s):
    inputs = s.candidate_inputs(job(dataset="synthkb", stag=""))
    assert inputs["negatives"] == s.source_negatives(job(dataset="synthkb"))
    assert inputs["negatives"].endswith("bm25.parquet") and "qrels_all" in inputs
    assert "qrels_all" not in s.candidate_inputs(job(dataset="nq", stag=s.w.sieve_tags("nq")))
    with pytest.raises(ValueError, match="sieve tag '_x' was asked for"):
        s.candidate_inputs(job(dataset="synthkb", stag="_x"))


def test_settings_carry_the_seed_and_the_squad_flag(s, w):
    candidates = json.loads(shlex.split(s.candidate_settings(job(dataset="synthkb")))[1])
    assert candidates["seed"] == w.config["seed"] and not candidates["suspect_same_article"]
    assert json.loads(shlex.split(s.candidate_settings(job(dataset="squad")))[1])["suspect_same_article"]
    flag, document = shlex.split(s.sieve_settings(job(dataset="synthkb")))
    assert flag == "--settings-json" and json.loads(document)["seed"] == w.config["seed"]
    cross_encoder = json.loads(shlex.split(s.cross_encoder_settings(job(dataset="synthkb")))[1])
    assert cross_encoder["seed"] == w.config["seed"] and "threshold" not in cross_encoder


def test_filters_inputs_and_settings(s):
    rank = s.filter_inputs(job(dataset="synthkb", filter="rank_window", stag=""))
    assert set(rank) == {"candidates", "corpus", "queries"}
    assert (
        s.filter_inputs(job(dataset="synthkb", filter="positive_aware", stag=""))["model"].endswith(
            "models/dpr/config.json"
        )
        or "dpr" in s.filter_inputs(job(dataset="synthkb", filter="positive_aware", stag=""))["model"]
    )
    assert (
        "cross_encoder" in s.filter_inputs(job(dataset="synthkb", filter="cross_encoder", stag=""))["model"]
    )
    with pytest.raises(ValueError, match="oracle needs exact false-negative labels"):
        s.filter_inputs(job(dataset="nq", filter="oracle", stag=s.w.sieve_tags("nq")))
    rank_window = json.loads(shlex.split(s.filter_settings(job(dataset="synthkb", filter="rank_window")))[1])
    assert rank_window == {"seed": s.config["seed"], "batch_size": 64, "start": 10}
    assert filter_model_arg(None, Namedlist(fromdict={"model": "a/b/config.json"})) == "--model a/b"
    assert filter_model_arg(None, Namedlist(fromdict={"candidates": "c"})) == ""


def test_the_comparison_rows_and_the_sweep(s):
    names = s.filter_names("synthkb")
    assert names[: len(s.sieve_config("synthkb")["filters"])] == list(s.sieve_config("synthkb")["filters"])
    tags = s.sweep_tags("synthkb", job(dataset="synthkb", stag=s.w.sieve_tags("synthkb", True)))
    assert tags and all(t in s.w.ccr_betas["synthkb"] for t in tags)
    wc = job(dataset="synthkb", stag=s.w.sieve_tags("synthkb", True))
    assert len(s.comparison_reports(wc)) == len(names)
    assert len(s.figure_losses(wc)) == len(s.figure_sieves(wc)) == len(tags)
    assert all(p.endswith(".parquet") for p in s.figure_sieves(wc))
    assert set(s.tradeoff_filters("synthkb")) <= set(names)
    assert len(s.tradeoff_decisions(wc)) == len(s.tradeoff_filters("synthkb"))
    assert s.tradeoff_reference(wc) in names
    # `sieve` is the sieve dpr_sieve trains on: the demo's scores with models/dpr (sieve_no_ccr, a filter's
    # decisions); a sieve at a β is a negatives file
    assert s.decisions("synthkb", "sieve") == "results/synthkb/sieve/sieve_no_ccr/decisions.parquet"
    assert "/negatives/" in s.decisions("synthkb", "sieve_b6")
    assert pairs_arg(["a", "b"], ["x", "y"]) == "a=x b=y"


def test_clean_entries(w):
    rules = SieveRules(SimpleNamespace(config={**w.config, "clean": {"mine": {"source": "neg.jsonl"}}}))
    spec = rules.clean_spec(job(clean="mine", ext="jsonl"))
    assert spec["source"] == "neg.jsonl"
    # a file that is not there is its own input (Snakemake names it); one that is, its fingerprint
    assert rules.clean_inputs(job(clean="mine", ext="jsonl"), "fp:{}".format) == {
        "source_sha256": "neg.jsonl"
    }
    assert rules.clean_source(job(clean="mine", ext="jsonl")) == "neg.jsonl"
    assert rules.clean_labels(job(clean="mine", ext="jsonl")) == ""
    assert rules.clean_settings(job(clean="mine", ext="jsonl")).startswith("--settings-json ")
    with pytest.raises(ValueError, match="is not a .parquet file"):
        rules.clean_spec(job(clean="mine", ext="parquet"))


def test_evaluate_inputs_and_unknown_runs(e, w):
    inputs = e.evaluate_inputs(job(dataset="synthkb", run="bm25"))
    assert {"run", "queries", "qrels", "corpus", "qrels_all"} <= set(inputs)
    assert inputs["queries"] == w.split_tables("synthkb", w.eval_split("synthkb"))["queries"]
    with pytest.raises(ValueError, match="run folder is dpr_ccr_b6"):
        e.check_run("synthkb", "dpr_ccr")
    with pytest.raises(ValueError, match="unknown method or run 'nosuch'"):
        e.check_run("synthkb", "nosuch")
    assert qrels_all_arg(None, Namedlist(fromdict={"qrels_all": "q"})) == "--qrels-all q"
    assert fusion_arg(None, Namedlist(fromdict={"run": "r"})) == ""


def test_gathering_every_method(e, w):
    wc = job(dataset="synthkb")
    methods = w.cfg("synthkb")["methods"]
    assert len(e.gathered_metrics(wc)) == len(methods)
    assert e.method_seeds("synthkb", "bm25") == [None]
    assert len(e.per_query_files(wc)) == len(e.query_values("synthkb")) >= len(methods)
    assert e.gather_inputs_arg(wc, SimpleNamespace(metrics=["a", "b"])).startswith(f"{methods[0]}=a")
    assert "=" in e.per_query_arg(wc)
    trec = e.trec_exports(wc)
    assert trec == [] or trec[0].endswith(".trec") or "qrels" in trec[0]
    assert e.seed_metrics(job(dataset="synthkb", method="dpr")) and isinstance(e.seeded_methods(), list)


def test_hybrids(e, w):
    assert fusion_choice("d", "m", "test").endswith("fusion.test.json")
    out = weighted_io(
        None, Namedlist(fromdict={"dev_sparse": "s", "corpus": "c"}), SimpleNamespace(choice="f")
    )
    assert out == "--dev-sparse s --corpus c --choice-out f"
    for fusion in ("rrf", "wsum"):
        for name in e.hybrid_methods(fusion):
            d = next(d for d in w.datasets if name.replace("\\", "") in w.runs[d])
            split = "dev" if w.cfg(d)["hybrid"]["select_split"] != "dev" else "test"
            inputs = e.hybrid_inputs(job(dataset=d, method=name.replace("\\", ""), split=split))
            assert {"sparse", "dense"} <= set(inputs)
            if fusion == "wsum":
                assert "dev_sparse" in inputs

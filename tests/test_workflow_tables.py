"""pipeline/workflow/tables.py: what the rules look up, tested without Snakemake (issue 43.3)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pipeline.core.config import load_config, validate_config
from pipeline.core.methods import method_table
from pipeline.core.recipes import dataset_configs
from pipeline.core.settings.base import ConfigError
from pipeline.workflow.evaluation import EvaluationRules
from pipeline.workflow.tables import WorkflowTables, alternatives, faiss_gpu_flag, job_device


def tables(overlay: dict | None = None) -> WorkflowTables:
    config = load_config()
    for key, value in (overlay or {}).items():
        config[key] = value
    validate_config(config, methods=lambda: method_table(config))
    return WorkflowTables(config, dataset_configs(config, methods=method_table))


@pytest.fixture(scope="module")
def w() -> WorkflowTables:
    return tables()


def test_each_dataset_runs_with_its_recipe(w):
    assert (
        w.cfg("synthkb")["model"]["base"] == "minilm" and w.cfg("nq")["model"]["base"] == "bert-base-uncased"
    )
    assert w.cfg("nq")["sieve"]["gpus"] == 1 and w.cfg("synthkb")["sieve"]["gpus"] == 0
    assert w.dataset_setting("dpr", "threads")(SimpleNamespace(dataset="nq")) == 16
    assert w.eval_split("synthkb") == "test"
    assert "synthkb" in w.synthetic and "nq" in w.declared and "synthkb" not in w.declared


def test_the_demo_sieve_and_its_names(w):
    # sieve.scorer dpr: the demo's dpr_sieve is the sieve scored by models/dpr
    assert w.run_of("synthkb", "dpr_sieve") == "dpr_sieve_no_ccr"
    assert w.run_of("synthkb", "dpr_ccr") == "dpr_ccr_b6"
    assert w.sieve_source("synthkb") == "bm25" and w.sieve_tags("synthkb") == ""
    w.check_sieve_tag(SimpleNamespace(dataset="synthkb", stag=""))
    with pytest.raises(ValueError, match="sieve tag '_pool200' was asked for"):
        w.check_sieve_tag(SimpleNamespace(dataset="synthkb", stag="_pool200"))
    assert "6" in w.ccr_betas["synthkb"] and w.ccr_betas["synthkb"]["6"] == 6


def test_seeds_and_seeded_folders():
    one = tables()
    assert one.training_seeds("synthkb") == [0] and one.seeded_runs("synthkb") == []
    assert one.seeded_model("dpr", 0) == "dpr" and one.seeded_model("dpr", 2) == "dpr-s2"
    assert one.seeded_model("dpr", "{seed}") == "dpr-s{seed}"
    three = tables({"seeds": [0, 1, 2]})
    assert three.training_seeds("synthkb") == [0, 1, 2] and three.ar2_seeds("synthkb") == [0, 1, 2]
    assert "dpr" in three.seeded_runs("synthkb") and "bm25" not in three.seeded_runs("synthkb")
    assert {"bm25", "zeroshot"} <= set(three.seed_free_methods("synthkb"))
    assert "dpr" not in three.seed_free_methods("synthkb")


def test_a_dataset_s_own_seeds_override_the_top_level_ones():
    """datasets.<d>.seeds: five seeds where a comparison needs them, the top-level list elsewhere."""
    config = load_config()
    config["seeds"] = [0, 1, 2]
    config["datasets"]["synthkb"]["seeds"] = [0, 1, 2, 3, 4]
    config["datasets"]["nq"]["seeds"] = [7]
    validate_config(config, methods=lambda: method_table(config))
    w = WorkflowTables(config, dataset_configs(config, methods=method_table))
    assert w.training_seeds("synthkb") == [0, 1, 2, 3, 4] and w.ar2_seeds("synthkb") == [0, 1, 2, 3, 4]
    assert w.training_seeds("msmarco") == [0, 1, 2]
    # one seed other than the top-level one trains with that seed in its own folders ...
    assert (
        w.training_seeds("nq") == [7] and "dpr" in w.seeded_runs("nq") and "dpr" in w.seeded_runs("synthkb")
    )
    rules = EvaluationRules(w)
    assert rules.seed_metrics(SimpleNamespace(dataset="nq", method="dpr")) == [
        "results/nq/dpr/seed7/metrics.json"
    ]
    # ... and the top-level seed alone keeps the plain folders, whatever the other datasets run
    config["datasets"]["nq"]["seeds"] = [0]
    w = WorkflowTables(config, dataset_configs(config, methods=method_table))
    rules = EvaluationRules(w)
    assert w.seeded_runs("nq") == [] and "nq" not in rules.seeded_datasets()
    assert {"synthkb", "msmarco"} <= set(rules.seeded_datasets())
    assert rules.seed_metrics(SimpleNamespace(dataset="synthkb", method="dpr")) == [
        f"results/synthkb/dpr/seed{s}/metrics.json" for s in range(5)
    ]
    config["datasets"]["synthkb"]["seeds"] = [1, 1]
    with pytest.raises(ConfigError, match="datasets.synthkb.seeds"):
        validate_config(config, methods=lambda: method_table(config))


def test_gpus_follow_the_section_and_what_the_job_runs(w):
    resources = w.gpu_resources("sieve", used=lambda c, wildcards: wildcards.filter != "rank_window")
    nq = SimpleNamespace(dataset="nq", filter="sieve_no_ccr")
    assert resources["gpus"](nq) == resources["gpu"](nq) == 1 and resources["mem_mb"](nq) == 4000
    assert resources["gpus"](SimpleNamespace(dataset="nq", filter="rank_window")) == 0
    assert resources["gpus"](SimpleNamespace(dataset="synthkb", filter="sieve_no_ccr")) == 0


def test_a_job_device_follows_its_resources():
    assert (
        job_device(None, SimpleNamespace(gpus=2)) == "cuda"
        and faiss_gpu_flag(None, SimpleNamespace(gpus=1)) == ""
    )
    assert (
        job_device(None, SimpleNamespace(gpus=0)) == "cpu"
        and faiss_gpu_flag(None, SimpleNamespace()) == "--no-gpu"
    )


def test_alternatives_of_nothing_match_nothing():
    import re

    assert alternatives(["a", "b"]) == "a|b"
    assert re.fullmatch(alternatives([]), "") is None and re.fullmatch(alternatives([]), "x") is None

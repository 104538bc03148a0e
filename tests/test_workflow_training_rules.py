"""pipeline/workflow/training.py's TrainingRules and pipeline/workflow/retrieval.py's RetrievalRules:
the params and inputs of the training, BM25, search and mining rules, without Snakemake."""

from __future__ import annotations

import json
import shlex
from types import SimpleNamespace

import pytest
from test_workflow_tables import tables

from pipeline.workflow.retrieval import RetrievalRules
from pipeline.workflow.training import TrainingRules


class Wild(SimpleNamespace):
    def keys(self):
        return vars(self).keys()

    def __getitem__(self, key):
        return getattr(self, key)


def _document(flag: str) -> dict:
    words = shlex.split(flag)
    return json.loads(words[words.index("--settings-json") + 1])


@pytest.fixture(scope="module")
def rules() -> TrainingRules:
    return TrainingRules(tables(), lambda section, wildcards: {})


def test_a_ccr_model_of_the_sweep_trains_at_its_own_beta_and_seed(rules):
    flag = rules.settings("ccr")(Wild(dataset="synthkb", beta="0.5", seed="2"))
    document = _document(flag)
    assert document["objective"]["beta"] == 0.5 and document["seed"] == 2 and document["section"] == "ccr"
    assert _document(rules.settings("dpr")(Wild(dataset="synthkb")))["seed"] == 0


def test_dpr_trains_unless_skipped_and_names_its_tables(rules):
    wild = Wild(dataset="synthkb")
    assert rules.dpr_settings(wild).startswith("--init minilm --settings-json")
    assert set(rules.dpr_inputs(wild)) == {"queries", "qrels", "corpus", "negatives"}
    assert rules.dpr_trains(rules.t.cfg("synthkb"), wild)
    skipped = {"dpr": {"skip": True}}
    assert rules.dpr_skipped(skipped) and not rules.dpr_trains(skipped, wild)


def test_dpr_rcl_refuses_a_folder_of_another_beta(rules):
    assert "objective" in _document(rules.rcl_settings(Wild(dataset="synthkb", rcl_beta="0.5")))
    with pytest.raises(ValueError, match="set dpr.rcl.beta to build another"):
        rules.rcl_settings(Wild(dataset="synthkb", rcl_beta="3"))


def test_the_recipe_is_a_label_of_the_dataset(rules):
    assert rules.recipe_label(Wild(dataset="nq"), None) == "--recipe paper"
    assert rules.base(Wild(dataset="nq")) == "bert-base-uncased"


def test_retrieval_rules_read_bm25_and_search_settings():
    r = RetrievalRules(tables())
    wild = Wild(dataset="synthkb", method="dpr", split="test")
    assert _document(r.bm25_settings("index")(wild))["k1"] == 0.9 and r.exclude_answer_match_flag(wild) == ""
    assert r.exclude_answer_match_flag(Wild(dataset="nq")) == "--exclude-answer-match"
    inputs = r.search_inputs(wild)
    assert inputs["index"].endswith("index/dpr/index.json") and "embeddings" not in inputs
    assert r.search_source(wild, SimpleNamespace(keys=lambda: ["index"], index=inputs["index"])).startswith(
        "--backend faiss --index results/synthkb/index/dpr"
    )
    assert r.mining_depth(wild).startswith("1 --mining-negatives 100 --mining-qrels")
    assert "dpr" in r.mining_sources() and "zeroshot" in r.mining_sources()

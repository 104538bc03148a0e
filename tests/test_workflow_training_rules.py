"""pipeline/workflow/training.py's TrainingRules and pipeline/workflow/retrieval.py's RetrievalRules:
the params and inputs of the training, BM25, search and mining rules, without Snakemake."""

from __future__ import annotations

import json
import shlex
from types import SimpleNamespace

import pytest
from test_workflow_tables import tables

from pipeline.core.config import load_config
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
    flag = rules.settings("ccr", lambda w: f"dpr_ccr_b{w.beta}")(
        Wild(dataset="synthkb", beta="0.5", seed="2")
    )
    document = _document(flag)
    assert document["objective"]["beta"] == 0.5 and document["seed"] == 2 and document["section"] == "ccr"
    assert _document(rules.settings("dpr", lambda w: "dpr_none")(Wild(dataset="synthkb")))["seed"] == 0


def test_only_a_training_a_selection_reads_keeps_snapshots():
    """selection.checkpoints: the trained folder of a <trained>_wise* in methods (or of the run a hybrid
    fuses) keeps snapshots, seeds included; a model nothing selects from trains as without the setting."""
    config = load_config()
    methods = ["bm25", "dpr", "dpr_wise", "dpr_ccr", "dpr_rank_window", "hybrid_wsum_dpr_sieve_wise"]
    r = TrainingRules(
        tables({"methods": methods, "selection": {**config["selection"], "checkpoints": 2}}), None
    )
    wild = Wild(dataset="synthkb", seed="3")
    assert _document(r.dpr_settings(Wild(dataset="synthkb")))["snapshots"] == 2
    assert _document(r.settings("dpr", lambda w: "dpr")(wild))["snapshots"] == 2
    assert "snapshots" not in _document(r.settings("dpr", lambda w: "dpr_rank_window")(wild))
    assert "snapshots" not in _document(
        r.settings("ccr", lambda w: f"dpr_ccr_b{w.beta}")(Wild(dataset="synthkb", beta="0.5"))
    )
    # the hybrid fuses dpr_sieve_wise, which selects from the sieve's DPR
    sieve_model = r.t.methods["synthkb"]["dpr_sieve"].model
    assert _document(r.settings("dpr", lambda w: sieve_model)(wild))["snapshots"] == 2
    assert "snapshots" not in _document(r.settings("ccr", None)(Wild(dataset="synthkb", beta="0.5")))
    # the one printer prints what the rules pass
    from pipeline.workflow.jobs import STAGE_DOCUMENTS

    args = SimpleNamespace(seed=None, beta=None)
    assert STAGE_DOCUMENTS["train_dpr"](r.t, "synthkb", args)["snapshots"] == 2
    assert "snapshots" not in STAGE_DOCUMENTS["train_ccr"](r.t, "synthkb", args)


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
    assert _document(r.bm25_settings("index")(wild))["k1"] == 0.9
    # dense mining: BM25 mining's document, the dataset's (nq's recipe excludes answer matches)
    assert not _document(r.mine_settings(wild))["exclude_answer_match"]
    assert _document(r.mine_settings(Wild(dataset="nq")))["exclude_answer_match"]
    inputs = r.search_inputs(wild)
    assert inputs["index"].endswith("index/dpr/index.json") and "embeddings" not in inputs
    over_index = SimpleNamespace(keys=lambda: ["index"], index=inputs["index"])
    assert r.search_source(wild, over_index).startswith("--backend faiss --index results/synthkb/index/dpr")
    # the search's document: the backend's own knobs (no chunk_rows over an index, no nprobe over embeddings)
    assert _document(r.search_settings(wild)) == {
        "depth": 100,
        "batch_size": 128,
        "nprobe": 32,
        "ef_search": 128,
        "amp": True,
    }
    assert _document(r.ar2_dev_search_settings(wild)) == {
        "depth": 100,
        "batch_size": 128,
        "chunk_rows": 65536,
        "amp": False,
    }
    # a mining search: the train qrels with the paths, the negatives (not a depth) in the document
    mining = SimpleNamespace(**vars(over_index), mining_qrels="resources/synthkb/qrels.train.parquet")
    mining.keys = over_index.keys
    assert r.mining_source(wild, mining).endswith(" --mining-qrels resources/synthkb/qrels.train.parquet")
    document = _document(r.mining_search_settings(wild))
    assert "depth" not in document and document["negatives"] == 100 and not document["exclude_answer_match"]
    assert _document(r.depth_settings(wild)) == {"depth": 100}
    assert "dpr" in r.mining_sources() and "zeroshot" in r.mining_sources()


def test_the_one_printer_prints_each_training_rule_s_document(rules, capsys):
    """Training has no printer of its own: python -m pipeline.workflow.jobs prints what each training
    rule passes (at the printer's --seed and, train_ccr, --beta)."""
    from pipeline.workflow import jobs

    t = rules.t
    rcl_beta = rules.rcl_tags["synthkb"]
    passed = {
        ("train_dpr",): rules.dpr_settings(Wild(dataset="synthkb")).split(" ", 2)[2],
        ("train_ccr", "--beta", "0.5", "--seed", "2"): rules.settings("ccr", lambda w: f"dpr_ccr_b{w.beta}")(
            Wild(dataset="synthkb", beta="0.5", seed="2")
        ),
        ("train_dpr_rcl",): rules.rcl_settings(Wild(dataset="synthkb", rcl_beta=rcl_beta)),
        ("train_dpr_relabel",): rules.relabel_settings(Wild(dataset="synthkb", negs="rank_window")),
        ("init_zeroshot",): rules.init_settings(Wild(dataset="synthkb")),
    }
    for argv, flag in passed.items():
        assert jobs.main(["synthkb", *argv]) == 0
        assert json.loads(capsys.readouterr().out) == _document(flag), argv
    assert "train_ccr" in jobs.STAGES and t.config["seed"] == 0


@pytest.mark.parametrize(
    "model, seed, start, trained, labels",
    [
        # a DPR from the base starts from the zero-shot model, seed-free whatever the seed
        ("dpr_wise", None, "zeroshot", "dpr", "qrels"),
        ("dpr_wise_truth", None, "zeroshot", "dpr", "qrels_all"),
        ("dpr_wise_truth", "1", "zeroshot", "dpr-s1", "qrels_all"),
        # a CCR fine-tune starts from models/dpr, a seed's from that seed's dpr
        ("dpr_ccr_b6_wise", None, "dpr", "dpr_ccr_b6", "qrels"),
        ("dpr_ccr_b6_wise_truth", "2", "dpr-s2", "dpr_ccr_b6-s2", "qrels_all"),
        # a filtered DPR (the demo's dpr_sieve: the sieve scored by models/dpr) starts from the base
        ("dpr_sieve_no_ccr_wise", None, "zeroshot", "dpr_sieve_no_ccr", "qrels"),
    ],
)
def test_a_selection_reads_the_start_of_its_training_and_the_labels_its_name_says(
    rules, model, seed, start, trained, labels
):
    wild = Wild(dataset="synthkb", model=model, **({"seed": seed} if seed else {}))
    inputs = rules.select_inputs(wild)
    assert inputs == {
        "start": f"results/synthkb/models/{start}/retriever.json",
        "trained": f"results/synthkb/models/{trained}/retriever.json",
        "queries": "resources/synthkb/queries.dev.parquet",
        "qrels": f"resources/synthkb/{labels}.dev.parquet",
        "corpus": "resources/synthkb/corpus.parquet",
        "candidates": "results/synthkb/bm25/run.dev.parquet",
    }
    assert model in rules.selected_models
    assert _document(rules.select_settings(wild)) == {
        "alphas": [0.0, 0.25, 0.5, 0.75, 1.0],
        "metric": "hit@1",
        "depth": 100,
        "match": "string",
        "batch_size": 64,
        "amp": True,
    }


def test_a_truth_selection_of_a_dataset_without_the_truth_is_refused(rules):
    assert (
        rules.select_inputs(Wild(dataset="nq", model="dpr_wise"))["qrels"] == "resources/nq/qrels.dev.parquet"
    )
    with pytest.raises(ValueError, match="only a synthetic dataset has"):
        rules.select_inputs(Wild(dataset="nq", model="dpr_wise_truth"))
    with pytest.raises(ValueError, match="no <trained>_wise method selects it"):
        rules.select_inputs(Wild(dataset="synthkb", model="zeroshot_wise"))

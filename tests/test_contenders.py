"""Issue 41's contenders: their method records, their rules' lookups, the relabel stage, and a dry run
of config/overlays/tournament/tournament.yaml that schedules every new method's jobs."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import yaml
from test_workflow import jobs_in_dry_run, snakemake

from pipeline.core.config import load_config, validate_config
from pipeline.core.methods import control_reason, describe, method_table
from pipeline.core.recipes import dataset_configs
from pipeline.core.schemas import QRELS_SCHEMA
from pipeline.core.storage import DataError, write_table
from pipeline.sieve import relabel
from pipeline.workflow.sieve import SieveRules, filter_model_arg
from pipeline.workflow.tables import WorkflowTables
from pipeline.workflow.training import TrainingRules

REPO = Path(__file__).resolve().parent.parent
TOURNAMENT = REPO / "config" / "overlays" / "tournament" / "tournament.yaml"
CONTENDERS = [
    "dpr_none", "dpr_oracle", "dpr_sieve_no_ccr", "dpr_sieve_b6", "dpr_positive_aware", "dpr_positive_aware_dev",
    "dpr_absolute_margin", "dpr_rank_window", "dpr_cross_encoder", "dpr_answer_match", "dpr_gist_zeroshot",
    "dpr_gist_dpr", "dpr_relabel_sieve_no_ccr", "dpr_relabel_sieve_b6", "dpr_relabel_oracle",
]  # fmt: skip


@pytest.fixture(scope="module")
def w() -> WorkflowTables:
    config = load_config([str(TOURNAMENT)])
    validate_config(config, methods=lambda: method_table(config))
    return WorkflowTables(config, dataset_configs(config, methods=method_table))


def job(**wildcards) -> SimpleNamespace:
    return SimpleNamespace(keys=lambda: wildcards.keys(), **wildcards)


def test_the_overlay_lists_every_contender_the_tournament_assumes(w):
    assert set(CONTENDERS) <= set(w.config["methods"])
    table = w.methods["synthkb"]
    none = table["dpr_none"]
    for name in CONTENDERS:
        m = table[name]
        # Every contender is a DPR from the base with dpr's settings on the candidates of dpr_none.
        assert m.trains == "dpr" and m.filter is not None and m.negatives.endswith(none.negatives[4:]), name
    gist = table["dpr_gist_dpr"]
    assert (gist.negatives, gist.guide, gist.run) == ("none", "dpr", "dpr_gist_dpr_none")
    assert "GISTEmbedLoss" in describe(gist) and control_reason(gist) is None
    relabelled = table["dpr_relabel_sieve_b6"]
    assert (relabelled.negatives, relabelled.relabel, relabelled.run) == (
        "sieve_b6",
        True,
        "dpr_relabel_sieve_b6",
    )
    assert "extra positives" in describe(relabelled)
    assert control_reason(table["dpr_relabel_oracle"]) is not None  # the true labels: a control
    # dpr_relabel_sieve is the sieve dpr_sieve trains on (the demo's scorer: models/dpr).
    assert table["dpr_relabel_sieve"].run == "dpr_relabel_sieve_no_ccr"


def test_relabel_and_gist_lookups(w):
    rules = TrainingRules(w, lambda section, wildcards: {})
    sieve = rules.relabel_inputs(job(dataset="synthkb", negs="sieve_b6"))
    assert sieve == {
        "qrels": "resources/synthkb/qrels.train.parquet",
        "decisions": "results/synthkb/negatives/sieve_b6.parquet",
    }
    filt = rules.relabel_inputs(job(dataset="synthkb", negs="sieve_no_ccr"))
    assert filt["decisions"] == "results/synthkb/sieve/sieve_no_ccr/decisions.parquet"
    train = rules.relabel_train_inputs(job(dataset="synthkb", negs="oracle"))
    assert train["qrels"] == "results/synthkb/negatives/oracle.relabel.qrels.parquet"
    assert train["negatives"] == "results/synthkb/negatives/oracle.train.parquet"
    document = json.loads(shlex.split(rules.relabel_settings(job(dataset="synthkb", negs="oracle")))[1])
    assert document["relabel"] == {"extra_positives": 1} and document["section"] == "dpr"
    with pytest.raises(ValueError, match="no dpr_relabel_<detector> method"):
        rules.relabel_inputs(job(dataset="synthkb", negs="sieve_b0.25"))


def test_dev_margin_lookups(w):
    s = SieveRules(w)
    inputs = s.filter_inputs(job(dataset="synthkb", filter="positive_aware_dev", stag=""))
    assert inputs["dev_candidates"] == "results/synthkb/sieve/candidates.dev.parquet"
    assert inputs["model"] == "results/synthkb/models/dpr/retriever.json"
    arg = filter_model_arg(None, SimpleNamespace(keys=inputs.keys, **inputs))
    assert arg.endswith("--dev-candidates results/synthkb/sieve/candidates.dev.parquet --dev-queries "
                        "resources/synthkb/queries.dev.parquet")  # fmt: skip
    dev_margin = json.loads(
        shlex.split(s.filter_settings(job(dataset="synthkb", filter="positive_aware_dev")))[1]
    )
    assert dev_margin["positive_aware_dev_grid_min"] == 0.8
    assert (
        dev_margin["positive_aware_dev_criterion"] == "youden" and "absolute_margin_margin" not in dev_margin
    )
    absolute = json.loads(shlex.split(s.filter_settings(job(dataset="synthkb", filter="absolute_margin")))[1])
    assert absolute["absolute_margin_margin"] == 0.05
    dev = s.dev_candidate_inputs(job(dataset="synthkb", stag=""))
    assert dev["negatives"] == "results/synthkb/bm25/run.dev.parquet" and dev["qrels_all"].endswith(
        "qrels_all.dev.parquet"
    )
    dev_settings = json.loads(shlex.split(s.dev_candidate_settings(job(dataset="synthkb", stag="")))[1])
    assert dev_settings["injection_fraction"] == 0.0


def test_relabelled_qrels_by_hand(tmp_path):
    qrels = pd.DataFrame({"qid": ["a", "b"], "pid": ["p1", "p2"], "relevance": [2, 1]})
    decisions = pd.DataFrame(
        {
            "qid": ["a", "a", "a", "b", "b"],
            "pid": ["x", "y", "p1", "z", "x"],
            "kept": [False, True, False, True, False],
        }
    )
    out = relabel.relabelled_qrels(qrels, decisions)
    # The qrels unchanged first; then a's x (its p1, already a positive, is not repeated) and b's x.
    assert out.values.tolist() == [["a", "p1", 2], ["b", "p2", 1], ["a", "x", 1], ["b", "x", 1]]
    write_table(tmp_path / "qrels.parquet", qrels, QRELS_SCHEMA)
    decisions.assign(kept=[False, None, False, True, False]).to_parquet(tmp_path / "bad.parquet")
    with pytest.raises(DataError, match="record 1.*kept|kept.*record 1"):
        relabel.main(["--qrels", str(tmp_path / "qrels.parquet"), "--decisions", str(tmp_path / "bad.parquet"),
                      "--out", str(tmp_path / "out.parquet")])  # fmt: skip
    decisions.to_parquet(tmp_path / "ok.parquet")
    assert relabel.main(["--qrels", str(tmp_path / "qrels.parquet"), "--decisions", str(tmp_path / "ok.parquet"),
                         "--out", str(tmp_path / "out.parquet")]) == 0  # fmt: skip
    assert len(pd.read_parquet(tmp_path / "out.parquet")) == 4


@pytest.mark.slow
def test_the_tournament_overlay_plans_every_contender(tmp_path):
    overlay = yaml.safe_load(TOURNAMENT.read_text())
    proc = snakemake(tmp_path, "-n", "-p", "results/synthkb/metrics.json", overlay=overlay)
    out = proc.stdout + proc.stderr
    jobs = jobs_in_dry_run(out)
    # 3 seeds: the top-level seed's rule and the _seed rule for the other two.
    assert (jobs["train_dpr_gist"], jobs["train_dpr_gist_seed"]) == (2, 4), jobs
    assert (jobs["train_dpr_relabel"], jobs["train_dpr_relabel_seed"], jobs["relabel_qrels"]) == (3, 6, 3), (
        jobs
    )
    assert jobs["sieve_dev_candidates"] == 1 and jobs["filter_candidates"] == 9, jobs
    for path in (
        "models/dpr_gist_zeroshot_none-s1/retriever.json",
        "models/dpr_relabel_sieve_b6-s2/retriever.json",
        "models/dpr_absolute_margin/retriever.json",
        "models/dpr_positive_aware_dev-s1/retriever.json",
        "negatives/sieve_no_ccr.relabel.qrels.parquet",
        "sieve/candidates.dev.parquet",
    ):
        assert f"results/synthkb/{path}" in out, path
    # The guide is the zero-shot model's folder (the rule passes its retriever.json's folder, quoted).
    assert '--guide "$(dirname results/synthkb/models/zeroshot/retriever.json)"' in out
    for name in CONTENDERS:
        assert f"results/synthkb/{name if 'gist' not in name else name + '_none'}/" in out, name

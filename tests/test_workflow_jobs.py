"""The settings documents of single jobs: built from a dataset's resolved config by pipeline/workflow/*.py
(what the rules pass), printed by python -m pipeline.workflow.jobs (what a hand run reads), validated by
the stage's contract with its flags over it (pipeline.core.jobs). The byte-identical outputs of a hand run
and the workflow's job: tests/test_hand_run.py."""

from __future__ import annotations

import argparse
import json
import shlex
from types import SimpleNamespace

import pytest
from test_workflow_tables import tables

from pipeline.core.config import ConfigError
from pipeline.core.jobs import add_settings_flags, job_settings, merged_document
from pipeline.core.settings.job_documents import (
    SYNTHKB_SPLIT,
    Ar2CurveJob,
    Ar2MineJob,
    Ar2RankerJob,
    Ar2SelectJob,
    Ar2SieveJob,
    Ar2TrainJob,
    Bm25IndexJob,
    CandidatesJob,
    CleanJob,
    CrossEncoderJob,
    EncodeJob,
    EvaluateJob,
    FilterJob,
    GenerateJob,
    HybridRrfJob,
    HybridWeightedJob,
    IndexJob,
    MineJob,
    MiningSearchJob,
    PrepareJob,
    RunDepthJob,
    SearchJob,
    SelectModelJob,
    SieveJob,
)
from pipeline.core.settings.validation import from_dict
from pipeline.sieve.settings import FILTER_NAMES
from pipeline.workflow import jobs
from pipeline.workflow.ar2 import (
    Ar2Rules,
    ar2_curve_job,
    ar2_mine_job,
    ar2_ranker_job,
    ar2_select_job,
    ar2_sieve_job,
    ar2_train_job,
)
from pipeline.workflow.data import prepare_job
from pipeline.workflow.documents import as_json
from pipeline.workflow.evaluation import EvaluationRules, evaluate_job, hybrid_job
from pipeline.workflow.retrieval import (
    RetrievalRules,
    bm25_job,
    encode_job,
    index_job,
    mine_job,
    mining_search_job,
    run_depth_job,
    search_job,
)
from pipeline.workflow.sieve import (
    SieveRules,
    candidates_job,
    clean_job,
    cross_encoder_job,
    filter_job,
    sieve_job,
)
from pipeline.workflow.synthkb import generate_job
from pipeline.workflow.training import TrainingRules, select_job


class Wild(SimpleNamespace):
    def keys(self):
        return vars(self).keys()


OVERLAY = {
    "bm25": {"k1": 1.2, "negatives": 7, "exclude_answer_match": True},
    "eval": {"ks": [1, 3], "match": "regex", "depth": 40},
    "sieve": {
        "strict": True,
        "in_batch": 4,
        "pool": 40,
        "injection": {"fraction": 0.3},
        "cross_encoder": {"steps": 5, "threshold": 0.3},
        "positive_aware": {"margin": 0.5},
    },
    "ar2": {"top_k": 9, "temperature": 0.1},
    "hybrid": {"rrf_k": 10, "weights": [0.5, 1.0]},
    "encode": {"batch_size": 16, "shards": 3},
    "index": {"factory": "IVF4,Flat", "threads": 3},
    "selection": {"alphas": [0.0, 0.5, 1.0], "metric": "MRR@10", "threads": 4},
    "seed": 3,
}


@pytest.fixture(scope="module")
def w():
    return tables(OVERLAY)


def _document(flag: str) -> dict:
    words = shlex.split(flag)
    assert words[0] == "--settings-json" and len(words) == 2
    return json.loads(words[1])


def test_each_document_carries_the_config_s_values_and_its_contract_accepts_it(w):
    c = w.cfg("synthkb")
    documents = {
        GenerateJob: generate_job(w.datasets["synthkb"]),
        PrepareJob: prepare_job("squad", w.datasets["squad"]),
        Bm25IndexJob: bm25_job(c, "index"),
        RunDepthJob: bm25_job(c, "retrieve"),
        MineJob: bm25_job(c, "mine"),
        SieveJob: sieve_job(c, 3),
        CandidatesJob: candidates_job(c, 3, "synthkb"),
        CrossEncoderJob: cross_encoder_job(c, 3),
        Ar2MineJob: ar2_mine_job(c),
        Ar2SieveJob: ar2_sieve_job(c, 3, "synthkb"),
        Ar2RankerJob: ar2_ranker_job(c, 3),
        Ar2TrainJob: ar2_train_job(c, "simans", 3),  # SimANS sampling reads ar2.simans: every key
        Ar2SelectJob: ar2_select_job(c),
        Ar2CurveJob: ar2_curve_job(c),
        EvaluateJob: evaluate_job(w, "synthkb", "bm25", allow_missing_queries=True),
        EncodeJob: encode_job(c),
        IndexJob: index_job(c, 3),
        HybridRrfJob: hybrid_job(c, "rrf"),
        HybridWeightedJob: hybrid_job(c, "wsum"),
        SearchJob: {**search_job(c, "faiss"), **search_job(c, "torch")},  # each backend reads its knobs
        MiningSearchJob: {**mining_search_job(c, "faiss"), **mining_search_job(c, "torch")},
        SelectModelJob: select_job(c),
    }
    for contract, document in documents.items():
        assert set(document) == set(contract.model_fields), contract.__name__  # every setting, no other
        from_dict(contract, json.loads(as_json(document)), "settings")
    # a filter's document: its own settings only (another filter's setting reruns nothing of it)
    filters = {name: filter_job(c, 3, name) for name in FILTER_NAMES}
    for document in filters.values():
        from_dict(FilterJob, json.loads(as_json(document)), "settings")
        assert {k: document.pop(k) for k in ("seed", "batch_size")} == {"seed": 3, "batch_size": 64}
    assert filters["positive_aware"] == {"mode": "relative", "margin": 0.5}
    assert filters["cross_encoder"] == {"threshold": 0.3} and filters["none"] == filters["oracle"] == {}
    assert filters["sieve_no_ccr"] == {"strict": True, "fallback": "random_one", "temperature": None}
    assert set(filters["positive_aware_dev"]) == {
        "positive_aware_dev_" + k for k in ("grid_min", "grid_max", "grid_step", "criterion")
    }
    assert documents[Bm25IndexJob]["k1"] == 1.2 and documents[RunDepthJob] == {"depth": 40}
    assert documents[MineJob] == {"negatives": 7, "exclude_answer_match": True, "match": "regex"}
    assert (
        documents[SieveJob]["strict"]
        and documents[SieveJob]["in_batch"] == 4
        and documents[SieveJob]["seed"] == 3
    )
    assert documents[CandidatesJob] == {
        "candidates": 30,
        "pool": 40,
        "max_queries": None,
        "injection_fraction": 0.3,
        "match": "regex",
        "seed": 3,
        "suspect_same_article": False,
    }
    # the dev queries' candidates: none injected (sieve.injection reruns the train candidates only)
    assert candidates_job(c, 3, "squad", injection=False) == {
        **documents[CandidatesJob],
        "injection_fraction": 0.0,
        "suspect_same_article": True,
    }
    assert documents[CrossEncoderJob]["steps"] == 5 and documents[CrossEncoderJob]["seed"] == 3
    assert documents[Ar2MineJob]["top_k"] == 9 and documents[Ar2MineJob]["temperature"] == 0.1
    assert documents[EvaluateJob] == {
        "dataset": "synthkb",
        "method": "bm25",
        "split": "test",
        "ks": [1, 3],
        "match": "regex",
        "allow_missing_queries": True,
    }
    # the forward pass's settings: not the shard count (the shards' paths carry it)
    assert documents[EncodeJob] == {"batch_size": 16, "sort_buffer": 20000, "amp": True, "backend": "torch"}
    # the index's settings, not its resources (index.threads reruns nothing)
    assert documents[IndexJob] == {"factory": "IVF4,Flat", "shards": 1, "train_size": 100000, "seed": 3}
    # each fusion's own settings: rrf_k reruns no weighted sum, the weights no RRF
    assert documents[HybridRrfJob] == {"rrf_k": 10, "depth": 40}
    assert documents[HybridWeightedJob] == {
        "weights": [0.5, 1.0],
        "select_split": "dev",
        "select_metric": "R@5",
        "depth": 40,
        "match": "regex",
    }
    # model selection: section selection's alphas and metric, not its resources (threads reruns nothing);
    # the models scored as the corpus is encoded (encode.amp)
    assert documents[SelectModelJob] == {
        "alphas": [0.0, 0.5, 1.0],
        "metric": "MRR@10",
        "depth": 40,
        "match": "regex",
        "batch_size": 16,
        "amp": True,
    }
    # a search's: the depth, batch and its backend's knobs, queries encoded as the corpus (encode.amp)
    assert search_job(c, "faiss") == {
        "depth": 40,
        "batch_size": 128,
        "nprobe": 32,
        "ef_search": 128,
        "amp": True,
    }
    assert search_job(c, "torch", amp=False) == {
        "depth": 40,
        "batch_size": 128,
        "chunk_rows": 65536,
        "amp": False,
    }
    # a mining search's: the negatives to be mined, from which the stage derives its depth
    assert mining_search_job(c, "torch") == {
        "batch_size": 128,
        "chunk_rows": 65536,
        "amp": True,
        "negatives": 7,
        "exclude_answer_match": True,
    }
    # dense mining reads BM25 mining's settings; an AR2 method's search its depth alone
    assert mine_job(c) == documents[MineJob] and run_depth_job(c) == documents[RunDepthJob]
    assert documents[PrepareJob] == {
        "dataset": "squad",
        "format": "squad",
        "split": w.datasets["squad"]["split"],
        "empty_positives": "error",
    }


def test_a_dataset_entry_leaves_out_what_takes_the_contract_default():
    document = generate_job({"format": "synthkb", "entities": 12})
    assert document == {
        "entities": 12,
        "seed": 0,
        "positive": "named_article",
        "fn_share": None,
        "fn_paraphrase": 0.0,
        "split": SYNTHKB_SPLIT,
    }
    assert prepare_job("x", {"format": "dpr", "source": "a"})["split"] == "none"


def test_the_rules_pass_the_documents_whole(w):
    wild = Wild(dataset="synthkb", run="bm25")
    assert _document(EvaluationRules(w).settings(wild))["allow_missing_queries"]
    dense = _document(EvaluationRules(w).settings(Wild(dataset="synthkb", run="ar2/seed1")))
    assert dense["method"] == "ar2" and not dense["allow_missing_queries"]
    assert _document(SieveRules(w).sieve_settings(wild)) == sieve_job(w.cfg("synthkb"), 3)
    assert _document(SieveRules(w).candidate_settings(wild)) == candidates_job(w.cfg("synthkb"), 3, "synthkb")
    dev = candidates_job(w.cfg("synthkb"), 3, "synthkb", injection=False)
    assert _document(SieveRules(w).dev_candidate_settings(wild)) == dev
    assert _document(SieveRules(w).cross_encoder_settings(wild)) == cross_encoder_job(w.cfg("synthkb"), 3)
    rank_window = Wild(dataset="synthkb", filter="rank_window")
    assert _document(SieveRules(w).filter_settings(rank_window)) == filter_job(
        w.cfg("synthkb"), 3, "rank_window"
    )
    assert _document(RetrievalRules(w).encode_settings(wild)) == encode_job(w.cfg("synthkb"))
    assert _document(RetrievalRules(w).index_settings(wild)) == index_job(w.cfg("synthkb"), 3)
    assert _document(RetrievalRules(w).search_settings(wild)) == search_job(w.cfg("synthkb"), "faiss")
    assert _document(RetrievalRules(w).mining_search_settings(wild)) == mining_search_job(
        w.cfg("synthkb"), "faiss"
    )
    assert _document(RetrievalRules(w).mine_settings(wild)) == mine_job(w.cfg("synthkb"))
    for fusion in ("rrf", "wsum"):
        assert _document(EvaluationRules(w).hybrid_settings(fusion)(wild)) == hybrid_job(
            w.cfg("synthkb"), fusion
        )
    training = TrainingRules(w, lambda section, wildcards: {})
    assert _document(training.select_settings(wild)) == select_job(w.cfg("synthkb"))
    ar2 = Ar2Rules(w, lambda section, wildcards: {})
    assert _document(ar2.mine_flags(wild)) == ar2_mine_job(w.cfg("synthkb"))
    assert _document(ar2.start_dev_settings(wild))["split"] == "dev"


def test_the_printer_prints_what_the_rule_passes(capsys, tmp_path):
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text(json.dumps(OVERLAY))
    assert jobs.main(["synthkb", "passage_sieve", "--configfile", str(overlay)]) == 0
    assert json.loads(capsys.readouterr().out) == sieve_job(tables(OVERLAY).cfg("synthkb"), 3)
    assert (
        jobs.main(["synthkb", "filter_candidates", "--filter", "cross_encoder", "--configfile", str(overlay)])
        == 0
    )
    assert json.loads(capsys.readouterr().out) == filter_job(
        tables(OVERLAY).cfg("synthkb"), 3, "cross_encoder"
    )
    assert jobs.main(["squad", "sieve_dev_candidates", "--configfile", str(overlay)]) == 0
    assert json.loads(capsys.readouterr().out) == candidates_job(
        tables(OVERLAY).cfg("squad"), 3, "squad", injection=False
    )
    assert jobs.main(["synthkb", "fuse_weighted", "--configfile", str(overlay)]) == 0
    assert json.loads(capsys.readouterr().out) == hybrid_job(tables(OVERLAY).cfg("synthkb"), "wsum")
    assert jobs.main(["synthkb", "select_model", "--configfile", str(overlay)]) == 0
    assert json.loads(capsys.readouterr().out) == select_job(tables(OVERLAY).cfg("synthkb"))
    assert jobs.main(["synthkb", "build_index", "--configfile", str(overlay)]) == 0
    assert json.loads(capsys.readouterr().out)["factory"] == "IVF4,Flat"
    # an AR2 round job: the run's seed (default the first AR2 seed) and a round's training's variant
    assert jobs.main(["squad", "ar2_sieve", "--configfile", str(overlay)]) == 0
    assert json.loads(capsys.readouterr().out) == ar2_sieve_job(tables(OVERLAY).cfg("squad"), 3, "squad")
    assert jobs.main(["synthkb", "ar2_train", "--variant", "sieve", "--seed", "5"]) == 0
    assert json.loads(capsys.readouterr().out) == ar2_train_job(tables({}).cfg("synthkb"), "sieve", 5)
    assert jobs.main(["synthkb", "ar2_select"]) == 0
    assert json.loads(capsys.readouterr().out) == ar2_select_job(tables({}).cfg("synthkb"))
    assert jobs.main(["synthkb", "ar2_learning_curve"]) == 0
    assert json.loads(capsys.readouterr().out) == ar2_curve_job(tables({}).cfg("synthkb"))
    # the dense searches: search_dense over search.backend, the AR2 dev searches over embeddings, in fp32
    for stage, document in (
        ("search_dense", search_job(tables(OVERLAY).cfg("synthkb"), "faiss")),
        ("search_for_mining", mining_search_job(tables(OVERLAY).cfg("synthkb"), "faiss")),
        ("ar2_search_dev", search_job(tables(OVERLAY).cfg("synthkb"), "torch", amp=False)),
        ("mine_dense_negatives", mine_job(tables(OVERLAY).cfg("synthkb"))),
        ("ar2_search", {"depth": 40}),
    ):
        assert jobs.main(["synthkb", stage, "--configfile", str(overlay)]) == 0
        assert json.loads(capsys.readouterr().out) == document, stage
    assert jobs.main(["squad", "prepare"]) == 0
    assert json.loads(capsys.readouterr().out)["format"] == "squad"
    for argv, message in ((["squad", "generate"], "is prepared"), (["synthkb", "train"], "unknown stage")):
        with pytest.raises(SystemExit):
            jobs.main(argv)
        assert message in capsys.readouterr().err


# clean.<name> entries: one per filter that reads section sieve, and one that reads none of it
CLEAN = {
    "mine": {"source": "mine.jsonl", "model": "my/dpr", "mode": "mark"},
    "window": {"source": "w.csv", "filter": "rank_window", "model": "unused"},
    "aware": {"source": "a.parquet", "filter": "positive_aware", "format": "triplet"},
    "ranker": {"source": "r.jsonl", "filter": "cross_encoder", "model": "my/ce"},
    "plain": {"source": "p.parquet", "filter": "none", "near_duplicate": 0.8},
}


def test_a_clean_entry_s_document_is_the_entry_and_what_its_filter_reads_of_section_sieve(w):
    config = {**w.config, "clean": CLEAN}
    c = config["sieve"]
    entry = {"format": "auto", "mode": "drop", "near_duplicate": 0.9}
    expected = {
        "mine": {
            **entry,
            "filter": "sieve",
            "mode": "mark",
            "model": "my/dpr",
            "batch_size": c["batch_size"],
            "strict": True,  # OVERLAY's
            "fallback": c["fallback"],
            "temperature": c["temperature"],
            "seed": 3,
        },
        # no model runs: neither the model nor the batch size is a setting of the job
        "window": {**entry, "filter": "rank_window", "rank_window_start": c["rank_window"]["start"]},
        "aware": {
            **entry,
            "format": "triplet",
            "filter": "positive_aware",
            "model": "minilm",
            "batch_size": c["batch_size"],
            "positive_aware_mode": c["positive_aware"]["mode"],
            "positive_aware_margin": 0.5,
        },
        "ranker": {
            **entry,
            "filter": "cross_encoder",
            "model": "my/ce",
            "batch_size": c["batch_size"],
            "cross_encoder_threshold": 0.3,
        },
        "plain": {**entry, "filter": "none", "near_duplicate": 0.8},
    }
    rules = SieveRules(SimpleNamespace(config=config))
    for name, document in expected.items():
        assert clean_job(config, name) == document, name
        from_dict(CleanJob, document, "settings")
        ext = CLEAN[name]["source"].rsplit(".", 1)[1]
        assert _document(rules.clean_settings(Wild(clean=name, ext=ext))) == document, name
    with pytest.raises(ValueError, match="unknown clean entry 'other'"):
        clean_job(config, "other")


def test_the_printer_prints_a_clean_entry_s_document(capsys, tmp_path, w):
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text(json.dumps({**OVERLAY, "clean": CLEAN}))
    assert jobs.main(["window", "clean_negatives", "--configfile", str(overlay)]) == 0
    assert json.loads(capsys.readouterr().out) == clean_job({**w.config, "clean": CLEAN}, "window")
    with pytest.raises(SystemExit):
        jobs.main(["synthkb", "clean_negatives", "--configfile", str(overlay)])
    assert "unknown clean entry 'synthkb'" in capsys.readouterr().err


def _parse(contract, *argv: str) -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    add_settings_flags(ap, contract, "settings", {"split": "--split-spec"})
    return ap.parse_args(argv)


def test_flags_go_over_the_document_and_a_file_is_read_as_the_inline_json(tmp_path):
    document = {"k1": 1.5, "b": 0.3, "stemmer": None, "stopwords": "en"}
    (tmp_path / "index.json").write_text(json.dumps(document))
    from_file = job_settings(Bm25IndexJob, _parse(Bm25IndexJob, "--settings", str(tmp_path / "index.json")))
    inline = job_settings(Bm25IndexJob, _parse(Bm25IndexJob, "--settings-json", json.dumps(document)))
    assert from_file == inline and from_file.model_dump() == document
    flagged = job_settings(
        Bm25IndexJob, _parse(Bm25IndexJob, "--settings-json", json.dumps(document), "--b", "0.9")
    )
    assert flagged.b == 0.9 and flagged.k1 == 1.5
    assert job_settings(Bm25IndexJob, _parse(Bm25IndexJob)).model_dump() == Bm25IndexJob().model_dump()
    listed = job_settings(
        EvaluateJob,
        _parse(EvaluateJob, "--dataset", "d", "--method", "m", "--split", "dev", "--ks", "5", "1"),
    )
    assert listed.ks == [5, 1]
    args = _parse(
        PrepareJob, "--dataset", "d", "--format", "squad", "--split-spec", '{"by": "article", "test": 0.5}'
    )
    assert merged_document(PrepareJob, args)["split"] == {"by": "article", "test": 0.5}
    assert _parse(PrepareJob, "--split", "none").split == "none"


@pytest.mark.parametrize(
    "contract,document,message",
    [
        (
            Bm25IndexJob,
            {"k_one": 1},
            r"'settings': unknown key\(s\) 'k_one' \(allowed keys: b, k1, stemmer, stopwords\)",
        ),
        (Bm25IndexJob, {"k1": -1}, r"'settings.k1': Input should be greater than 0"),
        (SieveJob, {"fallback": "all"}, r"'settings.fallback'"),
        (GenerateJob, {"entities": 5}, r"'settings.entities'"),
        (GenerateJob, {"split": {"by": "entity", "dev": 0.6, "test": 0.6}}, r"'settings.split'"),
        (
            EvaluateJob,
            {"dataset": "d", "method": "m", "split": "test", "ks": [1, 1]},
            r"'settings.ks': 1 is listed twice",
        ),
        (EvaluateJob, {"method": "m", "split": "test"}, r"'settings.dataset': required key is missing"),
    ],
)
def test_a_bad_document_is_one_line_naming_the_key(contract, document, message):
    with pytest.raises(ConfigError, match=message):
        job_settings(contract, _parse(contract, "--settings-json", json.dumps(document)))


def test_the_document_is_given_once_and_as_a_mapping(tmp_path):
    (tmp_path / "list.json").write_text("[1]")
    with pytest.raises(ConfigError, match="give the settings document once"):
        job_settings(Bm25IndexJob, _parse(Bm25IndexJob, "--settings", "a", "--settings-json", "{}"))
    with pytest.raises(ConfigError, match="list.json: top level must be a mapping, got list"):
        job_settings(Bm25IndexJob, _parse(Bm25IndexJob, "--settings", str(tmp_path / "list.json")))
    with pytest.raises(ConfigError, match="not JSON"):
        job_settings(Bm25IndexJob, _parse(Bm25IndexJob, "--settings-json", "{k1"))


def test_a_bad_flag_over_the_document_is_named_by_its_flag():
    # the document's value is fine; the typed flag is not: the line names both the flag and the key
    args = _parse(Bm25IndexJob, "--settings-json", json.dumps({"k1": 1.5}), "--b", "-0.5")
    with pytest.raises(ConfigError) as err:
        job_settings(Bm25IndexJob, args)
    assert str(err.value).startswith("--b (config key 'settings.b'): ") and "\n" not in str(err.value)
    # a bad value from the document alone names no flag
    with pytest.raises(ConfigError, match=r"^config key 'settings.k1'"):
        job_settings(Bm25IndexJob, _parse(Bm25IndexJob, "--settings-json", json.dumps({"k1": -1})))

"""A stage run by hand computes with the workflow's settings: every flag that stands for a config setting
defaults to that setting's contract default (pipeline.core.settings), the one place it is declared."""

from __future__ import annotations

import argparse
import importlib
import json

import pytest

from pipeline.ar2.settings import AR2_SIEVE_KEYS, Ar2Settings
from pipeline.core.config import load_config
from pipeline.core.methods import method_table
from pipeline.core.recipes import dataset_configs
from pipeline.core.settings.base import Contract, default
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
from pipeline.core.settings.root import Config
from pipeline.data.settings import DatasetSpec
from pipeline.evaluation.settings import EvalSettings, SelectionSettings, SweepSettings
from pipeline.retrieval.settings import (
    Bm25Settings,
    EncodeSettings,
    HybridSettings,
    IndexSettings,
    ModelSettings,
    SearchSettings,
)
from pipeline.sieve.settings import (
    CROSS_ENCODER_TRAINING,
    AbsoluteMarginSettings,
    CleanSpec,
    CrossEncoderFilterSettings,
    InjectionSettings,
    PositiveAwareDevSettings,
    PositiveAwareSettings,
    RankWindowSettings,
    SieveSettings,
)
from pipeline.training.settings import CcrSettings, DprSettings, Objective, TrainSettings
from pipeline.workflow.documents import as_json
from pipeline.workflow.training import train_job

SEED = (Config, "seed")
MATCH = (EvalSettings, "match")
DEPTH = (EvalSettings, "depth")

# module -> {(subcommand or None, flag dest): (contract, field)}. The stages that take a settings document
# (pipeline.core.jobs) are the next test's: their flags only override the document.
STAGE_FLAGS = {
    # the backend: what the job's inputs call for (the index or the embeddings), not in its document
    "pipeline.retrieval.search": {(None, "backend"): (SearchSettings, "backend")},
    "pipeline.evaluation.sweep": {
        (None, name): (SweepSettings, name) for name in ("baseline", "oracle", "metric")
    },
    # not in its document: only which metric the log line compares
    "pipeline.ar2.train_ranker": {(None, "compare_metric"): (Ar2Settings, "select_metric")},
}


# A job document's contract -> {field: (the section contract it is taken from, field)}.
JOB_FIELDS = {
    GenerateJob: {k: (DatasetSpec, k) for k in ("entities", "seed", "positive", "fn_share", "fn_paraphrase")},
    PrepareJob: {k: (DatasetSpec, k) for k in ("split", "empty_positives")},
    Bm25IndexJob: {k: (Bm25Settings, k) for k in ("k1", "b", "stemmer", "stopwords")},
    RunDepthJob: {"depth": DEPTH},
    MineJob: {"negatives": (Bm25Settings, "negatives"), "match": MATCH},
    SieveJob: {
        "seed": SEED,
        **{k: (SieveSettings, k) for k in ("strict", "fallback", "in_batch", "batch_size")},
    },
    Ar2MineJob: {
        "top_k": (Ar2Settings, "top_k"),
        "temperature": (Ar2Settings, "temperature"),
        "match": MATCH,
    },
    EvaluateJob: {"ks": (EvalSettings, "ks"), "match": MATCH},
    # AR2's round jobs (their seed is the AR2 run's, a field of their own)
    Ar2SieveJob: {**{k: (SieveSettings, k) for k in AR2_SIEVE_KEYS}, "match": MATCH},
    Ar2RankerJob: {
        **{k: (Ar2Settings, k) for k in ("listwise", "ranker", "ranker_prior", "precision")},
        "ks": (EvalSettings, "ks"),
        "match": MATCH,
    },
    Ar2TrainJob: {k: (Ar2Settings, k) for k in ("rounds", "simans", "ranker_warmup_lr", "similarity")},
    Ar2SelectJob: {k: (Ar2Settings, k) for k in ("rounds", "select_metric")},
    Ar2CurveJob: {"rounds": (Ar2Settings, "rounds")},
    EncodeJob: {k: (EncodeSettings, k) for k in ("batch_size", "sort_buffer", "amp", "backend")},
    IndexJob: {**{k: (IndexSettings, k) for k in ("factory", "shards", "train_size")}, "seed": SEED},
    SearchJob: {
        "depth": DEPTH,
        **{k: (SearchSettings, k) for k in ("batch_size", "nprobe", "ef_search", "chunk_rows")},
        "amp": (EncodeSettings, "amp"),
    },
    MiningSearchJob: {
        **{k: (SearchSettings, k) for k in ("batch_size", "nprobe", "ef_search", "chunk_rows")},
        "amp": (EncodeSettings, "amp"),
        **{k: (Bm25Settings, k) for k in ("negatives", "exclude_answer_match")},
    },
    HybridRrfJob: {"rrf_k": (HybridSettings, "rrf_k"), "depth": DEPTH},
    HybridWeightedJob: {
        **{k: (HybridSettings, k) for k in ("weights", "select_split", "select_metric")},
        "depth": DEPTH,
        "match": MATCH,
    },
    SelectModelJob: {
        **{k: (SelectionSettings, k) for k in ("alphas", "metric")},
        "depth": DEPTH,
        "match": MATCH,
        "batch_size": (EncodeSettings, "batch_size"),
    },
    CandidatesJob: {
        **{k: (SieveSettings, k) for k in ("candidates", "pool", "max_queries")},
        "injection_fraction": (InjectionSettings, "fraction"),
        "match": MATCH,
        "seed": SEED,
    },
    CrossEncoderJob: {
        **{k: (CrossEncoderFilterSettings, k) for k in CROSS_ENCODER_TRAINING},
        "seed": SEED,
    },
    FilterJob: {
        "seed": SEED,
        "batch_size": (SieveSettings, "batch_size"),
        "start": (RankWindowSettings, "start"),
        "mode": (PositiveAwareSettings, "mode"),
        "margin": (PositiveAwareSettings, "margin"),
        "absolute_margin_margin": (AbsoluteMarginSettings, "margin"),
        **{
            f"positive_aware_dev_{k}": (PositiveAwareDevSettings, k)
            for k in PositiveAwareDevSettings.model_fields
        },
        "threshold": (CrossEncoderFilterSettings, "threshold"),
        **{k: (SieveSettings, k) for k in ("strict", "fallback", "temperature")},
    },
    # the cleaning command's flags a user types are these: their defaults the sections'
    CleanJob: {
        **{k: (CleanSpec, k) for k in ("format", "filter", "model", "mode", "near_duplicate")},
        "rank_window_start": (RankWindowSettings, "start"),
        "positive_aware_mode": (PositiveAwareSettings, "mode"),
        "positive_aware_margin": (PositiveAwareSettings, "margin"),
        "cross_encoder_threshold": (CrossEncoderFilterSettings, "threshold"),
        **{k: (SieveSettings, k) for k in ("strict", "fallback", "temperature", "batch_size")},
        "seed": SEED,
    },
}
DOCUMENT_STAGES = {
    "pipeline.synthkb.generate": GenerateJob,
    "pipeline.data.prepare": PrepareJob,
    "pipeline.sieve.passage_sieve": SieveJob,
    "pipeline.sieve.candidates": CandidatesJob,
    "pipeline.sieve.cross_encoder": CrossEncoderJob,
    "pipeline.sieve.filters": FilterJob,
    "pipeline.sieve.clean": CleanJob,
    "pipeline.ar2.mine": Ar2MineJob,
    "pipeline.ar2.sieving": Ar2SieveJob,
    "pipeline.ar2.train_ranker": Ar2RankerJob,
    "pipeline.ar2.train_round": Ar2TrainJob,
    "pipeline.evaluation.evaluate": EvaluateJob,
    "pipeline.retrieval.index": IndexJob,
    "pipeline.retrieval.encode": {"corpus": EncodeJob, "queries": EncodeJob},
    # a stage with subcommands: each one's document
    "pipeline.retrieval.bm25": {"index": Bm25IndexJob, "retrieve": RunDepthJob, "mine": MineJob},
    "pipeline.evaluation.hybrid": {"rrf": HybridRrfJob, "weighted": HybridWeightedJob},
    # dense search (a mining search: MiningSearchJob, the next test) and dense mining
    "pipeline.retrieval.search": SearchJob,
    "pipeline.retrieval.mining": MineJob,
    "pipeline.ar2.selection": {"search": RunDepthJob, "select": Ar2SelectJob},
    "pipeline.ar2.learning_curve": Ar2CurveJob,
    "pipeline.training.select_model": SelectModelJob,
}


@pytest.mark.parametrize("contract", sorted(JOB_FIELDS, key=lambda c: c.__name__))
def test_a_job_document_takes_its_defaults_from_the_sections(contract):
    # Declared once: a document's field is its section's own (default, range, help), not a copy of it.
    for name, (section, field) in JOB_FIELDS[contract].items():
        assert default(contract, name) == default(section, field), f"{contract.__name__}.{name}"
        assert contract.model_fields[name].description == section.model_fields[field].description
    assert SYNTHKB_SPLIT == default(GenerateJob, "split") != default(PrepareJob, "split") == "none"


@pytest.mark.parametrize("module_name", sorted(DOCUMENT_STAGES))
def test_a_document_stage_flag_only_overrides_the_document(module_name, monkeypatch, capsys):
    defaults = flag_defaults(built_parser(module_name, monkeypatch))
    capsys.readouterr()
    stages = DOCUMENT_STAGES[module_name]
    for command, contract in stages.items() if isinstance(stages, dict) else [(None, stages)]:
        # a section of its own (ar2.simans) has a flag per key, its name their prefix (--simans-a)
        dests = [
            f"{name}_{key}"
            if isinstance(field.annotation, type) and issubclass(field.annotation, Contract)
            else name
            for name, field in contract.model_fields.items()
            for key in getattr(field.annotation, "model_fields", [None])
        ]
        assert {(command, "settings"), (command, "settings_json")} <= set(defaults)
        assert {dest: defaults[(command, dest)] for dest in dests} == dict.fromkeys(dests)


def test_a_mining_search_s_own_flags_only_override_its_document(monkeypatch, capsys):
    defaults = flag_defaults(built_parser("pipeline.retrieval.search", monkeypatch))
    capsys.readouterr()
    assert {name: defaults[(None, name)] for name in MiningSearchJob.model_fields} == dict.fromkeys(
        MiningSearchJob.model_fields
    )


def built_parser(module_name: str, monkeypatch) -> argparse.ArgumentParser:
    """The parser a stage's main() builds (caught at --help, before anything runs)."""
    module = importlib.import_module(module_name)
    built = []
    original = module.stage_parser

    def recording(*args, **kwargs):
        built.append(original(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(module, "stage_parser", recording)
    with pytest.raises(SystemExit):
        module.main(["--help"])
    return built[0]


def flag_defaults(parser: argparse.ArgumentParser) -> dict:
    """(subcommand or None, dest) -> default, over the parser and its subcommands."""
    out = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command, sub in action.choices.items():
                out.update({(command, dest): value for (_, dest), value in flag_defaults(sub).items()})
        else:
            out[(None, action.dest)] = action.default
    return out


@pytest.mark.parametrize("module_name", sorted(STAGE_FLAGS))
def test_a_stage_run_by_hand_defaults_to_the_contracts(module_name, monkeypatch, capsys):
    defaults = flag_defaults(built_parser(module_name, monkeypatch))
    capsys.readouterr()
    wrong = {
        key: (defaults.get(key, "no such flag"), default(*setting))
        for key, setting in STAGE_FLAGS[module_name].items()
        if defaults.get(key, "no such flag") != default(*setting)
    }
    assert not wrong, f"{module_name}: flag default != contract default: {wrong}"


@pytest.mark.parametrize("section,contract", [("dpr", DprSettings), ("ccr", CcrSettings)])
def test_train_dense_trains_as_the_section_it_is_given(section, contract):
    # The CCR example of train_dense's docstring once trained with DPR's lr and step count.
    from pipeline.training.train_dense import build_parser, job_settings

    argv = ["--out", "x"] + ([] if section == "dpr" else ["--section", "ccr"])
    args = build_parser().parse_args(argv)
    train, objective, retriever = job_settings(args).resolved()
    assert train == {name: default(contract, name) for name in TrainSettings.model_fields}
    source = contract if section == "ccr" else Objective
    assert objective == {name: default(source, name) for name in Objective.model_fields}
    assert retriever == {} and args.base == default(ModelSettings, "base")
    assert job_settings(args).seed == default(Config, "seed")


def _argv(*extra: str) -> list[str]:
    return [
        "--init",
        "i",
        "--queries",
        "q",
        "--qrels",
        "r",
        "--negatives",
        "n",
        "--corpus",
        "c",
        "--out",
        "o",
        *extra,
    ]


def _trained_with(monkeypatch, argv: list[str]):
    from pipeline.training import train_dense

    seen = {}
    monkeypatch.setattr(train_dense, "_train", lambda args, job, dist_info: seen.setdefault("job", job) and 0)
    monkeypatch.setattr(train_dense, "start_stage", lambda *a, **k: None)
    train_dense.main(["--", *argv, "--device", "cpu"])
    return seen["job"]


def test_the_flags_go_over_the_settings_document(monkeypatch, tmp_path):
    document = {"section": "ccr", "seed": 4, "train": {"max_steps": 7}, "objective": {"beta": 0.5}}
    (tmp_path / "job.json").write_text(json.dumps(document))
    job = _trained_with(monkeypatch, _argv("--settings", str(tmp_path / "job.json"), "--lr", "3e-5"))
    train, objective, _ = job.resolved()
    assert train["lr"] == 3e-5 and train["max_steps"] == 7 and not train["in_batch"]  # ccr's default
    assert objective == {"beta": 0.5, "scale": "paper"} and job.seed == 4


def test_the_workflow_document_trains_what_the_job_trains(monkeypatch):
    # What a train_ccr job passes (--settings-json) is what a hand run reads from a file.
    config = dataset_configs(load_config(), methods=method_table)["synthkb"]
    document = train_job(config, "ccr", seed=0)
    job = _trained_with(monkeypatch, _argv("--settings-json", as_json(document)))
    train, objective, retriever = job.resolved()
    assert train == document["train"] and objective["beta"] == config["ccr"]["beta"]
    assert retriever == document["retriever"]


@pytest.mark.parametrize(
    "document,message",
    [
        ({"section": "ccr", "train": {"learning_rate": 1}}, r"'train': unknown key\(s\) 'learning_rate'"),
        ({"train": {"lr": -1}}, r"'train.lr': Input should be greater than 0"),
        ({"objective": {"beta": "six"}}, r"'objective.beta'"),
        ({"retriever": {"pooling": "max"}}, r"'retriever.pooling'"),
        ({"seed": 2**32}, r"'settings.seed'"),
    ],
)
def test_a_bad_settings_document_is_one_line_naming_the_key(monkeypatch, document, message):
    from pipeline.core.config import ConfigError

    with pytest.raises(ConfigError, match=message):
        _trained_with(monkeypatch, _argv("--settings-json", json.dumps(document)))

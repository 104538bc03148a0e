"""The teacher-scored filters (sieve_teacher, positive_aware_teacher, positive_aware_teacher_sieve): the
same rules as the sieve and positive_aware, scored by the model sieve.teacher names (the start model a
user has: models/zeroshot by default) instead of the DPR warm-up trained on the noisy negatives."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from stage_args import flags
from stage_failures import fails
from tevatron_data import tevatron_rows

from pipeline.core.config import load_config, validate_config
from pipeline.core.methods import describe, method_table
from pipeline.core.recipes import dataset_configs
from pipeline.core.settings.job_documents import FilterJob
from pipeline.sieve import candidates as fn_labels
from pipeline.sieve import clean, filters
from pipeline.sieve.filters import FilterInputs, FilterSetup, build_filter
from pipeline.sieve.passage_sieve import Similarities, read_candidates
from pipeline.workflow import checks
from pipeline.workflow.sieve import SieveRules
from pipeline.workflow.tables import WorkflowTables

REPO = Path(__file__).resolve().parent.parent
TEACHER_FILTERS = ("sieve_teacher", "positive_aware_teacher", "positive_aware_teacher_sieve")

# ---- decisions by hand -------------------------------------------------------------------------------
#
# The sieve keeps a candidate iff its NCE loss over P = {positive} + candidates is at least the mean
# loss over P, i.e. iff its score is at most the mean score over P (the log-sum-exp cancels), whatever τ.
# positive_aware (relative, 0.95) drops a candidate scoring above 0.95 × the positive's score.
#
#   q1: s+ 0.8, candidates 0.9 0.7 0.3 0.1   mean over P 0.56  sieve drops 0.9 0.7; aware (> 0.76) 0.9
#   q2: s+ 0.5, candidates 0.6 0.55 0.52 0.9 mean over P 0.614 sieve drops 0.9;    aware (> 0.475) all four
#   q3: s+ 0.2, candidates 0.12 0.1          mean over P 0.14  sieve drops none;   aware (> 0.19) none
SCORES = {
    "q1": (0.8, {"a": 0.9, "b": 0.7, "c": 0.3, "d": 0.1}),
    "q2": (0.5, {"e": 0.6, "f": 0.55, "g": 0.52, "h": 0.9}),
    "q3": (0.2, {"i": 0.12, "j": 0.1}),
}
SIEVE_DROPS = {"a", "b", "h"}
AWARE_DROPS = {"a", "e", "f", "g", "h"}


class FixedScores(FilterInputs):
    """The filter's inputs with the scores above in place of a model's cosines."""

    def __init__(self, cands: pd.DataFrame, asked: list):
        super().__init__(cands, "corpus.parquet", "queries.parquet", Path("."))
        self.asked = asked

    def similarities(self, model, temperature=None) -> Similarities:
        self.asked.append(model)
        qids = list(SCORES)
        counts = [len(SCORES[q][1]) for q in qids]
        return Similarities(
            qids=qids,
            offsets=np.concatenate([[0], np.cumsum(counts)]),
            candidate=np.array([s for q in qids for s in SCORES[q][1].values()]),
            positive=np.array([SCORES[q][0] for q in qids]),
            tau=0.05,
            passage_index={},
            passages=np.zeros((0, 1)),
            queries=np.zeros((len(qids), 1)),
        )


def _candidates() -> pd.DataFrame:
    rows = [
        {"qid": q, "pid": pid, "rank": r + 1, "source_score": 1.0 - r / 10, "positive_pid": f"pos-{q}"}
        for q, (_, cands) in SCORES.items()
        for r, pid in enumerate(cands)
    ]
    frame = pd.DataFrame(rows)
    frame["is_false_negative"] = pd.array([None] * len(frame), dtype="boolean")
    frame["fn_label_source"] = pd.array([None] * len(frame), dtype="string")
    return frame


def _setup(name: str, job: dict | None = None) -> FilterSetup:
    document = {"seed": 0, "batch_size": 8, **(job or {})}
    return FilterSetup.from_job(name, FilterJob.model_validate(document), model="the-teacher")


def _dropped(name: str, job: dict | None = None) -> set[str]:
    asked: list = []
    cands = _candidates()
    table = build_filter(_setup(name, job)).decisions(FixedScores(cands, asked)).to_pandas()
    assert asked == ["the-teacher"]  # scored by the model it was given, once
    return set(cands["pid"][~table["kept"].to_numpy(bool)])


def test_each_teacher_filter_drops_what_its_rule_drops_by_hand():
    assert _dropped("sieve_teacher") == SIEVE_DROPS
    assert _dropped("positive_aware_teacher") == AWARE_DROPS
    # the combination drops exactly the union of the two
    assert _dropped("positive_aware_teacher_sieve") == SIEVE_DROPS | AWARE_DROPS
    # each reads its own section: a margin of 1.0 drops what scores above the positive only
    assert _dropped("positive_aware_teacher", {"positive_aware_teacher_margin": 1.0}) == {
        "a",
        "e",
        "f",
        "g",
        "h",
    }
    assert _dropped("positive_aware_teacher", {"positive_aware_teacher_margin": 1.2}) == {"h"}
    assert (
        _dropped("positive_aware_teacher_sieve", {"positive_aware_teacher_sieve_margin": 1.2}) == SIEVE_DROPS
    )


def test_the_combination_keeps_the_sieves_fallback_and_says_who_dropped():
    # q4: s+ 0.0, both candidates above the mean over P: the sieve drops both and its fallback keeps
    # one; positive_aware drops both (anything above 0.95 × 0), so the union drops both.
    SCORES["q4"] = (0.0, {"k": 0.5, "m": 0.5})
    try:
        cands = _candidates()
        sieve = build_filter(_setup("sieve_teacher")).decide(FixedScores(cands, []))
        combo_filter = build_filter(_setup("positive_aware_teacher_sieve"))
        combo = combo_filter.decide(FixedScores(cands, []))
    finally:
        del SCORES["q4"]
    last = slice(len(cands) - 2, len(cands))
    assert sieve["kept"].to_numpy()[last].sum() == 1 and sieve["fallback"].to_numpy()[last].sum() == 1
    assert not combo["kept"].to_numpy()[last].any()
    row = combo.iloc[0].to_dict()  # a: dropped by both rules
    reason = combo_filter.reason(row, False)
    assert "the sieve (loss" in reason and "positive_aware (relative, margin 0.95" in reason
    row = combo.iloc[4].to_dict()  # e: dropped by positive_aware only
    assert "the sieve" not in combo_filter.reason(row, False)


# ---- the workflow: which model scores ----------------------------------------------------------------


def _tables(overlay: str, tmp_path: Path) -> WorkflowTables:
    path = tmp_path / "overlay.yaml"
    path.write_text(overlay)
    config = load_config([str(path)])
    validate_config(config, methods=lambda: method_table(config))
    return WorkflowTables(config, dataset_configs(config, methods=method_table))


def _wildcards(**values):
    from types import SimpleNamespace

    return SimpleNamespace(**values)


def test_the_teacher_is_models_zeroshot_by_default_and_the_method_sieve_teacher_names(tmp_path):
    w = _tables("methods: [zeroshot, dpr_sieve_teacher]\n", tmp_path)
    rules = SieveRules(w)
    for name in TEACHER_FILTERS:
        inputs = rules.filter_inputs(_wildcards(dataset="synthkb", filter=name, stag=""))
        assert inputs["model"] == "results/synthkb/models/zeroshot/retriever.json", name
    # the DPR-scored filters keep models/dpr
    inputs = rules.filter_inputs(_wildcards(dataset="synthkb", filter="positive_aware", stag=""))
    assert inputs["model"] == "results/synthkb/models/dpr/retriever.json"
    table = w.methods["synthkb"]
    assert table["dpr_sieve_teacher"].negatives == "sieve_teacher"
    assert "scored by the teacher models/zeroshot" in describe(table["dpr_sieve_teacher"])
    relabel = table["dpr_relabel_positive_aware_teacher_sieve"]
    assert relabel.relabel and relabel.negatives == "positive_aware_teacher_sieve"
    assert "scored by the teacher models/zeroshot" in describe(relabel)

    # Another teacher: its model scores, and it is in the names, so two teachers build side by side.
    w = _tables("methods: [zeroshot, dpr_sieve_teacher]\nsieve: {teacher: dpr_ccr}\n", tmp_path)
    rules = SieveRules(w)
    rules.check_sources()
    tag = "_teacher_dpr_ccr_b6"
    inputs = rules.filter_inputs(_wildcards(dataset="synthkb", filter="sieve_teacher", stag=tag))
    assert inputs["model"] == "results/synthkb/models/dpr_ccr_b6/retriever.json"
    assert w.methods["synthkb"]["dpr_sieve_teacher"].run == "dpr_sieve_teacher" + tag
    # the filters scored by another model keep their names
    assert w.methods["synthkb"]["dpr_positive_aware"].run == "dpr_positive_aware"


def _dry_run(tmp_path: Path, overlay: str) -> subprocess.CompletedProcess:
    path = tmp_path / "overlay.yaml"
    path.write_text(overlay)
    return subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--snakefile", str(REPO / "Snakefile")]
        + ["--directory", str(tmp_path), "--configfile", str(REPO / "config.yaml"), str(path)]
        + ["--", "results/synthkb/metrics.json"],
        capture_output=True,
        text=True,
    )


def _jobs(stdout: str, rule: str) -> list[dict[str, str]]:
    """The planned jobs of ``rule``: their ``input``/``output``/``wildcards`` lines."""
    jobs = []
    for block in re.split(r"\n(?=rule |localrule )", stdout):
        if block.startswith((f"rule {rule}:", f"localrule {rule}:")):
            fields = dict(re.findall(r"^\s+(\w+): (.*)$", block, re.M))
            jobs.append(fields)
    return jobs


def test_the_plan_scores_the_teacher_filters_with_models_zeroshot_never_models_dpr(tmp_path):
    methods = "[zeroshot, dpr_sieve_teacher, dpr_positive_aware_teacher, dpr_positive_aware_teacher_sieve]"
    proc = _dry_run(tmp_path, f"methods: {methods}\n")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    filter_jobs = {job["wildcards"]: job for job in _jobs(proc.stdout, "filter_candidates")}
    for name in TEACHER_FILTERS:
        job = filter_jobs[f"dataset=synthkb, filter={name}, stag="]
        assert "results/synthkb/models/zeroshot/retriever.json" in job["input"]
        assert "models/dpr/" not in job["input"] and "models/dpr_" not in job["input"]
    trained = {job["output"]: job["input"] for job in _jobs(proc.stdout, "train_dpr_filtered")}
    for name in TEACHER_FILTERS:
        negatives = f"results/synthkb/negatives/{name}.train.parquet"
        assert negatives in trained[f"results/synthkb/models/dpr_{name}/retriever.json"]
    # nothing here needs the DPR warm-up: no filter of these three is scored by it
    assert not _jobs(proc.stdout, "train_dpr"), "models/dpr was planned"


@pytest.mark.parametrize(
    ("teacher", "why"),
    [
        ("zeroshott", "which is not a dense method (closest: zeroshot"),
        ("bm25", "which is not a dense method"),
        ("dpr_oracle", "which reads the true labels"),
        ("dpr_ccr_wise_truth", "which reads the true labels"),
        ("dpr_sieve_teacher", "a DPR trained on filtered candidates"),
        ("dpr_mined_dpr_sieve", "a DPR trained on filtered candidates"),
    ],
)
def test_a_teacher_that_cannot_score_is_one_line_naming_the_key(teacher, why, tmp_path, capsys):
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text(f"sieve: {{teacher: {teacher}}}\n")
    line = fails(checks.main, [overlay], capsys, "sieve.teacher", repr(teacher))
    assert why in line


def test_snakemake_refuses_a_wrong_teacher_before_planning(tmp_path):
    proc = _dry_run(tmp_path, "sieve: {teacher: zeroshott}\n")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr + proc.stdout
    said = [line for line in (proc.stderr + proc.stdout).splitlines() if "sieve.teacher" in line]
    assert len(said) == 1 and "'zeroshott', which is not a dense method" in said[0], said


# ---- on a file: the filter stage and sieve-clean with the model a user names --------------------------


@pytest.fixture(scope="module")
def toy(tmp_path_factory, make_sieve_dataset, make_retriever):
    root = tmp_path_factory.mktemp("teacher")
    p = make_sieve_dataset(root / "data")
    p["model"] = make_retriever(root / "model")
    p["candidates"] = root / "candidates.parquet"
    p["root"] = root
    tables = ("negatives", "qrels", "qrels_all", "queries", "corpus")
    fn_labels.main(flags(p, *tables, candidates=8, pool=12, out=p["candidates"]))
    return p


def _stage(toy, name: str) -> pd.DataFrame:
    out = toy["root"] / name / "decisions.parquet"
    filters.main(
        [*flags(toy, "candidates", "corpus", "queries", filter=name, out=out), "--model", str(toy["model"])]
    )
    return pd.read_parquet(out)


def test_the_filter_stage_scores_each_rule_with_the_teacher_it_is_given(toy):
    # The same rule with the same model decides the same: sieve_teacher is the sieve, positive_aware_teacher
    # positive_aware, the combination their union.
    sieve, aware = _stage(toy, "sieve"), _stage(toy, "positive_aware")
    assert _stage(toy, "sieve_teacher")["kept"].tolist() == sieve["kept"].tolist()
    assert _stage(toy, "positive_aware_teacher")["kept"].tolist() == aware["kept"].tolist()
    combo = _stage(toy, "positive_aware_teacher_sieve")["kept"].to_numpy()
    assert (combo == (sieve["kept"].to_numpy() & aware["kept"].to_numpy())).all()
    assert 0 < (~combo).sum() < len(combo)


def _tevatron(toy, path: Path) -> Path:
    cands = read_candidates(toy["candidates"])
    corpus = pd.read_parquet(toy["corpus"]).set_index("pid")
    queries = pd.read_parquet(toy["queries"]).set_index("qid")
    rows = tevatron_rows(cands, corpus, queries)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_sieve_clean_runs_the_teacher_filters_with_the_model_the_user_names(toy, tmp_path):
    source = _tevatron(toy, tmp_path / "train.jsonl")
    kept = {}
    for name in ("sieve", "positive_aware", *TEACHER_FILTERS):
        out = tmp_path / f"{name}.jsonl"
        clean.main(
            ["--input", str(source), "--out", str(out), "--filter", name, "--model", str(toy["model"])]
        )
        report = json.loads((tmp_path / f"{name}.report.json").read_text())
        assert report["filter"] == name and report["model"] == str(toy["model"])
        decisions = pd.read_parquet(tmp_path / f"{name}.decisions.parquet").sort_values(["qid", "docid"])
        kept[name] = decisions["decision"].eq("kept").to_numpy()
    assert (kept["sieve_teacher"] == kept["sieve"]).all()
    assert (kept["positive_aware_teacher"] == kept["positive_aware"]).all()
    assert (kept["positive_aware_teacher_sieve"] == (kept["sieve"] & kept["positive_aware"])).all()
    assert (~kept["positive_aware_teacher_sieve"]).any()

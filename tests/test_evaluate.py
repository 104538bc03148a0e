"""pipeline.evaluation.evaluate / pipeline.retrieval.runs on a tiny hand-checked dataset, and the
evaluate + gather rules (gather itself: test_gather.py)."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from stage_args import flags

from pipeline.core.schemas import CORPUS_SCHEMA, QRELS_SCHEMA, QUERIES_SCHEMA, RUN_SCHEMA, per_query_schema
from pipeline.core.storage import DataError, write_table
from pipeline.evaluation import evaluate, query_tests
from pipeline.retrieval import runs

REPO = Path(__file__).resolve().parent.parent
NFC_CAFE, NFD_CAFE = "caf\u00e9", "cafe\u0301"

CORPUS = [
    ("p1", "Paris", "Paris is the capital of France."),
    ("p2", "Eiffel", "The Eiffel Tower was built in 1889."),
    ("p3", "Lyon", "Lyon is a city."),
    ("p4", "France", "France is in Europe."),
    ("p5", "Cafe", f"Un {NFD_CAFE} crème."),
    ("p6", "Marseille", "A port city in the south."),
]
QUERIES = [
    ("q1", "capital of France?", ["Paris"]),
    ("q2", "when was the tower built?", ["1889"]),
    ("q3", "where is France?", ["Europe"]),
    ("q4", "coffee?", [NFC_CAFE]),  # not in the run at all
    ("q5", "port city?", ["Marseille"]),  # answer only in the title of p6
    ("q6", "coffee again?", [NFC_CAFE]),
]  # NFC answer, NFD passage
QRELS = [
    ("q1", "p1", 1),
    ("q1", "p4", 1),
    ("q2", "p2", 1),
    ("q3", "p4", 1),
    ("q4", "p5", 1),
    ("q5", "p6", 1),
    ("q6", "p5", 1),
    ("q6", "p3", 0),
]
# Rows deliberately out of order; q1's top two tie in score, so only `rank` can order them.
RUN = [
    ("q2", "p1", 2, 3.0),
    ("q1", "p1", 2, 5.0),
    ("q1", "p4", 1, 5.0),
    ("q1", "p2", 3, 1.0),
    ("q2", "p2", 1, 9.0),
    ("q3", "p1", 1, 4.0),
    ("q3", "p3", 2, 3.0),
    ("q3", "p2", 3, 2.0),
    ("q5", "p6", 1, 7.0),
    ("q5", "p1", 2, 1.0),
    ("q6", "p5", 1, 2.5),
]


def _write(path: Path, rows, schema) -> Path:
    write_table(path, pd.DataFrame(rows, columns=schema.names), schema)
    return path


@pytest.fixture
def data(tmp_path: Path) -> dict[str, Path]:
    return {
        "corpus": _write(tmp_path / "corpus.parquet", CORPUS, CORPUS_SCHEMA),
        "queries": _write(tmp_path / "queries.test.parquet", QUERIES, QUERIES_SCHEMA),
        "qrels": _write(tmp_path / "qrels.test.parquet", QRELS, QRELS_SCHEMA),
        "run": _write(tmp_path / "run.test.parquet", RUN, RUN_SCHEMA),
        "dir": tmp_path,
    }


def _argv(data, *extra, ks=("1", "2", "3")) -> list[str]:
    tables = ("run", "queries", "qrels", "corpus")
    run = flags(data, *tables, dataset="tiny", method="bm25", split="test", out=data["dir"] / "metrics.json")
    return [*run, "--ks", *ks, "--allow-missing-queries", *extra]  # RUN leaves q4 out on purpose: a miss


def _metrics(data, *extra) -> dict:
    assert evaluate.main(_argv(data, *extra)) == 0
    return json.loads((data["dir"] / "metrics.json").read_text(encoding="utf-8"))


def test_hand_computed_metrics(data):
    out = _metrics(data)
    assert list(out)[:4] == ["dataset", "method", "split", "n_queries"]
    assert (out["dataset"], out["method"], out["split"]) == ("tiny", "bm25", "test")
    assert (out["n_queries"], out["n_ranked_queries"], out["depth"], out["match"]) == (6, 5, 3, "string")
    # first answer hit: q1 2 (rank order, not the tied score), q2 1, q3 none, q4 not run,
    # q5 none (title excluded), q6 1 (NFC answer vs NFD text)
    expected = {
        "R@1": 2 / 6,
        "R@2": 3 / 6,
        "R@3": 3 / 6,
        # first relevant: q1 1, q2 1, q3 -, q4 -, q5 1, q6 1 over 6 qrels queries
        "MRR@10": 4 / 6,
        # binary nDCG: q1's two relevant passages at ranks 1 and 2 are its ideal ranking (1.0)
        "nDCG@10": 4 / 6,
        "hit@1": 4 / 6,
        "hit@2": 4 / 6,
        "hit@3": 4 / 6,
        # q1 has two relevant passages: p4 at 1, p1 at 2; q6's p3 has relevance 0
        "recall@1": 3.5 / 6,
        "recall@2": 4 / 6,
        "recall@3": 4 / 6,
    }
    assert list(out["metrics"]) == list(expected)
    assert out["metrics"] == pytest.approx(expected)


def test_qrels_all_gives_the_all_family(data):
    qa = _write(
        data["dir"] / "qrels_all.test.parquet",
        [("q1", "p1", 1), ("q1", "p4", 1), ("q2", "p2", 1), ("q3", "p4", 1), ("q3", "p3", 1)],
        QRELS_SCHEMA,
    )
    metrics = _metrics(data, "--qrels-all", str(qa))["metrics"]
    assert metrics["MRR_all@10"] == pytest.approx((1 + 1 + 0.5) / 3)
    assert metrics["hit_all@1"] == pytest.approx(2 / 3)
    assert metrics["hit_all@2"] == 1.0
    assert not any(k.startswith("recall_all") for k in metrics)


def test_per_query_values_average_to_the_metrics_exactly(data):
    """--per-query: every query's value of every metric (null outside a metric's denominator), in the
    queries' file order; each column's mean (math.fsum) is the metrics.json value to the last bit."""
    qa = _write(
        data["dir"] / "qrels_all.test.parquet",
        [("q1", "p1", 1), ("q1", "p4", 1), ("q2", "p2", 1), ("q3", "p4", 1), ("q3", "p3", 1)],
        QRELS_SCHEMA,
    )
    path = data["dir"] / "per_query.parquet"
    metrics = _metrics(data, "--qrels-all", str(qa), "--per-query", str(path))["metrics"]
    table = pq.read_table(path)
    assert table.schema == per_query_schema(list(metrics))
    df = table.to_pandas()
    assert df["qid"].tolist() == ["q1", "q2", "q3", "q4", "q5", "q6"]
    # the hand-computed values of test_hand_computed_metrics, query by query
    assert df["R@1"].tolist() == [0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
    assert df["R@2"].tolist() == [1.0, 1.0, 0.0, 0.0, 0.0, 1.0]
    assert df["recall@1"].tolist() == [0.5, 1.0, 0.0, 0.0, 1.0, 1.0]
    # qrels_all judges q1-q3 only: the _all family is null elsewhere
    assert df["MRR_all@10"].tolist()[:3] == [1.0, 1.0, 0.5]
    assert df["MRR_all@10"].isna().tolist() == [False] * 3 + [True] * 3
    for name, value in metrics.items():
        column = df[name].dropna().tolist()
        assert math.fsum(column) / len(column) == value, name
        assert query_tests.column_mean(df, name) == value, name
    assert sorted(p.name for p in data["dir"].iterdir() if "per_query" in p.name) == ["per_query.parquet"]


def test_per_query_values_are_exact_for_sums_that_float_addition_rounds(data):
    # MRR over seven queries whose relevant passage is at ranks 1..7: summing 1/r left to right (either
    # way round) rounds differently from the correctly rounded sum. The metric is the latter, so a
    # reader who averages the file's column with math.fsum gets it exactly, in any order.
    n = 7
    reciprocals = [1 / r for r in range(1, n + 1)]
    assert sum(reciprocals) / n != math.fsum(reciprocals) / n != sum(reversed(reciprocals)) / n
    run_rows = []
    for i in range(n):
        others = [k for k in range(n) if k != i]
        order = others[:i] + [i] + others[i:]  # query i's passage at rank i + 1
        run_rows += [(f"q{i}", f"p{k}", rank, float(n - rank)) for rank, k in enumerate(order, 1)]
    for key, rows, schema in (
        ("corpus", [(f"p{i}", "", f"passage {i}") for i in range(n)], CORPUS_SCHEMA),
        ("queries", [(f"q{i}", "", []) for i in range(n)], QUERIES_SCHEMA),
        ("qrels", [(f"q{i}", f"p{i}", 1) for i in range(n)], QRELS_SCHEMA),
        ("run", run_rows, RUN_SCHEMA),
    ):
        _write(data[key], rows, schema)
    path = data["dir"] / "per_query.parquet"
    mrr = _metrics(data, "--per-query", str(path), "--ks", "10")["metrics"]["MRR@10"]
    column = pq.read_table(path).column("MRR@10").to_pylist()
    assert column == reciprocals
    assert mrr == math.fsum(column) / n == math.fsum(reversed(column)) / n


def test_queries_without_answers_have_no_answer_metrics(data):
    _write(data["queries"], [(q, t, []) for q, t, _ in QUERIES], QUERIES_SCHEMA)
    metrics = _metrics(data)["metrics"]
    assert not any(k.startswith("R@") for k in metrics)
    assert metrics["MRR@10"] == pytest.approx(4 / 6)


def test_empty_qrels_have_no_qrels_metrics(data):
    _write(data["qrels"], [], QRELS_SCHEMA)
    out = _metrics(data)
    assert list(out["metrics"]) == ["R@1", "R@2", "R@3"]


def test_nothing_to_evaluate_is_an_error(data):
    _write(data["queries"], [(q, t, []) for q, t, _ in QUERIES], QUERIES_SCHEMA)
    _write(data["qrels"], [], QRELS_SCHEMA)
    with pytest.raises(DataError, match="nothing to evaluate"):
        evaluate.main(_argv(data))


def test_some_queries_without_answers_count_as_misses(data):
    rows = [(q, t, a if q != "q2" else []) for q, t, a in QUERIES]
    _write(data["queries"], rows, QUERIES_SCHEMA)
    out = _metrics(data)
    assert out["n_queries_without_answers"] == 1
    assert out["metrics"]["R@1"] == pytest.approx(1 / 6)


def test_regex_mode(data):
    _write(
        data["queries"],
        [
            ("q1", "", [r"capital\s+OF"]),
            ("q2", "", [r"\d{4}"]),
            ("q3", "", ["^europe"]),
            ("q4", "", ["x"]),
            ("q5", "", ["port"]),
            ("q6", "", [NFC_CAFE + r"\b"]),
        ],
        QUERIES_SCHEMA,
    )
    metrics = _metrics(data, "--match", "regex")["metrics"]
    # first hits: q1 2, q2 1, q3 none (^ anchors at line start), q5 1, q6 1
    assert (metrics["R@1"], metrics["R@2"]) == pytest.approx((3 / 6, 4 / 6))


@pytest.mark.parametrize("bad_qid,row", [("q3", 2), ("q4", 3)])  # q4 is not in the run
def test_bad_regex_names_query_and_answer(data, capsys, bad_qid, row):
    _write(
        data["queries"],
        [(q, t, a if q != bad_qid else ["ok", "(unclosed"]) for q, t, a in QUERIES],
        QUERIES_SCHEMA,
    )
    with pytest.raises(DataError) as err:
        evaluate.main(_argv(data, "--match", "regex"))
    assert str(data["queries"]) in str(err.value)
    assert f"'{bad_qid}'" in str(err.value) and "(unclosed" in str(err.value)
    assert err.value.record == row and err.value.field == "answers"
    from pipeline.core.cli import run_main

    with pytest.raises(SystemExit) as exit_:
        run_main(evaluate.main, _argv(data, "--match", "regex"))
    assert exit_.value.code == 2
    assert "(unclosed" in capsys.readouterr().err


@pytest.mark.parametrize(
    "rows,record,field,message",
    [
        (RUN + [("q6", "p5", 2, 1.0)], len(RUN), "pid", "duplicate (qid, pid)"),
        ([r if r[:2] != ("q1", "p2") else ("q1", "p2", 4, 1.0) for r in RUN], 3, "rank", "1..n"),
        ([r if r[:2] != ("q1", "p2") else ("q1", "p2", 2, 1.0) for r in RUN], 3, "rank", "1..n"),
        ([r if r[:2] != ("q6", "p5") else ("q6", "p5", 0, 1.0) for r in RUN], len(RUN) - 1, "rank", "1..n"),
        (RUN + [("q9", "p1", 1, 1.0)], len(RUN), "qid", "not in the evaluated queries"),
        (RUN + [("q6", "p99", 2, 1.0)], len(RUN), "pid", "not in the corpus"),
    ],
)
def test_run_validation_names_file_record_field(data, rows, record, field, message):
    _write(data["run"], rows, RUN_SCHEMA)
    with pytest.raises(DataError) as err:
        evaluate.main(_argv(data))
    assert message in str(err.value)
    assert (err.value.file, err.value.record, err.value.field) == (str(data["run"]), record, field)
    assert not (data["dir"] / "metrics.json").exists()


def test_run_with_wrong_column_type_is_rejected(data):
    df = pd.DataFrame(RUN, columns=RUN_SCHEMA.names).assign(rank=lambda d: d["rank"].astype(str))
    df.to_parquet(data["run"])
    with pytest.raises(DataError, match="expected an integer type") as err:
        runs.read_run(data["run"])
    assert err.value.field == "rank"


def test_trec_export_in_rank_order(data):
    _metrics(data, "--trec", str(data["dir"] / "run.test.trec"))
    lines = (data["dir"] / "run.test.trec").read_text(encoding="utf-8").splitlines()
    assert lines[:3] == ["q1 Q0 p4 1 5 bm25", "q1 Q0 p1 2 5 bm25", "q1 Q0 p2 3 1 bm25"]
    assert len(lines) == len(RUN)
    assert (
        runs.main(
            [
                "--run",
                str(data["run"]),
                "--tag",
                "x",
                "--trec",
                str(data["dir"] / "b.trec"),
                "--queries",
                str(data["queries"]),
            ]
        )
        == 0
    )
    assert (data["dir"] / "b.trec").read_text(encoding="utf-8").splitlines()[3] == "q2 Q0 p2 1 9 x"


def test_info_fields_are_carried_but_cannot_override(data):
    info = data["dir"] / "info.json"
    info.write_text(json.dumps({"notes": "zero-shot", "seeds": [0, 1]}), encoding="utf-8")
    out = _metrics(data, "--info", str(info))
    assert (out["notes"], out["seeds"]) == ("zero-shot", [0, 1])
    assert list(out)[-1] == "metrics"
    info.write_text(json.dumps({"metrics": {}}), encoding="utf-8")
    with pytest.raises(DataError, match="cannot be overridden"):
        evaluate.main(_argv(data, "--info", str(info)))


# ---- the Snakemake rules ---------------------------------------------------------------------------


@pytest.mark.slow
def test_rules_evaluate_and_gather(data, tmp_path):
    """common.smk + evaluate.smk on the tiny dataset: two methods, TREC export, qrels_all for synthkb."""
    work = tmp_path / "wf"
    for dataset in ("tiny", "synth"):
        res = work / "resources" / dataset
        res.mkdir(parents=True)
        for name in ("corpus", "queries", "qrels"):
            shutil.copy(data[name], res / data[name].name)
        if dataset == "synth":
            shutil.copy(data["qrels"], res / "qrels_all.test.parquet")
        for method in ("bm25", "zeroshot"):
            (work / "results" / dataset / method).mkdir(parents=True)
            shutil.copy(data["run"], work / "results" / dataset / method / "run.test.parquet")
        # a dense run must rank every query (the rule allows missing ones for bm25 only): q4 gets
        # a passage without its answer, so the metrics stay those of the bm25 run
        _write(
            work / "results" / dataset / "zeroshot" / "run.test.parquet",
            RUN + [("q4", "p3", 1, 1.0)],
            RUN_SCHEMA,
        )
    (work / "config.yaml").write_text(
        json.dumps(
            {
                "seed": 0,
                "seeds": None,
                "methods": ["bm25", "zeroshot"],
                "eval": {
                    "split": "test",
                    "match": "string",
                    "ks": [1, 2],
                    "depth": 3,
                    "trec_export": True,
                    "compare": [["zeroshot", "bm25"], ["absent", "bm25"]],
                },
                "datasets": {
                    "tiny": {"format": "squad", "source": {"path": "unused.json"}},
                    "synth": {"format": "synthkb", "entities": 10},
                },
            }
        ),
        encoding="utf-8",
    )
    rules = REPO / "workflow" / "rules"
    (work / "Snakefile").write_text(
        f'configfile: "config.yaml"\ninclude: "{rules}/common.smk"\ninclude: "{rules}/evaluate.smk"\n',
        encoding="utf-8",
    )
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "-c1",
            "results/tiny/metrics.json",
            "results/synth/metrics.json",
            "--quiet",
            "all",
        ],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    tiny = json.loads((work / "results/tiny/metrics.json").read_text(encoding="utf-8"))
    assert list(tiny["methods"]) == ["bm25", "zeroshot"]
    assert tiny["methods"]["bm25"]["metrics"]["R@1"] == pytest.approx(2 / 6)
    assert "MRR_all@10" not in tiny["methods"]["bm25"]["metrics"]
    synth = json.loads((work / "results/synth/metrics.json").read_text(encoding="utf-8"))
    assert synth["methods"]["zeroshot"]["metrics"]["MRR_all@10"] == pytest.approx(4 / 6)
    assert (work / "results/tiny/zeroshot/run.test.trec").exists()
    assert (work / "results/tiny/metrics.md").read_text(encoding="utf-8").startswith("# tiny")
    # the rule passes eval.compare: identical runs differ by 0; one run each, so no interval over
    # seeds but the paired test over the 6 queries of the runs' per_query.parquet
    [pair] = tiny["comparisons"]
    assert (pair["method"], pair["baseline"], pair["n"], pair["interval"]) == (
        "zeroshot",
        "bm25",
        1,
        "queries",
    )
    assert pair["query_test"]["method_file"] == "results/tiny/zeroshot/per_query.parquet"
    assert pair["query_test"]["baseline_file"] == "results/tiny/bm25/per_query.parquet"
    assert pair["metrics"]["R@1"] == {
        "diff": 0.0,
        "std": 0.0,
        "ci_low": 0.0,
        "ci_high": 0.0,
        "p_value": 1.0,
        "n_queries": 6,
        "exact": True,
    }
    per_query = pd.read_parquet(work / "results/tiny/bm25/per_query.parquet")
    assert per_query["R@1"].mean() == pytest.approx(tiny["methods"]["bm25"]["metrics"]["R@1"])
    # identical runs: their row says so once, not a cell of +0.000 [0.000, 0.000] p=1.000 per metric
    table = (work / "results/tiny/metrics.md").read_text(encoding="utf-8")
    assert "| zeroshot − bm25 | 1 (not recorded); bm25 seed-free | identical rankings" in table
    assert "p=1.000 (queries)" not in table

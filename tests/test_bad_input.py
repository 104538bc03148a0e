"""Bad input refused where it enters, with a message that names the file (or config key), the record
and the field: empty answers at data preparation, Parquet columns of the wrong type at every stage's
read, unknown methods and negative seeds at workflow start-up."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.core.cli import run_main
from pipeline.core.config import ConfigError, load_config, validate_config
from pipeline.core.schemas import (
    AR2_NEGATIVES_SCHEMA,
    CANDIDATES_SCHEMA,
    CORPUS_SCHEMA,
    FILTER_DECISIONS_SCHEMA,
    QRELS_SCHEMA,
    QUERIES_SCHEMA,
    RUN_SCHEMA,
)
from pipeline.core.storage import DataError, read_table, write_table
from pipeline.data.prepare import main as prepare_main

REPO = Path(__file__).resolve().parent.parent
FIX = Path(__file__).parent / "fixtures"


# ---- item 3: empty answers are refused at prepare time -------------------------------------------


def _prepare_fails(capsys, out: Path, fmt: str, files: dict[str, Path]) -> str:
    argv = ["--dataset", "t", "--format", fmt, "--out-dir", str(out)]
    for role, path in files.items():
        argv += ["--file", f"{role}={path}"]
    with pytest.raises(SystemExit) as exc:
        run_main(prepare_main, argv)
    assert exc.value.code == 2
    assert not (out / "manifest.json").exists() and not (out / "queries.test.parquet").exists()
    return capsys.readouterr().err


def _squad(answers: list[str]) -> dict:
    qas = [
        {"id": "q0", "question": "who?", "answers": [{"text": "Aaron", "answer_start": 0}]},
        {"id": "q1", "question": "what?", "answers": [{"text": a, "answer_start": 0} for a in answers]},
    ]
    return {
        "version": "1.1",
        "data": [
            {"title": "A", "paragraphs": [{"context": "Aaron is a prophet.", "qas": qas[:1]}]},
            {
                "title": "B",
                "paragraphs": [
                    {"context": "Moses is his brother.", "qas": []},
                    {"context": "Moses led them.", "qas": qas[1:]},
                ],
            },
        ],
    }


@pytest.mark.parametrize("answers, index", [([""], 0), (["Moses", "   "], 1), (["\t\n"], 0)])
def test_squad_empty_answer_fails_at_prepare_naming_file_record_field(tmp_path, capsys, answers, index):
    source = tmp_path / "squad.json"
    source.write_text(json.dumps(_squad(answers)))
    err = _prepare_fails(capsys, tmp_path / "out", "squad", {"source": source})
    assert str(source) in err and "record 1" in err  # the second article
    assert f"paragraphs[1].qas[0].answers[{index}].text" in err and "empty answer" in err


@pytest.mark.parametrize("literal, field", [("['']", "answers[0]"), ("['K2', ' ']", "answers[1]")])
def test_qa_csv_empty_answer_fails_at_prepare_naming_file_line_field(tmp_path, capsys, literal, field):
    qa = tmp_path / "test.qa.csv"
    qa.write_text(f"who sang it\t['Whitney Houston']\nwhat mountain\t{literal}\n")
    err = _prepare_fails(
        capsys, tmp_path / "out", "dpr", {"corpus": FIX / "dpr" / "psgs_w100.tsv", "test": qa}
    )
    assert str(qa) in err and "record 2" in err and f"field '{field}'" in err and "empty answer" in err


def test_biencoder_empty_answer_fails_at_prepare(tmp_path, capsys):
    dev = tmp_path / "dev.json"
    dev.write_text(
        json.dumps(
            [
                {
                    "question": "q",
                    "answers": ["x", ""],
                    "positive_ctxs": [{"passage_id": "1", "title": "", "text": "t"}],
                }
            ]
        )
    )
    err = _prepare_fails(
        capsys, tmp_path / "out", "dpr", {"corpus": FIX / "dpr" / "psgs_w100.tsv", "dev": dev}
    )
    assert str(dev) in err and "record 0" in err and "field 'answers[1]'" in err


def test_beir_empty_answer_fails_at_prepare(tmp_path, capsys):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"_id": "d1", "title": "", "text": "Aaron"}\n')
    queries = tmp_path / "queries.jsonl"
    queries.write_text(
        '{"_id": "q1", "text": "who", "answers": ["Aaron"]}\n'
        '{"_id": "q2", "text": "who else", "answers": [""]}\n'
    )
    qrels = tmp_path / "test.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td1\t1\n")
    err = _prepare_fails(
        capsys, tmp_path / "out", "beir", {"corpus": corpus, "queries": queries, "qrels_test": qrels}
    )
    assert str(queries) in err and "record 2" in err and "field 'answers[0]'" in err


# ---- item 4: a Parquet column of the wrong type is refused by the reading stage ----------------------


def _candidates(path: Path, rank_type: pa.DataType = pa.int32()) -> Path:
    """Twelve candidates of one query: as text, ranks 1..12 would sort 1, 10, 11, 12, 2, ..."""
    n = 12
    table = pa.table(
        {
            "qid": ["q0"] * n,
            "pid": [f"p{i}" for i in range(1, n + 1)],
            "rank": list(range(1, n + 1)),
            "source_score": [float(n - i) for i in range(n)],
            "source": ["bm25"] * n,
            "has_answer": [False] * n,
            "is_false_negative": [None] * n,
            "fn_label_source": [None] * n,
            "positive_pid": ["pos"] * n,
        },
        schema=CANDIDATES_SCHEMA,
    )
    if rank_type != pa.int32():
        table = table.set_column(2, "rank", pa.array([str(r) for r in table["rank"].to_pylist()]))
    write_table(path, table)
    return path


def test_candidates_with_text_ranks_are_refused(tmp_path):
    from pipeline.sieve.passage_sieve import read_candidates

    good = read_candidates(_candidates(tmp_path / "good.parquet"))
    assert good["rank"].tolist() == list(range(1, 13))
    bad = _candidates(tmp_path / "bad.parquet", pa.string())
    with pytest.raises(DataError) as err:
        read_candidates(bad)
    assert (err.value.file, err.value.field) == (str(bad), "rank")
    assert "string" in err.value.message and "int32" in err.value.message


def _write(path: Path, columns: dict, schema: pa.Schema, **retype: pa.DataType) -> Path:
    """A table of ``schema`` with the columns in ``retype`` given another type."""
    fields = [pa.field(f.name, retype.get(f.name, f.type)) for f in schema]
    pq.write_table(pa.table(columns, schema=pa.schema(fields)), path)
    return path


QUERIES = {"qid": ["q1", "q2"], "text": ["alpha", "beta"], "answers": [["a"], ["b"]]}
QRELS = {"qid": ["q1", "q2"], "pid": ["p1", "p2"], "relevance": [1, 1]}
CORPUS = {"pid": ["p1", "p2"], "title": ["", ""], "text": ["alpha a", "beta b"]}


def test_checked_read_names_file_column_expected_and_found_type(tmp_path):
    path = _write(
        tmp_path / "q.parquet", {**QUERIES, "answers": ["a", "b"]}, QUERIES_SCHEMA, answers=pa.string()
    )
    with pytest.raises(DataError) as err:
        read_table(path, schema=QUERIES_SCHEMA)
    assert (err.value.file, err.value.field) == (str(path), "answers")
    assert "list<string>" in err.value.message and "found string" in err.value.message
    # Only the columns read are checked: a caller that does not read the answers is not refused.
    assert read_table(path, ["qid", "text"], schema=QUERIES_SCHEMA)["qid"].tolist() == ["q1", "q2"]


def test_checked_read_accepts_the_projects_own_tables_and_pandas_round_trips(tmp_path):
    own = tmp_path / "own.parquet"
    write_table(own, pd.DataFrame(QUERIES), QUERIES_SCHEMA)
    assert len(read_table(own, schema=QUERIES_SCHEMA)) == 2
    # pandas writes large_string and int64: the same kinds of values, accepted.
    via_pandas = tmp_path / "pandas.parquet"
    pd.DataFrame(QRELS).to_parquet(via_pandas)
    assert pq.read_schema(via_pandas).field("relevance").type == pa.int64()
    assert len(read_table(via_pandas, schema=QRELS_SCHEMA)) == 2


def test_training_queries_and_qrels_are_type_checked(tmp_path):
    from pipeline.training.data import load_queries_with_positives

    queries = _write(tmp_path / "q.parquet", QUERIES, QUERIES_SCHEMA)
    qrels = _write(
        tmp_path / "r.parquet", {**QRELS, "relevance": ["1", "1"]}, QRELS_SCHEMA, relevance=pa.string()
    )
    with pytest.raises(DataError) as err:
        load_queries_with_positives(queries, qrels)
    assert (err.value.file, err.value.field) == (str(qrels), "relevance")


def test_sieve_positives_with_float_relevance_are_refused(tmp_path):
    from pipeline.sieve.data import read_positives

    qrels = _write(
        tmp_path / "r.parquet", {**QRELS, "relevance": [1.0, 0.5]}, QRELS_SCHEMA, relevance=pa.float64()
    )
    with pytest.raises(DataError) as err:
        read_positives(qrels)
    assert (err.value.file, err.value.field) == (str(qrels), "relevance")


def test_bm25_corpus_with_integer_pids_is_refused(tmp_path):
    from pipeline.retrieval.bm25 import build_index

    corpus = _write(tmp_path / "corpus.parquet", {**CORPUS, "pid": [1, 2]}, CORPUS_SCHEMA, pid=pa.int64())
    with pytest.raises(DataError) as err:
        build_index(corpus, tmp_path / "index", k1=0.9, b=0.4, stemmer=None, stopwords=None)
    assert (err.value.file, err.value.field) == (str(corpus), "pid")


def test_ar2_round_negatives_with_text_ranks_are_refused(tmp_path):
    from pipeline.ar2.round_data import load_round_data
    from pipeline.retrieval.model import RetrieverSettings

    cols = {
        "qid": ["q1"],
        "pid": ["p2"],
        "rank": ["1"],
        "score": [0.5],
        "source": ["bm25"],
        "has_answer": [False],
        "excluded": [False],
        "positive_score": [0.9],
    }
    bad = _write(tmp_path / "negatives.parquet", cols, AR2_NEGATIVES_SCHEMA, rank=pa.string())
    queries = pd.DataFrame({"qid": ["q1"], "text": ["alpha"], "positive": ["p1"]})
    with pytest.raises(DataError) as err:
        load_round_data(bad, None, queries, tmp_path / "corpus.parquet", RetrieverSettings())
    assert (err.value.file, err.value.field) == (str(bad), "rank")


def test_filter_decisions_with_text_kept_are_refused(tmp_path):
    from pipeline.sieve.report import read_decisions

    cols = {
        "qid": ["q1"],
        "pid": ["p1"],
        "rank": [1],
        "source_score": [1.0],
        "score": [0.5],
        "kept": ["yes"],
        "is_false_negative": [None],
        "fn_label_source": [None],
        "positive_pid": ["p0"],
    }
    bad = _write(tmp_path / "decisions.parquet", cols, FILTER_DECISIONS_SCHEMA, kept=pa.string())
    with pytest.raises(DataError) as err:
        read_decisions(bad)
    assert (err.value.file, err.value.field) == (str(bad), "kept")


def test_run_with_text_scores_is_refused(tmp_path):
    from pipeline.retrieval.runs import read_run

    cols = {"qid": ["q1"], "pid": ["p1"], "rank": [1], "score": ["0.5"]}
    bad = _write(tmp_path / "run.parquet", cols, RUN_SCHEMA, score=pa.string())
    with pytest.raises(DataError) as err:
        read_run(bad)
    assert (err.value.file, err.value.field) == (str(bad), "score")


# ---- item 7: unknown methods and negative seeds are refused at start-up, naming the key ---------------


@pytest.mark.parametrize(
    "overlay, key",
    [
        ({"seed": -1}, "'seed'"),
        ({"seeds": [0, -1]}, "'seeds.1'"),
        ({"ar2": {"seeds": [-3]}}, "'ar2.seeds.0'"),
    ],
)
def test_negative_seed_is_refused_naming_the_key(overlay, key):
    config = load_config()
    for name, value in overlay.items():
        config[name] = {**config[name], **value} if isinstance(value, dict) else value
    with pytest.raises(ConfigError) as err:
        validate_config(config)
    assert f"config key {key}: Input should be greater than or equal to 0" in str(err.value)


def test_unknown_method_is_refused_naming_the_key_and_the_known_methods():
    config = load_config()
    config["methods"] = ["bm25", "foo"]
    with pytest.raises(ConfigError) as err:
        validate_config(config, methods=["bm25", "dpr", "dpr_oracle"])
    message = str(err.value)
    assert "'methods.1'" in message and "'foo'" in message
    assert "bm25, dpr, dpr_oracle" in message


def _load_workflow(tmp_path: Path, config: dict):
    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings

    with SnakemakeApi(OutputSettings()) as api:
        return api.workflow(
            resource_settings=ResourceSettings(),
            snakefile=REPO / "Snakefile",
            config_settings=ConfigSettings(config=config),
            workdir=tmp_path,
        )._workflow


def test_workflow_start_up_refuses_an_unknown_method(tmp_path):
    with pytest.raises(Exception) as err:
        _load_workflow(tmp_path, {"methods": ["bm25", "foo"]})
    message = str(err.value)
    assert "methods.1" in message and "'foo'" in message
    # the valid names come from the rules: per-filter DPR controls included
    assert "dpr_oracle" in message and "ar2_sieve" in message and "bm25" in message


@pytest.mark.parametrize("source", ["dpr_sieve", "dpr_oracle"])
def test_workflow_start_up_refuses_a_sieve_source_that_needs_the_sieve_first(tmp_path, source):
    # dpr_sieve / dpr_oracle train on the sieve's own candidates: a cycle the DAG would not name
    with pytest.raises(Exception) as err:
        _load_workflow(tmp_path, {"sieve": {"source": source}})
    message = str(err.value)
    assert "sieve.source" in message and f"'{source}'" in message and "'synthkb'" in message
    assert "cycle" in message and "zeroshot, dpr, dpr_ccr" in message


def test_a_sieve_source_of_the_users_own_is_accepted_at_start_up(tmp_path):
    _load_workflow(tmp_path, {"sieve": {"source": "my_mined_negatives"}})

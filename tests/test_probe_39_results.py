"""Issue 39, silent wrong results and unclear messages: BM25's empty queries and passages, cut-offs
deeper than the run, Parquet read through its own pandas metadata, duplicate and control-character
ids, NaN in a metrics.json. Each test broke its promise (docs/failures.md) before its fix."""

from __future__ import annotations

import contextlib
import io
import json
import math
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.core.cli import run_main
from pipeline.core.schemas import CORPUS_SCHEMA, QUERIES_SCHEMA, RUN_SCHEMA
from pipeline.core.storage import DataError, read_table

# ---- helpers -------------------------------------------------------------------------------------


def _stage(main, argv: list[str]) -> tuple[int, str]:
    """Exit status and stderr (whitespace folded) of a stage's CLI run in process."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit) as exit_info:
        run_main(main, argv)
    return exit_info.value.code, " ".join(err.getvalue().split())


def _corpus(path: Path, texts: list[str], pids: list[str] | None = None) -> Path:
    pids = pids or [f"p{i + 1}" for i in range(len(texts))]
    pq.write_table(
        pa.table({"pid": pids, "title": [""] * len(texts), "text": texts}, schema=CORPUS_SCHEMA), path
    )
    return path


def _queries(path: Path, rows: list[tuple[str, str, list[str]]]) -> Path:
    qids, texts, answers = map(list, zip(*rows))
    pq.write_table(pa.table({"qid": qids, "text": texts, "answers": answers}, schema=QUERIES_SCHEMA), path)
    return path


# ---- 1. BM25: a query without terms matches nothing, an empty passage matches nothing ---------------

STOPWORD_CORPUS = ["river stone", "market winter", "the of and is"]


@pytest.fixture
def stopword_index(tmp_path) -> Path:
    from pipeline.retrieval import bm25

    corpus = _corpus(tmp_path / "corpus.parquet", STOPWORD_CORPUS)
    bm25.build_index(corpus, tmp_path / "index", k1=0.9, b=0.4, stemmer="english", stopwords="en")
    return tmp_path / "index"


def test_a_bm25_query_without_terms_matches_nothing(stopword_index):
    from pipeline.retrieval.bm25 import BM25Index

    # bm25s gave both the query and the stopword passage the token "": p3 ranked first for each
    queries = ["qwertyuiop", "the of", "", "🙂", "rivers", "the stone"]
    found = BM25Index(stopword_index).search(queries, 3)
    assert found[:4] == [[], [], [], []]
    assert [pid for pid, _ in found[4]] == ["p1"] and [pid for pid, _ in found[5]] == ["p1"]


def test_an_empty_passage_is_never_a_bm25_match(tmp_path):
    from pipeline.retrieval import bm25

    corpus = _corpus(tmp_path / "c.parquet", ["river stone", "", "the of", "winter river"])
    bm25.build_index(corpus, tmp_path / "index", k1=0.9, b=0.4, stemmer="english", stopwords="en")
    found = bm25.BM25Index(tmp_path / "index").search(["", "of", "river", "xyz", "winter"], 4)
    assert not {pid for hits in found for pid, _ in hits} & {"p2", "p3"}, found
    assert [len(hits) for hits in found] == [0, 0, 2, 0, 1]


def test_a_stopword_query_is_no_hit_in_the_run_nor_the_metrics(stopword_index, tmp_path):
    from pipeline.evaluation import evaluate
    from pipeline.retrieval import bm25

    # the answer "is" stands in the stopword passage only: its rank 1 counted as a hit@1
    queries = _queries(tmp_path / "q.parquet", [("q1", "river", ["stone"]), ("q2", "the of and", ["is"])])
    run = tmp_path / "run.parquet"
    bm25.retrieve_run(stopword_index, queries, 3, run)
    assert set(read_table(run)["qid"]) == {"q1"}
    qrels = tmp_path / "qrels.parquet"
    pq.write_table(pa.table({"qid": ["q1"], "pid": ["p1"], "relevance": [1]}), qrels)
    corpus = tmp_path / "corpus.parquet"
    info, _, per_query = evaluate.evaluate(run, queries, qrels, corpus, [1, 3], allow_missing_queries=True)
    assert info["metrics"]["R@1"] == 0.5 and info["n_unranked_queries"] == 1
    assert per_query.column("R@1").to_pylist() == [1.0, 0.0]


def test_bm25_mining_gives_a_query_without_terms_no_negative(stopword_index, tmp_path):
    from pipeline.retrieval import bm25

    queries = _queries(tmp_path / "q.parquet", [("q1", "river market", ["x"]), ("q2", "the of", ["y"])])
    qrels = tmp_path / "qrels.parquet"
    pq.write_table(pa.table({"qid": ["q1", "q2"], "pid": ["p1", "p2"], "relevance": [1, 1]}), qrels)
    out = tmp_path / "neg.parquet"
    bm25.mine_negatives(stopword_index, queries, qrels, tmp_path / "corpus.parquet", 5, out)
    negatives = read_table(out)
    # q1's only other match is p2; nothing is padded in, and q2 (no terms) gets nothing
    assert list(zip(negatives["qid"], negatives["pid"])) == [("q1", "p2")]


# ---- 2. cut-offs deeper than the run ---------------------------------------------------------------


def test_a_cut_off_deeper_than_eval_depth_is_a_config_error():
    from pipeline.core.config import ConfigError, load_config, validate_config

    config = load_config()
    config["eval"].update(ks=[1, 5, 20], depth=3)  # reported R@5 = R@20 = R@3
    with pytest.raises(ConfigError) as err:
        validate_config(config)
    assert "config key 'eval.depth': 3 is shallower than the cut-off(s) 5, 20 of eval.ks" in str(err.value)
    config["eval"].update(ks=[1, 5, 20], depth=20)
    validate_config(config)


def _depth_case(tmp_path: Path, n_passages: int, depth: int) -> list[str]:
    texts = [f"passage {i} about rivers" for i in range(n_passages)]
    corpus = _corpus(tmp_path / "corpus.parquet", texts)
    queries = _queries(tmp_path / "q.parquet", [("q1", "rivers", ["about"]), ("q2", "stones", ["9"])])
    rows = [(q, f"p{r}", r, 1.0 / r) for q in ("q1", "q2") for r in range(1, depth + 1)]
    run = tmp_path / "run.parquet"
    pq.write_table(
        pa.Table.from_pylist([dict(zip(RUN_SCHEMA.names, r)) for r in rows], schema=RUN_SCHEMA), run
    )
    qrels = tmp_path / "qrels.parquet"
    pq.write_table(pa.table({"qid": ["q1"], "pid": ["p1"], "relevance": [1]}), qrels)
    return ["--run", str(run), "--queries", str(queries), "--qrels", str(qrels), "--corpus", str(corpus)]


def test_a_run_shallower_than_the_largest_cut_off_is_refused_naming_it(tmp_path):
    from pipeline.evaluation import evaluate

    argv = _depth_case(tmp_path, n_passages=10, depth=3)
    out = tmp_path / "metrics.json"
    tail = ["--dataset", "d", "--method", "m", "--split", "test", "--out", str(out)]
    code, err = _stage(evaluate.main, [*argv, *tail, "--ks", "1", "5", "20"])
    assert code == 2 and not out.exists(), err
    assert f"{tmp_path / 'run.parquet'}: field 'rank': the run ranks at most 3 passages per query" in err
    assert "cut-off 20 of --ks (the corpus has 10)" in err and "Traceback" not in err
    # a cut-off the run reaches is measured as before
    assert evaluate.main([*argv, *tail, "--ks", "1", "3"]) == 0


def test_a_corpus_smaller_than_the_cut_off_is_no_error(tmp_path):
    from pipeline.evaluation import evaluate

    # every passage ranked: R@5 is truly R@3 when the corpus holds 3
    argv = _depth_case(tmp_path, n_passages=3, depth=3)
    out = tmp_path / "metrics.json"
    tail = ["--dataset", "d", "--method", "m", "--split", "test", "--out", str(out)]
    assert evaluate.main([*argv, *tail, "--ks", "1", "5"]) == 0
    assert json.loads(out.read_text())["metrics"]["R@5"] == 0.5


# ---- 3. Parquet is read by its Arrow columns, never through its own pandas metadata ----------------


def _with_pandas_metadata(table: pa.Table, path: Path, metadata: bytes) -> Path:
    pq.write_table(table.replace_schema_metadata({b"pandas": metadata}), path)
    return path


def _swapped(table: pa.Table, a: str, b: str) -> bytes:
    meta = json.loads(
        pa.Table.from_pandas(table.to_pandas(), preserve_index=False).schema.metadata[b"pandas"]
    )
    for column in meta["columns"]:
        column["name"] = {a: b, b: a}.get(column["name"], column["name"])
    return json.dumps(meta).encode()


QUERY_ROWS = {
    "qid": ["q1", "q2"],
    "text": ["river stone", "market winter"],
    "answers": [["stone"], ["winter"]],
}


@pytest.mark.parametrize("kind", ["set_index", "swapped", "not json"])
def test_a_queries_file_is_read_by_its_arrow_columns(tmp_path, kind):
    path = tmp_path / "queries.parquet"
    table = pa.table(QUERY_ROWS, schema=QUERIES_SCHEMA)
    if kind == "set_index":  # passed the schema check, then KeyError: 'qid'
        pd.DataFrame(QUERY_ROWS).set_index("qid").to_parquet(path)
    elif kind == "swapped":  # qid and text silently swapped
        _with_pandas_metadata(table, path, _swapped(table, "qid", "text"))
    else:  # a JSONDecodeError traceback
        _with_pandas_metadata(table, path, b"{not json")
    df = read_table(path, ["qid", "text"], schema=QUERIES_SCHEMA)
    assert list(df.columns) == ["qid", "text"] and df["qid"].tolist() == ["q1", "q2"]
    assert df["text"].tolist() == ["river stone", "market winter"]


def test_bm25_retrieves_for_the_right_qids_whatever_the_metadata(stopword_index, tmp_path):
    from pipeline.retrieval import bm25

    table = pa.table(QUERY_ROWS, schema=QUERIES_SCHEMA)
    queries = _with_pandas_metadata(table, tmp_path / "q.parquet", _swapped(table, "qid", "text"))
    run = tmp_path / "run.parquet"
    bm25.retrieve_run(stopword_index, queries, 3, run)  # was an empty run, exit 0
    assert read_table(run)[["qid", "pid"]].values.tolist() == [["q1", "p1"], ["q2", "p2"]]


def test_a_missing_column_is_named_even_when_the_metadata_claims_it(tmp_path):
    # the pandas metadata names a 'qid' index the Arrow schema lacks: the file's own columns count
    table = pa.table({"text": ["a"], "answers": [["x"]]})
    meta = json.loads(
        pa.Table.from_pandas(table.to_pandas(), preserve_index=False).schema.metadata[b"pandas"]
    )
    meta["index_columns"] = ["qid"]
    path = _with_pandas_metadata(table, tmp_path / "q.parquet", json.dumps(meta).encode())
    with pytest.raises(DataError) as err:
        read_table(path, ["qid", "text"], schema=QUERIES_SCHEMA)
    assert (err.value.file, err.value.field) == (str(path), "qid")


def test_the_sieve_reads_corpus_rows_by_their_arrow_columns(tmp_path):
    from pipeline.sieve.data import load_passages

    path = tmp_path / "corpus.parquet"
    # saved after set_index("pid"): the batches came back with pid as the index, then KeyError
    pd.DataFrame({"pid": ["a", "b"], "title": ["", ""], "text": ["x y", "z w"]}).set_index("pid").to_parquet(
        path
    )
    passages = load_passages(path, ["b"])
    assert passages.loc["b", "text"] == "z w"


def test_per_query_values_are_read_by_their_arrow_columns(tmp_path):
    from pipeline.evaluation.query_tests import read_per_query

    table = pa.table({"qid": ["q1", "q2"], "R@1": [1.0, 0.0], "R@5": [1.0, 1.0]})
    path = _with_pandas_metadata(table, tmp_path / "per_query.parquet", _swapped(table, "R@1", "R@5"))
    df = read_per_query(path)
    assert df["R@1"].tolist() == [1.0, 0.0] and df["R@5"].tolist() == [1.0, 1.0]


# ---- 4. duplicate pids named at the corpus, control characters in ids, NaN metrics ------------------


def test_bm25_indexing_refuses_a_duplicate_pid_naming_the_corpus(tmp_path):
    from pipeline.retrieval import bm25

    corpus = _corpus(tmp_path / "corpus.parquet", ["a river", "a stone", "a market"], ["p1", "p2", "p1"])
    with pytest.raises(DataError) as err:  # was found at evaluate only, naming the run
        bm25.build_index(corpus, tmp_path / "index", k1=0.9, b=0.4, stemmer=None, stopwords=None)
    assert str(err.value) == (
        f"{corpus}: record 2: field 'pid': duplicate pid 'p1' (records 0 and 2); ids must be unique"
    )
    assert not (tmp_path / "index").exists()


def test_encoding_refuses_a_duplicate_pid_before_encoding(tmp_path):
    import torch

    from pipeline.retrieval.encode import encode_table

    corpus = _corpus(tmp_path / "corpus.parquet", ["a", "b", "c", "d"], ["p1", "p2", "p3", "p2"])
    # the retriever is never touched: the check comes first (it came after encoding, at gather)
    with pytest.raises(DataError, match=r"record 3: field 'pid': duplicate pid 'p2' \(records 1 and 3\)"):
        encode_table(None, corpus, tmp_path / "emb", 0, 2, device=torch.device("cpu"), progress=False)
    assert not (tmp_path / "emb").exists() or not any((tmp_path / "emb").iterdir())


@pytest.mark.parametrize(
    "fmt, files, where",
    [
        (
            "msmarco",
            {
                "corpus": "1\tThe river.\n2\x00\tStone.\n",
                "queries_train": "q1\triver\n",
                "qrels_train": "q1 0 1 1\n",
            },
            "corpus: record 2: field 'pid'",
        ),
        (
            "msmarco",
            {
                "corpus": "1\tThe river.\n",
                "queries_train": "q\x071\triver\n",
                "qrels_train": "q\x071 0 1 1\n",
            },
            "queries_train: record 1: field 'qid'",
        ),
        (
            "beir",
            {
                "corpus": '{"_id": "d1", "text": "River."}\n{"_id": "d\\u0000", "text": "Stone."}\n',
                "queries": '{"_id": "q1", "text": "r"}\n',
                "qrels_test": "query-id\tcorpus-id\tscore\nq1\td1\t1\n",
            },
            "corpus: record 2: field '_id'",
        ),
    ],
)
def test_a_control_character_in_an_id_is_refused_naming_file_record_and_field(tmp_path, fmt, files, where):
    from tests.test_failures_probe import _prepare

    code, err = _prepare(tmp_path, fmt, files)
    assert code == 2 and where in err and "contains the control character U+00" in err, err


def test_a_squad_title_with_a_control_character_is_refused(tmp_path):
    from tests.test_failures_probe import _article, _prepare, _squad

    code, err = _prepare(tmp_path, "squad", {"source": _squad(_article("Ri\u0000ver", "a1"))})
    assert code == 2 and "record 0: field 'title'" in err and "U+0000" in err, err


def test_the_trec_export_refuses_a_control_character(tmp_path):
    from pipeline.retrieval.runs import write_trec

    run = pd.DataFrame({"qid": ["q1", "q1"], "pid": ["p1", "p\x002"], "rank": [1, 2], "score": [2.0, 1.0]})
    with pytest.raises(DataError) as err:  # a raw NUL was written into run.test.trec
        write_trec(run, tmp_path / "run.trec", "bm25", file="run.parquet")
    assert (err.value.file, err.value.record, err.value.field) == ("run.parquet", 1, "pid")
    assert not (tmp_path / "run.trec").exists()


@pytest.mark.parametrize("value, key", [(math.nan, "metrics.R@1"), (math.inf, "metrics_std.R@1")])
def test_gather_refuses_a_non_finite_metric_naming_file_and_key(tmp_path, value, key):
    from pipeline.evaluation import gather

    data = {"dataset": "d", "method": "bm25", "split": "test", "n_queries": 2, "metrics": {"R@1": 0.5}}
    data[key.split(".")[0]] = {"R@1": value}
    path = tmp_path / "metrics.json"
    path.write_text(json.dumps(data))  # json writes NaN / Infinity, and reads them back
    md = tmp_path / "metrics.md"
    argv = [
        "--dataset",
        "d",
        "--inputs",
        str(path),
        "--out-json",
        str(tmp_path / "m.json"),
        "--out-md",
        str(md),
    ]
    code, err = _stage(gather.main, argv)
    assert code == 2 and not md.exists(), err
    assert f"{path}: field '{key}': metric value must be a finite number, got {value!r}" in err, err

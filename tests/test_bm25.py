"""BM25 stage: index, retrieval runs, hard-negative mining (positives removed, answer flag)."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.core import storage
from pipeline.core.schemas import CORPUS_SCHEMA, MINED_NEGATIVES_SCHEMA, QRELS_SCHEMA, QUERIES_SCHEMA
from pipeline.core.storage import DataError, ParquetTableWriter, read_table, write_table
from pipeline.retrieval import bm25

CORPUS = [
    ("p1", "Volcanoes", "Mount Keltra is a volcano that erupted in 1820 near the town of Varno."),
    ("p2", "Varno", "Varno is a town founded in 1700. Mount Keltra overlooks Varno."),
    ("p3", "Rivers", "The river Osk flows through the valley and into the sea."),
    ("p4", "Keltra climbing", "Climbers reach the summit of Mount Keltra in two days."),
    ("p5", "Bread", "Bread is baked from flour, water and yeast."),
]
QUERIES = [
    ("q1", "When did Mount Keltra erupt?", ["1820"]),
    ("q2", "Which river flows through the valley?", ["Osk"]),
]
QRELS = [("q1", "p1", 1), ("q2", "p3", 1)]


@pytest.fixture()
def dataset(tmp_path):
    corpus = pd.DataFrame(CORPUS, columns=["pid", "title", "text"])
    write_table(tmp_path / "corpus.parquet", corpus, CORPUS_SCHEMA)
    write_table(
        tmp_path / "queries.train.parquet",
        pd.DataFrame(QUERIES, columns=["qid", "text", "answers"]),
        QUERIES_SCHEMA,
    )
    write_table(
        tmp_path / "qrels.train.parquet",
        pd.DataFrame(QRELS, columns=["qid", "pid", "relevance"]),
        QRELS_SCHEMA,
    )
    bm25.build_index(
        tmp_path / "corpus.parquet", tmp_path / "index", k1=0.9, b=0.4, stemmer="english", stopwords="en"
    )
    return tmp_path


def test_retrieve_ranks_the_matching_passage_first(dataset):
    out = dataset / "run.parquet"
    bm25.retrieve_run(dataset / "index", dataset / "queries.train.parquet", 3, out)
    run = read_table(out)
    assert list(run.columns) == ["qid", "pid", "rank", "score"]
    top = run[run["rank"] == 1].set_index("qid")["pid"].to_dict()
    assert top == {"q1": "p1", "q2": "p3"}
    # ranks are 1..n per query and scores non-increasing
    for _, group in run.groupby("qid"):
        assert group["rank"].tolist() == list(range(1, len(group) + 1))
        assert group["score"].is_monotonic_decreasing
    # 'erupt' must be stemmed to match 'erupted'; passages sharing no term are not returned
    assert "p5" not in set(run["pid"])


def test_retrieve_is_deterministic(dataset):
    bm25.retrieve_run(dataset / "index", dataset / "queries.train.parquet", 5, dataset / "a.parquet")
    bm25.retrieve_run(dataset / "index", dataset / "queries.train.parquet", 5, dataset / "b.parquet")
    assert read_table(dataset / "a.parquet").equals(read_table(dataset / "b.parquet"))


def test_mine_excludes_positives_and_flags_answers(dataset):
    out = dataset / "neg.parquet"
    stats = bm25.mine_negatives(
        dataset / "index",
        dataset / "queries.train.parquet",
        dataset / "qrels.train.parquet",
        dataset / "corpus.parquet",
        2,
        out,
    )
    neg = read_table(out)
    assert set(neg.columns) >= {"qid", "pid", "rank", "score", "source", "has_answer", "excluded"}
    assert not ((neg["qid"] == "q1") & (neg["pid"] == "p1")).any()
    assert not ((neg["qid"] == "q2") & (neg["pid"] == "p3")).any()
    q1 = neg[neg["qid"] == "q1"]
    assert len(q1) == 2 and set(q1["pid"]) <= {"p2", "p4"}
    assert (neg["source"] == "bm25").all() and not neg["excluded"].any()
    assert stats["exclude_answer_match"] is False


@pytest.mark.parametrize("rows", [0, 5, 23])
def test_table_writer_writes_write_tables_bytes(tmp_path, monkeypatch, rows):
    """Pieces appended (3 rows each) give the file pq.write_table gives the whole table: one row group
    when it fits, and at a row-group length of 4 the same 4-row groups (the last shorter); an empty
    table too (one empty row group)."""
    table = pa.table(
        {
            "qid": [f"q{i // 3}" for i in range(rows)],
            "pid": [f"p{i}" for i in range(rows)],
            "rank": [i % 3 + 1 for i in range(rows)],
            "score": [i / 7 for i in range(rows)],
            "source": ["bm25"] * rows,
            "has_answer": [i % 2 == 0 for i in range(rows)],
            "excluded": [False] * rows,
        },
        schema=MINED_NEGATIVES_SCHEMA,
    )
    for group in (None, 4):
        if group:
            monkeypatch.setattr(storage, "ROW_GROUP_ROWS", group)
        pq.write_table(table, tmp_path / "whole.parquet", row_group_size=group)
        with ParquetTableWriter(tmp_path / "pieces.parquet", MINED_NEGATIVES_SCHEMA) as writer:
            for start in range(0, rows, 3):
                writer.append(table.slice(start, 3))
        assert writer.rows == rows
        assert (tmp_path / "pieces.parquet").read_bytes() == (tmp_path / "whole.parquet").read_bytes()
        groups = pq.ParquetFile(tmp_path / "pieces.parquet").metadata.num_row_groups
        assert groups == (max(1, -(-rows // group)) if group else 1)


def test_table_writer_leaves_nothing_when_aborted(tmp_path):
    out = tmp_path / "neg.parquet"
    with pytest.raises(RuntimeError):
        with ParquetTableWriter(out, MINED_NEGATIVES_SCHEMA) as writer:
            writer.append(MINED_NEGATIVES_SCHEMA.empty_table())
            raise RuntimeError("killed")
    assert list(tmp_path.iterdir()) == []


def _three_train_queries(dataset) -> None:
    """QUERIES and a third, so that chunks of one query make three chunks."""
    write_table(
        dataset / "queries.train.parquet",
        pd.DataFrame(
            [*QUERIES, ("q3", "Climbers and the summit of Mount Keltra", ["two days"])],
            columns=["qid", "text", "answers"],
        ),
        QUERIES_SCHEMA,
    )


def test_mine_in_chunks_writes_the_same_bytes(dataset, monkeypatch):
    """Queries mined one at a time (chunk 1 < 3 queries), with row groups of 4 rows, give the file
    of one chunk."""
    _three_train_queries(dataset)
    paths = [dataset / f"{n}.parquet" for n in ("one", "chunks")]
    for chunk, out in zip((bm25.MINE_CHUNK, 1), paths):
        bm25.mine_negatives(
            dataset / "index",
            dataset / "queries.train.parquet",
            dataset / "qrels.train.parquet",
            dataset / "corpus.parquet",
            2,
            out,
            chunk=chunk,
        )
    assert paths[0].read_bytes() == paths[1].read_bytes()
    # q2's only match is its positive: its chunk appends no rows
    assert read_table(paths[0])["qid"].drop_duplicates().tolist() == ["q1", "q3"]
    monkeypatch.setattr(storage, "ROW_GROUP_ROWS", 4)
    bm25.mine_negatives(
        dataset / "index",
        dataset / "queries.train.parquet",
        dataset / "qrels.train.parquet",
        dataset / "corpus.parquet",
        2,
        paths[1],
        chunk=1,
    )
    whole = dataset / "whole.parquet"
    pq.write_table(pq.read_table(paths[0]), whole, row_group_size=4)
    assert paths[1].read_bytes() == whole.read_bytes()


def test_mine_answer_exclusion_goes_deeper(tmp_path):
    corpus = pd.DataFrame(
        [
            ("a", "", "the capital of Norland is Brest"),  # positive
            ("b", "", "Norland capital Brest, capital of Norland"),  # contains the answer: a false negative
            ("c", "", "the capital of Norland was moved"),
            ("d", "", "Norland has a capital"),
        ],
        columns=["pid", "title", "text"],
    )
    write_table(tmp_path / "corpus.parquet", corpus, CORPUS_SCHEMA)
    write_table(
        tmp_path / "q.parquet",
        pd.DataFrame([("q", "capital of Norland", ["Brest"])], columns=["qid", "text", "answers"]),
        QUERIES_SCHEMA,
    )
    write_table(
        tmp_path / "r.parquet",
        pd.DataFrame([("q", "a", 1)], columns=["qid", "pid", "relevance"]),
        QRELS_SCHEMA,
    )
    bm25.build_index(
        tmp_path / "corpus.parquet", tmp_path / "idx", k1=0.9, b=0.4, stemmer=None, stopwords=None
    )
    bm25.mine_negatives(
        tmp_path / "idx",
        tmp_path / "q.parquet",
        tmp_path / "r.parquet",
        tmp_path / "corpus.parquet",
        2,
        tmp_path / "n.parquet",
        exclude_answer_match=True,
    )
    neg = read_table(tmp_path / "n.parquet")
    row_b = neg[neg["pid"] == "b"].iloc[0]
    assert bool(row_b["has_answer"]) and bool(row_b["excluded"])
    # two usable (non-excluded) negatives despite the excluded one
    assert (~neg["excluded"]).sum() == 2


def test_empty_corpus_is_a_clear_error(tmp_path):
    write_table(
        tmp_path / "corpus.parquet", pa.table({"pid": [], "title": [], "text": []}, schema=CORPUS_SCHEMA)
    )
    with pytest.raises(DataError, match="corpus is empty"):
        bm25.build_index(
            tmp_path / "corpus.parquet", tmp_path / "idx", k1=0.9, b=0.4, stemmer=None, stopwords=None
        )
    assert not (tmp_path / "idx").exists()


def test_unknown_stemmer_names_the_setting(tmp_path):
    with pytest.raises(DataError, match="bm25.stemmer"):
        bm25.make_tokenizer("klingon", None)


def test_cli_bad_input_exits_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        from pipeline.core.cli import run_main

        run_main(
            bm25.main,
            [
                "retrieve",
                "--index-dir",
                str(tmp_path / "missing"),
                "--queries",
                str(tmp_path / "q.parquet"),
                "--out",
                str(tmp_path / "o.parquet"),
            ],
        )
    assert exc.value.code == 2
    assert "settings.json" in capsys.readouterr().err
    assert not (tmp_path / "o.parquet").exists()


def test_mining_killed_at_its_limit_continues_from_its_chunks(dataset, monkeypatch):
    """A job ended mid-way (its time limit) keeps the chunks it finished; the rerun mines only the rest
    and writes the file an uninterrupted run writes, byte for byte; chunks of other settings are not
    reused."""
    _three_train_queries(dataset)
    args = [
        dataset / "index",
        *(dataset / f"{n}.parquet" for n in ("queries.train", "qrels.train", "corpus")),
        2,
    ]
    whole, killed = dataset / "whole.parquet", dataset / "killed.parquet"
    bm25.mine_negatives(*args, whole, chunk=1)
    assert not whole.with_name("whole.parquet.chunks").exists()  # removed once the file is whole

    real, searched = bm25._batched_search, []

    def dies_on_the_third_chunk(index, part, depth, label):
        searched.append(list(part["qid"]))
        if len(searched) == 3:
            raise KeyboardInterrupt("time limit")  # what SIGTERM at the limit ends the job with
        yield from real(index, part, depth, label)

    monkeypatch.setattr(bm25, "_batched_search", dies_on_the_third_chunk)
    with pytest.raises(KeyboardInterrupt):
        bm25.mine_negatives(*args, killed, chunk=1)
    assert (
        not killed.exists()
        and len(list(killed.with_name("killed.parquet.chunks").glob("chunk*.parquet"))) == 2
    )
    searched.clear()
    monkeypatch.setattr(bm25, "_batched_search", real)
    calls = []
    monkeypatch.setattr(
        bm25, "_batched_search", lambda *a: (calls.append(list(a[1]["qid"])), (yield from real(*a)))[1]
    )
    bm25.mine_negatives(*args, killed, chunk=1)
    assert calls == [["q3"]]  # only the chunk not done
    assert killed.read_bytes() == whole.read_bytes()

    # other settings (3 negatives): the kept chunks are not theirs
    monkeypatch.setattr(bm25, "_batched_search", dies_on_the_third_chunk)
    searched.clear()
    with pytest.raises(KeyboardInterrupt):
        bm25.mine_negatives(*args, killed, chunk=1)
    calls.clear()
    monkeypatch.setattr(
        bm25, "_batched_search", lambda *a: (calls.append(list(a[1]["qid"])), (yield from real(*a)))[1]
    )
    bm25.mine_negatives(*args[:-1], 3, killed, chunk=1)
    assert calls == [["q1"], ["q2"], ["q3"]]


def test_mining_refuses_to_write_over_its_queries(dataset, capsys):
    """--out naming an input: refused before any work, the input untouched."""
    from pipeline.core.cli import run_main

    queries = dataset / "queries.train.parquet"
    before = queries.read_bytes()
    args = ["mine", "--index-dir", str(dataset / "index"), "--queries", str(queries)]
    args += ["--qrels", str(dataset / "qrels.train.parquet"), "--corpus", str(dataset / "corpus.parquet")]
    with pytest.raises(SystemExit) as exit_:
        run_main(bm25.main, [*args, "--out", str(queries)])
    assert exit_.value.code == 2 and queries.read_bytes() == before
    assert "--out" in capsys.readouterr().err

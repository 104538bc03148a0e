"""`python -m pipeline.evaluation.export_qrels`: a split's judgements as a TREC qrels file."""

from __future__ import annotations

import pandas as pd
import pytest

from pipeline.core.storage import DataError
from pipeline.evaluation import export_qrels


def _write_qrels(path, rows):
    pd.DataFrame(rows, columns=["qid", "pid", "relevance"]).astype({"relevance": "int32"}).to_parquet(path)


def test_qrels_are_written_as_trec_lines_that_ir_measures_reads(tmp_path):
    import ir_measures

    _write_qrels(tmp_path / "q.parquet", [("q2", "p9", 1), ("q1", "p3", 1), ("q1", "p1", 2)])
    assert export_qrels.main(["--qrels", str(tmp_path / "q.parquet"), "--out", str(tmp_path / "q.trec")]) == 0
    assert (tmp_path / "q.trec").read_text().splitlines() == ["q1 0 p1 2", "q1 0 p3 1", "q2 0 p9 1"]
    read = sorted(
        (q.query_id, q.doc_id, q.relevance) for q in ir_measures.read_trec_qrels(str(tmp_path / "q.trec"))
    )
    assert read == [("q1", "p1", 2), ("q1", "p3", 1), ("q2", "p9", 1)]


def test_an_id_with_whitespace_is_refused_naming_its_record(tmp_path):
    _write_qrels(tmp_path / "q.parquet", [("q1", "p1", 1), ("q 2", "p2", 1)])
    with pytest.raises(DataError, match="whitespace") as err:
        export_qrels.main(["--qrels", str(tmp_path / "q.parquet"), "--out", str(tmp_path / "q.trec")])
    assert "q.parquet" in str(err.value) and "qid" in str(err.value)
    assert not (tmp_path / "q.trec").exists()

"""Issue 52's lead probe: stages the issue did not name, given outputs that would destroy their
inputs and judgements that repeat. Each case exits 2 with one line naming the file and the flag,
and the input is left as it was (docs/failures.md "Bad input")."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from stage_failures import fails

from pipeline.core import schemas as S
from pipeline.core.cli import run_main
from pipeline.core.storage import DataError, refuse_overwriting_inputs
from pipeline.data import download
from pipeline.evaluation import export_qrels
from pipeline.retrieval import runs
from pipeline.sieve import relabel


def qrels(path: Path, rows: list[tuple[str, str, int]]) -> Path:
    q, p, r = zip(*rows)
    pq.write_table(
        pa.table({"qid": q, "pid": p, "relevance": pa.array(r, pa.int32())}, schema=S.QRELS_SCHEMA), path
    )
    return path


def test_same_file_by_any_spelling_is_refused(tmp_path):
    source = qrels(tmp_path / "q.parquet", [("q1", "p1", 1)])
    os.symlink(source, tmp_path / "link.parquet")
    os.link(source, tmp_path / "hard.parquet")
    for spelling in (
        source,
        tmp_path / "." / "q.parquet",
        tmp_path / "link.parquet",
        tmp_path / "hard.parquet",
    ):
        with pytest.raises(DataError, match="--out is the same file as the input --qrels"):
            refuse_overwriting_inputs({"--out": spelling}, {"--qrels": source})
    folder = tmp_path / "folder"
    folder.mkdir()
    with pytest.raises(DataError, match="lies inside the input --data"):
        refuse_overwriting_inputs({"--out": folder / "sub" / "x.parquet"}, {"--data": folder})
    # Distinct paths, unused flags and inputs that do not exist yet pass.
    refuse_overwriting_inputs(
        {"--out": tmp_path / "new.trec", "--log": None}, {"--qrels": source, "--x": None}
    )
    refuse_overwriting_inputs({"--out": tmp_path / "new.trec"}, {"--qrels": tmp_path / "missing.parquet"})


@pytest.mark.parametrize("flag", ["--out", "--log"])
def test_export_qrels_keeps_its_input(tmp_path, capsys, flag):
    source = qrels(tmp_path / "q.parquet", [("q1", "p1", 1)])
    before = source.read_bytes()
    argv = ["--qrels", source, "--out", tmp_path / "q.trec", flag, tmp_path / "." / "q.parquet"]
    fails(export_qrels.main, argv, capsys, flag, "--qrels")
    assert source.read_bytes() == before


def test_export_qrels_refuses_a_repeated_judgement(tmp_path, capsys):
    source = qrels(tmp_path / "q.parquet", [("q1", "p1", 1), ("q2", "p2", 1), ("q1", "p1", 0)])
    out = tmp_path / "q.trec"
    line = fails(export_qrels.main, ["--qrels", source, "--out", out], capsys, source, "record 2", "pid")
    assert "(q1, p1)" in line
    assert not out.exists()


def test_relabel_keeps_its_input(tmp_path, capsys):
    source = qrels(tmp_path / "q.parquet", [("q1", "p1", 1)])
    decisions = tmp_path / "d.parquet"
    pq.write_table(pa.table({"qid": ["q1"], "pid": ["p2"], "kept": [False]}), decisions)
    before = source.read_bytes()
    fails(
        relabel.main,
        ["--qrels", source, "--decisions", decisions, "--out", source],
        capsys,
        "--out",
        "--qrels",
    )
    assert source.read_bytes() == before


def test_runs_keeps_its_input(tmp_path, capsys):
    run = tmp_path / "run.parquet"
    pq.write_table(
        pa.table({"qid": ["q1"], "pid": ["p1"], "rank": pa.array([1], pa.int32()), "score": [1.0]}), run
    )
    before = run.read_bytes()
    fails(runs.main, ["--run", run, "--trec", run, "--tag", "x"], capsys, "--trec", "--run")
    assert run.read_bytes() == before


@pytest.mark.parametrize("tag", ["a b", ""])
def test_runs_refuses_a_tag_trec_cannot_hold(tmp_path, capsys, tag):
    run = tmp_path / "run.parquet"
    pq.write_table(
        pa.table({"qid": ["q1"], "pid": ["p1"], "rank": pa.array([1], pa.int32()), "score": [1.0]}), run
    )
    out = tmp_path / "r.trec"
    fails(runs.main, ["--run", run, "--trec", out, "--tag", tag], capsys, "field 'tag'", repr(tag))
    assert not out.exists()


def test_download_keeps_the_archive_it_extracts_from(tmp_path, capsys):
    import tarfile

    member = tmp_path / "a.txt"
    member.write_text("hello\n")
    archive = tmp_path / "a.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(member, arcname="a.txt")
    before = archive.read_bytes()
    argv = ["--archive", archive, "--member", "a.txt", "--out", archive]
    fails(download.main, argv, capsys, "--out", "--archive")
    assert archive.read_bytes() == before


@pytest.mark.parametrize(
    "flags, named",
    [
        (["--retries", "-1"], "--retries"),
        (["--timeout", "0"], "--timeout"),
        (["--backoff", "-2"], "--backoff"),
    ],
)
def test_download_bounds_its_flags(tmp_path, capsys, flags, named):
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        run_main(download.main, ["--url", "http://127.0.0.1:9/x", "--out", str(tmp_path / "o"), *flags])
    assert exc.value.code == 2
    assert named in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_download_into_a_folder_names_the_folder(tmp_path, capsys):
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        run_main(
            download.main, ["--archive", str(tmp_path / "a.tar"), "--member", "a", "--out", str(tmp_path)]
        )
    assert exc.value.code == 2
    assert "is a folder" in capsys.readouterr().err


def test_hybrid_keeps_the_runs_it_fuses(tmp_path, capsys):
    from pipeline.evaluation import hybrid

    run = tmp_path / "bm25.parquet"
    pq.write_table(
        pa.table({"qid": ["q1"], "pid": ["p1"], "rank": pa.array([1], pa.int32()), "score": [1.0]}), run
    )
    before = run.read_bytes()
    argv = ["rrf", "--sparse", run, "--dense", tmp_path / "dense.parquet", "--out", run]
    fails(hybrid.main, argv, capsys, "--out", "--sparse")
    assert run.read_bytes() == before


@pytest.mark.parametrize(
    "out, checkpoint",
    [("model", None), ("model/.", None), ("runs", None), ("new", "model")],
    ids=["out-is-init", "out-spelled-otherwise", "out-holds-init", "checkpoint-is-init"],
)
def test_training_keeps_its_start_model(tmp_path, capsys, out, checkpoint):
    from pipeline.training import train_dense

    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "model").mkdir()
    (tmp_path / "runs" / "model" / "config.json").write_text("{}")
    os.symlink(tmp_path / "runs" / "model", tmp_path / "model")
    argv = ["--init", tmp_path / "runs" / "model", "--out", tmp_path / out]
    argv += ["--checkpoint-dir", tmp_path / checkpoint] if checkpoint else []
    for table_flag in ("--queries", "--qrels", "--negatives", "--corpus"):
        argv += [table_flag, tmp_path / "missing.parquet"]
    fails(train_dense.main, argv, capsys, "--init")
    assert (tmp_path / "runs" / "model" / "config.json").read_text() == "{}"


def test_an_output_under_a_file_or_onto_a_folder_is_one_line(tmp_path, capsys):
    source = qrels(tmp_path / "q.parquet", [("q1", "p1", 1)])
    (tmp_path / "notes.txt").write_text("x")
    line = fails(
        export_qrels.main, ["--qrels", source, "--out", tmp_path / "notes.txt" / "sub" / "q.trec"], capsys
    )
    assert f"{tmp_path / 'notes.txt'} is a file, not a folder" in line
    (tmp_path / "folder").mkdir()
    line = fails(
        export_qrels.main, ["--qrels", source, "--out", tmp_path / "folder"], capsys, tmp_path / "folder"
    )
    assert "a folder is in the way" in line


def test_a_failing_stage_says_its_error_once_on_the_console_and_in_its_log(tmp_path, capsys):
    source = qrels(tmp_path / "q.parquet", [("q1", "p1", 1), ("q1", "p1", 1)])
    log = tmp_path / "stage.log"
    capsys.readouterr()
    with pytest.raises(SystemExit):
        run_main(
            export_qrels.main, ["--qrels", str(source), "--out", str(tmp_path / "q.trec"), "--log", str(log)]
        )
    captured = capsys.readouterr()
    assert captured.out.count("repeats an earlier row") == 0, captured.out
    assert captured.err.count("repeats an earlier row") == 1, captured.err
    assert log.read_text().count("repeats an earlier row") == 1


def test_the_cost_table_keeps_each_throughput_source_in_a_note(tmp_path):
    """Its rows were 203 characters wide: every row repeated where its rates came from."""
    from pipeline.workflow import cost

    data = cost.load_data([])
    stages = [
        cost.StageCost(
            "encode_corpus", 6, 1, "10.5M passages", "1,599 passages/s", "measured `x`", 11.0, 1.8, 240
        ),
        cost.StageCost(
            "search_dense", 3, 1, "3,610 queries", "1,225 queries/s", "measured `y`", 0.0, 0.01, 120
        ),
        cost.StageCost(
            "ar2_sieve", 16, 1, "1.8M passages", "1,594 passages/s", "measured `x`", 5.0, 0.3, 180
        ),
    ]
    text = cost.table(data, stages, "h200")
    assert "1,599 passages/s [1]" in text and "1,225 queries/s [2]" in text and "1,594 passages/s [1]" in text
    assert text.count("measured `x`") == 1 and "- [1] measured `x`" in text and "- [2] measured `y`" in text
    assert max(len(line) for line in text.splitlines()) < 150

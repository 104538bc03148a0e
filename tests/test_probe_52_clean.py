"""Issue 52's cleaning cases (pipeline.sieve.clean, ``sieve-clean``) and this helper's own hostile probe:
outputs that would overwrite an input, n-tuple files emptied by drop mode, Tevatron labels with titles,
extra columns and numpy-style CSV lists, progress, byte-identical rewrites, --help, and bad input that
must be one line naming the file, record and field (docs/failures.md "Cleaning files")."""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.core.cli import run_main
from pipeline.sieve import clean
from tests.test_probe_39_own import fails

TRIPLETS = [{"anchor": f"q{i}", "positive": f"pos {i}", "negative": f"neg {i}"} for i in range(3)]


def jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def run(argv) -> None:
    with pytest.raises(SystemExit) as exc:
        run_main(clean.main, [str(a) for a in argv])
    assert exc.value.code == 0


def decisions_of(out: Path) -> pd.DataFrame:
    return pd.read_parquet(clean.default_outputs(out)[0])


def report_of(out: Path) -> dict:
    return json.loads(clean.default_outputs(out)[1].read_text(encoding="utf-8"))


# ---- an output that would overwrite an input ---------------------------------------------------------


def _same_file_spellings(tmp_path: Path, source: Path) -> dict[str, Path]:
    (tmp_path / "sub").mkdir()
    link = tmp_path / "link.jsonl"
    link.symlink_to(source)
    hard = tmp_path / "hard.jsonl"
    os.link(source, hard)
    return {
        "same": source,
        "spelled": tmp_path / "sub" / ".." / "." / source.name,
        "symlink": link,
        "hardlink": hard,
    }


@pytest.mark.parametrize("spelling", ["same", "spelled", "symlink", "hardlink"])
def test_out_that_is_the_input_is_refused(tmp_path, capsys, spelling):
    """It exited 0 and overwrote the raw file (rank_window: 3 rows -> 2)."""
    source = jsonl(tmp_path / "m.jsonl", TRIPLETS)
    before = source.read_bytes()
    out = _same_file_spellings(tmp_path, source)[spelling]
    argv = ["--input", source, "--out", out, "--filter", "rank_window", "--rank-window-start", "1"]
    fails(clean.main, argv, capsys, "--out", "m.jsonl", "overwritten")
    assert source.read_bytes() == before
    assert not (tmp_path / "m.decisions.parquet").exists() and not (tmp_path / "m.report.json").exists()


@pytest.mark.parametrize("flag", ["--decisions", "--report"])
def test_decisions_or_report_on_the_input_is_refused(tmp_path, capsys, flag):
    source = jsonl(tmp_path / "m.jsonl", TRIPLETS)
    before = source.read_bytes()
    argv = ["--input", source, "--out", tmp_path / "c.jsonl", "--filter", "none", flag, source]
    fails(clean.main, argv, capsys, flag, "m.jsonl")
    assert source.read_bytes() == before and not (tmp_path / "c.jsonl").exists()


def test_report_on_the_output_or_labels_is_refused(tmp_path, capsys):
    source = jsonl(tmp_path / "m.jsonl", TRIPLETS)
    out = tmp_path / "c.jsonl"
    argv = ["--input", source, "--out", out, "--filter", "none", "--report", out]
    fails(clean.main, argv, capsys, "--report", "collide", outputs=[out])
    labels = jsonl(tmp_path / "labels.jsonl", [{"query": "q0", "passage": "pos 0"}])
    argv = ["--input", source, "--out", labels, "--filter", "none", "--labels", labels]
    fails(clean.main, argv, capsys, "--out", "--labels")
    # the report's Markdown goes beside it with .md: a report named .md would be overwritten by it
    argv = ["--input", source, "--out", out, "--filter", "none", "--report", tmp_path / "r.md"]
    fails(clean.main, argv, capsys, "--report", "collide", outputs=[out])


def _datasets_folder(path: Path, rows: list[dict]) -> Path:
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_list(rows).save_to_disk(str(path))
    return path


@pytest.mark.parametrize("where", ["equal", "inside", "holds"])
def test_datasets_folder_out_inside_or_equal_to_the_input_is_refused(tmp_path, capsys, where):
    source = _datasets_folder(tmp_path / "data" / "mined", TRIPLETS)
    files = sorted((p.name, p.read_bytes()) for p in source.iterdir())
    out = {"equal": source, "inside": source / "cleaned", "holds": tmp_path / "data"}[where]
    argv = ["--input", source, "--out", out, "--filter", "rank_window", "--rank-window-start", "1"]
    fails(clean.main, argv, capsys, "--out", str(source))
    assert sorted((p.name, p.read_bytes()) for p in source.iterdir()) == files


def test_datasets_out_over_a_folder_that_is_not_a_datasets_folder_is_refused(tmp_path, capsys):
    """It was removed whole (shutil.rmtree) and replaced by the cleaned dataset."""
    source = _datasets_folder(tmp_path / "mined", TRIPLETS)
    out = tmp_path / "results"
    out.mkdir()
    (out / "precious.txt").write_text("mine", encoding="utf-8")
    fails(
        clean.main, ["--input", source, "--out", out, "--filter", "none"], capsys, "results", "not a datasets"
    )
    assert (out / "precious.txt").read_text(encoding="utf-8") == "mine"


def test_file_out_that_is_a_folder_is_refused(tmp_path, capsys):
    """A guard (held on f52d82d): now refused before any work, with the collision checks."""
    source = jsonl(tmp_path / "m.jsonl", TRIPLETS)
    (tmp_path / "c.jsonl").mkdir()
    fails(
        clean.main, ["--input", source, "--out", tmp_path / "c.jsonl", "--filter", "none"], capsys, "c.jsonl"
    )


# ---- n-tuple files in drop mode ------------------------------------------------------------------------


def ntuple_rows(n_rows: int = 4, n: int = 3, scores: bool = True) -> list[dict]:
    rows = []
    for r in range(n_rows):
        row = {"anchor": f"question {r}", "positive": f"the answer passage {r}"}
        row.update({f"negative_{i}": f"other passage {r} {i}" for i in range(1, n + 1)})
        if scores:
            row["scores"] = [0.9] + [0.5 - 0.1 * i for i in range(1, n + 1)]
        rows.append(row)
    return rows


def test_ntuple_drop_refills_each_row_instead_of_removing_it(tmp_path):
    """Every row had a flagged negative, so every row went: "4 rows in, 0 out", exit 0."""
    source, out = tmp_path / "n.parquet", tmp_path / "c.parquet"
    pq.write_table(pa.Table.from_pylist(ntuple_rows()), source)
    run(["--input", source, "--out", out, "--filter", "rank_window", "--rank-window-start", "1"])
    cleaned = pq.read_table(out)
    assert cleaned.column_names == ["anchor", "positive", "negative_1", "negative_2", "scores"]
    raw = ntuple_rows()
    for new, old in zip(cleaned.to_pylist(), raw):
        assert new["negative_1"] == old["negative_2"] and new["negative_2"] == old["negative_3"]
        assert new["scores"] == pytest.approx([old["scores"][0], old["scores"][2], old["scores"][3]])
    report = report_of(out)
    assert (report["rows_in"], report["rows_out"], report["rows_lost"]) == (4, 4, 0)
    assert report["negatives_written"] == 8 and report["negative_columns_out"] == 2
    assert report["actions"] == {"kept": 8, "removed": 4}
    md = clean.default_outputs(out)[1].with_suffix(".md").read_text(encoding="utf-8")
    assert "4 of 4 rows" in md and "8 of 12 negatives" in md


def test_ntuple_rows_with_fewer_kept_negatives_go_and_are_counted(tmp_path):
    rows = ntuple_rows(n_rows=4, scores=False)
    # rows 0 and 1 repeat their positive as negative_1 and negative_2: two duplicates each
    for r in (0, 1):
        rows[r]["negative_1"] = rows[r]["negative_2"] = rows[r]["positive"]
    source, out = jsonl(tmp_path / "n.jsonl", rows), tmp_path / "c.jsonl"
    report = clean.clean_dataset(source, out, settings=clean.Settings(filter="none"))
    # k = 3 keeps rows 2, 3 (2 x 5 texts), k = 1 keeps all 4 (4 x 3 = 12 texts): k = 1 writes the most
    written = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    assert len(written) == 4 and all(list(w) == ["anchor", "positive", "negative_1"] for w in written)
    assert written[0]["negative_1"] == rows[0]["negative_3"]
    assert report["rows_out"] == 4 and report["negatives_written"] == 4
    actions = decisions_of(out)["action"].value_counts().to_dict()
    assert actions == {"trimmed": 4, "removed": 4, "kept": 4}
    assert report["kept_not_written"] == 4


def test_choose_width_writes_the_most_texts():
    assert clean.choose_width([3, 3, 3, 0], 3) == 3
    assert clean.choose_width([1, 1, 1, 3], 3) == 1  # 4 x 3 = 12 texts beats 1 x 5
    assert clean.choose_width([2, 2, 2, 0], 3) == 2
    assert clean.choose_width([0, 0], 3) == 0


def test_ntuple_include_positives_keeps_the_rows(tmp_path):
    """mine_hard_negatives(include_positives=True): the positive sits among the negatives; with no
    filter at all, every such row went whole."""
    rows = ntuple_rows(n_rows=5)
    for row in rows:
        row["negative_2"] = row["positive"]
    source, out = tmp_path / "n.parquet", tmp_path / "c.parquet"
    pq.write_table(pa.Table.from_pylist(rows), source)
    run(["--input", source, "--out", out, "--filter", "none"])
    cleaned = pq.read_table(out).to_pylist()
    assert len(cleaned) == 5
    for new, old in zip(cleaned, rows):
        assert [new["negative_1"], new["negative_2"]] == [old["negative_1"], old["negative_3"]]
        assert "negative_3" not in new


def test_ntuple_save_to_disk_drop_loads_back(tmp_path):
    datasets = pytest.importorskip("datasets")
    source = _datasets_folder(tmp_path / "mined", ntuple_rows())
    out = tmp_path / "cleaned"
    run(["--input", source, "--out", out, "--filter", "rank_window", "--rank-window-start", "2"])
    cleaned = datasets.load_from_disk(str(out))
    assert len(cleaned) == 4 and cleaned.column_names == ["anchor", "positive", "negative_1", "scores"]


@pytest.mark.parametrize("name", ["n.parquet", "t.jsonl"])
def test_drop_that_would_leave_no_row_is_refused(tmp_path, capsys, name):
    """It wrote an empty dataset (a datasets folder without a data file) and exited 0."""
    source = tmp_path / name
    if name.endswith(".parquet"):
        pq.write_table(pa.Table.from_pylist(ntuple_rows()), source)
    else:
        jsonl(source, TRIPLETS)
    out = tmp_path / f"c{source.suffix}"
    argv = ["--input", source, "--out", out, "--filter", "rank_window", "--rank-window-start", "5"]
    fails(clean.main, argv, capsys, name, "no row would remain", "--mode mark", outputs=[out])
    assert not clean.default_outputs(out)[1].exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".clean-")]


def test_losing_most_rows_is_a_warning(tmp_path, caplog):
    rows = TRIPLETS + [{"anchor": "q0", "positive": "pos 0", "negative": f"more {i}"} for i in range(3)]
    source, out = jsonl(tmp_path / "t.jsonl", rows), tmp_path / "c.jsonl"
    with caplog.at_level(logging.WARNING, logger="sieve.clean"):
        clean.clean_dataset(source, out, settings=clean.Settings(filter="rank_window", rank_window_start=1))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert not warnings  # exactly half (3 of 6 rows): no warning
    jsonl(source, rows[:4])
    with caplog.at_level(logging.WARNING, logger="sieve.clean"):
        clean.clean_dataset(source, out, settings=clean.Settings(filter="rank_window", rank_window_start=1))
    assert any("3 of 4 rows" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    md = clean.default_outputs(out)[1].with_suffix(".md").read_text(encoding="utf-8")
    assert "warning: 3 of 4 rows are gone" in md


# ---- Tevatron labels with titles ---------------------------------------------------------------------


@pytest.mark.parametrize("separator", ["\n", " ", ": ", " | ", " - "])
def test_tevatron_labels_given_as_title_and_text_match(tmp_path, separator):
    """(query, title + "\\n" + text) labels matched nothing: "0 false ... negatives", precision 0."""
    passage = lambda i: {"docid": f"d{i}", "title": f"Title {i}", "text": f"body of passage {i}"}  # noqa: E731
    rows = [
        {"query_id": "1", "query": "what is it", "positive_passages": [passage(0)],
         "negative_passages": [passage(1), passage(2), passage(3)]},
    ]  # fmt: skip
    source, out = jsonl(tmp_path / "tev.jsonl", rows), tmp_path / "c.jsonl"
    labels = jsonl(
        tmp_path / "labels.jsonl",
        [
            {"query": "what is it", "passage": p["title"] + separator + p["text"]}
            for p in (passage(0), passage(2))
        ],
    )
    report = clean.clean_dataset(source, out, settings=clean.Settings(filter="oracle"), labels=labels)
    assert report["detection"]["n_false_negatives"] == 1 and report["detection"]["n_true_negatives"] == 2
    assert [n["docid"] for n in json.loads(out.read_text())["negative_passages"]] == ["d1", "d3"]
    # the text alone still matches
    jsonl(labels, [{"query": "what is it", "passage": "body of passage 2"}])
    report = clean.clean_dataset(source, out, settings=clean.Settings(filter="oracle"), labels=labels)
    assert report["detection"]["n_false_negatives"] == 1


# ---- extra columns and CSV lists ---------------------------------------------------------------------


@pytest.mark.parametrize("container", ["parquet", "jsonl", "csv"])
def test_extra_columns_of_a_triplet_file_are_carried_through(tmp_path, container):
    """A row_id column: detection asked for --format, then "a triplet file has 3 text columns"."""
    rows = [{"row_id": i, **r, "weight": 0.5 + i} for i, r in enumerate(TRIPLETS)]
    rows[1]["negative"] = rows[1]["positive"]  # a duplicate: its row goes
    source, out = tmp_path / f"t.{container}", tmp_path / f"c.{container}"
    if container == "parquet":
        pq.write_table(pa.Table.from_pylist(rows), source)
    elif container == "jsonl":
        jsonl(source, rows)
    else:
        pd.DataFrame(rows).to_csv(source, index=False)
    report = clean.clean_dataset(source, out, settings=clean.Settings(filter="none"))
    assert report["format"] == "triplet" and report["duplicates"]["exact"] == 1
    if container == "parquet":
        assert pq.read_table(out).to_pylist() == [rows[0], rows[2]]
    elif container == "jsonl":
        assert [json.loads(x) for x in out.read_text().splitlines()] == [rows[0], rows[2]]
    else:
        assert (
            out.read_text().splitlines()[1:]
            == source.read_text().splitlines()[1:2] + source.read_text().splitlines()[3:]
        )


def test_datasets_to_csv_lists_are_read(tmp_path):
    """Dataset.to_csv writes lists as numpy prints them ('[0.776 0.702]', wrapped over lines):
    "expected a list, found str"."""
    datasets = pytest.importorskip("datasets")
    n = 14  # numpy wraps a row of 15 scores over two lines
    rows = [
        {"anchor": f"q{r}", "positive": f"pos {r}", **{f"negative_{i}": f"neg {r} {i}" for i in range(1, n + 1)},
         "scores": [0.776123 - 0.01 * i for i in range(n + 1)]}
        for r in range(3)
    ]  # fmt: skip
    source, out = tmp_path / "n.csv", tmp_path / "c.csv"
    datasets.Dataset.from_list(rows).to_csv(str(source), index=False)
    assert "\n " in source.read_text()  # the wrapped cell this test is about
    report = clean.clean_dataset(
        source, out, settings=clean.Settings(filter="rank_window", rank_window_start=1)
    )
    assert report["format"] == "n_tuple" and report["rows_out"] == 3
    decisions = decisions_of(out)
    assert decisions["source_score"].iloc[:n].tolist() == pytest.approx(rows[0]["scores"][1:])
    back = pd.read_csv(out, dtype=str)
    parsed = clean.parse_list_cell(back["scores"][0])[0]
    assert parsed == pytest.approx([rows[0]["scores"][0]] + rows[0]["scores"][2:])


def test_datasets_to_csv_labeled_lists_are_read(tmp_path):
    datasets = pytest.importorskip("datasets")
    rows = [{"anchor": "q", "documents": ["the 'answer', here", 'other "one"', "third"], "labels": [1, 0, 0]}]
    source, out = tmp_path / "l.csv", tmp_path / "c.csv"
    datasets.Dataset.from_list(rows).to_csv(str(source), index=False)
    report = clean.clean_dataset(
        source, out, settings=clean.Settings(filter="rank_window", rank_window_start=1)
    )
    assert report["format"] == "labeled_list"
    back = pd.read_csv(out, dtype=str)
    assert clean.parse_list_cell(back["documents"][0])[0] == ["the 'answer', here", "third"]
    assert clean.parse_list_cell(back["labels"][0])[0] == [1, 0]


# ---- progress, bytes, --help ---------------------------------------------------------------------------


def test_a_model_filter_logs_its_work_and_progress(tmp_path, caplog, monkeypatch):
    """About 2 minutes of scoring printed nothing."""
    beat = threading.Event()

    class Seen(logging.Handler):
        def emit(self, record):
            if "still running" in record.getMessage():
                beat.set()

    def slow_filter(the_filter, cands, *args, **kwargs):
        assert beat.wait(60), "no progress line while the filter ran"
        n = len(cands)
        return pd.DataFrame(
            {"nce_loss": [1.0] * n, "threshold": [0.5] * n, "fallback": [False] * n, "kept": [True] * n}
        )

    monkeypatch.setattr(clean, "PROGRESS_EVERY_S", 0.01)
    monkeypatch.setattr(clean, "run_filter", slow_filter)
    handler = Seen()
    logging.getLogger("sieve.clean").addHandler(handler)
    try:
        with caplog.at_level(logging.INFO, logger="sieve.clean"):
            clean.clean_dataset(
                jsonl(tmp_path / "t.jsonl", TRIPLETS),
                tmp_path / "c.jsonl",
                settings=clean.Settings(filter="sieve"),
            )
    finally:
        logging.getLogger("sieve.clean").removeHandler(handler)
    messages = [r.getMessage() for r in caplog.records]
    assert any("3 queries and 6 distinct passages to encode" in m for m in messages)
    assert any("sieve: done in" in m for m in messages)


def test_a_rewrite_that_changes_nothing_keeps_the_bytes(tmp_path):
    """\\u2013 became – (ensure_ascii=False) though no row changed."""
    source = tmp_path / "fe.jsonl"
    source.write_text(
        '{"query": "q \\u2013 1", "pos": ["p"], "neg": ["n1", "n2"]}\n'
        '{"query":"q2","pos":["p2"],"neg":["m1","m2"],"neg_scores":[0.5, 0.25]}\n',
        encoding="utf-8",
    )
    out = tmp_path / "c.jsonl"
    clean.clean_dataset(source, out, settings=clean.Settings(filter="none"))
    assert out.read_bytes() == source.read_bytes()
    # a row that changes is written anew; the others keep their line
    labels = jsonl(tmp_path / "labels.jsonl", [{"query": "q2", "passage": x} for x in ("p2", "m1")]
                   + [{"query": "q – 1", "passage": "p"}])  # fmt: skip
    clean.clean_dataset(source, out, settings=clean.Settings(filter="oracle"), labels=labels)
    lines = out.read_text(encoding="utf-8").splitlines()
    assert lines[0] == source.read_text(encoding="utf-8").splitlines()[0]
    assert json.loads(lines[1]) == {"query": "q2", "pos": ["p2"], "neg": ["m2"], "neg_scores": [0.25]}


@pytest.mark.parametrize("suffix", ["parquet", "csv"])
def test_nothing_flagged_keeps_a_files_bytes(tmp_path, suffix):
    source, out = tmp_path / f"t.{suffix}", tmp_path / f"c.{suffix}"
    if suffix == "parquet":
        pq.write_table(pa.Table.from_pylist(TRIPLETS), source)
    else:
        source.write_text('"anchor","positive","negative"\r\n"q","p","n"\r\n', encoding="utf-8")
    clean.clean_dataset(source, out, settings=clean.Settings(filter="none"))
    assert out.read_bytes() == source.read_bytes()


def test_help_offers_only_the_filters_that_apply(capsys):
    with pytest.raises(SystemExit):
        clean.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "answer_match" not in text and "sieve_no_ccr" not in text
    assert "rank_window" in text and "FlagEmbedding: candidates ranked" not in text


def test_answer_match_is_still_refused_with_the_reason(tmp_path, capsys):
    argv = [
        "--input",
        jsonl(tmp_path / "t.jsonl", TRIPLETS),
        "--out",
        tmp_path / "c.jsonl",
        "--filter",
        "answer_match",
    ]
    fails(clean.main, argv, capsys, "answer strings")
    with pytest.raises(SystemExit) as exc:  # an unknown name: argparse's own refusal, as before
        clean.main([str(a) for a in argv[:-1]] + ["nosuch"])
    assert exc.value.code == 2 and "invalid choice: 'nosuch'" in capsys.readouterr().err


# ---- bad input: one line --------------------------------------------------------------------------------


def test_a_folder_that_is_not_a_datasets_folder(tmp_path, capsys):
    folder = tmp_path / "notdata"
    folder.mkdir()
    jsonl(folder / "t.jsonl", TRIPLETS)
    fails(clean.main, ["--input", folder, "--out", tmp_path / "c", "--filter", "none"], capsys, "notdata",
          "not a datasets folder", outputs=[tmp_path / "c"])  # fmt: skip


def refuses_jsonl(tmp_path: Path, capsys: pytest.CaptureFixture, text: str, *names: str) -> None:
    """sieve-clean on a FlagEmbedding file holding ``text`` exits 2 with one line naming the file and
    each of ``names``, and writes no output."""
    source = tmp_path / "fe.jsonl"
    source.write_text(text)
    out = tmp_path / "c.jsonl"
    fails(clean.main, ["--input", source, "--out", out, "--filter", "none"], capsys, "fe.jsonl", *names,
          outputs=[out])  # fmt: skip


def test_a_lone_surrogate_is_named(tmp_path, capsys):
    refuses_jsonl(tmp_path, capsys, '{"query": "q", "pos": ["p"], "neg": ["n"]}\n'
                  '{"query": "q2", "pos": ["p"], "neg": ["ok", "bad \\ud800 text"]}\n',
                  "record 1 (line 2)", "neg[1]", "surrogate")  # fmt: skip


def test_out_under_a_file_is_named(tmp_path, capsys):
    source = jsonl(tmp_path / "t.jsonl", TRIPLETS)
    (tmp_path / "afile").write_text("x")
    fails(clean.main, ["--input", source, "--out", tmp_path / "afile" / "c.jsonl", "--filter", "none"], capsys,
          "afile", "not a folder")  # fmt: skip


def test_a_repeated_key_is_refused(tmp_path, capsys):
    """json.loads kept the last value silently."""
    refuses_jsonl(tmp_path, capsys, '{"query": "q", "pos": ["p"], "neg": ["n"]}\n'
                  '{"query": "q2", "pos": ["p"], "neg": ["a"], "neg": ["b"]}\n',
                  "record 1 (line 2)", "field 'neg'", "twice")  # fmt: skip


@pytest.mark.parametrize("value", ["NaN", "Infinity"])
def test_a_non_finite_score_is_refused(tmp_path, capsys, value):
    """NaN in neg_scores was written back."""
    refuses_jsonl(tmp_path, capsys, f'{{"query": "q", "pos": ["p"], "neg": ["a", "b"], "neg_scores": [0.5, {value}]}}\n',
                  "record 0", "neg_scores[1]", "finite")  # fmt: skip


def test_a_nan_score_in_parquet_is_refused(tmp_path, capsys):
    source, out = tmp_path / "t.parquet", tmp_path / "c.parquet"
    rows = [{**r, "scores": [0.9, 0.5]} for r in TRIPLETS]
    rows[2]["scores"] = [0.9, float("nan")]
    pq.write_table(pa.Table.from_pylist(rows), source)
    fails(clean.main, ["--input", source, "--out", out, "--filter", "none"], capsys, "t.parquet", "record 2",
          "scores[1]", outputs=[out])  # fmt: skip


# ---- work folders of killed runs -----------------------------------------------------------------------


def test_work_folders_of_dead_runs_are_removed_and_live_ones_kept(tmp_path):
    """kill -9 mid-clean left .clean-*/ beside the output, never removed."""
    host = socket.gethostname()
    dead_pid = 2**22 + 12345  # above Linux's default pid_max of 4194304: no such process
    dead = tmp_path / f".clean-{host}-{dead_pid}-abcd1234"
    live = tmp_path / f".clean-{host}-{os.getppid()}-abcd1234"
    elsewhere = tmp_path / f".clean-another-node-{dead_pid}-abcd1234"
    for folder in (dead, live, elsewhere):
        (folder / "cache").mkdir(parents=True)
    clean.clean_dataset(
        jsonl(tmp_path / "t.jsonl", TRIPLETS), tmp_path / "c.jsonl", settings=clean.Settings(filter="none")
    )
    assert not dead.exists() and live.exists() and elsewhere.exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".clean-")) == sorted(
        [live.name, elsewhere.name]
    )


# ---- the helper's own probe ---------------------------------------------------------------------------


def test_flagembedding_csv_lists_stay_aligned(tmp_path):
    """A FlagEmbedding CSV (list cells as JSON) was rewritten character by character (list("[...]"))."""
    rows = [
        {
            "query": "q",
            "pos": '["p"]',
            "neg": '["a", "b", "c"]',
            "pos_scores": "[0.9]",
            "neg_scores": "[0.5, 0.4, 0.3]",
        }
    ]
    source, out = tmp_path / "fe.csv", tmp_path / "c.csv"
    pd.DataFrame(rows).to_csv(source, index=False)
    labels = jsonl(tmp_path / "labels.jsonl", [{"query": "q", "passage": x} for x in ("p", "b")])
    clean.clean_dataset(source, out, settings=clean.Settings(filter="oracle"), labels=labels)
    back = pd.read_csv(out, dtype=str).iloc[0]
    assert json.loads(back["neg"]) == ["a", "c"] and json.loads(back["neg_scores"]) == [0.5, 0.3]
    clean.clean_dataset(source, out, settings=clean.Settings(filter="oracle", mode="relabel"), labels=labels)
    back = pd.read_csv(out, dtype=str).iloc[0]
    assert json.loads(back["pos"]) == ["p", "b"] and json.loads(back["neg"]) == ["a", "c"]
    assert json.loads(back["pos_scores"]) == [0.9, 0.4] and json.loads(back["neg_scores"]) == [0.5, 0.3]


def test_mark_mode_on_a_csv_ntuple_keeps_every_row(tmp_path):
    """A guard (held on f52d82d): n-tuple drop mode changed, mark mode must not."""
    rows = ntuple_rows(scores=False)
    source, out = tmp_path / "n.csv", tmp_path / "c.csv"
    pd.DataFrame(rows).to_csv(source, index=False)
    clean.clean_dataset(
        source, out, settings=clean.Settings(filter="rank_window", rank_window_start=1, mode="mark")
    )
    back = pd.read_csv(out, dtype=str)
    assert len(back) == 4 and json.loads(back["sieve_verdicts"][0]) == ["dropped", "kept", "kept"]


def test_a_byte_order_mark_is_not_part_of_the_first_row(tmp_path):
    """ "not JSON: Unexpected UTF-8 BOM" for a file a Windows editor saved."""
    source = tmp_path / "fe.jsonl"
    source.write_bytes(b'\xef\xbb\xbf{"query": "q", "pos": ["p"], "neg": ["n", "p"]}\n')
    out = tmp_path / "c.jsonl"
    report = clean.clean_dataset(source, out, settings=clean.Settings(filter="none"))
    assert report["format"] == "flagembedding" and json.loads(out.read_text())["neg"] == ["n"]


def test_a_json_array_is_named_as_such(tmp_path, capsys):
    source = tmp_path / "train.json"
    source.write_text(json.dumps([{"query": "q", "pos": ["p"], "neg": ["n"]}], indent=2))
    out = tmp_path / "c.json"
    fails(clean.main, ["--input", source, "--out", out, "--filter", "none"], capsys, "train.json", "JSON array",
          "one object a line", outputs=[out])  # fmt: skip


def test_a_datasets_folder_cleaned_into_a_file_name_is_refused(tmp_path, capsys):
    """It wrote a datasets folder named cleaned.parquet."""
    source = _datasets_folder(tmp_path / "mined", TRIPLETS)
    out = tmp_path / "cleaned.parquet"
    fails(clean.main, ["--input", source, "--out", out, "--filter", "none"], capsys, "cleaned.parquet",
          "datasets folder", outputs=[out])  # fmt: skip


def test_category_text_columns_are_texts(tmp_path):
    """A guard (held on f52d82d, which counted columns by name): text columns are now decided by type, and
    pandas categories are Parquet dictionary columns of strings."""
    rows = [{"anchor": f"q{i % 2}", "positive": f"p{i % 2}", "negative": f"n{i}"} for i in range(4)]
    source, out = tmp_path / "t.parquet", tmp_path / "c.parquet"
    pd.DataFrame(rows).astype("category").to_parquet(source)
    report = clean.clean_dataset(
        source, out, settings=clean.Settings(filter="rank_window", rank_window_start=1)
    )
    assert report["format"] == "triplet" and report["rows_out"] == 2
    assert pq.read_table(out).to_pylist() == rows[2:]


def test_a_marked_file_can_be_cleaned_again(tmp_path):
    """The verdict column mark mode adds counted as a fourth text column: "cannot tell the format"."""
    rows = [{"anchor": f"q{i % 2}", "positive": f"p{i % 2}", "negative": f"n{i}"} for i in range(4)]
    source, marked, dropped = jsonl(tmp_path / "t.jsonl", rows), tmp_path / "m.jsonl", tmp_path / "d.jsonl"
    clean.clean_dataset(
        source, marked, settings=clean.Settings(filter="rank_window", rank_window_start=1, mode="mark")
    )
    report = clean.clean_dataset(
        marked, dropped, settings=clean.Settings(filter="rank_window", rank_window_start=1)
    )
    assert report["format"] == "triplet" and report["rows_out"] == 2
    assert [json.loads(x)["sieve_verdict"] for x in dropped.read_text().splitlines()] == ["kept", "kept"]


def test_relabel_refuses_scores_it_cannot_keep_aligned(tmp_path, capsys):
    """pos_scores without neg_scores: the relabelled negatives joined pos, pos_scores stayed one short."""
    source = jsonl(
        tmp_path / "fe.jsonl", [{"query": "q", "pos": ["p"], "neg": ["a", "b"], "pos_scores": [0.9]}]
    )
    labels = jsonl(tmp_path / "labels.jsonl", [{"query": "q", "passage": x} for x in ("p", "b")])
    out = tmp_path / "c.jsonl"
    argv = ["--input", source, "--out", out, "--filter", "oracle", "--mode", "relabel", "--labels", labels]
    fails(clean.main, argv, capsys, "fe.jsonl", "record 0", "neg_scores", outputs=[out])


def test_a_null_text_in_the_first_jsonl_row_is_named(tmp_path, capsys):
    """A guard (held on f52d82d): with text columns decided by type, a null in the first row is still named."""
    source = jsonl(tmp_path / "t.jsonl", [{"anchor": "q", "positive": "p", "negative": None}, TRIPLETS[0]])
    out = tmp_path / "c.jsonl"
    fails(clean.main, ["--input", source, "--out", out, "--filter", "none"], capsys, "t.jsonl", "record 0",
          "field 'negative'", "found null", outputs=[out])  # fmt: skip


def test_a_lone_surrogate_in_a_key_and_an_upper_case_suffix(tmp_path, capsys):
    """A surrogate in a key died at the write (a traceback); ".JSONL" was an "unknown file type"."""
    source = tmp_path / "FE.JSONL"
    source.write_text('{"query": "q", "pos": ["p"], "neg": ["n", "p"], "x\\udc00": 1}\n')
    out = tmp_path / "c.jsonl"
    fails(clean.main, ["--input", source, "--out", out, "--filter", "none"], capsys, "FE.JSONL", "record 0",
          "<a key>", "surrogate", outputs=[out])  # fmt: skip


def test_mine_hard_negatives_include_positives_keeps_every_row(tmp_path):
    """sentence-transformers' own n-tuple output with include_positives=True: every row held its positive
    among the negatives and went whole with no filter at all."""
    pytest.importorskip("sentence_transformers")
    datasets = pytest.importorskip("datasets")
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.util import mine_hard_negatives

    from pipeline.core.config import resolve_model_path

    questions = [f"who wrote book {i}" for i in range(8)]
    positives = [f"Book {i} was written by author number {i} in the year {1900 + i}." for i in range(8)]
    corpus = positives + [f"Some other passage {j} about literature and authors" for j in range(20)]
    model = SentenceTransformer(resolve_model_path("minilm"), device="cpu")
    pairs = datasets.Dataset.from_dict({"anchor": questions, "positive": positives})
    mined = mine_hard_negatives(
        pairs,
        model,
        corpus=corpus,
        num_negatives=4,
        include_positives=True,
        output_format="n-tuple",
        verbose=False,
    )
    mined.save_to_disk(str(tmp_path / "mined"))
    report = clean.clean_dataset(
        tmp_path / "mined", tmp_path / "cleaned", settings=clean.Settings(filter="none")
    )
    cleaned = datasets.load_from_disk(str(tmp_path / "cleaned"))
    assert report["duplicates"]["exact"] == len(cleaned) == len(mined) == 8
    assert cleaned.column_names == ["anchor", "positive", "negative_1", "negative_2", "negative_3"]
    for row in cleaned:
        assert row["positive"] not in [row[f"negative_{i}"] for i in (1, 2, 3)]

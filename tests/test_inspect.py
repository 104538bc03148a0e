"""`python -m pipeline.workflow.inspect_negatives`: per-query tables, filters, sampling and the dataset summary."""

from __future__ import annotations

import shutil

import pandas as pd
import pyarrow as pa
import pytest
from stage_args import flags

from pipeline.core.schemas import FILTER_DECISIONS_SCHEMA
from pipeline.core.storage import DataError, write_table
from pipeline.sieve import candidates as fn_labels
from pipeline.sieve import filters
from pipeline.sieve import passage_sieve as sieve
from pipeline.sieve import report as sieve_report
from pipeline.workflow import inspect_negatives as inspect


@pytest.fixture(scope="module")
def workspace(tmp_path_factory, make_sieve_dataset, make_retriever):
    """results/ and resources/ of a dataset 'toy' as the workflow lays them out."""
    root = tmp_path_factory.mktemp("inspect")
    data = make_sieve_dataset(root / "data")
    model = make_retriever(root / "model")
    res, out = root / "resources" / "toy", root / "results" / "toy"
    res.mkdir(parents=True)
    shutil.copy(data["corpus"], res / "corpus.parquet")
    shutil.copy(data["queries"], res / "queries.train.parquet")
    cands = out / "sieve" / "candidates.parquet"
    tables = ("negatives", "qrels", "qrels_all", "queries", "corpus")
    fn_labels.main(flags(data, *tables, candidates=6, pool=12, out=cands))
    scored = dict(data, candidates=cands, model=model)
    negatives = out / "negatives"
    sieve.main(
        flags(
            scored,
            "candidates",
            "corpus",
            "queries",
            "model",
            out=negatives / "sieve_b0.5.parquet",
            train_out=negatives / "sieve_b0.5.train.parquet",
        )
    )
    dec = out / "sieve" / "rank_window" / "decisions.parquet"
    filters.main(flags(scored, "candidates", "corpus", "queries", filter="rank_window", start=3, out=dec))
    sieve_report.main(
        [
            "report",
            "--decisions",
            str(dec),
            "--candidates",
            str(cands),
            "--dataset",
            "toy",
            "--filter",
            "rank_window",
            "--out",
            str(out / "sieve" / "rank_window" / "report.json"),
        ]
    )
    return root


def run(workspace, capsys, monkeypatch, *argv, columns: int = 220):
    monkeypatch.setenv("COLUMNS", str(columns))
    where = flags(dataset="toy", results_dir=workspace / "results", resources_dir=workspace / "resources")
    assert inspect.main(["summary", *where, *argv[1:]] if argv[0] == "summary" else [*where, *argv]) == 0
    return capsys.readouterr().out


def test_show_one_query(workspace, capsys, monkeypatch):
    out = run(workspace, capsys, monkeypatch, "--qid", "q2")
    table = pd.read_parquet(workspace / "results" / "toy" / "negatives" / "sieve_b0.5.parquet")
    rows = table[table["qid"] == "q2"]
    assert "what is the value of topic 2" in out and "pos2" in out
    for pid in rows["pid"]:
        assert pid in out
    assert f"{rows['threshold'].iat[0]:.3f}" in out
    assert out.count("dropped") == int((~rows["kept"]).sum())
    assert "FN (qrels_all)" in out


def test_filters_and_sample(workspace, capsys, monkeypatch):
    table = pd.read_parquet(workspace / "results" / "toy" / "negatives" / "sieve_b0.5.parquet")
    out = run(workspace, capsys, monkeypatch, "--sample", "3", "--seed", "1", "--false-negatives")
    assert out.count("what is the value of topic") == 3
    assert "neg (qrels_all)" not in out  # only the false negatives are listed
    again = run(workspace, capsys, monkeypatch, "--sample", "3", "--seed", "1", "--false-negatives")
    assert again == out
    kept = run(workspace, capsys, monkeypatch, "--qid", "q2", "--kept")
    assert "dropped" not in kept.replace("kept (fallback)", "")
    n_kept = int(table[(table["qid"] == "q2")]["kept"].sum())
    assert kept.count(" kept ") + kept.count("kept (fallback)") >= n_kept
    other = run(workspace, capsys, monkeypatch, "--filter", "rank_window", "--qid", "q2", "--dropped")
    assert "rank_window" in other and "kept" not in other.split("decision", 1)[1]


def test_summary(workspace, capsys, monkeypatch):
    out = run(workspace, capsys, monkeypatch, "summary")
    assert "queries 8, candidates 48" in out
    cands = pd.read_parquet(workspace / "results" / "toy" / "sieve" / "candidates.parquet")
    assert f"false negatives {int(cands['is_false_negative'].sum())}," in out
    assert "rank_window" in out and "0.5" in out


def test_errors_name_the_file(workspace, capsys, monkeypatch):
    with pytest.raises(DataError, match="no candidates here"):
        run(workspace, capsys, monkeypatch, "--qid", "nope")
    with pytest.raises(DataError, match="β=0.1"):
        run(workspace, capsys, monkeypatch, "--beta", "0.1", "--qid", "q1")
    neg = workspace / "results" / "toy" / "negatives"
    shutil.copy(neg / "sieve_b0.5.parquet", neg / "sieve_b0.parquet")
    try:
        with pytest.raises(DataError, match="choose one with --beta"):
            run(workspace, capsys, monkeypatch, "--qid", "q1")
        assert "q1" in run(workspace, capsys, monkeypatch, "--beta", "0", "--qid", "q1")
    finally:
        (neg / "sieve_b0.parquet").unlink()


def test_the_sieve_scored_by_dpr_is_read_by_default_when_it_is_the_only_one(workspace, capsys, monkeypatch):
    # sieve.scorer dpr (the demo's) builds sieve/sieve_no_ccr/decisions.parquet and no sieve_b<β> file
    results = workspace / "results" / "toy"
    no_ccr = results / "sieve" / "sieve_no_ccr"
    no_ccr.mkdir(parents=True)
    shutil.copy(results / "negatives" / "sieve_b0.5.parquet", no_ccr / "decisions.parquet")
    try:
        with pytest.raises(DataError, match="sieve_no_ccr\\); choose one with --beta or --filter"):
            run(workspace, capsys, monkeypatch, "--qid", "q2")
        (results / "negatives" / "sieve_b0.5.parquet").rename(results / "sieve_b0.5.parquet.away")
        assert "sieve_no_ccr/decisions.parquet" in run(workspace, capsys, monkeypatch, "--qid", "q2")
    finally:
        if (results / "sieve_b0.5.parquet.away").exists():
            (results / "sieve_b0.5.parquet.away").rename(results / "negatives" / "sieve_b0.5.parquet")
        shutil.rmtree(no_ccr)


def test_entry_point_exists():
    assert callable(inspect.entry)


def test_sieve_outputs_and_reports_are_listed_per_sieve_setting(tmp_path):
    """Two sieve settings side by side (methods.sieve_tag): each --settings sees only its own files."""
    from pipeline.workflow.inspect_negatives import report_paths, sieve_files

    neg, sieve = tmp_path / "negatives", tmp_path / "sieve"
    neg.mkdir()
    for name in ("sieve_b0.5", "sieve_b6", "sieve_b0.5_pool200_strict", "oracle_pool200"):
        (neg / f"{name}.parquet").touch()
        (neg / f"{name}.train.parquet").touch()
    for name in ("sieve", "oracle", "sieve_b0.5", "sieve_pool200_strict", "answer_match_pool200"):
        (sieve / name).mkdir(parents=True)
        (sieve / name / "report.json").touch()
    assert sieve_files(tmp_path) == {"0.5": neg / "sieve_b0.5.parquet", "6": neg / "sieve_b6.parquet"}
    assert sieve_files(tmp_path, "_pool200") == {"0.5_strict": neg / "sieve_b0.5_pool200_strict.parquet"}
    assert [p.parent.name for p in report_paths(tmp_path)] == ["oracle", "sieve", "sieve_b0.5"]
    assert [p.parent.name for p in report_paths(tmp_path, "_pool200")] == [
        "answer_match_pool200",
        "sieve_pool200_strict",
    ]


def _markup_like_query():
    passages = pd.DataFrame(
        {
            "title": ["Lore [i]", "Plain"],
            "text": ["ends in [/b] and [citation needed] and [bold]not bold", "a second passage " * 8],
        },
        index=pd.Index(["p[1]", "p2"], name="pid"),
    )
    rows = pd.DataFrame(
        {
            "qid": ["q[x]", "q[x]"],
            "pid": ["p[1]", "p2"],
            "rank": [1, 2],
            "source_score": [9.0, 8.0],
            "similarity": [0.81, 0.42],
            "nce_loss": [1.5, 1.9],
            "threshold": [1.7, 1.7],
            "kept": [False, True],
            "fallback": [False, False],
            "is_false_negative": [True, False],
            "fn_label_source": ["qrels_all", "qrels_all"],
            "positive_pid": ["p2", "p2"],
        }
    )
    query = pd.Series({"text": "what is [/i] here?", "answers": ["[b]x"]})
    return rows, query, passages


@pytest.mark.parametrize("columns", [40, 80, 200])
def test_passage_text_that_looks_like_markup_is_printed_as_it_is(columns):
    """Corpus text is data, never rich markup ("[/b]" used to raise MarkupError, "[citation needed]"
    vanished); at 40/80 columns a candidate takes two lines and its passage keeps the line's width."""
    from rich.console import Console

    rows, query, passages = _markup_like_query()
    console = Console(width=columns, record=True, force_terminal=False)
    inspect.show_query(console, "q[x]", rows, query, passages, width=90)
    out = console.export_text()
    assert "q[x]" in out and "what is [/i] here?" in out and "[b]x" in out
    flat = " ".join(out.split())
    assert "[/b]" in flat and "Lore [i]" in flat
    if columns >= 80:
        assert "[citation needed]" in flat and "[bold]not" in flat
    assert "dropped" in out and "FN (qrels_all)" in out
    if columns < inspect.WIDE:
        # the passage line is as wide as the terminal allows, not a sliver of a table column
        passage_line = next(line for line in out.splitlines() if "Lore [i]" in line)
        assert len(passage_line.strip()) >= min(columns - 8, 60)


def test_summary_finds_the_sieve_scored_by_dpr_and_states_its_precision(workspace, capsys, monkeypatch):
    """Issue 40.5: the demo's sieve (sieve.scorer dpr) is sieve/sieve_no_ccr/decisions.parquet, with no
    sieve_b<β> file; the summary used to skip it silently. Now it is a row, labelled by its scorer, with
    the share of its drops that were true false negatives (precision), said in words too."""
    results = workspace / "results" / "toy"
    no_ccr = results / "sieve" / "sieve_no_ccr"
    no_ccr.mkdir(parents=True)
    table = pd.read_parquet(results / "negatives" / "sieve_b0.5.parquet")
    decisions = table.reindex(columns=list(FILTER_DECISIONS_SCHEMA.names))
    write_table(
        no_ccr / "decisions.parquet",
        pa.Table.from_pandas(decisions, FILTER_DECISIONS_SCHEMA, preserve_index=False),
    )
    try:
        out = run(workspace, capsys, monkeypatch, "summary", columns=80)
    finally:
        shutil.rmtree(no_ccr)
    assert out.splitlines()[0].startswith("summary of ")
    rows = [line.split() for line in out.splitlines()]
    assert ["sieve", "kept", "sieve-out", "fallback", "precision", "FN", "recall", "TN", "kept"] in rows
    assert {"sieve_no_ccr", "sieve_b0.5"} <= {row[0] for row in rows if row}  # not cut at 80 columns
    dropped = ~table["kept"].astype(bool)
    fn = table["is_false_negative"].astype("boolean").fillna(False).astype(bool)
    precision = f"{(fn & dropped).sum() / dropped.sum():.3f}"
    assert (
        f"sieve_no_ccr (scored by models/dpr): of its {int(dropped.sum())} drops, a share of {precision} were true "
        "false negatives (precision)"
    ) in " ".join(out.split())

"""pipeline.sieve.clean: users' hard-negative files in, the same files out (issue 42).

The sentence-transformers files are written by its own ``mine_hard_negatives`` on a slice of SQuAD-36
(the offline all-MiniLM-L6-v2), with the real ``datasets`` package (a dev dependency: the pipeline
itself reads a ``save_to_disk`` folder only where it is installed). Each output is saved twice, as
``Dataset.to_parquet`` and as ``Dataset.save_to_disk`` writes it, and both are cleaned and read back.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.core.config import resolve_model_path
from pipeline.core.storage import DataError
from pipeline.sieve import clean
from pipeline.sieve import passage_sieve as sv
from pipeline.sieve.report import detection_report
from tests.squad_data import squad36
from tests.tevatron_data import tevatron_rows

REPO = Path(__file__).resolve().parent.parent

N_QUESTIONS = 36
N_NEGATIVES = 5


@pytest.fixture(scope="module")
def squad_pairs() -> tuple[list[str], list[str], list[str]]:
    """(questions, their paragraphs, every paragraph of the same articles): a SQuAD-36 slice."""
    path, _ = squad36()
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        articles = json.load(handle)["data"]
    questions, positives, corpus = [], [], []
    for article in articles[:2]:
        for paragraph in article["paragraphs"]:
            corpus.append(paragraph["context"])
            for qa in paragraph["qas"][:1]:
                questions.append(qa["question"])
                positives.append(paragraph["context"])
    step = max(1, len(questions) // N_QUESTIONS)
    return questions[::step][:N_QUESTIONS], positives[::step][:N_QUESTIONS], corpus


@pytest.fixture(scope="module")
def mined_both(tmp_path_factory, squad_pairs) -> dict[str, dict[str, object]]:
    """container (parquet | hf) -> format name -> what mine_hard_negatives returned, saved as
    Dataset.to_parquet writes it (a file) and as Dataset.save_to_disk writes it (a folder)."""
    pytest.importorskip("sentence_transformers")
    import datasets  # a dev dependency (pyproject.toml): its absence is an error here, not a skip
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.util import mine_hard_negatives

    questions, positives, corpus = squad_pairs
    root = tmp_path_factory.mktemp("mined")
    model = SentenceTransformer(resolve_model_path("minilm"), device="cpu")
    pairs = datasets.Dataset.from_dict({"anchor": questions, "positive": positives})
    files: dict[str, dict[str, object]] = {"parquet": {}, "hf": {}}
    for output_format in ("triplet", "n-tuple", "labeled-pair", "labeled-list"):
        for scores in (False, True):
            if output_format == "labeled-pair" and scores:
                continue  # scores replace the labels: no way to tell the positive (refused below)
            out = mine_hard_negatives(
                pairs,
                model,
                corpus=corpus,
                num_negatives=N_NEGATIVES,
                output_format=output_format,
                output_scores=scores,
                cache_folder=str(root / "cache"),
                verbose=False,
            )
            name = f"{output_format}{'-scores' if scores else ''}"
            out.to_parquet(root / f"{name}.parquet")
            out.save_to_disk(str(root / name))
            files["parquet"][name] = root / f"{name}.parquet"
            files["hf"][name] = root / name
    return files


@pytest.fixture(scope="module")
def mined(mined_both) -> dict[str, object]:
    """format name -> Parquet file written from mine_hard_negatives' output."""
    return mined_both["parquet"]


def _run(source, out, **settings) -> tuple[dict, pd.DataFrame]:
    fmt = settings.pop("fmt", "auto")
    labels = settings.pop("labels", None)
    report = clean.clean_dataset(source, out, fmt=fmt, settings=clean.Settings(**settings), labels=labels)
    return report, pd.read_parquet(out.with_name(out.name.split(".")[0] + ".decisions.parquet"))


def _removed(decisions: pd.DataFrame) -> pd.DataFrame:
    return decisions[decisions["action"] == "removed"]


EXPECTED_FORMAT = {
    "triplet": "triplet",
    "triplet-scores": "triplet",
    "n-tuple": "n_tuple",
    "n-tuple-scores": "n_tuple",
    "labeled-pair": "labeled_pair",
    "labeled-list": "labeled_list",
    "labeled-list-scores": "labeled_list",
}


def _expected_rows(rows: list[dict], decisions: pd.DataFrame, name: str) -> list[dict]:
    """The source's rows less what the decisions removed: list slots of a labeled list, the negative
    columns of an n-tuple (each row's kept negatives refilled into the first columns, as many as every
    written row holds), whole rows otherwise."""
    removed = _removed(decisions)
    if name.startswith("n-tuple"):
        written = decisions[decisions["action"] == "kept"]
        width = written.groupby("row").size()
        assert width.nunique() == 1  # every written row holds the same negative columns
        expected = []
        for r, record in enumerate(rows):
            if r not in width.index:
                continue
            slots = written.loc[written["row"] == r].sort_values("rank")["slot"].tolist()
            row = {k: v for k, v in record.items() if not k.startswith("negative_")}
            new = {f"negative_{i + 1}": record[slot] for i, slot in enumerate(slots)}
            if "scores" in record:
                row["scores"] = [record["scores"][0]] + [
                    record["scores"][int(s.split("_")[1])] for s in slots
                ]
            expected.append({k: v for k, v in {**record, **new, **row}.items() if k in row or k in new})
        return expected
    if not name.startswith("labeled-list"):
        gone_rows = set(removed["row"])
        return [record for r, record in enumerate(rows) if r not in gone_rows]
    expected = []
    for r, record in enumerate(rows):
        gone = {int(s.split("[")[1][:-1]) for s in removed.loc[removed["row"] == r, "slot"]}
        expected.append(
            {
                k: [v for i, v in enumerate(record[k]) if i not in gone]
                if isinstance(record[k], list)
                else record[k]
                for k in record
            }
        )
    return expected


def _check_report(report: dict, decisions: pd.DataFrame, name: str, start: int) -> None:
    assert report["format"] == EXPECTED_FORMAT[name]
    assert report["negatives"] == len(decisions) > 0
    assert report["decisions"]["dropped"] + report["decisions"]["duplicate_of_positive"] == len(
        _removed(decisions)
    )
    if start:
        assert set(decisions.loc[decisions["decision"] == "dropped", "rank"]) <= {1, 2}
        assert report["decisions"]["dropped"] > 0


def _trimmed(name: str, report: dict) -> list[str]:
    """The negative columns an n-tuple file loses when rank_window drops its first 2 of 5 in every row:
    the refilled rows hold 3 (docs/clean.md); no other format loses a column."""
    if not name.startswith("n-tuple"):
        return []
    assert (report["negative_columns_in"], report["negative_columns_out"]) == (N_NEGATIVES, N_NEGATIVES - 2)
    return [f"negative_{i}" for i in range(N_NEGATIVES - 1, N_NEGATIVES + 1)]


@pytest.mark.parametrize("name", sorted(EXPECTED_FORMAT))
def test_sentence_transformers_files_round_trip(mined, tmp_path, name):
    # rank_window (no model) drops the top 2 of each set: what the test checks is the file, not a model.
    source = mined[name]
    out = tmp_path / "cleaned.parquet"
    start = 2
    report, decisions = _run(source, out, filter="rank_window", rank_window_start=start)
    raw, cleaned = pq.read_table(source), pq.read_table(out)
    assert cleaned.schema == raw.drop(_trimmed(name, report)).schema  # columns, order, types
    assert cleaned.to_pylist() == _expected_rows(raw.to_pylist(), decisions, name)
    _check_report(report, decisions, name, start)


@pytest.mark.parametrize("name", sorted(EXPECTED_FORMAT))
def test_save_to_disk_folders_round_trip(mined_both, tmp_path, name):
    """mine_hard_negatives -> Dataset.save_to_disk -> the command -> datasets.load_from_disk."""
    import datasets

    source = mined_both["hf"][name]
    out = tmp_path / "cleaned"
    start = 2
    report, decisions = _run(source, out, filter="rank_window", rank_window_start=start)
    raw, cleaned = datasets.load_from_disk(str(source)), datasets.load_from_disk(str(out))
    rows = raw.to_list()
    raw = raw.remove_columns(_trimmed(name, report))
    assert cleaned.column_names == raw.column_names
    assert (
        cleaned.features == raw.features
    )  # the datasets types (Value("string"), List(Value("float32")), ...)
    assert cleaned.data.table.schema == raw.data.table.schema  # and the Arrow types under them
    assert cleaned.to_list() == _expected_rows(rows, decisions, name)
    assert 0 < len(cleaned) <= len(raw)
    _check_report(report, decisions, name, start)


def test_save_to_disk_mark_adds_the_verdicts_as_a_datasets_feature(mined_both, tmp_path):
    import datasets

    source, out = mined_both["hf"]["labeled-list-scores"], tmp_path / "marked"
    _run(source, out, filter="rank_window", rank_window_start=2, mode="mark")
    raw, marked = datasets.load_from_disk(str(source)), datasets.load_from_disk(str(out))
    assert marked.column_names == raw.column_names + ["sieve_verdicts"]
    assert marked.features["sieve_verdicts"] == datasets.List(datasets.Value("string"))
    assert marked.remove_columns("sieve_verdicts").to_list() == raw.to_list()
    documents = raw.column_names[1]  # (anchor, [documents], [scores]): the first document is the positive
    for row, verdicts in zip(raw, marked["sieve_verdicts"]):
        assert len(verdicts) == len(row[documents]) and verdicts[0] == "positive"
    assert "dropped" in {v for verdicts in marked["sieve_verdicts"] for v in verdicts}


def test_scores_are_read_as_each_negatives_source_score(mined, tmp_path):
    _, decisions = _run(mined["n-tuple-scores"], tmp_path / "c.parquet", filter="none")
    raw = pq.read_table(mined["n-tuple-scores"]).to_pylist()
    first = decisions[decisions["row"] == 0].sort_values("rank")
    assert first["source_score"].tolist() == pytest.approx(raw[0]["scores"][1:])
    assert first["slot"].tolist() == [f"negative_{i}" for i in range(1, N_NEGATIVES + 1)]


def test_the_sieve_scores_mined_triplets_with_minilm(mined, tmp_path):
    report, decisions = _run(mined["triplet"], tmp_path / "c.parquet", filter="sieve", model="minilm")
    judged = decisions[decisions["decision"] != "duplicate_of_positive"]
    assert judged["similarity"].notna().all() and judged["score"].notna().all()
    assert 0 < report["sieve_out_rate"] < 1
    # The rule, per (anchor, positive) set: kept iff loss >= the set's mean loss (or the fallback).
    assert ((judged["decision"] == "kept") | ~judged["fallback"]).all()
    assert report["detection"] is None  # no labels


def test_mark_keeps_every_negative_with_its_verdict(mined, tmp_path):
    out = tmp_path / "c.parquet"
    _, decisions = _run(mined["n-tuple"], out, filter="rank_window", rank_window_start=2, mode="mark")
    cleaned = pq.read_table(out)
    raw = pq.read_table(mined["n-tuple"])
    assert cleaned.column_names == raw.column_names + ["sieve_verdicts"]
    assert cleaned.drop(["sieve_verdicts"]).to_pylist() == raw.to_pylist()
    verdicts = cleaned.column("sieve_verdicts").to_pylist()[0]
    assert verdicts[:2] == ["dropped", "dropped"] or "duplicate_of_positive" in verdicts[:2]
    assert set(decisions["action"]) == {"marked"}


def test_relabel_is_refused_where_a_row_holds_one_positive(mined, tmp_path):
    with pytest.raises(DataError, match="relabel"):
        _run(mined["triplet"], tmp_path / "c.parquet", filter="none", mode="relabel")


def test_labeled_pairs_with_scores_are_refused(tmp_path):
    path = tmp_path / "pairs.parquet"
    pq.write_table(pa.table({"anchor": ["q"], "positive": ["p"], "score": [0.5]}), path)
    with pytest.raises(DataError, match="which document is the positive"):
        _run(path, tmp_path / "c.parquet", filter="none")


def test_labeled_pair_relabel_sets_label_one(mined, tmp_path):
    out = tmp_path / "c.parquet"
    _, decisions = _run(mined["labeled-pair"], out, filter="rank_window", rank_window_start=1, mode="relabel")
    rows = pq.read_table(out).to_pylist()
    relabelled = set(decisions.loc[decisions["action"] == "relabelled", "row"])
    assert relabelled and all(rows[r]["label"] == 1 for r in relabelled if r < len(rows))


# ---- Tevatron and FlagEmbedding ---------------------------------------------------------------


def _tevatron_rows(questions, positives, corpus, n=N_NEGATIVES):
    rows = []
    for i, (q, p) in enumerate(zip(questions, positives)):
        negs = [c for c in corpus if c != p][i % 7 : i % 7 + n]
        rows.append(
            {
                "query_id": f"q{i}",
                "query": q,
                "positive_passages": [{"docid": f"d{corpus.index(p)}", "title": "", "text": p}],
                "negative_passages": [{"docid": f"d{corpus.index(c)}", "title": "", "text": c} for c in negs],
            }
        )
    # A negative that is the positive again under another docid, one that differs in case and
    # punctuation only, and one that nearly equals it (one word changed).
    rows[0]["negative_passages"].append({"docid": "copy", "title": "", "text": positives[0]})
    rows[1]["negative_passages"].append({"docid": "case", "title": "", "text": positives[1].upper() + " !!"})
    words = positives[2].split()
    rows[2]["negative_passages"].append(
        {"docid": "near", "title": "", "text": " ".join(words[:-1] + ["zebra"])}
    )
    return rows


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def test_tevatron_round_trip_and_duplicates_first(squad_pairs, tmp_path):
    rows = _tevatron_rows(*squad_pairs)
    source, out = tmp_path / "train.jsonl", tmp_path / "cleaned.jsonl"
    _write_jsonl(source, rows)
    report, decisions = _run(source, out, filter="none")
    assert report["format"] == "tevatron"
    dups = decisions[decisions["decision"] == "duplicate_of_positive"].set_index("docid")
    assert {"copy", "case", "near"} <= set(dups.index)
    assert dups.loc["copy", "duplicate_jaccard"] == dups.loc["case", "duplicate_jaccard"] == 1.0
    assert 0.9 <= dups.loc["near", "duplicate_jaccard"] < 1.0
    assert report["duplicates"]["exact"] >= 2 and report["duplicates"]["near"] >= 1
    cleaned = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert len(cleaned) == len(rows)
    for r, (raw, new) in enumerate(zip(rows, cleaned)):
        assert list(new) == list(raw)  # keys and their order
        gone = set(decisions.loc[(decisions["row"] == r) & (decisions["action"] == "removed"), "slot"])
        kept = [n for i, n in enumerate(raw["negative_passages"]) if f"negative_passages[{i}]" not in gone]
        assert new["negative_passages"] == kept
        assert new["positive_passages"] == raw["positive_passages"]


def test_tevatron_relabel_moves_suspects_to_the_positives(squad_pairs, tmp_path):
    rows = _tevatron_rows(*squad_pairs)
    source, out = tmp_path / "train.jsonl", tmp_path / "cleaned.jsonl"
    _write_jsonl(source, rows)
    _, decisions = _run(source, out, filter="rank_window", rank_window_start=1, mode="relabel")
    cleaned = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    for raw, new in zip(rows, cleaned):
        first = raw["negative_passages"][0]
        assert new["positive_passages"] == raw["positive_passages"] + [first]
        assert first not in new["negative_passages"]
    assert (decisions.loc[decisions["rank"] == 1, "action"] == "relabelled").all()


def test_flagembedding_round_trip_with_scores(squad_pairs, tmp_path):
    questions, positives, corpus = squad_pairs
    rows = []
    for i, (q, p) in enumerate(zip(questions, positives)):
        negs = [c for c in corpus if c != p][i % 5 : i % 5 + 4]
        rows.append(
            {
                "query": q,
                "pos": [p],
                "neg": negs,
                "pos_scores": [0.9],
                "neg_scores": [0.5, 0.4, 0.3, 0.2],
                "prompt": "Represent this sentence for searching relevant passages: ",
                "type": "normal",
            }
        )
    source = tmp_path / "fe.jsonl"
    _write_jsonl(source, rows)
    out = tmp_path / "cleaned.jsonl"
    report, decisions = _run(source, out, filter="none")
    assert report["format"] == "flagembedding"
    assert [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()] == rows  # nothing flagged
    out2 = tmp_path / "relabelled.jsonl"
    _run(
        source,
        out2,
        filter="oracle",
        mode="relabel",
        labels=_labels(
            tmp_path, [(r["query"], r["pos"][0]) for r in rows] + [(rows[0]["query"], rows[0]["neg"][1])]
        ),
    )
    new = [json.loads(x) for x in out2.read_text(encoding="utf-8").splitlines()]
    assert new[0]["pos"] == rows[0]["pos"] + [rows[0]["neg"][1]] and new[0]["pos_scores"] == [0.9, 0.4]
    assert new[0]["neg_scores"] == [0.5, 0.3, 0.2] and new[1:] == rows[1:]


def _labels(tmp_path, pairs):
    path = tmp_path / "labels.jsonl"
    _write_jsonl(path, [{"query": q, "passage": p} for q, p in pairs])
    return path


def test_flagembedding_refuses_rank_window(tmp_path):
    source = tmp_path / "fe.jsonl"
    _write_jsonl(source, [{"query": "q", "pos": ["p"], "neg": ["n"]}])
    with pytest.raises(DataError, match="not a rank"):
        _run(source, tmp_path / "c.jsonl", filter="rank_window")


def test_answer_match_is_not_applicable(tmp_path):
    source = tmp_path / "fe.jsonl"
    _write_jsonl(source, [{"query": "q", "pos": ["p"], "neg": ["n"]}])
    with pytest.raises(DataError, match="answer strings"):
        _run(source, tmp_path / "c.jsonl", filter="answer_match")


def test_the_command_reads_a_settings_document_with_its_flags_over_it(tmp_path):
    # what the workflow passes (rule clean_negatives) and the flags a user types, one contract
    source = tmp_path / "t.csv"
    source.write_text(
        "anchor,positive,negative\nq,p one,n one\nq,p one,n two\nr,p two,n 3\n", encoding="utf-8"
    )
    settings = tmp_path / "clean.json"
    settings.write_text(json.dumps({"filter": "rank_window", "rank_window_start": 2, "mode": "mark"}))
    argv = ["--input", str(source), "--settings", str(settings)]
    clean.main([*argv, "--out", str(tmp_path / "document.csv")])
    clean.main([*argv, "--out", str(tmp_path / "flagged.csv"), "--rank-window-start", "1"])
    for name, start in (("document", 2), ("flagged", 1)):
        _run(source, tmp_path / f"api_{name}.csv", filter="rank_window", rank_window_start=start, mode="mark")
        assert (tmp_path / f"{name}.csv").read_bytes() == (tmp_path / f"api_{name}.csv").read_bytes()
    assert (tmp_path / "document.csv").read_bytes() != (tmp_path / "flagged.csv").read_bytes()
    # a filter that cannot judge these files says why, as the Python API does
    with pytest.raises(DataError, match="answer strings"):
        clean.main([*argv, "--out", str(tmp_path / "x.csv"), "--filter", "answer_match"])


def test_csv_triplets_round_trip_cell_for_cell(tmp_path):
    source, out = tmp_path / "t.csv", tmp_path / "c.csv"
    source.write_text(
        'anchor,positive,negative,scores\nq1,p one,n one,"[0.9, 0.5]"\nq1,p one,p one,"[0.9, 0.9]"\n'
        'q2,p two,n 2,"[0.8, 0.1]"\n',
        encoding="utf-8",
    )
    report, decisions = _run(source, out, filter="none")
    assert report["format"] == "triplet" and report["duplicates"]["exact"] == 1
    assert out.read_text(encoding="utf-8") == (
        'anchor,positive,negative,scores\nq1,p one,n one,"[0.9, 0.5]"\nq2,p two,n 2,"[0.8, 0.1]"\n'
    )
    assert decisions["source_score"].tolist() == [0.5, 0.9, 0.1]


# ---- malformed rows ----------------------------------------------------------------------------


def test_a_malformed_tevatron_row_names_file_row_and_field(tmp_path):
    rows = [
        {
            "query_id": "1",
            "query": "q",
            "positive_passages": [{"docid": "a", "text": "p"}],
            "negative_passages": [{"docid": "b", "text": "n"}],
        },
        {
            "query_id": "2",
            "query": "q2",
            "positive_passages": [{"docid": "a", "text": "p"}],
            "negative_passages": [{"docid": "b", "text": "n"}, {"docid": "c", "title": "t"}],
        },
    ]
    source = tmp_path / "bad.jsonl"
    _write_jsonl(source, rows)
    with pytest.raises(DataError) as err:
        _run(source, tmp_path / "c.jsonl", filter="none")
    assert err.value.file == str(source)
    assert err.value.record == "1 (line 2)"
    assert err.value.field == "negative_passages[1].text"


def test_a_null_negative_in_parquet_names_file_row_and_column(tmp_path):
    source = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"anchor": ["q", "q"], "positive": ["p", "p"], "negative": ["n", None]}), source)
    with pytest.raises(DataError) as err:
        _run(source, tmp_path / "c.parquet", filter="none")
    assert (err.value.file, err.value.record, err.value.field) == (str(source), 1, "negative")
    assert "found null" in str(err.value)


def test_a_malformed_save_to_disk_row_names_folder_row_and_field(tmp_path):
    import datasets

    source = tmp_path / "bad"
    datasets.Dataset.from_dict(
        {"anchor": ["q", "q", "q2"], "positive": ["p", "p", "p2"], "negative": ["n", "m", None]}
    ).save_to_disk(str(source))
    with pytest.raises(DataError) as err:
        _run(source, tmp_path / "cleaned", filter="none")
    assert (err.value.file, err.value.record, err.value.field) == (str(source), 2, "negative")
    assert not (tmp_path / "cleaned").exists()


def test_a_line_that_is_not_json_is_named(tmp_path):
    source = tmp_path / "bad.jsonl"
    source.write_text('{"query": "q", "pos": ["p"], "neg": ["n"]}\n{"query": \n', encoding="utf-8")
    with pytest.raises(DataError, match=r"record 1 \(line 2\): not JSON"):
        _run(source, tmp_path / "c.jsonl", filter="none")


# ---- the same decisions as the project's own sieve ---------------------------------------------------


def test_sieve_decisions_and_fn_recall_equal_the_projects_own_sieve(
    tmp_path, make_sieve_dataset, make_retriever, make_sieve_candidates
):
    paths = make_sieve_dataset(tmp_path / "data")
    model = make_retriever(tmp_path / "model")
    cands_path = make_sieve_candidates(paths, tmp_path / "candidates.parquet")
    sieve_out = tmp_path / "sieve.parquet"
    sv.main(
        [
            "--candidates",
            str(cands_path),
            "--corpus",
            str(paths["corpus"]),
            "--queries",
            str(paths["queries"]),
            "--model",
            str(model),
            "--out",
            str(sieve_out),
        ]
    )
    own = pd.read_parquet(sieve_out)

    # The same candidates as a Tevatron file, and qrels_all as a labels file.
    cands = sv.read_candidates(cands_path)
    corpus = pd.read_parquet(paths["corpus"]).set_index("pid")
    queries = pd.read_parquet(paths["queries"]).set_index("qid")
    source = tmp_path / "toy.jsonl"
    _write_jsonl(source, tevatron_rows(cands, corpus, queries))
    qrels_all = pd.read_parquet(paths["qrels_all"])
    labels = _labels(
        tmp_path,
        [(queries.at[q, "text"], corpus.at[p, "text"]) for q, p in zip(qrels_all["qid"], qrels_all["pid"])],
    )
    report, decisions = _run(
        source, tmp_path / "cleaned.jsonl", filter="sieve", model=str(model), labels=labels
    )

    assert report["decisions"]["duplicate_of_positive"] == 0
    mine = decisions.set_index(["qid", "docid"]).sort_index()
    theirs = own.set_index(["qid", "pid"]).sort_index()
    assert mine.index.tolist() == theirs.index.tolist()
    assert (mine["kept"].to_numpy() == theirs["kept"].to_numpy()).all()
    assert np.allclose(mine["score"], theirs["nce_loss"]) and np.allclose(
        mine["similarity"], theirs["similarity"]
    )
    assert (mine["is_false_negative"].to_numpy(bool) == theirs["is_false_negative"].to_numpy(bool)).all()
    expected = detection_report(own)
    assert expected["n_false_negatives"] > 0
    for key in ("recall", "precision", "true_negative_retention", "sieve_out_rate", "n_false_negatives"):
        assert report["detection"][key] == pytest.approx(expected[key]), key
    # The CLI writes the same report.
    clean.main(
        [
            "--input",
            str(source),
            "--out",
            str(tmp_path / "cli.jsonl"),
            "--model",
            str(model),
            "--labels",
            str(labels),
        ]
    )
    cli_report = json.loads((tmp_path / "cli.report.json").read_text())
    assert cli_report["detection"]["recall"] == pytest.approx(expected["recall"])
    assert (tmp_path / "cli.report.md").exists()


# ---- in the DAG (rule clean_negatives) ---------------------------------------------------------------


def test_the_workflow_cleans_a_declared_file_as_the_command_does(tmp_path):
    # The rule is the command with the entry's settings: same cleaned file, its report beside it.
    source = tmp_path / "mine.csv"
    source.write_text(
        "anchor,positive,negative\nq1,p one,n one\nq1,p one,p one\nq2,p two,n 2\n", encoding="utf-8"
    )
    overlay = tmp_path / "clean.yaml"
    overlay.write_text(f"clean: {{mine: {{source: {source}, filter: none}}}}\n", encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "1", "--snakefile", str(REPO / "Snakefile")]
        + ["--directory", str(tmp_path), "results/mine/clean/cleaned.csv", "--configfile", str(overlay)],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    by_hand = tmp_path / "by_hand.csv"
    _run(source, by_hand, filter="none")
    workflow_out = tmp_path / "results" / "mine" / "clean" / "cleaned.csv"
    assert workflow_out.read_bytes() == by_hand.read_bytes()
    report = json.loads((workflow_out.parent / "cleaned.csv.report.json").read_text(encoding="utf-8"))
    assert report["duplicates"]["exact"] == 1

"""prepare_data end to end on the fixtures (counts computed by hand from the fixture files), its
validation on broken inputs, the deterministic splits, and the workflow's view of `source`."""

from __future__ import annotations

import copy
import gzip
import hashlib
import json
import math
from pathlib import Path

import pandas as pd
import pytest
from squad_data import squad36

from pipeline.core.cli import run_main
from pipeline.core.config import ConfigError, load_config
from pipeline.core.storage import SPLITS
from pipeline.data.prepare import main
from pipeline.data.readers import sources
from pipeline.data.splits import assign_splits, parse_split_spec

FIX = Path(__file__).parent / "fixtures"
OUTPUTS = [
    "corpus.parquet",
    *(f"{t}.{s}.parquet" for t in ("queries", "qrels") for s in SPLITS),
    "negatives.train.parquet",
    "manifest.json",
]


def prepare(out: Path, fmt: str, files: dict[str, Path], *extra: str) -> dict:
    argv = ["--dataset", "t", "--format", fmt, "--out-dir", str(out), *extra]
    for role, path in files.items():
        argv += ["--file", f"{role}={path}"]
    assert main(argv) == 0
    return json.loads((out / "manifest.json").read_text())


def table(out: Path, name: str) -> pd.DataFrame:
    return pd.read_parquet(out / f"{name}.parquet")


def fails(capsys, out: Path, fmt: str, files: dict[str, Path], *extra: str) -> str:
    argv = ["--dataset", "t", "--format", fmt, "--out-dir", str(out), *extra]
    for role, path in files.items():
        argv += ["--file", f"{role}={path}"]
    with pytest.raises(SystemExit) as exc:
        run_main(main, argv)
    assert exc.value.code == 2
    assert not any((out / name).exists() for name in OUTPUTS), "a failed run left outputs"
    return capsys.readouterr().err


MARCO = FIX / "msmarco"


def marco_fails(tmp_path: Path, capsys, **files: Path | str) -> str:
    """``fails`` for the msmarco format; a file given by name is the fixture's (tests/fixtures/msmarco)."""
    files = {role: MARCO / f if isinstance(f, str) else f for role, f in files.items()}
    return fails(capsys, tmp_path / "out", "msmarco", files)


DPR_FILES = {
    "corpus": FIX / "dpr" / "psgs_w100.tsv",
    "train": FIX / "dpr" / "biencoder-nq-train.json.gz",
    "dev": FIX / "dpr" / "biencoder-nq-dev.json",
    "test": FIX / "dpr" / "nq-test.qa.csv",
}


# ---- the four formats ----------------------------------------------------------------------------


def test_dpr(tmp_path):
    m = prepare(tmp_path, "dpr", DPR_FILES)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(OUTPUTS)
    c = m["counts"]
    assert c["corpus"] == 13  # 12 passages + 1 ctx without passage_id (used twice, stored once)
    assert c["queries"] == {"train": 4, "dev": 2, "test": 4}
    assert c["qrels"] == {"train": 6, "dev": 3, "test": 0}
    assert c["negatives_train"] == 9
    assert c["notes"] == {
        "corpus_from_ctx": 1,
        "ctx_without_passage_id": 2,
        "negatives_dropped_positive": 1,
        "negatives_dropped_repeated": 1,
        "negatives_ignored.dev": 2,
        "positives_repeated": 1,
    }
    noid = table(tmp_path, "corpus").set_index("pid").filter(like="ctx:", axis=0)
    assert len(noid) == 1 and noid.iloc[0]["title"] == ""
    qrels = table(tmp_path, "qrels.train")
    assert qrels.values.tolist() == [
        ["train-0", "3", 2],
        ["train-1", "5", 2],
        ["train-2", "7", 2],
        ["train-2", noid.index[0], 1],
        ["train-3", "1", 2],
        ["train-3", "2", 1],
    ]
    neg = table(tmp_path, "negatives.train")
    assert neg[neg.qid == "train-0"][["pid", "rank", "source"]].values.tolist() == [
        ["4", 1, "dpr_hard"],
        ["10", 2, "dpr_hard"],
        ["11", 1, "dpr_random"],
        ["12", 2, "dpr_random"],
    ]
    assert neg[neg.qid == "train-3"].pid.tolist() == ["9", noid.index[0]]
    assert neg.score.iloc[0] == pytest.approx(14.2)
    assert str(neg["rank"].dtype) == "int32" and str(neg["score"].dtype) == "float32"
    test = table(tmp_path, "queries.test")
    assert test.answers.map(list).tolist()[1] == ["K2", "Mount Godwin-Austen"]
    assert table(tmp_path, "qrels.dev").values.tolist() == [
        ["dev-0", "11", 2],
        ["dev-1", "10", 2],
        ["dev-1", "4", 1],
    ]


def test_msmarco(tmp_path):
    d = FIX / "msmarco"
    m = prepare(
        tmp_path,
        "msmarco",
        {
            "corpus": d / "collection.tsv",
            "queries_train": d / "queries.train.tsv",
            "qrels_train": d / "qrels.train.tsv",
            "queries_test": d / "queries.dev.small.tsv",
            "qrels_test": d / "qrels.dev.small.tsv",
        },
    )
    c = m["counts"]
    assert (c["corpus"], c["queries"], c["qrels"]) == (
        8,
        {"train": 3, "dev": 0, "test": 2},
        {"train": 4, "dev": 0, "test": 3},
    )
    assert c["notes"] == {
        "qrels_not_positive.train": 1,
        "queries_without_qrels.test": 2,
        "queries_without_qrels.train": 2,
    }
    assert table(tmp_path, "queries.train").qid.tolist() == ["634306", "920825", "1000084"]
    assert table(tmp_path, "queries.test").answers.map(len).tolist() == [0, 0]
    assert len(table(tmp_path, "negatives.train")) == 0


def test_squad_all_test(tmp_path):
    source, _ = squad36()
    m = prepare(tmp_path, "squad", {"source": source})
    assert m["counts"]["corpus"] == 1557
    assert m["counts"]["queries"] == {"train": 0, "dev": 0, "test": 8001}
    qrels = table(tmp_path, "qrels.test")
    assert qrels.relevance.eq(1).all() and len(qrels) == 8001
    assert qrels.set_index("qid").loc["5725b33f6a3fe71400b8952d", "pid"] == "1973_oil_crisis#0"
    assert table(tmp_path, "corpus").title.tolist()[:2] == ["1973_oil_crisis", "1973_oil_crisis"]


def test_squad_split_by_article(tmp_path):
    source, spec = squad36()
    m = prepare(tmp_path, "squad", {"source": source}, "--split-spec", json.dumps(spec["split"]))
    assert m["split"] == spec["split"]
    article_of = {pid: pid.split("#")[0] for pid in table(tmp_path, "corpus").pid}
    split_of_article: dict[str, set] = {}
    for split in SPLITS:
        for pid in table(tmp_path, f"qrels.{split}").pid:
            split_of_article.setdefault(article_of[pid], set()).add(split)
    assert all(len(s) == 1 for s in split_of_article.values())  # never one article in two splits
    assert sorted(set().union(*split_of_article.values())) == ["dev", "test", "train"]
    assert sum(m["counts"]["queries"].values()) == 8001


def test_beir(tmp_path):
    d = FIX / "beir" / "scifact"
    m = prepare(
        tmp_path,
        "beir",
        {
            "corpus": d / "corpus.jsonl",
            "queries": d / "queries.jsonl",
            "qrels_train": d / "qrels" / "train.tsv",
            "qrels_test": d / "qrels" / "test.tsv",
        },
    )
    c = m["counts"]
    assert (c["corpus"], c["queries"], c["qrels"]) == (
        5,
        {"train": 2, "dev": 0, "test": 2},
        {"train": 3, "dev": 0, "test": 2},
    )
    assert c["notes"]["qrels_not_positive.test"] == 2
    assert table(tmp_path, "qrels.test").values.tolist() == [["13", "doc-a", 1], ["36", "18670", 1]]


def test_tevatron(tmp_path):
    d = FIX / "beir" / "tevatron"
    m = prepare(
        tmp_path,
        "beir",
        {"corpus": d / "corpus.jsonl.gz", "train": d / "train.jsonl", "queries_test": d / "test.jsonl"},
    )
    c = m["counts"]
    assert (c["corpus"], c["queries"], c["qrels"], c["negatives_train"]) == (
        5,
        {"train": 2, "dev": 0, "test": 2},
        {"train": 2, "dev": 0, "test": 0},
        4,
    )
    neg = table(tmp_path, "negatives.train")
    assert neg.source.eq("tevatron").all() and neg.score.map(math.isnan).all()
    assert neg[neg.qid == "q2"]["rank"].tolist() == [1, 2]
    assert table(tmp_path, "qrels.train").relevance.eq(1).all()  # no gold-first convention here


def test_manifest_checksums_and_determinism(tmp_path):
    a = prepare(tmp_path / "a", "dpr", DPR_FILES)
    b = prepare(tmp_path / "b", "dpr", DPR_FILES)
    sha = hashlib.sha256(DPR_FILES["train"].read_bytes()).hexdigest()
    assert a["files"]["train"]["sha256"] == sha and a["format"] == "dpr"
    assert a["counts"] == b["counts"]
    for name in OUTPUTS[:-1]:
        pd.testing.assert_frame_equal(
            pd.read_parquet(tmp_path / "a" / name), pd.read_parquet(tmp_path / "b" / name)
        )


def test_small_batches_give_the_same_corpus(tmp_path, monkeypatch):
    prepare(tmp_path / "a", "dpr", DPR_FILES)
    monkeypatch.setattr("pipeline.data.readers.writer.BATCH_ROWS", 2)
    prepare(tmp_path / "b", "dpr", DPR_FILES)
    for name in ("corpus", "negatives.train"):
        pd.testing.assert_frame_equal(table(tmp_path / "a", name), table(tmp_path / "b", name))


# ---- validation: one clear error, exit 2, no outputs ------------------------------------------------


def test_truncated_json(tmp_path, capsys):
    raw = gzip.decompress(DPR_FILES["train"].read_bytes())
    cut = tmp_path / "train.json"
    cut.write_bytes(raw[: len(raw) - 300])
    err = fails(capsys, tmp_path / "out", "dpr", {**DPR_FILES, "train": cut})
    assert str(cut) in err and "record 3" in err and "truncated" in err


def test_tsv_row_with_missing_column(tmp_path, capsys):
    corpus = tmp_path / "psgs.tsv"
    corpus.write_text('id\ttext\ttitle\n1\t"only text"\n')
    err = fails(capsys, tmp_path / "out", "dpr", {**DPR_FILES, "corpus": corpus})
    assert "record 2" in err and "'title'" in err


def test_answers_not_a_list_literal(tmp_path, capsys):
    qa = tmp_path / "test.qa.csv"
    qa.write_text("who sang it\tWhitney Houston\n")
    err = fails(capsys, tmp_path / "out", "dpr", {**DPR_FILES, "test": qa})
    assert "record 1" in err and "'answers'" in err and "list literal" in err


def test_empty_corpus(tmp_path, capsys):
    corpus = tmp_path / "collection.tsv"
    corpus.write_text("")
    err = marco_fails(
        tmp_path, capsys, corpus=corpus, queries_train="queries.train.tsv", qrels_train="qrels.train.tsv"
    )
    assert "empty corpus" in err


# ---- issue 28.3: an empty source is refused where it is read, naming the file and the role ----------

SCIFACT = FIX / "beir" / "scifact"
TEVATRON = FIX / "beir" / "tevatron"
EMPTY_SOURCES = {
    # name: (format, files, the role whose file is replaced, its content)
    "dpr train 0 bytes": ("dpr", DPR_FILES, "train", b""),
    "dpr train gzip of nothing": ("dpr", DPR_FILES, "train", gzip.compress(b"")),
    "dpr train blank lines": ("dpr", DPR_FILES, "train", b"\n\n"),
    "dpr dev empty array": ("dpr", DPR_FILES, "dev", b"[]"),
    "dpr test 0 bytes": ("dpr", DPR_FILES, "test", b""),
    "msmarco qrels 0 bytes": (
        "msmarco",
        {"corpus": MARCO / "collection.tsv", "queries_train": MARCO / "queries.train.tsv"},
        "qrels_train",
        b"",
    ),
    "msmarco queries 0 bytes": (
        "msmarco",
        {"corpus": MARCO / "collection.tsv", "qrels_train": MARCO / "qrels.train.tsv"},
        "queries_train",
        b"",
    ),
    "beir qrels header only": (
        "beir",
        {"corpus": SCIFACT / "corpus.jsonl", "queries": SCIFACT / "queries.jsonl"},
        "qrels_test",
        b"query-id\tcorpus-id\tscore\n",
    ),
    "beir queries 0 bytes": (
        "beir",
        {"corpus": SCIFACT / "corpus.jsonl", "qrels_test": SCIFACT / "qrels" / "test.tsv"},
        "queries",
        b"",
    ),
    "beir queries_test 0 bytes": ("beir", {"corpus": SCIFACT / "corpus.jsonl"}, "queries_test", b""),
    "tevatron train 0 bytes": ("beir", {"corpus": TEVATRON / "corpus.jsonl.gz"}, "train", b""),
}


@pytest.mark.parametrize("case", EMPTY_SOURCES)
def test_an_empty_source_is_refused_naming_the_file_and_the_role(tmp_path, capsys, case):
    fmt, files, role, content = EMPTY_SOURCES[case]
    empty = tmp_path / "empty-source"
    empty.write_bytes(content)
    err = fails(capsys, tmp_path / "out", fmt, {**files, role: empty})
    assert str(empty) in err and f"role '{role}'" in err and "no records" in err, err


@pytest.mark.parametrize(
    "fmt, files, role, content, why",
    [
        # every record of the train file dropped for want of a positive (empty_positives: drop)
        (
            "dpr",
            {"corpus": DPR_FILES["corpus"]},
            "train",
            '[{"question": "q1", "answers": ["a"], "positive_ctxs": []}]',
            "dropped",
        ),
        # judgments, none of them positive: the split would have no queries
        (
            "msmarco",
            {"corpus": MARCO / "collection.tsv", "queries_train": MARCO / "queries.train.tsv"},
            "qrels_train",
            "634306\t0\t3\t0\n",
            "positive",
        ),
        (
            "beir",
            {"corpus": SCIFACT / "corpus.jsonl", "queries": SCIFACT / "queries.jsonl"},
            "qrels_test",
            "query-id\tcorpus-id\tscore\n36\t18670\t0\n",
            "positive",
        ),
    ],
)
def test_a_source_that_yields_no_queries_is_refused_naming_the_file_and_the_role(
    tmp_path, capsys, fmt, files, role, content, why
):
    source = tmp_path / "source"
    source.write_text(content)
    err = fails(capsys, tmp_path / "out", fmt, {**files, role: source}, "--empty-positives", "drop")
    assert str(source) in err and f"role '{role}'" in err and why in err, err


def test_squad_without_questions_is_refused(tmp_path, capsys):
    source = tmp_path / "squad.json"
    source.write_text('{"data": [{"title": "T", "paragraphs": [{"context": "c", "qas": []}]}]}')
    err = fails(capsys, tmp_path / "out", "squad", {"source": source})
    assert str(source) in err and "role 'source'" in err and "no questions" in err, err


@pytest.mark.parametrize("pids,record", [(["7", "8", "7"], 3), (["a", "b", "a"], 3)])
def test_duplicate_pids(tmp_path, capsys, pids, record):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": p, "text": "t"}) + "\n" for p in pids))
    queries = tmp_path / "q.jsonl"
    queries.write_text('{"_id": "q", "text": "x"}\n')
    err = fails(capsys, tmp_path / "out", "beir", {"corpus": corpus, "queries_test": queries})
    assert f"duplicate pid '{pids[0]}'" in err and f"record {record}" in err


def test_duplicate_qids_across_splits(tmp_path, capsys):
    q, r = "queries.dev.small.tsv", "qrels.dev.small.tsv"  # the same queries as train and as test
    err = marco_fails(
        tmp_path,
        capsys,
        corpus="collection.tsv",
        queries_train=q,
        qrels_train=r,
        queries_test=q,
        qrels_test=r,
    )
    assert "duplicate qid" in err


def test_qrels_to_unknown_pid(tmp_path, capsys):
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("1102400\t0\t99\t1\n")
    err = marco_fails(
        tmp_path, capsys, corpus="collection.tsv", queries_test="queries.dev.small.tsv", qrels_test=qrels
    )
    assert "'99' is not in the corpus" in err and "record 1" in err


def _biencoder_train(tmp_path: Path, records: list[dict]) -> Path:
    """A DPR biencoder train file of ``records`` (question, answers, positive_ctxs, ...)."""
    train = tmp_path / "train.json"
    train.write_text(json.dumps(records))
    return train


def test_biencoder_passage_id_not_in_corpus(tmp_path, capsys):
    positive = {"title": "", "text": "t", "passage_id": "404"}
    train = _biencoder_train(tmp_path, [{"question": "q", "answers": [], "positive_ctxs": [positive]}])
    err = fails(capsys, tmp_path / "out", "dpr", {"corpus": DPR_FILES["corpus"], "train": train})
    assert "'404' is not in the corpus" in err and "positive_ctxs[0].passage_id" in err


def test_empty_positives_error_then_drop(tmp_path, capsys):
    no_positive = {"question": "q1", "answers": ["a"], "positive_ctxs": [], "hard_negative_ctxs": []}
    positive = {"title": "Moses", "text": "t", "passage_id": "9"}
    train = _biencoder_train(
        tmp_path, [no_positive, {"question": "q2", "answers": ["b"], "positive_ctxs": [positive]}]
    )
    files = {"corpus": DPR_FILES["corpus"], "train": train}
    err = fails(capsys, tmp_path / "out", "dpr", files)
    assert "record 0" in err and "positive_ctxs" in err and "empty_positives" in err
    m = prepare(tmp_path / "out", "dpr", files, "--empty-positives", "drop")
    assert m["counts"]["queries"]["train"] == 1
    assert m["counts"]["notes"]["dropped_no_positive.train"] == 1


def test_role_errors(tmp_path, capsys):
    err = marco_fails(tmp_path, capsys, corpus="collection.tsv", queries_train="queries.train.tsv")
    assert "qrels_train" in err
    err = fails(capsys, tmp_path / "out", "squad", {"corpus": MARCO / "collection.tsv"})
    assert "unknown role" in err
    err = fails(capsys, tmp_path / "out", "dpr", DPR_FILES, "--split-spec", '{"by": "query", "test": 0.5}')
    assert "only squad" in err


# ---- splits ----------------------------------------------------------------------------------------


def test_assign_splits_exact_sizes_and_order_independent():
    units = [f"article{i}" for i in range(36)]
    a = assign_splits(units, 0.15, 0.15, seed=0)
    b = assign_splits(list(reversed(units)) + units[:5], 0.15, 0.15, seed=0)
    assert a == b
    sizes = {s: list(a.values()).count(s) for s in SPLITS}
    assert sizes == {"train": 26, "dev": 5, "test": 5}  # 0.15 * 36 = 5.4 -> 5
    assert assign_splits(units, 0.15, 0.15, seed=1) != a


def test_assign_splits_small_and_invalid():
    assert sorted(assign_splits(["a", "b", "c"], 0.1, 0.1, 0).values()) == ["dev", "test", "train"]
    assert set(assign_splits(["a", "b"], 0.0, 1.0, 0).values()) == {"test"}
    with pytest.raises(ConfigError):
        assign_splits(["a"], 0.5, 0.5, 0)
    with pytest.raises(ConfigError):
        parse_split_spec({"by": "article", "dev": 0.6, "test": 0.6})
    assert parse_split_spec('"none"') is None and parse_split_spec("none") is None


# ---- config `source` -> files and downloads ---------------------------------------------------------


def test_sources_of_the_default_config():
    config = load_config()
    nq, tq = sources.prepare_inputs(config, "nq"), sources.prepare_inputs(config, "tq")
    assert nq == {r: sources.url_file(config["datasets"]["nq"]["source"][r]["url"]) for r in nq}
    assert tq["corpus"] == nq["corpus"]  # the shared 13 GB TSV is fetched once
    assert (
        sources.download_args(config, nq["corpus"]).split(" --adopt ")[0]
        == "--url https://dl.fbaipublicfiles.com/dpr/wikipedia_split/psgs_w100.tsv.gz"
    )
    marco = sources.prepare_inputs(config, "msmarco")
    archive = sources.url_file(config["datasets"]["msmarco"]["source"]["corpus"]["url"])
    assert archive.endswith("/collectionandqueries.tar.gz")
    assert sources.archive_input(config, marco["qrels_test"]) == archive
    assert (
        sources.download_args(config, marco["qrels_test"])
        == f"--archive {archive} --member qrels.dev.small.tsv"
    )
    assert sources.download_args(config, archive).startswith("--url https://")
    assert sources.prepare_inputs(config, "squad") == {
        "source": sources.url_file("https://rajpurkar.github.io/SQuAD-explorer/dataset/dev-v1.1.json")
    }


def test_schema_knows_empty_positives(tmp_path):
    overlay = tmp_path / "o.yaml"
    overlay.write_text("datasets:\n  nq: {empty_positives: skip}\n")
    with pytest.raises(ConfigError, match="empty_positives"):
        load_config([overlay])
    overlay.write_text("datasets:\n  nq: {empty_positives: error}\n")
    assert load_config([overlay])["datasets"]["nq"]["empty_positives"] == "error"


def test_sources_local_paths_checksums_and_errors():
    config = copy.deepcopy(load_config())
    sha = "ab" * 32
    config["datasets"] = {
        "mine": {"format": "squad", "source": "data/my.json"},
        "arch": {
            "format": "beir",
            "source": {
                "corpus": {"path": "data/b.tar.gz", "member": "b/corpus.jsonl"},
                "queries_test": {"url": "https://x.org/q.jsonl", "sha256": sha},
            },
        },
    }
    assert sources.prepare_inputs(config, "mine") == {"source": "data/my.json"}
    arch = sources.prepare_inputs(config, "arch")
    assert arch["corpus"].startswith("downloads/by-path/") and arch["corpus"].endswith("/corpus.jsonl")
    assert sources.archive_input(config, arch["corpus"]) == "data/b.tar.gz"
    assert f"--sha256 {sha} " in sources.download_args(config, arch["queries_test"])
    with pytest.raises(ConfigError, match="no declared dataset downloads or extracts"):
        sources.download_args(config, "data/my.json")
    config["datasets"]["bad"] = {"format": "msmarco", "source": {"corpus": "c.tsv", "qrels": "q"}}
    with pytest.raises(ConfigError, match="unknown role"):
        sources.prepare_inputs(config, "bad")


# ---- issue 28.9: whatever ids prepare writes can be exported as TREC --------------------------------


def test_squad_titles_with_spaces_prepare_and_export_as_trec(tmp_path):
    from pipeline.retrieval.runs import validate_run, write_trec

    source = tmp_path / "squad.json"
    source.write_text(
        json.dumps(
            {
                "data": [
                    {
                        "title": "Oil crisis of 1973",
                        "paragraphs": [
                            {
                                "context": "The embargo began in October 1973.",
                                "qas": [
                                    {"id": "q1", "question": "when?", "answers": [{"text": "October 1973"}]}
                                ],
                            },
                        ],
                    }
                ]
            }
        )
    )
    prepare(tmp_path / "out", "squad", {"source": source})
    corpus = table(tmp_path / "out", "corpus")
    assert corpus.title.tolist() == ["Oil crisis of 1973"]
    qrels = table(tmp_path / "out", "qrels.test")
    run = pd.DataFrame({"qid": qrels.qid, "pid": qrels.pid, "rank": [1], "score": [1.0]})
    write_trec(validate_run(run, "run.parquet"), tmp_path / "run.trec", "bm25")
    assert (tmp_path / "run.trec").read_text().split() == [
        "q1",
        "Q0",
        "Oil_crisis_of_1973#0",
        "1",
        "1",
        "bm25",
    ]


def test_a_beir_id_with_a_space_fails_at_prepare_naming_the_source_record(tmp_path, capsys):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"_id": "d0", "text": "a"}\n{"_id": "d 1", "text": "b"}\n')
    queries = tmp_path / "q.jsonl"
    queries.write_text('{"_id": "q", "text": "x"}\n')
    err = fails(capsys, tmp_path / "out", "beir", {"corpus": corpus, "queries_test": queries})
    assert f"{corpus}: record 2: field '_id'" in err and "whitespace" in err, err


# ---- issue 28.4: an output folder that cannot be written is found before the sources are read -------


@pytest.mark.parametrize("how", ["under a file", "permission denied"])
def test_unwritable_out_dir_is_refused_before_reading_the_sources(tmp_path, capsys, monkeypatch, how):
    import tempfile

    from pipeline.data import readers

    def no_reading(*args, **kwargs):
        raise AssertionError("the sources were read before the output folder was checked")

    spec = readers.FORMATS["dpr"]
    monkeypatch.setitem(
        readers.FORMATS, "dpr", type(spec)(spec.required, spec.optional, spec.any_of, no_reading)
    )
    if how == "under a file":
        blocker = tmp_path / "resources"
        blocker.write_text("a file where the folder should be")
        out, named = blocker / "nq", blocker
    else:

        def refuse(*args, **kwargs):
            raise PermissionError(13, "Permission denied")

        monkeypatch.setattr(tempfile, "mkstemp", refuse)
        out = named = tmp_path / "nq"
        out.mkdir()
    err = fails(capsys, out, "dpr", DPR_FILES)
    assert str(named) in err and ("not a folder" in err or "cannot write" in err), err

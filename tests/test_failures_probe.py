"""The promises of docs/failures.md that issue 28's list did not name, probed with hand-made bad input
(issue 28, remaining part): each test broke the promise before its fix."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.core.storage import DataError
from pipeline.retrieval import embeddings as E
from pipeline.retrieval import index as I
from pipeline.retrieval import search as S

# ---- FAISS index parts are checked against the sha256 recorded at build --------------------------


def _embedding_folder(folder: Path, n: int = 50, dim: int = 8, shards: int = 2) -> np.ndarray:
    """fp16 shards and a gathered manifest, as encode_corpus and gather write them."""
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((n, dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    pids = [f"p{i:03d}" for i in range(n)]
    for i in range(shards):
        start, end = E.shard_bounds(n, i, shards)
        npy, ids = E.shard_paths(folder, i, shards)
        with E.EmbeddingWriter(npy, ids, end - start, dim, precision="fp32") as writer:
            writer.write(pids[start:end], vectors[start:end])
    E.gather(folder, shards, model="random", source="random")
    return vectors


@pytest.fixture
def built_index(tmp_path) -> tuple[Path, np.ndarray]:
    vectors = _embedding_folder(tmp_path / "emb")
    I.build_index(tmp_path / "emb", tmp_path / "index", factory="Flat", shards=2, progress=False)
    return tmp_path / "index", vectors[:3]


def _same_size_garbage(path: Path) -> None:
    """The last 200 bytes (vectors of a Flat index) replaced by other finite floats: FAISS loads it."""
    data = bytearray(path.read_bytes())
    data[-200:] = np.random.default_rng(1).standard_normal(50).astype(np.float32).tobytes()
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", ["same size", "truncated", "pids replaced", "missing"])
def test_a_damaged_index_part_is_refused_naming_it(built_index, damage):
    index_dir, queries = built_index
    part = index_dir / "shard1of2.faiss"
    if damage == "same size":
        size = part.stat().st_size
        _same_size_garbage(part)
        assert part.stat().st_size == size
    elif damage == "truncated":
        part.write_bytes(part.read_bytes()[:200])
    elif damage == "pids replaced":  # same row count, other pids: the run would name wrong passages
        part = index_dir / "shard1of2.pids.parquet"
        pq.write_table(pa.table({"pid": [f"x{i}" for i in range(25)]}), part)
    else:
        part.unlink()
    with pytest.raises(DataError) as err:
        S.search_faiss(index_dir, queries, 5, progress=False)
    assert err.value.file == str(part), str(err.value)
    assert "delete the index folder and rerun build_index" in str(err.value)
    if damage != "missing":
        assert "sha256" in str(err.value)
    manifest = json.loads((index_dir / "index.json").read_text())
    assert all(len(e["sha256"]) == 64 and len(e["pids_sha256"]) == 64 for e in manifest["shards"])


def test_an_index_without_digests_is_read_and_a_truncated_part_still_names_the_file(built_index):
    # built before the digests were recorded: read unchecked, but FAISS's C++ assertion (a RuntimeError
    # traceback) becomes one line naming the part
    index_dir, queries = built_index
    manifest = json.loads((index_dir / "index.json").read_text())
    for entry in manifest["shards"]:
        entry.pop("sha256", None), entry.pop("pids_sha256", None)
    (index_dir / "index.json").write_text(json.dumps(manifest))
    rows, _, _ = S.search_faiss(index_dir, queries, 5, progress=False)
    assert rows.shape == (3, 5)
    part = index_dir / "shard0of2.faiss"
    part.write_bytes(part.read_bytes()[:200])
    with pytest.raises(DataError, match="not a readable FAISS index") as err:
        S.search_faiss(index_dir, queries, 5, progress=False)
    assert err.value.file == str(part)


# ---- config: every problem names its key, before anything reads the config ------------------------

REPO = Path(__file__).resolve().parent.parent


def _dry_run(tmp_path: Path, overlay_text: str, name: str = "overlay.yaml"):
    import subprocess
    import sys

    overlay = tmp_path / name
    overlay.write_text(overlay_text)
    command = [
        sys.executable,
        "-m",
        "snakemake",
        "-n",
        "--cores",
        "1",
        "--snakefile",
        str(REPO / "Snakefile"),
    ]
    command += ["--directory", str(tmp_path), "--configfile", str(overlay)]
    return subprocess.run(command, capture_output=True, text=True)


@pytest.mark.parametrize(
    "overlay, key",
    [
        ("datasets:\n  mine: squad\n", "config key 'datasets.mine': Input should be a valid dictionary"),
        ("datasets: null\n", "config key 'datasets': Input should be a valid dictionary"),
        ("datasets: [synthkb]\n", "config key 'datasets': Input should be a valid dictionary"),
    ],
)
def test_a_dataset_entry_that_is_not_a_mapping_is_named_by_the_config_check(tmp_path, overlay, key):
    # the rule files read every entry's format before validation: AttributeError, a traceback
    proc = _dry_run(tmp_path, overlay)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "AttributeError" not in out and key in out, out


def test_a_key_given_twice_in_an_overlay_is_refused_naming_file_line_and_key(tmp_path):
    # Snakemake reads overlays with PyYAML, which keeps the second `dpr:` block and drops the first
    # (lr 0.5 was silently not applied)
    proc = _dry_run(tmp_path, "dpr:\n  lr: 0.5\nbm25:\n  k1: 1.0\ndpr:\n  max_steps: 3\n")
    out = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode != 0
    assert f"{tmp_path / 'overlay.yaml'}: line 5, column 1: key 'dpr' given twice" in out, out
    assert "first at line 1" in out, out


def test_yaml_merge_keys_may_be_overridden_and_the_default_config_loads(tmp_path):
    # `<<: *anchor` then an own key of the same name is YAML's way of overriding: not a repeat
    from pipeline.core.config import load_config, load_mapping

    path = tmp_path / "overlay.yaml"
    path.write_text("_base: &b {lr: 0.5, max_steps: 3}\ndpr: {<<: *b, max_steps: 4}\n")
    assert load_mapping(path)["dpr"] == {"lr": 0.5, "max_steps": 4}
    assert load_config()["datasets"]["synthkb"]["format"] == "synthkb"


# ---- datasets: bad input of each format named at its own file, record and field -------------------

CORPUS_TSV = "id\ttext\ttitle\n1\tThe river is long.\tRiver\n2\tStone bridges.\tBridge\n"
POSITIVE = [{"passage_id": "1", "title": "River", "text": "The river is long."}]
COLLECTION = "1\tThe river is long.\n2\tStone bridges.\n"
BEIR_CORPUS = (
    '{"_id": "d1", "title": "River", "text": "The river is long."}\n{"_id": "d2", "text": "Stone."}\n'
)
BEIR_QRELS = "query-id\tcorpus-id\tscore\nq1\td1\t1\n"


def _entry(**fields) -> dict:
    entry = {"question": "how long is the river?", "answers": ["long"], "positive_ctxs": POSITIVE}
    return {**entry, **fields}


def _squad(*articles: dict) -> str:
    return json.dumps({"version": "1.1", "data": list(articles)})


def _article(title: str, qid: str, question: str = "how long?") -> dict:
    qa = {"id": qid, "question": question, "answers": [{"text": "long", "answer_start": 10}]}
    return {"title": title, "paragraphs": [{"context": "The river is long.", "qas": [qa]}]}


def _prepare(tmp_path: Path, fmt: str, files: dict[str, str | bytes], *extra: str) -> tuple[int, str]:
    """Exit status and stderr of `python -m pipeline.data.prepare` (in process) on files with these
    contents; a refused run must leave no table."""
    import contextlib
    import io

    from pipeline.core.cli import run_main
    from pipeline.data.prepare import main

    out = tmp_path / "out"
    argv = ["--dataset", "probe", "--format", fmt, "--out-dir", str(out), *extra]
    for role, content in files.items():
        path = tmp_path / role
        path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
        argv += ["--file", f"{role}={path}"]
    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit) as exit_info:
        run_main(main, argv)
    if exit_info.value.code != 0:
        assert not out.exists() or not any(out.iterdir()), "a refused run left outputs"
    return exit_info.value.code, " ".join(err.getvalue().split())


@pytest.mark.parametrize(
    "fields, field, found",
    [
        ({"qid": True}, "qid", "bool"),  # was the qid 'True'
        ({"qid": 1.5}, "qid", "float"),  # was '1.5'
        ({"id": [1]}, "id", "list"),  # was '[1]'
    ],
)
def test_a_biencoder_qid_of_another_type_is_refused(tmp_path, fields, field, found):
    code, err = _prepare(tmp_path, "dpr", {"corpus": CORPUS_TSV, "train": json.dumps([_entry(**fields)])})
    assert code == 2
    assert f"train: record 0: field '{field}': id must be a string or an integer, got {found}" in err, err


def test_a_ctx_score_of_true_is_refused(tmp_path):
    negative = {"passage_id": "2", "text": "Stone bridges.", "score": True}  # was the score 1.0
    train = json.dumps([_entry(hard_negative_ctxs=[negative])])
    code, err = _prepare(tmp_path, "dpr", {"corpus": CORPUS_TSV, "train": train})
    assert code == 2 and "field 'hard_negative_ctxs[0].score': score is not a number: True" in err, err


@pytest.mark.parametrize(
    "fmt, files, where",
    [
        # the field was named 'query' (the canonical column) in each of these
        (
            "dpr",
            {"corpus": CORPUS_TSV, "train": json.dumps([_entry(question=" ")])},
            "record 0: field 'question'",
        ),
        (
            "squad",
            {"source": _squad(_article("River", "a1", question=" "))},
            "field 'paragraphs[0].qas[0].question'",
        ),
        (
            "beir",
            {"corpus": BEIR_CORPUS, "queries": '{"_id": "q1", "text": "\\t"}\n', "qrels_test": BEIR_QRELS},
            "queries: record 1: field 'text'",
        ),
    ],
)
def test_an_empty_question_is_named_at_its_own_field(tmp_path, fmt, files, where):
    code, err = _prepare(tmp_path, fmt, files)
    assert code == 2 and f"{where}: empty query text" in err, err


def test_a_beir_query_without_text_names_both_accepted_keys(tmp_path):
    files = {"corpus": BEIR_CORPUS, "queries": '{"_id": "q1", "title": "x"}\n', "qrels_test": BEIR_QRELS}
    code, err = _prepare(tmp_path, "beir", files)
    assert code == 2 and "record 1: field 'text': missing: a query needs 'text' (BEIR) or 'query'" in err, err


def test_a_dpr_split_file_holding_a_json_object_is_named_as_such(tmp_path):
    # was read as a qa.csv: "field 'answers': expected 2 tab-separated columns"
    code, err = _prepare(tmp_path, "dpr", {"corpus": CORPUS_TSV, "train": json.dumps({"data": [_entry()]})})
    assert code == 2 and "role 'train': a JSON object; DPR's train files are a JSON array" in err, err


def test_a_repeated_tsv_header_is_refused(tmp_path):
    # `cat a.tsv b.tsv`: the second header became a passage with pid 'id'
    corpus = CORPUS_TSV + "id\ttext\ttitle\n3\tMore.\tM\n"
    code, err = _prepare(tmp_path, "dpr", {"corpus": corpus, "train": json.dumps([_entry()])})
    assert code == 2 and "corpus: record 4: the header row again" in err, err


@pytest.mark.parametrize("second", ["q1 0 1 0", "q1 0 1 2", "q1 0 2 0\nq1 0 2 0"])
def test_a_pair_judged_twice_is_refused_whatever_its_relevance(tmp_path, second):
    # 1 then 0 kept the positive and counted the 0 as "not positive"; two 0s passed
    qrels = "q1 0 1 1\n" + second + "\n"
    files = {"corpus": COLLECTION, "queries_train": "q1\thow long\n", "qrels_train": qrels}
    code, err = _prepare(tmp_path, "msmarco", files)
    assert code == 2 and "duplicate judgment ('q1'," in err and "first at record" in err, err


def _bom(text: str) -> bytes:
    return b"\xef\xbb\xbf" + text.encode("utf-8")


@pytest.mark.parametrize(
    "fmt, files",
    [
        # the first pid was '\ufeff1': qrels naming pid 1 were refused as "not in the corpus"
        (
            "msmarco",
            {
                "corpus": _bom(COLLECTION),
                "queries_train": _bom("q1\thow long\n"),
                "qrels_train": "q1 0 1 1\n",
            },
        ),
        (
            "dpr",
            {
                "corpus": _bom(CORPUS_TSV),
                "train": _bom(json.dumps([_entry()])),
                "test": _bom("who?\t['x']\n"),
            },
        ),
        (
            "beir",
            {
                "corpus": _bom(BEIR_CORPUS),
                "queries": _bom('{"_id": "q1", "text": "x"}\n'),
                "qrels_test": BEIR_QRELS,
            },
        ),
        ("squad", {"source": _bom(_squad(_article("River", "a1")))}),
    ],
)
def test_a_byte_order_mark_is_not_part_of_the_first_record(tmp_path, fmt, files):
    import pyarrow.parquet as pq

    code, err = _prepare(tmp_path, fmt, files)
    assert code == 0, err
    out = tmp_path / "out"
    first_pid = pq.read_table(out / "corpus.parquet").column("pid")[0].as_py()
    queries = [q for s in ("train", "test") for q in pq.read_table(out / f"queries.{s}.parquet").to_pylist()]
    assert not first_pid.startswith("\ufeff") and first_pid in ("1", "d1", "River#0")
    assert all(not q["qid"].startswith("\ufeff") and not q["text"].startswith("\ufeff") for q in queries)


def test_a_split_that_leaves_train_no_unit_is_refused(tmp_path):
    # two articles at dev 0.15, test 0.15: one each (a fraction > 0 gets a unit), train silently empty
    from pipeline.core.config import ConfigError
    from pipeline.data.splits import assign_splits, check_train_left

    source = _squad(_article("River", "a1"), _article("Bridge", "b1"))
    spec = '{"by": "article", "dev": 0.15, "test": 0.15, "seed": 0}'
    code, err = _prepare(tmp_path, "squad", {"source": source}, "--split-spec", spec)
    assert code == 2 and "split: 2 article(s) leave none for train after 1 dev and 1 test" in err, err
    with pytest.raises(ConfigError):
        check_train_left(assign_splits(["a", "b"], 0.15, 0.15, 0), 0.15, 0.15, "article")
    # fractions adding up to 1 ask for no train split
    check_train_left(assign_splits(["a", "b"], 0.5, 0.5, 0), 0.5, 0.5, "article")


def test_the_overlays_give_no_key_twice():
    # config/overlays/squad/config.yaml pinned ccr.beta 0.5 in one `ccr:` block and set max_steps in a
    # second: Snakemake kept the second, so the SQuAD figures' β 0.5 silently ran at the default β
    from pipeline.core.config import load_config, load_mapping

    for path in sorted((REPO / "config").rglob("*.yaml")):
        load_mapping(path)
    config = load_config([REPO / "config/overlays/squad/config.yaml"])
    assert (config["ccr"]["beta"], config["ccr"]["max_steps"]) == (0.5, 20)


# ---- BM25 index files are checked against the sha256 recorded at build --------------------------


@pytest.fixture
def bm25_index(tmp_path) -> tuple[Path, Path]:
    from pipeline.retrieval import bm25

    corpus = tmp_path / "corpus.parquet"
    texts = [f"river stone {i} bridge word{i}" for i in range(30)]
    pq.write_table(
        pa.table({"pid": [f"p{i}" for i in range(30)], "title": ["t"] * 30, "text": texts}), corpus
    )
    queries = tmp_path / "queries.parquet"
    pq.write_table(pa.table({"qid": ["q1"], "text": ["river word3"], "answers": [["x"]]}), queries)
    bm25.build_index(corpus, tmp_path / "index", k1=0.9, b=0.4, stemmer=None, stopwords=None)
    return tmp_path / "index", queries


def _retrieve(index: Path, queries: Path, out: Path) -> None:
    from pipeline.retrieval import bm25

    bm25.retrieve_run(index, queries, 5, out)


@pytest.mark.parametrize(
    "name, damage",
    [
        ("data.csc.index.npy", "truncated"),
        ("indices.csc.index.npy", "same size"),
        ("params.index.json", "missing"),
    ],
)
def test_a_damaged_bm25_index_file_is_refused_naming_it(bm25_index, tmp_path, name, damage):
    # a truncated array was numpy's "mmap length is greater than file size", a missing file a
    # FileNotFoundError traceback; bytes changed in place were read as they were
    index, queries = bm25_index
    path = index / name
    data = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "same size":
        path.write_bytes(data[:-4] + bytes(4 - i for i in range(4)))
    else:
        path.unlink()
    with pytest.raises(DataError) as err:
        _retrieve(index, queries, tmp_path / "run.parquet")
    assert err.value.file == str(path), str(err.value)
    assert "delete the BM25 index folder and rerun index_bm25" in str(err.value)
    assert not (tmp_path / "run.parquet").exists()


def test_a_bm25_index_without_digests_still_names_what_it_cannot_load(bm25_index, tmp_path):
    index, queries = bm25_index
    (index / "checksums.json").unlink(missing_ok=True)
    _retrieve(index, queries, tmp_path / "run.parquet")  # an older index: read unchecked
    path = index / "data.csc.index.npy"
    path.write_bytes(path.read_bytes()[:40])
    with pytest.raises(DataError, match="cannot load the BM25 index"):
        _retrieve(index, queries, tmp_path / "run2.parquet")


# ---- Parquet: every stage reads its tables through the schema-checked path ------------------------


def _filter_decisions(path: Path, **columns) -> str:
    table = {
        "qid": ["q"] * 4,
        "pid": list("abcd"),
        "score": [0.9, 0.1, 0.5, 0.2],
        "kept": [False, True, True, True],
        "is_false_negative": [True, False, True, False],
    }
    table.update(columns)
    pq.write_table(pa.table({k: v for k, v in table.items() if v is not None}), path)
    return str(path)


@pytest.mark.parametrize(
    "columns, message",
    [
        # "yes"/"no" passed: every row counted as kept
        ({"kept": ["no", "yes", "yes", "yes"]}, "field 'kept': column type: expected bool, found string"),
        ({"score": None}, "field 'score': missing column"),  # was KeyError: 'score'
        ({"kept": [False, None, True, True]}, "record 1: field 'kept': null value"),
    ],
)
def test_the_tradeoff_reads_decisions_through_the_checked_path(tmp_path, columns, message):
    from pipeline.core.cli import run_main
    from pipeline.sieve import tradeoff

    path = _filter_decisions(tmp_path / "pa.parquet", **columns)
    argv = ["--decisions", f"positive_aware={path}", "--reference", "positive_aware"]
    argv += ["--out-json", str(tmp_path / "t.json"), "--out-png", str(tmp_path / "t.png")]
    with pytest.raises(DataError) as err:
        tradeoff.main(argv)
    assert err.value.file == path and message in str(err.value), str(err.value)
    missing = ["--decisions", f"cross_encoder={tmp_path / 'none.parquet'}", "--reference", "cross_encoder"]
    with pytest.raises(SystemExit) as exit_info:  # was FileNotFoundError, a traceback
        run_main(tradeoff.main, missing + argv[4:])
    assert exit_info.value.code == 2
    assert not (tmp_path / "t.json").exists()


# ---- CLI arguments: a usage error, exit status 2, no traceback ------------------------------------


@pytest.fixture(scope="module")
def tiny_retriever(tmp_path_factory) -> tuple[Path, Path]:
    """A saved tiny retriever and a 10-passage corpus (what an encode shard reads)."""
    from pipeline.retrieval.model import Retriever, RetrieverSettings, make_tiny_encoder

    root = tmp_path_factory.mktemp("tiny")
    make_tiny_encoder(root / "hf", seed=0)
    Retriever.from_pretrained(str(root / "hf"), RetrieverSettings()).save(root / "retriever")
    texts = [f"word{i} river" for i in range(10)]
    pq.write_table(
        pa.table({"pid": [f"p{i}" for i in range(10)], "title": ["t"] * 10, "text": texts}),
        root / "c.parquet",
    )
    return root / "retriever", root / "c.parquet"


@pytest.mark.parametrize(
    "command, shard, shards, message",
    [
        ("corpus", "1", "1", "--shard must be in [0, 1) (0-based), got 1"),  # was ValueError, a traceback
        ("corpus", "-1", "2", "--shard must be in [0, 2) (0-based), got -1"),
        ("corpus", "0", "0", "--shards must be >= 1, got 0"),
        ("gather", None, "0", "--shards must be >= 1, got 0"),
    ],
)
def test_encode_refuses_a_shard_outside_its_range_as_a_usage_error(
    tmp_path, capsys, tiny_retriever, command, shard, shards, message
):
    from pipeline.retrieval import encode

    model, corpus = tiny_retriever
    argv = [command, "--model", str(model), "--out-dir", str(tmp_path / "e"), "--shards", shards]
    argv += ["--corpus", str(corpus)] + (["--shard", shard, "--no-progress"] if shard is not None else [])
    with pytest.raises(SystemExit) as exit_info:
        encode.main(argv)
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize(
    "dataset, message",
    [
        (
            {"format": "synthkb", "entities": 12, "split": {"by": "article", "dev": 0.1, "test": 0.2}},
            "config key 'datasets.mine': split.by: a synthkb dataset splits by 'entity' or 'query', not 'article'",
        ),
        (
            {"format": "squad", "source": "s.json", "split": {"by": "entity", "test": 0.2}},
            "config key 'datasets.mine': split.by: a squad dataset splits by 'article' or 'query'",
        ),
        (
            {
                "format": "dpr",
                "source": {"corpus": "c.tsv", "test": "t.csv"},
                "split": {"by": "query", "test": 0.5},
            },
            "config key 'datasets.mine': split: only squad and synthkb datasets are split by rule",
        ),
        (
            {"format": "squad", "source": "s.json", "split": {"by": "article", "dev": 0.6, "test": 0.6}},
            "config key 'datasets.mine.split': dev + test = 1.2 > 1",
        ),
    ],
)
def test_a_split_rule_the_format_cannot_apply_is_refused_at_start_up(dataset, message):
    # each was found only by the job that splits (prepare, the generator), after `snakemake -n` passed
    from pipeline.core.config import ConfigError, load_config, validate_config

    config = load_config()
    config["datasets"]["mine"] = dataset
    with pytest.raises(ConfigError) as err:
        validate_config(config)
    assert message in str(err.value), str(err.value)


@pytest.mark.parametrize(
    "table, row, field, message",
    [
        ("corpus", 3, "text", "null value"),  # BM25 indexed the passage as empty: silently never found
        ("corpus", 3, "pid", "null value"),  # passed, or TypeError sorting tied hits (None < str)
        ("queries", 1, "text", "null value"),  # AttributeError: 'float' object has no attribute 'lower'
        ("queries", 1, "qid", "null value"),  # ArrowTypeError: Expected bytes, got a 'float' object
        ("queries", 1, "answers", "null answer in the list"),  # TypeError in the answer matcher
        ("qrels", 1, "pid", "null value"),  # the judgment was silently no positive
    ],
)
def test_a_null_where_every_row_needs_a_value_is_refused_naming_file_row_and_column(
    tmp_path, table, row, field, message
):
    from pipeline.core.schemas import CORPUS_SCHEMA, QRELS_SCHEMA, QUERIES_SCHEMA
    from pipeline.retrieval import bm25

    corpus = {
        "pid": [f"p{i}" for i in range(10)],
        "title": ["t"] * 10,
        "text": [f"river {i}" for i in range(10)],
    }
    queries = {"qid": ["q1", "q2"], "text": ["river 3", "river"], "answers": [["3"], ["river"]]}
    qrels = {"qid": ["q1", "q2"], "pid": ["p3", "p1"], "relevance": [1, 1]}
    # a null title is data (as is a null answer list: no answers)
    pq.write_table(
        pa.table({**corpus, "title": [None] * 10}, schema=CORPUS_SCHEMA), tmp_path / "titles.parquet"
    )
    bm25.build_index(
        tmp_path / "titles.parquet", tmp_path / "ok", k1=0.9, b=0.4, stemmer=None, stopwords=None
    )
    tables = {"corpus": corpus, "queries": queries, "qrels": qrels}
    tables[table][field][row] = [None] if field == "answers" else None
    schemas = {"corpus": CORPUS_SCHEMA, "queries": QUERIES_SCHEMA, "qrels": QRELS_SCHEMA}
    for name, columns in tables.items():
        pq.write_table(pa.table(columns, schema=schemas[name]), tmp_path / f"{name}.parquet")
    with pytest.raises(DataError) as err:
        bm25.build_index(
            tmp_path / "corpus.parquet", tmp_path / "index", k1=0.9, b=0.4, stemmer=None, stopwords=None
        )
        bm25.retrieve_run(tmp_path / "index", tmp_path / "queries.parquet", 5, tmp_path / "run.parquet")
        bm25.mine_negatives(
            tmp_path / "index",
            tmp_path / "queries.parquet",
            tmp_path / "qrels.parquet",
            tmp_path / "corpus.parquet",
            3,
            tmp_path / "negatives.parquet",
        )
    assert err.value.file == str(tmp_path / f"{table}.parquet"), str(err.value)
    assert (err.value.record, err.value.field, err.value.message) == (row, field, message)

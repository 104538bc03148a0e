"""Issue 39, items 5, 9, 10 and 11 (part): downloads spliced from two versions or retried for nothing,
training that could not resume past a damaged log or fingerprint, and tracebacks where one line is
promised. Each test broke its promise before the fix."""

from __future__ import annotations

import errno
import hashlib
import json
import logging

import pytest
from range_server import RangeServer, serving

from pipeline.core.cli import run_main
from pipeline.core.storage import DataError
from pipeline.data.download import download, main

V1 = b"".join(hashlib.sha256(f"v1-{i}".encode()).digest() for i in range(4_000))  # 128 kB
V2 = b"".join(hashlib.sha256(f"v2-{i}".encode()).digest() for i in range(4_000))  # same size


@pytest.fixture
def server():
    with serving(RangeServer(V1, etag='"v1"')) as srv:
        yield srv


@pytest.fixture
def no_sleep(monkeypatch):
    """Fails a test whose download would wait for a retry."""

    def sleep(seconds):
        raise AssertionError(f"retried (sleep {seconds})")

    monkeypatch.setattr("pipeline.data.download.time.sleep", sleep)


# ---- item 5: a 206 is appended only under the validator the .part began with -----------------------


def test_a_206_of_another_version_is_not_appended(server, tmp_path, caplog):
    out = tmp_path / "x"
    server.cut_once = 50_000
    with pytest.raises(DataError, match="after 0 retries"):
        download(server.url, out, retries=0, backoff=0)
    assert json.loads((tmp_path / "x.part.json").read_text())["validator"] == '"v1"'
    # v2, the same size, from a server that answers the Range whatever If-Range says
    server.body, server.etag, server.ignore_if_range = V2, '"v2"', True
    with caplog.at_level(logging.WARNING, logger="sieve.download"):
        download(server.url, out, backoff=0)
    assert out.read_bytes() == V2  # not 50 kB of v1 and the rest of v2
    assert server.requests[-1]["Range"] is None  # started over from zero
    assert '"v2"' in caplog.text and '"v1"' in caplog.text and "If-Range" in caplog.text


def test_a_206_of_the_same_version_is_still_appended(server, tmp_path):
    out = tmp_path / "x"
    server.cut_once = 50_000
    with pytest.raises(DataError):
        download(server.url, out, retries=0, backoff=0)
    server.ignore_if_range = True
    download(server.url, out, backoff=0)
    assert out.read_bytes() == V1
    assert server.requests[-1] == {"Range": "bytes=50000-", "If-Range": '"v1"'}


# ---- item 11: permanent errors fail at once; a malformed .part.json is discarded --------------------


@pytest.mark.parametrize("path,cause", [("/file", "InvalidSchema"), ("/loop", "TooManyRedirects")])
def test_a_permanent_error_fails_at_once_without_a_resume_hint(
    server, tmp_path, capsys, no_sleep, path, cause
):
    url = server.base + path
    with pytest.raises(SystemExit) as exc:
        run_main(main, ["--url", url, "--out", str(tmp_path / "f")])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and url in err and cause in err, err
    assert "resume" not in err and not (tmp_path / "f.part").exists()


def test_no_resume_hint_when_nothing_is_left_to_resume(server, tmp_path, monkeypatch):
    monkeypatch.setattr("pipeline.data.download._fetch_once", _always_unreachable)
    with pytest.raises(DataError) as exc:
        download(server.url, tmp_path / "f", retries=1, backoff=0)
    assert "after 1 retries" in str(exc.value) and "resume" not in str(exc.value)


def _always_unreachable(url, part, timeout, progress):
    from pipeline.data.download import _Retryable

    raise _Retryable("ConnectionError: refused")


@pytest.mark.parametrize(
    "record",
    [
        {"validator": 1, "size": len(V1)},
        {"validator": ['"v1"'], "size": len(V1)},
        {"validator": '"v1"', "size": "128000"},
        "not json {",
        [1, 2],
    ],
    ids=["int validator", "list validator", "text size", "not JSON", "not an object"],
)
def test_a_malformed_part_record_is_discarded_and_the_download_restarts(
    server, tmp_path, caplog, no_sleep, record
):
    out = tmp_path / "x"
    (tmp_path / "x.part").write_bytes(V1[:50_000])
    meta = tmp_path / "x.part.json"
    if isinstance(record, dict):
        record = json.dumps({"url": server.url, **record})
    elif not isinstance(record, str):
        record = json.dumps(record)
    meta.write_text(record)
    with caplog.at_level(logging.WARNING, logger="sieve.download"):
        download(server.url, out, backoff=0)
    assert out.read_bytes() == V1
    assert server.requests == [{"Range": None, "If-Range": None}]
    assert "x.part.json" in caplog.text and "starting over" in caplog.text


def test_an_archive_url_ending_in_dot_dot_is_a_config_error():
    from pipeline.core.config import ConfigError, load_config, validate_config

    config = load_config(validate=False)
    config["datasets"] = {
        "d": {
            "format": "msmarco",
            "source": {"corpus": {"url": "https://example.org/a/..", "member": "c.tsv"}},
        }
    }
    with pytest.raises(ConfigError, match=r"datasets\.d.*'\.\.'"):
        validate_config(config)


# ---- item 9: a partial last log line or a damaged fingerprint no longer blocks every resume --------


@pytest.fixture(scope="module")
def train_setup(tmp_path_factory, make_train_files, tiny_model_dir):
    from pipeline.training.data import TrainData, TrainInputs

    root = tmp_path_factory.mktemp("resume39")
    paths = make_train_files(root / "data")
    data = TrainData(TrainInputs(**paths), depth=5, seed=3)
    return tiny_model_dir(root), data


def _same_weights(a, b) -> bool:
    import torch

    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_a_partial_last_log_line_is_dropped_and_the_resume_is_exact(
    resume_config, train_setup, tmp_path, tiny_retriever, train_until_crash, caplog
):
    from pipeline.training.engine import LOG_FILE
    from pipeline.training.loop import train

    model_dir, data = train_setup
    cfg = resume_config()
    reference = tiny_retriever(model_dir)
    train(reference, data, cfg, checkpoint_dir=tmp_path / "ref.ckpt")
    train_until_crash(tiny_retriever(model_dir), data, cfg, tmp_path / "run.ckpt")
    log_path = tmp_path / "run.ckpt" / LOG_FILE
    with open(log_path, "a", encoding="utf-8") as handle:
        handle.write('{"step": 5, "epoch": 0, "lo')  # the disk filled during step 5's append
    resumed = tiny_retriever(model_dir)
    with caplog.at_level(logging.WARNING):
        summary = train(resumed, data, cfg, checkpoint_dir=tmp_path / "run.ckpt")
    assert summary["start_step"] == 3
    assert "incomplete" in caplog.text and LOG_FILE in caplog.text
    assert _same_weights(reference, resumed)
    ref_log = [json.loads(line) for line in (tmp_path / "ref.ckpt" / LOG_FILE).open()]
    res_log = [json.loads(line) for line in log_path.open()]
    assert [(r["step"], r["loss"]) for r in res_log] == [(r["step"], r["loss"]) for r in ref_log]


def test_damage_before_the_last_log_line_is_one_line_naming_it(tmp_path):
    from pipeline.training.engine import truncate_log

    path = tmp_path / "train_log.jsonl"
    path.write_text('{"step": 1}\n{"step": 2, "lo\n{"step": 3}\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"train_log\.jsonl: line 2 is not a step record"):
        truncate_log(path, 3)


@pytest.mark.parametrize("damage", ['{"config": {"lr"', "", "[1, 2]", "\xff\xfe"])
def test_a_damaged_fingerprint_starts_afresh_never_resumes(
    resume_config, train_setup, tmp_path, tiny_retriever, train_until_crash, caplog, damage
):
    from pipeline.training.engine import FINGERPRINT_FILE
    from pipeline.training.loop import train

    model_dir, data = train_setup
    cfg = resume_config()
    train_until_crash(tiny_retriever(model_dir), data, cfg, tmp_path / "c")
    fingerprint = tmp_path / "c" / FINGERPRINT_FILE
    fingerprint.write_bytes(damage.encode("latin-1"))
    with caplog.at_level(logging.WARNING):
        summary = train(tiny_retriever(model_dir), data, cfg, checkpoint_dir=tmp_path / "c")
    # Which settings made the checkpoint cannot be known: it is not resumed.
    assert summary["start_step"] == 0
    assert FINGERPRINT_FILE in caplog.text and "starting afresh" in caplog.text
    assert json.loads(fingerprint.read_text())["config"]["lr"] == cfg.lr


# ---- item 10: one line naming file, record or key, not a traceback --------------------------------


def test_a_seed_numpy_refuses_is_a_config_error_at_validation():
    from pipeline.core.config import ConfigError, load_config, validate_config
    from pipeline.core.seeding import seed_everything

    for key, value in (("seed", 4294967296), ("seeds", [0, 4294967296])):
        config = load_config(validate=False)
        config[key] = value
        with pytest.raises(ConfigError, match=rf"config key '{key}.*4294967295"):
            validate_config(config)
    with pytest.raises(ConfigError, match="seed 4294967296"):  # a stage's own --seed
        seed_everything(2**32)


@pytest.mark.parametrize(
    "text,key",
    [
        ('{"base": "minilm", "pooling": "mean", "temp', None),
        ('{"base": "minilm", "temprature": 0.05}', "temprature"),
        ('{"temperature": -1}', "temperature"),
        ('{"temperature": NaN}', "temperature"),
        ('{"temperature": "0.05"}', "temperature"),
        ('["minilm"]', None),
    ],
    ids=["truncated", "unknown key", "negative temperature", "NaN temperature", "text temperature", "a list"],
)
def test_a_bad_retriever_json_is_one_data_error_naming_file_and_key(tmp_path, text, key):
    from pipeline.retrieval.model import Retriever

    (tmp_path / "retriever.json").write_text(text, encoding="utf-8")
    with pytest.raises(DataError) as exc:
        Retriever.load(tmp_path)
    assert exc.value.file == str(tmp_path / "retriever.json") and exc.value.field == key
    assert "\n" not in str(exc.value)


def test_a_model_whose_config_needs_remote_code_is_one_line(tmp_path):
    from pipeline.retrieval.model import Retriever, make_tiny_encoder

    folder = make_tiny_encoder(tmp_path / "m")
    (folder / "checksums.json").unlink()  # as a downloaded folder: no digests
    config = json.loads((folder / "config.json").read_text())
    config.update(model_type="custom", auto_map={"AutoConfig": "c.C", "AutoModel": "m.M"})
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(DataError, match="trust_remote_code") as exc:
        Retriever.load(folder)
    assert exc.value.file == str(folder / "config.json") and "\n" not in str(exc.value)


@pytest.mark.parametrize("value", ["-3", "0"])
def test_inspector_sample_must_be_positive(capsys, value):
    from pipeline.workflow.inspect_negatives import main as inspect_main

    with pytest.raises(SystemExit) as exc:
        inspect_main(["--dataset", "synthkb", "--sample", value])
    assert exc.value.code == 2 and "--sample" in capsys.readouterr().err


def test_a_corpus_without_any_negative_is_a_data_error(tmp_path):
    import pandas as pd

    from pipeline.core.schemas import CORPUS_SCHEMA, MINED_NEGATIVES_SCHEMA, QRELS_SCHEMA, QUERIES_SCHEMA
    from pipeline.core.storage import write_table
    from pipeline.training.data import TrainData, TrainInputs

    q, r, n, c = (tmp_path / f"{name}.parquet" for name in "qrnc")
    write_table(c, pd.DataFrame({"pid": ["p1"], "title": ["t"], "text": ["river"]}), CORPUS_SCHEMA)
    write_table(
        q,
        pd.DataFrame({"qid": ["q1", "q2"], "text": ["river", "stone"], "answers": [["river"], ["stone"]]}),
        QUERIES_SCHEMA,
    )
    write_table(
        r, pd.DataFrame({"qid": ["q1", "q2"], "pid": ["p1", "p1"], "relevance": [1, 1]}), QRELS_SCHEMA
    )
    write_table(n, MINED_NEGATIVES_SCHEMA.empty_table(), MINED_NEGATIVES_SCHEMA)
    data = TrainData(TrainInputs(q, r, n, c), depth=5, seed=0)
    with pytest.raises(DataError, match="no train query has a hard-negative candidate") as exc:
        data.batch([0, 1], 1, 0)
    assert exc.value.file == str(n)
    assert len(data.batch([0, 1], 0, 0).passage_texts) == 2  # in-batch negatives only still work


def _disk_full(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")  # as a failed write(): no file named


def _one_line_naming(capsys, path) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(path) in err, err
    return err


def test_disk_full_while_building_the_bm25_index_leaves_no_index_tmp(tmp_path, capsys, monkeypatch):
    import bm25s
    import pandas as pd

    from pipeline.core.schemas import CORPUS_SCHEMA
    from pipeline.core.storage import write_table
    from pipeline.retrieval import bm25

    write_table(
        tmp_path / "c.parquet",
        pd.DataFrame({"pid": ["p1", "p2"], "title": ["", ""], "text": ["river", "stone"]}),
        CORPUS_SCHEMA,
    )
    real_save = bm25s.BM25.save

    def save_then_fill(self, folder, **kwargs):
        real_save(self, folder, **kwargs)
        _disk_full()

    monkeypatch.setattr(bm25s.BM25, "save", save_then_fill)
    with pytest.raises(SystemExit) as exc:
        run_main(
            bm25.main,
            ["index", "--corpus", str(tmp_path / "c.parquet"), "--out-dir", str(tmp_path / "index")],
        )
    assert exc.value.code == 2
    assert "No space left" in _one_line_naming(capsys, tmp_path / "index")
    assert not (tmp_path / "index.tmp").exists() and not (tmp_path / "index").exists()


def test_disk_full_while_writing_a_table_is_one_line_and_leaves_no_temporary(tmp_path, capsys, monkeypatch):
    import pandas as pd

    from pipeline.core.schemas import CORPUS_SCHEMA
    from pipeline.core.storage import write_table

    monkeypatch.setattr("pipeline.core.storage.pq.write_table", _disk_full)
    out = tmp_path / "data" / "corpus.parquet"

    def stage(argv):  # what prepare_dataset does with each table
        write_table(out, pd.DataFrame({"pid": ["p1"], "title": [""], "text": ["x"]}), CORPUS_SCHEMA)

    with pytest.raises(SystemExit) as exc:
        run_main(stage, [])
    assert exc.value.code == 2 and "free space" in _one_line_naming(capsys, out)
    assert list((tmp_path / "data").iterdir()) == []


def test_disk_full_while_saving_a_model_is_one_line_naming_the_folder(tmp_path, capsys, monkeypatch):
    from pipeline.retrieval.model import Retriever, make_tiny_encoder

    retriever = Retriever.load(make_tiny_encoder(tmp_path / "base"))
    monkeypatch.setattr(retriever.query_model, "save_pretrained", _disk_full)
    out = tmp_path / "model"
    with pytest.raises(SystemExit) as exc:
        run_main(lambda argv: retriever.save(out), [])
    assert exc.value.code == 2 and "No space left" in _one_line_naming(capsys, out)
    assert [p.name for p in out.iterdir()] == []  # the staging folder removed


@pytest.mark.parametrize("stage", ["bm25", "evaluate"])
def test_a_read_only_output_folder_is_one_line_before_any_work(tmp_path, capsys, monkeypatch, stage):
    import tempfile

    from pipeline.evaluation import evaluate
    from pipeline.retrieval import bm25

    def read_only(*args, dir=None, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system", str(dir))

    # Root writes into chmod-ed folders, so the refusal is simulated where files are created.
    monkeypatch.setattr(tempfile, "mkstemp", read_only)
    out = tmp_path / "results"
    out.mkdir()
    if stage == "bm25":
        argv = ["index", "--corpus", str(tmp_path / "nosuch.parquet"), "--out-dir", str(out / "index")]
        main_ = bm25.main
    else:
        argv = ["--run", "r", "--queries", "q", "--qrels", "x", "--corpus", "c", "--dataset", "d"]
        argv += ["--method", "m", "--split", "test", "--out", str(out / "metrics.json")]
        main_ = evaluate.main
    with pytest.raises(SystemExit) as exc:
        run_main(main_, argv)
    assert exc.value.code == 2 and "Read-only" in _one_line_naming(capsys, out)

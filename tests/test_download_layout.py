"""Downloads are keyed by what they are, not by the dataset that declared them first (issue 39, item 7,
second half).

A URL declared by two datasets (NQ and TriviaQA share DPR's corpus; MS MARCO's roles share one tarball)
lived under the folder of the first dataset declaring it, so dropping that dataset from the config
re-downloaded the file and reran everything after it for the other. As pip's and the Hugging Face hub's
caches do, a URL's file is now downloads/by-url/<key of the URL>/<name>, a member sits beside its
archive, and files of the older layout are adopted when their own download log proves the URL.
"""

from __future__ import annotations

import copy
import hashlib
import io
import logging
import tarfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from test_rerun_content import snakemake

from pipeline.core.config import ConfigError, load_config
from pipeline.data import download as dl
from pipeline.data.readers import sources

REPO = Path(__file__).resolve().parent.parent
MARCO = REPO / "tests" / "fixtures" / "msmarco"
DPR_CORPUS = "https://dl.fbaipublicfiles.com/dpr/wikipedia_split/psgs_w100.tsv.gz"


# ---- the layout, from the config alone -------------------------------------------------------------


def test_a_shared_url_has_one_file_whichever_datasets_declare_it():
    config = load_config()
    nq, tq = sources.prepare_inputs(config, "nq"), sources.prepare_inputs(config, "tq")
    key = hashlib.sha256(DPR_CORPUS.encode()).hexdigest()[:16]
    assert nq["corpus"] == tq["corpus"] == f"downloads/by-url/{key}/psgs_w100.tsv.gz"
    # dropping nq (the first to declare it) leaves tq's input where it was
    without_nq = copy.deepcopy(config)
    del without_nq["datasets"]["nq"]
    assert sources.prepare_inputs(without_nq, "tq") == tq
    # MS MARCO's five roles: one archive, each member beside it, the same with or without other datasets
    marco = sources.prepare_inputs(config, "msmarco")
    archives = {path.split(".d/")[0] for path in marco.values()}
    assert len(archives) == 1 and archives.pop().endswith("/collectionandqueries.tar.gz")
    assert len(set(marco.values())) == 5
    only = copy.deepcopy(config)
    only["datasets"] = {"msmarco": config["datasets"]["msmarco"]}
    assert sources.prepare_inputs(only, "msmarco") == marco


def test_pinning_a_url_keeps_its_file_and_every_declaration_must_agree():
    config = load_config()
    before = sources.prepare_inputs(config, "tq")
    pinned = copy.deepcopy(config)
    pinned["datasets"]["tq"]["source"]["corpus"]["sha256"] = "ab" * 32
    assert sources.prepare_inputs(pinned, "tq") == before  # the digest is checked, not part of the key
    args = sources.download_args(pinned, before["corpus"])
    assert f"--sha256 {'ab' * 32}" in args  # the pin of tq's role reaches the download nq also reads
    pinned["datasets"]["nq"]["source"]["corpus"]["sha256"] = "cd" * 32
    with pytest.raises(ConfigError, match="different sha256 values configured for"):
        sources.download_args(pinned, before["corpus"])


@pytest.mark.parametrize(
    ("url", "name"),
    [
        ("https://x.org/data/file.json", "file.json"),
        ("https://x.org/data/file.json?dl=1&token=a/b", "file.json"),  # the query is not the name
        ("https://x.org/data/file.json#frag", "file.json"),
        ("https://x.org/a%20b%2Fc.json", "c.json"),  # %2F decodes to a separator: its last segment
        ("https://x.org/dir/", "dir"),
        ("https://x.org/", "download"),
        ("https://x.org", "download"),
        ("https://x.org/a/..", "download"),  # never '..' or '.': the folder itself
        ("https://x.org/a/.", "download"),
        ("https://x.org/.hidden", "hidden"),
        ("https://x.org/%C3%A9t%C3%A9.tsv", "_t_.tsv"),
        ("https://x.org/" + "n" * 300 + ".json", "n" * 100),
    ],
)
def test_any_url_shape_gives_one_plain_file_name(url, name):
    path = sources.url_file(url)
    folder, _, got = path.rpartition("/")
    assert got == name
    assert folder == f"downloads/by-url/{hashlib.sha256(url.encode()).hexdigest()[:16]}"


def test_members_sharing_a_file_name_and_local_archives_get_their_own_files():
    config = copy.deepcopy(load_config())
    url = "https://x.org/b.tar.gz"
    config["datasets"] = {
        "one": {
            "format": "beir",
            "source": {
                "corpus": {"url": url, "member": "a/corpus.jsonl"},
                "queries_test": {"url": url, "member": "b/corpus.jsonl"},
                "qrels_test": {"path": "data/local.tar", "member": "qrels/test.tsv"},
            },
        },
        "two": {
            "format": "beir",
            "source": {
                "corpus": {"path": "./data/local.tar", "member": "corpus.jsonl"},
                "queries_test": {"path": "data/local.tar", "member": "queries.jsonl"},
                "qrels_test": {"path": "data/local.tar", "member": "qrels/test.tsv"},
            },
        },
    }
    one, two = sources.prepare_inputs(config, "one"), sources.prepare_inputs(config, "two")
    assert one["corpus"] != one["queries_test"]  # same basename, other member
    assert one["corpus"].rsplit("/", 1)[1] == "corpus.jsonl"
    assert one["qrels_test"] == two["qrels_test"]  # one local archive, one member: extracted once
    assert two["corpus"].startswith(two["qrels_test"].split(".d/")[0])  # ./data/local.tar is data/local.tar
    assert sources.archive_input(config, two["qrels_test"]) == "data/local.tar"
    assert sources.download_args(config, one["corpus"]) == (
        f"--archive {sources.url_file(url)} --member a/corpus.jsonl"
    )
    with pytest.raises(ConfigError, match="no declared dataset downloads or extracts"):
        sources.download_args(config, "downloads/by-url/0000000000000000/x")


# ---- the older layout's files are adopted when provably the URL's ----------------------------------


def _old_download(url: str, body: bytes, logged_url: str) -> tuple[Path, Path]:
    old = Path("downloads/nq/corpus")
    old.parent.mkdir(parents=True)
    old.write_bytes(body)
    Path("downloads/nq/corpus.sha256").write_text("x  corpus\n")
    log = Path("logs/download/nq/corpus.log")
    log.parent.mkdir(parents=True)
    # as pipeline.core.cli.setup_logging writes a stage's log file
    log.write_text(
        f"2026-01-02 03:04:05,678 INFO sieve.download: resuming {old}.part\n"
        f"2026-01-02 03:04:06,789 INFO sieve.download: downloaded {logged_url} -> {old} ({len(body)} bytes)\n"
    )
    return old, log


def test_a_file_of_the_older_layout_is_adopted_when_its_log_names_the_url(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    url, body = "http://127.0.0.1:9/never-contacted.tsv.gz", b"corpus bytes"
    old, log = _old_download(url, body, url)
    out = Path(sources.url_file(url))

    def no_network(*args, **kwargs):
        raise AssertionError("an adopted file is not downloaded")

    monkeypatch.setattr(dl, "fetch", no_network)
    digest = dl.download(url, out, adopt=[(str(old), str(log))])
    assert digest == hashlib.sha256(body).hexdigest()
    assert out.read_bytes() == body and not old.exists() and not Path(f"{old}.sha256").exists()
    assert Path(f"{out}.sha256").read_text() == f"{digest}  {out.name}\n"


@pytest.mark.parametrize("case", ["other url", "other size", "no log", "wrong pin"])
def test_a_file_of_the_older_layout_not_proven_is_left_and_downloaded_again(
    tmp_path, monkeypatch, caplog, case
):
    monkeypatch.chdir(tmp_path)
    url, body = "http://127.0.0.1:9/f.tsv", b"corpus bytes"
    old, log = _old_download(url, body, "http://elsewhere/f.tsv" if case == "other url" else url)
    if case == "other size":
        old.write_bytes(body + b"more")
    if case == "no log":
        log.unlink()
    pin = "0" * 64 if case == "wrong pin" else None
    fetched = []

    def fetch(url, part, **kwargs):
        fetched.append(url)
        part.write_bytes(b"fresh")

    monkeypatch.setattr(dl, "fetch", fetch)
    out = Path(sources.url_file(url))
    with caplog.at_level(logging.WARNING, logger="sieve.download"):
        if pin:
            with pytest.raises(dl.DataError, match="sha256 mismatch"):
                dl.download(url, out, sha256=pin, adopt=[(str(old), str(log))])
        else:
            dl.download(url, out, adopt=[(str(old), str(log))])
    assert fetched == [url] and old.exists()  # left for the user to delete, named in the warning
    assert "not adopted" in caplog.text and str(old) in caplog.text
    if not pin:
        assert out.read_bytes() == b"fresh"


def test_the_download_rule_passes_the_older_layouts_locations():
    config = load_config()
    args = sources.download_args(config, sources.url_file(DPR_CORPUS))
    assert "--adopt downloads/nq/corpus logs/download/nq/corpus.log" in args
    assert "--adopt downloads/tq/corpus logs/download/tq/corpus.log" in args
    archive = sources.url_file(config["datasets"]["msmarco"]["source"]["corpus"]["url"])
    assert (
        "--adopt downloads/msmarco/archives/collectionandqueries.tar.gz "
        "logs/download_archive/msmarco/collectionandqueries.tar.gz.log"
    ) in sources.download_args(config, archive)


# ---- the workflow: dropping the dataset that declared a shared URL first plans nothing -------------


class Files:
    """Static files over HTTP on 127.0.0.1, with an ETag; counts the GETs."""

    def __init__(self, files: dict[str, bytes]) -> None:
        self.gets: list[str] = []
        srv = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                srv.gets.append(self.path)
                body = files.get(self.path)
                if body is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("ETag", f'"{hashlib.sha256(body).hexdigest()[:12]}"')
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"


@pytest.fixture
def marco_server():
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name in ("collection.tsv", "queries.train.tsv", "qrels.train.tsv"):
            tar.add(MARCO / name, arcname=name)
    files = {"/marco.tar.gz": buffer.getvalue()}
    for name in ("queries.dev.small.tsv", "qrels.dev.small.tsv"):
        files[f"/{name}"] = (MARCO / name).read_bytes()
    srv = Files(files)
    thread = threading.Thread(target=srv.httpd.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.httpd.shutdown()
    srv.httpd.server_close()


@pytest.mark.slow
def test_dropping_the_dataset_that_declared_a_shared_url_first_reruns_nothing(tmp_path, marco_server):
    base = marco_server.base
    marco = {
        "format": "msmarco",
        "source": {
            # three roles share one tarball; two are plain URLs, shared by both datasets too
            "corpus": {"url": f"{base}/marco.tar.gz", "member": "collection.tsv"},
            "queries_train": {"url": f"{base}/marco.tar.gz", "member": "queries.train.tsv"},
            "qrels_train": {"url": f"{base}/marco.tar.gz", "member": "qrels.train.tsv"},
            "queries_test": {"url": f"{base}/queries.dev.small.tsv"},
            "qrels_test": {"url": f"{base}/qrels.dev.small.tsv"},
        },
    }
    both = {"datasets": {"first": marco, "second": copy.deepcopy(marco)}, "methods": ["bm25"]}
    snakemake(tmp_path, both, "resources/first/manifest.json", "resources/second/manifest.json")
    # one GET per file, whatever number of datasets and roles read it
    assert sorted(marco_server.gets) == ["/marco.tar.gz", "/qrels.dev.small.tsv", "/queries.dev.small.tsv"]
    only_second = {"datasets": {"second": marco}, "methods": ["bm25"]}
    out = snakemake(tmp_path, only_second, "-n", "resources/second/manifest.json")
    assert "Nothing to be done" in out, out[-3000:]
    # and the dataset declared alone from the start reads the very same files
    assert (tmp_path / sources.url_file(f"{base}/marco.tar.gz")).is_file()
    assert len(marco_server.gets) == 3

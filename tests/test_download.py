"""pipeline.data.download against a local HTTP server (a thread on 127.0.0.1) whose handler serves byte
ranges and can misbehave on demand: drop the connection mid-body, answer 503, ignore Range."""

from __future__ import annotations

import gzip
import hashlib
import io
import logging
import tarfile
import zipfile
from pathlib import Path

import pytest
from range_server import FilesServer, serving

from pipeline.core.cli import run_main
from pipeline.core.storage import DataError
from pipeline.data.download import download, extract_member, main

FIX = Path(__file__).parent / "fixtures"
BODY = b"".join(hashlib.sha256(str(i).encode()).digest() for i in range(10_000))  # 320 kB
BODY_SHA = hashlib.sha256(BODY).hexdigest()


@pytest.fixture
def server():
    with serving(FilesServer({"/data.bin": BODY})) as srv:
        yield srv


def test_full_download_writes_digest_and_warns(server, tmp_path, caplog):
    out = tmp_path / "d" / "corpus"
    with caplog.at_level(logging.WARNING, logger="sieve.download"):
        digest = download(server.base + "/data.bin", out, backoff=0)
    assert out.read_bytes() == BODY and digest == BODY_SHA
    assert (tmp_path / "d" / "corpus.sha256").read_text() == f"{BODY_SHA}  corpus\n"
    assert not (tmp_path / "d" / "corpus.part").exists()
    assert BODY_SHA in caplog.text and "no sha256 configured" in caplog.text


def test_resume_from_a_truncated_part(server, tmp_path):
    out = tmp_path / "corpus"
    (tmp_path / "corpus.part").write_bytes(BODY[:100_000])
    download(server.base + "/data.bin", out, sha256=BODY_SHA, backoff=0)
    assert out.read_bytes() == BODY
    assert server.requests == [("/data.bin", "bytes=100000-")]


def test_complete_part_is_not_fetched_again(server, tmp_path):
    (tmp_path / "corpus.part").write_bytes(BODY)
    download(server.base + "/data.bin", tmp_path / "corpus", sha256=BODY_SHA, backoff=0)
    assert (tmp_path / "corpus").read_bytes() == BODY  # the server answered 416: nothing left


def test_dropped_connection_is_retried_with_range(server, tmp_path):
    server.cut_once["/data.bin"] = 200_000
    download(server.base + "/data.bin", tmp_path / "corpus", sha256=BODY_SHA, backoff=0)
    assert (tmp_path / "corpus").read_bytes() == BODY
    assert len(server.requests) == 2 and server.requests[1][1] is not None
    # the retry asks for the rest: from the last complete read before the cut
    assert 0 < int(server.requests[1][1].removeprefix("bytes=").rstrip("-")) <= 200_000


def test_server_error_is_retried_client_error_is_not(server, tmp_path):
    server.fail_once["/data.bin"] = 503
    download(server.base + "/data.bin", tmp_path / "a", backoff=0)
    assert (tmp_path / "a").read_bytes() == BODY and len(server.requests) == 2
    with pytest.raises(DataError, match="HTTP 404"):
        download(server.base + "/missing", tmp_path / "b", backoff=0)
    assert [p for p, _ in server.requests].count("/missing") == 1


def test_gives_up_after_retries(server, tmp_path):
    server.files["/flaky"] = BODY
    server.cut_once["/flaky"] = 100_000
    with pytest.raises(DataError, match="after 0 retries"):
        download(server.base + "/flaky", tmp_path / "f", retries=0, backoff=0)
    kept = (tmp_path / "f.part").read_bytes()  # kept: the next run resumes from it
    assert 0 < len(kept) <= 100_000 and BODY.startswith(kept)
    assert not (tmp_path / "f").exists()
    download(server.base + "/flaky", tmp_path / "f", sha256=BODY_SHA, backoff=0)
    assert server.requests[-1] == ("/flaky", f"bytes={len(kept)}-")


def test_server_ignoring_range_restarts(server, tmp_path):
    server.ignore_range.add("/data.bin")
    (tmp_path / "c.part").write_bytes(b"stale bytes")
    download(server.base + "/data.bin", tmp_path / "c", sha256=BODY_SHA, backoff=0)
    assert (tmp_path / "c").read_bytes() == BODY


def test_bytes_are_stored_as_served_even_with_content_encoding(server, tmp_path):
    packed = gzip.compress(BODY)
    server.files["/psgs.tsv.gz"] = packed
    server.content_encoding_gzip.add("/psgs.tsv.gz")
    download(server.base + "/psgs.tsv.gz", tmp_path / "corpus", backoff=0)
    assert (tmp_path / "corpus").read_bytes() == packed


def test_checksum_mismatch_deletes_the_download(server, tmp_path, capsys):
    out = tmp_path / "corpus"
    with pytest.raises(SystemExit) as exc:
        run_main(
            main,
            ["--url", server.base + "/data.bin", "--out", str(out), "--sha256", "0" * 64, "--backoff", "0"],
        )
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "sha256 mismatch" in err and BODY_SHA in err
    assert not out.exists() and not (tmp_path / "corpus.part").exists()


def _tar_gz(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


MSMARCO = {
    name: (FIX / "msmarco" / name).read_bytes()
    for name in ("collection.tsv", "queries.train.tsv", "qrels.train.tsv")
}


def test_tar_member_from_url(server, tmp_path):
    server.files["/collectionandqueries.tar.gz"] = _tar_gz(MSMARCO)
    out = tmp_path / "queries_train"
    assert (
        main(
            [
                "--url",
                server.base + "/collectionandqueries.tar.gz",
                "--out",
                str(out),
                "--member",
                "queries.train.tsv",
                "--backoff",
                "0",
            ]
        )
        == 0
    )
    assert out.read_bytes() == MSMARCO["queries.train.tsv"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["queries_train"]  # archive removed


def test_member_of_a_local_archive(tmp_path):
    archive = tmp_path / "a.tar.gz"
    archive.write_bytes(_tar_gz({"./" + k: v for k, v in MSMARCO.items()}))
    extract_member(archive, "qrels.train.tsv", tmp_path / "qrels")
    assert (tmp_path / "qrels").read_bytes() == MSMARCO["qrels.train.tsv"]
    with pytest.raises(DataError, match="no member 'nope.tsv'.*collection.tsv"):
        extract_member(archive, "nope.tsv", tmp_path / "nope")
    assert not (tmp_path / "nope").exists()
    zipped = tmp_path / "b.zip"
    with zipfile.ZipFile(zipped, "w") as zf:
        zf.writestr("scifact/corpus.jsonl", b'{"_id": "1", "text": "t"}\n')
    extract_member(zipped, "scifact/corpus.jsonl", tmp_path / "corpus")
    assert (tmp_path / "corpus").read_bytes() == b'{"_id": "1", "text": "t"}\n'


def test_not_an_archive(tmp_path):
    path = tmp_path / "plain"
    path.write_bytes(b"just text\n" * 100)
    with pytest.raises(DataError, match="not a readable tar or zip"):
        extract_member(path, "x", tmp_path / "x")


@pytest.mark.parametrize("url", ["ftp://127.0.0.1/data.bin", "file:///etc/hostname", "127.0.0.1/data.bin"])
def test_a_url_scheme_without_support_is_refused_at_once(tmp_path, capsys, monkeypatch, url):
    # issue 28.7: no retries (ftp:// used to take 5 of them, 71 s, then say "run again to resume")
    def no_retry(seconds):
        raise AssertionError(f"retried a URL that can never be fetched (sleep {seconds})")

    monkeypatch.setattr("pipeline.data.download.time.sleep", no_retry)
    with pytest.raises(SystemExit) as exc:
        run_main(main, ["--url", url, "--out", str(tmp_path / "f")])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert url in err and "http://" in err and "https://" in err, err
    assert not (tmp_path / "f.part").exists()

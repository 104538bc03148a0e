"""Issue 39, items 5, 9, 10 and 11 (part): downloads spliced from two versions or retried for nothing,
training that could not resume past a damaged log or fingerprint, and tracebacks where one line is
promised. Each test broke its promise before the fix."""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from pipeline.core.cli import run_main
from pipeline.core.storage import DataError
from pipeline.data.download import download, main

V1 = b"".join(hashlib.sha256(f"v1-{i}".encode()).digest() for i in range(4_000))  # 128 kB
V2 = b"".join(hashlib.sha256(f"v2-{i}".encode()).digest() for i in range(4_000))  # same size


class Server:
    """One file at /f, a redirect to file:// at /file, a redirect loop at /loop. ``ignore_if_range``:
    a Range is answered whatever If-Range says (the broken servers of item 5)."""

    def __init__(self) -> None:
        self.body, self.etag = V1, '"v1"'
        self.ignore_if_range = False
        self.cut_once: int | None = None
        self.requests: list[dict] = []
        srv = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                srv.requests.append(
                    {"Range": self.headers.get("Range"), "If-Range": self.headers.get("If-Range")}
                )
                if self.path in ("/file", "/loop"):
                    self.send_response(302)
                    self.send_header("Location", "file:///etc/hostname" if self.path == "/file" else "/loop")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                rng, if_range = self.headers.get("Range"), self.headers.get("If-Range")
                start = 0
                if rng and (srv.ignore_if_range or if_range in (None, srv.etag)):
                    start = int(rng.removeprefix("bytes=").split("-")[0])
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(srv.body) - 1}/{len(srv.body)}")
                else:
                    self.send_response(200)
                self.send_header("ETag", srv.etag)
                self.send_header("Content-Length", str(len(srv.body) - start))
                self.end_headers()
                body = srv.body[start:]
                if srv.cut_once is not None:
                    body, srv.cut_once = body[: srv.cut_once], None
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.url = self.base + "/f"


@pytest.fixture
def server():
    srv = Server()
    thread = threading.Thread(target=srv.httpd.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.httpd.shutdown()
    srv.httpd.server_close()


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

"""Local HTTP servers for the download and model-fetch tests (a thread on 127.0.0.1).

RangeServer: one file at /f whose content and validators a test can change between requests, a
redirect to file:// at /file and a redirect loop at /loop. It sends the ETag and Last-Modified it has and
honours If-Range as RFC 9110 says: a matching strong validator gets the 206 range, any other the whole
(current) file with 200. ``ignore_if_range`` makes it one of the broken servers that answer a Range
whatever If-Range says; ``cut_once`` drops the connection once after that many bytes.

FilesServer: many files by path, byte ranges, and faults on demand per path.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

REDIRECTS = {"/file": "file:///etc/hostname", "/loop": "/loop"}


class _Quiet(BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass  # a test's output shows its failures, not every request


class RangeServer:
    def __init__(self, body: bytes, etag: str | None = None, last_modified: str | None = None) -> None:
        self.body, self.etag, self.last_modified = body, etag, last_modified
        self.ignore_if_range = False
        self.cut_once: int | None = None  # bytes sent before dropping the connection, once
        self.requests: list[dict] = []  # Range and If-Range of each request
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.url = self.base + "/f"

    def range_start(self, rng: str | None, if_range: str | None) -> int | None:
        """The Range's first byte where it is honoured (a 206), else None (the whole file, a 200)."""
        strong = self.etag if self.etag and not self.etag.startswith("W/") else None
        if rng and (self.ignore_if_range or if_range is None or if_range in (strong, self.last_modified)):
            return int(rng.removeprefix("bytes=").split("-")[0])
        return None

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        remote = self

        class Handler(_Quiet):
            def do_GET(self) -> None:
                rng, if_range = self.headers.get("Range"), self.headers.get("If-Range")
                remote.requests.append({"Range": rng, "If-Range": if_range})
                if self.path in REDIRECTS:
                    self.send_response(302)
                    self.send_header("Location", REDIRECTS[self.path])
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                data = remote.body
                start = remote.range_start(rng, if_range)
                if start is None:
                    start = 0
                    self.send_response(200)
                else:
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                if remote.etag:
                    self.send_header("ETag", remote.etag)
                if remote.last_modified:
                    self.send_header("Last-Modified", remote.last_modified)
                self.send_header("Content-Length", str(len(data) - start))
                self.end_headers()
                body = data[start:]
                if remote.cut_once is not None:
                    body, remote.cut_once = body[: remote.cut_once], None
                self.wfile.write(body)

        return Handler


class FilesServer:
    """``files`` ({url path: bytes}) with Range support; any other path is a 404. With ``etags`` each
    file is sent with an ETag (a hash of its bytes), as the model hub sends. Faults by path: ``cut_once``
    (bytes sent before dropping the connection, first request), ``fail_once`` (the status the first
    request gets), ``ignore_range`` (a 200 with the whole file whatever the Range), and
    ``content_encoding_gzip`` (labelled "Content-Encoding: gzip", as some hosts label .gz files)."""

    def __init__(self, files: dict[str, bytes] | None = None, etags: bool = False) -> None:
        self.files = {} if files is None else files
        self.etags = etags
        self.cut_once: dict[str, int] = {}
        self.fail_once: dict[str, int] = {}
        self.ignore_range: set[str] = set()
        self.content_encoding_gzip: set[str] = set()
        self.requests: list[tuple[str, str | None]] = []  # (path, Range)
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        remote = self

        class Handler(_Quiet):
            def do_GET(self) -> None:
                rng = self.headers.get("Range")
                remote.requests.append((self.path, rng))
                if self.path not in remote.files:
                    self.send_error(404)
                    return
                if self.path in remote.fail_once:
                    self.send_error(remote.fail_once.pop(self.path))
                    return
                data = remote.files[self.path]
                start = 0
                if rng and self.path not in remote.ignore_range:
                    start = int(rng.removeprefix("bytes=").split("-")[0])
                    if start >= len(data):
                        self.send_response(416)
                        self.send_header("Content-Range", f"bytes */{len(data)}")
                        self.end_headers()
                        return
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                else:
                    self.send_response(200)
                if remote.etags:
                    self.send_header("ETag", '"' + hashlib.sha256(data).hexdigest()[:16] + '"')
                self.send_header("Content-Length", str(len(data) - start))
                if self.path in remote.content_encoding_gzip:
                    self.send_header("Content-Encoding", "gzip")
                self.end_headers()
                body = data[start:]
                if self.path in remote.cut_once:
                    body = body[: remote.cut_once.pop(self.path)]
                self.wfile.write(body)

        return Handler


@contextmanager
def serving(server: RangeServer | FilesServer) -> Iterator[RangeServer | FilesServer]:
    """``server`` answering on its own thread until the block ends."""
    thread = threading.Thread(target=server.httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.httpd.shutdown()
        server.httpd.server_close()

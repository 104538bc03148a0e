"""A local HTTP server for the download tests: one file at /f whose content and validators a test can
change between requests, a redirect to file:// at /file and a redirect loop at /loop.

It sends the ETag and Last-Modified it has and honours If-Range as RFC 9110 says: a matching strong
validator gets the 206 range, any other the whole (current) file with 200. ``ignore_if_range`` makes
it one of the broken servers that answer a Range whatever If-Range says; ``cut_once`` drops the
connection once after that many bytes.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

REDIRECTS = {"/file": "file:///etc/hostname", "/loop": "/loop"}


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

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

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


@contextmanager
def serving(server: RangeServer) -> Iterator[RangeServer]:
    """``server`` answering on its own thread until the block ends."""
    thread = threading.Thread(target=server.httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.httpd.shutdown()
        server.httpd.server_close()

"""Download a source file: resumable, retried, checksummed; optionally one member of an archive.

    python -m pipeline.data.download --url URL --out PATH [--sha256 HEX] [--member NAME]
    python -m pipeline.data.download --archive LOCAL.tar.gz --member NAME --out PATH

Bytes go to ``PATH.part``, and the remote file's validator (its strong ETag, else its Last-Modified
date) to ``PATH.part.json``. An interrupted run (or a dropped connection, retried with exponential
backoff) continues from where the ``.part`` ends with an HTTP Range request sent with ``If-Range``:
the server answers the rest only if the file is unchanged, else the whole new file, and the download
starts over. A ``.part`` whose origin cannot be checked (no stored validator) is resumed only when
``--sha256`` will verify the result (and fetched again from zero if it does not); without ``--sha256``
it is discarded. The finished file is checked against ``--sha256`` (a mismatch deletes it), then
renamed onto PATH, so PATH exists only when complete. Without ``--sha256`` the computed digest is
logged as a warning and written to ``PATH.sha256`` so it can be pinned in config.yaml. ``--member``
streams one file out of a .tar/.tar.gz/.tgz/.zip archive (never the whole archive).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import tarfile
import time
import zipfile
import zlib
from pathlib import Path
from typing import Sequence

import requests
import urllib3
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from pipeline.core.cli import run_main, stage_parser, start_stage
from pipeline.core.config import ConfigError
from pipeline.core.storage import DataError, atomic_open, refuse_overwriting_inputs, write_json
from pipeline.data.settings import unsupported_url

log = logging.getLogger("sieve.download")
CHUNK = 1 << 20
# Network reads are small: bytes of a read that a dropped connection interrupts are lost, so this
# bounds what a retry has to fetch again.
NET_CHUNK = 1 << 16
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")


# requests' errors that no retry can change: a redirect to a scheme it cannot fetch (file://), a
# redirect loop, a malformed URL or header.
PERMANENT = (
    requests.exceptions.InvalidSchema,
    requests.exceptions.MissingSchema,
    requests.exceptions.InvalidURL,
    requests.exceptions.InvalidHeader,
    requests.exceptions.TooManyRedirects,
)


class _Retryable(Exception):
    """A failure worth another attempt (network trouble, 5xx, 429, a short body)."""


class NotFound(DataError):
    """HTTP 404: the server has no such file (a model repository without an optional file)."""


def _progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
    )


def _total_from_content_range(value: str | None) -> int | None:
    # "bytes 100-199/2000" or "bytes */2000"
    match = re.search(r"/(\d+)\s*$", value or "")
    return int(match.group(1)) if match else None


# ---- what the .part is a part of: PATH.part.json ----------------------------------------------------


def _meta_path(part: Path) -> Path:
    return part.with_name(part.name + ".json")


class _Malformed(Exception):
    """A ``.part.json`` that exists but is not the record this module writes."""


def _read_meta(part: Path) -> dict | None:
    """The record beside ``part``; None when there is none; _Malformed when it cannot be trusted."""
    path = _meta_path(part)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise _Malformed(f"unreadable ({exc})") from None
    try:
        meta = json.loads(text)
    except ValueError:
        raise _Malformed("not valid JSON") from None
    if not isinstance(meta, dict):
        raise _Malformed(f"a JSON {type(meta).__name__}, not an object")
    # The validator goes into a request header as it is: an int there made requests raise on every
    # retry, so a record of other types is refused here, once.
    for key, kinds in (("url", (str,)), ("validator", (str, type(None))), ("size", (int, type(None)))):
        value = meta.get(key)
        if key == "url" and key not in meta:
            raise _Malformed("no 'url'")
        if not isinstance(value, kinds) or isinstance(value, bool):
            raise _Malformed(f"'{key}' is a {type(value).__name__}")
    return meta


def _meta_or_none(part: Path) -> dict | None:
    try:
        return _read_meta(part)
    except _Malformed:
        return None


def _validator(headers) -> str | None:
    """What If-Range may carry: a strong ETag, else Last-Modified (RFC 9110 forbids weak tags)."""
    etag = headers.get("ETag")
    if etag and not etag.startswith("W/"):
        return etag
    return headers.get("Last-Modified")


def _changed_validator(recorded: str | None, headers) -> str | None:
    """Why a 206 may not be appended to a .part recorded under ``recorded``, or None when it may."""
    if not recorded:
        return None  # nothing recorded to compare (a .part resumed within the run, or sha256-checked)
    etag, modified = headers.get("ETag"), headers.get("Last-Modified")
    if recorded in (etag, modified):
        return None
    now = etag or modified
    return (
        f"the server sent a range of another version of the file (validator {now}, the partial "
        f"file has {recorded}; it ignored If-Range)"
        if now
        else f"the server sent a range without a validator to check against the partial file's {recorded}"
    )


def _discard(part: Path) -> None:
    part.unlink(missing_ok=True)
    _meta_path(part).unlink(missing_ok=True)


def _start_meta(part: Path, url: str, resp: requests.Response, total: int | None) -> None:
    # Old bytes go first, then the new record, then new bytes: a kill between any two steps never
    # leaves bytes beside a record of another version of the file.
    part.unlink(missing_ok=True)
    write_json(_meta_path(part), {"url": url, "validator": _validator(resp.headers), "size": total})


def _restart(part: Path, reason: str) -> None:
    _discard(part)
    raise _Retryable(f"{reason}; starting over")


def _fetch_once(url: str, part: Path, timeout: float, progress: Progress) -> None:
    offset = part.stat().st_size if part.exists() else 0
    meta = (_meta_or_none(part) or {}) if offset else {}
    # identity: byte offsets must refer to the file itself, not to a compressed transfer.
    headers = {"Accept-Encoding": "identity"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
        if meta.get("validator"):
            # The server sends the range only if the file is still the one the .part began.
            headers["If-Range"] = meta["validator"]
    try:
        with requests.get(url, stream=True, headers=headers, timeout=timeout) as resp:
            if resp.status_code == 416 and offset:
                if _total_from_content_range(resp.headers.get("Content-Range")) == offset:
                    return  # the .part already holds the whole file
                _restart(part, "the server refused to resume from the partial file")
            if resp.status_code == 429 or resp.status_code >= 500:
                raise _Retryable(f"HTTP {resp.status_code} {resp.reason}")
            if resp.status_code == 404:
                raise NotFound(f"HTTP 404 {resp.reason}", file=url)
            if resp.status_code >= 400:
                raise DataError(f"HTTP {resp.status_code} {resp.reason}", file=url)
            if resp.status_code == 206:
                start = re.match(r"bytes (\d+)-", resp.headers.get("Content-Range", ""))
                if start is None or int(start.group(1)) != offset:
                    _restart(part, "the server answered a different range")
                total = _total_from_content_range(resp.headers.get("Content-Range"))
                # A server that ignores If-Range sends the range of whatever it holds now: as curl
                # and wget do, bytes are appended only under the validator the .part began with.
                changed = _changed_validator(meta.get("validator"), resp.headers)
                if changed:
                    _restart(part, changed)
                # Without a validator a changed file still betrays itself by its size.
                if meta.get("size") is not None and total is not None and total != meta["size"]:
                    _restart(part, f"the remote file is now {total} bytes, not {meta['size']}")
                mode = "ab"
            else:
                if offset:
                    log.warning(
                        "%s: %s; starting over",
                        url,
                        "the remote file changed since the partial download"
                        if "If-Range" in headers
                        else "the server does not support resuming",
                    )
                mode, offset = "wb", 0
                length = resp.headers.get("Content-Length")
                total = int(length) if length and length.isdigit() else None
                _start_meta(part, url, resp, total)
            task = progress.add_task(f"download {part.name[:-5]}", total=total, completed=offset)
            with open(part, mode) as handle:
                # The bytes as served: a server that adds Content-Encoding to a .gz must not get
                # it decoded here, or sizes and checksums would no longer match the file.
                for chunk in resp.raw.stream(NET_CHUNK, decode_content=False):
                    handle.write(chunk)
                    progress.advance(task, len(chunk))
    except PERMANENT as exc:
        # Another attempt meets the same redirect or header: fail now, naming the cause.
        raise DataError(f"cannot download ({type(exc).__name__}: {exc})", file=url) from None
    except (requests.RequestException, urllib3.exceptions.HTTPError) as exc:
        raise _Retryable(f"{type(exc).__name__}: {exc}") from exc
    size = part.stat().st_size
    if total is not None and size != total:
        raise _Retryable(f"connection closed at {size} of {total} bytes")


def fetch(
    url: str,
    part: Path,
    *,
    retries: int = 5,
    backoff: float = 2.0,
    timeout: float = 60.0,
    progress: Progress | None = None,
) -> None:
    """Complete ``part`` from ``url``, resuming what it already holds (checked with If-Range when
    ``part.json`` holds a validator; callers decide beforehand whether a .part is worth resuming)."""
    progress = progress or _progress()
    attempt = 0
    with progress:
        while True:
            try:
                _fetch_once(url, part, timeout, progress)
                return
            except _Retryable as exc:
                attempt += 1
                if attempt > retries:
                    # The hint only where there is something to resume.
                    hint = f" (run again to resume from {part})" if part.exists() else ""
                    raise DataError(
                        f"download failed after {retries} retries: {exc}{hint}", file=url
                    ) from None
                delay = backoff * 2 ** (attempt - 1)
                have = part.stat().st_size if part.exists() else 0
                log.warning(
                    "%s: %s; retry %d/%d in %.1fs (resuming at %d bytes)",
                    url,
                    exc,
                    attempt,
                    retries,
                    delay,
                    have,
                )
                time.sleep(delay)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle, _progress() as progress:
        task = progress.add_task(f"sha256 {path.name}", total=path.stat().st_size)
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
            progress.advance(task, len(chunk))
    return digest.hexdigest()


def _vet_part(url: str, part: Path, sha256: str | None) -> bool:
    """Keep a .part left by an earlier run only if it can be shown to belong to ``url``: by its
    stored validator (checked by the server through If-Range) or, failing that, by ``sha256`` at the
    end. Return True when it is kept unvalidated (the caller refetches it if the digest is wrong)."""
    if not part.exists():
        _meta_path(part).unlink(missing_ok=True)
        return False
    size = part.stat().st_size
    try:
        meta = _read_meta(part)
    except _Malformed as exc:
        # Not written by this module (or damaged): nothing says which file the bytes belong to.
        log.warning("%s: %s; discarding %s and starting over", _meta_path(part), exc, part)
        _discard(part)
        return False
    if meta is not None and meta.get("url") == url and meta.get("validator"):
        log.info("resuming %s from %d bytes (If-Range %s)", part, size, meta["validator"])
        return False
    if meta is not None and meta.get("url") != url:
        # Certainly another file: not worth resuming even with a checksum to catch it.
        log.warning("%s: %d bytes of %s, not of %s; starting over", part, size, meta.get("url"), url)
        _discard(part)
        return False
    why = (
        "no record of which remote file it is part of"
        if meta is None
        else "the server gave no ETag or Last-Modified to check it against"
    )
    if sha256 is not None:
        log.info("resuming %s from %d bytes (%s; the sha256 check will verify it)", part, size, why)
        return True
    log.warning(
        "%s: %d bytes of unknown origin (%s) and no sha256 to verify them; starting over", part, size, why
    )
    _discard(part)
    return False


def _logged_download(log_file: Path, url: str, old: Path) -> bool:
    """Whether ``log_file`` (a log of this module) records ``old`` as downloaded from ``url`` the last
    time anything was downloaded to it, with the size it has now."""
    try:
        lines = log_file.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return False
    # A line of the file is "<time> INFO sieve.download: <message>" (pipeline.core.cli.setup_logging).
    marker = f" -> {old} ("
    last = next((line for line in reversed(lines) if " downloaded " in line and marker in line), None)
    return last is not None and last.endswith(
        f"{log.name}: downloaded {url} -> {old} ({old.stat().st_size} bytes)"
    )


def _adopt(url: str, out: Path, candidates: Sequence[tuple[str, str]], sha256: str | None) -> str | None:
    """Move the file of ``url`` that the layout before downloads/by-url/ left at one of ``candidates``
    ((file, its download log)) onto ``out``, if it provably is that file; return its sha256."""
    for old_name, log_name in candidates:
        old = Path(old_name)
        if not old.is_file():
            continue
        if sha256 is None and not _logged_download(Path(log_name), url, old):
            log.warning(
                "%s: a download of the layout before downloads/by-url/, not adopted: its log %s does not "
                "record it as the download of %s; downloading it again (delete %s)",
                old,
                log_name,
                url,
                old,
            )
            continue
        digest = sha256_of(old)
        if sha256 is not None and digest != sha256:
            log.warning("%s: sha256 %s, not the pinned %s; not adopted (delete it)", old, digest, sha256)
            continue
        with atomic_open(out.with_name(out.name + ".sha256"), "w", encoding="utf-8") as handle:
            handle.write(f"{digest}  {out.name}\n")
        os.replace(old, out)  # downloads/ is one folder tree: a rename, not a copy of 13 GB
        Path(f"{old}.sha256").unlink(missing_ok=True)
        log.info("adopted %s (the layout before downloads/by-url/) as %s, sha256 %s", old, out, digest)
        return digest
    return None


def download(
    url: str,
    out: str | os.PathLike,
    *,
    sha256: str | None = None,
    retries: int = 5,
    backoff: float = 2.0,
    timeout: float = 60.0,
    adopt: Sequence[tuple[str, str]] = (),
    warn_unpinned: bool = True,
) -> str:
    """Download ``url`` to ``out`` (resumable via ``out.part``); return the file's sha256. ``adopt``:
    (file, log) pairs of the older layout to move onto ``out`` instead, when provably this URL's.
    ``warn_unpinned`` False: the caller says itself where an unpinned digest is to be pinned."""
    problem = unsupported_url(url)
    if problem:  # before any retry: another attempt cannot help
        raise ConfigError(f"--url {problem}")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    adopted = _adopt(url, out, adopt, sha256)
    if adopted is not None:
        return adopted
    part = out.with_name(out.name + ".part")
    unvalidated = _vet_part(url, part, sha256)
    fetch(url, part, retries=retries, backoff=backoff, timeout=timeout)
    digest = sha256_of(part)
    if sha256 is not None and digest != sha256 and unvalidated:
        log.warning(
            "%s: sha256 %s after resuming a partial file of unknown origin; downloading it again from zero",
            url,
            digest,
        )
        _discard(part)
        fetch(url, part, retries=retries, backoff=backoff, timeout=timeout)
        digest = sha256_of(part)
    if sha256 is not None and digest != sha256:
        _discard(part)
        raise DataError(
            f"sha256 mismatch: expected {sha256}, got {digest}; the download was "
            "deleted. If the file changed upstream, update sha256 in config.yaml",
            file=url,
            field="sha256",
        )
    if sha256 is None and warn_unpinned:
        log.warning(
            "%s: no sha256 configured; downloaded file has sha256 %s (pin it in config.yaml as 'sha256: %s')",
            url,
            digest,
            digest,
        )
    with atomic_open(out.with_name(out.name + ".sha256"), "w", encoding="utf-8") as handle:
        handle.write(f"{digest}  {out.name}\n")
    os.replace(part, out)
    _meta_path(part).unlink(missing_ok=True)
    log.info("downloaded %s -> %s (%d bytes)", url, out, out.stat().st_size)
    return digest


def _copy(src, out: Path, size: int | None, label: str) -> None:
    with atomic_open(out, "wb") as handle, _progress() as progress:
        task = progress.add_task(label, total=size)
        while chunk := src.read(CHUNK):
            handle.write(chunk)
            progress.advance(task, len(chunk))


def extract_member(archive: str | os.PathLike, member: str, out: str | os.PathLike) -> None:
    """Stream one member of a tar (any compression) or zip archive to ``out`` (atomically)."""
    archive, out = Path(archive), Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    wanted = member[2:] if member.startswith("./") else member
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            names = zf.namelist()
            if wanted not in names:
                raise DataError(
                    f"no member {member!r} (members: {', '.join(names[:10])}"
                    f"{' ...' if len(names) > 10 else ''})",
                    file=archive,
                    field="member",
                )
            info = zf.getinfo(wanted)
            with zf.open(info) as src:
                _copy(src, out, info.file_size, f"extract {wanted}")
        return
    seen: list[str] = []
    try:
        # "r|*": a forward-only stream; members before the wanted one are skipped, none written.
        with tarfile.open(archive, mode="r|*") as tar:
            for info in tar:
                name = info.name[2:] if info.name.startswith("./") else info.name
                if name != wanted:
                    seen.append(name)
                    continue
                if not info.isfile():
                    raise DataError(f"member {member!r} is not a regular file", file=archive, field="member")
                _copy(tar.extractfile(info), out, info.size, f"extract {wanted}")
                return
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        raise DataError(f"not a readable tar or zip archive ({exc})", file=archive) from exc
    raise DataError(
        f"no member {member!r} (members: {', '.join(seen[:10])}{' ...' if len(seen) > 10 else ''})",
        file=archive,
        field="member",
    )


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser("pipeline.data.download", __doc__)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--url", help="http(s) URL to download")
    source.add_argument("--archive", help="a local .tar/.tar.gz/.zip to extract --member from")
    parser.add_argument("--out", required=True, help="destination file")
    parser.add_argument(
        "--sha256",
        default=None,
        help="expected sha256 of the downloaded file (of the archive when --member is given)",
    )
    parser.add_argument("--member", default=None, help="extract only this file of the archive")
    parser.add_argument("--retries", type=int, default=5)
    parser.add_argument(
        "--backoff", type=float, default=2.0, help="first retry delay, seconds (doubles each retry)"
    )
    parser.add_argument("--timeout", type=float, default=60.0, help="connect/read timeout, seconds")
    parser.add_argument(
        "--adopt",
        nargs=2,
        action="append",
        default=[],
        metavar=("FILE", "LOG"),
        help="a file of the layout before downloads/by-url/ and its download log: moved onto --out "
        "when the pinned --sha256 or the log proves it is this URL's file",
    )
    parser.add_argument("--log", default=None)
    args = parser.parse_args(argv)
    if args.retries < 0:
        parser.error(f"--retries {args.retries}: a count of retries is 0 or more")
    if args.backoff < 0 or not args.timeout > 0:
        which = "--backoff" if args.backoff < 0 else "--timeout"
        parser.error(f"{which} {getattr(args, which[2:])}: seconds, more than 0 (backoff: 0 or more)")
    if Path(args.out).is_dir():
        parser.error(f"--out {args.out} is a folder: give the path of the file to write")
    refuse_overwriting_inputs({"--out": args.out, "--log": args.log}, {"--archive": args.archive})
    start_stage(args.log)
    sha = args.sha256
    # The same rule as the config schema (^[0-9a-f]{64}$), so a value the CLI takes is one that
    # config.yaml takes too.
    if sha is not None and not SHA256_RE.match(sha):
        hint = " (lowercase it)" if SHA256_RE.match(sha.lower()) else ""
        parser.error(f"--sha256 {sha!r} must be 64 lowercase hex digits{hint}")
    if args.archive:
        if not args.member:
            parser.error("--archive needs --member")
        if sha is not None:
            parser.error("--sha256 applies to downloads (--url); check the archive where it is fetched")
        if args.adopt:
            parser.error("--adopt applies to downloads (--url)")
        extract_member(args.archive, args.member, args.out)
        return 0
    if not args.member:
        download(
            args.url,
            args.out,
            sha256=sha,
            retries=args.retries,
            backoff=args.backoff,
            timeout=args.timeout,
            adopt=[tuple(pair) for pair in args.adopt],
        )
        return 0
    archive = Path(args.out + ".archive")
    download(args.url, archive, sha256=sha, retries=args.retries, backoff=args.backoff, timeout=args.timeout)
    extract_member(archive, args.member, args.out)
    archive.unlink()
    Path(str(archive) + ".sha256").unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    run_main(main)

"""Resuming a download only when the partial file provably belongs to the remote file (issue 14.5),
and the --sha256 format (issue 14.6). A local HTTP server on 127.0.0.1 sends ETag/Last-Modified
validators and honours If-Range as RFC 9110 says: a matching validator gets the 206 range, any other
the whole (current) file with 200."""

from __future__ import annotations

import hashlib
import json
import logging
import os

import pytest
from range_server import RangeServer, serving

from pipeline.core.cli import run_main
from pipeline.core.config import ConfigError, load_config, validate_config
from pipeline.core.storage import DataError
from pipeline.data.download import download, main

BODY = b"".join(hashlib.sha256(str(i).encode()).digest() for i in range(10_000))  # 320 kB
BODY_SHA = hashlib.sha256(BODY).hexdigest()
NEW_BODY = b"".join(hashlib.sha256(f"v2-{i}".encode()).digest() for i in range(10_000))
LAST_MODIFIED = "Wed, 21 Oct 2015 07:28:00 GMT"


@pytest.fixture
def remote():
    with serving(RangeServer(BODY, etag='"v1"', last_modified=LAST_MODIFIED)) as srv:
        yield srv


def _interrupted(remote: RangeServer, out, at: int = 100_000) -> bytes:
    """Run a download that the connection drops after ``at`` bytes; return what .part kept."""
    remote.cut_once = at
    with pytest.raises(DataError, match="after 0 retries"):
        download(remote.url, out, retries=0, backoff=0)
    return (out.parent / (out.name + ".part")).read_bytes()


def test_part_of_unknown_origin_is_not_trusted_without_sha256(remote, tmp_path, caplog):
    out = tmp_path / "x"
    (tmp_path / "x.part").write_bytes(os.urandom(100_000))  # not from this server
    with caplog.at_level(logging.INFO, logger="sieve.download"):
        download(remote.url, out, backoff=0)
    assert out.read_bytes() == BODY
    assert remote.requests[0]["Range"] is None  # fetched from zero, nothing appended
    assert "starting over" in caplog.text and "x.part" in caplog.text


def test_part_of_unknown_origin_with_sha256_is_refetched_when_it_does_not_verify(remote, tmp_path):
    out = tmp_path / "x"
    (tmp_path / "x.part").write_bytes(os.urandom(100_000))
    assert download(remote.url, out, sha256=BODY_SHA, backoff=0) == BODY_SHA
    assert out.read_bytes() == BODY
    assert [r["Range"] is not None for r in remote.requests] == [True, False]


def test_validator_is_stored_beside_the_part_and_sent_as_if_range(remote, tmp_path):
    out = tmp_path / "x"
    kept = _interrupted(remote, out)
    meta = json.loads((tmp_path / "x.part.json").read_text())
    assert meta["url"] == remote.url and meta["validator"] == '"v1"'
    download(remote.url, out, backoff=0)
    assert out.read_bytes() == BODY
    assert remote.requests[-1] == {"Range": f"bytes={len(kept)}-", "If-Range": '"v1"'}
    assert not (tmp_path / "x.part.json").exists() and not (tmp_path / "x.part").exists()


def test_remote_changed_since_the_part_restarts_from_zero(remote, tmp_path):
    out = tmp_path / "x"
    _interrupted(remote, out)
    remote.body, remote.etag = NEW_BODY, '"v2"'
    remote.last_modified = "Thu, 22 Oct 2015 07:28:00 GMT"
    download(remote.url, out, backoff=0)  # no sha256: only the validator can tell
    assert out.read_bytes() == NEW_BODY  # not the old head + the new tail


def test_last_modified_when_the_etag_is_weak_or_absent(remote, tmp_path):
    remote.etag = 'W/"weak"'  # weak tags may not be used in If-Range
    out = tmp_path / "x"
    _interrupted(remote, out)
    download(remote.url, out, backoff=0)
    assert out.read_bytes() == BODY
    assert remote.requests[-1]["If-Range"] == LAST_MODIFIED


def test_server_without_validators_resumes_only_within_the_run(remote, tmp_path, caplog):
    remote.etag = remote.last_modified = None
    remote.cut_once = 100_000
    download(remote.url, tmp_path / "a", backoff=0)  # the retry of this run may resume
    assert (tmp_path / "a").read_bytes() == BODY
    assert remote.requests[1]["Range"] is not None
    remote.requests.clear()
    out = tmp_path / "b"
    _interrupted(remote, out)
    with caplog.at_level(logging.WARNING, logger="sieve.download"):
        download(remote.url, out, backoff=0)  # a later run cannot tell: from zero
    assert out.read_bytes() == BODY and remote.requests[-1]["Range"] is None
    assert "starting over" in caplog.text


def test_part_of_another_url_is_not_resumed(remote, tmp_path):
    out = tmp_path / "x"
    _interrupted(remote, out)
    meta_path = tmp_path / "x.part.json"
    meta_path.write_text(
        json.dumps({**json.loads(meta_path.read_text()), "url": "http://elsewhere.invalid/f"})
    )
    download(remote.url, out, backoff=0)
    assert out.read_bytes() == BODY and remote.requests[-1]["Range"] is None


@pytest.mark.parametrize("value", ["A" * 64, "abc", "g" * 64])
def test_sha256_on_the_command_line_must_be_lowercase_hex_as_in_the_config(remote, tmp_path, capsys, value):
    with pytest.raises(SystemExit) as exc:
        run_main(main, ["--url", remote.url, "--out", str(tmp_path / "x"), "--sha256", value])
    assert exc.value.code == 2
    assert "64 lowercase hex digits" in capsys.readouterr().err
    assert remote.requests == []


@pytest.mark.parametrize("value", ["xyz", "A" * 64])
@pytest.mark.parametrize(
    "dataset, key", [("squad", "datasets.squad.source.sha256"), ("nq", "datasets.nq.source.corpus.sha256")]
)
def test_malformed_sha256_in_the_config_is_reported_as_a_bad_value(dataset, key, value):
    config = load_config()
    source = config["datasets"][dataset]["source"]
    (source if dataset == "squad" else source["corpus"])["sha256"] = value
    with pytest.raises(ConfigError) as exc:
        validate_config(config)
    assert f"config key '{key}': String should match pattern '^[0-9a-f]{{64}}$', got '{value}'" in str(
        exc.value
    )

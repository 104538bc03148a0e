"""Where each source file of a declared dataset comes from: the workflow's view of ``source``.

A role is a local path (read in place), a URL, or a member of an archive (at a URL or a local path).
A download is keyed by what it is, never by the dataset that declared it first, as pip's and the
Hugging Face hub's caches key theirs: a URL is fetched once to ``downloads/by-url/<key>/<name>``
(key: the first 16 hex digits of the URL's sha256; name: its last path segment, for people), and a
member is extracted once to ``<archive>.d/<key of the member>/<name>`` beside its archive, where a
local archive stands for ``downloads/by-path/<key of its path>/<name>``. NQ and TriviaQA read DPR's
13 GB corpus from one file whichever of them is declared, and MS MARCO's five roles one tarball;
dropping a dataset from the config leaves every other dataset's downloads and inputs as they were.

A pinned ``sha256`` is not part of the key: pinning a downloaded file must not fetch it again.
Downloads of the layout before this one (``downloads/<dataset>/<role>``, ``.../archives/<name>``)
are adopted by the download job when their own log proves the URL (``legacy_locations``).
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import re
import shlex
from dataclasses import dataclass
from urllib.parse import unquote, urlparse

from pipeline.core.config import ConfigError, dataset_config
from pipeline.workflow.paths import archive_member, source_file

from . import check_roles


@dataclass(frozen=True)
class SourceSpec:
    role: str
    url: str | None = None
    path: str | None = None
    sha256: str | None = None
    member: str | None = None


def _spec(role: str, value: object, where: str) -> SourceSpec:
    if isinstance(value, str):
        return SourceSpec(role, path=value)
    if isinstance(value, dict) and ("url" in value or "path" in value):
        return SourceSpec(
            role,
            url=value.get("url"),
            path=value.get("path"),
            sha256=value.get("sha256"),
            member=value.get("member"),
        )
    raise ConfigError(f"{where}: expected a path, {{url, sha256, member}} or {{path, member}}")


def dataset_sources(config: dict, dataset: str) -> dict[str, SourceSpec]:
    """role -> SourceSpec of a declared dataset (a single file spec is the role ``source``)."""
    spec = dataset_config(config, dataset)
    src = spec.get("source")
    if src is None:
        raise ConfigError(f"datasets.{dataset}: 'source' is required for format {spec['format']!r}")
    single = isinstance(src, str) or (isinstance(src, dict) and ("url" in src or "path" in src))
    mapping = {"source": src} if single else src
    check_roles(spec["format"], mapping, dataset)
    return {role: _spec(role, value, f"datasets.{dataset}.source.{role}") for role, value in mapping.items()}


def _declared(config: dict):
    for name, spec in config["datasets"].items():
        if spec.get("format") != "synthkb" and spec.get("source") is not None:
            yield name, dataset_sources(config, name)


def _key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def file_name(text: str) -> str:
    """A file name for people from a URL path or a member: its last segment, percent-decoded, with
    only letters, digits and ``._+-`` kept (no leading dot: never ``..``), at most 100 characters.
    The key folder above it makes the file unique; the name only says what it is."""
    name = posixpath.basename(unquote(text).rstrip("/"))
    name = re.sub(r"[^A-Za-z0-9._+-]+", "_", name).lstrip(".")[:100]
    return name or "download"


def url_file(url: str) -> str:
    """Where ``url`` is downloaded, whoever declares it."""
    return source_file("by-url", _key(url), file_name(urlparse(url).path))


def member_file(source: SourceSpec) -> str:
    """Where the member of a source's archive (at its URL, else its local path) is extracted to."""
    if source.url:
        archive = url_file(source.url)
    else:
        # the local archive's own key folder: the same file under two spellings (./a, a) is one archive
        archive = source_file("by-path", _key(os.path.normpath(source.path)), file_name(source.path))
    return archive_member(archive, _key(source.member), file_name(source.member))


def input_path(config: dict, dataset: str, role: str) -> str:
    """The local file prepare_data reads for ``role``."""
    source = dataset_sources(config, dataset)[role]
    if source.member is not None:
        return member_file(source)
    return url_file(source.url) if source.url else source.path


def prepare_inputs(config: dict, dataset: str) -> dict[str, str]:
    return {role: input_path(config, dataset, role) for role in dataset_sources(config, dataset)}


def downloads(config: dict) -> dict[str, SourceSpec]:
    """Every file the declared datasets download or extract -> what it is (a URL's file carries the
    sha256 pinned for that URL; a member, its archive's URL or path and the member)."""
    found: dict[str, SourceSpec] = {}
    for _, sources in _declared(config):
        for source in sources.values():
            if source.url:
                target = url_file(source.url)
                found[target] = SourceSpec(target, url=source.url, sha256=url_sha256(config, source.url))
            if source.member is not None:
                target = member_file(source)
                found[target] = SourceSpec(target, url=source.url, path=source.path, member=source.member)
    return found


def download_source(config: dict, target: str) -> SourceSpec:
    """What ``target`` (a path under downloads/) is a download or an extraction of."""
    source = downloads(config).get(target)
    if source is None:
        raise ConfigError(f"{target}: no declared dataset downloads or extracts this file")
    return source


def url_sha256(config: dict, url: str) -> str | None:
    """The sha256 pinned for the file at ``url`` (any role declaring the URL may carry it, as a file
    or as the archive of a member; they must agree: it is one file)."""
    found = {
        s.sha256 for _, sources in _declared(config) for s in sources.values() if s.url == url and s.sha256
    }
    if len(found) > 1:
        raise ConfigError(f"different sha256 values configured for {url}: {sorted(found)}")
    return found.pop() if found else None


def archive_input(config: dict, target: str) -> str:
    """The archive an extracted member ``target`` is read from: the URL's download or the local file."""
    source = download_source(config, target)
    return url_file(source.url) if source.url else source.path


def download_args(config: dict, target: str) -> str:
    """Arguments of ``python -m pipeline.data.download`` that produce ``target``: the URL with its
    pinned sha256 and where the layout before by-url kept its file, or the archive and member."""
    source = download_source(config, target)
    if source.member is not None:
        return shlex.join(["--archive", archive_input(config, target), "--member", source.member])
    args = ["--url", source.url]
    if source.sha256:
        args += ["--sha256", source.sha256]
    for old, old_log in legacy_locations(config, source.url):
        args += ["--adopt", old, old_log]
    return shlex.join(args)


def legacy_locations(config: dict, url: str) -> list[tuple[str, str]]:
    """(file, its download log) wherever the layout before downloads/by-url/ put ``url`` for a dataset
    of this config: downloads/<dataset>/<role>, or downloads/<dataset>/archives/<name> for an archive."""
    found = []
    for name, sources in _declared(config):
        for role, source in sources.items():
            if source.url != url:
                continue
            if source.member is None:
                found.append((f"downloads/{name}/{role}", f"logs/download/{name}/{role}.log"))
            else:
                old = posixpath.basename(unquote(urlparse(url).path)) or "archive"
                found.append((f"downloads/{name}/archives/{old}", f"logs/download_archive/{name}/{old}.log"))
    return list(dict.fromkeys(found))

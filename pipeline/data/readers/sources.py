"""Where each source file of a declared dataset comes from: the workflow's view of ``source``.

A role is a local path (used in place), a URL (downloaded to ``downloads/{dataset}/{role}``), or a
member of an archive (the archive is fetched once to ``downloads/{dataset}/archives/{name}``, each
member extracted to ``downloads/{dataset}/{role}``). A download shared by several datasets or roles
(NQ and TriviaQA share DPR's 13 GB Wikipedia TSV; MS MARCO's five files share one tarball) is
fetched once: every user points at the target of the first dataset/role that declares it.
"""

from __future__ import annotations

import posixpath
import shlex
from dataclasses import dataclass
from urllib.parse import unquote, urlparse

from pipeline.core.config import ConfigError, dataset_config

from . import check_roles


@dataclass(frozen=True)
class SourceSpec:
    role: str
    url: str | None = None
    path: str | None = None
    sha256: str | None = None
    member: str | None = None

    @property
    def key(self) -> tuple[str | None, str | None, str | None]:
        return self.url, self.path, self.member


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


def _download_owner(config: dict, source: SourceSpec) -> tuple[str, str]:
    for name, sources in _declared(config):
        for role, other in sources.items():
            if other.key == source.key:
                return name, role
    raise ConfigError(f"source {source.key} is not declared")  # unreachable for declared sources


def archive_name(url: str) -> str:
    name = posixpath.basename(unquote(urlparse(url).path))
    return name or "archive"


def _archive_owner(config: dict, url: str) -> str:
    for name, sources in _declared(config):
        if any(s.url == url and s.member for s in sources.values()):
            return name
    raise ConfigError(f"no dataset declares an archive at {url}")


def archive_target(config: dict, url: str) -> str:
    owner = _archive_owner(config, url)
    target = f"downloads/{owner}/archives/{archive_name(url)}"
    for name, sources in _declared(config):
        for role, s in sources.items():
            if (
                s.url
                and s.member
                and s.url != url
                and _archive_owner(config, s.url) == owner
                and archive_name(s.url) == archive_name(url)
            ):
                raise ConfigError(
                    f"datasets.{name}.source.{role}: archives {s.url} and {url} "
                    f"would both be saved as {target}; rename one"
                )
    return target


def archive_sha256(config: dict, url: str) -> str | None:
    """The sha256 configured for an archive URL (any role may carry it; they must agree)."""
    found = {
        s.sha256 for _, sources in _declared(config) for s in sources.values() if s.url == url and s.sha256
    }
    if len(found) > 1:
        raise ConfigError(f"different sha256 values configured for {url}: {sorted(found)}")
    return found.pop() if found else None


def input_path(config: dict, dataset: str, role: str) -> str:
    """The local file prepare_data reads for ``role``."""
    source = dataset_sources(config, dataset)[role]
    if source.url is None and source.member is None:
        return source.path
    owner, owner_role = _download_owner(config, source)
    return f"downloads/{owner}/{owner_role}"


def prepare_inputs(config: dict, dataset: str) -> dict[str, str]:
    return {role: input_path(config, dataset, role) for role in dataset_sources(config, dataset)}


def download_input(config: dict, dataset: str, role: str) -> list[str]:
    """What the download of ``role`` reads first: the archive holding its member, else nothing."""
    source = _role(config, dataset, role)
    if source.member is None:
        return []
    return [archive_target(config, source.url)] if source.url else [source.path]


def download_args(config: dict, dataset: str, role: str, pin: bool = True) -> str:
    """Arguments of ``python -m pipeline.data.download`` that produce downloads/{dataset}/{role}
    (without ``pin``, what the rule records: a pinned digest is checked, not recorded)."""
    source = _role(config, dataset, role)
    if source.member is not None:
        return shlex.join(["--archive", download_input(config, dataset, role)[0], "--member", source.member])
    args = ["--url", source.url]
    if source.sha256 and pin:
        args += ["--sha256", source.sha256]
    return shlex.join(args)


def pinned_sha256(
    config: dict, dataset: str, role: str | None = None, archive: str | None = None
) -> str | None:
    """The sha256 pinned for downloads/{dataset}/{role} (or for the archive named ``archive``)."""
    if archive is not None:
        for source in dataset_sources(config, dataset).values():
            if source.url and source.member and archive_name(source.url) == archive:
                return archive_sha256(config, source.url)
        return None
    source = _role(config, dataset, role)
    return source.sha256 if source.member is None else None


def archive_args(config: dict, dataset: str, archive: str, pin: bool = True) -> str:
    """Arguments that fetch downloads/{dataset}/archives/{archive} (``pin``: as download_args)."""
    for source in dataset_sources(config, dataset).values():
        if source.url and source.member and archive_name(source.url) == archive:
            args = ["--url", source.url]
            sha = archive_sha256(config, source.url) if pin else None
            return shlex.join(args + ["--sha256", sha] if sha else args)
    raise ConfigError(f"datasets.{dataset}: no archive source named {archive!r}")


def _role(config: dict, dataset: str, role: str) -> SourceSpec:
    sources = dataset_sources(config, dataset)
    if role not in sources:
        raise ConfigError(f"datasets.{dataset}.source: no role {role!r} (roles: {', '.join(sources)})")
    source = sources[role]
    if source.url is None and source.member is None:
        raise ConfigError(
            f"datasets.{dataset}.source.{role} is the local file {source.path}; there is nothing to download"
        )
    return source

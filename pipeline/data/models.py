"""Fetch a Hugging Face model's files into a local folder, so jobs on nodes without a network read them.

    python -m pipeline.data.models --name bert-base-uncased --out-dir resources/models/bert-base-uncased

Each file is downloaded from ``{endpoint}/{name}/resolve/{revision}/{file}`` (the hub's URL scheme;
``--endpoint``, else ``$HF_ENDPOINT``, else https://huggingface.co) with the resumable, retried,
checksummed downloader of :mod:`pipeline.data.download`: an interrupted fetch continues where it
stopped, and a file whose pinned size or sha256 differs is deleted and refused. ``config.json`` and
one weights file (``model.safetensors``, else ``pytorch_model.bin``) are required; the tokenizer files
a repository has are fetched, those it lacks (HTTP 404) are skipped. The folder gets the
``checksums.json`` the model loaders verify, and ``prefetch.json`` (the source, revision and each
file's size and sha256) written last: a folder with it is complete.

Only the models in ``PINS`` carry a revision and file digests; any other name is fetched from the
``main`` revision and its digests are recorded (``prefetch.json``) for pinning.
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.core.cli import run_main, stage_parser, start_stage
from pipeline.core.storage import DataError, atomic_open, write_checksums
from pipeline.data.download import NotFound, download

log = logging.getLogger("sieve.models")

DEFAULT_ENDPOINT = "https://huggingface.co"
MODELS_DIR = "resources/models"  # where the workflow keeps fetched models (resources/models/<name>)
MARKER = "prefetch.json"
PREFETCH_HINT = (
    "run `snakemake --cores 1 prefetch` (one dataset: resources/prefetch/<dataset>.json) where the network "
    "is reachable (docs/cluster.md)"
)

REQUIRED = ("config.json",)
WEIGHTS = ("model.safetensors", "pytorch_model.bin")  # the first the repository has
TOKENIZER = (
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.txt",
    "special_tokens_map.json",
    "merges.txt",
    "vocab.json",
    "spiece.model",
    "sentencepiece.bpe.model",
)

# A hub repository id (`name` or `owner/name`), as the hub spells them.
HUB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")


@dataclass(frozen=True)
class FilePin:
    size: int | None = None
    sha256: str | None = None


@dataclass(frozen=True)
class ModelPin:
    revision: str = "main"
    files: dict[str, FilePin] = field(default_factory=dict)


# bert-base-uncased at commit 86b5e09 of its hub repository, the revision hub caches hold; the
# safetensors' size and sha256 are that commit's file as a published inventory of such a cache records
# them (no network here to check them again). Its small files, and bert-large-uncased and any other
# name, are not pinned: prefetch.json records what a first fetch got, to add here.
PINS: dict[str, ModelPin] = {
    "bert-base-uncased": ModelPin(
        revision="86b5e0934494bd15c9632b12f734a8a67f723594",
        files={
            "model.safetensors": FilePin(
                size=440_449_768, sha256="68d45e234eb4a928074dfd868cead0219ab85354cc53d20e772753c6bb9169d3"
            )
        },
    ),
}


def is_hub_name(name: str) -> bool:
    """A base that names a hub repository, not a folder here ('minilm' is the offline package's)."""
    if name == "minilm" or os.path.isdir(name):
        return False
    return bool(HUB_NAME.match(name)) and ".." not in name


def local_folder(name: str, models_dir: str = MODELS_DIR) -> str:
    """Where the workflow keeps hub model ``name``."""
    return f"{models_dir}/{name}"


def hub_name_of(base: str, models_dir: str = MODELS_DIR) -> str:
    """The hub name a base stands for: ``local_folder``'s inverse (any other base is returned as it is),
    for what looks a model up by name (the cost model's architectures)."""
    prefix = models_dir.rstrip("/") + "/"
    return base[len(prefix) :] if base.startswith(prefix) else base


def endpoint_of(explicit: str | None = None) -> str:
    return (explicit or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def file_url(endpoint: str, name: str, revision: str, file: str) -> str:
    return f"{endpoint}/{name}/resolve/{revision}/{file}"


def _fetch_file(url: str, out: Path, pin: FilePin, retries: int, backoff: float, timeout: float) -> str:
    digest = download(
        url, out, sha256=pin.sha256, retries=retries, backoff=backoff, timeout=timeout, warn_unpinned=False
    )
    Path(f"{out}.sha256").unlink(missing_ok=True)  # the digest goes into prefetch.json instead
    size = out.stat().st_size
    if pin.size is not None and size != pin.size:
        out.unlink()
        raise DataError(
            f"{size} bytes, but {pin.size} are pinned; the file was deleted (a changed upstream file: "
            "update the pin)",
            file=url,
            field="size",
        )
    return digest


def fetch_model(
    name: str,
    out_dir: str | os.PathLike,
    *,
    endpoint: str | None = None,
    revision: str | None = None,
    retries: int = 5,
    backoff: float = 2.0,
    timeout: float = 60.0,
) -> dict:
    """Fetch hub model ``name`` into ``out_dir``; return the record written to its ``prefetch.json``."""
    if not is_hub_name(name):
        raise DataError(f"{name!r} is not a hub model name (owner/name); a local folder is used as it is")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).unlink(missing_ok=True)  # incomplete until rewritten
    pin = PINS.get(name, ModelPin())
    if revision is not None and revision != pin.revision:
        pin = ModelPin(revision=revision)  # another revision: the pinned digests are not its files'
    base = endpoint_of(endpoint)
    got: dict[str, dict] = {}

    def one(file: str, optional: bool) -> bool:
        url = file_url(base, name, pin.revision, file)
        try:
            digest = _fetch_file(url, out / file, pin.files.get(file, FilePin()), retries, backoff, timeout)
        except NotFound:
            if optional:
                return False
            raise
        got[file] = {"size": (out / file).stat().st_size, "sha256": digest}
        return True

    for file in REQUIRED:
        one(file, optional=False)
    if not any(one(file, optional=True) for file in WEIGHTS):
        raise DataError(
            f"no weights file ({' or '.join(WEIGHTS)}) at revision {pin.revision}",
            file=file_url(base, name, pin.revision, ""),
        )
    for file in TOKENIZER:
        one(file, optional=True)
    if not any(file in got for file in ("tokenizer.json", "vocab.txt", "vocab.json", "spiece.model")):
        raise DataError(
            f"no tokenizer file ({', '.join(TOKENIZER)})", file=file_url(base, name, pin.revision, "")
        )
    names = sorted(got)
    write_checksums(out, names)  # what hf_folders.load_model verifies on every load
    unpinned = sorted(f for f in names if pin.files.get(f, FilePin()).sha256 is None)
    record = {
        "name": name,
        "endpoint": base,
        "revision": pin.revision,
        "revision_pinned": name in PINS or revision is not None,
        "files": got,
        "unpinned_files": unpinned,
    }
    with atomic_open(out / MARKER, "w", encoding="utf-8") as handle:
        json.dump(record, handle, indent=2)
    total = sum(f["size"] for f in got.values())
    log.info("fetched %s@%s into %s: %d files, %d bytes", name, pin.revision, out, len(got), total)
    if unpinned:
        log.warning(
            "%s: no pinned sha256 for %s; their digests are in %s", name, ", ".join(unpinned), out / MARKER
        )
    return record


def require_local(path: str | os.PathLike) -> None:
    """Refuse, in one line naming the prefetch command, a folder under resources/models/ without its
    config or weights (a fetch not run, or cut short), or a hub name while the hub is off
    (HF_HUB_OFFLINE): either would otherwise be a traceback from transformers, or a wait on a network
    the job does not have."""
    p = Path(path)
    fetched_here = MODELS_DIR + "/" in p.as_posix()
    if p.is_dir():
        complete = (p / "config.json").is_file() and any((p / w).is_file() for w in WEIGHTS)
        if fetched_here and not complete:
            raise DataError(f"the model folder has no config.json or weights: {PREFETCH_HINT}", file=p)
        return
    if fetched_here:
        raise DataError(f"no such model folder: {PREFETCH_HINT}", file=p)
    # huggingface_hub's reading of these variables
    offline = any(
        os.environ.get(v, "").upper() in ("1", "ON", "YES", "TRUE")
        for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )
    if offline and is_hub_name(str(path)):
        raise DataError(
            f"not a local folder, and jobs do not reach the model hub (HF_HUB_OFFLINE): {PREFETCH_HINT}",
            file=str(path),
        )


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser("pipeline.data.models", __doc__)
    parser.add_argument("--name", required=True, help="hub model name, e.g. bert-base-uncased or owner/name")
    parser.add_argument("--out-dir", required=True, help="the local model folder to fill")
    parser.add_argument(
        "--endpoint", default=None, help=f"hub URL (default $HF_ENDPOINT, else {DEFAULT_ENDPOINT})"
    )
    parser.add_argument(
        "--revision", default=None, help="a commit or branch (default: the pinned one, else main)"
    )
    parser.add_argument("--retries", type=int, default=5)
    parser.add_argument("--backoff", type=float, default=2.0)
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--log", default=None)
    args = parser.parse_args(argv)
    if args.retries < 0 or args.backoff < 0 or not args.timeout > 0:
        parser.error("--retries and --backoff are 0 or more, --timeout more than 0")
    start_stage(args.log)
    fetch_model(
        args.name,
        args.out_dir,
        endpoint=args.endpoint,
        revision=args.revision,
        retries=args.retries,
        backoff=args.backoff,
        timeout=args.timeout,
    )
    return 0


if __name__ == "__main__":
    run_main(main)

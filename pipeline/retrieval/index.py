"""Build FAISS indexes (inner product) from gathered embedding shards.

The index type is any FAISS ``index_factory`` string (``Flat``, ``SQfp16``, ``IVF4096,Flat``, ``HNSW32``,
``IVF65536,PQ64``...); the metric is always inner product, which is cosine for the normalised embeddings
of a ``cosine`` retriever. Indexes that need training (IVF, PQ) are trained once on a seeded sample of
``--train-size`` vectors drawn across all shards; the trained empty index is then cloned for every
index shard. ``--shards m`` splits the ``n`` embedding shards into ``m`` contiguous groups and writes one
index per group, so that a corpus whose index does not fit in one machine's memory is built and
searched one part at a time (``pipeline.retrieval.search`` merges the parts' top-k). Vectors are added in chunks
converted from fp16, never the whole corpus as fp32 at once (beyond what the index itself stores).

Output folder::

    shard{j}of{m}.faiss          one FAISS index per group
    shard{j}of{m}.pids.parquet   the pid of each index row (FAISS row ids are 0..n_j-1)
    index.json                   written last: factory, metric, dim, counts, files and their sha256,
                                 training sample

Only ``index.json`` is a declared output, so Snakemake never notices a damaged part; search compares
each part with the sha256 recorded here before it reads it (``verify_part``).

CLI::

    python -m pipeline.workflow.jobs squad build_index > index.json
    python -m pipeline.retrieval.index --settings index.json --embeddings results/squad/embeddings/zeroshot \
        --out-dir results/squad/index/zeroshot [--factory Flat --shards 1 ...: over the document] [--no-gpu]

The settings (pipeline.core.settings.job_documents.IndexJob) come as one document, the workflow's job's
(``--settings-json``) or a file (``--settings``), each flag over it.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import faiss
import numpy as np
import pyarrow as pa

from pipeline.core.cli import run_main, stage_parser, start_stage
from pipeline.core.config import ConfigError
from pipeline.core.jobs import add_settings_flags, job_settings
from pipeline.core.schemas import PASSAGE_IDS_SCHEMA
from pipeline.core.settings.job_documents import IndexJob
from pipeline.core.storage import (
    DataError,
    atomic_path,
    file_sha256,
    read_json_object,
    write_json,
    write_table,
)
from pipeline.retrieval.embeddings import EmbeddingSet, read_rows, shard_name
from pipeline.retrieval.encode import make_progress

log = logging.getLogger("sieve.index")

INDEX_MANIFEST = "index.json"
PART_NAME = re.compile(r"shard\d+of\d+\.(faiss|pids\.parquet)")
FORMAT = "sieve-index/1"
DAMAGED_HINT = "delete the index folder and rerun build_index (the rule that builds it)"


def shard_groups(n_embedding_shards: int, n_index_shards: int) -> list[list[int]]:
    """Contiguous groups of embedding shards, one per index shard (sizes differ by at most one)."""
    if not 1 <= n_index_shards <= n_embedding_shards:
        raise ConfigError(
            f"index.shards must be between 1 and the number of embedding shards "
            f"({n_embedding_shards}), got {n_index_shards}"
        )
    bounds = [j * n_embedding_shards // n_index_shards for j in range(n_index_shards + 1)]
    return [list(range(bounds[j], bounds[j + 1])) for j in range(n_index_shards)]


@contextmanager
def faiss_config_error(message: str) -> Iterator[None]:
    """A RuntimeError of FAISS (a C++ exception, its trace in the text) as a one-line ConfigError:
    ``message`` and FAISS's last line, the reason."""
    try:
        yield
    except RuntimeError as exc:
        reason = str(exc).strip().splitlines()[-1]
        raise ConfigError(f"{message}: {reason}") from None


def new_index(dim: int, factory: str) -> faiss.Index:
    with faiss_config_error(
        f"index.factory {factory!r} is not a valid FAISS index_factory string for dimension {dim}"
    ):
        return faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT)


def gpu_count(allowed: bool) -> int:
    """GPUs FAISS may use: 0 with faiss-cpu, or when the config forbids them."""
    return faiss.get_num_gpus() if allowed and hasattr(faiss, "get_num_gpus") else 0


def to_gpu(index: faiss.Index, allowed: bool) -> tuple[faiss.Index, bool]:
    """The index on all GPUs when possible; unsupported types (HNSW...) stay on CPU."""
    if gpu_count(allowed) == 0:
        return index, False
    try:
        return faiss.index_cpu_to_all_gpus(index), True
    except (RuntimeError, AttributeError) as exc:
        log.warning(
            "FAISS cannot put this index type on GPU (%s); using the CPU", str(exc).strip().splitlines()[-1]
        )
        return index, False


def to_cpu(index: faiss.Index, on_gpu: bool) -> faiss.Index:
    return faiss.index_gpu_to_cpu(index) if on_gpu else index


def training_sample(embeddings: EmbeddingSet, size: int, seed: int) -> np.ndarray:
    """``size`` rows (all when the corpus is smaller) chosen with a seeded generator, as float32."""
    if embeddings.count <= size:
        rows = np.arange(embeddings.count)
    else:
        rows = np.sort(np.random.default_rng(seed).choice(embeddings.count, size, replace=False))
    parts = []
    for shard in embeddings.shards:
        local = rows[(rows >= shard.offset) & (rows < shard.offset + shard.count)] - shard.offset
        if local.size:
            parts.append(read_rows(shard.embeddings, local).astype(np.float32))
    return np.concatenate(parts) if parts else np.zeros((0, embeddings.dim), np.float32)


def build_index(
    embeddings_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    factory: str,
    shards: int = 1,
    train_size: int = 100_000,
    seed: int = 0,
    gpu: bool = True,
    add_chunk: int = 65_536,
    progress: bool = True,
) -> dict:
    """Build ``shards`` indexes from the embedding folder; write them and ``index.json`` (last)."""
    embeddings = EmbeddingSet(embeddings_dir)
    out_dir = Path(out_dir)
    groups = shard_groups(len(embeddings.shards), shards)
    if embeddings.count == 0:
        raise DataError("no embeddings to index", file=Path(embeddings_dir) / "manifest.json")
    began = time.perf_counter()
    # An index.json beside parts being rewritten would pass for a complete index.
    (out_dir / INDEX_MANIFEST).unlink(missing_ok=True)
    template = new_index(embeddings.dim, factory)
    trained_on = 0
    if not template.is_trained:
        sample = training_sample(embeddings, train_size, seed)
        trained_on = len(sample)
        log.info("training %s on %d vectors", factory, trained_on)
        work, on_gpu = to_gpu(template, gpu)
        with faiss_config_error(
            f"index.factory {factory!r} cannot be trained on {trained_on} "
            "vectors (index.train_size / corpus too small?)"
        ):
            work.train(sample)
        template = to_cpu(work, on_gpu)
        del sample
    entries = []
    with make_progress("vectors", progress) as bar:
        for j, group in enumerate(groups):
            count = sum(embeddings.shards[i].count for i in group)
            task = bar.add_task(f"index part {j + 1}/{len(groups)}", total=count)
            index, on_gpu = to_gpu(faiss.clone_index(template), gpu)
            for _, chunk in embeddings.iter_rows(add_chunk, shards=group):
                index.add(chunk.astype(np.float32))
                bar.advance(task, len(chunk))
            index = to_cpu(index, on_gpu)
            name = shard_name(j, len(groups))
            with atomic_path(out_dir / f"{name}.faiss") as tmp:
                faiss.write_index(index, str(tmp))
            write_table(
                out_dir / f"{name}.pids.parquet", pa.table([embeddings.ids(group)], schema=PASSAGE_IDS_SCHEMA)
            )
            entries.append(
                {
                    "index": f"{name}.faiss",
                    "pids": f"{name}.pids.parquet",
                    "count": int(index.ntotal),
                    "embedding_shards": group,
                    "bytes": (out_dir / f"{name}.faiss").stat().st_size,
                    # One more read of each part: search checks these before it loads a part.
                    "sha256": file_sha256(out_dir / f"{name}.faiss"),
                    "pids_sha256": file_sha256(out_dir / f"{name}.pids.parquet"),
                }
            )
            del index
    manifest = {
        "format": FORMAT,
        "factory": factory,
        "metric": "inner_product",
        "dim": embeddings.dim,
        "count": embeddings.count,
        "trained_on": trained_on,
        "seed": seed,
        "gpu": gpu_count(gpu) > 0,
        "faiss_version": faiss.__version__,
        "embeddings": str(embeddings_dir),
        "shards": entries,
    }
    write_json(out_dir / INDEX_MANIFEST, manifest)
    remove_stale_parts(out_dir, {name for e in entries for name in (e["index"], e["pids"])})
    log.info(
        "indexed %d vectors with %s in %d part(s), %.1f s, %.1f MiB on disk",
        embeddings.count,
        factory,
        len(groups),
        time.perf_counter() - began,
        sum(e["bytes"] for e in entries) / 2**20,
    )
    return manifest


def remove_stale_parts(out_dir: Path, keep: set[str]) -> None:
    """Delete the parts a build with another ``index.shards`` left (index.json no longer lists them)."""
    for path in sorted(out_dir.glob("shard*of*")):
        if PART_NAME.fullmatch(path.name) and path.name not in keep:
            log.info("removing %s (a part of an index built with another index.shards)", path)
            path.unlink()


def load_index_manifest(index_dir: str | os.PathLike) -> dict:
    path = Path(index_dir) / INDEX_MANIFEST
    manifest = read_json_object(
        path,
        keys=("shards", "dim", "count", "factory"),
        missing="index manifest not found (did build_index run?)",
    )
    if not isinstance(manifest["shards"], list):
        raise DataError(f"must be a list of index parts: {DAMAGED_HINT}", file=path, field="shards")
    for j, entry in enumerate(manifest["shards"]):
        if not isinstance(entry, dict) or not {"index", "pids"} <= entry.keys():
            raise DataError(
                f"an index part needs 'index' and 'pids' file names: {DAMAGED_HINT}",
                file=path,
                record=j,
                field="shards",
            )
    return manifest


def verify_part(path: Path, sha256: str | None) -> None:
    """Refuse an index part that is missing or whose sha256 differs from the one ``build_index``
    recorded (None: an index built before digests were recorded, which is read unchecked).

    A FAISS file overwritten with bytes of the same size loads without complaint and ranks garbage,
    and a truncated one stops FAISS with a C++ assertion; both are one line naming the file here.
    """
    if not path.exists():
        raise DataError(f"index part not found: {DAMAGED_HINT}", file=path)
    if sha256 is None:
        return
    actual = file_sha256(path)
    if actual != sha256:
        raise DataError(
            f"sha256 {actual[:12]}… differs from {str(sha256)[:12]}… recorded in {INDEX_MANIFEST} when "
            f"the index was built (damaged or overwritten since): {DAMAGED_HINT}",
            file=path,
        )


def read_part(path: Path, sha256: str | None) -> faiss.Index:
    """One index part, checked against its recorded digest; a file FAISS cannot read is a DataError
    naming it (an index built without digests gets no other check)."""
    verify_part(path, sha256)
    try:
        return faiss.read_index(str(path))
    except RuntimeError as exc:
        reason = " ".join(str(exc).split())
        raise DataError(f"not a readable FAISS index ({reason}): {DAMAGED_HINT}", file=path) from None


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser("pipeline.retrieval.index", __doc__.split("\n")[0])
    parser.add_argument("--embeddings", required=True, help="gathered embedding folder")
    parser.add_argument("--out-dir", required=True, help="index folder")
    add_settings_flags(parser, IndexJob, "index (config section index), the seed")
    parser.add_argument("--add-chunk", type=int, default=65_536, help="vectors added per call")
    parser.add_argument("--no-gpu", action="store_true", help="never use FAISS GPUs")
    parser.add_argument("--threads", type=int, help="OpenMP threads for FAISS")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--log", help="append the log to this file")
    args = parser.parse_args(argv)
    job = job_settings(IndexJob, args)  # before any work: a bad document or flag is one line
    start_stage(args.log, args.threads, libraries=("faiss",))
    build_index(
        args.embeddings,
        args.out_dir,
        gpu=not args.no_gpu,
        add_chunk=args.add_chunk,
        progress=not args.no_progress,
        **job.model_dump(),
    )
    return 0


if __name__ == "__main__":
    run_main(main)

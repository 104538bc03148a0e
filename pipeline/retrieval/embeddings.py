"""Embedding shards on disk: written incrementally, read back in bounded chunks, gathered in a manifest.

Layout of ``results/{dataset}/embeddings/{model}/``::

    shard{i}of{n}.npy            fp16 [n_i, d], rows in corpus order (i is 0-based)
    shard{i}of{n}.pids.parquet   one column ``pid``, same order as the rows of the .npy
    manifest.json                written last by ``gather``: shards, counts, dim, dtype, precision,
                                 model, sha256

Shard i of n holds the contiguous corpus rows ``[i*N//n, (i+1)*N//n)``, so concatenating the shards in
index order gives the corpus order. The .npy header is written first with the final shape and rows are
appended with plain file writes (no memmap: dirty mapped pages would count towards the resident set
and grow with the shard), then the file is renamed into place, so memory stays bounded by one chunk.
"""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from numpy.lib import format as npy_format

from pipeline.core.schemas import ids_schema
from pipeline.core.storage import (
    DataError,
    ParquetStreamWriter,
    StreamedOutput,
    file_sha256,
    read_json_object,
    write_json,
)

log = logging.getLogger("sieve.embeddings")

MANIFEST = "manifest.json"
DTYPE = np.dtype("<f2")
FORMAT = "sieve-embeddings/1"
# Key of the ids Parquet's schema metadata that records the compute precision of the shard's forward
# passes (fp32 / bf16 / fp16): shards of one model encoded on hosts with and without native bf16 would
# otherwise be gathered into one index silently.
PRECISION_KEY = b"sieve.precision"


def shard_name(index: int, count: int) -> str:
    if count < 1 or not 0 <= index < count:
        raise ValueError(f"shard index must be in [0, {count}), got {index}")
    return f"shard{index}of{count}"


def shard_paths(
    folder: str | os.PathLike, index: int, count: int, id_field: str = "pid"
) -> tuple[Path, Path]:
    """(embeddings .npy, ids .parquet) of one shard."""
    name = shard_name(index, count)
    return Path(folder) / f"{name}.npy", Path(folder) / f"{name}.{id_field}s.parquet"


def shard_bounds(n_rows: int, index: int, count: int) -> tuple[int, int]:
    """Rows [start, end) of shard ``index`` of ``count``: contiguous, sizes differ by at most one."""
    shard_name(index, count)  # validates the pair
    return index * n_rows // count, (index + 1) * n_rows // count


# ---- writing --------------------------------------------------------------------------------------


class EmbeddingWriter(StreamedOutput):
    """Append (ids, vectors) chunks to a .npy + ids Parquet pair that appear only on ``close()``.

    The final row count must be known up front (it goes in the .npy header); ``close`` refuses a
    file with fewer or more rows than announced rather than leave a header that lies. ``precision``
    (the forward passes' compute precision) goes into the ids file's metadata, for ``gather``.
    """

    def __init__(
        self,
        npy_path: str | os.PathLike,
        ids_path: str | os.PathLike,
        rows: int,
        dim: int,
        id_field: str = "pid",
        dtype: np.dtype = DTYPE,
        precision: str | None = None,
    ):
        self.npy_path, self.rows, self.dim = Path(npy_path), int(rows), int(dim)
        self.dtype = np.dtype(dtype)
        self.written = 0
        super().__init__(self.npy_path)
        self._handle = open(self._tmp, "wb")
        npy_format.write_array_header_1_0(
            self._handle,
            {
                "descr": npy_format.dtype_to_descr(self.dtype),
                "fortran_order": False,
                "shape": (self.rows, self.dim),
            },
        )
        schema = ids_schema(id_field)
        if precision is not None:
            schema = schema.with_metadata({PRECISION_KEY: precision.encode()})
        self._ids = ParquetStreamWriter(ids_path, schema)
        self._id_field = id_field

    def write(self, ids: Sequence[str], vectors: np.ndarray) -> None:
        if vectors.ndim != 2 or vectors.shape[1] != self.dim or vectors.shape[0] != len(ids):
            raise ValueError(f"expected vectors [{len(ids)}, {self.dim}], got {list(vectors.shape)}")
        if self.written + len(ids) > self.rows:
            raise ValueError(f"more rows than announced ({self.rows})")
        self._handle.write(np.ascontiguousarray(vectors, dtype=self.dtype).tobytes())
        self._ids.write({self._id_field: list(ids)})
        self.written += len(ids)

    def close(self) -> None:
        if self.written != self.rows:
            self.abort()
            raise ValueError(f"wrote {self.written} rows, announced {self.rows}")
        self._ids.close()
        super().close()

    def _release(self) -> None:
        self._handle.close()

    def abort(self) -> None:
        self._ids.abort()
        super().abort()


# ---- reading --------------------------------------------------------------------------------------


def read_header(path: str | os.PathLike) -> tuple[tuple[int, ...], np.dtype, int]:
    """(shape, dtype, byte offset of the data) of a C-ordered .npy file."""
    path = Path(path)
    if not path.exists():
        raise DataError("file not found (did encode_corpus run?)", file=path)
    try:
        with open(path, "rb") as handle:
            version = npy_format.read_magic(handle)
            reader = {(1, 0): npy_format.read_array_header_1_0, (2, 0): npy_format.read_array_header_2_0}.get(
                version
            )
            if reader is None:
                raise ValueError(f"unsupported .npy version {version}")
            shape, fortran, dtype = reader(handle)
            offset = handle.tell()
    except ValueError as exc:
        raise DataError(f"not a readable .npy file ({exc})", file=path) from exc
    if fortran or len(shape) != 2:
        raise DataError(f"expected a C-ordered 2-d array, got shape {shape}", file=path)
    expected = offset + shape[0] * shape[1] * dtype.itemsize
    if path.stat().st_size != expected:
        raise DataError(
            f"file is {path.stat().st_size} bytes, header says {expected} (truncated or still being written)",
            file=path,
        )
    return shape, dtype, offset


def first_non_finite_row(vectors: np.ndarray) -> int | None:
    """Index of the first row holding NaN or inf, or None when every value is finite."""
    bad = ~np.isfinite(vectors).all(axis=1)
    return int(np.argmax(bad)) if bad.any() else None


def check_finite_rows(vectors: np.ndarray, path: str | os.PathLike, first_row: int = 0) -> None:
    """Refuse stored embeddings holding NaN/inf (written by a diverged model before encode checked):
    searched, they would silently rank nothing or garbage."""
    row = first_non_finite_row(vectors)
    if row is not None:
        _refuse_non_finite(path, first_row + row)


def _refuse_non_finite(path: str | os.PathLike, row: int) -> None:
    raise DataError(
        f"row {row}: non-finite embedding (NaN or inf); the model that wrote these "
        "embeddings diverged: retrain it and encode again",
        file=path,
    )


def iter_rows(
    path: str | os.PathLike, chunk_rows: int, sha256: str | None = None
) -> Iterator[tuple[int, np.ndarray]]:
    """(first row, array[<=chunk_rows, d]) chunks read with plain reads: memory is one chunk.

    Chunks with non-finite values are refused (``check_finite_rows``). With ``sha256`` (the digest
    gather recorded) the bytes are hashed as they are read and compared before the last chunk is
    handed out, so a consumer never finishes on a changed file and the check costs no extra read.
    """
    (rows, dim), dtype, offset = read_header(path)
    digest = hashlib.sha256() if sha256 is not None and not _already_verified(path, sha256) else None
    with open(path, "rb") as handle:
        header = handle.read(offset)
        if digest is not None:
            digest.update(header)
            if rows == 0:
                _check_digest(path, digest, sha256)
        for start in range(0, rows, chunk_rows):
            count = min(chunk_rows, rows - start)
            data = np.empty((count, dim), dtype=dtype)
            if handle.readinto(data) != data.nbytes:
                raise DataError(f"unexpected end of data at row {start}", file=path)
            if digest is not None:
                digest.update(data)
                if start + count == rows:
                    _check_digest(path, digest, sha256)
            check_finite_rows(data, path, start)
            yield start, data


# (path, size, mtime) -> sha256 of the files this process has hashed: a file read twice (the sample
# an IVF index trains on, then every row) is hashed once.
_VERIFIED: dict[tuple[str, int, int], str] = {}


def _file_key(path: str | os.PathLike) -> tuple[str, int, int]:
    stat = os.stat(path)
    return str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns


def _already_verified(path: str | os.PathLike, sha256: str) -> bool:
    return _VERIFIED.get(_file_key(path)) == sha256


def _check_digest(path: str | os.PathLike, digest, expected: str) -> None:
    actual = digest.hexdigest()
    if actual != expected:
        raise DataError(
            f"sha256 {actual[:12]}… differs from {expected[:12]}… recorded in {MANIFEST} when the shards "
            "were gathered (damaged or overwritten since): delete the embedding folder and rerun to "
            "encode it again",
            file=path,
        )
    _VERIFIED[_file_key(path)] = expected


def verify_file(path: str | os.PathLike, sha256: str | None) -> None:
    """Compare a file with the digest gather recorded (streamed; once per process and file state)."""
    if sha256 is None or _already_verified(path, sha256):
        return
    if not Path(path).exists():
        raise DataError("file not found (did encode_corpus run?)", file=path)
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(1 << 22):
            digest.update(block)
    _check_digest(path, digest, sha256)


def read_rows(path: str | os.PathLike, rows: np.ndarray) -> np.ndarray:
    """The given rows (any order) of a .npy file, without reading the others; refuses non-finite
    values (the error names the file row)."""
    read_header(path)
    rows = np.asarray(rows)
    out = np.asarray(np.load(path, mmap_mode="r")[rows])
    bad = first_non_finite_row(np.atleast_2d(out))
    if bad is not None:
        _refuse_non_finite(path, int(np.atleast_1d(rows)[bad]))
    return out


def read_ids(path: str | os.PathLike, id_field: str = "pid") -> pa.ChunkedArray:
    """The id column of a shard's ids Parquet file, checked for presence and nulls."""
    path = Path(path)
    if not path.exists():
        raise DataError("file not found (did encode_corpus run?)", file=path)
    try:
        table = pq.read_table(path)
    except Exception as exc:  # pyarrow raises several types for corrupt files
        raise DataError(f"not a readable Parquet file ({exc})", file=path) from exc
    if id_field not in table.column_names:
        raise DataError(f"missing column (has: {', '.join(table.column_names)})", file=path, field=id_field)
    column = table.column(id_field)
    if column.null_count:
        raise DataError(
            "null id", file=path, field=id_field, record=int(pc.index(pc.is_null(column), True).as_py())
        )
    return column


def read_precision(path: str | os.PathLike) -> str | None:
    """The compute precision a shard's ids file records (None: written without one)."""
    try:
        metadata = pq.read_schema(path).metadata or {}
    except Exception as exc:  # pyarrow raises several types for corrupt files
        raise DataError(f"not a readable Parquet file ({exc})", file=path) from exc
    value = metadata.get(PRECISION_KEY)
    return value.decode() if value is not None else None


def _check_one_precision(precisions: dict[str, str | None], folder: Path) -> str | None:
    """The shards' common precision; None when any shard predates the record (then unknown: an
    encode begun before the upgrade still gathers, with a warning)."""
    unrecorded = [name for name, p in precisions.items() if p is None]
    kinds = {p for p in precisions.values() if p is not None}
    if unrecorded:
        log.warning(
            "%d of %d shards in %s do not record their compute precision (written by an older "
            "version): the manifest's precision is unknown",
            len(unrecorded),
            len(precisions),
            folder,
        )
    if len(kinds) > 1:
        listed = ", ".join(f"{name}: {p or 'not recorded'}" for name, p in precisions.items())
        raise DataError(
            f"shards were encoded at different compute precisions ({listed}); one index "
            "must come from one precision: re-encode the odd shards on hosts of the same "
            "kind, or set encode.amp: false (fp32 everywhere)",
            file=folder,
            field="precision",
        )
    return kinds.pop() if kinds and not unrecorded else None


# ---- gathered shards ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Shard:
    index: int
    embeddings: Path
    ids: Path
    count: int
    offset: int  # global row of the shard's first row
    sha256: str | None = None  # of the .npy, as gather recorded it (None: gathered --no-checksums)
    ids_sha256: str | None = None


class EmbeddingSet:
    """A gathered embedding folder: shards in order, global row numbers, ids."""

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder)
        path = self.folder / MANIFEST
        self.manifest = read_json_object(
            path,
            keys=("dim", "count", "shards", "id_field"),
            missing="embedding manifest not found (run the gather step)",
        )
        self.dim = int(self.manifest["dim"])
        self.count = int(self.manifest["count"])
        self.id_field = self.manifest["id_field"]
        shards, offset = [], 0
        for i, entry in enumerate(self.manifest["shards"]):
            shards.append(
                Shard(
                    i,
                    self.folder / entry["embeddings"],
                    self.folder / entry["ids"],
                    int(entry["count"]),
                    offset,
                    entry.get("sha256"),
                    entry.get("ids_sha256"),
                )
            )
            offset += int(entry["count"])
        if offset != self.count:
            raise DataError(
                f"shard counts add up to {offset}, manifest says {self.count}", file=path, field="count"
            )
        self.shards: list[Shard] = shards

    def iter_rows(
        self, chunk_rows: int, shards: Sequence[int] | None = None
    ) -> Iterator[tuple[int, np.ndarray]]:
        """(global first row, fp16 chunk) over the chosen shards (all by default), in order."""
        for shard in self.shards if shards is None else [self.shards[i] for i in shards]:
            for start, chunk in iter_rows(shard.embeddings, chunk_rows, shard.sha256):
                yield shard.offset + start, chunk

    def ids(self, shards: Sequence[int] | None = None) -> pa.Array:
        """The ids of the chosen shards, concatenated in row order (an Arrow string array)."""
        parts = []
        for s in self.shards if shards is None else [self.shards[i] for i in shards]:
            verify_file(s.ids, s.ids_sha256)
            parts.append(read_ids(s.ids, self.id_field))
        return _concat(parts).combine_chunks()

    def verify(self, shard: Shard) -> None:
        """Check a shard's .npy against the manifest before reading some of its rows (``read_rows``
        reads only those, so it cannot hash the file as it goes)."""
        verify_file(shard.embeddings, shard.sha256)


def _concat(parts: list[pa.ChunkedArray]) -> pa.ChunkedArray:
    return pa.chunked_array(
        [chunk.cast(pa.string()) for part in parts for chunk in part.chunks], type=pa.string()
    )


def _check_unique_ids(parts: list, id_field: str, folder: Path) -> None:
    # Search maps rows to ids; a repeated id would give a run with a duplicate (qid, pid).
    ids = _concat(parts)
    if len(ids) and pc.count_distinct(ids).as_py() != len(ids):
        counts = pc.value_counts(ids)
        dup = counts.filter(pc.greater(counts.field("counts"), 1))[0]["values"].as_py()
        raise DataError(f"id {dup!r} occurs more than once across the shards", file=folder, field=id_field)


def gather(
    folder: str | os.PathLike,
    count: int,
    *,
    model: str,
    source: str,
    source_rows: int | None = None,
    id_field: str = "pid",
    checksums: bool = True,
) -> dict:
    """Check the ``count`` shards of ``folder`` and write ``manifest.json`` (last). Returns it."""
    folder = Path(folder)
    entries, dims, total, all_ids, precisions = [], set(), 0, [], {}
    for i in range(count):
        npy, ids = shard_paths(folder, i, count, id_field)
        (rows, dim), dtype, _ = read_header(npy)
        if dtype != DTYPE:
            raise DataError(f"dtype is {dtype}, expected float16", file=npy)
        if not ids.exists():
            raise DataError("file not found (did encode_corpus run?)", file=ids)
        shard_ids = read_ids(ids, id_field)
        precisions[ids.name] = read_precision(ids)
        n_ids = len(shard_ids)
        if n_ids != rows:
            raise DataError(f"{n_ids} ids for {rows} embedding rows", file=ids, field=id_field)
        dims.add(dim)
        all_ids.append(shard_ids)
        entry = {"embeddings": npy.name, "ids": ids.name, "count": rows}
        if checksums:
            entry["sha256"] = file_sha256(npy)
            entry["ids_sha256"] = file_sha256(ids)
        entries.append(entry)
        total += rows
    if len(dims) > 1:
        raise DataError(f"shards disagree on the embedding dimension: {sorted(dims)}", file=folder)
    precision = _check_one_precision(precisions, folder)
    _check_unique_ids(all_ids, id_field, folder)
    if source_rows is not None and total != source_rows:
        raise DataError(f"shards hold {total} rows, the source has {source_rows}", file=folder)
    manifest = {
        "format": FORMAT,
        "model": str(model),
        "source": str(source),
        "id_field": id_field,
        "count": total,
        "dim": dims.pop() if dims else 0,
        "dtype": "float16",
        "precision": precision,
        "shards": entries,
    }
    write_json(folder / MANIFEST, manifest)
    log.info("gathered %d shards, %d rows, dim %d -> %s", count, total, manifest["dim"], folder / MANIFEST)
    return manifest


# Pairs scored at a time by ``rowwise_dot``: gathering every pair's two rows at once would hold
# pairs x dim x 2 x itemsize bytes (8 GB in float64 for NQ's 651,500 dev rows at 768 dimensions).
SCORE_CHUNK = 65_536


def rowwise_dot(
    left: np.ndarray,
    left_idx: np.ndarray,
    right: np.ndarray,
    right_idx: np.ndarray,
    dtype: type = np.float64,
    chunk: int = SCORE_CHUNK,
) -> np.ndarray:
    """Dot products left[left_idx[i]] . right[right_idx[i]] in ``dtype``, ``chunk`` pairs at a time
    (bounded memory). Row by row, not a matrix product: a pair's value does not depend on which other
    pairs are computed, so the chunk size changes none."""
    out = np.empty(len(left_idx), dtype=dtype)
    for start in range(0, len(left_idx), chunk):
        rows = slice(start, start + chunk)
        a = np.asarray(left[left_idx[rows]], dtype=dtype)
        b = np.asarray(right[right_idx[rows]], dtype=dtype)
        out[rows] = np.einsum("ij,ij->i", a, b)
    return out

"""Shared I/O for every stage: the canonical tables, errors that name file/record/field, atomic writes.

Every stage reads and writes through these helpers so that a crash never leaves a half-written
output and a bad input always produces a message a user can act on.
"""
from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import tempfile
from pathlib import Path
from typing import IO, Any, Iterator

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq


class DataError(ValueError):
    """A problem in an input file, located precisely enough to fix it.

    str(err) reads: ``<file>: record <record>: field '<field>': <message>``; parts that are unknown
    are left out. CLIs catch it, print it and exit with status 2.
    """

    def __init__(self, message: str, *, file: str | os.PathLike | None = None,
                 record: Any = None, field: str | None = None):
        self.file = str(file) if file is not None else None
        self.record = record
        self.field = field
        self.message = message
        parts = []
        if self.file is not None:
            parts.append(self.file)
        if record is not None:
            parts.append(f"record {record}")
        if field is not None:
            parts.append(f"field '{field}'")
        parts.append(message)
        super().__init__(": ".join(parts))


# ---- canonical tables (the public data contract, documented in README "Data layout") -----------

CORPUS_SCHEMA = pa.schema([("pid", pa.string()), ("title", pa.string()), ("text", pa.string())])
QUERIES_SCHEMA = pa.schema([("qid", pa.string()), ("text", pa.string()),
                            ("answers", pa.list_(pa.string()))])
QRELS_SCHEMA = pa.schema([("qid", pa.string()), ("pid", pa.string()), ("relevance", pa.int32())])
RUN_SCHEMA = pa.schema([("qid", pa.string()), ("pid", pa.string()), ("rank", pa.int32()),
                        ("score", pa.float32())])
SPLITS = ("train", "dev", "test")
NEGATIVES_SCHEMA = pa.schema([("qid", pa.string()), ("pid", pa.string()), ("rank", pa.int32()),
                              ("score", pa.float32()), ("source", pa.string())])

# mkstemp creates 0600 files; outputs should get the permissions a plain open() would give them.
_UMASK = os.umask(0)
os.umask(_UMASK)


# ---- atomic writes --------------------------------------------------------------------------------

@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.chmod(tmp_path, 0o666 & ~_UMASK)
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w", **kwargs: Any) -> Iterator[IO]:
    with atomic_path(path) as tmp, open(tmp, mode, **kwargs) as handle:
        yield handle


def write_json(path: str | os.PathLike, obj: Any) -> None:
    with atomic_open(path, "w", encoding="utf-8") as handle:
        json.dump(obj, handle, indent=2, sort_keys=False, ensure_ascii=False)
        handle.write("\n")


def write_table(path: str | os.PathLike, table: pa.Table | pd.DataFrame,
                schema: pa.Schema | None = None) -> None:
    """Write a Parquet file atomically, casting to ``schema`` when given."""
    if isinstance(table, pd.DataFrame):
        table = pa.Table.from_pandas(table, schema=schema, preserve_index=False)
    elif schema is not None:
        table = table.select(schema.names).cast(schema)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)


class ParquetStreamWriter:
    """Append record batches to a Parquet file that appears at ``path`` only on ``close()``.

    For outputs too large to build in memory (21M-passage corpora): rows go out in batches.
    """

    def __init__(self, path: str | os.PathLike, schema: pa.Schema):
        self._ctx = atomic_path(path)
        self._tmp = self._ctx.__enter__()
        self.schema = schema
        self._writer = pq.ParquetWriter(self._tmp, schema)
        self.rows = 0

    def write(self, columns: dict[str, list]) -> None:
        batch = pa.RecordBatch.from_pydict(columns, schema=self.schema)
        self._writer.write_batch(batch)
        self.rows += batch.num_rows

    def close(self) -> None:
        self._writer.close()
        self._ctx.__exit__(None, None, None)

    def abort(self) -> None:
        self._writer.close()
        self._ctx.__exit__(RuntimeError, RuntimeError("aborted"), None)

    def __enter__(self) -> "ParquetStreamWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


# ---- reading ----------------------------------------------------------------------------------------

def open_text(path: str | os.PathLike, encoding: str = "utf-8") -> IO[str]:
    """Open a text file, transparently gunzipping by magic bytes (downloads have no extension)."""
    path = Path(path)
    if not path.exists():
        raise DataError("file not found", file=path)
    with open(path, "rb") as raw:
        magic = raw.read(2)
    if magic == b"\x1f\x8b":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding=encoding, newline="")
    return open(path, "r", encoding=encoding, newline="")


def read_table(path: str | os.PathLike, columns: list[str] | None = None) -> pd.DataFrame:
    """Read a Parquet file, naming the file and the missing column when the layout is wrong."""
    path = Path(path)
    if not path.exists():
        raise DataError("file not found (did the stage that writes it run?)", file=path)
    try:
        schema = pq.read_schema(path)
    except Exception as exc:  # pyarrow raises several types for truncated/corrupt files
        raise DataError(f"not a readable Parquet file ({exc})", file=path) from exc
    if columns is not None:
        for col in columns:
            if col not in schema.names:
                raise DataError(f"missing column (has: {', '.join(schema.names)})", file=path,
                                field=col)
    return pq.read_table(path, columns=columns).to_pandas()


def check_unique(df: pd.DataFrame, column: str, file: str | os.PathLike) -> None:
    dup = df[column].duplicated(keep="first")
    if dup.any():
        first = df.loc[dup, column].iloc[0]
        rows = df.index[df[column] == first].tolist()[:3]
        raise DataError(f"duplicate id {first!r} (rows {rows}); ids must be unique",
                        file=file, record=rows[-1], field=column)

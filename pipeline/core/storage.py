"""Shared I/O for every stage: table and JSON reading, errors that name file/record/field, atomic writes.

Every stage reads and writes through these helpers so that a crash never leaves a half-written
output and a bad input always produces a message a user can act on.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import os
import re
import tempfile
from pathlib import Path
from typing import IO, Any, Callable, Collection, Iterable, Iterator, Mapping, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.core.temp_files import remove_stale_temps


class DataError(ValueError):
    """A problem in an input file, located precisely enough to fix it.

    str(err) reads: ``<file>: record <record>: field '<field>': <message>``; parts that are unknown
    are left out. CLIs catch it, print it and exit with status 2.
    """

    def __init__(
        self,
        message: str,
        *,
        file: str | os.PathLike | None = None,
        record: Any = None,
        field: str | None = None,
    ):
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


# The canonical tables' schemas live in pipeline.core.schemas; every dataset has these splits.
SPLITS = ("train", "dev", "test")

# mkstemp creates 0600 files; outputs should get the permissions a plain open() would give them.
_UMASK = os.umask(0)
os.umask(_UMASK)


def follow_umask(path: str | os.PathLike) -> None:
    """Give a file the permissions a plain open() would have (writers that go through mkstemp, ours
    and safetensors', leave 0600)."""
    os.chmod(path, 0o666 & ~_UMASK)


def file_sha256(path: str | os.PathLike, block: int = 1 << 22) -> str:
    """sha256 of a file, read in blocks: memory stays one block whatever the size."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(block):
            digest.update(chunk)
    return digest.hexdigest()


# ---- digests of a folder's files ------------------------------------------------------------------

CHECKSUMS = "checksums.json"


def write_checksums(folder: str | os.PathLike, names: Iterable[str] | None = None) -> None:
    """Record the sha256 of ``names`` (default: every file of ``folder``) in ``checksums.json``.

    For folders of which Snakemake checks only a marker file (retriever.json, ranker.json) or the
    folder itself (a BM25 index): a damaged file would rerun nothing, so the loaders compare these.
    """
    folder = Path(folder)
    if names is None:
        names = sorted(p.name for p in folder.iterdir() if p.is_file() and p.name != CHECKSUMS)
    write_json(folder / CHECKSUMS, {"sha256": {name: file_sha256(folder / name) for name in names}})


def verify_checksums(folder: str | os.PathLike, hint: str) -> None:
    """Refuse a file of ``folder`` whose sha256 differs from the one recorded when it was written,
    naming it and saying what to do (``hint``). A folder without ``checksums.json`` (one written by
    an older version, a base model) passes."""
    folder = Path(folder)
    path = folder / CHECKSUMS
    if not path.exists():
        return
    recorded = read_json_object(path, keys=("sha256",))["sha256"]
    if not isinstance(recorded, dict):
        raise DataError("must map file names to sha256 digests", file=path, field="sha256")
    for name, expected in recorded.items():
        if not (folder / name).exists():
            raise DataError(f"file missing: {hint}", file=folder / name)
        actual = file_sha256(folder / name)
        if actual != expected:
            raise DataError(
                f"sha256 {actual[:12]}… differs from {str(expected)[:12]}… recorded in {CHECKSUMS} when it "
                f"was saved (damaged or overwritten since): {hint}",
                file=folder / name,
            )


# ---- outputs that would destroy inputs -------------------------------------------------------------


def refuse_overwriting_inputs(
    outputs: Mapping[str, str | os.PathLike | None], inputs: Mapping[str, str | os.PathLike | None]
) -> None:
    """Refuse, before any work, an output that is one of the inputs: the same file by any spelling
    (``./x``, a symlink, a hard link), a path inside an input folder, or a folder (written whole, as a
    model folder is) that holds an input. ``sort -o`` and ``rsync`` do the same: a stage that wrote
    there would replace what it is still reading, and exit 0.

    Both maps go from the flag a user typed (``--out``) to its path; None is an unused flag."""
    for out_flag, out in outputs.items():
        if out is None:
            continue
        out = Path(out)
        for in_flag, source in inputs.items():
            if source is None or not Path(source).exists():
                continue
            source = Path(source)
            same = out.exists() and os.path.samefile(out, source)
            inside = source.is_dir() and out.resolve().is_relative_to(source.resolve())
            holds = out.is_dir() and source.resolve().is_relative_to(out.resolve())
            if same or inside or holds:
                where = (
                    "is the same file as" if same else "lies inside" if inside else "is a folder that holds"
                )
                raise DataError(
                    f"{out_flag} {where} the input {in_flag} ({source}): it would be overwritten, and the "
                    "input lost; choose another output path",
                    file=out,
                )


# ---- atomic writes --------------------------------------------------------------------------------


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` only if the block succeeds."""
    path = Path(path)
    make_parent(path)
    remove_stale_temps(path)  # a killed write's leftovers (one writer per output: Snakemake's rule)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:  # a read-only folder: name the output, not a random temporary
        name_output(exc, path, exc.filename)
        raise
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        follow_umask(tmp_path)
        os.replace(tmp_path, path)
    except OSError as exc:
        name_output(exc, path, tmp_path)
        raise
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def make_parent(path: str | os.PathLike) -> None:
    """Create the folder ``path`` goes in; a file where one of its folders should be (`--out
    notes.txt/x.parquet`) is a DataError naming that file (mkdir says only "File exists")."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        blocking = next((p for p in reversed(path.parents) if p.exists() and not p.is_dir()), path.parent)
        raise DataError(f"{blocking} is a file, not a folder: choose another path", file=path) from None


def name_output(exc: OSError, path: str | os.PathLike, *temporaries: str | os.PathLike) -> None:
    """Make ``exc`` name ``path``: a failed write() names no file (a full disk is then
    "[Errno 28] No space left on device" alone), and a temporary's name means nothing to a user."""
    if exc.filename is None or str(exc.filename) in {str(t) for t in temporaries}:
        exc.filename = str(path)


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w", **kwargs: Any) -> Iterator[IO]:
    with atomic_path(path) as tmp, open(tmp, mode, **kwargs) as handle:
        yield handle


def write_png(path: str | os.PathLike, fig: Any, **savefig: Any) -> None:
    """Save a matplotlib figure as PNG atomically (dpi 120 unless given) and close it."""
    import matplotlib.pyplot as plt

    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", **{"dpi": 120, **savefig})
    plt.close(fig)


def rewrite_text(path: str | os.PathLike, update: Callable[[str], str]) -> None:
    """Replace the UTF-8 text of ``path`` with ``update`` of it, atomically: an update that raises or a
    failed write leaves the file as it was (the documents whose marked sections are generated)."""
    text = update(Path(path).read_text(encoding="utf-8"))
    with atomic_open(path, "w", encoding="utf-8") as handle:
        handle.write(text)


def write_json(path: str | os.PathLike, obj: Any) -> None:
    with atomic_open(path, "w", encoding="utf-8") as handle:
        json.dump(obj, handle, indent=2, sort_keys=False, ensure_ascii=False)
        handle.write("\n")


def write_table(
    path: str | os.PathLike, table: pa.Table | pd.DataFrame, schema: pa.Schema | None = None
) -> None:
    """Write a Parquet file atomically, casting to ``schema`` when given."""
    if isinstance(table, pd.DataFrame):
        table = pa.Table.from_pandas(table, schema=schema, preserve_index=False)
    elif schema is not None:
        table = table.select(schema.names).cast(schema)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)


class StreamedOutput:
    """An output written piece by piece to a temporary file that appears at ``path`` only on
    ``close()``; ``abort()``, or leaving a ``with`` block by an exception, removes it instead.

    Subclasses release their handles in ``_release`` (called on both paths) and may check the
    content in ``close`` before calling ``super().close()``.
    """

    def __init__(self, path: str | os.PathLike):
        self._ctx = atomic_path(path)
        self._tmp = self._ctx.__enter__()

    def _release(self) -> None:
        """Flush and close what writes to ``self._tmp``."""

    def close(self) -> None:
        self._release()
        self._ctx.__exit__(None, None, None)

    def abort(self) -> None:
        self._release()
        self._ctx.__exit__(RuntimeError, RuntimeError("aborted"), None)

    def __enter__(self) -> "StreamedOutput":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


class ParquetStreamWriter(StreamedOutput):
    """Append record batches to a Parquet file that appears at ``path`` only on ``close()``.

    For outputs too large to build in memory (21M-passage corpora): rows go out in batches.
    """

    def __init__(self, path: str | os.PathLike, schema: pa.Schema):
        super().__init__(path)
        self.schema = schema
        self._writer = pq.ParquetWriter(self._tmp, schema)
        self.rows = 0

    def write(self, columns: dict[str, list]) -> None:
        batch = pa.RecordBatch.from_pydict(columns, schema=self.schema)
        self._writer.write_batch(batch)
        self.rows += batch.num_rows

    def _release(self) -> None:
        self._writer.close()


# pq.write_table's row group length when it is given none (pyarrow: min(rows, 1024 * 1024)).
ROW_GROUP_ROWS = 1024 * 1024


class ParquetTableWriter(StreamedOutput):
    """Tables appended piece by piece, written as ``write_table`` writes their concatenation.

    Rows are held until a row group of ``ROW_GROUP_ROWS`` is full and then written as one contiguous
    table, so the row groups (and, pyarrow's writer being deterministic, the bytes) are those of one
    ``pq.write_table`` call on all the rows, while memory holds at most one row group. For stages whose
    output grows with the number of queries (mined negatives: ~100 rows per train question).
    """

    def __init__(self, path: str | os.PathLike, schema: pa.Schema):
        super().__init__(path)
        self.schema = schema
        self._writer = pq.ParquetWriter(self._tmp, schema)
        self._pending: list[pa.Table] = []
        self._pending_rows = 0
        self._groups = 0
        self.rows = 0

    def append(self, table: pa.Table) -> None:
        if not table.schema.equals(self.schema):  # metadata included: it is part of the file's bytes
            raise ValueError(f"table schema {table.schema} is not the writer's {self.schema}")
        self._pending.append(table)
        self._pending_rows += table.num_rows
        self.rows += table.num_rows
        if self._pending_rows >= ROW_GROUP_ROWS:
            self._flush(final=False)

    def _flush(self, final: bool) -> None:
        rows = pa.concat_tables(self._pending or [self.schema.empty_table()]).combine_chunks()
        full = rows.num_rows if final else rows.num_rows - rows.num_rows % ROW_GROUP_ROWS
        if full or (final and not self._groups):  # write_table of no rows writes one empty row group
            self._writer.write_table(rows.slice(0, full))
            self._groups += 1
        self._pending = [rows.slice(full)] if full < rows.num_rows else []
        self._pending_rows = rows.num_rows - full

    def close(self) -> None:
        self._flush(final=True)
        super().close()

    def _release(self) -> None:
        self._writer.close()


# ---- column types ---------------------------------------------------------------------------------

_FLOAT_NAMES = {"halffloat": "float16", "float": "float32", "double": "float64"}


def type_name(data_type: pa.DataType) -> str:
    """The type as its pyarrow factory spells it (float32, not Arrow's "float")."""
    if pa.types.is_list(data_type) or pa.types.is_large_list(data_type):
        prefix = "large_list" if pa.types.is_large_list(data_type) else "list"
        return f"{prefix}<{type_name(data_type.value_type)}>"
    return _FLOAT_NAMES.get(str(data_type), str(data_type))


def _is_list(data_type: pa.DataType) -> bool:
    return pa.types.is_list(data_type) or pa.types.is_large_list(data_type)


def _kind(data_type: pa.DataType) -> str:
    """What a scalar column's values are, whatever their width or encoding."""
    if pa.types.is_integer(data_type):
        return "integer"
    if pa.types.is_floating(data_type):
        return "number"
    if pa.types.is_string(data_type) or pa.types.is_large_string(data_type):
        return "string"
    return type_name(data_type)


def column_type_fits(found: pa.DataType, expected: pa.DataType) -> bool:
    """Whether a column of type ``found`` can stand where the schema says ``expected``.

    The project writes every table with its schema's exact types; other writers (pandas, users'
    files) differ in width or encoding only: int64 for int32, float64 for float32, large_string for
    string, list<element> for list<item>, a dictionary (pandas categorical) for its values. Those
    hold the same values and pass, and an integer column stands for a number (an integer score). A
    different kind of value - text ranks, which sort as text (1, 10, 2, ...), a float relevance, an
    integer pid - does not.
    """
    if pa.types.is_dictionary(found):
        found = found.value_type
    # All-null (pandas writes [[], []] as list<null>): no value of a wrong kind; nulls are the
    # reader's to refuse where it needs a value.
    if pa.types.is_null(found):
        return True
    if _is_list(expected) or _is_list(found):
        return (
            _is_list(expected) and _is_list(found) and column_type_fits(found.value_type, expected.value_type)
        )
    want, got = _kind(expected), _kind(found)
    return got == want or (want == "number" and got == "integer")


def _describe_expected(expected: pa.DataType) -> str:
    kind = _kind(expected)
    if kind == "integer":
        return f"an integer type ({type_name(expected)})"
    if kind == "number":
        return f"a number ({type_name(expected)})"
    return type_name(expected)


def check_column_types(
    found: pa.Schema, expected: pa.Schema, columns: Sequence[str], file: str | os.PathLike
) -> None:
    """DataError naming the file, the column, the expected and the found type for the first of
    ``columns`` whose type in ``found`` does not fit ``expected`` (``column_type_fits``)."""
    for name in columns:
        if expected.get_field_index(name) < 0:
            raise ValueError(f"column {name!r} is not part of the schema ({', '.join(expected.names)})")
        want, got = expected.field(name).type, found.field(name).type
        if not column_type_fits(got, want):
            raise DataError(
                f"column type: expected {_describe_expected(want)}, found {type_name(got)}",
                file=file,
                field=name,
            )


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


def open_parquet(
    path: str | os.PathLike,
    columns: Sequence[str] = (),
    *,
    schema: pa.Schema | None = None,
    optional: Collection[str] = (),
    missing: str = "file not found (did the stage that writes it run?)",
) -> pq.ParquetFile:
    """Open a Parquet file for streaming, naming the file and the missing column when the layout is
    wrong; ``missing`` is the message for a file that does not exist.

    With ``schema`` (a layout of pipeline.core.schemas) the columns read - ``columns``, or every
    column of the schema when none are named - must also hold the schema's kind of values
    (``check_column_types``); a column in ``optional`` may be absent.
    """
    path = Path(path)
    if not path.exists():
        raise DataError(missing, file=path)
    try:
        parquet = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises several types for truncated/corrupt files
        raise DataError(f"not a readable Parquet file ({exc})", file=path) from exc
    try:
        found = parquet.schema_arrow
        wanted = list(columns) or (schema.names if schema is not None else [])
        for col in wanted:
            if col not in found.names and col not in optional:
                raise DataError(f"missing column (has: {', '.join(found.names)})", file=path, field=col)
        if schema is not None:
            present = [c for c in wanted if c in found.names]
            check_column_types(found, schema, present, path)
            check_no_nulls(parquet, present, path)
    except BaseException:
        parquet.close()
        raise
    return parquet


# Columns that hold a value in every row of every project table: ids, query and passage text, ranks,
# relevances. prepare never writes a null there, but a table from elsewhere (pandas, a user's own
# run) could, and the stages met it as a traceback (None < str while sorting pids, None.lower() in
# the tokenizer, None as an answer to normalise) or dropped the row silently (a passage without text).
NOT_NULL = ("qid", "pid", "text", "rank", "relevance")
NO_NULL_ELEMENTS = ("answers",)  # a list may be empty (or null: no answers), its elements are strings


def check_no_nulls(parquet: pq.ParquetFile, columns: Sequence[str], file: str | os.PathLike) -> None:
    """DataError naming the file, the first row and the column of a null among ``columns`` (those
    in NOT_NULL and NO_NULL_ELEMENTS). The row-group statistics answer without reading the data;
    a column is read only where they show (or cannot rule out) a null."""
    metadata = parquet.metadata
    leaves = {metadata.schema.column(i).path: i for i in range(metadata.num_columns)}
    for name in columns:
        if name in NOT_NULL:
            leaf = name
        elif name in NO_NULL_ELEMENTS:
            leaf = next((path for path in leaves if path.startswith(f"{name}.")), None)
        else:
            continue
        index = leaves.get(leaf) if leaf is not None else None
        if index is None:
            continue
        counts = []
        for group in range(metadata.num_row_groups):
            stats = metadata.row_group(group).column(index).statistics
            counts.append(stats.null_count if stats is not None and stats.has_null_count else None)
        if all(count == 0 for count in counts):
            continue
        column = parquet.read(columns=[name]).column(name)
        if name in NO_NULL_ELEMENTS:  # the leaf counts empty and null lists too: look at the elements
            elements = pc.list_flatten(column)
            if elements.null_count:
                row = pc.list_parent_indices(column)[pc.index(pc.is_null(elements), True).as_py()]
                raise DataError("null answer in the list", file=file, record=row.as_py(), field=name)
        elif column.null_count:
            raise DataError(
                "null value", file=file, record=pc.index(pc.is_null(column), True).as_py(), field=name
            )


def read_table(
    path: str | os.PathLike,
    columns: list[str] | None = None,
    *,
    schema: pa.Schema | None = None,
    optional: Collection[str] = (),
) -> pd.DataFrame:
    """Read a Parquet file, naming the file and the missing column when the layout is wrong.

    ``schema`` and ``optional`` as for ``open_parquet``: the columns read are checked against the
    schema, and an optional column that the file lacks is left out of the result.
    """
    open_parquet(path, columns or (), schema=schema, optional=optional).close()
    if columns is not None and optional:
        present = set(pq.read_schema(path).names)
        columns = [c for c in columns if c in present or c not in optional]
    table = pq.read_table(path, columns=columns)
    if columns is None:  # an unnamed pandas index is stored as a column of this name: not data
        table = table.drop_columns([c for c in table.column_names if PANDAS_INDEX.fullmatch(c)])
    return arrow_frame(table)


# How pandas names the column that stores an unnamed index (``__index_level_0__``).
PANDAS_INDEX = re.compile(r"__index_level_\d+__")


def arrow_frame(table: pa.Table) -> pd.DataFrame:
    """The table as a DataFrame of its Arrow columns, under their Arrow names, with a RangeIndex.

    A file written by pandas carries its own ``pandas`` metadata, which ``to_pandas`` obeys: a file
    saved after ``set_index("qid")`` came back with qid as the index (the schema check had passed,
    then a KeyError), metadata naming the fields differently swapped columns silently, and metadata
    that is not JSON was a traceback. The checks name Arrow columns, so the data is read by them alone.
    """
    return table.replace_schema_metadata(None).to_pandas()


def read_json(path: str | os.PathLike, *, missing: str = "file not found") -> Any:
    """A JSON file's content; a missing or malformed file is a DataError naming it (``missing`` is the
    message for a file that does not exist)."""
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(missing, file=path) from None
    except ValueError as exc:  # also bad UTF-8
        raise DataError(f"not valid JSON ({exc})", file=path) from None


def read_json_object(
    path: str | os.PathLike, *, missing: str = "file not found", keys: Sequence[str] = ()
) -> dict:
    """``read_json`` for a file that must hold an object with (at least) ``keys``."""
    data = read_json(path, missing=missing)
    if not isinstance(data, dict):
        raise DataError("must be a JSON object", file=path)
    for key in keys:
        if key not in data:
            raise DataError("missing key", file=path, field=key)
    return data


# Unicode's control characters (C0, DEL, C1). In an id a NUL reached run.test.trec raw and the others
# garble TREC files, logs and terminals; whitespace among them is refused with its own message.
CONTROL_CHARACTER = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def control_character_message(value: str) -> str | None:
    """Why ``value`` cannot be an id when it holds a control character (its code point), else None."""
    found = CONTROL_CHARACTER.search(value)
    if found is None:
        return None
    return (
        f"id {value!r} contains the control character U+{ord(found.group()):04X}: ids are written to "
        "TREC files and logs, where it cannot stand"
    )


def check_unique_ids(ids: pa.Array | pa.ChunkedArray, file: str | os.PathLike, field: str) -> None:
    """DataError naming ``file``, the record (0-based row) of the first repeat and the id when
    ``ids`` holds one twice (nulls are left to the null checks). Arrow counts the distinct ids; rows
    are looked at only on a repeat."""
    if pc.count_distinct(ids).as_py() == len(ids) - ids.null_count:
        return
    counts = pc.value_counts(ids)
    repeated = counts.field("values").filter(pc.greater(counts.field("counts"), 1)).drop_null()
    rows = np.flatnonzero(pc.is_in(ids, value_set=repeated).to_numpy(zero_copy_only=False))
    first: dict[Any, int] = {}
    for row, value in zip(rows.tolist(), ids.take(pa.array(rows)).to_pylist()):
        if value in first:
            raise DataError(
                f"duplicate {field} {value!r} (records {first[value]} and {row}); ids must be unique",
                file=file,
                record=row,
                field=field,
            )
        first[value] = row


def first_repeat(df: pd.DataFrame, columns: list[str]) -> tuple[int, int] | None:
    """(row, row of its first occurrence) of the first row whose ``columns`` repeat an earlier row's,
    by position; None when every row is distinct."""
    dup = df.duplicated(columns, keep="first").to_numpy()
    if not dup.any():
        return None
    row = int(np.argmax(dup))
    same = (df[columns] == df[columns].iloc[row]).all(axis=1).to_numpy()
    return row, int(np.argmax(same))


def refuse_repeat(
    df: pd.DataFrame,
    columns: list[str],
    message: Callable[[int], str],
    file: str | os.PathLike | None,
    field: str,
) -> None:
    """Raise DataError at the first row (position ``row``; the record named is its index label) whose
    ``columns`` repeat an earlier row's, with ``message(row)``; return when every row is distinct."""
    repeat = first_repeat(df, columns)
    if repeat:
        row = repeat[0]
        raise DataError(message(row), file=file, record=int(df.index[row]), field=field)


def check_unique(df: pd.DataFrame, column: str, file: str | os.PathLike) -> None:
    dup = df[column].duplicated(keep="first")
    if dup.any():
        first = df.loc[dup, column].iloc[0]
        rows = df.index[df[column] == first].tolist()[:3]
        raise DataError(
            f"duplicate id {first!r} (rows {rows}); ids must be unique",
            file=file,
            record=rows[-1],
            field=column,
        )

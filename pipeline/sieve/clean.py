"""Clean a hard-negative dataset you already have: the same file back, each suspected false negative
dropped, relabelled as a positive or marked, with every negative's verdict and a report.

    python -m pipeline.sieve.clean --input mined.parquet --out cleaned.parquet \
        [--format auto|triplet|n_tuple|labeled_pair|labeled_list|tevatron|flagembedding] \
        [--filter sieve|positive_aware|rank_window|cross_encoder|oracle|none|sieve_teacher|
                  positive_aware_teacher|positive_aware_teacher_sieve] [--model minilm|FOLDER] \
        [--mode drop|relabel|mark] [--labels known.jsonl] [--near-duplicate 0.9] \
        [--decisions cleaned.decisions.parquet] [--report cleaned.report.json]

Its settings (pipeline.core.settings.job_documents.CleanJob: these flags and the filters' own, ``--rank-window-start``,
``--positive-aware-mode``, ``--cross-encoder-threshold``, ``--strict``, ``--seed``, ...) default to the
contract's. Rule clean_negatives passes a clean.<name> entry's as one document (``--settings-json``: the
entry's and what its filter reads of section sieve); a run by hand reads the same from a file, each flag
over it::

    python -m pipeline.workflow.jobs NAME clean_negatives > clean.json
    python -m pipeline.sieve.clean --settings clean.json --input mined.jsonl --out cleaned.jsonl

Formats (detected from the columns unless ``--format`` names one; docs/clean.md):

- sentence-transformers (``mine_hard_negatives``): ``triplet`` (anchor, positive, negative[, scores]),
  ``n_tuple`` (anchor, positive, negative_1..negative_n[, scores]), ``labeled_pair`` (anchor, document,
  label), ``labeled_list`` (anchor, [documents], [labels] or [scores]: the first document is the
  positive); the text columns by position, as sentence-transformers reads them, and any other column (a
  row id, a weight) carried through unchanged;
- Tevatron JSONL rows {query_id, query, positive_passages, negative_passages} of {docid, title, text};
- FlagEmbedding JSONL rows {query, pos, neg[, pos_scores, neg_scores, prompt, type]};

read from JSONL, Parquet, CSV (list cells as JSON, or as ``Dataset.to_csv`` writes them, numpy-style) or a
``datasets`` folder (``save_to_disk``; only with the ``datasets`` package installed). Written in the same
container, columns, order and types; a file in which nothing changed is copied byte for byte, and a JSONL
row left alone keeps its line as read. An output that is an input (the same file under any name, a
folder inside the input folder), or two outputs that collide, are refused before any work.

Order of judgement: first every negative whose normalised text (NFKC, casefolded, punctuation out,
whitespace collapsed) equals a positive of its query, or whose word 3-gram Jaccard with one is at least
``--near-duplicate``, is ``duplicate_of_positive``; then the filter judges the others, per query set
P = {first positive} + its negatives, with the project's own filter classes (pipeline.sieve.filters) on
a candidate table built from the file: the sieve is Algorithm 1 (pipeline.sieve.passage_sieve) scored by
``--model``. Triplets and labeled pairs are grouped by (anchor, positive) / anchor into one set.

``--mode drop`` removes what was flagged. An n-tuple file keeps one number k of negative columns for
every row (a trainer reads columns): each row's kept negatives are refilled into negative_1..negative_k
in rank order, k chosen to write the most texts ((2 + k) x the rows keeping at least k; ties: the smaller
k), a row with fewer goes; the report and the decisions (actions ``trimmed``, ``removed_with_row``) count
what that costs. A drop that would leave no row is refused; one that loses more than half the rows is a
warning. ``relabel`` makes the filter's suspects positives where the format holds
several (Tevatron, FlagEmbedding, labeled pair/list with labels) and removes duplicates; ``mark`` keeps
every negative and adds a verdict column (``sieve_verdict`` per row, ``sieve_verdicts`` per list).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import csv
import hashlib
import io
import json
import logging
import math
import os
import re
import shutil
import socket
import tempfile
import threading
import time
import unicodedata
from dataclasses import dataclass, field, make_dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.core.cli import add_job_flags, check_writable, run_main, stage_parser, start_stage
from pipeline.core.jobs import add_settings_flags, job_settings
from pipeline.core.schemas import CLEAN_DECISIONS_SCHEMA, CORPUS_SCHEMA, QUERIES_SCHEMA
from pipeline.core.settings.base import default
from pipeline.core.settings.flags import add_flags
from pipeline.core.settings.job_documents import CleanJob
from pipeline.core.storage import (
    DataError,
    atomic_open,
    atomic_path,
    refuse_overwriting_inputs,
    write_json,
    write_table,
)
from pipeline.sieve.filters import FILTERS, CandidateFilter, FilterInputs, FilterSetup, build_filter
from pipeline.sieve.report import detection_metrics, detection_report
from pipeline.sieve.settings import (
    CLEAN_FILTERS,
    CLEAN_FORMATS,
    CLEAN_MODES,
    FILTER_CONTRACTS,
    MODEL_FILTERS,
    CleanSpec,
)

log = logging.getLogger("sieve.clean")

DECISIONS = ("kept", "dropped", "duplicate_of_positive")
# The filters the cleaning command does not run that say why (their modules'); any other is an invalid choice.
NOT_APPLICABLE = {
    name: spec.not_cleaning for name, spec in FILTERS.items() if not spec.contract.clean and spec.not_cleaning
}
RELABEL_FORMATS = ("tevatron", "flagembedding", "labeled_pair", "labeled_list")
# Never a text: the miner's scores and labels, and the verdicts mark mode adds (a marked file cleaned again).
SCORE_COLUMNS = ("scores", "score", "label", "labels", "sieve_verdict", "sieve_verdicts")
SHINGLE = 3
_PUNCT = re.compile(r"[^\w\s]|_", re.UNICODE)


# ---- near-duplicates ------------------------------------------------------------------------------


def normalise(text: str) -> str:
    """NFKC, casefolded, punctuation replaced by spaces, whitespace collapsed."""
    text = unicodedata.normalize("NFKC", text).casefold()
    return " ".join(_PUNCT.sub(" ", text).split())


def shingles(normalised: str, n: int = SHINGLE) -> frozenset[tuple[str, ...]]:
    """Word n-grams of a normalised text (a text shorter than n words: the text itself)."""
    words = normalised.split()
    if len(words) < n:
        return frozenset([tuple(words)]) if words else frozenset()
    return frozenset(tuple(words[i : i + n]) for i in range(len(words) - n + 1))


def jaccard(a: frozenset, b: frozenset) -> float:
    if not a or not b:
        return 0.0
    return len(a & b) / len(a | b)


# ---- what a file holds -----------------------------------------------------------------------------


@dataclass
class Passage:
    text: str
    title: str = ""
    docid: str | None = None

    @property
    def pid(self) -> str:
        """A content id: the same title and text are the same passage whatever their docids."""
        digest = hashlib.sha1(f"{self.title}\x1f{self.text}".encode("utf-8")).hexdigest()
        return "c" + digest[:20]


@dataclass
class Negative:
    record: int  # row of the file (0-based)
    slot: str  # where in the row: a column, or list[index]
    index: int  # position in the row's negatives (for rewriting)
    passage: Passage
    rank: int  # 1-based position among the set's negatives
    source_score: float = math.nan


@dataclass
class QuerySet:
    qid: str
    query: str
    positive: Passage  # P's positive (the first of the row / anchor)
    negatives: list[Negative] = field(default_factory=list)


@dataclass
class Dataset:
    """The file's rows (plain Python values) and how to write them back."""

    path: Path
    container: str  # jsonl | parquet | csv | hf
    columns: list[str]
    records: list[dict[str, Any]]
    schema: pa.Schema | None = None  # parquet / hf
    lines: list[str] | None = None  # jsonl: each row's line as read, written back for a row left alone
    newline: str = "\n"  # jsonl / csv: the file's line ending
    list_style: dict[str, str] = field(default_factory=dict)  # csv: column -> "json" | "numpy"
    line_numbers: list[int] | None = None  # jsonl: each row's line (blank lines are skipped)

    def error(self, message: str, row: int | None = None, column: str | None = None) -> DataError:
        record = None
        if row is not None:
            record = f"{row} (line {self.line_of(row)})" if self.container == "jsonl" else row
        return DataError(message, file=self.path, record=record, field=column)

    def line_of(self, row: int) -> int:
        return self.line_numbers[row] if self.line_numbers else row + 1


DATASETS_FOLDER_FILES = ("state.json", "dataset_info.json")


def container_of(path: Path) -> str:
    if path.is_dir():
        return "hf"
    suffix = ("".join(path.suffixes[-2:]) if path.suffix.lower() == ".gz" else path.suffix).lower()
    kinds = {".jsonl": "jsonl", ".json": "jsonl", ".parquet": "parquet", ".csv": "csv"}
    if suffix not in kinds:
        raise DataError(
            f"unknown file type {suffix or '(none)'!r}: .jsonl, .json (one object a line), .parquet, .csv, "
            "or a datasets folder (save_to_disk)",
            file=path,
        )
    return kinds[suffix]


def check_datasets_folder(path: Path) -> None:
    """A folder as an input must be what ``Dataset.save_to_disk`` wrote; anything else is named."""
    if (path / "dataset_dict.json").exists():
        splits = sorted(p.name for p in path.iterdir() if (p / "state.json").exists())
        raise DataError(
            "a DatasetDict folder (several splits): clean one split's folder"
            + (f", e.g. {path / splits[0]}" if splits else ""),
            file=path,
        )
    if not all((path / name).exists() for name in DATASETS_FOLDER_FILES):
        raise DataError(
            "a folder that is not a datasets folder (Dataset.save_to_disk writes state.json and "
            "dataset_info.json into it): give a .jsonl, .parquet or .csv file, or such a folder",
            file=path,
        )


def read_dataset(path: str | os.PathLike) -> Dataset:
    """The rows of a dataset; a file that cannot be decoded (bytes that are not UTF-8, a damaged
    Parquet file, a CSV without a header) is one DataError naming it."""
    path = Path(path)
    if not path.exists():
        raise DataError("file not found", file=path)
    if path.is_dir():
        check_datasets_folder(path)
    try:
        return _read_dataset(path)
    except UnicodeDecodeError as exc:
        raise DataError(f"not UTF-8 text ({exc.reason})", file=path) from None
    except (pa.ArrowException, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise DataError(f"not a readable {container_of(path)} file ({exc})", file=path) from None


# JSON allows a lone surrogate escape (\ud800); UTF-8 cannot hold one, so such a text dies at the
# write. Only lines with such an escape are walked.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise _RepeatedKey(key)
        out[key] = value
    return out


class _RepeatedKey(Exception):
    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def _bad_text(value: Any, where: str) -> str | None:
    """The place of the first text in ``value`` that UTF-8 cannot encode (a lone surrogate)."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return where
        return None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        if isinstance(key, str) and _bad_text(key, "") is not None:
            return f"{where}.<a key>" if where else "<a key>"
        place = f"{where}.{key}" if isinstance(value, dict) and where else str(key)
        if isinstance(value, list):
            place = f"{where}[{key}]"
        found = _bad_text(item, place)
        if found is not None:
            return found
    return None


def _read_jsonl(path: Path) -> Dataset:
    records, columns, lines, line_numbers = [], [], [], []
    newline = "\n"
    # utf-8-sig: a byte-order mark (Windows editors write one) is not part of the first object
    with open(path, encoding="utf-8-sig", newline="") as handle:
        for line_no, line in enumerate(handle, start=1):
            if line_no == 1 and line.endswith("\r\n"):
                newline = "\r\n"
            if not line.strip():
                continue
            record = f"{len(records)} (line {line_no})"
            if not records and line.lstrip().startswith("["):
                raise DataError(
                    "a JSON array: this command reads JSON Lines, one object a line (a .json file too); "
                    "write one object a line first, e.g. jq -c '.[]' FILE > FILE.jsonl",
                    file=path,
                    record=record,
                )
            try:
                value = json.loads(line, object_pairs_hook=_unique_keys)
            except json.JSONDecodeError as exc:
                raise DataError(f"not JSON: {exc.msg}", file=path, record=record) from None
            except _RepeatedKey as exc:
                raise DataError(
                    "key given twice in one object; only the last would count (JSON readers drop the "
                    "first): keep one",
                    file=path,
                    record=record,
                    field=exc.key,
                ) from None
            if not isinstance(value, dict):
                raise DataError(
                    f"a row must be a JSON object, not {type(value).__name__}", file=path, record=record
                )
            if _SURROGATE_ESCAPE.search(line):
                where = _bad_text(value, "")
                if where is not None:
                    raise DataError(
                        "a lone surrogate escape (\\ud800-\\udfff without its pair): not a character, "
                        "UTF-8 (and Parquet) cannot hold it; fix or remove it",
                        file=path,
                        record=record,
                        field=where,
                    )
            records.append(value)
            lines.append(line if line.endswith(("\n", "\r")) else line + newline)
            line_numbers.append(line_no)
            columns += [k for k in value if k not in columns]
    return Dataset(path, "jsonl", columns, records, lines=lines, newline=newline, line_numbers=line_numbers)


def _read_dataset(path: Path) -> Dataset:
    kind = container_of(path)
    if kind == "jsonl":
        return _read_jsonl(path)
    if kind == "parquet":
        table = pq.read_table(path)
        return Dataset(path, kind, table.column_names, table.to_pylist(), table.schema)
    if kind == "csv":
        with open(path, encoding="utf-8", newline="") as handle:
            first = handle.readline()
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
        newline = "\r\n" if first.endswith("\r\n") else "\n"
        return Dataset(path, kind, list(frame.columns), frame.to_dict("records"), newline=newline)
    try:
        import datasets  # noqa: F401  (optional: only for folders written by Dataset.save_to_disk)
    except ImportError:
        raise DataError(
            "a datasets folder needs the `datasets` package (not installed here); or write it as Parquet "
            "first (Dataset.to_parquet) and clean that",
            file=path,
        ) from None
    try:
        with _quiet_datasets(datasets):
            table = datasets.load_from_disk(str(path)).data.table
    except (FileNotFoundError, ValueError, KeyError, json.JSONDecodeError) as exc:
        raise DataError(f"not a readable datasets folder ({exc})", file=path) from None
    return Dataset(path, kind, table.column_names, table.to_pylist(), table.schema)


def write_dataset(
    data: Dataset,
    records: list[dict],
    out: Path,
    extra: dict[str, pa.DataType],
    *,
    work: Path,
    drop_columns: tuple[str, ...] = (),
    untouched: list[int | None] | None = None,
) -> None:
    """``records`` in ``data``'s container, columns and types; ``extra``: added columns (mark mode);
    ``drop_columns``: columns no row holds any more (an n-tuple's trimmed negatives); ``untouched``:
    per written record, the input row it equals (JSONL writes that row's line as read), else None."""
    columns = [c for c in data.columns if c not in drop_columns] + [c for c in extra if c not in data.columns]
    if data.container == "jsonl":
        with atomic_open(out, "w", encoding="utf-8", newline="") as handle:
            for i, record in enumerate(records):
                row = untouched[i] if untouched else None
                if row is not None:
                    handle.write(data.lines[row])
                else:
                    handle.write(json.dumps(record, ensure_ascii=False) + data.newline)
        return
    if data.container == "csv":
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator=data.newline)
        writer.writeheader()
        for record in records:
            writer.writerow({k: _csv_cell(v, data.list_style.get(k, "json")) for k, v in record.items()})
        with atomic_open(out, "w", encoding="utf-8", newline="") as handle:
            handle.write(buffer.getvalue())
        return
    schema = data.schema
    for name in drop_columns:
        schema = schema.remove(schema.get_field_index(name))
    for name, kind in extra.items():
        if name not in schema.names:
            schema = schema.append(pa.field(name, kind))
    table = pa.Table.from_pylist(records, schema=schema)
    if data.container == "parquet":
        with atomic_path(out) as tmp:
            pq.write_table(table, tmp)
        return
    import datasets

    tmp = work / "dataset"
    with _quiet_datasets(datasets):
        datasets.Dataset(table).save_to_disk(str(tmp))
    _replace_folder(tmp, out)


@contextlib.contextmanager
def _quiet_datasets(datasets: Any) -> Iterator[None]:
    """No "Saving the dataset" bar: in a job's log each is a line of carriage returns."""
    enabled = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        if enabled:
            datasets.enable_progress_bars()


def _replace_folder(tmp: Path, out: Path) -> None:
    """Put the folder ``tmp`` at ``out`` (a datasets folder written before, or nothing)."""
    if out.exists():
        old = tmp.parent / "replaced"
        os.replace(out, old)  # then out is absent for an instant only, never half-written
    os.replace(tmp, out)


def _csv_cell(value: Any, style: str = "json") -> str:
    if isinstance(value, (list, dict)):
        if style == "numpy" and isinstance(value, list):
            return "[" + " ".join(repr(v) for v in value) + "]"
        return json.dumps(value, ensure_ascii=False)
    return "" if value is None else str(value)


# ---- CSV list cells -------------------------------------------------------------------------------

# Dataset.to_csv writes a list as numpy prints it: space-separated, wrapped over lines, strings in
# Python quotes ('[0.776 0.702 ]', "['a b' 'c']"); json.dumps-style cells ('[0.776, 0.702]') too.
_NUMPY_STRING = re.compile(r"""\s*('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")""", re.DOTALL)


def parse_list_cell(value: str) -> tuple[list, str] | None:
    """(the list, its style: json | numpy) of a CSV cell that holds a list, else None."""
    text = value.strip()
    if not (text.startswith("[") and text.endswith("]")):
        return None
    try:
        parsed = json.loads(text)
        if isinstance(parsed, list):
            return parsed, "json"
    except json.JSONDecodeError:
        pass
    inner = text[1:-1].strip()
    if not inner:
        return [], "numpy"
    if inner[0] in "'\"":
        items, pos = [], 0
        while pos < len(inner):
            match = _NUMPY_STRING.match(inner, pos)
            if match is None:
                return None
            try:
                items.append(ast.literal_eval(match.group(1)))
            except (ValueError, SyntaxError):
                return None
            pos = match.end()
            while pos < len(inner) and inner[pos] in " \n\r\t,":
                pos += 1
        return items, "numpy"
    numbers = []
    for token in inner.replace(",", " ").split():
        try:
            numbers.append(int(token) if re.fullmatch(r"[-+]?\d+", token) else float(token))
        except ValueError:
            return None
    return numbers, "numpy"


def _maybe_list(value: Any, container: str) -> Any:
    if container == "csv" and isinstance(value, str):
        parsed = parse_list_cell(value)
        if parsed is not None:
            return parsed[0]
    return value


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _is_text_type(kind: pa.DataType) -> bool:
    if pa.types.is_dictionary(kind):  # a pandas category written to Parquet
        kind = kind.value_type
    return pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind)


def text_columns(data: Dataset) -> list[str]:
    """The columns that hold texts, in file order: string-typed (Parquet, datasets), a string in the
    first row where the column is not null (JSONL), not a column whose filled cells are all numbers or
    lists (CSV). Other columns (a row id, scores, labels) are carried through untouched;
    sentence-transformers reads the text columns by position."""
    if data.schema is not None:
        return [f.name for f in data.schema if _is_text_type(f.type)]
    out = []
    for column in data.columns:
        if data.container == "csv":
            filled = [r[column] for r in data.records if r.get(column, "") != ""]
            if not filled or not all(_is_number(v) or parse_list_cell(v) is not None for v in filled):
                out.append(column)
            continue
        # the first value decides; a null or a number in a later row is then named by the reader
        first = next((r[column] for r in data.records if r.get(column) is not None), None)
        if isinstance(first, str):
            out.append(column)
    return out


def list_columns(data: Dataset) -> list[str]:
    """The columns whose first row holds a list (CSV cells parsed)."""
    first = data.records[0] if data.records else {}
    return [c for c in data.columns if isinstance(_maybe_list(first.get(c), data.container), list)]


def _remember_style(data: Dataset, column: str, value: Any) -> None:
    if data.container == "csv" and isinstance(value, str) and column not in data.list_style:
        parsed = parse_list_cell(value)
        if parsed is not None:
            data.list_style[column] = parsed[1]


# ---- formats ---------------------------------------------------------------------------------------


def detect_format(data: Dataset) -> str:
    """The schema's name from its columns (and the first row's value types)."""
    cols = data.columns
    present = set(cols)
    if {"query", "positive_passages", "negative_passages"} <= present:
        return "tevatron"
    if {"query", "pos", "neg"} <= present:
        return "flagembedding"
    if any(re.fullmatch(r"negative_\d+", c) for c in cols):
        return "n_tuple"
    texts = [c for c in text_columns(data) if c not in SCORE_COLUMNS]
    lists = [c for c in list_columns(data) if c not in SCORE_COLUMNS]
    if len(texts) == 1 and lists:
        return "labeled_list"
    if len(texts) == 2 and ("label" in present or "score" in present):
        return "labeled_pair"
    if len(texts) == 3:
        return "triplet"
    hint = (
        " (text columns by position: anchor, positive, negatives: --format n_tuple)" if len(texts) > 3 else ""
    )
    raise DataError(
        f"cannot tell the format from the columns {cols}, of which {texts} hold texts (sentence-transformers "
        f"triplet / n-tuple / labeled pair / labeled list, Tevatron, FlagEmbedding): give --format{hint}",
        file=data.path,
    )


_UNSET = object()


@dataclass
class Rewritten:
    """What drop / relabel / mark made of the file's rows."""

    records: list[dict] = field(default_factory=list)
    untouched: list[int | None] = field(default_factory=list)  # per record: the input row it equals
    drop_columns: tuple[str, ...] = ()
    # (row, negative index) -> action, for negatives the filter kept that are not written (an n-tuple
    # row or column that had to go so that every row keeps the same number of negative columns)
    unwritten: dict[tuple[int, int], str] = field(default_factory=dict)
    notes: dict[str, Any] = field(default_factory=dict)  # for the report

    def add(self, records: list[dict], row: int | None) -> None:
        self.records += records
        self.untouched += [row] * len(records)


class Format:
    """Reads the query sets of one schema and writes its rows back."""

    name = ""
    relabels = False

    def __init__(self, data: Dataset):
        self.data = data
        self.positives_of: dict[str, list[str]] = {}  # normalised query -> positives' texts

    # helpers
    def text(self, row: int, column: str, value: Any = _UNSET) -> str:
        if value is _UNSET:
            if column not in self.data.records[row]:
                raise self.data.error("missing", row, column)
            value = self.data.records[row][column]
        if not isinstance(value, str):
            raise self.data.error(f"expected a text, found {_kind(value)}", row, column)
        return value

    def cell(self, row: int, column: str) -> Any:
        record = self.data.records[row]
        if column not in record:
            raise self.data.error("missing", row, column)
        _remember_style(self.data, column, record[column])
        return _maybe_list(record[column], self.data.container)

    def list_cell(self, row: int, column: str) -> list:
        value = self.cell(row, column)
        if not isinstance(value, list):
            raise self.data.error(f"expected a list, found {_kind(value)}", row, column)
        return value

    def number(self, row: int, column: str, value: Any) -> float:
        """A score or label: a finite number (NaN or infinity is refused: no rule can read it)."""
        if isinstance(value, str) and self.data.container == "csv":
            try:
                value = float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.data.error(f"expected a number, found {_kind(value)}", row, column)
        if not math.isfinite(value):
            raise self.data.error(
                f"{value} is not a finite number; fix or remove the value (a score of the miner, or a label)",
                row,
                column,
            )
        return float(value)

    def add_positive(self, query: str, text: str) -> None:
        self.positives_of.setdefault(normalise(query), []).append(text)

    def texts(self) -> list[str]:
        """The text columns (by type), less the labels' and scores' columns."""
        return [c for c in text_columns(self.data) if c not in SCORE_COLUMNS]

    # interface
    def sets(self) -> list[QuerySet]:
        raise NotImplementedError

    def rewrite(self, row: int, actions: dict[int, str], verdicts: dict[int, str]) -> list[dict]:
        """The row after the actions (negative index -> kept | removed | relabelled | marked)."""
        raise NotImplementedError

    def rewrite_all(
        self, actions: dict[int, dict[int, str]], verdicts: dict[int, dict[int, str]]
    ) -> Rewritten:
        """Every row after its actions; a row whose negatives are all kept is written as it was read."""
        out = Rewritten()
        for row in range(len(self.data.records)):
            if any(a != "kept" for a in actions.get(row, {}).values()):
                out.add(self.rewrite(row, actions[row], verdicts[row]), None)
            else:
                out.add([dict(self.data.records[row])], row)
        return out

    def extra_columns(self) -> dict[str, pa.DataType]:
        """The verdict column that mark mode adds."""
        return {"sieve_verdicts": pa.list_(pa.string())}


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


class FlatFormat(Format):
    """triplet / labeled_pair: one negative per row, grouped into sets across rows."""

    def extra_columns(self) -> dict[str, pa.DataType]:
        return {"sieve_verdict": pa.string()}

    def rewrite(self, row, actions, verdicts):
        record = dict(self.data.records[row])
        action = actions.get(0)
        if action == "removed":
            return []
        if action == "marked":
            record["sieve_verdict"] = verdicts[0]
        if action == "relabelled":
            old = record.get("label")
            record["label"] = "1" if isinstance(old, str) else 1.0 if isinstance(old, float) else 1
        return [record]


class Triplet(FlatFormat):
    name = "triplet"

    def sets(self):
        cols = self.texts()
        if len(cols) != 3:
            raise self.data.error(
                f"a triplet file has 3 text columns (anchor, positive, negative; any other column is "
                f"carried through), found {len(cols)}: {cols}"
            )
        anchor, positive, negative = cols
        has_scores = "scores" in self.data.columns
        groups: dict[tuple[str, str], QuerySet] = {}
        for row in range(len(self.data.records)):
            q, p, n = (self.text(row, c) for c in (anchor, positive, negative))
            self.add_positive(q, p)
            key = (q, p)
            if key not in groups:
                groups[key] = QuerySet(f"g{len(groups)}", q, Passage(p))
            qs = groups[key]
            score = math.nan
            if has_scores:
                scores = self.list_cell(row, "scores")
                if len(scores) != 2:
                    raise self.data.error(
                        f"expected [positive, negative] scores, found {len(scores)}", row, "scores"
                    )
                self.number(row, "scores[0]", scores[0])
                score = self.number(row, "scores[1]", scores[1])
            qs.negatives.append(Negative(row, negative, 0, Passage(n), len(qs.negatives) + 1, score))
        return list(groups.values())


class LabeledPair(FlatFormat):
    name = "labeled_pair"
    relabels = True

    def sets(self):
        cols = self.texts()
        if "label" not in self.data.columns:
            raise self.data.error(
                "labeled pairs with a score column and no label do not say which document is the positive "
                "(mine them with output_scores=False, or as labeled lists)",
                column="label",
            )
        if len(cols) != 2:
            raise self.data.error(
                f"a labeled pair file has 2 text columns (anchor, document) and a label, found {len(cols)}: {cols}"
            )
        anchor, document = cols
        groups: dict[str, QuerySet] = {}
        pending: list[tuple[int, str, str]] = []
        for row in range(len(self.data.records)):
            q, d = self.text(row, anchor), self.text(row, document)
            label = self.number(row, "label", self.cell(row, "label"))
            if label not in (0.0, 1.0):
                raise self.data.error(f"a label is 0 or 1, found {label:g}", row, "label")
            if label == 1.0:
                self.add_positive(q, d)
                groups.setdefault(q, QuerySet(f"g{len(groups)}", q, Passage(d)))
            else:
                pending.append((row, q, d))
        for row, q, d in pending:
            if q not in groups:
                raise self.data.error("a negative of an anchor without a positive (label 1) row", row, anchor)
            qs = groups[q]
            qs.negatives.append(Negative(row, document, 0, Passage(d), len(qs.negatives) + 1))
        return list(groups.values())


class NTuple(Format):
    """(anchor, positive, negative_1 .. negative_n[, scores]). Every row must keep the same negative
    columns (sentence-transformers' trainer reads columns, not lists), so drop mode chooses one count k
    for the whole file (``choose_width``): each row keeps its first k kept negatives, refilled into
    negative_1..negative_k in rank order; a row with fewer than k kept negatives goes."""

    name = "n_tuple"

    def sets(self):
        cols = self.data.columns
        named = [c for c in cols if re.fullmatch(r"negative_\d+", c)]
        texts = self.texts()
        if named:
            self.neg_cols = sorted(named, key=lambda c: int(c.split("_")[1]))
            rest = [c for c in texts if c not in self.neg_cols]
        else:  # columns by position, as sentence-transformers reads them
            rest, self.neg_cols = texts[:2], texts[2:]
        if len(rest) < 2 or not self.neg_cols:
            raise self.data.error(
                f"an n-tuple file has text columns anchor, positive, then one or more negatives; found {texts}"
            )
        anchor, positive = rest[:2]
        self.has_scores = "scores" in cols
        out = []
        for row in range(len(self.data.records)):
            q, p = self.text(row, anchor), self.text(row, positive)
            self.add_positive(q, p)
            scores = self.list_cell(row, "scores") if self.has_scores else None
            if scores is not None and len(scores) != len(self.neg_cols) + 1:
                raise self.data.error(
                    f"expected {len(self.neg_cols) + 1} scores (positive, then each negative), found {len(scores)}",
                    row,
                    "scores",
                )
            if scores is not None:
                self.number(row, "scores[0]", scores[0])
            qs = QuerySet(f"r{row}", q, Passage(p))
            for i, col in enumerate(self.neg_cols):
                score = (
                    self.number(row, f"scores[{i + 1}]", scores[i + 1]) if scores is not None else math.nan
                )
                qs.negatives.append(Negative(row, col, i, Passage(self.text(row, col)), i + 1, score))
            out.append(qs)
        return out

    def rewrite(self, row, actions, verdicts):
        record = dict(self.data.records[row])
        record["sieve_verdicts"] = [verdicts[i] for i in range(len(self.neg_cols))]
        return [record]

    def rewrite_all(self, actions, verdicts):
        if not any(a == "removed" for row in actions.values() for a in row.values()):
            return super().rewrite_all(actions, verdicts)  # mark, or nothing flagged
        n = len(self.neg_cols)
        kept = [
            [i for i in range(n) if actions.get(row, {}).get(i, "kept") == "kept"]
            for row in range(len(self.data.records))
        ]
        k = choose_width([len(x) for x in kept], n)
        out = Rewritten(drop_columns=tuple(self.neg_cols[k:]))
        out.notes = {"negative_columns_in": n, "negative_columns_out": k}
        for row, idx in enumerate(kept):
            if len(idx) < k or k == 0:
                out.unwritten.update({(row, i): "removed_with_row" for i in idx})
                continue
            out.unwritten.update({(row, i): "trimmed" for i in idx[k:]})
            if k == n:
                out.add([dict(self.data.records[row])], row)
                continue
            record = dict(self.data.records[row])
            for col, i in zip(self.neg_cols, idx[:k]):
                record[col] = self.data.records[row][self.neg_cols[i]]
            for col in self.neg_cols[k:]:
                record.pop(col, None)
            if self.has_scores:
                scores = self.list_cell(row, "scores")
                record["scores"] = [scores[0]] + [scores[i + 1] for i in idx[:k]]
            out.add([record], None)
        return out


def choose_width(kept_counts: list[int], n: int) -> int:
    """The number of negative columns k an n-tuple file keeps in drop mode: the k in 1..n that writes
    the most texts, (2 + k) × the rows keeping at least k negatives (each row's anchor and positive
    count: a row is a training pair, its negatives add to it); on a tie the smaller k, which keeps
    more rows. 0 when no row keeps a negative (nothing can be written)."""
    best, best_texts = 0, 0
    for k in range(1, n + 1):
        texts = (2 + k) * sum(1 for c in kept_counts if c >= k)
        if texts > best_texts:
            best, best_texts = k, texts
    return best


class LabeledList(Format):
    name = "labeled_list"

    def sets(self):
        texts = self.texts()
        lists = [c for c in list_columns(self.data) if c not in SCORE_COLUMNS]
        if not texts or not lists:
            raise self.data.error(
                f"a labeled list file has a text column (anchor) and a list column (documents); found texts "
                f"{texts}, lists {lists}"
            )
        self.anchor, self.docs = texts[0], lists[0]
        self.labels = "labels" if "labels" in self.data.columns else None
        self.scores = "scores" if "scores" in self.data.columns else None
        if self.labels is None and self.scores is None:
            raise self.data.error("a labeled list needs a labels or a scores column", column="labels")
        self.relabels = self.labels is not None
        out = []
        self.positions: dict[int, list[int]] = {}
        for row in range(len(self.data.records)):
            q = self.text(row, self.anchor)
            docs = self.list_cell(row, self.docs)
            for i, d in enumerate(docs):
                self.text(row, f"{self.docs}[{i}]", d)
            if self.labels:
                labels = [
                    self.number(row, f"{self.labels}[{i}]", x)
                    for i, x in enumerate(self.list_cell(row, self.labels))
                ]
            else:
                labels = [1.0] + [0.0] * (len(docs) - 1)  # mine_hard_negatives: the positive first
            scores = self.list_cell(row, self.scores) if self.scores else None
            for name, values in ((self.labels, labels), (self.scores, scores)):
                if name and len(values) != len(docs):
                    raise self.data.error(f"{len(values)} values for {len(docs)} documents", row, name)
            pos = [i for i, x in enumerate(labels) if x >= 1]
            if not pos:
                raise self.data.error("no positive (label 1) in the row", row, self.labels or self.docs)
            for i in pos:
                self.add_positive(q, docs[i])
            qs = QuerySet(f"r{row}", q, Passage(docs[pos[0]]))
            negs = [i for i, x in enumerate(labels) if x < 1]
            self.positions[row] = negs
            for k, i in enumerate(negs):
                score = self.number(row, f"{self.scores}[{i}]", scores[i]) if scores else math.nan
                qs.negatives.append(Negative(row, f"{self.docs}[{i}]", k, Passage(docs[i]), k + 1, score))
            out.append(qs)
        return out

    def rewrite(self, row, actions, verdicts):
        record = dict(self.data.records[row])
        negs = self.positions[row]
        drop = {negs[k] for k, a in actions.items() if a == "removed"}
        lists = [c for c in (self.docs, self.labels, self.scores) if c]
        values = {c: list(self.cell(row, c)) for c in lists}
        if self.labels:
            one = 1 if not isinstance(values[self.labels][0], float) else 1.0
            for k, a in actions.items():
                if a == "relabelled":
                    values[self.labels][negs[k]] = one
        if "marked" in actions.values():
            by_doc = {negs[k]: verdicts[k] for k in verdicts}
            record["sieve_verdicts"] = [by_doc.get(i, "positive") for i in range(len(values[self.docs]))]
        for c in lists:
            record[c] = [v for i, v in enumerate(values[c]) if i not in drop]
        return [record]


class Tevatron(Format):
    name = "tevatron"
    relabels = True

    def passage(self, row: int, column: str, i: int, value: Any) -> Passage:
        where = f"{column}[{i}]"
        if not isinstance(value, dict):
            raise self.data.error(
                f"a passage is an object {{docid, title, text}}, found {_kind(value)}", row, where
            )
        if not isinstance(value.get("text"), str):
            raise self.data.error(
                f"text: expected a text, found {_kind(value.get('text'))}", row, where + ".text"
            )
        title = value.get("title") or ""
        if not isinstance(title, str):
            raise self.data.error(f"expected a text, found {_kind(title)}", row, where + ".title")
        docid = value.get("docid")
        return Passage(value["text"], title, None if docid is None else str(docid))

    def sets(self):
        ids = [r.get("query_id") for r in self.data.records]
        unique = len(set(map(str, ids))) == len(ids) and None not in ids
        out = []
        for row in range(len(self.data.records)):
            q = self.text(row, "query")
            pos = [
                self.passage(row, "positive_passages", i, v)
                for i, v in enumerate(self.list_cell(row, "positive_passages"))
            ]
            if not pos:
                raise self.data.error("no positive passage", row, "positive_passages")
            for p in pos:
                self.add_positive(q, p.text)
            qs = QuerySet(str(ids[row]) if unique else f"r{row}", q, pos[0])
            for i, v in enumerate(self.list_cell(row, "negative_passages")):
                p = self.passage(row, "negative_passages", i, v)
                score = v.get("score")
                score = (
                    math.nan if score is None else self.number(row, f"negative_passages[{i}].score", score)
                )
                qs.negatives.append(Negative(row, f"negative_passages[{i}]", i, p, i + 1, score))
            out.append(qs)
        return out

    def rewrite(self, row, actions, verdicts):
        return _move_lists(self, row, actions, verdicts, "positive_passages", "negative_passages", ())


class FlagEmbedding(Format):
    name = "flagembedding"
    relabels = True

    def sets(self):
        out = []
        for row in range(len(self.data.records)):
            q = self.text(row, "query")
            pos = self.list_cell(row, "pos")
            if not pos:
                raise self.data.error("no positive", row, "pos")
            for i, p in enumerate(pos):
                self.add_positive(q, self.text(row, f"pos[{i}]", p))
            negs = self.list_cell(row, "neg")
            neg_scores = None
            for name, size in (("pos_scores", len(pos)), ("neg_scores", len(negs))):
                scores = self.cell(row, name) if self.data.records[row].get(name) is not None else None
                if scores is None:
                    continue
                if not isinstance(scores, list) or len(scores) != size:
                    side = "positive" if name == "pos_scores" else "negative"
                    raise self.data.error(f"{name} must list one score per {side} ({size})", row, name)
                numbers = [self.number(row, f"{name}[{i}]", s) for i, s in enumerate(scores)]
                if name == "neg_scores":
                    neg_scores = numbers
            qs = QuerySet(f"r{row}", q, Passage(pos[0]))
            for i, n in enumerate(negs):
                score = neg_scores[i] if neg_scores is not None else math.nan
                qs.negatives.append(
                    Negative(row, f"neg[{i}]", i, Passage(self.text(row, f"neg[{i}]", n)), i + 1, score)
                )
            out.append(qs)
        return out

    def rewrite(self, row, actions, verdicts):
        return _move_lists(self, row, actions, verdicts, "pos", "neg", (("pos_scores", "neg_scores"),))


def _move_lists(fmt: Format, row: int, actions, verdicts, pos: str, neg: str, paired) -> list[dict]:
    """Remove / relabel entries of a row's negatives list (and the lists aligned with it)."""
    record = dict(fmt.data.records[row])
    lists = {pos: list(fmt.cell(row, pos)), neg: list(fmt.cell(row, neg))}
    for p, n in paired:
        for name in (p, n):
            if record.get(name) is not None:
                lists[name] = list(fmt.cell(row, name))
    negs = lists[neg]
    aligned = [(p, n) for p, n in paired if n in lists]
    moving = [k for k, a in actions.items() if a == "relabelled"]
    for p, n in paired:
        if moving and (p in lists) != (n in lists):
            raise fmt.data.error(
                f"--mode relabel moves negatives into {pos}, but the row has {p if p in lists else n} and not "
                f"{n if p in lists else p}, so the scores would no longer match the passages; add it, or use drop",
                row,
                n if p in lists else p,
            )
    gone = {k for k, a in actions.items() if a in ("removed", "relabelled")}
    moved = [k for k, a in sorted(actions.items()) if a == "relabelled"]
    if moved:
        lists[pos] = lists[pos] + [negs[k] for k in moved]
        for p, n in aligned:
            if p in lists:
                lists[p] = lists[p] + [lists[n][k] for k in moved]
    if "marked" in actions.values():
        record["sieve_verdicts"] = [verdicts[k] for k in range(len(negs))]
    lists[neg] = [v for k, v in enumerate(negs) if k not in gone]
    for _, n in aligned:
        lists[n] = [v for k, v in enumerate(lists[n]) if k not in gone]
    record.update(lists)
    return [record]


FORMAT_CLASSES: dict[str, type[Format]] = {
    "triplet": Triplet,
    "n_tuple": NTuple,
    "labeled_pair": LabeledPair,
    "labeled_list": LabeledList,
    "tevatron": Tevatron,
    "flagembedding": FlagEmbedding,
}


# ---- labels ----------------------------------------------------------------------------------------


def read_labels(path: str | os.PathLike) -> dict[str, set[str]]:
    """Normalised query -> normalised texts of all its relevant passages (columns query, passage):
    qrels_all-like truth, so every other negative of a listed query is a known true negative."""
    data = read_dataset(path)
    out: dict[str, set[str]] = {}
    for row, record in enumerate(data.records):
        for column in ("query", "passage"):
            if not isinstance(record.get(column), str):
                raise data.error(f"expected a text, found {_kind(record.get(column))}", row, column)
        out.setdefault(normalise(record["query"]), set()).add(normalise(record["passage"]))
    return out


def labelled(passage: Passage, truth: set[str]) -> bool:
    """Whether a labels file lists ``passage``: as its text alone, or (a passage with a title, as
    Tevatron's) as title and text joined by any separator that normalising removes: whitespace, a
    newline, or punctuation between them ("title\\ntext", "title: text", "title | text", "title - text")."""
    text = normalise(passage.text)
    if text in truth:
        return True
    return bool(passage.title) and normalise(passage.title + " " + passage.text) in truth


# ---- judging ---------------------------------------------------------------------------------------


# What clean_dataset computes with: CleanJob's fields but the format (clean_dataset's ``fmt``), each
# with its default, and where a model filter computes (auto = a visible GPU, else the CPU).
Settings = make_dataclass(
    "Settings",
    [
        (name, Any, field(default=default(CleanJob, name)))
        for name in CleanJob.model_fields
        if name != "format"
    ]
    + [("device", str, field(default="auto"))],
)


def make_filter(settings: Any, fmt: str) -> CandidateFilter:
    """The entry's filter (its module's builder, as the workflow's filter stage builds it), refused where
    it cannot judge files of format ``fmt``."""
    name = settings.filter
    if name in NOT_APPLICABLE:
        raise DataError(NOT_APPLICABLE[name], field="filter")
    if name not in CLEAN_FILTERS:
        raise DataError(f"unknown filter {name!r} (known: {', '.join(CLEAN_FILTERS)})", field="filter")
    refusal = FILTERS[name].refuses_formats.get(fmt)
    if refusal:
        raise DataError(refusal, field="filter")
    return build_filter(FilterSetup.from_job(name, settings, clean=True, model=settings.model))


def flag_duplicates(
    sets: list[QuerySet], fmt: Format, threshold: float
) -> dict[tuple[int, int], tuple[str, float]]:
    """(set index, negative index) -> (reason, Jaccard) for every negative that duplicates a positive."""
    out = {}
    cache: dict[str, tuple[str, frozenset]] = {}

    def shingled(text: str) -> tuple[str, frozenset]:
        if text not in cache:
            norm = normalise(text)
            cache[text] = (norm, shingles(norm))
        return cache[text]

    for s, qs in enumerate(sets):
        positives = [shingled(t) for t in dict.fromkeys(fmt.positives_of.get(normalise(qs.query), []))]
        for n, neg in enumerate(qs.negatives):
            norm, sh = shingled(neg.passage.text)
            best = 0.0
            for p_norm, p_sh in positives:
                if norm == p_norm:
                    out[(s, n)] = ("normalised text equals a positive's", 1.0)
                    break
                best = max(best, jaccard(sh, p_sh))
            else:
                if positives and best >= threshold:
                    out[(s, n)] = (
                        f"word {SHINGLE}-gram Jaccard {best:.3f} >= {threshold:g} with a positive",
                        best,
                    )
    return out


def candidate_table(
    sets: list[QuerySet], duplicates: dict, labels: dict[str, set[str]] | None
) -> tuple[pd.DataFrame, dict[tuple[int, int], int], dict[str, Passage]]:
    """The candidate table the filters judge (pipeline.sieve.candidates' columns), one row per distinct
    (set, passage) that is not a duplicate; plus (set, negative) -> its row, and pid -> passage."""
    rows, where, passages = [], {}, {}
    for s, qs in enumerate(sets):
        passages[qs.positive.pid] = qs.positive
        truth = labels.get(normalise(qs.query)) if labels is not None else None
        seen: dict[str, int] = {}
        for n, neg in enumerate(qs.negatives):
            if (s, n) in duplicates:
                continue
            pid = neg.passage.pid
            if pid in seen:
                where[(s, n)] = seen[pid]
                continue
            passages.setdefault(pid, neg.passage)
            seen[pid] = where[(s, n)] = len(rows)
            rows.append(
                {
                    "qid": qs.qid,
                    "pid": pid,
                    "rank": neg.rank,
                    "source_score": neg.source_score,
                    "source": "input",
                    "has_answer": None,
                    "is_false_negative": None if truth is None else labelled(neg.passage, truth),
                    "fn_label_source": None if truth is None else "qrels_all",
                    "positive_pid": qs.positive.pid,
                }
            )
    frame = pd.DataFrame(
        rows,
        columns=[
            "qid",
            "pid",
            "rank",
            "source_score",
            "source",
            "has_answer",
            "is_false_negative",
            "fn_label_source",
            "positive_pid",
        ],
    )
    frame["rank"] = frame["rank"].astype(np.int64)
    frame["source_score"] = frame["source_score"].astype(np.float64)
    for col in ("has_answer", "is_false_negative"):
        frame[col] = frame[col].astype("boolean")
    frame["fn_label_source"] = frame["fn_label_source"].astype("string")
    return frame, where, passages


def run_filter(
    the_filter: CandidateFilter,
    cands: pd.DataFrame,
    sets: list[QuerySet],
    passages: dict[str, Passage],
    work: Path,
    batch_size: int,
    device: str = "auto",
) -> pd.DataFrame:
    """The filter's decisions for the candidate rows (their order), through its own ``decide`` on
    corpus and query tables written from the file."""
    if cands.empty:
        return pd.DataFrame({"score": [], "kept": []})
    corpus, queries = work / "corpus.parquet", work / "queries.parquet"
    write_table(
        corpus,
        pd.DataFrame(
            {
                "pid": list(passages),
                "title": [p.title for p in passages.values()],
                "text": [p.text for p in passages.values()],
            }
        ),
        schema=CORPUS_SCHEMA,
    )
    used = dict.fromkeys(cands["qid"])
    texts = {qs.qid: qs.query for qs in sets}
    write_table(
        queries,
        pd.DataFrame({"qid": list(used), "text": [texts[q] for q in used], "answers": [[] for _ in used]}),
        schema=QUERIES_SCHEMA,
    )
    # The filters want the rows of a query together, in rank order (pipeline.sieve.passage_sieve).
    order = np.lexsort((cands["rank"].to_numpy(), pd.factorize(cands["qid"])[0]))
    ordered = cands.iloc[order].reset_index(drop=True)
    decided = the_filter.decide(FilterInputs(ordered, corpus, queries, work / "cache", batch_size, device))
    decided = decided.reset_index(drop=True)
    back = np.empty(len(order), dtype=np.int64)
    back[order] = np.arange(len(order))
    return decided.iloc[back].reset_index(drop=True)


# ---- where the outputs go --------------------------------------------------------------------------


def default_outputs(out: Path) -> tuple[Path, Path]:
    """The decisions table and report beside ``out`` (<out stem>.decisions.parquet, .report.json)."""
    stem = out.name.split(".")[0]
    return out.with_name(stem + ".decisions.parquet"), out.with_name(stem + ".report.json")


def _real(path: Path) -> str:
    return os.path.realpath(os.path.abspath(path))


def _same(a: Path, b: Path) -> bool:
    """One file or folder under two names: the same real path (symlinks, ``..``, ``./``), or, both
    existing, the same inode (a hard link)."""
    if _real(a) == _real(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _within(inner: Path, outer: Path) -> bool:
    return _real(inner).startswith(_real(outer).rstrip(os.sep) + os.sep)


def check_outputs(source: Path, out: Path, decisions: Path, report: Path, labels: Path | None) -> None:
    """Refuse, before any work, outputs that would overwrite or sit inside an input or each other (as
    sort -o and rsync do), and outputs a file or folder in the way makes unwritable."""
    inputs = [("--input", source)] + ([("--labels", labels)] if labels is not None else [])
    outputs = [
        ("--out", out),
        ("--decisions", decisions),
        ("--report", report),
        ("--report's Markdown", report.with_suffix(".md")),
    ]
    refuse_overwriting_inputs(dict(outputs), dict(inputs))
    for i, (flag, path) in enumerate(outputs):
        for other_flag, other in outputs[i + 1 :]:
            if _same(path, other) or _within(other, path) or _within(path, other):
                raise DataError(
                    f"{flag} {path} and {other_flag} {other} collide: one would overwrite the other",
                    file=path,
                )
    folder_out = source.is_dir()
    for flag, path in outputs:
        if path.is_dir() and not (flag == "--out" and folder_out):
            raise DataError(f"{flag}: a folder is in the way of this file; choose another name", file=path)
    if folder_out and out.exists():
        if not out.is_dir():
            raise DataError(
                "--out: a file is in the way of the datasets folder; choose another name", file=out
            )
        if any(out.iterdir()) and not all((out / name).exists() for name in DATASETS_FOLDER_FILES):
            raise DataError(
                "--out is a folder that is not a datasets folder written before: it would be replaced "
                "whole; choose a new name",
                file=out,
            )
    check_writable(*(path for _, path in outputs))


# ---- the work folder -------------------------------------------------------------------------------

WORK_PREFIX = ".clean-"
_WORK_NAME = re.compile(rf"{re.escape(WORK_PREFIX)}(?P<host>.+)-(?P<pid>\d+)-[a-z0-9_]+")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def remove_dead_work(folder: Path) -> list[Path]:
    """Remove the work folders that runs killed on this host left in ``folder`` (a SIGKILL runs no
    cleanup): only those named with this host and a process id that no longer runs, so a run under
    way beside it, here or on another node of a shared file system, keeps its own."""
    host, removed = socket.gethostname(), []
    try:
        entries = list(os.scandir(folder))
    except (FileNotFoundError, NotADirectoryError):
        return removed
    for entry in entries:
        match = _WORK_NAME.fullmatch(entry.name)
        if not match or match["host"] != host or not entry.is_dir(follow_symlinks=False):
            continue
        if int(match["pid"]) != os.getpid() and not _alive(int(match["pid"])):
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(Path(entry.path))
    if removed:
        log.info("removed %d work folder(s) of killed cleaning runs in %s", len(removed), folder)
    return removed


@contextlib.contextmanager
def work_folder(beside: Path) -> Iterator[Path]:
    """A scratch folder beside the output (the same file system, so the output is renamed into place),
    named with the host and process id so that a later run can tell whether its owner still runs."""
    beside.mkdir(parents=True, exist_ok=True)
    remove_dead_work(beside)
    prefix = f"{WORK_PREFIX}{socket.gethostname()}-{os.getpid()}-"
    with tempfile.TemporaryDirectory(prefix=prefix, dir=beside) as work:
        yield Path(work)


# ---- progress ---------------------------------------------------------------------------------------

PROGRESS_EVERY_S = 60.0  # as pipeline.retrieval.encode: a log line at most this often


@contextlib.contextmanager
def progress(what: str, every: float | None = None) -> Iterator[None]:
    """A log line every ``every`` seconds while a long step runs (the filter's model encoding every
    query and passage reports nothing on its own in a job's log), and one when it ends."""
    every = PROGRESS_EVERY_S if every is None else every
    began = time.perf_counter()
    done = threading.Event()

    def beat() -> None:
        while not done.wait(every):
            log.info("%s: still running, %s so far", what, _duration(time.perf_counter() - began))

    thread = threading.Thread(target=beat, name="clean-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
    log.info("%s: done in %s", what, _duration(time.perf_counter() - began))


def _duration(seconds: float) -> str:
    minutes, seconds = divmod(int(round(seconds)), 60)
    return f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"


# ---- the command -----------------------------------------------------------------------------------


def clean_dataset(
    source: str | os.PathLike,
    out: str | os.PathLike,
    *,
    fmt: str = default(CleanJob, "format"),
    settings: Settings | None = None,
    labels: str | os.PathLike | None = None,
    decisions_out: str | os.PathLike | None = None,
    report_out: str | os.PathLike | None = None,
) -> dict:
    """Clean one hard-negative dataset: writes ``out`` (the same schema and container), the per-negative
    decisions table and the report (JSON + Markdown); returns the report. Nothing is written when the
    input cannot be read, an output would overwrite an input, or no row would remain."""
    settings = settings or Settings()
    began = time.perf_counter()
    source, out = Path(source), Path(out)
    default_decisions, default_report = default_outputs(out)
    decisions_out = Path(decisions_out) if decisions_out else default_decisions
    report_out = Path(report_out) if report_out else default_report
    if settings.mode not in CLEAN_MODES:
        raise DataError(f"unknown mode {settings.mode!r} (known: {', '.join(CLEAN_MODES)})", field="mode")
    if not source.exists():
        raise DataError("file not found", file=source)
    if source.is_dir():
        check_datasets_folder(source)
        if not out.is_dir() and out.suffix in (".jsonl", ".json", ".parquet", ".csv"):
            raise DataError(
                f"the input is a datasets folder, so the output is one too: give --out a folder name, not "
                f"a {out.suffix} file (or write the input with Dataset.to_parquet and clean that)",
                file=out,
            )
    elif container_of(out) != container_of(source):
        raise DataError(f"the output must be a {container_of(source)} file like the input", file=out)
    check_outputs(source, out, decisions_out, report_out, Path(labels) if labels else None)
    data = read_dataset(source)
    if not data.records:
        raise DataError("no rows", file=source)
    name = detect_format(data) if fmt == "auto" else fmt
    if name not in FORMAT_CLASSES:
        raise DataError(f"unknown format {name!r} (known: {', '.join(CLEAN_FORMATS)})", field="format")
    handler = FORMAT_CLASSES[name](data)
    sets = handler.sets()
    the_filter = make_filter(settings, name)
    if settings.mode == "relabel" and not handler.relabels:
        raise DataError(
            f"--mode relabel: a {name} row holds one positive (relabelling needs {', '.join(RELABEL_FORMATS)}"
            " with labels); use drop or mark",
            field="mode",
        )
    truth = read_labels(labels) if labels else None
    n_negatives = sum(len(q.negatives) for q in sets)
    log.info(
        "%s: %s, %d rows, %d query sets, %d negatives",
        source,
        name,
        len(data.records),
        len(sets),
        n_negatives,
    )
    if not n_negatives:
        log.warning("%s: no row holds a negative: nothing to judge", source)
    duplicates = flag_duplicates(sets, handler, settings.near_duplicate)
    cands, where, passages = candidate_table(sets, duplicates, truth)
    with work_folder(out.parent) as work:
        (work / "cache").mkdir()
        if settings.filter in MODEL_FILTERS and len(cands):
            what = (
                f"{settings.filter} scored by {settings.model}: {cands['qid'].nunique()} queries and "
                f"{len(passages)} distinct passages to encode, {len(cands)} negatives to judge"
            )
            log.info("%s", what)
            with progress(settings.filter):
                decided = run_filter(
                    the_filter, cands, sets, passages, work, settings.batch_size, settings.device
                )
        else:
            decided = run_filter(
                the_filter, cands, sets, passages, work, settings.batch_size, settings.device
            )
        decided["kept"] = decided["kept"].astype(bool)
        table, keys, actions, verdicts = _decisions(
            sets, duplicates, where, cands, decided, settings, the_filter
        )
        written = handler.rewrite_all(actions, verdicts)
        if written.unwritten:
            position = {key: i for i, key in enumerate(keys)}
            for key, action in written.unwritten.items():
                table.loc[position[key], "action"] = action
        if not written.records:
            raise DataError(
                f"no row would remain: every one of the {len(data.records)} rows loses its negatives in drop "
                f"mode ({int((~table['kept']).sum())} of {len(table)} negatives flagged), so nothing is "
                "written; see the verdicts with --mode mark, or choose a filter or settings that flag fewer",
                file=source,
            )
        extra = handler.extra_columns() if settings.mode == "mark" else {}
        for column in extra:  # rows without negatives: a positive's row, or an empty list
            for record in written.records:
                record.setdefault(column, "positive" if isinstance(handler, FlatFormat) else [])
        changed = bool(extra) or written.drop_columns or len(written.records) != len(data.records)
        changed = changed or any(r is None for r in written.untouched)
        if not changed:
            _copy_input(source, out, work)  # nothing changed: the same bytes
        else:
            write_dataset(
                data,
                written.records,
                out,
                extra,
                work=work,
                drop_columns=written.drop_columns,
                untouched=written.untouched,
            )
    write_table(
        decisions_out, pa.Table.from_pandas(table, schema=CLEAN_DECISIONS_SCHEMA, preserve_index=False)
    )
    seconds = time.perf_counter() - began
    report = build_report(
        table, cands, decided, settings, name, source, out, len(data.records), written, labels, seconds
    )
    write_json(report_out, report)
    with atomic_open(report_out.with_suffix(".md"), "w", encoding="utf-8") as handle:
        handle.write(report_markdown(report))
    log.info(
        "%s -> %s (%s), %d of %d negatives flagged; %d of %d rows and %d of %d negatives written",
        source,
        out,
        settings.mode,
        report["decisions"]["dropped"] + report["decisions"]["duplicate_of_positive"],
        report["negatives"],
        report["rows_out"],
        report["rows_in"],
        report["negatives_written"],
        report["negatives"],
    )
    if report["rows_lost"] * 2 > report["rows_in"]:
        log.warning(
            "%d of %d rows (%.0f%%) are gone from %s: the filter flagged negatives in most rows (%s); "
            "check the report (%s) before training on it, or keep every row with --mode mark",
            report["rows_lost"],
            report["rows_in"],
            100 * report["rows_lost"] / report["rows_in"],
            out,
            settings.filter,
            report_out.with_suffix(".md"),
        )
    return report


def _copy_input(source: Path, out: Path, work: Path) -> None:
    if source.is_dir():
        tmp = work / "dataset"
        shutil.copytree(source, tmp)
        _replace_folder(tmp, out)
        return
    with atomic_path(out) as tmp:
        shutil.copyfile(source, tmp)


def _decisions(sets, duplicates, where, cands, decided, settings, the_filter):
    """The decisions table (one row per negative occurrence), its rows' (file row, negative index), and,
    per file row, negative index -> action / verdict."""
    action_of = {
        "drop": {"kept": "kept", "dropped": "removed", "duplicate_of_positive": "removed"},
        "relabel": {"kept": "kept", "dropped": "relabelled", "duplicate_of_positive": "removed"},
        "mark": {d: "marked" for d in DECISIONS},
    }[settings.mode]
    n = len(decided)
    cols = {c: decided[c].to_numpy() for c in decided.columns}
    cols.setdefault("fallback", np.zeros(n, dtype=bool))
    cols.setdefault("similarity", np.full(n, np.nan))
    score_col = cols["nce_loss"] if "nce_loss" in cols else cols["score"]
    truth = cands["is_false_negative"].to_numpy(object, na_value=None)
    label_source = cands["fn_label_source"].to_numpy(object, na_value=None)
    rows, keys, actions, verdicts = [], [], {}, {}
    reasons: dict[int, str] = {}
    for s, qs in enumerate(sets):
        for n_, neg in enumerate(qs.negatives):
            is_fn = label = None
            if (s, n_) in duplicates:
                decision, (reason, dup) = "duplicate_of_positive", duplicates[(s, n_)]
                score = similarity = math.nan
                fallback = False
            else:
                i = where[(s, n_)]
                kept = bool(cols["kept"][i])
                decision = "kept" if kept else "dropped"
                score, similarity = float(score_col[i]), float(cols["similarity"][i])
                fallback = bool(cols["fallback"][i])
                if i not in reasons:
                    reasons[i] = the_filter.reason({c: v[i] for c, v in cols.items()}, kept)
                reason, dup = reasons[i], math.nan
                is_fn, label = truth[i], label_source[i]
            action = action_of[decision]
            actions.setdefault(neg.record, {})[neg.index] = action
            keys.append((neg.record, neg.index))
            verdicts.setdefault(neg.record, {})[neg.index] = decision
            rows.append(
                {
                    "row": neg.record,
                    "slot": neg.slot,
                    "qid": qs.qid,
                    "query": qs.query,
                    "docid": neg.passage.docid,
                    "text": neg.passage.text,
                    "pid": neg.passage.pid,
                    "rank": neg.rank,
                    "source_score": neg.source_score,
                    "score": score,
                    "similarity": similarity,
                    "duplicate_jaccard": dup,
                    "decision": decision,
                    "reason": reason,
                    "action": action,
                    "kept": decision == "kept",
                    "fallback": fallback,
                    "is_false_negative": is_fn,
                    "fn_label_source": label,
                }
            )
    table = pd.DataFrame(rows, columns=CLEAN_DECISIONS_SCHEMA.names)
    table["is_false_negative"] = table["is_false_negative"].astype("boolean")
    return table, keys, actions, verdicts


def build_report(
    table, cands, decided, settings, fmt, source, out, rows_in, written: Rewritten, labels, seconds
) -> dict:
    """The report: counts per decision (the filter's verdicts) and per action (what the file got), rows
    and negatives in and written, duplicates, rates, and detection where labels exist."""
    rows_out = len(written.records)
    actions = table["action"].value_counts()
    counts = table["decision"].value_counts()
    judged = int(len(table) - counts.get("duplicate_of_positive", 0))
    dropped = int(counts.get("dropped", 0))
    exact = int((table["decision"].eq("duplicate_of_positive") & table["duplicate_jaccard"].eq(1.0)).sum())
    report = {
        "input": str(source),
        "format": fmt,
        "output": str(out),
        "mode": settings.mode,
        "filter": settings.filter,
        "model": settings.model if FILTER_CONTRACTS[settings.filter].scorer is not None else None,
        "near_duplicate_threshold": settings.near_duplicate,
        "rows_in": rows_in,
        "rows_out": rows_out,
        "rows_lost": rows_in - rows_out,
        "negatives_written": int(actions.get("kept", 0) + actions.get("marked", 0)),
        "kept_not_written": int(actions.get("removed_with_row", 0) + actions.get("trimmed", 0)),
        **written.notes,
        "query_sets": int(table["qid"].nunique()),
        "negatives": int(len(table)),
        "decisions": {d: int(counts.get(d, 0)) for d in DECISIONS},
        "duplicates": {"exact": exact, "near": int(counts.get("duplicate_of_positive", 0)) - exact},
        "actions": {a: int(v) for a, v in table["action"].value_counts().items()},
        "judged_by_filter": judged,
        "distinct_judged": int(len(cands)),
        "distinct_passages": int(
            cands["pid"].nunique() + cands.drop_duplicates("qid")["positive_pid"].nunique()
        )
        if len(cands)
        else 0,
        "sieve_out_rate": dropped / judged if judged else None,
        "flagged_rate": (dropped + int(counts.get("duplicate_of_positive", 0))) / len(table)
        if len(table)
        else None,
        "fallback_queries": int(decided["fallback"].sum()) if "fallback" in decided else None,
        "labels": str(labels) if labels else None,
        "seconds": seconds,
        "negatives_per_second": len(table) / seconds if seconds > 0 else None,
    }
    labelled = cands["is_false_negative"].notna()
    if labelled.any():
        # Over the distinct candidates the filter judged: the project's own report (pipeline.sieve.report).
        judged_table = cands[["qid", "pid", "rank", "is_false_negative", "fn_label_source"]].copy()
        judged_table["kept"] = decided["kept"].to_numpy(bool)
        for col in ("nce_loss", "score", "fallback"):
            if col in decided:
                judged_table[col] = decided[col].to_numpy()
        report["detection"] = {
            k: v for k, v in detection_report(judged_table).items() if k not in ("loss_stats", "score_stats")
        }
        # Over every negative occurrence, a duplicate counted as flagged.
        every = table["is_false_negative"].copy()
        report["detection_with_duplicates"] = detection_metrics(table["kept"].to_numpy(bool), every)
    else:
        report["detection"] = None
        report["detection_with_duplicates"] = None
    return report


ACTION_WORDS = {
    "kept": "kept",
    "removed": "removed (flagged)",
    "relabelled": "relabelled as positives",
    "marked": "marked (kept, with a verdict)",
    "removed_with_row": "kept by the filter, gone with its row (fewer kept negatives than the columns kept)",
    "trimmed": "kept by the filter, trimmed (past the negative columns kept)",
}


def report_markdown(report: dict) -> str:
    lines = [
        f"# Cleaning report: {report['input']}",
        "",
        f"format {report['format']}, filter {report['filter']}"
        + (f" (model {report['model']})" if report["model"] else "")
        + f", mode {report['mode']}; {report['rows_in']} rows in, {report['rows_out']} out",
        "",
        "| decision | negatives |",
        "|---|---|",
    ]
    lines += [f"| {d} | {n} |" for d, n in report["decisions"].items()]
    lines += [f"| total | {report['negatives']} |", "", "| in the written file | negatives |", "|---|---|"]
    lines += [f"| {ACTION_WORDS.get(a, a)} | {n} |" for a, n in report["actions"].items()] or [
        "| (none) | 0 |"
    ]
    lines += [
        "",
        f"- written: {report['rows_out']} of {report['rows_in']} rows ({report['rows_lost']} lost), "
        f"{report['negatives_written']} of {report['negatives']} negatives",
    ]
    if report["rows_lost"] * 2 > report["rows_in"]:
        lines.append(
            f"- **warning: {report['rows_lost']} of {report['rows_in']} rows are gone**; check the decisions "
            "before training on this file (--mode mark keeps every row)"
        )
    if "negative_columns_out" in report:
        lines.append(
            f"- negative columns: {report['negative_columns_in']} in, {report['negative_columns_out']} out (every "
            "row keeps its first kept negatives; a row with fewer goes)"
        )
    lines += [
        f"- duplicates of a positive: {report['duplicates']['exact']} exact, {report['duplicates']['near']} near "
        f"(word 3-gram Jaccard >= {report['near_duplicate_threshold']:g})",
        f"- sieve-out rate (dropped / judged by the filter): {_fmt(report['sieve_out_rate'])}",
        f"- flagged rate (dropped + duplicates / all negatives): {_fmt(report['flagged_rate'])}",
    ]
    det = report["detection"]
    if det:
        lines += [
            f"- against the labels ({det['n_false_negatives']} false, {det['n_true_negatives']} true negatives "
            f"judged): FN recall {_fmt(det['recall'])}, precision {_fmt(det['precision'])}, "
            f"true negatives kept {_fmt(det['true_negative_retention'])}",
        ]
    else:
        lines.append("- no labels: FN recall and precision unknown (--labels)")
    lines.append(f"- {report['negatives']} negatives in {report['seconds']:.1f} s")
    return "\n".join(lines) + "\n"


def _fmt(value) -> str:
    return "n/a" if value is None else f"{value:.3f}"


# ---- CLI -------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser("pipeline.sieve.clean", __doc__)
    parser.add_argument("--input", required=True, help="the hard-negative dataset (file or datasets folder)")
    parser.add_argument("--out", required=True, help="the cleaned dataset (same container as the input)")
    add_flags(parser, CleanSpec, names=("labels",))  # an input of the job, not a setting
    parser.add_argument(
        "--decisions", default=None, help="per-negative table (default: <out stem>.decisions.parquet)"
    )
    parser.add_argument(
        "--report", default=None, help="report JSON, .md beside (default: <out stem>.report.json)"
    )
    add_settings_flags(
        parser, CleanJob, "settings (clean.<name>, and config section sieve's for the filter run)"
    )
    # --help offers the filters that judge these files only; one that cannot (answer_match) is still
    # accepted by the parser so that a run says why (make_filter) instead of "invalid choice".
    filter_flag = _flag(parser, "filter")
    filter_flag.choices = None
    filter_flag.metavar = "{" + ",".join(CLEAN_FILTERS) + "}"
    for name in CLEAN_FILTERS:  # a filter's own words for its flags on these files (its module's)
        for key, text in FILTERS[name].clean_help.items():
            _flag(parser, f"{name}_{key}").help = text
    add_job_flags(parser)
    args = parser.parse_args(argv)
    if args.filter in NOT_APPLICABLE:
        raise DataError(NOT_APPLICABLE[args.filter], field="filter")
    if args.filter is not None and args.filter not in CLEAN_FILTERS:
        parser.error(
            f"argument --filter: invalid choice: {args.filter!r} (choose from {', '.join(CLEAN_FILTERS)})"
        )
    job = job_settings(CleanJob, args)  # before any work: a bad document or flag is one line
    start_stage(args.log, args.threads)
    settings = Settings(**job.model_dump(exclude={"format"}), device=args.device)
    clean_dataset(
        args.input,
        args.out,
        fmt=job.format,
        settings=settings,
        labels=args.labels,
        decisions_out=args.decisions,
        report_out=args.report,
    )
    return 0


def _flag(parser: argparse.ArgumentParser, dest: str) -> argparse.Action:
    return next(action for action in parser._actions if action.dest == dest)


def entry() -> None:
    """Console-script entry point (``sieve-clean``)."""
    run_main(main)


if __name__ == "__main__":
    run_main(main)

"""What every source reader shares: opening (gzip by magic bytes, because downloads have no
extension), a progress bar driven by the compressed bytes consumed, translation of decoder failures
(truncated gzip, bad UTF-8, csv and ijson errors) into DataError naming the file and the record,
and the derived pid of passages that arrive without an id.

Record numbers in messages: 1-based line numbers for line-oriented files (TSV, CSV, JSONL), 0-based
item indices for JSON arrays (``json.load(f)[i]``), article indices for SQuAD.
"""

from __future__ import annotations

import contextlib
import csv
import gzip
import hashlib
import io
import os
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Iterable, Iterator, NamedTuple, TypeVar

import ijson
from rich.progress import Progress

from pipeline.core.storage import DataError, control_character_message
from pipeline.data.answers import tokenize

GZIP_MAGIC = b"\x1f\x8b"
UTF8_BOM = b"\xef\xbb\xbf"
CR_ALONE = re.compile(rb"(?<=\r)(?!\n)")  # where a universal-newline reader ends a line at "\r"
# Any whitespace (Unicode too), as the TREC export tests it (pipeline.retrieval.runs.write_trec).
WHITESPACE = re.compile(r"\s")
T = TypeVar("T")


class Passage(NamedTuple):
    pid: str
    title: str
    text: str
    record: int


class Query(NamedTuple):
    qid: str
    text: str
    answers: list[str]
    record: int


class Qrel(NamedTuple):
    qid: str
    pid: str
    relevance: int
    record: int


@dataclass
class Ctx:
    """A passage referenced by a training record (DPR ctx, Tevatron passage); pid None = no id given."""

    pid: str | None
    title: str
    text: str
    score: float


@dataclass
class TrainingRecord:
    """One query of a DPR biencoder file or a Tevatron training file, with its passage lists."""

    qid: str
    question: str
    answers: list[str]
    record: int
    positives: list[Ctx] = field(default_factory=list)
    hard_negatives: list[Ctx] = field(default_factory=list)
    negatives: list[Ctx] = field(default_factory=list)


@dataclass(frozen=True)
class BuildOptions:
    """Per-dataset choices passed from the config to a format's ``build``."""

    empty_positives: str = "error"  # train/dev record without positives: "error" or "drop" (counted)
    split: Any = None  # pipeline.data.splits.SplitSpec, or None = every query is a test query


def ctx_pid(title: str, text: str) -> str:
    """Deterministic pid of a passage shipped without an id: equal content gives the equal pid."""
    digest = hashlib.sha1(f"{title}\n{text}".encode("utf-8")).hexdigest()
    return "ctx:" + digest[:16]


def require_records(records: Iterable[T], file: str | os.PathLike, role: str) -> Iterator[T]:
    """``records`` as they come; a DataError naming the file and the role when there are none.

    An empty source (0 bytes, blank lines, ``[]``, a header alone) would otherwise become an empty
    split that only a later stage notices (training, evaluation), naming a derived table instead.
    """
    count = 0
    for record in records:
        count += 1
        yield record
    if count == 0:
        raise DataError(
            f"role {role!r}: no records (the file is empty, or holds only blank lines, a header or [])",
            file=file,
        )


class Source:
    """An open input file plus where the reader is in it (so errors can name the record)."""

    def __init__(self, path: Path, stream: IO, raw: IO, progress: Progress | None, task: Any):
        self.path = path
        self.stream = stream
        self.record: Any = None
        self._raw = raw
        self._progress = progress
        self._task = task

    def tick(self) -> None:
        """Advance the progress bar to the compressed bytes consumed so far."""
        if self._progress is not None:
            self._progress.update(self._task, completed=self._raw.tell())

    def error(self, message: str, field: str | None = None, record: Any = None) -> DataError:
        return DataError(
            message, file=self.path, record=self.record if record is None else record, field=field
        )


@contextlib.contextmanager
def open_source(
    path: str | os.PathLike,
    *,
    binary: bool = False,
    newline: str = "",
    progress: Progress | None = None,
    label: str | None = None,
) -> Iterator[Source]:
    """Open ``path`` (gunzipping by magic bytes) and turn decoder failures into DataError.

    ``newline=""`` suits the csv module (it handles line ends itself, also inside quoted fields);
    line-per-record readers pass "\n" so that a stray "\r" inside a record does not split it.
    """
    path = Path(path)
    if not path.exists():
        raise DataError("file not found", file=path)
    raw = open(path, "rb")
    gzipped = raw.read(2) == GZIP_MAGIC
    raw.seek(0)
    stream: IO = gzip.GzipFile(fileobj=raw, mode="rb") if gzipped else raw
    # A byte-order mark (Windows tools write one) is not content: read as text it became part of the
    # first id ("\ufeff1": an MS MARCO collection's first pid then matched no qrel), and the JSON
    # parsers refuse it. utf-8-sig drops it from text; binary readers skip it here.
    if binary:
        try:
            if stream.read(len(UTF8_BOM)) != UTF8_BOM:
                stream.seek(0)
        except (EOFError, zlib.error, gzip.BadGzipFile):
            stream.seek(0)  # the reader meets the damage itself, and names it
    else:
        stream = io.TextIOWrapper(stream, encoding="utf-8-sig", newline=newline)
    task = None
    if progress is not None:
        task = progress.add_task(label or path.name, total=path.stat().st_size)
    src = Source(path, stream, raw, progress, task)
    try:
        yield src
    except DataError:
        raise
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise src.error(f"truncated or corrupt gzip stream ({exc})") from exc
    except UnicodeDecodeError as exc:
        if binary:  # decoded by the parser (ijson) where it stands: src.record is right
            raise src.error(f"not valid UTF-8 ({exc.reason})") from exc
        # The text layer decodes a buffer (8 KB) ahead of the parser, so src.record may be dozens
        # of lines before the bad bytes, or unset in a small file: find their line instead.
        found = _bad_utf8_line(path, newline)
        if found is None:
            raise DataError(f"not valid UTF-8 ({exc.reason})", file=path) from exc
        line, column, reason = found
        raise src.error(f"not valid UTF-8 ({reason} at byte {column} of the line)", record=line) from exc
    except csv.Error as exc:
        raise src.error(f"malformed delimited text ({exc})") from exc
    except ijson.JSONError as exc:
        if "invalid bytes in UTF8" in str(exc):  # yajl's words; ijson parses where src.record is
            raise src.error("not valid UTF-8 (invalid bytes in a JSON string)") from exc
        raise src.error(f"invalid or truncated JSON ({yajl_one_line(str(exc))})") from exc
    finally:
        if progress is not None:
            progress.update(task, completed=path.stat().st_size)
        stream.close()
        raw.close()


def yajl_one_line(message: str) -> str:
    """yajl's error on one line: its first line, then the text before the point it marks.

    yajl reports an error as three lines (what, an excerpt of the text, a caret under the point);
    printed as they are they break the one-line error (docs/failures.md) and the excerpt's padding
    hides where the error is.
    """
    lines = message.splitlines()
    what = lines[0].strip().rstrip(".") if lines else message.strip()
    if len(lines) >= 3 and "^" in lines[2]:
        caret = lines[2].index("^")
        before = lines[1][:caret].strip()
        return f"{what}, after {before[-40:]!r}" if before else what  # empty at the end of the file
    return " ".join(line.strip() for line in lines if line.strip()) or what


def _split_lines(line: bytes, newline: str) -> list[bytes]:
    """A binary line (ending in b"\\n") cut where a text stream opened with ``newline`` ends lines:
    at "\\n" only, or (``newline=""``) also at a "\\r" that no "\\n" follows."""
    if newline == "\n" or b"\r" not in line:
        return [line]
    return [piece for piece in CR_ALONE.split(line) if piece]


def _bad_utf8_line(path: Path, newline: str) -> tuple[int, int, str] | None:
    """(line, byte in the line, reason) of the first line of ``path`` that is not valid UTF-8, lines
    counted as a text reader opened with ``newline`` counts them (1-based); None when none is."""
    try:
        with open(path, "rb") as raw:
            gzipped = raw.read(2) == GZIP_MAGIC
            raw.seek(0)
            stream: IO = gzip.GzipFile(fileobj=raw, mode="rb") if gzipped else raw
            number = 0
            # UTF-8 never puts b"\n" or b"\r" inside a character, so each line decodes on its own.
            for chunk in stream:
                for line in _split_lines(chunk, newline):
                    number += 1
                    try:
                        line.decode("utf-8")
                    except UnicodeDecodeError as exc:
                        return number, exc.start + 1, exc.reason
    except (OSError, EOFError, zlib.error):
        return None  # a damaged gzip stream: the caller reports the decoding error without a line
    return None


def first_char(path: str | os.PathLike) -> str:
    """First non-blank character of a (possibly gzipped) text file, '' when it is empty.

    Read as bytes: decoding here would fail on bad UTF-8 anywhere in the first buffer, before the
    reader knows which record it is in. A non-ASCII first character is returned as U+FFFD (callers
    only look for '[' and '{').
    """
    with open_source(path, binary=True) as src:
        start = True
        while True:
            chunk = src.stream.read(4096)
            if not chunk:
                return ""
            if start and chunk.startswith(UTF8_BOM):
                chunk = chunk[len(UTF8_BOM) :]
            start = False
            stripped = chunk.lstrip(b" \t\r\n")
            if stripped:
                return chr(stripped[0]) if stripped[0] < 0x80 else "\ufffd"


# ---- field checks shared by the readers ------------------------------------------------------------


def need_str(
    src: Source, obj: dict, key: str, *, default: str | None = None, where: str | None = None
) -> str:
    """obj[key] as a string; ``default`` when absent or null (if given), else DataError."""
    value = obj.get(key) if isinstance(obj, dict) else None
    if value is None:
        if default is not None:
            return default
        raise src.error("missing", field=where or key)
    if not isinstance(value, str):
        raise src.error(f"expected a string, got {type(value).__name__}", field=where or key)
    return value


def check_id(src: Source, value: str, field: str) -> str:
    """``value`` if it can be an id: run files and qrels in TREC format separate their columns by
    whitespace, so an id holding any would only fail at the TREC export, naming the run instead."""
    if WHITESPACE.search(value):
        raise src.error(
            f"id {value!r} contains whitespace: ids are written to TREC run files, whose columns "
            "whitespace separates",
            field=field,
        )
    control = control_character_message(value)
    if control is not None:
        raise src.error(control, field=field)
    return value


def need_id(src: Source, obj: dict, keys: tuple[str, ...], where: str = "") -> str:
    """The first present id among ``keys`` as a string (ints are accepted: BEIR/Tevatron use both)."""
    for key in keys:
        value = obj.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise src.error(
                f"id must be a string or an integer, got {type(value).__name__}", field=where + key
            )
        value = str(value)
        if not value:
            raise src.error("empty id", field=where + key)
        return check_id(src, value, where + key)
    raise src.error(f"missing id (expected one of: {', '.join(keys)})", field=where + keys[0])


def need_answer(src: Source, answer: str, where: str) -> str:
    """``answer`` if it can be matched: it must have a token, in the sense of DPR's has_answer.

    An answer of no tokens ("", whitespace) cannot be matched (string mode) or matches every passage
    (regex mode); evaluation and answer-matched mining would stop on it only after every training
    stage has run, so it is refused here, where the file and the record are known.
    """
    if not tokenize(answer):
        raise src.error(
            f"empty answer {answer!r}: an answer needs a word or symbol to match (DPR has_answer)",
            field=where,
        )
    return answer


def need_answers(src: Source, value: Any, where: str = "answers") -> list[str]:
    """A list of non-empty answer strings (``need_answer``), deduplicated in order."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
        raise src.error("expected a list of strings", field=where)
    for i, answer in enumerate(value):
        need_answer(src, answer, f"{where}[{i}]")
    return list(dict.fromkeys(value))


def need_text(src: Source, obj: dict, key: str, *, where: str | None = None) -> str:
    """``need_str`` for a query's text, which must hold more than whitespace (named at its own field:
    the writer's later check only knows the canonical column)."""
    value = need_str(src, obj, key, where=where)
    if not value.strip():
        raise src.error("empty query text", field=where or key)
    return value


def own_id(src: Source, obj: dict, keys: tuple[str, ...]) -> str | None:
    """The record's own id under the first of ``keys`` it has (``need_id``), or None when it has none
    (absent, null or "": the reader numbers the record instead)."""
    present = [key for key in keys if obj.get(key) not in (None, "")]
    return need_id(src, obj, (present[0],)) if present else None


def need_score(src: Source, value: Any, where: str) -> float:
    if value is None:
        return float("nan")
    if isinstance(value, bool):  # float(True) is 1.0: a flag, not a score
        raise src.error(f"score is not a number: {value!r}", field=where)
    try:
        return float(value)
    except (TypeError, ValueError):
        raise src.error(f"score is not a number: {value!r}", field=where) from None


def need_int(src: Source, value: str, where: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise src.error(f"expected an integer, got {value!r}", field=where) from None

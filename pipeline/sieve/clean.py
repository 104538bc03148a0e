"""Clean a hard-negative dataset you already have: the same file back, each suspected false negative
dropped, relabelled as a positive or marked, with every negative's verdict and a report.

    python -m pipeline.sieve.clean --input mined.parquet --out cleaned.parquet \
        [--format auto|triplet|n_tuple|labeled_pair|labeled_list|tevatron|flagembedding] \
        [--filter sieve|positive_aware|rank_window|cross_encoder|oracle|none] [--model minilm|FOLDER] \
        [--mode drop|relabel|mark] [--labels known.jsonl] [--near-duplicate 0.9] \
        [--decisions cleaned.decisions.parquet] [--report cleaned.report.json]

Its settings (pipeline.core.settings.CleanJob: these flags and the filters' own, ``--rank-window-start``,
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
  positive); columns by position, as sentence-transformers reads them;
- Tevatron JSONL rows {query_id, query, positive_passages, negative_passages} of {docid, title, text};
- FlagEmbedding JSONL rows {query, pos, neg[, pos_scores, neg_scores, prompt, type]};

read from JSONL, Parquet, CSV (list cells as JSON) or a ``datasets`` folder (``save_to_disk``; only
with the ``datasets`` package installed). Written in the same container, columns, order and types.

Order of judgement: first every negative whose normalised text (NFKC, casefolded, punctuation out,
whitespace collapsed) equals a positive of its query, or whose word 3-gram Jaccard with one is at least
``--near-duplicate``, is ``duplicate_of_positive``; then the filter judges the others, per query set
P = {first positive} + its negatives, with the project's own filter classes (pipeline.sieve.filters) on
a candidate table built from the file: the sieve is Algorithm 1 (pipeline.sieve.passage_sieve) scored by
``--model``. Triplets and labeled pairs are grouped by (anchor, positive) / anchor into one set.

``--mode drop`` removes what was flagged (an n-tuple row cannot hold fewer negatives: a row with a
flagged negative is removed); ``relabel`` makes the filter's suspects positives where the format holds
several (Tevatron, FlagEmbedding, labeled pair/list with labels) and removes duplicates; ``mark`` keeps
every negative and adds a verdict column (``sieve_verdict`` per row, ``sieve_verdicts`` per list).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import json
import logging
import math
import os
import re
import shutil
import tempfile
import time
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.core.cli import add_job_flags, run_main, stage_parser, start_stage
from pipeline.core.jobs import add_settings_flags, job_settings
from pipeline.core.schemas import CLEAN_DECISIONS_SCHEMA, CORPUS_SCHEMA, QUERIES_SCHEMA
from pipeline.core.settings import (
    CLEAN_FILTERS,
    CLEAN_FORMATS,
    CLEAN_MODES,
    CleanJob,
    CleanSpec,
    add_flags,
    default,
)
from pipeline.core.storage import DataError, atomic_open, atomic_path, write_json, write_table
from pipeline.sieve.filters import (
    CandidateFilter,
    CrossEncoderFilter,
    FilterInputs,
    NoFilter,
    OracleFilter,
    PositiveAwareFilter,
    RankWindowFilter,
    SieveFilter,
)
from pipeline.sieve.report import detection_metrics, detection_report

log = logging.getLogger("sieve.clean")

DECISIONS = ("kept", "dropped", "duplicate_of_positive")
NOT_APPLICABLE = {
    "answer_match": "answer_match needs each query's answer strings, which none of these formats carries",
    "sieve_no_ccr": "sieve_no_ccr is the sieve scored by a model without CCR: use --filter sieve --model <it>",
}
RELABEL_FORMATS = ("tevatron", "flagembedding", "labeled_pair", "labeled_list")
SCORE_COLUMNS = ("scores", "score", "label", "labels")
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

    def error(self, message: str, row: int | None = None, column: str | None = None) -> DataError:
        record = None
        if row is not None:
            record = f"{row} (line {row + 1})" if self.container == "jsonl" else row
        return DataError(message, file=self.path, record=record, field=column)


def container_of(path: Path) -> str:
    if path.is_dir():
        return "hf"
    suffix = "".join(path.suffixes[-2:]) if path.suffix == ".gz" else path.suffix
    kinds = {".jsonl": "jsonl", ".json": "jsonl", ".parquet": "parquet", ".csv": "csv"}
    if suffix not in kinds:
        raise DataError(
            f"unknown file type {suffix or '(none)'!r}: .jsonl, .json (one object a line), .parquet, .csv, "
            "or a datasets folder (save_to_disk)",
            file=path,
        )
    return kinds[suffix]


def read_dataset(path: str | os.PathLike) -> Dataset:
    """The rows of a dataset; a file that cannot be decoded (bytes that are not UTF-8, a damaged
    Parquet file, a CSV without a header) is one DataError naming it (issue 39's own probe: tracebacks)."""
    path = Path(path)
    if not path.exists():
        raise DataError("file not found", file=path)
    try:
        return _read_dataset(path)
    except UnicodeDecodeError as exc:
        raise DataError(f"not UTF-8 text ({exc.reason})", file=path) from None
    except (pa.ArrowException, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise DataError(f"not a readable {container_of(path)} file ({exc})", file=path) from None


def _read_dataset(path: Path) -> Dataset:
    kind = container_of(path)
    if kind == "jsonl":
        records, columns = [], []
        with open(path, encoding="utf-8") as handle:
            for line_no, line in enumerate(handle):
                if not line.strip():
                    continue
                try:
                    value = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise DataError(
                        f"not JSON: {exc.msg}", file=path, record=f"{len(records)} (line {line_no + 1})"
                    ) from None
                if not isinstance(value, dict):
                    raise DataError(
                        f"a row must be a JSON object, not {type(value).__name__}",
                        file=path,
                        record=f"{len(records)} (line {line_no + 1})",
                    )
                records.append(value)
                columns += [k for k in value if k not in columns]
        return Dataset(path, kind, columns, records)
    if kind == "parquet":
        table = pq.read_table(path)
        return Dataset(path, kind, table.column_names, table.to_pylist(), table.schema)
    if kind == "csv":
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
        return Dataset(path, kind, list(frame.columns), frame.to_dict("records"))
    try:
        import datasets  # noqa: F401  (optional: only for folders written by Dataset.save_to_disk)
    except ImportError:
        raise DataError(
            "a datasets folder needs the `datasets` package (not installed here); or write it as Parquet "
            "first (Dataset.to_parquet) and clean that",
            file=path,
        ) from None
    table = datasets.load_from_disk(str(path)).data.table
    return Dataset(path, kind, table.column_names, table.to_pylist(), table.schema)


def write_dataset(data: Dataset, records: list[dict], out: Path, extra: dict[str, pa.DataType]) -> None:
    """``records`` in ``data``'s container, columns and types; ``extra``: added columns (mark mode)."""
    if data.container == "jsonl":
        with atomic_open(out, "w", encoding="utf-8") as handle:
            for record in records:
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")
        return
    if data.container == "csv":
        columns = data.columns + [c for c in extra if c not in data.columns]
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        for record in records:
            writer.writerow({k: _csv_cell(v) for k, v in record.items()})
        with atomic_open(out, "w", encoding="utf-8", newline="") as handle:
            handle.write(buffer.getvalue())
        return
    schema = data.schema
    for name, kind in extra.items():
        if name not in schema.names:
            schema = schema.append(pa.field(name, kind))
    table = pa.Table.from_pylist(records, schema=schema)
    if data.container == "parquet":
        with atomic_path(out) as tmp:
            pq.write_table(table, tmp)
        return
    import datasets

    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        datasets.Dataset(table).save_to_disk(str(tmp))
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _csv_cell(value: Any) -> str:
    if isinstance(value, (list, dict)):
        return json.dumps(value, ensure_ascii=False)
    return "" if value is None else str(value)


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
    plain = [c for c in cols if c not in SCORE_COLUMNS]
    first = data.records[0] if data.records else {}
    if len(plain) == 2 and isinstance(_maybe_list(first.get(plain[1]), data.container), list):
        return "labeled_list"
    if len(plain) == 2 and ("label" in present or "score" in present):
        return "labeled_pair"
    if len(plain) == 3:
        return "triplet"
    raise DataError(
        f"cannot tell the format from the columns {cols} (sentence-transformers triplet / n-tuple / labeled "
        "pair / labeled list, Tevatron, FlagEmbedding): give --format",
        file=data.path,
    )


def _maybe_list(value: Any, container: str) -> Any:
    if container == "csv" and isinstance(value, str) and value.startswith("["):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


class Format:
    """Reads the query sets of one schema and writes its rows back."""

    name = ""
    relabels = False

    def __init__(self, data: Dataset):
        self.data = data
        self.positives_of: dict[str, list[str]] = {}  # normalised query -> positives' texts

    # helpers
    def text(self, row: int, column: str, value: Any = None) -> str:
        if value is None:
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
        return _maybe_list(record[column], self.data.container)

    def list_cell(self, row: int, column: str) -> list:
        value = self.cell(row, column)
        if not isinstance(value, list):
            raise self.data.error(f"expected a list, found {_kind(value)}", row, column)
        return value

    def number(self, row: int, column: str, value: Any) -> float:
        if isinstance(value, str) and self.data.container == "csv":
            try:
                return float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.data.error(f"expected a number, found {_kind(value)}", row, column)
        return float(value)

    def add_positive(self, query: str, text: str) -> None:
        self.positives_of.setdefault(normalise(query), []).append(text)

    # interface
    def sets(self) -> list[QuerySet]:
        raise NotImplementedError

    def rewrite(self, row: int, actions: dict[int, str], verdicts: dict[int, str]) -> list[dict]:
        """The row after the actions (negative index -> kept | removed | relabelled | marked)."""
        raise NotImplementedError

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
            record["label"] = "1" if self.data.container == "csv" else 1
        return [record]


class Triplet(FlatFormat):
    name = "triplet"

    def sets(self):
        cols = [c for c in self.data.columns if c not in SCORE_COLUMNS]
        if len(cols) != 3:
            raise self.data.error(
                f"a triplet file has 3 text columns (anchor, positive, negative), found {cols}"
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
                score = self.number(row, "scores", scores[1])
            qs.negatives.append(Negative(row, negative, 0, Passage(n), len(qs.negatives) + 1, score))
        return list(groups.values())


class LabeledPair(FlatFormat):
    name = "labeled_pair"
    relabels = True

    def sets(self):
        cols = [c for c in self.data.columns if c not in SCORE_COLUMNS]
        if "label" not in self.data.columns:
            raise self.data.error(
                "labeled pairs with a score column and no label do not say which document is the positive "
                "(mine them with output_scores=False, or as labeled lists)",
                column="label",
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
    name = "n_tuple"

    def sets(self):
        cols = self.data.columns
        self.neg_cols = sorted(
            (c for c in cols if re.fullmatch(r"negative_\d+", c)), key=lambda c: int(c.split("_")[1])
        )
        anchor, positive = [c for c in cols if c not in SCORE_COLUMNS and c not in self.neg_cols][:2]
        has_scores = "scores" in cols
        out = []
        for row in range(len(self.data.records)):
            q, p = self.text(row, anchor), self.text(row, positive)
            self.add_positive(q, p)
            scores = self.list_cell(row, "scores") if has_scores else None
            if scores is not None and len(scores) != len(self.neg_cols) + 1:
                raise self.data.error(
                    f"expected {len(self.neg_cols) + 1} scores (positive, then each negative), found {len(scores)}",
                    row,
                    "scores",
                )
            qs = QuerySet(f"r{row}", q, Passage(p))
            for i, col in enumerate(self.neg_cols):
                score = self.number(row, "scores", scores[i + 1]) if scores is not None else math.nan
                qs.negatives.append(Negative(row, col, i, Passage(self.text(row, col)), i + 1, score))
            out.append(qs)
        return out

    def rewrite(self, row, actions, verdicts):
        if "removed" in actions.values():
            return []  # a row of n negatives cannot hold fewer
        record = dict(self.data.records[row])
        if "marked" in actions.values():
            record["sieve_verdicts"] = [verdicts[i] for i in range(len(self.neg_cols))]
        return [record]


class LabeledList(Format):
    name = "labeled_list"

    def sets(self):
        cols = [c for c in self.data.columns if c not in SCORE_COLUMNS]
        self.anchor, self.docs = cols
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
                labels = [self.number(row, self.labels, x) for x in self.list_cell(row, self.labels)]
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
                score = self.number(row, self.scores, scores[i]) if scores else math.nan
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
            scores = self.data.records[row].get("neg_scores")
            if scores is not None and (not isinstance(scores, list) or len(scores) != len(negs)):
                raise self.data.error(
                    f"neg_scores must list one score per negative ({len(negs)})", row, "neg_scores"
                )
            qs = QuerySet(f"r{row}", q, Passage(pos[0]))
            for i, n in enumerate(negs):
                score = self.number(row, "neg_scores", scores[i]) if scores is not None else math.nan
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
    negs = list(record[neg])
    aligned = [(p, n) for p, n in paired if isinstance(record.get(n), list)]
    gone = {k for k, a in actions.items() if a in ("removed", "relabelled")}
    moved = [k for k, a in sorted(actions.items()) if a == "relabelled"]
    if moved:
        record[pos] = list(record[pos]) + [negs[k] for k in moved]
        for p, n in aligned:
            if isinstance(record.get(p), list):
                record[p] = list(record[p]) + [record[n][k] for k in moved]
    if "marked" in actions.values():
        record["sieve_verdicts"] = [verdicts[k] for k in range(len(negs))]
    record[neg] = [v for k, v in enumerate(negs) if k not in gone]
    for _, n in aligned:
        record[n] = [v for k, v in enumerate(record[n]) if k not in gone]
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


# ---- judging ---------------------------------------------------------------------------------------


@dataclass
class Settings:
    """What clean_dataset computes with: CleanJob's fields but the format (clean_dataset's ``fmt``), and
    where a model filter computes."""

    filter: str = default(CleanJob, "filter")
    model: str = default(CleanJob, "model")
    mode: str = default(CleanJob, "mode")
    near_duplicate: float = default(CleanJob, "near_duplicate")
    rank_window_start: int = default(CleanJob, "rank_window_start")
    positive_aware_mode: str = default(CleanJob, "positive_aware_mode")
    positive_aware_margin: float = default(CleanJob, "positive_aware_margin")
    cross_encoder_threshold: float = default(CleanJob, "cross_encoder_threshold")
    strict: bool = default(CleanJob, "strict")
    fallback: str = default(CleanJob, "fallback")
    temperature: float | None = default(CleanJob, "temperature")
    batch_size: int = default(CleanJob, "batch_size")
    seed: int = default(CleanJob, "seed")
    device: str = "auto"  # where a model filter computes: auto = a visible GPU, else the CPU


def make_filter(settings: Settings, fmt: str) -> CandidateFilter:
    name = settings.filter
    if name in NOT_APPLICABLE:
        raise DataError(NOT_APPLICABLE[name], field="filter")
    if name == "none":
        return NoFilter()
    if name == "oracle":
        return OracleFilter()
    if name == "rank_window":
        if fmt == "flagembedding":
            raise DataError(
                "rank_window needs ranks; FlagEmbedding's hn_mine.py samples its negatives from a rank range "
                "in random order, so a position in neg is not a rank",
                field="filter",
            )
        return RankWindowFilter(settings.rank_window_start)
    if name == "positive_aware":
        return PositiveAwareFilter(
            settings.model, settings.positive_aware_mode, settings.positive_aware_margin
        )
    if name == "cross_encoder":
        return CrossEncoderFilter(settings.model, settings.cross_encoder_threshold)
    if name == "sieve":
        return SieveFilter(
            settings.model,
            strict=settings.strict,
            fallback=settings.fallback,
            seed=settings.seed,
            temperature=settings.temperature,
        )
    raise DataError(f"unknown filter {name!r} (known: {', '.join(CLEAN_FILTERS)})", field="filter")


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
                    "is_false_negative": None if truth is None else normalise(neg.passage.text) in truth,
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


def _reason(filter_name: str, row: dict[str, Any], kept: bool, settings: Settings) -> str:
    verdict = "kept" if kept else "suspected false negative"
    if filter_name == "sieve":
        if row["fallback"]:
            return "sieve: nothing survived; kept by the random_one fallback"
        op = ">" if settings.strict else ">="
        sign = op if kept else "<"
        if not kept and settings.strict:
            sign = "<="
        return f"sieve: loss {row['nce_loss']:.4f} {sign} threshold {row['threshold']:.4f} (mean over P): {verdict}"
    if filter_name == "positive_aware":
        return f"positive_aware ({settings.positive_aware_mode}, margin {settings.positive_aware_margin:g}): statistic {row['score']:.4f}: {verdict}"
    if filter_name == "rank_window":
        return f"rank_window: rank {int(row['score'])} {'>' if kept else '<='} {settings.rank_window_start}: {verdict}"
    if filter_name == "cross_encoder":
        return f"cross_encoder: probability {row['score']:.4f} {'<' if kept else '>='} {settings.cross_encoder_threshold:g}: {verdict}"
    if filter_name == "oracle":
        return f"oracle: {'a known true negative' if kept else 'a known false negative'}"
    return "no filter: kept"


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
    decisions table and the report (JSON + Markdown); returns the report."""
    settings = settings or Settings()
    began = time.perf_counter()
    source, out = Path(source), Path(out)
    if settings.mode not in CLEAN_MODES:
        raise DataError(f"unknown mode {settings.mode!r} (known: {', '.join(CLEAN_MODES)})", field="mode")
    data = read_dataset(source)
    if data.container != "hf" and container_of(out) != data.container:
        raise DataError(f"the output must be a {data.container} file like the input", file=out)
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
    log.info(
        "%s: %s, %d rows, %d query sets, %d negatives",
        source,
        name,
        len(data.records),
        len(sets),
        sum(len(q.negatives) for q in sets),
    )
    duplicates = flag_duplicates(sets, handler, settings.near_duplicate)
    cands, where, passages = candidate_table(sets, duplicates, truth)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".clean-", dir=out.parent) as work:
        (Path(work) / "cache").mkdir()
        decided = run_filter(
            the_filter, cands, sets, passages, Path(work), settings.batch_size, settings.device
        )
    decided["kept"] = decided["kept"].astype(bool)
    table, actions, verdicts = _decisions(sets, duplicates, where, cands, decided, settings)
    records = []
    for row in range(len(data.records)):
        records += (
            handler.rewrite(row, actions.get(row, {}), verdicts.get(row, {}))
            if row in actions
            else [dict(data.records[row])]
        )
    extra = handler.extra_columns() if settings.mode == "mark" else {}
    for column in extra:  # rows without negatives: a positive's row, or an empty list
        for record in records:
            record.setdefault(column, "positive" if isinstance(handler, FlatFormat) else [])
    write_dataset(data, records, out, extra)
    decisions_out = (
        Path(decisions_out) if decisions_out else out.with_name(out.name.split(".")[0] + ".decisions.parquet")
    )
    report_out = Path(report_out) if report_out else out.with_name(out.name.split(".")[0] + ".report.json")
    write_table(
        decisions_out, pa.Table.from_pandas(table, schema=CLEAN_DECISIONS_SCHEMA, preserve_index=False)
    )
    seconds = time.perf_counter() - began
    report = build_report(
        table, cands, decided, settings, name, source, out, len(data.records), len(records), labels, seconds
    )
    write_json(report_out, report)
    with atomic_open(report_out.with_suffix(".md"), "w", encoding="utf-8") as handle:
        handle.write(report_markdown(report))
    log.info(
        "%s -> %s (%s), %d of %d negatives flagged",
        source,
        out,
        settings.mode,
        report["decisions"]["dropped"] + report["decisions"]["duplicate_of_positive"],
        report["negatives"],
    )
    return report


def _decisions(sets, duplicates, where, cands, decided, settings):
    """The decisions table (one row per negative occurrence) and, per file row, negative index ->
    action / verdict."""
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
    rows, actions, verdicts = [], {}, {}
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
                    reasons[i] = _reason(settings.filter, {c: v[i] for c, v in cols.items()}, kept, settings)
                reason, dup = reasons[i], math.nan
                is_fn, label = truth[i], label_source[i]
            action = action_of[decision]
            actions.setdefault(neg.record, {})[neg.index] = action
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
    return table, actions, verdicts


def build_report(
    table, cands, decided, settings, fmt, source, out, rows_in, rows_out, labels, seconds
) -> dict:
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
        "model": settings.model if settings.filter in ("sieve", "positive_aware", "cross_encoder") else None,
        "near_duplicate_threshold": settings.near_duplicate,
        "rows_in": rows_in,
        "rows_out": rows_out,
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
    lines += [
        f"| total | {report['negatives']} |",
        "",
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
    # --filter also names the filters that cannot judge these files, so that a run says why (make_filter).
    _flag(parser, "filter").choices = (*CLEAN_FILTERS, *NOT_APPLICABLE)
    add_job_flags(parser)
    args = parser.parse_args(argv)
    if args.filter in NOT_APPLICABLE:
        raise DataError(NOT_APPLICABLE[args.filter], field="filter")
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

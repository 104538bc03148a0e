"""DPR's released files (facebookresearch/DPR, dpr/data/download_data.py):

- ``psgs_w100.tsv``: header ``id\\ttext\\ttitle``, CSV-quoted fields with doubled inner quotes;
- ``biencoder-*.json``: one JSON array of ``{question, answers, positive_ctxs, negative_ctxs,
  hard_negative_ctxs}`` (several GB: streamed item by item with ijson);
- ``*.qa.csv``: tab-separated, no header, ``question\\t['answer', ...]`` (a Python list literal).
"""

from __future__ import annotations

import ast
import csv
import os
from typing import Iterator

import ijson
from rich.progress import Progress

from pipeline.core.storage import SPLITS, DataError

from .base import (
    BuildOptions,
    Ctx,
    Passage,
    Query,
    Source,
    TrainingRecord,
    check_id,
    first_char,
    need_answer,
    need_answers,
    need_score,
    need_str,
    need_text,
    open_source,
    own_id,
    require_records,
)
from .writer import DatasetWriter

PSGS_COLUMNS = ("id", "text", "title")
CTX_LISTS = ("positive_ctxs", "hard_negative_ctxs", "negative_ctxs")
# Ticking the bar per row would cost more than parsing it.
TICK_EVERY = 10_000


def _tsv_reader(src: Source) -> Iterator[list[str]]:
    # DPR reads these files with csv.reader(delimiter="\t"): the same dialect gives the same fields.
    return csv.reader(src.stream, delimiter="\t", quotechar='"', doublequote=True)


def read_passages_tsv(path: str | os.PathLike, progress: Progress | None = None) -> Iterator[Passage]:
    """Passages of a DPR corpus TSV; ``record`` is the 1-based line where the row ends."""
    with open_source(path, progress=progress, label="corpus (DPR tsv)") as src:
        reader = _tsv_reader(src)
        src.record = 1
        header = next(reader, None)
        if header is None:
            raise src.error("empty file: expected the header 'id<TAB>text<TAB>title'")
        missing = [c for c in PSGS_COLUMNS if c not in header]
        if missing:
            raise src.error(
                f"header {header!r} lacks column(s) {missing} (expected id, text, title)", field=missing[0]
            )
        pos = [header.index(c) for c in PSGS_COLUMNS]
        width = len(header)
        for n, row in enumerate(reader):
            src.record = reader.line_num
            if not row:
                continue  # a blank line holds no record
            if row == header:
                # Files concatenated with their headers: DPR's loader skips such rows, a passage
                # "id"/"text"/"title" would be garbage in the corpus.
                raise src.error(
                    "the header row again: files concatenated with their headers? Remove the "
                    "repeated header lines"
                )
            if len(row) != width:
                if len(row) < width:
                    raise src.error(
                        f"row has {len(row)} of {width} columns ({', '.join(header)})", field=header[len(row)]
                    )
                raise src.error(f"row has {len(row)} columns, the header has {width}")
            pid = row[pos[0]]
            if not pid:
                raise src.error("empty passage id", field="id")
            check_id(src, pid, "id")
            yield Passage(pid, row[pos[2]], row[pos[1]], reader.line_num)
            if n % TICK_EVERY == 0:
                src.tick()


def _ctx(src: Source, obj: object, where: str) -> Ctx:
    if not isinstance(obj, dict):
        raise src.error(f"expected an object, got {type(obj).__name__}", field=where)
    pid = obj.get("passage_id")
    if isinstance(pid, bool) or (pid is not None and not isinstance(pid, (str, int))):
        raise src.error("passage_id must be a string or an integer", field=f"{where}.passage_id")
    pid = check_id(src, str(pid), f"{where}.passage_id") if pid not in (None, "") else None
    return Ctx(
        pid=pid,
        title=need_str(src, obj, "title", default="", where=f"{where}.title"),
        text=need_str(src, obj, "text", where=f"{where}.text"),
        score=need_score(src, obj.get("score"), f"{where}.score"),
    )


def read_biencoder(
    path: str | os.PathLike, split: str, progress: Progress | None = None
) -> Iterator[TrainingRecord]:
    """Entries of a DPR biencoder JSON array, streamed; ``record`` = 0-based index in the array.

    qid: the entry's own ``qid``/``id`` when it has one, else ``"<split>-<index>"``.
    """
    if first_char(path) != "[":
        raise DataError(
            "expected a JSON array of DPR biencoder entries ('[{\"question\": ...}, ...]')", file=path
        )
    with open_source(path, binary=True, progress=progress, label=f"{split} (DPR json)") as src:
        index = 0
        src.record = 0
        for entry in ijson.items(src.stream, "item", use_float=True):
            src.record = index
            if not isinstance(entry, dict):
                raise src.error(f"expected an object, got {type(entry).__name__}")
            # A qid of another type (true, 1.5, [1]) was written as its Python spelling ("True").
            qid = own_id(src, entry, ("qid", "id")) or f"{split}-{index}"
            rec = TrainingRecord(
                qid=qid,
                question=need_text(src, entry, "question"),
                answers=need_answers(src, entry.get("answers")),
                record=index,
            )
            for key, target in zip(CTX_LISTS, (rec.positives, rec.hard_negatives, rec.negatives)):
                items = entry.get(key) or []
                if not isinstance(items, list):
                    raise src.error("expected a list of passages", field=key)
                target.extend(_ctx(src, obj, f"{key}[{i}]") for i, obj in enumerate(items))
            yield rec
            index += 1
            src.record = index  # a failure now is in the next, unfinished item
            if index % 1000 == 0:
                src.tick()


def read_qa_csv(path: str | os.PathLike, split: str, progress: Progress | None = None) -> Iterator[Query]:
    """Questions of a DPR ``*.qa.csv`` file; qid ``"<split>-<row index>"``, record = line number."""
    with open_source(path, progress=progress, label=f"{split} (DPR qa.csv)") as src:
        reader = _tsv_reader(src)
        index = 0
        for row in reader:
            src.record = reader.line_num
            if not row:
                continue  # a blank line holds no record
            if len(row) != 2:
                raise src.error(
                    f"expected 2 tab-separated columns (question, answers), got {len(row)}",
                    field="answers" if len(row) == 1 else None,
                )
            question, literal = row
            try:
                # literal_eval only parses literals: a crafted file cannot run code.
                answers = ast.literal_eval(literal)
            except (ValueError, SyntaxError, MemoryError, RecursionError) as exc:
                raise src.error(
                    f"not a Python list literal: {literal[:80]!r} ({type(exc).__name__})", field="answers"
                ) from None
            if not isinstance(answers, list) or not all(isinstance(a, str) for a in answers):
                raise src.error(f"expected a list of strings, got {literal[:80]!r}", field="answers")
            for i, answer in enumerate(answers):
                need_answer(src, answer, f"answers[{i}]")
            if not question.strip():
                raise src.error("empty question", field="question")
            yield Query(f"{split}-{index}", question, list(dict.fromkeys(answers)), reader.line_num)
            index += 1
            if index % TICK_EVERY == 0:
                src.tick()


def is_biencoder_json(path: str | os.PathLike) -> bool:
    """DPR splits come as biencoder JSON (train/dev) or qa.csv (test): tell them apart by content."""
    return first_char(path) == "["


def build(
    files: dict[str, str], writer: DatasetWriter, options: BuildOptions, progress: Progress | None = None
) -> None:
    """corpus = psgs_w100.tsv; train/dev/test = biencoder JSON (queries, gold/answer-matched
    positives, shipped negatives for train) or qa.csv (queries with answers, no qrels)."""
    corpus = files["corpus"]
    for passage in read_passages_tsv(corpus, progress):
        writer.add_passage(passage, corpus)
    writer.corpus_done(corpus)
    for split in SPLITS:
        path = files.get(split)
        if path is None:
            continue
        before = writer.query_count(split)
        if first_char(path) == "{":  # read as a qa.csv, it failed with a misleading column count
            raise DataError(
                f"role {split!r}: a JSON object; DPR's {split} files are a JSON array of biencoder "
                "entries ('[{\"question\": ...}, ...]') or a tab-separated *.qa.csv",
                file=path,
            )
        if is_biencoder_json(path):
            for rec in require_records(read_biencoder(path, split, progress), path, split):
                writer.add_training_record(
                    split,
                    rec,
                    file=path,
                    gold_first=True,
                    hard_source="dpr_hard",
                    random_source="dpr_random",
                    require_positive=split != "test",
                    empty_positives=options.empty_positives,
                )
        else:
            for query in require_records(read_qa_csv(path, split, progress), path, split):
                writer.add_query(split, query, path)
        writer.require_queries(
            split,
            before,
            role=split,
            file=path,
            why="every record lacks a positive passage and was dropped (empty_positives: drop)",
        )

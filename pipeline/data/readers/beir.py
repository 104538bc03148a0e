"""BEIR and Tevatron files:

- corpus JSONL: ``{"_id", "title", "text"}`` (BEIR) or ``{"docid", "title", "text"}`` (Tevatron);
- queries JSONL: ``{"_id", "text"}`` (BEIR) or ``{"query_id", "query"}`` (Tevatron), optional
  ``"answers"`` (Tevatron NQ/TQ test files carry them);
- qrels TSV ``query-id\\tcorpus-id\\tscore`` with that header (BEIR ``qrels/{split}.tsv``);
- Tevatron training JSONL ``{"query_id", "query", "positive_passages": [P], "negative_passages": [P]}``,
  P = ``{"docid", "title", "text"}``.
"""

from __future__ import annotations

import json
import os
from typing import Iterator

from rich.progress import Progress

from pipeline.core.config import ConfigError
from pipeline.core.storage import SPLITS

from .base import (
    BuildOptions,
    Ctx,
    Passage,
    Qrel,
    Query,
    Source,
    TrainingRecord,
    check_id,
    need_answers,
    need_id,
    need_int,
    need_score,
    need_str,
    need_text,
    open_source,
    own_id,
    require_records,
)
from .writer import DatasetWriter, add_judged_queries, load_queries

QRELS_HEADER = ["query-id", "corpus-id", "score"]
TICK_EVERY = 10_000


def _json_lines(src: Source) -> Iterator[tuple[int, dict]]:
    for line_no, line in enumerate(src.stream, start=1):
        src.record = line_no
        if not line.strip():
            continue  # a blank line holds no record (trailing newlines are common)
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise src.error(f"invalid JSON ({exc.msg} at column {exc.colno})") from None
        if not isinstance(obj, dict):
            raise src.error(f"expected a JSON object, got {type(obj).__name__}")
        yield line_no, obj
        if line_no % TICK_EVERY == 0:
            src.tick()


def read_corpus_jsonl(path: str | os.PathLike, progress: Progress | None = None) -> Iterator[Passage]:
    with open_source(path, newline="\n", progress=progress, label="corpus (jsonl)") as src:
        for line_no, obj in _json_lines(src):
            yield Passage(
                need_id(src, obj, ("_id", "docid")),
                need_str(src, obj, "title", default=""),
                need_str(src, obj, "text"),
                line_no,
            )


def read_queries_jsonl(path: str | os.PathLike, progress: Progress | None = None) -> Iterator[Query]:
    label = f"queries {os.path.basename(path)}"
    with open_source(path, newline="\n", progress=progress, label=label) as src:
        for line_no, obj in _json_lines(src):
            text_key = "text" if "text" in obj else "query" if "query" in obj else None
            if text_key is None:
                raise src.error("missing: a query needs 'text' (BEIR) or 'query' (Tevatron)", field="text")
            yield Query(
                need_id(src, obj, ("_id", "query_id")),
                need_text(src, obj, text_key),
                need_answers(src, obj.get("answers")),
                line_no,
            )


def read_qrels_tsv(path: str | os.PathLike, progress: Progress | None = None) -> Iterator[Qrel]:
    """BEIR qrels; the header line is recognised and skipped, record = line number."""
    label = f"qrels {os.path.basename(path)}"
    with open_source(path, newline="\n", progress=progress, label=label) as src:
        for line_no, line in enumerate(src.stream, start=1):
            src.record = line_no
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            parts = line.split("\t")
            if line_no == 1 and parts == QRELS_HEADER:
                continue
            if len(parts) != 3:
                raise src.error(
                    f"expected 3 tab-separated columns (query-id, corpus-id, score), got {len(parts)}"
                )
            if not parts[0] or not parts[1]:
                raise src.error("empty id", field="query-id" if not parts[0] else "corpus-id")
            qid, pid = check_id(src, parts[0], "query-id"), check_id(src, parts[1], "corpus-id")
            yield Qrel(qid, pid, need_int(src, parts[2], "score"), line_no)


def _passages(src: Source, obj: dict, key: str) -> list[Ctx]:
    items = obj.get(key) or []
    if not isinstance(items, list):
        raise src.error("expected a list of passages", field=key)
    out = []
    for i, item in enumerate(items):
        where = f"{key}[{i}]"
        if not isinstance(item, dict):
            raise src.error("expected an object", field=where)
        pid = (
            need_id(src, item, ("docid", "_id"), where=f"{where}.")
            if item.get("docid", item.get("_id")) not in (None, "")
            else None
        )
        out.append(
            Ctx(
                pid,
                need_str(src, item, "title", default="", where=f"{where}.title"),
                need_str(src, item, "text", where=f"{where}.text"),
                need_score(src, item.get("score"), f"{where}.score"),
            )
        )
    return out


def read_tevatron_train(
    path: str | os.PathLike, split: str = "train", progress: Progress | None = None
) -> Iterator[TrainingRecord]:
    """Tevatron training records; qid = ``query_id`` or ``"<split>-<index>"``; record = line number."""
    label = "train (Tevatron jsonl)"
    with open_source(path, newline="\n", progress=progress, label=label) as src:
        index = 0
        for line_no, obj in _json_lines(src):
            rec = TrainingRecord(
                qid=own_id(src, obj, ("query_id",)) or f"{split}-{index}",
                question=need_text(src, obj, "query"),
                answers=need_answers(src, obj.get("answers")),
                record=line_no,
            )
            rec.positives.extend(_passages(src, obj, "positive_passages"))
            rec.hard_negatives.extend(_passages(src, obj, "negative_passages"))
            yield rec
            index += 1


def build(
    files: dict[str, str], writer: DatasetWriter, options: BuildOptions, progress: Progress | None = None
) -> None:
    """corpus JSONL; per split either ``queries_{split}`` (every query kept, qrels_{split} optional)
    or the shared ``queries`` + ``qrels_{split}`` (the judged queries); for train alternatively a
    Tevatron training file (role ``train``: queries, positives, shipped negatives)."""
    corpus = files["corpus"]
    for passage in read_corpus_jsonl(corpus, progress):
        writer.add_passage(passage, corpus)
    writer.corpus_done(corpus)
    shared = files.get("queries")
    shared_queries = (
        load_queries(require_records(read_queries_jsonl(shared, progress), shared, "queries"), shared)
        if shared
        else None
    )
    for split in SPLITS:
        own, qrels = files.get(f"queries_{split}"), files.get(f"qrels_{split}")
        if split == "train" and "train" in files:
            if own or qrels:
                raise ConfigError(
                    "beir: give either 'train' (Tevatron training JSONL) or "
                    "queries_train/qrels_train, not both"
                )
            path = files["train"]
            before = writer.query_count("train")
            for rec in require_records(read_tevatron_train(path, "train", progress), path, "train"):
                writer.add_training_record(
                    "train",
                    rec,
                    file=path,
                    gold_first=False,
                    hard_source="tevatron",
                    random_source=None,
                    require_positive=True,
                    empty_positives=options.empty_positives,
                )
            writer.require_queries(
                "train",
                before,
                role="train",
                file=path,
                why="every record lacks a positive passage and was dropped (empty_positives: drop)",
            )
            continue
        if own:
            own_queries = require_records(read_queries_jsonl(own, progress), own, f"queries_{split}")
            queries, queries_file, keep = load_queries(own_queries, own), own, True
        elif qrels:
            if shared_queries is None:
                raise ConfigError(f"beir: qrels_{split} needs the role 'queries' (or queries_{split})")
            queries, queries_file, keep = shared_queries, shared, False
        else:
            continue
        judgments = (
            require_records(read_qrels_tsv(qrels, progress), qrels, f"qrels_{split}") if qrels else iter(())
        )
        add_judged_queries(writer, split, queries, queries_file, judgments, qrels, keep_unjudged=keep)

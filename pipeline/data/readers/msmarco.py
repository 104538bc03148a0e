"""MS MARCO passage ranking files (collectionandqueries.tar.gz members):

- ``collection.tsv``: ``pid\\tpassage``, no header, no quoting (passages contain bare quotes);
- ``queries.{train,dev,dev.small}.tsv``: ``qid\\tquery``;
- ``qrels.{train,dev.small}.tsv``: ``qid\\t0\\tpid\\t1`` (TREC, 4 columns) or ``qid\\tpid`` (2 columns,
  relevance 1). TREC qrels from other tools separate with spaces: any whitespace is accepted.
"""

from __future__ import annotations

import os
from typing import Iterator

from rich.progress import Progress

from pipeline.core.config import ConfigError
from pipeline.core.storage import SPLITS

from .base import (
    BuildOptions,
    Passage,
    Qrel,
    Query,
    Source,
    check_id,
    need_int,
    open_source,
    require_records,
)
from .writer import DatasetWriter, add_judged_queries, load_queries

TICK_EVERY = 10_000


def _lines(src: Source) -> Iterator[tuple[int, str]]:
    for line_no, line in enumerate(src.stream, start=1):
        src.record = line_no
        line = line.rstrip("\r\n")
        if not line.strip():
            continue  # a blank line holds no record
        yield line_no, line
        if line_no % TICK_EVERY == 0:
            src.tick()


def _two_columns(src: Source, line: str, names: tuple[str, str]) -> tuple[str, str]:
    # No quoting in these files: a plain split is exact, a csv reader would eat quote characters.
    parts = line.split("\t")
    if len(parts) != 2:
        raise src.error(
            f"expected 2 tab-separated columns ({names[0]}, {names[1]}), got {len(parts)}",
            field=names[1] if len(parts) < 2 else None,
        )
    if not parts[0]:
        raise src.error("empty id", field=names[0])
    return check_id(src, parts[0], names[0]), parts[1]


def read_collection(path: str | os.PathLike, progress: Progress | None = None) -> Iterator[Passage]:
    """Passages of ``collection.tsv`` (title ""); record = line number."""
    with open_source(path, newline="\n", progress=progress, label="corpus (MS MARCO)") as src:
        for line_no, line in _lines(src):
            pid, text = _two_columns(src, line, ("pid", "passage"))
            yield Passage(pid, "", text, line_no)


def read_queries(path: str | os.PathLike, progress: Progress | None = None) -> Iterator[Query]:
    """Queries of ``queries.*.tsv`` (no answers); record = line number."""
    label = f"queries {os.path.basename(path)}"
    with open_source(path, newline="\n", progress=progress, label=label) as src:
        for line_no, line in _lines(src):
            qid, text = _two_columns(src, line, ("qid", "query"))
            yield Query(qid, text, [], line_no)


def read_qrels(path: str | os.PathLike, progress: Progress | None = None) -> Iterator[Qrel]:
    """Judgments of a qrels file, 4-column TREC or 2-column; record = line number."""
    label = f"qrels {os.path.basename(path)}"
    with open_source(path, newline="\n", progress=progress, label=label) as src:
        for line_no, line in _lines(src):
            parts = line.split()
            if len(parts) == 4:
                qid, _, pid, rel = parts
                relevance = need_int(src, rel, "relevance")
            elif len(parts) == 2:
                (qid, pid), relevance = parts, 1
            else:
                raise src.error(f"expected 4 columns (qid 0 pid relevance) or 2 (qid pid), got {len(parts)}")
            yield Qrel(qid, pid, relevance, line_no)


def build(
    files: dict[str, str], writer: DatasetWriter, options: BuildOptions, progress: Progress | None = None
) -> None:
    """corpus = collection.tsv; per split, queries_{split} + qrels_{split} (together or not at all).
    A split's queries are those with a positive judgment in its qrels file."""
    corpus = files["corpus"]
    for passage in read_collection(corpus, progress):
        writer.add_passage(passage, corpus)
    writer.corpus_done(corpus)
    for split in SPLITS:
        queries_file, qrels_file = files.get(f"queries_{split}"), files.get(f"qrels_{split}")
        if queries_file is None and qrels_file is None:
            continue
        if queries_file is None or qrels_file is None:
            missing = f"queries_{split}" if queries_file is None else f"qrels_{split}"
            raise ConfigError(
                f"msmarco: source role '{missing}' is missing: queries_{split} and "
                f"qrels_{split} come together"
            )
        queries = load_queries(
            require_records(read_queries(queries_file, progress), queries_file, f"queries_{split}"),
            queries_file,
        )
        add_judged_queries(
            writer,
            split,
            queries,
            queries_file,
            require_records(read_qrels(qrels_file, progress), qrels_file, f"qrels_{split}"),
            qrels_file,
            keep_unjudged=False,
        )

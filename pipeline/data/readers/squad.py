"""SQuAD v1.1 JSON for open retrieval: ``{"version", "data": [{"title", "paragraphs": [{"context",
"qas": [{"id", "question", "answers": [{"text", "answer_start"}]}]}]}]}``.

Corpus = every paragraph, titled with its article; pid ``"<title>#<paragraph index>"`` (stable when
articles are added, removed or reordered); a question's positive = its own paragraph; its answers =
the answer strings, deduplicated in order.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Iterator

import ijson
from rich.progress import Progress

from pipeline.core.config import ConfigError
from pipeline.core.storage import DataError, control_character_message
from pipeline.data.splits import assign_splits, check_train_left

from .base import (
    BuildOptions,
    Passage,
    Query,
    Source,
    first_char,
    need_answer,
    need_id,
    need_str,
    need_text,
    open_source,
)
from .writer import DatasetWriter

WHITESPACE_RUN = re.compile(r"\s+")


@dataclass
class SquadParagraph:
    pid: str
    title: str
    text: str
    article: int  # 0-based index in "data": the unit of article-level splits
    questions: list[Query]


def paragraph_pid(title: str, index: int) -> str:
    """``"<title>#<index>"``, whitespace in the title written as "_" (Wikipedia's own spelling of
    titles in URLs, which SQuAD v1.1 titles already use): a title with spaces is normal data, but
    a pid is a TREC column and may hold none."""
    return f"{title_key(title)}#{index}"


def title_key(title: str) -> str:
    """The part of a paragraph's pid that its article's title gives."""
    return WHITESPACE_RUN.sub("_", title.strip())


def read_squad(path: str | os.PathLike, progress: Progress | None = None) -> Iterator[SquadParagraph]:
    """Paragraphs with their questions, article by article; record = 0-based article index."""
    if first_char(path) != "{":
        raise DataError('expected a SQuAD JSON object (\'{"version": ..., "data": [...]}\')', file=path)
    with open_source(path, binary=True, progress=progress, label="SQuAD json") as src:
        articles = 0
        src.record = 0
        keys: dict[str, tuple[str, int]] = {}  # title_key -> (title, article): two titles, one pid
        for a, article in enumerate(ijson.items(src.stream, "data.item")):
            src.record = a
            if not isinstance(article, dict):
                raise src.error(f"expected an article object, got {type(article).__name__}")
            title = need_str(src, article, "title")
            if not title.strip():
                raise src.error("empty title (it names the article's paragraphs)", field="title")
            # The title is the first part of every pid of the article's paragraphs.
            control = control_character_message(title_key(title))
            if control is not None:
                raise src.error(f"title {title!r} gives pids that cannot stand: {control}", field="title")
            other, first = keys.setdefault(title_key(title), (title, a))
            if other != title:
                raise src.error(
                    f"title {title!r} and the title {other!r} of article {first} give the same "
                    f"pids {title_key(title)!r}#<paragraph> (whitespace is written as '_'); rename one",
                    field="title",
                )
            paragraphs = article.get("paragraphs")
            if not isinstance(paragraphs, list):
                raise src.error("expected a list", field="paragraphs")
            for p, para in enumerate(paragraphs):
                where = f"paragraphs[{p}]"
                if not isinstance(para, dict):
                    raise src.error("expected an object", field=where)
                context = need_str(src, para, "context", where=f"{where}.context")
                qas = para.get("qas", [])
                if not isinstance(qas, list):
                    raise src.error("expected a list", field=f"{where}.qas")
                questions = [_question(src, qa, f"{where}.qas[{q}]", a) for q, qa in enumerate(qas)]
                yield SquadParagraph(paragraph_pid(title, p), title, context, a, questions)
            articles = a + 1
            src.record = articles
            src.tick()
        if articles == 0:
            raise DataError("no articles under 'data'", file=path, field="data")


def _question(src: Source, qa: object, where: str, article: int) -> Query:
    if not isinstance(qa, dict):
        raise src.error("expected an object", field=where)
    qid = need_id(src, qa, ("id",), where=f"{where}.")
    question = need_text(src, qa, "question", where=f"{where}.question")
    answers = qa.get("answers", [])
    if not isinstance(answers, list):
        raise src.error("expected a list", field=f"{where}.answers")
    texts = []
    for i, ans in enumerate(answers):
        if not isinstance(ans, dict):
            raise src.error("expected an object", field=f"{where}.answers[{i}]")
        field = f"{where}.answers[{i}].text"
        texts.append(need_answer(src, need_str(src, ans, "text", where=field), field))
    return Query(qid, question, list(dict.fromkeys(texts)), article)


def build(
    files: dict[str, str], writer: DatasetWriter, options: BuildOptions, progress: Progress | None = None
) -> None:
    """One source file. ``options.split`` None: every question is a test query; else split by
    article (all questions of an article in one split) or by question, deterministically."""
    path = files["source"]
    spec = options.split
    if spec is not None and spec.by not in ("article", "query"):
        raise ConfigError(f"squad: split.by must be 'article' or 'query', got {spec.by!r}")
    questions: list[tuple[str, Query, str]] = []  # (split unit, question, its paragraph's pid)
    for para in read_squad(path, progress):
        writer.add_passage(Passage(para.pid, para.title, para.text, para.article), path)
        for q in para.questions:
            questions.append((para.title if spec is None or spec.by == "article" else q.qid, q, para.pid))
    writer.corpus_done(path, role="source")
    if not questions:
        raise DataError("role 'source': no questions in any paragraph ('qas' all empty)", file=path)
    if spec is None:
        assignment = {}
    else:
        assignment = assign_splits((unit for unit, _, _ in questions), spec.dev, spec.test, spec.seed)
        check_train_left(assignment, spec.dev, spec.test, spec.by)
    for unit, q, pid in questions:
        split = assignment.get(unit, "test")
        writer.add_query(split, q, path)
        writer.add_qrel(split, q.qid, pid, 1, file=path, record=q.record)

"""The false-negative share of a synthkb dataset, measured as docs/synthkb.md measures it.

For every train question, the BM25 top ``depth`` results other than its annotated positive are its
mined negatives (what ``dpr`` samples its hard negatives from: ``dpr.negatives_depth`` 30); the
*share* is the fraction of them that are in ``qrels_all`` (true false negatives), pooled over the
questions. The *string-free share* is the fraction of those false negatives whose text holds none
of the question's answers by DPR's string match (``pipeline.data.answers``, as mining's
``has_answer``): false negatives that an answer-match filter cannot catch.

BM25 is bm25s used directly, as in ``bench/synthkb_stats.py``: k1 0.9, b 0.4, PyStemmer English,
bm25s' "en" stopwords, over title + " " + text.
"""

from __future__ import annotations

from dataclasses import dataclass

FN_DEPTH = 30


@dataclass(frozen=True)
class ProbeQuestion:
    text: str
    answers: list[str]
    positive: str
    relevant: frozenset[str]


def fn_shares(
    passages: list[tuple[str, str, str]], questions: list[ProbeQuestion], depth: int = FN_DEPTH
) -> dict:
    """Share of true false negatives among each question's top-``depth`` BM25 negatives, and the
    share of those whose text holds no answer string; ``passages`` are (pid, title, text)."""
    import bm25s
    import Stemmer

    from pipeline.data.answers import string_has_answer

    counts = {
        "questions": len(questions),
        "passages": len(passages),
        "negatives": 0,
        "false_negatives": 0,
        "string_free": 0,
    }
    if questions and passages:
        stemmer = Stemmer.Stemmer("english")
        retriever = bm25s.BM25(k1=0.9, b=0.4)
        retriever.index(
            bm25s.tokenize(
                [f"{title} {text}" for _, title, text in passages],
                stopwords="en",
                stemmer=stemmer,
                show_progress=False,
            ),
            show_progress=False,
        )
        tokens = bm25s.tokenize(
            [q.text for q in questions], stopwords="en", stemmer=stemmer, show_progress=False
        )
        k = min(depth + 1, len(passages))
        docs, _ = retriever.retrieve(tokens, k=k, show_progress=False, n_threads=1)
        for q, row in zip(questions, docs):
            mined = [passages[i] for i in row if passages[i][0] != q.positive][:depth]
            counts["negatives"] += len(mined)
            for pid, _, text in mined:
                if pid in q.relevant:
                    counts["false_negatives"] += 1
                    counts["string_free"] += not string_has_answer(q.answers, text)
    return {
        "depth": depth,
        "share": counts["false_negatives"] / max(counts["negatives"], 1),
        "string_free_share": counts["string_free"] / max(counts["false_negatives"], 1),
        **counts,
    }

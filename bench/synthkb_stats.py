"""Measured properties of a generated synthkb dataset (the numbers in docs/synthkb.md).

    .venv/bin/python bench/synthkb_stats.py resources/synthkb [--out stats.json] [--depth 30]

BM25 here is bm25s used directly (k1=0.9, b=0.4, English PyStemmer stemmer, "en" stopwords) over
title + " " + text, so the figures do not depend on the pipeline's own BM25 stage.

* FN fraction: for every train question, the BM25 top-``depth`` results other than its annotated
  positive are its mined negatives; the fraction of them that are in qrels_all (true false negatives),
  pooled over all questions, plus the share of questions with at least one.
* BM25 R@k on test questions, two ways: answer match (DPR has_answer on the passage text, as in the
  evaluation stage) and qrels_all hit (a passage that really states the answer in the top k); and
  hit@k of the annotated positive alone.
* Passage lengths in words and in all-MiniLM-L6-v2 word pieces (title + text, as encoded).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import bm25s
import numpy as np
import pandas as pd
import Stemmer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from pipeline.core.storage import read_table
from pipeline.data.answers import AnswerMatcher


def _relevant(path: Path) -> dict[str, set[str]]:
    rel: dict[str, set[str]] = defaultdict(set)
    for qid, pid in read_table(path, ["qid", "pid"]).itertuples(index=False):
        rel[qid].add(pid)
    return rel


def bm25_search(corpus: pd.DataFrame, questions: list[str], k: int) -> np.ndarray:
    stemmer = Stemmer.Stemmer("english")
    texts = (corpus["title"] + " " + corpus["text"]).tolist()
    retriever = bm25s.BM25(k1=0.9, b=0.4)
    retriever.index(
        bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False), show_progress=False
    )
    tokens = bm25s.tokenize(questions, stopwords="en", stemmer=stemmer, show_progress=False)
    docs, _ = retriever.retrieve(tokens, k=k, show_progress=False, n_threads=1)
    return docs


def fn_fraction(corpus: pd.DataFrame, data: Path, depth: int) -> dict:
    queries = read_table(data / "queries.train.parquet")
    positive = {q: p for q, p, _ in read_table(data / "qrels.train.parquet").itertuples(index=False)}
    rel_all = _relevant(data / "qrels_all.train.parquet")
    pids = corpus["pid"].to_numpy()
    docs = bm25_search(corpus, queries["text"].tolist(), depth + 1)
    negatives = false_neg = with_fn = 0
    per_question = []
    for qid, row in zip(queries["qid"], docs):
        mined = [p for p in pids[row] if p != positive[qid]][:depth]
        fn = sum(p in rel_all[qid] for p in mined)
        negatives += len(mined)
        false_neg += fn
        with_fn += fn > 0
        per_question.append(fn)
    return {
        "train_questions": len(queries),
        "depth": depth,
        "negatives": negatives,
        "false_negatives": false_neg,
        "fn_fraction": round(false_neg / max(negatives, 1), 4),
        "questions_with_fn": round(with_fn / max(len(queries), 1), 4),
        "mean_fn_per_question": round(float(np.mean(per_question)), 3),
        "possible_fn_per_question": round(float(np.mean([len(rel_all[q]) - 1 for q in queries["qid"]])), 3),
    }


def recall(corpus: pd.DataFrame, data: Path, split: str, ks: list[int]) -> dict:
    queries = read_table(data / f"queries.{split}.parquet")
    positive = {q: p for q, p, _ in read_table(data / f"qrels.{split}.parquet").itertuples(index=False)}
    rel_all = _relevant(data / f"qrels_all.{split}.parquet")
    docs = bm25_search(corpus, queries["text"].tolist(), max(ks))
    pids = corpus["pid"].to_numpy()
    matcher = AnswerMatcher("string")
    texts = dict(zip(corpus["pid"], corpus["text"]))
    out: dict = {"split": split, "questions": len(queries)}
    answer_hit = {k: 0 for k in ks}
    all_hit = {k: 0 for k in ks}
    pos_hit = {k: 0 for k in ks}
    for qid, answers, row in zip(queries["qid"], queries["answers"], docs):
        prepared = matcher.prepare_answers(list(answers))
        ranked = pids[row]
        for pid in ranked:
            matcher.add_passage(pid, texts[pid])
        first_answer = next((i for i, p in enumerate(ranked) if matcher.matches(prepared, p)), None)
        first_all = next((i for i, p in enumerate(ranked) if p in rel_all[qid]), None)
        first_pos = next((i for i, p in enumerate(ranked) if p == positive[qid]), None)
        for k in ks:
            answer_hit[k] += first_answer is not None and first_answer < k
            all_hit[k] += first_all is not None and first_all < k
            pos_hit[k] += first_pos is not None and first_pos < k
    n = max(len(queries), 1)
    for k in ks:
        out[f"R@{k}_answer"] = round(answer_hit[k] / n, 4)
        out[f"R@{k}_qrels_all"] = round(all_hit[k] / n, 4)
        out[f"hit@{k}_annotated"] = round(pos_hit[k] / n, 4)
    return out


def lengths(corpus: pd.DataFrame, with_tokenizer: bool) -> dict:
    words = corpus["text"].str.split().str.len()
    out = {
        "passages": len(corpus),
        "words_mean": round(float(words.mean()), 1),
        "words_max": int(words.max()),
        "words_p10": int(words.quantile(0.1)),
    }
    if with_tokenizer:
        from transformers import AutoTokenizer

        from pipeline.core.config import resolve_model_path

        tok = AutoTokenizer.from_pretrained(resolve_model_path("minilm"))
        n = np.array(
            [len(ids) for ids in tok(corpus["title"].tolist(), corpus["text"].tolist())["input_ids"]]
        )
        out.update(
            wordpieces_mean=round(float(n.mean()), 1),
            wordpieces_max=int(n.max()),
            share_within_128=round(float((n <= 128).mean()), 4),
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("data", type=Path, help="a synthkb folder, e.g. resources/synthkb")
    parser.add_argument("--depth", type=int, default=30, help="mined negatives per train question")
    parser.add_argument("--split", default="test", help="split for R@k")
    parser.add_argument("--no-tokenizer", action="store_true", help="skip the word-piece lengths")
    parser.add_argument("--out", type=Path, help="also write the figures as JSON")
    args = parser.parse_args(argv)
    corpus = read_table(args.data / "corpus.parquet")
    stats = {
        "data": str(args.data),
        "lengths": lengths(corpus, not args.no_tokenizer),
        "train_fn": fn_fraction(corpus, args.data, args.depth),
        "bm25": recall(corpus, args.data, args.split, [1, 5, 20, 100]),
    }
    text = json.dumps(stats, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

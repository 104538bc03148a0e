"""Evaluation of the controlled DPR runs (bench/dpr_recipes.py): exact search over the synthkb corpus
and hit_all@k (qrels_all), R@k (answer match), hit@k (qrels) per split."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # the recipe_* helpers beside this file
from recipe_inputs import Inputs

from pipeline.evaluation.metrics import hit_at_k, mrr_at_k, top_k_accuracy
from pipeline.retrieval.encode import encode_buffer
from pipeline.retrieval.model import Retriever

KS = (1, 5, 20, 100)


def encode_corpus(retriever: Retriever, inputs: Inputs) -> np.ndarray:
    c = inputs.corpus
    return encode_buffer(
        retriever,
        c["text"].tolist(),
        c["title"].fillna("").tolist(),
        batch_size=64,
        device=torch.device("cpu"),
        dtype=torch.float32,
    )


def encode_queries(retriever: Retriever, texts: list[str]) -> np.ndarray:
    return encode_buffer(
        retriever, texts, None, batch_size=128, device=torch.device("cpu"), dtype=torch.float32
    )


def search(q: np.ndarray, p: np.ndarray, pids: np.ndarray, depth: int = 100) -> list[list[str]]:
    """Exact top-depth by cosine (embeddings are L2-normalised); ties by corpus order."""
    scores = q @ p.T
    depth = min(depth, p.shape[0])
    top = np.argsort(-scores, axis=1, kind="stable")[:, :depth]
    return [list(pids[row]) for row in top]


def evaluate_split(
    inputs: Inputs, qids: list[str], answers: list, ranked: dict[str, list[str]], split: str
) -> dict:
    """hit_all@k, R@k, hit@k and MRR_all@10 of the given queries (the pipeline's metric functions)."""
    out: dict = {"n": len(qids)}
    if not qids:
        return out
    first = []
    for qid, ans in zip(qids, answers):
        prepared = inputs.matcher.prepare_answers(list(ans))
        first.append(
            next(
                (r for r, pid in enumerate(ranked[qid], start=1) if inputs.matcher.matches(prepared, pid)),
                None,
            )
        )
    out.update(top_k_accuracy(first, KS))
    sub = {q: ranked[q] for q in qids}
    q_all = {q: inputs.qrels_all[split][q] for q in qids}
    q_ann = {q: inputs.qrels[split][q] for q in qids}
    for k in KS:
        out[f"hit_all@{k}"] = hit_at_k(sub, q_all, k)
    for k in (1, 5, 20, 100):
        out[f"hit@{k}"] = hit_at_k(sub, q_ann, k)
    out["MRR_all@10"] = mrr_at_k(sub, q_all)
    return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in out.items()}


def evaluate_model(
    retriever: Retriever, inputs: Inputs, corpus_emb: np.ndarray | None, seen: set[str] | None
) -> tuple[dict, dict, np.ndarray, dict]:
    """Metrics for test, dev, train_seen (questions trained on) and train_unseen (train questions the
    run never visited: same entities, other questions). Returns (metrics, ranked, corpus_emb, q_emb)."""
    retriever.eval()
    if corpus_emb is None:
        corpus_emb = encode_corpus(retriever, inputs)
    pids = inputs.corpus["pid"].to_numpy()
    metrics, ranked_all, q_emb = {}, {}, {}
    for split in ("test", "dev", "train"):
        qdf = inputs.queries[split]
        emb = encode_queries(retriever, qdf["text"].tolist())
        q_emb[split] = emb
        ranked = dict(zip(qdf["qid"], search(emb, corpus_emb, pids)))
        ranked_all.update(ranked)
        answers = dict(zip(qdf["qid"], qdf["answers"]))
        if split != "train":
            metrics[split] = evaluate_split(
                inputs, list(qdf["qid"]), [answers[q] for q in qdf["qid"]], ranked, split
            )
            continue
        groups = {
            "train_seen": [q for q in qdf["qid"] if seen is not None and q in seen],
            "train_unseen": [q for q in qdf["qid"] if seen is None or q not in seen],
        }
        for name, qs in groups.items():
            metrics[name] = evaluate_split(inputs, qs, [answers[q] for q in qs], ranked, "train")
    return metrics, ranked_all, corpus_emb, q_emb


# ---- one run ---------------------------------------------------------------------------------------

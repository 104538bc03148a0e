"""Inputs of the controlled DPR runs (bench/dpr_recipes.py): which positive, which negatives, what is
frozen, and the audited training data and loss wrappers that count or mask in-batch relevant passages.
Nothing here changes pipeline/: rewritten qrels/negatives files, requires_grad, a wrapped loss."""

from __future__ import annotations

import logging
import sys
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # the recipe_* helpers beside this file
from pipeline.data.answers import AnswerMatcher
from pipeline.retrieval.model import Retriever
from pipeline.training.data import Batch, TrainData
from pipeline.training.losses import contrastive_loss

log = logging.getLogger("bench.dpr_recipes")

MASK = -1e4  # not -inf: beta * ccr_term would give 0 * inf = nan in the logged loss


def relevant(path: Path) -> dict[str, set[str]]:
    rel: dict[str, set[str]] = defaultdict(set)
    df = pd.read_parquet(path, columns=["qid", "pid", "relevance"])
    for qid, pid in df[df["relevance"] >= 1][["qid", "pid"]].itertuples(index=False):
        rel[qid].add(pid)
    return dict(rel)


class Inputs:
    """Everything the runs share: corpus, queries and judgements of every split."""

    def __init__(self, data: Path, negatives: Path, quick: bool):
        self.data, self.negatives = data, negatives
        self.corpus = pd.read_parquet(data / "corpus.parquet")
        self.queries = {s: pd.read_parquet(data / f"queries.{s}.parquet") for s in ("train", "dev", "test")}
        self.qrels = {s: relevant(data / f"qrels.{s}.parquet") for s in ("train", "dev", "test")}
        self.qrels_all = {s: relevant(data / f"qrels_all.{s}.parquet") for s in ("train", "dev", "test")}
        if quick:
            # Smoke test: 40 evaluated questions per split, and only the passages they need plus 200
            # others, so a whole run takes seconds. Numbers from it mean nothing.
            for s in ("dev", "test"):
                self.queries[s] = self.queries[s].head(40)
            keep = set().union(
                *(self.qrels_all[s][q] for s in ("dev", "test") for q in self.queries[s]["qid"])
            )
            extra = self.corpus["pid"].sample(200, random_state=0)
            self.corpus = self.corpus[self.corpus["pid"].isin(keep | set(extra))].reset_index(drop=True)
        self.pid_index = {p: i for i, p in enumerate(self.corpus["pid"])}
        self.matcher = AnswerMatcher("string")
        for pid, text in zip(self.corpus["pid"], self.corpus["text"]):
            self.matcher.add_passage(pid, text)


def write_negatives(inputs: Inputs, mode: str, work: Path) -> Path:
    """The mined file as is (bm25), or with every true false negative marked excluded (clean)."""
    if mode == "bm25":
        return inputs.negatives
    if mode != "clean":
        raise ValueError(mode)
    neg = pd.read_parquet(inputs.negatives)
    rel = inputs.qrels_all["train"]
    fn = np.array([pid in rel.get(qid, ()) for qid, pid in zip(neg["qid"], neg["pid"])])
    neg["excluded"] = neg["excluded"].astype(bool) | fn
    out = work / "negatives.clean.parquet"
    neg.to_parquet(out, index=False)
    return out


def write_qrels(inputs: Inputs, mode: str, work: Path, zs_best: dict[str, str] | None) -> Path:
    """qrels for TrainData: its positive is the highest-relevance row, every row is excluded from
    the negatives. annotated = the file as generated; other modes put the chosen passage at
    relevance 2 and the rest of qrels_all at 1 (with clean negatives the extra rows change nothing)."""
    if mode == "annotated":
        return inputs.data / "qrels.train.parquet"
    titles = dict(zip(inputs.corpus["pid"], inputs.corpus["title"]))
    texts = dict(zip(inputs.queries["train"]["qid"], inputs.queries["train"]["text"]))
    rows = []
    for qid, rel in sorted(inputs.qrels_all["train"].items()):
        annotated = next(iter(inputs.qrels["train"][qid]))
        if mode == "zs_best":
            chosen = zs_best[qid]
        elif mode == "title":
            # titles.get: --quick keeps part of the corpus only
            own = sorted(
                (p for p in rel if titles.get(p) and titles[p] in texts[qid]),
                key=lambda p: int(p.split("-")[1]),
            )
            chosen = own[0] if own else annotated
        else:
            raise ValueError(mode)
        rows += [(qid, chosen, 2)] + [(qid, p, 1) for p in sorted(rel) if p != chosen]
    out = work / f"qrels.{mode}.parquet"
    pd.DataFrame(rows, columns=["qid", "pid", "relevance"]).astype({"relevance": "int32"}).to_parquet(
        out, index=False
    )
    return out


class AuditedData(TrainData):
    """TrainData that remembers each batch's pids and counts relevant passages among the negatives.

    The batch is built exactly as TrainData.batch builds it (same ids, same order); only the
    bookkeeping is added."""

    def __init__(self, *args, qrels_all: dict[str, set[str]], **kwargs):
        super().__init__(*args, **kwargs)
        self.qrels_all = qrels_all
        self.last: tuple[list[str], np.ndarray, int] | None = None
        self.audit = Counter()

    def batch(self, indices: np.ndarray, k: int, epoch: int) -> Batch:
        ids: list[int] = []
        for i in indices:
            ids.append(self.positive_ids[i])
            ids.extend(self.negatives(int(i), k, epoch).tolist())
        ids_arr = np.asarray(ids, dtype=np.int64)
        pids = self.passages.pids[ids_arr]
        qids = [self.qids[i] for i in indices]
        g = k + 1
        self.last = (qids, pids, g)
        a = self.audit
        a["batches"] += 1
        hit_batch = False
        for qi, qid in enumerate(qids):
            rel = self.qrels_all[qid]
            own = pids[qi * g]
            a["queries"] += 1
            for j, pid in enumerate(pids):
                if j == qi * g:
                    continue
                mine = qi * g < j < (qi + 1) * g
                if pid == own:
                    a["same_passage_as_own_positive" + ("" if not mine else "_in_own_group")] += 1
                    hit_batch = True
                elif pid in rel:
                    a["other_relevant_hard_negative" if mine else "other_relevant_in_batch"] += 1
                    hit_batch |= not mine
        a["batches_with_inbatch_relevant"] += hit_batch
        titles, texts = self.passages.get(ids_arr)
        return Batch(
            qids=qids,
            query_texts=[self.query_texts[i] for i in indices],
            passage_titles=titles,
            passage_texts=texts,
            group_size=g,
        )


def relevant_mask(data: AuditedData, shape: tuple[int, int]) -> torch.Tensor:
    """[Q, N] True where column j holds a passage relevant to query i, other than i's own column."""
    qids, pids, g = data.last
    mask = torch.zeros(shape, dtype=torch.bool)
    for qi, qid in enumerate(qids):
        rel = data.qrels_all[qid]
        for j, pid in enumerate(pids):
            if j != qi * g and pid in rel:
                mask[qi, j] = True
    return mask


class AuditedLoss:
    """NCE that knows every relevant passage of the batch (single process, in-batch negatives on:
    scores are [Q, Q*(k+1)]): passed to the loop's ``train(loss=...)`` as any other loss object.

    mask: the other relevant columns are left out of each query's softmax;
    multi: -log of the summed probability of every relevant column (own positive included).
    """

    def __init__(self, data: AuditedData, mode: str):
        if mode not in ("mask", "multi"):
            raise ValueError(f"mode must be mask or multi, got {mode!r}")
        self.data, self.mode = data, mode

    def describe(self) -> dict:
        return {"loss": f"nce_{self.mode}_known_relevant"}

    def __call__(self, scores, positives, group_size, *, in_batch):
        if not in_batch:
            raise ValueError("mask/multi need in-batch negatives")
        m = relevant_mask(self.data, tuple(scores.shape)).to(scores.device)
        if self.mode == "mask":
            return contrastive_loss(scores.masked_fill(m, MASK), positives, group_size, in_batch=True)
        pos = m.clone()
        pos[torch.arange(len(positives)), positives] = True
        logp = torch.log_softmax(scores.float(), dim=1)
        nce = -torch.logsumexp(logp.masked_fill(~pos, MASK), dim=1).mean()
        return nce, {"nce": nce.detach(), "ccr_term": (-logp.mean(dim=1).mean()).detach()}


def freeze(retriever: Retriever, how: str) -> None:
    """Freezing is requires_grad = False: the loop's AdamW only takes trainable parameters."""
    if how == "none":
        return
    enc = retriever.query_model
    if how == "embeddings":
        for p in enc.embeddings.parameters():
            p.requires_grad = False
    elif how.startswith("top"):
        n_top = int(how[3:])
        layers = enc.encoder.layer
        for p in enc.embeddings.parameters():
            p.requires_grad = False
        for layer in layers[: len(layers) - n_top]:
            for p in layer.parameters():
                p.requires_grad = False
    elif how == "query_tower":
        for p in retriever.passage_model.parameters():
            p.requires_grad = False
    else:
        raise ValueError(how)


# ---- evaluation ------------------------------------------------------------------------------------

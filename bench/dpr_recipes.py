"""Controlled DPR runs on synthkb: why training from all-MiniLM-L6-v2 lowered retrieval (issue 10).

    .venv/bin/python bench/dpr_recipes.py --variants zeroshot demo_noisy clean --seeds 0
    .venv/bin/python bench/dpr_recipes.py --quick            # smoke test: 2 tiny steps, 40 queries
    .venv/bin/python bench/dpr_recipes.py --list             # the variants and what each changes

One process, one run after the other. Each run trains DPR from ``minilm`` on synthkb train with the
pipeline's own training API (``load_init``, ``TrainData``, ``TrainConfig``, ``train``; the same calls
``train_retriever`` makes, minus writing the folder), then encodes the corpus and the queries and
searches exactly (one matrix product: 2,302 passages). What the API lacks is done here, never in
pipeline/: freezing weights (``requires_grad``), choosing another positive (a rewritten qrels file),
removing true false negatives (a rewritten negatives file) and masking in-batch positives (the loss
seen by the loop is wrapped).

Metrics per split (test, dev, and two train subsets; see ``evaluate_split``):
  hit_all@k  any qrels_all passage (exact truth: every passage that states the fact) in the top k
  R@k        DPR answer match in the top k (pipeline.evaluation)
  hit@k      the annotated passage (qrels) in the top k
One JSON line per run on stdout and appended to ``--out``; the top-5 of every query goes to
``<out dir>/runs/<variant>.s<seed>.parquet`` for failure analysis.
"""
from __future__ import annotations

import argparse
import json
import logging
import math
import shutil
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import pipeline.training.loop as loop_mod  # noqa: E402
from pipeline.core.seeding import seed_everything  # noqa: E402
from pipeline.data.answers import AnswerMatcher  # noqa: E402
from pipeline.evaluation.metrics import hit_at_k, mrr_at_k, top_k_accuracy  # noqa: E402
from pipeline.retrieval.encode import encode_buffer  # noqa: E402
from pipeline.retrieval.model import Retriever  # noqa: E402
from pipeline.training.data import Batch, TrainData, epoch_order  # noqa: E402
from pipeline.training.loop import TrainConfig, schedule, train  # noqa: E402
from pipeline.training.train_dense import load_init  # noqa: E402

log = logging.getLogger("bench.dpr_recipes")

DATA = Path("/tmp/base/resources/synthkb")
NEGATIVES = Path("/tmp/base/results/synthkb/negatives/bm25.parquet")
DEMO_MODEL = Path("/tmp/base/results/synthkb/models/dpr")
KS = (1, 5, 20, 100)
MASK = -1e4  # not -inf: beta * ccr_term would give 0 * inf = nan in the logged loss


@dataclass(frozen=True)
class Variant:
    """One training recipe. Defaults = the demo's dpr setting, except negatives (clean here)."""
    name: str
    doc: str
    train: bool = True
    init: str = "minilm"          # base encoder, or a trained retriever folder (no training then)
    lr: float = 2e-5
    steps: int = 60
    epochs: int = 1
    batch_size: int = 16
    k: int = 1                    # hard negatives per query
    depth: int = 30               # sampled from the top `depth` BM25 candidates
    in_batch: bool = True
    tau: float = 0.05
    warmup: float = 0.1
    # bm25: the mined file as the demo used it (true false negatives included);
    # clean: every qrels_all pair removed from the candidates (oracle: no false negative at all).
    negatives: str = "clean"
    # annotated: the one qrels passage (the passage the question was generated from, a uniform draw
    #   among those stating the fact); zs_best: the qrels_all passage the untrained model scores
    #   highest; title: a qrels_all passage of the article the question names (else annotated).
    positive: str = "annotated"
    # nce: the pipeline's loss; mask: in-batch columns holding a relevant passage of the query (its own
    #   positive elsewhere in the batch, or another qrels_all passage) leave its softmax;
    #   multi: those columns count as positives (-log of their summed probability).
    loss: str = "nce"
    # none | embeddings | top<N> (only the top N of the 6 layers train) | query_tower
    freeze: str = "none"


# The variant list. Each name changes ONE factor against `clean` (or `demo_noisy` for the negatives),
# so a difference between two rows is that factor's effect on this data.
VARIANTS: dict[str, Variant] = {v.name: v for v in [
    Variant("zeroshot", "all-MiniLM-L6-v2, untrained", train=False),
    Variant("demo_model", "the demo's trained dpr folder (/tmp/base), evaluated here: checks the "
            "evaluator", train=False, init=str(DEMO_MODEL)),
    Variant("demo_noisy", "the demo's dpr setting: lr 2e-5, 60 steps, batch 16, k=1 of top 30, "
            "in-batch, tau 0.05, mined negatives as is", negatives="bm25"),
    Variant("clean", "demo setting, true false negatives removed (oracle negatives)"),
    # (1) labels
    Variant("pos_zs_best", "clean; positive = the relevant passage zero-shot ranks highest",
            positive="zs_best"),
    Variant("pos_title", "clean; positive = a relevant passage of the question's own article",
            positive="title"),
    Variant("multi_pos", "clean; every relevant passage in the batch is a positive (summed)",
            loss="multi"),
    # (4) in-batch passages that are relevant to the query
    Variant("mask_pos", "clean; relevant passages elsewhere in the batch leave the softmax",
            loss="mask"),
    # (2) learning rate and tau
    Variant("lr1e-5", "clean, lr 1e-5", lr=1e-5),
    Variant("lr5e-6", "clean, lr 5e-6", lr=5e-6),
    Variant("lr2e-6", "clean, lr 2e-6", lr=2e-6),
    Variant("tau0.1", "clean, tau 0.1", tau=0.1),
    Variant("tau0.02", "clean, tau 0.02", tau=0.02),
    # (3) how much of the model moves
    Variant("frz_emb", "clean; word/position embeddings frozen", freeze="embeddings"),
    Variant("top2", "clean; only the top 2 of 6 layers train", freeze="top2"),
    Variant("q_tower", "clean; separate towers, passage tower frozen (index = zero-shot's)",
            freeze="query_tower"),
    # (5) steps / warm-up
    Variant("steps120", "clean, 120 steps (one epoch)", steps=120),
    Variant("steps240", "clean, 240 steps (two epochs)", steps=240, epochs=2),
    Variant("warm0.5", "clean, warm-up over half of the steps", warmup=0.5),
    Variant("k4_nobatch", "clean, k=4 hard negatives, no in-batch negatives", k=4, in_batch=False),
]}


# ---- data ------------------------------------------------------------------------------------------

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
            keep = set().union(*(self.qrels_all[s][q] for s in ("dev", "test")
                                 for q in self.queries[s]["qid"]))
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
            own = sorted((p for p in rel if titles[p] and titles[p] in texts[qid]),
                         key=lambda p: int(p.split("-")[1]))
            chosen = own[0] if own else annotated
        else:
            raise ValueError(mode)
        rows += [(qid, chosen, 2)] + [(qid, p, 1) for p in sorted(rel) if p != chosen]
    out = work / f"qrels.{mode}.parquet"
    pd.DataFrame(rows, columns=["qid", "pid", "relevance"]).astype({"relevance": "int32"}).to_parquet(
        out, index=False)
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
        return Batch(qids=qids, query_texts=[self.query_texts[i] for i in indices],
                     passage_titles=titles, passage_texts=texts, group_size=g)


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


def patched_loss(original, data: AuditedData, mode: str):
    """Wrap the loop's contrastive_loss (single process, in-batch on: scores are [Q, Q*(k+1)])."""
    def loss(scores, positives, group_size, *, in_batch=True, beta=0.0, scale="paper", f_beta=1.0):
        if not in_batch or beta:
            raise ValueError("mask/multi need in-batch negatives and beta 0")
        m = relevant_mask(data, tuple(scores.shape)).to(scores.device)
        if mode == "mask":
            return original(scores.masked_fill(m, MASK), positives, group_size, in_batch=True,
                            beta=0.0, scale=scale, f_beta=f_beta)
        # multi: -log sum of the probabilities of every relevant column (own positive included)
        pos = m.clone()
        pos[torch.arange(len(positives)), positives] = True
        logp = torch.log_softmax(scores.float(), dim=1)
        nce = -torch.logsumexp(logp.masked_fill(~pos, MASK), dim=1).mean()
        return nce, {"nce": nce.detach(), "ccr_term": (-logp.mean(dim=1).mean()).detach()}
    return loss


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
        for layer in layers[:len(layers) - n_top]:
            for p in layer.parameters():
                p.requires_grad = False
    elif how == "query_tower":
        for p in retriever.passage_model.parameters():
            p.requires_grad = False
    else:
        raise ValueError(how)


# ---- evaluation ------------------------------------------------------------------------------------

def encode_corpus(retriever: Retriever, inputs: Inputs) -> np.ndarray:
    c = inputs.corpus
    return encode_buffer(retriever, c["text"].tolist(), c["title"].fillna("").tolist(), batch_size=64,
                         device=torch.device("cpu"), dtype=torch.float32)


def encode_queries(retriever: Retriever, texts: list[str]) -> np.ndarray:
    return encode_buffer(retriever, texts, None, batch_size=128, device=torch.device("cpu"),
                         dtype=torch.float32)


def search(q: np.ndarray, p: np.ndarray, pids: np.ndarray, depth: int = 100) -> list[list[str]]:
    """Exact top-depth by cosine (embeddings are L2-normalised); ties by corpus order."""
    scores = q @ p.T
    depth = min(depth, p.shape[0])
    top = np.argsort(-scores, axis=1, kind="stable")[:, :depth]
    return [list(pids[row]) for row in top]


def evaluate_split(inputs: Inputs, qids: list[str], answers: list, ranked: dict[str, list[str]],
                   split: str) -> dict:
    """hit_all@k, R@k, hit@k and MRR_all@10 of the given queries (the pipeline's metric functions)."""
    out: dict = {"n": len(qids)}
    if not qids:
        return out
    first = []
    for qid, ans in zip(qids, answers):
        prepared = inputs.matcher.prepare_answers(list(ans))
        first.append(next((r for r, pid in enumerate(ranked[qid], start=1)
                           if inputs.matcher.matches(prepared, pid)), None))
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


def evaluate_model(retriever: Retriever, inputs: Inputs, corpus_emb: np.ndarray | None,
                   seen: set[str] | None) -> tuple[dict, dict, np.ndarray, dict]:
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
            metrics[split] = evaluate_split(inputs, list(qdf["qid"]), [answers[q] for q in qdf["qid"]],
                                            ranked, split)
            continue
        groups = {"train_seen": [q for q in qdf["qid"] if seen is not None and q in seen],
                  "train_unseen": [q for q in qdf["qid"] if seen is None or q not in seen]}
        for name, qs in groups.items():
            metrics[name] = evaluate_split(inputs, qs, [answers[q] for q in qs], ranked, "train")
    return metrics, ranked_all, corpus_emb, q_emb


# ---- one run ---------------------------------------------------------------------------------------

class Runner:
    def __init__(self, inputs: Inputs, out_dir: Path, quick: bool, threads: int):
        self.inputs, self.out_dir, self.quick = inputs, out_dir, quick
        self.work = Path(tempfile.mkdtemp(prefix="dpr_recipes_"))
        torch.set_num_threads(threads)
        self._zs: dict | None = None   # zero-shot corpus and query embeddings, computed once

    def zeroshot_embeddings(self) -> dict:
        # Cached on disk too (a later invocation reuses it): the untrained model never changes.
        cache = self.out_dir / "cache" / f"zeroshot{'.quick' if self.quick else ''}.npz"
        if self._zs is None and cache.exists():
            self._zs = dict(np.load(cache))
        if self._zs is None:
            retriever = load_init("minilm", {})
            _, _, corpus_emb, q_emb = evaluate_model(retriever, self.inputs, None, None)
            self._zs = {"corpus": corpus_emb, **q_emb}
        if not cache.exists():
            cache.parent.mkdir(parents=True, exist_ok=True)
            np.savez(cache, **self._zs)
        return self._zs

    def zs_best(self) -> dict[str, str]:
        """For each train question, the qrels_all passage the untrained model scores highest."""
        zs = self.zeroshot_embeddings()
        qdf = self.inputs.queries["train"]
        out = {}
        for qid, qe in zip(qdf["qid"], zs["train"]):
            # (--quick keeps a small corpus: passages outside it cannot be chosen)
            rel = sorted(p for p in self.inputs.qrels_all["train"][qid] if p in self.inputs.pid_index)
            if not rel:
                out[qid] = next(iter(self.inputs.qrels["train"][qid]))
                continue
            idx = [self.inputs.pid_index[p] for p in rel]
            out[qid] = rel[int(np.argmax(zs["corpus"][idx] @ qe))]
        return out

    def run(self, v: Variant, seed: int) -> dict:
        inputs = self.inputs
        if self.quick:
            v = replace(v, steps=min(v.steps, 2), batch_size=min(v.batch_size, 4))
        record: dict = {"variant": v.name, "seed": seed, "quick": self.quick, "settings": asdict(v)}
        t0 = time.perf_counter()
        seen: set[str] | None = None
        corpus_emb = None
        if not v.train:
            retriever = load_init(v.init, {})
            record.update(steps=0, train_s=0.0)
            if v.init == "minilm" and self._zs is not None:
                corpus_emb = self._zs["corpus"]
        else:
            seed_everything(seed)   # as train_retriever does, before the data and the model
            negatives = write_negatives(inputs, v.negatives, self.work)
            qrels = write_qrels(inputs, v.positive, self.work,
                                self.zs_best() if v.positive == "zs_best" else None)
            cfg = TrainConfig(lr=v.lr, epochs=v.epochs, batch_size=v.batch_size, grad_accum=1,
                              hard_negatives=v.k, negatives_depth=v.depth, in_batch=v.in_batch,
                              warmup_ratio=v.warmup, weight_decay=0.0, max_grad_norm=2.0,
                              max_steps=v.steps, checkpoint_every=0, precision="bf16", seed=seed)
            data = AuditedData(str(inputs.data / "queries.train.parquet"), str(qrels), str(negatives),
                               str(inputs.data / "corpus.parquet"), depth=v.depth, seed=seed,
                               qrels_all=inputs.qrels_all["train"])
            retriever = load_init(v.init, {"temperature": v.tau},
                                  separate_towers=v.freeze == "query_tower")
            freeze(retriever, v.freeze)
            record["trainable_params"] = sum(p.numel() for p in retriever.parameters() if p.requires_grad)
            original = loop_mod.contrastive_loss
            if v.loss != "nce":
                loop_mod.contrastive_loss = patched_loss(original, data, v.loss)
            ckpt = Path(tempfile.mkdtemp(prefix="ckpt_", dir=self.work))
            try:
                train(retriever, data, cfg, checkpoint_dir=ckpt)
            finally:
                loop_mod.contrastive_loss = original
            record["train_s"] = round(time.perf_counter() - t0, 1)
            per_epoch, total = schedule(len(data), cfg)
            record["steps"] = total
            # Which train questions the run trained on: epoch e visits epoch_order(e)[:per_epoch*bs].
            seen = set()
            for e in range(math.ceil(total / per_epoch)):
                n = min(total - e * per_epoch, per_epoch) * cfg.batch_size
                seen |= {data.qids[i] for i in epoch_order(len(data), seed, e)[:n]}
            steps_log = [json.loads(x) for x in (ckpt / loop_mod.LOG_FILE).read_text().splitlines()]
            losses = [s["nce"] for s in steps_log]
            record["loss_first5"] = round(float(np.mean(losses[:5])), 3)
            record["loss_last5"] = round(float(np.mean(losses[-5:])), 3)
            a = data.audit
            record["audit_per_query"] = {k: round(a[k] / max(a["queries"], 1), 4) for k in sorted(a)
                                         if k not in ("queries", "batches", "batches_with_inbatch_relevant")}
            record["audit_batches_with_inbatch_relevant"] = round(
                a["batches_with_inbatch_relevant"] / max(a["batches"], 1), 3)
            if v.freeze == "query_tower":
                corpus_emb = self.zeroshot_embeddings()["corpus"]  # the passage tower did not move
        t1 = time.perf_counter()
        metrics, ranked, corpus_emb_out, q_emb = evaluate_model(retriever, inputs, corpus_emb, seen)
        if v.name == "zeroshot" and self._zs is None:
            self._zs = {"corpus": corpus_emb_out, **q_emb}
            self.zeroshot_embeddings()  # writes the cache
        record["eval_s"] = round(time.perf_counter() - t1, 1)
        record.update(metrics)
        self.save_ranked(v.name, seed, ranked)
        return record

    def save_ranked(self, name: str, seed: int, ranked: dict[str, list[str]]) -> None:
        runs = self.out_dir / "runs"
        runs.mkdir(parents=True, exist_ok=True)
        rows = [(q, r, p) for q, lst in ranked.items() for r, p in enumerate(lst[:5], start=1)]
        pd.DataFrame(rows, columns=["qid", "rank", "pid"]).to_parquet(
            runs / f"{name}.s{seed}{'.quick' if self.quick else ''}.parquet", index=False)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variants", nargs="+", default=["zeroshot", "demo_noisy", "clean"],
                    help="names from --list (default: zeroshot demo_noisy clean)")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--out", default="/tmp/recipes/results.jsonl", help="JSONL file, appended to")
    ap.add_argument("--data", default=str(DATA), help="synthkb resources folder")
    ap.add_argument("--negatives", default=str(NEGATIVES), help="mined BM25 negatives of the train split")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quick", action="store_true",
                    help="smoke test: <= 2 steps of 4 queries, 40 questions per split, small corpus "
                         "(writes to <out>.quick.jsonl)")
    ap.add_argument("--list", action="store_true", help="print the variants and exit")
    args = ap.parse_args(argv)
    if args.list:
        for v in VARIANTS.values():
            print(f"{v.name:12s} {v.doc}")
        return 0
    unknown = [n for n in args.variants if n not in VARIANTS]
    if unknown:
        ap.error(f"unknown variants {unknown}; see --list")
    logging.basicConfig(level=logging.WARNING)
    out = Path(args.out)
    if args.quick:
        out = out.with_suffix(".quick.jsonl")
    out.parent.mkdir(parents=True, exist_ok=True)
    inputs = Inputs(Path(args.data), Path(args.negatives), args.quick)
    runner = Runner(inputs, out.parent, args.quick, args.threads)
    try:
        for name in args.variants:
            for seed in ([0] if not VARIANTS[name].train else args.seeds):
                record = runner.run(VARIANTS[name], seed)
                line = json.dumps(record)
                print(line, flush=True)
                with open(out, "a", encoding="utf-8") as handle:
                    handle.write(line + "\n")
    finally:
        shutil.rmtree(runner.work, ignore_errors=True)  # rewritten inputs and training logs
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The passage sieve (Algorithm 1 of Wang et al., AAAI 2024; reference.md section 1).

    python -m pipeline.sieve.passage_sieve --candidates results/D/sieve/candidates.parquet \
        --corpus resources/D/corpus.parquet --queries resources/D/queries.train.parquet \
        --model results/D/models/dpr_ccr_b0.5 --out results/D/negatives/sieve_b0.5.parquet \
        [--train-out results/D/negatives/sieve_b0.5.train.parquet] [--losses-out L.parquet] \
        [--strict] [--fallback random_one|none] [--seed 0] [--temperature T]

    # exactly what the workflow's job decides: its settings document, then the same paths
    python -m pipeline.workflow.jobs synthkb passage_sieve > sieve.json
    python -m pipeline.sieve.passage_sieve --settings sieve.json --candidates ... --out ...

The settings are a document (--settings FILE, or --settings-json as the rule passes it; schema:
pipeline.core.settings.job_documents.SieveJob), each flag over it; what neither gives is config section sieve's default.

For every training query, P = {positive} + its candidates, scored by cosine similarity with the
(CCR-trained) retriever. ``l(p) = -s_p/tau + logsumexp_P(s/tau)``; the threshold is the mean of l
over P; a candidate is kept as a confident negative iff ``l >= threshold`` (``--strict``: ">", the
released code). Since l is a decreasing function of s with a per-query offset, the rule is
"keep iff s <= mean s over P": it does not depend on tau, and it needs only each passage's embedding,
so every distinct passage is encoded once. ``--fallback random_one`` (released code) keeps one
random candidate (seeded per query) when nothing survives.
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

import numpy as np
import pandas as pd
import pyarrow as pa

from pipeline.core.cli import add_job_flags, run_main, stage_parser, start_stage
from pipeline.core.jobs import add_settings_flags, job_settings
from pipeline.core.schemas import CANDIDATES_SCHEMA, MINED_NEGATIVES_SCHEMA, SIEVE_LOSSES_SCHEMA, SIEVE_SCHEMA
from pipeline.core.seeding import item_rng, stable_hash
from pipeline.core.settings.job_documents import SieveJob
from pipeline.core.storage import DataError, read_table, write_table
from pipeline.retrieval.embeddings import rowwise_dot
from pipeline.sieve.data import encode_unique_passages, normalize_rows, read_queries
from pipeline.sieve.settings import SieveSettings

log = logging.getLogger("sieve.sieve")

FALLBACKS = get_args(SieveSettings.model_fields["fallback"].annotation)  # random_one, none
CANDIDATE_COLUMNS = [
    "qid",
    "pid",
    "rank",
    "source_score",
    "is_false_negative",
    "fn_label_source",
    "positive_pid",
]


# ---- the rule (pure) -----------------------------------------------------------------------------


def nce_losses(scores: np.ndarray, tau: float = 1.0) -> np.ndarray:
    """l(p) = -log softmax(s/tau)[p] = -s_p/tau + logsumexp(s/tau), for every p of one set."""
    z = np.asarray(scores, dtype=np.float64) / tau
    m = z.max()
    return m + np.log(np.exp(z - m).sum()) - z


@dataclass
class QuerySieve:
    losses: np.ndarray  # candidates' l(p)
    positive_loss: float
    threshold: float
    kept: np.ndarray  # bool per candidate


def sieve_query(
    positive_score: float, candidate_scores: np.ndarray, tau: float = 1.0, strict: bool = False
) -> QuerySieve:
    """Algorithm 1 for one query (no fallback): threshold = mean loss over positive + candidates."""
    losses = nce_losses(np.concatenate([[positive_score], candidate_scores]), tau)
    threshold = float(losses.mean())
    cand = losses[1:]
    kept = cand > threshold if strict else cand >= threshold
    return QuerySieve(cand, float(losses[0]), threshold, kept)


def sieve_grouped(
    offsets: np.ndarray,
    positive_scores: np.ndarray,
    candidate_scores: np.ndarray,
    tau: float = 1.0,
    strict: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``sieve_query`` for many queries at once.

    Query i owns candidate rows ``offsets[i]:offsets[i+1]`` (each at least one row). Returns
    (candidate losses, positive losses, per-query thresholds, kept) - per row / per query.
    """
    offsets = np.asarray(offsets, dtype=np.int64)
    counts = np.diff(offsets)
    if (counts < 1).any():
        raise ValueError("every query needs at least one candidate")
    starts = offsets[:-1]
    group = np.repeat(np.arange(len(counts)), counts)
    zc = np.asarray(candidate_scores, dtype=np.float64) / tau
    zp = np.asarray(positive_scores, dtype=np.float64) / tau
    m = np.maximum(np.maximum.reduceat(zc, starts), zp)
    lse = m + np.log(np.add.reduceat(np.exp(zc - m[group]), starts) + np.exp(zp - m))
    cand_loss = lse[group] - zc
    pos_loss = lse - zp
    threshold = (np.add.reduceat(cand_loss, starts) + pos_loss) / (counts + 1)
    kept = cand_loss > threshold[group] if strict else cand_loss >= threshold[group]
    return cand_loss, pos_loss, threshold, kept


def apply_fallback(
    kept: np.ndarray, offsets: np.ndarray, qids: list[str], seed: int, mode: str = "random_one"
) -> tuple[np.ndarray, np.ndarray]:
    """Where a query kept nothing, ``random_one`` keeps one candidate drawn from (seed, qid).

    Returns (kept after fallback, bool mask of the rows kept by the fallback).
    """
    if mode not in FALLBACKS:
        raise ValueError(f"unknown sieve fallback {mode!r} (expected one of {FALLBACKS})")
    kept = np.asarray(kept, dtype=bool).copy()
    by_fallback = np.zeros(len(kept), dtype=bool)
    if mode == "none":
        return kept, by_fallback
    for i, qid in enumerate(qids):
        lo, hi = int(offsets[i]), int(offsets[i + 1])
        if not kept[lo:hi].any():
            row = lo + int(item_rng(seed, f"sieve-fallback/{qid}").integers(hi - lo))
            kept[row] = by_fallback[row] = True
    return kept, by_fallback


def select_candidates(negatives: pd.DataFrame, *, n_candidates: int, pool: int, seed: int) -> pd.DataFrame:
    """Per query: the top-``pool`` rows by rank; if more than ``n_candidates``, a sample of that many
    drawn from ``item_rng(seed, qid)`` (independent of row order), returned in rank order."""
    if n_candidates < 1 or pool < 1:
        raise ValueError("n_candidates and pool must be >= 1")
    df = negatives.sort_values(["qid", "rank", "pid"], kind="stable").reset_index(drop=True)
    df = df[df.groupby("qid", sort=False).cumcount() < pool]
    parts = []
    for qid, group in df.groupby("qid", sort=True):
        if len(group) > n_candidates:
            pick = np.sort(item_rng(seed, qid).choice(len(group), size=n_candidates, replace=False))
            group = group.iloc[pick]
        parts.append(group)
    if not parts:
        return df.iloc[:0].copy()
    return pd.concat(parts).reset_index(drop=True)


def query_offsets(qids: np.ndarray) -> tuple[list[str], np.ndarray]:
    """Unique qids (in order of appearance) and row offsets; rows of a query must be contiguous."""
    qids = np.asarray(qids, dtype=object)
    change = np.flatnonzero(qids[1:] != qids[:-1]) + 1 if len(qids) else np.array([], dtype=np.int64)
    starts = np.concatenate([[0], change]).astype(np.int64) if len(qids) else np.array([], np.int64)
    order = [qids[s] for s in starts]
    if len(set(order)) != len(order):
        raise ValueError("candidate rows of a query are not contiguous (sort by qid first)")
    return order, np.concatenate([starts, [len(qids)]]).astype(np.int64)


# ---- scoring with a retriever ----------------------------------------------------------------------


def read_candidates(path: str | os.PathLike) -> pd.DataFrame:
    """The candidate table written by ``pipeline.sieve.candidates``, sorted by (qid, rank)."""
    # The columns the filters use are required; every column present must have its schema type (a
    # text rank would sort as text: 1, 10, 11, 2, ...).
    cands = read_table(
        path,
        schema=CANDIDATES_SCHEMA,
        optional=[c for c in CANDIDATES_SCHEMA.names if c not in CANDIDATE_COLUMNS],
    )
    for col in ("qid", "pid", "rank", "positive_pid"):
        nulls = cands[col].isna().to_numpy()
        if nulls.any():
            raise DataError("null value", file=path, record=int(np.argmax(nulls)), field=col)
    per_query = cands.groupby("qid")["positive_pid"].nunique()
    if (per_query > 1).any():
        raise DataError(
            f"query {per_query.index[per_query > 1][0]!r} has several positive_pid values",
            file=path,
            field="positive_pid",
        )
    return cands.sort_values(["qid", "rank"], kind="stable").reset_index(drop=True)


@dataclass
class Similarities:
    qids: list[str]
    offsets: np.ndarray
    candidate: np.ndarray  # per candidate row
    positive: np.ndarray  # per query
    tau: float
    passage_index: dict[str, int]
    passages: np.ndarray  # cached normalised passage embeddings (memmap)
    queries: np.ndarray  # normalised query embeddings, one row per qid


def model_similarities(
    cands: pd.DataFrame,
    model_dir: str | os.PathLike,
    corpus: str | os.PathLike,
    queries: str | os.PathLike,
    work_dir: str | os.PathLike,
    *,
    extra_pids: set[str] = frozenset(),
    batch_size: int = 64,
    temperature: float | None = None,
    device: str = "auto",
) -> Similarities:
    """Cosine similarity of every candidate and positive, each distinct passage encoded once, by the
    model on ``device`` (auto: a visible GPU, else the CPU)."""
    # torch/transformers load only when a model is used
    from pipeline.retrieval.encode import resolve_device
    from pipeline.retrieval.model import Retriever

    qids, offsets = query_offsets(cands["qid"].to_numpy())
    retriever = Retriever.load(model_dir).to(resolve_device(device))
    if temperature is None:
        temperature = retriever.settings.temperature if retriever.settings.similarity == "cosine" else 1.0
    log.info("sieve model %s (%s, tau %.4g)", model_dir, retriever.settings.similarity, temperature)
    query_table = read_queries(queries, qids)
    q_emb = normalize_rows(retriever.encode_queries(query_table["text"].tolist(), batch_size=batch_size))
    needed = set(cands["pid"]) | set(query_positives(cands, offsets)) | set(extra_pids)
    index, p_emb = encode_unique_passages(retriever, corpus, needed, work_dir, batch_size)
    return embedding_similarities(cands, qids, offsets, q_emb, index, p_emb, temperature)


def query_positives(cands: pd.DataFrame, offsets: np.ndarray) -> np.ndarray:
    """The positive pid of every query (its first candidate row holds it)."""
    return cands["positive_pid"].to_numpy()[offsets[:-1]]


def embedding_similarities(
    cands: pd.DataFrame,
    qids: list[str],
    offsets: np.ndarray,
    q_emb: np.ndarray,
    index: dict[str, int],
    p_emb: np.ndarray,
    temperature: float,
) -> Similarities:
    """Similarities of every candidate row and every query's positive from normalised embeddings;
    ``index`` maps a pid to its row of ``p_emb``, ``q_emb`` has one row per qid."""
    positives = query_positives(cands, offsets)
    q_rows = np.repeat(np.arange(len(qids)), np.diff(offsets))
    p_rows = np.fromiter((index[p] for p in cands["pid"]), dtype=np.int64, count=len(cands))
    cand_sim = rowwise_dot(q_emb, q_rows, p_emb, p_rows)
    pos_rows = np.fromiter((index[p] for p in positives), dtype=np.int64, count=len(positives))
    pos_sim = rowwise_dot(q_emb, np.arange(len(qids)), p_emb, pos_rows)
    return Similarities(qids, offsets, cand_sim, pos_sim, float(temperature), index, p_emb, q_emb)


def sieve_table(
    cands: pd.DataFrame, sims: Similarities, *, strict: bool, fallback: str, seed: int
) -> pd.DataFrame:
    """The sieve's decisions for every candidate (SIEVE_SCHEMA columns)."""
    loss, pos_loss, thr, kept = sieve_grouped(sims.offsets, sims.positive, sims.candidate, sims.tau, strict)
    kept, by_fallback = apply_fallback(kept, sims.offsets, sims.qids, seed, fallback)
    counts = np.diff(sims.offsets)
    out = cands[["qid", "pid", "rank", "source_score"]].copy()
    out["similarity"] = sims.candidate
    out["nce_loss"] = loss
    out["threshold"] = np.repeat(thr, counts)
    out["kept"] = kept
    out["fallback"] = by_fallback
    out["is_false_negative"] = cands["is_false_negative"].astype("boolean")
    out["fn_label_source"] = cands["fn_label_source"].astype("string")
    out["positive_pid"] = cands["positive_pid"]
    out["positive_similarity"] = np.repeat(sims.positive, counts)
    out["positive_loss"] = np.repeat(pos_loss, counts)
    return out


def train_negatives(
    table: pd.DataFrame, source: str, has_answer: pd.Series | None = None, score: str = "similarity"
) -> pd.DataFrame:
    """Kept rows in the bm25.parquet layout: ranks renumbered 1..n in source-rank order, score = the
    ``score`` column (the sieve model's similarity; a filter's source score), has_answer from the
    candidates (unknown -> false), excluded = false."""
    kept = table[table["kept"]].sort_values(["qid", "rank"], kind="stable")
    out = pd.DataFrame({"qid": kept["qid"], "pid": kept["pid"]})
    out["rank"] = kept.groupby("qid", sort=False).cumcount().to_numpy() + 1
    out["score"] = kept[score].astype(np.float32)
    out["source"] = source
    ha = has_answer.loc[kept.index] if has_answer is not None else pd.Series(False, index=kept.index)
    out["has_answer"] = ha.astype("boolean").fillna(False).astype(bool).to_numpy()
    out["excluded"] = False
    return out.reset_index(drop=True)


def loss_groups(
    cands: pd.DataFrame, sims: Similarities, *, in_batch: int, max_queries: int | None, seed: int
) -> pd.DataFrame:
    """Figure 1 data: for a sample of queries, NCE loss of every passage in P = positive + candidates
    + ``in_batch`` other queries' positives (drawn per query from the seed), in one softmax."""
    qids = sims.qids
    chosen = set(qids)
    if max_queries is not None and max_queries < len(qids):
        chosen = set(sorted(qids, key=lambda q: (stable_hash(f"{seed}/figure/{q}"), q))[:max_queries])
    positives = cands["positive_pid"].to_numpy()[sims.offsets[:-1]]
    pool = np.array(sorted(set(positives)), dtype=object)
    is_fn = cands["is_false_negative"].astype("boolean")
    label = cands["fn_label_source"].astype("string")
    rows: dict[str, list] = {name: [] for name in SIEVE_LOSSES_SCHEMA.names}
    for i, qid in enumerate(qids):
        if qid not in chosen:
            continue
        lo, hi = int(sims.offsets[i]), int(sims.offsets[i + 1])
        groups = ["positive"] + [_group(is_fn.iat[r], label.iat[r]) for r in range(lo, hi)]
        pids = [positives[i]] + cands["pid"].iloc[lo:hi].tolist()
        scores = [sims.positive[i]] + sims.candidate[lo:hi].tolist()
        if in_batch > 0 and len(pool) > 1:
            draw = item_rng(seed, f"in-batch/{qid}").choice(
                len(pool), size=min(in_batch + 1, len(pool)), replace=False
            )
            others = [p for p in pool[draw] if p != positives[i]][:in_batch]
            emb = sims.passages[[sims.passage_index[p] for p in others]]
            scores += (np.asarray(emb, np.float64) @ np.asarray(sims.queries[i], np.float64)).tolist()
            pids += others
            groups += ["in_batch"] * len(others)
        losses = nce_losses(np.asarray(scores), sims.tau)
        rows["qid"] += [qid] * len(pids)
        rows["pid"] += pids
        rows["group"] += groups
        rows["similarity"] += list(scores)
        rows["nce_loss"] += losses.tolist()
    return pd.DataFrame(rows)


def _group(is_fn, label) -> str:
    if label is pd.NA or label is None:
        return "unlabeled"
    if label == "suspected":
        return "suspected"
    return "false_negative" if bool(is_fn) else "hard_negative"


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser("pipeline.sieve.passage_sieve", __doc__)
    parser.add_argument("--candidates", required=True, help="candidates Parquet (pipeline.sieve.candidates)")
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--queries", required=True, help="queries.train.parquet")
    parser.add_argument("--model", required=True, help="retriever folder scoring the candidates")
    parser.add_argument("--out", required=True, help="decisions Parquet, one row per candidate")
    parser.add_argument("--train-out", default=None, help="kept negatives in the bm25.parquet layout")
    parser.add_argument(
        "--source-tag", default=None, help="'source' of the training file (default: out stem)"
    )
    parser.add_argument("--losses-out", default=None, help="Figure 1 losses (with in-batch negatives)")
    add_settings_flags(parser, SieveJob, "settings (config section sieve, the seed)")
    add_job_flags(parser)
    args = parser.parse_args(argv)
    job = job_settings(SieveJob, args)  # before any work: a bad document or flag is one line
    start_stage(args.log, args.threads)
    run_sieve(args, job)
    return 0


def run_sieve(args: argparse.Namespace, job: Any) -> dict:
    """Sieve ``args``' candidates with the settings ``job`` (a SieveJob); return the counts."""
    cands = read_candidates(args.candidates)
    if cands.empty:
        raise DataError("no candidates to sieve", file=args.candidates)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".sieve-", dir=out.parent) as work:
        sims = model_similarities(
            cands,
            args.model,
            args.corpus,
            args.queries,
            work,
            batch_size=job.batch_size,
            temperature=job.temperature,
            device=args.device,
        )
        table = sieve_table(cands, sims, strict=job.strict, fallback=job.fallback, seed=job.seed)
        losses = None
        if args.losses_out:
            losses = loss_groups(
                cands, sims, in_batch=job.in_batch, max_queries=job.figure_queries, seed=job.seed
            )
        del sims  # release the memmap before the temporary folder goes
    write_table(out, pa.Table.from_pandas(table, schema=SIEVE_SCHEMA, preserve_index=False))
    if args.train_out:
        train = train_negatives(table, args.source_tag or out.stem, cands.get("has_answer"))
        write_table(
            args.train_out, pa.Table.from_pandas(train, schema=MINED_NEGATIVES_SCHEMA, preserve_index=False)
        )
    if losses is not None:
        write_table(
            args.losses_out, pa.Table.from_pandas(losses, schema=SIEVE_LOSSES_SCHEMA, preserve_index=False)
        )
    stats = {
        "queries": len(table["qid"].unique()),
        "candidates": len(table),
        "kept": int(table["kept"].sum()),
        "fallback_queries": int(table["fallback"].sum()),
        "sieve_out_rate": float(1 - table["kept"].mean()),
    }
    log.info("sieve: %s -> %s", stats, out)
    return stats


if __name__ == "__main__":
    run_main(main)

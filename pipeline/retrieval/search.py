"""Dense retrieval: encode a split's queries and write the top-k run (qid, pid, rank, score).

Two backends give the same ranking for an exact index:

- ``faiss``: the index folder of ``pipeline.retrieval.index``; index parts are loaded and searched one at a time
  and their results merged, so only one part is ever in memory.
- ``torch``: exact inner-product search that streams the fp16 embedding shards in chunks of
  ``--chunk-rows`` (on CUDA when available) and keeps a running top-k; no FAISS GPU build needed.

Order is total and the same everywhere: score descending, then pid ascending. Candidates tied with the
k-th score are kept while merging (a chunk's top-k is widened to every row tied at its boundary, and a
FAISS search is widened until its last result is below the k-th), so which of several tied passages
makes the cut does not depend on sharding, chunking or backend.

CLI::

    python -m pipeline.retrieval.search --model results/squad/models/zeroshot \
        --queries resources/squad/queries.test.parquet --out results/squad/zeroshot/run.test.parquet \
        --depth 100 --backend faiss --index results/squad/index/zeroshot
    ... --backend torch --embeddings results/squad/embeddings/zeroshot [--chunk-rows 65536]

    # exactly what the workflow's job searches with: its settings document, then the same paths
    python -m pipeline.workflow.jobs squad search_dense > search.json
    python -m pipeline.retrieval.search --settings search.json --model ... --queries ... --out ... \
        --backend faiss --index results/squad/index/zeroshot

The settings (pipeline.core.settings.job_documents.SearchJob: eval.depth, section search's batch and knobs, encode.amp)
come as one document, the workflow's job's (``--settings-json``) or a file (``--settings``), each flag
over it; without either, the contract's. With ``--mining-qrels`` (rule search_for_mining) the document is
a MiningSearchJob: no depth, but the negatives to be mined (section bm25), from which the depth follows
(pipeline.retrieval.mining.mining_depth: ``negatives`` + the most positives a train query has, x3 when
answer matches are excluded). The backend, the files, the device and threads are flags.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch

from pipeline.core.cli import run_main, stage_parser, start_stage
from pipeline.core.jobs import add_settings_flags, job_settings
from pipeline.core.schemas import RUN_SCHEMA
from pipeline.core.settings.base import default
from pipeline.core.settings.flags import add_flags, flag_name
from pipeline.core.settings.job_documents import MiningSearchJob, SearchJob
from pipeline.core.storage import DataError, write_table
from pipeline.retrieval.embeddings import EmbeddingSet, read_ids
from pipeline.retrieval.encode import (
    encode_buffer,
    iter_buffers,
    iter_slice,
    load_retriever,
    make_progress,
    parquet_rows,
    resolve_device,
)
from pipeline.retrieval.settings import SearchSettings

log = logging.getLogger("sieve.search")


# ---- running top-k with a total order -------------------------------------------------------------


class TopK:
    """Best ``k`` (score desc, pid asc) rows per query, merged from any number of candidate sets.

    ``pid_rank[row]`` is the position of the row's pid in sorted pid order: the tie-breaker.
    Rows are global row numbers; -1 marks "no candidate" (score -inf).
    """

    def __init__(self, n_queries: int, k: int, pid_rank: np.ndarray):
        self.k = k
        self.pid_rank = pid_rank
        self.scores = np.full((n_queries, k), -np.inf, dtype=np.float32)
        self.rows = np.full((n_queries, k), -1, dtype=np.int64)

    def add(self, start: int, scores: np.ndarray, rows: np.ndarray) -> None:
        """Merge candidates for queries ``start .. start+len(scores)``."""
        end = start + len(scores)
        scores = np.where(rows >= 0, scores, -np.inf).astype(np.float32)
        all_scores = np.concatenate([self.scores[start:end], scores], axis=1)
        all_rows = np.concatenate([self.rows[start:end], rows.astype(np.int64)], axis=1)
        tie = np.where(all_rows >= 0, self.pid_rank[np.maximum(all_rows, 0)], np.iinfo(np.int64).max)
        order = np.lexsort((tie, -all_scores), axis=1)[:, : self.k]
        self.scores[start:end] = np.take_along_axis(all_scores, order, axis=1)
        self.rows[start:end] = np.take_along_axis(all_rows, order, axis=1)


def pid_ranks(pids: pa.Array) -> np.ndarray:
    """0-based position of each pid in ascending pid order (pids are unique)."""
    if len(pids) == 0:
        return np.zeros(0, dtype=np.int64)
    return pc.rank(pids, sort_keys="ascending", tiebreaker="first").to_numpy().astype(np.int64) - 1


def chunk_candidates(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k columns of each row, widened to include every column tied with the k-th score."""
    width = min(k, scores.shape[1])
    values, cols = scores.topk(width, dim=1)
    tied = int((scores >= values[:, -1:]).sum(dim=1).max())
    if tied > width:
        values, cols = scores.topk(min(tied, scores.shape[1]), dim=1)
    return values, cols


# ---- backends -------------------------------------------------------------------------------------


def search_torch(
    embeddings_dir: str | os.PathLike,
    queries: np.ndarray,
    k: int,
    *,
    chunk_rows: int = 65_536,
    query_batch: int = 1024,
    device: torch.device | None = None,
    progress: bool = True,
) -> tuple[np.ndarray, np.ndarray, pa.Array]:
    """Exact search over the embedding shards: (rows [nq, k], scores [nq, k], pids of all rows)."""
    embeddings = EmbeddingSet(embeddings_dir)
    _check_dim(queries, embeddings.dim, Path(embeddings_dir) / "manifest.json")
    device = device or torch.device("cpu")
    pids = embeddings.ids()
    top = TopK(len(queries), k, pid_ranks(pids))
    # CPU matmul kernels round identical rows differently depending on their position in the block
    # (1 ulp in float32), which would break the pid tie order; float64 products rounded to float32
    # give identical rows identical scores. CUDA keeps float32 for speed.
    dtype = torch.float64 if device.type == "cpu" else torch.float32
    q_all = torch.from_numpy(np.ascontiguousarray(queries, dtype=np.float32)).to(device, dtype)
    with make_progress("passages", progress) as bar, torch.inference_mode():
        task = bar.add_task("exact search (torch)", total=embeddings.count)
        for first, chunk in embeddings.iter_rows(chunk_rows):
            block = torch.from_numpy(chunk).to(device, dtype)
            for start in range(0, len(queries), query_batch):
                scores = (q_all[start : start + query_batch] @ block.T).float()
                values, cols = chunk_candidates(scores, k)
                top.add(start, values.cpu().numpy(), cols.cpu().numpy() + first)
            bar.advance(task, len(chunk))
    return top.rows, top.scores, pids


def faiss_search_tied(
    index, queries: np.ndarray, k: int, width: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """FAISS top-k, widened per query until the last result scores below the k-th (ties kept)."""
    n = index.ntotal
    width = min(width or k + 1, n)
    scores, rows = index.search(queries, width)
    scores = np.where(rows >= 0, scores, -np.inf).astype(np.float32)
    if width >= n or width < k:
        return scores, rows
    tied = (rows[:, -1] >= 0) & (scores[:, -1] >= scores[:, k - 1])
    if tied.any():
        wide_scores, wide_rows = faiss_search_tied(index, queries[tied], k, width * 2)
        pad = wide_scores.shape[1] - width
        scores = np.pad(scores, ((0, 0), (0, pad)), constant_values=-np.inf)
        rows = np.pad(rows, ((0, 0), (0, pad)), constant_values=-1)
        scores[tied], rows[tied] = wide_scores, wide_rows
    return scores, rows


def search_faiss(
    index_dir: str | os.PathLike,
    queries: np.ndarray,
    k: int,
    *,
    nprobe: int = 32,
    ef_search: int = 128,
    gpu: bool = True,
    query_batch: int = 4096,
    progress: bool = True,
) -> tuple[np.ndarray, np.ndarray, pa.Array]:
    """Search every index part in turn and merge: (rows [nq, k], scores [nq, k], pids of all rows)."""
    from pipeline.retrieval.index import load_index_manifest, read_part, to_gpu, verify_part

    index_dir = Path(index_dir)
    manifest = load_index_manifest(index_dir)
    _check_dim(queries, int(manifest["dim"]), index_dir / "index.json")
    part_pids = []
    for entry in manifest["shards"]:
        verify_part(index_dir / entry["pids"], entry.get("pids_sha256"))
        part_pids.append(read_ids(index_dir / entry["pids"], "pid"))
    pids = pa.chunked_array([c for part in part_pids for c in part.chunks], pa.string()).combine_chunks()
    top = TopK(len(queries), k, pid_ranks(pids))
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    offset = 0
    with make_progress("queries", progress) as bar:
        for j, entry in enumerate(manifest["shards"]):
            index = read_part(index_dir / entry["index"], entry.get("sha256"))
            if index.ntotal != len(part_pids[j]):
                raise DataError(
                    f"{index.ntotal} vectors but {len(part_pids[j])} pids", file=index_dir / entry["pids"]
                )
            _set_search_parameters(index, nprobe, ef_search)
            index, _ = to_gpu(index, gpu)
            task = bar.add_task(f"search part {j + 1}/{len(manifest['shards'])}", total=len(queries))
            for start in range(0, len(queries), query_batch):
                if index.ntotal:
                    scores, rows = faiss_search_tied(index, queries[start : start + query_batch], k)
                    top.add(start, scores, np.where(rows >= 0, rows + offset, -1))
                bar.advance(task, min(query_batch, len(queries) - start))
            offset += int(index.ntotal)
            del index
    return top.rows, top.scores, pids


def _set_search_parameters(index, nprobe: int, ef_search: int) -> None:
    import faiss

    space = faiss.ParameterSpace()
    for name, value in (("nprobe", nprobe), ("efSearch", ef_search)):
        try:
            space.set_index_parameter(index, name, value)
        except RuntimeError:
            pass  # this index type has no such knob (e.g. nprobe on HNSW or Flat)


def _check_dim(queries: np.ndarray, dim: int, file: Path) -> None:
    if queries.ndim != 2 or queries.shape[1] != dim:
        raise DataError(
            f"query embeddings have shape {list(queries.shape)}, the passages have "
            f"dimension {dim} (different models?)",
            file=file,
        )


# ---- queries and runs -----------------------------------------------------------------------------


def encode_queries(
    retriever,
    path: str | os.PathLike,
    *,
    batch_size: int = 128,
    buffer: int = 50_000,
    device: torch.device,
    amp: bool = True,
    progress: bool = True,
    model: str | os.PathLike | None = None,
) -> tuple[list[str], np.ndarray]:
    """(qids, float32 [nq, d]) of a queries Parquet file, in file order; non-finite embeddings are a
    DataError naming ``model``."""
    qids, parts = [], []
    total = parquet_rows(path)
    with make_progress("queries", progress) as bar:
        task = bar.add_task(f"encode {Path(path).name}", total=total)
        for chunk in iter_buffers(iter_slice(path, 0, total, ["qid", "text"]), buffer):
            qids.extend(chunk["qid"])
            parts.append(
                encode_buffer(
                    retriever,
                    chunk["text"],
                    None,
                    batch_size=batch_size,
                    device=device,
                    amp=amp,
                    dtype=torch.float32,
                    on_batch=lambda n: bar.advance(task, n),
                    model=model,
                )
            )
    if len(set(qids)) != len(qids):
        seen: set[str] = set()
        row = next(i for i, q in enumerate(qids) if q in seen or seen.add(q))
        raise DataError(
            f"duplicate qid {qids[row]!r}; qids must be unique", file=path, record=row, field="qid"
        )
    dim = retriever.query_model.config.hidden_size
    return qids, (np.concatenate(parts) if parts else np.zeros((0, dim), np.float32))


def check_every_query_ranked(
    qids: Sequence[str], rows: np.ndarray, n_passages: int, file: str | os.PathLike
) -> None:
    """Refuse a run in which some query got no passage although the index holds some.

    Exact search always ranks every passage, so an empty query means non-finite scores (an index
    built from diverged embeddings) or an approximate index probed too narrowly; as a run it would
    count as a silent miss in the evaluation.
    """
    empty = (rows < 0).all(axis=1) if rows.size else np.zeros(len(qids), dtype=bool)
    if n_passages == 0 or not empty.any():
        return
    raise DataError(
        f"{int(empty.sum())} of {len(qids)} queries got no passage at all (e.g. qid "
        f"{qids[int(np.argmax(empty))]!r}): the index holds non-finite vectors (rebuild "
        "it from embeddings of a retrained model) or probes too few cells (raise "
        "--nprobe / --ef-search); the run was not written",
        file=file,
    )


def run_table(qids: Sequence[str], rows: np.ndarray, scores: np.ndarray, pids: pa.Array) -> pa.Table:
    """The run (RUN_SCHEMA) in query order then rank order; missing candidates (-1) are dropped."""
    valid = rows >= 0
    counts = valid.sum(axis=1)
    ranks = (
        np.concatenate([np.arange(1, c + 1, dtype=np.int32) for c in counts])
        if len(counts)
        else np.zeros(0, np.int32)
    )
    return pa.table(
        {
            "qid": pa.array(np.repeat(np.asarray(qids, dtype=object), counts), pa.string()),
            "pid": pids.take(pa.array(rows[valid])),
            "rank": pa.array(ranks, pa.int32()),
            "score": pa.array(scores[valid].astype(np.float32), pa.float32()),
        },
        schema=RUN_SCHEMA,
    )


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser("pipeline.retrieval.search", __doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="retriever folder (Retriever.load)")
    parser.add_argument("--queries", required=True, help="queries.{split}.parquet")
    parser.add_argument("--out", required=True, help="run Parquet to write")
    parser.add_argument(
        "--mining-qrels",
        help="mining: the train qrels whose positives are skipped; the settings are then a MiningSearchJob, "
        "and the run goes as deep as BM25 mining ranks for its negatives (--negatives)",
    )
    parser.add_argument("--backend", choices=("faiss", "torch"), default=default(SearchSettings, "backend"))
    parser.add_argument("--index", help="index folder (faiss backend)")
    parser.add_argument("--embeddings", help="gathered embedding folder (torch backend)")
    add_settings_flags(parser, SearchJob, "search (eval.depth, section search, encode.amp)")
    add_flags(
        parser.add_argument_group("mining (with --mining-qrels, over the document; section bm25)"),
        MiningSearchJob,
        names=MINING_ONLY,
        override=True,
    )
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    parser.add_argument("--no-gpu", action="store_true", help="never use FAISS GPUs")
    parser.add_argument("--threads", type=int, help="torch / FAISS CPU threads")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--log", help="append the log to this file")
    args = parser.parse_args(argv)
    mining = args.mining_qrels is not None
    contract = MiningSearchJob if mining else SearchJob
    stray = [
        n for n in ("depth", *MINING_ONLY) if n not in contract.model_fields and getattr(args, n) is not None
    ]
    if stray:
        parser.error(
            f"{', '.join(flag_name(n) for n in stray)}: not read by "
            + (
                "a mining search (its depth follows from --negatives)"
                if mining
                else "a search without --mining-qrels"
            )
        )
    job = job_settings(contract, args)  # before any work: a bad document or flag is one line
    start_stage(
        args.log, args.threads, libraries=("torch", "faiss") if args.backend == "faiss" else ("torch",)
    )
    if mining:
        from pipeline.retrieval.mining import mining_depth, read_positives

        depth = mining_depth(job.negatives, read_positives(args.mining_qrels), job.exclude_answer_match)
        log.info(
            "mining depth %d (%d negatives, positives of %s%s)",
            depth,
            job.negatives,
            args.mining_qrels,
            ", answer matches excluded" if job.exclude_answer_match else "",
        )
    else:
        depth = job.depth
    if args.backend == "faiss" and not args.index:
        parser.error("--backend faiss needs --index")
    if args.backend == "torch" and not args.embeddings:
        parser.error("--backend torch needs --embeddings")
    began = time.perf_counter()
    device = resolve_device(args.device)
    retriever = load_retriever(args.model, device)
    qids, queries = encode_queries(
        retriever,
        args.queries,
        batch_size=job.batch_size,
        device=device,
        amp=job.amp,
        progress=not args.no_progress,
        model=args.model,
    )
    del retriever
    if args.backend == "faiss":
        rows, scores, pids = search_faiss(
            args.index,
            queries,
            depth,
            nprobe=job.nprobe,
            ef_search=job.ef_search,
            gpu=not args.no_gpu,
            progress=not args.no_progress,
        )
    else:
        rows, scores, pids = search_torch(
            args.embeddings,
            queries,
            depth,
            chunk_rows=job.chunk_rows,
            device=device,
            progress=not args.no_progress,
        )
    check_every_query_ranked(qids, rows, len(pids), file=args.out)
    write_table(args.out, run_table(qids, rows, scores, pids))
    log.info(
        "searched %d queries (%s, top %d) in %.1f s -> %s",
        len(qids),
        args.backend,
        depth,
        time.perf_counter() - began,
        args.out,
    )
    return 0


# The settings of a mining search that an evaluation search has not (MiningSearchJob's own).
MINING_ONLY = tuple(name for name in MiningSearchJob.model_fields if name not in SearchJob.model_fields)


if __name__ == "__main__":
    run_main(main)

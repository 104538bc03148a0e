"""Encode the corpus in shards (scatter), gather the shards into a manifest, or encode queries.

One ``corpus`` job encodes the contiguous rows ``[i*N//n, (i+1)*N//n)`` of ``corpus.parquet``: rows are
streamed with ``iter_batches``, held at most ``--sort-buffer`` at a time, tokenised in one fast-tokenizer
call per buffer, sorted by their exact token length so batches carry almost no padding, encoded under
``torch.inference_mode`` (autocast: fp16 on CUDA, bf16 on a CPU with native bf16, see
pipeline.core.precision) and appended to the shard's fp16 .npy in corpus order.
Memory is bounded by the buffer, never by the corpus or the shard.

CLI::

    python -m pipeline.workflow.jobs squad encode_corpus > encode.json
    python -m pipeline.retrieval.encode corpus --settings encode.json --model results/squad/models/zeroshot \
        --corpus resources/squad/corpus.parquet --out-dir results/squad/embeddings/zeroshot \
        --shard 0 --shards 2 [--batch-size 64 ...: over the document] [--device auto --threads 1]
    python -m pipeline.retrieval.encode gather --out-dir results/squad/embeddings/zeroshot --shards 2 \
        --model results/squad/models/zeroshot --corpus resources/squad/corpus.parquet
    python -m pipeline.retrieval.encode queries --model results/squad/models/zeroshot \
        --queries resources/squad/queries.test.parquet --out-dir results/squad/query_embeddings/test

The encoding's settings (pipeline.core.settings.job_documents.EncodeJob) come as one document, the workflow's job's
(``--settings-json``) or a file (``--settings``), each flag over it; without either, the contract's.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence, get_args

import numpy as np
import pyarrow as pa
import tokenizers
import torch
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from pipeline.core.cli import check_writable, run_main, stage_parser, start_stage
from pipeline.core.jobs import add_settings_flags, job_settings
from pipeline.core.precision import autocast, encoding_dtype, precision_name
from pipeline.core.settings.job_documents import EncodeJob
from pipeline.core.storage import DataError, check_unique_ids, open_parquet
from pipeline.retrieval import embeddings as emb_io
from pipeline.retrieval.settings import EncodeSettings

log = logging.getLogger("sieve.encode")

READ_ROWS = 4096  # rows per Arrow batch read from the Parquet file
TOKENIZE_CHUNK = 4096  # rows per call into the Rust tokenizer
LOG_EVERY_S = 60.0  # progress lines in the log at most this often
ENCODE_BACKENDS = get_args(EncodeSettings.model_fields["backend"].annotation)  # config encode.backend


# ---- devices and progress -------------------------------------------------------------------------


def resolve_device(name: str = "auto") -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise DataError(f"device {name!r} requested but CUDA is not available")
    return device


class RateColumn(ProgressColumn):
    """Items per second, e.g. '812.4 passages/s'."""

    def __init__(self, unit: str):
        super().__init__()
        self.unit = unit

    def render(self, task) -> Text:
        speed = task.finished_speed or task.speed
        return Text(f"{speed:,.1f} {self.unit}/s" if speed else f"- {self.unit}/s", style="cyan")


def make_progress(unit: str, enabled: bool = True) -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        RateColumn(unit),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        disable=not enabled,
    )


# ---- the inner loop -------------------------------------------------------------------------------


@functools.lru_cache(maxsize=8)
def _rust_tokenizer(tokenizer, max_length: int):
    """A private copy of the fast tokenizer's Rust backend: truncating at ``max_length``, no padding.

    A copy, so the shared tokenizer's own settings are never changed under other callers.
    """
    backend = tokenizers.Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
    backend.enable_truncation(max_length, strategy="longest_first", direction=tokenizer.truncation_side)
    backend.no_padding()
    return backend


def tokenize_buffer(retriever, texts: Sequence[str], titles: Sequence[str] | None) -> dict[str, np.ndarray]:
    """Tokenise a whole buffer at once into int32 arrays padded to the buffer's longest row.

    Same ids as ``Retriever.tokenize_passages`` (title/text pairs, longest-first truncation) or
    ``tokenize_queries`` (int32 here; batches are widened on the device), but the Rust tokenizer's
    ids go straight into numpy: the transformers wrapper's tensor conversion costs more than the
    tokenisation itself for small encoders.
    """
    settings, tokenizer = retriever.settings, retriever.tokenizer
    max_length = settings.query_max_len if titles is None else settings.passage_max_len
    inputs = list(texts) if titles is None else [(t or "", x) for t, x in zip(titles, texts)]
    if not getattr(tokenizer, "is_fast", False):
        kwargs = dict(padding=True, truncation="longest_first", max_length=max_length, return_tensors="np")
        if titles is None:
            return dict(tokenizer(inputs, **kwargs))
        return dict(tokenizer([p[0] for p in inputs], [p[1] for p in inputs], **kwargs))
    backend = _rust_tokenizer(tokenizer, max_length)
    encode = getattr(backend, "encode_batch_fast", backend.encode_batch)  # fast: no offsets
    # int32 at the maximal width, filled TOKENIZE_CHUNK rows at a time: the Rust Encoding objects
    # (~100 bytes per token) never exist for more than one chunk.
    n, left = len(inputs), tokenizer.padding_side == "left"
    ids = np.full((n, max_length), tokenizer.pad_token_id or 0, dtype=np.int32)
    types = np.zeros((n, max_length), dtype=np.int32)
    lengths = np.zeros(n, dtype=np.int64)
    for first in range(0, n, TOKENIZE_CHUNK):
        for row, enc in enumerate(
            encode(inputs[first : first + TOKENIZE_CHUNK], add_special_tokens=True), start=first
        ):
            k = lengths[row] = len(enc)
            cut = slice(max_length - k, max_length) if left else slice(0, k)
            ids[row, cut] = enc.ids
            types[row, cut] = enc.type_ids
    width = int(lengths.max()) if n else 0
    cols = slice(max_length - width, max_length) if left else slice(0, width)
    positions = np.arange(width)
    mask = positions >= (width - lengths[:, None]) if left else positions < lengths[:, None]
    out = {"input_ids": ids[:, cols], "attention_mask": mask.astype(np.int32)}
    if "token_type_ids" in tokenizer.model_input_names:
        out["token_type_ids"] = types[:, cols]
    return out


def encode_buffer(
    retriever, texts: Sequence[str], titles: Sequence[str] | None = None, **options: Any
) -> np.ndarray:
    """Embeddings [n, d] of passages (``titles`` given) or queries (``titles=None``), input order;
    ``options`` are ``encode_tokenized``'s (batch_size and device required).

    Rows are sorted by token length (longest first, stable) and cut into batches that are padded
    only to their own longest row. Outputs stay on the device until the buffer is done, so on CUDA
    the next batch is tokenised/sliced while the GPU still works on the previous one.
    Non-finite embeddings (in ``dtype``) are a DataError naming ``model`` (the retriever's folder).
    ``tower`` (an ``OpenVINOTower`` of the right kind) computes the forward pass instead of torch.
    """
    encoded = tokenize_buffer(retriever, texts, titles)
    return encode_tokenized(retriever, encoded, passages=titles is not None, **options)


def encode_tokenized(
    retriever,
    encoded: dict[str, np.ndarray],
    *,
    passages: bool,
    batch_size: int,
    device: torch.device,
    amp: bool = True,
    dtype: torch.dtype = torch.float16,
    on_batch: Callable[[int], None] | None = None,
    model: str | os.PathLike | None = None,
    tower: Callable[[dict[str, np.ndarray]], np.ndarray] | None = None,
) -> np.ndarray:
    """``encode_buffer`` of a buffer ``tokenize_buffer`` made (``passages``: by its passage tower), so
    that one tokenisation serves several models (model selection scores ~7 on the same dev passages)."""
    n, dim = len(encoded["input_ids"]), retriever.query_model.config.hidden_size
    if n == 0:
        return np.zeros((0, dim), dtype=torch.empty(0, dtype=dtype).numpy().dtype)
    lengths = encoded["attention_mask"].sum(axis=1)
    order = np.argsort(-lengths, kind="stable")
    left = retriever.tokenizer.padding_side == "left"
    embed = retriever.embed_passages if passages else retriever.embed_queries
    outputs = []
    amp_dtype = encoding_dtype(device, amp)
    with torch.inference_mode():
        for start in range(0, n, batch_size):
            rows = order[start : start + batch_size]
            width = int(lengths[rows[0]])
            cut = slice(-width, None) if left else slice(0, width)
            if tower is not None:
                outputs.append(
                    torch.from_numpy(tower({k: v[rows, cut] for k, v in encoded.items()})).to(dtype)
                )
                if on_batch is not None:
                    on_batch(len(rows))
                continue
            batch = {
                key: torch.from_numpy(value[rows, cut]).to(device, non_blocking=True).long()
                for key, value in encoded.items()
            }
            # Only the forward pass: CPU autocast refuses to concatenate the fp16 outputs below.
            with autocast(device, amp_dtype):
                embedded = embed(batch)
            outputs.append(embedded.to(dtype))
            if on_batch is not None:
                on_batch(len(rows))
        result = torch.empty((n, dim), dtype=dtype, device=device)
        result[torch.from_numpy(order).to(device)] = torch.cat(outputs)
        # Checked after the cast: fp16 overflow (|x| > 65504) is as unusable as NaN downstream.
        finite = torch.isfinite(result).all(dim=1)
        if not bool(finite.all()):
            _refuse_non_finite(model, "passages" if passages else "queries", int((~finite).sum()), n)
    return result.cpu().numpy()


def _refuse_non_finite(model: str | os.PathLike | None, kind: str, bad: int, n: int) -> None:
    raise DataError(
        f"the model produced non-finite embeddings (NaN or inf) for {bad} of {n} "
        f"{kind} encoded together: its training diverged; retrain it (lower its "
        "learning rate) before encoding, indexing or searching",
        file=model,
    )


# ---- streaming the corpus -------------------------------------------------------------------------


def _string_column(batch: pa.RecordBatch, name: str, path: Path, first_row: int, nullable: bool) -> list:
    column = batch.column(name)
    if column.null_count and not nullable:
        bad = first_row + int(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0])
        raise DataError("null value", file=path, record=bad, field=name)
    values = column.to_pylist()
    return [v or "" for v in values] if nullable and column.null_count else values


def iter_slice(
    path: str | os.PathLike,
    start: int,
    end: int,
    columns: Sequence[str],
    nullable: Sequence[str] = (),
    read_rows: int = READ_ROWS,
) -> Iterator[tuple[int, dict[str, list]]]:
    """(global first row, {column: values}) for rows [start, end) of a Parquet file, streamed.

    Only row groups that overlap the slice are read. String columns are checked for nulls (a null
    in a ``nullable`` column reads as ""); the error names the 0-based row in the file.
    """
    path = Path(path)
    parquet = open_parquet(path, columns, missing="file not found")
    groups, offset, first_row = [], 0, None
    for g in range(parquet.metadata.num_row_groups):
        size = parquet.metadata.row_group(g).num_rows
        if offset < end and offset + size > start:
            groups.append(g)
            first_row = offset if first_row is None else first_row
        offset += size
    if not groups:
        return
    row = first_row
    for batch in parquet.iter_batches(batch_size=read_rows, row_groups=groups, columns=list(columns)):
        lo, hi = max(start - row, 0), min(end - row, batch.num_rows)
        if hi > lo:
            part = batch.slice(lo, hi - lo)
            yield (
                row + lo,
                {name: _string_column(part, name, path, row + lo, name in nullable) for name in columns},
            )
        row += batch.num_rows
        if row >= end:
            break


def iter_buffers(chunks: Iterator[tuple[int, dict[str, list]]], size: int) -> Iterator[dict[str, list]]:
    """Regroup streamed chunks into buffers of exactly ``size`` rows (the last may be shorter)."""
    pending: dict[str, list] | None = None
    for _, chunk in chunks:
        if pending is None:
            pending = {k: [] for k in chunk}
        for key, values in chunk.items():
            pending[key].extend(values)
        while len(next(iter(pending.values()))) >= size:
            yield {k: v[:size] for k, v in pending.items()}
            pending = {k: v[size:] for k, v in pending.items()}
    if pending is not None and next(iter(pending.values())):
        yield pending


def parquet_rows(path: str | os.PathLike) -> int:
    with open_parquet(path, missing="file not found") as parquet:
        return parquet.metadata.num_rows


# ---- stages ---------------------------------------------------------------------------------------


def encode_table(
    retriever,
    path: str | os.PathLike,
    out_dir: str | os.PathLike,
    shard: int,
    shards: int,
    *,
    kind: str = "passage",
    batch_size: int = 64,
    sort_buffer: int = 20_000,
    device: torch.device | None = None,
    amp: bool = True,
    progress: bool = True,
    model: str | os.PathLike | None = None,
    backend: str = "torch",
) -> dict:
    """Encode shard ``shard`` of ``shards`` of a corpus (kind 'passage') or queries table ('query').

    Writes ``shard{i}of{n}.npy`` (fp16) + ``shard{i}of{n}.{pid|qid}s.parquet`` atomically and
    returns {'rows', 'seconds', 'per_second'}. ``model`` (the retriever's folder) names the culprit
    when embeddings are non-finite; nothing is written then. ``backend``: ``torch``, or ``openvino``
    (CPU only; the forward pass compiled by OpenVINO, in the precision torch would compute in).
    """
    if batch_size < 1 or sort_buffer < 1:
        raise ValueError("batch_size and sort_buffer must be >= 1")
    device = device or retriever.device
    if backend not in ENCODE_BACKENDS:
        raise ValueError(f"encoding backend must be one of {ENCODE_BACKENDS}, got {backend!r}")
    tower = openvino_tower(retriever, kind, device, amp) if backend == "openvino" else None
    id_field = "pid" if kind == "passage" else "qid"
    columns = [id_field, "title", "text"] if kind == "passage" else [id_field, "text"]
    # Search maps embedding rows to these ids: a repeat was found only when the shards were gathered,
    # after the whole table was encoded, naming the embedding folder. The id column alone is read.
    with open_parquet(path, [id_field], missing="file not found") as parquet:
        check_unique_ids(parquet.read(columns=[id_field]).column(id_field), path, id_field)
    start, end = emb_io.shard_bounds(parquet_rows(path), shard, shards)
    npy, ids = emb_io.shard_paths(out_dir, shard, shards, id_field)
    dim = retriever.query_model.config.hidden_size
    retriever.eval()
    began = last_log = time.perf_counter()
    unit = "passages" if kind == "passage" else "queries"
    with (
        make_progress(unit, progress) as bar,
        emb_io.EmbeddingWriter(
            npy,
            ids,
            end - start,
            dim,
            id_field=id_field,
            precision=precision_name(encoding_dtype(device, amp)),
        ) as writer,
    ):
        task = bar.add_task(f"encode {Path(path).name} [{shard + 1}/{shards}]", total=end - start)
        chunks = iter_slice(path, start, end, columns, nullable=("title",))
        for buffer in iter_buffers(chunks, sort_buffer):
            vectors = encode_buffer(
                retriever,
                buffer["text"],
                buffer.get("title"),
                batch_size=batch_size,
                device=device,
                amp=amp,
                on_batch=lambda k: bar.advance(task, k),
                model=model,
                tower=tower,
            )
            writer.write(buffer[id_field], vectors)
            now = time.perf_counter()
            if now - last_log >= LOG_EVERY_S:
                # Rules run without the bar (parallel jobs share a terminal): the log shows progress.
                last_log = now
                log.info(
                    "%d / %d %s (%.1f %s/s)",
                    writer.written,
                    end - start,
                    unit,
                    writer.written / (now - began),
                    unit,
                )
    seconds = time.perf_counter() - began
    rate = (end - start) / seconds if seconds > 0 else 0.0
    log.info(
        "encoded %d %s in %.1f s (%.1f %s/s, %s, %s) -> %s",
        end - start,
        unit,
        seconds,
        rate,
        unit,
        precision_name(encoding_dtype(device, amp)),
        backend,
        npy,
    )
    return {"rows": end - start, "seconds": seconds, "per_second": rate}


def openvino_tower(retriever, kind: str, device: torch.device, amp: bool):
    """The OpenVINO forward pass of ``retriever``'s ``kind`` tower, in the precision the torch path
    would compute in on this CPU (bf16 where it autocasts to bf16, else fp32)."""
    from pipeline.retrieval.openvino_tower import OpenVINOTower

    if device.type != "cpu":
        raise ValueError(
            f"encode.backend openvino runs on the CPU, and this job's device is {device}: "
            "set encode.backend: torch for GPU jobs (or --device cpu)"
        )
    titles = ["A title", "B"] if kind == "passage" else None
    example = tokenize_buffer(retriever, ["an example passage of a few words", "two"], titles)
    precision = "bf16" if encoding_dtype(device, amp) == torch.bfloat16 else "fp32"
    return OpenVINOTower(retriever, kind, example, precision, threads=torch.get_num_threads())


def load_retriever(model: str | os.PathLike, device: torch.device):
    from pipeline.retrieval.model import Retriever

    folder = Path(model)
    if not (folder / "retriever.json").exists() and str(model) != "minilm" and not folder.exists():
        raise DataError("retriever folder not found (did the training rule run?)", file=folder)
    return Retriever.load(folder).to(device).eval()


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser("pipeline.retrieval.encode", __doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--model", required=True, help="retriever folder (Retriever.load)")
        p.add_argument("--out-dir", required=True, help="embedding folder")
        add_settings_flags(p, EncodeJob, "encoding (config section encode)")
        p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
        p.add_argument("--threads", type=int, help="torch CPU threads")
        p.add_argument("--no-progress", action="store_true")
        p.add_argument("--log", help="append the log to this file")

    corpus = sub.add_parser("corpus", help="encode one shard of corpus.parquet")
    common(corpus)
    corpus.add_argument("--corpus", required=True, help="corpus.parquet (pid, title, text)")
    corpus.add_argument("--shard", type=int, required=True, help="0-based shard index")
    corpus.add_argument("--shards", type=int, required=True, help="number of shards")

    queries = sub.add_parser("queries", help="encode a queries table (one shard, gathered)")
    common(queries)
    queries.add_argument("--queries", required=True, help="queries.{split}.parquet (qid, text)")

    gather = sub.add_parser("gather", help="check the shards and write manifest.json")
    gather.add_argument("--out-dir", required=True)
    gather.add_argument("--shards", type=int, required=True)
    gather.add_argument("--model", required=True, help="retriever folder (recorded)")
    gather.add_argument("--corpus", required=True, help="corpus.parquet (row count is checked)")
    gather.add_argument("--no-checksums", action="store_true", help="skip sha256 of the shards")
    gather.add_argument("--log")

    args = parser.parse_args(argv)
    # shard_name's ValueError was a traceback: a usage error, exit status 2 like the others.
    if args.command in ("corpus", "gather") and args.shards < 1:
        parser.error(f"--shards must be >= 1, got {args.shards}")
    if args.command == "corpus" and not 0 <= args.shard < args.shards:
        parser.error(f"--shard must be in [0, {args.shards}) (0-based), got {args.shard}")
    job = None if args.command == "gather" else job_settings(EncodeJob, args)  # a bad one: one line, now
    start_stage(args.log, getattr(args, "threads", None))  # gather has no --threads
    if args.command == "gather":
        emb_io.gather(
            args.out_dir,
            args.shards,
            model=args.model,
            source=args.corpus,
            source_rows=parquet_rows(args.corpus),
            checksums=not args.no_checksums,
        )
        return 0
    check_writable(args.out_dir)  # before the encoding, not by the shard write at its end
    device = resolve_device(args.device)
    backend = job.backend
    if backend == "openvino" and device.type != "cpu":
        # A cluster profile gave this job a GPU: the config need not change for it.
        log.info("encode.backend openvino is the CPU path; this job holds %s, so torch encodes on it", device)
        backend = "torch"
    retriever = load_retriever(args.model, device)
    # the document's settings, but the backend this job can run (openvino -> torch on a GPU)
    options = {**job.model_dump(), "backend": backend}
    options.update(device=device, progress=not args.no_progress, model=args.model)
    if args.command == "corpus":
        encode_table(retriever, args.corpus, args.out_dir, args.shard, args.shards, **options)
    else:
        encode_table(retriever, args.queries, args.out_dir, 0, 1, kind="query", **options)
        emb_io.gather(
            args.out_dir,
            1,
            model=args.model,
            source=args.queries,
            source_rows=parquet_rows(args.queries),
            id_field="qid",
        )
    return 0


if __name__ == "__main__":
    run_main(main)

"""BM25 (bm25s): index a corpus, retrieve runs for evaluation, mine hard negatives for training.

    python -m pipeline.retrieval.bm25 index    --corpus C --out-dir results/D/bm25/index [--k1 --b --stemmer --stopwords]
    python -m pipeline.retrieval.bm25 retrieve --index-dir I --queries Q --depth 100 --out run.parquet
    python -m pipeline.retrieval.bm25 mine     --index-dir I --queries Q --qrels QR --corpus C --negatives 100 --out neg.parquet

    # exactly what the workflow's job indexes with: its settings document, then the same paths
    python -m pipeline.workflow.jobs synthkb bm25_index > index.json
    python -m pipeline.retrieval.bm25 index --settings index.json --corpus C --out-dir results/D/bm25/index

Each subcommand's settings are a document (--settings FILE, or --settings-json as the rules pass it;
schemas: pipeline.core.settings.job_documents.Bm25IndexJob, RunDepthJob, MineJob), each flag over it; what
neither gives is the contract's default (config sections bm25 and eval).

The corpus is tokenised in streamed batches into compact int32 arrays (title + " " + text), so the
Python-object overhead does not scale with the corpus; the bm25s sparse index itself is what remains
in memory (docs/encoding.md). Passages are scored as title + text, as in the reference numbers.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Sequence

import bm25s
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from bm25s.tokenization import Tokenizer
from rich.progress import Progress

from pipeline.core.cli import check_writable, run_main, stage_parser, start_stage
from pipeline.core.fingerprint import file_id
from pipeline.core.jobs import add_settings_flags, job_settings
from pipeline.core.schemas import (
    CORPUS_SCHEMA,
    MINED_NEGATIVES_SCHEMA,
    PASSAGE_IDS_SCHEMA,
    QUERIES_SCHEMA,
    RUN_SCHEMA,
)
from pipeline.core.settings.job_documents import Bm25IndexJob, MineJob, RunDepthJob
from pipeline.core.storage import (
    DataError,
    ParquetTableWriter,
    check_unique_ids,
    open_parquet,
    read_json_object,
    read_table,
    refuse_overwriting_inputs,
    verify_checksums,
    write_checksums,
    write_json,
    write_table,
)
from pipeline.retrieval.mining import load_matcher, mining_depth, negatives_table, train_positives

log = logging.getLogger("sieve.bm25")

CORPUS_BATCH = 20_000
DAMAGED_INDEX = "delete the BM25 index folder and rerun index_bm25 (the rule that builds it)"
QUERY_BATCH = 4_096
# Train queries mined per pass (mine_negatives). A chunk's rankings are held until it is written (at
# depth ~100, ~100 B per (pid, score) tuple: ~160 MB) and the passages it ranked sit in the answer
# matcher (at most chunk x depth, ~1.7M, of ~600 B each, whatever the corpus); each chunk streams the
# corpus once to find them, so a smaller chunk costs corpus passes.
MINE_CHUNK = 16_384


def make_tokenizer(stemmer: str | None, stopwords: str | None) -> Tokenizer:
    stem = None
    if stemmer:
        import Stemmer  # PyStemmer

        try:
            stem = Stemmer.Stemmer(stemmer)
        except KeyError as exc:
            raise DataError(
                f"unknown stemmer language {stemmer!r} (PyStemmer knows: {', '.join(Stemmer.algorithms())})",
                field="bm25.stemmer",
            ) from exc
    return Tokenizer(stemmer=stem, stopwords=stopwords or None)


def passage_text(title: str | None, text: str) -> str:
    return f"{title} {text}" if title else text


# ---- index -------------------------------------------------------------------------------------------


def build_index(
    corpus_path: str | Path,
    out_dir: str | Path,
    *,
    k1: float,
    b: float,
    stemmer: str | None,
    stopwords: str | None,
) -> int:
    """Tokenise the corpus in batches and write a bm25s index + pids + settings to ``out_dir``."""
    out_dir = Path(out_dir)
    parquet = open_parquet(corpus_path, ["pid", "title", "text"], schema=CORPUS_SCHEMA)
    n_rows = parquet.metadata.num_rows
    if n_rows == 0:
        raise DataError("the corpus is empty: nothing to index", file=corpus_path)
    tokenizer = make_tokenizer(stemmer, stopwords)
    doc_ids: list[np.ndarray] = []
    pids: list[str] = []
    with Progress(transient=True) as progress:
        task = progress.add_task("BM25: tokenising corpus", total=n_rows)
        for batch in parquet.iter_batches(batch_size=CORPUS_BATCH, columns=["pid", "title", "text"]):
            cols = batch.to_pydict()
            texts = [passage_text(t, x) for t, x in zip(cols["title"], cols["text"])]
            ids = tokenizer.tokenize(texts, update_vocab=True, return_as="ids", show_progress=False)
            doc_ids.extend(np.asarray(d, dtype=np.int32) for d in ids)
            pids.extend(cols["pid"])
            progress.advance(task, len(texts))
    # A repeated pid gave runs with one passage twice, refused only at evaluate and naming the run.
    check_unique_ids(pa.array(pids, pa.string()), corpus_path, "pid")
    retriever = bm25s.BM25(k1=k1, b=b)
    retriever.index((doc_ids, tokenizer.get_vocab_dict()), show_progress=False)
    # Build in a sibling temp dir and rename: an index dir is complete or absent.
    tmp_dir = out_dir.with_name(out_dir.name + ".tmp")
    shutil.rmtree(tmp_dir, ignore_errors=True)
    try:
        _write_index(tmp_dir, retriever, tokenizer, pids, k1, b, stemmer, stopwords, corpus_path)
        shutil.rmtree(out_dir, ignore_errors=True)
        tmp_dir.rename(out_dir)
    except BaseException as exc:
        # A full disk must not keep a half-written index.tmp/ on it.
        shutil.rmtree(tmp_dir, ignore_errors=True)
        if isinstance(exc, OSError) and (exc.filename is None or str(exc.filename).startswith(str(tmp_dir))):
            exc.filename = str(out_dir)
        raise
    log.info("BM25 index of %d passages -> %s", len(pids), out_dir)
    return len(pids)


def _write_index(tmp_dir: Path, retriever, tokenizer, pids, k1, b, stemmer, stopwords, corpus_path) -> None:
    retriever.save(tmp_dir, show_progress=False)
    tokenizer.save_vocab(tmp_dir)
    tokenizer.save_stopwords(tmp_dir)
    write_table(tmp_dir / "pids.parquet", pa.table([pa.array(pids, pa.string())], schema=PASSAGE_IDS_SCHEMA))
    write_json(
        tmp_dir / "settings.json",
        {
            "k1": k1,
            "b": b,
            "stemmer": stemmer,
            "stopwords": stopwords,
            "n_passages": len(pids),
            "corpus": str(corpus_path),
        },
    )
    # Snakemake checks only that the folder exists: the loader compares these digests instead.
    write_checksums(tmp_dir)


class BM25Index:
    """A saved index, ready to answer batches of queries."""

    def __init__(self, index_dir: str | Path):
        index_dir = Path(index_dir)
        settings_path = index_dir / "settings.json"
        if not settings_path.exists():
            raise DataError("not a BM25 index directory (no settings.json); rebuild it", file=index_dir)
        verify_checksums(index_dir, DAMAGED_INDEX)
        self.settings = read_json_object(settings_path, keys=("stemmer", "stopwords"))
        try:
            self.retriever = bm25s.BM25.load(index_dir, mmap=True, show_progress=False)
            self.tokenizer = make_tokenizer(self.settings["stemmer"], self.settings["stopwords"])
            self.tokenizer.load_vocab(index_dir)
            self.tokenizer.load_stopwords(index_dir)
        except (OSError, ValueError) as exc:  # a folder without digests (older): bm25s's own errors
            where = getattr(exc, "filename", None) or index_dir
            raise DataError(
                f"cannot load the BM25 index ({' '.join(str(exc).split())}): {DAMAGED_INDEX}", file=where
            ) from None
        with open_parquet(index_dir / "pids.parquet", schema=PASSAGE_IDS_SCHEMA) as parquet:
            self.pids = parquet.read(columns=["pid"]).column("pid").to_numpy(zero_copy_only=False)

    def search(self, texts: Sequence[str], depth: int) -> list[list[tuple[str, float]]]:
        """Top-``depth`` (pid, score) per query, best first; passages sharing no term are left out.

        A query with no term left after stopwords and stemming (empty, stopwords only, words the
        corpus never uses) matches nothing and gets an empty list, as in Lucene/Pyserini.
        """
        depth = min(depth, len(self.pids))
        # bm25s's default (allow_empty) gives a query without terms the token "", which is also the
        # only token of every empty or stopword-only passage: such a passage then scored above 0 for
        # every such query and ranked first. Without it an empty query has no ids, and as no query
        # holds "" an empty passage scores 0 for every query (cut below), whatever the index holds.
        ids = self.tokenizer.tokenize(
            list(texts), update_vocab=False, return_as="ids", show_progress=False, allow_empty=False
        )
        results: list[list[tuple[str, float]]] = [[] for _ in ids]
        # bm25s scores an empty id list like the token "" (its first id): never hand it one.
        with_terms = [i for i, query_ids in enumerate(ids) if query_ids]
        if not with_terms:
            return results
        docs, scores = self.retriever.retrieve(
            [ids[i] for i in with_terms], k=depth, show_progress=False, n_threads=0
        )
        for i, row_docs, row_scores in zip(with_terms, docs, scores):
            # Sort by score desc then pid so ties are broken the same way everywhere.
            hits = [(self.pids[d], float(s)) for d, s in zip(row_docs, row_scores) if s > 0]
            hits.sort(key=lambda h: (-h[1], h[0]))
            results[i] = hits
        return results


def _batched_search(index: BM25Index, queries: pd.DataFrame, depth: int, label: str):
    with Progress(transient=True) as progress:
        task = progress.add_task(label, total=len(queries))
        for start in range(0, len(queries), QUERY_BATCH):
            chunk = queries.iloc[start : start + QUERY_BATCH]
            yield chunk, index.search(chunk["text"].tolist(), depth)
            progress.advance(task, len(chunk))


# ---- retrieve (evaluation runs) ------------------------------------------------------------------


def retrieve_run(index_dir: str | Path, queries_path: str | Path, depth: int, out: str | Path) -> int:
    index = BM25Index(index_dir)
    queries = read_table(queries_path, ["qid", "text"], schema=QUERIES_SCHEMA)
    rows: dict[str, list] = {"qid": [], "pid": [], "rank": [], "score": []}
    for chunk, results in _batched_search(index, queries, depth, "BM25: retrieving"):
        for qid, hits in zip(chunk["qid"], results):
            for rank, (pid, score) in enumerate(hits, start=1):
                rows["qid"].append(qid)
                rows["pid"].append(pid)
                rows["rank"].append(rank)
                rows["score"].append(score)
    write_table(out, pa.table(rows, schema=RUN_SCHEMA))
    log.info("BM25 run for %d queries (depth %d) -> %s", len(queries), depth, out)
    return len(queries)


# ---- mine (training negatives) -------------------------------------------------------------------


def mine_negatives(
    index_dir: str | Path,
    queries_path: str | Path,
    qrels_path: str | Path,
    corpus_path: str | Path,
    n_negatives: int,
    out: str | Path,
    *,
    exclude_answer_match: bool = False,
    match: str = "string",
    chunk: int = MINE_CHUNK,
) -> dict:
    """Top ``n_negatives`` BM25 candidates per train query that are not its annotated positives.

    The rule shared with dense mining (pipeline.retrieval.mining): with ``exclude_answer_match`` (DPR
    recipe) candidates containing an answer are marked ``excluded`` and the list goes deeper until
    ``n_negatives`` usable ones are found; every row keeps ``has_answer`` so the choice stays auditable.

    Queries are mined ``chunk`` at a time (retrieved, answer-matched against the passages that chunk
    ranked), so memory holds one chunk's rankings, whatever the number of queries. Each chunk's rows are
    kept in ``<out>.chunks/`` as it finishes (atomically), so a job killed at its time limit continues
    on its rerun from the first chunk not done; those of other inputs or settings are discarded. The
    output is assembled from the chunks in order, the file a single pass would write byte for byte
    (ParquetTableWriter), and appears only when every query is mined; the chunks are then removed.
    """
    index = BM25Index(index_dir)
    queries = read_table(queries_path, ["qid", "text", "answers"], schema=QUERIES_SCHEMA)
    positives, missing = train_positives(queries["qid"], qrels_path)
    depth = mining_depth(n_negatives, positives, exclude_answer_match)
    totals = {"answer_matches": 0}
    fingerprint = {
        "inputs": [
            file_id(p) for p in (Path(index_dir) / "checksums.json", queries_path, qrels_path, corpus_path)
        ],
        "settings": [n_negatives, exclude_answer_match, match, chunk],
    }
    chunks = _chunk_folder(Path(out), fingerprint)
    for start in range(0, len(queries), chunk):
        done = chunks / f"chunk{start // chunk:06d}.parquet"
        if done.exists():
            totals["answer_matches"] += json.loads(done.with_suffix(".json").read_text())["answer_matches"]
            continue
        part = queries.iloc[start : start + chunk]
        candidates = []
        for batch, results in _batched_search(index, part, depth, "BM25: mining negatives"):
            for (qid, answers), hits in zip(batch[["qid", "answers"]].itertuples(index=False), results):
                pos = positives.get(qid, set())
                candidates.append(
                    (
                        qid,
                        list(answers) if answers is not None else [],
                        [(pid, s) for pid, s in hits if pid not in pos],
                    )
                )
        # One corpus pass per chunk: the matcher holds only the passages this chunk ranked.
        needed = {pid for _, answers, hits in candidates if answers for pid, _ in hits}
        matcher = load_matcher(corpus_path, needed, match)
        table, counts = negatives_table(
            candidates,
            matcher,
            n_negatives,
            exclude_answer_match=exclude_answer_match,
            source="bm25",
            queries_path=queries_path,
        )
        write_json(done.with_suffix(".json"), {"answer_matches": counts["answer_matches"]})
        write_table(done, table)  # last: a chunk with its rows is a chunk done
        totals["answer_matches"] += counts["answer_matches"]
        log.info("mined %d of %d queries", min(start + chunk, len(queries)), len(queries))
    with ParquetTableWriter(out, MINED_NEGATIVES_SCHEMA) as writer:
        for start in range(0, len(queries), chunk):
            table = pq.read_table(chunks / f"chunk{start // chunk:06d}.parquet")
            writer.append(table.replace_schema_metadata(MINED_NEGATIVES_SCHEMA.metadata))
    shutil.rmtree(chunks, ignore_errors=True)
    stats = {
        "queries": len(queries),
        "rows": writer.rows,
        "answer_matches": totals["answer_matches"],
        "queries_without_positive": len(missing),
        "exclude_answer_match": exclude_answer_match,
    }
    log.info("mined BM25 negatives: %s -> %s", stats, out)
    return stats


def _chunk_folder(out: Path, fingerprint: dict) -> Path:
    """``<out>.chunks/``, emptied when its chunks were mined from other inputs or settings."""
    folder = out.with_name(out.name + ".chunks")
    record = folder / "fingerprint.json"
    if folder.exists():
        try:
            same = json.loads(record.read_text(encoding="utf-8")) == json.loads(json.dumps(fingerprint))
        except (OSError, ValueError):
            same = False
        if same:
            kept = len(list(folder.glob("chunk*.parquet")))
            if kept:
                log.info("continuing: %d chunk(s) already mined in %s", kept, folder)
            return folder
        log.warning("%s holds chunks of other inputs or settings: mining afresh", folder)
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    write_json(record, fingerprint)
    return folder


# ---- CLI -------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser("pipeline.retrieval.bm25", __doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p_index = sub.add_parser("index", help="build the BM25 index of a corpus")
    p_index.add_argument("--corpus", required=True)
    p_index.add_argument("--out-dir", required=True)
    p_ret = sub.add_parser("retrieve", help="write a run Parquet for a split's queries")
    p_ret.add_argument("--index-dir", required=True)
    p_ret.add_argument("--queries", required=True)
    p_ret.add_argument("--out", required=True)
    p_mine = sub.add_parser("mine", help="mine hard negatives for training queries")
    p_mine.add_argument("--index-dir", required=True)
    p_mine.add_argument("--queries", required=True)
    p_mine.add_argument("--qrels", required=True)
    p_mine.add_argument("--corpus", required=True)
    p_mine.add_argument("--out", required=True)
    for p, contract in JOBS.items():
        add_settings_flags(sub.choices[p], contract, "settings")
        sub.choices[p].add_argument("--log", default=None)
    args = parser.parse_args(argv)
    job = job_settings(JOBS[args.command], args)  # before any work: a bad document or flag is one line
    start_stage(args.log)
    # A read-only output folder, found before the corpus is tokenised rather than by the last write.
    inputs = {k: getattr(args, k, None) for k in ("corpus", "queries", "qrels", "index_dir")}
    out = args.out_dir if args.command == "index" else args.out
    refuse_overwriting_inputs({"--out-dir" if args.command == "index" else "--out": out}, inputs)
    check_writable(out)
    if args.command == "index":
        build_index(args.corpus, args.out_dir, **job.model_dump())
    elif args.command == "retrieve":
        retrieve_run(args.index_dir, args.queries, job.depth, args.out)
    else:
        mine_negatives(
            args.index_dir,
            args.queries,
            args.qrels,
            args.corpus,
            job.negatives,
            args.out,
            exclude_answer_match=job.exclude_answer_match,
            match=job.match,
        )
    return 0


# Each subcommand's settings document (pipeline.core.settings); the rules pass it, a hand run may too.
JOBS = {"index": Bm25IndexJob, "retrieve": RunDepthJob, "mine": MineJob}


if __name__ == "__main__":
    run_main(main)

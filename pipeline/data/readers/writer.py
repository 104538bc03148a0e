"""The canonical tables of one dataset, built record by record with every cross-check on the way in.

Readers only parse; ``DatasetWriter`` enforces the contract of docs/architecture.md: unique pids,
a non-empty corpus, unique qids (across splits: a qid in two splits would leak), qrels and negatives
that point at known queries and known passages. The corpus and the negatives stream to Parquet in
batches; queries and qrels (at most ~1M rows for MS MARCO) are kept in memory and written by
``finish()``. Nothing appears unless ``finish()`` is reached (ParquetStreamWriter is atomic).
"""

from __future__ import annotations

import logging
from array import array
from collections import Counter
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pyarrow as pa

from pipeline.core.schemas import CORPUS_SCHEMA, QRELS_SCHEMA, QUERIES_SCHEMA, SHIPPED_NEGATIVES_SCHEMA
from pipeline.core.storage import SPLITS, DataError, ParquetStreamWriter, write_table

from .base import Ctx, Passage, Qrel, Query, TrainingRecord, ctx_pid

log = logging.getLogger("sieve.prepare_data")
BATCH_ROWS = 50_000


def _as_int(pid: str) -> int | None:
    """The integer a pid spells canonically ("17", not "017" or "+17"), else None."""
    if pid.isascii() and pid.isdigit() and len(pid) <= 18 and (pid[0] != "0" or pid == "0"):
        return int(pid)
    return None


class PidSet:
    """Corpus pids. Numeric pids (DPR's 21M, MS MARCO's 8.8M) live in one sorted int64 array
    (8 bytes each, ~170 MB for 21M instead of ~2 GB as a set of str); any other pid in a dict.

    Until ``freeze()`` numeric pids are only appended; duplicates among them are found by sorting.
    """

    def __init__(self) -> None:
        self._ints = array("q")
        self._int_records = array("q")
        self._sorted: np.ndarray | None = None
        self._other: dict[str, Any] = {}

    def add(self, pid: str, record: Any) -> Any:
        """Add ``pid``; return the record of its earlier occurrence when it is already there."""
        if self._sorted is None:
            number = _as_int(pid)
            if number is not None and isinstance(record, int):
                self._ints.append(number)
                self._int_records.append(record)
                return None
            if pid in self._other:
                return self._other[pid]
        elif pid in self:
            return self._other.get(pid, "earlier")
        self._other[pid] = record
        return None

    def freeze(self) -> tuple[str, int, int] | None:
        """Sort the numeric pids; return (pid, first record, second record) of a duplicate, if any."""
        ints = np.frombuffer(self._ints, dtype=np.int64)
        order = np.argsort(ints, kind="stable")
        ordered = ints[order]
        dup = np.flatnonzero(ordered[1:] == ordered[:-1])
        records = np.frombuffer(self._int_records, dtype=np.int64)
        found = None
        if dup.size:
            i = int(dup[0])
            found = (str(int(ordered[i])), int(records[order[i]]), int(records[order[i + 1]]))
        else:
            clash = next(
                (
                    p
                    for p in self._other
                    if _as_int(p) is not None and self._contains_int(ordered, _as_int(p))
                ),
                None,
            )
            if clash is not None:
                found = (clash, -1, -1)
        self._sorted = ordered
        self._ints, self._int_records = array("q"), array("q")
        return found

    @staticmethod
    def _contains_int(ordered: np.ndarray, number: int) -> bool:
        i = int(np.searchsorted(ordered, number))
        return i < ordered.size and int(ordered[i]) == number

    def __contains__(self, pid: str) -> bool:
        if pid in self._other:
            return True
        number = _as_int(pid)
        if number is None:
            return False
        if self._sorted is None:
            raise RuntimeError("PidSet: freeze() before looking up numeric pids")
        return self._contains_int(self._sorted, number)

    def __len__(self) -> int:
        sorted_n = 0 if self._sorted is None else self._sorted.size
        return sorted_n + len(self._ints) + len(self._other)


class DatasetWriter:
    def __init__(self, out_dir: str | Path, batch_rows: int | None = None):
        self.out_dir = Path(out_dir)
        self.batch_rows = batch_rows or BATCH_ROWS
        self.pids = PidSet()
        self.extra: Counter[str] = Counter()
        self._corpus = ParquetStreamWriter(self.out_dir / "corpus.parquet", CORPUS_SCHEMA)
        self._negatives = ParquetStreamWriter(
            self.out_dir / "negatives.train.parquet", SHIPPED_NEGATIVES_SCHEMA
        )
        self._corpus_buf: dict[str, list] = {"pid": [], "title": [], "text": []}
        self._neg_buf: dict[str, list] = {n: [] for n in SHIPPED_NEGATIVES_SCHEMA.names}
        self._frozen = False
        self._qid_split: dict[str, str] = {}
        self._queries = {s: {"qid": [], "text": [], "answers": []} for s in SPLITS}
        self._qrels = {s: {"qid": [], "pid": [], "relevance": []} for s in SPLITS}
        self._qrel_pairs: dict[str, set[tuple[str, str]]] = {s: set() for s in SPLITS}

    # ---- corpus ------------------------------------------------------------------------------------
    def add_passage(self, p: Passage, file: str | Path) -> None:
        earlier = self.pids.add(p.pid, p.record)
        if earlier is not None:
            raise DataError(
                f"duplicate pid {p.pid!r} (first at record {earlier}); pids must be unique",
                file=file,
                record=p.record,
                field="pid",
            )
        self._buffer_passage(p.pid, p.title, p.text)

    def _buffer_passage(self, pid: str, title: str, text: str) -> None:
        buf = self._corpus_buf
        buf["pid"].append(pid)
        buf["title"].append(title)
        buf["text"].append(text)
        if len(buf["pid"]) >= self.batch_rows:
            self._corpus.write(buf)
            self._corpus_buf = {"pid": [], "title": [], "text": []}

    def corpus_done(self, file: str | Path, role: str = "corpus") -> None:
        """Every passage of the corpus file (of ``role``) is in: check duplicates and emptiness."""
        dup = self.pids.freeze()
        self._frozen = True
        if dup is not None:
            pid, first, second = dup
            where = f" (records {first} and {second})" if first >= 0 else ""
            raise DataError(
                f"duplicate pid {pid!r}{where}; pids must be unique",
                file=file,
                record=second if second >= 0 else None,
                field="pid",
            )
        if len(self.pids) == 0:
            raise DataError(f"empty corpus: no passages (role {role!r})", file=file)
        log.info("corpus: %d passages from %s", len(self.pids), file)

    def resolve_ctx(self, ctx: Ctx, *, file: str | Path, record: Any, field: str) -> str:
        """The pid of a passage referenced by a training record; passages without an id are added
        to the corpus under a content-derived pid (once)."""
        if ctx.pid is not None:
            if ctx.pid not in self.pids:
                raise DataError(
                    f"passage id {ctx.pid!r} is not in the corpus", file=file, record=record, field=field
                )
            return ctx.pid
        pid = ctx_pid(ctx.title, ctx.text)
        self.extra["ctx_without_passage_id"] += 1
        if pid not in self.pids:
            self.pids.add(pid, f"{Path(file).name}:{record}")
            self._buffer_passage(pid, ctx.title, ctx.text)
            self.extra["corpus_from_ctx"] += 1
        return pid

    # ---- queries, qrels, negatives -----------------------------------------------------------------
    def add_query(self, split: str, q: Query, file: str | Path) -> None:
        if not q.text.strip():
            raise DataError("empty query text", file=file, record=q.record, field="query")
        if q.qid in self._qid_split:
            raise DataError(
                f"duplicate qid {q.qid!r} (already a {self._qid_split[q.qid]} query); "
                "qids must be unique across all splits",
                file=file,
                record=q.record,
                field="qid",
            )
        self._qid_split[q.qid] = split
        cols = self._queries[split]
        cols["qid"].append(q.qid)
        cols["text"].append(q.text)
        cols["answers"].append(q.answers)

    def query_count(self, split: str) -> int:
        return len(self._queries[split]["qid"])

    def require_queries(self, split: str, before: int, *, role: str, file: str | Path, why: str) -> None:
        """DataError naming the file and the role when reading it added no query to ``split`` (it
        had ``before``): records all dropped or unjudged leave a split that training or evaluation
        would only refuse much later, naming a derived table."""
        if self.query_count(split) == before:
            raise DataError(f"role {role!r} gives the {split} split no queries: {why}", file=file)

    def add_qrel(
        self, split: str, qid: str, pid: str, relevance: int, *, file: str | Path, record: Any
    ) -> None:
        self._check_frozen()
        if self._qid_split.get(qid) != split:
            raise DataError(
                f"judgment for query {qid!r} that is not a {split} query",
                file=file,
                record=record,
                field="qid",
            )
        if pid not in self.pids:
            raise DataError(f"passage id {pid!r} is not in the corpus", file=file, record=record, field="pid")
        if (qid, pid) in self._qrel_pairs[split]:
            raise DataError(f"duplicate judgment ({qid!r}, {pid!r})", file=file, record=record)
        self._qrel_pairs[split].add((qid, pid))
        cols = self._qrels[split]
        cols["qid"].append(qid)
        cols["pid"].append(pid)
        cols["relevance"].append(int(relevance))

    def add_negative(self, qid: str, pid: str, rank: int, score: float, source: str) -> None:
        """A shipped hard negative of a train query (pid already resolved against the corpus)."""
        self._check_frozen()
        if self._qid_split.get(qid) != "train":
            raise RuntimeError(f"negative for {qid!r}, which is not a train query")
        buf = self._neg_buf
        for name, value in zip(SHIPPED_NEGATIVES_SCHEMA.names, (qid, pid, rank, score, source)):
            buf[name].append(value)
        if len(buf["qid"]) >= self.batch_rows:
            self._negatives.write(buf)
            self._neg_buf = {n: [] for n in SHIPPED_NEGATIVES_SCHEMA.names}

    def add_training_record(
        self,
        split: str,
        rec: TrainingRecord,
        *,
        file: str | Path,
        gold_first: bool,
        hard_source: str,
        random_source: str | None,
        require_positive: bool,
        empty_positives: str,
    ) -> None:
        """A DPR/Tevatron record: its query, its positives as qrels (the first one at relevance 2
        when ``gold_first``: DPR's positive_ctxs[0] is the gold passage), and, for train, its shipped
        negatives (ranked by their position in the list; a negative that is also one of the query's
        positives, or repeats, is left out and counted)."""
        pos_field = "positive_ctxs" if gold_first else "positive_passages"
        id_key = "passage_id" if gold_first else "docid"
        if not rec.positives and require_positive:
            if empty_positives == "drop":
                self.extra[f"dropped_no_positive.{split}"] += 1
                return
            raise DataError(
                f"no positive passage for question {rec.question[:60]!r}: {split} queries need one. "
                "DPR's own loader drops such entries; set 'empty_positives: drop' for this dataset "
                "(prepare_data --empty-positives drop) to do the same, counted in manifest.json",
                file=file,
                record=rec.record,
                field=pos_field,
            )
        self.add_query(split, Query(rec.qid, rec.question, rec.answers, rec.record), file)
        positives: set[str] = set()
        for i, ctx in enumerate(rec.positives):
            pid = self.resolve_ctx(ctx, file=file, record=rec.record, field=f"{pos_field}[{i}].{id_key}")
            if pid in positives:
                self.extra["positives_repeated"] += 1
                continue
            positives.add(pid)
            self.add_qrel(
                split, rec.qid, pid, 2 if gold_first and i == 0 else 1, file=file, record=rec.record
            )
        lists = [
            (hard_source, rec.hard_negatives, "hard_negative_ctxs" if gold_first else "negative_passages")
        ]
        if random_source is not None:
            lists.append((random_source, rec.negatives, "negative_ctxs"))
        for source, ctxs, key in lists:
            if split != "train":
                self.extra[f"negatives_ignored.{split}"] += len(ctxs)
                continue
            used: set[str] = set()
            for rank, ctx in enumerate(ctxs, start=1):
                pid = self.resolve_ctx(ctx, file=file, record=rec.record, field=f"{key}[{rank - 1}].{id_key}")
                if pid in positives or pid in used:
                    self.extra[
                        "negatives_dropped_positive" if pid in positives else "negatives_dropped_repeated"
                    ] += 1
                    continue
                used.add(pid)
                self.add_negative(rec.qid, pid, rank, ctx.score, source)

    def _check_frozen(self) -> None:
        if not self._frozen:
            raise RuntimeError("DatasetWriter: corpus_done() must come before qrels and negatives")

    # ---- output ------------------------------------------------------------------------------------
    def finish(self) -> dict:
        """Write every table; return the counts for the manifest."""
        self._check_frozen()
        if self._corpus_buf["pid"]:
            self._corpus.write(self._corpus_buf)
        if self._neg_buf["qid"]:
            self._negatives.write(self._neg_buf)
        corpus_rows, negative_rows = self._corpus.rows, self._negatives.rows
        self._corpus.close()
        self._negatives.close()
        for split in SPLITS:
            write_table(
                self.out_dir / f"queries.{split}.parquet", _table(self._queries[split], QUERIES_SCHEMA)
            )
            write_table(self.out_dir / f"qrels.{split}.parquet", _table(self._qrels[split], QRELS_SCHEMA))
        return {
            "corpus": corpus_rows,
            "queries": {s: len(self._queries[s]["qid"]) for s in SPLITS},
            "qrels": {s: len(self._qrels[s]["qid"]) for s in SPLITS},
            "negatives_train": negative_rows,
            "notes": dict(sorted(self.extra.items())),  # what was derived, merged or left out
        }

    def abort(self) -> None:
        self._corpus.abort()
        self._negatives.abort()

    def __enter__(self) -> "DatasetWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abort()


def _table(columns: dict[str, list], schema: pa.Schema) -> pa.Table:
    return pa.Table.from_pydict(columns, schema=schema)


def load_queries(queries: Iterable[Query], file: str | Path) -> dict[str, Query]:
    """A queries file as qid -> Query (file order kept); a repeated qid is an error."""
    out: dict[str, Query] = {}
    for q in queries:
        if q.qid in out:
            raise DataError(
                f"duplicate qid {q.qid!r} (first at record {out[q.qid].record})",
                file=file,
                record=q.record,
                field="qid",
            )
        out[q.qid] = q
    return out


def add_judged_queries(
    writer: DatasetWriter,
    split: str,
    queries: dict[str, Query],
    queries_file: str | Path,
    qrels: Iterable[Qrel],
    qrels_file: str | Path | None,
    *,
    keep_unjudged: bool,
) -> None:
    """Queries and qrels of one split from a queries table and a qrels file (MS MARCO, BEIR).

    Judgments with relevance <= 0 (BEIR/TREC "judged not relevant") are not positives: left out and
    counted. Without ``keep_unjudged`` a query belongs to the split only if it has a positive
    judgment there (a shared BEIR queries.jsonl serves every split; MS MARCO's queries.train.tsv
    lists 808k queries of which 503k are judged); the others are counted, not written. Then a qrels
    file (role ``qrels_{split}`` in both formats) without a single positive judgment is an error: the split would be empty.
    """
    before = writer.query_count(split)
    judged: dict[str, list[Qrel]] = {}
    # Every judgment, not only the positives add_qrel sees: a pair judged 1 and again 0 was kept as a
    # positive with the 0 counted as "not positive", the contradiction unreported.
    first_record: dict[tuple[str, str], Any] = {}
    for r in qrels:
        if r.qid not in queries:
            raise DataError(
                f"query id {r.qid!r} is not in {Path(queries_file).name}",
                file=qrels_file,
                record=r.record,
                field="qid",
            )
        earlier = first_record.setdefault((r.qid, r.pid), r.record)
        if earlier != r.record:
            raise DataError(
                f"duplicate judgment ({r.qid!r}, {r.pid!r}) (first at record {earlier}); a pair is "
                "judged once",
                file=qrels_file,
                record=r.record,
            )
        if r.relevance <= 0:
            writer.extra[f"qrels_not_positive.{split}"] += 1
            continue
        judged.setdefault(r.qid, []).append(r)
    # Queries in the queries file's order, each followed by its judgments in the qrels file's order.
    for qid, q in queries.items():
        if qid not in judged and not keep_unjudged:
            writer.extra[f"queries_without_qrels.{split}"] += 1
            continue
        writer.add_query(split, q, queries_file)
        for r in judged.get(qid, ()):
            writer.add_qrel(split, qid, r.pid, r.relevance, file=qrels_file, record=r.record)
    if not keep_unjudged:
        writer.require_queries(
            split,
            before,
            role=f"qrels_{split}",
            file=qrels_file,
            why="none of its judgments is positive (relevance >= 1)",
        )

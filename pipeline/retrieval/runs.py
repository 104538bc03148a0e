"""Retrieval runs: read and validate ``run.{split}.parquet`` and export it in TREC format.

A run is the contract between every retriever and the evaluator (pipeline.core.schemas.RUN_SCHEMA):
qid, pid, rank (int32, 1-based, exactly 1..n per query), score (float32). Order is given by ``rank``,
never re-derived from ``score``, so ties in score are resolved by whoever wrote the run.

CLI (validate + TREC export only; ``pipeline.evaluation.evaluate`` scores a run)::

    python -m pipeline.retrieval.runs --run results/squad/bm25/run.test.parquet --tag bm25 \
        --trec results/squad/bm25/run.test.trec [--queries resources/squad/queries.test.parquet]
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Callable, Collection

import numpy as np
import pandas as pd

from pipeline.core.cli import run_main, stage_parser, start_stage
from pipeline.core.schemas import QUERIES_SCHEMA, RUN_SCHEMA
from pipeline.core.storage import (
    CONTROL_CHARACTER,
    DataError,
    atomic_open,
    control_character_message,
    first_repeat,
    read_table,
    refuse_overwriting_inputs,
)

log = logging.getLogger("sieve.runs")

_TREC_CHUNK = 200_000


def validate_run(
    df: pd.DataFrame, file: str | os.PathLike, known_qids: Collection[str] | None = None
) -> pd.DataFrame:
    """Check a run table; return it sorted by (qid, rank) with RUN_SCHEMA dtypes, indexed by file row.

    Errors name the file, the 0-based row of the offending record and the field: nulls, a duplicate
    (qid, pid), ranks that are not exactly 1..n within a query, and qids not in ``known_qids``.
    """
    df = df.reset_index(drop=True)
    for col in RUN_SCHEMA.names:
        nulls = df[col].isna()
        if nulls.any():
            raise DataError("null value", file=file, record=int(nulls.idxmax()), field=col)
    repeat = first_repeat(df, ["qid", "pid"])
    if repeat:
        row, first = repeat
        qid, pid = df.at[row, "qid"], df.at[row, "pid"]
        raise DataError(
            f"duplicate (qid, pid) = ({qid!r}, {pid!r}); first seen at row {first}",
            file=file,
            record=row,
            field="pid",
        )
    if known_qids is not None:
        unknown = ~df["qid"].isin(known_qids)
        refuse_first(
            unknown,
            lambda row: (
                f"qid {df.at[row, 'qid']!r} is not in the evaluated queries ({int(unknown.sum())} rows in total)"
            ),
            file,
            "qid",
        )
    ordered = df.sort_values(["qid", "rank"], kind="stable")
    expected = ordered.groupby("qid", sort=False).cumcount().to_numpy() + 1
    ranks = ordered["rank"].to_numpy()
    bad = np.flatnonzero(ranks != expected)
    if bad.size:
        row = int(ordered.index[bad[0]])
        raise DataError(
            f"query {df.at[row, 'qid']!r}: ranks must be exactly 1..n with no gaps or "
            f"repeats; found rank {int(ranks[bad[0]])} where {int(expected[bad[0]])} "
            "was expected",
            file=file,
            record=row,
            field="rank",
        )
    # The index keeps each record's row in the file, so later errors can still name it.
    return ordered.astype({"qid": str, "pid": str, "rank": "int32", "score": "float32"})


def read_run(path: str | os.PathLike, known_qids: Collection[str] | None = None) -> pd.DataFrame:
    """Read and validate a run Parquet file (see ``validate_run``)."""
    path = Path(path)
    df = read_table(path, columns=RUN_SCHEMA.names, schema=RUN_SCHEMA)
    return validate_run(df, path, known_qids)


def ranked_lists(run: pd.DataFrame) -> dict[str, list[str]]:
    """qid -> pids in rank order, from a run sorted by (qid, rank) (what ``read_run`` returns)."""
    return {qid: group.tolist() for qid, group in run.groupby("qid", sort=False)["pid"]}


def refuse_first(
    bad: pd.Series, message: Callable[[int], str], file: str | os.PathLike | None, field: str
) -> None:
    """Raise DataError at the first row (by index label, the file's 0-based row) where ``bad`` holds,
    with ``message(row)`` saying what is wrong there; return when no row is bad."""
    if bad.any():
        row = int(bad.idxmax())
        raise DataError(message(row), file=file, record=row, field=field)


def write_trec(
    run: pd.DataFrame, path: str | os.PathLike, tag: str, file: str | os.PathLike | None = None
) -> None:
    """Write ``qid Q0 pid rank score tag`` lines (atomically), in (qid, rank) order.

    TREC files are whitespace-separated, so an id containing whitespace cannot be exported.
    """
    if not tag or any(ch.isspace() for ch in tag):
        # A DataError (a ValueError): a tag typed by hand is bad input, one line, not a traceback.
        raise DataError(f"a TREC run tag must be non-empty and without whitespace, got {tag!r}", field="tag")
    for col in ("qid", "pid"):
        spaced = run[col].str.contains(r"\s", regex=True)
        refuse_first(
            spaced, lambda row: "id contains whitespace and cannot be written in TREC format", file, col
        )
        # Ids from a table prepare did not write: a NUL was written into the TREC file raw.
        control = run[col].str.contains(CONTROL_CHARACTER.pattern, regex=True)
        refuse_first(
            control,
            lambda row, col=col: (
                f"{control_character_message(run.at[row, col])}: it cannot be written in TREC format"
            ),
            file,
            col,
        )
    with atomic_open(path, "w", encoding="utf-8") as handle:
        for start in range(0, len(run), _TREC_CHUNK):
            part = run.iloc[start : start + _TREC_CHUNK]
            # %.9g round-trips float32, so the exported scores order exactly like the Parquet ones.
            scores = np.char.mod("%.9g", part["score"].to_numpy(dtype=np.float64))
            lines = (
                part["qid"]
                + " Q0 "
                + part["pid"]
                + " "
                + part["rank"].astype(str)
                + " "
                + pd.Series(scores, index=part.index)
                + " "
                + tag
                + "\n"
            )
            handle.writelines(lines.tolist())


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser("pipeline.retrieval.runs", "Validate a run Parquet file and export it as TREC.")
    parser.add_argument("--run", required=True, help="run Parquet (qid, pid, rank, score)")
    parser.add_argument("--trec", required=True, help="output TREC file")
    parser.add_argument("--tag", required=True, help="run tag (last TREC column), e.g. the method")
    parser.add_argument("--queries", help="queries Parquet: also reject qids not in it")
    parser.add_argument("--log", help="append the log to this file")
    args = parser.parse_args(argv)
    refuse_overwriting_inputs(
        {"--trec": args.trec, "--log": args.log}, {"--run": args.run, "--queries": args.queries}
    )
    start_stage(args.log)
    known = None
    if args.queries:
        known = set(read_table(args.queries, columns=["qid"], schema=QUERIES_SCHEMA)["qid"])
    run = read_run(args.run, known)
    write_trec(run, args.trec, args.tag, file=args.run)
    log.info("wrote %s (%d lines, %d queries)", args.trec, len(run), run["qid"].nunique())
    return 0


if __name__ == "__main__":
    run_main(main)

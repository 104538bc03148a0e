"""Export a split's relevance judgements in TREC format, beside the TREC runs, for trec_eval,
ir_measures or ranx (the runs alone cannot be scored outside this project without them).

    python -m pipeline.evaluation.export_qrels --qrels resources/squad/qrels.test.parquet \
        --out results/squad/qrels.test.trec

Lines are ``qid 0 pid relevance``, sorted by (qid, pid). On synthkb, ``qrels_all`` (every passage that
states the answer) is exported the same way; it is the judgement hit_all@k and MRR_all@10 use.
"""

from __future__ import annotations

import logging
import os

import pandas as pd

from pipeline.core.cli import run_main, stage_parser, start_stage
from pipeline.core.schemas import QRELS_SCHEMA
from pipeline.core.storage import DataError, atomic_open, read_table, refuse_overwriting_inputs, refuse_repeat

log = logging.getLogger("sieve.export_qrels")


def write_trec_qrels(
    qrels: pd.DataFrame, path: str | os.PathLike, file: str | os.PathLike | None = None
) -> int:
    """Write ``qid 0 pid relevance`` lines atomically; returns the number of lines. TREC files are
    whitespace-separated: an id with whitespace is refused naming its record."""
    qrels = qrels.reset_index(drop=True)
    for col in ("qid", "pid"):
        spaced = qrels[col].str.contains(r"\s", regex=True)
        if spaced.any():
            raise DataError(
                "id contains whitespace and cannot be written in TREC format",
                file=file,
                record=int(spaced.idxmax()),
                field=col,
            )
    ordered = qrels.sort_values(["qid", "pid"], kind="stable")
    lines = ordered["qid"] + " 0 " + ordered["pid"] + " " + ordered["relevance"].astype(str) + "\n"
    with atomic_open(path, "w", encoding="utf-8") as handle:
        handle.writelines(lines.tolist())
    return len(lines)


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser("pipeline.evaluation.export_qrels", "Export qrels Parquet as a TREC qrels file.")
    parser.add_argument("--qrels", required=True, help="qrels Parquet (qid, pid, relevance)")
    parser.add_argument("--out", required=True, help="output TREC qrels file")
    parser.add_argument("--log", help="append the log to this file")
    args = parser.parse_args(argv)
    refuse_overwriting_inputs({"--out": args.out, "--log": args.log}, {"--qrels": args.qrels})
    start_stage(args.log)
    qrels = read_table(args.qrels, schema=QRELS_SCHEMA)
    # trec_eval and ir_measures disagree on a repeated judgement (the first or the last counts).
    refuse_repeat(
        qrels,
        ["qid", "pid"],
        lambda row: f"judgement ({qrels['qid'].iloc[row]}, {qrels['pid'].iloc[row]}) repeats an earlier row",
        args.qrels,
        "pid",
    )
    n = write_trec_qrels(qrels, args.out, file=args.qrels)
    log.info("wrote %s (%d judgements, %d queries)", args.out, n, qrels["qid"].nunique())
    return 0


if __name__ == "__main__":
    run_main(main)

"""A detector's false negatives as extra positives (RLHN's relabelling): the qrels DPR trains on in
method dpr_relabel_<detector>.

    python -m pipeline.sieve.relabel --qrels resources/D/qrels.train.parquet \\
        --decisions results/D/sieve/sieve_no_ccr/decisions.parquet --out results/D/negatives/sieve_no_ccr.relabel.qrels.parquet

Every row of ``--qrels`` first, unchanged (so a query's training positive, its highest-relevance first
row, stays the same), then each candidate the detector dropped (``kept`` false in its decisions, a
filter's or the sieve's table) as a row of relevance 1, unless it is already a positive of its query.
The training reads every relevance >= 1 row as a positive: the relabelled ones take the extra positive
slots (dpr.relabel.extra_positives) and are never drawn as hard negatives.
"""

from __future__ import annotations

import logging
import os

import pandas as pd

from pipeline.core.cli import run_main, stage_parser, start_stage
from pipeline.core.schemas import QRELS_SCHEMA
from pipeline.core.storage import DataError, read_table, refuse_overwriting_inputs, write_table

log = logging.getLogger("sieve.relabel")


def relabelled_qrels(qrels: pd.DataFrame, decisions: pd.DataFrame) -> pd.DataFrame:
    """``qrels`` followed by the dropped (qid, pid) pairs of ``decisions`` not already in it (relevance 1),
    in the decisions' order."""
    dropped = decisions.loc[~decisions["kept"].astype(bool), ["qid", "pid"]]
    known = pd.MultiIndex.from_frame(qrels[["qid", "pid"]])
    new = dropped[~pd.MultiIndex.from_frame(dropped).isin(known)].drop_duplicates()
    extra = new.assign(relevance=1)
    return pd.concat([qrels[["qid", "pid", "relevance"]], extra], ignore_index=True)


def read_decisions(path: str | os.PathLike) -> pd.DataFrame:
    """qid, pid, kept of a filter's or the sieve's decisions; a null is a DataError naming the row."""
    table = pd.read_parquet(path, columns=["qid", "pid", "kept"])
    for column in table.columns:
        null = table[column].isna().to_numpy()
        if null.any():
            raise DataError("null value", file=path, record=int(null.argmax()), field=column)
    return table


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser("pipeline.sieve.relabel", __doc__)
    parser.add_argument("--qrels", required=True, help="qrels.train.parquet")
    parser.add_argument("--decisions", required=True, help="the detector's decisions (kept: false = dropped)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--log", default=None)
    args = parser.parse_args(argv)
    refuse_overwriting_inputs(
        {"--out": args.out, "--log": args.log}, {"--qrels": args.qrels, "--decisions": args.decisions}
    )
    start_stage(args.log)
    qrels = read_table(args.qrels, ["qid", "pid", "relevance"], schema=QRELS_SCHEMA)
    decisions = read_decisions(args.decisions)
    unknown = ~decisions["qid"].isin(qrels["qid"])
    if unknown.any():
        row = int(unknown.to_numpy().argmax())
        raise DataError(
            f"qid {decisions['qid'].iat[row]!r} has no qrels row",
            file=args.decisions,
            record=row,
            field="qid",
        )
    out = relabelled_qrels(qrels, decisions)
    write_table(args.out, out, QRELS_SCHEMA)
    log.info(
        "relabel: %d dropped candidates of %d queries became positives (%d qrels rows) -> %s",
        len(out) - len(qrels),
        out.iloc[len(qrels) :]["qid"].nunique(),
        len(qrels),
        args.out,
    )
    return 0


if __name__ == "__main__":
    run_main(main)

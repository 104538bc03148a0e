"""Pick an AR2 variant's round by a dev metric; write the method's test run, info.json and figure.

    python -m pipeline.ar2.selection select --variant-dir results/synthkb/ar2/sieve/seed0 --variant sieve \
        --rounds 2 --metric R@5 --info-out results/synthkb/ar2_sieve/seed0/info.json \
        --figure results/synthkb/figures/ar2_sieve_seed0_rounds.png
    python -m pipeline.ar2.selection search --info results/synthkb/ar2_sieve/seed0/info.json \
        --queries resources/synthkb/queries.test.parquet --depth 100 \
        --run-out results/synthkb/ar2_sieve/seed0/run.test.parquet
    # the workflow's job's depth: python -m pipeline.workflow.jobs synthkb ar2_search > depth.json
    python -m pipeline.ar2.selection search --settings depth.json --info ... --queries ... --run-out ...

Selection: the trained round (1..rounds) with the highest dev ``--metric``; ties go to the earlier
round. Round 0 (the DPR start) is drawn in the learning curve but never selected: the method reports
an AR2-trained model. Without dev queries the last round is taken (and info.json says so). The test
run (``search``) is retrieved with the selected round's retriever over that round's corpus
embeddings; the evaluate rule turns it into ``{method}/metrics.json``. info.json carries no key the
evaluator owns, so it can be passed to ``pipeline.evaluation.evaluate --info``.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import torch

from pipeline.ar2.data import run_table, search
from pipeline.ar2.learning_curve import plot, read_rounds
from pipeline.core.cli import check_writable, run_main, stage_parser, start_stage
from pipeline.core.config import ConfigError
from pipeline.core.jobs import add_settings_flags, job_settings
from pipeline.core.methods import method_of
from pipeline.core.schemas import QUERIES_SCHEMA
from pipeline.core.settings.job_documents import Ar2SelectJob, RunDepthJob
from pipeline.core.storage import DataError, read_json_object, read_table, write_json, write_table
from pipeline.retrieval.model import Retriever

log = logging.getLogger("sieve.ar2_select")

SELECTION_FILE = "selection.json"


def select_round(rounds: list[dict], metric: str) -> tuple[int, str]:
    """(selected round, reason) among rounds 1.. of ``rounds`` (round.json dicts, round 0 first)."""
    trained = [r for r in rounds if r["round"] >= 1]
    if not trained:
        raise ConfigError("ar2.rounds must be >= 1: there is no trained round to select")
    if not any(r.get("dev") for r in trained):
        return trained[-1]["round"], "no dev metrics: last round"
    missing = [r["round"] for r in trained if metric not in r.get("dev", {})]
    if missing:
        available = sorted(trained[0].get("dev", {}))
        raise ConfigError(
            f"ar2.select_metric {metric!r} is not among the dev metrics of round "
            f"{missing[0]} (available: {', '.join(available)})"
        )
    best = max(trained, key=lambda r: (r["dev"][metric], -r["round"]))
    return best["round"], f"best dev {metric}"


def summarize(rounds: list[dict], selected: int, metric: str, reason: str) -> dict:
    """info.json: what a reader of the results needs to judge the AR2 numbers."""
    chosen = next(r for r in rounds if r["round"] == selected)
    steps = {"ranker": 0, "retriever": 0}
    for r in rounds:
        train = r.get("train") or {}
        steps["ranker"] += int(train.get("ranker_steps", 0))
        steps["retriever"] += int(train.get("retriever_steps", 0))
    per_round = []
    for r in rounds:
        entry = {"round": r["round"], "dev": r.get("dev", {}), "wall_time_s": r.get("wall_time_s")}
        if r.get("sieve"):
            entry["sieve_out_rate"] = r["sieve"].get("sieve_out_rate")
            for key in ("false_negative_recall", "true_negative_retention"):
                if r["sieve"].get(key) is not None:
                    entry[key] = r["sieve"][key]
        per_round.append(entry)
    return {
        "variant": chosen["variant"],
        "seed": chosen["seed"],
        "selected_round": selected,
        "select_metric": metric,
        "select_split": "dev",
        "select_reason": reason,
        "dev_metrics": chosen.get("dev", {}),
        "rounds": len(rounds) - 1,
        "steps": {**steps, "total": steps["ranker"] + steps["retriever"]},
        "wall_time_s": round(sum(r.get("wall_time_s") or 0.0 for r in rounds), 3),
        "per_round": per_round,
    }


def cmd_select(args: argparse.Namespace, rounds: int, metric: str) -> int:
    variant_dir = Path(args.variant_dir)
    # selection.json is written first: a read-only folder of the later outputs left it alone behind
    check_writable(variant_dir / SELECTION_FILE, args.figure, args.info_out)
    rounds_read = read_rounds(variant_dir, rounds)
    selected, reason = select_round(rounds_read, metric)
    info = summarize(rounds_read, selected, metric, reason)
    info["retriever"] = str(variant_dir / f"round{selected}" / "retriever")
    info["embeddings"] = str(variant_dir / f"round{selected}" / "embeddings")
    log.info("%s: round %d selected (%s)", method_of(args.variant), selected, reason)
    write_json(variant_dir / SELECTION_FILE, {"selected_round": selected, "reason": reason, "metric": metric})
    if args.figure:
        plot(
            {args.variant: rounds_read},
            args.figure,
            selected={args.variant: selected},
            title=f"{method_of(args.variant)}: dev metrics per round",
            selected_by=reason,
        )
    write_json(args.info_out, info)
    return 0


def cmd_search(args: argparse.Namespace, depth: int) -> int:
    info_path = Path(args.info)
    info = read_json_object(
        info_path, missing="file not found (did ar2_select run?)", keys=("retriever", "embeddings")
    )
    retriever_dir, emb_dir = info["retriever"], info["embeddings"]
    for key in ("retriever", "embeddings"):
        if not isinstance(info[key], str) or not info[key]:
            raise DataError(
                f"not an AR2 selection: must be a folder path, got {info[key]!r}", file=info_path, field=key
            )
    retriever = Retriever.load(retriever_dir)
    device = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    retriever.to(torch.device(device))
    queries = read_table(args.queries, columns=["qid", "text"], schema=QUERIES_SCHEMA)
    if queries.empty:
        raise DataError("no queries to retrieve for", file=args.queries)
    q_emb = retriever.encode_queries(queries["text"].tolist())
    pids, scores = search(q_emb, emb_dir, depth, device=retriever.device)
    write_table(args.run_out, run_table(queries["qid"].tolist(), pids, scores))
    log.info(
        "round %s run for %d queries (depth %d) -> %s",
        info.get("selected_round"),
        len(queries),
        depth,
        args.run_out,
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = stage_parser("pipeline.ar2.selection", __doc__)
    sub = ap.add_subparsers(dest="command", required=True)
    sel = sub.add_parser("select", help="pick the round; write info.json, selection.json, figure")
    sel.add_argument("--variant-dir", required=True, help="results/{dataset}/ar2/{variant}")
    sel.add_argument("--variant", required=True)
    add_settings_flags(
        sel, Ar2SelectJob, "the rounds and the dev metric that picks one (ar2.rounds, ar2.select_metric)"
    )
    sel.add_argument("--info-out", required=True)
    sel.add_argument("--figure", help="learning-curve PNG")
    sea = sub.add_parser("search", help="the selected round's run for a split")
    sea.add_argument("--info", required=True, help="info.json written by 'select'")
    sea.add_argument("--queries", required=True)
    add_settings_flags(sea, RunDepthJob, "run depth (eval.depth)")
    sea.add_argument("--run-out", required=True)
    sea.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    for p in (sel, sea):
        p.add_argument("--threads", type=int)
        p.add_argument("--log")
    args = ap.parse_args(argv)
    # before any work: a bad document or flag is one line
    if args.command == "select":
        select = job_settings(Ar2SelectJob, args)
        start_stage(args.log, args.threads)
        return cmd_select(args, select.rounds, select.select_metric)
    search_job = job_settings(RunDepthJob, args)
    start_stage(args.log, args.threads)
    return cmd_search(args, search_job.depth)


if __name__ == "__main__":
    run_main(main)

"""The printer of any job's settings document (built by pipeline/workflow/documents.py's helpers).

Each family's glue (pipeline/workflow/synthkb.py, data.py, retrieval.py, sieve.py, ar2.py, evaluation.py,
training.py) builds its jobs' documents from a dataset's resolved config; the rule passes the document
whole (``--settings-json``, a recorded param: a changed setting reruns the job), the stage validates it
with its contract (pipeline.core.settings) and a run by hand reads the same document from a file::

    python -m pipeline.workflow.jobs synthkb passage_sieve > sieve.json
    python -m pipeline.sieve.passage_sieve --settings sieve.json --candidates ... --out ...

No setting travels as a flag or a path tag on the way.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Callable

from pipeline.core.methods import AR2_SAMPLING, OTHER_FILTERS
from pipeline.core.settings import Config, fields_of, from_dict, job_contract
from pipeline.workflow.ar2 import (
    ar2_curve_job,
    ar2_mine_job,
    ar2_ranker_job,
    ar2_select_job,
    ar2_sieve_job,
    ar2_train_job,
)
from pipeline.workflow.data import prepare_job
from pipeline.workflow.evaluation import EvaluationRules, evaluate_job, hybrid_job
from pipeline.workflow.retrieval import (
    bm25_job,
    encode_job,
    index_job,
    mine_job,
    mining_search_job,
    run_depth_job,
    search_job,
)
from pipeline.workflow.sieve import (
    candidates_job,
    clean_entry,
    clean_job,
    cross_encoder_job,
    filter_job,
    sieve_job,
)
from pipeline.workflow.synthkb import generate_job
from pipeline.workflow.tables import WorkflowTables


def stage_documents(tables: WorkflowTables) -> dict[str, Callable[[str, argparse.Namespace], dict]]:
    """stage -> the document of that stage's job for (dataset, the printer's arguments)."""
    seed = int(tables.config["seed"])
    return {
        "generate": lambda d, args: generate_job(tables.datasets[d]),
        "prepare": lambda d, args: prepare_job(d, tables.datasets[d]),
        "bm25_index": lambda d, args: bm25_job(tables.cfg(d), "index"),
        "bm25_retrieve": lambda d, args: bm25_job(tables.cfg(d), "retrieve"),
        "bm25_mine": lambda d, args: bm25_job(tables.cfg(d), "mine"),
        "encode_corpus": lambda d, args: encode_job(tables.cfg(d)),
        "build_index": lambda d, args: index_job(tables.cfg(d), seed),
        "sieve_candidates": lambda d, args: candidates_job(tables.cfg(d), seed, tables.datasets[d]["format"]),
        "sieve_dev_candidates": lambda d, args: candidates_job(
            tables.cfg(d), seed, tables.datasets[d]["format"], injection=False
        ),
        "passage_sieve": lambda d, args: sieve_job(tables.cfg(d), seed),
        "train_cross_encoder": lambda d, args: cross_encoder_job(tables.cfg(d), seed),
        "filter_candidates": lambda d, args: filter_job(tables.cfg(d), seed, args.filter),
        # not a dataset's job: a clean.<name> entry's, named where the others name the dataset
        "clean_negatives": lambda name, args: clean_job(tables.config, name),
        "ar2_mine": lambda d, args: ar2_mine_job(tables.cfg(d)),
        "fuse_rrf": lambda d, args: hybrid_job(tables.cfg(d), "rrf"),
        "fuse_weighted": lambda d, args: hybrid_job(tables.cfg(d), "wsum"),
        "evaluate": lambda d, args: evaluate_job(
            tables, d, args.run.split("/")[0], allow_missing_queries=args.run == "bm25"
        ),
        **ar2_round_documents(tables),
        **dense_search_documents(tables),
    }


# ---- AR2's round jobs: documents of one AR2 run (--seed) and, for a round's training, one variant --------


def ar2_round_documents(tables: WorkflowTables) -> dict[str, Callable[[str, argparse.Namespace], dict]]:
    """stage -> the document of an AR2 round job of (dataset, the printer's --seed and --variant)."""

    def seed(d: str, args: argparse.Namespace) -> int:
        return tables.ar2_seeds(d)[0] if args.seed is None else args.seed

    return {
        "ar2_sieve": lambda d, args: ar2_sieve_job(
            tables.cfg(d), seed(d, args), tables.datasets[d]["format"]
        ),
        "ar2_train_ranker": lambda d, args: ar2_ranker_job(tables.cfg(d), seed(d, args)),
        "ar2_train": lambda d, args: ar2_train_job(tables.cfg(d), args.variant, seed(d, args)),
        "ar2_select": lambda d, args: ar2_select_job(tables.cfg(d)),
        "ar2_learning_curve": lambda d, args: ar2_curve_job(tables.cfg(d)),
    }


def dense_search_documents(tables: WorkflowTables) -> dict[str, Callable[[str, argparse.Namespace], dict]]:
    """The dense searches' and dense mining's stages (pipeline/workflow/retrieval.py): search_dense and
    search_for_mining over search.backend, the AR2 dev searches over the round's embeddings (torch)."""
    backend = tables.config["search"]["backend"]
    return {
        "search_dense": lambda d, args: search_job(tables.cfg(d), backend),
        "search_for_mining": lambda d, args: mining_search_job(tables.cfg(d), backend),
        "mine_dense_negatives": lambda d, args: mine_job(tables.cfg(d)),
        "ar2_search_dev": lambda d, args: search_job(tables.cfg(d), "torch", amp=False),
        "ar2_search": lambda d, args: run_depth_job(tables.cfg(d)),
    }


def seed_value(text: str) -> int:
    """argparse type of --seed: a seed the settings take (pipeline.core.settings.Seed); -4 was printed
    into a document that every stage then refused."""
    try:
        return from_dict(SeedDocument, {"seed": int(text)}).seed
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a seed: {text!r} (a whole number, 0 to {2**32 - 1})") from None


SeedDocument = job_contract("SeedDocument", "The --seed of the printer.", **fields_of(Config, "seed"))


def main(argv: list[str] | None = None) -> int:
    """Print the settings document the workflow's job of a stage would pass, to run it by hand with
    --settings (training's jobs: python -m pipeline.workflow.training)."""
    from pipeline.core.config import load_config, validate_config
    from pipeline.core.methods import method_table
    from pipeline.core.recipes import dataset_configs

    ap = argparse.ArgumentParser(prog="python -m pipeline.workflow.jobs", description=main.__doc__)
    ap.add_argument("dataset", help="a dataset of the config (clean_negatives: a clean.<name> entry)")
    ap.add_argument("stage", help="the job's stage: " + ", ".join(STAGES))
    ap.add_argument("--run", default="bm25", help="evaluate: the run folder scored (default bm25)")
    ap.add_argument(
        "--filter",
        default="none",
        choices=OTHER_FILTERS,
        help="filter_candidates: the filter (default none)",
    )
    ap.add_argument(
        "--seed",
        type=seed_value,
        help="ar2_sieve, ar2_train_ranker, ar2_train: the AR2 run (default: its first seed)",
    )
    ap.add_argument(
        "--variant",
        default="plain",
        choices=sorted(AR2_SAMPLING),
        help="ar2_train: the AR2 variant (default plain)",
    )
    ap.add_argument("--configfile", nargs="*", default=[], help="overlays, as given to snakemake")
    args = ap.parse_args(argv)
    if args.stage not in STAGES:
        ap.error(f"unknown stage {args.stage!r} (stages: {', '.join(STAGES)})")
    config = load_config(args.configfile)
    validate_config(config, methods=lambda: method_table(config))
    tables = WorkflowTables(config, dataset_configs(config, methods=method_table))
    if args.stage == "clean_negatives":
        try:
            clean_entry(config, args.dataset)
        except ValueError as err:
            ap.error(str(err))
    elif args.dataset not in tables.datasets:
        ap.error(f"unknown dataset {args.dataset!r} (declared: {', '.join(sorted(tables.datasets))})")
    if args.stage == "evaluate":
        try:  # a run the workflow has (the rules' own check): a made-up name was printed all the same
            EvaluationRules(tables).check_run(args.dataset, args.run.split("/")[0])
        except ValueError as err:
            ap.error(f"--run {args.run}: {err}")
    synthetic = args.dataset in tables.synthetic
    if args.stage in ("generate", "prepare") and synthetic != (args.stage == "generate"):
        ap.error(f"dataset {args.dataset!r} is {'generated' if synthetic else 'prepared'}, not {args.stage}d")
    document = stage_documents(tables)[args.stage](args.dataset, args)
    json.dump(document, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
    return 0


STAGES = (
    "generate",
    "prepare",
    "bm25_index",
    "bm25_retrieve",
    "bm25_mine",
    "encode_corpus",
    "build_index",
    "sieve_candidates",
    "sieve_dev_candidates",
    "passage_sieve",
    "train_cross_encoder",
    "filter_candidates",
    "clean_negatives",
    "ar2_mine",
    "ar2_sieve",
    "ar2_train_ranker",
    "ar2_train",
    "ar2_select",
    "ar2_learning_curve",
    "fuse_rrf",
    "fuse_weighted",
    "evaluate",
    # dense search and mining
    "search_dense",
    "search_for_mining",
    "mine_dense_negatives",
    "ar2_search_dev",
    "ar2_search",
)


if __name__ == "__main__":
    from pipeline.core.cli import run_main  # cli imports the logging set-up a rule file does not need

    run_main(main)

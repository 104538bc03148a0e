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

from pipeline.core.methods import AR2_SAMPLING, OTHER_FILTERS, beta_tag, ccr_model, rcl_model, relabel_model
from pipeline.core.settings.job_documents import fields_of, job_contract
from pipeline.core.settings.root import Config
from pipeline.core.settings.validation import from_dict
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
from pipeline.workflow.training import init_job, select_job, selected_folders, train_job

# A stage's document from (the workflow's tables, the dataset or clean entry, the printer's arguments).
Document = Callable[[WorkflowTables, str, argparse.Namespace], dict]


def _seed(t: WorkflowTables) -> int:
    return int(t.config["seed"])


def _training_seed(t: WorkflowTables, args: argparse.Namespace) -> int:
    return _seed(t) if args.seed is None else args.seed


def _ar2_seed(t: WorkflowTables, d: str, args: argparse.Namespace) -> int:
    return t.ar2_seeds(d)[0] if args.seed is None else args.seed


def _format(t: WorkflowTables, d: str) -> str:
    return t.datasets[d]["format"]


STAGE_DOCUMENTS: dict[str, Document] = {
    "generate": lambda t, d, args: generate_job(t.datasets[d]),
    "prepare": lambda t, d, args: prepare_job(d, t.datasets[d]),
    "bm25_index": lambda t, d, args: bm25_job(t.cfg(d), "index"),
    "bm25_retrieve": lambda t, d, args: bm25_job(t.cfg(d), "retrieve"),
    "bm25_mine": lambda t, d, args: bm25_job(t.cfg(d), "mine"),
    "encode_corpus": lambda t, d, args: encode_job(t.cfg(d)),
    "build_index": lambda t, d, args: index_job(t.cfg(d), _seed(t)),
    # training (pipeline/workflow/training.py): train_dpr's document is also train_dpr_filtered's and
    # train_dpr_gist's, which differ in their inputs, not their settings, but for the snapshots
    # (selection.checkpoints) a folder keeps only where a selection reads it; printed for models/dpr
    # (train_dpr), for the β's folder (train_ccr), for --filter's detections (train_dpr_relabel)
    "init_zeroshot": lambda t, d, args: init_job(t.cfg(d)),
    "train_dpr": lambda t, d, args: train_job(
        t.cfg(d), "dpr", seed=_training_seed(t, args), snapshots="dpr" in selected_folders(t, d)
    ),
    "train_ccr": lambda t, d, args: train_job(
        t.cfg(d),
        "ccr",
        seed=_training_seed(t, args),
        beta=args.beta,
        snapshots=ccr_model(beta_tag(args.beta if args.beta is not None else t.cfg(d)["ccr"]["beta"]))
        in selected_folders(t, d),
    ),
    "train_dpr_rcl": lambda t, d, args: train_job(
        t.cfg(d),
        "dpr",
        seed=_training_seed(t, args),
        objective=t.cfg(d)["dpr"]["rcl"],
        snapshots=rcl_model(beta_tag(t.cfg(d)["dpr"]["rcl"]["beta"])) in selected_folders(t, d),
    ),
    "train_dpr_relabel": lambda t, d, args: train_job(
        t.cfg(d),
        "dpr",
        seed=_training_seed(t, args),
        relabel=t.cfg(d)["dpr"]["relabel"],
        snapshots=relabel_model(t.filter_files_name(d, args.filter)) in selected_folders(t, d),
    ),
    "select_model": lambda t, d, args: select_job(t.cfg(d)),
    # the sieve and the other filters
    "sieve_candidates": lambda t, d, args: candidates_job(t.cfg(d), _seed(t), _format(t, d)),
    "sieve_dev_candidates": lambda t, d, args: candidates_job(
        t.cfg(d), _seed(t), _format(t, d), injection=False
    ),
    "passage_sieve": lambda t, d, args: sieve_job(t.cfg(d), _seed(t)),
    "train_cross_encoder": lambda t, d, args: cross_encoder_job(t.cfg(d), _seed(t)),
    "filter_candidates": lambda t, d, args: filter_job(t.cfg(d), _seed(t), args.filter),
    # not a dataset's job: a clean.<name> entry's, named where the others name the dataset
    "clean_negatives": lambda t, name, args: clean_job(t.config, name),
    # AR2: a round's jobs of one AR2 run (--seed) and, for a round's training, one variant
    "ar2_mine": lambda t, d, args: ar2_mine_job(t.cfg(d)),
    "ar2_sieve": lambda t, d, args: ar2_sieve_job(t.cfg(d), _ar2_seed(t, d, args), _format(t, d)),
    "ar2_train_ranker": lambda t, d, args: ar2_ranker_job(t.cfg(d), _ar2_seed(t, d, args)),
    "ar2_train": lambda t, d, args: ar2_train_job(t.cfg(d), args.variant, _ar2_seed(t, d, args)),
    "ar2_select": lambda t, d, args: ar2_select_job(t.cfg(d)),
    "ar2_learning_curve": lambda t, d, args: ar2_curve_job(t.cfg(d)),
    # fusion and evaluation
    "fuse_rrf": lambda t, d, args: hybrid_job(t.cfg(d), "rrf"),
    "fuse_weighted": lambda t, d, args: hybrid_job(t.cfg(d), "wsum"),
    "evaluate": lambda t, d, args: evaluate_job(
        t, d, args.run.split("/")[0], allow_missing_queries=args.run == "bm25"
    ),
    # dense search over search.backend, dense mining, the AR2 dev searches over a round's embeddings
    "search_dense": lambda t, d, args: search_job(t.cfg(d), t.config["search"]["backend"]),
    "search_for_mining": lambda t, d, args: mining_search_job(t.cfg(d), t.config["search"]["backend"]),
    "mine_dense_negatives": lambda t, d, args: mine_job(t.cfg(d)),
    "ar2_search_dev": lambda t, d, args: search_job(t.cfg(d), "torch", amp=False),
    "ar2_search": lambda t, d, args: run_depth_job(t.cfg(d)),
}
STAGES = tuple(STAGE_DOCUMENTS)


def seed_value(text: str) -> int:
    """argparse type of --seed: a seed the settings take (pipeline.core.settings.base.Seed); -4 was printed
    into a document that every stage then refused."""
    try:
        return from_dict(SeedDocument, {"seed": int(text)}).seed
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a seed: {text!r} (a whole number, 0 to {2**32 - 1})") from None


SeedDocument = job_contract("SeedDocument", "The --seed of the printer.", **fields_of(Config, "seed"))


def main(argv: list[str] | None = None) -> int:
    """Print the settings document the workflow's job of a stage would pass, to run it by hand with
    --settings."""
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
        help="filter_candidates, train_dpr_relabel: the filter (default none)",
    )
    ap.add_argument(
        "--seed",
        type=seed_value,
        help="ar2_sieve, ar2_train_ranker, ar2_train: the AR2 run (default: its first seed); the training "
        "stages: the training seed (default: the config's seed)",
    )
    ap.add_argument("--beta", type=float, help="train_ccr: a β of the sweep (default ccr.beta)")
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
    document = STAGE_DOCUMENTS[args.stage](tables, args.dataset, args)
    json.dump(document, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    from pipeline.core.cli import run_main  # cli imports the logging set-up a rule file does not need

    run_main(main)

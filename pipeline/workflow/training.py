"""The settings document of a train_dense job (pipeline.core.settings.TrainJob), built from a dataset's
resolved config: the rules pass it to the stage as JSON, the stage validates it with its contracts, and
a run by hand reads the same document from a file (``--settings FILE``). No setting travels as a flag
or a path tag on the way.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from pipeline.core.config import load_config, validate_config
from pipeline.core.methods import method_table
from pipeline.core.recipes import dataset_configs
from pipeline.core.settings import RETRIEVER_KEYS, Objective, TrainSettings


def retriever_settings(config: dict, **overrides: Any) -> dict[str, Any]:
    """The model settings a retriever trains with: config ``model``'s, with ``overrides`` (CCR fine-tunes
    with cosine similarity at its own tau)."""
    model = {**config["model"], **overrides}
    return {key: model[key] for key in (*RETRIEVER_KEYS, "shared_towers")}


def train_job(
    config: dict,
    section: str,
    *,
    seed: int,
    beta: float | None = None,
    objective: dict | None = None,
    **fixed: Any,
) -> dict[str, Any]:
    """The document a ``section`` (dpr or ccr) training job of a dataset whose resolved config is
    ``config`` runs with. ``beta``: a CCR model of the β sweep (its own β instead of ccr.beta);
    ``objective``: DPR's loss when it is not NCE (dpr.rcl); ``fixed``: training settings a rule pins
    (AR2's per-round CCR drops queries whose positives fell out of its candidates)."""
    settings = {**config[section], **fixed}
    if beta is not None:
        settings["beta"] = beta
    document: dict[str, Any] = {
        "section": section,
        "seed": int(seed),
        "train": {key: settings[key] for key in TrainSettings.model_fields},
    }
    if section == "ccr":
        document["objective"] = {key: settings[key] for key in Objective.model_fields}
        document["retriever"] = retriever_settings(
            config, similarity="cosine", temperature=settings["temperature"]
        )
    else:
        if objective is not None:
            document["objective"] = {key: objective[key] for key in Objective.model_fields}
        document["retriever"] = retriever_settings(config)
    return document


def init_job(config: dict) -> dict[str, Any]:
    """The document of a retriever folder saved untrained (zero-shot, dpr.skip): its model settings.
    No seed: nothing random happens, and a seed would rebuild zero-shot whenever the seed changes."""
    return {"retriever": retriever_settings(config)}


def as_json(document: dict[str, Any]) -> str:
    """The document as the rule records and passes it: JSON with sorted keys, so equal settings give
    equal params (Snakemake reruns a job whose params change)."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"), allow_nan=False)


def main(argv: list[str] | None = None) -> int:
    """Print the settings document the workflow's job would pass, to train by hand with --settings."""
    ap = argparse.ArgumentParser(prog="python -m pipeline.workflow.training", description=main.__doc__)
    ap.add_argument("dataset", help="a dataset of the config")
    ap.add_argument(
        "section", choices=("dpr", "ccr", "rcl", "init"), help="the job: dpr, ccr, dpr_rcl, zero-shot"
    )
    ap.add_argument("--beta", type=float, help="ccr: a β of the sweep (default ccr.beta)")
    ap.add_argument("--seed", type=int, help="default: the config's seed")
    ap.add_argument("--configfile", nargs="*", default=[], help="overlays, as given to snakemake")
    args = ap.parse_args(argv)
    config = load_config(args.configfile)
    validate_config(config, methods=lambda: method_table(config))
    datasets = dataset_configs(config, methods=method_table)
    if args.dataset not in datasets:
        ap.error(f"unknown dataset {args.dataset!r} (declared: {', '.join(sorted(datasets))})")
    c = datasets[args.dataset]
    seed = config["seed"] if args.seed is None else args.seed
    if args.section == "init":
        document = init_job(c)
    elif args.section == "rcl":
        document = train_job(c, "dpr", seed=seed, objective=c["dpr"]["rcl"])
    else:
        document = train_job(c, args.section, seed=seed, beta=args.beta if args.section == "ccr" else None)
    json.dump(document, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    from pipeline.core.cli import run_main  # cli imports the logging set-up a rule file does not need

    run_main(main)

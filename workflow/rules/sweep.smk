# The noise sweep: one synthkb dataset per level of the false-negative dial (declared in `datasets`
# with fn_share / fn_paraphrase, listed in sweep.datasets), each run through the whole DAG, gathered
# into results/sweeps/noise.json + noise.png + noise.md by pipeline.evaluation.sweep. docs/evaluation.md.
import json
import shlex

from pipeline.workflow.checks import sweep_problems
from pipeline.workflow.evaluation import (
    selections_settings,
    tournament_detections,
    tournament_selections,
    tournament_settings,
)
from pipeline.workflow.paths import dataset_manifest, dataset_metrics, filter_report, sweep_output

SWEEP = config["sweep"]


def _check_sweep():
    problems = sweep_problems(workflow_tables)  # what `python -m pipeline.workflow.checks` says of the same config
    if problems:
        raise WorkflowError("sweep: " + "; ".join(problems))


def _sweep_sieves(wildcards):
    """The report of the sieve dpr_sieve trains on, per dataset: sieve-out rate, FN recall."""
    if "dpr_sieve" not in SWEEP["methods"]:
        return []
    return [filter_report(d, METHODS[d]["dpr_sieve"].negatives) for d in SWEEP["datasets"]]


rule noise_sweep:
    input:
        metrics=lambda wildcards: [dataset_metrics(d) for d in SWEEP["datasets"]],
        manifests=lambda wildcards: [dataset_manifest(d) for d in SWEEP["datasets"]],
        sieves=_sweep_sieves,
    output:
        json=sweep_output("noise", "json"),
        png=report(sweep_output("noise", "png"), category="Sweep"),
        md=sweep_output("noise", "md"),
    params:
        datasets=lambda wildcards, input: (_check_sweep() or " ".join(
            shlex.quote(f"{d}={m}:{f}") for d, m, f in zip(SWEEP["datasets"], input.metrics, input.manifests))),
        sieves=lambda wildcards, input: " ".join(
            ["--sieve"] + [shlex.quote(f"{d}={p}") for d, p in zip(SWEEP["datasets"], input.sieves)] if input.sieves else []),
        settings=" ".join(["--methods", *SWEEP["methods"], "--baseline", SWEEP["baseline"], "--oracle",
                           SWEEP["oracle"], "--metric", SWEEP["metric"]]
                          + (["--pairs", shlex.quote(json.dumps(SWEEP["pairs"]))] if SWEEP["pairs"] else [])),
    conda:
        CPU_ENV
    log:
        "logs/noise_sweep.log",
    shell:
        "python -m pipeline.evaluation.sweep --dataset {params.datasets} {params.sieves} {params.settings}"
        " --out-json {output.json:q} --out-png {output.png:q} --out-md {output.md:q} --log {log:q}"


# The tournament: every contender of tournament.methods at every level of tournament.levels
# (datasets), paired with tournament.baseline over seeds, against the oracle's gain and the untrained
# start -> results/sweeps/tournament.{json,md,png} by pipeline.evaluation.tournament. docs/evaluation.md.
rule tournament:
    input:
        metrics=lambda wildcards: [dataset_metrics(d) for d in config["tournament"]["levels"]],
        # each filtered contender's detection report: its drop rate, precision and recall per level
        reports=lambda wildcards: list(dict.fromkeys(r for *_, r in tournament_detections(workflow_tables))),
    output:
        json=sweep_output("tournament", "json"),
        md=sweep_output("tournament", "md"),
        png=report(sweep_output("tournament", "png"), category="Sweep"),
    params:
        settings=lambda wildcards: shlex.quote(tournament_settings(workflow_tables)),
        metrics=lambda wildcards, input: " ".join(
            shlex.quote(f"{d}={m}") for d, m in zip(config["tournament"]["levels"], input.metrics)),
        detections=lambda wildcards: " ".join(
            shlex.quote(f"{d}:{m}:{a}={r}") for d, m, a, r in tournament_detections(workflow_tables)),
    conda:
        CPU_ENV
    log:
        "logs/tournament.log",
    shell:
        "python -m pipeline.evaluation.tournament --settings {params.settings} --metrics {params.metrics}"
        " --detections {params.detections} --out-json {output.json:q} --out-md {output.md:q} --out-png {output.png:q} --log {log:q}"


# The selections' table: each model selection on dev among the tournament's contenders (<trained>_wise*),
# each level and seed: what it chose (start, snapshot, interpolation, trained), what that is worth on
# test against the trained model and the start, and the annotated dev labels' choice against the
# truth's -> results/sweeps/tournament_selections.{json,md} by pipeline.evaluation.selections.
rule tournament_selections:
    input:
        metrics=lambda wildcards: [dataset_metrics(d) for d in config["tournament"]["levels"]],
        # select_model's declared output; the selection.json beside it is what the table reads
        models=lambda wildcards: [r for *_, r, _ in tournament_selections(workflow_tables)],
    output:
        json=sweep_output("tournament_selections", "json"),
        md=sweep_output("tournament_selections", "md"),
    params:
        settings=lambda wildcards: shlex.quote(selections_settings(workflow_tables)),
        metrics=lambda wildcards, input: " ".join(
            shlex.quote(f"{d}={m}") for d, m in zip(config["tournament"]["levels"], input.metrics)),
        selections=lambda wildcards: " ".join(
            shlex.quote(f"{d}:{m}:{s}={record}") for d, m, s, _, record in tournament_selections(workflow_tables)),
    conda:
        CPU_ENV
    log:
        "logs/tournament_selections.log",
    shell:
        "python -m pipeline.evaluation.selections --settings {params.settings} --selections {params.selections}"
        " --metrics {params.metrics} --out-json {output.json:q} --out-md {output.md:q} --log {log:q}"

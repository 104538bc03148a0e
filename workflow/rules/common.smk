# Helpers shared by the rule files: dataset lookups, wildcard constraints, the method table, the β tag, the job's
# device and GPU resources, and the conda environments. The file layout is pipeline/workflow/paths.py: each rule
# file imports the path functions it names.
import re
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.logging import logger

from pipeline.core.config import ConfigError
from pipeline.core.cpu_features import cpu_flags, precision_banner
from pipeline.core.methods import (AR2_VARIANTS, BETA_RE, OTHER_FILTERS, beta_tag, ccr_model, closest, dpr_on,
                                   filtered_candidates, rcl_model, sieve_name)
from pipeline.workflow.checks import flags_after_targets, startup_checks
from pipeline.workflow.resources import SEGMENT_RETRIES, RuleResources
from pipeline.workflow.tables import alternatives, faiss_gpu_flag, job_device

# Snakemake 9 reads every argument after --configfile as a config file, so a target written after the
# overlays (`snakemake --configfile over.yaml results/d/metrics.json`) arrives here as an overlay: a
# metrics file would be "validated" as config (pages of unknown keys). Say what happened instead.
_TARGET_SUFFIXES = (".parquet", ".md", ".html", ".png", ".trec", ".tsv", ".log")
for _path in workflow.overwrite_configfiles:
    _target = os.path.relpath(str(_path))  # relative to the working directory, where targets are
    if Path(_target).parts[0] in ("results", "resources", "logs") or _target.endswith(_TARGET_SUFFIXES):
        raise WorkflowError(f"{_target} was read as a config file: it is a target. Snakemake reads every argument "
                            "after --configfile as a config file; put the targets first (snakemake --cores 2 "
                            f"{_target} --configfile OVERLAY) or end the config files with -- (snakemake "
                            f"--configfile OVERLAY -- {_target})")


# The advice above puts the targets after `--`, where argparse reads every word as a target: a flag
# written after them (`-- results/d/metrics.json -n`) was "No rule to produce -n", and the dry run the
# user asked for was not one. Snakemake's targets are not known while this file is read, so the
# command line is.
_late_flags = flags_after_targets(sys.argv)
if _late_flags:
    raise WorkflowError(_late_flags)

# Before anything reads the config (a `datasets` entry that is not a mapping was an AttributeError
# traceback below): the checks `python -m pipeline.workflow.checks` runs too (pipeline.workflow.checks), so
# a config it calls valid is one the rules accept. An entry of `methods` the rules cannot build would
# otherwise surface at DAG building as a missing input path; at start-up it names the key and the valid
# names instead.
try:
    workflow_tables = startup_checks(config, workflow.configfiles)
except ConfigError as err:
    raise WorkflowError(str(err)) from None
logger.info("sieve: " + precision_banner(config, cpu_flags(), os.environ))
# What the rules look up (pipeline/workflow/tables.py): every method name resolves once, per dataset,
# into a record (pipeline/core/methods.py: what it retrieves with, what its retriever trains on, with
# which β, filter or fusion); the rules read the records. β tags and the model folder names come from
# the same module.
METHODS, CCR_BETAS = workflow_tables.methods, workflow_tables.ccr_betas  # name -> record, β tag -> β
DATASETS, SYNTHETIC, DECLARED = workflow_tables.datasets, workflow_tables.synthetic, workflow_tables.declared
cfg, dataset_setting, gpu_resources = (workflow_tables.cfg, workflow_tables.dataset_setting,
                                      workflow_tables.gpu_resources)
runs_of, training_seeds = workflow_tables.runs_of, workflow_tables.training_seeds
seed_free_methods, seeded_model = workflow_tables.seed_free_methods, workflow_tables.seeded_model
# Memory and disk that grow with the data, computed from the dataset's sizes (its manifest, else the
# published ones) by pipeline/workflow/resources.py: `**sized(rule, gpu_resources(section))`.
sized = RuleResources(workflow_tables.cfg).of


wildcard_constraints:
    dataset=alternatives(list(DATASETS)),
    split="train|dev|test",
    method="[A-Za-z0-9_.]+",


# The {stag} wildcard: the sieve tags in use, and '' (the defaults' paths, as without a tag) so that a
# default path asked for under other settings reaches check_sieve_tag's message, not a bare "no rule".
# Wrapped in a group: an empty constraint would read as none (Snakemake's default, one or more characters).
_SIEVE_TAGS = {workflow_tables.sieve_tags(d, decision, teacher) for d in DATASETS
               for decision in (False, True) for teacher in (False, True)}
SIEVE_TAG_RE = "(?:" + "|".join(sorted({""} | {re.escape(tag) for tag in _SIEVE_TAGS})) + ")"
# What train_dpr_filtered trains on: a filter's negatives under a dataset's sieve settings.
FILTERED_NEGS_RE = f"(?:{'|'.join(OTHER_FILTERS)}|{sieve_name(BETA_RE)}){SIEVE_TAG_RE}"


wildcard_constraints:
    stag=SIEVE_TAG_RE,


# ---- devices, GPUs, software environments (docs/cluster.md) ---------------------------------------
# A job's GPU count comes from the config (`<section>.gpus`, the rule's default) or, on a cluster, from
# the profile's `set-resources`, which overrides the rule's resources. Device, FAISS flag and conda
# environment therefore follow the job's resources, never the config alone: a GPU the profile reserved
# is used, and a job without GPUs never grabs one it happens to see.

# gpu_resources, job_device and faiss_gpu_flag: pipeline/workflow/tables.py.


# `--software-deployment-method conda`: every rule that runs Python names one of these (relative to
# this folder). Rules that can hold GPUs take job_env, which picks the CUDA build exactly when the job
# holds GPUs (their `device` param): a cluster chooses it where it gives a rule GPUs, in the profile's
# set-resources, and the CPU build stays everywhere else.
CONDA_ENVS = {"cpu": "../../envs/sieve-cpu.yaml", "cuda": "../../envs/sieve-cuda.yaml"}
CPU_ENV = CONDA_ENVS["cpu"]


def job_env(wildcards, params):
    """conda function for rules with a `device` param (job_device)."""
    return CONDA_ENVS[params.device]

# Helpers shared by the rule files: dataset lookups, wildcard constraints, the method table, the file layout (path
# functions), the β tag, the job's device and GPU resources, and the conda environments.
import re
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.logging import logger

from pipeline.core.config import ConfigError, check_config_files, validate_config
from pipeline.core.cpu_features import cpu_flags, precision_banner
from pipeline.core.methods import (AR2_VARIANTS, BETA_RE, OTHER_FILTERS, beta_tag, ccr_betas, ccr_model, closest, dpr_on,
                                   filter_negatives, filtered_candidates, method_table, rcl_model, runs, sieve_name,
                                   sieve_tag)
from pipeline.core.recipes import dataset_configs

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


# Before anything reads the config (a `datasets` entry that is not a mapping was an AttributeError
# traceback below): each config file for keys given twice, then the contract. An entry of `methods` the
# rules cannot build would otherwise surface at DAG building as a missing input path; at start-up it
# names the key and the valid names instead. Then each dataset's config: the top-level sections with
# its recipe merged in (pipeline.core.recipes), validated the same way.
try:
    check_config_files(workflow.configfiles)  # what Snakemake's reading let pass: a key given twice
    validate_config(config, methods=lambda: method_table(config))  # once defaults are in (reads ccr.beta)
    DATASET_CONFIGS = dataset_configs(config, methods=method_table)
except ConfigError as err:
    raise WorkflowError(str(err)) from None
logger.info("sieve: " + precision_banner(config, cpu_flags(), os.environ))
METHODS = {d: method_table(c) for d, c in DATASET_CONFIGS.items()}  # method name -> record
RUNS = {d: runs(table) for d, table in METHODS.items()}  # run folder -> record (wildcard {method} is a run)
CCR_BETAS = {d: ccr_betas(c) for d, c in DATASET_CONFIGS.items()}  # β tag -> β


DATASETS = config["datasets"]  # validated above: every entry a mapping with a format
SYNTHETIC = [name for name, spec in DATASETS.items() if spec.get("format") == "synthkb"]
DECLARED = [name for name, spec in DATASETS.items() if spec.get("format") != "synthkb"]


def _alternatives(names):
    # A regex that matches none of the names when the list is empty.
    return "|".join(names) if names else "(?!x)x"


wildcard_constraints:
    dataset=_alternatives(list(DATASETS)),
    split="train|dev|test",
    method="[A-Za-z0-9_.]+",


def eval_split(dataset):
    return DATASETS[dataset].get("eval_split") or config["eval"]["split"]  # schema: null = eval.split


# The file layout (every path a rule names): pipeline/workflow/paths.py.
from pipeline.workflow.paths import *  # noqa: F403  (the rules name their files through these)


# ---- the method table ------------------------------------------------------------------------------
# Every method name resolves once, per dataset, into a record (pipeline/core/methods.py: what it
# retrieves with, what its retriever trains on, with which β, filter or fusion); the rules read the
# records. β tags and the model folder names come from the same module (built above, at validation).


def cfg(d):
    """The config a dataset's jobs run with: the top-level sections under its recipe."""
    return DATASET_CONFIGS[d]


def sieve_source(d):
    """The negatives the sieve reads: a method's (mined; its run name carries its β) or a file's name."""
    source = cfg(d)["sieve"]["source"]
    return METHODS[d][source].run if source in METHODS[d] else source


def sieve_tags(d, decision=False):
    """The sieve settings of dataset ``d`` as they appear in its paths (methods.sieve_tag): those of
    the candidates, or with ``decision`` also the sieve rule's own (its negatives, comparison, figures)."""
    return sieve_tag(cfg(d)["sieve"], sieve_source(d), decision=decision)


def filter_files_name(d, name):
    """The name of filter ``name``'s files (decisions, report) under dataset ``d``'s sieve settings
    (``sieve``, the sieve dpr_sieve trains on, is a row of its own in the comparison)."""
    return filter_negatives(name, cfg(d)["sieve"], sieve_source(d))


def check_sieve_tag(wildcards, decision=False):
    """A path's sieve tag must be the config's: the rule runs with the config's sieve settings."""
    expected = sieve_tags(wildcards.dataset, decision)
    if wildcards.stag != expected:
        raise ValueError(f"dataset {wildcards.dataset!r}: a path with sieve tag {wildcards.stag!r} was asked for, but "
                         f"its sieve settings give {expected!r}: ask for the same path with {expected!r} where the tag goes "
                         f"(sieve/comparison{expected}.md, figures{expected}/, negatives/oracle{expected}.train.parquet), "
                         "or set the sieve settings that path was built with")


# The {stag} wildcard: the sieve tags in use, and '' (the defaults' paths, as without a tag) so that a
# default path asked for under other settings reaches check_sieve_tag's message, not a bare "no rule".
# Wrapped in a group: an empty constraint would read as none (Snakemake's default, one or more characters).
SIEVE_TAG_RE = "(?:" + "|".join(sorted({""} | {re.escape(sieve_tags(d, dec)) for d in DATASETS for dec in (0, 1)})) + ")"
# What train_dpr_filtered trains on: a filter's negatives under a dataset's sieve settings.
FILTERED_NEGS_RE = f"(?:{'|'.join(OTHER_FILTERS)}|{sieve_name(BETA_RE)}){SIEVE_TAG_RE}"


wildcard_constraints:
    stag=SIEVE_TAG_RE,


def dataset_setting(section, key):
    """A params/resources/threads function: config ``section.key`` of the job's dataset."""
    return lambda wildcards: cfg(wildcards.dataset)[section][key]


def run_of(d, name):
    """The run folder of method ``name`` in dataset ``d`` (its name plus what tells it apart, e.g. β)."""
    return METHODS[d][name].run


def runs_of(kind, where=lambda m: True):
    """Run folders of that kind of method in any dataset (wildcard constraints)."""
    return sorted({run for d in DATASETS for run, m in RUNS[d].items() if m.kind == kind and where(m)})


def training_seeds():
    """The training seeds of the trained dense methods (config seeds; null = [seed])."""
    return [int(s) for s in config["seeds"]] if config["seeds"] else [int(config["seed"])]


def ar2_seeds(d):
    """AR2 seeds of dataset ``d`` (ar2.seeds, else the training seeds). Each seed is a complete AR2 run."""
    seeds = cfg(d)["ar2"]["seeds"]
    return [int(s) for s in seeds] if seeds else training_seeds()


def seeded_runs(d):
    """Runs with a folder per training seed (with several seeds): the trained dense methods and their
    hybrids."""
    if len(training_seeds()) == 1:
        return []
    return [run for run, m in RUNS[d].items() if m.kind in ("dense", "hybrid") and m.random]


def seed_free_methods(d):
    """Method names with one run whatever the seeds: bm25, zeroshot and their hybrids."""
    return [name for name, m in METHODS[d].items() if m.kind in ("bm25", "dense", "hybrid") and not m.random]


def seeded_model(model, seed):
    """The retriever folder of ``model`` trained with ``seed``: the top-level seed's is ``model``
    itself (so one seed changes no path), another seed's ``model-s<seed>``. With the wildcard
    "{seed}" it gives the pattern of the *_seed rules."""
    if str(seed) == "{seed}":
        return f"{model}-s{seed}"
    return model if int(seed) == int(config["seed"]) else f"{model}-s{seed}"


# ---- devices, GPUs, software environments (docs/cluster.md) ---------------------------------------
# A job's GPU count comes from the config (`<section>.gpus`, the rule's default) or, on a cluster, from
# the profile's `set-resources`, which overrides the rule's resources. Device, FAISS flag and conda
# environment therefore follow the job's resources, never the config alone: a GPU the profile reserved
# is used, and a job without GPUs never grabs one it happens to see.

def gpu_resources(section, used=lambda c, wildcards: True):
    """Resources of a rule sized by `<section>.gpus` of the job's dataset (0 where ``used(config,
    wildcards)`` says the job runs no model on it), and its `<section>.mem_mb`."""
    def gpus(wildcards):
        c = cfg(wildcards.dataset)
        return c[section]["gpus"] if used(c, wildcards) else 0
    # `gpus`: the project's resource name (`--resources gpus=1` serialises GPU jobs);
    # `gpu`: what the SLURM executor plugin turns into sbatch --gpus.
    return {"mem_mb": dataset_setting(section, "mem_mb"), "gpus": gpus, "gpu": gpus}


def _job_gpus(resources):
    return int(getattr(resources, "gpus", 0) or 0)


def job_device(wildcards, resources):
    """params function: 'cuda' when the job holds GPUs, else 'cpu'."""
    return "cuda" if _job_gpus(resources) > 0 else "cpu"


def faiss_gpu_flag(wildcards, resources):
    """params function: '--no-gpu' unless the job holds GPUs (pipeline.retrieval.index/search)."""
    return "" if _job_gpus(resources) > 0 else "--no-gpu"


# `--software-deployment-method conda`: every rule that runs Python names one of these (relative to
# this folder). Rules that can hold GPUs take job_env, which picks the CUDA build exactly when the job
# holds GPUs (their `device` param): a cluster chooses it where it gives a rule GPUs, in the profile's
# set-resources, and the CPU build stays everywhere else.
CONDA_ENVS = {"cpu": "../../envs/sieve-cpu.yaml", "cuda": "../../envs/sieve-cuda.yaml"}
CPU_ENV = CONDA_ENVS["cpu"]


def job_env(wildcards, params):
    """conda function for rules with a `device` param (job_device)."""
    return CONDA_ENVS[params.device]

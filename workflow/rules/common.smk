# Helpers shared by the rule files: dataset lookups, wildcard constraints, the file layout (path
# functions), the β tag, the job's device and GPU resources, and the conda environments.
from decimal import Decimal

from snakemake.exceptions import WorkflowError

from pipeline.core.config import ConfigError, validate_config
from pipeline.core.recipes import dataset_configs
from pipeline.sieve.filters import FILTERS

DATASETS = config["datasets"]
SYNTHETIC = [name for name, spec in DATASETS.items() if spec["format"] == "synthkb"]
DECLARED = [name for name, spec in DATASETS.items() if spec["format"] != "synthkb"]


def _alternatives(names):
    # A regex that matches none of the names when the list is empty.
    return "|".join(names) if names else "(?!x)x"


wildcard_constraints:
    dataset=_alternatives(list(DATASETS)),
    split="train|dev|test",
    method="[A-Za-z0-9_]+",


def eval_split(dataset):
    return DATASETS[dataset].get("eval_split") or config["eval"]["split"]  # schema: null = eval.split


# The file layout (every path a rule names): workflow/rules/paths.smk, included here.
include: "paths.smk"


# ---- the β tag -------------------------------------------------------------------------------------

# What a β tag looks like in a path: the wildcard constraint of every rule with a {beta}.
BETA_RE = r"[0-9]+(\.[0-9]+)?"


def beta_tag(beta):
    """How a CCR β appears in paths: 0 -> '0', 0.5 -> '0.5', 1e-4 -> '0.0001', 1e-7 -> '0.0000001'.

    Positional notation only (the wildcard is digits and one dot) and exact: repr gives the shortest
    decimal that reads back as the same float, so train_ccr's --beta, read from the path, is the
    configured β and two different β never share a model folder.
    """
    text = format(Decimal(repr(float(beta))), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def ccr_model(tag):
    """The CCR model folder name for a β tag (a value of beta_tag, or the wildcard "{beta}")."""
    return f"dpr_ccr_b{tag}"


def sieve_name(tag):
    """The sieve's negatives and filter name for a β tag (a value of beta_tag, or "{beta}")."""
    return f"sieve_b{tag}"


# Dense methods and the retriever folder (results/{dataset}/models/{model}) each one searches with.
# `zeroshot` is the pretrained base saved as a retriever folder; AR2 methods pick their round themselves.
# The false-negative filters other than the sieve (pipeline.sieve.filters); each also cleans the
# negatives of a DPR control: method dpr_<filter> trains on negatives/<filter>.train.parquet.
OTHER_FILTERS = tuple(name for name in FILTERS if name != "sieve")


def _dense_method_models(c):
    """Dense methods -> the retriever folder each one searches with, under config ``c``."""
    models = {
        "zeroshot": "zeroshot",
        "dpr": "dpr",
        "dpr_ccr": ccr_model(beta_tag(c["ccr"]["beta"])),
        # DPR trained on the sieve's kept negatives: the sieve without AR2.
        "dpr_sieve": dpr_on(sieve_name(beta_tag(c["ccr"]["beta"]))),
    }
    # DPR trained on the same candidates cleaned by another filter (dpr_oracle: the true false
    # negatives removed; dpr_none: all candidates, the noisy control on the same pool).
    models.update({f"dpr_{name}": dpr_on(name) for name in OTHER_FILTERS})
    # DPR trained on the negatives another dense method mined (mining.smk): dpr_mined_dpr, ...
    models.update({f"dpr_mined_{name}": f"dpr_mined_{name}" for name in list(models)})
    return models


def dpr_on(negatives_name):
    """The model folder of DPR trained on negatives/<negatives_name>.train.parquet."""
    return f"dpr_{negatives_name}"


# AR2 methods -> their variant folder (results/{dataset}/ar2/{variant}/seed{seed}/); see ar2.smk.
AR2_METHODS = {"ar2": "plain", "ar2_sieve": "sieve", "ar2_simans": "simans",
               "ar2_simans_sieve": "simans_sieve"}


# Hybrid methods: BM25 fused with a dense method's run (hybrid.smk): hybrid_rrf_<dense>, hybrid_wsum_<dense>.
HYBRID_FUSIONS = ("rrf", "wsum")


def _hybrids_of(dense):
    return {f"hybrid_{fusion}_{name}": (fusion, name) for fusion in HYBRID_FUSIONS for name in dense}


def _known_methods(c):
    """Every method the rules build a run for under config ``c``: bm25 (bm25.smk), the dense,
    hybrid and AR2 methods."""
    dense = _dense_method_models(c)
    return ["bm25", *dense, *_hybrids_of(dense), *AR2_METHODS]


# An entry of `methods` the rules cannot build would otherwise surface at DAG building as a missing
# input path; at start-up it names the key and the valid names instead. Then each dataset's config:
# the top-level sections with its recipe merged in (pipeline.core.recipes), validated the same way.
try:
    validate_config(config, methods=lambda: _known_methods(config))  # once defaults are in (reads ccr.beta)
    DATASET_CONFIGS = dataset_configs(config, methods=_known_methods)
except ConfigError as err:
    raise WorkflowError(str(err)) from None


def cfg(d):
    """The config a dataset's jobs run with: the top-level sections under its recipe."""
    return DATASET_CONFIGS[d]


def dataset_setting(section, key):
    """A params/resources/threads function: config ``section.key`` of the job's dataset."""
    return lambda wildcards: cfg(wildcards.dataset)[section][key]


def dense_method_models(d):
    """Dense methods of dataset ``d`` -> the retriever folder each one searches with."""
    return _dense_method_models(cfg(d))


def any_dense_method():
    """The dense method names of every dataset (wildcard constraints)."""
    return sorted({m for d in DATASETS for m in dense_method_models(d)})


def hybrid_methods(d):
    """hybrid_<fusion>_<dense method> -> (fusion, dense method), for every dense method of ``d``."""
    return _hybrids_of(dense_method_models(d))


def training_seeds():
    """The training seeds of the trained dense methods (config seeds; null = [seed])."""
    return [int(s) for s in config["seeds"]] if config["seeds"] else [int(config["seed"])]


def ar2_seeds(d):
    """AR2 seeds of dataset ``d`` (ar2.seeds, else the training seeds). Each seed is a complete AR2 run."""
    seeds = cfg(d)["ar2"]["seeds"]
    return [int(s) for s in seeds] if seeds else training_seeds()


# Methods with nothing random in them: one run, whatever the seeds (a baseline of every seed's pair).
SEED_FREE_METHODS = ("bm25", "zeroshot")


def seeded_dense_methods(d):
    """Dense methods with a run per seed: the trained ones, when there are several training seeds."""
    if len(training_seeds()) == 1:
        return []
    return [m for m in dense_method_models(d) if m not in SEED_FREE_METHODS]


def seed_free_methods(d):
    """Methods with one run whatever the seeds: bm25, zeroshot and their hybrids."""
    return [*SEED_FREE_METHODS, *(name for name, (_, base) in hybrid_methods(d).items() if base in SEED_FREE_METHODS)]


def seeded_methods(d):
    """Methods with a run folder per training seed: the seeded dense methods and their hybrids."""
    dense = seeded_dense_methods(d)
    return dense + [name for name, (_, base) in hybrid_methods(d).items() if base in dense]


def any_seeded_method():
    """The seeded method names of every dataset (wildcard constraints)."""
    return sorted({m for d in DATASETS for m in seeded_methods(d)})


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

def gpu_resources(section, used=lambda c: True):
    """Resources of a rule sized by `<section>.gpus` of the job's dataset (0 where ``used(config)``
    says the rule will not train), and its `<section>.mem_mb`."""
    def gpus(wildcards):
        c = cfg(wildcards.dataset)
        return c[section]["gpus"] if used(c) else 0
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
CONDA_ENVS = {"cpu": "../envs/sieve-cpu.yaml", "cuda": "../envs/sieve-cuda.yaml"}
CPU_ENV = CONDA_ENVS["cpu"]


def job_env(wildcards, params):
    """conda function for rules with a `device` param (job_device)."""
    return CONDA_ENVS[params.device]

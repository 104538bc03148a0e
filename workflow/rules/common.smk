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


# ---- the file layout -------------------------------------------------------------------------------
# Every rule names its files through these functions, so a location is written once. Called with
# wildcard names ("{dataset}", "{split}", ...) they return the rule's patterns; called with values, the
# concrete paths that input functions ask for. logs/ and benchmarks/ are per rule and stay in the rules.

# resources/{dataset}/: the canonical tables of a dataset (README "Data layout", pipeline.core.schemas).
def dataset_dir(d):
    return f"resources/{d}"


def corpus(d):
    return f"{dataset_dir(d)}/corpus.parquet"


def queries(d, split):
    return f"{dataset_dir(d)}/queries.{split}.parquet"


def qrels(d, split):
    return f"{dataset_dir(d)}/qrels.{split}.parquet"


def qrels_all(d, split):
    """synthkb only: every passage that states the answer (qrels holds the generating one)."""
    return f"{dataset_dir(d)}/qrels_all.{split}.parquet"


def shipped_negatives(d):
    """Negatives that come with the dataset (DPR's hard_negative_ctxs), not mined ones."""
    return f"{dataset_dir(d)}/negatives.train.parquet"


def dataset_manifest(d):
    return f"{dataset_dir(d)}/manifest.json"


# downloads/{dataset}/: fetched sources. pipeline.data.readers.sources computes the same locations
# for the inputs of prepare_dataset; these name the download rules' outputs.
def download_file(d, role):
    return f"downloads/{d}/{role}"


def archive_file(d, name):
    return f"downloads/{d}/archives/{name}"


# results/{dataset}/: everything derived.
def bm25_index(d):
    return f"results/{d}/bm25/index"


def run_dir(d, method, seed=None):
    """A method's run folder; an AR2 method has one per seed (results/{d}/{method}/seed{s})."""
    return f"results/{d}/{method}" if seed is None else f"results/{d}/{method}/seed{seed}"


def run(d, method, split, seed=None):
    return f"{run_dir(d, method, seed)}/run.{split}.parquet"


def trec_run(d, method, split, seed=None):
    return f"{run_dir(d, method, seed)}/run.{split}.trec"


def method_metrics(d, method, seed=None):
    return f"{run_dir(d, method, seed)}/metrics.json"


def ar2_info(d, method, seed):
    """The round an AR2 seed's run reports (written by ar2_select)."""
    return f"{run_dir(d, method, seed)}/info.json"


def dataset_metrics(d, ext="json"):
    """Every method side by side: metrics.json, .md, .html."""
    return f"results/{d}/metrics.{ext}"


def negatives(d, source):
    """Mined (bm25) or sieved (sieve_b<β>) candidates, one row per candidate."""
    return f"results/{d}/negatives/{source}.parquet"


def mining_run(d, method, split="train"):
    """A dense method's ranking of the train queries that mine_dense_negatives mines from."""
    return f"results/{d}/negatives/{method}.run.{split}.parquet"


def train_negatives(d, source):
    """The kept negatives of a sieve, in the layout of negatives(d, 'bm25')."""
    return f"results/{d}/negatives/{source}.train.parquet"


def model_dir(d, name):
    return f"results/{d}/models/{name}"


def retriever(d, name):
    """retriever.json, written last: the model folder is complete once it exists."""
    return f"{model_dir(d, name)}/retriever.json"


def ranker(d, name):
    return f"{model_dir(d, name)}/ranker.json"


def embeddings_dir(d, model):
    return f"results/{d}/embeddings/{model}"


def embeddings(d, model):
    """The gathered embeddings' manifest (the shards sit beside it)."""
    return f"{embeddings_dir(d, model)}/manifest.json"


def embedding_shard(d, model, shard, shards, ext):
    return f"{embeddings_dir(d, model)}/shard{shard}of{shards}.{ext}"


def index_dir(d, model):
    return f"results/{d}/index/{model}"


def index(d, model):
    return f"{index_dir(d, model)}/index.json"


def index_part(d, model, part, parts, ext):
    return f"{index_dir(d, model)}/shard{part}of{parts}.{ext}"


def sieve_dir(d):
    return f"results/{d}/sieve"


def candidates(d):
    """The candidates every filter judges, with their false-negative labels."""
    return f"{sieve_dir(d)}/candidates.parquet"


def filter_decisions(d, name):
    return f"{sieve_dir(d)}/{name}/decisions.parquet"


def filter_report(d, name):
    return f"{sieve_dir(d)}/{name}/report.json"


def sieve_losses(d, name):
    return f"{sieve_dir(d)}/{name}/losses.parquet"


def comparison(d, ext):
    return f"{sieve_dir(d)}/comparison.{ext}"


def sweep_output(name, ext):
    """A sweep over datasets (sweep.smk): results/sweeps/{name}.{json,png}."""
    return f"results/sweeps/{name}.{ext}"


def tradeoff(d, ext):
    """FN recall vs TN retention of the filters with a continuous score (sieve_tradeoff)."""
    return f"{sieve_dir(d)}/tradeoff.{ext}"


def figure(d, name):
    return f"results/{d}/figures/{name}"


def ar2_seed_dir(d, variant, seed):
    return f"results/{d}/ar2/{variant}/seed{seed}"


def ar2_round_json(d, variant, seed, r):
    """Written last by an AR2 round: the round is complete once it exists."""
    return f"{ar2_seed_dir(d, variant, seed)}/round{r}/round.json"


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

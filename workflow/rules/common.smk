# Helpers shared by the rule files: dataset lookups and wildcard constraints.
from pipeline.core.config import dataset_config

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


def dataset_spec(wildcards):
    return dataset_config(config, wildcards.dataset)


def eval_split(dataset):
    return DATASETS[dataset].get("eval_split", config["eval"]["split"])


def canonical(dataset, *names):
    """Paths of the canonical tables of a dataset (resources/{dataset}/<name>.parquet)."""
    return [f"resources/{dataset}/{name}.parquet" for name in names]


def beta_tag(beta):
    """How a CCR β appears in paths: 0.5 -> '0.5', 0 -> '0', 1e-4 -> '0.0001'."""
    return f"{float(beta):g}" if float(beta) >= 1e-4 else f"{float(beta):.10f}".rstrip("0")


# Dense methods and the retriever folder (results/{dataset}/models/{model}) each one searches with.
# `zeroshot` is the pretrained base saved as a retriever folder; AR2 methods pick their round themselves.
def dense_method_models():
    return {
        "zeroshot": "zeroshot",
        "dpr": "dpr",
        "dpr_ccr": f"dpr_ccr_b{beta_tag(config['ccr']['beta'])}" if "ccr" in config else None,
    }


# AR2 methods -> their variant folder (results/{dataset}/ar2/{variant}/seed{seed}/); see ar2.smk.
AR2_METHODS = {"ar2": "plain", "ar2_sieve": "sieve", "ar2_simans": "simans",
               "ar2_simans_sieve": "simans_sieve"}


def ar2_seeds():
    """AR2 seeds (config ar2.seeds; null = the top-level seed). Each seed is a complete AR2 run."""
    seeds = config.get("ar2", {}).get("seeds")
    return [int(config["seed"])] if not seeds else [int(s) for s in seeds]

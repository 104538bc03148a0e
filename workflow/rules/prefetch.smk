# Prefetch: everything a dataset needs from the network, fetched where the user submits, so that no job
# on a compute node (which has none) reaches it. `snakemake --cores 1 prefetch` fetches what every
# declared dataset needs; `snakemake --cores 1 resources/prefetch/nq.json` one dataset's: its source
# downloads (data.smk's rule download, checksummed) and every base model its recipe names by a hub name
# (model.base, sieve.cross_encoder.base, ar2.ranker.base) into resources/models/<name>/. Both are
# localrules, so `snakemake --profile slurm results/nq/metrics.json` runs them on the submitting node
# before any job is queued. docs/cluster.md, "Run the downloads on a login node".
import shlex

from pipeline.data.models import MARKER, MODELS_DIR, is_hub_name, local_folder
from pipeline.data.readers import sources as data_sources
from pipeline.workflow.paths import prefetch_summary

# Jobs read models from folders here, never from the hub: a missing file is then one error naming the
# prefetch command (pipeline.data.models.require_local), not a wait on a network the node lacks. Set
# while the Snakefile is read, so every job inherits it: on this machine and, as a SLURM job reads the
# Snakefile again before it runs its command, on the cluster.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

MODEL_SECTIONS = ("model", "sieve.cross_encoder", "ar2.ranker")
HUB_MODELS = {}  # local folder -> the hub name it is fetched from


def model_node(c, section):
    """The node of a dataset config under ``section`` (dotted: "sieve.cross_encoder"), which names its `base`;
    content.smk's fingerprints read it too."""
    node = c
    for key in section.split("."):
        node = node[key]
    return node


# A base named by a hub name becomes its local folder in each dataset's resolved config, so every job's
# command and settings document carry the folder (and the fetch is an input of the jobs that read it:
# content.smk's base_fingerprint). 'minilm' and a local folder stay as they are.
for _d, _c in workflow_tables.dataset_configs.items():
    for _section in MODEL_SECTIONS:
        _node = model_node(_c, _section)
        if is_hub_name(_node["base"]):
            HUB_MODELS[local_folder(_node["base"])] = _node["base"]
            _node["base"] = local_folder(_node["base"])


def fetched_model(folder):
    """The file that marks ``folder`` (a HUB_MODELS key) complete: fetch_model's output."""
    return f"{folder}/{MARKER}"


def dataset_models(d):
    """The prefetched model folders dataset ``d``'s jobs read."""
    return sorted({model_node(cfg(d), s)["base"] for s in MODEL_SECTIONS} & set(HUB_MODELS))


def dataset_downloads(d):
    """The files dataset ``d``'s sources download (an archive once, whatever members it gives)."""
    if d not in DECLARED:
        return []
    return sorted({data_sources.url_file(s.url) for s in data_sources.dataset_sources(config, d).values() if s.url})


localrules:
    download,
    fetch_model,
    prefetch_dataset,
    prefetch,


rule fetch_model:
    output:
        fetched_model(f"{MODELS_DIR}/{{model}}"),
    params:
        name=lambda w: HUB_MODELS[local_folder(w.model)],
        folder=lambda w: local_folder(w.model),
    conda:
        CPU_ENV
    log:
        "logs/fetch_model/{model}.log",
    wildcard_constraints:
        model=alternatives([re.escape(name) for name in sorted(set(HUB_MODELS.values()))] or ["(?!)"]),
    shell:
        "python -m pipeline.data.models --name {params.name:q} --out-dir {params.folder:q} --log {log:q}"


rule prefetch_dataset:
    input:
        downloads=lambda w: dataset_downloads(w.dataset),
        models=lambda w: [fetched_model(folder) for folder in dataset_models(w.dataset)],
    output:
        prefetch_summary("{dataset}"),
    params:
        downloads=lambda w, input: " ".join(shlex.quote(path) for path in input.downloads),
        models=lambda w, input: " ".join(shlex.quote(os.path.dirname(path)) for path in input.models),
    conda:
        CPU_ENV
    log:
        "logs/prefetch_dataset/{dataset}.log",
    shell:
        "python -m pipeline.data.prefetch --dataset {wildcards.dataset} --download {params.downloads}"
        " --model {params.models} --out {output:q} --log {log:q}"


# Every declared dataset's downloads and models: `snakemake --cores 4 prefetch`.
rule prefetch:
    input:
        [prefetch_summary(d) for d in DATASETS],

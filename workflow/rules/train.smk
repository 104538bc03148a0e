# Dense retrievers: the zero-shot base, DPR (NCE warm-up on BM25 negatives), CCR fine-tuning.
# Each writes results/{dataset}/models/{model}/ (retriever.json last; train_log.jsonl, train_info.json);
# training checkpoints live in models/{model}.ckpt/ until the run succeeds. See docs/training.md.
import shlex

from pipeline.core.settings import Objective, TrainSettings, to_flags

_RETRIEVER_KEYS = ("pooling", "similarity", "temperature", "query_max_len", "passage_max_len")


def retriever_flags(**overrides):
    """The retriever settings of config `model` as train_dense flags (CCR overrides similarity and τ)."""
    m = {**config["model"], **overrides}
    out = [f"--{key.replace('_', '-')} {shlex.quote(str(m[key]))}" for key in _RETRIEVER_KEYS]
    return " ".join(out + ([] if m["shared_towers"] else ["--separate-towers"]))


def train_flags(section, seed=None, **overrides):
    """train_dense flags from config section `dpr` or `ccr`: one per field of its contract
    (pipeline.core.settings), spelled as the CLI's parser reads them. train_ccr passes the β of its
    path, the *_seed rules the seed of theirs (default: the top-level seed)."""
    s = {**config[section], **overrides}
    flags = [f"--seed {config['seed'] if seed is None else int(seed)}", to_flags(TrainSettings, s)]
    if section == "ccr":
        flags += [to_flags(Objective, s), retriever_flags(similarity="cosine", temperature=s["temperature"])]
    else:
        flags.append(retriever_flags())
    return " ".join(flags)


# One process on CPU or one GPU; torchrun DDP (one process per GPU) when more are reserved. The `--`
# keeps torchrun from parsing our flags (it accepts abbreviations: --log would match its --log-dir).
_LAUNCH = ('device=cpu; launch="python"; '
           'if [ {resources.gpus} -gt 0 ]; then device=cuda; fi; '
           'if [ {resources.gpus} -gt 1 ]; then '
           'launch="torchrun --standalone --nproc_per_node={resources.gpus}"; fi; '
           '$launch -m pipeline.training.train_dense -- --device $device ')

_TRAIN_INPUTS = dict(
    queries=queries("{dataset}", "train"),
    qrels=qrels("{dataset}", "train"),
    corpus=corpus("{dataset}"),
    negatives=negatives("{dataset}", "bm25"),
)


rule init_zeroshot:
    output:
        retriever("{dataset}", "zeroshot"),
    params:
        base=config["model"]["base"],
        settings=retriever_flags(),
    conda:
        CPU_ENV
    log:
        "logs/init_zeroshot/{dataset}.log",
    benchmark:
        "benchmarks/init_zeroshot/{dataset}.tsv"
    resources:
        mem_mb=2000,
    shell:
        "python -m pipeline.training.train_dense --init-only --base {params.base} {params.settings}"
        " --out $(dirname {output}) --log {log}"


def _dpr_inputs(wildcards):
    return {} if config["dpr"]["skip"] else _TRAIN_INPUTS


def _dpr_command():
    base = shlex.quote(config["model"]["base"])
    if config["dpr"]["skip"]:
        return f"--init-only --base {base} {retriever_flags()}"
    return (f"--init {base} --queries {{input.queries}} --qrels {{input.qrels}}"
            " --negatives {input.negatives} --corpus {input.corpus} {params.settings}")


rule train_dpr:
    input:
        unpack(_dpr_inputs),
    output:
        retriever("{dataset}", "dpr"),
    params:
        settings=train_flags("dpr"),
        device=job_device,  # for job_env; _LAUNCH reads the same resources.gpus
    threads: config["dpr"]["threads"]
    resources:
        mem_mb=config["dpr"]["mem_mb"],
        **gpu_resources("dpr", used=not config["dpr"]["skip"]),
    conda:
        job_env
    log:
        "logs/train_dpr/{dataset}.log",
    benchmark:
        "benchmarks/train_dpr/{dataset}.tsv"
    shell:
        _LAUNCH + _dpr_command() + " --threads {threads} --out $(dirname {output}) --log {log}"


rule train_ccr:
    input:
        init=retriever("{dataset}", "dpr"),
        **_TRAIN_INPUTS,
    output:
        retriever("{dataset}", ccr_model("{beta}")),
    wildcard_constraints:
        beta=BETA_RE,
    params:
        settings=lambda wildcards: train_flags("ccr", beta=wildcards.beta),
        device=job_device,  # for job_env; _LAUNCH reads the same resources.gpus
    threads: config["ccr"]["threads"]
    resources:
        mem_mb=config["ccr"]["mem_mb"],
        **gpu_resources("ccr"),
    conda:
        job_env
    log:
        "logs/train_ccr/{dataset}.b{beta}.log",
    benchmark:
        "benchmarks/train_ccr/{dataset}.b{beta}.tsv"
    shell:
        _LAUNCH + "--init $(dirname {input.init}) --queries {input.queries} --qrels {input.qrels}"
        " --negatives {input.negatives} --corpus {input.corpus} {params.settings} --threads {threads}"
        " --out $(dirname {output}) --log {log}"


rule train_dpr_filtered:
    # DPR exactly as train_dpr (same settings, seed, steps), on the candidates a filter kept: the
    # controls dpr_<filter> and dpr_sieve. See docs/training.md "Controls".
    input:
        queries=queries("{dataset}", "train"),
        qrels=qrels("{dataset}", "train"),
        corpus=corpus("{dataset}"),
        negatives=train_negatives("{dataset}", "{negs}"),
    output:
        retriever("{dataset}", dpr_on("{negs}")),
    wildcard_constraints:
        negs="|".join(OTHER_FILTERS) + "|" + sieve_name(BETA_RE),
    params:
        base=shlex.quote(config["model"]["base"]),
        settings=train_flags("dpr"),
        device=job_device,  # for job_env; _LAUNCH reads the same resources.gpus
    threads: config["dpr"]["threads"]
    resources:
        mem_mb=config["dpr"]["mem_mb"],
        **gpu_resources("dpr"),
    conda:
        job_env
    log:
        "logs/train_dpr_filtered/{dataset}.{negs}.log",
    benchmark:
        "benchmarks/train_dpr_filtered/{dataset}.{negs}.tsv"
    shell:
        _LAUNCH + "--init {params.base} --queries {input.queries} --qrels {input.qrels}"
        " --negatives {input.negatives} --corpus {input.corpus} {params.settings} --threads {threads}"
        " --out $(dirname {output}) --log {log}"


# Other training seeds (config `seeds`): the same rules, the seed in the model name
# (seeded_model: models/<model>-s<seed>/); the top-level seed's models are the rules above.
use rule train_dpr as train_dpr_seed with:
    output:
        retriever("{dataset}", seeded_model("dpr", "{seed}")),
    wildcard_constraints:
        seed=r"\d+",
    params:
        settings=lambda wildcards: train_flags("dpr", seed=wildcards.seed),
        device=job_device,
    log:
        "logs/train_dpr/{dataset}.s{seed}.log",
    benchmark:
        "benchmarks/train_dpr/{dataset}.s{seed}.tsv"


use rule train_ccr as train_ccr_seed with:
    input:
        init=retriever("{dataset}", seeded_model("dpr", "{seed}")),
        **_TRAIN_INPUTS,
    output:
        retriever("{dataset}", seeded_model(ccr_model("{beta}"), "{seed}")),
    wildcard_constraints:
        beta=BETA_RE,
        seed=r"\d+",
    params:
        settings=lambda wildcards: train_flags("ccr", seed=wildcards.seed, beta=wildcards.beta),
        device=job_device,
    log:
        "logs/train_ccr/{dataset}.b{beta}.s{seed}.log",
    benchmark:
        "benchmarks/train_ccr/{dataset}.b{beta}.s{seed}.tsv"


use rule train_dpr_filtered as train_dpr_filtered_seed with:
    output:
        retriever("{dataset}", seeded_model(dpr_on("{negs}"), "{seed}")),
    wildcard_constraints:
        negs="|".join(OTHER_FILTERS) + "|" + sieve_name(BETA_RE),
        seed=r"\d+",
    params:
        base=shlex.quote(config["model"]["base"]),
        settings=lambda wildcards: train_flags("dpr", seed=wildcards.seed),
        device=job_device,
    log:
        "logs/train_dpr_filtered/{dataset}.{negs}.s{seed}.log",
    benchmark:
        "benchmarks/train_dpr_filtered/{dataset}.{negs}.s{seed}.tsv"

# Dense retrievers: the zero-shot base, DPR (NCE warm-up on BM25 negatives), CCR fine-tuning.
# Each writes results/{dataset}/models/{model}/ (retriever.json last; train_log.jsonl, train_info.json);
# training checkpoints live in models/{model}.ckpt/ until the run succeeds. See docs/training.md.
import shlex

# config key -> pipeline.training.train_dense flag (booleans become --flag / --no-flag or a bare switch).
_TRAIN_FLAGS = ("lr", "epochs", "batch_size", "grad_accum", "hard_negatives", "negatives_depth",
                "warmup_ratio", "weight_decay", "max_grad_norm", "max_steps", "checkpoint_every",
                "precision", "scale", "f_beta")


def _flag(key):
    return "--" + key.replace("_", "-")


def model_settings_flags(similarity=None, temperature=None):
    """Retriever settings from config `model` (CCR overrides similarity and τ)."""
    m = config["model"]
    out = []
    for key in ("pooling", "similarity", "temperature", "query_max_len", "passage_max_len"):
        value = {"similarity": similarity, "temperature": temperature}.get(key) or m.get(key)
        if value is not None:
            out += [_flag(key), str(value)]
    if not m.get("shared_towers", True):
        out.append("--separate-towers")
    return " ".join(shlex.quote(x) for x in out)


def dense_train_flags(section, beta=None):
    """pipeline.training.train_dense training flags from config section `dpr` or `ccr` (also used by AR2).

    Keys absent from the section fall back to the CLI defaults. `beta` overrides ccr.beta (train_ccr
    takes it from the path so that each β is its own model).
    """
    s = config[section]
    out = ["--seed", str(config["seed"])]
    for key in _TRAIN_FLAGS:
        if key in s:
            out += [_flag(key), str(s[key])]
    if "in_batch" in s:
        out.append("--in-batch" if s["in_batch"] else "--no-in-batch")
    if s.get("drop_queries_without_positive"):
        out.append("--drop-queries-without-positive")
    if section == "ccr":
        out += ["--beta", str(s["beta"] if beta is None else beta)]
        out.append(model_settings_flags(similarity="cosine", temperature=s.get("temperature")))
    else:
        out.append(model_settings_flags())
    return " ".join(out)


def _train_gpus(section):
    n = 0 if section == "dpr" and config["dpr"].get("skip") else config[section].get("gpus", 0)
    # `gpus`: the project's resource name; `gpu`: what the SLURM executor turns into --gpus.
    return {"gpus": n, "gpu": n}


# One process on CPU or one GPU; torchrun DDP (one process per GPU) when more are reserved. The `--`
# keeps torchrun from parsing our flags (it accepts abbreviations: --log would match its --log-dir).
_LAUNCH = ('device=cpu; launch="python"; '
           'if [ {resources.gpus} -gt 0 ]; then device=cuda; fi; '
           'if [ {resources.gpus} -gt 1 ]; then '
           'launch="torchrun --standalone --nproc_per_node={resources.gpus}"; fi; '
           '$launch -m pipeline.training.train_dense -- --device $device ')

_TRAIN_INPUTS = dict(
    queries="resources/{dataset}/queries.train.parquet",
    qrels="resources/{dataset}/qrels.train.parquet",
    corpus="resources/{dataset}/corpus.parquet",
    negatives="results/{dataset}/negatives/bm25.parquet",
)


rule init_zeroshot:
    output:
        "results/{dataset}/models/zeroshot/retriever.json",
    params:
        base=config["model"]["base"],
        settings=model_settings_flags(),
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
    return {} if config["dpr"].get("skip") else _TRAIN_INPUTS


def _dpr_args(wildcards, input):
    if config["dpr"].get("skip"):
        return f"--init-only --base {shlex.quote(config['model']['base'])} {model_settings_flags()}"
    return (f"--init {shlex.quote(config['model']['base'])} --queries {input.queries}"
            f" --qrels {input.qrels} --negatives {input.negatives} --corpus {input.corpus}"
            f" {dense_train_flags('dpr')}")


rule train_dpr:
    input:
        unpack(_dpr_inputs),
    output:
        "results/{dataset}/models/dpr/retriever.json",
    params:
        args=_dpr_args,
    threads: config["dpr"].get("threads", 2)
    resources:
        mem_mb=config["dpr"].get("mem_mb", 6000),
        **_train_gpus("dpr"),
    log:
        "logs/train_dpr/{dataset}.log",
    benchmark:
        "benchmarks/train_dpr/{dataset}.tsv"
    shell:
        _LAUNCH + "{params.args} --threads {threads} --out $(dirname {output}) --log {log}"


rule train_ccr:
    input:
        init="results/{dataset}/models/dpr/retriever.json",
        **_TRAIN_INPUTS,
    output:
        "results/{dataset}/models/dpr_ccr_b{beta}/retriever.json",
    wildcard_constraints:
        beta=r"[0-9]+(\.[0-9]+)?",
    params:
        args=lambda wildcards: dense_train_flags("ccr", beta=wildcards.beta),
    threads: config["ccr"].get("threads", 2)
    resources:
        mem_mb=config["ccr"].get("mem_mb", 6000),
        **_train_gpus("ccr"),
    log:
        "logs/train_ccr/{dataset}.b{beta}.log",
    benchmark:
        "benchmarks/train_ccr/{dataset}.b{beta}.tsv"
    shell:
        _LAUNCH + "--init $(dirname {input.init}) --queries {input.queries} --qrels {input.qrels}"
        " --negatives {input.negatives} --corpus {input.corpus} {params.args} --threads {threads}"
        " --out $(dirname {output}) --log {log}"

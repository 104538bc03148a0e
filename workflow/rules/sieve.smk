# Passage sieve (Algorithm 1), false-negative labels, the competing filters on the same candidates,
# their detection reports, the comparison table and the figures. See docs/sieve.md.
#
#   results/{dataset}/sieve/candidates.parquet          candidates + labels      (sieve_candidates)
#   results/{dataset}/negatives/sieve_b{beta}.parquet   the sieve's decisions    (sieve_negatives)
#   results/{dataset}/negatives/sieve_b{beta}.train.parquet   kept negatives, bm25.parquet layout
#   results/{dataset}/sieve/{filter}/decisions.parquet  other filters            (filter_candidates)
#   results/{dataset}/sieve/{filter}/report.json        detection report         (sieve_report)
#   results/{dataset}/sieve/comparison.{md,json}        every filter             (sieve_comparison)
#   results/{dataset}/figures/*.png                     Figure 1 etc.            (sieve_figures)
#
# The β is in every path that depends on it (beta_tag), so changing ccr.beta reruns CCR training, the
# sieve and what reads it, never the mining or DPR training.
import shlex

SIEVE = config["sieve"]
BETA_RE = r"[0-9]+(\.[0-9]+)?"
OTHER_FILTERS = ("none", "answer_match", "rank_window", "positive_aware", "cross_encoder", "sieve_no_ccr")


def sieve_tag(beta):
    # common.smk's beta_tag(0) gives "0." (rstrip of "0.0000000000"); β=0 must be "0".
    return "0" if float(beta) == 0 else beta_tag(beta)


def sieve_main_tag():
    return sieve_tag(config["ccr"]["beta"])


def sieve_sweep_tags():
    """β tags of the sweep (Figure 1, sieve-out per β), in increasing β."""
    return [sieve_tag(b) for b in sorted(SIEVE.get("betas") or [config["ccr"]["beta"]])]


def sieve_decisions(dataset, name):
    """The decisions table a filter name stands for (`sieve` = the sieve at config ccr.beta)."""
    if name == "sieve":
        return f"results/{dataset}/negatives/sieve_b{sieve_main_tag()}.parquet"
    if name.startswith("sieve_b"):
        return f"results/{dataset}/negatives/{name}.parquet"
    return f"results/{dataset}/sieve/{name}/decisions.parquet"


def sieve_filter_names():
    """Rows of the comparison table: config sieve.filters, then the β sweep (minus the duplicate of `sieve`)."""
    names = list(SIEVE["filters"])
    for tag in sieve_sweep_tags():
        if not ("sieve" in names and tag == sieve_main_tag()):
            names.append(f"sieve_b{tag}")
    return names


def _sieve_candidate_inputs(wildcards):
    d = wildcards.dataset
    inputs = {
        "negatives": f"results/{d}/negatives/{SIEVE['source']}.parquet",
        "qrels": f"resources/{d}/qrels.train.parquet",
        "queries": f"resources/{d}/queries.train.parquet",
        "corpus": f"resources/{d}/corpus.parquet",
    }
    if d in SYNTHETIC:
        inputs["qrels_all"] = f"resources/{d}/qrels_all.train.parquet"
    return inputs


def _sieve_candidate_args(wildcards, input):
    args = [f"--candidates {SIEVE['candidates']}", f"--pool {SIEVE['pool']}", f"--seed {config['seed']}",
            f"--injection-fraction {SIEVE.get('injection', {}).get('fraction', 0.0)}",
            f"--match {config['eval']['match']}"]
    if SIEVE.get("max_queries"):
        args.append(f"--max-queries {SIEVE['max_queries']}")
    if "qrels_all" in input.keys():
        args.append(f"--qrels-all {input.qrels_all}")
    if DATASETS[wildcards.dataset]["format"] == "squad":
        args.append("--suspect-same-article")
    return " ".join(args)


def _sieve_decision_args():
    """The rule's switches, shared by the sieve and sieve_no_ccr."""
    args = [f"--fallback {SIEVE['fallback']}"]
    if SIEVE["strict"]:
        args.append("--strict")
    if SIEVE.get("temperature") is not None:
        args.append(f"--temperature {SIEVE['temperature']}")
    return args


rule sieve_candidates:
    input:
        unpack(_sieve_candidate_inputs),
    output:
        "results/{dataset}/sieve/candidates.parquet",
    params:
        args=_sieve_candidate_args,
    log:
        "logs/sieve_candidates/{dataset}.log",
    benchmark:
        "benchmarks/sieve_candidates/{dataset}.tsv"
    shell:
        "python -m pipeline.sieve.candidates --negatives {input.negatives} --qrels {input.qrels}"
        " --queries {input.queries} --corpus {input.corpus} {params.args} --out {output} --log {log}"


rule sieve_negatives:
    input:
        candidates="results/{dataset}/sieve/candidates.parquet",
        corpus="resources/{dataset}/corpus.parquet",
        queries="resources/{dataset}/queries.train.parquet",
        model="results/{dataset}/models/dpr_ccr_b{beta}/retriever.json",
    output:
        sieve="results/{dataset}/negatives/sieve_b{beta}.parquet",
        train="results/{dataset}/negatives/sieve_b{beta}.train.parquet",
        losses="results/{dataset}/sieve/sieve_b{beta}/losses.parquet",
    wildcard_constraints:
        beta=BETA_RE,
    params:
        args=" ".join(_sieve_decision_args() + [f"--seed {config['seed']}",
                                                f"--batch-size {SIEVE.get('batch_size', 64)}"]),
        figure=f"--in-batch {SIEVE.get('in_batch', 30)}"
        + (f" --figure-queries {SIEVE['figure_queries']}" if SIEVE.get("figure_queries") else ""),
    threads: 2
    resources:
        mem_mb=4000,
    log:
        "logs/sieve_negatives/{dataset}.b{beta}.log",
    benchmark:
        "benchmarks/sieve_negatives/{dataset}.b{beta}.tsv"
    shell:
        "python -m pipeline.sieve.passage_sieve --candidates {input.candidates} --corpus {input.corpus}"
        " --queries {input.queries} --model $(dirname {input.model}) --out {output.sieve}"
        " --train-out {output.train} --source-tag sieve_b{wildcards.beta} --losses-out {output.losses}"
        " {params.figure} {params.args} --threads {threads} --log {log}"


rule train_cross_encoder:
    input:
        negatives=f"results/{{dataset}}/negatives/{SIEVE['source']}.parquet",
        qrels="resources/{dataset}/qrels.train.parquet",
        queries="resources/{dataset}/queries.train.parquet",
        corpus="resources/{dataset}/corpus.parquet",
    output:
        "results/{dataset}/models/cross_encoder/ranker.json",
    params:
        args=lambda wildcards: " ".join(
            f"--{key.replace('_', '-')} {shlex.quote(str(SIEVE['cross_encoder'][key]))}"
            for key in ("base", "max_len", "steps", "batch_size", "lr") if key in SIEVE.get("cross_encoder", {})),
    threads: 2
    resources:
        mem_mb=4000,
    log:
        "logs/train_cross_encoder/{dataset}.log",
    benchmark:
        "benchmarks/train_cross_encoder/{dataset}.tsv"
    shell:
        "python -m pipeline.sieve.cross_encoder --negatives {input.negatives} --qrels {input.qrels}"
        " --queries {input.queries} --corpus {input.corpus} {params.args} --seed " + str(config["seed"]) +
        " --threads {threads} --out $(dirname {output}) --log {log}"


def _filter_inputs(wildcards):
    d, name = wildcards.dataset, wildcards.filter
    inputs = {"candidates": f"results/{d}/sieve/candidates.parquet",
              "corpus": f"resources/{d}/corpus.parquet",
              "queries": f"resources/{d}/queries.train.parquet"}
    if name in ("positive_aware", "sieve_no_ccr"):
        inputs["model"] = f"results/{d}/models/dpr/retriever.json"
    elif name == "cross_encoder":
        inputs["model"] = f"results/{d}/models/cross_encoder/ranker.json"
    return inputs


def _filter_args(wildcards, input):
    name = wildcards.filter
    args = [f"--seed {config['seed']}", f"--batch-size {SIEVE.get('batch_size', 64)}"]
    if "model" in input.keys():
        args.append(f"--model {os.path.dirname(input.model)}")
    if name == "rank_window":
        args.append(f"--start {SIEVE.get('rank_window', {}).get('start', 10)}")
    elif name == "positive_aware":
        pa_cfg = SIEVE.get("positive_aware", {})
        args.append(f"--mode {pa_cfg.get('mode', 'relative')} --margin {pa_cfg.get('margin', 0.95)}")
    elif name == "cross_encoder":
        args.append(f"--threshold {SIEVE.get('cross_encoder', {}).get('threshold', 0.1)}")
    elif name == "sieve_no_ccr":
        args += _sieve_decision_args()
    return " ".join(args)


rule filter_candidates:
    input:
        unpack(_filter_inputs),
    output:
        "results/{dataset}/sieve/{filter}/decisions.parquet",
    wildcard_constraints:
        filter="|".join(OTHER_FILTERS),
    params:
        args=_filter_args,
    threads: 2
    resources:
        mem_mb=4000,
    log:
        "logs/filter_candidates/{dataset}.{filter}.log",
    benchmark:
        "benchmarks/filter_candidates/{dataset}.{filter}.tsv"
    shell:
        "python -m pipeline.sieve.filters --filter {wildcards.filter} --candidates {input.candidates}"
        " --corpus {input.corpus} --queries {input.queries} {params.args} --threads {threads}"
        " --out {output} --log {log}"


rule sieve_report:
    input:
        decisions=lambda wildcards: sieve_decisions(wildcards.dataset, wildcards.filter),
        candidates="results/{dataset}/sieve/candidates.parquet",
    output:
        "results/{dataset}/sieve/{filter}/report.json",
    wildcard_constraints:
        filter="|".join(OTHER_FILTERS + ("sieve",)) + rf"|sieve_b{BETA_RE}",
    log:
        "logs/sieve_report/{dataset}.{filter}.log",
    shell:
        "python -m pipeline.sieve.report report --decisions {input.decisions} --candidates {input.candidates}"
        " --dataset {wildcards.dataset} --filter {wildcards.filter} --out {output} --log {log}"


rule sieve_comparison:
    input:
        lambda wildcards: [f"results/{wildcards.dataset}/sieve/{name}/report.json"
                           for name in sieve_filter_names()],
    output:
        md="results/{dataset}/sieve/comparison.md",
        json="results/{dataset}/sieve/comparison.json",
    log:
        "logs/sieve_comparison/{dataset}.log",
    shell:
        "python -m pipeline.sieve.report compare --dataset {wildcards.dataset} --reports {input}"
        " --out-json {output.json} --out-md {output.md} --log {log}"


rule sieve_figures:
    input:
        losses=lambda wildcards: [f"results/{wildcards.dataset}/sieve/sieve_b{tag}/losses.parquet"
                                  for tag in sieve_sweep_tags()],
        sieves=lambda wildcards: [sieve_decisions(wildcards.dataset, f"sieve_b{tag}")
                                  for tag in sieve_sweep_tags()],
        comparison="results/{dataset}/sieve/comparison.json",
    output:
        figure1=report("results/{dataset}/figures/figure1_nce_loss.png", caption="../report/figure1.rst",
                       category="Sieve"),
        figure1_json="results/{dataset}/figures/figure1_separation.json",
        sieve_out=report("results/{dataset}/figures/sieve_out_rate.png", category="Sieve"),
        filters=report("results/{dataset}/figures/filters_precision_recall.png", category="Sieve"),
    params:
        losses=lambda wildcards, input: " ".join(
            f"{tag}={path}" for tag, path in zip(sieve_sweep_tags(), input.losses)),
        sieves=lambda wildcards, input: " ".join(
            f"{tag}={path}" for tag, path in zip(sieve_sweep_tags(), input.sieves)),
    log:
        "logs/sieve_figures/{dataset}.log",
    shell:
        "python -m pipeline.sieve.figures --losses {params.losses} --sieve {params.sieves}"
        " --comparison {input.comparison} --out-dir $(dirname {output.figure1}) --log {log}"


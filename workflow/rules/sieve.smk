# Passage sieve (Algorithm 1), false-negative labels, the competing filters on the same candidates,
# their detection reports, the comparison table and the figures. See docs/sieve.md.
#
#   results/{dataset}/sieve/candidates{stag}.parquet          candidates + labels      (sieve_candidates)
#   results/{dataset}/negatives/sieve_b{beta}{stag}.parquet   the sieve's decisions    (sieve_negatives)
#   results/{dataset}/negatives/sieve_b{beta}{stag}.train.parquet   kept negatives, bm25.parquet layout
#   results/{dataset}/sieve/{filter}{stag}/decisions.parquet  other filters            (filter_candidates)
#   results/{dataset}/sieve/{filter}{stag}/report.json        detection report         (sieve_report)
#   results/{dataset}/sieve/comparison{stag}.{md,json}        every filter             (sieve_comparison)
#   results/{dataset}/figures{stag}/*.png                     Figure 1 etc.            (sieve_figures)
#
# The β is in every path that depends on it (pipeline.core.methods.beta_tag), so changing ccr.beta reruns CCR
# training, the sieve and what reads it, never the mining or DPR training. {stag} is the sieve settings that
# differ from their defaults (methods.sieve_tag, '' at the defaults): a second setting builds beside the first.

from pipeline.core.settings import (CROSS_ENCODER_TRAINING, MODEL_FILTERS, CrossEncoderFilterSettings, EvalSettings, InjectionSettings,
                                    PositiveAwareSettings, RankWindowSettings, SIEVE_DECISION_KEYS, SieveSettings,
                                    to_flags)

def sieve_config(d):
    """Section sieve of dataset ``d`` (its recipe)."""
    return cfg(d)["sieve"]


# Checked at start-up: a DPR trained on filtered candidates needs the sieve's candidates first, which
# would surface as a cyclic DAG that does not name the setting. Any other name is a negatives file:
# built by a rule (bm25, a mining model) or brought by the user.
for _d in DATASETS:
    if filtered_candidates(METHODS[_d], sieve_config(_d)["source"]):
        raise WorkflowError(f"sieve.source of dataset {_d!r} is {sieve_config(_d)['source']!r}, a DPR trained on "
                            "filtered candidates: it needs the sieve's own candidates first (a cycle). Use bm25, "
                            "a model trained without them (zeroshot, dpr, dpr_ccr) or your own negatives file")


def sieve_main_tag(d):
    return beta_tag(cfg(d)["ccr"]["beta"])


def sieve_sweep_tags(d, wildcards=None):
    """β tags of the sweep (Figure 1, sieve-out per β), in increasing β. With a job's ``wildcards``,
    its path's sieve tag is checked against the config's first."""
    if wildcards is not None:
        check_sieve_tag(wildcards, decision=True)
    return [beta_tag(b) for b in sorted(sieve_config(d)["betas"] or [cfg(d)["ccr"]["beta"]])]


def sieve_decisions(dataset, name):
    """The decisions table a filter name stands for under the dataset's sieve settings (`sieve` = the
    sieve dpr_sieve trains on: at the dataset's ccr.beta, or sieve_no_ccr's with sieve.scorer dpr)."""
    if name == "sieve":
        name = METHODS[dataset]["dpr_sieve"].filter
    files = filter_files_name(dataset, name)
    if name.startswith(sieve_name("")):
        return negatives(dataset, files)
    return filter_decisions(dataset, files)


def sieve_filter_names(d, wildcards=None):
    """Rows of the comparison table: sieve.filters, then the β sweep (minus the duplicate of `sieve`).
    With a job's ``wildcards``, its path's sieve tag is checked against the config's first."""
    if wildcards is not None:
        check_sieve_tag(wildcards, decision=True)
    names = list(sieve_config(d)["filters"])
    same_as_sieve = sieve_config(d)["scorer"] == "ccr" and "sieve" in names
    for tag in sieve_sweep_tags(d):
        if not (same_as_sieve and tag == sieve_main_tag(d)):
            names.append(sieve_name(tag))
    return names


def _sieve_candidate_inputs(wildcards):
    d = wildcards.dataset
    check_sieve_tag(wildcards)
    inputs = {
        "negatives": negatives(d, sieve_source(d)),
        "qrels": qrels(d, "train"),
        "queries": queries(d, "train"),
        "corpus": corpus(d),
    }
    if d in SYNTHETIC:
        inputs["qrels_all"] = qrels_all(d, "train")
    return inputs


# A rule's settings are params of the wildcards only (a params function taking `input` is not
# recorded by Snakemake, so a changed setting would not rerun it); input files stay in their own params.
# Settings reach each stage as the flags its parser generates from the same contract fields
# (pipeline.core.settings: add_flags in the stage, to_flags here).
def _sieve_candidate_settings(wildcards):
    c = sieve_config(wildcards.dataset)
    args = [to_flags(SieveSettings, c, ("candidates", "pool", "max_queries")),
            to_flags(InjectionSettings, c["injection"], prefix="injection"),
            to_flags(EvalSettings, config["eval"], ("match",)), f"--seed {config['seed']}"]
    if DATASETS[wildcards.dataset]["format"] == "squad":
        args.append("--suspect-same-article")
    return " ".join(args)




def _sieve_settings(wildcards):
    c = sieve_config(wildcards.dataset)
    return f"{to_flags(SieveSettings, c, SIEVE_DECISION_KEYS + ('in_batch', 'figure_queries'))} --seed {config['seed']}"


rule sieve_candidates:
    input:
        unpack(_sieve_candidate_inputs),
    output:
        candidates("{dataset}", "{stag}"),
    params:
        settings=_sieve_candidate_settings,
        qrels_all=qrels_all_arg,
    conda:
        CPU_ENV
    log:
        "logs/sieve_candidates/{dataset}{stag}.log",
    benchmark:
        "benchmarks/sieve_candidates/{dataset}{stag}.tsv"
    shell:
        "python -m pipeline.sieve.candidates --negatives {input.negatives} --qrels {input.qrels}"
        " --queries {input.queries} --corpus {input.corpus} {params.qrels_all} {params.settings}"
        " --out {output} --log {log}"


def _sieve_candidates(wildcards):
    """The candidates under the dataset's sieve settings (a path's tag that is not theirs is refused)."""
    check_sieve_tag(wildcards, decision=wildcards.get("filter", "sieve").startswith("sieve"))
    return candidates(wildcards.dataset, sieve_tags(wildcards.dataset))


rule sieve_negatives:
    input:
        candidates=_sieve_candidates,
        corpus=corpus("{dataset}"),
        queries=queries("{dataset}", "train"),
        model=retriever("{dataset}", ccr_model("{beta}")),
    output:
        sieve=negatives("{dataset}", sieve_name("{beta}") + "{stag}"),
        train=train_negatives("{dataset}", sieve_name("{beta}") + "{stag}"),
        losses=sieve_losses("{dataset}", sieve_name("{beta}") + "{stag}"),
    wildcard_constraints:
        beta=BETA_RE,
    params:
        source_tag=sieve_name("{beta}") + "{stag}",
        settings=_sieve_settings,
        device=job_device,
    threads: dataset_setting("sieve", "threads")
    resources:
        **gpu_resources("sieve"),
    conda:
        job_env
    log:
        "logs/sieve_negatives/{dataset}.b{beta}{stag}.log",
    benchmark:
        "benchmarks/sieve_negatives/{dataset}.b{beta}{stag}.tsv"
    shell:
        "python -m pipeline.sieve.passage_sieve --candidates {input.candidates} --corpus {input.corpus}"
        " --queries {input.queries} --model $(dirname {input.model}) --out {output.sieve}"
        " --train-out {output.train} --source-tag {params.source_tag} --losses-out {output.losses}"
        " {params.settings} --device {params.device} --threads {threads} --log {log}"


rule train_cross_encoder:
    input:
        negatives=lambda wildcards: negatives(wildcards.dataset, sieve_source(wildcards.dataset)),
        qrels=qrels("{dataset}", "train"),
        queries=queries("{dataset}", "train"),
        corpus=corpus("{dataset}"),
        base_model=base_fingerprint("sieve.cross_encoder"),  # a local base folder's content (content.smk)
    output:
        ranker("{dataset}", "cross_encoder"),
    params:
        args=lambda wildcards: to_flags(CrossEncoderFilterSettings, sieve_config(wildcards.dataset)["cross_encoder"],
                                        CROSS_ENCODER_TRAINING),
        recipe=recipe_label,
        device=job_device,
    threads: dataset_setting("sieve", "threads")
    resources:
        **gpu_resources("sieve"),
    conda:
        job_env
    log:
        "logs/train_cross_encoder/{dataset}.log",
    benchmark:
        "benchmarks/train_cross_encoder/{dataset}.tsv"
    shell:
        "python -m pipeline.sieve.cross_encoder --negatives {input.negatives} --qrels {input.qrels}"
        " --queries {input.queries} --corpus {input.corpus} {params.args} {params.recipe} --seed " + str(config["seed"]) +
        " --device {params.device} --threads {threads} --out $(dirname {output}) --log {log}"


def _filter_inputs(wildcards):
    d, name = wildcards.dataset, wildcards.filter
    if name == "oracle" and d not in SYNTHETIC:
        # Caught while planning, not after the candidates are built: only synthkb knows the truth.
        raise ValueError(f"filter/method oracle needs exact false-negative labels (qrels_all), which "
                         f"dataset {d!r} does not have; use answer_match (method dpr_answer_match)")
    inputs = {"candidates": _sieve_candidates(wildcards), "corpus": corpus(d), "queries": queries(d, "train")}
    if name in ("positive_aware", "sieve_no_ccr"):
        inputs["model"] = retriever(d, "dpr")
    elif name == "cross_encoder":
        inputs["model"] = ranker(d, "cross_encoder")
    return inputs


def _filter_model(wildcards, input):
    return f"--model {os.path.dirname(input.model)}" if "model" in input.keys() else ""


def _filter_settings(wildcards):
    """The flags of the filter's own settings (a changed setting of another filter reruns nothing)."""
    name, c = wildcards.filter, sieve_config(wildcards.dataset)
    args = [f"--seed {config['seed']}", to_flags(SieveSettings, c, ("batch_size",))]
    if name == "rank_window":
        args.append(to_flags(RankWindowSettings, c["rank_window"]))
    elif name == "positive_aware":
        args.append(to_flags(PositiveAwareSettings, c["positive_aware"]))
    elif name == "cross_encoder":
        args.append(to_flags(CrossEncoderFilterSettings, c["cross_encoder"], ("threshold",)))
    elif name == "sieve_no_ccr":
        args.append(to_flags(SieveSettings, c, SIEVE_DECISION_KEYS[:-1]))
    return " ".join(args)


rule filter_candidates:
    input:
        unpack(_filter_inputs),
    output:
        decisions=filter_decisions("{dataset}", "{filter}{stag}"),
        train=train_negatives("{dataset}", "{filter}{stag}"),
    wildcard_constraints:
        filter="|".join(OTHER_FILTERS),
    params:
        model=_filter_model,
        settings=_filter_settings,
        device=job_device,
    threads: dataset_setting("sieve", "threads")
    resources:
        # sieve.gpus only for a filter that runs a model (a profile's set-resources would give every
        # filter job the same, so the count comes from the config)
        **gpu_resources("sieve", used=lambda c, wildcards: wildcards.filter in MODEL_FILTERS),
    conda:
        job_env
    log:
        "logs/filter_candidates/{dataset}.{filter}{stag}.log",
    benchmark:
        "benchmarks/filter_candidates/{dataset}.{filter}{stag}.tsv"
    shell:
        "python -m pipeline.sieve.filters --filter {wildcards.filter} --candidates {input.candidates}"
        " --corpus {input.corpus} --queries {input.queries} {params.model} {params.settings}"
        " --device {params.device} --threads {threads} --out {output.decisions} --train-out {output.train} --log {log}"


rule sieve_report:
    input:
        decisions=lambda wildcards: sieve_decisions(wildcards.dataset, wildcards.filter),
        candidates=_sieve_candidates,
    output:
        filter_report("{dataset}", "{filter}{stag}"),
    wildcard_constraints:
        filter="|".join(OTHER_FILTERS + ("sieve", sieve_name(BETA_RE))),
    conda:
        CPU_ENV
    log:
        "logs/sieve_report/{dataset}.{filter}{stag}.log",
    shell:
        "python -m pipeline.sieve.report report --decisions {input.decisions} --candidates {input.candidates}"
        " --dataset {wildcards.dataset} --filter {wildcards.filter} --out {output} --log {log}"


rule sieve_comparison:
    input:
        lambda wildcards: [filter_report(wildcards.dataset, filter_files_name(wildcards.dataset, name))
                           for name in sieve_filter_names(wildcards.dataset, wildcards)],
    output:
        md=comparison("{dataset}", "md", "{stag}"),
        json=comparison("{dataset}", "json", "{stag}"),
    conda:
        CPU_ENV
    log:
        "logs/sieve_comparison/{dataset}{stag}.log",
    shell:
        "python -m pipeline.sieve.report compare --dataset {wildcards.dataset} --reports {input}"
        " --out-json {output.json} --out-md {output.md} --log {log}"


rule sieve_figures:
    input:
        losses=lambda wildcards: [sieve_losses(wildcards.dataset, filter_files_name(wildcards.dataset, sieve_name(tag)))
                                  for tag in sieve_sweep_tags(wildcards.dataset, wildcards)],
        sieves=lambda wildcards: [sieve_decisions(wildcards.dataset, sieve_name(tag))
                                  for tag in sieve_sweep_tags(wildcards.dataset)],
        comparison=comparison("{dataset}", "json", "{stag}"),
    output:
        figure1=report(sieve_figure("{dataset}", "figure1_nce_loss.png", "{stag}"), caption="../report/figure1.rst",
                       category="Sieve"),
        figure1_json=sieve_figure("{dataset}", "figure1_separation.json", "{stag}"),
        sieve_out=report(sieve_figure("{dataset}", "sieve_out_rate.png", "{stag}"), category="Sieve"),
        filters=report(sieve_figure("{dataset}", "filters_precision_recall.png", "{stag}"), category="Sieve"),
    params:
        losses=lambda wildcards, input: " ".join(
            f"{tag}={path}" for tag, path in zip(sieve_sweep_tags(wildcards.dataset), input.losses)),
        sieves=lambda wildcards, input: " ".join(
            f"{tag}={path}" for tag, path in zip(sieve_sweep_tags(wildcards.dataset), input.sieves)),
    conda:
        CPU_ENV
    log:
        "logs/sieve_figures/{dataset}{stag}.log",
    shell:
        "python -m pipeline.sieve.figures --losses {params.losses} --sieve {params.sieves}"
        " --comparison {input.comparison} --out-dir $(dirname {output.figure1}) --log {log}"



def tradeoff_filters(d, wildcards=None):
    """The comparison's filters that decide on a continuous score."""
    return [n for n in sieve_filter_names(d, wildcards)
            if n in ("positive_aware", "cross_encoder") or n.startswith("sieve")]


rule sieve_tradeoff:
    input:
        lambda wildcards: [sieve_decisions(wildcards.dataset, name)
                           for name in tradeoff_filters(wildcards.dataset, wildcards)],
    output:
        json=tradeoff("{dataset}", "json", "{stag}"),
        png=report(tradeoff("{dataset}", "png", "{stag}"), category="Sieve"),
    params:
        decisions=lambda wildcards, input: " ".join(
            f"{name}={path}" for name, path in zip(tradeoff_filters(wildcards.dataset), input)),
        reference=lambda wildcards: ("sieve" if "sieve" in sieve_config(wildcards.dataset)["filters"]
                                     else sieve_name(sieve_main_tag(wildcards.dataset))),
    conda:
        CPU_ENV
    log:
        "logs/sieve_tradeoff/{dataset}{stag}.log",
    shell:
        "python -m pipeline.sieve.tradeoff --decisions {params.decisions} --reference {params.reference}"
        " --out-json {output.json} --out-png {output.png} --log {log}"


# ---- a hard-negative dataset of the user's, cleaned (config clean.<name>; docs/clean.md) ------------
#   results/{clean}/clean/cleaned.{ext}   the same schema back; .decisions.parquet, .report.{json,md} beside

from pipeline.core.settings import CLEAN_SUFFIXES, CleanSpec

CLEAN = config["clean"]  # validated above


def clean_spec(wildcards):
    """The entry, its defaults filled in; the path's extension must be its source's."""
    spec = CleanSpec.model_validate(CLEAN[wildcards.clean]).model_dump()
    if not spec["source"].endswith("." + wildcards.ext):
        raise ValueError(f"clean {wildcards.clean!r}: its source {spec['source']!r} is not a .{wildcards.ext} file: "
                         f"ask for {cleaned(wildcards.clean, spec['source'].rsplit('.', 1)[1])}")
    return spec


def _clean_inputs(wildcards):
    spec = clean_spec(wildcards)
    return {"source": spec["source"], **({"labels": spec["labels"]} if spec["labels"] else {})}


def _clean_settings(wildcards):
    spec, c = clean_spec(wildcards), config["sieve"]
    return " ".join([to_flags(CleanSpec, spec, ("format", "filter", "model", "mode", "near_duplicate")),
                     to_flags(RankWindowSettings, c["rank_window"], prefix="rank_window"),
                     to_flags(PositiveAwareSettings, c["positive_aware"], prefix="positive_aware"),
                     to_flags(CrossEncoderFilterSettings, c["cross_encoder"], ("threshold",), prefix="cross_encoder"),
                     to_flags(SieveSettings, c, SIEVE_DECISION_KEYS), f"--seed {config['seed']}"])


rule clean_negatives:
    input:
        unpack(_clean_inputs),
    output:
        cleaned=cleaned("{clean}", "{ext}"),
        decisions=clean_file("{clean}", "{ext}", "decisions.parquet"),
        report=clean_file("{clean}", "{ext}", "report.json"),
        markdown=clean_file("{clean}", "{ext}", "report.md"),
    wildcard_constraints:
        clean="|".join(CLEAN) or "(?!x)x",
        ext="|".join(s.lstrip(".") for s in CLEAN_SUFFIXES),
    params:
        settings=_clean_settings,
        labels=lambda wildcards: f"--labels {clean_spec(wildcards)['labels']}" if clean_spec(wildcards)["labels"] else "",
    threads: 2
    resources:
        mem_mb=4000,
    conda:
        CPU_ENV
    log:
        "logs/clean_negatives/{clean}.{ext}.log",
    benchmark:
        "benchmarks/clean_negatives/{clean}.{ext}.tsv"
    shell:
        "python -m pipeline.sieve.clean --input {input.source} --out {output.cleaned} {params.settings}"
        " {params.labels} --decisions {output.decisions} --report {output.report} --threads {threads} --log {log}"

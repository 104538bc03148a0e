# Passage sieve (Algorithm 1), false-negative labels, the competing filters on the same candidates,
# their detection reports, the comparison table and the figures. See docs/sieve.md.
#
#   results/{dataset}/sieve/candidates{stag}.parquet          candidates + labels      (sieve_candidates)
#   results/{dataset}/sieve/candidates{stag}.dev.parquet      the dev queries' (positive_aware_dev's margin)
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

from pipeline.sieve.settings import MODEL_FILTERS
from pipeline.workflow.paths import (candidates, clean_file, cleaned, comparison, corpus, dev_candidates,
                                     filter_decisions, filter_report, negatives, qrels, queries, ranker, retriever,
                                     sieve_figure, sieve_losses, tradeoff, train_negatives)
from pipeline.workflow.sieve import SieveRules, filter_model_arg, pairs_arg

# The sieve's lookups (pipeline/workflow/sieve.py): candidates, filters' files and settings, the β sweep.
sieve_rules = SieveRules(workflow_tables)
# The sieve's source and the clean entries are checked at start-up (pipeline.workflow.checks.startup_checks).


rule sieve_candidates:
    input:
        unpack(sieve_rules.candidate_inputs),
    output:
        candidates("{dataset}", "{stag}"),
    params:
        settings=sieve_rules.candidate_settings,
        qrels_all=qrels_all_arg,
    conda:
        CPU_ENV
    log:
        "logs/sieve_candidates/{dataset}{stag}.log",
    benchmark:
        "benchmarks/sieve_candidates/{dataset}{stag}.tsv"
    resources:
        **sized("sieve_candidates"),
    shell:
        "python -m pipeline.sieve.candidates --negatives {input.negatives:q} --qrels {input.qrels:q}"
        " --queries {input.queries:q} --corpus {input.corpus:q} {params.qrels_all} {params.settings}"
        " --out {output:q} --log {log:q}"


rule sieve_dev_candidates:
    # The dev queries' candidates, drawn as the train ones: where positive_aware_dev picks its margin.
    input:
        unpack(sieve_rules.dev_candidate_inputs),
    output:
        dev_candidates("{dataset}", "{stag}"),
    params:
        settings=sieve_rules.dev_candidate_settings,
        qrels_all=qrels_all_arg,
    conda:
        CPU_ENV
    log:
        "logs/sieve_dev_candidates/{dataset}{stag}.log",
    shell:
        "python -m pipeline.sieve.candidates --negatives {input.negatives:q} --qrels {input.qrels:q}"
        " --queries {input.queries:q} --corpus {input.corpus:q} {params.qrels_all} {params.settings}"
        " --out {output:q} --log {log:q}"


rule sieve_negatives:
    input:
        candidates=sieve_rules.candidates,
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
        settings=sieve_rules.sieve_settings,
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
        "python -m pipeline.sieve.passage_sieve --candidates {input.candidates:q} --corpus {input.corpus:q}"
        " --queries {input.queries:q} --model \"$(dirname {input.model:q})\" --out {output.sieve:q}"
        " --train-out {output.train:q} --source-tag {params.source_tag} --losses-out {output.losses:q}"
        " {params.settings} --device {params.device} --threads {threads} --log {log:q}"


rule train_cross_encoder:
    input:
        negatives=sieve_rules.source_negatives,
        qrels=qrels("{dataset}", "train"),
        queries=queries("{dataset}", "train"),
        corpus=corpus("{dataset}"),
        base_model=base_fingerprint("sieve.cross_encoder"),  # a local base folder's content (content.smk)
    output:
        ranker("{dataset}", "cross_encoder"),
    params:
        settings=sieve_rules.cross_encoder_settings,
        recipe=training_rules.recipe_label,
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
        "python -m pipeline.sieve.cross_encoder --negatives {input.negatives:q} --qrels {input.qrels:q}"
        " --queries {input.queries:q} --corpus {input.corpus:q} {params.settings} {params.recipe}"
        " --device {params.device} --threads {threads} --out \"$(dirname {output:q})\" --log {log:q}"


rule filter_candidates:
    input:
        unpack(sieve_rules.filter_inputs),
    output:
        decisions=filter_decisions("{dataset}", "{filter}{stag}"),
        train=train_negatives("{dataset}", "{filter}{stag}"),
    wildcard_constraints:
        filter="|".join(OTHER_FILTERS),
    params:
        model=filter_model_arg,
        settings=sieve_rules.filter_settings,
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
        "python -m pipeline.sieve.filters --filter {wildcards.filter} --candidates {input.candidates:q}"
        " --corpus {input.corpus:q} --queries {input.queries:q} {params.model} {params.settings}"
        " --device {params.device} --threads {threads} --out {output.decisions:q} --train-out {output.train:q} --log {log:q}"


rule sieve_report:
    input:
        decisions=lambda wildcards: sieve_rules.decisions(wildcards.dataset, wildcards.filter),
        candidates=sieve_rules.candidates,
    output:
        filter_report("{dataset}", "{filter}{stag}"),
    wildcard_constraints:
        filter="|".join(OTHER_FILTERS + ("sieve", sieve_name(BETA_RE))),
    conda:
        CPU_ENV
    log:
        "logs/sieve_report/{dataset}.{filter}{stag}.log",
    shell:
        "python -m pipeline.sieve.report report --decisions {input.decisions:q} --candidates {input.candidates:q}"
        " --dataset {wildcards.dataset} --filter {wildcards.filter} --out {output:q} --log {log:q}"


rule sieve_comparison:
    input:
        sieve_rules.comparison_reports,
    output:
        md=comparison("{dataset}", "md", "{stag}"),
        json=comparison("{dataset}", "json", "{stag}"),
    conda:
        CPU_ENV
    log:
        "logs/sieve_comparison/{dataset}{stag}.log",
    shell:
        "python -m pipeline.sieve.report compare --dataset {wildcards.dataset} --reports {input:q}"
        " --out-json {output.json:q} --out-md {output.md:q} --log {log:q}"


rule sieve_figures:
    input:
        losses=sieve_rules.figure_losses,
        sieves=sieve_rules.figure_sieves,
        comparison=comparison("{dataset}", "json", "{stag}"),
    output:
        figure1=report(sieve_figure("{dataset}", "figure1_nce_loss.png", "{stag}"), caption="../report/figure1.rst",
                       category="Sieve"),
        figure1_json=sieve_figure("{dataset}", "figure1_separation.json", "{stag}"),
        sieve_out=report(sieve_figure("{dataset}", "sieve_out_rate.png", "{stag}"), category="Sieve"),
        filters=report(sieve_figure("{dataset}", "filters_precision_recall.png", "{stag}"), category="Sieve"),
    params:
        losses=lambda wildcards, input: pairs_arg(sieve_rules.sweep_tags(wildcards.dataset), input.losses),
        sieves=lambda wildcards, input: pairs_arg(sieve_rules.sweep_tags(wildcards.dataset), input.sieves),
    conda:
        CPU_ENV
    log:
        "logs/sieve_figures/{dataset}{stag}.log",
    shell:
        "python -m pipeline.sieve.figures --losses {params.losses} --sieve {params.sieves}"
        " --comparison {input.comparison:q} --out-dir \"$(dirname {output.figure1:q})\" --log {log:q}"



rule sieve_tradeoff:
    input:
        sieve_rules.tradeoff_decisions,
    output:
        json=tradeoff("{dataset}", "json", "{stag}"),
        png=report(tradeoff("{dataset}", "png", "{stag}"), category="Sieve"),
    params:
        decisions=lambda wildcards, input: pairs_arg(sieve_rules.tradeoff_filters(wildcards.dataset), input),
        reference=sieve_rules.tradeoff_reference,
    conda:
        CPU_ENV
    log:
        "logs/sieve_tradeoff/{dataset}{stag}.log",
    shell:
        "python -m pipeline.sieve.tradeoff --decisions {params.decisions} --reference {params.reference}"
        " --out-json {output.json:q} --out-png {output.png:q} --log {log:q}"


# ---- a hard-negative dataset of the user's, cleaned (config clean.<name>; docs/clean.md) ------------
#   results/{clean}/clean/cleaned.{ext}   the same schema back; .decisions.parquet, .report.{json,md} beside

from pipeline.sieve.settings import CLEAN_SUFFIXES


def clean_inputs(wildcards):
    """clean_negatives' input: the content of each file the entry reads (its fingerprint, content.smk), so
    a source replaced with an older mtime or new weights in a local model folder rerun the job and a copy
    of the same content does not; another rule's output (results/<other>/clean/...) as itself."""
    return sieve_rules.clean_inputs(wildcards, fingerprint_file)


rule clean_negatives:
    input:
        unpack(clean_inputs),
    output:
        cleaned=cleaned("{clean}", "{ext}"),
        decisions=clean_file("{clean}", "{ext}", "decisions.parquet"),
        report=clean_file("{clean}", "{ext}", "report.json"),
        markdown=clean_file("{clean}", "{ext}", "report.md"),
    wildcard_constraints:
        clean="|".join(sieve_rules.clean) or "(?!x)x",
        ext="|".join(s.lstrip(".") for s in CLEAN_SUFFIXES),
    params:
        source=sieve_rules.clean_source,
        settings=sieve_rules.clean_settings,
        labels=sieve_rules.clean_labels,
        device=job_device,
    threads: sieve_rules.config["sieve"]["threads"]
    resources:
        **sieve_rules.clean_resources(),
    conda:
        job_env
    log:
        "logs/clean_negatives/{clean}.{ext}.log",
    benchmark:
        "benchmarks/clean_negatives/{clean}.{ext}.tsv"
    shell:
        "python -m pipeline.sieve.clean --input {params.source:q} --out {output.cleaned:q} {params.settings}"
        " {params.labels} --decisions {output.decisions:q} --report {output.report:q} --device {params.device}"
        " --threads {threads} --log {log:q}"

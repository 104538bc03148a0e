# Evaluation: score each method's run on the dataset's evaluation split, then gather every method.
# A run folder is results/{dataset}/{run}/: a method, or one seed of an AR2 method ({method}/seed{s},
# whose seeds ar2.smk's ar2_seeds averages into the method's metrics.json).
# Definitions and file formats: docs/evaluation.md.
import json

from pipeline.core.recipes import recipe_record
from pipeline.workflow.evaluation import RUN_FOLDER, EvaluationRules, fusion_arg, fusion_choice, qrels_all_arg
from pipeline.workflow.paths import (cleaned, dataset_metrics, method_metrics, per_query, qrels, qrels_all, queries,
                                     run, trec_qrels, trec_run)

# The evaluation's lookups (pipeline/workflow/evaluation.py): a run folder's inputs and seeds, the
# TREC exports, every run's per-query file; hybrid.smk's too.
evaluation_rules = EvaluationRules(workflow_tables)


rule evaluate:
    input:
        unpack(evaluation_rules.evaluate_inputs),
    output:
        metrics=method_metrics("{dataset}", "{run}"),
        per_query=per_query("{dataset}", "{run}"),
    wildcard_constraints:
        run=RUN_FOLDER,
    params:
        # dataset, method, split, eval's ks and match, and whether a query may be missing (BM25's runs):
        # one document (pipeline/workflow/evaluation.py evaluate_job)
        settings=evaluation_rules.settings,
        qrels_all=qrels_all_arg,
        fusion=fusion_arg,
    conda:
        CPU_ENV
    log:
        "logs/evaluate/{dataset}.{run}.log",
    benchmark:
        "benchmarks/evaluate/{dataset}.{run}.tsv"
    resources:
        **sized("evaluate"),
    shell:
        "python -m pipeline.evaluation.evaluate --run {input.run:q} --queries {input.queries:q} --qrels {input.qrels:q} {params.qrels_all} --corpus {input.corpus:q} {params.settings} {params.fusion} --out {output.metrics:q} --per-query {output.per_query:q} --log {log:q}"


# A separate rule because Snakemake outputs cannot depend on a function of the wildcards
# (the split comes from eval_split(dataset)); gather_metrics requests these when trec_export is on.
rule export_trec:
    input:
        run=run("{dataset}", "{run}", "{split}"),
        queries=queries("{dataset}", "{split}"),
    output:
        trec_run("{dataset}", "{run}", "{split}"),
    wildcard_constraints:
        run=RUN_FOLDER,
    params:
        tag=lambda wildcards: wildcards.run.replace("/", "_"),
    conda:
        CPU_ENV
    log:
        "logs/export_trec/{dataset}.{run}.{split}.log",
    benchmark:
        "benchmarks/export_trec/{dataset}.{run}.{split}.tsv"
    shell:
        "python -m pipeline.retrieval.runs --run {input.run:q} --queries {input.queries:q} --tag {params.tag} --trec {output:q} --log {log:q}"


rule export_qrels:
    input:
        lambda wildcards: (qrels_all if wildcards.judged == "qrels_all" else qrels)(wildcards.dataset, wildcards.split),
    output:
        trec_qrels("{dataset}", "{split}", "{judged}"),
    wildcard_constraints:
        judged="qrels|qrels_all",
    conda:
        CPU_ENV
    log:
        "logs/export_qrels/{dataset}.{judged}.{split}.log",
    shell:
        "python -m pipeline.evaluation.export_qrels --qrels {input:q} --out {output:q} --log {log:q}"


# A dataset name that is not declared would be a bare "no rule to produce" (the {dataset} wildcard only
# matches declared datasets): this rule matches any file under results/<name>/ or resources/<name>/ of
# another name (results/sweeps/ is the sweep rules', all but a metrics.json there) and names the closest.
# A clean.<name> entry's files (results/<name>/clean/cleaned.<ext>, and beside it) are rule clean_negatives':
# matched here too, this rule's input function was evaluated beside it for every cleaned file and printed
# its "unknown dataset" exception and traceback before the job ran. Any other file under .../clean/ is
# named against the clean entries, not the datasets (a forgotten overlay, the source's extension).
from pipeline.sieve.settings import CLEAN_SUFFIXES

_CLEAN_DIRS = "|".join(re.escape(name) for name in config["clean"]) or "(?!x)x"
_CLEAN_FILES = (f"(?:{_CLEAN_DIRS})/clean/cleaned\\.(?:{'|'.join(s.lstrip('.') for s in CLEAN_SUFFIXES)})"
                "(?:\\.decisions\\.parquet|\\.report\\.json|\\.report\\.md)?$")


def unknown_target(wildcards):
    path = f"{wildcards.top}/{wildcards.name}/{wildcards.rest}"
    name, entries = wildcards.name, sorted(config["clean"])
    if wildcards.top == "results" and wildcards.rest.startswith("clean/"):
        if name in entries:
            ext = config["clean"][name]["source"].rsplit(".", 1)[-1]
            message = (f"{path}: clean entry {name!r} writes {cleaned(name, ext)} (the extension is its source's) "
                       "and beside it .decisions.parquet, .report.json and .report.md")
        else:
            declared = closest(name, entries) if entries else "none declared"
            message = (f"{path}: no clean entry {name!r} ({declared}); a file to clean is declared under `clean` "
                       "in an overlay given with --configfile (docs/clean.md)")
    else:
        message = (f"{path}: unknown dataset {name!r} ({closest(name, list(DATASETS) + ['sweeps'])}); datasets are "
                   "declared under `datasets` in config.yaml or an overlay")
    raise ValueError(message)


rule unknown_dataset:
    input:
        unknown_target,
    output:
        "{top}/{name}/{rest}",
    wildcard_constraints:
        top="results|resources",
        # "/" after the name: the constraint sits inside the path's regex, where "$" never follows it; a
        # dataset's results/<dataset>/clean/ is no rule's either (clean entries write there); resources/
        # fingerprints/, models/ and prefetch/ are content.smk's and prefetch.smk's
        name=(f"(?!(?:{'|'.join(re.escape(d) for d in DATASETS)})/(?!clean/)|fingerprints/|models/|prefetch/)"
              f"(?!sweeps/(?!metrics\\.json$))(?!{_CLEAN_FILES})[^/]+"),
        rest=".+",


rule gather_metrics:
    input:
        metrics=evaluation_rules.gathered_metrics,
        trec=evaluation_rules.trec_exports,
        per_query=evaluation_rules.per_query_files,
    output:
        json=dataset_metrics("{dataset}", "json"),
        md=dataset_metrics("{dataset}", "md"),
        html=report(dataset_metrics("{dataset}", "html"), caption="../report/metrics.rst",
                    category="Metrics"),
        png=report(dataset_metrics("{dataset}", "png"), caption="../report/metrics.rst", category="Metrics"),
    params:
        # each method's metrics under the name `methods` lists (its run folder may carry its β)
        inputs=evaluation_rules.gather_inputs_arg,
        # [method, baseline] pairs; gather leaves out (and logs) a pair with a method not gathered
        compare=json.dumps(config["eval"]["compare"]),
        fixed=lambda wildcards: " ".join(seed_free_methods(wildcards.dataset)),
        # every run's per-query values: a pair with one common seed is tested over the queries
        per_query=evaluation_rules.per_query_arg,
        # the recipe in force and its settings, recorded in metrics.json
        recipe=lambda wildcards: json.dumps(recipe_record(config, wildcards.dataset), sort_keys=True),
    conda:
        CPU_ENV
    log:
        "logs/gather_metrics/{dataset}.log",
    benchmark:
        "benchmarks/gather_metrics/{dataset}.tsv"
    shell:
        "python -m pipeline.evaluation.gather --dataset {wildcards.dataset} --inputs {params.inputs} --out-json {output.json:q} --out-md {output.md:q} --out-html {output.html:q} --out-png {output.png:q} --compare {params.compare:q} --fixed {params.fixed} --per-query {params.per_query} --recipe {params.recipe:q} --log {log:q}"


# With several training seeds, a trained dense method's (or its hybrid's) metrics.json is the seeds'
# mean (and std, and every seed), as ar2_seeds does for AR2 methods.
ruleorder: dense_seeds > evaluate


rule dense_seeds:
    input:
        evaluation_rules.seed_metrics,
    output:
        method_metrics("{dataset}", "{method}"),
    wildcard_constraints:
        dataset=alternatives(evaluation_rules.seeded_datasets()),
        method=alternatives(evaluation_rules.seeded_methods()),
    params:
        seeds=lambda wildcards: " ".join(str(s) for s in training_seeds(wildcards.dataset)),
    conda:
        CPU_ENV
    log:
        "logs/dense_seeds/{dataset}.{method}.log",
    shell:
        "python -m pipeline.evaluation.seed_metrics --metrics {input:q} --seeds {params.seeds}"
        " --out {output:q} --log {log:q}"

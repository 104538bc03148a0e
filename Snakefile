# sieve workflow. Rules live in workflow/rules/; each calls one `python -m pipeline.<family>.<stage>` CLI.
# Main target: results/{dataset}/metrics.json (every method in config `methods`, gathered).
import os

# Anchored to the repository so `--directory elsewhere` still starts from the defaults;
# `--configfile overlay.yaml` deep-merges over them.
configfile: os.path.join(workflow.basedir, "config.yaml")

# Validated (defaults filled in, every key and method checked) by common.smk, included first.

# `snakemake --report report.html <target>`: figures and tables marked report() in the rules.
report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/content.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/synthkb.smk"
include: "workflow/rules/bm25.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/encode.smk"
include: "workflow/rules/hybrid.smk"
include: "workflow/rules/mining.smk"
include: "workflow/rules/sweep.smk"
include: "workflow/rules/sieve.smk"
include: "workflow/rules/ar2.smk"


rule all:
    input:
        "results/synthkb/metrics.json",

# sieve workflow. Rules live in workflow/rules/; each calls one `python -m pipeline.<stage>` CLI.
# Main target: results/{dataset}/metrics.json (every method in config `methods`, gathered).
from snakemake.exceptions import WorkflowError

from pipeline.config import ConfigError, validate_config

configfile: "config.yaml"

try:
    validate_config(config)
except ConfigError as err:
    raise WorkflowError(str(err)) from None


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/synthkb.smk"
include: "workflow/rules/bm25.smk"
include: "workflow/rules/evaluate.smk"


rule all:
    input:
        "results/synthkb/metrics.json",

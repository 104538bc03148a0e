# sieve workflow. Rules live in workflow/rules/; each calls one `python -m pipeline.<family>.<stage>` CLI.
# Main target: results/{dataset}/metrics.json (every method in config `methods`, gathered).
import os
import sys
import warnings

# Jobs call `python -m pipeline...` (and torchrun). When the folder of the interpreter running Snakemake
# is not on PATH (`.venv/bin/snakemake` without an activated venv) it goes first, so the jobs run in the
# venv; a PATH that has it already is left as the user set it. A conda environment
# (--software-deployment-method conda) is activated inside the job and comes first either way.
_INTERPRETER_DIR = os.path.dirname(sys.executable)
if _INTERPRETER_DIR not in os.environ.get("PATH", "").split(os.pathsep):
    os.environ["PATH"] = os.pathsep.join([_INTERPRETER_DIR, os.environ.get("PATH", "")])

# With a profile's default-resources, Snakemake adds its own `disk` (and `mem`) default,
# max(2*input.size_mb, 1000): evaluated while the DAG is built inside Snakemake's event loop, input.size_mb
# creates a coroutine, meets the running loop (NestedCoroutineError), and Snakemake catches that and
# marks the value to be determined later (TBD; snakemake/rules.py, by design). The coroutine it created
# first is dropped unawaited, which printed "RuntimeWarning: coroutine
# 'InputFiles._predicated_size_files.<locals>.sizes' was never awaited" on every dry run with
# profiles/slurm. The warning reports only that dropped object and changes no value or plan (the
# 338-job NQ plan is the same with and without it), so exactly that message is silenced; docs/cluster.md.
warnings.filterwarnings(
    "ignore",
    message=r"coroutine 'InputFiles\._predicated_size_files\.<locals>\.sizes' was never awaited",
    category=RuntimeWarning,
)

# Anchored to the repository so `--directory elsewhere` still starts from the defaults;
# `--configfile overlay.yaml` deep-merges over them.
configfile: os.path.join(workflow.basedir, "config.yaml")

# Validated (defaults filled in, every key and method checked) by common.smk, included first.

# `snakemake --report report.html <target>`: figures and tables marked report() in the rules.
report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/prefetch.smk"  # before content.smk: a hub-named base becomes its local folder
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

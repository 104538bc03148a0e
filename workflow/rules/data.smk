# Data: fetch each declared dataset's sources, then convert them to the canonical tables.
# Formats, roles, checks and checksums: docs/data.md. Synthetic data: synthkb.smk.
import json
import shlex

from pipeline.core.storage import SPLITS
from pipeline.data.readers import sources as data_sources
from pipeline.workflow.data import prepare_settings


def prepare_inputs(wildcards):
    """role -> local file: the configured path, or the download target of a URL/archive member. The
    downloads' pins are checked here too: Snakemake uses an existing file whose producer fails."""
    for role, source in data_sources.dataset_sources(config, wildcards.dataset).items():
        if source.url and source.member:
            check_pin(data_sources.archive_target(config, source.url), data_sources.archive_sha256(config, source.url))
        elif source.url:
            check_pin(data_sources.input_path(config, wildcards.dataset, role), source.sha256)
    return data_sources.prepare_inputs(config, wildcards.dataset)


def prepare_file_args(wildcards, input):
    return " ".join("--file " + shlex.quote(f"{role}={path}") for role, path in input.items()
                    if role != "sources_sha256")


def check_pin(target, pinned):
    """A pinned sha256 is checked against the file already downloaded, not recorded as a param (which
    re-downloaded the file and reran everything after it): a file that is not the pinned one stops
    the plan, naming both digests. Returns no input."""
    if pinned and os.path.isfile(target):
        actual = file_digest(target)
        if actual != pinned:
            raise ValueError(f"{target} has sha256 {actual}, but its source pins sha256 {pinned}: it is not the "
                             f"pinned file. Delete {target} to download the pinned one, or pin {actual}")
    return []


rule download_archive:
    input:
        lambda w: check_pin(archive_file(w.dataset, w.archive),
                            data_sources.pinned_sha256(config, w.dataset, archive=w.archive)),
    output:
        archive_file("{dataset}", "{archive}"),
    params:
        # recorded: the URL; the pinned digest reaches the command through `args` (a function of
        # `output`, unrecorded): pinning a downloaded file reruns nothing (check_pin checks it)
        source=lambda w: data_sources.archive_args(config, w.dataset, w.archive, pin=False),
        args=lambda w, output: data_sources.archive_args(config, w.dataset, w.archive),
    conda:
        CPU_ENV
    log:
        "logs/download_archive/{dataset}/{archive}.log",
    benchmark:
        "benchmarks/download_archive/{dataset}/{archive}.tsv"
    resources:
        mem_mb=512,
    wildcard_constraints:
        archive="[^/]+",
    shell:
        "python -m pipeline.data.download {params.args} --out {output} --log {log}"


rule download:
    input:
        lambda w: data_sources.download_input(config, w.dataset, w.role)
        + check_pin(download_file(w.dataset, w.role), data_sources.pinned_sha256(config, w.dataset, w.role)),
        archive_sha256=source_fingerprints(member=True),  # a local archive's content (content.smk)
    output:
        download_file("{dataset}", "{role}"),
    params:
        source=lambda w: data_sources.download_args(config, w.dataset, w.role, pin=False),  # as download_archive's
        args=lambda w, output: data_sources.download_args(config, w.dataset, w.role),
    conda:
        CPU_ENV
    log:
        "logs/download/{dataset}/{role}.log",
    benchmark:
        "benchmarks/download/{dataset}/{role}.tsv"
    resources:
        mem_mb=512,
    wildcard_constraints:
        role="[a-z_]+",
    shell:
        "python -m pipeline.data.download {params.args} --out {output} --log {log}"


rule prepare_dataset:
    input:
        unpack(prepare_inputs),
        sources_sha256=source_fingerprints(),  # the local sources' content (content.smk)
    output:
        corpus=corpus("{dataset}"),
        queries=[queries("{dataset}", split) for split in SPLITS],
        qrels=[qrels("{dataset}", split) for split in SPLITS],
        negatives=shipped_negatives("{dataset}"),
        manifest=dataset_manifest("{dataset}"),
    params:
        out_dir=dataset_dir("{dataset}"),
        settings=prepare_settings(W),  # format, split, empty_positives: one document (pipeline/workflow/data.py)
        files=prepare_file_args,
    conda:
        CPU_ENV
    log:
        "logs/prepare_dataset/{dataset}.log",
    benchmark:
        "benchmarks/prepare_dataset/{dataset}.tsv"
    resources:
        # DPR: the 21M numeric pids take ~0.5 GB; queries/qrels of MS MARCO train ~1 GB.
        mem_mb=lambda w: 16000 if DATASETS[w.dataset]["format"] in ("dpr", "msmarco") else 2000,
    wildcard_constraints:
        dataset=alternatives(DECLARED),
    shell:
        "python -m pipeline.data.prepare {params.settings} {params.files} --out-dir {params.out_dir} --log {log}"

# Data: fetch each declared dataset's sources, then convert them to the canonical tables.
# Formats, roles, checks and checksums: docs/data.md. Synthetic data: synthkb.smk.
import shlex

from pipeline.core.storage import SPLITS
from pipeline.data.readers import sources as data_sources
from pipeline.workflow.data import prepare_settings
from pipeline.workflow.paths import (archive_member, corpus, dataset_dir, dataset_manifest, qrels, queries,
                                     shipped_negatives, source_file)


def prepare_inputs(wildcards):
    """role -> local file: the configured path, or the download or extraction that holds it. The
    downloads' pins are checked here too: Snakemake uses an existing file whose producer fails."""
    for role, source in data_sources.dataset_sources(config, wildcards.dataset).items():
        if source.url:
            check_pin(data_sources.url_file(source.url), data_sources.url_sha256(config, source.url))
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


def member_file(w):
    return archive_member(source_file(w.origin, w.key, w.archive), w.member, w.name)


def member_inputs(wildcards):
    """The archive a member is extracted from, and a local archive's fingerprint (content.smk)."""
    target = member_file(wildcards)
    archive = data_sources.archive_input(config, target)
    if data_sources.download_source(config, target).url:
        return {"archive": archive}
    return {"archive": archive, "archive_sha256": fingerprint_file(archive)}


# Every download is keyed by its URL (pipeline/data/readers/sources.py): one file whichever datasets
# declare it, so dropping one of them from the config fetches and reruns nothing for the others.
rule download:
    input:
        lambda w: check_pin(source_file("by-url", w.key, w.name),
                            data_sources.download_source(config, source_file("by-url", w.key, w.name)).sha256),
    output:
        source_file("by-url", "{key}", "{name}"),
    params:
        # The path is keyed by the URL, so nothing needs recording. The pinned digest and the files of
        # the older layout to adopt reach the command through `args`, a function of `output` (which
        # Snakemake does not record): pinning reruns nothing, check_pin checks it.
        args=lambda w, output: data_sources.download_args(config, output[0]),
    conda:
        CPU_ENV
    log:
        "logs/download/by-url/{key}/{name}.log",
    benchmark:
        "benchmarks/download/by-url/{key}/{name}.tsv"
    resources:
        mem_mb=512,
    wildcard_constraints:
        key="[0-9a-f]{16}",
        name="[^/]+",
    shell:
        "python -m pipeline.data.download {params.args} --out {output:q} --log {log:q}"


rule extract_member:
    input:
        unpack(member_inputs),
    output:
        archive_member(source_file("{origin}", "{key}", "{archive}"), "{member}", "{name}"),
    params:
        args=lambda w, output: data_sources.download_args(config, output[0]),
    conda:
        CPU_ENV
    log:
        "logs/extract_member/{origin}/{key}/{archive}/{member}/{name}.log",
    benchmark:
        "benchmarks/extract_member/{origin}/{key}/{archive}/{member}/{name}.tsv"
    resources:
        mem_mb=512,
    wildcard_constraints:
        origin="by-url|by-path",
        key="[0-9a-f]{16}",
        archive="[^/]+",
        member="[0-9a-f]{16}",
        name="[^/]+",
    shell:
        "python -m pipeline.data.download {params.args} --out {output:q} --log {log:q}"


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
        settings=prepare_settings(workflow_tables),  # format, split, empty_positives: one document (pipeline/workflow/data.py)
        files=prepare_file_args,
    conda:
        CPU_ENV
    log:
        "logs/prepare_dataset/{dataset}.log",
    benchmark:
        "benchmarks/prepare_dataset/{dataset}.tsv"
    resources:
        **sized("prepare_dataset"),
    wildcard_constraints:
        dataset=alternatives(DECLARED),
    shell:
        "python -m pipeline.data.prepare {params.settings} {params.files} --out-dir {params.out_dir:q} --log {log:q}"

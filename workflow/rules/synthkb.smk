# synthkb: the embedded synthetic encyclopedia (pipeline/synthkb/generate.py, docs/synthkb.md). It writes the
# same canonical tables as prepare_dataset, plus qrels_all.{split} (every passage stating an answer).
from pipeline.core.storage import SPLITS
from pipeline.workflow.paths import (corpus, dataset_dir, dataset_manifest, qrels, qrels_all, queries,
                                     shipped_negatives)
from pipeline.workflow.synthkb import generate_settings


rule generate_synthkb:
    output:
        corpus=corpus("{dataset}"),
        queries=[queries("{dataset}", split) for split in SPLITS],
        qrels=[qrels("{dataset}", split) for split in SPLITS],
        qrels_all=[qrels_all("{dataset}", split) for split in SPLITS],
        negatives=shipped_negatives("{dataset}"),
        manifest=dataset_manifest("{dataset}"),
    params:
        out_dir=dataset_dir("{dataset}"),
        settings=generate_settings(workflow_tables),  # the generator's settings, one document (pipeline/workflow/synthkb.py)
    conda:
        CPU_ENV
    log:
        "logs/generate_synthkb/{dataset}.log",
    benchmark:
        "benchmarks/generate_synthkb/{dataset}.tsv"
    resources:
        mem_mb=1000,  # bounded: one block of entities at a time (~300 MB at any size)
    wildcard_constraints:
        dataset=alternatives(SYNTHETIC),
    shell:
        "python -m pipeline.synthkb.generate --out-dir {params.out_dir:q} {params.settings} --log {log:q}"

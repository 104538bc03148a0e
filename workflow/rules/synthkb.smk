# synthkb: the embedded synthetic encyclopedia (pipeline/synthkb/generate.py, docs/synthkb.md). It writes the
# same canonical tables as prepare_dataset, plus qrels_all.{split} (every passage stating an answer).
import json
import shlex

from pipeline.core.storage import SPLITS
from pipeline.synthkb.generate import DEFAULT_SPLIT as SYNTHKB_SPLIT


def synthkb_split_arg(wildcards):
    spec = DATASETS[wildcards.dataset].get("split", SYNTHKB_SPLIT)  # the schema's synthkb default
    return "--split-spec " + shlex.quote(json.dumps(spec))


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
        entities=lambda w: DATASETS[w.dataset]["entities"],
        seed=lambda w: DATASETS[w.dataset].get("seed", 0),
        split=synthkb_split_arg,
        positive=lambda w: DATASETS[w.dataset].get("positive", "named_article"),
        # the false-negative dial (schema defaults: null, 0.0; pipeline/synthkb/dial.py)
        fn_share=lambda w: "none" if DATASETS[w.dataset].get("fn_share") is None
        else DATASETS[w.dataset]["fn_share"],
        fn_paraphrase=lambda w: DATASETS[w.dataset].get("fn_paraphrase", 0.0),
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
        "python -m pipeline.synthkb.generate --out-dir {params.out_dir} --entities {params.entities} --seed {params.seed} {params.split} --positive {params.positive} --fn-share {params.fn_share} --fn-paraphrase {params.fn_paraphrase} --log {log}"

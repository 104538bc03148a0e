# synthkb: the embedded synthetic encyclopedia (pipeline/synthkb/generate.py, docs/synthkb.md). It writes the
# same canonical tables as prepare_dataset, plus qrels_all.{split} (every passage stating an answer).
import json
import shlex

from pipeline.core.storage import SPLITS


def synthkb_split_arg(wildcards):
    spec = DATASETS[wildcards.dataset].get("split")
    return "" if spec is None else "--split-spec " + shlex.quote(json.dumps(spec))


rule generate_synthkb:
    output:
        corpus="resources/{dataset}/corpus.parquet",
        queries=expand("resources/{{dataset}}/queries.{split}.parquet", split=SPLITS),
        qrels=expand("resources/{{dataset}}/qrels.{split}.parquet", split=SPLITS),
        qrels_all=expand("resources/{{dataset}}/qrels_all.{split}.parquet", split=SPLITS),
        negatives="resources/{dataset}/negatives.train.parquet",
        manifest="resources/{dataset}/manifest.json",
    params:
        entities=lambda w: DATASETS[w.dataset]["entities"],
        seed=lambda w: DATASETS[w.dataset].get("seed", 0),
        split=synthkb_split_arg,
    log:
        "logs/generate_synthkb/{dataset}.log",
    benchmark:
        "benchmarks/generate_synthkb/{dataset}.tsv"
    resources:
        mem_mb=1000,  # bounded: one block of entities at a time (~300 MB at any size)
    wildcard_constraints:
        dataset=_alternatives(SYNTHETIC),
    shell:
        "python -m pipeline.synthkb.generate --out-dir resources/{wildcards.dataset} --entities {params.entities} --seed {params.seed} {params.split} --log {log}"

# BM25 (bm25s): one index per dataset, evaluation runs, and mined hard negatives for training.
from pipeline.workflow.paths import bm25_index_checksums, corpus, negatives, qrels, queries, run
from pipeline.workflow.retrieval import RetrievalRules

# The params and inputs of the retrieval rules, here and in encode.smk and mining.smk:
# pipeline/workflow/retrieval.py.
retrieval_rules = RetrievalRules(workflow_tables)


rule index_bm25:
    input:
        corpus=corpus("{dataset}"),
    output:
        bm25_index_checksums("{dataset}"),  # the folder around it is replaced whole by the stage
    params:
        settings=retrieval_rules.bm25_settings("index"),
    conda:
        CPU_ENV
    log:
        "logs/index_bm25/{dataset}.log",
    benchmark:
        "benchmarks/index_bm25/{dataset}.tsv"
    resources:
        **sized("index_bm25"),
    shell:
        "python -m pipeline.retrieval.bm25 index --corpus {input.corpus:q} --out-dir \"$(dirname {output:q})\""
        " {params.settings} --log {log:q}"


rule retrieve_bm25:
    input:
        index=bm25_index_checksums("{dataset}"),
        queries=queries("{dataset}", "{split}"),
    output:
        run("{dataset}", "bm25", "{split}"),
    params:
        settings=retrieval_rules.bm25_settings("retrieve"),
    conda:
        CPU_ENV
    log:
        "logs/retrieve_bm25/{dataset}.{split}.log",
    benchmark:
        "benchmarks/retrieve_bm25/{dataset}.{split}.tsv"
    resources:
        **sized("retrieve_bm25"),
    shell:
        "python -m pipeline.retrieval.bm25 retrieve --index-dir \"$(dirname {input.index:q})\" --queries {input.queries:q}"
        " {params.settings} --out {output:q} --log {log:q}"


rule mine_bm25_negatives:
    input:
        index=bm25_index_checksums("{dataset}"),
        queries=queries("{dataset}", "train"),
        qrels=qrels("{dataset}", "train"),
        corpus=corpus("{dataset}"),
    output:
        negatives("{dataset}", "bm25"),
    params:
        settings=retrieval_rules.bm25_settings("mine"),
    conda:
        CPU_ENV
    log:
        "logs/mine_bm25_negatives/{dataset}.log",
    benchmark:
        "benchmarks/mine_bm25_negatives/{dataset}.tsv"
    resources:
        **sized("mine_bm25_negatives"),
    # MS MARCO's mining outlasts a 24 h cap: a job ended at its limit is resubmitted and continues from
    # the chunks it finished (<out>.chunks/, not an output, so Snakemake keeps it)
    retries: SEGMENT_RETRIES
    shell:
        "python -m pipeline.retrieval.bm25 mine --index-dir \"$(dirname {input.index:q})\" --queries {input.queries:q}"
        " --qrels {input.qrels:q} --corpus {input.corpus:q} {params.settings} --out {output:q} --log {log:q}"

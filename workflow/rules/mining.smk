# Dense hard-negative mining: a dense method's retriever ranks the train queries, and the rule BM25
# mining uses (pipeline/retrieval/mining.py: positives skipped, answer matches marked `excluded` with
# bm25.exclude_answer_match, bm25.negatives usable per query) turns that ranking into
#
#   results/{dataset}/negatives/{method}.run.train.parquet   the ranking       (search_for_mining)
#   results/{dataset}/negatives/{method}.parquet             the negatives     (mine_dense_negatives)
#   results/{dataset}/models/dpr_mined_{method}/             DPR on them       (train_dpr_mined)
#
# with bm25.parquet's schema, so `sieve.source: <method>` and DPR training read it like BM25's. A
# seeded method mines with the top-level seed's model. docs/training.md "Dense negatives".

from pipeline.workflow.paths import corpus, mining_run, negatives, qrels, queries, retriever

use rule search_dense as search_for_mining with:
    input:
        unpack(retrieval_rules.search_inputs),
        mining_qrels=qrels("{dataset}", "train"),
    output:
        mining_run("{dataset}", "{method}", "{split}"),
    wildcard_constraints:
        method=alternatives(retrieval_rules.mining_sources()),
        split="train",
    params:
        # the train qrels make it a mining search, ranked as deep as its negatives need
        source=retrieval_rules.mining_source,
        settings=retrieval_rules.mining_search_settings,
    log:
        "logs/search_for_mining/{dataset}.{method}.{split}.log",
    benchmark:
        "benchmarks/search_for_mining/{dataset}.{method}.{split}.tsv"


rule mine_dense_negatives:
    input:
        run=mining_run("{dataset}", "{method}"),
        queries=queries("{dataset}", "train"),
        qrels=qrels("{dataset}", "train"),
        corpus=corpus("{dataset}"),
    output:
        negatives("{dataset}", "{method}"),
    wildcard_constraints:
        method=alternatives(retrieval_rules.mining_sources()),
    params:
        settings=retrieval_rules.mine_settings,  # BM25 mining's settings (pipeline.workflow.retrieval.mine_job)
    conda:
        CPU_ENV
    log:
        "logs/mine_dense_negatives/{dataset}.{method}.log",
    benchmark:
        "benchmarks/mine_dense_negatives/{dataset}.{method}.tsv"
    resources:
        mem_mb=8000,
    shell:
        "python -m pipeline.retrieval.mining --run {input.run:q} --queries {input.queries:q} --qrels {input.qrels:q}"
        " --corpus {input.corpus:q} {params.settings} --source {wildcards.method} --out {output:q} --log {log:q}"


# DPR exactly as train_dpr (same settings, seed, steps, from the base model), on a dense method's
# mined negatives instead of BM25's: dpr_mined_dpr is the second round of RocketQA / ANCE-style mining.
use rule train_dpr_filtered as train_dpr_mined with:
    input:
        queries=queries("{dataset}", "train"),
        qrels=qrels("{dataset}", "train"),
        corpus=corpus("{dataset}"),
        negatives=negatives("{dataset}", "{miner}"),
        base_model=base_fingerprint("model"),
    output:
        retriever("{dataset}", "dpr_mined_{miner}"),
    wildcard_constraints:
        miner=alternatives(retrieval_rules.mining_sources()),
    params:
        settings=training_rules.settings("dpr", lambda w: f"dpr_mined_{w.miner}"),
    log:
        "logs/train_dpr_mined/{dataset}.{miner}.log",
    benchmark:
        "benchmarks/train_dpr_mined/{dataset}.{miner}.tsv"


use rule train_dpr_filtered_seed as train_dpr_mined_seed with:
    input:
        queries=queries("{dataset}", "train"),
        qrels=qrels("{dataset}", "train"),
        corpus=corpus("{dataset}"),
        negatives=negatives("{dataset}", "{miner}"),
        base_model=base_fingerprint("model"),
    output:
        retriever("{dataset}", seeded_model("dpr_mined_{miner}", "{seed}")),
    wildcard_constraints:
        miner=alternatives(retrieval_rules.mining_sources()),
        seed=r"\d+",
    params:
        settings=training_rules.settings("dpr", lambda w: f"dpr_mined_{w.miner}"),
    log:
        "logs/train_dpr_mined/{dataset}.{miner}.s{seed}.log",
    benchmark:
        "benchmarks/train_dpr_mined/{dataset}.{miner}.s{seed}.tsv"

# BM25 (bm25s): one index per dataset, evaluation runs, and mined hard negatives for training.


def _opt(value):
    return "none" if value is None else value


rule index_bm25:
    input:
        corpus="resources/{dataset}/corpus.parquet",
    output:
        directory("results/{dataset}/bm25/index"),
    params:
        k1=config["bm25"]["k1"],
        b=config["bm25"]["b"],
        stemmer=_opt(config["bm25"].get("stemmer")),
        stopwords=_opt(config["bm25"].get("stopwords")),
    log:
        "logs/index_bm25/{dataset}.log",
    benchmark:
        "benchmarks/index_bm25/{dataset}.tsv"
    resources:
        mem_mb=8000,
    shell:
        "python -m pipeline.retrieval.bm25 index --corpus {input.corpus} --out-dir {output} --k1 {params.k1}"
        " --b {params.b} --stemmer {params.stemmer} --stopwords {params.stopwords} --log {log}"


rule retrieve_bm25:
    input:
        index="results/{dataset}/bm25/index",
        queries="resources/{dataset}/queries.{split}.parquet",
    output:
        "results/{dataset}/bm25/run.{split}.parquet",
    params:
        depth=config["eval"]["depth"],
    log:
        "logs/retrieve_bm25/{dataset}.{split}.log",
    benchmark:
        "benchmarks/retrieve_bm25/{dataset}.{split}.tsv"
    resources:
        mem_mb=8000,
    shell:
        "python -m pipeline.retrieval.bm25 retrieve --index-dir {input.index} --queries {input.queries}"
        " --depth {params.depth} --out {output} --log {log}"


rule mine_bm25_negatives:
    input:
        index="results/{dataset}/bm25/index",
        queries="resources/{dataset}/queries.train.parquet",
        qrels="resources/{dataset}/qrels.train.parquet",
        corpus="resources/{dataset}/corpus.parquet",
    output:
        "results/{dataset}/negatives/bm25.parquet",
    params:
        negatives=config["bm25"]["negatives"],
        exclude="--exclude-answer-match" if config["bm25"].get("exclude_answer_match") else "",
        match=config["eval"]["match"],
    log:
        "logs/mine_bm25_negatives/{dataset}.log",
    benchmark:
        "benchmarks/mine_bm25_negatives/{dataset}.tsv"
    resources:
        mem_mb=8000,
    shell:
        "python -m pipeline.retrieval.bm25 mine --index-dir {input.index} --queries {input.queries}"
        " --qrels {input.qrels} --corpus {input.corpus} --negatives {params.negatives} {params.exclude}"
        " --match {params.match} --out {output} --log {log}"

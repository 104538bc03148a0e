# BM25 (bm25s): one index per dataset, evaluation runs, and mined hard negatives for training.


def _bm25_setting(key):
    """params function: bm25.<key> of the job's dataset, null spelled 'none'."""
    def value(wildcards):
        v = cfg(wildcards.dataset)["bm25"][key]
        return "none" if v is None else v
    return value


def exclude_answer_match_flag(wildcards):
    """params function: mining's --exclude-answer-match, from bm25 of the job's dataset."""
    return "--exclude-answer-match" if cfg(wildcards.dataset)["bm25"]["exclude_answer_match"] else ""


rule index_bm25:
    input:
        corpus=corpus("{dataset}"),
    output:
        bm25_index_checksums("{dataset}"),  # the folder around it is replaced whole by the stage
    params:
        k1=_bm25_setting("k1"),
        b=_bm25_setting("b"),
        stemmer=_bm25_setting("stemmer"),
        stopwords=_bm25_setting("stopwords"),
    conda:
        CPU_ENV
    log:
        "logs/index_bm25/{dataset}.log",
    benchmark:
        "benchmarks/index_bm25/{dataset}.tsv"
    resources:
        mem_mb=8000,
    shell:
        "python -m pipeline.retrieval.bm25 index --corpus {input.corpus} --out-dir $(dirname {output}) --k1 {params.k1}"
        " --b {params.b} --stemmer {params.stemmer} --stopwords {params.stopwords} --log {log}"


rule retrieve_bm25:
    input:
        index=bm25_index_checksums("{dataset}"),
        queries=queries("{dataset}", "{split}"),
    output:
        run("{dataset}", "bm25", "{split}"),
    params:
        depth=config["eval"]["depth"],
    conda:
        CPU_ENV
    log:
        "logs/retrieve_bm25/{dataset}.{split}.log",
    benchmark:
        "benchmarks/retrieve_bm25/{dataset}.{split}.tsv"
    resources:
        mem_mb=8000,
    shell:
        "python -m pipeline.retrieval.bm25 retrieve --index-dir $(dirname {input.index}) --queries {input.queries}"
        " --depth {params.depth} --out {output} --log {log}"


rule mine_bm25_negatives:
    input:
        index=bm25_index_checksums("{dataset}"),
        queries=queries("{dataset}", "train"),
        qrels=qrels("{dataset}", "train"),
        corpus=corpus("{dataset}"),
    output:
        negatives("{dataset}", "bm25"),
    params:
        negatives=_bm25_setting("negatives"),
        exclude=exclude_answer_match_flag,
        match=config["eval"]["match"],
    conda:
        CPU_ENV
    log:
        "logs/mine_bm25_negatives/{dataset}.log",
    benchmark:
        "benchmarks/mine_bm25_negatives/{dataset}.tsv"
    resources:
        mem_mb=8000,
    shell:
        "python -m pipeline.retrieval.bm25 mine --index-dir $(dirname {input.index}) --queries {input.queries}"
        " --qrels {input.qrels} --corpus {input.corpus} --negatives {params.negatives} {params.exclude}"
        " --match {params.match} --out {output} --log {log}"

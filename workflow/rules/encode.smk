# Dense retrieval: encode the corpus in shards (scatter), gather them, build the FAISS index, search.
# Retriever folders results/{dataset}/models/{model}/ (retriever.json written last) come from train.smk.
# Details and sizing: docs/encoding.md.

from pipeline.workflow.paths import (corpus, embedding_shard, embeddings, embeddings_dir, index, model_dir,
                                     retriever, run)

ENCODE_SHARDS = config["encode"]["shards"]
MODEL_NAME = r"[A-Za-z0-9_.\-]+"


rule encode_corpus:
    input:
        model=retriever("{dataset}", "{model}"),
        corpus=corpus("{dataset}"),
    output:
        emb=embedding_shard("{dataset}", "{model}", "{shard}", ENCODE_SHARDS, "npy"),
        pids=embedding_shard("{dataset}", "{model}", "{shard}", ENCODE_SHARDS, "pids.parquet"),
    wildcard_constraints:
        model=MODEL_NAME,
        shard="|".join(str(i) for i in range(ENCODE_SHARDS)),
    params:
        model=model_dir("{dataset}", "{model}"),
        out_dir=embeddings_dir("{dataset}", "{model}"),
        # encode.backend openvino is the CPU path: a job that holds GPUs encodes with torch (its log says so)
        settings=retrieval_rules.encode_settings,
        device=job_device,
    threads: config["encode"]["threads"]
    resources:
        **sized("encode_corpus", gpu_resources("encode")),
    conda:
        job_env
    log:
        "logs/encode_corpus/{dataset}.{model}.{shard}.log",
    benchmark:
        "benchmarks/encode_corpus/{dataset}.{model}.{shard}.tsv"
    shell:
        "python -m pipeline.retrieval.encode corpus --model {params.model:q} --corpus {input.corpus:q}"
        " --out-dir {params.out_dir:q} --shard {wildcards.shard} --shards " + str(ENCODE_SHARDS) +
        " {params.settings} --device {params.device} --threads {threads} --no-progress --log {log:q}"


rule gather_embeddings:
    input:
        model=retriever("{dataset}", "{model}"),
        corpus=corpus("{dataset}"),
        shards=[embedding_shard("{dataset}", "{model}", i, ENCODE_SHARDS, ext)
                for i in range(ENCODE_SHARDS) for ext in ("npy", "pids.parquet")],
    output:
        embeddings("{dataset}", "{model}"),
    wildcard_constraints:
        model=MODEL_NAME,
    params:
        model=model_dir("{dataset}", "{model}"),
    conda:
        CPU_ENV
    log:
        "logs/gather_embeddings/{dataset}.{model}.log",
    benchmark:
        "benchmarks/gather_embeddings/{dataset}.{model}.tsv"
    shell:
        "python -m pipeline.retrieval.encode gather --out-dir \"$(dirname {output:q})\" --shards " + str(ENCODE_SHARDS) +
        " --model {params.model:q} --corpus {input.corpus:q} --log {log:q}"


rule build_index:
    input:
        embeddings("{dataset}", "{model}"),
    # index.json alone, written last, with the part count in the settings param: consumers request only index.json,
    # and Snakemake skips the params and shell-text checks of a job with an output it holds no record
    # of, so declared parts shard{j}of{m} with a changed m rebuilt nothing. The stage deletes the parts
    # of other counts.
    output:
        index("{dataset}", "{model}"),
    wildcard_constraints:
        model=MODEL_NAME,
    params:
        settings=retrieval_rules.index_settings,
        gpu=faiss_gpu_flag,
        device=job_device,
    threads: config["index"]["threads"]
    resources:
        **sized("build_index", gpu_resources("index")),
    conda:
        job_env
    log:
        "logs/build_index/{dataset}.{model}.log",
    benchmark:
        "benchmarks/build_index/{dataset}.{model}.tsv"
    shell:
        "python -m pipeline.retrieval.index --embeddings \"$(dirname {input:q})\" --out-dir \"$(dirname {output:q})\""
        " {params.settings} {params.gpu} --threads {threads} --no-progress --log {log:q}"


rule search_dense:
    input:
        unpack(retrieval_rules.search_inputs),
    output:
        run("{dataset}", "{method}", "{split}"),
    wildcard_constraints:
        # Only the dense methods: results/{dataset}/bm25/run.{split}.parquet belongs to bm25.smk.
        method="|".join(re.escape(r) for r in runs_of("dense")),
    params:
        source=retrieval_rules.search_source,
        model=lambda wildcards, input: os.path.dirname(input.model),
        # eval.depth, the backend's search knobs, encode.amp (pipeline.workflow.retrieval.search_job)
        settings=retrieval_rules.search_settings,
        gpu=faiss_gpu_flag,
        device=job_device,
    threads: config["search"]["threads"]
    resources:
        **sized("search_dense", gpu_resources("search")),
    conda:
        job_env
    log:
        "logs/search_dense/{dataset}.{method}.{split}.log",
    benchmark:
        "benchmarks/search_dense/{dataset}.{method}.{split}.tsv"
    shell:
        "python -m pipeline.retrieval.search --model {params.model:q} --queries {input.queries:q} --out {output:q}"
        " {params.source} {params.settings} {params.gpu} --device {params.device} --threads {threads}"
        " --no-progress --log {log:q}"


# One run per training seed of a seeded method (config `seeds`): results/{d}/{method}/seed{s}/.
use rule search_dense as search_dense_seed with:
    output:
        run("{dataset}", "{method}", "{split}", seed="{seed}"),
    wildcard_constraints:
        method="|".join(re.escape(r) for r in runs_of("dense")),
        seed=r"\d+",
    log:
        "logs/search_dense/{dataset}.{method}.seed{seed}.{split}.log",
    benchmark:
        "benchmarks/search_dense/{dataset}.{method}.seed{seed}.{split}.tsv"
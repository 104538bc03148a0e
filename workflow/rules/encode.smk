# Dense retrieval: encode the corpus in shards (scatter), gather them, build the FAISS index, search.
# Retriever folders results/{dataset}/models/{model}/ (retriever.json written last) come from train.smk.
# Details and sizing: docs/encoding.md.

ENCODE_SHARDS = config["encode"]["shards"]
INDEX_SHARDS = config["index"].get("shards", 1)
MODEL_NAME = r"[A-Za-z0-9_.\-]+"


def _dense_methods():
    """method -> retriever folder name, for the dense methods this configuration defines."""
    return {method: model for method, model in dense_method_models().items() if model}


def _job_device(wildcards, resources):
    # From the job's resources, not the config: a cluster profile's set-resources may override the
    # GPU count. A job without GPUs never grabs a GPU it happens to see.
    return "cuda" if int(getattr(resources, "gpus", 0) or 0) > 0 else "cpu"


def _faiss_gpu_flag(wildcards, resources):
    return "" if int(getattr(resources, "gpus", 0) or 0) > 0 else "--no-gpu"


def _gpus(section):
    n = config[section].get("gpus", 0)
    # `gpus` is the project's resource name (e.g. `--resources gpus=1` to serialise GPU jobs);
    # `gpu` is what the SLURM executor plugin turns into --gpus.
    return {"gpus": n, "gpu": n}


def _model_dir(wildcards):
    return f"results/{wildcards.dataset}/models/{wildcards.model}"


rule encode_corpus:
    input:
        model="results/{dataset}/models/{model}/retriever.json",
        corpus="resources/{dataset}/corpus.parquet",
    output:
        emb=f"results/{{dataset}}/embeddings/{{model}}/shard{{shard}}of{ENCODE_SHARDS}.npy",
        pids=f"results/{{dataset}}/embeddings/{{model}}/shard{{shard}}of{ENCODE_SHARDS}.pids.parquet",
    wildcard_constraints:
        model=MODEL_NAME,
        shard="|".join(str(i) for i in range(ENCODE_SHARDS)),
    params:
        model=_model_dir,
        out_dir=lambda wildcards, output: os.path.dirname(output.emb),
        batch_size=config["encode"]["batch_size"],
        sort_buffer=config["encode"].get("sort_buffer", 20000),
        amp="" if config["encode"].get("amp", True) else "--no-amp",
        device=_job_device,
    threads: config["encode"].get("threads", 1)
    resources:
        mem_mb=config["encode"].get("mem_mb", 4000),
        **_gpus("encode"),
    log:
        "logs/encode_corpus/{dataset}.{model}.{shard}.log",
    benchmark:
        "benchmarks/encode_corpus/{dataset}.{model}.{shard}.tsv"
    shell:
        "python -m pipeline.retrieval.encode corpus --model {params.model} --corpus {input.corpus}"
        " --out-dir {params.out_dir} --shard {wildcards.shard} --shards " + str(ENCODE_SHARDS) +
        " --batch-size {params.batch_size} --sort-buffer {params.sort_buffer} {params.amp}"
        " --device {params.device} --threads {threads} --no-progress --log {log}"


rule gather_embeddings:
    input:
        model="results/{dataset}/models/{model}/retriever.json",
        corpus="resources/{dataset}/corpus.parquet",
        shards=expand("results/{{dataset}}/embeddings/{{model}}/shard{i}of{n}.{ext}",
                      i=range(ENCODE_SHARDS), n=ENCODE_SHARDS, ext=["npy", "pids.parquet"]),
    output:
        "results/{dataset}/embeddings/{model}/manifest.json",
    wildcard_constraints:
        model=MODEL_NAME,
    params:
        model=_model_dir,
    log:
        "logs/gather_embeddings/{dataset}.{model}.log",
    benchmark:
        "benchmarks/gather_embeddings/{dataset}.{model}.tsv"
    shell:
        "python -m pipeline.retrieval.encode gather --out-dir $(dirname {output}) --shards " + str(ENCODE_SHARDS) +
        " --model {params.model} --corpus {input.corpus} --log {log}"


rule build_index:
    input:
        "results/{dataset}/embeddings/{model}/manifest.json",
    output:
        manifest="results/{dataset}/index/{model}/index.json",
        parts=expand("results/{{dataset}}/index/{{model}}/shard{j}of{m}.{ext}",
                     j=range(INDEX_SHARDS), m=INDEX_SHARDS, ext=["faiss", "pids.parquet"]),
    wildcard_constraints:
        model=MODEL_NAME,
    params:
        factory=config["index"]["factory"],
        train_size=config["index"].get("train_size", 100000),
        gpu=_faiss_gpu_flag,
        seed=config["seed"],
    threads: config["index"].get("threads", 2)
    resources:
        mem_mb=config["index"].get("mem_mb", 8000),
        **_gpus("index"),
    log:
        "logs/build_index/{dataset}.{model}.log",
    benchmark:
        "benchmarks/build_index/{dataset}.{model}.tsv"
    shell:
        "python -m pipeline.retrieval.index --embeddings $(dirname {input}) --out-dir $(dirname {output.manifest})"
        " --factory '{params.factory}' --shards " + str(INDEX_SHARDS) +
        " --train-size {params.train_size} --seed {params.seed} {params.gpu} --threads {threads}"
        " --no-progress --log {log}"


def search_dense_inputs(wildcards):
    model = _dense_methods()[wildcards.method]
    base = f"results/{wildcards.dataset}"
    inputs = {
        "model": f"{base}/models/{model}/retriever.json",
        "queries": f"resources/{wildcards.dataset}/queries.{wildcards.split}.parquet",
    }
    if config["search"]["backend"] == "faiss":
        inputs["index"] = f"{base}/index/{model}/index.json"
    else:
        inputs["embeddings"] = f"{base}/embeddings/{model}/manifest.json"
    return inputs


def _search_source(wildcards, input):
    if "index" in input.keys():
        return f"--backend faiss --index {os.path.dirname(input.index)}"
    return f"--backend torch --embeddings {os.path.dirname(input.embeddings)}"


rule search_dense:
    input:
        unpack(search_dense_inputs),
    output:
        "results/{dataset}/{method}/run.{split}.parquet",
    wildcard_constraints:
        # Only the dense methods: results/{dataset}/bm25/run.{split}.parquet belongs to bm25.smk.
        method="|".join(_dense_methods()) or "(?!x)x",
    params:
        source=_search_source,
        model=lambda wildcards, input: os.path.dirname(input.model),
        depth=config["eval"]["depth"],
        batch_size=config["search"].get("batch_size", 128),
        nprobe=config["search"].get("nprobe", 32),
        ef_search=config["search"].get("ef_search", 128),
        chunk_rows=config["search"].get("chunk_rows", 65536),
        gpu=_faiss_gpu_flag,
        device=_job_device,
    threads: config["search"].get("threads", 2)
    resources:
        mem_mb=config["search"].get("mem_mb", 8000),
        **_gpus("search"),
    log:
        "logs/search_dense/{dataset}.{method}.{split}.log",
    benchmark:
        "benchmarks/search_dense/{dataset}.{method}.{split}.tsv"
    shell:
        "python -m pipeline.retrieval.search --model {params.model} --queries {input.queries} --out {output}"
        " --depth {params.depth} {params.source} --batch-size {params.batch_size}"
        " --nprobe {params.nprobe} --ef-search {params.ef_search} --chunk-rows {params.chunk_rows}"
        " {params.gpu} --device {params.device} --threads {threads} --no-progress --log {log}"

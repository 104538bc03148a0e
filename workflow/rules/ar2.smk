# AR2 (adversarial retriever-ranker) in rounds, per seed: results/{dataset}/ar2/{variant}/seed{seed}/round{r}/,
# {variant} being the method record's variant_dir (a sieve variant's carries its scorer and sieve settings:
# sieve_b0.5, pipeline.core.methods.ar2_sieve_tag). Every step of a round is a rule of its own, each the
# rule that does that work elsewhere where one exists:
#
#   ar2_mine_start       DPR's top ar2.top_k per train query -> ar2/start/negatives.parquet (round 1 of every
#                        variant and seed, and the listwise ranker, train on it)
#   ar2_mine             round r >= 2: the same from round r-1's retriever and its sharded embeddings
#   ar2_train_sieve_model  sieve variants, ar2.sieve_init warm/current: train_ccr's rule on the round's negatives
#   ar2_sieve            sieve variants: the passage sieve over the round's negatives -> sieve.parquet
#   ar2_train_ranker     ar2.ranker_init listwise: the ranker trained once per seed on DPR's candidates
#   ar2_train            ranker then retriever steps -> retriever/, ranker/, carry/ (the optimizer state
#                        the next round continues from; Snakemake deletes it once the next round has
#                        trained, unless ar2.keep_checkpoints), resumable from train.ckpt/
#   ar2_encode_corpus, ar2_gather_embeddings   encode_corpus / gather_embeddings on the round's retriever:
#                        encode.shards parallel shard jobs (GPUs as the encode section reserves them)
#   ar2_search_dev, ar2_evaluate_dev   search_dense / evaluate on the dev split (round 0: DPR, once per
#                        dataset in ar2/start/)
#   ar2_round            round.json: the round's dev metrics and its steps' reports
#
# Per seed, ar2_select picks the round by a dev metric -> {method}/seed{seed}/info.json, ar2_search writes
# that round's run and evaluate scores it; ar2_seeds averages the seeds into {method}/metrics.json (mean,
# std, per-seed values). Adding a seed to ar2.seeds only runs the new seed. Details: docs/ar2.md.
import shlex

from pipeline.core.settings import (AR2_MINE_KEYS, AR2_RANKER_KEYS, AR2_SIEVE_KEYS, Ar2Settings, SieveSettings,
                                    ar2_recorded_settings, to_flags)
from pipeline.core.methods import AR2_SAMPLING


def ar2_config(wildcards):
    """Section ar2 of the job's dataset (its recipe)."""
    return cfg(wildcards.dataset)["ar2"]


def ar2_record(d, folder):
    """The AR2 method whose rounds live in results/{d}/ar2/<folder>/."""
    (record,) = [m for m in RUNS[d].values() if m.kind == "ar2" and m.variant_dir == folder]
    return record


def _ar2_sieves(d, folder):
    return ar2_record(d, folder).variant.endswith("sieve")


# Every AR2 variant folder the datasets' configs name (the {variant} wildcard of the round rules).
AR2_FOLDERS = _alternatives(sorted({re.escape(m.variant_dir) for d in DATASETS for m in RUNS[d].values()
                                    if m.kind == "ar2"}))
AR2_RUNS = _alternatives(sorted({re.escape(run) for run in runs_of("ar2")}))
TRAINED_ROUND = r"[1-9]\d*"
MINED_ROUND = r"[2-9]|[1-9]\d+"  # round 1 trains on ar2/start/negatives.parquet
ROUND_WILDCARDS = dict(variant=AR2_FOLDERS, seed=r"\d+")
# The optimizer state a round hands to the next: kept only where a dataset's config asks for it.
KEEP_CARRY = any(cfg(d)["ar2"]["keep_checkpoints"] for d in DATASETS)


def _round(wildcards, r=None):
    """The round folder of the job's variant and seed (round ``r``, default the job's round)."""
    r = wildcards.r if r is None else r
    return ar2_round_dir(wildcards.dataset, wildcards.variant, wildcards.seed, r)


def _round_model(wildcards, r):
    """retriever.json of round ``r`` of the job's variant and seed; round 0 is the DPR start."""
    return retriever(wildcards.dataset, "dpr") if int(r) == 0 else f"{_round(wildcards, r)}/retriever/retriever.json"


def _round_embeddings(wildcards, r):
    return embeddings(wildcards.dataset, "dpr") if int(r) == 0 else f"{_round(wildcards, r)}/embeddings/manifest.json"


def _round_negatives(wildcards):
    if int(wildcards.r) == 1:
        return ar2_start_file(wildcards.dataset, "negatives.parquet")
    return f"{_round(wildcards)}/negatives.parquet"


def _train_split(d):
    return {"queries": queries(d, "train"), "qrels": qrels(d, "train"), "corpus": corpus(d)}


def _mine_flags(wildcards):
    """What mining reads: ar2's top_k, answer-match exclusion and retriever overrides, eval.match."""
    return (to_flags(Ar2Settings, ar2_config(wildcards), AR2_MINE_KEYS)
            + f" --match {config['eval']['match']}")


rule ar2_mine:
    input:
        model=lambda wildcards: _round_model(wildcards, int(wildcards.r) - 1),
        embeddings=lambda wildcards: _round_embeddings(wildcards, int(wildcards.r) - 1),
        **_train_split("{dataset}"),
    output:
        negatives=ar2_round_dir("{dataset}", "{variant}", "{seed}", "{r}") + "/negatives.parquet",
        stats=ar2_round_dir("{dataset}", "{variant}", "{seed}", "{r}") + "/negatives.stats.json",
    wildcard_constraints:
        r=MINED_ROUND,
        **ROUND_WILDCARDS,
    params:
        settings=_mine_flags,
        source=lambda wildcards: f"ar2/{wildcards.variant}/round{wildcards.r}",
        device=job_device,
    threads: dataset_setting("ar2", "threads")
    resources:
        **gpu_resources("ar2"),
    conda:
        job_env
    log:
        "logs/ar2_mine/{dataset}.{variant}.seed{seed}.round{r}.log",
    benchmark:
        "benchmarks/ar2_mine/{dataset}.{variant}.seed{seed}.round{r}.tsv"
    shell:
        "python -m pipeline.ar2.mine --retriever $(dirname {input.model}) --embeddings $(dirname {input.embeddings})"
        " --queries {input.queries} --qrels {input.qrels} --corpus {input.corpus} {params.settings}"
        " --source {params.source} --out {output.negatives} --device {params.device} --threads {threads} --log {log}"


use rule ar2_mine as ar2_mine_start with:
    input:
        model=retriever("{dataset}", "dpr"),
        embeddings=embeddings("{dataset}", "dpr"),
        **_train_split("{dataset}"),
    output:
        negatives=ar2_start_file("{dataset}", "negatives.parquet"),
        stats=ar2_start_file("{dataset}", "negatives.stats.json"),
    params:
        source="ar2/start",
    log:
        "logs/ar2_mine/{dataset}.start.log",
    benchmark:
        "benchmarks/ar2_mine/{dataset}.start.tsv"


def _sieve_model(wildcards):
    """The model a sieve variant's round judges with (ar2.sieve_init), and its embeddings when stored."""
    d, c = wildcards.dataset, cfg(wildcards.dataset)
    if c["ar2"]["sieve_init"] == "initial":
        model = ccr_model(beta_tag(c["ccr"]["beta"])) if c["sieve"]["scorer"] == "ccr" else "dpr"
        return {"model": retriever(d, model), "model_embeddings": embeddings(d, model)}
    return {"model": f"{_round(wildcards)}/sieve_model/retriever.json"}


def _sieve_inputs(wildcards):
    d = wildcards.dataset
    inputs = {"negatives": _round_negatives(wildcards), **_train_split(d), **_sieve_model(wildcards)}
    if d in SYNTHETIC:
        inputs["qrels_all"] = qrels_all(d, "train")
    return inputs


def _sieve_files(wildcards, input):
    out = ["--model", os.path.dirname(input.model)]
    if "model_embeddings" in input.keys():
        out += ["--embeddings", os.path.dirname(input.model_embeddings)]
    if "qrels_all" in input.keys():
        out += ["--qrels-all", input.qrels_all]
    return " ".join(shlex.quote(x) for x in out)


def _sieve_flags(wildcards):
    """What the round's sieve decides with: config sieve's candidates, pool and decision keys, the seed,
    and how answers are matched. The sieve model's own settings ride on its input files."""
    d = wildcards.dataset
    out = [to_flags(SieveSettings, cfg(d)["sieve"], AR2_SIEVE_KEYS), f"--seed {int(wildcards.seed)}",
           f"--match {config['eval']['match']}"]
    if DATASETS[d]["format"] == "squad":
        out.append("--suspect-same-article")
    return " ".join(out)


rule ar2_sieve:
    input:
        unpack(_sieve_inputs),
    output:
        sieve=ar2_round_dir("{dataset}", "{variant}", "{seed}", "{r}") + "/sieve.parquet",
        stats=ar2_round_dir("{dataset}", "{variant}", "{seed}", "{r}") + "/sieve.stats.json",
    wildcard_constraints:
        r=TRAINED_ROUND,
        **ROUND_WILDCARDS,
    params:
        files=_sieve_files,
        settings=_sieve_flags,
        device=job_device,
    threads: dataset_setting("ar2", "threads")
    resources:
        **gpu_resources("ar2"),
    conda:
        job_env
    log:
        "logs/ar2_sieve/{dataset}.{variant}.seed{seed}.round{r}.log",
    benchmark:
        "benchmarks/ar2_sieve/{dataset}.{variant}.seed{seed}.round{r}.tsv"
    shell:
        "python -m pipeline.ar2.sieving --negatives {input.negatives} --queries {input.queries}"
        " --qrels {input.qrels} --corpus {input.corpus} {params.files} {params.settings}"
        " --out {output.sieve} --device {params.device} --threads {threads} --log {log}"


def _sieve_model_start(wildcards):
    """sieve_init warm: the warm-up DPR (the authors' scripts); current: round r-1's retriever."""
    if ar2_config(wildcards)["sieve_init"] == "warm":
        return retriever(wildcards.dataset, "dpr")
    return _round_model(wildcards, int(wildcards.r) - 1)


# CCR fine-tuning exactly as train_ccr (config ccr, the run's seed), from the model sieve_init names, on
# the round's negatives; a query whose positives fell out of them is dropped, not an error.
use rule train_ccr as ar2_train_sieve_model with:
    input:
        init=_sieve_model_start,
        negatives=_round_negatives,
        **_train_split("{dataset}"),
    output:
        ar2_round_dir("{dataset}", "{variant}", "{seed}", "{r}") + "/sieve_model/retriever.json",
    wildcard_constraints:
        r=TRAINED_ROUND,
        **ROUND_WILDCARDS,
    params:
        settings=train_settings("ccr", drop_queries_without_positive=True),
    log:
        "logs/ar2_train_sieve_model/{dataset}.{variant}.seed{seed}.round{r}.log",
    benchmark:
        "benchmarks/ar2_train_sieve_model/{dataset}.{variant}.seed{seed}.round{r}.tsv"


def _ranker_inputs(wildcards):
    d = wildcards.dataset
    inputs = {"mined": ar2_start_file(d, "negatives.parquet"), "dev_run": ar2_start_file(d, "run.dev.parquet"),
              "retriever": retriever(d, "dpr"),
              **_train_split(d), "dev_queries": queries(d, "dev"), "dev_qrels": qrels(d, "dev"),
              **base_input("ar2.ranker", wildcards, "base_ranker")}  # a local base folder (content.smk)
    if d in SYNTHETIC:
        inputs["dev_qrels_all"] = qrels_all(d, "dev")
    return inputs


def _ranker_flags(wildcards):
    """What the listwise ranker reads of config ar2, the seed, and the dev metrics it is scored by."""
    ks = " ".join(str(k) for k in config["eval"]["ks"])
    return (f"{to_flags(Ar2Settings, ar2_config(wildcards), AR2_RANKER_KEYS)} --seed {int(wildcards.seed)}"
            f" --ks {ks} --match {config['eval']['match']}")


rule ar2_train_ranker:
    input:
        unpack(_ranker_inputs),
    output:
        ar2_trained_ranker("{dataset}", "{seed}"),
    wildcard_constraints:
        seed=r"\d+",
    params:
        settings=_ranker_flags,
        dev_qrels_all=lambda wildcards, input: (f"--dev-qrels-all {input.dev_qrels_all}"
                                                if "dev_qrels_all" in input.keys() else ""),
        # Only which metric the log line compares: a function of `output`, so not recorded.
        metric=lambda wildcards, output: shlex.quote(ar2_config(wildcards)["select_metric"]),
        device=job_device,
    threads: dataset_setting("ar2", "threads")
    resources:
        **gpu_resources("ar2"),
    conda:
        job_env
    log:
        "logs/ar2_train_ranker/{dataset}.seed{seed}.log",
    benchmark:
        "benchmarks/ar2_train_ranker/{dataset}.seed{seed}.tsv"
    shell:
        "python -m pipeline.ar2.train_ranker --mined {input.mined} --retriever $(dirname {input.retriever}) --queries {input.queries} --qrels {input.qrels}"
        " --corpus {input.corpus} --dev-run {input.dev_run} --dev-queries {input.dev_queries}"
        " --dev-qrels {input.dev_qrels} {params.dev_qrels_all} {params.settings} --compare-metric {params.metric}"
        " --out $(dirname {output}) --device {params.device} --threads {threads} --log {log}"


def _train_inputs(wildcards):
    d, r = wildcards.dataset, int(wildcards.r)
    inputs = {"negatives": _round_negatives(wildcards), **_train_split(d),
              "retriever": _round_model(wildcards, r - 1)}
    if _ar2_sieves(d, wildcards.variant):
        inputs["sieve"] = f"{_round(wildcards)}/sieve.parquet"
    init = ar2_config(wildcards)["ranker_init"]
    if r > 1:
        inputs["ranker"] = f"{_round(wildcards, r - 1)}/ranker/ranker.json"
        inputs["carry"] = f"{_round(wildcards, r - 1)}/carry/state.pt"
    elif init == "cross_encoder":
        inputs["ranker"] = ranker(d, "cross_encoder")
    elif init == "listwise":
        inputs["ranker"] = ar2_trained_ranker(d, wildcards.seed)
    else:  # round 1's ranker starts from ar2.ranker.base: a local folder's content (content.smk)
        inputs.update(base_input("ar2.ranker", wildcards, "base_ranker"))
    return inputs


def _train_files(wildcards, input):
    out = ["--retriever", os.path.dirname(input.retriever)]
    for name in ("sieve",):
        if name in input.keys():
            out += [f"--{name}", input[name]]
    for name in ("ranker", "carry"):
        if name in input.keys():
            out += [f"--{name}", os.path.dirname(input[name])]
    return " ".join(shlex.quote(x) for x in out)


def _train_flags(wildcards):
    """Every ar2 key the round's training reads (ar2_recorded_settings), the variant's sampling and the
    seed: a changed one reruns this round's training and everything after it."""
    sampling = AR2_SAMPLING[ar2_record(wildcards.dataset, wildcards.variant).variant]
    recorded = ar2_recorded_settings(ar2_config(wildcards), sampling)
    return f"{to_flags(Ar2Settings, recorded)} --sampling {sampling} --seed {int(wildcards.seed)}"


rule ar2_train:
    input:
        unpack(_train_inputs),
    output:
        retriever=ar2_round_dir("{dataset}", "{variant}", "{seed}", "{r}") + "/retriever/retriever.json",
        ranker=ar2_round_dir("{dataset}", "{variant}", "{seed}", "{r}") + "/ranker/ranker.json",
        carry=(ar2_round_dir("{dataset}", "{variant}", "{seed}", "{r}") + "/carry/state.pt" if KEEP_CARRY
               else temp(ar2_round_dir("{dataset}", "{variant}", "{seed}", "{r}") + "/carry/state.pt")),
        summary=ar2_round_dir("{dataset}", "{variant}", "{seed}", "{r}") + "/train.summary.json",
    wildcard_constraints:
        r=TRAINED_ROUND,
        **ROUND_WILDCARDS,
    params:
        files=_train_files,
        settings=_train_flags,
        round_dir=lambda wildcards: _round(wildcards),
        device=job_device,
    threads: dataset_setting("ar2", "threads")
    resources:
        **gpu_resources("ar2"),
    conda:
        job_env
    log:
        "logs/ar2_train/{dataset}.{variant}.seed{seed}.round{r}.log",
    benchmark:
        "benchmarks/ar2_train/{dataset}.{variant}.seed{seed}.round{r}.tsv"
    shell:
        "python -m pipeline.ar2.train_round --round {wildcards.r} --round-dir {params.round_dir}"
        " --mined {input.negatives} --queries {input.queries} --qrels {input.qrels} --corpus {input.corpus}"
        " {params.files} {params.settings} --device {params.device} --threads {threads} --log {log}"


def _round_shard(ext):
    return ar2_round_dir("{dataset}", "{variant}", "{seed}", "{r}") + f"/embeddings/shard{{shard}}of{ENCODE_SHARDS}.{ext}"


# The round's corpus encoding: encode_corpus's shard jobs, at ar2.encode_batch_size and ar2.precision.
use rule encode_corpus as ar2_encode_corpus with:
    input:
        model=ar2_round_dir("{dataset}", "{variant}", "{seed}", "{r}") + "/retriever/retriever.json",
        corpus=corpus("{dataset}"),
    output:
        emb=_round_shard("npy"),
        pids=_round_shard("pids.parquet"),
    wildcard_constraints:
        r=TRAINED_ROUND,
        shard="|".join(str(i) for i in range(ENCODE_SHARDS)),
        **ROUND_WILDCARDS,
    params:
        model=lambda wildcards: f"{_round(wildcards)}/retriever",
        out_dir=lambda wildcards: f"{_round(wildcards)}/embeddings",
        batch_size=dataset_setting("ar2", "encode_batch_size"),
        amp=lambda wildcards: "--no-amp" if ar2_config(wildcards)["precision"] == "fp32" else "",
    log:
        "logs/ar2_encode_corpus/{dataset}.{variant}.seed{seed}.round{r}.{shard}.log",
    benchmark:
        "benchmarks/ar2_encode_corpus/{dataset}.{variant}.seed{seed}.round{r}.{shard}.tsv"


use rule gather_embeddings as ar2_gather_embeddings with:
    input:
        model=ar2_round_dir("{dataset}", "{variant}", "{seed}", "{r}") + "/retriever/retriever.json",
        corpus=corpus("{dataset}"),
        shards=[_round_shard(ext).replace("{shard}", str(i)) for i in range(ENCODE_SHARDS)
                for ext in ("npy", "pids.parquet")],
    output:
        ar2_round_dir("{dataset}", "{variant}", "{seed}", "{r}") + "/embeddings/manifest.json",
    wildcard_constraints:
        r=TRAINED_ROUND,
        **ROUND_WILDCARDS,
    params:
        model=lambda wildcards: f"{_round(wildcards)}/retriever",
    log:
        "logs/ar2_gather_embeddings/{dataset}.{variant}.seed{seed}.round{r}.log",
    benchmark:
        "benchmarks/ar2_gather_embeddings/{dataset}.{variant}.seed{seed}.round{r}.tsv"


# Dev search with the round's retriever over its embeddings (exact: torch backend over the gathered
# shards), queries in fp32 as AR2's mining encodes them.
use rule search_dense as ar2_search_dev with:
    input:
        model=ar2_round_dir("{dataset}", "{variant}", "{seed}", "{r}") + "/retriever/retriever.json",
        queries=queries("{dataset}", "dev"),
        embeddings=ar2_round_dir("{dataset}", "{variant}", "{seed}", "{r}") + "/embeddings/manifest.json",
    output:
        ar2_round_dir("{dataset}", "{variant}", "{seed}", "{r}") + "/run.dev.parquet",
    wildcard_constraints:
        r=TRAINED_ROUND,
        **ROUND_WILDCARDS,
    params:
        amp="--no-amp",
    threads: dataset_setting("ar2", "threads")
    resources:
        **gpu_resources("ar2"),
    log:
        "logs/ar2_search_dev/{dataset}.{variant}.seed{seed}.round{r}.log",
    benchmark:
        "benchmarks/ar2_search_dev/{dataset}.{variant}.seed{seed}.round{r}.tsv"


use rule ar2_search_dev as ar2_search_dev_start with:
    input:
        model=retriever("{dataset}", "dpr"),
        queries=queries("{dataset}", "dev"),
        embeddings=embeddings("{dataset}", "dpr"),
    output:
        ar2_start_file("{dataset}", "run.dev.parquet"),
    log:
        "logs/ar2_search_dev/{dataset}.start.log",
    benchmark:
        "benchmarks/ar2_search_dev/{dataset}.start.tsv"


def _dev_inputs(folder):
    def inputs(wildcards):
        d = wildcards.dataset
        out = {"run": f"{folder(wildcards)}/run.dev.parquet", "queries": queries(d, "dev"), "qrels": qrels(d, "dev"),
               "corpus": corpus(d)}
        if d in SYNTHETIC:
            out["qrels_all"] = qrels_all(d, "dev")
        return out
    return inputs


use rule evaluate as ar2_evaluate_dev with:
    input:
        unpack(_dev_inputs(_round)),
    output:
        metrics=ar2_round_dir("{dataset}", "{variant}", "{seed}", "{r}") + "/metrics.json",
        per_query=ar2_round_dir("{dataset}", "{variant}", "{seed}", "{r}") + "/per_query.dev.parquet",
    wildcard_constraints:
        r=TRAINED_ROUND,
        **ROUND_WILDCARDS,
    params:
        method=lambda wildcards: ar2_record(wildcards.dataset, wildcards.variant).name,
        split="dev",
        fusion="",
        missing="",
    log:
        "logs/ar2_evaluate_dev/{dataset}.{variant}.seed{seed}.round{r}.log",
    benchmark:
        "benchmarks/ar2_evaluate_dev/{dataset}.{variant}.seed{seed}.round{r}.tsv"


use rule ar2_evaluate_dev as ar2_evaluate_dev_start with:
    input:
        unpack(_dev_inputs(lambda wildcards: os.path.dirname(ar2_start_file(wildcards.dataset, "x")))),
    output:
        metrics=ar2_start_file("{dataset}", "metrics.dev.json"),
        per_query=ar2_start_file("{dataset}", "per_query.dev.parquet"),
    params:
        method="dpr",
    log:
        "logs/ar2_evaluate_dev/{dataset}.start.log",
    benchmark:
        "benchmarks/ar2_evaluate_dev/{dataset}.start.tsv"


def _round_record_inputs(wildcards):
    d, r = wildcards.dataset, int(wildcards.r)
    if r == 0:
        return {"metrics": ar2_start_file(d, "metrics.dev.json"), "start_model": retriever(d, "dpr"),
                "start_embeddings": embeddings(d, "dpr")}
    folder = _round(wildcards)
    inputs = {"metrics": f"{folder}/metrics.json", "train_summary": f"{folder}/train.summary.json",
              "negatives_stats": (ar2_start_file(d, "negatives.stats.json") if r == 1
                                  else f"{folder}/negatives.stats.json")}
    if _ar2_sieves(d, wildcards.variant):
        inputs["sieve_stats"] = f"{folder}/sieve.stats.json"
    return inputs


def _round_record_files(wildcards, input):
    out = []
    for name in ("negatives_stats", "sieve_stats", "train_summary"):
        if name in input.keys():
            out += ["--" + name.replace("_", "-"), input[name]]
    if "start_model" in input.keys():
        out += ["--start-retriever", os.path.dirname(input.start_model),
                "--start-embeddings", os.path.dirname(input.start_embeddings)]
    return " ".join(shlex.quote(x) for x in out)


rule ar2_round:
    input:
        unpack(_round_record_inputs),
    output:
        ar2_round_json("{dataset}", "{variant}", "{seed}", "{r}"),
    wildcard_constraints:
        r=r"\d+",
        **ROUND_WILDCARDS,
    params:
        files=_round_record_files,
        recipe=recipe_label,
        variant=lambda wildcards: ar2_record(wildcards.dataset, wildcards.variant).variant,
    conda:
        CPU_ENV
    log:
        "logs/ar2_round/{dataset}.{variant}.seed{seed}.round{r}.log",
    shell:
        "python -m pipeline.ar2.round_summary --round {wildcards.r} --variant {params.variant}"
        " --dataset {wildcards.dataset} --seed {wildcards.seed} --metrics {input.metrics} {params.files}"
        " {params.recipe} --out {output} --log {log}"


def _ar2_rounds(wildcards):
    variant = RUNS[wildcards.dataset][wildcards.method].variant_dir
    return [ar2_round_json(wildcards.dataset, variant, wildcards.seed, r)
            for r in range(ar2_config(wildcards)["rounds"] + 1)]


rule ar2_select:
    input:
        _ar2_rounds,
    output:
        info=ar2_info("{dataset}", "{method}", "{seed}"),
        figure=report(figure("{dataset}", "{method}_seed{seed}_rounds.png"), category="AR2"),
    wildcard_constraints:
        method=AR2_RUNS,
        seed=r"\d+",
    params:
        variant_dir=lambda wildcards: ar2_seed_dir(wildcards.dataset, RUNS[wildcards.dataset][wildcards.method].variant_dir,
                                                   wildcards.seed),
        variant=lambda wildcards: RUNS[wildcards.dataset][wildcards.method].variant,
        rounds=dataset_setting("ar2", "rounds"),
        metric=dataset_setting("ar2", "select_metric"),
    conda:
        CPU_ENV
    log:
        "logs/ar2_select/{dataset}.{method}.seed{seed}.log",
    benchmark:
        "benchmarks/ar2_select/{dataset}.{method}.seed{seed}.tsv"
    shell:
        "python -m pipeline.ar2.selection select --variant-dir {params.variant_dir}"
        " --variant {params.variant} --rounds {params.rounds} --metric {params.metric:q}"
        " --info-out {output.info} --figure {output.figure} --log {log}"


rule ar2_search:
    input:
        info=ar2_info("{dataset}", "{method}", "{seed}"),
        queries=queries("{dataset}", "{split}"),
    output:
        run("{dataset}", "{method}", "{split}", seed="{seed}"),
    wildcard_constraints:
        method=AR2_RUNS,
        seed=r"\d+",
    params:
        depth=config["eval"]["depth"],
        device=job_device,
    threads: dataset_setting("ar2", "threads")
    resources:
        **gpu_resources("ar2"),
    conda:
        job_env
    log:
        "logs/ar2_search/{dataset}.{method}.seed{seed}.{split}.log",
    benchmark:
        "benchmarks/ar2_search/{dataset}.{method}.seed{seed}.{split}.tsv"
    shell:
        "python -m pipeline.ar2.selection search --info {input.info} --queries {input.queries}"
        " --depth {params.depth} --run-out {output} --device {params.device} --threads {threads}"
        " --log {log}"


# An AR2 method's metrics.json is the seeds' mean (and std), not one run's evaluation.
ruleorder: ar2_seeds > evaluate


rule ar2_seeds:
    input:
        metrics=lambda wildcards: [method_metrics(wildcards.dataset, wildcards.method, seed)
                                   for seed in method_seeds(wildcards.dataset, wildcards.method)],
        infos=lambda wildcards: [ar2_info(wildcards.dataset, wildcards.method, seed)
                                 for seed in method_seeds(wildcards.dataset, wildcards.method)],
    output:
        method_metrics("{dataset}", "{method}"),
    wildcard_constraints:
        method=AR2_RUNS,
    conda:
        CPU_ENV
    log:
        "logs/ar2_seeds/{dataset}.{method}.log",
    shell:
        "python -m pipeline.evaluation.seed_metrics --metrics {input.metrics} --infos {input.infos}"
        " --out {output} --log {log}"


def _ar2_curves(wildcards):
    """(label, round folder parent, info.json) per configured AR2 method and seed."""
    d = wildcards.dataset
    records = [METHODS[d][m] for m in cfg(d)["methods"] if m in AR2_VARIANTS] or [
        METHODS[d]["ar2"], METHODS[d]["ar2_sieve"]]
    seeds = ar2_seeds(d)
    return [(m.variant if len(seeds) == 1 else f"{m.variant}/seed{s}",
             ar2_seed_dir(d, m.variant_dir, s), ar2_info(d, m.run, s))
            for m in records for s in seeds]


# All configured AR2 variants (and seeds) in one figure (not needed by metrics.json; ask for it or use `all`).
rule ar2_learning_curve:
    input:
        lambda wildcards: [info for _, _, info in _ar2_curves(wildcards)],
    output:
        report(figure("{dataset}", "ar2_learning_curve.png"), category="AR2"),
    params:
        args=lambda wildcards: " ".join(f"--variant {label}={folder}"
                                        for label, folder, _ in _ar2_curves(wildcards)),
        rounds=dataset_setting("ar2", "rounds"),
    conda:
        CPU_ENV
    log:
        "logs/ar2_learning_curve/{dataset}.log",
    shell:
        "python -m pipeline.ar2.learning_curve {params.args} --rounds {params.rounds}"
        " --title 'AR2 variants: dev metrics per round' --out {output} --log {log}"

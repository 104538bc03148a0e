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

from pipeline.workflow.ar2 import MINED_ROUND, TRAINED_ROUND, Ar2Rules
from pipeline.workflow.paths import (ar2_info, ar2_round_dir, ar2_round_json, ar2_start_file, ar2_trained_ranker,
                                     corpus, embeddings, figure, method_metrics, queries, retriever, run)

# The rules' functions (input files, flags, wildcard constraints): pipeline/workflow/ar2.py, over
# common.smk's tables; content.smk's base_input finds a local ar2.ranker.base folder's fingerprint.
ar2_rules = Ar2Rules(workflow_tables, base_input)
AR2_RUNS, ROUND_WILDCARDS, KEEP_CARRY = ar2_rules.runs, ar2_rules.round_wildcards, ar2_rules.keep_carry


rule ar2_mine:
    input:
        model=ar2_rules.previous_model,
        embeddings=ar2_rules.previous_embeddings,
        **ar2_rules.train_split("{dataset}"),
    output:
        negatives=ar2_round_dir("{dataset}", "{variant}", "{seed}", "{r}") + "/negatives.parquet",
        stats=ar2_round_dir("{dataset}", "{variant}", "{seed}", "{r}") + "/negatives.stats.json",
    wildcard_constraints:
        r=MINED_ROUND,
        **ROUND_WILDCARDS,
    params:
        settings=ar2_rules.mine_flags,
        source=ar2_rules.mine_source,
        device=job_device,
    threads: dataset_setting("ar2", "threads")
    resources:
        **sized("ar2_mine", gpu_resources("ar2")),
    conda:
        job_env
    log:
        "logs/ar2_mine/{dataset}.{variant}.seed{seed}.round{r}.log",
    benchmark:
        "benchmarks/ar2_mine/{dataset}.{variant}.seed{seed}.round{r}.tsv"
    shell:
        "python -m pipeline.ar2.mine --retriever \"$(dirname {input.model:q})\" --embeddings \"$(dirname {input.embeddings:q})\""
        " --queries {input.queries:q} --qrels {input.qrels:q} --corpus {input.corpus:q} {params.settings}"
        " --source {params.source} --out {output.negatives:q} --device {params.device} --threads {threads} --log {log:q}"


use rule ar2_mine as ar2_mine_start with:
    input:
        model=retriever("{dataset}", "dpr"),
        embeddings=embeddings("{dataset}", "dpr"),
        **ar2_rules.train_split("{dataset}"),
    output:
        negatives=ar2_start_file("{dataset}", "negatives.parquet"),
        stats=ar2_start_file("{dataset}", "negatives.stats.json"),
    params:
        source="ar2/start",
    log:
        "logs/ar2_mine/{dataset}.start.log",
    benchmark:
        "benchmarks/ar2_mine/{dataset}.start.tsv"


rule ar2_sieve:
    input:
        unpack(ar2_rules.sieve_inputs),
    output:
        sieve=ar2_round_dir("{dataset}", "{variant}", "{seed}", "{r}") + "/sieve.parquet",
        stats=ar2_round_dir("{dataset}", "{variant}", "{seed}", "{r}") + "/sieve.stats.json",
    wildcard_constraints:
        r=TRAINED_ROUND,
        **ROUND_WILDCARDS,
    params:
        files=ar2_rules.sieve_files,
        settings=ar2_rules.sieve_flags,
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
        "python -m pipeline.ar2.sieving --negatives {input.negatives:q} --queries {input.queries:q}"
        " --qrels {input.qrels:q} --corpus {input.corpus:q} {params.files} {params.settings}"
        " --out {output.sieve:q} --device {params.device} --threads {threads} --log {log:q}"


# CCR fine-tuning exactly as train_ccr (config ccr, the run's seed), from the model sieve_init names, on
# the round's negatives; a query whose positives fell out of them is dropped, not an error.
use rule train_ccr as ar2_train_sieve_model with:
    input:
        init=ar2_rules.sieve_model_start,
        negatives=ar2_rules.round_negatives,
        **ar2_rules.train_split("{dataset}"),
    output:
        ar2_round_dir("{dataset}", "{variant}", "{seed}", "{r}") + "/sieve_model/retriever.json",
    wildcard_constraints:
        r=TRAINED_ROUND,
        **ROUND_WILDCARDS,
    params:
        settings=training_rules.settings("ccr", None, drop_queries_without_positive=True),
    log:
        "logs/ar2_train_sieve_model/{dataset}.{variant}.seed{seed}.round{r}.log",
    benchmark:
        "benchmarks/ar2_train_sieve_model/{dataset}.{variant}.seed{seed}.round{r}.tsv"


rule ar2_train_ranker:
    input:
        unpack(ar2_rules.ranker_inputs),
    output:
        ar2_trained_ranker("{dataset}", "{seed}"),
    wildcard_constraints:
        seed=r"\d+",
    params:
        settings=ar2_rules.ranker_flags,
        dev_qrels_all=ar2_rules.dev_qrels_all_flag,
        # Only which metric the log line compares: a function of `output`, so not recorded.
        metric=ar2_rules.select_metric,
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
    retries: TRAINING_ATTEMPTS - 1  # segments: a run stopped before its time limit continues
    shell:
        "python -m pipeline.ar2.train_ranker --mined {input.mined:q} --retriever \"$(dirname {input.retriever:q})\" --queries {input.queries:q} --qrels {input.qrels:q}"
        " --corpus {input.corpus:q} --dev-run {input.dev_run:q} --dev-queries {input.dev_queries:q}"
        " --dev-qrels {input.dev_qrels:q} {params.dev_qrels_all} {params.settings} --compare-metric {params.metric}"
        " --out \"$(dirname {output:q})\" --device {params.device} --threads {threads} --log {log:q}"


rule ar2_train:
    input:
        unpack(ar2_rules.train_inputs),
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
        files=ar2_rules.train_files,
        settings=ar2_rules.train_flags,
        round_dir=ar2_rules.round_dir,
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
    retries: TRAINING_ATTEMPTS - 1  # segments: a run stopped before its time limit continues
    shell:
        "python -m pipeline.ar2.train_round --round {wildcards.r} --round-dir {params.round_dir:q}"
        " --mined {input.negatives:q} --queries {input.queries:q} --qrels {input.qrels:q} --corpus {input.corpus:q}"
        " {params.files} {params.settings} --device {params.device} --threads {threads} --log {log:q}"


# The round's corpus encoding: encode_corpus's shard jobs, at ar2.encode_batch_size and ar2.precision.
use rule encode_corpus as ar2_encode_corpus with:
    input:
        model=ar2_round_dir("{dataset}", "{variant}", "{seed}", "{r}") + "/retriever/retriever.json",
        corpus=corpus("{dataset}"),
    output:
        emb=ar2_rules.round_shard("npy"),
        pids=ar2_rules.round_shard("pids.parquet"),
    wildcard_constraints:
        r=TRAINED_ROUND,
        shard="|".join(str(i) for i in range(ENCODE_SHARDS)),
        **ROUND_WILDCARDS,
    params:
        model=ar2_rules.retriever_folder,
        out_dir=ar2_rules.embeddings_folder,
        settings=ar2_rules.encode_settings,
    log:
        "logs/ar2_encode_corpus/{dataset}.{variant}.seed{seed}.round{r}.{shard}.log",
    benchmark:
        "benchmarks/ar2_encode_corpus/{dataset}.{variant}.seed{seed}.round{r}.{shard}.tsv"


use rule gather_embeddings as ar2_gather_embeddings with:
    input:
        model=ar2_round_dir("{dataset}", "{variant}", "{seed}", "{r}") + "/retriever/retriever.json",
        corpus=corpus("{dataset}"),
        shards=ar2_rules.round_shards(),
    output:
        ar2_round_dir("{dataset}", "{variant}", "{seed}", "{r}") + "/embeddings/manifest.json",
    wildcard_constraints:
        r=TRAINED_ROUND,
        **ROUND_WILDCARDS,
    params:
        model=ar2_rules.retriever_folder,
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
        settings=retrieval_rules.ar2_dev_search_settings,
    threads: dataset_setting("ar2", "threads")
    resources:
        **sized("ar2_search_dev", gpu_resources("ar2")),
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


use rule evaluate as ar2_evaluate_dev with:
    input:
        unpack(ar2_rules.round_dev_inputs),
    output:
        metrics=ar2_round_dir("{dataset}", "{variant}", "{seed}", "{r}") + "/metrics.json",
        per_query=ar2_round_dir("{dataset}", "{variant}", "{seed}", "{r}") + "/per_query.dev.parquet",
    wildcard_constraints:
        r=TRAINED_ROUND,
        **ROUND_WILDCARDS,
    params:
        settings=ar2_rules.dev_settings,
        fusion="",
    log:
        "logs/ar2_evaluate_dev/{dataset}.{variant}.seed{seed}.round{r}.log",
    benchmark:
        "benchmarks/ar2_evaluate_dev/{dataset}.{variant}.seed{seed}.round{r}.tsv"


use rule ar2_evaluate_dev as ar2_evaluate_dev_start with:
    input:
        unpack(ar2_rules.start_dev_inputs),
    output:
        metrics=ar2_start_file("{dataset}", "metrics.dev.json"),
        per_query=ar2_start_file("{dataset}", "per_query.dev.parquet"),
    params:
        settings=ar2_rules.start_dev_settings,
    log:
        "logs/ar2_evaluate_dev/{dataset}.start.log",
    benchmark:
        "benchmarks/ar2_evaluate_dev/{dataset}.start.tsv"


rule ar2_round:
    input:
        unpack(ar2_rules.round_record_inputs),
    output:
        ar2_round_json("{dataset}", "{variant}", "{seed}", "{r}"),
    wildcard_constraints:
        r=r"\d+",
        **ROUND_WILDCARDS,
    params:
        files=ar2_rules.round_record_files,
        recipe=training_rules.recipe_label,
        variant=ar2_rules.variant,
    conda:
        CPU_ENV
    log:
        "logs/ar2_round/{dataset}.{variant}.seed{seed}.round{r}.log",
    shell:
        "python -m pipeline.ar2.round_summary --round {wildcards.r} --variant {params.variant}"
        " --dataset {wildcards.dataset} --seed {wildcards.seed} --metrics {input.metrics:q} {params.files}"
        " {params.recipe} --out {output:q} --log {log:q}"


rule ar2_select:
    input:
        ar2_rules.seed_rounds,
    output:
        info=ar2_info("{dataset}", "{method}", "{seed}"),
        figure=report(figure("{dataset}", "{method}_seed{seed}_rounds.png"), category="AR2"),
    wildcard_constraints:
        method=AR2_RUNS,
        seed=r"\d+",
    params:
        variant_dir=ar2_rules.seed_dir,
        variant=ar2_rules.method_variant,
        settings=ar2_rules.select_settings,
    conda:
        CPU_ENV
    log:
        "logs/ar2_select/{dataset}.{method}.seed{seed}.log",
    benchmark:
        "benchmarks/ar2_select/{dataset}.{method}.seed{seed}.tsv"
    shell:
        "python -m pipeline.ar2.selection select --variant-dir {params.variant_dir:q}"
        " --variant {params.variant} {params.settings}"
        " --info-out {output.info:q} --figure {output.figure:q} --log {log:q}"


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
        settings=retrieval_rules.depth_settings,
        device=job_device,
    threads: dataset_setting("ar2", "threads")
    resources:
        **sized("ar2_search", gpu_resources("ar2")),
    conda:
        job_env
    log:
        "logs/ar2_search/{dataset}.{method}.seed{seed}.{split}.log",
    benchmark:
        "benchmarks/ar2_search/{dataset}.{method}.seed{seed}.{split}.tsv"
    shell:
        "python -m pipeline.ar2.selection search --info {input.info:q} --queries {input.queries:q}"
        " {params.settings} --run-out {output:q} --device {params.device} --threads {threads}"
        " --log {log:q}"


# An AR2 method's metrics.json is the seeds' mean (and std), not one run's evaluation.
ruleorder: ar2_seeds > evaluate


rule ar2_seeds:
    input:
        metrics=ar2_rules.seed_metrics,
        infos=ar2_rules.seed_infos,
    output:
        method_metrics("{dataset}", "{method}"),
    wildcard_constraints:
        method=AR2_RUNS,
    conda:
        CPU_ENV
    log:
        "logs/ar2_seeds/{dataset}.{method}.log",
    shell:
        "python -m pipeline.evaluation.seed_metrics --metrics {input.metrics:q} --infos {input.infos:q}"
        " --out {output:q} --log {log:q}"


# All configured AR2 variants (and seeds) in one figure (not needed by metrics.json; ask for it or use `all`).
rule ar2_learning_curve:
    input:
        ar2_rules.curve_infos,
    output:
        report(figure("{dataset}", "ar2_learning_curve.png"), category="AR2"),
    params:
        args=ar2_rules.curve_args,
        settings=ar2_rules.curve_settings,
    conda:
        CPU_ENV
    log:
        "logs/ar2_learning_curve/{dataset}.log",
    shell:
        "python -m pipeline.ar2.learning_curve {params.args} {params.settings}"
        " --title 'AR2 variants: dev metrics per round' --out {output:q} --log {log:q}"

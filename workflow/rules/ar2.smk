# AR2 (adversarial retriever-ranker) in rounds, per seed: results/{dataset}/ar2/{variant}/seed{seed}/round{r}/,
# {variant} being the method record's variant_dir (a sieve variant's carries its scorer and sieve settings:
# sieve_b0.5, pipeline.core.methods.ar2_sieve_tag).
# Round 0 = the DPR start (models/dpr + embeddings/dpr, evaluated on dev); round r >= 1 mines with round
# r-1's retriever, sieves (sieve variants), trains ranker then retriever, re-encodes the corpus and
# evaluates on dev. Per seed, ar2_select picks the round by a dev metric -> {method}/seed{seed}/info.json,
# ar2_search writes that round's run and evaluate scores it; ar2_seeds averages the seeds into
# {method}/metrics.json (mean, std, per-seed values). Adding a seed to ar2.seeds only runs the new seed.
# Details: docs/ar2.md.
import shlex

from pipeline.core.settings import (AR2_CCR_KEYS, AR2_SIEVE_KEYS, Ar2Settings, CcrSettings, EvalSettings, SieveSettings,
                                    ar2_recorded_settings, to_flags)



def ar2_config(wildcards):
    """Section ar2 of the job's dataset (its recipe)."""
    return cfg(wildcards.dataset)["ar2"]


def ar2_record(d, folder):
    """The AR2 method whose rounds live in results/{d}/ar2/<folder>/."""
    (record,) = [m for m in RUNS[d].values() if m.kind == "ar2" and m.variant_dir == folder]
    return record


def _ar2_sieves(d, folder):
    return ar2_record(d, folder).variant.endswith("sieve")


# Every AR2 variant folder the datasets' configs name (the {variant} wildcard of ar2_round).
AR2_FOLDERS = _alternatives(sorted({re.escape(m.variant_dir) for d in DATASETS for m in RUNS[d].values()
                                    if m.kind == "ar2"}))
AR2_RUNS = _alternatives(sorted({re.escape(run) for run in runs_of("ar2")}))


def ar2_round_inputs(wildcards):
    d, variant, r, seed = wildcards.dataset, wildcards.variant, int(wildcards.r), wildcards.seed
    c = cfg(d)
    inputs = {
        "corpus": corpus(d),
        "train_queries": queries(d, "train"),
        "train_qrels": qrels(d, "train"),
        "dev_queries": queries(d, "dev"),
        "dev_qrels": qrels(d, "dev"),
    }
    if d in SYNTHETIC:
        inputs["train_qrels_all"] = qrels_all(d, "train")
        inputs["dev_qrels_all"] = qrels_all(d, "dev")
    if r == 0:
        inputs["start_model"] = retriever(d, "dpr")
        inputs["start_embeddings"] = embeddings(d, "dpr")
    else:
        inputs["previous"] = ar2_round_json(d, variant, seed, r - 1)
        if r == 1 and c["ar2"]["ranker_init"] == "cross_encoder":
            inputs["ranker_init"] = ranker(d, "cross_encoder")
        if _ar2_sieves(d, variant):
            if c["ar2"]["sieve_init"] == "warm":
                inputs["warm_model"] = retriever(d, "dpr")
            if c["ar2"]["sieve_init"] == "initial":
                model = ccr_model(beta_tag(c["ccr"]["beta"])) if c["sieve"]["scorer"] == "ccr" else "dpr"
                inputs["sieve_model"] = retriever(d, model)
                inputs["sieve_embeddings"] = embeddings(d, model)
    return inputs


def ar2_round_files(wildcards, input):
    """The round's input files as flags (tracked as inputs; a function of `input` is not recorded)."""
    keys = input.keys()
    out = []
    for name in ("corpus", "train_queries", "train_qrels", "train_qrels_all", "dev_queries",
                 "dev_qrels", "dev_qrels_all"):
        if name in keys:
            out += ["--" + name.replace("_", "-"), input[name]]
    if int(wildcards.r) == 0:
        out += ["--start-retriever", os.path.dirname(input.start_model),
                "--start-embeddings", os.path.dirname(input.start_embeddings)]
    else:
        out += ["--prev-dir", os.path.dirname(input.previous)]
    if "ranker_init" in keys:
        out += ["--trained-ranker", os.path.dirname(input.ranker_init)]
    if "warm_model" in keys:
        out += ["--warm-retriever", os.path.dirname(input.warm_model)]
    if "sieve_model" in keys:
        out += ["--sieve-model", os.path.dirname(input.sieve_model),
                "--sieve-embeddings", os.path.dirname(input.sieve_embeddings)]
    return " ".join(shlex.quote(x) for x in out)


def ar2_round_settings(wildcards):
    """Every setting the round reads. A function of the wildcards only, so Snakemake records it as a
    param and a changed setting reruns the round (docs/failures.md)."""
    d = wildcards.dataset
    c = cfg(d)
    out = []
    if _ar2_sieves(d, wildcards.variant):
        out.append(to_flags(SieveSettings, c["sieve"], AR2_SIEVE_KEYS, prefix="sieve"))
        if c["ar2"]["sieve_init"] in ("warm", "current"):
            out.append(to_flags(CcrSettings, c["ccr"], AR2_CCR_KEYS, prefix="ccr"))
    if DATASETS[d]["format"] == "squad":
        out.append("--suspect-same-article")
    out.append(to_flags(EvalSettings, config["eval"], ("match",)))
    out.append(f"--depth {int(config['eval']['depth'])} --ks " + " ".join(str(k) for k in config["eval"]["ks"]))
    recorded = ar2_recorded_settings(c["ar2"])
    if not _ar2_sieves(d, wildcards.variant):
        # Only a sieve variant reads sieve_init: a changed one must not rerun the plain rounds.
        recorded = {k: v for k, v in recorded.items() if k != "sieve_init"}
    out.append(to_flags(Ar2Settings, recorded))
    return " ".join(out + [f"--seed {int(wildcards.seed)}"])


rule ar2_round:
    input:
        unpack(ar2_round_inputs),
    output:
        ar2_round_json("{dataset}", "{variant}", "{seed}", "{r}"),
    wildcard_constraints:
        variant=AR2_FOLDERS,
        seed=r"\d+",
        r=r"\d+",
    params:
        files=ar2_round_files,
        settings=ar2_round_settings,
        recipe=recipe_label,
        round_dir=lambda wildcards, output: os.path.dirname(output[0]),
        variant=lambda wildcards: ar2_record(wildcards.dataset, wildcards.variant).variant,
        device=job_device,
    threads: dataset_setting("ar2", "threads")
    resources:
        **gpu_resources("ar2"),
    conda:
        job_env
    log:
        "logs/ar2_round/{dataset}.{variant}.seed{seed}.round{r}.log",
    benchmark:
        "benchmarks/ar2_round/{dataset}.{variant}.seed{seed}.round{r}.tsv"
    shell:
        "python -m pipeline.ar2.run_round --round {wildcards.r} --round-dir {params.round_dir}"
        " --variant {params.variant} --dataset {wildcards.dataset} {params.files} {params.settings} {params.recipe}"
        " --device {params.device} --threads {threads} --log {log}"


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

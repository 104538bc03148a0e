# Dense retrievers: the zero-shot base, DPR (NCE warm-up on BM25 negatives), CCR fine-tuning.
# Each writes results/{dataset}/models/{model}/ (retriever.json last; train_log.jsonl, train_info.json);
# training checkpoints live in models/{model}.ckpt/ until the run succeeds. See docs/training.md.
from pipeline.core.methods import GIST_GUIDES, gist_model, relabel_model
from pipeline.core.settings.base import TRAINING_ATTEMPTS
from pipeline.workflow.paths import corpus, qrels, queries, relabel_qrels, retriever, train_negatives
from pipeline.workflow.training import TrainingRules

# The params and inputs of the training rules: pipeline/workflow/training.py.
training_rules = TrainingRules(workflow_tables, base_input)

# The β tags of the CCR models the config asks for (ccr.beta and sieve.betas of every dataset).
CCR_TAGS = alternatives([re.escape(tag) for tag in sorted({t for d in DATASETS for t in CCR_BETAS[d]})])
RCL_TAGS = alternatives(sorted({re.escape(tag) for tag in training_rules.rcl_tags.values()}))


# One process on CPU or one GPU; torchrun DDP (one process per GPU) when more are reserved. The `--`
# keeps torchrun from parsing our flags (it accepts abbreviations: --log would match its --log-dir).
_LAUNCH = ('device=cpu; launch="python"; '
           'if [ {resources.gpus} -gt 0 ]; then device=cuda; fi; '
           'if [ {resources.gpus} -gt 1 ]; then '
           'launch="torchrun --standalone --nproc_per_node={resources.gpus}"; fi; '
           '$launch -m pipeline.training.train_dense -- --device $device ')


rule init_zeroshot:
    input:
        base_model=base_fingerprint("model"),  # a local base folder's content (content.smk)
    output:
        retriever("{dataset}", "zeroshot"),
    params:
        base=training_rules.base,
        settings=training_rules.init_settings,
        recipe=training_rules.recipe_label,
    conda:
        CPU_ENV
    log:
        "logs/init_zeroshot/{dataset}.log",
    benchmark:
        "benchmarks/init_zeroshot/{dataset}.tsv"
    resources:
        mem_mb=2000,
    shell:
        "python -m pipeline.training.train_dense --device cpu --init-only --base {params.base} {params.settings} {params.recipe}"
        " --out \"$(dirname {output:q})\" --log {log:q}"


rule train_dpr:
    input:
        unpack(training_rules.dpr_inputs),
    output:
        retriever("{dataset}", "dpr"),
    params:
        settings=training_rules.dpr_settings,
        files=training_rules.dpr_files,
        recipe=training_rules.recipe_label,
        device=job_device,  # for job_env; _LAUNCH reads the same resources.gpus
    threads: dataset_setting("dpr", "threads")
    resources:
        **gpu_resources("dpr", used=training_rules.dpr_trains),
    conda:
        job_env
    log:
        "logs/train_dpr/{dataset}.log",
    benchmark:
        "benchmarks/train_dpr/{dataset}.tsv"
    retries: TRAINING_ATTEMPTS - 1  # segments: a run stopped before its time limit continues
    shell:
        _LAUNCH + "{params.settings} {params.files} {params.recipe} --threads {threads} --out \"$(dirname {output:q})\" --log {log:q}"


rule train_ccr:
    input:
        init=retriever("{dataset}", "dpr"),
        **training_rules.train_inputs,
    output:
        retriever("{dataset}", ccr_model("{beta}")),
    wildcard_constraints:
        beta=CCR_TAGS,
    params:
        settings=training_rules.settings("ccr", lambda w: ccr_model(w.beta)),
        recipe=training_rules.recipe_label,
        device=job_device,  # for job_env; _LAUNCH reads the same resources.gpus
    threads: dataset_setting("ccr", "threads")
    resources:
        **gpu_resources("ccr"),
    conda:
        job_env
    log:
        "logs/train_ccr/{dataset}.b{beta}.log",
    benchmark:
        "benchmarks/train_ccr/{dataset}.b{beta}.tsv"
    retries: TRAINING_ATTEMPTS - 1  # segments: a run stopped before its time limit continues
    shell:
        _LAUNCH + "--init \"$(dirname {input.init:q})\" --queries {input.queries:q} --qrels {input.qrels:q}"
        " --negatives {input.negatives:q} --corpus {input.corpus:q} {params.settings} {params.recipe} --threads {threads}"
        " --out \"$(dirname {output:q})\" --log {log:q}"


rule train_dpr_filtered:
    # DPR exactly as train_dpr (same settings, seed, steps), on the candidates a filter kept: the
    # controls dpr_<filter> and dpr_sieve. See docs/training.md "Controls".
    input:
        queries=queries("{dataset}", "train"),
        qrels=qrels("{dataset}", "train"),
        corpus=corpus("{dataset}"),
        negatives=train_negatives("{dataset}", "{negs}"),
        base_model=base_fingerprint("model"),
    output:
        retriever("{dataset}", dpr_on("{negs}")),
    wildcard_constraints:
        negs=FILTERED_NEGS_RE,
    params:
        base=training_rules.base,
        settings=training_rules.settings("dpr", lambda w: dpr_on(w.negs)),
        recipe=training_rules.recipe_label,
        device=job_device,  # for job_env; _LAUNCH reads the same resources.gpus
    threads: dataset_setting("dpr", "threads")
    resources:
        **gpu_resources("dpr"),
    conda:
        job_env
    log:
        "logs/train_dpr_filtered/{dataset}.{negs}.log",
    benchmark:
        "benchmarks/train_dpr_filtered/{dataset}.{negs}.tsv"
    retries: TRAINING_ATTEMPTS - 1  # segments: a run stopped before its time limit continues
    shell:
        _LAUNCH + "--init {params.base} --queries {input.queries:q} --qrels {input.qrels:q}"
        " --negatives {input.negatives:q} --corpus {input.corpus:q} {params.settings} {params.recipe} --threads {threads}"
        " --out \"$(dirname {output:q})\" --log {log:q}"


rule relabel_qrels:
    # The train qrels with the candidates a detector dropped as extra positives (dpr_relabel_<detector>).
    input:
        unpack(training_rules.relabel_inputs),
    output:
        relabel_qrels("{dataset}", "{negs}"),
    wildcard_constraints:
        negs=FILTERED_NEGS_RE,
    conda:
        CPU_ENV
    log:
        "logs/relabel_qrels/{dataset}.{negs}.log",
    shell:
        "python -m pipeline.sieve.relabel --qrels {input.qrels:q} --decisions {input.decisions:q} --out {output:q} --log {log:q}"


rule train_dpr_relabel:
    # DPR exactly as train_dpr_filtered on the detector's kept negatives, with the candidates it dropped
    # as extra positives (multi-positive NCE, dpr.relabel). See docs/training.md "Relabel".
    input:
        unpack(training_rules.relabel_train_inputs),
        base_model=base_fingerprint("model"),
    output:
        retriever("{dataset}", relabel_model("{negs}")),
    wildcard_constraints:
        negs=FILTERED_NEGS_RE,
    params:
        base=training_rules.base,
        settings=training_rules.relabel_settings,
        recipe=training_rules.recipe_label,
        device=job_device,  # for job_env; _LAUNCH reads the same resources.gpus
    threads: dataset_setting("dpr", "threads")
    resources:
        **gpu_resources("dpr"),
    conda:
        job_env
    log:
        "logs/train_dpr_relabel/{dataset}.{negs}.log",
    benchmark:
        "benchmarks/train_dpr_relabel/{dataset}.{negs}.tsv"
    retries: TRAINING_ATTEMPTS - 1  # segments: a run stopped before its time limit continues
    shell:
        _LAUNCH + "--init {params.base} --queries {input.queries:q} --qrels {input.qrels:q}"
        " --negatives {input.negatives:q} --corpus {input.corpus:q} {params.settings} {params.recipe} --threads {threads}"
        " --out \"$(dirname {output:q})\" --log {log:q}"


rule train_dpr_gist:
    # DPR exactly as train_dpr_filtered on dpr_none's negatives, every negative the guide (the main
    # seed's models/<guide>) scores above the query's positive masked out of its softmax (GISTEmbedLoss).
    input:
        queries=queries("{dataset}", "train"),
        qrels=qrels("{dataset}", "train"),
        corpus=corpus("{dataset}"),
        negatives=train_negatives("{dataset}", "{negs}"),
        guide=retriever("{dataset}", "{guide}"),
        base_model=base_fingerprint("model"),
    output:
        retriever("{dataset}", gist_model("{guide}", "{negs}")),
    wildcard_constraints:
        guide="|".join(GIST_GUIDES),
        negs="none" + SIEVE_TAG_RE,
    params:
        base=training_rules.base,
        settings=training_rules.settings("dpr", lambda w: gist_model(w.guide, w.negs)),
        recipe=training_rules.recipe_label,
        device=job_device,  # for job_env; _LAUNCH reads the same resources.gpus
    threads: dataset_setting("dpr", "threads")
    resources:
        **gpu_resources("dpr"),
    conda:
        job_env
    log:
        "logs/train_dpr_gist/{dataset}.{guide}.{negs}.log",
    benchmark:
        "benchmarks/train_dpr_gist/{dataset}.{guide}.{negs}.tsv"
    retries: TRAINING_ATTEMPTS - 1  # segments: a run stopped before its time limit continues
    shell:
        _LAUNCH + "--init {params.base} --queries {input.queries:q} --qrels {input.qrels:q}"
        " --negatives {input.negatives:q} --corpus {input.corpus:q} --guide \"$(dirname {input.guide:q})\" {params.settings}"
        " {params.recipe} --threads {threads} --out \"$(dirname {output:q})\" --log {log:q}"


rule train_dpr_rcl:
    # DPR exactly as train_dpr (same settings, seed, steps, BM25 negatives), its loss l(p+) − β·l_CCR:
    # the paper's Table 5 "DPR + CCR". Compare with dpr. See docs/training.md "Controls".
    input:
        **training_rules.train_inputs,
        base_model=base_fingerprint("model"),
    output:
        retriever("{dataset}", rcl_model("{rcl_beta}")),
    wildcard_constraints:
        rcl_beta=RCL_TAGS,
    params:
        base=training_rules.base,
        settings=training_rules.rcl_settings,
        recipe=training_rules.recipe_label,
        device=job_device,  # for job_env; _LAUNCH reads the same resources.gpus
    threads: dataset_setting("dpr", "threads")
    resources:
        **gpu_resources("dpr"),
    conda:
        job_env
    log:
        "logs/train_dpr_rcl/{dataset}.b{rcl_beta}.log",
    benchmark:
        "benchmarks/train_dpr_rcl/{dataset}.b{rcl_beta}.tsv"
    retries: TRAINING_ATTEMPTS - 1  # segments: a run stopped before its time limit continues
    shell:
        _LAUNCH + "--init {params.base} --queries {input.queries:q} --qrels {input.qrels:q}"
        " --negatives {input.negatives:q} --corpus {input.corpus:q} {params.settings} {params.recipe} --threads {threads}"
        " --out \"$(dirname {output:q})\" --log {log:q}"


# Other training seeds (config `seeds`): the same rules, the seed in the model name
# (seeded_model: models/<model>-s<seed>/); the top-level seed's models are the rules above.
use rule train_dpr as train_dpr_seed with:
    output:
        retriever("{dataset}", seeded_model("dpr", "{seed}")),
    wildcard_constraints:
        seed=r"\d+",
    log:
        "logs/train_dpr/{dataset}.s{seed}.log",
    benchmark:
        "benchmarks/train_dpr/{dataset}.s{seed}.tsv"


use rule train_ccr as train_ccr_seed with:
    input:
        init=retriever("{dataset}", seeded_model("dpr", "{seed}")),
        **training_rules.train_inputs,
    output:
        retriever("{dataset}", seeded_model(ccr_model("{beta}"), "{seed}")),
    wildcard_constraints:
        beta=CCR_TAGS,
        seed=r"\d+",
    log:
        "logs/train_ccr/{dataset}.b{beta}.s{seed}.log",
    benchmark:
        "benchmarks/train_ccr/{dataset}.b{beta}.s{seed}.tsv"


use rule train_dpr_filtered as train_dpr_filtered_seed with:
    output:
        retriever("{dataset}", seeded_model(dpr_on("{negs}"), "{seed}")),
    wildcard_constraints:
        negs=FILTERED_NEGS_RE,
        seed=r"\d+",
    log:
        "logs/train_dpr_filtered/{dataset}.{negs}.s{seed}.log",
    benchmark:
        "benchmarks/train_dpr_filtered/{dataset}.{negs}.s{seed}.tsv"


use rule train_dpr_rcl as train_dpr_rcl_seed with:
    output:
        retriever("{dataset}", seeded_model(rcl_model("{rcl_beta}"), "{seed}")),
    wildcard_constraints:
        rcl_beta=RCL_TAGS,
        seed=r"\d+",
    log:
        "logs/train_dpr_rcl/{dataset}.b{rcl_beta}.s{seed}.log",
    benchmark:
        "benchmarks/train_dpr_rcl/{dataset}.b{rcl_beta}.s{seed}.tsv"


use rule train_dpr_relabel as train_dpr_relabel_seed with:
    output:
        retriever("{dataset}", seeded_model(relabel_model("{negs}"), "{seed}")),
    wildcard_constraints:
        negs=FILTERED_NEGS_RE,
        seed=r"\d+",
    log:
        "logs/train_dpr_relabel/{dataset}.{negs}.s{seed}.log",
    benchmark:
        "benchmarks/train_dpr_relabel/{dataset}.{negs}.s{seed}.tsv"


use rule train_dpr_gist as train_dpr_gist_seed with:
    output:
        retriever("{dataset}", seeded_model(gist_model("{guide}", "{negs}"), "{seed}")),
    wildcard_constraints:
        guide="|".join(GIST_GUIDES),
        negs="none" + SIEVE_TAG_RE,
        seed=r"\d+",
    log:
        "logs/train_dpr_gist/{dataset}.{guide}.{negs}.s{seed}.log",
    benchmark:
        "benchmarks/train_dpr_gist/{dataset}.{guide}.{negs}.s{seed}.tsv"


rule select_model:
    # Model selection on dev (opt-in methods <trained>_wise, <trained>_wise_truth): the trained model,
    # the model it started from or a WiSE-FT interpolation of the two, the best on dev; see
    # docs/training.md "Keeping the start: model selection on dev".
    input:
        unpack(training_rules.select_inputs),
    output:
        retriever("{dataset}", "{model}"),
    wildcard_constraints:
        model=alternatives([re.escape(m) for m in training_rules.selected_models]),
    params:
        settings=training_rules.select_settings,
        device=job_device,  # for job_env
    threads: dataset_setting("selection", "threads")
    resources:
        **sized("select_model", gpu_resources("selection")),
    conda:
        job_env
    log:
        "logs/select_model/{dataset}.{model}.log",
    benchmark:
        "benchmarks/select_model/{dataset}.{model}.tsv"
    shell:
        "python -m pipeline.training.select_model --device {params.device} --start \"$(dirname {input.start:q})\""
        " --trained \"$(dirname {input.trained:q})\" --queries {input.queries:q} --qrels {input.qrels:q}"
        " --corpus {input.corpus:q} --candidates {input.candidates:q} {params.settings} --threads {threads}"
        " --out \"$(dirname {output:q})\" --log {log:q}"


use rule select_model as select_model_seed with:
    output:
        retriever("{dataset}", seeded_model("{model}", "{seed}")),
    wildcard_constraints:
        model=alternatives([re.escape(m) for m in training_rules.selected_models]),
        seed=r"\d+",
    log:
        "logs/select_model/{dataset}.{model}.s{seed}.log",
    benchmark:
        "benchmarks/select_model/{dataset}.{model}.s{seed}.tsv"

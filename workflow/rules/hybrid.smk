# Hybrid retrieval: BM25 fused with a dense method's run, evaluated and gathered like any method.
#
#   results/{dataset}/hybrid_rrf_{dense}/run.{split}.parquet     reciprocal-rank fusion       (fuse_rrf)
#   results/{dataset}/hybrid_wsum_{dense}/run.{split}.parquet    weighted sum, w from dev      (fuse_weighted)
#   results/{dataset}/hybrid_wsum_{dense}/fusion.{split}.json    the chosen w, dev metric per w
#
# A hybrid of a seeded dense method has a run per seed (.../seed{s}/), as the dense method does.
# Formulas: pipeline/retrieval/fusion.py; the stage: pipeline/evaluation/hybrid.py; docs/evaluation.md.

def _hybrid_methods(fusion):
    """Hybrid method names of every dataset with this fusion (wildcard constraints)."""
    return [re.escape(r) for r in runs_of("hybrid", lambda m: m.fusion == fusion)]


def fusion_choice(d, method, split, seed=None):
    return f"{run_dir(d, method, seed)}/fusion.{split}.json"


def hybrid_inputs(wildcards):
    """Both runs of the evaluated split; for the weighted sum also both dev runs and dev's judgements."""
    d, split = wildcards.dataset, wildcards.split
    fusion, base = RUNS[d][wildcards.method].fusion, RUNS[d][wildcards.method].base
    seed = wildcards.get("seed")
    inputs = {"sparse": run(d, "bm25", split), "dense": run(d, base, split, seed)}
    if fusion == "wsum":
        dev = cfg(d)["hybrid"]["select_split"]
        if dev == split:
            raise WorkflowError(f"{wildcards.method}: hybrid.select_split ({dev}) is the evaluated split of "
                                f"{d}; choose w on another split (e.g. dev with eval.split test)")
        inputs.update(dev_sparse=run(d, "bm25", dev), dev_dense=run(d, base, dev, seed),
                      dev_queries=queries(d, dev), dev_qrels=qrels(d, dev), corpus=corpus(d))
        if d in SYNTHETIC:
            inputs["dev_qrels_all"] = qrels_all(d, dev)
    return inputs


def _weighted_io(wildcards, input, output):
    args = [f"--{key.replace('_', '-')} {input[key]}"
            for key in ("dev_sparse", "dev_dense", "dev_queries", "dev_qrels", "corpus", "dev_qrels_all")
            if key in input.keys()]
    return " ".join(args + [f"--choice-out {output.choice}"])


def _weighted_settings(h):
    return (f"--metric {h['select_metric']} --select-split {h['select_split']} --depth {config['eval']['depth']}"
            f" --match {config['eval']['match']} --grid " + " ".join(f"{w:g}" for w in h["weights"]))


rule fuse_rrf:
    input:
        unpack(hybrid_inputs),
    output:
        run("{dataset}", "{method}", "{split}"),
    wildcard_constraints:
        method=_alternatives(_hybrid_methods("rrf")),
    params:
        settings=lambda wildcards: f"--k {cfg(wildcards.dataset)['hybrid']['rrf_k']} --depth {config['eval']['depth']}",
    resources:
        mem_mb=8000,
    conda:
        CPU_ENV
    log:
        "logs/fuse_rrf/{dataset}.{method}.{split}.log",
    benchmark:
        "benchmarks/fuse_rrf/{dataset}.{method}.{split}.tsv"
    shell:
        "python -m pipeline.evaluation.hybrid rrf --sparse {input.sparse} --dense {input.dense} {params.settings}"
        " --out {output} --log {log}"


use rule fuse_rrf as fuse_rrf_seed with:
    output:
        run("{dataset}", "{method}", "{split}", seed="{seed}"),
    wildcard_constraints:
        method=_alternatives(_hybrid_methods("rrf")),
        seed=r"\d+",
    log:
        "logs/fuse_rrf/{dataset}.{method}.seed{seed}.{split}.log",
    benchmark:
        "benchmarks/fuse_rrf/{dataset}.{method}.seed{seed}.{split}.tsv"


rule fuse_weighted:
    input:
        unpack(hybrid_inputs),
    output:
        run=run("{dataset}", "{method}", "{split}"),
        choice=fusion_choice("{dataset}", "{method}", "{split}"),
    wildcard_constraints:
        method=_alternatives(_hybrid_methods("wsum")),
    params:
        settings=lambda wildcards: _weighted_settings(cfg(wildcards.dataset)["hybrid"]),
        io=_weighted_io,
    resources:
        mem_mb=8000,
    conda:
        CPU_ENV
    log:
        "logs/fuse_weighted/{dataset}.{method}.{split}.log",
    benchmark:
        "benchmarks/fuse_weighted/{dataset}.{method}.{split}.tsv"
    shell:
        "python -m pipeline.evaluation.hybrid weighted --sparse {input.sparse} --dense {input.dense} {params.io}"
        " {params.settings} --out {output.run} --log {log}"


use rule fuse_weighted as fuse_weighted_seed with:
    output:
        run=run("{dataset}", "{method}", "{split}", seed="{seed}"),
        choice=fusion_choice("{dataset}", "{method}", "{split}", seed="{seed}"),
    wildcard_constraints:
        method=_alternatives(_hybrid_methods("wsum")),
        seed=r"\d+",
    log:
        "logs/fuse_weighted/{dataset}.{method}.seed{seed}.{split}.log",
    benchmark:
        "benchmarks/fuse_weighted/{dataset}.{method}.seed{seed}.{split}.tsv"

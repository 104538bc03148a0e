# Hybrid retrieval: BM25 fused with a dense method's run, evaluated and gathered like any method.
#
#   results/{dataset}/hybrid_rrf_{dense}/run.{split}.parquet     reciprocal-rank fusion       (fuse_rrf)
#   results/{dataset}/hybrid_wsum_{dense}/run.{split}.parquet    weighted sum, w from dev      (fuse_weighted)
#   results/{dataset}/hybrid_wsum_{dense}/fusion.{split}.json    the chosen w, dev metric per w
#
# A hybrid of a seeded dense method has a run per seed (.../seed{s}/), as the dense method does.
# Formulas: pipeline/retrieval/fusion.py; the stage: pipeline/evaluation/hybrid.py; docs/evaluation.md.

from pipeline.workflow.evaluation import fusion_choice, weighted_io
from pipeline.workflow.paths import run

# The hybrids' lookups: pipeline/workflow/evaluation.py (evaluation_rules, built in evaluate.smk,
# included first).


rule fuse_rrf:
    input:
        unpack(evaluation_rules.hybrid_inputs),
    output:
        run("{dataset}", "{method}", "{split}"),
    wildcard_constraints:
        method=alternatives(evaluation_rules.hybrid_methods("rrf")),
    params:
        settings=evaluation_rules.hybrid_settings("rrf"),
    resources:
        mem_mb=8000,
    conda:
        CPU_ENV
    log:
        "logs/fuse_rrf/{dataset}.{method}.{split}.log",
    benchmark:
        "benchmarks/fuse_rrf/{dataset}.{method}.{split}.tsv"
    shell:
        "python -m pipeline.evaluation.hybrid rrf --sparse {input.sparse:q} --dense {input.dense:q} {params.settings}"
        " --out {output:q} --log {log:q}"


use rule fuse_rrf as fuse_rrf_seed with:
    output:
        run("{dataset}", "{method}", "{split}", seed="{seed}"),
    wildcard_constraints:
        method=alternatives(evaluation_rules.hybrid_methods("rrf")),
        seed=r"\d+",
    log:
        "logs/fuse_rrf/{dataset}.{method}.seed{seed}.{split}.log",
    benchmark:
        "benchmarks/fuse_rrf/{dataset}.{method}.seed{seed}.{split}.tsv"


rule fuse_weighted:
    input:
        unpack(evaluation_rules.hybrid_inputs),
    output:
        run=run("{dataset}", "{method}", "{split}"),
        choice=fusion_choice("{dataset}", "{method}", "{split}"),
    wildcard_constraints:
        method=alternatives(evaluation_rules.hybrid_methods("wsum")),
    params:
        settings=evaluation_rules.hybrid_settings("wsum"),
        io=weighted_io,
    resources:
        mem_mb=8000,
    conda:
        CPU_ENV
    log:
        "logs/fuse_weighted/{dataset}.{method}.{split}.log",
    benchmark:
        "benchmarks/fuse_weighted/{dataset}.{method}.{split}.tsv"
    shell:
        "python -m pipeline.evaluation.hybrid weighted --sparse {input.sparse:q} --dense {input.dense:q} {params.io}"
        " {params.settings} --out {output.run:q} --log {log:q}"


use rule fuse_weighted as fuse_weighted_seed with:
    output:
        run=run("{dataset}", "{method}", "{split}", seed="{seed}"),
        choice=fusion_choice("{dataset}", "{method}", "{split}", seed="{seed}"),
    wildcard_constraints:
        method=alternatives(evaluation_rules.hybrid_methods("wsum")),
        seed=r"\d+",
    log:
        "logs/fuse_weighted/{dataset}.{method}.seed{seed}.{split}.log",
    benchmark:
        "benchmarks/fuse_weighted/{dataset}.{method}.seed{seed}.{split}.tsv"

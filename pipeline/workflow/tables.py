"""What the rules look up, built once from the validated config: each dataset's resolved config (its
recipe merged), its method records and run folders, the β tags of its CCR models, its seeds, and a
job's GPUs and device. workflow/rules/common.smk builds one ``WorkflowTables`` and the rules read it;
here it is unit-tested, linted and seen by duplicate scans.
"""

from __future__ import annotations

from typing import Any, Callable

from pipeline.core.methods import ccr_betas, filter_negatives, method_table, runs, sieve_tag
from pipeline.workflow.paths import corpus, qrels, qrels_all, queries

Wildcards = Any  # Snakemake's wildcards / resources namespaces: attribute access only


def alternatives(names: list[str]) -> str:
    """A regex alternation of ``names``; one that matches nothing when the list is empty."""
    return "|".join(names) if names else "(?!x)x"


class WorkflowTables:
    """The lookups of one validated config (``config``) and its datasets' resolved configs."""

    def __init__(self, config: dict, dataset_configs: dict[str, dict]):
        self.config = config
        self.datasets: dict[str, dict] = config["datasets"]
        self.dataset_configs = dataset_configs
        self.methods = {d: method_table(c) for d, c in dataset_configs.items()}  # name -> record
        self.runs = {d: runs(table) for d, table in self.methods.items()}  # run folder -> record
        self.ccr_betas = {d: ccr_betas(c) for d, c in dataset_configs.items()}  # β tag -> β
        self.synthetic = [name for name, spec in self.datasets.items() if spec.get("format") == "synthkb"]
        self.declared = [name for name, spec in self.datasets.items() if spec.get("format") != "synthkb"]

    # ---- a dataset's settings ------------------------------------------------------------------

    def cfg(self, d: str) -> dict:
        """The config a dataset's jobs run with: the top-level sections under its recipe."""
        return self.dataset_configs[d]

    def eval_split(self, d: str) -> str:
        """The evaluated split of dataset ``d`` (datasets.<d>.eval_split, null = eval.split)."""
        return self.datasets[d].get("eval_split") or self.config["eval"]["split"]

    def split_tables(self, d: str, split: str) -> dict[str, str]:
        """The queries, qrels and corpus a job over ``split`` of ``d`` reads, and qrels_all (every relevant
        passage: exact labels) where ``d`` is synthetic."""
        tables = {"queries": queries(d, split), "qrels": qrels(d, split), "corpus": corpus(d)}
        if d in self.synthetic:
            tables["qrels_all"] = qrels_all(d, split)
        return tables

    def dataset_setting(self, section: str, key: str) -> Callable[[Wildcards], Any]:
        """A params/resources/threads function: config ``section.key`` of the job's dataset."""
        return lambda wildcards: self.cfg(wildcards.dataset)[section][key]

    # ---- the sieve's names ------------------------------------------------------------------------

    def sieve_source(self, d: str) -> str:
        """The negatives the sieve reads: a method's (mined; its run name carries its β) or a file's name."""
        source = self.cfg(d)["sieve"]["source"]
        return self.methods[d][source].run if source in self.methods[d] else source

    def teacher_model(self, d: str) -> str:
        """The model folder of dataset ``d``'s sieve.teacher (the teacher-scored filters' scorer); a name
        that is no method's stays itself until the start-up checks refuse it (SieveRules.check_teacher)."""
        teacher = self.cfg(d)["sieve"]["teacher"]
        m = self.methods[d].get(teacher)
        return m.model if m is not None and m.model else teacher

    def sieve_tags(self, d: str, decision: bool = False, teacher: bool = False) -> str:
        """The sieve settings of dataset ``d`` as they appear in its paths (methods.sieve_tag): those of
        the candidates, or with ``decision`` also the sieve rule's own (its negatives, comparison, figures),
        with ``teacher`` also the teacher of a teacher-scored filter."""
        scorer = self.teacher_model(d) if teacher else None
        return sieve_tag(self.cfg(d)["sieve"], self.sieve_source(d), decision=decision, teacher_model=scorer)

    def filter_files_name(self, d: str, name: str) -> str:
        """The name of filter ``name``'s files (decisions, report) under dataset ``d``'s sieve settings
        (``sieve``, the sieve dpr_sieve trains on, is a row of its own in the comparison)."""
        return filter_negatives(name, self.cfg(d)["sieve"], self.sieve_source(d), self.teacher_model(d))

    def check_sieve_tag(self, wildcards: Wildcards, decision: bool = False, teacher: bool = False) -> None:
        """A path's sieve tag must be the config's: the rule runs with the config's sieve settings."""
        expected = self.sieve_tags(wildcards.dataset, decision, teacher)
        if wildcards.stag != expected:
            raise ValueError(
                f"dataset {wildcards.dataset!r}: a path with sieve tag {wildcards.stag!r} was asked for, but "
                f"its sieve settings give {expected!r}: ask for the same path with {expected!r} where the tag "
                f"goes (sieve/comparison{expected}.md, figures{expected}/, negatives/oracle{expected}.train"
                ".parquet), or set the sieve settings that path was built with"
            )

    # ---- methods, runs, seeds ---------------------------------------------------------------------

    def run_of(self, d: str, name: str) -> str:
        """The run folder of method ``name`` in dataset ``d`` (its name plus what tells it apart, e.g. β)."""
        return self.methods[d][name].run

    def runs_of(self, kind: str, where: Callable[[Any], bool] = lambda m: True) -> list[str]:
        """Run folders of that kind of method in any dataset (wildcard constraints)."""
        return sorted(
            {run for d in self.datasets for run, m in self.runs[d].items() if m.kind == kind and where(m)}
        )

    def training_seeds(self, d: str) -> list[int]:
        """The training seeds of dataset ``d``'s trained dense methods: datasets.<d>.seeds, else the
        top-level seeds; null = [seed]."""
        seeds = self.datasets[d].get("seeds") or self.config["seeds"]
        return [int(s) for s in seeds] if seeds else [int(self.config["seed"])]

    def ar2_seeds(self, d: str) -> list[int]:
        """AR2 seeds of dataset ``d`` (ar2.seeds, else the training seeds); each seed is a whole AR2 run."""
        seeds = self.cfg(d)["ar2"]["seeds"]
        return [int(s) for s in seeds] if seeds else self.training_seeds(d)

    def seeded_runs(self, d: str) -> list[str]:
        """Runs with a folder per training seed: the trained dense methods and their hybrids, unless the
        one training seed is the top-level seed (whose models sit in the plain folders). One other
        seed is a seeded run too: the plain folders' trainings use the top-level seed, so `seeds: [7]`
        kept there trained with seed 0."""
        if self.training_seeds(d) == [int(self.config["seed"])]:
            return []
        return [run for run, m in self.runs[d].items() if m.kind in ("dense", "hybrid") and m.random]

    def seed_free_methods(self, d: str) -> list[str]:
        """Method names with one run whatever the seeds: bm25, zeroshot and their hybrids."""
        return [
            name
            for name, m in self.methods[d].items()
            if m.kind in ("bm25", "dense", "hybrid") and not m.random
        ]

    def seeded_model(self, model: str, seed: int | str) -> str:
        """The retriever folder of ``model`` trained with ``seed``: the top-level seed's is ``model``
        itself (so one seed changes no path), another seed's ``model-s<seed>``. With the wildcard
        "{seed}" it gives the pattern of the *_seed rules."""
        if str(seed) == "{seed}":
            return f"{model}-s{seed}"
        return model if int(seed) == int(self.config["seed"]) else f"{model}-s{seed}"

    # ---- GPUs and devices (docs/cluster.md) -------------------------------------------------------

    def gpu_resources(
        self, section: str, used: Callable[[dict, Wildcards], bool] = lambda c, wildcards: True
    ) -> dict[str, Callable[[Wildcards], int]]:
        """Resources of a rule sized by `<section>.gpus` of the job's dataset (0 where ``used(config,
        wildcards)`` says the job runs no model on it), and its `<section>.mem_mb`. `gpus` is the
        project's resource (`--resources gpus=1` serialises GPU jobs), `gpu` what the SLURM executor
        plugin turns into sbatch --gpus."""

        def gpus(wildcards: Wildcards) -> int:
            c = self.cfg(wildcards.dataset)
            return c[section]["gpus"] if used(c, wildcards) else 0

        return {"mem_mb": self.dataset_setting(section, "mem_mb"), "gpus": gpus, "gpu": gpus}


def job_gpus(resources: Wildcards) -> int:
    """The GPUs a job holds (its resources; none declared = 0)."""
    return int(getattr(resources, "gpus", 0) or 0)


def job_device(wildcards: Wildcards, resources: Wildcards) -> str:
    """params function: 'cuda' when the job holds GPUs, else 'cpu'."""
    return "cuda" if job_gpus(resources) > 0 else "cpu"


def faiss_gpu_flag(wildcards: Wildcards, resources: Wildcards) -> str:
    """params function: '--no-gpu' unless the job holds GPUs (pipeline.retrieval.index/search)."""
    return "" if job_gpus(resources) > 0 else "--no-gpu"

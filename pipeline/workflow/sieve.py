"""What the sieve's rules (workflow/rules/sieve.smk) look up: the candidates' inputs, each filter's
decisions file and settings, the comparison's rows, the β sweep and the clean.<name> entries. Built on a
``WorkflowTables``, so that it is unit-tested and linted here rather than inside the rule file.

A rule's settings are params of the wildcards only: a params function taking ``input`` is not recorded
by Snakemake, so a changed setting would not rerun it. The candidates, the passage sieve, the
cross-encoder's training and the filters get their settings as one document each (candidates_job,
sieve_job, cross_encoder_job, filter_job, and clean_negatives' clean_job, validated by the stage's contract).
"""

from __future__ import annotations

import os
import shlex
from typing import Any, Callable

from pipeline.core.methods import (
    TEACHER_FILTERS,
    applies_sieve_rule,
    beta_tag,
    closest,
    filtered_candidates,
    reads_true_labels,
    sieve_name,
)
from pipeline.core.settings.job_documents import SieveJob, filter_job_keys
from pipeline.sieve.settings import (
    CROSS_ENCODER_TRAINING,
    FILTER_CONTRACTS,
    MODEL_FILTERS,
    CleanSpec,
    SieveSettings,
)
from pipeline.workflow.documents import settings_flag
from pipeline.workflow.paths import (
    candidates,
    cleaned,
    corpus,
    dev_candidates,
    filter_decisions,
    filter_report,
    negatives,
    qrels,
    qrels_all,
    queries,
    ranker,
    retriever,
    run,
    sieve_losses,
)
from pipeline.workflow.tables import Wildcards, WorkflowTables

# The model a filter's scorer (pipeline.sieve.settings.FilterContract) is, for dataset d: the DPR warm-up
# (the sieve's own scorer comes from sieve.scorer, in the sieve's rules) or the cross-encoder; the
# teacher is the model of the method sieve.teacher names (SieveRules.scorer_model).
SCORER_MODELS: dict[str, Callable[[str], str]] = {
    "retriever": lambda d: retriever(d, "dpr"),
    "cross_encoder": lambda d: ranker(d, "cross_encoder"),
}


def filter_model_arg(wildcards: Wildcards, input: Any) -> str:
    """params function: the filter's model folder, for the filters that run one (_filter_inputs), and
    positive_aware_dev's dev candidates and queries."""
    args = [f"--model {shlex.quote(os.path.dirname(input.model))}"] if "model" in input.keys() else []
    if "dev_candidates" in input.keys():
        args.append(
            f"--dev-candidates {shlex.quote(input.dev_candidates)} --dev-queries {shlex.quote(input.dev_queries)}"
        )
    return " ".join(args)


def pairs_arg(names: list[str], paths: Any) -> str:
    """``name=path`` of each input, in the order the input function listed them (the stage's syntax)."""
    return " ".join(shlex.quote(f"{name}={path}") for name, path in zip(names, paths))


def sieve_job(config: dict, seed: int) -> dict[str, Any]:
    """The document of a passage_sieve job (pipeline.core.settings.job_documents.SieveJob) of a dataset whose resolved
    config is ``config``: section sieve's decision keys, in-batch negatives and figure queries, the seed."""
    keys = [key for key in SieveJob.model_fields if key != "seed"]
    return {**{key: config["sieve"][key] for key in keys}, "seed": seed}


def candidates_job(config: dict, seed: int, data_format: str, injection: bool = True) -> dict[str, Any]:
    """The document of a sieve_candidates job (pipeline.core.settings.job_documents.CandidatesJob) of a dataset whose
    resolved config is ``config`` and whose format is ``data_format``. ``injection`` False: the dev
    queries' (sieve_dev_candidates), none injected: the injection simulates noise in the train data, the
    dev truth is qrels_all or answer match, so sieve.injection does not rerun that job."""
    c = config["sieve"]
    return {
        **{key: c[key] for key in ("candidates", "pool", "max_queries")},
        "injection_fraction": c["injection"]["fraction"] if injection else 0.0,
        "match": config["eval"]["match"],
        "seed": seed,
        "suspect_same_article": data_format == "squad",
    }


def cross_encoder_job(config: dict, seed: int) -> dict[str, Any]:
    """The document of a train_cross_encoder job (pipeline.core.settings.job_documents.CrossEncoderJob): the training
    settings of sieve.cross_encoder (not its threshold: the filter's), the seed."""
    return {**{key: config["sieve"]["cross_encoder"][key] for key in CROSS_ENCODER_TRAINING}, "seed": seed}


def filter_settings(sieve: dict, name: str, clean: bool = False) -> dict[str, Any]:
    """Filter ``name``'s own settings of a resolved section ``sieve``, named as its job names them
    (pipeline.core.settings.job_documents.filter_job_keys: FilterJob's, or CleanJob's with ``clean``)."""
    return {
        key: sieve[field] if owner is SieveSettings else sieve[name][field]
        for key, (owner, field) in filter_job_keys(name, clean).items()
    }


def filter_job(config: dict, seed: int, name: str) -> dict[str, Any]:
    """The document of filter ``name``'s filter_candidates job (pipeline.core.settings.job_documents.FilterJob): the
    seed, the encoding batch size and that filter's own settings of section sieve (filter_settings)."""
    c = config["sieve"]
    return {"seed": seed, "batch_size": c["batch_size"], **filter_settings(c, name)}


def clean_entry(config: dict, name: str) -> dict[str, Any]:
    """clean.<``name``> of ``config`` (the top-level config), its defaults filled in."""
    if name not in config["clean"]:
        declared = ", ".join(sorted(config["clean"])) or "none"
        raise ValueError(f"unknown clean entry {name!r} (declared: {declared})")
    return CleanSpec.model_validate(config["clean"][name]).model_dump()


def is_local_model(name: str) -> bool:
    """A model that from_pretrained loads from a folder here ('minilm' is the package's model, by name)."""
    return name != "minilm" and os.path.isdir(name)


def workflow_made(path: str) -> bool:
    """A path under the working directory's results/ or resources/: a rule's output, which Snakemake
    builds first and tracks by its own records (another entry's cleaned file as this one's source)."""
    return os.path.relpath(os.path.abspath(path)).split(os.sep)[0] in ("results", "resources")


def clean_reads(config: dict, name: str) -> dict[str, str]:
    """What clean entry ``name`` reads from outside the workflow: its source, its labels when it has
    them, and its model when its filter runs one given as a local folder (a hub name stays a setting).
    Each reaches the job as a fingerprint (content.smk), so new content reruns it whatever its mtime.
    A workflow's output is left out (clean_made_inputs)."""
    spec = clean_entry(config, name)
    reads = {"source": spec["source"]}
    if spec["labels"]:
        reads["labels"] = spec["labels"]
    if spec["filter"] in MODEL_FILTERS and is_local_model(spec["model"]):
        reads["model"] = spec["model"]
    return {role: path for role, path in reads.items() if not workflow_made(path)}


def clean_made_inputs(config: dict, name: str) -> dict[str, str]:
    """The entry's source and labels that are the workflow's outputs: plain inputs, built first."""
    spec = clean_entry(config, name)
    return {role: spec[role] for role in ("source", "labels") if spec[role] and workflow_made(spec[role])}


def clean_job(config: dict, name: str) -> dict[str, Any]:
    """The document of clean entry ``name``'s clean_negatives job (pipeline.core.settings.job_documents.CleanJob): the
    entry's format, filter, mode and near-duplicate threshold, and what its filter reads of the top-level
    section sieve (named as CleanJob names them): a filter that runs a model its model and the encoding
    batch size, the sieve its decision and the seed. Its filter's only, as filter_job: a changed
    sieve.rank_window.start reruns a rank_window entry and leaves a sieve entry alone. The labels are an
    input of the job (--labels), not a setting."""
    spec, c = clean_entry(config, name), config["sieve"]
    document = {key: spec[key] for key in ("format", "filter", "mode", "near_duplicate")}
    needs = FILTER_CONTRACTS[spec["filter"]]
    if needs.scorer is not None:
        document |= {"model": spec["model"], "batch_size": c["batch_size"]}
    document |= filter_settings(c, spec["filter"], clean=True)
    if needs.rule:  # the sieve's fallback draws from the seed
        document["seed"] = int(config["seed"])
    return document


class SieveRules:
    """The sieve's lookups of one config (``w``): one per workflow, built in sieve.smk."""

    def __init__(self, w: WorkflowTables):
        self.w = w
        self.config = w.config
        self.clean = w.config["clean"]  # validated at start-up (common.smk)

    # ---- the dataset's sieve settings ---------------------------------------------------------------

    def sieve_config(self, d: str) -> dict:
        """Section sieve of dataset ``d`` (its recipe)."""
        return self.w.cfg(d)["sieve"]

    def check_sources(self) -> None:
        """A DPR trained on filtered candidates needs the sieve's candidates first, which would surface
        as a cyclic DAG that does not name the setting: refused at start-up instead. Any other name is a
        negatives file: built by a rule (bm25, a mining model) or brought by the user."""
        for d in self.w.datasets:
            source = self.sieve_config(d)["source"]
            if filtered_candidates(self.w.methods[d], source):
                raise ValueError(
                    f"sieve.source of dataset {d!r} is {source!r}, a DPR trained on "
                    "filtered candidates: it needs the sieve's own candidates first (a cycle). Use bm25, "
                    "a model trained without them (zeroshot, dpr, dpr_ccr) or your own negatives file"
                )
            self.check_teacher(d)

    def check_teacher(self, d: str) -> None:
        """sieve.teacher must name a dense method's model that a user could have before the filters run:
        not one that reads the true labels (the filters would be oracles) nor one trained on the filtered
        candidates (it needs the filters' own output first: a cycle)."""
        teacher = self.sieve_config(d)["teacher"]
        table = self.w.methods[d]
        m = table.get(teacher)
        where = f"sieve.teacher of dataset {d!r} is {teacher!r}"
        if m is None or m.kind != "dense":
            hint = closest(teacher, [name for name, x in table.items() if x.kind == "dense"])
            if not hint.startswith("closest"):
                hint = "e.g. zeroshot, dpr, dpr_ccr"
            raise ValueError(
                f"{where}, which is not a dense method ({hint}): the teacher-scored filters need a "
                "retriever model folder"
            )
        if reads_true_labels(m):
            raise ValueError(
                f"{where}, which reads the true labels (qrels_all): the teacher-scored filters would be "
                "oracles; use zeroshot or a model a user has (dpr, dpr_ccr)"
            )
        if filtered_candidates(table, teacher):
            raise ValueError(
                f"{where}, a DPR trained on filtered candidates: it needs the filters' own output first (a "
                "cycle); use zeroshot, a model trained without them (dpr, dpr_ccr) or a mined DPR"
            )

    def main_tag(self, d: str) -> str:
        """The β tag of the dataset's ccr.beta (the sieve dpr_sieve trains on, with scorer ccr)."""
        return beta_tag(self.w.cfg(d)["ccr"]["beta"])

    def sweep_tags(self, d: str, wildcards: Wildcards | None = None) -> list[str]:
        """β tags of the sweep (Figure 1, sieve-out per β), in increasing β. With a job's ``wildcards``,
        its path's sieve tag is checked against the config's first."""
        if wildcards is not None:
            self.w.check_sieve_tag(wildcards, decision=True)
        return [beta_tag(b) for b in sorted(self.sieve_config(d)["betas"] or [self.w.cfg(d)["ccr"]["beta"]])]

    def decisions(self, dataset: str, name: str) -> str:
        """The decisions table a filter name stands for under the dataset's sieve settings: the one its
        DPR control dpr_<name> trains on, in the method table (`sieve` = the sieve dpr_sieve trains on: at
        the dataset's ccr.beta, or sieve_no_ccr's with sieve.scorer dpr)."""
        control = self.w.methods[dataset].get(f"dpr_{name}")
        name = control.filter if control is not None and control.filter else name
        files = self.w.filter_files_name(dataset, name)
        if name.startswith(sieve_name("")):
            return negatives(dataset, files)
        return filter_decisions(dataset, files)

    def filter_names(self, d: str, wildcards: Wildcards | None = None) -> list[str]:
        """Rows of the comparison table: sieve.filters, then the β sweep (minus the duplicate of `sieve`).
        With a job's ``wildcards``, its path's sieve tag is checked against the config's first."""
        if wildcards is not None:
            self.w.check_sieve_tag(wildcards, decision=True)
        names = list(self.sieve_config(d)["filters"])
        same_as_sieve = self.sieve_config(d)["scorer"] == "ccr" and "sieve" in names
        for tag in self.sweep_tags(d):
            if not (same_as_sieve and tag == self.main_tag(d)):
                names.append(sieve_name(tag))
        return names

    def tradeoff_filters(self, d: str, wildcards: Wildcards | None = None) -> list[str]:
        """The comparison's filters that decide on a continuous score."""
        from pipeline.sieve.filters import FILTERS  # the filters' own modules, read once a job asks

        return [
            n
            for n in self.filter_names(d, wildcards)
            if (FILTERS[n].tradeoff if n in FILTERS else n.startswith(sieve_name("")))
        ]

    def tradeoff_reference(self, wildcards: Wildcards) -> str:
        """params function: the filter the trade-off plot marks (`sieve` where the comparison has it)."""
        d = wildcards.dataset
        return "sieve" if "sieve" in self.sieve_config(d)["filters"] else sieve_name(self.main_tag(d))

    # ---- sieve_candidates, sieve_negatives ----------------------------------------------------------

    def candidate_inputs(self, wildcards: Wildcards) -> dict[str, str]:
        """sieve_candidates' input: the source's negatives and the train split (+ qrels_all, synthetic)."""
        d = wildcards.dataset
        self.w.check_sieve_tag(wildcards)
        return self._split_inputs(d, "train", negatives(d, self.w.sieve_source(d)))

    def _split_inputs(self, d: str, split: str, source: str) -> dict[str, str]:
        """The candidates stage's inputs for ``split``: ``source`` ranked passages, the split's tables."""
        inputs = {
            "negatives": source,
            "qrels": qrels(d, split),
            "queries": queries(d, split),
            "corpus": corpus(d),
        }
        if d in self.w.synthetic:
            inputs["qrels_all"] = qrels_all(d, split)
        return inputs

    def dev_candidate_inputs(self, wildcards: Wildcards) -> dict[str, str]:
        """sieve_dev_candidates' input: the source method's dev run and the dev split (+ qrels_all)."""
        d = wildcards.dataset
        self.w.check_sieve_tag(wildcards)
        source = self.sieve_config(d)["source"]
        if source not in self.w.methods[d]:
            raise ValueError(
                f"filter positive_aware_dev of dataset {d!r} picks its margin on the dev queries' candidates, "
                f"drawn from the dev run of sieve.source; {source!r} is a negatives file, not a method with runs"
            )
        return self._split_inputs(d, "dev", run(d, self.w.sieve_source(d), "dev"))

    def dev_candidate_settings(self, wildcards: Wildcards) -> str:
        """params function: sieve_dev_candidates' document (candidates_job without the injection)."""
        return settings_flag(self._candidates_job(wildcards.dataset, injection=False))

    def candidate_settings(self, wildcards: Wildcards) -> str:
        """params function: sieve_candidates' document (candidates_job), recorded and passed whole."""
        return settings_flag(self._candidates_job(wildcards.dataset, injection=True))

    def _candidates_job(self, d: str, injection: bool) -> dict[str, Any]:
        return candidates_job(
            self.w.cfg(d), int(self.config["seed"]), self.w.datasets[d]["format"], injection=injection
        )

    def sieve_settings(self, wildcards: Wildcards) -> str:
        """params function: sieve_negatives' document (sieve_job), recorded and passed whole."""
        return settings_flag(sieve_job(self.w.cfg(wildcards.dataset), int(self.config["seed"])))

    def candidates(self, wildcards: Wildcards) -> str:
        """The candidates under the dataset's sieve settings (a path's tag that is not theirs is refused)."""
        name = getattr(wildcards, "filter", "sieve")
        self.w.check_sieve_tag(wildcards, decision=applies_sieve_rule(name), teacher=name in TEACHER_FILTERS)
        return candidates(wildcards.dataset, self.w.sieve_tags(wildcards.dataset))

    def source_negatives(self, wildcards: Wildcards) -> str:
        """The negatives the sieve reads (train_cross_encoder trains on them too)."""
        return negatives(wildcards.dataset, self.w.sieve_source(wildcards.dataset))

    def cross_encoder_settings(self, wildcards: Wildcards) -> str:
        """params function: train_cross_encoder's document (cross_encoder_job), recorded and passed whole."""
        return settings_flag(cross_encoder_job(self.w.cfg(wildcards.dataset), int(self.config["seed"])))

    # ---- filter_candidates, sieve_report, the comparison and the figures -----------------------------

    def filter_inputs(self, wildcards: Wildcards) -> dict[str, str]:
        """filter_candidates' input: the candidates, and the model of a filter that runs one."""
        d, name = wildcards.dataset, wildcards.filter
        needs = FILTER_CONTRACTS[name]
        if needs.labels == "true" and d not in self.w.synthetic:
            # Caught while planning, not after the candidates are built: only synthkb knows the truth.
            raise ValueError(
                f"filter/method {name} needs exact false-negative labels (qrels_all), which "
                f"dataset {d!r} does not have; use answer_match (method dpr_answer_match)"
            )
        inputs = {
            "candidates": self.candidates(wildcards),
            "corpus": corpus(d),
            "queries": queries(d, "train"),
        }
        if needs.scorer == "teacher":
            inputs["model"] = retriever(d, self.w.teacher_model(d))
        elif needs.scorer is not None:
            inputs["model"] = SCORER_MODELS[needs.scorer](d)
        if needs.labels == "dev":
            inputs["dev_candidates"] = dev_candidates(d, self.w.sieve_tags(d))
            inputs["dev_queries"] = queries(d, "dev")
        return inputs

    def filter_settings(self, wildcards: Wildcards) -> str:
        """params function: filter_candidates' document (filter_job): its filter's settings only, so a
        changed setting of another filter reruns nothing."""
        return settings_flag(
            filter_job(self.w.cfg(wildcards.dataset), int(self.config["seed"]), wildcards.filter)
        )

    def comparison_reports(self, wildcards: Wildcards) -> list[str]:
        """sieve_comparison's input: the report of each row of the comparison."""
        d = wildcards.dataset
        return [
            filter_report(d, self.w.filter_files_name(d, name)) for name in self.filter_names(d, wildcards)
        ]

    def figure_losses(self, wildcards: Wildcards) -> list[str]:
        """sieve_figures' losses: the sieve's per-candidate losses at each β of the sweep."""
        d = wildcards.dataset
        return [
            sieve_losses(d, self.w.filter_files_name(d, sieve_name(tag)))
            for tag in self.sweep_tags(d, wildcards)
        ]

    def figure_sieves(self, wildcards: Wildcards) -> list[str]:
        """sieve_figures' sieves: the sieve's decisions at each β of the sweep."""
        return [
            self.decisions(wildcards.dataset, sieve_name(tag)) for tag in self.sweep_tags(wildcards.dataset)
        ]

    def tradeoff_decisions(self, wildcards: Wildcards) -> list[str]:
        """sieve_tradeoff's input: the decisions of each filter that decides on a continuous score."""
        d = wildcards.dataset
        return [self.decisions(d, name) for name in self.tradeoff_filters(d, wildcards)]

    # ---- clean.<name>: a hard-negative dataset of the user's (docs/clean.md) --------------------------

    def check_clean(self) -> None:
        """An entry that reads a file of its own results/<name>/clean/ would be cleaning its own output
        (Snakemake's bare "Cyclic dependency on rule clean_negatives"): refused at start-up, naming it."""
        for name in self.clean:
            spec = clean_entry(self.config, name)
            own = os.path.join("results", name, "clean") + os.sep
            for role in ("source", "labels"):
                path = spec[role]
                if path and os.path.relpath(os.path.abspath(path)).startswith(own):
                    raise ValueError(
                        f"clean.{name}.{role} is {path!r}, a file the entry itself writes (results/{name}/clean/): "
                        f"an entry cannot read its own output; clean a copy, or give the cleaned file to another entry"
                    )

    def clean_spec(self, wildcards: Wildcards) -> dict[str, Any]:
        """The entry, its defaults filled in; the path's extension must be its source's."""
        spec = clean_entry(self.config, wildcards.clean)
        if not spec["source"].endswith("." + wildcards.ext):
            raise ValueError(
                f"clean {wildcards.clean!r}: its source {spec['source']!r} is not a .{wildcards.ext} file: "
                f"ask for {cleaned(wildcards.clean, spec['source'].rsplit('.', 1)[1])}"
            )
        return spec

    def clean_inputs(self, wildcards: Wildcards, fingerprint: Callable[[str], str]) -> dict[str, str]:
        """clean_negatives' input, once the path's extension is checked: the ``fingerprint`` file of each
        file it reads from outside the workflow (clean_reads; one that is not there as itself, so that
        Snakemake names it), and the workflow's outputs it reads (clean_made_inputs)."""
        self.clean_spec(wildcards)
        outside = {
            f"{role}_sha256": fingerprint(path) if os.path.exists(path) else path
            for role, path in clean_reads(self.config, wildcards.clean).items()
        }
        return {**outside, **clean_made_inputs(self.config, wildcards.clean)}

    def clean_source(self, wildcards: Wildcards) -> str:
        """params function: the entry's source (its content is an input, through its fingerprint)."""
        return self.clean_spec(wildcards)["source"]

    def clean_settings(self, wildcards: Wildcards) -> str:
        """params function: clean_negatives' document (clean_job), recorded and passed whole; the path's
        extension is checked against the entry's source first."""
        self.clean_spec(wildcards)
        return settings_flag(clean_job(self.config, wildcards.clean))

    def clean_resources(self) -> dict[str, Any]:
        """clean_negatives' resources: the top-level sieve section's memory, and its GPUs when the entry's
        filter runs a model (a job holding none is told --device cpu and never opens CUDA)."""

        def gpus(wildcards: Wildcards) -> int:
            return (
                self.config["sieve"]["gpus"] if self.clean_spec(wildcards)["filter"] in MODEL_FILTERS else 0
            )

        return {"mem_mb": self.config["sieve"]["mem_mb"], "gpus": gpus, "gpu": gpus}

    def clean_labels(self, wildcards: Wildcards) -> str:
        """params function: --labels of an entry that has them (its content is an input, as the source's)."""
        labels = self.clean_spec(wildcards)["labels"]
        return f"--labels {shlex.quote(labels)}" if labels else ""

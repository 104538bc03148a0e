"""The settings document of a train_dense job (pipeline.training.settings.TrainJob), built from a dataset's
resolved config: the rules pass it to the stage as JSON, the stage validates it with its contracts, and
a run by hand reads the same document from a file (``--settings FILE``). No setting travels as a flag
or a path tag on the way.
"""

from __future__ import annotations

import shlex
from typing import Any, Callable

from pipeline.core.methods import Method, beta_tag, rcl_model, relabel_model, started_from
from pipeline.core.recipes import dataset_recipe
from pipeline.retrieval.settings import RETRIEVER_KEYS
from pipeline.training.settings import Objective, TrainSettings
from pipeline.workflow.documents import settings_flag
from pipeline.workflow.paths import (
    corpus,
    filter_decisions,
    negatives,
    qrels,
    qrels_all,
    queries,
    relabel_qrels,
    retriever,
    run,
    train_negatives,
)
from pipeline.workflow.tables import Wildcards, WorkflowTables


def retriever_settings(config: dict, **overrides: Any) -> dict[str, Any]:
    """The model settings a retriever trains with: config ``model``'s, with ``overrides`` (CCR fine-tunes
    with cosine similarity at its own tau)."""
    model = {**config["model"], **overrides}
    return {key: model[key] for key in (*RETRIEVER_KEYS, "shared_towers")}


def train_job(
    config: dict,
    section: str,
    *,
    seed: int,
    beta: float | None = None,
    objective: dict | None = None,
    relabel: dict | None = None,
    snapshots: bool = True,
    **fixed: Any,
) -> dict[str, Any]:
    """The document a ``section`` (dpr or ccr) training job of a dataset whose resolved config is
    ``config`` runs with. ``beta``: a CCR model of the β sweep (its own β instead of ccr.beta);
    ``objective``: DPR's loss when it is not NCE (dpr.rcl); ``fixed``: training settings a rule pins
    (AR2's per-round CCR drops queries whose positives fell out of its candidates); ``relabel``:
    dpr.relabel's settings for a dpr_relabel_<detector> run; ``snapshots``: whether the run keeps
    selection.checkpoints' weight snapshots (a model no selection reads, AR2's round scorer, does not)."""
    settings = {**config[section], **fixed}
    if beta is not None:
        settings["beta"] = beta
    document: dict[str, Any] = {
        "section": section,
        "seed": int(seed),
        "train": {key: settings[key] for key in TrainSettings.model_fields},
    }
    # Only when kept: the default document, and with it every training job's params, stays as it was.
    if snapshots and config["selection"]["checkpoints"]:
        document["snapshots"] = config["selection"]["checkpoints"]
    if section == "ccr":
        document["objective"] = {key: settings[key] for key in Objective.model_fields}
        document["retriever"] = retriever_settings(
            config, similarity="cosine", temperature=settings["temperature"]
        )
    else:
        if objective is not None:
            document["objective"] = {key: objective[key] for key in Objective.model_fields}
        document["retriever"] = retriever_settings(config)
        if relabel is not None:
            document["relabel"] = dict(relabel)
    return document


def init_job(config: dict) -> dict[str, Any]:
    """The document of a retriever folder saved untrained (zero-shot, dpr.skip): its model settings.
    No seed: nothing random happens, and a seed would rebuild zero-shot whenever the seed changes."""
    return {"retriever": retriever_settings(config)}


def selected_folders(tables: WorkflowTables, d: str) -> set[str]:
    """The trained folders (seed aside) that the selections dataset ``d`` builds choose from: a
    <trained>_wise* method in its methods, or the run a hybrid fuses, a miner mines with or the
    sieve's teacher scores with. Only their trainings keep selection.checkpoints' snapshots."""
    table, runs, c = tables.methods[d], tables.runs[d], tables.cfg(d)
    wanted = [table[name] for name in c["methods"] if name in table]
    wanted += [runs[r] for m in wanted for r in (m.base, m.miner) if r in runs]
    if c["sieve"]["teacher"] in table:
        wanted.append(table[c["sieve"]["teacher"]])
    return {m.selects for m in wanted if m.selects is not None}


class TrainingRules:
    """The params and inputs of the training rules (workflow/rules/train.smk), from the lookups of
    ``tables``; ``base_input(section, wildcards)``: content.smk's fingerprint of a local base folder."""

    def __init__(self, tables: WorkflowTables, base_input: Callable[[str, Wildcards], dict]):
        self.t, self.base_input = tables, base_input
        # The β tag of each dataset's dpr_rcl (dpr.rcl.beta).
        self.rcl_tags = {d: beta_tag(tables.cfg(d)["dpr"]["rcl"]["beta"]) for d in tables.datasets}
        # The model folders of the <trained>_wise* methods (select_model's {model}).
        self.selected_models = sorted(
            {m.model for d in tables.datasets for m in tables.runs[d].values() if m.selects is not None}
        )
        self.selected_from = {d: selected_folders(tables, d) for d in tables.datasets}
        self.train_inputs = {
            "queries": queries("{dataset}", "train"),
            "qrels": qrels("{dataset}", "train"),
            "corpus": corpus("{dataset}"),
            "negatives": negatives("{dataset}", "bm25"),
        }

    def _seed(self, wildcards: Wildcards) -> int:
        return int(wildcards["seed"] if "seed" in wildcards.keys() else self.t.config["seed"])

    def keeps_snapshots(self, wildcards: Wildcards, folder: str) -> bool:
        """Whether the training job writing model ``folder`` (its name without the seed) keeps
        selection.checkpoints' snapshots: only a folder some <trained>_wise* method chooses from does.
        Another's would be disk nothing reads (MiniLM: 90 MB each), and its document, so its model,
        stays as it is when the setting changes."""
        return folder in self.selected_from[wildcards.dataset]

    def settings(
        self, section: str, folder: Callable[[Wildcards], str] | None, **fixed: Any
    ) -> Callable[[Wildcards], str]:
        """params function (of the wildcards only, so Snakemake records it): the settings document of a
        `dpr` or `ccr` training job of the job's dataset (train_job), passed whole. A CCR model of the β
        sweep trains at the β its folder's tag stands for (the tag is a key of the config's β values,
        never parsed); a seeded model at its path's seed. ``folder``: the job's model folder from its
        wildcards, seed aside (keeps_snapshots); None for a model no selection can read (AR2's round
        scorer)."""

        def settings(wildcards: Wildcards) -> str:
            d = wildcards.dataset
            beta = self.t.ccr_betas[d][wildcards.beta] if "beta" in wildcards.keys() else None
            return settings_flag(
                train_job(
                    self.t.cfg(d),
                    section,
                    seed=self._seed(wildcards),
                    beta=beta,
                    snapshots=folder is not None and self.keeps_snapshots(wildcards, folder(wildcards)),
                    **fixed,
                )
            )

        return settings

    def init_settings(self, wildcards: Wildcards) -> str:
        """params function: the document of the zero-shot folder (the base model's settings)."""
        return settings_flag(init_job(self.t.cfg(wildcards.dataset)))

    def recipe_label(self, wildcards: Wildcards, output: Any) -> str:
        """params function: --recipe <name>, written into the model folder (recipe.json). A label, not a
        setting: the recipe's settings are the recorded params, so taking `output` keeps the name itself
        unrecorded and a renamed recipe with the same settings retrains nothing."""
        return f"--recipe {shlex.quote(dataset_recipe(self.t.config, wildcards.dataset))}"

    def base(self, wildcards: Wildcards) -> str:
        """params function: the base encoder of the job's dataset (model.base)."""
        return shlex.quote(self.t.cfg(wildcards.dataset)["model"]["base"])

    @staticmethod
    def dpr_skipped(c: dict) -> bool:
        """dpr.skip: dpr is the pretrained model, nothing trains."""
        return bool(c["dpr"]["skip"])

    def dpr_trains(self, c: dict, wildcards: Wildcards) -> bool:
        """gpu_resources' `used`: train_dpr holds GPUs only when it trains."""
        return not self.dpr_skipped(c)

    def dpr_inputs(self, wildcards: Wildcards) -> dict[str, str]:
        """input function of train_dpr: the training tables (none under dpr.skip) and a local base."""
        tables = {} if self.dpr_skipped(self.t.cfg(wildcards.dataset)) else self.train_inputs
        return {**tables, **self.base_input("model", wildcards)}

    def dpr_settings(self, wildcards: Wildcards) -> str:
        """params function (of the wildcards only, so Snakemake records it): the pretrained model as it
        is (dpr.skip) or DPR training."""
        c = self.t.cfg(wildcards.dataset)
        if self.dpr_skipped(c):
            return f"--init-only --base {self.base(wildcards)} {settings_flag(init_job(c))}"
        return f"--init {self.base(wildcards)} {self.settings('dpr', lambda _: 'dpr')(wildcards)}"

    @staticmethod
    def dpr_files(wildcards: Wildcards, input: Any) -> str:
        """params function: the training tables as flags (none when dpr.skip); tracked as inputs."""
        keys = ("queries", "qrels", "negatives", "corpus")
        return " ".join(f"--{key} {shlex.quote(input[key])}" for key in keys if key in input.keys())

    def rcl_settings(self, wildcards: Wildcards) -> str:
        """params function of dpr_rcl: DPR's document with the regulariser's objective (dpr.rcl)."""
        c, tag = self.t.cfg(wildcards.dataset), self.rcl_tags[wildcards.dataset]
        if wildcards.rcl_beta != tag:
            raise ValueError(
                f"{rcl_model(wildcards.rcl_beta)} of dataset {wildcards.dataset!r}: its dpr.rcl.beta is "
                f"{c['dpr']['rcl']['beta']} (folder {rcl_model(tag)}); set dpr.rcl.beta to build another"
            )
        snapshots = self.keeps_snapshots(wildcards, rcl_model(tag))
        return settings_flag(
            train_job(c, "dpr", seed=self._seed(wildcards), objective=c["dpr"]["rcl"], snapshots=snapshots)
        )

    def selection(self, wildcards: Wildcards) -> Method:
        """The <trained>_wise* method whose model folder a select_model job's {model} is."""
        d = wildcards.dataset
        for m in self.t.runs[d].values():
            if m.selects is not None and m.model == wildcards.model:
                return m
        raise ValueError(f"models/{wildcards.model} of dataset {d!r}: no <trained>_wise method selects it")

    def select_inputs(self, wildcards: Wildcards) -> dict[str, str]:
        """input function of select_model: the model training started from (alpha 0) and the trained one
        (alpha 1), a seed's own where they are trained, the dev split's tables with the labels that
        choose (the dev qrels, or qrels_all for the truth), and BM25's dev run whose candidates are
        re-scored."""
        d, m = wildcards.dataset, self.selection(wildcards)
        start, trained = self.t.runs[d][started_from(m)], m.selects
        start_model = start.model
        if "seed" in wildcards.keys():
            trained = self.t.seeded_model(trained, wildcards.seed)
            if start.random:
                start_model = self.t.seeded_model(start_model, wildcards.seed)
        if m.labels == "truth" and d not in self.t.synthetic:
            raise ValueError(
                f"{m.name} of dataset {d!r} is chosen by the true dev labels (qrels_all), which only a "
                "synthetic dataset has; use the dev qrels' selection instead"
            )
        labels = qrels_all(d, "dev") if m.labels == "truth" else qrels(d, "dev")
        return {
            "start": retriever(d, start_model),
            "trained": retriever(d, trained),
            "queries": queries(d, "dev"),
            "qrels": labels,
            "corpus": corpus(d),
            "candidates": run(d, "bm25", "dev"),
        }

    def select_settings(self, wildcards: Wildcards) -> str:
        """params function: select_model's document (select_job), recorded and passed whole."""
        return settings_flag(select_job(self.t.cfg(wildcards.dataset)))

    def relabel_detector(self, wildcards: Wildcards) -> str:
        """The filter whose dropped candidates a relabel job's {negs} (its kept negatives) stands for."""
        d = wildcards.dataset
        for m in self.t.runs[d].values():
            if m.relabel and m.negatives == wildcards.negs:
                return m.filter
        raise ValueError(
            f"{relabel_model(wildcards.negs)} of dataset {d!r}: no dpr_relabel_<detector> method of its config "
            "trains on these negatives (its sieve settings give other names)"
        )

    def relabel_inputs(self, wildcards: Wildcards) -> dict[str, str]:
        """relabel_qrels' input: the train qrels and the detector's decisions (the sieve's own table for a
        sieve_b<β>, a filter's decisions otherwise)."""
        d, negs = wildcards.dataset, wildcards.negs
        detector = self.relabel_detector(wildcards)
        decisions = negatives(d, negs) if detector.startswith("sieve_b") else filter_decisions(d, negs)
        return {"qrels": qrels(d, "train"), "decisions": decisions}

    def relabel_train_inputs(self, wildcards: Wildcards) -> dict[str, str]:
        """train_dpr_relabel's input: the detector's kept negatives and the relabelled qrels."""
        d, negs = wildcards.dataset, wildcards.negs
        self.relabel_detector(wildcards)
        return {
            "queries": queries(d, "train"),
            "qrels": relabel_qrels(d, negs),
            "corpus": corpus(d),
            "negatives": train_negatives(d, negs),
        }

    def relabel_settings(self, wildcards: Wildcards) -> str:
        """params function of dpr_relabel_<detector>: DPR's document with dpr.relabel's settings."""
        c = self.t.cfg(wildcards.dataset)
        snapshots = self.keeps_snapshots(wildcards, relabel_model(wildcards.negs))
        return settings_flag(
            train_job(c, "dpr", seed=self._seed(wildcards), relabel=c["dpr"]["relabel"], snapshots=snapshots)
        )


def select_job(config: dict) -> dict[str, Any]:
    """The document of a select_model job of a dataset whose resolved config is ``config``
    (pipeline.core.settings.job_documents.SelectModelJob): section selection's alphas and metric, the candidates'
    depth and answer matching (eval), the forward pass's batch and autocast (encode)."""
    reads = (
        ("selection", ("alphas", "metric")),
        ("eval", ("depth", "match")),
        ("encode", ("batch_size", "amp")),
    )
    return {key: config[section][key] for section, keys in reads for key in keys}

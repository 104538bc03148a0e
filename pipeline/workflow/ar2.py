"""What the AR2 rules (workflow/rules/ar2.smk) compute from the config: the rounds' input files, the
flags their stages read, the wildcard constraints of the round folders. ar2.smk builds one ``Ar2Rules``
from common.smk's ``WorkflowTables`` and its rules name these methods, so the rule file reads as a table
of contents and the logic is unit-tested and linted here. Planning the DAG imports this
module: no torch or transformers.
"""

from __future__ import annotations

import os
import re
import shlex
from typing import Any, Callable

from pipeline.ar2.settings import AR2_MINE_KEYS, AR2_RANKER_KEYS, AR2_SIEVE_KEYS, ar2_recorded_settings
from pipeline.core.methods import AR2_SAMPLING, AR2_VARIANTS, beta_tag, ccr_model
from pipeline.workflow.documents import settings_flag
from pipeline.workflow.evaluation import evaluate_job
from pipeline.workflow.paths import (
    ar2_info,
    ar2_round_dir,
    ar2_round_json,
    ar2_seed_dir,
    ar2_start_file,
    ar2_trained_ranker,
    corpus,
    embeddings,
    method_metrics,
    qrels,
    qrels_all,
    queries,
    ranker,
    retriever,
)
from pipeline.workflow.retrieval import encode_job
from pipeline.workflow.tables import Wildcards, WorkflowTables, alternatives

# Round numbers a {r} wildcard may take: trained rounds start at 1; mining from a previous round's
# retriever starts at 2, since round 1 trains on ar2/start/negatives.parquet (DPR's).
TRAINED_ROUND = r"[1-9]\d*"
MINED_ROUND = r"[2-9]|[1-9]\d+"

# content.smk's base_input: {name: fingerprint} of a local `<section>.base` folder, else {}. Passed in
# because the fingerprint table lives in the rule files.
BaseInput = Callable[[str, Wildcards, str], dict[str, str]]


def _quoted(args: list[str]) -> str:
    """One shell word per argument: file arguments go into the shell string as they are."""
    return " ".join(shlex.quote(x) for x in args)


def ar2_mine_job(config: dict) -> dict[str, Any]:
    """The document of an AR2 mining job (pipeline.core.settings.job_documents.Ar2MineJob) of a dataset whose resolved
    config is ``config``: what mining reads of section ar2 (top_k, answer-match exclusion, retriever
    overrides) and eval.match."""
    return {**{key: config["ar2"][key] for key in AR2_MINE_KEYS}, "match": config["eval"]["match"]}


def ar2_sieve_job(config: dict, seed: int, dataset_format: str) -> dict[str, Any]:
    """The document of a sieve variant's round sieve (pipeline.core.settings.job_documents.Ar2SieveJob): config sieve's
    candidates, pool and decision keys, eval.match, the run's seed; a SQuAD-format dataset's candidates
    from the positive's own article are suspects. The sieve model's own settings ride on its files."""
    return {
        **{key: config["sieve"][key] for key in AR2_SIEVE_KEYS},
        "match": config["eval"]["match"],
        "seed": int(seed),
        "suspect_same_article": dataset_format == "squad",
    }


def ar2_ranker_job(config: dict, seed: int) -> dict[str, Any]:
    """The document of the listwise ranker's training (pipeline.core.settings.job_documents.Ar2RankerJob): what it reads
    of section ar2, the run's seed, and the dev metrics it is scored by (eval.ks, eval.match)."""
    return {
        **{key: config["ar2"][key] for key in AR2_RANKER_KEYS},
        "seed": int(seed),
        "ks": config["eval"]["ks"],
        "match": config["eval"]["match"],
    }


def ar2_select_job(config: dict) -> dict[str, Any]:
    """The document of an AR2 run's round selection (pipeline.core.settings.job_documents.Ar2SelectJob): ar2.rounds and
    ar2.select_metric."""
    return {key: config["ar2"][key] for key in ("rounds", "select_metric")}


def ar2_curve_job(config: dict) -> dict[str, Any]:
    """The document of the AR2 learning curve (pipeline.core.settings.job_documents.Ar2CurveJob): ar2.rounds."""
    return {"rounds": config["ar2"]["rounds"]}


def ar2_train_job(config: dict, variant: str, seed: int) -> dict[str, Any]:
    """The document of a round's training (pipeline.core.settings.job_documents.Ar2TrainJob) of AR2 variant ``variant``
    (plain, sieve, ...): every ar2 key it reads (ar2_recorded_settings: a changed one reruns this round's
    training and everything after it, and nothing else), the variant's sampling, the run's seed."""
    sampling = AR2_SAMPLING[variant]
    return {**ar2_recorded_settings(config["ar2"], sampling), "sampling": sampling, "seed": int(seed)}


class Ar2Rules:
    """The AR2 rules' functions over one config's ``WorkflowTables``."""

    def __init__(self, tables: WorkflowTables, base_input: BaseInput):
        self.w = tables
        self.config = tables.config
        self.base_input = base_input
        self.encode_shards: int = self.config["encode"]["shards"]
        ar2_methods = [m for d in tables.datasets for m in tables.runs[d].values() if m.kind == "ar2"]
        # Every AR2 variant folder the datasets' configs name (the {variant} wildcard of the round rules).
        self.folders = alternatives(sorted({re.escape(m.variant_dir) for m in ar2_methods}))
        self.runs = alternatives(sorted({re.escape(run) for run in tables.runs_of("ar2")}))
        self.round_wildcards = dict(variant=self.folders, seed=r"\d+")
        # The optimizer state a round hands to the next: kept only where a dataset's config asks for it.
        self.keep_carry = any(tables.cfg(d)["ar2"]["keep_checkpoints"] for d in tables.datasets)

    # ---- lookups ------------------------------------------------------------------------------------

    def ar2_config(self, wildcards: Wildcards) -> dict:
        """Section ar2 of the job's dataset (its recipe)."""
        return self.w.cfg(wildcards.dataset)["ar2"]

    def record(self, d: str, folder: str) -> Any:
        """The AR2 method whose rounds live in results/{d}/ar2/<folder>/."""
        (record,) = [m for m in self.w.runs[d].values() if m.kind == "ar2" and m.variant_dir == folder]
        return record

    def sieves(self, d: str, folder: str) -> bool:
        """Whether the variant in ``folder`` sieves its negatives (adds the sieve steps to a round)."""
        return self.record(d, folder).variant.endswith("sieve")

    def variant(self, wildcards: Wildcards) -> str:
        """params: the job's variant name (plain, sieve, ...) from its {variant} folder."""
        return self.record(wildcards.dataset, wildcards.variant).variant

    def method_name(self, wildcards: Wildcards) -> str:
        """params: the method name the job's {variant} folder belongs to."""
        return self.record(wildcards.dataset, wildcards.variant).name

    def dev_settings(self, wildcards: Wildcards) -> str:
        """params function of ar2_evaluate_dev: evaluate's document for the round's dev run."""
        return settings_flag(evaluate_job(self.w, wildcards.dataset, self.method_name(wildcards), "dev"))

    def start_dev_settings(self, wildcards: Wildcards) -> str:
        """params function of ar2_evaluate_dev_start: evaluate's document for the DPR start's dev run."""
        return settings_flag(evaluate_job(self.w, wildcards.dataset, "dpr", "dev"))

    # ---- round folders and files --------------------------------------------------------------------

    def round_dir(self, wildcards: Wildcards, r: int | str | None = None) -> str:
        """The round folder of the job's variant and seed (round ``r``, default the job's round)."""
        r = wildcards.r if r is None else r
        return ar2_round_dir(wildcards.dataset, wildcards.variant, wildcards.seed, r)

    def round_model(self, wildcards: Wildcards, r: int | str) -> str:
        """retriever.json of round ``r`` of the job's variant and seed; round 0 is the DPR start."""
        if int(r) == 0:
            return retriever(wildcards.dataset, "dpr")
        return f"{self.round_dir(wildcards, r)}/retriever/retriever.json"

    def round_embeddings(self, wildcards: Wildcards, r: int | str) -> str:
        """The embeddings manifest of round ``r``; round 0's are DPR's."""
        if int(r) == 0:
            return embeddings(wildcards.dataset, "dpr")
        return f"{self.round_dir(wildcards, r)}/embeddings/manifest.json"

    def previous_model(self, wildcards: Wildcards) -> str:
        """input: the retriever round r-1 ended with (what round r mines with)."""
        return self.round_model(wildcards, int(wildcards.r) - 1)

    def previous_embeddings(self, wildcards: Wildcards) -> str:
        """input: the corpus embeddings of round r-1's retriever."""
        return self.round_embeddings(wildcards, int(wildcards.r) - 1)

    def round_negatives(self, wildcards: Wildcards) -> str:
        """input: the negatives round r trains on (round 1: DPR's, shared by every variant and seed)."""
        if int(wildcards.r) == 1:
            return ar2_start_file(wildcards.dataset, "negatives.parquet")
        return f"{self.round_dir(wildcards)}/negatives.parquet"

    def retriever_folder(self, wildcards: Wildcards) -> str:
        """params: the folder of the round's retriever."""
        return f"{self.round_dir(wildcards)}/retriever"

    def embeddings_folder(self, wildcards: Wildcards) -> str:
        """params: the folder of the round's corpus embeddings."""
        return f"{self.round_dir(wildcards)}/embeddings"

    def round_shard(self, ext: str) -> str:
        """The pattern of one of the round's corpus embedding shards (ar2_encode_corpus's outputs)."""
        pattern = ar2_round_dir("{dataset}", "{variant}", "{seed}", "{r}")
        return pattern + f"/embeddings/shard{{shard}}of{self.encode_shards}.{ext}"

    def round_shards(self) -> list[str]:
        """Every shard file of a round's encoding (what ar2_gather_embeddings reads)."""
        return [
            self.round_shard(ext).replace("{shard}", str(i))
            for i in range(self.encode_shards)
            for ext in ("npy", "pids.parquet")
        ]

    @staticmethod
    def train_split(d: str) -> dict[str, str]:
        """The train queries, qrels and corpus of dataset ``d`` (patterns with "{dataset}")."""
        return {"queries": queries(d, "train"), "qrels": qrels(d, "train"), "corpus": corpus(d)}

    # ---- mining -------------------------------------------------------------------------------------

    def mine_flags(self, wildcards: Wildcards) -> str:
        """params function: ar2_mine's document (ar2_mine_job), recorded and passed whole."""
        return settings_flag(ar2_mine_job(self.w.cfg(wildcards.dataset)))

    @staticmethod
    def mine_source(wildcards: Wildcards) -> str:
        """params: the label mined negatives carry (which round's retriever found them)."""
        return f"ar2/{wildcards.variant}/round{wildcards.r}"

    # ---- the sieve of sieve variants ----------------------------------------------------------------

    def sieve_model(self, wildcards: Wildcards) -> dict[str, str]:
        """The model a sieve variant's round judges with (ar2.sieve_init), and its embeddings when stored."""
        d, c = wildcards.dataset, self.w.cfg(wildcards.dataset)
        if c["ar2"]["sieve_init"] == "initial":
            model = ccr_model(beta_tag(c["ccr"]["beta"])) if c["sieve"]["scorer"] == "ccr" else "dpr"
            return {"model": retriever(d, model), "model_embeddings": embeddings(d, model)}
        return {"model": f"{self.round_dir(wildcards)}/sieve_model/retriever.json"}

    def sieve_inputs(self, wildcards: Wildcards) -> dict[str, str]:
        """input (unpacked): ar2_sieve's files; a synthetic dataset's judge also reads every relevant."""
        d = wildcards.dataset
        inputs = {
            "negatives": self.round_negatives(wildcards),
            **self.train_split(d),
            **self.sieve_model(wildcards),
        }
        if d in self.w.synthetic:
            inputs["qrels_all"] = qrels_all(d, "train")
        return inputs

    @staticmethod
    def sieve_files(wildcards: Wildcards, input: Any) -> str:
        """params: the sieve's optional file arguments, from the job's inputs (not recorded twice)."""
        out = ["--model", os.path.dirname(input.model)]
        if "model_embeddings" in input.keys():
            out += ["--embeddings", os.path.dirname(input.model_embeddings)]
        if "qrels_all" in input.keys():
            out += ["--qrels-all", input.qrels_all]
        return _quoted(out)

    def sieve_flags(self, wildcards: Wildcards) -> str:
        """params function: the round sieve's document (ar2_sieve_job), recorded and passed whole."""
        d = wildcards.dataset
        return settings_flag(ar2_sieve_job(self.w.cfg(d), wildcards.seed, self.w.datasets[d]["format"]))

    def sieve_model_start(self, wildcards: Wildcards) -> str:
        """sieve_init warm: the warm-up DPR (the authors' scripts); current: round r-1's retriever."""
        if self.ar2_config(wildcards)["sieve_init"] == "warm":
            return retriever(wildcards.dataset, "dpr")
        return self.previous_model(wildcards)

    # ---- the listwise ranker ------------------------------------------------------------------------

    def ranker_inputs(self, wildcards: Wildcards) -> dict[str, str]:
        """input (unpacked): what ar2_train_ranker reads (DPR's candidates and dev run, a local base)."""
        d = wildcards.dataset
        inputs = {
            "mined": ar2_start_file(d, "negatives.parquet"),
            "dev_run": ar2_start_file(d, "run.dev.parquet"),
            "retriever": retriever(d, "dpr"),
            **self.train_split(d),
            "dev_queries": queries(d, "dev"),
            "dev_qrels": qrels(d, "dev"),
            **self.base_input("ar2.ranker", wildcards, "base_ranker"),  # a local base folder (content.smk)
        }
        if d in self.w.synthetic:
            inputs["dev_qrels_all"] = qrels_all(d, "dev")
        return inputs

    def ranker_flags(self, wildcards: Wildcards) -> str:
        """params function: the listwise ranker's document (ar2_ranker_job), recorded and passed whole."""
        return settings_flag(ar2_ranker_job(self.w.cfg(wildcards.dataset), wildcards.seed))

    @staticmethod
    def dev_qrels_all_flag(wildcards: Wildcards, input: Any) -> str:
        """params: --dev-qrels-all where the job reads one (synthetic datasets)."""
        return (
            f"--dev-qrels-all {shlex.quote(input.dev_qrels_all)}" if "dev_qrels_all" in input.keys() else ""
        )

    def select_metric(self, wildcards: Wildcards, output: Any) -> str:
        """params: only which metric the log line compares. A function of ``output`` so that Snakemake
        does not record it (a changed ar2.select_metric does not retrain the ranker)."""
        return shlex.quote(self.ar2_config(wildcards)["select_metric"])

    # ---- a round's training ------------------------------------------------------------------------

    def train_inputs(self, wildcards: Wildcards) -> dict[str, str]:
        """input (unpacked): round r's negatives, the retriever and ranker it continues from (round 1's
        ranker per ar2.ranker_init), the optimizer state of round r-1, a sieve variant's sieve."""
        d, r = wildcards.dataset, int(wildcards.r)
        inputs = {
            "negatives": self.round_negatives(wildcards),
            **self.train_split(d),
            "retriever": self.round_model(wildcards, r - 1),
        }
        if self.sieves(d, wildcards.variant):
            inputs["sieve"] = f"{self.round_dir(wildcards)}/sieve.parquet"
        init = self.ar2_config(wildcards)["ranker_init"]
        if r > 1:
            inputs["ranker"] = f"{self.round_dir(wildcards, r - 1)}/ranker/ranker.json"
            inputs["carry"] = f"{self.round_dir(wildcards, r - 1)}/carry/state.pt"
        elif init == "cross_encoder":
            inputs["ranker"] = ranker(d, "cross_encoder")
        elif init == "listwise":
            inputs["ranker"] = ar2_trained_ranker(d, wildcards.seed)
        else:  # round 1's ranker starts from ar2.ranker.base: a local folder's content (content.smk)
            inputs.update(self.base_input("ar2.ranker", wildcards, "base_ranker"))
        return inputs

    @staticmethod
    def train_files(wildcards: Wildcards, input: Any) -> str:
        """params: the training's file arguments (folders for models and the carried state)."""
        out = ["--retriever", os.path.dirname(input.retriever)]
        if "sieve" in input.keys():
            out += ["--sieve", input["sieve"]]
        for name in ("ranker", "carry"):
            if name in input.keys():
                out += [f"--{name}", os.path.dirname(input[name])]
        return _quoted(out)

    def train_flags(self, wildcards: Wildcards) -> str:
        """params function: the round training's document (ar2_train_job), recorded and passed whole."""
        return settings_flag(
            ar2_train_job(self.w.cfg(wildcards.dataset), self.variant(wildcards), wildcards.seed)
        )

    def encode_settings(self, wildcards: Wildcards) -> str:
        """params: the round's corpus encoding's document (encode_job): section encode's, at
        ar2.encode_batch_size, autocast unless ar2.precision is fp32."""
        ar2 = self.ar2_config(wildcards)
        document = encode_job(self.w.cfg(wildcards.dataset))
        document.update(batch_size=ar2["encode_batch_size"], amp=ar2["precision"] != "fp32")
        return settings_flag(document)

    # ---- dev evaluation and the round record --------------------------------------------------------

    def _dev_inputs(self, wildcards: Wildcards, folder: str) -> dict[str, str]:
        return {"run": f"{folder}/run.dev.parquet", **self.w.split_tables(wildcards.dataset, "dev")}

    def round_dev_inputs(self, wildcards: Wildcards) -> dict[str, str]:
        """input (unpacked): what evaluating the round's dev run reads."""
        return self._dev_inputs(wildcards, self.round_dir(wildcards))

    def start_dev_inputs(self, wildcards: Wildcards) -> dict[str, str]:
        """input (unpacked): the same for DPR's dev run in ar2/start/ (round 0)."""
        return self._dev_inputs(wildcards, os.path.dirname(ar2_start_file(wildcards.dataset, "x")))

    def round_record_inputs(self, wildcards: Wildcards) -> dict[str, str]:
        """input (unpacked): the reports round.json gathers (round 0: DPR's metrics and model)."""
        d, r = wildcards.dataset, int(wildcards.r)
        if r == 0:
            return {
                "metrics": ar2_start_file(d, "metrics.dev.json"),
                "start_model": retriever(d, "dpr"),
                "start_embeddings": embeddings(d, "dpr"),
            }
        folder = self.round_dir(wildcards)
        inputs = {
            "metrics": f"{folder}/metrics.json",
            "train_summary": f"{folder}/train.summary.json",
            "negatives_stats": (
                ar2_start_file(d, "negatives.stats.json") if r == 1 else f"{folder}/negatives.stats.json"
            ),
        }
        if self.sieves(d, wildcards.variant):
            inputs["sieve_stats"] = f"{folder}/sieve.stats.json"
        return inputs

    @staticmethod
    def round_record_files(wildcards: Wildcards, input: Any) -> str:
        """params: the optional report arguments of round_summary, from the job's inputs."""
        out = []
        for name in ("negatives_stats", "sieve_stats", "train_summary"):
            if name in input.keys():
                out += ["--" + name.replace("_", "-"), input[name]]
        if "start_model" in input.keys():
            out += [
                "--start-retriever",
                os.path.dirname(input.start_model),
                "--start-embeddings",
                os.path.dirname(input.start_embeddings),
            ]
        return _quoted(out)

    # ---- per seed and per method -----------------------------------------------------------------------

    def method_variant_dir(self, wildcards: Wildcards) -> str:
        """The variant folder of the job's AR2 method ({method} is a run name)."""
        return self.w.runs[wildcards.dataset][wildcards.method].variant_dir

    def method_variant(self, wildcards: Wildcards) -> str:
        """params: the variant name of the job's AR2 method."""
        return self.w.runs[wildcards.dataset][wildcards.method].variant

    def seed_rounds(self, wildcards: Wildcards) -> list[str]:
        """input: round.json of every round (0 .. ar2.rounds) of the job's method and seed."""
        variant = self.method_variant_dir(wildcards)
        return [
            ar2_round_json(wildcards.dataset, variant, wildcards.seed, r)
            for r in range(self.ar2_config(wildcards)["rounds"] + 1)
        ]

    def seed_dir(self, wildcards: Wildcards) -> str:
        """params: the folder holding the rounds of the job's method and seed."""
        return ar2_seed_dir(wildcards.dataset, self.method_variant_dir(wildcards), wildcards.seed)

    # ar2_seeds' inputs: {method} is an AR2 run, whose seeds are the dataset's AR2 seeds (what
    # evaluate.smk's method_seeds gives for an AR2 run).
    def seed_metrics(self, wildcards: Wildcards) -> list[str]:
        """input: metrics.json of each seed of the job's AR2 method."""
        d, m = wildcards.dataset, wildcards.method
        return [method_metrics(d, m, seed) for seed in self.w.ar2_seeds(d)]

    def seed_infos(self, wildcards: Wildcards) -> list[str]:
        """input: info.json (the selected round) of each seed of the job's AR2 method."""
        d, m = wildcards.dataset, wildcards.method
        return [ar2_info(d, m, seed) for seed in self.w.ar2_seeds(d)]

    # ---- the learning curve ------------------------------------------------------------------------------

    def curves(self, wildcards: Wildcards) -> list[tuple[str, str, str]]:
        """(label, round folder parent, info.json) per configured AR2 method and seed."""
        d = wildcards.dataset
        methods = self.w.methods[d]
        records = [methods[m] for m in self.w.cfg(d)["methods"] if m in AR2_VARIANTS] or [
            methods["ar2"],
            methods["ar2_sieve"],
        ]
        seeds = self.w.ar2_seeds(d)
        return [
            (
                m.variant if len(seeds) == 1 else f"{m.variant}/seed{s}",
                ar2_seed_dir(d, m.variant_dir, s),
                ar2_info(d, m.run, s),
            )
            for m in records
            for s in seeds
        ]

    def curve_infos(self, wildcards: Wildcards) -> list[str]:
        """input: info.json of every curve."""
        return [info for _, _, info in self.curves(wildcards)]

    def select_settings(self, wildcards: Wildcards) -> str:
        """params: ar2_select's document (ar2_select_job), recorded and passed whole."""
        return settings_flag(ar2_select_job(self.w.cfg(wildcards.dataset)))

    def curve_settings(self, wildcards: Wildcards) -> str:
        """params: ar2_learning_curve's document (ar2_curve_job)."""
        return settings_flag(ar2_curve_job(self.w.cfg(wildcards.dataset)))

    def curve_args(self, wildcards: Wildcards) -> str:
        """params: --variant label=folder per curve."""
        return _quoted(
            [a for label, folder, _ in self.curves(wildcards) for a in ("--variant", f"{label}={folder}")]
        )

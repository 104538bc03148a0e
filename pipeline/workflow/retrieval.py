"""The params and inputs of the retrieval rules (workflow/rules/bm25.smk, encode.smk's search and
mining.smk), from the lookups of pipeline/workflow/tables.py."""

from __future__ import annotations

import os
import re
from typing import Any, Callable

from pipeline.workflow.documents import settings_flag
from pipeline.workflow.paths import embeddings, index, qrels, queries, retriever
from pipeline.workflow.tables import Wildcards, WorkflowTables

# What each subcommand of pipeline.retrieval.bm25 reads: (config section, keys) per part of its document.
BM25_READS = {
    "index": (("bm25", ("k1", "b", "stemmer", "stopwords")),),
    "retrieve": (("eval", ("depth",)),),
    "mine": (("bm25", ("negatives", "exclude_answer_match")), ("eval", ("match",))),
}


def bm25_job(config: dict, command: str) -> dict[str, Any]:
    """The document of a BM25 ``command`` job of a dataset whose resolved config is ``config``
    (pipeline.core.settings.Bm25IndexJob, Bm25RetrieveJob, Bm25MineJob)."""
    return {key: config[section][key] for section, keys in BM25_READS[command] for key in keys}


def encode_job(config: dict) -> dict[str, Any]:
    """The document of an encode_corpus job (pipeline.core.settings.EncodeJob): section encode's forward
    pass settings (not its shard count, which the shard paths carry, nor its resources)."""
    return {key: config["encode"][key] for key in ("batch_size", "sort_buffer", "amp", "backend")}


def index_job(config: dict, seed: int) -> dict[str, Any]:
    """The document of a build_index job (pipeline.core.settings.IndexJob): section index's type, part
    count and training sample (not its resources), the seed."""
    return {**{key: config["index"][key] for key in ("factory", "shards", "train_size")}, "seed": seed}


class RetrievalRules:
    def __init__(self, tables: WorkflowTables):
        self.t = tables

    def bm25_settings(self, command: str) -> Callable[[Wildcards], str]:
        """params function of the BM25 rule running ``command`` (index, retrieve, mine): its document."""
        return lambda wildcards: settings_flag(bm25_job(self.t.cfg(wildcards.dataset), command))

    def encode_settings(self, wildcards: Wildcards) -> str:
        """params function: encode_corpus's document (encode_job), recorded and passed whole."""
        return settings_flag(encode_job(self.t.cfg(wildcards.dataset)))

    def index_settings(self, wildcards: Wildcards) -> str:
        """params function: build_index's document (index_job), recorded and passed whole (the part
        count with it: index.json alone is declared, so a changed count reruns by this param)."""
        return settings_flag(index_job(self.t.cfg(wildcards.dataset), int(self.t.config["seed"])))

    def exclude_answer_match_flag(self, wildcards: Wildcards) -> str:
        """params function: mining's --exclude-answer-match, from bm25 of the job's dataset."""
        return (
            "--exclude-answer-match" if self.t.cfg(wildcards.dataset)["bm25"]["exclude_answer_match"] else ""
        )

    def search_inputs(self, wildcards: Wildcards) -> dict[str, str]:
        """input function of search_dense (and search_for_mining): the run's retriever, the split's
        queries, and its index (faiss) or gathered embeddings (torch); a seed's own model under *_seed."""
        d = wildcards.dataset
        model = self.t.runs[d][wildcards.method].model
        if "seed" in wildcards.keys():
            model = self.t.seeded_model(model, wildcards.seed)
        inputs = {"model": retriever(d, model), "queries": queries(d, wildcards.split)}
        if self.t.config["search"]["backend"] == "faiss":
            inputs["index"] = index(d, model)
        else:
            inputs["embeddings"] = embeddings(d, model)
        return inputs

    @staticmethod
    def search_source(wildcards: Wildcards, input: Any) -> str:
        """params function: the search backend and what it reads (search_inputs chose one)."""
        if "index" in input.keys():
            return f"--backend faiss --index {os.path.dirname(input.index)}"
        return f"--backend torch --embeddings {os.path.dirname(input.embeddings)}"

    def mining_depth(self, wildcards: Wildcards) -> str:
        """search's --depth value: a floor of 1, then the flags that rank as deep as BM25 mining does
        (enough left after a query's positives and answer matches go; the train qrels are read at run
        time). One param, so search_dense's shell line (and the record of every evaluation search)
        stays as is."""
        bm25 = self.t.cfg(wildcards.dataset)["bm25"]
        flags = [
            "1",
            "--mining-negatives",
            str(bm25["negatives"]),
            "--mining-qrels",
            qrels(wildcards.dataset, "train"),
        ]
        return " ".join(flags + (["--mining-exclude-answer-match"] if bm25["exclude_answer_match"] else []))

    def mining_sources(self) -> list[str]:
        """Dense runs that can mine (regex-escaped): every one but the DPRs trained on mined negatives."""
        return [re.escape(r) for r in self.t.runs_of("dense", lambda m: m.miner is None)]

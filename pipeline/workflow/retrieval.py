"""The params and inputs of the retrieval rules (workflow/rules/bm25.smk, encode.smk's search,
mining.smk, and ar2.smk's searches), from the lookups of pipeline/workflow/tables.py."""

from __future__ import annotations

import os
import re
import shlex
from typing import Any, Callable

from pipeline.workflow.documents import settings_flag
from pipeline.workflow.paths import embeddings, index, queries, retriever
from pipeline.workflow.tables import Wildcards, WorkflowTables

# What each subcommand of pipeline.retrieval.bm25 reads: (config section, keys) per part of its document.
BM25_READS = {
    "index": (("bm25", ("k1", "b", "stemmer", "stopwords")),),
    "retrieve": (("eval", ("depth",)),),
    "mine": (("bm25", ("negatives", "exclude_answer_match")), ("eval", ("match",))),
}


def bm25_job(config: dict, command: str) -> dict[str, Any]:
    """The document of a BM25 ``command`` job of a dataset whose resolved config is ``config``
    (pipeline.core.settings.job_documents.Bm25IndexJob, RunDepthJob, MineJob)."""
    return {key: config[section][key] for section, keys in BM25_READS[command] for key in keys}


# ---- dense search and mining (search_dense, search_for_mining, mine_dense_negatives, ar2_search*) ----
# The search knobs each backend reads (section search): a changed knob reruns the searches that use it.
SEARCH_READS = {"faiss": ("batch_size", "nprobe", "ef_search"), "torch": ("batch_size", "chunk_rows")}


def search_job(config: dict, backend: str, *, amp: bool | None = None) -> dict[str, Any]:
    """The document of a search_dense job over ``backend`` (pipeline.core.settings.job_documents.SearchJob): eval.depth,
    the backend's knobs of section search, and encode.amp (queries encoded as the corpus), unless ``amp``
    says otherwise (AR2's dev search: fp32)."""
    return {
        "depth": config["eval"]["depth"],
        **{key: config["search"][key] for key in SEARCH_READS[backend]},
        "amp": config["encode"]["amp"] if amp is None else amp,
    }


def mining_search_job(config: dict, backend: str) -> dict[str, Any]:
    """The document of a search_for_mining job (MiningSearchJob): search_job's but the depth, which the
    stage derives from the negatives to be mined (bm25.negatives, bm25.exclude_answer_match)."""
    document = {key: value for key, value in search_job(config, backend).items() if key != "depth"}
    return {**document, **{key: config["bm25"][key] for key in ("negatives", "exclude_answer_match")}}


def mine_job(config: dict) -> dict[str, Any]:
    """The document of a mining job, BM25's (bm25 mine) and a dense run's (mine_dense_negatives) alike:
    the one rule's settings (MineJob)."""
    return bm25_job(config, "mine")


def run_depth_job(config: dict) -> dict[str, Any]:
    """The document of a run that reads its depth alone (RunDepthJob: BM25's retrieve, ar2_search)."""
    return bm25_job(config, "retrieve")


def encode_job(config: dict) -> dict[str, Any]:
    """The document of an encode_corpus job (pipeline.core.settings.job_documents.EncodeJob): section encode's forward
    pass settings (not its shard count, which the shard paths carry, nor its resources)."""
    return {key: config["encode"][key] for key in ("batch_size", "sort_buffer", "amp", "backend")}


def index_job(config: dict, seed: int) -> dict[str, Any]:
    """The document of a build_index job (pipeline.core.settings.job_documents.IndexJob): section index's type, part
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
            return f"--backend faiss --index {shlex.quote(os.path.dirname(input.index))}"
        return f"--backend torch --embeddings {shlex.quote(os.path.dirname(input.embeddings))}"

    def mining_source(self, wildcards: Wildcards, input: Any) -> str:
        """params function of search_for_mining: search_source and the train qrels, whose positives
        set its depth (with the document's negatives) and which make it a mining search."""
        return f"{self.search_source(wildcards, input)} --mining-qrels {shlex.quote(input.mining_qrels)}"

    # The documents are functions of the wildcards alone: Snakemake records no param derived from a
    # job's input (a function taking `input`), so such a document's change would rerun nothing.
    def search_settings(self, wildcards: Wildcards) -> str:
        """params function: search_dense's document (search_job over search.backend, which search_inputs
        reads too)."""
        return settings_flag(search_job(self.t.cfg(wildcards.dataset), self.t.config["search"]["backend"]))

    def ar2_dev_search_settings(self, wildcards: Wildcards) -> str:
        """params function: the AR2 dev searches' document: over the round's embeddings (torch), queries
        in fp32 as AR2's mining encodes them."""
        return settings_flag(search_job(self.t.cfg(wildcards.dataset), "torch", amp=False))

    def mining_search_settings(self, wildcards: Wildcards) -> str:
        """params function: search_for_mining's document (mining_search_job over search.backend)."""
        config = self.t.cfg(wildcards.dataset)
        return settings_flag(mining_search_job(config, self.t.config["search"]["backend"]))

    def mine_settings(self, wildcards: Wildcards) -> str:
        """params function: mine_dense_negatives's document (mine_job)."""
        return settings_flag(mine_job(self.t.cfg(wildcards.dataset)))

    def depth_settings(self, wildcards: Wildcards) -> str:
        """params function: ar2_search's document (run_depth_job)."""
        return settings_flag(run_depth_job(self.t.cfg(wildcards.dataset)))

    def mining_sources(self) -> list[str]:
        """Dense runs that can mine (regex-escaped): every one but the DPRs trained on mined negatives."""
        return [re.escape(r) for r in self.t.runs_of("dense", lambda m: m.miner is None)]

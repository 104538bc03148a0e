"""One job's settings document per stage (``GenerateJob``, ``SieveJob``, ...), each field taken from its
section's contract. They sit above the config root because several take a top-level key (the seed)
or fields of more than one family's sections.
"""

from __future__ import annotations

import copy
from typing import Any, Literal

from pydantic import Field, create_model

from pipeline.ar2.settings import (
    AR2_MINE_KEYS,
    AR2_RANKER_KEYS,
    AR2_SIEVE_KEYS,
    AR2_TRAIN_KEYS,
    Ar2Settings,
)
from pipeline.core.settings.base import Contract, MethodName, Name, Seed
from pipeline.core.settings.flags import _dest
from pipeline.core.settings.root import Config
from pipeline.data.settings import DatasetSpec, Split
from pipeline.evaluation.settings import EvalSettings, SelectionSettings
from pipeline.retrieval.settings import (
    Bm25Settings,
    EncodeSettings,
    HybridSettings,
    IndexSettings,
    SearchSettings,
)
from pipeline.sieve.settings import (
    CROSS_ENCODER_TRAINING,
    FILTER_CONTRACTS,
    SIEVE_DECISION_KEYS,
    SIEVE_RULE_KEYS,
    CleanSpec,
    CrossEncoderFilterSettings,
    InjectionSettings,
    SieveSettings,
)

# ---- one job's settings document ---------------------------------------------------------------
# What a rule hands its stage as one JSON document (--settings-json) and a run by hand reads from a file
# (--settings FILE; pipeline.core.jobs): that job's settings only, so a changed setting reruns the jobs
# that read it and nothing else. Each field is its section's own (type, range, default and help taken
# from that contract, never restated); pipeline/workflow/*.py builds the documents from a dataset's
# resolved config. train_dense's document is TrainJob (pipeline.training.settings).


def fields_of(cls: type[Contract], *names: str, prefix: str = "") -> dict[str, tuple[Any, Any]]:
    """The fields ``names`` of ``cls`` as create_model takes them: (type, the field itself); ``prefix``:
    a nested section's key, so that its field keeps the name of its flag (injection -> injection_fraction)."""
    return {
        _dest(name, prefix): (cls.model_fields[name].annotation, copy.deepcopy(cls.model_fields[name]))
        for name in names
    }


def job_contract(name: str, doc: str, **fields: tuple[Any, Any]) -> type[Contract]:
    """A job document's contract: ``fields`` (fields_of), unknown keys and bad values refused."""
    return create_model(name, __base__=Contract, __doc__=doc, __module__=__name__, **fields)


# A synthkb dataset's split where its config gives none (the workflow's and a hand run's).
SYNTHKB_SPLIT: dict[str, Any] = {"by": "entity", "dev": 0.1, "test": 0.2, "seed": 0}
GenerateJob = job_contract(
    "GenerateJob",
    "pipeline.synthkb.generate: the generator settings of a synthkb dataset (datasets.<name>).",
    **fields_of(DatasetSpec, "entities", "seed", "positive", "fn_share", "fn_paraphrase"),
    split=(
        Split,
        Field(
            SYNTHKB_SPLIT,
            validate_default=True,
            description="the dataset's split; a synthkb dataset without one splits so",
        ),
    ),
)
PrepareJob = job_contract(
    "PrepareJob",
    "pipeline.data.prepare: how a declared dataset's sources become the canonical tables (datasets.<name>).",
    dataset=(Name, Field(description="the dataset's name (messages, manifest)")),
    **fields_of(DatasetSpec, "format", "split", "empty_positives"),
)
Bm25IndexJob = job_contract(
    "Bm25IndexJob",
    "pipeline.retrieval.bm25 index: the index's scoring and tokenisation (section bm25).",
    **fields_of(Bm25Settings, "k1", "b", "stemmer", "stopwords"),
)
# A run that reads no setting but its depth: BM25's (bm25 retrieve) and an AR2 method's (ar2_search).
RunDepthJob = job_contract(
    "RunDepthJob",
    "pipeline.retrieval.bm25 retrieve, pipeline.ar2.selection search: run depth (eval.depth).",
    **fields_of(EvalSettings, "depth"),
)
# One rule turns any ranking of the train queries into negatives (pipeline.retrieval.mining), BM25's and a
# dense method's alike, so both miners read one contract.
MineJob = job_contract(
    "MineJob",
    "pipeline.retrieval.bm25 mine, pipeline.retrieval.mining: negatives per train query (section bm25) and "
    "answer matching (eval.match).",
    **fields_of(Bm25Settings, "negatives", "exclude_answer_match"),
    **fields_of(EvalSettings, "match"),
)
SieveJob = job_contract(
    "SieveJob",
    "pipeline.sieve.passage_sieve: the decision's settings and Figure 1's losses (section sieve), the seed.",
    **fields_of(SieveSettings, *SIEVE_DECISION_KEYS, "in_batch", "figure_queries"),
    **fields_of(Config, "seed"),
)
CandidatesJob = job_contract(
    "CandidatesJob",
    "pipeline.sieve.candidates: how the candidates are drawn (section sieve; the injection a simulation of the "
    "train queries only), answer matching (eval.match), the seed.",
    **fields_of(SieveSettings, "candidates", "pool", "max_queries"),
    **fields_of(InjectionSettings, "fraction", prefix="injection"),
    **fields_of(EvalSettings, "match"),
    **fields_of(Config, "seed"),
    suspect_same_article=(
        bool,
        Field(
            False,
            description="label same-article answer-bearing candidates 'suspected' (a dataset of format squad)",
        ),
    ),
)
CrossEncoderJob = job_contract(
    "CrossEncoderJob",
    "pipeline.sieve.cross_encoder: how the cross_encoder filter's model is trained (sieve.cross_encoder; its "
    "threshold is the filter's), the seed.",
    **fields_of(CrossEncoderFilterSettings, *CROSS_ENCODER_TRAINING),
    **fields_of(Config, "seed"),
)


def filter_job_keys(name: str, clean: bool = False) -> dict[str, tuple[type[Contract], str]]:
    """Filter ``name``'s settings as a job document names them -> (their contract, its field): the fields
    of its section it reads (in FilterJob without the section's name where its contract says ``bare``;
    in CleanJob always with it, as sieve-clean's flags) and, for a filter applying the sieve's rule, the
    decision keys of section sieve."""
    c = FILTER_CONTRACTS[name]
    prefix = "" if c.bare and not clean else name
    keys: dict[str, tuple[type[Contract], str]] = {_dest(f, prefix): (c.settings, f) for f in c.fields()}
    if c.rule:
        keys |= {key: (SieveSettings, key) for key in SIEVE_RULE_KEYS}
    return keys


def _filters_fields(clean: bool) -> dict[str, tuple[Any, Any]]:
    """Every filter's settings as job fields (FILTER_CONTRACTS' order; CleanJob: sieve-clean's filters)."""
    fields: dict[str, tuple[Any, Any]] = {}
    owner: dict[str, tuple[type[Contract], str]] = {}
    for name, c in FILTER_CONTRACTS.items():
        if clean and not c.clean:
            continue
        for key, (cls, field) in filter_job_keys(name, clean).items():
            if owner.setdefault(key, (cls, field)) != (cls, field):
                raise TypeError(f"filter {name!r}: job key {key!r} is another filter's setting; prefix it")
            fields[key] = (cls.model_fields[field].annotation, copy.deepcopy(cls.model_fields[field]))
    return fields


FilterJob = job_contract(
    "FilterJob",
    "pipeline.sieve.filters: the seed and encoding batch size, and the settings of the filter run (section "
    "sieve: each filter's own, filter_job_keys); a job's document holds its own filter's only.",
    **fields_of(Config, "seed"),
    **fields_of(SieveSettings, "batch_size"),
    **_filters_fields(clean=False),
)
# A clean.<name> entry's job (rule clean_negatives) and a hand run of the cleaning command alike: the
# flags a user types (--filter, --rank-window-start, ...) are this contract's, so their defaults are too.
CleanJob = job_contract(
    "CleanJob",
    "pipeline.sieve.clean: the entry's format, filter, model, mode and near-duplicate threshold "
    "(clean.<name>), the settings its filter reads of section sieve (each filter's own, prefixed with its "
    "name: filter_job_keys; the sieve's decision and the seed) and the encoding batch size of a filter "
    "that runs a model; a job's document holds its own filter's only.",
    **fields_of(CleanSpec, "format", "filter", "model", "mode", "near_duplicate"),
    **_filters_fields(clean=True),
    **fields_of(SieveSettings, "batch_size"),
    **fields_of(Config, "seed"),
)
Ar2MineJob = job_contract(
    "Ar2MineJob",
    "pipeline.ar2.mine: what a round's mining reads of section ar2, and answer matching (eval.match).",
    **fields_of(Ar2Settings, *AR2_MINE_KEYS),
    **fields_of(EvalSettings, "match"),
)
EncodeJob = job_contract(
    "EncodeJob",
    "pipeline.retrieval.encode corpus, queries: how the forward passes run (section encode; an AR2 round's "
    "corpus at ar2.encode_batch_size and ar2.precision).",
    **fields_of(EncodeSettings, "batch_size", "sort_buffer", "amp", "backend"),
)
IndexJob = job_contract(
    "IndexJob",
    "pipeline.retrieval.index: the FAISS index's type, parts and training sample (section index), the seed "
    "(the sample's).",
    **fields_of(IndexSettings, "factory", "shards", "train_size"),
    **fields_of(Config, "seed"),
)
# ---- dense search (search_dense and its children, search_for_mining) --------------------------------
# The query encoding and search knobs: section search's (not the backend, which the job's input
# decides, nor the resources) and encode.amp (queries encoded as the corpus; AR2's dev search in fp32).
SEARCH_KEYS = ("batch_size", "nprobe", "ef_search", "chunk_rows")
SearchJob = job_contract(
    "SearchJob",
    "pipeline.retrieval.search: run depth (eval.depth), the query batch and the backend's search knobs "
    "(section search), autocast of the query encoding (encode.amp).",
    **fields_of(EvalSettings, "depth"),
    **fields_of(SearchSettings, *SEARCH_KEYS),
    **fields_of(EncodeSettings, "amp"),
)
# A mining search ranks the train queries as deep as mining its negatives needs (the depth follows from
# them and the train positives, read at run time), so its document has the negatives where SearchJob has
# the depth.
MiningSearchJob = job_contract(
    "MiningSearchJob",
    "pipeline.retrieval.search --mining-qrels: the query batch and search knobs (section search), autocast "
    "(encode.amp), and the negatives to be mined (section bm25), which set the depth.",
    **fields_of(SearchSettings, *SEARCH_KEYS),
    **fields_of(EncodeSettings, "amp"),
    **fields_of(Bm25Settings, "negatives", "exclude_answer_match"),
)
# ---- end of dense search ---------------------------------------------------------------------------
HybridRrfJob = job_contract(
    "HybridRrfJob",
    "pipeline.evaluation.hybrid rrf: the RRF constant (hybrid.rrf_k) and the fused run's depth (eval.depth).",
    **fields_of(HybridSettings, "rrf_k"),
    **fields_of(EvalSettings, "depth"),
)
HybridWeightedJob = job_contract(
    "HybridWeightedJob",
    "pipeline.evaluation.hybrid weighted: how w is chosen (section hybrid; not rrf_k), the fused run's depth and "
    "answer matching (eval.depth, eval.match).",
    **fields_of(HybridSettings, "weights", "select_split", "select_metric"),
    **fields_of(EvalSettings, "depth", "match"),
)
SelectModelJob = job_contract(
    "SelectModelJob",
    "pipeline.training.select_model: the interpolation weights and the dev metric (a selection section), the "
    "candidates re-scored per dev query and answer matching (eval.depth, eval.match), the forward pass's batch "
    "and autocast (encode.batch_size, encode.amp: the models are scored as the corpus encoding computes).",
    **fields_of(SelectionSettings, "alphas", "metric"),
    **fields_of(EvalSettings, "depth", "match"),
    **fields_of(EncodeSettings, "batch_size", "amp"),
)
EvaluateJob = job_contract(
    "EvaluateJob",
    "pipeline.evaluation.evaluate: what a run is scored with (section eval) and the labels metrics.json carries.",
    dataset=(Name, Field(description="the dataset's name, written into metrics.json")),
    method=(
        MethodName,
        Field(description="the method (its run folder's first part), written into metrics.json"),
    ),
    split=(
        EvalSettings.model_fields["split"].annotation,
        Field(description="the evaluated split (datasets.<name>.eval_split, else eval.split)"),
    ),
    **fields_of(EvalSettings, "ks", "match"),
    allow_missing_queries=(
        bool,
        Field(
            False,
            description="the run's lists are result sets (BM25): a query absent from it counts as a miss, and "
            "a list shorter than the cut-offs is accepted (fewer passages matched); else either is an error",
        ),
    ),
)


# ---- AR2's round jobs: the sieve, the listwise ranker, a round's training -----------------


def _ar2_run_seed() -> tuple[Any, Any]:
    """The seed field of an AR2 job: its run's ({seed} of the round folders), not the top-level seed."""
    return (
        Seed,
        Field(0, description="the AR2 run's seed (ar2.seeds, else seeds): sampling, dropout, the fallback"),
    )


Ar2SieveJob = job_contract(
    "Ar2SieveJob",
    "pipeline.ar2.sieving: how a sieve variant's round draws its candidates and decides (section sieve), "
    "answer matching (eval.match), the run's seed.",
    **fields_of(SieveSettings, *AR2_SIEVE_KEYS),
    **fields_of(EvalSettings, "match"),
    seed=_ar2_run_seed(),
    **fields_of(CandidatesJob, "suspect_same_article"),
)
Ar2RankerJob = job_contract(
    "Ar2RankerJob",
    "pipeline.ar2.train_ranker: what the listwise ranker (ar2.ranker_init listwise) reads of section ar2, "
    "the run's seed, and the dev metrics it is scored by (eval.ks, eval.match). ar2.select_metric, which "
    "only names the metric its log line compares, is no setting of the job (--compare-metric).",
    **fields_of(Ar2Settings, *AR2_RANKER_KEYS),
    seed=_ar2_run_seed(),
    **fields_of(EvalSettings, "ks", "match"),
)
Ar2TrainJob = job_contract(
    "Ar2TrainJob",
    "pipeline.ar2.train_round: every ar2 key a round's training reads (a document leaves out ar2.ranker "
    "when round 1's ranker is a trained one, and ar2.simans for uniform sampling: ar2_recorded_settings), "
    "the variant's negative sampling and the run's seed.",
    **fields_of(Ar2Settings, *AR2_TRAIN_KEYS),
    sampling=(
        Literal["uniform", "simans"],
        Field(description="the variant's negative sampling: uniform (plain, sieve) or simans (simans*)"),
    ),
    seed=_ar2_run_seed(),
)

Ar2SelectJob = job_contract(
    "Ar2SelectJob",
    "pipeline.ar2.selection select: the rounds an AR2 run trains (ar2.rounds) and the dev metric that picks "
    "its round (ar2.select_metric).",
    **fields_of(Ar2Settings, "rounds", "select_metric"),
)
Ar2CurveJob = job_contract(
    "Ar2CurveJob",
    "pipeline.ar2.learning_curve: the rounds drawn (ar2.rounds; the selected round comes with each info.json).",
    **fields_of(Ar2Settings, "rounds"),
)

"""A changed setting reruns every rule whose output it changes (issue 14, item 1).

Snakemake reruns a job when its output is missing or when what it recorded at the last run differs:
params (only those that are values or functions of the wildcards: a params function that takes
`input`, `output`, `threads` or `resources` is not recorded), the rule's shell text, the set of
input files. So a setting must reach its rule through one of these, or a changed setting silently
reuses the old output.

The workspace: every output of a DAG that holds every rule, created empty and then recorded by
`snakemake --touch --forceall` (which writes the same metadata as a real run, params included),
nothing trained. Then, per setting in SETTINGS, an overlay changes that one setting and the DAG is
planned as `snakemake -n` plans it (Snakemake's own DAG and needrun decision, in process: ~0.2 s a
plan instead of ~2.5 s a subprocess). A listed rule must be in that plan *for its own reason*, not
only because an upstream job reruns: a missing output the plan needs, or a job that
`snakemake -n --allowed-rules <rule>` still runs (Snakemake's own checks of params, shell text and
input set, which it skips for a job with an output it holds no record of: issue 28 found
index.shards rebuilding nothing that way while the records said the shell text had changed). That
is what catches a rule that reads a setting nobody records. Subprocess `snakemake -n` runs check the
issues' own scenarios end to end.

SETTINGS has one entry per setting: the leaves of the config contracts (pipeline.core.settings),
the top-level keys and the per-dataset keys of the schema. A setting added there and not here fails
test_every_setting_is_in_the_table.
"""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pipeline.core.settings.base import RESOURCE_KEYS
from pipeline.core.settings.root import SECTIONS, TOP_LEVEL_DEFAULTS, Config, defaults
from pipeline.data.settings import DatasetSpec
from pipeline.evaluation.settings import TournamentLevel

REPO = Path(__file__).resolve().parent.parent
SNAKEMAKE = Path(sys.executable).with_name("snakemake")

# ---- the table: the DAG that holds every rule, and for every setting a changed value with the rules
# it must rerun (and those it must leave alone).

# Every rule in one DAG: several training seeds (the *_seed rules), a DPR control, AR2 with a sieve
# variant (ccr settings reach its rounds with sieve_init current), and a declared dataset fetched
# from an archive (download, extract_member, prepare_dataset).
BASE = {
    "seeds": [0, 1],
    "methods": [
        "bm25",
        "zeroshot",
        "dpr",
        "dpr_ccr",
        "dpr_sieve",
        "dpr_rank_window",
        "ar2",
        "ar2_sieve",
        "ar2_simans",
        "hybrid_rrf_zeroshot",
        "hybrid_wsum_zeroshot",
        "hybrid_rrf_dpr",
        "hybrid_wsum_dpr",
        "dpr_mined_dpr",
        "dpr_rcl",
        # issue 41's contenders: two more filters, in-loss masking and relabel (rank_window detects)
        "dpr_absolute_margin",
        "dpr_positive_aware_dev",
        "dpr_gist_zeroshot",
        "dpr_relabel_rank_window",
        # model selection on dev (select_model, select_model_seed)
        "dpr_wise",
        # the filters scored by the teacher (sieve.teacher), each with a section of its own
        "dpr_positive_aware_teacher",
        "dpr_positive_aware_teacher_sieve",
    ],
    "datasets": {
        "toy": {
            "format": "squad",
            "source": {"url": "https://example.org/toy.tar.gz", "member": "dev.json"},
            "split": {"by": "article", "dev": 0.2, "test": 0.2, "seed": 0},
            "recipe": "toy_recipe",
        }
    },
    # toy trains under a recipe of its own; `other` is one synthkb can switch to
    "recipes": {"toy_recipe": {"bm25": {"k1": 1.0}}, "other": {"dpr": {"lr": 1e-4}}},
    # the paper's sieve (CCR-scored at β 0.5), so that ccr settings reach the sieve and AR2's rounds
    "ccr": {"beta": 0.5},
    "sieve": {"betas": [0.5], "scorer": "ccr"},
    # two rounds: round 2 mines from round 1 (ar2_mine) and continues its optimizer state
    # round 1 starts from the listwise ranker (ar2_train_ranker)
    "ar2": {"rounds": 2, "seeds": [0], "sieve_init": "current", "ranker_init": "listwise"},
    # dpr_rank_window stands in for the oracle (dpr_oracle would build the oracle filter that the
    # sieve.filters entry below adds)
    "sweep": {
        "datasets": ["synthkb"],
        "methods": ["dpr", "dpr_sieve", "dpr_rank_window"],
        "oracle": "dpr_rank_window",
    },
    # the tournament over the one synthkb level, the same stand-in oracle
    "tournament": {
        "levels": {"synthkb": {"label": "demo"}},
        "methods": ["dpr", "dpr_rank_window", "dpr_absolute_margin", "dpr_wise"],
        "baseline": "dpr",
        "oracle": "dpr_rank_window",
        "incumbent": "dpr_rank_window",
    },
}
# {stag}: the overlay's sieve settings as its paths carry them (methods.sieve_tag; '' at the defaults).
TARGETS = [
    "results/sweeps/noise.json",
    "results/sweeps/tournament.json",
    "results/sweeps/tournament_selections.json",
    "results/synthkb/metrics.json",
    "results/synthkb/sieve/comparison{stag}.md",
    "results/synthkb/sieve/tradeoff{stag}.json",
    "results/synthkb/figures{stag}/figure1_nce_loss.png",
    "results/synthkb/figures/ar2_learning_curve.png",
    "results/toy/bm25/metrics.json",
]
# A negatives file the user supplies (the target of sieve.source below).
USER_NEGATIVES = "results/synthkb/negatives/custom.parquet"

DPR = (
    "train_dpr",
    "train_dpr_seed",
    "train_dpr_filtered",
    "train_dpr_filtered_seed",
    "train_dpr_mined",
    "train_dpr_mined_seed",
    "train_dpr_rcl",
    "train_dpr_rcl_seed",
    "train_dpr_gist",
    "train_dpr_gist_seed",
    "train_dpr_relabel",
    "train_dpr_relabel_seed",
)
RELABEL = ("train_dpr_relabel", "train_dpr_relabel_seed")
RCL = ("train_dpr_rcl", "train_dpr_rcl_seed")
CCR = ("train_ccr", "train_ccr_seed")
RETRIEVERS = ("init_zeroshot", *DPR, *CCR)  # every rule that builds a retriever from `model`
SEARCH = ("search_dense", "search_dense_seed")
ANY_SEARCH = (*SEARCH, "search_for_mining")  # the search settings reach dense mining too
AR2_DEV = ("ar2_search_dev", "ar2_search_dev_start")  # search_dense's rule on AR2's dev split (torch)
AR2_MINE = ("ar2_mine", "ar2_mine_start")

# setting -> (a changed value, the rules it must rerun[, rules it must not schedule at all])
SETTINGS: dict[str, tuple] = {
    "seed": (
        1,
        (
            *DPR,
            *CCR,
            "build_index",
            "sieve_candidates",
            "sieve_negatives",
            "filter_candidates",
            "train_cross_encoder",
        ),
        ("init_zeroshot", "index_bm25"),
    ),
    "seeds": ([0, 2], ("dense_seeds", "train_dpr_seed")),
    "methods": ([*BASE["methods"], "dpr_none"], ("gather_metrics", "train_dpr_filtered")),
    "datasets.synthkb.entities": (321, ("generate_synthkb",), ("prepare_dataset",)),
    "datasets.synthkb.seed": (1, ("generate_synthkb",)),
    "datasets.synthkb.positive": ("source", ("generate_synthkb",)),
    "datasets.synthkb.fn_share": (0.15, ("generate_synthkb",), ("prepare_dataset",)),
    "datasets.synthkb.fn_paraphrase": (0.0, ("generate_synthkb",)),
    "datasets.synthkb.split": ({"by": "entity", "dev": 0.2, "test": 0.2, "seed": 0}, ("generate_synthkb",)),
    "datasets.synthkb.eval_split": ("train", ("evaluate",), ("generate_synthkb",)),
    # a dataset's own seeds: its new seed trains, its means re-gather; its data stays
    "datasets.synthkb.seeds": ([0, 2], ("dense_seeds", "train_dpr_seed"), ("generate_synthkb", "index_bm25")),
    "datasets.toy.source": (
        {"url": "https://example.org/v2/toy.tar.gz", "member": "train.json"},
        ("download", "extract_member"),
    ),
    "datasets.toy.split": ({"by": "article", "dev": 0.3, "test": 0.2, "seed": 0}, ("prepare_dataset",)),
    "datasets.toy.empty_positives": ("drop", ("prepare_dataset",)),
    "datasets.toy.eval_split": ("dev", ("evaluate",)),
    # toy runs BM25 only: seeds reach no rule of it, and synthkb's seeds stay the top-level ones
    "datasets.toy.seeds": (
        [0, 2],
        (),
        ("prepare_dataset", "index_bm25", "evaluate", "train_dpr_seed", "dense_seeds"),
    ),
    # A recipe's settings reach exactly the rules that read them, on the datasets that declare it.
    "recipes": (
        {"toy_recipe": {"bm25": {"k1": 1.2}}, "other": {"dpr": {"lr": 1e-4}}},
        ("index_bm25",),
        ("generate_synthkb", "train_dpr", "gather_metrics"),
    ),
    "datasets.synthkb.recipe": (
        "other",
        ("train_dpr", "train_dpr_seed", "train_dpr_filtered", "gather_metrics"),
        ("generate_synthkb", "index_bm25", "init_zeroshot"),
    ),
    "datasets.toy.recipe": ("demo", ("index_bm25",), ("prepare_dataset",)),
    "eval.split": ("train", ("evaluate", "export_trec")),  # dev is hybrid.select_split: refused
    "eval.match": (
        "regex",
        (
            "mine_bm25_negatives",
            "mine_dense_negatives",
            "fuse_weighted",
            "evaluate",
            "sieve_candidates",
            *AR2_MINE,
            "ar2_sieve",
            "ar2_evaluate_dev",
            "ar2_evaluate_dev_start",
            "ar2_train_ranker",
        ),
    ),
    "eval.ks": ([1, 5, 10], ("evaluate", "ar2_evaluate_dev", "ar2_evaluate_dev_start", "ar2_train_ranker")),
    "eval.depth": (150, ("retrieve_bm25", *SEARCH, "ar2_search", *AR2_DEV)),
    "eval.trec_export": (False, ("gather_metrics",)),
    "eval.compare": ([["dpr_ccr", "dpr"]], ("gather_metrics",), ("evaluate",)),
    "bm25.k1": (1.2, ("index_bm25",)),
    "bm25.b": (0.7, ("index_bm25",)),
    "bm25.stemmer": (None, ("index_bm25",)),
    "bm25.stopwords": (None, ("index_bm25",)),
    "bm25.negatives": (
        50,
        ("mine_bm25_negatives", "search_for_mining", "mine_dense_negatives"),
        ("index_bm25", "retrieve_bm25"),
    ),
    "bm25.exclude_answer_match": (True, ("mine_bm25_negatives", "search_for_mining", "mine_dense_negatives")),
    "model.base": ("other-encoder", ("init_zeroshot", *DPR)),
    "model.pooling": ("cls", RETRIEVERS),
    "model.similarity": ("dot", ("init_zeroshot", *DPR)),
    "model.temperature": (0.1, ("init_zeroshot", *DPR)),
    "model.shared_towers": (False, RETRIEVERS),
    "model.query_max_len": (48, RETRIEVERS),
    "model.passage_max_len": (96, RETRIEVERS),
    "dpr.lr": (
        1e-4,
        DPR,
        (
            "generate_synthkb",
            "index_bm25",
            "mine_bm25_negatives",
            "init_zeroshot",
            "sieve_candidates",
            "train_cross_encoder",
        ),
    ),
    "dpr.epochs": (2, DPR),
    "dpr.batch_size": (8, DPR),
    "dpr.grad_accum": (2, DPR),
    "dpr.hard_negatives": (2, DPR),
    "dpr.negatives_depth": (20, DPR),
    "dpr.in_batch": (False, DPR),
    "dpr.warmup_ratio": (0.2, DPR),
    "dpr.weight_decay": (0.01, DPR),
    "dpr.max_grad_norm": (1.0, DPR),
    "dpr.max_steps": (80, DPR),
    "dpr.checkpoint_every": (10, DPR),
    "dpr.precision": ("fp32", DPR),
    "dpr.drop_queries_without_positive": (True, DPR),
    "dpr.train_layers": (2, DPR),
    "dpr.skip": (True, ("train_dpr", "train_dpr_seed")),
    "dpr.relabel.extra_positives": (2, RELABEL, ("train_dpr", "train_dpr_gist", "relabel_qrels")),
    "dpr.rcl.beta": (6.0, RCL, ("train_dpr", "train_ccr", "sieve_negatives")),
    "dpr.rcl.scale": ("released_code", RCL, ("train_dpr", "train_ccr")),
    "ccr.beta": (
        0.7,
        (*CCR, "sieve_negatives", "ar2_train_sieve_model"),
        ("train_dpr", "mine_bm25_negatives", "sieve_candidates"),
    ),
    "ccr.scale": ("released_code", (*CCR, "ar2_train_sieve_model")),
    "ccr.temperature": (0.5, (*CCR, "ar2_train_sieve_model")),
    "ccr.lr": (1e-6, (*CCR, "ar2_train_sieve_model"), ("train_dpr",)),
    "ccr.epochs": (2, (*CCR, "ar2_train_sieve_model")),
    "ccr.batch_size": (8, (*CCR, "ar2_train_sieve_model")),
    "ccr.grad_accum": (2, (*CCR, "ar2_train_sieve_model")),
    "ccr.hard_negatives": (3, (*CCR, "ar2_train_sieve_model")),
    "ccr.negatives_depth": (20, (*CCR, "ar2_train_sieve_model")),
    "ccr.in_batch": (True, (*CCR, "ar2_train_sieve_model")),
    "ccr.warmup_ratio": (0.2, (*CCR, "ar2_train_sieve_model")),
    "ccr.weight_decay": (0.01, (*CCR, "ar2_train_sieve_model")),
    "ccr.max_grad_norm": (1.0, (*CCR, "ar2_train_sieve_model")),
    "ccr.max_steps": (30, (*CCR, "ar2_train_sieve_model")),
    "ccr.checkpoint_every": (10, (*CCR, "ar2_train_sieve_model")),
    "ccr.precision": ("fp32", (*CCR, "ar2_train_sieve_model")),
    # AR2's sieve model always drops them (a round's negatives may lose a query's positives)
    "ccr.drop_queries_without_positive": (True, CCR, ("ar2_train_sieve_model",)),
    "ccr.train_layers": (2, (*CCR, "ar2_train_sieve_model")),
    "encode.shards": (
        3,
        ("encode_corpus", "gather_embeddings", "ar2_encode_corpus", "ar2_gather_embeddings"),
    ),
    # AR2's rounds encode at ar2.encode_batch_size; model selection scores as the corpus is encoded
    "encode.batch_size": (32, ("encode_corpus", "select_model", "select_model_seed")),
    "encode.sort_buffer": (1000, ("encode_corpus", "ar2_encode_corpus")),
    "encode.amp": (False, ("encode_corpus", *ANY_SEARCH, "select_model", "select_model_seed")),
    "encode.backend": ("openvino", ("encode_corpus", "ar2_encode_corpus")),
    # The index ranks the train queries for dense mining, so a DPR trained on mined negatives
    # (dpr_mined_dpr) is retrained and re-encoded; the models the index cannot affect are not.
    "index.factory": (
        "HNSW32",
        ("build_index",),
        ("init_zeroshot", "train_dpr", "train_ccr", "train_dpr_filtered"),
    ),
    "index.shards": (2, ("build_index",)),
    "index.train_size": (5000, ("build_index",)),
    "search.backend": ("torch", ANY_SEARCH),
    "search.batch_size": (64, (*ANY_SEARCH, *AR2_DEV)),
    # a backend's own knobs reach the searches over it alone: the index's (faiss, search.backend's
    # default) the searches over an index, chunk_rows the AR2 dev searches over the embeddings (torch)
    "search.nprobe": (8, ANY_SEARCH, AR2_DEV),
    "search.ef_search": (64, ANY_SEARCH, AR2_DEV),
    "search.chunk_rows": (1024, AR2_DEV, ANY_SEARCH),
    # the selections' table reads the contenders, the start, the metrics and each level's label, metrics
    # and skip; the rest of the section is the tournament's alone
    "tournament.methods": (
        ["dpr", "dpr_rank_window", "dpr_wise"],
        ("tournament", "tournament_selections"),
        ("noise_sweep",),
    ),
    "tournament.baseline": ("dpr_absolute_margin", ("tournament",), ("tournament_selections",)),
    "tournament.oracle": ("dpr_absolute_margin", ("tournament",), ("tournament_selections",)),
    "tournament.start": ("bm25", ("tournament", "tournament_selections")),
    "tournament.incumbent": ("dpr_absolute_margin", ("tournament",), ("tournament_selections",)),
    "tournament.references": ([], ("tournament",), ("tournament_selections",)),
    "tournament.alpha": (0.1, ("tournament",), ("tournament_selections",)),
    "tournament.metrics": (["R@5", "hit_all@1"], ("tournament", "tournament_selections"), ("evaluate",)),
    "tournament.levels.synthkb.label": ("the demo", ("tournament", "tournament_selections")),
    "tournament.levels.synthkb.oracle": ("dpr_absolute_margin", ("tournament",), ("tournament_selections",)),
    "tournament.levels.synthkb.metrics": (["R@5"], ("tournament", "tournament_selections"), ("evaluate",)),
    "tournament.levels.synthkb.skip": (["dpr_absolute_margin"], ("tournament", "tournament_selections")),
    "tournament.levels.synthkb.decides": ("clean", ("tournament",), ("tournament_selections",)),
    "sweep.datasets": ([], ("noise_sweep",)),
    "sweep.methods": (["dpr", "dpr_rank_window"], ("noise_sweep",)),
    "sweep.baseline": ("dpr_sieve", ("noise_sweep",)),
    "sweep.oracle": ("dpr_sieve", ("noise_sweep",)),
    "sweep.metric": ("R@1", ("noise_sweep",)),
    "sweep.pairs": ([["dpr_sieve", "dpr_rank_window"]], ("noise_sweep",)),
    # model selection reruns the selections alone: not the models it chooses between, nor BM25's dev run
    **{
        f"selection.{key}": (
            value,
            ("select_model", "select_model_seed"),
            ("init_zeroshot", "train_dpr", "train_dpr_seed", "retrieve_bm25"),
        )
        for key, value in {"alphas": [0.0, 0.5, 1.0], "metric": "MRR@10"}.items()
    },
    # snapshots are kept by the trainings a selection reads (dpr_wise's dpr): they train again (CCR,
    # the selections and all else built from dpr follow from their inputs); a training no selection
    # reads and built from no dpr (RCL, GIST on BM25's candidates), the untrained start and BM25 do not
    "selection.checkpoints": (
        2,
        ("train_dpr", "train_dpr_seed"),
        ("init_zeroshot", "retrieve_bm25", "train_dpr_rcl", "train_dpr_gist"),
    ),
    "hybrid.rrf_k": (10, ("fuse_rrf", "fuse_rrf_seed"), ("fuse_weighted", "fuse_weighted_seed")),
    "hybrid.weights": ([0.0, 0.5, 1.0], ("fuse_weighted", "fuse_weighted_seed"), ("fuse_rrf",)),
    "hybrid.select_split": ("train", ("fuse_weighted", "fuse_weighted_seed"), ("fuse_rrf",)),
    "hybrid.select_metric": ("R@1", ("fuse_weighted", "fuse_weighted_seed"), ("fuse_rrf",)),
    "sieve.source": ("custom", ("sieve_candidates", "train_cross_encoder")),
    "sieve.candidates": (
        20,
        ("sieve_candidates", "sieve_dev_candidates", "ar2_sieve"),
        ("train_dpr", "train_ccr", "index_bm25", "mine_bm25_negatives"),
    ),
    "sieve.scorer": (
        "dpr",
        (
            "train_dpr_filtered",
            "train_dpr_filtered_seed",
            "sieve_report",
            "gather_metrics",
        ),  # AR2: only under sieve_init initial
        ("sieve_candidates", "train_ccr", "train_dpr"),
    ),
    "sieve.pool": (50, ("sieve_candidates", "ar2_sieve")),
    "sieve.max_queries": (5, ("sieve_candidates",)),
    "sieve.injection.fraction": (0.5, ("sieve_candidates",)),
    "sieve.strict": (True, ("sieve_negatives", "filter_candidates", "ar2_sieve")),
    "sieve.fallback": ("none", ("sieve_negatives", "filter_candidates", "ar2_sieve")),
    "sieve.temperature": (0.5, ("sieve_negatives", "filter_candidates", "ar2_sieve")),
    "sieve.batch_size": (32, ("sieve_negatives", "filter_candidates", "ar2_sieve")),
    "sieve.betas": ([0.1, 0.5], ("train_ccr", "sieve_negatives", "sieve_figures", "sieve_tradeoff")),
    "sieve.in_batch": (10, ("sieve_negatives",)),
    "sieve.figure_queries": (None, ("sieve_negatives",)),
    "sieve.filters": (
        [*defaults(SECTIONS["sieve"])["filters"], "oracle"],
        ("filter_candidates", "sieve_report", "sieve_comparison"),
    ),
    "sieve.rank_window.start": (5, ("filter_candidates",)),
    "sieve.positive_aware.mode": ("absolute", ("filter_candidates",)),
    "sieve.positive_aware.margin": (0.9, ("filter_candidates",)),
    "sieve.absolute_margin.margin": (0.1, ("filter_candidates",)),
    "sieve.positive_aware_dev.criterion": ("f1", ("filter_candidates",), ("sieve_dev_candidates",)),
    "sieve.positive_aware_dev.grid_min": (0.85, ("filter_candidates",), ("sieve_dev_candidates",)),
    "sieve.positive_aware_dev.grid_max": (0.99, ("filter_candidates",), ("sieve_dev_candidates",)),
    "sieve.positive_aware_dev.grid_step": (0.02, ("filter_candidates",), ("sieve_dev_candidates",)),
    # another teacher scores the teacher filters (new names: models/dpr's, built already, is no rerun)
    "sieve.teacher": (
        "dpr",
        ("filter_candidates", "train_dpr_filtered", "train_dpr_filtered_seed"),
        ("sieve_candidates", "train_dpr", "train_dpr_seed"),
    ),
    "sieve.positive_aware_teacher.mode": ("absolute", ("filter_candidates",)),
    "sieve.positive_aware_teacher.margin": (0.9, ("filter_candidates",)),
    "sieve.positive_aware_teacher_sieve.mode": ("absolute", ("filter_candidates",)),
    "sieve.positive_aware_teacher_sieve.margin": (0.9, ("filter_candidates",)),
    "sieve.cross_encoder.threshold": (0.2, ("filter_candidates",), ("train_cross_encoder",)),
    "sieve.cross_encoder.base": ("other-encoder", ("train_cross_encoder",)),
    "sieve.cross_encoder.max_len": (64, ("train_cross_encoder",)),
    "sieve.cross_encoder.steps": (100, ("train_cross_encoder",)),
    "sieve.cross_encoder.batch_size": (8, ("train_cross_encoder",)),
    "sieve.cross_encoder.lr": (1e-5, ("train_cross_encoder",)),
    "sieve.cross_encoder.precision": ("fp32", ("train_cross_encoder",)),
    # the schedules span all rounds: every round trains again
    "ar2.rounds": (
        3,
        ("ar2_train", "ar2_select", "ar2_learning_curve"),
        ("ar2_mine_start", "ar2_search_dev_start"),
    ),
    "ar2.seeds": ([0, 1], ("ar2_train", "ar2_round", "ar2_seeds"), ("ar2_mine_start",)),
    "ar2.select_metric": ("R@1", ("ar2_select",), ("ar2_train", "ar2_round")),
    # a new folder for the sieve variant's rounds; the plain variants' rounds stay
    "ar2.sieve_init": ("initial", ("ar2_sieve", "ar2_train"), ("ar2_train_sieve_model",)),
    "ar2.keep_checkpoints": (True, (), ("ar2_train",)),  # a Snakemake temp() choice, no result of it
    # mining reads these and nothing else ...
    **{
        f"ar2.{key}": (value, AR2_MINE, ("ar2_search_dev_start",))
        for key, value in {"top_k": 20, "exclude_answer_match": True}.items()
    },
    # ... the retriever overrides reach mining and training ...
    **{
        f"ar2.{key}": (value, (*AR2_MINE, "ar2_train"))
        for key, value in {"similarity": "dot", "temperature": 0.1, "passage_max_len": 64}.items()
    },
    # ... the corpus encoding ...
    "ar2.encode_batch_size": (32, ("ar2_encode_corpus",), ("ar2_mine_start",)),
    "ar2.precision": ("fp32", ("ar2_train_ranker", "ar2_train", "ar2_encode_corpus"), ("ar2_mine_start",)),
    # ... SimANS's weights only the simans variants' training, not the uniform ones' ...
    **{
        f"ar2.simans.{key}": (value, ("ar2_train",), ("ar2_mine_start",))
        for key, value in {"a": 1.0, "b": 0.1, "form": "abs"}.items()
    },
    # ... and the rest the rounds' training alone (and what follows from it)
    **{
        f"ar2.{key}": (value, ("ar2_train",), ("ar2_mine_start", "ar2_search_dev_start"))
        for key, value in {
            "negatives": 2,
            "batch_size": 2,
            "ranker_warmup_steps": 4,
            "ranker_warmup_lr": 1e-5,
            "ranker_steps": 2,
            "retriever_steps": 4,
            "retriever_lr": 2e-5,
            "ranker_lr": 1e-5,
            "warmup_ratio": 0.2,
            "adv_lambda": 0.5,
            "distill_temperature": 2.0,
            "ranker_init": "cross_encoder",
        }.items()
    },
    # the listwise ranker (ranker_init listwise): ar2.ranker builds it, not the rounds
    **{
        f"ar2.{key}": (value, ("ar2_train_ranker",), ("ar2_mine_start", "ar2_search_dev_start"))
        for key, value in {
            "ranker.base": "other-encoder",
            "ranker.max_len": 64,
            "listwise.steps": 10,
            "listwise.lr": 1e-4,
            "listwise.batch_size": 4,
            "listwise.negatives": 3,
            "listwise.warmup_ratio": 0.2,
            "listwise.rerank_depth": 10,
        }.items()
    },
    "ar2.ranker_prior": ("retriever", ("ar2_train_ranker", "ar2_train"), ("ar2_mine_start",)),
    # read by both
    **{
        f"ar2.{key}": (value, ("ar2_train_ranker", "ar2_train"), ("ar2_mine_start", "ar2_search_dev_start"))
        for key, value in {"weight_decay": 0.01, "max_grad_norm": 1.0, "checkpoint_every": 5}.items()
    },
}
# What a job reserves, in every section that has them: changing it must rerun nothing.
RESOURCES = {"threads": 3, "mem_mb": 1234, "gpus": 1}
assert set(RESOURCES) == set(RESOURCE_KEYS)
# Settings this test leaves out, and why.
NOT_CHANGED = {
    "datasets.toy.format": "another reader needs other source roles; prepare_dataset records `format`",
}
# Rules without settings of their own: what they compute follows from their inputs.
NO_SETTINGS = {"sieve_report", "sieve_comparison", "ar2_seeds", "export_qrels", "ar2_round", "relabel_qrels"}


pytestmark = pytest.mark.slow


def _leaves(data: dict, prefix: str = ""):
    for key, value in data.items():
        if isinstance(value, dict):
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}"


def every_setting() -> set[str]:
    """Dotted names of all settings: the contracts' leaves, the top-level keys and each dataset key."""
    names = {f"{section}.{leaf}" for section, cls in SECTIONS.items() for leaf in _leaves(defaults(cls))}
    top = set(Config.model_fields) - set(SECTIONS) - {"datasets"}
    assert set(TOP_LEVEL_DEFAULTS) <= top
    # clean.<name>: a user's hard-negative files, each with its own settings (docs/clean.md), like datasets
    top -= {"clean"}
    dataset_keys = set(DatasetSpec.model_fields)
    synthkb_only = {"entities", "seed", "positive", "fn_share", "fn_paraphrase"}
    declared_only = {"source", "empty_positives"}
    names |= top
    names |= {f"datasets.synthkb.{k}" for k in dataset_keys - declared_only - {"format"}}
    names |= {f"datasets.toy.{k}" for k in dataset_keys - synthkb_only}
    # tournament.levels.<dataset>: each level's own settings, on the one level of BASE
    names |= {f"tournament.levels.synthkb.{k}" for k in TournamentLevel.model_fields}
    return names


def _set(config: dict, dotted: str, value) -> dict:
    out = copy.deepcopy(config)
    node = out
    *path, last = dotted.split(".")
    for key in path:
        node = node.setdefault(key, {})
    node[last] = value
    return out


def _get(config: dict, dotted: str):
    node = config
    for key in dotted.split("."):
        node = node.get(key) if isinstance(node, dict) else None
    return node


def _write(workdir: Path, name: str, config: dict) -> Path:
    path = workdir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _targets(overlay: Path) -> list[str]:
    """TARGETS under the overlay's sieve settings."""
    from pipeline.core.config import load_config
    from pipeline.core.methods import method_table, sieve_tag

    config = load_config([overlay])
    table, source = method_table(config), config["sieve"]["source"]
    stag = sieve_tag(config["sieve"], table[source].run if source in table else source, decision=True)
    return [target.format(stag=stag) for target in TARGETS]


class Plan:
    """What `snakemake -n TARGETS --configfile overlay` would run, and which rules rerun on their own.

    ``scheduled``: (rule, reason) of every job the real plan runs. ``own``: of ``rules``, those with a
    job the real plan runs for a missing output, or that `snakemake -n --allowed-rules <rule>` would
    run: Snakemake's own needrun decision for that rule's jobs while nothing upstream may rerun. A
    dry run stops checking a job once an upstream job reruns it, so the full plan cannot tell a rule
    that notices the change from one that reruns only because something upstream does. Asking the
    records directly (params, code, input set) instead overstates it: Snakemake skips those checks
    for a job with any output that has no record (a new shard file nobody requests), so a changed
    shell text there reruns nothing.
    """

    def __init__(self, workdir: Path, overlay: Path, forceall: bool = False, rules: tuple[str, ...] = ()):
        from snakemake.api import SnakemakeApi
        from snakemake.settings.types import ConfigSettings, DAGSettings, OutputSettings, ResourceSettings

        cwd = os.getcwd()
        try:
            with SnakemakeApi(OutputSettings()) as api:
                workflow_api = api.workflow(
                    resource_settings=ResourceSettings(cores=2),
                    config_settings=ConfigSettings(configfiles=[overlay]),
                    snakefile=REPO / "Snakefile",
                    workdir=workdir,
                )
                workflow_api.dag(dag_settings=DAGSettings(targets=set(_targets(overlay))))
                workflow = workflow_api._workflow
                workflow._prepare_dag(
                    forceall=forceall, ignore_incomplete=True, lock_warn_only=True, nolock=True
                )
                workflow._build_dag()
                dag = workflow.dag
                self.jobs, needrun = list(dag.jobs), list(dag.needrun_jobs())
                self.scheduled = [(job.rule.name, str(dag.reason(job))) for job in needrun]
                # Snakemake finds a missing output only from a job that needs it (the walk from the
                # targets), so this comes from the full plan, before the passes below reset it.
                missing = {job.rule.name for job in needrun if dag.reason(job).missing_output}
                self.own = {
                    rule for rule in rules if rule in missing or self._reruns_alone(workflow, dag, rule)
                }
        finally:
            os.chdir(cwd)

    @staticmethod
    def _reruns_alone(workflow, dag, rule: str) -> bool:
        """Whether Snakemake plans a job of `rule` when only `rule` may run (--allowed-rules)."""
        dag.rules_allowed_for_needrun = frozenset({rule})
        dag._reason.clear()  # update_needrun adds to the reasons of the previous pass
        workflow.async_run(dag.update_needrun())
        return any(job.rule.name == rule for job in dag.needrun_jobs())

    def describe(self) -> str:
        return "\n".join(sorted({f"  {rule}: {reason[:150]}" for rule, reason in self.scheduled}))


def snakemake_cli(workdir: Path, *args: str, overlay: Path) -> str:
    # Targets go before --configfile: Snakemake 9 reads every later argument as another config file.
    cmd = [
        str(SNAKEMAKE),
        *args,
        "-s",
        str(REPO / "Snakefile"),
        "--directory",
        str(workdir),
        "--cores",
        "2",
        "--configfile",
        str(overlay),
    ]
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
    proc = subprocess.run(cmd, check=False, cwd=workdir, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, f"{' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> tuple[Path, set[str]]:
    """A workdir whose every output exists with recorded metadata; the rules of its DAG."""
    workdir = tmp_path_factory.mktemp("rerun")
    base = _write(workdir, "base", BASE)
    jobs = Plan(workdir, base, forceall=True).jobs
    outputs = [(USER_NEGATIVES, False)] + [(str(f), f.is_directory) for job in jobs for f in job.output]
    for path, is_directory in outputs:
        target = workdir / path
        if is_directory:
            target.mkdir(parents=True, exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.touch()
    snakemake_cli(workdir, "--touch", "--forceall", *_targets(base), "--quiet", "all", overlay=base)
    assert Plan(workdir, base).scheduled == [], "the recorded workspace is not up to date"
    return workdir, {job.rule.name for job in jobs}


# ---- the table covers every setting and every rule -------------------------------------------------


def test_every_setting_is_in_the_table():
    resources = {
        f"{section}.{name}"
        for section, cls in SECTIONS.items()
        for name in RESOURCES
        if name in defaults(cls)
    }
    covered = set(SETTINGS) | resources | set(NOT_CHANGED)
    assert sorted(every_setting() - covered) == [], "settings without an entry in SETTINGS"
    assert sorted(covered - every_setting()) == [], "entries that are no setting"


def test_the_workspace_holds_every_rule_and_the_table_every_rule_with_settings(workspace):
    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import OutputSettings, ResourceSettings

    workdir, rules = workspace
    cwd = os.getcwd()
    try:
        with SnakemakeApi(OutputSettings()) as api:
            workflow = api.workflow(
                resource_settings=ResourceSettings(), snakefile=REPO / "Snakefile", workdir=workdir
            )._workflow
            defined = {rule.name for rule in workflow.rules} - {
                "all",
                "unknown_dataset",  # the guard never runs
                "fingerprint",  # only with a local base or source: tests/test_rerun_content.py
                "clean_negatives",  # only with a declared clean.<name>: tests/test_clean.py
                # only with a base named by a hub name, or asked for: tests/test_prefetch.py
                "fetch_model",
                "prefetch_dataset",
                "prefetch",
            }
    finally:
        os.chdir(cwd)
    assert rules == defined
    listed = {rule for entry in SETTINGS.values() for rule in entry[1]}
    assert sorted(defined - listed - NO_SETTINGS) == [], "rules that no setting is said to rerun"


# ---- each setting reruns its rules -----------------------------------------------------------------


@pytest.fixture(scope="module")
def base_config(workspace) -> dict:
    """config.yaml with BASE over it, defaults filled in: the workspace's settings."""
    from pipeline.core.config import load_config

    return load_config([workspace[0] / "base.yaml"])


@pytest.mark.parametrize("setting", sorted(SETTINGS))
def test_a_changed_setting_reruns_its_rules(workspace, base_config, setting):
    workdir, _ = workspace
    value, rules, *rest = SETTINGS[setting]
    assert value != _get(base_config, setting), f"{setting}: {value!r} is no change; pick another value"
    not_rules = rest[0] if rest else ()
    planned = Plan(workdir, _write(workdir, "overlay", _set(BASE, setting, value)), rules=rules)
    scheduled = {rule for rule, _ in planned.scheduled}
    missing = [rule for rule in rules if rule not in planned.own or rule not in scheduled]
    assert not missing, f"{setting} -> {value!r} does not rerun {missing}; planned:\n{planned.describe()}"
    wrong = [rule for rule in not_rules if rule in scheduled]
    assert not wrong, f"{setting} -> {value!r} reruns {wrong}; planned:\n{planned.describe()}"


def test_a_trained_ranker_start_records_no_ar2_ranker():
    """ranker_init: cross_encoder takes round 1's ranker from models/cross_encoder: ar2.ranker builds
    nothing, so it is not part of a round's recorded settings (a change of it reruns no round)."""
    from pipeline.ar2.settings import Ar2Settings, ar2_recorded_settings

    ar2 = defaults(Ar2Settings)
    assert ar2["ranker_init"] == "base" and "ranker" in ar2_recorded_settings(ar2)
    recorded = ar2_recorded_settings({**ar2, "ranker_init": "cross_encoder"})
    assert "ranker" not in recorded and recorded["ranker_init"] == "cross_encoder"
    assert not {"seeds", "select_metric", "threads", "mem_mb", "gpus"} & set(recorded)


def test_resources_rerun_nothing(workspace):
    workdir, _ = workspace
    config = BASE
    for section, cls in SECTIONS.items():
        for name, value in RESOURCES.items():
            if name in defaults(cls):
                config = _set(config, f"{section}.{name}", value)
    planned = Plan(workdir, _write(workdir, "resources", config))
    assert planned.scheduled == [], f"threads/mem_mb/gpus rerun:\n{planned.describe()}"


# ---- the scenarios through the command line ------------------------------------------------


def _reasons(output: str) -> dict[str, list[str]]:
    """rule -> the reason lines of its jobs in a dry run's output."""
    out: dict[str, list[str]] = {}
    for block in re.split(r"\n(?=\[.*\]\n(?:local)?rule )", output):
        rule = re.search(r"^(?:local)?rule (\w+):", block, flags=re.MULTILINE)
        reason = re.search(r"^\s+reason: (.*)$", block, flags=re.MULTILINE)
        if rule and reason:
            out.setdefault(rule.group(1), []).append(reason.group(1))
    return out


@pytest.mark.parametrize(
    "change, rule, untouched",
    [
        ({"dpr": {"lr": 1e-4}}, "train_dpr", "mine_bm25_negatives"),
        # the candidates' own settings are in their path (a new file beside the old, below); this one is not
        ({"sieve": {"temperature": 0.5}}, "sieve_negatives", "sieve_candidates"),
        # issue 28: consumers request only index.json, so the part count cannot rest on part paths
        ({"index": {"shards": 2}}, "build_index", "train_dpr"),
    ],
)
def test_snakemake_dry_run_reruns_the_changed_rule(workspace, change, rule, untouched):
    workdir, _ = workspace
    config = BASE
    for section, values in change.items():
        for key, value in values.items():
            config = _set(config, f"{section}.{key}", value)
    overlay = _write(workdir, "cli", config)
    out = snakemake_cli(workdir, "-n", *_targets(overlay), overlay=overlay)
    reasons = _reasons(out)
    assert "Nothing to be done" not in out
    assert any("Params have changed" in r for r in reasons.get(rule, [])), (rule, reasons.get(rule))
    assert untouched not in reasons, reasons[untouched]


# clean.<name> entries (rule clean_negatives), each of a filter that reads other keys of section sieve
CLEAN = {
    "mine": {"source": "mine.jsonl", "filter": "sieve"},
    "window": {"source": "window.csv", "filter": "rank_window"},
    "plain": {"source": "plain.csv", "filter": "none"},
}


@pytest.mark.parametrize(
    "setting, value, reruns",
    [
        # a clean entry's document holds what its own filter reads (pipeline.workflow.sieve.clean_job)
        ("sieve.rank_window.start", 3, {"window"}),
        ("sieve.strict", True, {"mine"}),
        ("sieve.batch_size", 8, {"mine"}),  # the encoding of a filter that runs a model
        ("seed", 7, {"mine"}),  # the sieve's fallback draw
        ("clean.plain.near_duplicate", 0.5, {"plain"}),  # the entry's own
    ],
)
def test_a_clean_entry_reruns_for_its_own_filter_s_settings_only(tmp_path, setting, value, reruns):
    sources = {
        "mine.jsonl": '{"query":"q","pos":["p"],"neg":["n"]}\n',
        ".csv": "anchor,positive,negative\nq,p,n\n",
    }
    targets = []
    for name, entry in CLEAN.items():
        source, ext = entry["source"], entry["source"].rsplit(".", 1)[1]
        (tmp_path / source).write_text(sources.get(source, sources[".csv"]), encoding="utf-8")
        targets.append(f"results/{name}/clean/cleaned.{ext}")
        for suffix in ("", ".decisions.parquet", ".report.json", ".report.md"):
            (tmp_path / f"{targets[-1]}{suffix}").parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / f"{targets[-1]}{suffix}").touch()
    base = _write(tmp_path, "base", {"clean": CLEAN})
    # the sources' content fingerprints (content.smk) are outputs too: every one created, then recorded
    for line in snakemake_cli(tmp_path, "--summary", "--forceall", *targets, overlay=base).splitlines():
        if line.startswith("resources/fingerprints/"):
            (tmp_path / line.split("\t")[0]).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / line.split("\t")[0]).touch()
    snakemake_cli(tmp_path, "--touch", "--forceall", *targets, "--quiet", "all", overlay=base)
    config = _set({"clean": CLEAN}, setting, value)
    out = snakemake_cli(tmp_path, "-n", *targets, overlay=_write(tmp_path, "changed", config))
    planned = {
        re.search(r"results/(\w+)/clean/", block).group(1)
        for block in re.split(r"\n(?=\[.*\]\n(?:local)?rule )", out)
        if re.search(r"^\s+reason: Params have changed", block, flags=re.MULTILINE)
    }
    assert planned == reruns, out[-3000:]


def test_a_second_sieve_setting_builds_new_files_and_keeps_the_first(workspace):
    """sieve.candidates/pool are in the candidates' path: the changed setting plans new files (missing
    output), BM25's negatives and DPR stay, and the recorded default files are not rerun in place."""
    workdir, _ = workspace
    overlay = _write(workdir, "pool", _set(_set(BASE, "sieve.candidates", 20), "sieve.pool", 50))
    out = snakemake_cli(workdir, "-n", *_targets(overlay), overlay=overlay)
    reasons = _reasons(out)
    assert all(
        "Missing output files: results/synthkb/sieve/candidates_candidates20_pool50.parquet" in r
        for r in reasons["sieve_candidates"]
    ), reasons["sieve_candidates"]
    assert "train_dpr" not in reasons and "mine_bm25_negatives" not in reasons
    # AR2's sieve rounds too: their folders carry the settings their own sieve reads
    assert any(
        "results/synthkb/ar2/sieve_b0.5_current_candidates20_pool50/" in r for r in reasons["ar2_sieve"]
    )
    # nothing is rebuilt over an existing file, but the tables and figures that name the runs
    in_place = {rule for rule, rs in reasons.items() if any("Params have changed" in r for r in rs)}
    assert in_place <= {"gather_metrics", "ar2_learning_curve"}, in_place


def test_sieve_init_warm_reruns_the_ar2_sieve_runs_and_nothing_upstream(workspace):
    """The new value of ar2.sieve_init plans the sieve variant's rounds (a new folder, _warm) and what
    reads them, never data, BM25, DPR or CCR training."""
    workdir, _ = workspace
    planned = Plan(workdir, _write(workdir, "warm", _set(BASE, "ar2.sieve_init", "warm")))
    scheduled = {rule for rule, _ in planned.scheduled}
    assert {"ar2_train_sieve_model", "ar2_sieve", "ar2_train"} <= scheduled, planned.describe()
    downstream = {
        "ar2_train_sieve_model",
        "ar2_sieve",
        "ar2_train",
        "ar2_mine",
        "ar2_encode_corpus",
        "ar2_gather_embeddings",
        "ar2_search_dev",
        "ar2_evaluate_dev",
        "ar2_round",
        "ar2_select",
        "ar2_search",
        "evaluate",
        "export_trec",
        "ar2_seeds",
        "gather_metrics",
    }
    assert scheduled <= downstream | {
        "ar2_learning_curve",
        "noise_sweep",
        "tournament",
        "tournament_selections",
    }, planned.describe()

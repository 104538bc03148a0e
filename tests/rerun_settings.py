"""The table of tests/test_rerun_triggers.py: the DAG that holds every rule, and for every setting a
changed value with the rules it must rerun (and those it must leave alone)."""
from __future__ import annotations

from dataclasses import fields

from pipeline.core.settings import SECTIONS, JobResources, defaults

# Every rule in one DAG: several training seeds (the *_seed rules), a DPR control, AR2 with a sieve
# variant (ccr settings reach its rounds with sieve_init current), and a declared dataset fetched
# from an archive (download_archive, download, prepare_dataset).
BASE = {
    "seeds": [0, 1],
    "methods": ["bm25", "zeroshot", "dpr", "dpr_ccr", "dpr_sieve", "dpr_rank_window", "ar2", "ar2_sieve",
                "hybrid_rrf_zeroshot", "hybrid_wsum_zeroshot", "hybrid_rrf_dpr", "hybrid_wsum_dpr",
                "dpr_mined_dpr"],
    "datasets": {"toy": {"format": "squad", "source": {"url": "https://example.org/toy.tar.gz",
                                                       "member": "dev.json"},
                         "split": {"by": "article", "dev": 0.2, "test": 0.2, "seed": 0},
                         "recipe": "toy_recipe"}},
    # toy trains under a recipe of its own; `other` is one synthkb can switch to
    "recipes": {"toy_recipe": {"bm25": {"k1": 1.0}}, "other": {"dpr": {"lr": 1e-4}}},
    "sieve": {"betas": [0.5]},
    "ar2": {"rounds": 1, "seeds": [0], "sieve_init": "current"},
    # dpr_rank_window stands in for the oracle (dpr_oracle would build the oracle filter that the
    # sieve.filters entry below adds)
    "sweep": {"datasets": ["synthkb"], "methods": ["dpr", "dpr_sieve", "dpr_rank_window"],
              "oracle": "dpr_rank_window"},
}
TARGETS = ["results/sweeps/noise.json", "results/synthkb/metrics.json", "results/synthkb/sieve/comparison.md", "results/synthkb/sieve/tradeoff.json",
           "results/synthkb/figures/figure1_nce_loss.png", "results/synthkb/figures/ar2_learning_curve.png",
           "results/toy/bm25/metrics.json"]
# A negatives file the user supplies (the target of sieve.source below).
USER_NEGATIVES = "results/synthkb/negatives/custom.parquet"

DPR = ("train_dpr", "train_dpr_seed", "train_dpr_filtered", "train_dpr_filtered_seed", "train_dpr_mined",
       "train_dpr_mined_seed")
CCR = ("train_ccr", "train_ccr_seed")
RETRIEVERS = ("init_zeroshot", *DPR, *CCR)       # every rule that builds a retriever from `model`
SEARCH = ("search_dense", "search_dense_seed")

# setting -> (a changed value, the rules it must rerun[, rules it must not schedule at all])
SETTINGS: dict[str, tuple] = {
    "seed": (1, (*DPR, *CCR, "build_index", "sieve_candidates", "sieve_negatives",
                 "filter_candidates", "train_cross_encoder"), ("init_zeroshot", "index_bm25")),
    "seeds": ([0, 2], ("dense_seeds", "train_dpr_seed")),
    "methods": ([*BASE["methods"], "dpr_none"], ("gather_metrics", "train_dpr_filtered")),
    "datasets.synthkb.entities": (321, ("generate_synthkb",), ("prepare_dataset",)),
    "datasets.synthkb.seed": (1, ("generate_synthkb",)),
    "datasets.synthkb.positive": ("source", ("generate_synthkb",)),
    "datasets.synthkb.fn_share": (0.3, ("generate_synthkb",), ("prepare_dataset",)),
    "datasets.synthkb.fn_paraphrase": (0.5, ("generate_synthkb",)),
    "datasets.synthkb.split": ({"by": "entity", "dev": 0.2, "test": 0.2, "seed": 0}, ("generate_synthkb",)),
    "datasets.synthkb.eval_split": ("train", ("evaluate",), ("generate_synthkb",)),
    "datasets.toy.source": ({"url": "https://example.org/v2/toy.tar.gz", "member": "train.json"},
                            ("download_archive", "download")),
    "datasets.toy.split": ({"by": "article", "dev": 0.3, "test": 0.2, "seed": 0}, ("prepare_dataset",)),
    "datasets.toy.empty_positives": ("drop", ("prepare_dataset",)),
    "datasets.toy.eval_split": ("dev", ("evaluate",)),
    # A recipe's settings reach exactly the rules that read them, on the datasets that declare it.
    "recipes": ({"toy_recipe": {"bm25": {"k1": 1.2}}, "other": {"dpr": {"lr": 1e-4}}}, ("index_bm25",),
                ("generate_synthkb", "train_dpr", "gather_metrics")),
    "datasets.synthkb.recipe": ("other", ("train_dpr", "train_dpr_seed", "train_dpr_filtered", "gather_metrics"),
                                ("generate_synthkb", "index_bm25", "init_zeroshot")),
    "datasets.toy.recipe": ("demo", ("index_bm25",), ("prepare_dataset",)),
    "eval.split": ("train", ("evaluate", "export_trec")),   # dev is hybrid.select_split: refused
    "eval.match": ("regex", ("mine_bm25_negatives", "mine_dense_negatives", "fuse_weighted", "evaluate", "sieve_candidates", "ar2_round")),
    "eval.ks": ([1, 5, 10], ("evaluate", "ar2_round")),
    "eval.depth": (50, ("retrieve_bm25", *SEARCH, "ar2_search", "ar2_round")),
    "eval.trec_export": (False, ("gather_metrics",)),
    "eval.compare": ([["dpr_ccr", "dpr"]], ("gather_metrics",), ("evaluate",)),
    "bm25.k1": (1.2, ("index_bm25",)),
    "bm25.b": (0.7, ("index_bm25",)),
    "bm25.stemmer": (None, ("index_bm25",)),
    "bm25.stopwords": (None, ("index_bm25",)),
    "bm25.negatives": (50, ("mine_bm25_negatives", "search_for_mining", "mine_dense_negatives"),
                       ("index_bm25", "retrieve_bm25")),
    "bm25.exclude_answer_match": (True, ("mine_bm25_negatives", "search_for_mining", "mine_dense_negatives")),
    "model.base": ("other-encoder", ("init_zeroshot", *DPR)),
    "model.pooling": ("cls", RETRIEVERS),
    "model.similarity": ("dot", ("init_zeroshot", *DPR)),
    "model.temperature": (0.1, ("init_zeroshot", *DPR)),
    "model.shared_towers": (False, RETRIEVERS),
    "model.query_max_len": (48, RETRIEVERS),
    "model.passage_max_len": (96, RETRIEVERS),
    "dpr.lr": (1e-4, DPR, ("generate_synthkb", "index_bm25", "mine_bm25_negatives", "init_zeroshot",
                           "sieve_candidates", "train_cross_encoder")),
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
    "ccr.beta": (0.7, (*CCR, "sieve_negatives", "ar2_round"), ("train_dpr", "mine_bm25_negatives",
                                                                "sieve_candidates")),
    "ccr.scale": ("released_code", (*CCR, "ar2_round")),
    "ccr.f_beta": (0.1, (*CCR, "ar2_round")),
    "ccr.temperature": (0.5, (*CCR, "ar2_round")),
    "ccr.lr": (1e-6, (*CCR, "ar2_round"), ("train_dpr",)),
    "ccr.epochs": (2, (*CCR, "ar2_round")),
    "ccr.batch_size": (8, (*CCR, "ar2_round")),
    "ccr.grad_accum": (2, (*CCR, "ar2_round")),
    "ccr.hard_negatives": (3, (*CCR, "ar2_round")),
    "ccr.negatives_depth": (20, (*CCR, "ar2_round")),
    "ccr.in_batch": (True, (*CCR, "ar2_round")),
    "ccr.warmup_ratio": (0.2, (*CCR, "ar2_round")),
    "ccr.weight_decay": (0.01, (*CCR, "ar2_round")),
    "ccr.max_grad_norm": (1.0, (*CCR, "ar2_round")),
    "ccr.max_steps": (30, (*CCR, "ar2_round")),
    "ccr.checkpoint_every": (10, (*CCR, "ar2_round")),
    "ccr.precision": ("fp32", (*CCR, "ar2_round")),
    "ccr.drop_queries_without_positive": (True, (*CCR, "ar2_round")),
    "ccr.train_layers": (2, (*CCR, "ar2_round")),
    "encode.shards": (3, ("encode_corpus", "gather_embeddings")),
    "encode.batch_size": (32, ("encode_corpus",)),
    "encode.sort_buffer": (1000, ("encode_corpus",)),
    "encode.amp": (False, ("encode_corpus", *SEARCH)),
    # The index ranks the train queries for dense mining, so a DPR trained on mined negatives
    # (dpr_mined_dpr) is retrained and re-encoded; the models the index cannot affect are not.
    "index.factory": ("HNSW32", ("build_index",),
                      ("init_zeroshot", "train_dpr", "train_ccr", "train_dpr_filtered")),
    "index.shards": (2, ("build_index",)),
    "index.train_size": (5000, ("build_index",)),
    "search.backend": ("torch", SEARCH),
    "search.batch_size": (64, SEARCH),
    "search.nprobe": (8, SEARCH),
    "search.ef_search": (64, SEARCH),
    "search.chunk_rows": (1024, SEARCH),
    "sweep.datasets": ([], ("noise_sweep",)),
    "sweep.methods": (["dpr", "dpr_rank_window"], ("noise_sweep",)),
    "sweep.baseline": ("dpr_sieve", ("noise_sweep",)),
    "sweep.oracle": ("dpr_sieve", ("noise_sweep",)),
    "sweep.metric": ("R@1", ("noise_sweep",)),
    "sweep.pairs": ([["dpr_sieve", "dpr_rank_window"]], ("noise_sweep",)),
    "hybrid.rrf_k": (10, ("fuse_rrf", "fuse_rrf_seed"), ("fuse_weighted", "fuse_weighted_seed")),
    "hybrid.weights": ([0.0, 0.5, 1.0], ("fuse_weighted", "fuse_weighted_seed"), ("fuse_rrf",)),
    "hybrid.select_split": ("train", ("fuse_weighted", "fuse_weighted_seed"), ("fuse_rrf",)),
    "hybrid.select_metric": ("R@1", ("fuse_weighted", "fuse_weighted_seed"), ("fuse_rrf",)),
    "sieve.source": ("custom", ("sieve_candidates", "train_cross_encoder")),
    "sieve.candidates": (20, ("sieve_candidates", "ar2_round"), ("train_dpr", "train_ccr", "index_bm25",
                                                                 "mine_bm25_negatives")),
    "sieve.pool": (50, ("sieve_candidates", "ar2_round")),
    "sieve.max_queries": (5, ("sieve_candidates",)),
    "sieve.injection.fraction": (0.5, ("sieve_candidates",)),
    "sieve.strict": (True, ("sieve_negatives", "filter_candidates", "ar2_round")),
    "sieve.fallback": ("none", ("sieve_negatives", "filter_candidates", "ar2_round")),
    "sieve.temperature": (0.5, ("sieve_negatives", "filter_candidates", "ar2_round")),
    "sieve.batch_size": (32, ("sieve_negatives", "filter_candidates", "ar2_round")),
    "sieve.betas": ([0.1, 0.5], ("train_ccr", "sieve_negatives", "sieve_figures", "sieve_tradeoff")),
    "sieve.in_batch": (10, ("sieve_negatives",)),
    "sieve.figure_queries": (None, ("sieve_negatives",)),
    "sieve.filters": ([*defaults(SECTIONS["sieve"])["filters"], "oracle"],
                      ("filter_candidates", "sieve_report", "sieve_comparison")),
    "sieve.rank_window.start": (5, ("filter_candidates",)),
    "sieve.positive_aware.mode": ("absolute", ("filter_candidates",)),
    "sieve.positive_aware.margin": (0.9, ("filter_candidates",)),
    "sieve.cross_encoder.threshold": (0.2, ("filter_candidates",), ("train_cross_encoder",)),
    "sieve.cross_encoder.base": ("other-encoder", ("train_cross_encoder",)),
    "sieve.cross_encoder.max_len": (64, ("train_cross_encoder",)),
    "sieve.cross_encoder.steps": (100, ("train_cross_encoder",)),
    "sieve.cross_encoder.batch_size": (8, ("train_cross_encoder",)),
    "sieve.cross_encoder.lr": (1e-5, ("train_cross_encoder",)),
    "sieve.cross_encoder.precision": ("fp32", ("train_cross_encoder",)),
    "ar2.rounds": (2, ("ar2_round", "ar2_select", "ar2_learning_curve")),
    "ar2.seeds": ([0, 1], ("ar2_round", "ar2_seeds")),
    "ar2.select_metric": ("R@1", ("ar2_select",), ("ar2_round",)),
    "ar2.sieve_init": ("initial", ("ar2_round",)),
    **{f"ar2.{key}": (value, ("ar2_round",)) for key, value in {
        "top_k": 20, "exclude_answer_match": True, "negatives": 2, "batch_size": 2,
        "ranker_warmup_steps": 4, "ranker_warmup_lr": 1e-5, "ranker_steps": 2, "retriever_steps": 4,
        "retriever_lr": 2e-5, "ranker_lr": 1e-5, "weight_decay": 0.01, "warmup_ratio": 0.2,
        "max_grad_norm": 1.0, "adv_lambda": 0.5, "distill_temperature": 2.0, "simans.a": 1.0,
        "simans.b": 0.1, "simans.form": "abs", "ranker.base": "other-encoder", "ranker.max_len": 64,
        "similarity": "dot", "temperature": 0.1, "passage_max_len": 64, "checkpoint_every": 5,
        "keep_checkpoints": True, "precision": "fp32", "encode_batch_size": 32,
        "ranker_init": "cross_encoder"}.items()},
}
# What a job reserves, in every section that has them: changing it must rerun nothing.
RESOURCES = {"threads": 3, "mem_mb": 1234, "gpus": 1}
assert set(RESOURCES) == {f.name for f in fields(JobResources)}
# Settings this test leaves out, and why.
NOT_CHANGED = {
    "datasets.toy.format": "another reader needs other source roles; prepare_dataset records `format`",
}
# Rules without settings of their own: what they compute follows from their inputs.
NO_SETTINGS = {"sieve_report", "sieve_comparison", "ar2_seeds"}

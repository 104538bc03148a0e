"""The goals of the default pipeline (docs/results.md, "The goals of the defaults"): what a user who runs
the defaults should be able to count on. The demo's README block (``readme_results``) and the
tournament's goals table (``tournament.level_goals``) both judge against these figures.

1. The final model is not shown below the model it starts from nor below DPR on the unfiltered pool.
2. Where the oracle gains, the default filter closes at least ``ORACLE_SHARE_GOAL`` of that gain.
3. BM25 fused with the default trained model is at least BM25 + ``HYBRID_MARGIN_GOAL`` R@1 on SQuAD-36.
"""

ORACLE_SHARE_GOAL = 0.9
HYBRID_MARGIN_GOAL = 0.03

"""Sections eval, selection, sweep and tournament: what metrics.json measures, model selection on dev,
and the comparisons across datasets (the noise sweep, the filter tournament).
"""

from __future__ import annotations

from typing import Annotated, Literal, Optional

from pydantic import AfterValidator, Field, ValidationInfo, field_validator

from pipeline.core.settings.base import (
    MAX_RANKS,
    Contract,
    JobResources,
    MethodName,
    Metric,
    Name,
    Pair,
    Ranks,
    Snapshots,
    Unique,
)


class EvalSettings(Contract):
    """What results/{dataset}/metrics.json measures (docs/evaluation.md)."""

    split: Literal["train", "dev", "test"] = Field(
        "test", description="evaluated split (datasets.<name>.eval_split overrides)"
    )
    match: Literal["string", "regex"] = Field(
        "string", description="DPR has_answer: string tokens, or regex (CuratedTREC)"
    )
    ks: Unique(Annotated[int, Field(ge=1, le=MAX_RANKS)], 1) = Field(
        [1, 5, 20, 100], description="cut-offs for R@k (answers), hit@k and recall@k (qrels)"
    )
    depth: Ranks = Field(100, description="passages retrieved per query for evaluation runs")

    @field_validator("depth")
    @classmethod
    def _deep_enough(cls, depth: int, info: ValidationInfo) -> int:
        # A cut-off deeper than the runs reported R@k = R@depth as if measured at k.
        deeper = [k for k in info.data.get("ks") or [] if k > depth]
        if deeper:
            raise ValueError(
                f"{depth} is shallower than the cut-off(s) {', '.join(map(str, sorted(deeper)))} of "
                f"eval.ks: R@{max(deeper)} would be R@{depth} under another name; raise eval.depth "
                f"to at least {max(deeper)} or leave those cut-offs out of eval.ks"
            )
        return depth

    trec_export: bool = Field(True, description="also write run.{split}.trec next to every evaluated run")
    compare: list[Pair] = Field(
        [
            ["dpr", "zeroshot"],
            ["dpr_oracle", "zeroshot"],
            ["dpr_oracle", "dpr"],
            ["dpr_oracle", "dpr_none"],
            ["dpr_sieve", "dpr_none"],
            ["dpr_ccr", "dpr"],
            ["dpr_sieve", "dpr"],
            ["dpr_ccr", "dpr_ccr_b0"],
            ["dpr_rcl", "dpr"],
            ["dpr_sieve", "dpr_sieve_no_ccr"],
            ["ar2_sieve", "ar2"],
            ["ar2_sieve", "zeroshot"],
            ["ar2_sieve", "dpr_none"],
            ["ar2_simans_sieve", "ar2_simans"],
            ["hybrid_wsum_dpr_sieve", "bm25"],
            ["hybrid_wsum_dpr_sieve", "dpr_sieve"],
        ],
        description="[method, baseline] pairs: paired difference, 95% interval over common seeds (metrics.md); "
        "a pair with a method not in `methods` is left out. bm25 and zeroshot have no seed: as a baseline "
        "their one run is paired with every seed of the method. dpr_none (DPR on the filters' own candidate "
        "pool) isolates a filter from the pool; dpr_ccr_b0 (the same CCR fine-tune at beta 0) isolates beta "
        "from tau, k and the extra steps; dpr_sieve_no_ccr (the same sieve scored by models/dpr) isolates CCR; "
        "ar2_sieve against zeroshot and dpr_none: the default pipeline's final model against its goals' baselines",
    )


def _keeps_both_ends(alphas: list[float]) -> list[float]:
    # 0 is the start model itself: without it the selection could not keep the start, which is
    # what it is for; 1 is the trained model, the choice a run without selection makes.
    missing = [end for end in (0, 1) if end not in alphas]
    if missing:
        raise ValueError(
            f"must include {' and '.join(map(str, missing))} (0: the start model, 1: the trained one)"
        )
    return alphas


class SelectionSettings(JobResources):
    """Model selection on dev (pipeline.training.select_model): WiSE-FT's weight-space interpolation
    theta(alpha) = (1 - alpha) theta_start + alpha theta_trained at each alpha, every one scored on the dev
    queries' candidates; the best is kept, ties to the smallest alpha (the closest to the start)."""

    alphas: Annotated[Unique(Annotated[float, Field(ge=0, le=1)], 2), AfterValidator(_keeps_both_ends)] = (
        Field(
            [0.0, 0.25, 0.5, 0.75, 1.0],
            description="interpolation weights tried (0 = the start model, 1 = the trained model; both required)",
        )
    )
    metric: Metric = Field(
        "hit@1",
        description="dev metric that chooses alpha: hit@k | recall@k | MRR@10 over the --qrels given (the truth "
        "file qrels_all: hit@1 is synthkb's primary metric hit_all@1) | R@k (answer match)",
    )
    checkpoints: Snapshots = Field(
        0,
        description="weight snapshots each dense training run a selection reads (sections dpr, ccr) keeps at N evenly spaced "
        "steps (k * steps // (N + 1), k = 1..N; models/<m>/snapshots/step<k>/, one model's weights each), "
        "candidates of the selection besides the start and the trained model; 0 = none",
    )

    @field_validator("gpus")
    @classmethod
    def _one_process(cls, gpus: int) -> int:
        # The stage has no DDP launch: a second GPU would be reserved and never used.
        if gpus > 1:
            raise ValueError(f"at most 1 (model selection runs one process), got {gpus}")
        return gpus


class SweepSettings(Contract):
    """The noise sweep results/sweeps/noise.{json,png} over synthkb datasets declared at dial levels:
    each method's metric against the measured false-negative share, paired differences with the
    baseline, the share of the oracle gap closed (sweep.smk; config/overlays/sweep/noise.yaml)."""

    datasets: Unique(str) = Field([], description="the synthkb datasets (dial levels) swept")
    methods: Unique(str, 1) = Field(
        ["dpr", "dpr_ccr", "dpr_sieve", "dpr_oracle"], description="methods swept"
    )
    baseline: str = Field("dpr", description="every method is paired with it")
    oracle: str = Field("dpr_oracle", description="the gap closed is measured against it")
    metric: Metric = Field("R@5", description="the swept metric")
    pairs: list[Annotated[list[str], Field(min_length=2, max_length=2)]] = Field(
        [],
        description="[method, control] pairs of sweep.methods compared besides the baseline "
        "(e.g. [dpr_sieve, dpr_none]: the same candidate pool)",
    )


class TournamentLevel(Contract):
    """One column of the tournament: a declared dataset at one noise level, and what differs there."""

    label: str = Field(description="the level as the table and figure name it (e.g. 30% p0.5)")
    oracle: Optional[MethodName] = Field(
        None,
        description="the oracle on this dataset (null: tournament.oracle); SQuAD has no qrels_all, so "
        "answer-match removal (dpr_answer_match) plays it there",
    )
    metrics: Optional[Unique(Metric, 1)] = Field(
        None, description="the metrics reported here (null: tournament.metrics); the first is the primary"
    )
    skip: Unique(MethodName) = Field(
        [],
        description="contenders not run on this dataset (e.g. dpr_oracle where there is no qrels_all): "
        "shown as not run, never silently",
    )
    decides: Literal["workflow", "clean"] = Field(
        "workflow",
        description="the default this column decides: workflow (the workflow's filter, its candidates "
        "mined by BM25 as the workflow mines them) or clean (sieve-clean's, candidates mined by a dense "
        "model, as the files users bring)",
    )


class TournamentSettings(Contract):
    """The tournament: every contender trained on the same candidate pool at every level,
    paired with the pool's unfiltered control, the oracle and the untrained start
    (results/sweeps/tournament.{json,md,png}; sweep.smk; config/overlays/tournament/)."""

    levels: dict[Name, TournamentLevel] = Field(
        {},
        description="dataset of `datasets` (a synthkb dial level, SQuAD-36) -> its column, in the table's "
        "order: {label, oracle (null: tournament.oracle), metrics (null: tournament.metrics), skip, decides}",
    )
    methods: Unique(MethodName) = Field([], description="the contenders (rows), in the table's order")
    baseline: MethodName = Field(
        "dpr_none", description="the same-pool control every contender is paired with"
    )
    oracle: MethodName = Field(
        "dpr_oracle", description="the oracle whose gain over the baseline is the unit"
    )
    start: MethodName = Field("zeroshot", description="the untrained model the contenders start from")
    metrics: Unique(Metric, 1) = Field(
        ["hit_all@1", "hit_all@5", "R@5"], description="the metrics reported; the first is the primary"
    )
    incumbent: MethodName = Field(
        "dpr_sieve_no_ccr",
        description="the filter the demo runs now (the sieve scored by models/dpr): a column of paired "
        "differences beside the table, which the rule that picks the default does not read",
    )
    references: Unique(MethodName) = Field(
        ["bm25"],
        description="rows shown beside the start in every table (paired with the baseline, Holm-corrected "
        "with the contenders) and never chosen: untrained retrievers a user could run instead",
    )
    alpha: float = Field(
        0.05,
        gt=0,
        lt=1,
        description="the family-wise error rate of Holm's correction over each matrix's tests "
        "(rows × levels); shown above or below means rejected by it",
    )

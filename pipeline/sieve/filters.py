"""False-negative filters behind one interface, all judging the same candidate table.

    python -m pipeline.workflow.jobs D filter_candidates --filter positive_aware > positive_aware.json
    python -m pipeline.sieve.filters --filter positive_aware --settings positive_aware.json \
        --candidates results/D/sieve/candidates.parquet \
        --corpus resources/D/corpus.parquet --queries resources/D/queries.train.parquet \
        --model results/D/models/dpr --out results/D/sieve/positive_aware/decisions.parquet

The settings (pipeline.core.settings.FilterJob) come as one document, the workflow's job's
(``--settings-json``: its filter's settings only) or a file (``--settings``), each flag over it.

A filter reads the candidates (pipeline.sieve.candidates) and decides per row: ``kept`` (stays a negative)
or dropped (suspected false negative), with the ``score`` it decided on. Filters:

- ``none``            keep everything (the noisy baseline).
- ``answer_match``    DPR: drop candidates whose text contains an answer string (``has_answer``).
- ``oracle``          drop exactly the true false negatives (labels from qrels_all or injection): the
                      upper bound of every filter; needs exact labels, so synthkb or an injected simulation.
- ``rank_window``     FlagEmbedding: drop the top ``--start`` ranks of the source list (score = rank).
- ``positive_aware``  NV-Retriever: drop if s_neg > margin * s_pos (``relative``), s_neg > s_pos - margin
                      (``difference``) or s_neg > margin (``absolute``), with a retriever's cosine.
- ``absolute_margin`` sentence-transformers' ``absolute_margin``: drop if s_neg > s_pos - margin (positive_aware's
                      difference rule under its own name and settings, so both can be compared and trained).
- ``positive_aware_dev`` the relative rule at the margin of a grid that best separates the dev queries'
                      candidates (``--dev-candidates``, ``--dev-queries``; truth qrels_all, else answer match)
                      by a stated criterion; the grid, the criterion and every margin's numbers are written
                      into the decisions' metadata and from there into the filter's report.
- ``cross_encoder``   RocketQA: keep only if the cross-encoder's probability is < ``--threshold``.
- ``sieve``           Algorithm 1 (pipeline.sieve.passage_sieve) scored by ``--model``; ``sieve_no_ccr`` is the same
                      rule scored by the DPR model (no CCR), written in the sieve layout.
"""

from __future__ import annotations

import abc
import argparse
import json
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

import numpy as np
import pandas as pd
import pyarrow as pa

from pipeline.core.cli import add_job_flags, run_main, stage_parser, start_stage
from pipeline.core.jobs import add_settings_flags, job_settings
from pipeline.core.schemas import FILTER_DECISIONS_SCHEMA, MINED_NEGATIVES_SCHEMA, SIEVE_SCHEMA
from pipeline.core.settings import (
    FILTER_NAMES,
    MODEL_FILTERS,
    FilterJob,
    PositiveAwareDevSettings,
    PositiveAwareSettings,
    from_dict,
    pick,
)
from pipeline.core.storage import DataError, arrow_frame, write_table
from pipeline.sieve.passage_sieve import (
    model_similarities,
    read_candidates,
    sieve_table,
    train_negatives,
)
from pipeline.sieve.report import DEV_MARGIN_KEY

log = logging.getLogger("sieve.filters")

FILTERS = FILTER_NAMES  # declared with config sieve.filters (pipeline.core.settings)
POSITIVE_AWARE_MODES = get_args(PositiveAwareSettings.model_fields["mode"].annotation)


@dataclass
class FilterInputs:
    candidates: pd.DataFrame  # read_candidates(): sorted by (qid, rank)
    corpus: str | os.PathLike
    queries: str | os.PathLike
    work_dir: Path  # scratch space (embedding cache)
    batch_size: int = 64
    device: str = "auto"  # where a filter's model computes (the job's --device)


class CandidateFilter(abc.ABC):
    """One false-negative filter. ``decide`` returns a frame aligned with the candidate rows that holds
    at least ``score`` (float, NaN where the filter has none) and ``kept`` (bool)."""

    name: str = ""
    schema: pa.Schema = FILTER_DECISIONS_SCHEMA

    @abc.abstractmethod
    def decide(self, inputs: FilterInputs) -> pd.DataFrame: ...

    def decisions(self, inputs: FilterInputs) -> pa.Table:
        decided = self.decide(inputs)
        if len(decided) != len(inputs.candidates):
            raise RuntimeError(
                f"filter {self.name} returned {len(decided)} rows for {len(inputs.candidates)} candidates"
            )
        if self.schema is FILTER_DECISIONS_SCHEMA:
            cands = inputs.candidates
            decided = pd.DataFrame(
                {
                    "qid": cands["qid"],
                    "pid": cands["pid"],
                    "rank": cands["rank"],
                    "source_score": cands["source_score"],
                    "score": np.asarray(decided["score"], float),
                    "kept": np.asarray(decided["kept"], bool),
                    "is_false_negative": cands["is_false_negative"].astype("boolean"),
                    "fn_label_source": cands["fn_label_source"].astype("string"),
                    "positive_pid": cands["positive_pid"],
                }
            )
        return pa.Table.from_pandas(decided, schema=self.schema, preserve_index=False)


class NoFilter(CandidateFilter):
    name = "none"

    def decide(self, inputs: FilterInputs) -> pd.DataFrame:
        n = len(inputs.candidates)
        return pd.DataFrame({"score": np.full(n, np.nan), "kept": np.ones(n, dtype=bool)})


class AnswerMatchFilter(CandidateFilter):
    name = "answer_match"

    def decide(self, inputs: FilterInputs) -> pd.DataFrame:
        cands = inputs.candidates
        if "has_answer" not in cands:
            raise DataError(
                "answer_match needs the has_answer column (written by pipeline.sieve.candidates)",
                field="has_answer",
            )
        known = cands["has_answer"].astype("boolean")
        if known.isna().any():
            log.warning(
                "answer_match: %d candidates have no answer to match (queries without answers); "
                "they are kept",
                int(known.isna().sum()),
            )
        hit = known.fillna(False).to_numpy(bool)
        return pd.DataFrame({"score": hit.astype(float), "kept": ~hit})


class OracleFilter(CandidateFilter):
    """Keeps exactly the candidates known not to be false negatives: only exact labels count."""

    name = "oracle"
    EXACT = ("qrels_all", "injected")

    def decide(self, inputs: FilterInputs) -> pd.DataFrame:
        cands = inputs.candidates
        source = cands["fn_label_source"].astype("string")
        inexact = ~source.isin(self.EXACT).fillna(False).to_numpy(bool)
        if inexact.any():
            first = cands.loc[inexact].iloc[0]
            raise DataError(
                f"oracle needs exact false-negative labels (qrels_all or injected) for every candidate; "
                f"{int(inexact.sum())} of {len(cands)} have none (a dataset without qrels_all: use "
                f"answer_match, the answer-string approximation)",
                record=f"qid {first['qid']}, pid {first['pid']}",
                field="fn_label_source",
            )
        is_fn = cands["is_false_negative"].astype("boolean").to_numpy(bool)
        return pd.DataFrame({"score": is_fn.astype(float), "kept": ~is_fn})


class RankWindowFilter(CandidateFilter):
    name = "rank_window"

    def __init__(self, start: int = 10):
        if start < 0:
            raise ValueError("rank_window start must be >= 0")
        self.start = start

    def decide(self, inputs: FilterInputs) -> pd.DataFrame:
        rank = inputs.candidates["rank"].to_numpy(np.int64)
        return pd.DataFrame({"score": rank.astype(float), "kept": rank > self.start})


def positive_aware_keep(s_neg: np.ndarray, s_pos: np.ndarray, mode: str, margin: float) -> np.ndarray:
    """NV-Retriever's rules: True where the candidate stays a negative."""
    if mode == "relative":
        drop = s_neg > margin * s_pos
    elif mode == "difference":
        drop = s_neg > s_pos - margin
    elif mode == "absolute":
        drop = s_neg > margin
    else:
        raise ValueError(f"unknown positive_aware mode {mode!r} (expected one of {POSITIVE_AWARE_MODES})")
    return ~drop


def positive_aware_statistic(s_neg: np.ndarray, s_pos: np.ndarray, mode: str) -> np.ndarray:
    """The number each rule thresholds at its margin (drop iff statistic > margin, or > -margin for
    ``difference``): s_neg / s_pos (relative; +inf where s_pos <= 0, which the rule drops for any
    s_neg above a non-positive bound), s_neg - s_pos (difference), s_neg (absolute). It is the
    decisions' ``score``, so that the trade-off curve can sweep the margin."""
    if mode == "relative":
        safe = np.where(s_pos > 0, s_pos, 1.0)
        return np.where(s_pos > 0, s_neg / safe, np.inf)
    if mode == "difference":
        return s_neg - s_pos
    return np.asarray(s_neg, dtype=np.float64)


class PositiveAwareFilter(CandidateFilter):
    name = "positive_aware"

    def __init__(self, model: str | os.PathLike, mode: str = "relative", margin: float = 0.95):
        if mode not in POSITIVE_AWARE_MODES:
            raise ValueError(f"unknown positive_aware mode {mode!r} (expected one of {POSITIVE_AWARE_MODES})")
        self.model, self.mode, self.margin = model, mode, margin

    def decide(self, inputs: FilterInputs) -> pd.DataFrame:
        sims = model_similarities(
            inputs.candidates,
            self.model,
            inputs.corpus,
            inputs.queries,
            inputs.work_dir,
            batch_size=inputs.batch_size,
            device=inputs.device,
        )
        s_pos = np.repeat(sims.positive, np.diff(sims.offsets))
        keep = positive_aware_keep(sims.candidate, s_pos, self.mode, self.margin)
        return pd.DataFrame(
            {"score": positive_aware_statistic(sims.candidate, s_pos, self.mode), "kept": keep}
        )


class AbsoluteMarginFilter(PositiveAwareFilter):
    """sentence-transformers' ``absolute_margin``: positive_aware's difference rule, under its own name."""

    name = "absolute_margin"

    def __init__(self, model: str | os.PathLike, margin: float = 0.05):
        super().__init__(model, "difference", margin)


EXACT_LABELS = ("qrels_all", "injected")


def dev_truth(cands: pd.DataFrame, path: str | os.PathLike) -> tuple[np.ndarray, str]:
    """(is a false negative, which truth) of every dev candidate: the exact labels where every row has
    one (synthkb's qrels_all), else answer match (``has_answer``, SQuAD/NQ); a row with neither is an error."""
    source = cands["fn_label_source"].astype("string")
    if bool(source.isin(EXACT_LABELS).fillna(False).all()):
        return cands["is_false_negative"].astype("boolean").to_numpy(bool), "exact labels (qrels_all)"
    known = cands["has_answer"].astype("boolean") if "has_answer" in cands else None
    if known is None or known.isna().any():
        row = 0 if known is None else int(np.argmax(known.isna().to_numpy()))
        raise DataError(
            "positive_aware_dev needs a truth for every dev candidate: exact labels (qrels_all) for all, "
            "or an answer match (has_answer)",
            file=path,
            record=f"qid {cands['qid'].iat[row]}, pid {cands['pid'].iat[row]}",
            field="has_answer",
        )
    return known.to_numpy(bool), "answer match (has_answer)"


def pick_margin(statistic: np.ndarray, truth: np.ndarray, grid: list[float], criterion: str) -> dict:
    """The margin of ``grid`` whose rule (drop iff statistic > margin) best detects ``truth`` by
    ``criterion``: youden = recall − share of true negatives dropped; f1 = F1 of the dropped set.
    Ties go to the largest margin (the fewest drops). Returns the choice and every margin's numbers."""
    truth = np.asarray(truth, bool)
    n_fn, n_tn = int(truth.sum()), int((~truth).sum())
    if n_fn == 0 or n_tn == 0:
        raise ValueError(
            f"the dev candidates hold {n_fn} false negatives and {n_tn} true negatives: a margin "
            "cannot be chosen without both"
        )
    rows = []
    for margin in grid:
        drop = statistic > margin
        tp, fp = int((drop & truth).sum()), int((drop & ~truth).sum())
        recall, fpr = tp / n_fn, fp / n_tn
        f1 = 2 * tp / (2 * tp + fp + (n_fn - tp))
        rows.append({"margin": margin, "recall": recall, "tn_dropped": fpr, "youden": recall - fpr, "f1": f1})
    best = max(rows, key=lambda r: (r[criterion], r["margin"]))
    return {"margin": best["margin"], "criterion": criterion, "grid": rows, "n_fn": n_fn, "n_tn": n_tn}


class PositiveAwareDevFilter(CandidateFilter):
    """positive_aware's relative rule at the margin picked on the dev queries' candidates."""

    name = "positive_aware_dev"

    def __init__(
        self,
        model: str | os.PathLike,
        dev_candidates: str | os.PathLike,
        dev_queries: str | os.PathLike,
        settings: PositiveAwareDevSettings = PositiveAwareDevSettings(),
    ):
        self.model, self.dev_candidates, self.dev_queries = model, dev_candidates, dev_queries
        self.settings = settings
        self.choice: dict | None = None

    def decide(self, inputs: FilterInputs) -> pd.DataFrame:
        dev = read_candidates(self.dev_candidates)
        truth, truth_name = dev_truth(dev, self.dev_candidates)
        (inputs.work_dir / "dev").mkdir(exist_ok=True)
        dev_sims = model_similarities(
            dev,
            self.model,
            inputs.corpus,
            self.dev_queries,
            inputs.work_dir / "dev",
            batch_size=inputs.batch_size,
            device=inputs.device,
        )
        dev_stat = positive_aware_statistic(
            dev_sims.candidate, np.repeat(dev_sims.positive, np.diff(dev_sims.offsets)), "relative"
        )
        choice = pick_margin(dev_stat, truth, self.settings.grid(), self.settings.criterion)
        self.choice = {
            **choice,
            "truth": truth_name,
            "dev_candidates": str(self.dev_candidates),
            "dev_queries": int(dev["qid"].nunique()),
            "settings": self.settings.model_dump(),
        }
        log.info(
            "positive_aware_dev: margin %g (%s %.3f on %d dev candidates, truth: %s)",
            choice["margin"],
            choice["criterion"],
            max(r[choice["criterion"]] for r in choice["grid"]),
            len(dev),
            truth_name,
        )
        return PositiveAwareFilter(self.model, "relative", choice["margin"]).decide(inputs)

    def decisions(self, inputs: FilterInputs) -> pa.Table:
        table = super().decisions(inputs)
        meta = {**(table.schema.metadata or {}), DEV_MARGIN_KEY: json.dumps(self.choice).encode()}
        return table.replace_schema_metadata(meta)


class CrossEncoderFilter(CandidateFilter):
    name = "cross_encoder"

    def __init__(self, model: str | os.PathLike, threshold: float = 0.1):
        self.model, self.threshold = model, threshold

    def decide(self, inputs: FilterInputs) -> pd.DataFrame:
        from pipeline.sieve.cross_encoder import score_candidates

        prob = score_candidates(
            inputs.candidates,
            self.model,
            inputs.corpus,
            inputs.queries,
            batch_size=inputs.batch_size,
            device=inputs.device,
        )
        return pd.DataFrame({"score": prob, "kept": prob < self.threshold})


class SieveFilter(CandidateFilter):
    """Algorithm 1; writes the full sieve layout (similarity, loss, threshold, fallback)."""

    schema = SIEVE_SCHEMA

    def __init__(
        self,
        model: str | os.PathLike,
        *,
        name: str = "sieve",
        strict: bool = False,
        fallback: str = "random_one",
        seed: int = 0,
        temperature: float | None = None,
    ):
        self.name, self.model = name, model
        self.strict, self.fallback, self.seed, self.temperature = strict, fallback, seed, temperature

    def decide(self, inputs: FilterInputs) -> pd.DataFrame:
        sims = model_similarities(
            inputs.candidates,
            self.model,
            inputs.corpus,
            inputs.queries,
            inputs.work_dir,
            batch_size=inputs.batch_size,
            temperature=self.temperature,
            device=inputs.device,
        )
        return sieve_table(
            inputs.candidates, sims, strict=self.strict, fallback=self.fallback, seed=self.seed
        )


def make_filter(name: str, job: Any, args: argparse.Namespace) -> CandidateFilter:
    """Filter ``name`` with the settings ``job`` (a FilterJob), its model and dev files from ``args``."""
    if name in MODEL_FILTERS and not args.model:
        raise DataError(f"filter {name!r} needs --model", field="model")
    if name == "none":
        return NoFilter()
    if name == "answer_match":
        return AnswerMatchFilter()
    if name == "oracle":
        return OracleFilter()
    if name == "rank_window":
        return RankWindowFilter(job.start)
    if name == "positive_aware":
        return PositiveAwareFilter(args.model, job.mode, job.margin)
    if name == "absolute_margin":
        return AbsoluteMarginFilter(args.model, job.absolute_margin_margin)
    if name == "positive_aware_dev":
        if not (args.dev_candidates and args.dev_queries):
            raise DataError(
                "filter 'positive_aware_dev' needs --dev-candidates and --dev-queries", field="dev"
            )
        # the grid's order (grid_min <= grid_max) is the section's check
        dev = pick(PositiveAwareDevSettings, job, "positive_aware_dev")
        settings = from_dict(PositiveAwareDevSettings, dev, "settings.positive_aware_dev")
        return PositiveAwareDevFilter(args.model, args.dev_candidates, args.dev_queries, settings)
    if name == "cross_encoder":
        return CrossEncoderFilter(args.model, job.threshold)
    if name in ("sieve", "sieve_no_ccr"):
        return SieveFilter(
            args.model,
            name=name,
            strict=job.strict,
            fallback=job.fallback,
            seed=job.seed,
            temperature=job.temperature,
        )
    raise DataError(f"unknown filter {name!r} (known: {', '.join(FILTERS)})", field="filter")


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser("pipeline.sieve.filters", __doc__)
    parser.add_argument("--filter", required=True, choices=FILTERS)
    parser.add_argument("--candidates", required=True)
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--queries", required=True, help="queries.train.parquet")
    parser.add_argument(
        "--model",
        default=None,
        help="retriever (positive_aware, sieve*) or cross-encoder folder (cross_encoder)",
    )
    parser.add_argument("--out", required=True)
    add_settings_flags(parser, FilterJob, "settings (config section sieve; the filter run reads its own)")
    dev = parser.add_argument_group("positive_aware_dev's dev queries")
    dev.add_argument(
        "--dev-candidates", help="the dev queries' candidates (pipeline.sieve.candidates on dev)"
    )
    dev.add_argument("--dev-queries", help="queries.dev.parquet")
    parser.add_argument(
        "--train-out", default=None, help="kept negatives in the bm25.parquet layout (DPR training input)"
    )
    add_job_flags(parser)
    args = parser.parse_args(argv)
    job = job_settings(FilterJob, args)  # before any work: a bad document or flag is one line
    start_stage(args.log, args.threads)
    the_filter = make_filter(args.filter, job, args)
    cands = read_candidates(args.candidates)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".filter-", dir=out.parent) as work:
        table = the_filter.decisions(
            FilterInputs(cands, args.corpus, args.queries, Path(work), job.batch_size, args.device)
        )
    write_table(out, table)
    decided = arrow_frame(table)
    if args.train_out:
        # What DPR trains on when this filter cleans its negatives (method dpr_<filter>).
        has_answer = cands["has_answer"].reset_index(drop=True) if "has_answer" in cands else None
        train = train_negatives(decided, args.filter, has_answer, score="source_score")
        write_table(
            args.train_out, pa.Table.from_pandas(train, schema=MINED_NEGATIVES_SCHEMA, preserve_index=False)
        )
    kept = decided["kept"].to_numpy()
    log.info(
        "filter %s: kept %d of %d candidates (%.1f%% dropped) -> %s",
        args.filter,
        kept.sum(),
        len(kept),
        100 * (1 - kept.mean()) if len(kept) else 0.0,
        out,
    )
    bare = queries_without_negatives(decided)
    if bare > 0.5:
        # A fixed threshold against a model it was not tuned for can drop nearly everything (a cross-encoder
        # trained at a small budget scores most candidates above RocketQA's 0.1); DPR then sees in-batch
        # negatives only, which the log should say before the training is read as the filter's.
        log.warning(
            "filter %s: %.1f%% of the queries keep no hard negative; DPR trains them on in-batch negatives only",
            args.filter,
            100 * bare,
        )
    return 0


def queries_without_negatives(decisions: pd.DataFrame) -> float:
    """Share of the queries with candidates of which the filter kept none."""
    if decisions.empty:
        return 0.0
    return float((~decisions.groupby("qid", sort=False)["kept"].any()).mean())


if __name__ == "__main__":
    run_main(main)

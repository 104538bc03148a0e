"""False-negative filters behind one interface, all judging the same candidate table.

    python -m pipeline.sieve.filters --filter positive_aware --candidates results/D/sieve/candidates.parquet \
        --corpus resources/D/corpus.parquet --queries resources/D/queries.train.parquet \
        --model results/D/models/dpr --out results/D/sieve/positive_aware/decisions.parquet

A filter reads the candidates (pipeline.sieve.candidates) and decides per row: ``kept`` (stays a negative)
or dropped (suspected false negative), with the ``score`` it decided on. Filters:

- ``none``            keep everything (the noisy baseline).
- ``answer_match``    DPR: drop candidates whose text contains an answer string (``has_answer``).
- ``oracle``          drop exactly the true false negatives (labels from qrels_all or injection): the
                      upper bound of every filter; needs exact labels, so synthkb or an injected simulation.
- ``rank_window``     FlagEmbedding: drop the top ``--start`` ranks of the source list (score = rank).
- ``positive_aware``  NV-Retriever: drop if s_neg > margin * s_pos (``relative``), s_neg > s_pos - margin
                      (``difference``) or s_neg > margin (``absolute``), with a retriever's cosine.
- ``cross_encoder``   RocketQA: keep only if the cross-encoder's probability is < ``--threshold``.
- ``sieve``           Algorithm 1 (pipeline.sieve.passage_sieve) scored by ``--model``; ``sieve_no_ccr`` is the same
                      rule scored by the DPR model (no CCR), written in the sieve layout.
"""

from __future__ import annotations

import abc
import argparse
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import get_args

import numpy as np
import pandas as pd
import pyarrow as pa

from pipeline.core.cli import add_job_flags, run_main, stage_parser, start_stage
from pipeline.core.schemas import FILTER_DECISIONS_SCHEMA, MINED_NEGATIVES_SCHEMA, SIEVE_SCHEMA
from pipeline.core.settings import (
    FILTER_NAMES,
    MODEL_FILTERS,
    SIEVE_DECISION_KEYS,
    Config,
    CrossEncoderFilterSettings,
    PositiveAwareSettings,
    RankWindowSettings,
    SieveSettings,
    add_flags,
    default,
)
from pipeline.core.storage import DataError, arrow_frame, write_table
from pipeline.sieve.passage_sieve import (
    model_similarities,
    read_candidates,
    sieve_table,
    train_negatives,
)

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


def make_filter(name: str, args: argparse.Namespace) -> CandidateFilter:
    if name in MODEL_FILTERS and not args.model:
        raise DataError(f"filter {name!r} needs --model", field="model")
    if name == "none":
        return NoFilter()
    if name == "answer_match":
        return AnswerMatchFilter()
    if name == "oracle":
        return OracleFilter()
    if name == "rank_window":
        return RankWindowFilter(args.start)
    if name == "positive_aware":
        return PositiveAwareFilter(args.model, args.mode, args.margin)
    if name == "cross_encoder":
        return CrossEncoderFilter(args.model, args.threshold)
    if name in ("sieve", "sieve_no_ccr"):
        return SieveFilter(
            args.model,
            name=name,
            strict=args.strict,
            fallback=args.fallback,
            seed=args.seed,
            temperature=args.temperature,
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
    add_flags(parser.add_argument_group("rank_window (sieve.rank_window)"), RankWindowSettings)
    add_flags(parser.add_argument_group("positive_aware (sieve.positive_aware)"), PositiveAwareSettings)
    add_flags(
        parser.add_argument_group("cross_encoder (sieve.cross_encoder)"),
        CrossEncoderFilterSettings,
        names=("threshold",),
    )
    add_flags(
        parser.add_argument_group("sieve_no_ccr and batching (config section sieve)"),
        SieveSettings,
        names=SIEVE_DECISION_KEYS,
    )
    parser.add_argument("--seed", type=int, default=default(Config, "seed"))
    parser.add_argument(
        "--train-out", default=None, help="kept negatives in the bm25.parquet layout (DPR training input)"
    )
    add_job_flags(parser)
    args = parser.parse_args(argv)
    start_stage(args.log, args.threads)
    the_filter = make_filter(args.filter, args)
    cands = read_candidates(args.candidates)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".filter-", dir=out.parent) as work:
        table = the_filter.decisions(
            FilterInputs(cands, args.corpus, args.queries, Path(work), args.batch_size, args.device)
        )
    write_table(out, table)
    if args.train_out:
        # What DPR trains on when this filter cleans its negatives (method dpr_<filter>).
        decided = arrow_frame(table)
        has_answer = cands["has_answer"].reset_index(drop=True) if "has_answer" in cands else None
        train = train_negatives(decided, args.filter, has_answer, score="source_score")
        write_table(
            args.train_out, pa.Table.from_pandas(train, schema=MINED_NEGATIVES_SCHEMA, preserve_index=False)
        )
    kept = np.asarray(table.column("kept"))
    log.info(
        "filter %s: kept %d of %d candidates (%.1f%% dropped) -> %s",
        args.filter,
        kept.sum(),
        len(kept),
        100 * (1 - kept.mean()) if len(kept) else 0.0,
        out,
    )
    return 0


if __name__ == "__main__":
    run_main(main)

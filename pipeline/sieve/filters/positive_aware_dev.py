"""``positive_aware_dev``: positive_aware's relative rule at the margin the dev queries pick."""

from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pyarrow as pa

from pipeline.core.storage import DataError
from pipeline.sieve.filters._base import CandidateFilter, FilterInputs, FilterSetup, FilterSpec, log
from pipeline.sieve.filters.oracle import EXACT_LABELS
from pipeline.sieve.filters.positive_aware import PositiveAwareFilter, positive_aware_statistic
from pipeline.sieve.passage_sieve import model_similarities, read_candidates
from pipeline.sieve.report import DEV_MARGIN_KEY
from pipeline.sieve.settings import PositiveAwareDevSettings


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


def build(setup: FilterSetup) -> PositiveAwareDevFilter:
    return PositiveAwareDevFilter(setup.model, setup.dev_candidates, setup.dev_queries, setup.settings)


FILTER = FilterSpec(
    "positive_aware_dev",
    "s_neg > m·s_pos at the margin m of the grid `grid_min:grid_step:grid_max` that best separates the "
    "**dev** queries' candidates (`candidates.dev.parquet`, rule `sieve_dev_candidates`: drawn as the train "
    "ones from the source's dev run, no injection) by `criterion` (Youden's J = FN recall − share of true "
    "negatives dropped, or F1 of the dropped set; ties: the largest margin). Truth: `qrels_all` where every "
    "dev candidate has it (synthkb), else answer match (`has_answer`; SQuAD)",
    build,
    score="s_neg/s_pos",
)

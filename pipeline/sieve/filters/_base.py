"""What every false-negative filter is made of: the interface a filter implements (``CandidateFilter``),
what it decides on (``FilterInputs``), what its builder gets (``FilterSetup``) and what its module
declares (``FilterSpec``). The filters are the other modules of this package, one each."""

from __future__ import annotations

import abc
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import pandas as pd
import pyarrow as pa

from pipeline.core.schemas import FILTER_DECISIONS_SCHEMA
from pipeline.core.settings.job_documents import filter_job_keys
from pipeline.core.settings.validation import from_dict
from pipeline.sieve.passage_sieve import Similarities, model_similarities
from pipeline.sieve.settings import FILTER_CONTRACTS, FilterContract, SieveSettings

# One logger for the stage and its filters (a filter's warning reads as the stage's).
log = logging.getLogger("sieve.filters")


@dataclass
class FilterInputs:
    candidates: pd.DataFrame  # read_candidates(): sorted by (qid, rank)
    corpus: str | os.PathLike
    queries: str | os.PathLike
    work_dir: Path  # scratch space (embedding cache)
    batch_size: int = 64
    device: str = "auto"  # where a filter's model computes (the job's --device)

    def similarities(self, model: str | os.PathLike, temperature: float | None = None) -> Similarities:
        """The retriever ``model``'s cosines of every candidate and positive (passage_sieve's)."""
        return model_similarities(
            self.candidates,
            model,
            self.corpus,
            self.queries,
            self.work_dir,
            batch_size=self.batch_size,
            temperature=temperature,
            device=self.device,
        )


class CandidateFilter(abc.ABC):
    """One false-negative filter. ``decide`` returns a frame aligned with the candidate rows that holds
    at least ``score`` (float, NaN where the filter has none) and ``kept`` (bool)."""

    name: str = ""
    schema: pa.Schema = FILTER_DECISIONS_SCHEMA

    @abc.abstractmethod
    def decide(self, inputs: FilterInputs) -> pd.DataFrame: ...

    def reason(self, row: Mapping[str, Any], kept: bool) -> str:
        """One candidate's verdict in words (sieve-clean's decisions table): ``row`` is its decision."""
        verdict = "kept" if kept else "suspected false negative"
        return f"{self.name}: score {row['score']:.4f}: {verdict}"

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


@dataclass(frozen=True)
class FilterSetup:
    """What a filter's builder gets, from the workflow's filter stage and from sieve-clean alike: its
    settings (its section sieve.<name>, validated; None for a filter without one), the sieve's decision
    keys for a filter applying its rule, the seed, and the files its needs name."""

    name: str
    settings: Any = None
    rule: Mapping[str, Any] = field(default_factory=dict)
    seed: int = 0
    model: str | os.PathLike | None = None
    dev_candidates: str | os.PathLike | None = None
    dev_queries: str | os.PathLike | None = None

    @classmethod
    def from_job(cls, name: str, job: Any, *, clean: bool = False, **files: Any) -> "FilterSetup":
        """Filter ``name``'s setup from a job's settings (FilterJob, or CleanJob with ``clean``; any
        object with their fields): its keys as filter_job_keys names them in that job."""
        contract = FILTER_CONTRACTS[name]
        section: dict[str, Any] = {}
        rule: dict[str, Any] = {}
        for key, (owner, setting) in filter_job_keys(name, clean).items():
            (rule if owner is SieveSettings else section)[setting] = getattr(job, key)
        settings = None
        if contract.settings is not None:
            # the section's own checks across fields (positive_aware_dev: grid_min <= grid_max)
            settings = from_dict(contract.settings, section, f"settings.{name}")
        return cls(name, settings, rule, int(job.seed), **files)


@dataclass(frozen=True)
class FilterSpec:
    """A filter's declaration, once, in its module (``FILTER``): its name (the module's), what it does
    in one line (--help and docs/sieve.md), how it is built, and what the cleaning command and the
    comparison must know of it. Its settings and needs are its entry of FILTER_CONTRACTS
    (pipeline.core.settings), which the config validates with: ``contract``."""

    name: str
    description: str
    build: Callable[[FilterSetup], CandidateFilter]
    score: str = "–"  # what its decisions' score column holds (docs/sieve.md)
    tradeoff: bool = False  # decides by thresholding a continuous score: the trade-off curve sweeps it
    not_cleaning: str = ""  # why sieve-clean cannot run it (a contract without ``clean``)
    refuses_formats: Mapping[str, str] = field(default_factory=dict)  # sieve-clean format -> why not
    clean_help: Mapping[str, str] = field(default_factory=dict)  # its setting -> sieve-clean's flag help

    @property
    def contract(self) -> FilterContract:
        return FILTER_CONTRACTS[self.name]

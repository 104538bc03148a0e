"""False-negative filters behind one interface, all judging the same candidate table.

    python -m pipeline.workflow.jobs D filter_candidates --filter positive_aware > positive_aware.json
    python -m pipeline.sieve.filters --filter positive_aware --settings positive_aware.json \
        --candidates results/D/sieve/candidates.parquet \
        --corpus resources/D/corpus.parquet --queries resources/D/queries.train.parquet \
        --model results/D/models/dpr --out results/D/sieve/positive_aware/decisions.parquet

The settings (pipeline.core.settings.job_documents.FilterJob) come as one document, the workflow's job's
(``--settings-json``: its filter's settings only) or a file (``--settings``), each flag over it.

A filter reads the candidates (pipeline.sieve.candidates) and decides per row: ``kept`` (stays a negative)
or dropped (suspected false negative), with the ``score`` it decided on.

Each filter is one module of this package that declares ``FILTER`` (a FilterSpec: its name, what it
does, its builder) beside its code; its settings and needs are its entry of
pipeline.sieve.settings.FILTER_CONTRACTS. ``FILTERS`` below finds the modules; the workflow, the
cleaning command (pipeline.sieve.clean) and the docs read it, so a new filter is its module and that
entry. The filters, each dropping a candidate when:
"""

from __future__ import annotations

import importlib
import pkgutil
import tempfile
import textwrap
from pathlib import Path

import pandas as pd
import pyarrow as pa

from pipeline.core.cli import add_job_flags, stage_parser, start_stage
from pipeline.core.jobs import add_settings_flags, job_settings
from pipeline.core.schemas import MINED_NEGATIVES_SCHEMA
from pipeline.core.settings.job_documents import FilterJob
from pipeline.core.storage import DataError, arrow_frame, write_table
from pipeline.sieve.filters._base import (
    CandidateFilter,
    FilterInputs,
    FilterSetup,
    FilterSpec,
    log,
)
from pipeline.sieve.filters.positive_aware import (
    POSITIVE_AWARE_MODES,
    positive_aware_keep,
    positive_aware_statistic,
)
from pipeline.sieve.filters.positive_aware_dev import dev_truth, pick_margin
from pipeline.sieve.passage_sieve import read_candidates, train_negatives
from pipeline.sieve.settings import FILTER_CONTRACTS, FILTER_NAMES

__all__ = [
    "FILTERS",
    "POSITIVE_AWARE_MODES",
    "CandidateFilter",
    "FilterInputs",
    "FilterSetup",
    "FilterSpec",
    "build_filter",
    "dev_truth",
    "filter_spec",
    "main",
    "pick_margin",
    "positive_aware_keep",
    "positive_aware_statistic",
    "queries_without_negatives",
]


def discover() -> dict[str, FilterSpec]:
    """Every filter module of this package (a module whose name does not start with ``_``) by its
    ``FILTER``'s name, in FILTER_CONTRACTS' order (one the config does not declare comes last, where
    tests/test_filter_registry.py finds it)."""
    found: dict[str, FilterSpec] = {}
    for module in pkgutil.iter_modules(__path__):
        if module.name.startswith("_"):
            continue
        spec = getattr(importlib.import_module(f"{__name__}.{module.name}"), "FILTER", None)
        if not isinstance(spec, FilterSpec) or spec.name != module.name:
            raise TypeError(f"{__name__}.{module.name} declares no FILTER named {module.name!r}")
        found[spec.name] = spec
    order = {name: i for i, name in enumerate(FILTER_NAMES)}
    return dict(sorted(found.items(), key=lambda item: order.get(item[0], len(order))))


FILTERS: dict[str, FilterSpec] = discover()


def filter_spec(name: str) -> FilterSpec:
    """The filter ``name``'s declaration; an unknown name is bad input."""
    if name not in FILTERS or name not in FILTER_CONTRACTS:
        raise DataError(f"unknown filter {name!r} (known: {', '.join(FILTER_NAMES)})", field="filter")
    return FILTERS[name]


def build_filter(setup: FilterSetup) -> CandidateFilter:
    """The filter ``setup.name``, once the files its needs name are there: the one builder of the
    workflow's filter stage and of the cleaning command."""
    spec = filter_spec(setup.name)
    needs = spec.contract
    if needs.scorer is not None and not setup.model:
        raise DataError(f"filter {setup.name!r} needs --model", field="model")
    if needs.labels == "dev" and not (setup.dev_candidates and setup.dev_queries):
        raise DataError(f"filter {setup.name!r} needs --dev-candidates and --dev-queries", field="dev")
    return spec.build(setup)


def filter_list(names: list[str] | None = None) -> str:
    """The filters and what each drops, as --help lists them."""
    lines = []
    for name in names or FILTERS:
        spec = FILTERS[name]
        line = f"- ``{name}`` {spec.description.replace('`', '')}"
        lines += textwrap.wrap(line, 108, subsequent_indent="  ")
    return "\n".join(lines)


def _scorers(kind: str) -> str:
    return ", ".join(name for name, c in FILTER_CONTRACTS.items() if c.scorer == kind)


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser("pipeline.sieve.filters", __doc__ + "\n" + filter_list())
    parser.add_argument("--filter", required=True, choices=FILTER_NAMES)
    parser.add_argument("--candidates", required=True)
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--queries", required=True, help="queries.train.parquet")
    parser.add_argument(
        "--model",
        default=None,
        help=f"retriever ({_scorers('retriever')}), the teacher's retriever folder ({_scorers('teacher')}: "
        f"the workflow's sieve.teacher) or cross-encoder folder ({_scorers('cross_encoder')})",
    )
    parser.add_argument("--out", required=True)
    add_settings_flags(parser, FilterJob, "settings (config section sieve; the filter run reads its own)")
    dev = parser.add_argument_group("the dev queries of a filter that picks its setting on them")
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
    the_filter = build_filter(
        FilterSetup.from_job(
            args.filter,
            job,
            model=args.model,
            dev_candidates=args.dev_candidates,
            dev_queries=args.dev_queries,
        )
    )
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

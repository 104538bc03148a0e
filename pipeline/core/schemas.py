"""Every Parquet table the pipeline writes or reads: one named Arrow schema per table layout.

A layout has exactly one name here, so a reader and the stage that writes its input cannot drift
apart; column order and types are part of the contract (outputs are compared byte for byte).
``TABLES`` says which file holds which layout; ``render_tables`` turns it into the data-contract
tables of docs/architecture.md (between ``<!-- schemas:<section> -->`` markers), and
tests/test_schemas.py fails when the document and this module disagree. After changing a schema,
refresh the document with ``python -m pipeline.core.schemas docs/architecture.md``.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import Sequence

import pyarrow as pa

from pipeline.core.storage import rewrite_text, type_name

# A column has one type in every table that has it, declared here once; the exception is ``score``:
# float32 where it is a retriever's or the source's score (runs, negatives), float64 for a filter's
# score (decisions), so those tables name its type where they list it.
COLUMN_TYPES: dict[str, pa.DataType] = {
    **dict.fromkeys(
        ("qid", "pid", "title", "text", "source", "fn_label_source", "positive_pid"), pa.string()
    ),
    **dict.fromkeys(("group", "slot", "query", "docid", "decision", "reason", "action"), pa.string()),
    **dict.fromkeys(("has_answer", "excluded", "kept", "fallback", "is_false_negative"), pa.bool_()),
    **dict.fromkeys(
        ("source_score", "similarity", "nce_loss", "threshold", "duplicate_jaccard"), pa.float64()
    ),
    **dict.fromkeys(("positive_similarity", "positive_loss"), pa.float64()),
    "answers": pa.list_(pa.string()),
    "relevance": pa.int32(),
    "rank": pa.int32(),
    "row": pa.int64(),
    "positive_score": pa.float32(),
}

RANKED = ("qid", "pid", "rank")
"""The key of every ranked table: a query, a passage and its 1-based rank."""

FN_LABELS = ("is_false_negative", "fn_label_source")
"""A candidate's false-negative label and where it came from (qrels_all, injected, suspected)."""


def table_schema(*columns: str | tuple[str, pa.DataType]) -> pa.Schema:
    """The schema of these columns, in order: a name takes its type from ``COLUMN_TYPES``, a
    ``(name, type)`` pair its own (``score``)."""
    return pa.schema(
        [column if isinstance(column, tuple) else (column, COLUMN_TYPES[column]) for column in columns]
    )


SCORE_F32, SCORE_F64 = ("score", pa.float32()), ("score", pa.float64())

# ---- canonical data: resources/{dataset}/ -----------------------------------------------------

CORPUS_SCHEMA = table_schema("pid", "title", "text")
"""resources/{dataset}/corpus.parquet: every passage of a dataset."""

QUERIES_SCHEMA = table_schema("qid", "text", "answers")
"""resources/{dataset}/queries.{split}.parquet: the queries of one split and their answer strings."""

QRELS_SCHEMA = table_schema("qid", "pid", "relevance")
"""resources/{dataset}/qrels.{split}.parquet and qrels_all.{split}.parquet: relevance judgements."""

SHIPPED_NEGATIVES_SCHEMA = table_schema(*RANKED, SCORE_F32, "source")
"""resources/{dataset}/negatives.train.parquet: hard negatives that come with the source data."""

# ---- results/{dataset}/ -----------------------------------------------------------------------

RUN_SCHEMA = table_schema(*RANKED, SCORE_F32)
"""{method}/run.{split}.parquet: a retrieval run, the contract between retrievers and the evaluator."""

PER_QUERY_SCHEMA = pa.schema([("qid", pa.string()), ("{metric}", pa.float64())])
"""{method}/per_query.parquet: every evaluated query and its value of each metric of the metrics.json
beside it, one float64 column per metric (``{metric}`` stands for them; ``per_query_schema``);
null where the query is not in that metric's denominator (no qrels)."""


def per_query_schema(metrics: Sequence[str]) -> pa.Schema:
    """The per-query table of these metrics: qid, then one ``PER_QUERY_SCHEMA`` metric column each."""
    qid, column = PER_QUERY_SCHEMA.field("qid"), PER_QUERY_SCHEMA.field("{metric}")
    if not metrics or "qid" in metrics or len(set(metrics)) != len(metrics):
        raise ValueError(f"per-query metrics must be distinct names other than qid, got {list(metrics)}")
    return pa.schema([qid] + [column.with_name(name) for name in metrics])


_MINED = (*RANKED, SCORE_F32, "source", "has_answer", "excluded")
MINED_NEGATIVES_SCHEMA = table_schema(*_MINED)
"""negatives/bm25.parquet and negatives/sieve_b{beta}.train.parquet: the negatives trainers read."""

CANDIDATES_SCHEMA = table_schema(*RANKED, "source_score", "source", "has_answer", *FN_LABELS, "positive_pid")
"""sieve/candidates.parquet: the candidates every false-negative filter judges, with labels."""

SIEVE_SCHEMA = table_schema(
    *RANKED, "source_score", "similarity", "nce_loss", "threshold", "kept", "fallback", *FN_LABELS,
    "positive_pid", "positive_similarity", "positive_loss",
)  # fmt: skip
"""negatives/sieve_b{beta}.parquet and AR2 round{r}/sieve.parquet: the sieve's decision per candidate."""

SIEVE_LOSSES_SCHEMA = table_schema("qid", "pid", "group", "similarity", "nce_loss")
"""sieve/sieve_b{beta}/losses.parquet: Figure 1's NCE losses per passage group."""

FILTER_DECISIONS_SCHEMA = table_schema(*RANKED, "source_score", SCORE_F64, "kept", *FN_LABELS, "positive_pid")
"""sieve/{filter}/decisions.parquet: what a competing filter decided per candidate."""

CLEAN_DECISIONS_SCHEMA = table_schema(
    "row", "slot", "qid", "query", "docid", "text", "pid", "rank", "source_score", SCORE_F64, "similarity",
    "duplicate_jaccard", "decision", "reason", "action", "kept", "fallback", *FN_LABELS,
)  # fmt: skip
"""clean/decisions.parquet: every negative of a cleaned dataset (pipeline.sieve.clean), its verdict."""

AR2_NEGATIVES_SCHEMA = table_schema(*_MINED, "positive_score")
"""ar2/{variant}/seed{seed}/round{r}/negatives.parquet: mined negatives plus the positive's score."""

PASSAGE_IDS_SCHEMA = pa.schema([("pid", pa.string())])
"""*.pids.parquet: the pid of every row of an embedding shard or index part, and of the BM25 index."""

QUERY_IDS_SCHEMA = pa.schema([("qid", pa.string())])
"""*.qids.parquet: the qid of every row of a query-embedding shard (``encode queries``)."""


def ids_schema(id_field: str) -> pa.Schema:
    """The ids table of an embedding shard whose id column is ``id_field`` (pid or qid)."""
    for schema in (PASSAGE_IDS_SCHEMA, QUERY_IDS_SCHEMA):
        if schema.names == [id_field]:
            return schema
    raise ValueError(f"no ids table has the column {id_field!r} (known: pid, qid)")


# ---- the data contract (docs/architecture.md) -------------------------------------------------


@dataclass(frozen=True)
class Table:
    section: str  # which document table lists it: "canonical" or "results"
    path: str  # relative to resources/{dataset}/ or results/{dataset}/
    schema: str  # name of the schema constant in this module
    notes: str


_AR2_ROUND = "ar2/{variant}/seed{seed}/round{r}"

TABLES: tuple[Table, ...] = (
    Table("canonical", "corpus.parquet", "CORPUS_SCHEMA", 'pids unique; title may be ""'),
    Table(
        "canonical",
        "queries.{split}.parquet",
        "QUERIES_SCHEMA",
        "split ∈ train, dev, test; answers may be empty; qids unique",
    ),
    Table("canonical", "qrels.{split}.parquet", "QRELS_SCHEMA", "the annotated positives (relevance ≥ 1)"),
    Table(
        "canonical",
        "qrels_all.{split}.parquet",
        "QRELS_SCHEMA",
        "synthkb only: every passage that states the fact (exact truth)",
    ),
    Table(
        "canonical",
        "negatives.train.parquet",
        "SHIPPED_NEGATIVES_SCHEMA",
        "optional: hard negatives shipped with the data (DPR `hard_negative_ctxs`)",
    ),
    Table(
        "results",
        "negatives/bm25.parquet",
        "MINED_NEGATIVES_SCHEMA",
        "mined BM25 candidates for train queries; answer matches kept, flagged `excluded` "
        "under the DPR recipe",
    ),
    Table(
        "results",
        "sieve/candidates.parquet",
        "CANDIDATES_SCHEMA",
        "sampled candidates with false-negative labels where the truth is known",
    ),
    Table(
        "results",
        "negatives/sieve_b{beta}.parquet",
        "SIEVE_SCHEMA",
        "the sieve's decision for every candidate",
    ),
    Table(
        "results",
        "negatives/sieve_b{beta}.train.parquet",
        "MINED_NEGATIVES_SCHEMA",
        "the kept candidates in the bm25.parquet layout (score = the sieve model's similarity)",
    ),
    Table(
        "results",
        "sieve/sieve_b{beta}/losses.parquet",
        "SIEVE_LOSSES_SCHEMA",
        "Figure 1: NCE loss of the positive, candidates and in-batch negatives",
    ),
    Table(
        "results",
        "sieve/{filter}/decisions.parquet",
        "FILTER_DECISIONS_SCHEMA",
        "a competing filter's decision (and its score) for every candidate",
    ),
    Table(
        "results",
        "clean/decisions.parquet",
        "CLEAN_DECISIONS_SCHEMA",
        "`pipeline.sieve.clean`: each negative of a cleaned dataset (its file row and slot), its score, "
        "decision (kept, dropped, duplicate_of_positive), reason and what was written (action)",
    ),
    Table("results", "{method}/run.{split}.parquet", "RUN_SCHEMA", "a retrieval run; rank is 1-based"),
    Table(
        "results",
        "{method}/seed{seed}/run.{split}.parquet",
        "RUN_SCHEMA",
        "the run of one seed of an AR2 method (its selected round)",
    ),
    Table(
        "results",
        "{method}[/seed{seed}]/per_query.parquet",
        "PER_QUERY_SCHEMA",
        "each evaluated query's value of every metric of the metrics.json beside it (one column per "
        "metric; null: not in its denominator); paired tests over queries read it",
    ),
    Table(
        "results",
        "embeddings/{model}/shard{i}of{n}.pids.parquet",
        "PASSAGE_IDS_SCHEMA",
        "the pid of each row of `shard{i}of{n}.npy`",
    ),
    Table(
        "results",
        "index/{model}/shard{j}of{m}.pids.parquet",
        "PASSAGE_IDS_SCHEMA",
        "the pid of each vector of `shard{j}of{m}.faiss`",
    ),
    Table("results", "bm25/index/pids.parquet", "PASSAGE_IDS_SCHEMA", "the pid of each BM25 document"),
    Table(
        "results",
        f"{_AR2_ROUND}/negatives.parquet",
        "AR2_NEGATIVES_SCHEMA",
        "the round's mined negatives; `positive_score` is the mining retriever's s+",
    ),
    Table(
        "results",
        f"{_AR2_ROUND}/sieve.parquet",
        "SIEVE_SCHEMA",
        "sieve variants: the sieve's decision for every candidate of the round",
    ),
    Table("results", f"{_AR2_ROUND}/run.dev.parquet", "RUN_SCHEMA", "the round's dev run"),
    Table(
        "results",
        f"{_AR2_ROUND}/embeddings/shard{{i}}of{{n}}.pids.parquet",
        "PASSAGE_IDS_SCHEMA",
        "the round retriever's corpus embeddings, as under `embeddings/`",
    ),
    Table(
        "results",
        "{folder}/shard0of1.qids.parquet",
        "QUERY_IDS_SCHEMA",
        "`encode queries`: the qid of each row of a query-embedding shard (no rule writes it)",
    ),
)
SECTIONS = ("canonical", "results")


def schema_names() -> list[str]:
    """Names of every schema constant of this module, in definition order."""
    return [
        name for name, value in globals().items() if name.endswith("_SCHEMA") and isinstance(value, pa.Schema)
    ]


def render_tables(section: str) -> str:
    """The Markdown table of ``section``: one row per file, columns with their Arrow types."""
    if section not in SECTIONS:
        raise ValueError(f"unknown section {section!r} (known: {', '.join(SECTIONS)})")
    lines = ["| path | schema | columns | notes |", "|---|---|---|---|"]
    for table in TABLES:
        if table.section != section:
            continue
        schema = globals()[table.schema]
        columns = ", ".join(f"{field.name} `{type_name(field.type)}`" for field in schema)
        lines.append(f"| `{table.path}` | `{table.schema}` | {columns} | {table.notes} |")
    return "\n".join(lines) + "\n"


# Blank lines around the table: some Markdown renderers need one before a table.
_MARKED = re.compile(r"<!-- schemas:(\w+) -->\n(.*?)<!-- /schemas:\1 -->", re.S)


def marked_sections(text: str) -> dict[str, str]:
    """The table between ``<!-- schemas:S -->`` and ``<!-- /schemas:S -->`` for every section S."""
    return {match.group(1): match.group(2).strip("\n") + "\n" for match in _MARKED.finditer(text)}


def update_document(text: str) -> str:
    """``text`` with every marked section replaced by its rendering."""

    def fill(match: re.Match) -> str:
        section = match.group(1)
        return f"<!-- schemas:{section} -->\n\n{render_tables(section)}\n<!-- /schemas:{section} -->"

    return _MARKED.sub(fill, text)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m pipeline.core.schemas DOC.md  (rewrites its schema tables)", file=sys.stderr)
        return 2
    rewrite_text(args[0], update_document)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

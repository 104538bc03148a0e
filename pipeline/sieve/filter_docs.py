"""The filter table of docs/sieve.md, generated from the filters' own modules (pipeline.sieve.filters)
and their entries of pipeline.sieve.settings.FILTER_CONTRACTS, between ``<!-- filters -->`` and
``<!-- /filters -->``. A new filter's row comes with its module:

    python -m pipeline.sieve.filter_docs docs/sieve.md

tests/test_filter_registry.py fails when the committed table is not what this writes.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from pipeline.core.storage import rewrite_text
from pipeline.sieve.filters import FILTERS
from pipeline.sieve.settings import SIEVE_RULE_KEYS

_MARKED = re.compile(r"<!-- filters -->\n.*?<!-- /filters -->", re.S)


def _settings(name: str) -> str:
    """Where the config sets what filter ``name`` reads."""
    contract = FILTERS[name].contract
    keys = [f"`sieve.{name}`"] if contract.settings is not None else []
    if contract.rule:
        keys += [f"`sieve.{key}`" for key in SIEVE_RULE_KEYS]
    if contract.scorer == "teacher":
        keys.append("`sieve.teacher`")
    return ", ".join(keys)


def filter_table() -> str:
    """Every filter: what makes it drop a candidate, its decisions' score, its settings."""
    rows = [
        f"| `{name}` | {spec.description} | {spec.score} | {_settings(name)} |"
        for name, spec in FILTERS.items()
    ]
    return "\n".join(
        ["| filter | drops a candidate when | score column | config |", "|---|---|---|---|", *rows]
    )


def update_document(text: str) -> str:
    """``text`` with its filter table (between the markers) generated afresh."""
    if not _MARKED.search(text):
        raise ValueError("no <!-- filters --> ... <!-- /filters --> section to write the filter table in")
    return _MARKED.sub(lambda _: f"<!-- filters -->\n\n{filter_table()}\n\n<!-- /filters -->", text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.sieve.filter_docs", description=__doc__)
    parser.add_argument("document", type=Path, help="a Markdown file with a filters section (docs/sieve.md)")
    rewrite_text(parser.parse_args(argv).document, update_document)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

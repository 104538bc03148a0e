"""pipeline.core.schemas is the one home of the Parquet schemas, and docs/architecture.md shows them."""

from __future__ import annotations

import ast
from pathlib import Path

import pyarrow as pa
import pytest

from pipeline.core import schemas

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "architecture.md"
PACKAGE = REPO / "pipeline"


def test_document_tables_are_the_rendered_registry():
    sections = schemas.marked_sections(DOC.read_text(encoding="utf-8"))
    assert sorted(sections) == sorted(schemas.SECTIONS), "docs/architecture.md lacks a schemas marker"
    for section in schemas.SECTIONS:
        assert sections[section] == schemas.render_tables(section), (
            f"docs/architecture.md's {section} table differs from pipeline/core/schemas.py; "
            "run: python -m pipeline.core.schemas docs/architecture.md"
        )


def test_update_document_is_idempotent():
    text = DOC.read_text(encoding="utf-8")
    assert schemas.update_document(text) == text


def test_one_name_per_layout():
    names = schemas.schema_names()
    by_layout: dict[str, list[str]] = {}
    for name in names:
        by_layout.setdefault(str(getattr(schemas, name)), []).append(name)
    shared = [group for group in by_layout.values() if len(group) > 1]
    assert not shared, f"one table layout under several names: {shared}"


def test_registry_names_existing_schemas_and_covers_them_all():
    names = set(schemas.schema_names())
    unknown = sorted({t.schema for t in schemas.TABLES} - names)
    assert not unknown, f"TABLES names schemas that do not exist: {unknown}"
    unlisted = sorted(names - {t.schema for t in schemas.TABLES})
    assert not unlisted, f"schemas no document row shows: {unlisted}"
    paths = [(t.section, t.path) for t in schemas.TABLES]
    assert len(paths) == len(set(paths)), "a path is listed twice"
    assert {t.section for t in schemas.TABLES} <= set(schemas.SECTIONS)


def _schema_definitions(path: Path) -> list[str]:
    """``pa.schema(...)`` calls and ``*_SCHEMA = ...`` assignments in one module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "schema"
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "pa"
        ):
            found.append(f"pa.schema(...) on line {node.lineno}")
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            found += [
                f"{t.id} on line {node.lineno}"
                for t in targets
                if isinstance(t, ast.Name) and t.id.endswith("_SCHEMA")
            ]
    return found


def test_no_schema_is_defined_outside_schemas_module():
    home = PACKAGE / "core" / "schemas.py"
    elsewhere = {
        str(p.relative_to(REPO)): found
        for p in sorted(PACKAGE.rglob("*.py"))
        if p != home and (found := _schema_definitions(p))
    }
    assert not elsewhere, f"schemas defined outside pipeline/core/schemas.py: {elsewhere}"


def test_type_names_follow_pyarrow_factories():
    assert schemas.type_name(pa.float32()) == "float32"
    assert schemas.type_name(pa.float64()) == "float64"
    assert schemas.type_name(pa.list_(pa.string())) == "list<string>"
    assert schemas.type_name(pa.int32()) == "int32"


def test_ids_schema_by_column():
    assert schemas.ids_schema("pid") is schemas.PASSAGE_IDS_SCHEMA
    assert schemas.ids_schema("qid") is schemas.QUERY_IDS_SCHEMA
    with pytest.raises(ValueError, match="docid"):
        schemas.ids_schema("docid")

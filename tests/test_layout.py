"""The package layout shows the architecture: imports go down the family order, never round in a
cycle, and no module shadows the standard library. Read with ``ast``: nothing is
imported, so the test is fast and cannot be fooled by import side effects."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "pipeline"
# The contracts (the settings every stage, the workflow and the docs read) are the bottom layer, each
# family's beside its stages in pipeline/<family>/settings.py and their shared machinery and compositions
# (the whole config, the job documents) in pipeline/core/settings/: they import only each other.
CONTRACTS = "contracts"
FAMILIES = (
    CONTRACTS,
    "core",
    "data",
    "synthkb",
    "retrieval",
    "evaluation",
    "training",
    "sieve",
    "ar2",
    "workflow",
)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES: dict[str, Path] = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _resolve(name: str) -> str | None:
    """The pipeline module an import of ``name`` loads (a package means its __init__)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _type_checking_only(tree: ast.AST) -> set[int]:
    """ids of the nodes under ``if TYPE_CHECKING:``: imports for annotations, never run."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            skipped.update(id(inner) for stmt in node.body for inner in ast.walk(stmt))
    return skipped


def imports_of(module: str, annotations: bool = False) -> set[str]:
    """Every pipeline module ``module`` imports, at the top or inside functions; with
    ``annotations``, also those for type annotations only (``if TYPE_CHECKING:``), which create no
    dependency at run time but a circle all the same for the reader."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    skipped = set() if annotations else _type_checking_only(tree)
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # `from pkg import mod` loads pkg.mod when it is a module, else a name from pkg.
            names = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names
            ]
        else:
            continue
        for name in names:
            if name == "pipeline" or name.startswith("pipeline."):
                target = _resolve(name)
                if target and target != module:
                    found.add(target)
    return found


GRAPH: dict[str, set[str]] = {module: imports_of(module) for module in MODULES}
WITH_ANNOTATIONS: dict[str, set[str]] = {module: imports_of(module, annotations=True) for module in MODULES}


def family(module: str) -> str | None:
    parts = module.split(".")
    if parts[1:3] == ["core", "settings"] or (len(parts) == 3 and parts[2] == "settings"):
        return CONTRACTS
    return parts[1] if len(parts) > 1 else None


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    return cycles


def test_every_module_belongs_to_a_family():
    loose = [m for m in MODULES if m != "pipeline" and family(m) not in FAMILIES]
    assert not loose, (
        f"modules outside the families {FAMILIES} (flat modules directly in pipeline/ "
        f"or an unknown family): {loose}"
    )


def test_no_import_cycles():
    cycles = find_cycles(WITH_ANNOTATIONS)
    assert not cycles, "import cycles between modules: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_imports_go_down_the_family_order():
    rank = {name: i for i, name in enumerate(FAMILIES)}
    upward = sorted(
        f"{module} ({family(module)}) imports {target} ({family(target)})"
        for module, targets in GRAPH.items()
        if family(module) in rank
        for target in targets
        if family(target) not in rank or rank[family(target)] > rank[family(module)]
    )
    assert not upward, (
        "a family may import only itself and the families before it "
        f"({' < '.join(FAMILIES)}):\n" + "\n".join(upward)
    )


def test_no_module_shadows_the_standard_library():
    shadows = sorted(
        m for m, p in MODULES.items() if p.name != "__init__.py" and p.stem in sys.stdlib_module_names
    )
    assert not shadows, f"modules named like a standard-library module: {shadows}"


def test_graph_sees_known_edges():
    # Guards the parser itself: an import inside a function, a relative import, `from pkg import mod`.
    assert "pipeline.retrieval.model" in GRAPH["pipeline.sieve.passage_sieve"]
    assert "pipeline.data.readers.base" in GRAPH["pipeline.data.readers.writer"]
    assert "pipeline.retrieval.embeddings" in GRAPH["pipeline.retrieval.encode"]


@pytest.mark.parametrize(
    "graph, expected",
    [
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
        ({"a": {"b"}, "b": set()}, []),
    ],
)
def test_find_cycles(graph, expected):
    assert find_cycles(graph) == expected

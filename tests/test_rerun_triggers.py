"""A changed setting reruns every rule whose output it changes (issue 14, item 1).

Snakemake reruns a job when its output is missing or when what it recorded at the last run differs:
params (only those that are values or functions of the wildcards: a params function that takes
`input`, `output`, `threads` or `resources` is not recorded), the rule's shell text, the set of
input files. So a setting must reach its rule through one of these, or a changed setting silently
reuses the old output.

The workspace: every output of a DAG that holds every rule, created empty and then recorded by
`snakemake --touch --forceall` (which writes the same metadata as a real run, params included),
nothing trained. Then, per setting in SETTINGS, an overlay changes that one setting and the DAG is
planned as `snakemake -n` plans it (Snakemake's own DAG and needrun reasons, in process: ~0.2 s a
plan instead of ~2.5 s a subprocess). A listed rule must be scheduled *for its own reason* (missing
output, or a changed param, shell text or input set), not only because an upstream job reruns: that
is what catches a rule that reads a setting nobody records. Two subprocess `snakemake -n` runs
check the issue's own scenarios end to end.

SETTINGS has one entry per setting: the leaves of the config contracts (pipeline.core.settings),
the top-level keys and the per-dataset keys of the schema. A setting added there and not here fails
test_every_setting_is_in_the_table.
"""
from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pipeline.core.settings import SECTIONS, TOP_LEVEL_DEFAULTS, defaults
from rerun_settings import (BASE, NO_SETTINGS, NOT_CHANGED, RESOURCES, SETTINGS, TARGETS,
                            USER_NEGATIVES)

REPO = Path(__file__).resolve().parent.parent
SNAKEMAKE = Path(sys.executable).with_name("snakemake")

pytestmark = pytest.mark.slow


def _leaves(data: dict, prefix: str = ""):
    for key, value in data.items():
        if isinstance(value, dict):
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}"


def every_setting() -> set[str]:
    """Dotted names of all settings: the contracts' leaves, the top-level keys and each dataset key."""
    schema = yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())
    names = {f"{section}.{leaf}" for section, cls in SECTIONS.items() for leaf in _leaves(defaults(cls))}
    top = set(schema["properties"]) - set(SECTIONS) - {"datasets"}
    assert set(TOP_LEVEL_DEFAULTS) <= top
    dataset_keys = set(schema["properties"]["datasets"]["additionalProperties"]["properties"])
    synthkb_only = {"entities", "seed", "positive", "fn_share", "fn_paraphrase"}
    declared_only = {"source", "empty_positives"}
    names |= top
    names |= {f"datasets.synthkb.{k}" for k in dataset_keys - declared_only - {"format"}}
    names |= {f"datasets.toy.{k}" for k in dataset_keys - synthkb_only}
    return names


def _set(config: dict, dotted: str, value) -> dict:
    out = copy.deepcopy(config)
    node = out
    *path, last = dotted.split(".")
    for key in path:
        node = node.setdefault(key, {})
    node[last] = value
    return out


def _get(config: dict, dotted: str):
    node = config
    for key in dotted.split("."):
        node = node.get(key) if isinstance(node, dict) else None
    return node


def _write(workdir: Path, name: str, config: dict) -> Path:
    path = workdir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


class Plan:
    """What `snakemake -n TARGETS --configfile overlay` would run, and which rules notice a change.

    ``scheduled``: (rule, reason) of every job to run. ``own``: rules with a job whose output is
    missing or whose recorded params, shell text or input set differ (Snakemake's own checks of the
    default rerun triggers). A dry run stops checking a job once an upstream job reruns it, so
    ``own`` asks the same questions of every job: it tells a rule that records a setting from one
    that reruns only because something upstream does.
    """

    def __init__(self, workdir: Path, overlay: Path, forceall: bool = False):
        from snakemake.api import SnakemakeApi
        from snakemake.settings.types import (ConfigSettings, DAGSettings, OutputSettings,
                                              ResourceSettings)

        cwd = os.getcwd()
        try:
            with SnakemakeApi(OutputSettings()) as api:
                workflow_api = api.workflow(resource_settings=ResourceSettings(cores=2),
                                            config_settings=ConfigSettings(configfiles=[overlay]),
                                            snakefile=REPO / "Snakefile", workdir=workdir)
                workflow_api.dag(dag_settings=DAGSettings(targets=set(TARGETS)))
                workflow = workflow_api._workflow
                workflow._prepare_dag(forceall=forceall, ignore_incomplete=True, lock_warn_only=True,
                                      nolock=True)
                workflow._build_dag()
                dag, records = workflow.dag, workflow.persistence
                self.jobs, needrun = list(dag.jobs), list(dag.needrun_jobs())
                self.scheduled = [(job.rule.name, str(dag.reason(job))) for job in needrun]
                self.own = {job.rule.name for job in self.jobs
                            if (job in needrun and dag.reason(job).missing_output)
                            or records.params_changed(job) or any(records.code_changed(job))
                            or any(records.input_changed(job))}
        finally:
            os.chdir(cwd)

    def describe(self) -> str:
        return "\n".join(sorted({f"  {rule}: {reason[:150]}" for rule, reason in self.scheduled}))


def snakemake_cli(workdir: Path, *args: str, overlay: Path) -> str:
    # Targets go before --configfile: Snakemake 9 reads every later argument as another config file.
    cmd = [str(SNAKEMAKE), *args, "-s", str(REPO / "Snakefile"), "--directory", str(workdir),
           "--cores", "2", "--configfile", str(overlay)]
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
    proc = subprocess.run(cmd, check=False, cwd=workdir, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, f"{' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout + proc.stderr


@pytest.fixture(scope="module", autouse=True)
def schema_read_once():
    """Each plan parses the workflow, which reads the schema twice: read it once here (~0.2 s a plan)."""
    import pipeline.core.config as core_config

    schema = core_config.load_schema()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(core_config, "load_schema", lambda: copy.deepcopy(schema))
        yield


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> tuple[Path, set[str]]:
    """A workdir whose every output exists with recorded metadata; the rules of its DAG."""
    workdir = tmp_path_factory.mktemp("rerun")
    base = _write(workdir, "base", BASE)
    jobs = Plan(workdir, base, forceall=True).jobs
    outputs = [(USER_NEGATIVES, False)] + [(str(f), f.is_directory) for job in jobs for f in job.output]
    for path, is_directory in outputs:
        target = workdir / path
        if is_directory:
            target.mkdir(parents=True, exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.touch()
    snakemake_cli(workdir, "--touch", "--forceall", *TARGETS, "--quiet", "all", overlay=base)
    assert Plan(workdir, base).scheduled == [], "the recorded workspace is not up to date"
    return workdir, {job.rule.name for job in jobs}


# ---- the table covers every setting and every rule -------------------------------------------------

def test_every_setting_is_in_the_table():
    resources = {f"{section}.{name}" for section, cls in SECTIONS.items() for name in RESOURCES
                 if name in defaults(cls)}
    covered = set(SETTINGS) | resources | set(NOT_CHANGED)
    assert sorted(every_setting() - covered) == [], "settings without an entry in SETTINGS"
    assert sorted(covered - every_setting()) == [], "entries that are no setting"


def test_the_workspace_holds_every_rule_and_the_table_every_rule_with_settings(workspace):
    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import OutputSettings, ResourceSettings

    workdir, rules = workspace
    cwd = os.getcwd()
    try:
        with SnakemakeApi(OutputSettings()) as api:
            workflow = api.workflow(resource_settings=ResourceSettings(), snakefile=REPO / "Snakefile",
                                    workdir=workdir)._workflow
            defined = {rule.name for rule in workflow.rules} - {"all"}
    finally:
        os.chdir(cwd)
    assert rules == defined
    listed = {rule for entry in SETTINGS.values() for rule in entry[1]}
    assert sorted(defined - listed - NO_SETTINGS) == [], "rules that no setting is said to rerun"


# ---- each setting reruns its rules -----------------------------------------------------------------

@pytest.fixture(scope="module")
def base_config(workspace) -> dict:
    """config.yaml with BASE over it, defaults filled in: the workspace's settings."""
    from pipeline.core.config import load_config

    return load_config([workspace[0] / "base.yaml"])


@pytest.mark.parametrize("setting", sorted(SETTINGS))
def test_a_changed_setting_reruns_its_rules(workspace, base_config, setting):
    workdir, _ = workspace
    value, rules, *rest = SETTINGS[setting]
    assert value != _get(base_config, setting), f"{setting}: {value!r} is no change; pick another value"
    not_rules = rest[0] if rest else ()
    planned = Plan(workdir, _write(workdir, "overlay", _set(BASE, setting, value)))
    missing = [rule for rule in rules if rule not in planned.own]
    assert not missing, f"{setting} -> {value!r} does not rerun {missing}; planned:\n{planned.describe()}"
    wrong = [rule for rule in not_rules if rule in {rule for rule, _ in planned.scheduled}]
    assert not wrong, f"{setting} -> {value!r} reruns {wrong}; planned:\n{planned.describe()}"


def test_a_trained_ranker_start_records_no_ar2_ranker():
    """ranker_init: cross_encoder takes round 1's ranker from models/cross_encoder: ar2.ranker builds
    nothing, so it is not part of a round's recorded settings (a change of it reruns no round)."""
    from pipeline.ar2.recorded_settings import ar2_recorded_settings
    from pipeline.core.settings import Ar2Settings

    ar2 = defaults(Ar2Settings)
    assert ar2["ranker_init"] == "base" and "ranker" in ar2_recorded_settings(ar2)
    recorded = ar2_recorded_settings({**ar2, "ranker_init": "cross_encoder"})
    assert "ranker" not in recorded and recorded["ranker_init"] == "cross_encoder"
    assert not {"seeds", "select_metric", "threads", "mem_mb", "gpus"} & set(recorded)


def test_resources_rerun_nothing(workspace):
    workdir, _ = workspace
    config = BASE
    for section, cls in SECTIONS.items():
        for name, value in RESOURCES.items():
            if name in defaults(cls):
                config = _set(config, f"{section}.{name}", value)
    planned = Plan(workdir, _write(workdir, "resources", config))
    assert planned.scheduled == [], f"threads/mem_mb/gpus rerun:\n{planned.describe()}"


# ---- the scenarios through the command line ------------------------------------------------

def _reasons(output: str) -> dict[str, list[str]]:
    """rule -> the reason lines of its jobs in a dry run's output."""
    out: dict[str, list[str]] = {}
    for block in re.split(r"\n(?=\[.*\]\n(?:local)?rule )", output):
        rule = re.search(r"^(?:local)?rule (\w+):", block, flags=re.MULTILINE)
        reason = re.search(r"^\s+reason: (.*)$", block, flags=re.MULTILINE)
        if rule and reason:
            out.setdefault(rule.group(1), []).append(reason.group(1))
    return out


@pytest.mark.parametrize("change, rule, untouched", [
    ({"dpr": {"lr": 1e-4}}, "train_dpr", "mine_bm25_negatives"),
    ({"sieve": {"candidates": 20, "pool": 50}}, "sieve_candidates", "train_dpr"),
])
def test_snakemake_dry_run_reruns_the_changed_rule(workspace, change, rule, untouched):
    workdir, _ = workspace
    config = BASE
    for section, values in change.items():
        for key, value in values.items():
            config = _set(config, f"{section}.{key}", value)
    out = snakemake_cli(workdir, "-n", *TARGETS, overlay=_write(workdir, "cli", config))
    reasons = _reasons(out)
    assert "Nothing to be done" not in out
    assert any("Params have changed" in r for r in reasons.get(rule, [])), (rule, reasons.get(rule))
    assert untouched not in reasons, reasons[untouched]

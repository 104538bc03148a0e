"""The workflow's checks of a config, in one place for the Snakefile and the
config check, ``python -m pipeline.workflow.checks overlay.yaml [more.yaml ...]`` (``main``).

``startup_checks`` is what the rules check before the DAG is built (workflow/rules/common.smk: each
config file for a key given twice, the contract, the method names, each dataset's recipe; sieve.smk: the
sieve's source); ``target_problems`` what the rules of the noise sweep and the tournament check when one
of them is asked for. The config check runs both, so a config it calls valid is one `snakemake -n`
accepts, whatever the target.

``flags_after_targets`` is for the Snakefile too: Snakemake reads every word after ``--`` as a target,
so a flag put there (``-- results/d/metrics.json -n``) was "No rule to produce -n".
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Iterable, Sequence

from pipeline.core.cli import stage_parser
from pipeline.core.config import DEFAULT_CONFIG, ConfigError, check_config_files, load_config, validate_config
from pipeline.core.methods import method_table
from pipeline.core.recipes import dataset_configs
from pipeline.core.storage import DataError
from pipeline.workflow.tables import WorkflowTables


def startup_checks(config: dict, configfiles: Iterable[str | os.PathLike] = ()) -> WorkflowTables:
    """Validate ``config`` (in place: defaults filled in) as the workflow does at start-up and return its
    tables; a ConfigError names each problem: keys given twice, the contract, the method names, each
    dataset's recipe, the sieve's source, clean entries that would read their own output."""
    check_config_files(configfiles)  # what Snakemake's reading let pass: a key given twice
    validate_config(config, methods=lambda: method_table(config))  # once defaults are in (reads ccr.beta)
    tables = WorkflowTables(config, dataset_configs(config, methods=method_table))
    from pipeline.workflow.sieve import SieveRules  # the sieve's lookups; not needed to validate

    try:
        SieveRules(tables).check_sources()
        SieveRules(tables).check_clean()
    except ValueError as err:
        raise ConfigError(str(err)) from None
    return tables


def sweep_problems(tables: WorkflowTables) -> list[str]:
    """What the noise sweep's rule refuses (sweep.datasets, methods, pairs, baseline, oracle)."""
    sweep = tables.config["sweep"]
    unknown = [d for d in sweep["datasets"] if d not in tables.synthetic]
    missing = sorted(
        {
            m
            for d in sweep["datasets"]
            if d not in unknown
            for m in sweep["methods"]
            if m not in tables.cfg(d)["methods"]
        }
    )
    unpaired = sorted({m for pair in sweep["pairs"] for m in pair if m not in sweep["methods"]})
    problems = []
    if unknown:
        problems.append(
            f"sweep.datasets: {', '.join(unknown)} not synthkb datasets of `datasets` "
            f"(synthkb datasets: {', '.join(tables.synthetic) or 'none'})"
        )
    if missing:
        problems.append(f"sweep.methods: {', '.join(missing)} not in the methods of every swept dataset")
    if unpaired:
        problems.append(f"sweep.pairs: {', '.join(unpaired)} not among sweep.methods")
    for key in ("baseline", "oracle"):
        if sweep[key] not in sweep["methods"]:
            problems.append(f"sweep.{key}: {sweep[key]!r} is not among sweep.methods")
    return problems


def tournament_problems(tables: WorkflowTables) -> list[str]:
    """What the tournament's rule refuses (levels, contenders, controls)."""
    from pipeline.workflow.evaluation import tournament_settings

    try:
        tournament_settings(tables)
    except (ValueError, DataError) as err:
        return [str(err)]
    return []


def target_problems(tables: WorkflowTables) -> list[str]:
    """The checks of the sweep's and the tournament's rules, for a config that sets them up (a section
    left at its defaults declares no such target)."""
    problems = []
    if tables.config["sweep"]["datasets"]:
        problems += [f"results/sweeps/noise.json would fail: {p}" for p in sweep_problems(tables)]
    if tables.config["tournament"]["levels"] or tables.config["tournament"]["methods"]:
        problems += [f"results/sweeps/tournament.json would fail: {p}" for p in tournament_problems(tables)]
    return problems


def check_workflow_config(config: dict, configfiles: Iterable[str | os.PathLike] = ()) -> WorkflowTables:
    """Every check `snakemake -n` runs on a config, whatever the target; a ConfigError names each problem."""
    tables = startup_checks(config, configfiles)
    problems = target_problems(tables)
    if problems:
        raise ConfigError("; ".join(problems))
    return tables


def flags_after_targets(argv: Sequence[str]) -> str | None:
    """Why a Snakemake command line (``sys.argv``) will fail on a flag after ``--``, else None: every
    word after ``--`` is a target, so ``-n`` there was "No rule to produce -n"."""
    words = list(argv)
    # Only Snakemake's own command line (`snakemake ...`, `python -m snakemake ...`): a Snakefile read
    # in-process by another program (a test runner) sees that program's argv.
    program = Path(words[0]) if words else Path()
    if not (program.name.startswith("snakemake") or program.parent.name == "snakemake"):
        return None
    if "--" not in words:
        return None
    after = words[words.index("--") + 1 :]
    flags = [w for w in after if w.startswith("-") and len(w) > 1]
    if not flags:
        return None
    targets = [w for w in after if w not in flags]
    return (
        f"{' '.join(flags)} after '--': Snakemake reads every word after '--' as a target; put options "
        f"before it (snakemake {' '.join(flags)} ... -- {' '.join(targets) or 'TARGETS'})"
    )


def main(argv: list[str] | None = None) -> int:
    """Check config files before Snakemake reads them."""
    parser = stage_parser("pipeline.workflow.checks", CHECK_HELP)
    parser.add_argument("files", nargs="+", help="config files, in the order given to --configfile")
    args = parser.parse_args(argv)
    try:
        check_workflow_config(load_config(args.files, validate=False), [DEFAULT_CONFIG, *args.files])
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{', '.join(args.files)}: valid (deep-merged over {DEFAULT_CONFIG.name} in this order)")
    return 0


CHECK_HELP = """Check config files as `snakemake --configfile FILE ...` merges them over config.yaml:

    python -m pipeline.workflow.checks overlay.yaml [more.yaml ...]

One line naming the file and what is wrong (exit 2), else one line saying they are valid. For what
Snakemake reads itself before any of this project's code runs: a file that is not UTF-8 is a
traceback there, whose `position` counts from the start of its reader's 8 KiB chunk, not of the file,
and names no file; here it is `<file>: not UTF-8 text (... at byte B: line L, column C)`. The rest
(unknown keys, values out of range, a key given twice, unknown method names, each dataset's recipe, the
sieve's source) `snakemake -n` reports as well; the noise sweep's and the tournament's settings, which
`snakemake -n` checks when their target is asked for, are checked here whenever the config sets them.
"""

if __name__ == "__main__":
    sys.exit(main())

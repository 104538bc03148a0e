"""What a run has cost so far, from Snakemake's benchmark files, and what its plan still holds.

    python -m pipeline.workflow.spent                         # benchmarks/ of this directory
    python -m pipeline.workflow.spent results/sweeps/tournament.json --cores 2 \\
        --configfile config.yaml config/overlays/tournament/tournament_v2.yaml

Every rule writes benchmarks/<rule>/<dataset>.<...>.tsv when a job completes; a job killed before its
end writes none, so work lost to a kill is not counted. Per dataset and rule: jobs, wall hours (each
job's own wall: jobs that ran side by side each count theirs), CPU hours (Snakemake's ``cpu_time``,
user plus system time of the job's processes) and the largest peak RSS; a job that ended before
Snakemake's first measurement (its figures NA) counts in jobs and wall only.

With targets, Snakemake's dry run (no profile: the jobs this directory still lacks) gives the jobs left.
Each is priced at the median CPU time measured for its rule on its dataset, else for its rule on any
dataset; a rule never measured is counted, not priced. The remaining wall on ``--cores`` cores is at
least the CPU hours over the cores (every core busy all the time). CPU time counts what the processes
ran, so a job slowed by another on its cores (threads that spin while they wait) shows more than it
would alone.
"""

from __future__ import annotations

import csv
import statistics
from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from pipeline.core.cli import run_main, stage_parser
from pipeline.core.storage import DataError
from pipeline.workflow.cost import PlannedJob, plan

# Snakemake's benchmark columns this report reads: wall seconds, peak RSS (MB), CPU seconds.
COLUMNS = ("s", "max_rss", "cpu_time")
# What Snakemake writes for memory and CPU when a job ended before its first measurement.
NOT_MEASURED = "NA"
NO_DATASET = "-"


@dataclass(frozen=True)
class Measured:
    rule: str
    dataset: str
    wall_s: float
    cpu_s: float | None  # None: Snakemake wrote NA (the job ended before its first measurement)
    max_rss_mb: float | None


def dataset_of(relative: Path) -> str:
    """The dataset a benchmark file names: the part of its first path component before the first '.'
    (``synthkb.dpr/seed0.tsv``: synthkb); '-' for files not named by a dataset (downloads)."""
    first = relative.parts[0]
    if len(relative.parts) == 1:
        return first.split(".", 1)[0]
    return first.split(".", 1)[0] if "." in first else NO_DATASET


def _number(row: dict, column: str, path: Path) -> float | None:
    value = row.get(column)
    if value == NOT_MEASURED and column != "s":
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise DataError(f"{value!r} is not a number", file=path, record=1, field=column) from None
    if number != number or number < 0:
        raise DataError(f"{value!r} is not a non-negative number", file=path, record=1, field=column)
    return number


def read_benchmark(path: Path, rule: str, dataset: str) -> Measured:
    """One job's figures: the first row of its benchmark file (Snakemake writes one per repeat)."""
    with path.open(newline="") as handle:
        rows = csv.DictReader(handle, delimiter="\t")
        missing = [c for c in COLUMNS if c not in (rows.fieldnames or [])]
        if missing:
            raise DataError("not a Snakemake benchmark file", file=path, field=missing[0])
        first = next(rows, None)
    if first is None:
        raise DataError("no row after the header", file=path, record=1)
    wall, rss, cpu = (_number(first, column, path) for column in COLUMNS)
    return Measured(rule, dataset, wall, cpu, rss)


def read_benchmarks(root: str | Path, skip: Collection[str] = ()) -> list[Measured]:
    """Every job's figures under ``root`` (benchmarks/<rule>/...tsv), in path order, but for the files
    ``skip`` names (relative to ``root``: those measured before a campaign block started)."""
    root = Path(root)
    if not root.parent.is_dir():
        raise DataError("no such workflow directory", file=root.parent)
    if not root.is_dir():  # a clone where no job has completed yet
        return []
    found = []
    for path in sorted(root.rglob("*.tsv")):
        relative = path.relative_to(root)
        if str(relative) in skip:
            continue
        if len(relative.parts) < 2:
            raise DataError("a benchmark file outside a rule's folder", file=path)
        found.append(read_benchmark(path, relative.parts[0], dataset_of(Path(*relative.parts[1:]))))
    return found


@dataclass
class Spent:
    jobs: int = 0
    wall_h: float = 0.0
    cpu_h: float = 0.0
    max_rss_mb: float = 0.0
    # jobs whose CPU time Snakemake did not measure (NA): in jobs and wall, not in CPU hours
    unmeasured: int = 0

    def add(self, m: Measured) -> None:
        self.jobs += 1
        self.wall_h += m.wall_s / 3600
        if m.cpu_s is None:
            self.unmeasured += 1
        else:
            self.cpu_h += m.cpu_s / 3600
        self.max_rss_mb = max(self.max_rss_mb, m.max_rss_mb or 0.0)


def spent_by(measured: list[Measured], key: str) -> dict[str, Spent]:
    """Totals per ``key`` ('dataset' or 'rule'), largest CPU first."""
    out: dict[str, Spent] = defaultdict(Spent)
    for m in measured:
        out[getattr(m, key)].add(m)
    return dict(sorted(out.items(), key=lambda kv: (-kv[1].cpu_h, kv[0])))


@dataclass
class Remaining:
    jobs: int = 0
    priced: int = 0
    cpu_h: float = 0.0


def planned_key(job: PlannedJob) -> tuple[str, str]:
    """(benchmark folder, dataset) of a planned job, as its benchmark file will name them; a rule
    without a benchmark file by its rule name. A rule's per-seed twin writes into the rule's folder
    (train_dpr_filtered_seed into benchmarks/train_dpr_filtered/), so both are priced as one."""
    parts = Path(job.benchmark).parts if job.benchmark else ()
    if len(parts) < 3 or parts[0] != "benchmarks":
        return job.rule, job.wildcards.get("dataset", NO_DATASET)
    return parts[1], dataset_of(Path(*parts[2:]))


def remaining(jobs: list[PlannedJob], measured: list[Measured]) -> dict[str, Remaining]:
    """Per rule (benchmark folder): the jobs left and their CPU hours at the measured medians (the
    rule on the job's dataset, else the rule on any dataset)."""
    samples: dict[tuple[str, str | None], list[float]] = defaultdict(list)
    for m in measured:
        if m.cpu_s is not None:
            samples[(m.rule, m.dataset)].append(m.cpu_s)
            samples[(m.rule, None)].append(m.cpu_s)
    median_h = {key: statistics.median(values) / 3600 for key, values in samples.items()}
    out: dict[str, Remaining] = defaultdict(Remaining)
    for job in jobs:
        rule, dataset = planned_key(job)
        left = out[rule]
        left.jobs += 1
        hours = median_h.get((rule, dataset), median_h.get((rule, None)))
        if hours is not None:
            left.priced += 1
            left.cpu_h += hours
    return dict(sorted(out.items(), key=lambda kv: (-kv[1].cpu_h, kv[0])))


def _spent_table(title: str, rows: dict[str, Spent]) -> list[str]:
    total = Spent()
    lines = [f"| {title} | jobs | wall h | CPU h | peak RSS MB |", "|---|---:|---:|---:|---:|"]
    for name, s in rows.items():
        lines.append(f"| {name} | {s.jobs:,} | {s.wall_h:.2f} | {s.cpu_h:.2f} | {s.max_rss_mb:,.0f} |")
        total.jobs += s.jobs
        total.wall_h += s.wall_h
        total.cpu_h += s.cpu_h
        total.max_rss_mb = max(total.max_rss_mb, s.max_rss_mb)
        total.unmeasured += s.unmeasured
    lines.append(
        f"| **all** | {total.jobs:,} | {total.wall_h:.2f} | {total.cpu_h:.2f} | {total.max_rss_mb:,.0f} |"
    )
    if total.unmeasured:
        lines.append(
            f"\n{total.unmeasured:,} job(s) ended before Snakemake's first measurement (NA): counted in "
            "jobs and wall, not in CPU hours or RSS."
        )
    return lines


def report(measured: list[Measured], left: dict[str, Remaining] | None = None, cores: int = 1) -> str:
    lines = ["## Spent (completed jobs' benchmark files)", ""]
    if not measured:
        lines.append("No benchmark file yet: no job has completed here.")
    lines += _spent_table("dataset", spent_by(measured, "dataset")) + [""]
    lines += _spent_table("rule", spent_by(measured, "rule"))
    if left is None:
        return "\n".join(lines)
    jobs = sum(r.jobs for r in left.values())
    cpu_h = sum(r.cpu_h for r in left.values())
    unpriced = {rule: r.jobs - r.priced for rule, r in left.items() if r.jobs > r.priced}
    lines += ["", "## Left (Snakemake's dry run, priced at the measured medians)", ""]
    lines += ["| rule | jobs | priced | CPU h |", "|---|---:|---:|---:|"]
    lines += [f"| {rule} | {r.jobs:,} | {r.priced:,} | {r.cpu_h:.2f} |" for rule, r in left.items()]
    lines += [
        "",
        f"{jobs:,} jobs left, {cpu_h:.1f} CPU hours at the medians: at least {cpu_h / cores:.1f} h "
        f"of wall on {cores} core{'s' if cores != 1 else ''}.",
    ]
    if unpriced:
        names = ", ".join(f"{rule} ({n:,})" for rule, n in sorted(unpriced.items()))
        lines.append(f"Not priced (no job of the rule measured yet): {names}.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = stage_parser("pipeline.workflow.spent", __doc__)
    ap.add_argument("targets", nargs="*", help="Snakemake targets whose remaining jobs are priced")
    ap.add_argument("--directory", default=".", help="the workflow's directory (default: this one)")
    ap.add_argument("--configfile", nargs="*", default=[], help="config files, as given to snakemake")
    ap.add_argument("--cores", type=int, default=1, help="cores the rest runs on (the wall's lower bound)")
    args = ap.parse_args(argv)
    if args.cores < 1:
        ap.error("--cores is 1 or more")
    directory = Path(args.directory).resolve()
    measured = read_benchmarks(directory / "benchmarks")
    left = None
    if args.targets:
        overlays = [str(Path(f).resolve()) for f in args.configfile]
        left = remaining(plan(args.targets, overlays, profile=None, directory=directory), measured)
    print(report(measured, left, args.cores))
    return 0


if __name__ == "__main__":
    run_main(main)

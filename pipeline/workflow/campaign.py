"""A run too long for one sitting, done in blocks whose results outlive the machine.

    python -m pipeline.workflow.campaign status --archive docs/data/tournament/v2 \\
        --configfile config.yaml config/overlays/tournament/tournament_v2.yaml
    python -m pipeline.workflow.campaign run synthkb_fn30_p50 0 --directory /scratch/t --archive ... --configfile ...
    python -m pipeline.workflow.campaign restore --directory /scratch/t --archive ...
    python -m pipeline.workflow.campaign preview --directory /scratch/t --archive ... --out ... --configfile ...

The tournament is thousands of jobs; a machine that is wiped between sittings keeps none of a
Snakemake directory, and resuming one is no help anyway: a shared input rebuilt for the work left
(the level's data, its scorer) reruns every job downstream of it. So the run is cut into blocks, one
level and one training seed each, every one run whole in one sitting on one machine: Snakemake builds
what the block's files need, in a fresh directory, and ``save`` copies those files into the archive,
a folder of the repository. A block's files are what the level's tables read of that seed: each run's
metrics.json and per-query values (a seed-free run, BM25 or zero-shot, and each filter's detection
report go with the level's first seed), and each model selection's record. Nothing else: the models,
embeddings and indexes stay behind, so the archive is megabytes, not gigabytes.

``restore`` puts every archived file back into a directory; Snakemake then runs no job whose output is
there, and builds only what is missing: once every block is archived, the level's gathering, its
seed means and the tournament's tables, in minutes. A restored file that differs from what the
directory already holds stops the restore. Before that, ``preview`` builds the tournament's tables over
the levels with two or more archived seeds, each with the seeds it has, from the archive alone (it
refuses to run anything but the seeds' means and the gatherings); such a table decides nothing.

Each block runs whole on one machine, so the paired differences the tables test (a contender against
``dpr_none`` within a seed) never mix machines; the seeds do, as they come from whatever machine each
sitting gets, in its native precision (bf16 where the CPU has it, else fp32: pinning fp32 would double
the cost on two of the three CPU kinds seen here). That spread between seeds is part of what the
intervals over seeds measure. Each block records its machine, the precision its trainings report,
its jobs and CPU hours, and the checksums of the level's tables and negatives it trained on:
``status`` says where the blocks of a level were computed on different inputs (a filter's decisions
rebuilt on another CPU).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from pipeline.core.cli import run_main, stage_parser
from pipeline.core.cpu_features import NATIVE_BF16_ENV, NATIVE_BF16_FLAGS, cpu_flags, cpu_model_name
from pipeline.core.storage import DataError, atomic_path, file_sha256, write_json
from pipeline.workflow.evaluation import (
    EvaluationRules,
    tournament_detections,
    tournament_selections,
    tournament_settings,
)
from pipeline.workflow.paths import method_metrics, per_query, trec_qrels, trec_run
from pipeline.workflow.spent import read_benchmarks
from pipeline.workflow.tables import WorkflowTables

BLOCKS = "blocks"  # the archive's folder of block records, beside its copy of results/
# What a level's seeds must share, checksummed in each block: its prepared tables and the negatives
# every (filtered) training reads.
SHARED_INPUTS = ("resources/{dataset}/*.parquet", "results/{dataset}/negatives/*.parquet")


@dataclass(frozen=True)
class Block:
    dataset: str
    seed: int
    targets: tuple[str, ...]  # Snakemake's targets, relative to the workflow directory
    beside: tuple[str, ...] = ()  # kept too: written by a target's job beside it (a selection's record)

    @property
    def name(self) -> str:
        return f"{self.dataset}.seed{self.seed}"

    @property
    def files(self) -> tuple[str, ...]:
        return self.targets + self.beside


def level_blocks(w: WorkflowTables, dataset: str) -> list[Block]:
    """One block per training seed of ``dataset``: what the level's gathering reads of that seed (each
    run's metrics.json and per-query values, and its TREC run where eval.trec_export asks for them)
    and each tournament model selection's record of that seed. A seed-free run (BM25, zero-shot), the
    TREC judgements and each tournament contender's detection report go in the first seed's block."""
    seeds = w.training_seeds(dataset)
    files: dict[int, list[str]] = {seed: [] for seed in seeds}
    beside: dict[int, list[str]] = {seed: [] for seed in seeds}
    trec, split = w.config["eval"]["trec_export"], w.eval_split(dataset)
    if trec:
        judged = ["qrels", "qrels_all"] if dataset in w.synthetic else ["qrels"]
        files[seeds[0]] += [trec_qrels(dataset, split, j) for j in judged]
    rules = EvaluationRules(w)
    for run, seed in dict.fromkeys((w.run_of(dataset, m), s) for m, s, _ in rules.query_values(dataset)):
        files[seeds[0] if seed is None else seed] += [
            method_metrics(dataset, run, seed),
            per_query(dataset, run, seed),
            *([trec_run(dataset, run, split, seed)] if trec else []),
        ]
    if dataset in w.config.get("tournament", {}).get("levels", {}):
        files[seeds[0]] += [report for d, _, _, report in tournament_detections(w) if d == dataset]
        for d, _, seed, done, record in tournament_selections(w):
            if d == dataset:
                files[seed].append(done)
                beside[seed].append(record)
    return [Block(dataset, seed, tuple(dict.fromkeys(files[seed])), tuple(beside[seed])) for seed in seeds]


def campaign_blocks(w: WorkflowTables, datasets: list[str]) -> list[Block]:
    unknown = [d for d in datasets if d not in w.datasets]
    if unknown:
        raise DataError(
            f"campaign: {', '.join(unknown)} not a dataset of the config (declared: {sorted(w.datasets)})"
        )
    return [block for d in datasets for block in level_blocks(w, d)]


def next_block(blocks: list[Block], records: dict[str, dict]) -> Block | None:
    """The first block not archived, seed by seed: every level's first seed before any level's second,
    so that every level's means arrive before any level has all its seeds (levels in their order)."""
    place: dict[str, int] = {}  # a block's place among its level's seeds
    seen: dict[str, int] = {}
    for block in blocks:
        place[block.name] = seen.get(block.dataset, 0)
        seen[block.dataset] = place[block.name] + 1
    ranked = sorted(blocks, key=lambda b: place[b.name])  # stable: the levels keep their order
    return next((b for b in ranked if b.name not in records), None)


def find_block(blocks: list[Block], dataset: str, seed: int) -> Block:
    for block in blocks:
        if (block.dataset, block.seed) == (dataset, seed):
            return block
    seeds = sorted({b.seed for b in blocks if b.dataset == dataset})
    where = f"its seeds are {seeds}" if seeds else f"the datasets are {sorted({b.dataset for b in blocks})}"
    raise DataError(f"campaign: no block {dataset} seed {seed} ({where})")


# ---- the record of a block ---------------------------------------------------------------------------


def record_path(archive: Path, block: Block) -> Path:
    return archive / BLOCKS / f"{block.name}.json"


def machine() -> dict:
    """The CPU a block ran on, as lscpu names it, and whether it computes bf16 natively."""
    flags = cpu_flags() or set()
    return {
        "cpu": cpu_model_name() or platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "native_bf16": sorted(f for f in NATIVE_BF16_FLAGS if f in flags),
        "python": platform.python_version(),
    }


def trained_precisions(directory: Path, dataset: str) -> list[str]:
    """The precisions the dataset's trainings computed in (train_info.json's summary)."""
    found = set()
    for info in sorted((directory / "results" / dataset / "models").glob("*/train_info.json")):
        found.add(json.loads(info.read_text(encoding="utf-8"))["summary"]["compute_precision"])
    return sorted(found)


def shared_inputs(directory: Path, dataset: str) -> dict[str, str]:
    """sha256 of each table the level's seeds share (SHARED_INPUTS) that this directory holds."""
    return {
        str(path.relative_to(directory)): file_sha256(path)
        for pattern in SHARED_INPUTS
        for path in sorted(directory.glob(pattern.format(dataset=dataset)))
    }


def save(
    block: Block,
    directory: Path,
    archive: Path,
    commit: str,
    benchmarks_before: set[str] | None = None,
    wall_s: float | None = None,
) -> dict:
    """Copy the block's files from ``directory`` into ``archive`` (same relative paths) and write its
    record last, so that an archived record means a whole block. A missing file means the block did
    not finish: nothing is copied. A file the archive already holds with other content (another
    block's run of a seed-free method, say) stops the save before anything is copied."""
    missing = [f for f in block.files if not (directory / f).is_file()]
    if missing:
        raise DataError(
            f"campaign: block {block.name} is not complete in {directory}: {len(missing)} of its "
            f"{len(block.files)} files are missing, e.g. {missing[0]}"
        )
    digests = {f: file_sha256(directory / f) for f in block.files}
    # A file no record names is a save's leftover (killed before its record): it is overwritten.
    kept_by = {f: name for name, r in read_records(archive).items() for f in r["files"]}
    for f, digest in digests.items():
        kept = archive / f
        if f in kept_by and kept.exists() and file_sha256(kept) != digest:
            raise DataError(
                f"campaign: {kept} already holds other content than {directory / f} (block "
                f"{block.name}; the archive keeps it for block {kept_by[f]})"
            )
    for f in block.files:
        with atomic_path(archive / f) as tmp:
            shutil.copyfile(directory / f, tmp)
    measured = [
        m
        for m in read_benchmarks(directory / "benchmarks", benchmarks_before or ())
        if m.dataset == block.dataset
    ]
    record = {
        "dataset": block.dataset,
        "seed": block.seed,
        "saved": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "commit": commit,
        "machine": machine(),
        "env": {NATIVE_BF16_ENV: os.environ.get(NATIVE_BF16_ENV)},
        "trained_in": trained_precisions(directory, block.dataset),
        "jobs": len(measured),
        "cpu_hours": round(sum(m.cpu_s or 0.0 for m in measured) / 3600, 3),
        "wall_hours": None if wall_s is None else round(wall_s / 3600, 3),
        "shared_inputs": shared_inputs(directory, block.dataset),
        "files": digests,
    }
    write_json(record_path(archive, block), record)
    return record


def benchmark_files(directory: Path) -> set[str]:
    root = directory / "benchmarks"
    return {str(p.relative_to(root)) for p in root.rglob("*.tsv")} if root.is_dir() else set()


def read_records(archive: Path) -> dict[str, dict]:
    return {
        path.stem: json.loads(path.read_text(encoding="utf-8"))
        for path in sorted((archive / BLOCKS).glob("*.json"))
    }


def restore(archive: Path, directory: Path) -> int:
    """Copy every archived block's files into ``directory``, each checked against its record's
    sha256; a file already there with other content stops the restore before anything is copied. All
    get one modification time, so no restored file is newer than another (Snakemake would rerun a job
    whose input is newer than its output)."""
    records = read_records(archive)
    files: dict[str, str] = {}
    for name, record in records.items():
        for f, digest in record["files"].items():
            if files.setdefault(f, digest) != digest:
                raise DataError(f"campaign: {f} has two contents in {archive / BLOCKS} (block {name})")
    for f, digest in files.items():
        kept = archive / f
        if not kept.is_file() or file_sha256(kept) != digest:
            raise DataError(f"campaign: {kept} is missing or differs from its block record's sha256")
        there = directory / f
        if there.exists() and file_sha256(there) != digest:
            raise DataError(
                f"campaign: {there} already holds other content than {kept}; restore into a fresh directory"
            )
    now = time.time()
    for f in files:
        (directory / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(archive / f, directory / f)
        os.utime(directory / f, (now, now))
    return len(files)


# ---- status -------------------------------------------------------------------------------------------


def status(blocks: list[Block], records: dict[str, dict]) -> str:
    lines = [
        "| level | seed | archived | machine | trained in | jobs | CPU h |",
        "|---|---:|---|---|---|---:|---:|",
    ]
    done = 0
    cpu = 0.0
    for block in blocks:
        record = records.get(block.name)
        if record is None:
            lines.append(f"| {block.dataset} | {block.seed} | no | | | | |")
            continue
        done += 1
        cpu += record["cpu_hours"]
        m = record["machine"]
        bf16 = f" ({', '.join(m['native_bf16'])})" if m["native_bf16"] else ""
        lines.append(
            f"| {block.dataset} | {block.seed} | {record['saved'][:10]} at {record['commit'][:7]} | "
            f"{m['cpu']}{bf16}, {m['cores']} cores | {', '.join(record['trained_in']) or '-'} | "
            f"{record['jobs']} | {record['cpu_hours']:.2f} |"
        )
    lines += ["", f"{done} of {len(blocks)} blocks archived, {cpu:.1f} CPU hours."]
    left = remaining_cpu(blocks, records)
    if left is not None:
        lines.append(
            f"Left: {len(blocks) - done} blocks, ~{left:.0f} CPU hours at the archived blocks' median "
            "(a level's first seed and its others apart: the first also runs BM25, zero-shot and the reports)."
        )
    lines += disagreements(blocks, records)
    return "\n".join(lines)


def remaining_cpu(blocks: list[Block], records: dict[str, dict]) -> float | None:
    """The blocks not archived, each priced at the median CPU hours of the archived blocks of its kind
    (a level's first seed, or another; the other kind's median where one kind has none yet); None
    before any block is archived."""
    first = {b.name for b in blocks if b.seed == min(x.seed for x in blocks if x.dataset == b.dataset)}
    kinds: dict[bool, list[float]] = {True: [], False: []}
    for b in blocks:
        if b.name in records:
            kinds[b.name in first].append(records[b.name]["cpu_hours"])
    if not kinds[True] and not kinds[False]:
        return None
    median = {k: statistics.median(v or kinds[not k]) for k, v in kinds.items()}
    return sum(median[b.name in first] for b in blocks if b.name not in records)


def disagreements(blocks: list[Block], records: dict[str, dict]) -> list[str]:
    """A line per level whose archived blocks trained on different shared inputs."""
    out = []
    for dataset in dict.fromkeys(b.dataset for b in blocks):
        seen: dict[str, dict[str, list[int]]] = {}
        for b in blocks:
            record = records.get(b.name)
            if b.dataset != dataset or record is None:
                continue
            for f, digest in record["shared_inputs"].items():
                seen.setdefault(f, {}).setdefault(digest, []).append(b.seed)
        differ = sorted(f for f, digests in seen.items() if len(digests) > 1)
        if differ:
            out.append(f"{dataset}: the seeds trained on different {', '.join(differ)}")
    return out


def snakemake_command(cores: int, configfiles: list[str]) -> list[str]:
    """This environment's Snakemake (beside its Python) with the campaign's config files."""
    return [
        str(Path(sys.executable).with_name("snakemake")),
        "--cores",
        str(cores),
        "--configfile",
        *configfiles,
    ]


# ---- a preview from the blocks archived so far ---------------------------------------------------------

# What Snakemake may run in a restored directory for a preview: the seeds' means and each level's
# gathering. Anything else means the archive lacks a file the tables read (a training would follow).
PREVIEW_RULES = frozenset({"dense_seeds", "gather_metrics"})
PREVIEW_MIN_SEEDS = 2  # a paired interval over seeds needs two


def archived_seeds(blocks: list[Block], records: dict[str, dict]) -> dict[str, list[int]]:
    """dataset -> the seeds of its archived blocks, levels in the campaign's order."""
    seeds: dict[str, list[int]] = {}
    for block in blocks:
        if block.name in records:
            seeds.setdefault(block.dataset, []).append(block.seed)
    return seeds


def planned_rules(output: str) -> dict[str, int]:
    """rule -> job count from the job-stats table of Snakemake's dry run (``-n --quiet rules``)."""
    counts: dict[str, int] = {}
    for line in output.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit() and parts[0] not in ("total", "job"):
            counts[parts[0]] = int(parts[1])
    return counts


def preview(
    w: WorkflowTables,
    blocks: list[Block],
    archive: Path,
    directory: Path,
    configfiles: list[str],
    out: Path,
    cores: int,
) -> list[str]:
    """The tournament's tables over the levels with at least two archived seeds, from the archive alone:
    restore it into ``directory`` (a checkout), have Snakemake gather those levels with their archived
    seeds (a config overlay written to ``out``; nothing but seed means and gatherings may run), then
    the tournament (those levels alone, so it decides nothing) and the selections' table into ``out``.
    Returns the levels previewed."""
    from pipeline.evaluation import selections, tournament

    records = read_records(archive)
    seeds = archived_seeds(blocks, records)
    levels = [d for d in w.config["tournament"]["levels"] if len(seeds.get(d, ())) >= PREVIEW_MIN_SEEDS]
    if not levels:
        raise DataError(
            f"campaign preview: no level has {PREVIEW_MIN_SEEDS} archived seeds yet (archived: "
            + (", ".join(f"{d} {s}" for d, s in seeds.items()) or "none")
            + ")"
        )
    if not (directory / "Snakefile").is_file():
        raise DataError(f"campaign preview: {directory} is not a checkout (no Snakefile)")
    restore(archive, directory)
    out.mkdir(parents=True, exist_ok=True)
    overlay = out / "preview_seeds.yaml"
    write_json(overlay, {"datasets": {d: {"seeds": seeds[d]} for d in levels}})  # JSON is YAML
    configs = [*configfiles, str(overlay.resolve())]
    targets = [f"results/{d}/metrics.json" for d in levels]
    snakemake = snakemake_command(cores, configs)
    dry = subprocess.run(
        [*snakemake, "-n", "--quiet", "rules", "--", *targets], cwd=directory, capture_output=True, text=True
    )
    if dry.returncode != 0:
        raise DataError(f"campaign preview: snakemake -n failed in {directory}: {dry.stderr.strip()[-1500:]}")
    other = {r: n for r, n in planned_rules(dry.stdout + dry.stderr).items() if r not in PREVIEW_RULES}
    if other:
        raise DataError(
            "campaign preview: the archive lacks files the tables read: Snakemake would run "
            + ", ".join(f"{n} {r}" for r, n in sorted(other.items()))
            + f" in {directory} (a preview runs only {', '.join(sorted(PREVIEW_RULES))})"
        )
    done = subprocess.run([*snakemake, "--", *targets], cwd=directory)
    if done.returncode != 0:
        raise DataError(f"campaign preview: snakemake exited {done.returncode} in {directory}")

    # paths as given from here, so the tables record "../preview/results/..." rather than this machine's
    def there(path: str) -> str:
        return os.path.relpath(directory / path)

    gathered = [f"{d}={there(f'results/{d}/metrics.json')}" for d in levels]
    section = json.loads(tournament_settings(w))
    detections = [f"{d}:{m}:{a}={there(r)}" for d, m, a, r in tournament_detections(w) if d in levels]
    tournament.main(
        [
            "--settings",
            json.dumps(section),
            "--metrics",
            *gathered,
            "--levels",
            *levels,
            "--detections",
            *detections,
            *_outputs(out, "tournament_preview", ("json", "md", "png")),
        ]
    )
    chosen = [
        f"{d}:{m}:{s}={there(record)}"
        for d, m, s, _, record in tournament_selections(w)
        if d in levels and s in seeds[d]
    ]
    if chosen:
        section["levels"] = {d: lv for d, lv in section["levels"].items() if d in levels}
        selections.main(
            [
                "--settings",
                json.dumps(section),
                "--selections",
                *chosen,
                "--metrics",
                *gathered,
                *_outputs(out, "tournament_selections_preview", ("json", "md")),
            ]
        )
    return levels


def _outputs(out: Path, stem: str, kinds: tuple[str, ...]) -> list[str]:
    return [arg for kind in kinds for arg in (f"--out-{kind}", str(out / f"{stem}.{kind}"))]


# ---- the command ----------------------------------------------------------------------------------------


def tables_of(configfiles: list[str]) -> WorkflowTables:
    from pipeline.core.config import load_config
    from pipeline.workflow.checks import startup_checks

    config = load_config(configfiles, validate=False)
    return startup_checks(config, configfiles)


def git_commit(directory: Path) -> str:
    done = subprocess.run(["git", "-C", str(directory), "rev-parse", "HEAD"], capture_output=True, text=True)
    if done.returncode != 0:
        raise DataError(f"campaign: {directory} is not a git checkout: a block records the commit it ran at")
    return done.stdout.strip()


def check_commit(records: dict[str, dict], commit: str) -> None:
    """Every block of an archive runs at one commit: code that changed between blocks could have
    changed what a block computes, and the tables would mix the two without saying so."""
    others = sorted({r["commit"] for r in records.values()} - {commit})
    if others:
        raise DataError(
            f"campaign: the archive's blocks ran at {', '.join(c[:12] for c in others)}; this directory "
            f"is at {commit[:12]}: check out the campaign's commit there (or start a new archive)"
        )


def run_block(block: Block, directory: Path, archive: Path, configfiles: list[str], cores: int) -> dict:
    """Snakemake builds the block's files in ``directory`` (a checkout at the archive's commit), then
    save(); a failed build archives nothing."""
    commit = git_commit(directory)
    check_commit(read_records(archive), commit)
    cmd = [*snakemake_command(cores, configfiles), "--", *block.targets]
    before = benchmark_files(directory)
    start = time.monotonic()
    done = subprocess.run(cmd, cwd=directory)
    if done.returncode != 0:
        raise DataError(
            f"campaign: block {block.name}: snakemake exited {done.returncode} in {directory}; nothing archived"
        )
    return save(block, directory, archive, commit, before, time.monotonic() - start)


def main(argv: list[str] | None = None) -> int:
    ap = stage_parser("pipeline.workflow.campaign", __doc__)
    config = argparse.ArgumentParser(add_help=False)
    config.add_argument("--configfile", nargs="+", required=True, help="config files, as given to snakemake")
    config.add_argument("--datasets", nargs="+", help="the levels (default: the config's tournament.levels)")
    block = argparse.ArgumentParser(add_help=False)
    block.add_argument("dataset")
    block.add_argument("seed", type=int)
    where = argparse.ArgumentParser(add_help=False)
    where.add_argument("--directory", required=True, help="the workflow directory (a checkout)")
    where.add_argument("--archive", required=True, help="the archive folder (in the repository)")
    sub = ap.add_subparsers(dest="command", required=True)
    st = sub.add_parser("status", parents=[config], help="which blocks are archived, where, at what cost")
    st.add_argument("--archive", required=True, help="the archive folder")
    nx = sub.add_parser("next", parents=[config], help="the next block to run: '<dataset> <seed>'")
    nx.add_argument("--archive", required=True, help="the archive folder")
    sub.add_parser("targets", parents=[block, config], help="a block's files, one a line (Snakemake targets)")
    sub.add_parser("save", parents=[block, where, config], help="archive a block a directory has built")
    rn = sub.add_parser("run", parents=[block, where, config], help="build a block, then archive it")
    rn.add_argument("--cores", type=int, default=os.cpu_count() or 1)
    sub.add_parser("restore", parents=[where], help="put every archived file back into a directory")
    pv = sub.add_parser(
        "preview",
        parents=[where, config],
        help="the tournament's tables over the levels with two or more archived seeds (decides nothing)",
    )
    pv.add_argument("--out", required=True, help="folder of the preview's tables")
    pv.add_argument("--cores", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args(argv)

    if args.command == "restore":
        count = restore(Path(args.archive), Path(args.directory))
        print(f"restored {count} files into {args.directory}")
        return 0
    w = tables_of(args.configfile)
    datasets = args.datasets or list(w.config.get("tournament", {}).get("levels", {}))
    if not datasets:
        ap.error("no levels: the config has no tournament.levels; name them with --datasets")
    blocks = campaign_blocks(w, datasets)
    if args.command == "status":
        print(status(blocks, read_records(Path(args.archive))))
        return 0
    if args.command == "next":
        pending = next_block(blocks, read_records(Path(args.archive)))
        if pending is None:
            print("every block is archived", file=sys.stderr)
            return 1
        print(pending.dataset, pending.seed)
        return 0
    if args.command == "preview":
        configfiles = [str(Path(f).resolve()) for f in args.configfile]
        levels = preview(
            w,
            blocks,
            Path(args.archive).resolve(),
            Path(args.directory).resolve(),
            configfiles,
            Path(args.out).resolve(),
            args.cores,
        )
        print(f"previewed {', '.join(levels)} -> {args.out}")
        return 0
    block = find_block(blocks, args.dataset, args.seed)
    if args.command == "targets":
        print("\n".join(block.targets))
        return 0
    directory, archive = Path(args.directory).resolve(), Path(args.archive).resolve()
    if args.command == "save":
        commit = git_commit(directory)
        check_commit(read_records(archive), commit)
        record = save(block, directory, archive, commit)
    else:
        configfiles = [str(Path(f).resolve()) for f in args.configfile]
        record = run_block(block, directory, archive, configfiles, args.cores)
    print(
        f"archived {block.name}: {len(record['files'])} files, {record['jobs']} jobs, {record['cpu_hours']} CPU hours"
    )
    return 0


if __name__ == "__main__":
    run_main(main)

"""Every non-neural stage of the workflow at a given synthkb size: wall and peak RSS per job.

    python bench/scale.py run --entities 14000 --work-dir /tmp/sieve-scale/e14000
    python bench/scale.py table /tmp/sieve-scale/e14000/scale.json /tmp/sieve-scale/e140000/scale.json \
        --out scale_table.json

``run`` runs the workflow's own jobs: Snakemake, from this checkout, in ``--work-dir`` with an overlay
that sets ``datasets.synthkb.entities`` (and, unless ``--dial``, the generator's own false-negative
rates, ``fn_share: null``: ~7.2 passages and ~8.6 questions per entity, so 140,000 entities give
~1.01M passages, as config.yaml's comment says), on the targets of the non-neural stages:

    generate_synthkb      generation (for synthkb it also writes the canonical tables)
    prepare_dataset       preparation as for a downloaded dataset: the generated corpus, queries and
                          qrels exported as MS MARCO files (collection.tsv, queries/qrels per split;
                          the export is not measured) and read back by the `msmarco` reader into a
                          second dataset, `synthkb_msmarco` (without --no-prepare)
    index_bm25            BM25 index of the corpus
    mine_bm25_negatives   BM25 hard negatives of every train question (bm25.negatives each)
    retrieve_bm25         the test questions' BM25 run (eval.depth)
    evaluate              BM25's metrics on the test questions
    sieve_candidates      the sieve's candidates (sieve.candidates of the top sieve.pool, per train question)

Jobs run one at a time (``--cores 1``), so a job's figures are its own. Each job's command starts
``python -m pipeline...``; a ``python`` first on the jobs' PATH (a shim written into the work folder)
runs the real interpreter as its child (``probe``) and records, per job: wall seconds, the kernel's
peak resident set of the job's largest process (``ru_maxrss`` from ``wait4``: exact, not sampled), and
the largest sum of RSS over the job's process tree sampled every 0.2 s (only differs for jobs with
worker processes). Snakemake's own ``benchmark:`` files are read too (their ``max_rss`` is sampled
every 30 s after the first 15 s, so it can miss a peak: kept as a cross-check, not used for the table).

Work grows with passages (index), with questions (evaluation, candidates), with both summed
(preparation) or multiplied (BM25 search: mining and the test run score the whole corpus for each
question): the table names the unit and its count. ``--max-queries N`` bounds the sieve's candidates
to a seeded sample of N train questions (``sieve.max_queries``; their work, not their memory: the
whole negatives table is read first; the mining always covers every train question): the table then
says so. ``--no-search`` stops at the BM25 index (generation, preparation, index).

``run --stages mine_bm25_negatives sieve_candidates`` reruns only those jobs in a folder an earlier
run filled; ``table`` given both JSON files (earlier first) uses the rerun's records for its stages.
``run --search-sample N`` runs mining, candidates, the test run and evaluation on seeded samples of N
train / N test questions against the whole corpus (docs/cluster.md §9: the 1M run).

``table --extrapolate ENTITIES`` adds the expected CPU seconds and peak RSS per stage at a larger
size (``extrapolate``: lines through the two largest runs; an estimate for planning, not a figure).

``table`` (pure: ``build_table``, ``markdown``) turns two or more runs into one row per stage and
size, with the ratio of the largest run to the smallest (peak RSS, wall, CPU seconds, work) per
stage, printed as markdown and written as JSON. Peak RSS there is the larger of the two measures
above; CPU seconds (user + system of the job) are shown beside wall because the wall of a job on
shared cores also counts the others' load.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Sequence

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from machine import cpu_model_name  # noqa: E402

DATASET = "synthkb"
PREPARED = "synthkb_msmarco"  # the same data through prepare_dataset (msmarco reader)
RECORDS = "jobs.jsonl"
SPLITS = ("train", "dev", "test")

# stage -> (what its work grows with, the dataset counts that measure it: a sum "a+b" or a product
# "a*b"; "queries" is every split's); in the order they run
STAGES: dict[str, tuple[str, str]] = {
    "generate_synthkb": ("entities", "entities"),
    "prepare_dataset": ("passages + questions", "passages+queries"),
    "index_bm25": ("passages", "passages"),
    # BM25 search scores the whole corpus for every question (bm25s): questions x passages
    "mine_bm25_negatives": ("train questions × passages", "queries.train*passages"),
    "retrieve_bm25": ("test questions × passages", "queries.test*passages"),
    "evaluate": ("test questions", "queries.test"),
    "sieve_candidates": ("train questions", "queries.train"),
}
TARGETS = (
    f"results/{DATASET}/bm25/metrics.json",  # generate, index, retrieve (test), evaluate
    f"results/{DATASET}/negatives/bm25.parquet",  # mining
)
# --no-search: the stages whose work grows with one count only (generation, preparation, the index)
INDEX_TARGET = f"results/{DATASET}/bm25/index/checksums.json"
SEARCH_STAGES = ("mine_bm25_negatives", "retrieve_bm25", "evaluate", "sieve_candidates")


# ---- probe: what the jobs' `python` runs --------------------------------------------------------


def _tree_rss_bytes(pid: int) -> int:
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for proc in procs:
        try:
            total += proc.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return total


def probe(record: Path, python: str, args: list[str]) -> int:
    """Run ``python args`` as a child; append its wall, kernel peak RSS and sampled tree RSS to ``record``."""
    start = time.perf_counter()
    child = subprocess.Popen([python, *args])
    tree_peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal tree_peak
        while not done.wait(0.2):
            tree_peak = max(tree_peak, _tree_rss_bytes(child.pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    done.set()
    sampler.join()
    child.returncode = os.waitstatus_to_exitcode(status)  # reaped above: Popen must not wait again
    line = {
        "argv": args,
        "log": args[args.index("--log") + 1] if "--log" in args[:-1] else None,
        "wall_s": round(wall, 3),
        "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),  # KiB on Linux
        "tree_rss_sampled_mib": round(tree_peak / 2**20, 1),
        "user_s": round(usage.ru_utime, 2),
        "system_s": round(usage.ru_stime, 2),
        "exit": child.returncode,
    }
    with open(record, "a", encoding="utf-8") as out:
        out.write(json.dumps(line) + "\n")
    return child.returncode


# ---- run: the workflow's jobs at one size ---------------------------------------------------------


def overlay(entities: int, dial: bool, max_queries: int | None, export_dir: Path | None = None) -> dict:
    synthkb: dict = {"entities": entities}
    if not dial:
        synthkb |= {"fn_share": None, "fn_paraphrase": 0.0}  # the generator's own rates (docs/synthkb.md)
    config: dict = {"datasets": {DATASET: synthkb}}
    if export_dir is not None:
        files = {"corpus": str(export_dir / "collection.tsv")}
        for split in SPLITS:
            files |= {
                f"{kind}_{split}": str(export_dir / f"{kind}.{split}.tsv") for kind in ("queries", "qrels")
            }
        config["datasets"][PREPARED] = {"format": "msmarco", "source": files}
    if max_queries is not None:
        config["sieve"] = {"max_queries": max_queries}
    return config


def stage_of(log_path: str | None) -> str | None:
    """The rule of a job from its ``--log logs/<rule>/...`` argument (every rule passes one)."""
    if not log_path:
        return None
    parts = Path(log_path).parts
    return parts[1] if len(parts) > 2 and parts[0] == "logs" else None


def read_benchmark(path: Path) -> dict | None:
    """Snakemake's benchmark file of a job: its wall ``s`` and sampled ``max_rss`` (MiB)."""
    if not path.exists():
        return None
    header, values = path.read_text().splitlines()[:2]
    row = dict(zip(header.split("\t"), values.split("\t")))
    number = lambda v: None if v in ("NA", "-", "") else float(v)  # noqa: E731
    return {"s": number(row.get("s", "NA")), "max_rss_mib": number(row.get("max_rss", "NA"))}


def export_msmarco(dataset_dir: Path, out_dir: Path) -> None:
    """The generated dataset as MS MARCO files: ``pid\\ttitle text``, ``qid\\tquery``, ``qid\\t0\\tpid\\t1``.

    Streamed by Parquet batches. MS MARCO has no title column, so the title goes before the text as
    BM25 reads it. A tab or line break inside a field would shift the columns: refused, naming it.
    """
    import pyarrow.parquet as pq

    def clean(value: str, where: str) -> str:
        if any(c in value for c in "\t\r\n"):
            raise ValueError(f"{where}: a tab or line break in {value[:60]!r} cannot go into a TSV field")
        return value

    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / "collection.tsv", "w", encoding="utf-8") as out:
        for batch in pq.ParquetFile(dataset_dir / "corpus.parquet").iter_batches(
            columns=["pid", "title", "text"]
        ):
            for pid, title, text in zip(*(batch.column(i).to_pylist() for i in range(3))):
                out.write(f"{clean(pid, 'corpus pid')}\t{clean(f'{title} {text}' if title else text, pid)}\n")
    for split in SPLITS:
        with open(out_dir / f"queries.{split}.tsv", "w", encoding="utf-8") as out:
            for batch in pq.ParquetFile(dataset_dir / f"queries.{split}.parquet").iter_batches(
                columns=["qid", "text"]
            ):
                for qid, text in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist()):
                    out.write(f"{clean(qid, 'qid')}\t{clean(text, qid)}\n")
        with open(out_dir / f"qrels.{split}.tsv", "w", encoding="utf-8") as out:
            for batch in pq.ParquetFile(dataset_dir / f"qrels.{split}.parquet").iter_batches(
                columns=["qid", "pid"]
            ):
                for qid, pid in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist()):
                    out.write(f"{qid}\t0\t{pid}\t1\n")


def candidates_target(overlay_file: Path) -> str:
    """sieve_candidates' output under the overlay: a non-default sieve setting (``--max-queries``) tags
    its path (pipeline.core.methods.sieve_tag), asked of the package in a fresh process so the bench's
    own imports stay light."""
    script = (
        "import sys\n"
        "from pipeline.core.config import load_config\n"
        "from pipeline.core.methods import sieve_tag\n"
        "print(sieve_tag(load_config([sys.argv[1]])['sieve']))\n"
    )
    tag = subprocess.run(
        [sys.executable, "-c", script, str(overlay_file)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    ).stdout.strip()
    return f"results/{DATASET}/sieve/candidates{tag}.parquet"


def snakemake_command(
    work: Path, targets: list[str], overlay_file: Path, extra: Sequence[str] = ()
) -> list[str]:
    """Snakemake from this interpreter's environment on ``targets`` in ``work``, one job at a time."""
    return [
        str(Path(sys.executable).parent / "snakemake"),
        "--cores",
        "1",
        "--directory",
        str(work),
        *targets,
        "--configfile",
        str(overlay_file),
        *extra,
    ]


def _snakemake(
    work: Path, targets: list[str], overlay_file: Path, env: dict, log_name: str, extra: Sequence[str] = ()
) -> str:
    """Run the workflow on ``targets`` in ``work``, jobs one at a time; return the command."""
    command = snakemake_command(work, targets, overlay_file, extra)
    print("running:", " ".join(command), flush=True)
    with open(work / log_name, "w", encoding="utf-8") as log:
        code = subprocess.run(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
    if code != 0:
        raise SystemExit(f"snakemake failed (exit {code}); see {work / log_name}")
    return " ".join(command)


# stage -> the split whose questions --search-sample samples (these stages run by hand on the sample)
SAMPLED = {
    "mine_bm25_negatives": "train",
    "sieve_candidates": "train",
    "retrieve_bm25": "test",
    "evaluate": "test",
}
SAMPLE_DIR = "sample"


def sample_qids(qids: list[str], n: int, seed: int = 0) -> set[str]:
    """A seeded sample of ``n`` question ids, independent of their order (sha256 of seed/qid)."""
    import hashlib

    ranked = sorted(qids, key=lambda q: (hashlib.sha256(f"{seed}/search-sample/{q}".encode()).digest(), q))
    return set(ranked[:n])


def write_sample(dataset_dir: Path, out_dir: Path, split: str, n: int) -> int:
    """The split's queries, qrels and qrels_all restricted to a seeded sample of ``n`` questions (file
    order kept); returns how many were sampled."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    out_dir.mkdir(parents=True, exist_ok=True)
    queries = pq.read_table(dataset_dir / f"queries.{split}.parquet")
    keep = pa_array(sorted(sample_qids(queries.column("qid").to_pylist(), n)))
    for kind in ("queries", "qrels", "qrels_all"):
        path = dataset_dir / f"{kind}.{split}.parquet"
        if path.exists():
            table = pq.read_table(path)
            pq.write_table(table.filter(pc.is_in(table.column("qid"), value_set=keep)), out_dir / path.name)
    return len(keep)


def pa_array(values: list[str]):
    import pyarrow as pa

    return pa.array(values, pa.string())


def workflow_commands(work: Path, targets: list[str], overlay_file: Path, env: dict) -> dict[str, list[str]]:
    """The workflow's own command line of each sampled stage (``snakemake --dry-run --printshellcmds``
    on ``targets``), split into arguments after ``python``."""
    dry = subprocess.run(
        snakemake_command(work, targets, overlay_file, ["--dry-run", "--printshellcmds"]),
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=True,
    ).stdout
    commands = {}
    for line in dry.splitlines():
        line = line.strip().removeprefix("Shell command:").strip()  # Snakemake 9 prefixes the line
        words = shell_words(line) if line.startswith("python -m pipeline") else []
        stage = stage_of(words[words.index("--log") + 1]) if "--log" in words[:-1] else None
        if stage in SAMPLED:
            commands[stage] = words[1:]
    missing = set(SAMPLED) - set(commands)
    if missing:
        raise SystemExit(f"the dry run printed no command for {sorted(missing)}")
    return commands


def shell_words(line: str) -> list[str]:
    """A printed shell command's words, ``$(dirname PATH)`` (the rules' one substitution) evaluated."""
    import shlex

    words = shlex.split(line)
    out: list[str] = []
    for word in words:
        if out and out[-1] == "$(dirname" and word.endswith(")"):
            out[-1] = str(Path(word[:-1]).parent)
        else:
            out.append(word)
    return out


def swap(argv: list[str], **flags: str) -> list[str]:
    """``argv`` with the value after each ``--flag`` replaced (underscores in names are dashes)."""
    argv = list(argv)
    for name, value in flags.items():
        flag = "--" + name.replace("_", "-")
        if flag not in argv[:-1]:
            raise SystemExit(f"no {flag} in {' '.join(argv)}")
        argv[argv.index(flag) + 1] = value
    return argv


def run_sampled(work: Path, commands: dict[str, list[str]], n: int, env: dict) -> dict[str, int]:
    """The search stages by hand, through the probe, on seeded samples of ``n`` train and ``n`` test
    questions against the whole corpus and index: the workflow's commands with the questions (and
    what the sample's stages read and write) swapped. Returns the questions sampled per split."""
    sample = work / SAMPLE_DIR
    dataset_dir = work / "resources" / DATASET
    sampled = {split: write_sample(dataset_dir, sample, split, n) for split in ("train", "test")}
    s = lambda name: str(sample / name)  # noqa: E731
    argvs = {
        "mine_bm25_negatives": swap(
            commands["mine_bm25_negatives"],
            queries=s("queries.train.parquet"),
            out=s("negatives.bm25.parquet"),
        ),
        "sieve_candidates": swap(
            commands["sieve_candidates"], negatives=s("negatives.bm25.parquet"), out=s("candidates.parquet")
        ),
        "retrieve_bm25": swap(
            commands["retrieve_bm25"], queries=s("queries.test.parquet"), out=s("run.test.parquet")
        ),
        "evaluate": swap(
            commands["evaluate"],
            run=s("run.test.parquet"),
            queries=s("queries.test.parquet"),
            qrels=s("qrels.test.parquet"),
            qrels_all=s("qrels_all.test.parquet"),
            out=s("metrics.json"),
            per_query=s("per_query.parquet"),
        ),
    }
    for stage, argv in argvs.items():
        argv = swap(argv, log=f"logs/{stage}/{SAMPLE_DIR}.log")
        print("running:", "python", " ".join(argv), flush=True)
        code = subprocess.run(["python", *argv], cwd=work, env=env).returncode  # the shim: recorded
        if code != 0:
            raise SystemExit(f"{stage} failed (exit {code}); see {work / 'logs' / stage}")
    return sampled


def run(args: argparse.Namespace) -> dict:
    """Run the non-neural jobs at ``args.entities`` in ``args.work_dir``. Snakemake reruns only what is
    missing there, so the records of earlier jobs (``jobs.jsonl``) stay valid and the latest record of
    each stage is used: delete the folder for a fresh run."""
    work = args.work_dir.resolve()
    work.mkdir(parents=True, exist_ok=True)
    records = work / RECORDS
    python = sys.executable
    shim_dir = work / "shim"
    shim_dir.mkdir(exist_ok=True)
    shim = shim_dir / "python"
    shim.write_text(
        f'#!/bin/sh\nexec "{python}" "{Path(__file__).resolve()}" probe --record "{records}" '
        f'--python "{python}" -- "$@"\n'
    )
    shim.chmod(0o755)
    env = dict(
        os.environ,
        PATH=os.pathsep.join([str(shim_dir), str(Path(python).parent), os.environ.get("PATH", "")]),
        PYTHONPATH=str(ROOT),
    )
    config_overlay = overlay(args.entities, args.dial, args.max_queries)
    overlay_file = work / "overlay.yaml"
    overlay_file.write_text(json.dumps(config_overlay, indent=1) + "\n")  # JSON is YAML
    start = time.perf_counter()
    targets = [*TARGETS, candidates_target(overlay_file)] if args.search else [INDEX_TARGET]
    sampled = None
    if args.search_sample:
        search_targets, targets = targets, [INDEX_TARGET]
    extra: list[str] = []
    if args.stages:
        # Only these jobs, again, in a folder an earlier run filled: what they read is reused as it is
        # (mtime alone decides, so a changed command line upstream does not regenerate the data).
        outputs = {
            "mine_bm25_negatives": TARGETS[1],
            "sieve_candidates": candidates_target(overlay_file),
        }
        targets = [outputs[s] for s in args.stages]
        extra = ["--forcerun", *args.stages, "--rerun-triggers", "mtime"]
    commands = [_snakemake(work, targets, overlay_file, env, "snakemake.log", extra)]
    if args.search_sample:
        sampled = run_sampled(
            work, workflow_commands(work, search_targets, overlay_file, env), args.search_sample, env
        )
        commands.append(f"by hand through the probe on seeded samples: {sampled}")
    total = time.perf_counter() - start
    if args.prepare and not args.stages:
        export_dir = work / "export"
        export_msmarco(work / "resources" / DATASET, export_dir)
        config_overlay = overlay(args.entities, args.dial, args.max_queries, export_dir)
        overlay_file = work / "overlay_prepare.yaml"
        overlay_file.write_text(json.dumps(config_overlay, indent=1) + "\n")
        start = time.perf_counter()
        target = f"resources/{PREPARED}/manifest.json"
        commands.append(_snakemake(work, [target], overlay_file, env, "snakemake_prepare.log"))
        total += time.perf_counter() - start
    manifest = json.loads((work / "resources" / DATASET / "manifest.json").read_text())
    counts = {
        k: v
        for k, v in manifest["counts"].items()
        if k in ("entities", "passages") or k.startswith("queries.")
    }
    latest = {}  # stage -> its latest job (a rerun in the same folder redoes only what is missing)
    for line in records.read_text().splitlines():
        job = json.loads(line)
        latest[stage_of(job["log"])] = job
    stages = []
    for job in latest.values():
        stage = stage_of(job["log"])
        if stage not in STAGES or (not args.search and stage in SEARCH_STAGES):
            continue
        log_name = Path(job["log"]).relative_to(Path("logs") / stage)
        bench = read_benchmark(work / "benchmarks" / stage / log_name.with_suffix(".tsv"))
        stages.append(
            {"stage": stage, **{k: job[k] for k in job if k != "log"}, "snakemake_benchmark": bench}
        )
    expected = {
        s
        for s in STAGES
        if (args.search or s not in SEARCH_STAGES) and (args.prepare or s != "prepare_dataset")
    }
    if args.stages:
        expected = set(args.stages)
        stages = [s for s in stages if s["stage"] in expected]
    missing = expected - {s["stage"] for s in stages}
    if missing:
        raise SystemExit(
            f"no job record for {sorted(missing)} in {records}: were their outputs already there?"
        )
    result = {
        "entities": args.entities,
        "dial": args.dial,
        "overlay": config_overlay,
        "counts": counts,
        "notes": notes(config_overlay, counts, sampled),
        "sampled": sampled,
        "snakemake_wall_s": round(total, 1),
        "commands": commands,
        "machine": {
            "cpu": cpu_model_name(),
            "cores": os.cpu_count(),
            "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
            "python": platform.python_version(),
        },
        "stages": stages,
    }
    out = args.out or work / "scale.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(markdown(build_table([result])))
    print(f"wrote {out}")
    return result


def notes(config_overlay: dict, counts: dict, sampled: dict[str, int] | None = None) -> dict[str, str]:
    """Per stage, what bounds its work in this run (shown in the table, never left implicit)."""
    out = {}
    for stage, split in SAMPLED.items():
        if sampled and sampled[split] < counts.get(f"queries.{split}", 0):
            out[stage] = (
                f"seeded sample of {sampled[split]:,} of {counts[f'queries.{split}']:,} {split} questions, "
                "whole corpus (--search-sample); the full run's time is extrapolated, not measured"
            )
    max_queries = config_overlay.get("sieve", {}).get("max_queries")
    if max_queries is not None and max_queries < counts.get("queries.train", 0):
        out["sieve_candidates"] = f"sample of {max_queries:,} train questions (sieve.max_queries)"
    return out


# ---- table: pure -------------------------------------------------------------------------------


def work_count(count_key: str, counts: dict[str, int]) -> int:
    """A stage's work from the dataset's counts: ``a+b`` sums, ``a*b`` multiplies."""
    count = lambda key: (  # noqa: E731
        sum(v for k, v in counts.items() if k.startswith("queries.")) if key == "queries" else counts[key]
    )
    if "*" in count_key:
        product = 1
        for key in count_key.split("*"):
            product *= count(key)
        return product
    return sum(count(key) for key in count_key.split("+"))


def build_table(runs: list[dict]) -> list[dict]:
    """One row per (stage, run) in stage order then size, plus the largest/smallest ratios per stage.

    A stage a run left out has no row for that run. A run is ``run``'s JSON: ``counts`` (entities, passages, queries.<split>), ``stages`` (stage,
    wall_s, peak_rss_mib) and ``notes`` (stage -> what bounded it). The ratios (on the largest run's
    rows, None elsewhere) compare it with the smallest run by passages.
    """
    ordered = sorted(runs, key=lambda r: r["counts"]["passages"])
    rows = []
    for stage, (unit, count_key) in STAGES.items():
        stage_rows = []
        for result in ordered:
            jobs = [s for s in result["stages"] if s["stage"] == stage]
            if not jobs:
                continue  # a stage the run left out (--no-search, --no-prepare): no row
            if len(jobs) != 1:
                raise ValueError(
                    f"run at {result['counts']['passages']} passages: {len(jobs)} jobs of {stage}"
                )
            job = jobs[0]
            counts = result["counts"]
            note = result.get("notes", {}).get(stage, "")
            sampled = result.get("sampled") or {}
            work = full_work = work_count(count_key, counts)
            if stage in SAMPLED and SAMPLED[stage] in sampled:  # --search-sample: the sample's questions
                split = SAMPLED[stage]
                work = work_count(count_key, counts | {f"queries.{split}": sampled[split]})
            max_queries = result["overlay"].get("sieve", {}).get("max_queries")
            if stage == "sieve_candidates" and max_queries is not None:
                work = min(work, max_queries)
            cpu_s = round(job["user_s"] + job["system_s"], 1)
            stage_rows.append(
                {
                    "stage": stage,
                    "passages": counts["passages"],
                    "queries": sum(v for k, v in counts.items() if k.startswith("queries.")),
                    "work_unit": unit,
                    "work": work,
                    "wall_s": job["wall_s"],
                    "cpu_s": cpu_s,
                    # the kernel's peak of the largest process; a job with worker processes: their sampled sum
                    "peak_rss_mib": max(job["peak_rss_mib"], job["tree_rss_sampled_mib"]),
                    "note": note,
                    # a sampled stage: its CPU at the whole work, in proportion (start-up counted in full)
                    "full_cpu_s_extrapolated": (
                        round(cpu_s * full_work / work) if work and full_work != work else None
                    ),
                    "rss_ratio": None,
                    "wall_ratio": None,
                    "cpu_ratio": None,
                    "work_ratio": None,
                }
            )
        if len(stage_rows) > 1:
            small, large = stage_rows[0], stage_rows[-1]
            large["rss_ratio"] = round(large["peak_rss_mib"] / small["peak_rss_mib"], 2)
            large["wall_ratio"] = round(large["wall_s"] / small["wall_s"], 2)
            large["cpu_ratio"] = round(large["cpu_s"] / small["cpu_s"], 2)
            large["work_ratio"] = round(large["work"] / small["work"], 2)
        rows += stage_rows
    return rows


def extrapolate(rows: list[dict], entities: dict[int, int], target: int) -> list[dict]:
    """Expected CPU seconds and peak RSS of each stage at ``target`` entities from its two largest runs
    (an estimate to plan a run, never a measurement). Both as lines through the two points: CPU in the
    stage's work (a fixed start-up plus a cost per unit: per question × passage for BM25 search), RSS
    in entities (a fixed part plus what grows with the data). Every count grows linearly with the
    entities, so the work at ``target`` is the larger run's times (target / its entities) to the power
    of the number of counts multiplied. ``entities``: passages -> entities of each run.
    """
    out = []
    for stage, (_, count_key) in STAGES.items():
        stage_rows = [r for r in rows if r["stage"] == stage]
        if len(stage_rows) < 2:
            raise ValueError(f"{stage}: two runs are needed to extrapolate, got {len(stage_rows)}")
        small, large = stage_rows[-2], stage_rows[-1]
        e0, e1 = entities[small["passages"]], entities[large["passages"]]
        work = large["work"] * (target / e1) ** len(count_key.split("*"))
        per_unit = (large["cpu_s"] - small["cpu_s"]) / (large["work"] - small["work"])
        per_entity = (large["peak_rss_mib"] - small["peak_rss_mib"]) / (e1 - e0)
        out.append(
            {
                "stage": stage,
                "entities": target,
                "work": round(work),
                "cpu_s": round(large["cpu_s"] + per_unit * (work - large["work"])),
                "peak_rss_mib": round(large["peak_rss_mib"] + per_entity * (target - e1)),
            }
        )
    return out


def _ratio(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}×"


def markdown(rows: list[dict]) -> str:
    lines = [
        "| stage | passages | queries | work (unit) | wall s | CPU s | peak RSS MiB | RSS ratio | CPU ratio "
        "| work ratio |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        work = f"{row['work']:,} {row['work_unit']}" + (f" ({row['note']})" if row["note"] else "")
        if row.get("full_cpu_s_extrapolated"):
            work += f"; all questions: ~{row['full_cpu_s_extrapolated']:,} CPU s (extrapolated)"
        lines.append(
            f"| `{row['stage']}` | {row['passages']:,} | {row['queries']:,} | {work} | {row['wall_s']:.1f} "
            f"| {row['cpu_s']:.1f} | {row['peak_rss_mib']:.0f} | {_ratio(row['rss_ratio'])} "
            f"| {_ratio(row['cpu_ratio'])} | {_ratio(row['work_ratio'])} |"
        )
    return "\n".join(lines)


def merge_runs(runs: list[dict]) -> list[dict]:
    """One run per size: a later run of the same counts (``run --stages``) replaces its stages' records
    in the earlier one."""
    merged: dict[tuple, dict] = {}
    for result in runs:
        key = tuple(sorted(result["counts"].items()))
        if key not in merged:
            merged[key] = dict(result, stages=list(result["stages"]))
            continue
        base = merged[key]
        newer = {s["stage"] for s in result["stages"]}
        base["stages"] = [s for s in base["stages"] if s["stage"] not in newer] + result["stages"]
        base["notes"] = {k: v for k, v in base.get("notes", {}).items() if k not in newer} | result.get(
            "notes", {}
        )
    return list(merged.values())


def table(args: argparse.Namespace) -> list[dict]:
    runs = merge_runs([json.loads(Path(p).read_text()) for p in args.runs])
    rows = build_table(runs)
    print(markdown(rows))
    expected = None
    if args.extrapolate:
        entities = {r["counts"]["passages"]: r["counts"]["entities"] for r in runs}
        expected = extrapolate(rows, entities, args.extrapolate)
        print(f"\nexpected at {args.extrapolate:,} entities (extrapolated, not measured):")
        for e in expected:
            print(
                f"  {e['stage']:20s} CPU ~{e['cpu_s']:,} s (work {e['work']:,}), peak RSS ~{e['peak_rss_mib']:,} MiB"
            )
    if args.out:
        machine = runs[0]["machine"]
        args.out.write_text(
            json.dumps({"machine": machine, "rows": rows, "expected": expected}, indent=1) + "\n"
        )
        print(f"wrote {args.out}")
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    p_run = sub.add_parser("run", help="run the non-neural jobs at one size")
    p_run.add_argument("--entities", type=int, required=True)
    p_run.add_argument("--work-dir", type=Path, required=True, help="Snakemake's --directory (outputs, logs)")
    p_run.add_argument("--dial", action="store_true", help="keep config.yaml's fn_share/fn_paraphrase")
    p_run.add_argument("--max-queries", type=int, default=None, help="sieve.max_queries for sieve_candidates")
    p_run.add_argument(
        "--no-search",
        dest="search",
        action="store_false",
        help="stop at the BM25 index: leave out mining, retrieval, evaluation and candidates",
    )
    p_run.add_argument(
        "--no-prepare",
        dest="prepare",
        action="store_false",
        help="skip prepare_dataset (the MS MARCO export)",
    )
    p_run.add_argument(
        "--search-sample",
        type=int,
        default=None,
        metavar="N",
        help="generate and index everything, then run mining, candidates, the test run and evaluation by "
        "hand on seeded samples of N train and N test questions (whole corpus and index)",
    )
    p_run.add_argument(
        "--stages",
        nargs="+",
        choices=("mine_bm25_negatives", "sieve_candidates"),
        default=None,
        help="rerun only these jobs in a work dir an earlier run filled (their inputs reused as they are); "
        "the result JSON holds only them",
    )
    p_run.add_argument("--out", type=Path, default=None, help="result JSON (default <work-dir>/scale.json)")
    p_table = sub.add_parser("table", help="table of two or more runs, with ratios")
    p_table.add_argument(
        "runs",
        nargs="+",
        help="run JSON files (a later one of the same size replaces its stages: run --stages)",
    )
    p_table.add_argument("--out", type=Path, default=None, help="table JSON")
    p_table.add_argument(
        "--extrapolate", type=int, default=None, metavar="ENTITIES", help="expected CPU and RSS at this size"
    )
    p_probe = sub.add_parser("probe", help="(internal) what the jobs' python shim runs")
    p_probe.add_argument("--record", type=Path, required=True)
    p_probe.add_argument("--python", required=True)
    p_probe.add_argument("args", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    if args.command == "probe":
        return probe(args.record, args.python, args.args[1:] if args.args[:1] == ["--"] else args.args)
    if args.command == "run":
        run(args)
    else:
        table(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

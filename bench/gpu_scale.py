"""The neural stages at scale through the workflow itself, per stage wall, throughput and peak GPU memory
(scripts/gpu_check.sh runs it).

A synthkb dataset ``scale`` of ``--entities`` entities (~7.2 passages each) is declared in an overlay
with the GPU sections on ``--device`` (dpr, encode, search, sieve: gpus 1 on cuda, 0 on cpu; torch
search), and Snakemake builds ``results/scale/metrics.json`` for the methods dpr and dpr_sieve in
``--work``: generation, BM25 and its mining (CPU), DPR for ``--dpr-steps`` steps, the corpus encoded in
``--shards`` shard jobs, the sieve's scoring of the candidates, DPR on the sieved negatives, search and
evaluation. Per job it reports Snakemake's benchmark (wall, max RSS), the job's
``torch.cuda.max_memory_allocated`` (scripts/gpu_peak/sitecustomize.py, at the process's exit) and the
largest ``nvidia-smi`` reading of its processes (sampled every 0.5 s), and the stage's units per second
(passages encoded, steps, candidates scored, queries searched).

    python bench/gpu_scale.py --work /tmp/scale --out gpu_check/scale.json             # GPU node
    python bench/gpu_scale.py --device cpu --entities 40 --dpr-steps 2 --work /tmp/s --out s.json
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def overlay(entities: int, steps: int, shards: int, gpus: int) -> dict:
    return {
        "datasets": {
            "scale": {
                "format": "synthkb",
                "entities": entities,
                "fn_share": 0.3,
                "fn_paraphrase": 0.5,
                "split": {"by": "entity", "dev": 0.1, "test": 0.2, "seed": 0},
            }
        },
        "methods": ["dpr", "dpr_sieve"],
        "dpr": {"max_steps": steps, "gpus": gpus},
        "encode": {"shards": shards, "gpus": gpus},
        "search": {"gpus": gpus, "backend": "torch"},
        "sieve": {"gpus": gpus},
    }


def read_benchmarks(work: Path) -> dict[str, dict]:
    """'<rule>/<name>' -> Snakemake's benchmark row (s, max_rss in MB)."""
    rows = {}
    for tsv in sorted((work / "benchmarks").glob("*/*.tsv")):
        with open(tsv, encoding="utf-8") as handle:
            row = next(csv.DictReader(handle, delimiter="\t"))
        rows[f"{tsv.parent.name}/{tsv.stem}"] = row
    return rows


def job_key(argv: list[str]) -> str | None:
    """'<rule>/<name>' from a job's --log logs/<rule>/<name>.log argument."""
    if "--log" in argv and argv.index("--log") + 1 < len(argv):
        log = Path(argv[argv.index("--log") + 1])
        return f"{log.parent.name}/{log.stem}"
    return None


def read_peaks(path: Path) -> tuple[dict[str, float], dict[int, str]]:
    """(job -> torch peak GiB, pid -> job) from the sitecustomize records."""
    peaks: dict[str, float] = {}
    pids: dict[int, str] = {}
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            key = job_key(record["argv"])
            if key:
                peaks[key] = max(peaks.get(key, 0.0), record["peak_allocated_gib"])
                pids[record["pid"]] = key
    return peaks, pids


def read_smi(path: Path, pids: dict[int, str]) -> dict[str, int]:
    """job -> the largest nvidia-smi used_memory (MiB) sampled for its processes."""
    out: dict[str, int] = {}
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            parts = [p.strip() for p in line.split(",")]
            if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit() and int(parts[0]) in pids:
                key = pids[int(parts[0])]
                out[key] = max(out.get(key, 0), int(parts[1]))
    return out


def units(key: str, work: Path, steps: int, shards: int) -> tuple[float, str] | None:
    """The work of one job in its stage's units, from the dataset's manifest and the job's outputs."""
    rule, name = key.split("/", 1)
    manifest = work / "resources" / "scale" / "manifest.json"
    counts = json.loads(manifest.read_text())["counts"] if manifest.exists() else None
    if counts is None:
        return None
    passages = counts.get("corpus", counts.get("passages"))  # prepare's manifest / synthkb's

    def queries(split: str) -> int:
        return counts["queries"][split] if "queries" in counts else counts[f"queries.{split}"]

    if rule == "encode_corpus":
        return passages / shards, "passages"
    if rule.startswith("train_dpr"):
        return steps, "steps"
    if rule in ("search_dense", "evaluate"):
        split = "dev" if ".dev" in name else "test"
        return queries(split), "queries"
    if rule in ("filter_candidates", "sieve_candidates"):
        import pyarrow.parquet as pq

        found = sorted((work / "results" / "scale" / "sieve").glob("candidates*.parquet"))
        return (pq.ParquetFile(found[0]).metadata.num_rows, "candidates") if found else None
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--entities", type=int, default=14000, help="~7.2 passages each (14000: ~100k)")
    ap.add_argument("--dpr-steps", type=int, default=300)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--cores", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--work", required=True, help="the run's directory (emptied first)")
    ap.add_argument("--out", required=True)
    ap.add_argument(
        "--timeout", type=float, default=None, help="seconds; then the finished jobs are summarized"
    )
    ap.add_argument("--summarize", action="store_true", help="only summarize an earlier run in --work")
    args = ap.parse_args(argv)
    work = Path(args.work).resolve()
    if args.summarize:
        return summarize(args, work, None, 0)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    gpus = 1 if args.device == "cuda" else 0
    (work / "overlay.json").write_text(json.dumps(overlay(args.entities, args.dpr_steps, args.shards, gpus)))
    env = dict(os.environ)
    env["SIEVE_GPU_PEAKS"] = str(work / "peaks.jsonl")
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO / "scripts" / "gpu_peak"), str(REPO), *filter(None, [env.get("PYTHONPATH")])]
    )
    smi = None
    if gpus and shutil.which("nvidia-smi"):
        smi_log = open(work / "smi.csv", "w", encoding="utf-8")  # noqa: SIM115 - closed after the run
        smi = subprocess.Popen(
            [
                "nvidia-smi",
                "--query-compute-apps=pid,used_memory",
                "--format=csv,noheader,nounits",
                "-lms",
                "500",
            ],
            stdout=smi_log,
        )
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "--snakefile",
        str(REPO / "Snakefile"),
        "--directory",
        str(work),
    ]
    cmd += ["--cores", str(args.cores), "--resources", f"gpus={gpus}", "--scheduler", "greedy"]
    cmd += ["--configfile", str(work / "overlay.json"), "--", "results/scale/metrics.json"]
    started = time.perf_counter()
    try:
        done = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired as exc:  # what finished is still measured
        text = (
            (exc.stdout or b"").decode() + (exc.stderr or b"").decode()
            if isinstance(exc.stdout, bytes)
            else ""
        )
        done = subprocess.CompletedProcess(cmd, 124, text, f"\ntimed out after {args.timeout} s\n")
    wall = time.perf_counter() - started
    if smi is not None:
        smi.terminate()
        smi.wait()
    (work / "snakemake.log").write_text(done.stdout + done.stderr)
    if done.returncode:
        print(re.sub(r"\n{3,}", "\n\n", (done.stdout + done.stderr)[-3000:]), file=sys.stderr)
    return summarize(args, work, wall, done.returncode)


def summarize(args: argparse.Namespace, work: Path, wall: float | None, exit_code: int) -> int:
    """Write --out from the run in ``work``: per job wall, max RSS, GPU peaks, units per second."""
    peaks, pids = read_peaks(work / "peaks.jsonl")
    smi_peaks = read_smi(work / "smi.csv", pids)
    stages = []
    for key, row in read_benchmarks(work).items():
        seconds = float(row["s"])
        measured = units(key, work, args.dpr_steps, args.shards)
        stage = {"job": key, "wall_s": round(seconds, 2), "max_rss_mb": row.get("max_rss")}
        stage["gpu_peak_allocated_gib"] = peaks.get(key)
        stage["gpu_peak_nvidia_smi_mib"] = smi_peaks.get(key)
        if measured:
            stage |= {"units": measured[0], "unit": measured[1], "per_s": round(measured[0] / seconds, 2)}
        stages.append(stage)
    manifest = work / "resources" / "scale" / "manifest.json"
    record = {
        "device": args.device,
        "entities": args.entities,
        "counts": json.loads(manifest.read_text())["counts"] if manifest.exists() else None,
        "dpr_steps": args.dpr_steps,
        "shards": args.shards,
        "snakemake_wall_s": None if wall is None else round(wall, 1),
        "exit": exit_code,
        "stages": stages,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(record, indent=1))
    for stage in stages:
        print(json.dumps(stage))
    print(f"snakemake exit {exit_code}, {wall} s; log {work / 'snakemake.log'}")
    return exit_code


if __name__ == "__main__":
    sys.exit(main())

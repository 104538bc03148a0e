"""What an index factory costs in recall against Flat, on the demo's synthkb with its zero-shot retriever.

    .venv/bin/python bench/index_recall.py --work-dir /tmp/sieve-index-recall SQfp16 "IVF64,PQ48"

Runs the workflow's own jobs (Snakemake from this checkout, ``--cores 1``) for
results/synthkb/zeroshot/metrics.json, first with ``index.factory: Flat``, then with each factory as an
overlay (only build_index, search_dense and evaluate rerun), and prints per factory: the test metrics
and the share of Flat's top-k passages (k = 10, 100) it returns, averaged over the queries.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import yaml

REPO = Path(__file__).resolve().parents[1]
TARGET = "results/synthkb/zeroshot/metrics.json"
RUN = "results/synthkb/zeroshot/run.test.parquet"
METRICS = ("R@1", "R@5", "R@20", "R@100", "MRR@10", "nDCG@10")


def run_factory(work: Path, factory: str) -> tuple[dict, pd.DataFrame]:
    """The metrics and the test run of the zero-shot retriever over an index of ``factory``."""
    overlay = work / f"index-{len(list(work.glob('index-*.yaml')))}.yaml"
    overlay.write_text(yaml.safe_dump({"index": {"factory": factory}}), encoding="utf-8")
    cmd = [str(Path(sys.executable).with_name("snakemake")), "--cores", "1", "--snakefile"]
    cmd += [str(REPO / "Snakefile"), "--directory", str(work), TARGET, "--configfile", str(overlay)]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    metrics = json.loads((work / TARGET).read_text(encoding="utf-8"))["metrics"]
    return metrics, pd.read_parquet(work / RUN)


def overlap(base: pd.DataFrame, other: pd.DataFrame, k: int) -> float:
    """The share of ``base``'s top-k (qid, pid) pairs that ``other``'s top-k holds."""
    top = [
        set(map(tuple, df[df["rank"] <= k][["qid", "pid"]].itertuples(index=False))) for df in (base, other)
    ]
    return len(top[0] & top[1]) / len(top[0])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("factories", nargs="+", help="FAISS index_factory strings to compare with Flat")
    ap.add_argument("--work-dir", type=Path, required=True, help="a new folder (removed first)")
    args = ap.parse_args(argv)
    shutil.rmtree(args.work_dir, ignore_errors=True)
    args.work_dir.mkdir(parents=True)
    flat_metrics, flat_run = run_factory(args.work_dir, "Flat")
    print("| factory | " + " | ".join(METRICS) + " | top-10 of Flat | top-100 of Flat |")
    print("|---|" + "---:|" * (len(METRICS) + 2))
    for factory in ["Flat", *args.factories]:
        metrics, run = (flat_metrics, flat_run) if factory == "Flat" else run_factory(args.work_dir, factory)
        cells = [f"{metrics[m]:.4f}" for m in METRICS]
        cells += [f"{overlap(flat_run, run, k):.4f}" for k in (10, 100)]
        print(f"| `{factory}` | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

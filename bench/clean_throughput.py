"""Throughput of the cleaning command (python -m pipeline.sieve.clean) with the sieve filter on CPU.

    python bench/clean_throughput.py [--questions 1000] [--negatives 5] [--threads 2]

Builds a sentence-transformers triplet file from SQuAD-36 (../shared/data/squad): each question's
paragraph is its positive, the other paragraphs of its article its negatives (up to --negatives), then
times the command as a user runs it (a fresh process: model loading included) with the sieve scored by
the offline all-MiniLM-L6-v2, and prints negatives/s with the CPU, the load average and the precision
(the retriever encodes in fp32 on CPU).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parent.parent
SQUAD = REPO.parent / "shared" / "data" / "squad" / "squad-v1.1-dev-36.json.gz"


def triplets(n_questions: int, n_negatives: int) -> dict[str, list[str]]:
    with gzip.open(SQUAD, "rt", encoding="utf-8") as handle:
        articles = json.load(handle)["data"]
    out: dict[str, list[str]] = {"anchor": [], "positive": [], "negative": []}
    asked = 0
    for article in articles:
        paragraphs = [p["context"] for p in article["paragraphs"]]
        for i, paragraph in enumerate(article["paragraphs"]):
            for qa in paragraph["qas"]:
                if asked == n_questions:
                    return out
                others = [p for j, p in enumerate(paragraphs) if j != i]
                start = asked % max(1, len(others))
                for negative in (others[start:] + others[:start])[:n_negatives]:
                    out["anchor"].append(qa["question"])
                    out["positive"].append(paragraph["context"])
                    out["negative"].append(negative)
                asked += 1
    return out


def cpu_name() -> str:
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    return f"{fields.get('Model name', '?').strip()}, {fields.get('CPU(s)', '?').strip()} CPUs"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--questions", type=int, default=1000)
    ap.add_argument("--negatives", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    data = triplets(args.questions, args.negatives)
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "triplets.parquet"
        pq.write_table(pa.table(data), source)
        load = os.getloadavg()[0]
        began = time.perf_counter()
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pipeline.sieve.clean",
                "--input",
                str(source),
                "--out",
                str(Path(tmp) / "cleaned.parquet"),
                "--filter",
                "sieve",
                "--model",
                "minilm",
                "--threads",
                str(args.threads),
            ],
            check=True,
            cwd=REPO,
        )
        wall = time.perf_counter() - began
        report = json.loads((Path(tmp) / "cleaned.report.json").read_text())
    result = {
        "cpu": cpu_name(),
        "load_average_1min_at_start": load,
        "threads": args.threads,
        "precision": "fp32",
        "queries": len(set(data["anchor"])),
        "negatives": report["negatives"],
        "distinct_passages": report["distinct_passages"],
        "duplicates_of_positive": report["decisions"]["duplicate_of_positive"],
        "sieve_out_rate": report["sieve_out_rate"],
        "seconds_in_command": report["seconds"],
        "negatives_per_second_in_command": report["negatives_per_second"],
        "seconds_wall_with_start_up": wall,
        "negatives_per_second_wall": report["negatives"] / wall,
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()

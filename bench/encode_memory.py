"""Peak memory of encode_corpus on 10k vs 100k synthetic passages: it must not grow with the corpus.

The parent writes two synthetic corpora (10k and 100k passages, Parquet, 5k-row groups) and a tiny
random BERT (``pipeline.retrieval.model.make_tiny_encoder``), then runs ``encode_table`` on each corpus in a fresh
subprocess, which reports its own peak resident set (``ru_maxrss``). Both runs use the same sort buffer
(5,000 passages, smaller than either corpus), so any difference is growth with corpus size.

The last line is ``RESULT encode_memory_growth ratio=<peak(100k) / peak(10k)>``: > 1 means the larger
corpus needed more memory; ~1.0 is the goal.

    python bench/encode_memory.py --quick      # < 2 min on 2 CPU cores
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def write_corpus(path: Path, n: int, seed: int, words: tuple[int, int]) -> None:
    """Synthetic passages written in 5k-row chunks (the generator itself stays small)."""
    rng = np.random.default_rng(seed)
    vocab = np.array([f"word{i}" for i in range(3000)])
    schema = pa.schema([("pid", pa.string()), ("title", pa.string()), ("text", pa.string())])
    with pq.ParquetWriter(path, schema) as writer:
        for start in range(0, n, 5000):
            count = min(5000, n - start)
            lengths = rng.integers(words[0], words[1], count)
            texts = [" ".join(vocab[rng.integers(0, len(vocab), k)]) for k in lengths]
            writer.write_table(
                pa.table(
                    {
                        "pid": [f"p{start + i}" for i in range(count)],
                        "title": [f"title {(start + i) % 997}" for i in range(count)],
                        "text": texts,
                    },
                    schema=schema,
                )
            )


def child(args: argparse.Namespace) -> int:
    import torch

    from pipeline.retrieval.encode import encode_table
    from pipeline.retrieval.model import Retriever, RetrieverSettings

    torch.set_num_threads(args.threads)
    settings = RetrieverSettings(base="tiny", passage_max_len=args.max_len)
    retriever = Retriever.from_pretrained(args.model, settings).eval()
    began = time.perf_counter()
    stats = encode_table(
        retriever,
        args.corpus,
        args.out,
        0,
        1,
        batch_size=args.batch_size,
        sort_buffer=args.sort_buffer,
        device=torch.device("cpu"),
        progress=False,
    )
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    print(
        json.dumps(
            {"rows": stats["rows"], "peak_mib": peak_kib / 1024, "seconds": time.perf_counter() - began}
        )
    )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="short passages (8-30 words), max_len 32, batch 256"
    )
    parser.add_argument("--small", type=int, default=10_000)
    parser.add_argument("--large", type=int, default=100_000)
    parser.add_argument("--sort-buffer", type=int, default=5_000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--corpus", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--max-len", type=int, default=128, help=argparse.SUPPRESS)
    parser.add_argument("--batch-size", type=int, default=128, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)

    from pipeline.retrieval.model import make_tiny_encoder

    words, max_len, batch = ((8, 30), 32, 256) if args.quick else ((40, 120), 128, 128)
    print(f"machine: {os.cpu_count()} cpus, load average {os.getloadavg()[0]:.2f}")
    results = {}
    with tempfile.TemporaryDirectory(prefix="encode_memory_") as tmp:
        tmp = Path(tmp)
        make_tiny_encoder(tmp / "tiny", seed=args.seed)
        for n in (args.small, args.large):
            write_corpus(tmp / f"corpus{n}.parquet", n, args.seed, words)
        for n in (args.small, args.large):
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--child",
                    "--model",
                    str(tmp / "tiny"),
                    "--corpus",
                    str(tmp / f"corpus{n}.parquet"),
                    "--out",
                    str(tmp / f"emb{n}"),
                    "--sort-buffer",
                    str(args.sort_buffer),
                    "--threads",
                    str(args.threads),
                    "--max-len",
                    str(max_len),
                    "--batch-size",
                    str(batch),
                ],
                check=True,
                capture_output=True,
                text=True,
                cwd=ROOT,
            )
            results[n] = json.loads(out.stdout.strip().splitlines()[-1])
            r = results[n]
            print(
                f"{n:>7} passages: peak RSS {r['peak_mib']:.1f} MiB, {r['seconds']:.1f} s "
                f"({n / r['seconds']:.0f} passages/s), sort buffer {args.sort_buffer}, "
                f"max_len {max_len}, batch {batch}"
            )
    ratio = results[args.large]["peak_mib"] / results[args.small]["peak_mib"]
    print(f"load average now {os.getloadavg()[0]:.2f}")
    print(f"RESULT encode_memory_growth ratio={ratio:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""On PYTHONPATH during scripts/gpu_check.sh's scale run: every Python process that used CUDA appends,
at exit, its pid, command line and torch.cuda.max_memory_allocated to the JSONL file $SIEVE_GPU_PEAKS
(bench/gpu_scale.py matches them to the Snakemake jobs by their --log argument). Without that variable
it does nothing."""

import atexit
import json
import os
import sys


def _record() -> None:
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return
    peak = max(torch.cuda.max_memory_allocated(i) for i in range(torch.cuda.device_count()))
    line = {"pid": os.getpid(), "argv": sys.argv, "peak_allocated_gib": round(peak / 2**30, 3)}
    with open(os.environ["SIEVE_GPU_PEAKS"], "a", encoding="utf-8") as handle:
        handle.write(json.dumps(line) + "\n")


if os.environ.get("SIEVE_GPU_PEAKS"):
    atexit.register(_record)

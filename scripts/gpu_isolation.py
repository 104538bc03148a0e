"""While scripts/gpu_check.sh's workflow runs, which processes hold GPU memory, and were they allowed to?

  python scripts/gpu_isolation.py sample --out FILE [--interval 0.5] [--for SECONDS]
  python scripts/gpu_isolation.py decide FILE

The environment-variable checks (tests/test_gpu_isolation.py) prove what each job is told; this reads
what the GPU holds. `sample` asks nvidia-smi for every compute process and its memory
(--query-compute-apps=pid,used_memory) each interval, until SIGTERM or --for seconds, and appends one
JSON line per process seen: its memory and a verdict read from /proc at that moment. A process is the
workflow's when its environment holds SIEVE_GPU_PEAKS (bench/gpu_scale.py gives it to Snakemake, and
every job inherits it). Walking from the process up through its workflow ancestors, the nearest
`--device X` on a command line is what its job was told; the job holds no GPU when that is cpu or any
of them started with CUDA_VISIBLE_DEVICES empty. Verdicts:
  gpu-job     told cuda/auto: allowed;
  no-gpu-job  told cpu, or CUDA_VISIBLE_DEVICES empty: a violation (a JAX-style grab);
  no-device   the workflow's, but no --device anywhere (a model-free job, e.g. BM25): a violation too;
  outside     not the workflow's (another user, the check's own tests): ignored;
  unseen      gone before /proc was read, or in another PID namespace: unchecked, counted.
`decide` prints one line and exits 1 on any violation. Standard library only, any Python 3.8+.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

SCOPE = "SIEVE_GPU_PEAKS"
QUERY = ["--query-compute-apps=pid,used_memory", "--format=csv,noheader"]
VIOLATIONS = ("no-gpu-job", "no-device")
_LINE = re.compile(r"^\s*(\d+)\s*,\s*(\[N/A\]|N/A|\d+(?:\.\d+)?)\s*(MiB)?\s*$")


def parse_smi(text: str) -> tuple[list[tuple[int, float | None]], list[str]]:
    """(pid, MiB or None where nvidia-smi says N/A) per process line, and the lines it could not read."""
    rows, odd = [], []
    for line in text.splitlines():
        if not line.strip() or "No running" in line:
            continue
        match = _LINE.match(line)
        if not match:
            odd.append(line.strip())
            continue
        used = match.group(2)
        rows.append((int(match.group(1)), None if "N/A" in used else float(used)))
    return rows, odd


def _read(pid: int, name: str) -> bytes | None:
    try:
        with open(f"/proc/{pid}/{name}", "rb") as handle:
            return handle.read()
    except OSError:
        return None


def _parent(pid: int) -> int | None:
    stat = _read(pid, "stat")
    if stat is None:
        return None
    return int(stat[stat.rfind(b")") + 2 :].split()[1])


def _device_flag(argv: list[str]) -> str | None:
    for i, arg in enumerate(argv):
        if arg == "--device" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--device="):
            return arg.split("=", 1)[1]
    return None


def classify(pid: int) -> tuple[str, str]:
    """(verdict, the command line that decided it) for a process holding GPU memory."""
    environ = _read(pid, "environ")
    if environ is None:
        return "unseen", ""
    if not any(item.startswith(SCOPE.encode() + b"=") for item in environ.split(b"\0")):
        return "outside", ""
    told = None
    current: int | None = pid
    first = ""
    while current and current > 1:
        env = _read(current, "environ")
        cmdline = _read(current, "cmdline")
        if env is None or cmdline is None:
            break
        items = env.split(b"\0")
        if not any(item.startswith(SCOPE.encode() + b"=") for item in items):
            break  # above the workflow: Snakemake's caller
        argv = [a.decode(errors="replace") for a in cmdline.split(b"\0") if a]
        first = first or " ".join(argv)[:200]
        if b"CUDA_VISIBLE_DEVICES=" in items:
            return "no-gpu-job", " ".join(argv)[:200]
        flag = _device_flag(argv)
        if told is None and flag is not None:
            told = flag
            if flag == "cpu":
                return "no-gpu-job", " ".join(argv)[:200]
        current = _parent(current)
    if told in ("cuda", "auto") or (told or "").startswith("cuda:"):
        return "gpu-job", first
    return "no-device", first


def sample_once(smi: str = "nvidia-smi") -> list[dict]:
    try:
        done = subprocess.run([smi, *QUERY], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [{"error": f"{smi}: {exc}", "call_failed": True}]
    if done.returncode:
        return [{"error": f"{smi} exit {done.returncode}: {done.stderr.strip()[:200]}", "call_failed": True}]
    rows, odd = parse_smi(done.stdout)
    records: list[dict] = [{"error": f"unreadable nvidia-smi line: {line}"} for line in odd]
    for pid, used in rows:
        verdict, command = classify(pid)
        records.append({"pid": pid, "used_mib": used, "verdict": verdict, "command": command})
    return records


def sample(out: Path, interval: float, duration: float | None, smi: str) -> int:
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    started = time.monotonic()
    with out.open("a", encoding="utf-8") as handle:
        while not stop and (duration is None or time.monotonic() - started < duration):
            now = round(time.monotonic() - started, 2)
            for record in sample_once(smi):
                handle.write(json.dumps({"t": now, **record}) + "\n")
            handle.write(json.dumps({"t": now, "sampled": True}) + "\n")
            handle.flush()
            time.sleep(interval)
    return 0


def decide(path: Path) -> tuple[int, str]:
    """(exit status, one line) from the samples."""
    samples = failed_calls = 0
    worst: dict[int, dict] = {}
    counts: dict[str, set[int]] = {}
    errors = []
    for line in path.read_text(encoding="utf-8").splitlines() if path.is_file() else []:
        record = json.loads(line)
        if record.get("sampled"):
            samples += 1
        elif "error" in record:
            errors.append(record["error"])
            failed_calls += bool(record.get("call_failed"))
        else:
            counts.setdefault(record["verdict"], set()).add(record["pid"])
            if record["verdict"] in VIOLATIONS:
                old = worst.get(record["pid"])
                if old is None or (record["used_mib"] or 0) > (old["used_mib"] or 0):
                    worst[record["pid"]] = record
    seen = ", ".join(f"{len(pids)} {verdict}" for verdict, pids in sorted(counts.items())) or "no process"
    if not samples:
        return 1, "GPU isolation: no nvidia-smi sample taken" + (f" ({errors[0]})" if errors else "")
    if failed_calls >= samples:
        return 1, f"GPU isolation unchecked: nvidia-smi failed on all {samples} samples ({errors[0]})"
    if worst:
        first = sorted(worst.values(), key=lambda r: -(r["used_mib"] or 0))[0]
        return 1, (
            f"GPU isolation FAILED: {len(worst)} process(es) of jobs without a GPU held GPU memory, largest "
            f"pid {first['pid']} {first['used_mib']} MiB ({first['verdict']}): {first['command']}"
        )
    note = f"; {len(errors)} unreadable reading(s), first: {errors[0]}" if errors else ""
    unchecked = ""
    if "gpu-job" not in counts:
        unchecked = "; no workflow process seen on the GPU, so isolation is unchecked"
    return 0, f"GPU isolation ok: {samples} samples, {seen}{unchecked}{note}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    s = sub.add_parser("sample")
    s.add_argument("--out", type=Path, required=True)
    s.add_argument("--interval", type=float, default=0.5)
    s.add_argument("--for", dest="duration", type=float, default=None, help="seconds, then stop")
    s.add_argument("--smi", default=os.environ.get("NVIDIA_SMI", "nvidia-smi"))
    d = sub.add_parser("decide")
    d.add_argument("file", type=Path)
    args = ap.parse_args(argv)
    if args.command == "sample":
        return sample(args.out, args.interval, args.duration, args.smi)
    code, line = decide(args.file)
    print(line)
    return code


if __name__ == "__main__":
    sys.exit(main())

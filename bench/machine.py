"""What every benchmark prints beside its times: the CPU's model name, and a process's memory peak.

Standard library only: bench/encode_worker.py imports it from another virtual environment too.
"""

from __future__ import annotations

import resource
import subprocess
from pathlib import Path


def cpu_model_name() -> str:
    """The CPU's model name as lscpu and /proc/cpuinfo give it ("unknown CPU" where neither does)."""
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                return value.strip()
    except OSError:
        pass
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
    except OSError:
        return "unknown CPU"
    for line in out.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "Model name":
            return value.strip()
    return "unknown CPU"


def _status_mib(field: str) -> float | None:
    """A memory field of /proc/self/status (VmRSS, VmHWM) in MiB; None where there is no /proc."""
    status = Path("/proc/self/status")
    if not status.exists():
        return None
    for line in status.read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return None


def peak_rss_mib() -> float:
    """This process's peak resident set so far (VmHWM; else ru_maxrss, KiB on Linux), MiB."""
    peak = _status_mib("VmHWM")
    return peak if peak is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def current_rss_mib() -> float:
    rss = _status_mib("VmRSS")
    return rss if rss is not None else float("nan")

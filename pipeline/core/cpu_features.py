"""What a run will compute in on this CPU, said before the first job (the Snakefile prints it).

Torch-free on purpose: the Snakefile is parsed for every ``snakemake`` call (dry runs included), and
importing torch there would add seconds to each. The CPU's flags come from ``/proc/cpuinfo``; each
training and encoding job still decides with torch's own probe (pipeline.core.precision) and logs
the precision it computes in, which is the authoritative record.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
PRECISION_SETTINGS = ("dpr", "ccr", "ar2", "sieve.cross_encoder")  # sections with a `precision` key
# Tests and users can pin the CPU answer without touching the config (which would rerun rules):
# SIEVE_CPU_BF16=0 computes fp32 as on a CPU without bf16, e.g. to match numbers made on one.
NATIVE_BF16_ENV = "SIEVE_CPU_BF16"
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def forced_native_bf16(env: Mapping[str, str]) -> bool | None:
    """SIEVE_CPU_BF16's answer (True/False), or None when unset; any other value is a ValueError."""
    forced = env.get(NATIVE_BF16_ENV)
    if forced is None:
        return None
    value = forced.strip().lower()
    if value not in _TRUE + _FALSE:
        raise ValueError(
            f"environment variable {NATIVE_BF16_ENV}={forced!r}: expected one of {', '.join(_TRUE + _FALSE)}"
        )
    return value in _TRUE


def _cpuinfo_field(keys: tuple[str, ...], cpuinfo: str | os.PathLike) -> str | None:
    """The first processor's value of the first of ``keys`` found, or None (no file, as on macOS)."""
    path = Path(cpuinfo)
    if not path.exists():
        return None
    for line in path.read_text(errors="replace").splitlines():
        key, _, value = line.partition(":")
        if key.strip() in keys:
            return value.strip()
    return None


def cpu_flags(cpuinfo: str | os.PathLike = "/proc/cpuinfo") -> set[str] | None:
    """The first processor's flags, or None where the file does not exist or holds none (macOS)."""
    flags = _cpuinfo_field(("flags", "Features"), cpuinfo)
    return None if flags is None else set(flags.split())


def cpu_model_name(cpuinfo: str | os.PathLike = "/proc/cpuinfo") -> str | None:
    """The CPU's model name as lscpu prints it ("Intel(R) Xeon(R) Processor"), or None."""
    return _cpuinfo_field(("model name",), cpuinfo)


def _section(config: Mapping[str, Any], dotted: str) -> Mapping[str, Any]:
    node: Any = config
    for part in dotted.split("."):
        node = node.get(part, {}) if isinstance(node, Mapping) else {}
    return node if isinstance(node, Mapping) else {}


def precision_banner(config: Mapping[str, Any], flags: set[str] | None, env: Mapping[str, str]) -> str:
    """One line: the precision CPU jobs will compute in under ``config`` on a CPU with ``flags``,
    and why (the settings, the CPU's native bf16, or the SIEVE_CPU_BF16 override)."""
    asked = {name: _section(config, name).get("precision") for name in PRECISION_SETTINGS}
    bf16_settings = sorted(name for name, value in asked.items() if value == "bf16")
    if not bf16_settings:
        return (
            "CPU jobs compute in fp32: every precision setting (dpr, ccr, ar2, sieve.cross_encoder) is fp32"
        )
    named = ", ".join(f"{name}.precision" for name in bf16_settings)
    forced = forced_native_bf16(env)
    if forced is True:
        return f"CPU jobs compute {named} in bf16: {NATIVE_BF16_ENV}={env[NATIVE_BF16_ENV]} says this CPU has native bf16"
    if forced is False:
        return f"CPU jobs compute in fp32: {NATIVE_BF16_ENV}={env[NATIVE_BF16_ENV]} (set on purpose; unset it to use the CPU's bf16)"
    if flags is None:
        return (
            f"CPU jobs compute {named} in bf16 if this CPU has native bf16 (AVX512-BF16 or AMX), else in "
            "fp32; each job logs which"
        )
    native = sorted(f for f in NATIVE_BF16_FLAGS if f in flags)
    if native:
        return (
            f"CPU jobs compute {named} in bf16: this CPU has native bf16 ({', '.join(native)}); "
            f"{NATIVE_BF16_ENV}=0 computes fp32"
        )
    return (
        f"CPU jobs compute in fp32: this CPU has no native bf16 (no AVX512-BF16 or AMX), so {named} "
        "fall back to fp32, about 4x slower than on a CPU with it; GPU jobs use the settings"
    )

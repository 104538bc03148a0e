"""Which float type a model computes in: one rule for training and encoding, on CUDA and on CPU.

``precision`` (dpr/ccr/ar2 sections) and ``encode.amp`` ask for mixed precision; what they get
depends on the device:

- CUDA: bf16 or fp16 autocast as asked (encoding: fp16).
- CPU with native bf16 (AVX512-BF16 or AMX: Intel Cooper Lake / Sapphire Rapids and later, AMD Zen 4
  and later): bf16 autocast. Measured on this project's 2-core EPYC (bench/precision.py, 2 threads):
  MiniLM training steps 2.0x and corpus encoding 2.5x faster than fp32; embeddings agree with fp32
  to a cosine of 0.99997 or more.
- any other CPU: fp32 (an emulated bf16 would be slower than fp32); fp16 on CPU: fp32.

Autocast covers the encoder forwards only (inside them, CPU autocast also runs LayerNorm and the
attention softmax in bf16); pooling, normalisation, the ranker's head, scores, losses and the
optimizer stay fp32, and weights are stored fp32. The values reached still depend on the precision,
so checkpoint fingerprints and ``train_info.json`` record the one used (``compute_precision``).
``precision: fp32`` (``encode.amp: false``) forces fp32; so does ``SIEVE_CPU_BF16=0`` in the
environment without changing the config, e.g. to compare with numbers made on a CPU without bf16.
"""

from __future__ import annotations

import contextlib
import os

import torch

from pipeline.core.cpu_features import NATIVE_BF16_ENV, forced_native_bf16  # noqa: F401 (re-exported)
from pipeline.core.settings.base import PRECISIONS

NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16", None: "fp32"}


def cpu_has_native_bf16() -> bool:
    """True when this CPU computes bf16 matmuls in hardware (AVX512-BF16 or AMX tiles)."""
    forced = forced_native_bf16(os.environ)
    if forced is not None:
        return forced
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(bool(getattr(torch.cpu, name, lambda: False)()) for name in probes)


def autocast_dtype(device: torch.device | str, precision: str) -> torch.dtype | None:
    """The autocast dtype for ``precision`` on ``device``; None = compute in fp32."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    kind = torch.device(device).type
    if precision == "fp32":
        return None
    if kind == "cuda":
        return torch.bfloat16 if precision == "bf16" else torch.float16
    if kind == "cpu" and precision == "bf16" and cpu_has_native_bf16():
        return torch.bfloat16
    return None


def encoding_dtype(device: torch.device | str, amp: bool) -> torch.dtype | None:
    """Encoding's autocast: fp16 on CUDA, bf16 on a CPU with native bf16; None when ``amp`` is off."""
    if not amp:
        return None
    return autocast_dtype(device, "fp16" if torch.device(device).type == "cuda" else "bf16")


def autocast(device: torch.device | str, dtype: torch.dtype | None) -> contextlib.AbstractContextManager:
    """``torch.autocast`` for ``dtype`` on ``device``'s type, or nothing for None (fp32)."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=torch.device(device).type, dtype=dtype)


def precision_name(dtype: torch.dtype | None) -> str:
    return NAMES[dtype]

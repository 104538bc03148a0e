"""A retriever tower compiled by OpenVINO, for corpus encoding on the CPU (``encode.backend: openvino``).

The tower (encoder + pooling + normalisation, ``Retriever.embed_passages`` / ``embed_queries``) is
converted from the loaded torch module, so any model folder the torch path encodes works, and the
embeddings are the same function of the same token ids: the batches ``encode_buffer`` builds (token
length sorted, padded to each batch's longest row) go in unchanged. Measured on MiniLM (docs/encoding.md):
fp32 at cosine 1.000000 of torch's fp32 and about twice its speed; bf16 (on a CPU with native bf16,
where the torch path autocasts to bf16 too) at cosine 0.99998 and about 2.5x torch's bf16.

Conversion takes seconds per job (``convert_model`` traces the module once), small against a shard
of thousands of passages, and nothing is cached on disk: a model folder changes whenever training
reruns, and a stale compiled copy would silently encode with old weights.
"""

from __future__ import annotations

import logging
import time
import warnings
from typing import Literal

import numpy as np
import torch

log = logging.getLogger("sieve.encode")

Kind = Literal["passage", "query"]


class _Tower(torch.nn.Module):
    """The retriever's passage or query embedding as a module of named int64 inputs (what
    ``openvino.convert_model`` traces)."""

    def __init__(self, retriever, kind: Kind, inputs: tuple[str, ...]) -> None:
        super().__init__()
        self.retriever, self.kind, self.inputs = retriever, kind, inputs

    def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
        batch = dict(zip(self.inputs, tensors))
        embed = self.retriever.embed_passages if self.kind == "passage" else self.retriever.embed_queries
        return embed(batch)


class OpenVINOTower:
    """``tower(batch)`` -> float32 embeddings [rows, dim] for a batch of token arrays, as
    ``Retriever.embed_passages`` (kind ``passage``) or ``embed_queries`` computes them, on the CPU in
    ``precision`` (``fp32``, or ``bf16`` where the CPU has native bf16) with ``threads`` threads."""

    def __init__(
        self,
        retriever,
        kind: Kind,
        example: dict[str, np.ndarray],
        precision: Literal["fp32", "bf16"] = "fp32",
        threads: int | None = None,
    ) -> None:
        try:
            import openvino as ov
        except ImportError as error:  # a dependency of the package; say how to get it back
            raise RuntimeError(
                "encode.backend openvino needs the openvino package: pip install openvino "
                "(or set encode.backend: torch)"
            ) from error
        if precision not in ("fp32", "bf16"):
            raise ValueError(f"OpenVINO encodes in fp32 or bf16, not {precision!r}")
        began = time.perf_counter()
        self.inputs = tuple(example)
        module = _Tower(retriever.cpu().eval(), kind, self.inputs)
        tensors = tuple(torch.from_numpy(np.ascontiguousarray(example[k])).long() for k in self.inputs)
        with torch.inference_mode(False), torch.no_grad(), warnings.catch_warnings():
            # transformers' mask code branches on shapes (padding the mask when keys outnumber it,
            # causal only without a mask); an encoder's mask always spans its keys and is always
            # given, so the traced branch is the one every batch takes (tests cover varied widths).
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            model = ov.convert_model(module, example_input=tensors)
        config = {
            "INFERENCE_PRECISION_HINT": "bf16" if precision == "bf16" else "f32",
            "INFERENCE_NUM_THREADS": str(threads or torch.get_num_threads()),
            # OpenVINO pins its threads to cores by default, each process from core 0: the demo's two
            # one-thread shard jobs then share one core (measured 1.5x slower than torch, instead of
            # 1.2-1.4x faster). The scheduler (Snakemake's --cores, SLURM's cpus) places jobs instead.
            "ENABLE_CPU_PINNING": "NO",
        }
        self.compiled = ov.Core().compile_model(model, "CPU", config)
        self.precision = precision
        log.info(
            "OpenVINO %s: %s tower compiled in %.1f s (%s threads)",
            ov.__version__.split("-")[0],
            kind,
            time.perf_counter() - began,
            config["INFERENCE_NUM_THREADS"],
        )

    def __call__(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        feed = [np.ascontiguousarray(batch[k], dtype=np.int64) for k in self.inputs]
        return np.asarray(self.compiled(feed)[0], dtype=np.float32)

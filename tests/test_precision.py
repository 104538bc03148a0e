"""pipeline.core.precision: what each precision setting computes in, per device and CPU."""

import numpy as np
import pytest
import torch

from pipeline.core import precision
from pipeline.core.precision import autocast, autocast_dtype, encoding_dtype, precision_name


@pytest.fixture(params=["1", "0"], ids=["native_bf16", "no_bf16"])
def cpu_bf16(request, monkeypatch):
    monkeypatch.setenv(precision.NATIVE_BF16_ENV, request.param)
    return request.param == "1"


def test_cpu_follows_native_bf16(cpu_bf16):
    expected = torch.bfloat16 if cpu_bf16 else None
    assert autocast_dtype("cpu", "bf16") is expected
    assert autocast_dtype("cpu", "fp16") is None  # CPU fp16 autocast: never (slow, no scaler)
    assert autocast_dtype("cpu", "fp32") is None
    assert encoding_dtype("cpu", True) is expected
    assert encoding_dtype("cpu", False) is None


def test_cuda_is_as_asked():
    assert autocast_dtype("cuda", "bf16") is torch.bfloat16
    assert autocast_dtype("cuda", "fp16") is torch.float16
    assert autocast_dtype("cuda", "fp32") is None
    assert encoding_dtype("cuda", True) is torch.float16
    assert encoding_dtype("cuda", False) is None


def test_unknown_precision_is_refused():
    with pytest.raises(ValueError, match="precision must be one of bf16, fp16, fp32, got 'fp8'"):
        autocast_dtype("cpu", "fp8")


def test_names():
    assert [precision_name(d) for d in (torch.bfloat16, torch.float16, None)] == ["bf16", "fp16", "fp32"]


def test_autocast_lowers_matmuls_only_when_asked(monkeypatch):
    monkeypatch.setenv(precision.NATIVE_BF16_ENV, "1")
    a, b = torch.randn(4, 8), torch.randn(8, 3)
    with autocast("cpu", autocast_dtype("cpu", "bf16")):
        assert (a @ b).dtype == torch.bfloat16
    with autocast("cpu", None):
        assert (a @ b).dtype == torch.float32


def test_env_pins_the_cpu_answer(monkeypatch):
    for value, expected in (
        ("1", True),
        ("Yes", True),
        ("on", True),
        ("0", False),
        ("False", False),
        (" OFF ", False),
    ):
        monkeypatch.setenv(precision.NATIVE_BF16_ENV, value)
        assert precision.cpu_has_native_bf16() is expected
    monkeypatch.setenv(precision.NATIVE_BF16_ENV, "maybe")
    with pytest.raises(ValueError, match="SIEVE_CPU_BF16='maybe': expected one of 1, true"):
        precision.cpu_has_native_bf16()


def test_bf16_encoding_agrees_with_fp32(tmp_path, monkeypatch):
    """A tiny encoder's embeddings under bf16 autocast stay close to fp32 (cosine), both deterministic."""
    from pipeline.retrieval.encode import encode_buffer
    from pipeline.retrieval.model import Retriever, make_tiny_encoder

    monkeypatch.setenv(precision.NATIVE_BF16_ENV, "1")
    retriever = Retriever.from_pretrained(str(make_tiny_encoder(tmp_path / "enc"))).eval()
    texts = [f"passage number {i} about the river {i % 7}" for i in range(20)]
    titles = [f"title {i}" for i in range(20)]

    def run(amp):
        return encode_buffer(
            retriever, texts, titles, batch_size=8, device=torch.device("cpu"), amp=amp, dtype=torch.float32
        )

    fp32, bf16 = run(False), run(True)
    assert not np.array_equal(fp32, bf16)  # bf16 really computed
    np.testing.assert_array_equal(bf16, run(True))  # and deterministically
    cos = (fp32 * bf16).sum(1) / np.linalg.norm(fp32, axis=1) / np.linalg.norm(bf16, axis=1)
    assert cos.min() > 0.99

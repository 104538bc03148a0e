"""The line a run prints before its first job: which precision CPU jobs compute in, and why."""

from __future__ import annotations

import pytest

from pipeline.core.cpu_features import cpu_flags, cpu_model_name, precision_banner

BF16 = {"dpr": {"precision": "bf16"}, "ccr": {"precision": "bf16"}, "ar2": {"precision": "bf16"}}
XEON = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n\nprocessor\t: 1\n"
EPYC = "processor\t: 0\nflags\t\t: fpu sse2 avx2 fma\n"


@pytest.mark.parametrize(
    "cpuinfo,expected",
    [(XEON, {"avx512_bf16", "amx_bf16"}), (EPYC, set()), ("processor\t: 0\n", None)],
    ids=["xeon", "epyc", "no-flags"],
)
def test_cpu_flags_read_the_first_processor(tmp_path, cpuinfo, expected):
    path = tmp_path / "cpuinfo"
    path.write_text(cpuinfo)
    flags = cpu_flags(path)
    if expected is None:
        assert flags is None
    else:
        assert expected <= flags and ("amx_bf16" in flags) == ("amx_bf16" in expected)
    assert cpu_flags(tmp_path / "absent") is None


def test_the_model_name_is_the_first_processors(tmp_path):
    path = tmp_path / "cpuinfo"
    path.write_text("processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Processor\n\nmodel name\t: other\n")
    assert cpu_model_name(path) == "Intel(R) Xeon(R) Processor"
    assert cpu_model_name(tmp_path / "absent") is None


def test_a_cpu_with_native_bf16_computes_the_bf16_settings_in_bf16():
    line = precision_banner(BF16, {"avx2", "avx512_bf16", "amx_bf16"}, {})
    assert line.startswith("CPU jobs compute ar2.precision, ccr.precision, dpr.precision in bf16")
    assert "amx_bf16, avx512_bf16" in line and "SIEVE_CPU_BF16=0" in line


def test_an_avx2_cpu_computes_fp32_and_says_why():
    line = precision_banner(BF16, {"avx2", "fma"}, {})
    assert line.startswith("CPU jobs compute in fp32: this CPU has no native bf16")
    assert "4x slower" in line


def test_fp32_settings_and_the_override_win_over_the_cpu():
    fp32 = {name: {"precision": "fp32"} for name in ("dpr", "ccr", "ar2")}
    assert "every precision setting" in precision_banner(fp32, {"avx512_bf16"}, {})
    pinned = precision_banner(BF16, {"avx512_bf16"}, {"SIEVE_CPU_BF16": "0"})
    assert pinned.startswith("CPU jobs compute in fp32: SIEVE_CPU_BF16=0")
    forced = precision_banner(BF16, {"avx2"}, {"SIEVE_CPU_BF16": "1"})
    assert "in bf16: SIEVE_CPU_BF16=1" in forced


def test_only_the_bf16_settings_are_named():
    mixed = {
        "dpr": {"precision": "bf16"},
        "ccr": {"precision": "fp32"},
        "sieve": {"cross_encoder": {"precision": "bf16"}},
    }
    line = precision_banner(mixed, {"amx_bf16"}, {})
    assert "dpr.precision, sieve.cross_encoder.precision in bf16" in line and "ccr" not in line


def test_without_cpu_flags_the_line_says_each_job_logs_its_precision():
    assert "each job logs which" in precision_banner(BF16, None, {})

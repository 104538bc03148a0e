"""The noise sweep gatherer (pipeline.evaluation.sweep) on hand-made gathered metrics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.core.storage import DataError
from pipeline.evaluation import sweep


def _dataset(tmp_path, name, share, values, para=0.5):
    metrics = {
        "methods": {
            m: {"per_seed": [{"seed": s, "metrics": {"R@5": v}} for s, v in enumerate(vals)]}
            for m, vals in values.items()
        }
    }
    manifest = {
        "false_negatives": {
            "requested": {"fn_share": share, "fn_paraphrase": para},
            "measured": {"share": share + 0.001, "string_free_share": para},
        }
    }
    (tmp_path / f"{name}.metrics.json").write_text(json.dumps(metrics))
    (tmp_path / f"{name}.manifest.json").write_text(json.dumps(manifest))
    return f"{name}={tmp_path / f'{name}.metrics.json'}:{tmp_path / f'{name}.manifest.json'}"


def _sweep(datasets: list[str], methods: list[str], out: Path, *extra: str) -> int:
    """sweep.main on ``datasets`` (_dataset's arguments) and ``methods``; its figure beside ``out``."""
    argv = ["--dataset", *datasets, "--methods", *methods, "--out-json", str(out)]
    return sweep.main([*argv, "--out-png", str(out.with_suffix(".png")), *extra])


def test_paired_differences_and_oracle_gap(tmp_path):
    low = _dataset(
        tmp_path,
        "low",
        0.02,
        {"dpr": [0.80, 0.82, 0.84], "dpr_sieve": [0.80, 0.82, 0.84], "dpr_oracle": [0.80, 0.82, 0.84]},
    )
    high = _dataset(
        tmp_path,
        "high",
        0.5,
        {"dpr": [0.60, 0.62, 0.64], "dpr_sieve": [0.65, 0.66, 0.69], "dpr_oracle": [0.70, 0.72, 0.74]},
    )
    out = tmp_path / "noise.json"
    assert _sweep([high, low], ["dpr", "dpr_sieve", "dpr_oracle"], out) == 0
    result = json.loads(out.read_text())
    assert [p["dataset"] for p in result["points"]] == ["low", "high"]  # by requested level
    high_point = result["points"][1]
    assert high_point["fn_share"] == pytest.approx(0.501)
    oracle = high_point["vs_baseline"]["dpr_oracle"]
    assert oracle["mean"] == pytest.approx(0.10) and oracle["ci_low"] == pytest.approx(0.10)  # no spread
    sieve = high_point["vs_baseline"]["dpr_sieve"]
    assert sieve["mean"] == pytest.approx(0.14 / 3)  # (0.05 + 0.04 + 0.05) / 3
    assert sieve["ci_low"] < sieve["mean"] < sieve["ci_high"]
    assert high_point["oracle_gap_closed"]["dpr_sieve"] == pytest.approx(sieve["mean"] / 0.10)
    assert result["points"][0]["oracle_gap_closed"]["dpr_sieve"] is None  # the oracle gains nothing
    assert high_point["methods"]["dpr"]["mean"] == pytest.approx(0.62)
    assert (tmp_path / "noise.png").stat().st_size > 1000
    assert "sieve" not in high_point


def test_pairs_with_a_same_pool_control(tmp_path):
    high = _dataset(
        tmp_path,
        "high",
        0.5,
        {
            "dpr": [0.60, 0.62, 0.64],
            "dpr_none": [0.50, 0.52, 0.54],
            "dpr_sieve": [0.55, 0.56, 0.59],
            "dpr_oracle": [0.70, 0.72, 0.74],
        },
    )
    out, md = tmp_path / "noise.json", tmp_path / "noise.md"
    assert (
        _sweep(
            [high],
            ["dpr", "dpr_none", "dpr_sieve", "dpr_oracle"],
            out,
            "--pairs",
            '[["dpr_sieve", "dpr_none"], ["dpr_oracle", "dpr_none"]]',
            "--out-md",
            str(md),
        )
        == 0
    )
    point = json.loads(out.read_text())["points"][0]
    none = point["pairs"]["dpr_none"]
    assert none["dpr_sieve"]["mean"] == pytest.approx(0.14 / 3)  # (0.05 + 0.04 + 0.05) / 3
    assert none["dpr_oracle"]["mean"] == pytest.approx(0.20)
    assert point["pairs_oracle_gap_closed"]["dpr_none"]["dpr_sieve"] == pytest.approx(0.14 / 3 / 0.20)
    assert "Paired with dpr_none:" in md.read_text() and "| +0.23 |" in md.read_text()
    with pytest.raises(DataError, match="'dpr_x' must be one of the sweep's methods"):
        _sweep([high], ["dpr", "dpr_oracle"], out, "--pairs", '[["dpr_x", "dpr"]]')


def _report(path, n=10, labelled=10, fns=4, out=0.5, recall=0.75, kept=4 / 6, auc=0.6):
    path.write_text(
        json.dumps(
            {
                "n_candidates": n,
                "n_labelled": labelled,
                "n_false_negatives": fns,
                "sieve_out_rate": out,
                "recall": recall,
                "true_negative_retention": kept,
                "separation_auc": auc,
                "separation_auc_per_query": 0.7,
            }
        )
    )
    return str(path)


def test_sieve_rates_per_level(tmp_path):
    high = _dataset(tmp_path, "high", 0.5, {"dpr": [0.6, 0.7], "dpr_oracle": [0.7, 0.8]})
    report = _report(tmp_path / "report.json")
    out = tmp_path / "noise.json"
    md = tmp_path / "noise.md"
    assert _sweep([high], ["dpr", "dpr_oracle"], out, "--sieve", f"high={report}", "--out-md", str(md)) == 0
    assert "| high | 50.1% | 50% | 0.650 | +0.100 [+0.100, +0.100] |" in md.read_text()  # no spread
    assert "| high | 10 | 0.400 | 0.500 | 0.750 | 0.667 | 0.600 | 0.700 |" in md.read_text()
    got = json.loads(out.read_text())["points"][0]["sieve"]
    assert got == {
        "candidates": 10,
        "fn_share": pytest.approx(0.4),
        "sieve_out_rate": pytest.approx(0.5),
        "fn_recall": pytest.approx(0.75),
        "tn_kept": pytest.approx(4 / 6),
        "loss_auc": 0.6,
        "loss_auc_per_query": 0.7,
    }
    unlabelled = _report(tmp_path / "u.json", labelled=9)
    with pytest.raises(DataError, match="1 candidates without a false-negative label"):
        _sweep([high], ["dpr", "dpr_oracle"], out, "--sieve", f"high={unlabelled}")
    with pytest.raises(DataError, match="not in --dataset"):
        _sweep([high], ["dpr", "dpr_oracle"], out, "--sieve", f"low={report}")


def test_a_method_missing_from_a_dataset_is_named(tmp_path):
    only = _dataset(tmp_path, "x", 0.3, {"dpr": [0.5, 0.6], "dpr_oracle": [0.6, 0.7]})
    with pytest.raises(DataError, match="'dpr_sieve' is not in the gathered metrics"):
        _sweep([only], ["dpr", "dpr_sieve", "dpr_oracle"], tmp_path / "o.json")


def test_the_oracle_gap_is_read_only_where_the_oracle_gain_is_shown():
    shown = {"dpr_oracle": {"mean": 0.10, "ci_low": 0.02, "ci_high": 0.18}, "dpr_sieve": {"mean": 0.05}}
    assert sweep._gap_closed(shown, "dpr_oracle") == {"dpr_sieve": pytest.approx(0.5)}
    unclear = {"dpr_oracle": {"mean": 0.10, "ci_low": -0.02, "ci_high": 0.22}, "dpr_sieve": {"mean": 0.05}}
    assert sweep._gap_closed(unclear, "dpr_oracle") == {"dpr_sieve": None}

"""Seeds: mean and sample std over per-seed evaluations (AR2 with info.json, others with --seeds),
checks, and the gathered table."""

from __future__ import annotations

import json
import math

import pytest

from pipeline.core.storage import DataError
from pipeline.evaluation.gather import gather, html_table, markdown_table
from pipeline.evaluation.seed_metrics import aggregate_seeds, main

# The keys every aggregated metrics.json starts with, in this order (pipeline.evaluation.seed_metrics).
HEAD = ["dataset", "method", "split", "n_queries", "depth", "seeds", "metrics"]


def _metrics(method: str, r1: float, r5: float, n: int = 10) -> dict:
    return {
        "dataset": "d",
        "method": method,
        "split": "test",
        "n_queries": n,
        "metrics": {"R@1": r1, "R@5": r5},
    }


def _info(seed: int, rnd: int = 1) -> dict:
    return {
        "seed": seed,
        "selected_round": rnd,
        "steps": {"ranker": 4, "retriever": 8, "total": 12},
        "wall_time_s": 10.0,
    }


def test_aggregate_three_seeds():
    metrics = [_metrics("ar2", 0.4, 0.8), _metrics("ar2", 0.5, 0.8), _metrics("ar2", 0.6, 0.8)]
    infos = [_info(0), _info(1, 2), _info(2)]
    out = aggregate_seeds(metrics, infos, ["a", "b", "c"])
    assert out["seeds"] == [0, 1, 2]
    assert out["metrics"]["R@1"] == pytest.approx(0.5)
    assert out["metrics_std"]["R@1"] == pytest.approx(0.1)
    assert out["metrics_std"]["R@5"] == pytest.approx(0.0)
    assert [p["selected_round"] for p in out["per_seed"]] == [1, 2, 1]
    assert out["wall_time_s"] == pytest.approx(30.0)
    assert out["method"] == "ar2" and out["split"] == "test" and out["n_queries"] == 10


def test_single_seed_has_no_std():
    out = aggregate_seeds([_metrics("ar2", 0.4, 0.8)], [_info(3)], ["a"])
    assert "metrics_std" not in out and out["metrics"]["R@1"] == 0.4 and out["seeds"] == [3]


def test_mismatched_seeds_are_refused():
    with pytest.raises(DataError, match="n_queries"):
        aggregate_seeds(
            [_metrics("ar2", 0.4, 0.8), _metrics("ar2", 0.4, 0.8, n=9)], [_info(0), _info(1)], ["a", "b"]
        )
    with pytest.raises(DataError, match="duplicate seeds"):
        aggregate_seeds([_metrics("ar2", 0.4, 0.8)] * 2, [_info(0), _info(0)], ["a", "b"])
    with pytest.raises(DataError, match="one info.json per"):
        aggregate_seeds([_metrics("ar2", 0.4, 0.8)] * 2, [_info(0)], ["a", "b"])


def test_cli_and_gathered_table_show_mean_and_the_95_half_width(tmp_path):
    paths, infos = [], []
    for seed, r1 in ((0, 0.4), (1, 0.6)):
        m = tmp_path / f"m{seed}.json"
        m.write_text(json.dumps(_metrics("ar2_sieve", r1, 0.9)))
        i = tmp_path / f"i{seed}.json"
        i.write_text(json.dumps(_info(seed)))
        paths.append(str(m))
        infos.append(str(i))
    out = tmp_path / "metrics.json"
    assert main(["--metrics", *paths, "--infos", *infos, "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["metrics"]["R@1"] == pytest.approx(0.5)
    assert data["metrics_std"]["R@1"] == pytest.approx(math.sqrt(0.02))
    # metrics.json keeps the std; the tables show the 95% Student-t half-width over the seeds, as every
    # ± of metrics.md does: t(0.975, 1 df) = 12.706 times sqrt(0.02) / sqrt(2)
    table = markdown_table(gather("d", [out]))
    assert "0.500 ± 1.271" in table and "0.900 ± 0.000" in table
    page = html_table(gather("d", [out]))
    assert "<td>ar2_sieve</td>" in page and "<td>0.500 ± 1.271</td>" in page


def test_info_without_seed_names_the_file(tmp_path):
    m = tmp_path / "m.json"
    m.write_text(json.dumps(_metrics("ar2", 0.4, 0.8)))
    i = tmp_path / "bad_info.json"
    i.write_text(json.dumps({"selected_round": 1}))
    with pytest.raises(DataError, match="bad_info.json"):
        main(["--metrics", str(m), "--infos", str(i), "--out", str(tmp_path / "o.json")])


def test_ar2_layout_is_unchanged():
    """The AR2 file's keys and order, as ar2_seeds has always written them."""
    out = aggregate_seeds(
        [
            {**_metrics("ar2", 0.4, 0.8), "depth": 100, "notes": "one run"},
            {**_metrics("ar2", 0.6, 0.8), "depth": 100},
        ],
        [_info(0), _info(1)],
        ["a", "b"],
    )
    assert list(out) == [
        *HEAD,
        "steps",
        "wall_time_s",
        "per_seed",
        "metrics_std",
        "notes",
    ]
    assert list(out["per_seed"][0]) == ["seed", "metrics", "selected_round", "steps", "wall_time_s"]
    assert out["notes"] == "mean over 2 seed(s) [0, 1]; 12 AR2 steps per seed"


def test_seeds_without_infos(tmp_path):
    paths = []
    for seed, r1 in ((3, 0.4), (7, 0.5), (5, 0.6)):
        m = tmp_path / f"m{seed}.json"
        # wall_time_s differs per seed: one run's time describes no aggregate and is dropped
        m.write_text(json.dumps({**_metrics("dpr", r1, 0.8), "depth": 100, "wall_time_s": float(seed)}))
        paths.append(str(m))
    out = tmp_path / "metrics.json"
    assert main(["--metrics", *paths, "--seeds", "3", "7", "5", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert list(data) == [
        *HEAD,
        "per_seed",
        "metrics_std",
        "notes",
    ]
    assert data["seeds"] == [3, 7, 5]
    assert data["per_seed"] == [
        {"seed": 3, "metrics": {"R@1": 0.4, "R@5": 0.8}},
        {"seed": 7, "metrics": {"R@1": 0.5, "R@5": 0.8}},
        {"seed": 5, "metrics": {"R@1": 0.6, "R@5": 0.8}},
    ]
    assert data["metrics"]["R@1"] == pytest.approx(0.5)
    assert data["metrics_std"]["R@1"] == pytest.approx(0.1)
    assert data["notes"] == "mean over 3 seed(s) [3, 7, 5]"


def test_seeds_without_infos_are_checked(tmp_path):
    metrics = [_metrics("dpr", 0.4, 0.8), _metrics("dpr", 0.5, 0.8)]
    with pytest.raises(DataError, match="one seed per metrics.json"):
        aggregate_seeds(metrics, None, ["a", "b"], [0])
    with pytest.raises(DataError, match="duplicate seeds"):
        aggregate_seeds(metrics, None, ["a", "b"], [1, 1])
    with pytest.raises(DataError, match="--infos or --seeds"):
        aggregate_seeds(metrics, None, ["a", "b"])
    m = tmp_path / "m.json"
    m.write_text(json.dumps(metrics[0]))
    with pytest.raises(SystemExit):  # argparse: exactly one of --infos / --seeds
        main(["--metrics", str(m), "--out", str(tmp_path / "o.json")])
    i = tmp_path / "i.json"
    i.write_text(json.dumps(_info(0)))
    with pytest.raises(SystemExit):
        main(["--metrics", str(m), "--infos", str(i), "--seeds", "0", "--out", str(tmp_path / "o.json")])

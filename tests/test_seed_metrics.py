"""AR2 seeds: mean and sample std over per-seed evaluations, checks, and the gathered table."""
from __future__ import annotations

import json
import math

import pytest

from pipeline.evaluation.gather import gather, html_table, markdown_table
from pipeline.core.storage import DataError
from pipeline.evaluation.seed_metrics import aggregate_seeds, main, mean_std


def _metrics(method: str, r1: float, r5: float, n: int = 10) -> dict:
    return {"dataset": "d", "method": method, "split": "test", "n_queries": n,
            "metrics": {"R@1": r1, "R@5": r5}}


def _info(seed: int, rnd: int = 1) -> dict:
    return {"seed": seed, "selected_round": rnd, "steps": {"ranker": 4, "retriever": 8, "total": 12},
            "wall_time_s": 10.0}


def test_mean_std_hand_computed():
    # mean 0.5; deviations -0.1, 0, 0.1 -> sum of squares 0.02 / (3-1) = 0.01 -> std 0.1
    mean, std = mean_std([0.4, 0.5, 0.6])
    assert mean == pytest.approx(0.5)
    assert std == pytest.approx(0.1)
    assert mean_std([0.7]) == (0.7, None)


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
        aggregate_seeds([_metrics("ar2", 0.4, 0.8), _metrics("ar2", 0.4, 0.8, n=9)],
                        [_info(0), _info(1)], ["a", "b"])
    with pytest.raises(DataError, match="duplicate seeds"):
        aggregate_seeds([_metrics("ar2", 0.4, 0.8)] * 2, [_info(0), _info(0)], ["a", "b"])
    with pytest.raises(DataError, match="one info.json per"):
        aggregate_seeds([_metrics("ar2", 0.4, 0.8)] * 2, [_info(0)], ["a", "b"])


def test_cli_and_gathered_table_show_mean_and_std(tmp_path):
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
    table = markdown_table(gather("d", [out]))
    assert "0.500 ± 0.141" in table and "0.900 ± 0.000" in table
    page = html_table(gather("d", [out]))
    assert "<td>ar2_sieve</td>" in page and "<td>0.500 ± 0.141</td>" in page


def test_info_without_seed_names_the_file(tmp_path):
    m = tmp_path / "m.json"
    m.write_text(json.dumps(_metrics("ar2", 0.4, 0.8)))
    i = tmp_path / "bad_info.json"
    i.write_text(json.dumps({"selected_round": 1}))
    with pytest.raises(DataError, match="bad_info.json"):
        main(["--metrics", str(m), "--infos", str(i), "--out", str(tmp_path / "o.json")])

"""Filter trade-off curves (pipeline.sieve.tradeoff) against hand-computed values, and their errors."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from pipeline.core.storage import DataError
from pipeline.sieve import tradeoff

SCORE = np.array([3.0, 2.0, 2.0, 1.0])
IS_FN = np.array([True, False, True, False])


def test_curve_moves_ties_together_and_matches_hand_values():
    curve = tradeoff.tradeoff_curve(SCORE, IS_FN)
    assert curve["fn_recall"] == [0.0, 0.5, 1.0, 1.0]
    assert curve["tn_retention"] == [1.0, 1.0, 0.5, 0.0]
    assert curve["sieve_out_rate"] == [0.0, 0.25, 0.75, 1.0]
    assert curve["threshold"][1:] == [3.0, 2.0, 1.0]
    assert curve["auc"] == pytest.approx(0.875)  # 0.5·(0.5 + 1)/2 + 0.5·1


def test_a_random_score_has_area_near_one_half_and_a_perfect_one_area_one():
    rng = np.random.default_rng(0)
    is_fn = rng.random(20000) < 0.1
    assert tradeoff.tradeoff_curve(rng.random(20000), is_fn)["auc"] == pytest.approx(0.5, abs=0.02)
    assert tradeoff.tradeoff_curve(is_fn.astype(float), is_fn)["auc"] == pytest.approx(1.0)


def test_operating_points():
    assert tradeoff.at_rate(SCORE, IS_FN, 0.5) == {
        "fn_recall": 0.5,
        "tn_retention": 0.5,
        "sieve_out_rate": 0.5,
        "threshold": 2.0,
    }
    assert tradeoff.operating_point(np.array([True, False, False, False]), IS_FN) == {
        "fn_recall": 0.5,
        "tn_retention": 1.0,
        "sieve_out_rate": 0.25,
    }


def test_the_sieve_suspicion_is_threshold_minus_loss():
    df = pd.DataFrame({"nce_loss": [1.0, 3.0], "threshold": [2.0, 2.0]})
    assert tradeoff.suspicion("sieve_b0.5", df).tolist() == [1.0, -1.0]
    with pytest.raises(DataError, match="no continuous score"):
        tradeoff.suspicion("answer_match", df)


def _decisions(path, kept, score=None, is_fn=IS_FN, pids=("a", "b", "c", "d")):
    pd.DataFrame(
        {
            "qid": ["q"] * 4,
            "pid": list(pids),
            "score": SCORE if score is None else score,
            "kept": kept,
            "is_false_negative": pd.array(is_fn, dtype="boolean"),
        }
    ).to_parquet(path)
    return str(path)


def test_cli_compares_filters_at_the_reference_rate(tmp_path):
    sieve = tmp_path / "sieve.parquet"
    pd.DataFrame(
        {
            "qid": ["q"] * 4,
            "pid": list("abcd"),
            "nce_loss": [1.0, 2.0, 3.0, 4.0],
            "threshold": [2.5] * 4,
            "kept": [False, False, True, True],
            "is_false_negative": pd.array(IS_FN, dtype="boolean"),
        }
    ).to_parquet(sieve)
    pa_ = _decisions(tmp_path / "pa.parquet", kept=[False, True, True, True])
    out = tmp_path / "t.json"
    assert (
        tradeoff.main(
            [
                "--decisions",
                f"sieve={sieve}",
                f"positive_aware={pa_}",
                "--out-json",
                str(out),
                "--out-png",
                str(tmp_path / "t.png"),
            ]
        )
        == 0
    )
    result = json.loads(out.read_text())
    assert result["reference_sieve_out_rate"] == 0.5
    assert result["filters"]["positive_aware"]["default"]["fn_recall"] == 0.5
    assert result["filters"]["positive_aware"]["at_reference_rate"]["fn_recall"] == 0.5
    assert result["filters"]["sieve"]["at_reference_rate"]["fn_recall"] == 0.5
    assert (tmp_path / "t.png").stat().st_size > 1000


def test_unknown_truth_and_other_candidates_are_refused(tmp_path):
    a = _decisions(tmp_path / "a.parquet", kept=[True] * 4)
    unknown = _decisions(tmp_path / "u.parquet", kept=[True] * 4, is_fn=[True, None, False, False])
    with pytest.raises(DataError, match="truth of every candidate"):
        tradeoff.build_tradeoff({"positive_aware": unknown}, reference="positive_aware")
    other = _decisions(tmp_path / "o.parquet", kept=[True] * 4, pids=("a", "b", "c", "z"))
    with pytest.raises(DataError, match="same candidates"):
        tradeoff.build_tradeoff({"positive_aware": a, "cross_encoder": other}, reference="positive_aware")


def test_issue27_the_figure_draws_the_random_filters_diagonal():
    """issue 27 (figures): the trade-off had no chance line. A filter dropping candidates at random drops
    the same share of false negatives as of true negatives: recall = 1 − retention, the diagonal from
    (retention 1, recall 0) to (0, 1); a random score's curve lies on it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rng = np.random.default_rng(1)
    is_fn = rng.random(20000) < 0.2
    random_curve = tradeoff.tradeoff_curve(rng.random(20000), is_fn)
    gap = np.abs(np.add(random_curve["fn_recall"], random_curve["tn_retention"]) - 1.0)
    assert gap.max() < 0.03  # the random score's curve follows the chance line

    result = {
        "reference": "sieve",
        "reference_sieve_out_rate": 0.5,
        "filters": {
            name: {
                "default": tradeoff.at_rate(score, is_fn, 0.4),
                "at_reference_rate": tradeoff.at_rate(score, is_fn, 0.5),
                "curve": tradeoff.tradeoff_curve(score, is_fn),
            }
            for name, score in (("sieve", rng.random(20000)), ("cross_encoder", is_fn + rng.random(20000)))
        },
    }
    fig = tradeoff.tradeoff_figure(result)
    try:
        (ax,) = fig.axes
        chance = [line for line in ax.get_lines() if "chance" in line.get_label()]
        assert len(chance) == 1
        retention, recall = chance[0].get_xdata(), chance[0].get_ydata()
        assert list(retention) == [1.0, 0.0] and list(recall) == [0.0, 1.0]
        assert np.allclose(np.add(recall, retention), 1.0)
        assert ax.get_xlabel().startswith("true-negative retention")
        assert ax.get_ylabel().startswith("false-negative recall")
        legend = [t.get_text() for t in ax.get_legend().get_texts()]
        assert legend[0] == "random filter (chance), area 0.5"
        assert [t.split(" (")[0] for t in legend[1:]] == ["sieve", "cross_encoder"]
        curves = [line for line in ax.get_lines() if line.get_label().startswith(("sieve", "cross_encoder"))]
        assert len({line.get_color() for line in curves}) == 2
    finally:
        plt.close(fig)

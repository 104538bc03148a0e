"""AR2 learning-curve figure (pipeline.ar2.learning_curve): dev panels and the per-round sieve-out panel."""

from __future__ import annotations

import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from matplotlib.colors import to_hex  # noqa: E402

from pipeline.ar2 import learning_curve  # noqa: E402
from pipeline.core.plotting import PALETTE, span_limits  # noqa: E402


def _rounds(folder, sieve_rates):
    for r in range(3):
        record = {"round": r, "dev": {"R@5": 0.9 + 0.01 * r}}
        if r and sieve_rates:
            record["sieve"] = {
                "sieve_out_rate": sieve_rates[r - 1],
                "false_negative_recall": 0.4,
                "true_negative_retention": 0.6,
            }
        (folder / f"round{r}").mkdir(parents=True)
        (folder / f"round{r}" / "round.json").write_text(json.dumps(record))
    return folder


def test_sieve_rows_and_figure(tmp_path):
    plain = _rounds(tmp_path / "plain", None)
    sieve = _rounds(tmp_path / "sieve", [0.38, 0.40])
    curves = {"plain": learning_curve.read_rounds(plain, 2), "sieve": learning_curve.read_rounds(sieve, 2)}
    rows = learning_curve.sieve_rows(curves)
    assert list(rows) == ["sieve"] and [(r, s["sieve_out_rate"]) for r, s in rows["sieve"]] == [
        (1, 0.38),
        (2, 0.40),
    ]
    out = tmp_path / "lc.png"
    assert (
        learning_curve.main(
            ["--variant", f"plain={plain}", "--variant", f"sieve={sieve}", "--rounds", "2", "--out", str(out)]
        )
        == 0
    )
    assert out.stat().st_size > 1000
    assert learning_curve.sieve_rows({"plain": curves["plain"]}) == {}


def _record(r, dev, sieve=None, variant="plain", seed=0):
    record = {"round": r, "variant": variant, "seed": seed, "dev": dev}
    if sieve is not None:
        record["sieve"] = sieve
    return record


def _labelled(ax):
    return {line.get_label(): line for line in ax.get_lines() if not line.get_label().startswith("_")}


def test_seeds_are_grouped_by_variant_and_drawn_as_their_mean():
    curves = {
        "ar2/seed0": [_record(0, {"R@5": 0.89}), _record(1, {"R@5": 0.88})],
        "ar2/seed1": [_record(0, {"R@5": 0.89}), _record(1, {"R@5": 0.86})],
        "ar2_sieve": [_record(0, {"R@5": 0.89}), _record(1, {"R@5": 0.87})],
    }
    groups = learning_curve.group_seeds(curves)
    assert {v: list(m) for v, m in groups.items()} == {
        "ar2": ["ar2/seed0", "ar2/seed1"],
        "ar2_sieve": ["ar2_sieve"],
    }
    xs, ys = learning_curve.mean_series(list(groups["ar2"].values()), lambda r: r["dev"].get("R@5"))
    assert xs == [0, 1] and ys == pytest.approx([0.89, 0.87])


def test_issue27_figure_names_each_series_in_its_own_colour_and_keeps_flat_curves_flat():
    """issue 27 (figures): the series had one colour and an unexplained ★, and a 0.003-wide y-axis made
    noise look like a trend. Now: a colour-blind-safe colour per variant named in the legend, ★ (the
    selected round) explained, every dev panel spans at least MIN_SPAN, round 0 (DPR) a reference."""
    sieve = {"sieve_out_rate": 0.42, "false_negative_recall": 0.6, "true_negative_retention": 0.63}
    curves = {
        f"{variant}/seed{s}": [
            _record(0, {"R@5": 0.8936, "R@1": 0.429}),
            _record(
                1, {"R@5": 0.8936 - 0.001 * (s + 1), "R@1": 0.43}, sieve if variant == "ar2_sieve" else None
            ),
            _record(2, {"R@5": 0.8936 - 0.002 * s, "R@1": 0.428}, sieve if variant == "ar2_sieve" else None),
        ]
        for variant in ("ar2", "ar2_sieve")
        for s in range(3)
    }
    selected = {label: 1 for label in curves}
    fig, drawn = learning_curve.learning_curve_figure(
        curves, ["R@1", "R@5"], selected, selected_by="best dev R@5"
    )
    try:
        assert drawn == ["R@1", "R@5"]
        dev_panels = [ax for ax in fig.axes if ax.get_title().startswith("dev ")]
        assert [ax.get_title() for ax in dev_panels] == ["dev R@1", "dev R@5"]
        for ax in dev_panels:
            low, high = ax.get_ylim()
            assert high - low >= learning_curve.MIN_SPAN
            lines = _labelled(ax)
            means = [lines["ar2"], lines["ar2_sieve"]]
            assert len({to_hex(line.get_color()) for line in means}) == 2
            assert {to_hex(line.get_color()) for line in means} <= {to_hex(c) for c in PALETTE}
            reference = next(label for label in lines if label.startswith("round 0"))
            assert set(lines[reference].get_ydata()) == {curves["ar2/seed0"][0]["dev"][ax.get_title()[4:]]}
            # ★ on each of the six runs' selected round
            stars = [line for line in ax.get_lines() if line.get_marker() == "*"]
            assert len(stars) == 6 and {x for line in stars for x in line.get_xdata()} == {1}
        mean_r5 = _labelled(dev_panels[1])["ar2"].get_ydata()
        assert list(mean_r5) == pytest.approx([0.8936, 0.8916, 0.8916])
        legend = [t.get_text() for t in fig.legends[0].get_texts()]
        assert legend[:2] == ["ar2 (thick: mean of 3 seeds)", "ar2_sieve (thick: mean of 3 seeds)"]
        assert "thin: each seed" in legend
        assert "selected round (best dev R@5): its retriever is tested" in legend
        assert "round 0: the DPR start (reference)" in legend
        sieve_panel = next(ax for ax in fig.axes if ax.get_title().startswith("sieve per round"))
        sieve_lines = _labelled(sieve_panel)
        quantities = [label for _, label, _ in learning_curve.SIEVE_SERIES]
        assert set(quantities) <= set(sieve_lines)
        assert len({to_hex(sieve_lines[q].get_color()) for q in quantities}) == 3
        assert [t.get_text() for t in sieve_panel.get_legend().get_texts()][:3] == quantities
    finally:
        plt.close(fig)


def test_span_limits_widen_a_narrow_range_inside_the_metric_bounds():
    low, high = span_limits([0.420, 0.423], 0.05, margin=0)
    assert (low, high) == pytest.approx((0.3965, 0.4465))
    low, high = span_limits([0.99, 1.0], 0.05, margin=0)  # moved below 1, not centred past it
    assert (low, high) == pytest.approx((0.95, 1.0))
    low, high = span_limits([0.2, 0.6], 0.05, margin=0)  # wide enough already
    assert (low, high) == pytest.approx((0.2, 0.6))
    assert span_limits([], 0.05) == (0.0, 1.0)

"""AR2 learning-curve figure (pipeline.ar2.learning_curve): dev panels and the per-round sieve-out panel."""

from __future__ import annotations

import json

from pipeline.ar2 import learning_curve


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

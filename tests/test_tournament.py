"""The tournament (issue 41): its statistics against hand-computed values, its errors, its outputs, and
its overlay against the method table. Hand-made gathered metrics only; nothing is trained."""

from __future__ import annotations

import json
import math

import pytest

from pipeline.core.config import REPO_ROOT, load_config, validate_config
from pipeline.core.methods import method_table
from pipeline.core.recipes import dataset_configs
from pipeline.core.storage import DataError
from pipeline.evaluation import tournament
from pipeline.evaluation.seed_stats import paired_difference, t_quantile
from pipeline.workflow.evaluation import tournament_settings
from pipeline.workflow.tables import WorkflowTables

T3 = 4.302652729911275  # t(0.975, 2): 3 seeds

# ---- the share of the oracle's gain (Fieller's interval) ------------------------------------------


def test_share_with_a_constant_oracle_gain_is_the_gain_interval_over_the_oracle_gain():
    # oracle gains 0.10 in every seed: the share's interval is the gain's t-interval divided by 0.10.
    # gain 0.05, 0.04, 0.06: mean 0.05, s 0.01, half-width t·0.01/√3 = 0.024841 -> share 0.5 ± 0.24841
    share = tournament.oracle_share({0: 0.05, 1: 0.04, 2: 0.06}, {0: 0.10, 1: 0.10, 2: 0.10})
    half = T3 * 0.01 / math.sqrt(3) / 0.10
    assert share.ratio == pytest.approx(0.5)
    assert share.ci_low == pytest.approx(0.5 - half) and share.ci_high == pytest.approx(0.5 + half)
    assert half == pytest.approx(0.248414, abs=1e-6)
    assert share.n == 3


def test_share_bounds_are_where_the_paired_interval_of_gain_minus_rho_oracle_touches_zero():
    gain = {0: 0.02, 1: 0.05, 2: 0.06}
    oracle = {0: 0.10, 1: 0.12, 2: 0.15}
    share = tournament.oracle_share(gain, oracle)
    assert share.ratio == pytest.approx(0.13 / 0.37)  # (0.02 + 0.05 + 0.06) / (0.10 + 0.12 + 0.15)
    assert share.ci_low < share.ratio < share.ci_high
    zeros = dict.fromkeys(gain, 0.0)
    for rho, end in ((share.ci_low, "ci_low"), (share.ci_high, "ci_high")):
        # below the share gain − ρ·oracle is positive: its interval starts at 0; above, it ends there
        d = paired_difference({s: gain[s] - rho * oracle[s] for s in gain}, zeros)
        assert getattr(d, end) == pytest.approx(0.0, abs=1e-12)


def test_share_of_the_oracle_itself_and_of_the_baseline():
    oracle = {0: 0.10, 1: 0.12, 2: 0.15}
    itself = tournament.oracle_share(oracle, oracle)
    assert (itself.ratio, itself.ci_low, itself.ci_high) == pytest.approx((1.0, 1.0, 1.0))
    none = tournament.oracle_share(dict.fromkeys(oracle, 0.0), oracle)
    assert (none.ratio, none.ci_low, none.ci_high) == pytest.approx((0.0, 0.0, 0.0))


def test_no_share_where_the_oracle_gain_is_not_shown():
    # oracle gains 0.10, -0.05, 0.02: mean 0.0233, its interval reaches 0: the unit is not shown
    share = tournament.oracle_share({0: 0.05, 1: 0.0, 2: 0.01}, {0: 0.10, 1: -0.05, 2: 0.02})
    assert share.ratio is None and share.ci_low is None and share.n == 3
    one = tournament.oracle_share({0: 0.05}, {0: 0.10})  # one seed: the ratio, no interval
    assert one.ratio == pytest.approx(0.5) and one.ci_low is None


# ---- the whole stage on hand-made gathered metrics -----------------------------------------------

SEEDS = (0, 1, 2)


def _gathered(path, values: dict, start: dict) -> str:
    """A gathered metrics.json: method -> metric -> per-seed values; the start is one seed-free run."""
    methods = {
        m: {
            "metrics": {k: sum(v) / len(v) for k, v in by_metric.items()},
            "per_seed": [
                {"seed": s, "metrics": {k: v[i] for k, v in by_metric.items()}}
                for i, s in enumerate(SEEDS[: len(next(iter(by_metric.values())))])
            ],
        }
        for m, by_metric in values.items()
    }
    methods["zeroshot"] = {"metrics": start}
    methods["bm25"] = {"metrics": BM25[path.stem]}
    path.write_text(json.dumps({"dataset": path.stem, "methods": methods}))
    return str(path)


SETTINGS = {
    "methods": ["dpr_none", "dpr_oracle", "dpr_sieve_no_ccr", "dpr_answer_match"],
    "baseline": "dpr_none",
    "oracle": "dpr_oracle",
    "start": "zeroshot",
    "metrics": ["hit_all@1", "R@5"],
    "incumbent": "dpr_sieve_no_ccr",
    "references": ["bm25"],
    "alpha": 0.05,
    "levels": {
        "kb30": {"label": "30%", "oracle": None, "metrics": None, "skip": []},
        "sq": {"label": "SQuAD", "oracle": "dpr_answer_match", "metrics": ["R@1"], "skip": ["dpr_oracle"]},
    },
}


KB30 = {
    "dpr_none": {"hit_all@1": [0.50, 0.52, 0.54], "R@5": [0.80, 0.80, 0.80]},
    "dpr_oracle": {"hit_all@1": [0.60, 0.62, 0.64], "R@5": [0.85, 0.86, 0.87]},
    "dpr_sieve_no_ccr": {"hit_all@1": [0.55, 0.56, 0.60], "R@5": [0.82, 0.81, 0.80]},
    "dpr_answer_match": {"hit_all@1": [0.51, 0.52, 0.53], "R@5": [0.80, 0.81, 0.82]},
}
# BM25, seed-free: one run against each seed
BM25 = {"kb30": {"hit_all@1": 0.40, "R@5": 0.70}, "sq": {"R@1": 0.78}}
SQ = {
    "dpr_none": {"R@1": [0.60, 0.61, 0.62]},
    "dpr_sieve_no_ccr": {"R@1": [0.61, 0.62, 0.66]},
    "dpr_answer_match": {"R@1": [0.66, 0.67, 0.68]},
}


def _files(tmp_path, kb: dict = KB30, sq: dict = SQ) -> dict:
    return {
        "kb30": _gathered(tmp_path / "kb30.json", kb, {"hit_all@1": 0.58, "R@5": 0.84}),
        "sq": _gathered(tmp_path / "sq.json", sq, {"R@1": 0.65}),
    }


@pytest.fixture
def files(tmp_path):
    return _files(tmp_path)


def test_intervals_shares_and_the_start_against_hand_computed_values(files):
    result = tournament.build_tournament(SETTINGS, files)
    kb, sq = result["levels"]
    assert (kb["primary"], kb["oracle"], kb["seeds"]) == ("hit_all@1", "dpr_oracle", [0, 1, 2])
    sieve = kb["rows"]["dpr_sieve_no_ccr"]["metrics"]["hit_all@1"]
    # differences with dpr_none 0.05, 0.04, 0.06: mean 0.05, s 0.01
    assert sieve["mean"] == pytest.approx(0.57)
    half = T3 * 0.01 / math.sqrt(3)
    assert sieve["vs_baseline"]["mean"] == pytest.approx(0.05)
    assert sieve["vs_baseline"]["ci_low"] == pytest.approx(0.05 - half)
    assert sieve["vs_baseline"]["ci_high"] == pytest.approx(0.05 + half)
    # the oracle gains 0.10 in every seed: the share is the gain's interval / 0.10
    assert sieve["oracle_share"]["mean"] == pytest.approx(0.5)
    assert sieve["oracle_share"]["ci_low"] == pytest.approx(0.5 - half / 0.10)
    # zeroshot, seed-free 0.58, against 0.55, 0.56, 0.60: differences −0.03, −0.02, +0.02, mean −0.01,
    # deviations −0.02, −0.01, +0.03: s = √(0.0014 / 2) = 0.02646, interval −0.01 ± t·s/√3 (0.0657)
    s = math.sqrt((0.02**2 + 0.01**2 + 0.03**2) / 2)
    assert sieve["vs_start"]["mean"] == pytest.approx(-0.01)
    assert sieve["vs_start"]["ci_high"] == pytest.approx(-0.01 + T3 * s / math.sqrt(3))
    assert kb["start"]["hit_all@1"]["mean"] == pytest.approx(0.58)
    # the oracle's own share is 1, the baseline's difference with itself 0
    assert kb["rows"]["dpr_oracle"]["metrics"]["hit_all@1"]["oracle_share"]["mean"] == pytest.approx(1.0)
    assert kb["rows"]["dpr_none"]["metrics"]["R@5"]["vs_baseline"]["ci_high"] == pytest.approx(0.0)
    # SQuAD: its own metric, answer match as the oracle (gains 0.06 each seed), the oracle not run
    assert (sq["primary"], sq["oracle"]) == ("R@1", "dpr_answer_match")
    assert sq["rows"]["dpr_oracle"] == {"run": False, "reference": False, "metrics": {}, "detection": None}
    assert sq["rows"]["bm25"]["reference"] and sq["rows"]["bm25"]["metrics"]["R@1"]["mean"] == pytest.approx(
        0.78
    )
    sq_sieve = sq["rows"]["dpr_sieve_no_ccr"]["metrics"]["R@1"]
    assert sq_sieve["vs_baseline"]["mean"] == pytest.approx(0.02)
    assert sq_sieve["oracle_share"]["mean"] == pytest.approx(0.02 / 0.06)
    assert t_quantile(0.95, 2) == pytest.approx(T3)


def test_the_table_and_the_figure_are_written_and_deterministic(files, tmp_path):
    args = ["--settings", json.dumps(SETTINGS), "--metrics", *(f"{d}={p}" for d, p in files.items())]
    outs = []
    for run in ("a", "b"):
        out = [tmp_path / f"{run}.{ext}" for ext in ("json", "md", "png")]
        assert (
            tournament.main(
                [*args, "--out-json", str(out[0]), "--out-md", str(out[1]), "--out-png", str(out[2])]
            )
            == 0
        )
        outs.append([p.read_bytes() for p in out])
    assert outs[0] == outs[1]  # same inputs, same bytes: JSON, table and figure
    md = outs[0][1].decode()
    assert "| 30% (hit_all@1) | dpr_sieve_no_ccr | 0.570 (+0.050 [+0.025, +0.075]) | 0.810 (+0.010 " in md
    assert "| 50% [25%, 75%] | -0.010 [" in md  # the share of the oracle's gain, then − zeroshot
    assert "| SQuAD (R@1) | dpr_oracle (the oracle, reads labels) | not run |" in md
    assert (
        "| SQuAD (R@1) | dpr_answer_match (the oracle at SQuAD) | – | – | 0.670 (+0.060 [+0.060, +0.060]) | – |"
        in md
    )
    assert "| SQuAD (R@1) | bm25 (reference) | – | – | 0.780 (+0.170 [+0.145, +0.195]) | – |" in md
    assert outs[0][2][:8] == b"\x89PNG\r\n\x1a\n" and len(outs[0][2]) > 5000


def test_an_output_over_an_input_is_refused_before_anything_is_written(files, tmp_path, capsys):
    from pipeline.core.cli import run_main

    kept = (tmp_path / "kb30.json").read_bytes()
    args = ["--settings", json.dumps(SETTINGS), "--metrics", *(f"{d}={p}" for d, p in files.items())]
    outs = [
        "--out-json",
        files["kb30"],
        "--out-md",
        str(tmp_path / "o.md"),
        "--out-png",
        str(tmp_path / "o.png"),
    ]
    with pytest.raises(SystemExit) as raised:
        run_main(tournament.main, [*args, *outs])
    assert raised.value.code == 2
    err = capsys.readouterr().err
    assert "--out-json" in err and "--metrics kb30" in err and err.count("\n") == 1
    assert (tmp_path / "kb30.json").read_bytes() == kept
    assert not (tmp_path / "o.md").exists() and not (tmp_path / "o.png").exists()


def test_a_paired_p_value_against_the_closed_form_of_t_with_two_degrees_of_freedom():
    # with 2 df, P(|T| > t) = 1 − t / √(t² + 2): differences 0.05, 0.04, 0.06 give t = 0.05 / (0.01/√3)
    d = paired_difference({0: 0.55, 1: 0.56, 2: 0.60}, {0: 0.50, 1: 0.52, 2: 0.54})
    t = 0.05 / (0.01 / math.sqrt(3))
    assert tournament.paired_p_value(d) == pytest.approx(1 - t / math.sqrt(t * t + 2))
    assert tournament.paired_p_value(d) == pytest.approx(0.013072, abs=1e-6)
    # no spread: every seed the same gain is p 0; no gain at all p 1; one seed no test
    same = paired_difference({0: 0.6, 1: 0.6}, {0: 0.5, 1: 0.5})
    assert tournament.paired_p_value(same) == 0.0
    assert tournament.paired_p_value(paired_difference({0: 0.5, 1: 0.5}, {0: 0.5, 1: 0.5})) == 1.0
    assert tournament.paired_p_value(paired_difference({0: 0.6}, {0: 0.5})) is None


def test_holm_on_a_hand_computed_family():
    # m = 4, α 0.05: sorted 0.005 (step 1, ≤ 0.05/4 = 0.0125: rejected), 0.01 (step 2, ≤ 0.05/3:
    # rejected), 0.03 (step 3, > 0.05/2 = 0.025: stop), 0.04 (step 4: not rejected after a stop, though
    # it is below 0.05/1). Corrected levels: 1 − 0.05/4 and 1 − 0.05/3 at the rejected steps, the
    # stopping step's 1 − 0.05/2 for the rest. Bonferroni (0.0125 for all) would reject 0.005 alone.
    out = tournament.holm([0.01, 0.04, 0.03, 0.005], 0.05)
    assert [d["rejected"] for d in out] == [True, False, False, True]
    assert [d["step"] for d in out] == [2, 4, 3, 1]
    assert [d["level"] for d in out] == pytest.approx([1 - 0.05 / 3, 0.975, 0.975, 1 - 0.05 / 4])
    # ties keep their order; an empty family rejects nothing
    assert [d["step"] for d in tournament.holm([0.02, 0.02], 0.05)] == [1, 2]
    assert tournament.holm([], 0.05) == []


def test_the_matrix_is_corrected_by_holm_over_every_row_and_level(files):
    # the family: zeroshot, bm25, dpr_oracle, the sieve and answer match at 30%; zeroshot, bm25, the
    # sieve and answer match at SQuAD (the oracle is skipped there): 9 tests. p by hand (2 df, closed
    # form): 30% oracle 0 (0.10 every seed), bm25 −0.10, −0.12, −0.14 (t 10.39: p 0.0092), the sieve
    # 0.0131, zeroshot +0.08, +0.06, +0.04 (t 5.20: p 0.0351), answer match p 1; SQuAD answer match 0
    # (0.06 every seed), bm25 +0.18, +0.17, +0.16 (t 29.4: p 0.0012), zeroshot 0.0202, the sieve 0.1835.
    # Holm: 0 ≤ 0.05/9, 0 ≤ 0.05/8, 0.0012 ≤ 0.05/7, then 0.0092 > 0.05/6 = 0.0083 stops: 3 rejected.
    result = tournament.build_tournament(SETTINGS, files)
    assert result["holm"] == {"alpha": 0.05, "tests": 9, "rejected": 3}
    kb, sq = result["levels"]

    def cell(level, m):
        return level["rows"][m]["metrics"][level["primary"]]["vs_baseline"]

    assert cell(kb, "bm25")["p"] == pytest.approx(1 - 0.12 / 0.02 * math.sqrt(3) / math.sqrt(108 + 2))
    shown = {
        (lv["dataset"], m)
        for lv in (kb, sq)
        for m in lv["rows"]
        if lv["rows"][m]["run"] and tournament._shown(cell(lv, m))
    }
    assert shown == {("kb30", "dpr_oracle"), ("sq", "dpr_answer_match"), ("sq", "bm25")}
    # the sieve at 30% is above 0 uncorrected ([+0.025, +0.075]) but not shown: its corrected interval,
    # at the stopping step's level 1 − 0.05/6, holds 0
    sieve = cell(kb, "dpr_sieve_no_ccr")
    assert sieve["ci_low"] > 0 and sieve["corrected"]["shown"] == 0
    half = t_quantile(1 - 0.05 / 6, 2) * 0.01 / math.sqrt(3)
    assert (sieve["corrected"]["ci_low"], sieve["corrected"]["ci_high"]) == pytest.approx(
        (0.05 - half, 0.05 + half)
    )
    assert sieve["corrected"]["ci_low"] < 0 < sieve["corrected"]["ci_high"]
    # bm25 at SQuAD: step 3, level 1 − 0.05/7, its interval above 0
    assert cell(sq, "bm25")["corrected"]["step"] == 3
    assert cell(sq, "bm25")["corrected"]["ci_low"] > 0


def test_the_summary_has_bm25_and_zeroshot_rows_and_marks_every_label_reader(files):
    result = tournament.build_tournament(SETTINGS, files)
    summary = tournament.tournament_summary(result)
    vs_pool, drops = summary.split("\n\n")[1], summary.split("\n\n")[3]
    lines = vs_pool.splitlines()
    assert lines[0] == "| row | 30% (hit_all@1) | SQuAD (R@1) | levels above / below dpr_none (Holm) |"
    names = [line.split(" | ")[0].lstrip("| ") for line in lines[2:]]
    assert names[:2] == ["zeroshot (reference)", "bm25 (reference)"]
    assert names[2:] == ["dpr_none", "dpr_oracle (the oracle, reads labels)", "dpr_sieve_no_ccr",
                         "dpr_answer_match (the oracle at SQuAD)"]  # fmt: skip
    # bm25 at SQuAD: +0.17 [uncorrected]; Holm [...], shown above (↑); a reference is never chosen
    assert lines[3].startswith("| bm25 (reference) | -0.120 [-0.170, -0.070]; Holm [")
    assert "| ↑ +0.170 [+0.145, +0.195]; Holm [" in lines[3] and lines[3].endswith(
        "| reference, not chosen |"
    )
    assert lines[5].endswith("| reads labels, not chosen |")
    assert drops.splitlines()[0].startswith("| row | 30% (hit_all@1) |")  # the drop-rate matrix
    # the JSON says who reads labels and why; positive_aware_dev tunes itself on dev's true labels
    assert list(result["label_readers"]) == ["dpr_oracle"]
    assert "qrels_all" in tournament.label_reading("dpr_positive_aware_dev")
    assert tournament.label_reading("dpr_rank_window") is None
    assert tournament.label_reading("dpr_relabel_oracle") and tournament.label_reading("dpr_oracle_wise")
    assert tournament.label_reading("hybrid_wsum_dpr_oracle") and tournament.label_reading(
        "dpr_mined_dpr_oracle"
    )


# ---- the default: docs/results.md's rule (version 2), on hand-made levels --------------------------


def test_the_rule_picks_the_best_where_the_first_rule_kept_the_incumbent(tmp_path):
    # answer match +0.10 every seed at 30% and +0.06 at SQuAD: shown above dpr_none at both levels
    # (p 0, whatever the family); the incumbent, the sieve, +0.12, +0.02, +0.16 at 30% and +0.01,
    # +0.01, +0.04 at SQuAD, shown at neither. Seed by seed answer match − sieve is −0.02, +0.08, −0.06
    # and +0.05, +0.05, +0.02: not separated, so the first rule (the winner replaces the incumbent only
    # by beating it seed by seed) kept the sieve. Version 2 has no incumbent: answer match is first.
    kb = {
        **KB30,
        "dpr_sieve_no_ccr": {"hit_all@1": [0.62, 0.54, 0.70], "R@5": [0.80, 0.80, 0.80]},
        "dpr_answer_match": {"hit_all@1": [0.60, 0.62, 0.64], "R@5": [0.80, 0.81, 0.82]},
    }
    result = tournament.build_tournament(SETTINGS, _files(tmp_path, kb=kb))
    choice = result["default"]
    assert choice["standing"]["dpr_answer_match"] == {"above": ["kb30", "sq"], "below": []}
    assert choice["standing"]["dpr_sieve_no_ccr"] == {"above": [], "below": []}
    assert (choice["tied"], choice["default"]) == (["dpr_answer_match"], "dpr_answer_match")
    assert choice["excluded"] == ["dpr_oracle"]  # the oracle reads the true labels: never chosen
    sentence = tournament.default_sentence(result)
    assert "dpr_answer_match is shown above dpr_none at 2 of 2 levels (30%; SQuAD)" in sentence
    assert sentence.endswith("the default is dpr_answer_match.")


def test_tied_leaders_are_reported_as_tied_and_ranked_within_each_level(tmp_path):
    # the sieve +0.05 every seed at 30% (shown), answer match +0.06 every seed at SQuAD (shown): one
    # level each, a tie. Within-level ranks of their means: 30% the sieve 0.57 (1), answer match 0.52
    # (2); SQuAD the sieve 0.63 (2), answer match 0.67 (1): mean ranks 1.5 and 1.5, the tie stands and
    # the table's order puts the sieve first. A mean of the differences (0.035 against 0.03) would have
    # added hit_all@1 to R@1.
    kb = {**KB30, "dpr_sieve_no_ccr": {"hit_all@1": [0.55, 0.57, 0.59], "R@5": [0.82, 0.81, 0.80]}}
    result = tournament.build_tournament(SETTINGS, _files(tmp_path, kb=kb))
    choice = result["default"]
    assert choice["tied"] == ["dpr_sieve_no_ccr", "dpr_answer_match"] and choice["top"] == 1
    assert choice["mean_rank"] == {"dpr_sieve_no_ccr": 1.5, "dpr_answer_match": 1.5}
    assert (choice["tie_stands"], choice["default"]) == (True, "dpr_sieve_no_ccr")
    sentence = tournament.default_sentence(result)
    assert (
        "Tied, each shown above dpr_none at 1 of 2 levels and below it at none: dpr_sieve_no_ccr, "
        in sentence
    )
    assert "the tie stands, and the table's order puts dpr_sieve_no_ccr first" in sentence
    # the sieve ahead at SQuAD too (0.69, not shown: +0.12, +0.00, +0.15): ranks 1 and 1, against 2 and
    # 2; the tie-break decides and says so
    sq = {**SQ, "dpr_sieve_no_ccr": {"R@1": [0.72, 0.61, 0.77]}}
    choice = tournament.build_tournament(SETTINGS, _files(tmp_path, kb=kb, sq=sq))["default"]
    assert choice["mean_rank"] == {"dpr_sieve_no_ccr": 1.0, "dpr_answer_match": 2.0}
    assert (choice["tie_stands"], choice["default"]) == (False, "dpr_sieve_no_ccr")


def test_nothing_shown_above_the_pool_leaves_no_filter(files):
    # KB30/SQ: Holm shows the oracle, answer match at SQuAD and BM25 at SQuAD. Without answer match among
    # the contenders nothing that may be chosen is shown above dpr_none: the default is dpr_none.
    settings = {**SETTINGS, "methods": ["dpr_none", "dpr_oracle", "dpr_sieve_no_ccr"]}
    settings["levels"] = {
        "kb30": SETTINGS["levels"]["kb30"],
        "sq": {**SETTINGS["levels"]["sq"], "oracle": "dpr_sieve_no_ccr"},
    }
    result = tournament.build_tournament(settings, files)
    assert (result["default"]["tied"], result["default"]["default"]) == ([], "dpr_none")
    assert "No contender is shown above dpr_none at any level: the default is dpr_none" in (
        tournament.default_sentence(result)
    )


def test_the_goals_of_the_defaults_at_each_level_against_hand_computed_values(tmp_path):
    # the leader (answer match, +0.10 every seed at 30% and +0.06 at SQuAD) and the demo's filter (the
    # sieve, +0.05, +0.04, +0.06 at 30%); BM25 fused with it, a hybrid, 0.44, 0.43, 0.45 at 30% against
    # BM25's 0.40 and 0.79, 0.80, 0.81 at SQuAD against 0.78
    kb = {
        **KB30,
        "dpr_answer_match": {"hit_all@1": [0.60, 0.62, 0.64], "R@5": [0.80, 0.81, 0.82]},
        "hybrid_wsum_dpr_sieve_no_ccr": {"hit_all@1": [0.44, 0.43, 0.45], "R@5": [0.9, 0.9, 0.9]},
    }
    sq = {**SQ, "hybrid_wsum_dpr_sieve_no_ccr": {"R@1": [0.79, 0.80, 0.81]}}
    settings = {**SETTINGS, "methods": [*SETTINGS["methods"], "hybrid_wsum_dpr_sieve_no_ccr"]}
    result = tournament.build_tournament(settings, _files(tmp_path, kb=kb, sq=sq))
    assert result["default"]["leader"] == "dpr_answer_match"
    kb_goals, sq_goals = result["goals"]
    assert list(kb_goals["models"]) == ["dpr_answer_match", "dpr_sieve_no_ccr"]
    sieve = kb_goals["models"]["dpr_sieve_no_ccr"]
    # − zeroshot (0.58): −0.03, −0.02, +0.02, its interval reaches above 0: not shown below, met
    assert sieve["vs_start"]["mean"] == pytest.approx(-0.01) and sieve["vs_start"]["goal"] == "met"
    assert sieve["vs_baseline"]["mean"] == pytest.approx(0.05) and sieve["vs_baseline"]["goal"] == "met"
    # half the oracle's +0.10: below 90%
    assert sieve["oracle_share"]["mean"] == pytest.approx(0.5) and sieve["oracle_share"]["goal"] == "not met"
    # answer match at 30%: +0.02, +0.04, +0.06 over zeroshot, the oracle's whole gain, so both goals met
    leader = kb_goals["models"]["dpr_answer_match"]
    assert leader["vs_start"]["mean"] == pytest.approx(0.04) and leader["vs_start"]["goal"] == "met"
    assert leader["oracle_share"]["mean"] == pytest.approx(1.0) and leader["oracle_share"]["goal"] == "met"
    # the sieve at SQuAD (0.61, 0.62, 0.66 against zeroshot's 0.65): −0.04, −0.03, +0.01, not shown below
    assert sq_goals["models"]["dpr_sieve_no_ccr"]["vs_start"]["goal"] == "met"
    # the hybrid − BM25: +0.04 at 30% (goal met, ≥ +0.03 on the mean), +0.02 at SQuAD (not met)
    hybrid = "hybrid_wsum_dpr_sieve_no_ccr"
    assert (
        kb_goals["hybrids"][hybrid]["mean"] == pytest.approx(0.04)
        and kb_goals["hybrids"][hybrid]["goal"] == "met"
    )
    sq_hybrid = sq_goals["hybrids"][hybrid]
    assert (
        sq_hybrid["vs"] == "bm25"
        and sq_hybrid["mean"] == pytest.approx(0.02)
        and sq_hybrid["goal"] == "not met"
    )
    assert sq_hybrid["ci_high"] == pytest.approx(0.02 + T3 * 0.01 / math.sqrt(3))
    md = tournament.tournament_markdown(result)
    assert "| 30% (hit_all@1) | dpr_sieve_no_ccr | met: -0.010 [" in md
    assert "| SQuAD (R@1) | hybrid_wsum_dpr_sieve_no_ccr | not met: +0.020 [" in md


def test_a_final_model_shown_below_its_start_misses_the_first_goal(tmp_path):
    # the sieve 0.50, 0.51, 0.52 at 30% against zeroshot's 0.58: −0.08, −0.07, −0.06, shown below
    kb = {**KB30, "dpr_sieve_no_ccr": {"hit_all@1": [0.50, 0.51, 0.52], "R@5": [0.80, 0.80, 0.80]}}
    result = tournament.build_tournament(SETTINGS, _files(tmp_path, kb=kb))
    goal = result["goals"][0]["models"]["dpr_sieve_no_ccr"]["vs_start"]
    assert goal["ci_high"] < 0 and goal["goal"] == "not met"
    assert result["goals"][0]["hybrids"] == {}  # no hybrid contender, no third goal


def _with_a_clean_level(tmp_path, monkeypatch, kbz: dict) -> tuple[dict, dict]:
    """SETTINGS plus a level whose candidates a dense model mined (kbz, deciding sieve-clean's default;
    answer match is not one of sieve-clean's filters, so not run there), and its files."""
    monkeypatch.setitem(BM25, "kbz", {"hit_all@1": 0.40, "R@5": 0.70})
    settings = {
        **SETTINGS,
        "levels": {
            **SETTINGS["levels"],
            "kbz": {"label": "30% mined", "skip": ["dpr_answer_match"], "decides": "clean"},
        },
    }
    files = {
        **_files(tmp_path),
        "kbz": _gathered(tmp_path / "kbz.json", kbz, {"hit_all@1": 0.58, "R@5": 0.84}),
    }
    return settings, files


def test_the_levels_that_decide_sieve_clean_decide_it_alone(tmp_path, monkeypatch):
    # kbz: the sieve +0.10 every seed over dpr_none (shown, p 0). At 30% and SQuAD only answer match is
    # shown above dpr_none (+0.06 every seed at SQuAD). Were kbz a column of the workflow's decision, the
    # sieve and answer match would tie at one level each; it is sieve-clean's alone: the workflow's
    # default is answer match outright, sieve-clean's the sieve
    kbz = {
        "dpr_none": {"hit_all@1": [0.50, 0.52, 0.54], "R@5": [0.80, 0.80, 0.80]},
        "dpr_oracle": {"hit_all@1": [0.62, 0.62, 0.66], "R@5": [0.85, 0.86, 0.87]},
        "dpr_sieve_no_ccr": {"hit_all@1": [0.60, 0.62, 0.64], "R@5": [0.80, 0.80, 0.80]},
    }
    settings, files = _with_a_clean_level(tmp_path, monkeypatch, kbz)
    result = tournament.build_tournament(settings, files)
    workflow, clean = result["default"], result["clean_default"]
    assert result["decisions"] == {"workflow": {"kb30": "30%", "sq": "SQuAD"}, "clean": {"kbz": "30% mined"}}
    assert (workflow["levels"], workflow["tied"], workflow["default"]) == (
        ["kb30", "sq"],
        ["dpr_answer_match"],
        "dpr_answer_match",
    )
    assert workflow["standing"]["dpr_sieve_no_ccr"] == {"above": [], "below": []}
    assert (clean["levels"], clean["default"], clean["decided"]) == (["kbz"], "dpr_sieve_no_ccr", True)
    assert clean["standing"]["dpr_sieve_no_ccr"] == {"above": ["kbz"], "below": []}
    assert "dpr_answer_match" not in clean["standing"]  # run at no level of this decision
    summary = tournament.tournament_summary(result)
    assert "| levels above / below dpr_none (Holm) (workflow; sieve-clean) |" in summary
    assert "| dpr_sieve_no_ccr | " in summary and " | 0 / 0; 1 / 0 |" in summary
    assert "| dpr_answer_match (the oracle at SQuAD) |" in summary and " | 1 / 0; not run |" in summary
    assert "The workflow's default (docs/results.md's rule, version 2;" in summary
    assert "The default of sieve-clean (over the levels whose candidates a dense model mined)" in summary
    assert tournament.default_sentence(result, "clean").endswith("the default is dpr_sieve_no_ccr.")
    # the goals at kbz name sieve-clean's first, at 30% the workflow's
    goals = {g["dataset"]: list(g["models"]) for g in result["goals"]}
    assert goals["kbz"] == ["dpr_sieve_no_ccr"] and goals["kb30"] == ["dpr_answer_match", "dpr_sieve_no_ccr"]
    # without the clean level's column, sieve-clean's default is not decided; the workflow's still is
    partial = tournament.build_tournament(settings, files, only=["kb30", "sq"])
    assert partial["default"]["decided"] and not partial["clean_default"]["decided"]
    assert partial["clean_default"]["default"] is None
    assert tournament.default_sentence(partial, "clean") == (
        "The default of sieve-clean (over the levels whose candidates a dense model mined), not decided: "
        "its one level is not in this table (30% mined)."
    )
    # and the standing column counts the workflow's levels alone
    assert "| levels above / below dpr_none (Holm) |" in tournament.tournament_summary(partial)


def test_a_contender_shown_below_the_unfiltered_pool_anywhere_is_out(tmp_path):
    # answer match −0.10 every seed at 30% (p 0: shown below), whatever it gains at SQuAD
    kb = {**KB30, "dpr_answer_match": {"hit_all@1": [0.40, 0.42, 0.44], "R@5": [0.80, 0.81, 0.82]}}
    result = tournament.build_tournament(SETTINGS, _files(tmp_path, kb=kb))
    choice = result["default"]
    assert choice["standing"]["dpr_answer_match"] == {"above": ["sq"], "below": ["kb30"]}
    assert choice["out"] == ["dpr_answer_match"] and "dpr_answer_match" not in choice["tied"]
    assert "Out, shown below dpr_none somewhere: dpr_answer_match." in tournament.default_sentence(result)


def test_a_table_over_some_of_the_levels_decides_nothing(files):
    result = tournament.build_tournament(SETTINGS, files, only=["sq"])
    choice = result["default"]
    assert [lv["dataset"] for lv in result["levels"]] == ["sq"] and result["levels_left_out"] == ["30%"]
    assert (choice["decided"], choice["leader"], choice["default"]) == (False, "dpr_answer_match", None)
    sentence = tournament.default_sentence(result)
    assert sentence.startswith("Default, not decided: 1 of 2 levels (not in this table: 30%)")
    assert sentence.endswith("the default would be dpr_answer_match.")
    with pytest.raises(DataError, match=r"\['kb7'\] are not levels"):
        tournament.build_tournament(SETTINGS, files, only=["kb7"])


# ---- what each filter did: drop rate and detection from its decisions ----------------------------


def _report(tmp_path, name: str, kept: list[bool], is_fn: list, source: str = "qrels_all") -> str:
    """A filter's report.json from a tiny decisions table, as pipeline.sieve.report writes it."""
    import pandas as pd

    from pipeline.sieve.report import detection_report

    n = len(kept)
    table = pd.DataFrame({
        "qid": ["q1"] * (n // 2) + ["q2"] * (n - n // 2), "pid": [f"p{i}" for i in range(n)],
        "rank": list(range(1, n + 1)), "kept": kept, "is_false_negative": pd.array(is_fn, dtype="boolean"),
        "fn_label_source": [source if v is not None else None for v in is_fn],
    })  # fmt: skip
    path = tmp_path / f"{name}.report.json"
    path.write_text(json.dumps(detection_report(table)))
    return str(path)


def test_drop_rates_and_detection_come_from_each_filters_decisions(files, tmp_path):
    # 8 candidates, 3 false negatives; the sieve drops 4: 2 false negatives, 2 true negatives ->
    # drop rate 0.5, precision 0.5, recall 2/3, true negatives kept 3/5
    sieve = _report(tmp_path, "sieve", [False, False, False, False, True, True, True, True],
                    [True, True, False, False, True, False, False, False])  # fmt: skip
    # SQuAD: no true labels (suspected answer matches): a drop rate, no precision or recall
    squad = _report(tmp_path, "squad", [False, True, True, True], [None, None, None, None], "suspected")
    given = [f"kb30:dpr_sieve_no_ccr:drops={sieve}", f"sq:dpr_sieve_no_ccr:relabels={squad}"]
    detections = tournament.read_detections(given, SETTINGS)
    result = tournament.build_tournament(SETTINGS, files, detections=detections)
    kb, sq = result["levels"]
    d = kb["rows"]["dpr_sieve_no_ccr"]["detection"]
    assert (d["drop_rate"], d["precision"], d["recall"], d["tn_kept"]) == pytest.approx(
        (0.5, 0.5, 2 / 3, 0.6)
    )
    assert sq["rows"]["dpr_sieve_no_ccr"]["detection"]["drop_rate"] == 0.25
    assert sq["rows"]["dpr_sieve_no_ccr"]["detection"]["precision"] is None
    assert kb["rows"]["dpr_answer_match"]["detection"] is None
    drops = tournament.tournament_summary(result).split("\n\n")[3].splitlines()
    assert drops[6] == "| dpr_sieve_no_ccr | dropped 50.0% (P 0.50, R 0.67) | relabelled 25.0% |"
    for bad, message in (
        ("kb30:dpr_sieve_no_ccr=x", "DATASET:METHOD:ACTION=REPORT"),
        (f"kb30:dpr_sieve_no_ccr:keeps={sieve}", "'keeps': the action is one of drops, relabels"),
        (f"kb7:dpr_sieve_no_ccr:drops={sieve}", "'kb7' is not a level"),
        (f"kb30:dpr_gist_dpr:drops={sieve}", "'dpr_gist_dpr' is not a contender"),
    ):
        with pytest.raises(DataError, match=message):
            tournament.read_detections([bad], SETTINGS)
    cut = tmp_path / "cut.json"
    cut.write_text(json.dumps({k: v for k, v in json.loads(open(sieve).read()).items() if k != "recall"}))
    with pytest.raises(DataError, match="a filter report without 'recall'") as err:
        tournament.read_detections([f"kb30:dpr_sieve_no_ccr:drops={cut}"], SETTINGS)
    assert str(cut) in str(err.value)


def test_the_oracles_are_the_methods_that_read_the_true_labels():
    oracles = tournament.true_label_methods()
    trained = {"dpr_oracle", "dpr_relabel_oracle"}
    # a model chosen on dev by the true labels reads them; one chosen by the user's own labels only
    # when the model it chose among was an oracle's
    truth_selections = {m for m in oracles if m.endswith("_wise_truth")}
    assert oracles - truth_selections == trained | {f"{m}_wise" for m in trained}
    assert {"dpr_wise_truth", "dpr_sieve_wise_truth"} <= truth_selections


def test_the_incumbent_must_be_a_contender(files):
    with pytest.raises(DataError, match="incumbent 'dpr_gist_dpr' must be a contender"):
        tournament.build_tournament({**SETTINGS, "incumbent": "dpr_gist_dpr"}, files)


def test_a_missing_seed_is_named(files, tmp_path):
    data = json.loads(open(files["kb30"]).read())
    data["methods"]["dpr_sieve_no_ccr"]["per_seed"].pop()  # seed 2 never ran
    open(files["kb30"], "w").write(json.dumps(data))
    with pytest.raises(
        DataError, match=r"dpr_sieve_no_ccr was run with seeds \[0, 1\].*missing \[2\]"
    ) as err:
        tournament.build_tournament(SETTINGS, files)
    assert files["kb30"] in str(err.value)


def test_a_missing_contender_is_named_unless_skipped(files):
    data = json.loads(open(files["sq"]).read())
    del data["methods"]["dpr_sieve_no_ccr"]
    open(files["sq"], "w").write(json.dumps(data))
    with pytest.raises(DataError, match=r"level 'SQuAD' \(sq\) misses dpr_sieve_no_ccr: .*skip"):
        tournament.build_tournament(SETTINGS, files)
    skipped = json.loads(json.dumps(SETTINGS))
    skipped["levels"]["sq"]["skip"].append("dpr_sieve_no_ccr")
    level = tournament.build_tournament(skipped, files)["levels"][1]
    assert level["rows"]["dpr_sieve_no_ccr"]["run"] is False


def test_a_missing_metric_and_a_skipped_oracle_are_errors(files):
    bad = json.loads(json.dumps(SETTINGS))
    bad["levels"]["sq"]["metrics"] = ["R@20"]
    with pytest.raises(DataError, match="dpr_none has no R@20"):
        tournament.build_tournament(bad, files)
    bad = json.loads(json.dumps(SETTINGS))
    bad["levels"]["kb30"]["skip"] = ["dpr_oracle"]
    with pytest.raises(DataError, match="the oracle 'dpr_oracle' must be a contender run on kb30"):
        tournament.build_tournament(bad, files)


# ---- the overlay against the method table ---------------------------------------------------------

OVERLAY = REPO_ROOT / "config/overlays/tournament/tournament.yaml"


def _tables(*overlays) -> WorkflowTables:
    config = load_config(overlays)
    validate_config(config, methods=lambda: method_table(config))  # an unknown method name fails here
    return WorkflowTables(config, dataset_configs(config, methods=method_table))


def test_the_overlay_names_only_methods_of_the_method_table_and_every_level_builds_them():
    w = _tables(OVERLAY)
    t = w.config["tournament"]
    for d in t["levels"]:
        known = set(method_table(w.cfg(d)))
        assert [m for m in t["methods"] if m not in known] == [], d
    passed = json.loads(tournament_settings(w))  # every contender is in its level's methods
    assert passed == t and list(passed["levels"]) == list(t["levels"])  # the columns keep their order
    assert list(t["levels"]) == [
        "synthkb_fn07_p0",
        "synthkb_fn30_p50",
        "synthkb_fn30_p0",
        "synthkb_fn50_p50",
        "squad36",
    ]
    assert w.config["datasets"]["squad36"]["source"] == "../shared/data/squad/squad-v1.1-dev-36.json.gz"


def test_a_contender_a_level_does_not_build_is_refused_by_name():
    w = _tables(OVERLAY)
    w.config["tournament"]["methods"] = [*w.config["tournament"]["methods"], "dpr"]
    with pytest.raises(ValueError, match=r"synthkb_fn07_p0: dpr not in its methods"):
        tournament_settings(w)


def test_the_overlay_holds_every_contender_of_issue_41():
    # the filters, in-loss masking and relabel, beside the controls: a dropped contender fails here
    t = load_config([OVERLAY])["tournament"]
    assert set(t["methods"]) == {
        "dpr_none",
        "dpr_oracle",
        "dpr_sieve_no_ccr",
        "dpr_sieve_b6",
        "dpr_positive_aware",
        "dpr_positive_aware_dev",
        "dpr_absolute_margin",
        "dpr_rank_window",
        "dpr_cross_encoder",
        "dpr_answer_match",
        "dpr_gist_zeroshot",
        "dpr_gist_dpr",
        "dpr_relabel_sieve_no_ccr",
        "dpr_relabel_sieve_b6",
        "dpr_relabel_oracle",
    }


def test_the_default_metrics_files_are_the_workflows_layout():
    from pipeline.workflow.paths import dataset_metrics

    files = tournament.metrics_files({"levels": {"kb30": {}, "squad36": {}}}, [])
    assert files == {d: dataset_metrics(d) for d in ("kb30", "squad36")}


# ---- version 2's overlay ------------------------------------------------------------------------

OVERLAY_V2 = REPO_ROOT / "config/overlays/tournament/tournament_v2.yaml"


def test_the_v2_overlay_names_methods_of_the_table_at_every_level_and_adds_the_mined_source():
    w = _tables(OVERLAY_V2)
    t = w.config["tournament"]
    for d in t["levels"]:
        known = set(method_table(w.cfg(d)))
        assert [m for m in [*t["methods"], *t["references"]] if m not in known] == [], d
    assert json.loads(tournament_settings(w)) == t  # every row is in its level's methods
    assert t["references"] == ["bm25"] and w.config["seeds"] == [0, 1, 2, 3, 4]
    # the first run's contenders stay, in their order, but the six cut so that a block fits a sitting
    first = load_config([OVERLAY])["tournament"]["methods"]
    cut = {"dpr_cross_encoder", "dpr_absolute_margin", "dpr_gist_dpr", "dpr_relabel_sieve_b6"}
    cut |= {"dpr_relabel_oracle", "dpr_positive_aware_dev"}
    kept = [m for m in first if m not in cut]
    assert t["methods"][: len(kept)] == kept and not cut & set(t["methods"])
    assert {"dpr_none_wise", "dpr_sieve_no_ccr_wise", "hybrid_wsum_dpr_sieve_no_ccr"} <= set(t["methods"])
    # the realistic source: the same data, the filters' candidates mined by zero-shot MiniLM
    for d in ("synthkb_fn07_p0_zsmined", "synthkb_fn30_p50_zsmined"):
        assert w.cfg(d)["sieve"]["source"] == "zeroshot" and d in t["levels"]
        assert w.methods[d]["dpr_none"].negatives == "none_source_zeroshot"
        assert w.methods[d.removesuffix("_zsmined")]["dpr_none"].negatives == "none"
    # the label readers among the contenders, as the table marks them
    assert [m for m in t["methods"] if tournament.label_reading(m)] == [
        "dpr_oracle",
        "dpr_none_wise_truth",
        "dpr_sieve_no_ccr_wise_truth",
    ]
    # the selections consider 2 checkpoints; SQuAD-36 (no qrels_all) has no truth-label selection
    assert w.config["selection"]["checkpoints"] == 2
    assert not [m for m in w.cfg("squad36")["methods"] if m.endswith("_wise_truth")]


def test_the_v2_overlay_reads_a_filter_report_per_filtered_contender():
    from pipeline.workflow.evaluation import tournament_detections

    w = _tables(OVERLAY_V2)
    found = tournament_detections(w)
    by = {(d, m): (a, r) for d, m, a, r in found}
    assert by["synthkb_fn30_p50", "dpr_sieve_no_ccr"] == (
        "drops",
        "results/synthkb_fn30_p50/sieve/sieve_no_ccr/report.json",
    )
    assert by["synthkb_fn30_p50", "dpr_relabel_sieve_no_ccr"][0] == "relabels"
    # a selection and a hybrid are their trained model's filter; in-loss masking has no decisions
    assert by["squad36", "hybrid_wsum_dpr_sieve_no_ccr"] == by["squad36", "dpr_sieve_no_ccr"]
    assert by["synthkb_fn07_p0_zsmined", "dpr_none"][1].endswith("sieve/none_source_zeroshot/report.json")
    assert not [k for k in by if k[1].startswith("dpr_gist_")] and ("squad36", "dpr_oracle") not in by
    # the mined-source levels run sieve-clean's contenders only: no selection, no answer match there
    assert ("synthkb_fn30_p50_zsmined", "dpr_none_wise") not in by
    assert ("synthkb_fn30_p50_zsmined", "dpr_answer_match") not in by
    # the BM25-source synthkb levels' 10 filters, the mined-source levels' 9 (sieve-clean's) and
    # SQuAD-36's 9 (no oracle): one report each
    assert len({r for *_, r in found}) == 4 * 10 + 2 * 9 + 9


def plan_v2_overlay(tmp_path, target: str, *flags: str) -> str:
    """`snakemake -n` of ``target`` on the v2 overlay as it is, SQuAD-36's sample by its absolute path
    (the plan runs in tmp_path): its output (skips the test where the sample is not beside the checkout)."""
    import subprocess
    import sys
    from pathlib import Path

    import yaml

    overlay = yaml.safe_load(OVERLAY_V2.read_text())
    sample = (REPO_ROOT / overlay["datasets"]["squad36"]["source"]).resolve()
    if not sample.is_file():
        pytest.skip(f"SQuAD-36's sample is not beside the checkout ({sample})")
    overlay["datasets"]["squad36"]["source"] = str(sample)
    (tmp_path / "v2.yaml").write_text(yaml.safe_dump(overlay))
    done = subprocess.run(
        [str(Path(sys.executable).with_name("snakemake")), "-n", "--cores", "1", *flags, "--directory",
         str(tmp_path), "-s", str(REPO_ROOT / "Snakefile"), "--configfile", str(REPO_ROOT / "config.yaml"),
         str(tmp_path / "v2.yaml"), "--", target],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


@pytest.mark.slow
def test_snakemake_plans_the_v2_overlay(tmp_path):
    # the trainings follow from the overlay: per level its contenders of each kind × 5 seeds (the
    # top-level seed's rule and the _seed rule for the other four)
    from test_workflow import jobs_in_dry_run

    jobs = jobs_in_dry_run(plan_v2_overlay(tmp_path, "results/sweeps/tournament.json"))
    # 4 synthkb levels of BM25's candidates and SQuAD-36 run every contender; the 2 mined-source
    # levels sieve-clean's: 9 dropping filters (none and oracle among them), 2 relabels, no GIST,
    # selection or hybrid
    full, synthkb, mined = 5, 4, 2
    # dropping filters: 10 at a synthkb level, 9 at SQuAD-36 (no oracle), 9 at a mined-source level
    filtered = 10 * synthkb + 9 + 9 * mined
    assert (jobs["train_dpr_filtered"], jobs["train_dpr_filtered_seed"]) == (filtered, filtered * 4)
    assert (jobs["train_dpr_gist"], jobs["train_dpr_gist_seed"]) == (full, full * 4)
    relabels = 2 * synthkb + 2 + 2 * mined
    assert (jobs["train_dpr_relabel"], jobs["relabel_qrels"]) == (relabels, relabels)
    # two selections with the annotated dev labels at every full level, two with the truth at synthkb's
    selections = 2 * full + 2 * synthkb
    assert (jobs["select_model"], jobs["select_model_seed"]) == (selections, selections * 4)
    assert (jobs["fuse_weighted_seed"], jobs["sieve_report"], jobs["tournament"]) == (5 * full, filtered, 1)
    assert jobs["mine_dense_negatives"] == 2  # zero-shot's negatives for the two mined-source levels
    # 7,820 before the mined-source levels ran sieve-clean's contenders only, 6,608 before the cut that
    # fits a block into a sitting
    assert sum(jobs.values()) == 4095

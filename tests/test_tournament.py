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
    path.write_text(json.dumps({"dataset": path.stem, "methods": methods}))
    return str(path)


SETTINGS = {
    "methods": ["dpr_none", "dpr_oracle", "dpr_sieve_no_ccr", "dpr_answer_match"],
    "baseline": "dpr_none",
    "oracle": "dpr_oracle",
    "start": "zeroshot",
    "metrics": ["hit_all@1", "R@5"],
    "incumbent": "dpr_sieve_no_ccr",
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
    assert sq["rows"]["dpr_oracle"] == {"run": False, "metrics": {}}
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
    assert "| SQuAD (R@1) | dpr_oracle | not run |" in md
    assert "| SQuAD (R@1) | dpr_answer_match (oracle) | – | – | 0.670 (+0.060 [+0.060, +0.060]) | – |" in md
    assert outs[0][2][:8] == b"\x89PNG\r\n\x1a\n" and len(outs[0][2]) > 5000


def test_the_summary_matrices_are_contenders_by_levels_on_the_primary_metric(files):
    summary = tournament.tournament_summary(tournament.build_tournament(SETTINGS, files))
    vs_pool, vs_incumbent = summary.split("\n\n")[1], summary.split("\n\n")[3]
    assert (
        vs_pool.splitlines()[0]
        == "| contender | 30% (hit_all@1) | SQuAD (R@1) | levels above / below dpr_none |"
    )
    rows = vs_pool.splitlines()[2:]
    assert rows[0] == "| dpr_none | – | – | 0 / 0 |"
    # the oracle reads the true labels: no standing; at SQuAD it is not run
    assert rows[1] == "| dpr_oracle (the oracle) | +0.100 [+0.100, +0.100] | not run | true labels |"
    # the sieve: 0.05, 0.04, 0.06 at 30% (shown), 0.01, 0.01, 0.04 at SQuAD (mean 0.02, holds 0)
    assert rows[2] == "| dpr_sieve_no_ccr | +0.050 [+0.025, +0.075] | +0.020 [-0.023, +0.063] | 1 / 0 |"
    # answer match is SQuAD's oracle only: it reads no true labels and stands like any contender
    assert rows[3] == (
        "| dpr_answer_match (the oracle at SQuAD) | +0.000 [-0.025, +0.025] | +0.060 [+0.060, +0.060] | 1 / 0 |"
    )
    # against the incumbent: answer match − sieve at 30% −0.04, −0.04, −0.07; at SQuAD 0.05, 0.05, 0.02
    inc = vs_incumbent.splitlines()
    assert inc[0] == "| contender | 30% (hit_all@1) | SQuAD (R@1) |"
    assert inc[4] == "| dpr_sieve_no_ccr | – | – |"
    assert inc[5] == (
        "| dpr_answer_match (the oracle at SQuAD) | -0.050 [-0.093, -0.007] | +0.040 [-0.003, +0.083] |"
    )
    assert summary.rstrip().endswith("It is the demo's filter, which stays.")


# ---- the default filter: docs/results.md's rule, on hand-made levels ------------------------------


def test_the_incumbent_that_leads_stays(files):
    result = tournament.build_tournament(SETTINGS, files)
    choice = result["default"]
    # dpr_oracle reads the true labels: never a default, however far ahead
    assert choice["excluded"] == ["dpr_oracle"]
    # the sieve: +0.05 [+0.025, +0.075] at 30% (shown), +0.02 at SQuAD (differences 0.01, 0.01, 0.04:
    # its interval holds 0); answer match: 0.00 at 30% (holds 0), +0.06 every seed at SQuAD (shown)
    assert choice["standing"]["dpr_sieve_no_ccr"]["above"] == ["kb30"]
    assert choice["standing"]["dpr_sieve_no_ccr"]["mean"] == pytest.approx(0.035)
    assert choice["standing"]["dpr_answer_match"] == {
        "above": ["sq"],
        "below": [],
        "mean": pytest.approx(0.03),
    }
    assert choice["standing"]["dpr_none"] == {"above": [], "below": [], "mean": 0.0}
    # one shown level each: the larger mean difference leads; nothing drops below dpr_none
    assert choice["ranking"] == ["dpr_sieve_no_ccr", "dpr_answer_match", "dpr_none"]
    assert (choice["winner"], choice["replaced"], choice["default"]) == (
        "dpr_sieve_no_ccr",
        False,
        "dpr_sieve_no_ccr",
    )
    # the sieve against itself: no cell; answer match − sieve at SQuAD: 0.05, 0.05, 0.02
    kb, sq = result["levels"]
    assert sq["rows"]["dpr_answer_match"]["metrics"]["R@1"]["vs_incumbent"]["mean"] == pytest.approx(0.04)
    assert "It is the demo's filter, which stays." in tournament.tournament_markdown(result)


def test_a_winner_shown_above_the_incumbent_somewhere_and_below_it_nowhere_replaces_it(files):
    settings = {**SETTINGS, "incumbent": "dpr_answer_match"}
    choice = tournament.build_tournament(settings, files)["default"]
    # sieve − answer match: 30% 0.04, 0.04, 0.07 (mean 0.05, s 0.0173: [+0.007, +0.093], shown);
    # SQuAD −0.05, −0.05, −0.02 (mean −0.04, [−0.083, +0.003], holds 0)
    assert (choice["beats_incumbent_at"], choice["loses_to_incumbent_at"]) == (["kb30"], [])
    assert choice["decided"]  # every level is in the table
    assert (choice["winner"], choice["replaced"], choice["default"]) == (
        "dpr_sieve_no_ccr",
        True,
        "dpr_sieve_no_ccr",
    )


def test_a_winner_shown_below_the_incumbent_somewhere_leaves_it(tmp_path):
    # the sieve now +0.01 every seed at SQuAD (shown over dpr_none: two levels, so it leads), but
    # −0.05 every seed against answer match there
    sq = {**SQ, "dpr_sieve_no_ccr": {"R@1": [0.61, 0.62, 0.63]}}
    settings = {**SETTINGS, "incumbent": "dpr_answer_match"}
    result = tournament.build_tournament(settings, _files(tmp_path, sq=sq))
    choice = result["default"]
    assert choice["standing"]["dpr_sieve_no_ccr"]["above"] == ["kb30", "sq"]
    assert (choice["beats_incumbent_at"], choice["loses_to_incumbent_at"]) == (["kb30"], ["sq"])
    assert (choice["winner"], choice["replaced"], choice["default"]) == (
        "dpr_sieve_no_ccr",
        False,
        "dpr_answer_match",
    )
    assert "the data do not separate them and dpr_answer_match stays" in tournament.tournament_markdown(
        result
    )


def test_a_contender_shown_below_the_unfiltered_pool_anywhere_does_not_qualify(tmp_path):
    # answer match −0.10, −0.11, −0.12 at 30%, whatever it gains at SQuAD
    kb = {**KB30, "dpr_answer_match": {"hit_all@1": [0.40, 0.41, 0.42], "R@5": [0.80, 0.81, 0.82]}}
    choice = tournament.build_tournament(SETTINGS, _files(tmp_path, kb=kb))["default"]
    assert choice["standing"]["dpr_answer_match"]["below"] == ["kb30"]
    assert "dpr_answer_match" not in choice["ranking"]


def test_a_table_over_some_of_the_levels_decides_nothing(files):
    settings = {**SETTINGS, "incumbent": "dpr_answer_match"}
    result = tournament.build_tournament(settings, files, only=["kb30"])
    choice = result["default"]
    assert [lv["dataset"] for lv in result["levels"]] == ["kb30"] and result["levels_left_out"] == ["SQuAD"]
    # over kb30 alone the sieve leads and is above answer match there, yet nothing is replaced
    assert (choice["winner"], choice["beats_incumbent_at"]) == ("dpr_sieve_no_ccr", ["kb30"])
    assert (choice["decided"], choice["replaced"], choice["default"]) == (False, False, "dpr_answer_match")
    sentence = tournament.default_sentence(result)
    assert sentence.startswith("Not decided: 1 of 2 levels (not in this table: SQuAD)")
    assert sentence.endswith("it would replace it.")
    with pytest.raises(DataError, match=r"\['kb7'\] are not levels"):
        tournament.build_tournament(settings, files, only=["kb7"])


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

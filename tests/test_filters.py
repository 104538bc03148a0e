"""Competing false-negative filters on one candidate set, the detection report and the comparison."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from stage_args import flags

from pipeline.core.storage import DataError
from pipeline.sieve import candidates as fn_labels
from pipeline.sieve import cross_encoder as cef
from pipeline.sieve import filters
from pipeline.sieve import report as sieve_report

# ---- pure pieces ---------------------------------------------------------------------------------


def test_positive_aware_rules():
    s_neg = np.array([0.50, 0.90, 0.96, 0.795])
    s_pos = np.array([1.00, 1.00, 1.00, 0.84])
    # relative: drop if s_neg > 0.95 * s_pos
    assert filters.positive_aware_keep(s_neg, s_pos, "relative", 0.95).tolist() == [True, True, False, True]
    # difference: drop if s_neg > s_pos - 0.05
    assert filters.positive_aware_keep(s_neg, s_pos, "difference", 0.05).tolist() == [
        True,
        True,
        False,
        False,
    ]
    # absolute: drop if s_neg > 0.7
    assert filters.positive_aware_keep(s_neg, s_pos, "absolute", 0.7).tolist() == [True, False, False, False]
    # the score each rule thresholds: the same decisions at the margin
    for mode, margin, bound in (
        ("relative", 0.95, 0.95),
        ("difference", 0.05, -0.05),
        ("absolute", 0.7, 0.7),
    ):
        stat = filters.positive_aware_statistic(s_neg, s_pos, mode)
        assert (~(stat > bound)).tolist() == filters.positive_aware_keep(s_neg, s_pos, mode, margin).tolist()
    assert filters.positive_aware_statistic(np.array([0.1]), np.array([-0.2]), "relative")[0] == np.inf
    with pytest.raises(ValueError):
        filters.positive_aware_keep(s_neg, s_pos, "ratio", 0.9)


def test_detection_metrics_hand_computed():
    # rows: FN dropped, FN kept, TN dropped, TN kept, TN kept, unknown dropped
    kept = np.array([False, True, False, True, True, False])
    truth = pd.array([True, True, False, False, False, pd.NA], dtype="boolean")
    m = sieve_report.detection_metrics(kept, truth)
    assert m["precision"] == pytest.approx(0.5)  # 1 FN among 2 labelled dropped
    assert m["recall"] == pytest.approx(0.5)  # 1 of 2 FN dropped
    assert m["f1"] == pytest.approx(0.5)
    assert m["true_negative_retention"] == pytest.approx(2 / 3)
    assert (m["n_false_negatives"], m["n_true_negatives"], m["n_labelled"]) == (2, 3, 5)
    empty = sieve_report.detection_metrics(np.ones(2, bool), pd.array([pd.NA, pd.NA], dtype="boolean"))
    assert empty["precision"] is None and empty["recall"] is None and empty["f1"] is None


def test_auc_greater():
    assert sieve_report.auc_greater([3, 4], [1, 2]) == 1.0
    assert sieve_report.auc_greater([1, 2], [3, 4]) == 0.0
    assert sieve_report.auc_greater([1, 3], [2, 2]) == 0.5
    assert sieve_report.auc_greater([2], [2]) == 0.5
    assert sieve_report.auc_greater([], [1]) is None
    rng = np.random.default_rng(0)
    a, b = rng.normal(1, 1, 300), rng.normal(0, 1, 200)
    brute = np.mean([[x > y for y in b] for x in a])
    assert sieve_report.auc_greater(a, b) == pytest.approx(brute)


def test_report_counts_suspected_apart_and_loss_stats():
    table = pd.DataFrame(
        {
            "qid": ["a"] * 4 + ["b"] * 2,
            "pid": list("pqrstu"),
            "rank": [1, 2, 3, 4, 1, 2],
            "kept": [False, True, True, False, True, False],
            "is_false_negative": pd.array([True, False, False, pd.NA, pd.NA, pd.NA], dtype="boolean"),
            "fn_label_source": pd.array(
                ["qrels_all", "qrels_all", "qrels_all", "suspected", None, "suspected"], dtype="string"
            ),
            "nce_loss": [0.5, 2.0, 3.0, 0.1, 1.0, 0.2],
        }
    )
    rep = sieve_report.detection_report(table)
    assert rep["precision"] == 1.0 and rep["recall"] == 1.0 and rep["true_negative_retention"] == 1.0
    assert rep["suspected"] == {"n": 2, "dropped": 2, "dropped_rate": 1.0}
    assert rep["sieve_out_rate"] == pytest.approx(3 / 6)
    assert rep["loss_stats"]["false_negative"]["n"] == 1
    assert rep["loss_stats"]["true_negative"]["mean"] == pytest.approx(2.5)
    assert rep["separation_auc"] == 1.0


# ---- every filter on the same candidates -----------------------------------------------------------


@pytest.fixture(scope="module")
def toy(tmp_path_factory, make_sieve_dataset, make_retriever):
    from pipeline.retrieval.model import make_tiny_encoder

    root = tmp_path_factory.mktemp("filters")
    p = make_sieve_dataset(root / "data")
    p["model"] = make_retriever(root / "model")
    p["base"] = make_tiny_encoder(root / "tiny-base", seed=1)
    p["candidates"] = root / "candidates.parquet"
    p["root"] = root
    tables = ("negatives", "qrels", "qrels_all", "queries", "corpus")
    fn_labels.main(flags(p, *tables, candidates=8, pool=12, out=p["candidates"]))
    return p


def run_filter(toy, name, *extra, model=None):
    out = toy["root"] / name / "decisions.parquet"
    args = [*flags(toy, "candidates", "corpus", "queries", filter=name, out=out), *extra]
    if model is not None:
        args += ["--model", str(model)]
    filters.main(args)
    return out, pd.read_parquet(out)


def test_a_filter_that_leaves_queries_without_hard_negatives_says_so(toy, monkeypatch):
    said: list[str] = []
    # the stage installs its own log handlers (start_stage), so the warning is read where it is made
    monkeypatch.setattr(filters.log, "warning", lambda msg, *args: said.append(msg % args))

    def warnings(start):
        said.clear()
        _, decided = run_filter(toy, "rank_window", "--start", str(start))
        return decided, list(said)

    decided, warned = warnings(13)  # above the pool of 12: every candidate dropped
    assert not decided["kept"].any()
    assert warned == [
        "filter rank_window: 100.0% of the queries keep no hard negative; "
        "DPR trains them on in-batch negatives only"
    ]
    decided, warned = warnings(1)
    assert decided.groupby("qid")["kept"].any().all() and warned == []
    frame = pd.DataFrame({"qid": ["a", "a", "b", "c"], "kept": [False, True, False, False]})
    assert filters.queries_without_negatives(frame) == pytest.approx(2 / 3)
    assert filters.queries_without_negatives(frame.iloc[:0]) == 0.0


def test_simple_filters(toy):
    cands = pd.read_parquet(toy["candidates"])
    _, none = run_filter(toy, "none")
    assert none["kept"].all() and len(none) == len(cands)
    _, am = run_filter(toy, "answer_match")
    assert am["kept"].tolist() == (~cands["has_answer"].astype(bool)).tolist()
    _, rw = run_filter(toy, "rank_window", "--start", "4")
    assert rw["kept"].tolist() == (cands["rank"] > 4).tolist()
    assert (rw[["qid", "pid", "rank"]].to_numpy() == cands[["qid", "pid", "rank"]].to_numpy()).all()
    assert rw["is_false_negative"].tolist() == cands["is_false_negative"].tolist()


def test_model_filters_and_comparison(toy, tmp_path):
    out_pa, pa_ = run_filter(toy, "positive_aware", "--margin", "0.95", model=toy["model"])
    _, sv_ = run_filter(toy, "sieve_no_ccr", model=toy["model"])
    # positive_aware (relative) scores = s_neg / s_pos from the same cosines the sieve uses
    s_neg, s_pos = sv_["similarity"].to_numpy(), sv_["positive_similarity"].to_numpy()
    assert (s_pos > 0).all()
    np.testing.assert_allclose(pa_["score"].to_numpy(), s_neg / s_pos, rtol=1e-12)
    assert pa_["kept"].tolist() == (~(s_neg > 0.95 * s_pos)).tolist()
    assert pa_["kept"].tolist() == (~(pa_["score"].to_numpy() > 0.95)).tolist()
    reports = []
    for name in ("none", "answer_match", "positive_aware", "sieve_no_ccr"):
        dec = toy["root"] / name / "decisions.parquet"
        if not dec.exists():
            run_filter(toy, name)
        rep_path = tmp_path / f"{name}.json"
        sieve_report.main(
            [
                "report",
                "--decisions",
                str(dec),
                "--candidates",
                str(toy["candidates"]),
                "--dataset",
                "toy",
                "--filter",
                name,
                "--out",
                str(rep_path),
            ]
        )
        reports.append(str(rep_path))
    sieve_report.main(
        [
            "compare",
            "--dataset",
            "toy",
            "--reports",
            *reports,
            "--out-json",
            str(tmp_path / "cmp.json"),
            "--out-md",
            str(tmp_path / "cmp.md"),
        ]
    )
    comp = json.loads((tmp_path / "cmp.json").read_text())
    assert [r["filter"] for r in comp["filters"]] == [
        "none",
        "answer_match",
        "positive_aware",
        "sieve_no_ccr",
    ]
    none_row, am_row = comp["filters"][0], comp["filters"][1]
    assert none_row["recall"] == 0.0 and none_row["true_negative_retention"] == 1.0
    assert am_row["recall"] == 1.0 and am_row["precision"] == 1.0  # only the FN passages hold answers
    assert "| sieve_no_ccr |" in (tmp_path / "cmp.md").read_text()


def test_report_rejects_other_candidates(toy, tmp_path):
    out, table = run_filter(toy, "none")
    fewer = tmp_path / "fewer.parquet"
    table.iloc[1:].to_parquet(fewer)
    with pytest.raises(DataError) as err:
        sieve_report.build_report(fewer, toy["candidates"], "toy", "none")
    assert str(fewer) in str(err.value)
    rep = sieve_report.build_report(out, toy["candidates"], "toy", "none")
    other = dict(rep, filter="x", candidates_digest="0" * 64)
    with pytest.raises(DataError):
        sieve_report.compare([rep, other], ["a.json", "b.json"])


def test_cross_encoder_training_plan_and_filter(toy):
    negs = {"a": ["n1", "n2", "n3"], "b": ["n4"], "c": []}
    pos = {"a": ["pa"], "b": ["pb"], "c": ["pc"]}
    plan = cef.sample_pairs(negs, pos, steps=4, batch_size=3, seed=0)
    assert plan == cef.sample_pairs(negs, pos, steps=4, batch_size=3, seed=0)
    for batch in plan:
        assert len(batch) == 6 and {q for q, _, _ in batch} <= {"a", "b"}
        for qid, pid, label in batch:
            assert (pid == pos[qid][0]) == (label == 1.0)
            assert label == 1.0 or pid in negs[qid]
    model = toy["root"] / "cross_encoder"
    log = toy["root"] / "cross_encoder.log"
    cef.main(
        _cross_encoder_argv(toy, "--steps", "3", "--batch-size", "2", "--out", str(model), "--log", str(log))
    )
    assert (model / "ranker.json").exists()
    # Under Snakemake the log file, not the rich bar, shows progress: a plain line per step here.
    assert "step 3/3 (100%) loss " in log.read_text()
    _, ce = run_filter(toy, "cross_encoder", "--threshold", "0.5", model=model)
    assert ((ce["score"] > 0) & (ce["score"] < 1)).all()
    assert ce["kept"].tolist() == (ce["score"] < 0.5).tolist()


def _cross_encoder_argv(toy, *extra: str) -> list[str]:
    """pipeline.sieve.cross_encoder's arguments on the toy data, plus ``extra``."""
    return [*flags(toy, "negatives", "qrels", "queries", "corpus", "base"), *extra]


def test_cross_encoder_output_that_cannot_be_written_is_refused_before_training(
    toy, tmp_path, monkeypatch, capsys
):
    from pipeline.core.cli import run_main

    def no_training(*args, **kwargs):
        raise AssertionError("the inputs were read (training started) before the output was checked")

    monkeypatch.setattr(cef, "read_negatives", no_training)
    blocker = tmp_path / "models"
    blocker.write_text("a file where the models folder should be")
    with pytest.raises(SystemExit) as exc:
        run_main(cef.main, _cross_encoder_argv(toy, "--steps", "3", "--out", str(blocker / "cross_encoder")))
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert str(blocker) in err and "not a folder" in err, err


@pytest.mark.parametrize("flag", ["--lr=nan", "--lr=inf", "--lr=0"])
def test_cross_encoder_training_settings_are_checked_by_the_contract(toy, tmp_path, capsys, flag):
    # as train_dense does (issue 28.2): a NaN learning rate would train a model of NaN scores
    from pipeline.core.cli import run_main

    with pytest.raises(SystemExit) as exc:
        run_main(
            cef.main, _cross_encoder_argv(toy, "--steps", "2", flag, "--out", str(tmp_path / "cross_encoder"))
        )
    assert exc.value.code == 2
    assert "'settings.lr'" in capsys.readouterr().err
    assert not (tmp_path / "cross_encoder").exists()


# ---- the oracle filter and the training negatives of a filter -----------------------------------


def test_oracle_drops_exactly_the_hand_made_qrels_all_and_writes_training_negatives(toy):
    cands = pd.read_parquet(toy["candidates"])
    truth = set(map(tuple, pd.read_parquet(toy["qrels_all"])[["qid", "pid"]].to_numpy()))
    train_out = toy["root"] / "oracle" / "train.parquet"
    _, oracle = run_filter(toy, "oracle", "--train-out", str(train_out))
    expected = [(q, p) not in truth for q, p in cands[["qid", "pid"]].to_numpy()]
    assert oracle["kept"].tolist() == expected
    assert not all(expected)  # the toy's fn<k> passages are candidates: something must be dropped
    train = pd.read_parquet(train_out)
    assert list(train.columns) == ["qid", "pid", "rank", "score", "source", "has_answer", "excluded"]
    assert len(train) == sum(expected)
    assert not any((q, p) in truth for q, p in train[["qid", "pid"]].to_numpy())
    assert (train["source"] == "oracle").all() and not train["excluded"].any()
    for _, ranks in train.groupby("qid")["rank"]:
        assert ranks.tolist() == list(range(1, len(ranks) + 1))  # renumbered, source order kept
    kept = cands[expected].sort_values(["qid", "rank"])
    assert train["pid"].tolist() == kept["pid"].tolist()
    assert np.allclose(train["score"], kept["source_score"].astype(np.float32))


def test_oracle_refuses_candidates_without_exact_labels(toy, tmp_path):
    unlabelled = tmp_path / "candidates.parquet"
    tables = ("negatives", "qrels", "queries", "corpus")
    fn_labels.main(flags(toy, *tables, candidates=8, pool=12, out=unlabelled))
    with pytest.raises(DataError, match="exact false-negative labels"):
        filters.main(
            flags(
                dict(toy, candidates=unlabelled),
                "candidates",
                "corpus",
                "queries",
                filter="oracle",
                out=tmp_path / "d.parquet",
            )
        )
    assert not (tmp_path / "d.parquet").exists()


def test_per_query_separation_by_hand_and_free_of_tau():
    # Query a: TN losses (2, 3) vs FN (1): the TN are above in 2 of 2 pairs -> 1.0.
    # Query b: TN (1, 4) vs FN (2, 4): pairs (1>2 no, 1>4 no, 4>2 yes, 4=4 half) -> 1.5/4 = 0.375.
    # Query c: only true negatives -> not counted. Mean over a, b = 0.6875; pooled differs.
    qids = np.array(["a", "a", "a", "b", "b", "b", "b", "c"])
    loss = np.array([2.0, 3.0, 1.0, 1.0, 4.0, 2.0, 4.0, 0.5])
    is_fn = np.array([False, False, True, False, False, True, True, False])
    auc, n = sieve_report.per_query_auc(qids, loss, is_fn, ~is_fn)
    assert (auc, n) == (pytest.approx(0.6875), 2)
    # A per-query shift of the losses (what a different τ's logsumexp does) leaves it unchanged.
    shifted = loss + np.array([5.0, 5.0, 5.0, -3.0, -3.0, -3.0, -3.0, 0.0])
    assert sieve_report.per_query_auc(qids, shifted, is_fn, ~is_fn)[0] == pytest.approx(0.6875)
    assert sieve_report.auc_greater(shifted[~is_fn], shifted[is_fn]) != pytest.approx(
        sieve_report.auc_greater(loss[~is_fn], loss[is_fn])
    )
    assert sieve_report.per_query_auc(qids[:1], loss[:1], is_fn[:1], ~is_fn[:1]) == (None, 0)


# ---- absolute_margin and positive_aware_dev (issue 41) ---------------------------------------------


def test_pick_margin_by_hand():
    # Statistic s_neg/s_pos of six dev candidates, two of them false negatives (0.96, 0.97).
    stat = np.array([0.5, 0.6, 0.7, 0.96, 0.97, 0.99])
    truth = np.array([False, False, False, True, True, False])
    choice = filters.pick_margin(stat, truth, [0.55, 0.65, 0.95, 0.955, 0.98], "youden")
    by_margin = {r["margin"]: r for r in choice["grid"]}
    # 0.55 drops 0.6..0.99: recall 1, 3 of 4 TN dropped -> J 0.25, F1 4/7; 0.65: J 0.5, F1 4/6;
    # 0.95 and 0.955 drop 0.96, 0.97, 0.99: J 0.75, F1 0.8 (a tie: the larger margin wins); 0.98: J -0.25.
    assert by_margin[0.55]["youden"] == pytest.approx(0.25) and by_margin[0.55]["f1"] == pytest.approx(4 / 7)
    assert by_margin[0.65]["youden"] == pytest.approx(0.5) and by_margin[0.65]["f1"] == pytest.approx(4 / 6)
    assert by_margin[0.95]["youden"] == pytest.approx(0.75) and by_margin[0.95]["f1"] == pytest.approx(0.8)
    assert by_margin[0.98]["youden"] == pytest.approx(-0.25) and by_margin[0.98]["f1"] == 0.0
    assert choice["margin"] == 0.955 and (choice["n_fn"], choice["n_tn"]) == (2, 4)
    # F1 and Youden disagree when dropping one more true negative buys recall: 0.65 has the better J.
    stat2 = np.array([0.7, 0.8, 0.9, 0.95])
    truth2 = np.array([False, True, False, True])
    # 0.75: drop 0.8, 0.9, 0.95: recall 1, TN dropped 1/2 -> J 0.5, F1 4/5; 0.92: drop 0.95 -> J 0.5, F1 2/3.
    assert filters.pick_margin(stat2, truth2, [0.75, 0.92], "f1")["margin"] == 0.75
    assert filters.pick_margin(stat2, truth2, [0.75, 0.92], "youden")["margin"] == 0.92  # tie: larger
    with pytest.raises(ValueError, match="cannot be chosen"):
        filters.pick_margin(stat, np.zeros(6, bool), [0.9], "f1")


def test_dev_grid_and_truth():
    from pipeline.sieve.settings import PositiveAwareDevSettings

    assert PositiveAwareDevSettings(grid_min=0.9, grid_max=1.0, grid_step=0.05).grid() == [0.9, 0.95, 1.0]
    assert len(PositiveAwareDevSettings().grid()) == 21
    with pytest.raises(ValueError, match="below grid_min"):
        PositiveAwareDevSettings(grid_min=0.9, grid_max=0.8)
    exact = pd.DataFrame(
        {"qid": ["q"] * 2, "pid": ["a", "b"], "fn_label_source": ["qrels_all"] * 2,
         "is_false_negative": [True, False], "has_answer": [False, False]}
    )  # fmt: skip
    assert filters.dev_truth(exact, "dev.parquet")[0].tolist() == [True, False]
    squad = exact.assign(fn_label_source=[None, "suspected"], is_false_negative=[None, None])
    truth, name = filters.dev_truth(squad, "dev.parquet")
    assert truth.tolist() == [False, False] and name.startswith("answer match")
    with pytest.raises(DataError, match="qid q, pid b"):
        filters.dev_truth(squad.assign(has_answer=[False, None]), "dev.parquet")


def test_absolute_margin_and_positive_aware_dev_filters(toy, tmp_path):
    _, sv_ = run_filter(toy, "sieve_no_ccr", model=toy["model"])
    s_neg, s_pos = sv_["similarity"].to_numpy(), sv_["positive_similarity"].to_numpy()
    _, am = run_filter(toy, "absolute_margin", "--absolute-margin-margin", "0.05", model=toy["model"])
    assert am["kept"].tolist() == (~(s_neg > s_pos - 0.05)).tolist()
    np.testing.assert_allclose(am["score"].to_numpy(), s_neg - s_pos, rtol=1e-12)
    # The toy's own candidates serve as the dev candidates: the margin is then the one that best
    # separates them by hand, and the train decisions are the relative rule at it.
    grid = ["--positive-aware-dev-grid-min", "0.5", "--positive-aware-dev-grid-max", "1.0"]
    dev = ["--dev-candidates", str(toy["candidates"]), "--dev-queries", str(toy["queries"])]
    out, pad = run_filter(toy, "positive_aware_dev", *grid, "--positive-aware-dev-grid-step", "0.05", *dev,
                          model=toy["model"])  # fmt: skip
    cands = pd.read_parquet(toy["candidates"])
    expected = filters.pick_margin(
        s_neg / s_pos,
        cands["is_false_negative"].astype(bool).to_numpy(),
        [0.5 + 0.05 * i for i in range(11)],
        "youden",
    )
    choice = sieve_report.dev_margin(out)["dev_margin"]
    assert choice["margin"] == pytest.approx(expected["margin"]) and choice["criterion"] == "youden"
    assert choice["truth"].startswith("exact") and len(choice["grid"]) == 11
    assert pad["kept"].tolist() == (~(s_neg > choice["margin"] * s_pos)).tolist()
    rep = tmp_path / "pad.json"
    sieve_report.main(
        ["report", "--decisions", str(out), "--candidates", str(toy["candidates"]), "--dataset", "toy",
         "--filter", "positive_aware_dev", "--out", str(rep)]
    )  # fmt: skip
    assert json.loads(rep.read_text())["dev_margin"]["margin"] == choice["margin"]
    with pytest.raises(DataError, match="--dev-candidates"):
        run_filter(toy, "positive_aware_dev", model=toy["model"])

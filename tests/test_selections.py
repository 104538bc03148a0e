"""The selections' table (pipeline.evaluation.selections): what each model selection on dev chose, what
it is worth on test against the trained model and the start, and the annotated labels' choice against
the truth's, checked on hand-made records with hand-computed expectations; its errors; the CLI end to
end on a tiny case; and the workflow's inputs on the v2 tournament overlay."""

from __future__ import annotations

import json
import math

import pytest

from pipeline.core.config import REPO_ROOT, load_config
from pipeline.core.methods import method_table
from pipeline.core.settings.root import apply_defaults
from pipeline.core.storage import DataError
from pipeline.evaluation import selections
from pipeline.evaluation.selections import Choice, compare_labels, read_choice, summarize_selection

T3 = 4.302652729911275  # t(0.975, 2): 3 seeds
OVERLAY_V2 = REPO_ROOT / "config/overlays/tournament/tournament_v2.yaml"


def record(chosen: str, dev: dict[str, float], metric: str = "MRR@10") -> dict:
    """A selection.json as select_model writes it: ``dev`` candidate name -> dev metric, in tie order."""

    def entry(name: str) -> dict:
        if name in ("start", "trained"):
            return {"name": name, "kind": name, "alpha": float(name == "trained"), "step": None}
        if name.startswith("step"):
            return {"name": name, "kind": "snapshot", "alpha": None, "step": int(name[4:])}
        return {"name": name, "kind": "interpolation", "alpha": float(name[5:]), "step": None}

    scored = [{**entry(name), "dev_metric": value} for name, value in dev.items()]
    mine = entry(chosen)
    return {
        "metric": metric,
        "qrels": "resources/kb/qrels.dev.parquet",
        "n_queries": 50,
        "scored": scored,
        "chosen": chosen,
        "chosen_kind": mine["kind"],
        "chosen_alpha": mine["alpha"],
        "chosen_step": mine["step"],
    }


DEV = {"start": 0.40, "step10": 0.45, "step20": 0.47, "alpha0.5": 0.50, "trained": 0.48}


def choice(chosen: str, dev: dict[str, float] = DEV) -> Choice:
    return read_choice(record(chosen, dev), "sel.json")


# ---- reading a record ---------------------------------------------------------------------------------


def test_a_record_gives_the_chosen_candidate_and_the_dev_metrics_of_it_the_trained_model_and_the_start():
    c = choice("alpha0.5")
    assert (c.chosen, c.kind, c.alpha, c.step, c.metric) == ("alpha0.5", "interpolation", 0.5, None, "MRR@10")
    assert (c.dev_chosen, c.dev_trained, c.dev_start) == (0.50, 0.48, 0.40)
    assert choice("step20").step == 20 and choice("start").kind == "start"


def test_the_tie_order_is_start_snapshots_by_step_interpolations_by_alpha_trained():
    names = ["trained", "alpha0.75", "step20", "alpha0.25", "start", "step10"]
    ordered = sorted(names, key=lambda n: choice(n, {**DEV, "alpha0.25": 0.1, "alpha0.75": 0.1}).order())
    assert ordered == ["start", "step10", "step20", "alpha0.25", "alpha0.75", "trained"]


def test_the_training_side_orders_its_candidates_the_same_way():
    pytest.importorskip("torch")
    from pipeline.training.select_model import Candidate

    assert Candidate("snapshot", step=20).order() == choice("step20").order()
    assert Candidate("interpolation", alpha=0.5).order() == choice("alpha0.5").order()
    assert Candidate("trained", alpha=1.0).order() == choice("trained").order()


@pytest.mark.parametrize(
    "change, where",
    [
        (lambda r: r.pop("chosen_kind"), "sel.json: field 'chosen_kind': missing key"),
        (lambda r: r.update(chosen_kind="best"), "sel.json: field 'chosen_kind': must be one of"),
        (lambda r: r.pop("scored"), "sel.json: field 'scored': missing key"),
        (
            lambda r: r["scored"][1].pop("dev_metric"),
            "sel.json: record 1: field 'scored.dev_metric': missing",
        ),
        (
            lambda r: r["scored"][2].update(dev_metric="0.4"),
            "record 2: field 'scored.dev_metric': must be a finite",
        ),
        (lambda r: r["scored"][0].update(dev_metric=math.nan), "record 0: field 'scored.dev_metric'"),
        (lambda r: r["scored"].pop(0), "sel.json: field 'scored': no start candidate"),
        (
            lambda r: r.update(chosen="alpha0.3"),
            "sel.json: field 'chosen': 'alpha0.3' (interpolation) is not",
        ),
        (lambda r: r.update(chosen_step=None), "sel.json: field 'chosen_step': a snapshot's step"),
        (lambda r: r.update(metric=3), "sel.json: field 'metric'"),
    ],
)
def test_a_malformed_record_is_one_line_naming_the_file_record_and_field(change, where):
    bad = record("step10", DEV)
    if "alpha0.3" in where:  # an interpolation nobody scored
        bad.update(chosen_kind="interpolation", chosen_alpha=0.3, chosen_step=None)
    change(bad)
    with pytest.raises(DataError) as raised:
        read_choice(bad, "sel.json")
    assert where in str(raised.value) and "\n" not in str(raised.value)


# ---- the summaries ------------------------------------------------------------------------------------


def test_a_contender_summary_counts_the_choices_and_pairs_test_with_the_trained_model_and_the_start():
    choices = {
        0: choice("start", {"start": 0.40, "trained": 0.38}),
        1: choice("alpha0.5", {"start": 0.40, "alpha0.5": 0.44, "trained": 0.42}),
        2: choice("trained", {"start": 0.40, "alpha0.5": 0.41, "trained": 0.46}),
    }
    test = {
        "selection": {0: 0.60, 1: 0.62, 2: 0.55},
        "trained": {0: 0.55, 1: 0.58, 2: 0.55},
        "start": {0: 0.60, 1: 0.60, 2: 0.60},
    }
    row = summarize_selection(choices, test)
    assert [(r["seed"], r["chosen"], r["kind"]) for r in row["per_seed"]] == [
        (0, "start", "start"),
        (1, "alpha0.5", "interpolation"),
        (2, "trained", "trained"),
    ]
    assert row["counts"] == {"start": 1, "snapshot": 0, "interpolation": 1, "trained": 1}
    assert row["dev_metric"] == "MRR@10"
    # dev: chosen (0.40 + 0.44 + 0.46) / 3, trained (0.38 + 0.42 + 0.46) / 3, start 0.40
    assert row["dev"] == pytest.approx({"chosen": 0.43333333, "trained": 0.42, "start": 0.40})
    assert row["test"] == pytest.approx({"selection": 0.59, "trained": 0.56, "start": 0.60})
    # selection − trained per seed 0.05, 0.04, 0.00: mean 0.03, s = √(0.0014 / 2)
    half = T3 * math.sqrt(0.0014 / 2) / math.sqrt(3)
    vs = row["vs_trained"]
    assert (vs["mean"], vs["ci_low"], vs["ci_high"], vs["n"]) == pytest.approx(
        (0.03, 0.03 - half, 0.03 + half, 3)
    )
    assert row["vs_start"]["mean"] == pytest.approx(-0.01)  # 0.00, +0.02, −0.05
    # training hurt in every seed (0.55, 0.58, 0.55 < 0.60); the start was kept in seed 0 alone
    assert row["training_hurt"] == {"seeds": [0, 1, 2], "kept_start": [0]}


def test_seeds_chosen_by_different_metrics_are_refused():
    choices = {0: choice("start"), 1: read_choice(record("start", DEV, metric="hit@1"), "s1.json")}
    same = {0: 0.5, 1: 0.5}
    with pytest.raises(DataError, match=r"s1.json: field 'metric': chose by hit@1"):
        summarize_selection(choices, {"selection": same, "trained": same, "start": same})


def test_the_annotated_labels_against_the_truth_count_same_choices_and_later_picks():
    dev = {0: choice("trained"), 1: choice("start"), 2: choice("step20"), 3: choice("start")}
    truth = {
        0: choice("alpha0.5"),
        1: choice("start"),
        2: choice("step10"),
        3: choice("step10"),
        4: choice("start"),
    }
    found = compare_labels(dev, truth)
    assert found["seeds"] == [0, 1, 2, 3]  # seed 4 has no dev-label record
    assert [r["same"] for r in found["per_seed"]] == [False, True, False, False]
    # dev later: trained > alpha0.5 (seed 0), step20 > step10 (seed 2); truth later: step10 > start (seed 3)
    assert [r["dev_later"] for r in found["per_seed"]] == [True, False, True, False]
    assert (found["same"], found["dev_later"], found["truth_later"]) == (1, 2, 1)


# ---- which contenders, of what ------------------------------------------------------------------------


def test_each_selection_contender_selects_from_its_trained_method_by_the_method_table():
    settings = load_config([OVERLAY_V2])["tournament"]
    found = selections.selection_contenders(settings)
    assert found == {
        "dpr_none_wise": {"trained": "dpr_none", "labels": "dev"},
        "dpr_sieve_no_ccr_wise": {"trained": "dpr_sieve_no_ccr", "labels": "dev"},
        "dpr_none_wise_truth": {"trained": "dpr_none", "labels": "truth"},
        "dpr_sieve_no_ccr_wise_truth": {"trained": "dpr_sieve_no_ccr", "labels": "truth"},
    }
    # dpr_sieve trains the same model folder at the defaults: the contender's name is the one preferred
    table = method_table(apply_defaults({}))
    m = table["dpr_sieve_no_ccr_wise"]
    assert selections.trained_of(m, table, ["dpr_sieve_no_ccr"]) == "dpr_sieve_no_ccr"
    assert table[selections.trained_of(m, table)].run == table["dpr_sieve_no_ccr"].run


# ---- the stage end to end on a tiny case --------------------------------------------------------------


def tiny_settings() -> dict:
    settings = apply_defaults({})["tournament"]
    settings.update(
        methods=["dpr_none", "dpr_oracle", "dpr_sieve_no_ccr", "dpr_none_wise", "dpr_none_wise_truth"],
        levels={"kb": {"label": "30% tiny"}},
    )
    return settings


def write(path, obj) -> str:
    path.write_text(json.dumps(obj))
    return str(path)


def tiny_metrics(primary: str = "hit_all@1") -> dict:
    def seeded(values: list[float]) -> dict:
        return {
            "metrics": {primary: sum(values) / len(values)},
            "per_seed": [{"seed": s, "metrics": {primary: v}} for s, v in enumerate(values)],
        }

    return {
        "dataset": "kb",
        "methods": {
            "zeroshot": {"metrics": {primary: 0.60}},
            "dpr_none": seeded([0.50, 0.58]),
            "dpr_none_wise": seeded([0.60, 0.59]),
            "dpr_none_wise_truth": seeded([0.60, 0.61]),
        },
    }


def run_tiny(tmp_path, records: dict[str, dict], metrics: dict) -> tuple[int, str, dict]:
    args = ["--settings", json.dumps(tiny_settings()), "--selections"]
    for key, rec in records.items():
        args.append(f"kb:{key}=" + write(tmp_path / f"{key.replace(':', '_')}.json", rec))
    args += ["--metrics", "kb=" + write(tmp_path / "metrics.json", metrics)]
    out_json, out_md = tmp_path / "sel.json", tmp_path / "sel.md"
    code = selections.main([*args, "--out-json", str(out_json), "--out-md", str(out_md)])
    return code, out_md.read_text(), json.loads(out_json.read_text())


def test_the_stage_writes_what_was_chosen_and_says_when_the_annotated_labels_pick_the_learner(tmp_path):
    records = {
        "dpr_none_wise:0": record("start", {"start": 0.40, "step10": 0.39, "trained": 0.35}),
        "dpr_none_wise:1": record("trained", {"start": 0.40, "step10": 0.41, "trained": 0.45}),
        "dpr_none_wise_truth:0": record("start", {"start": 0.70, "step10": 0.66, "trained": 0.61}),
        "dpr_none_wise_truth:1": record("step10", {"start": 0.70, "step10": 0.72, "trained": 0.71}),
    }
    code, md, result = run_tiny(tmp_path, records, tiny_metrics())
    assert code == 0
    level = result["levels"][0]
    row = level["selections"]["dpr_none_wise"]
    assert row["trained"] == "dpr_none" and row["labels"] == "dev"
    assert row["test"] == pytest.approx({"selection": 0.595, "trained": 0.54, "start": 0.60})
    assert row["training_hurt"] == {"seeds": [0, 1], "kept_start": [0]}  # 0.50, 0.58 < 0.60
    assert "| dpr_none_wise | dev | dpr_none | s0 start, s1 trained | 1 · 0 · 0 · 1 |" in md
    assert "| dpr_none_wise_truth | truth | dpr_none | s0 start, s1 step10 | 1 · 1 · 0 · 0 |" in md
    assert "| 1 of 2 |" in md  # the start kept in one of the two seeds where training hurt
    # seed 1: the annotated labels chose the trained model, the truth its snapshot at step 10
    assert level["dev_vs_truth"][0]["dev_later"] == 1
    assert "| dpr_none | s0 start/start, s1 trained/step10 | 1 of 2 | 1 of 2 | 0 of 2 |" in md
    assert (
        "At 30% tiny the annotated dev labels chose a candidate nearer the trained model than the true labels "
        "did in 1 of 2 seeds for dpr_none: there they picked the model that learned the annotations' false "
        "negatives." in md
    )
    # the same inputs give the same bytes
    assert run_tiny(tmp_path, records, tiny_metrics())[1] == md


def test_the_stage_says_so_where_the_annotated_labels_never_chose_later(tmp_path):
    same = record("start", {"start": 0.40, "trained": 0.35})
    records = {"dpr_none_wise:0": same, "dpr_none_wise:1": same, "dpr_none_wise_truth:0": same}
    records["dpr_none_wise_truth:1"] = record("trained", {"start": 0.40, "trained": 0.45})
    _, md, _ = run_tiny(tmp_path, records, tiny_metrics())
    assert "picked the model that learned" not in md
    assert "never chose nearer the trained model than the truth here" in md


@pytest.mark.parametrize(
    "records, metrics, message",
    [
        # a contender of the level without any record
        ({"dpr_none_wise:0": record("start", DEV)}, tiny_metrics(), "no selection record of dpr_none_wise_truth"),
        # a record whose field is missing: the file and field
        (
            {"dpr_none_wise:0": {"chosen": "start"}, "dpr_none_wise_truth:0": record("start", DEV)},
            tiny_metrics(),
            "dpr_none_wise_0.json: field 'chosen_kind': missing key",
        ),
        # the trained model has no run of a seed that was selected
        (
            {"dpr_none_wise:0": record("start", DEV), "dpr_none_wise:7": record("start", DEV),
             "dpr_none_wise_truth:0": record("start", DEV)},
            tiny_metrics(),
            "field 'methods.dpr_none_wise.per_seed': dpr_none_wise has no run of seed 7",
        ),
    ],
)  # fmt: skip
def test_the_stage_refuses_with_one_line(tmp_path, capsys, records, metrics, message):
    from pipeline.core.cli import run_main

    args = ["--settings", json.dumps(tiny_settings()), "--selections"]
    for key, rec in records.items():
        args.append(f"kb:{key}=" + write(tmp_path / f"{key.replace(':', '_')}.json", rec))
    args += ["--metrics", "kb=" + write(tmp_path / "metrics.json", metrics)]
    args += ["--out-json", str(tmp_path / "o.json"), "--out-md", str(tmp_path / "o.md")]
    with pytest.raises(SystemExit) as raised:
        run_main(selections.main, args)
    assert raised.value.code == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not (tmp_path / "o.json").exists() and not (tmp_path / "o.md").exists()


def test_a_selection_of_a_skipped_or_unknown_contender_is_refused():
    settings = tiny_settings()
    settings["levels"]["kb"]["skip"] = ["dpr_none_wise_truth"]
    contenders = selections.selection_contenders(settings)
    with pytest.raises(DataError, match="dpr_none_wise_truth is skipped at kb"):
        selections.parse_selections(["kb:dpr_none_wise_truth:0=x.json"], settings, contenders)
    with pytest.raises(DataError, match="'dpr_none' is not a selection contender"):
        selections.parse_selections(["kb:dpr_none:0=x.json"], settings, contenders)
    with pytest.raises(DataError, match="expected DATASET:METHOD:SEED=PATH"):
        selections.parse_selections(["kb:dpr_none_wise=x.json"], settings, contenders)


def test_a_level_that_skips_every_selection_says_so(tmp_path):
    settings = tiny_settings()
    settings["levels"]["kb"]["skip"] = ["dpr_none_wise", "dpr_none_wise_truth"]
    result = selections.build_selections(settings, {}, {"kb": write(tmp_path / "m.json", tiny_metrics())})
    assert result["levels"][0]["selections"] == {}
    assert result["levels"][0]["skip"] == ["dpr_none_wise", "dpr_none_wise_truth"]
    assert "No selection runs at this level" in selections.selections_markdown(result)


# ---- the workflow's inputs ---------------------------------------------------------------------------


def _v2_tables():
    from pipeline.core.config import validate_config
    from pipeline.core.recipes import dataset_configs
    from pipeline.workflow.tables import WorkflowTables

    config = load_config([OVERLAY_V2])
    validate_config(config, methods=lambda: method_table(config))
    return WorkflowTables(config, dataset_configs(config, methods=method_table))


def test_the_rule_reads_every_selection_of_the_v2_overlay_at_every_level_and_seed():
    from pipeline.workflow.evaluation import tournament_selections

    found = tournament_selections(_v2_tables())
    # the 2 mined-source levels run no selection (sieve-clean's contenders only)
    full, synthkb, seeds = 5, 4, 5
    assert len(found) == (2 * full + 2 * synthkb) * seeds == 90
    by = {(d, m, s): (model, rec) for d, m, s, model, rec in found}
    assert by["synthkb_fn30_p50", "dpr_none_wise", 0] == (
        "results/synthkb_fn30_p50/models/dpr_none_wise/retriever.json",
        "results/synthkb_fn30_p50/models/dpr_none_wise/selection.json",
    )
    assert by["squad36", "dpr_sieve_no_ccr_wise", 3][1] == (
        "results/squad36/models/dpr_sieve_no_ccr_wise-s3/selection.json"
    )
    assert not [k for k in by if k[0] == "squad36" and k[1].endswith("_truth")]
    assert not [k for k in by if k[0].endswith("_zsmined")]


@pytest.mark.slow
def test_snakemake_plans_the_selections_table_on_the_v2_overlay(tmp_path):
    from test_tournament import plan_v2_overlay
    from test_workflow import jobs_in_dry_run

    out = plan_v2_overlay(tmp_path, "results/sweeps/tournament_selections.json", "--printshellcmds")
    jobs = jobs_in_dry_run(out)
    levels, full, synthkb = 7, 5, 4  # the 2 mined-source levels run no selection
    selections_run = 2 * full + 2 * synthkb
    assert jobs["tournament_selections"] == 1
    assert (jobs["select_model"], jobs["select_model_seed"]) == (selections_run, selections_run * 4)
    command = next(line for line in out.splitlines() if "pipeline.evaluation.selections" in line)
    records = command.split("--selections ")[1].split(" --metrics ")[0].split()
    assert len(records) == selections_run * 5 == 90
    assert all(r.endswith("/selection.json") for r in records)
    assert len(command.split(" --metrics ")[1].split(" --out-json ")[0].split()) == levels

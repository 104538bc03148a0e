"""The method table (pipeline.core.methods): every method name resolves to one record."""

from __future__ import annotations

import re

import pytest
from shell_settings import job_document

from pipeline.core.config import ConfigError, load_config, validate_config
from pipeline.core.methods import (
    OTHER_FILTERS,
    ccr_betas,
    closest,
    filter_negatives,
    filtered_candidates,
    method_table,
    sieve_tag,
)


def _paper_config() -> dict:
    """config.yaml with the paper's sieve (scored by the CCR model at β 0.5, the β sweep of the paper's
    Figure 1): the demo's own (β 6, scored by models/dpr) resolves fewer kinds of names."""
    config = load_config()
    config["ccr"]["beta"] = 0.5
    config["sieve"]["scorer"] = "ccr"
    config["sieve"]["betas"] = [0, 0.05, 0.1, 0.5]
    return config


# The same for the planned-shell tests, as an overlay read before each test's own.
PAPER_SIEVE = "ccr: {beta: 0.5}\nsieve: {scorer: ccr, betas: [0, 0.05, 0.1, 0.5]}\n"


@pytest.fixture(scope="module")
def table():
    return method_table(_paper_config())


def test_each_kind_of_method_resolves_to_what_it_retrieves_with(table):
    assert table["bm25"].kind == "bm25"
    assert table["zeroshot"].model == "zeroshot" and table["zeroshot"].trains is None
    assert (table["dpr"].model, table["dpr"].trains, table["dpr"].negatives) == ("dpr", "dpr", "bm25")
    ccr = table["dpr_ccr"]  # default ccr.beta 0.5
    assert (ccr.model, ccr.trains, ccr.negatives, ccr.beta) == ("dpr_ccr_b0.5", "ccr", "bm25", 0.5)
    sieve = table["dpr_sieve"]
    assert (sieve.model, sieve.trains, sieve.negatives, sieve.beta) == (
        "dpr_sieve_b0.5",
        "dpr",
        "sieve_b0.5",
        0.5,
    )
    for name in OTHER_FILTERS:
        assert table[f"dpr_{name}"].negatives == name and table[f"dpr_{name}"].model == f"dpr_{name}"
    mined = table["dpr_mined_dpr"]
    assert (mined.model, mined.negatives) == ("dpr_mined_dpr", "dpr")
    # what a run depends on is in its folder name: the β of dpr_ccr reaches the runs built on it
    assert (ccr.run, sieve.run, table["dpr_mined_dpr_ccr"].model) == (
        "dpr_ccr_b0.5",
        "dpr_sieve_b0.5",
        "dpr_mined_dpr_ccr_b0.5",
    )
    assert table["dpr_ccr_b0.05"].beta == 0.05 and table["dpr_sieve_b0"].negatives == "sieve_b0"
    hybrid = table["hybrid_wsum_dpr_ccr"]
    assert (hybrid.kind, hybrid.fusion, hybrid.base, hybrid.run) == (
        "hybrid",
        "wsum",
        "dpr_ccr_b0.5",
        "hybrid_wsum_dpr_ccr_b0.5",
    )
    assert table["ar2_simans_sieve"].variant == "simans_sieve"


def test_the_beta_is_the_configs_and_two_betas_never_share_a_model():
    config = _paper_config()
    config["ccr"]["beta"] = 6
    table = method_table(config)
    assert table["dpr_ccr"].model == "dpr_ccr_b6" and table["dpr_ccr"].beta == 6.0
    assert table["dpr_sieve"].negatives == "sieve_b6"
    assert ccr_betas(config) == {"6": 6.0, "0": 0.0, "0.05": 0.05, "0.1": 0.1, "0.5": 0.5}


def test_what_is_random_has_a_run_per_seed(table):
    random = {name for name, m in table.items() if m.kind != "ar2" and m.random}
    assert {"bm25", "zeroshot", "hybrid_rrf_zeroshot", "hybrid_wsum_zeroshot"}.isdisjoint(random)
    assert {"dpr", "dpr_ccr", "dpr_sieve", "dpr_oracle", "dpr_mined_zeroshot", "hybrid_rrf_dpr"} <= random


def test_methods_trained_on_filtered_candidates_cannot_source_the_sieve(table):
    for name in ("dpr_sieve", "dpr_oracle", "dpr_none", "dpr_mined_dpr_sieve", "dpr_mined_dpr_oracle"):
        assert filtered_candidates(table, name), name
    for name in ("bm25", "zeroshot", "dpr", "dpr_ccr", "dpr_mined_dpr", "my_own_negatives"):
        assert not filtered_candidates(table, name), name


def test_an_unknown_method_is_named_with_the_closest_known_ones():
    config = load_config()
    config["methods"] = ["bm25", "dpr_sievee"]
    with pytest.raises(ConfigError, match=r"'methods\.1': unknown method 'dpr_sievee' \(closest: dpr_sieve"):
        validate_config(config, methods=lambda: method_table(config))
    assert closest("zzz", ["a", "b"]) == "known: a, b"


def _dry_run(
    tmp_path,
    overlay_text: str,
    *args: str,
    target: str = "results/synthkb/metrics.json",
    paper_sieve: bool = True,
):
    """`snakemake -n ARGS TARGET` under config.yaml, PAPER_SIEVE (unless ``paper_sieve`` is false: the
    demo's own settings) and the overlay ``overlay_text``."""
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parent.parent
    paper = tmp_path / "paper_sieve.yaml"
    paper.write_text(PAPER_SIEVE if paper_sieve else "{}\n")
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text(overlay_text)
    return subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", *args, "--snakefile", str(repo / "Snakefile")]
        + ["--directory", str(tmp_path), "--configfile", str(repo / "config.yaml"), str(paper), str(overlay)]
        + ["--", target],
        capture_output=True,
        text=True,
    )


def _planned_shells(tmp_path, overlay_text: str) -> list[str]:
    """The shell lines `snakemake -n -p --forceall` plans for the demo target under config.yaml plus
    the overlay ``overlay_text``."""
    proc = _dry_run(tmp_path, overlay_text, "-p", "--forceall")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return [line for line in proc.stdout.splitlines() if line.startswith("Shell command")]


@pytest.mark.slow
def test_two_betas_in_one_run_plan_two_models_and_two_runs_side_by_side(tmp_path):
    """methods [dpr_ccr_b0.5, dpr_ccr_b6] (both in sieve.betas): two CCR trainings, each with its own
    --beta, two run folders, gathered under their own names, compared with each other."""
    shells = _planned_shells(
        tmp_path,
        "methods: [bm25, dpr, dpr_ccr, dpr_ccr_b0.5, dpr_ccr_b6]\n"
        "sieve: {betas: [0.5, 6]}\n"
        "eval: {compare: [[dpr_ccr_b6, dpr_ccr_b0.5]]}\n",
    )
    ccr = sorted(
        job_document(line)["objective"]["beta"]
        for line in shells
        if "train_dense" in line and "models/dpr_ccr_b" in line
    )
    assert ccr == [0.5, 6]
    searched = {line.split("--out ")[1].split()[0] for line in shells if "pipeline.retrieval.search" in line}
    assert {
        "results/synthkb/dpr_ccr_b0.5/run.test.parquet",
        "results/synthkb/dpr_ccr_b6/run.test.parquet",
    } <= searched
    (gather,) = [line for line in shells if "pipeline.evaluation.gather" in line]
    # dpr_ccr (ccr.beta 0.5) and dpr_ccr_b0.5 are one run, gathered under both names
    assert "dpr_ccr=results/synthkb/dpr_ccr_b0.5/metrics.json" in gather
    assert "dpr_ccr_b6=results/synthkb/dpr_ccr_b6/metrics.json" in gather
    assert """--compare '[["dpr_ccr_b6", "dpr_ccr_b0.5"]]'""" in gather


def test_the_controls_of_ccr_are_methods():
    """dpr_rcl (paper Table 5) trains DPR with the regulariser at dpr.rcl.beta; sieve.scorer dpr makes
    dpr_sieve the sieve scored by models/dpr (dpr_sieve_no_ccr)."""
    config = load_config()
    table = method_table(config)
    rcl = table["dpr_rcl"]
    assert (rcl.run, rcl.model, rcl.trains, rcl.negatives, rcl.beta) == (
        "dpr_rcl_b0.5",
        "dpr_rcl_b0.5",
        "rcl",
        "bm25",
        0.5,
    )
    assert rcl.random and table["dpr_ccr_b0"].model == "dpr_ccr_b0"
    config["dpr"]["rcl"]["beta"] = 6
    assert method_table(config)["dpr_rcl"].run == "dpr_rcl_b6"
    config["sieve"]["scorer"] = "dpr"
    no_ccr = method_table(config)
    assert no_ccr["dpr_sieve"].run == no_ccr["dpr_sieve_no_ccr"].run == "dpr_sieve_no_ccr"
    assert no_ccr["dpr_sieve"].negatives == "sieve_no_ccr" and no_ccr["dpr_sieve"].beta is None
    assert no_ccr["dpr_sieve_b0.5"].negatives == "sieve_b0.5"  # the β sweep stays CCR-scored
    config["sieve"]["scorer"] = "model"
    with pytest.raises(ConfigError, match="sieve.scorer"):
        validate_config(config)


def test_the_controls_plan_their_own_trainings(tmp_path):
    """dpr_rcl: train_dpr with --beta/--scale added; scorer dpr: the sieve filter and AR2's first
    sieve read models/dpr, no CCR model is trained."""
    shells = _planned_shells(
        tmp_path,
        "methods: [dpr, dpr_rcl, dpr_sieve, ar2_sieve]\n"
        "dpr: {rcl: {beta: 6.0, scale: released_code}}\n"
        "sieve: {scorer: dpr, betas: [], filters: [none, sieve]}\n",
    )
    (rcl,) = [line for line in shells if "models/dpr_rcl_b6/" in line and "train_dense" in line]
    document = job_document(rcl)
    assert document["objective"] == {"beta": 6.0, "scale": "released_code"} and document["train"]["in_batch"]
    assert "--init minilm" in rcl
    (dpr,) = [line for line in shells if 'models/dpr/retriever.json)" --log' in line]
    assert "objective" not in job_document(dpr)  # NCE
    assert not any("train_dense" in line and "dpr_ccr_b" in line for line in shells)
    assert any(
        "pipeline.sieve.filters" in line and "--model results/synthkb/models/dpr " in line for line in shells
    )
    assert any(
        "pipeline.ar2.sieving" in line and "--model results/synthkb/models/dpr " in line for line in shells
    )
    (gather,) = [line for line in shells if "pipeline.evaluation.gather" in line]
    assert "dpr_sieve=results/synthkb/dpr_sieve_no_ccr/metrics.json" in gather
    assert "dpr_rcl=results/synthkb/dpr_rcl_b6/metrics.json" in gather and '["dpr_rcl", "dpr"]' in gather


def test_the_sieve_tag_names_each_setting_that_differs_from_its_default():
    sieve = load_config()["sieve"]
    assert sieve_tag(sieve) == "" and sieve_tag(sieve, decision=True) == ""
    changed = {**sieve, "candidates": 50, "max_queries": 600, "strict": True, "fallback": "none"}
    changed["injection"] = {"fraction": 0.25}
    changed["source"] = "dpr_ccr"
    # the candidates' settings in the contract's order, the source by the run it resolves to
    assert sieve_tag(changed, "dpr_ccr_b6") == "_source_dpr_ccr_b6_candidates50_max_queries600_injection0.25"
    assert sieve_tag(changed, "dpr_ccr_b6", decision=True).endswith("_injection0.25_strict_fallback_none")
    # settings that do not change the candidates or the decisions stay out of the names
    same = {**sieve, "temperature": 0.05, "batch_size": 8, "in_batch": 3, "betas": [6], "scorer": "dpr"}
    assert sieve_tag(same, decision=True) == ""
    # strict/fallback reach only the filters that apply the sieve's rule
    strict = {**sieve, "strict": True}
    assert [
        filter_negatives(f, strict) for f in ("oracle", "none", "sieve_no_ccr", "sieve_b0.5", "sieve")
    ] == [
        "oracle",
        "none",
        "sieve_no_ccr_strict",
        "sieve_b0.5_strict",
        "sieve_strict",
    ]


def test_every_method_built_on_the_candidates_carries_the_sieve_settings():
    config = _paper_config()
    validate_config(config)
    config["sieve"]["pool"] = 200
    config["sieve"]["strict"] = True
    table = method_table(config)
    assert table["dpr_oracle"].run == table["dpr_oracle"].model == "dpr_oracle_pool200"
    assert table["dpr_none"].negatives == "none_pool200" and table["dpr_none"].filter == "none"
    assert table["dpr_sieve"].run == "dpr_sieve_b0.5_pool200_strict"
    assert table["dpr_mined_dpr_oracle"].negatives == "dpr_oracle_pool200"
    # neither BM25's negatives nor the models trained on them depend on the sieve
    assert (table["dpr"].run, table["dpr_ccr"].run, table["dpr_rcl"].run) == (
        "dpr",
        "dpr_ccr_b0.5",
        "dpr_rcl_b0.5",
    )
    assert filtered_candidates(table, "dpr_none") and filtered_candidates(table, "dpr_mined_dpr_oracle")
    assert not filtered_candidates(table, "dpr_mined_dpr")


@pytest.mark.slow
def test_a_second_sieve_setting_builds_beside_the_first(tmp_path):
    """sieve.pool 200: new candidates, filters, sieve negatives, DPRs and runs under tagged names; BM25's
    negatives, DPR and CCR keep theirs. The default setting's paths are untouched."""
    shells = _planned_shells(tmp_path, "methods: [dpr, dpr_sieve, dpr_oracle]\nsieve: {pool: 200}\n")
    (cands,) = [line for line in shells if "pipeline.sieve.candidates" in line]
    assert '"pool":200' in cands and "--out results/synthkb/sieve/candidates_pool200.parquet" in cands
    (sieve,) = [line for line in shells if "pipeline.sieve.passage_sieve" in line]
    assert "--out results/synthkb/negatives/sieve_b0.5_pool200.parquet" in sieve
    assert "--candidates results/synthkb/sieve/candidates_pool200.parquet" in sieve
    trained = {
        line.split('--out "$(dirname ')[1].split("/retriever.json")[0]
        for line in shells
        if "train_dense" in line
    }
    models = ("dpr", "dpr_ccr_b0.5", "dpr_sieve_b0.5_pool200", "dpr_oracle_pool200")
    assert {f"results/synthkb/models/{m}" for m in models} <= trained
    gathered = next(line for line in shells if "pipeline.evaluation.gather" in line).split()
    for method, run in (("dpr_sieve", "dpr_sieve_b0.5_pool200"), ("dpr_oracle", "dpr_oracle_pool200")):
        assert f"{method}=results/synthkb/{run}/metrics.json" in gathered
    assert not any("results/synthkb/sieve/candidates.parquet" in line for line in shells)


@pytest.mark.slow
def test_a_default_sieve_path_asked_for_under_other_settings_is_named(tmp_path):
    proc = _dry_run(tmp_path, "sieve: {max_queries: 600}\n", target="results/synthkb/sieve/comparison.md")
    assert proc.returncode != 0
    assert "sieve settings give '_max_queries600'" in proc.stdout + proc.stderr
    assert "sieve/comparison_max_queries600.md" in proc.stdout + proc.stderr


def test_an_ar2_sieve_run_carries_its_scorer_and_sieve_settings():
    config = _paper_config()
    validate_config(config)
    table = method_table(config)
    assert (table["ar2"].run, table["ar2"].variant_dir) == ("ar2", "plain")
    assert (table["ar2_sieve"].run, table["ar2_sieve"].variant, table["ar2_sieve"].variant_dir) == (
        "ar2_sieve_b0.5",
        "sieve",
        "sieve_b0.5",
    )
    config["ccr"]["beta"] = 6
    config["sieve"]["candidates"] = 20
    config["sieve"]["max_queries"] = 100  # not read by AR2's own sieve: not in its names
    assert method_table(config)["ar2_simans_sieve"].variant_dir == "simans_sieve_b6_candidates20"
    config["ar2"]["sieve_init"] = "current"
    assert method_table(config)["ar2_sieve"].run == "ar2_sieve_b6_current_candidates20"
    config["ar2"]["sieve_init"] = "initial"
    config["sieve"]["scorer"] = "dpr"
    assert method_table(config)["ar2_sieve"].variant_dir == "sieve_no_ccr_candidates20"
    assert method_table(config)["ar2_simans"].variant_dir == "simans"  # no sieve, no tag


def _writes(tmp_path, overlay_text: str, *targets: str) -> dict[str, str]:
    """Output path -> the shell line that writes it, in `snakemake -n -p --forceall TARGETS` under the
    demo's settings plus ``overlay_text``."""
    import re

    (tmp_path / "plan").mkdir(parents=True, exist_ok=True)
    writes: dict[str, str] = {}
    for target in targets:
        proc = _dry_run(tmp_path / "plan", overlay_text, "-p", "--forceall", target=target, paper_sieve=False)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        for block in re.split(r"\n(?=(?:local)?rule \w+:)", proc.stdout):
            outputs = re.search(r"^\s+output: (.*)$", block, flags=re.MULTILINE)
            shell = re.search(r"^Shell command: (.*)$", block, flags=re.MULTILINE)
            for path in outputs.group(1).split(", ") if outputs and shell else []:
                writes[path] = shell.group(1)
    return writes


@pytest.mark.slow
def test_the_sieve_comparison_overlay_writes_beside_the_demo_never_over_it(tmp_path):
    """issue 27.6: the README's filter comparison (config/overlays/sieve, max_queries 600) rewrote the
    demo's sieve/candidates.parquet, so the next `make demo` redid the sieve and all after it. Every
    file both plans write must now be written by the same command (the shared data, BM25, DPR, CCR)."""
    from pathlib import Path

    overlay = (Path(__file__).resolve().parent.parent / "config/overlays/sieve/config.yaml").read_text()
    demo = _writes(tmp_path / "demo", "seed: 0\n", "results/synthkb/metrics.json")
    comparison = _writes(
        tmp_path / "comparison",
        overlay,
        "results/synthkb/sieve/comparison_max_queries600.md",
        "results/synthkb/figures_max_queries600/figure1_nce_loss.png",
    )
    shared = set(demo) & set(comparison)
    assert {"results/synthkb/models/dpr/retriever.json", "results/synthkb/negatives/bm25.parquet"} <= shared
    overwritten = sorted(path for path in shared if demo[path] != comparison[path])
    assert overwritten == [], overwritten
    assert "results/synthkb/sieve/candidates_max_queries600.parquet" in comparison


@pytest.mark.slow
def test_ar2_sieve_init_warm_plans_the_warm_up_dpr_and_the_ccr_settings(tmp_path):
    """warm (the authors' scripts): every round's sieve model is train_ccr's rule started from the
    warm-up DPR on that round's negatives; current: from round r-1's retriever. The round's sieve
    judges with that model (its candidates encoded, no stored embeddings)."""
    for init, starts in (
        ("warm", ["results/synthkb/models/dpr", "results/synthkb/models/dpr"]),
        (
            "current",
            ["results/synthkb/models/dpr", "results/synthkb/ar2/sieve_b0.5_current/seed0/round1/retriever"],
        ),
    ):
        (tmp_path / init).mkdir()
        shells = _planned_shells(
            tmp_path / init, f"methods: [ar2_sieve]\nar2: {{sieve_init: {init}, rounds: 2}}\n"
        )
        folder = f"results/synthkb/ar2/sieve_b0.5_{init}/seed0"
        by_round = lambda line: re.search(r"round(\d+)/sieve_model", line).group(1)  # noqa: E731
        tunes = sorted(
            (line for line in shells if "pipeline.training.train_dense" in line and folder in line),
            key=by_round,
        )
        assert len(tunes) == 2, tunes
        for r, (line, start) in enumerate(zip(tunes, starts), start=1):
            document = job_document(line)
            assert f'--init "$(dirname {start}/retriever.json)"' in line
            assert document["objective"]["beta"] == 0.5 and document["train"]["drop_queries_without_positive"]
            assert f'--out "$(dirname {folder}/round{r}/sieve_model/retriever.json)"' in line
        negatives = ["results/synthkb/ar2/start/negatives.parquet", f"{folder}/round2/negatives.parquet"]
        for line, mined in zip(tunes, negatives):
            assert f"--negatives {mined} " in line
        sieves = sorted((line for line in shells if "pipeline.ar2.sieving" in line), key=by_round)
        assert len(sieves) == 2 and all("--embeddings" not in line for line in sieves)
        assert all(
            f"--model {folder}/round{r}/sieve_model " in line for r, line in enumerate(sieves, start=1)
        )


def test_every_trained_dense_method_has_two_selections_and_the_truth_s_reads_the_labels(table):
    from pipeline.core.methods import control_reason, reads_true_labels, started_from

    trained = [m for m in table.values() if m.kind == "dense" and m.trains and m.selects is None]
    assert {"dpr", "dpr_ccr", "dpr_sieve", "dpr_rank_window", "dpr_oracle"} <= {m.name for m in trained}
    for m in trained:
        dev, truth = table[f"{m.name}_wise"], table[f"{m.name}_wise_truth"]
        assert (dev.model, truth.model) == (f"{m.model}_wise", f"{m.model}_wise_truth")
        assert dev.run == dev.model and dev.selects == truth.selects == m.model
        assert (dev.labels, truth.labels) == ("dev", "truth")
        assert started_from(dev) == started_from(truth) == started_from(m)
        assert reads_true_labels(truth) and "true dev labels" in control_reason(truth)
        assert reads_true_labels(dev) == reads_true_labels(m) and dev.random
    assert started_from(table["dpr_ccr_wise"]) == "dpr" and table["dpr_ccr_wise"].model == "dpr_ccr_b0.5_wise"
    assert started_from(table["dpr_wise"]) == "zeroshot" and control_reason(table["dpr_wise"]) is None
    # nothing untrained or already selected is selected again
    assert "zeroshot_wise" not in table and "dpr_wise_wise" not in table
    # opt-in: the default config asks for none of them
    assert not [name for name in load_config()["methods"] if table[name].selects is not None]

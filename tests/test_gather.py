"""pipeline.evaluation.gather: metrics.json/md/html from each method's metrics, seeds and paired
comparisons with their intervals (hand-computed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.core.storage import DataError
from pipeline.evaluation import gather as gather_metrics


def _method_file(tmp: Path, method: str, metrics: dict, **extra) -> Path:
    path = tmp / method / "metrics.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {
                "dataset": "tiny",
                "method": method,
                "split": "test",
                "n_queries": 6,
                **extra,
                "metrics": metrics,
            }
        ),
        encoding="utf-8",
    )
    return path


def test_gather_metrics_json_and_markdown(tmp_path, capsys):
    a = _method_file(tmp_path, "bm25", {"hit@5": 0.5, "MRR@10": 0.25, "R@20": 0.75, "R@5": 0.6}, depth=100)
    b = _method_file(
        tmp_path, "dpr", {"MRR@10": 1 / 3, "R@5": 0.12345}, notes="seed 0 only", wall_time_s=12.5
    )
    out_json, out_md = tmp_path / "metrics.json", tmp_path / "metrics.md"
    assert (
        gather_metrics.main(
            [
                "--dataset",
                "tiny",
                "--inputs",
                str(a),
                str(b),
                "--out-json",
                str(out_json),
                "--out-md",
                str(out_md),
            ]
        )
        == 0
    )
    gathered = json.loads(out_json.read_text(encoding="utf-8"))
    assert list(gathered["methods"]) == ["bm25", "dpr"]
    assert gathered["methods"]["dpr"] == {
        "split": "test",
        "n_queries": 6,
        "notes": "seed 0 only",
        "wall_time_s": 12.5,
        "metrics": {"MRR@10": 1 / 3, "R@5": 0.12345},
    }
    # the headline on stdout as plain lines, never wrapped by the logger (issue 27.3)
    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("|")]
    assert printed[0] == "| method | seeds | R@5 | MRR@10 | R@20 | hit@5 |"
    assert printed[2] == "| bm25 | 1 | 0.600 | 0.250 | 0.750 | 0.500 |"
    md = out_md.read_text(encoding="utf-8").splitlines()
    md = md[md.index("## All metrics") :]  # after the headline table
    assert md[2] == "| method | split | queries | R@5 | R@20 | MRR@10 | hit@5 |"
    assert md[4] == "| bm25 | test | 6 | 0.600 | 0.750 | 0.250 | 0.500 |"
    assert md[5] == "| dpr | test | 6 | 0.123 | – | 0.333 | – |"
    assert "- dpr: seed 0 only" in md


def test_gather_metrics_rejects_mismatches(tmp_path):
    a = _method_file(tmp_path, "bm25", {"R@5": 0.5})
    with pytest.raises(DataError, match="expected 'other'"):
        gather_metrics.gather("other", [a])
    with pytest.raises(DataError, match="already read"):
        gather_metrics.gather("tiny", [a, a])
    bad = _method_file(tmp_path / "x", "bad", {"R@5": "high"})
    with pytest.raises(DataError) as err:
        gather_metrics.gather("tiny", [bad])
    assert err.value.field == "metrics.R@5"
    broken = tmp_path / "broken.json"
    broken.write_text("{", encoding="utf-8")
    with pytest.raises(DataError, match="not valid JSON"):
        gather_metrics.gather("tiny", [broken])


def _seeded_file(tmp: Path, method: str, per_seed: dict[int, dict]) -> Path:
    """A metrics.json as seed_metrics writes it: the mean in ``metrics``, every seed in ``per_seed``."""
    names = list(next(iter(per_seed.values())))
    mean = {n: sum(m[n] for m in per_seed.values()) / len(per_seed) for n in names}
    return _method_file(
        tmp,
        method,
        mean,
        seeds=list(per_seed),
        per_seed=[{"seed": s, "metrics": m} for s, m in per_seed.items()],
    )


def test_gather_paired_comparisons(tmp_path):
    # ar2_sieve − ar2 over seeds 0, 1, 2 (seed 3 only in ar2): R@1 differences 0.03, 0.02, 0.01 ->
    # mean 0.02, std 0.01, 95% half width t(2) · 0.01 / √3 = 4.303 · 0.005774 = 0.02484
    ar2 = _seeded_file(
        tmp_path,
        "ar2",
        {
            0: {"R@1": 0.40, "MRR@10": 0.5},
            1: {"R@1": 0.42, "MRR@10": 0.5},
            2: {"R@1": 0.41, "MRR@10": 0.5},
            3: {"R@1": 0.5, "MRR@10": 0.6},
        },
    )
    sieve = _seeded_file(
        tmp_path,
        "ar2_sieve",
        {0: {"R@1": 0.43, "MRR@10": 0.5}, 1: {"R@1": 0.44, "MRR@10": 0.5}, 2: {"R@1": 0.42, "MRR@10": 0.5}},
    )
    dpr = _method_file(tmp_path, "dpr", {"R@1": 0.30, "MRR@10": 0.25})
    ccr = _method_file(tmp_path, "dpr_ccr", {"R@1": 0.33, "MRR@10": 0.2})
    out_json, out_md, out_html = tmp_path / "m.json", tmp_path / "m.md", tmp_path / "m.html"
    log = tmp_path / "gather.log"
    assert (
        gather_metrics.main(
            [
                "--dataset",
                "tiny",
                "--inputs",
                *map(str, (dpr, ccr, ar2, sieve)),
                "--out-json",
                str(out_json),
                "--out-md",
                str(out_md),
                "--out-html",
                str(out_html),
                "--compare",
                "dpr_ccr:dpr",
                "dpr_sieve:dpr",
                "ar2_sieve:ar2",
                "--log",
                str(log),
            ]
        )
        == 0
    )
    assert "dpr_sieve − dpr left out: dpr_sieve not gathered" in log.read_text(encoding="utf-8")
    gathered = json.loads(out_json.read_text(encoding="utf-8"))
    assert list(gathered) == ["dataset", "methods", "comparisons"]
    ccr_vs_dpr, sieve_vs_ar2 = gathered["comparisons"]
    assert ccr_vs_dpr == {
        "method": "dpr_ccr",
        "baseline": "dpr",
        "level": 0.95,
        "n": 1,
        "seeds": [None],
        "only_method": [],
        "only_baseline": [],
        "note": "1 seed: a difference of single runs, no interval",
        "metrics": {
            "R@1": {"diff": pytest.approx(0.03), "std": None, "ci_low": None, "ci_high": None},
            "MRR@10": {"diff": pytest.approx(-0.05), "std": None, "ci_low": None, "ci_high": None},
        },
    }
    assert {k: sieve_vs_ar2[k] for k in ("n", "seeds", "only_method", "only_baseline")} == {
        "n": 3,
        "seeds": [0, 1, 2],
        "only_method": [],
        "only_baseline": [3],
    }
    assert "note" not in sieve_vs_ar2
    r1 = sieve_vs_ar2["metrics"]["R@1"]
    half = 4.30265272974946 * 0.01 / 3**0.5
    assert r1 == pytest.approx({"diff": 0.02, "std": 0.01, "ci_low": 0.02 - half, "ci_high": 0.02 + half})
    assert sieve_vs_ar2["metrics"]["MRR@10"] == {"diff": 0.0, "std": 0.0, "ci_low": 0.0, "ci_high": 0.0}
    md = out_md.read_text(encoding="utf-8")
    assert md.split("\n## ")[2] == (
        "Paired differences (method − baseline), 95% CI over seeds\n\n"
        "| method − baseline | n (seeds) | R@1 | MRR@10 |\n"
        "|---|---|---:|---:|\n"
        "| dpr_ccr − dpr | 1 (not recorded) | +0.030 [n/a (1 seed)] | -0.050 [n/a (1 seed)] |\n"
        "| ar2_sieve − ar2 | 3 (0, 1, 2) | +0.020 [-0.005, 0.045] | +0.000 [0.000, 0.000] |\n\n"
        "Notes:\n\n"
        "- ar2_sieve − ar2: seed(s) 3 only run for ar2, left out\n\n"
        + gather_metrics.COMPARISON_FOOTNOTE
        + "\n"
    )
    # the headline, then the full table (unchanged by the comparison), then the comparison
    assert md.startswith("# tiny: retrieval metrics\n\n| method | seeds | R@1 | MRR@10 |")
    assert "## All metrics\n\n| method | split | queries | R@1 | MRR@10 |" in md
    page = out_html.read_text(encoding="utf-8")
    assert page.index("<h4>Paired differences") > page.index("<td>ar2_sieve</td>")
    assert "<td>+0.020 [-0.005, 0.045]</td>" in page and "<td>+0.030 [n/a (1 seed)]</td>" in page


def test_gather_pairs_by_seed(tmp_path):
    # a single run without a recorded seed pairs with one seeded run (n = 1) but not with several
    one = _seeded_file(tmp_path, "ar2", {4: {"R@1": 0.5}})
    many = _seeded_file(tmp_path, "ar2_sieve", {0: {"R@1": 0.5}, 1: {"R@1": 0.7}})
    plain = _method_file(tmp_path, "dpr", {"R@1": 0.25})
    gathered = gather_metrics.gather(
        "tiny", [one, many, plain], [("ar2", "dpr"), ("ar2_sieve", "dpr"), ("ar2_sieve", "ar2")]
    )
    single, unpaired, disjoint = gathered["comparisons"]
    assert (single["n"], single["seeds"], single["metrics"]["R@1"]["diff"]) == (1, [4], 0.25)
    assert (unpaired["n"], unpaired["metrics"], unpaired["only_method"], unpaired["only_baseline"]) == (
        0,
        {},
        [0, 1],
        [None],
    )
    assert unpaired["note"] == "no seed in common: nothing paired"
    assert (disjoint["n"], disjoint["only_method"], disjoint["only_baseline"]) == (0, [0, 1], [4])
    rows = gather_metrics.markdown_table(gathered)
    assert "| ar2_sieve − dpr | n/a (no common seed) | – |" in rows
    assert "- ar2_sieve − dpr: no common seed (ar2_sieve: 0, 1; dpr: not recorded)" in rows
    # without pairs the file and table look as before
    plain_only = gather_metrics.gather("tiny", [plain])
    assert plain_only["comparisons"] == [] and "Paired" not in gather_metrics.markdown_table(plain_only)


def test_gather_pairs_a_seed_free_baseline_with_every_seed(tmp_path):
    # dpr_oracle − zeroshot over seeds 0, 1, 2: R@1 0.55, 0.57, 0.56 against a fixed 0.50 ->
    # differences 0.05, 0.07, 0.06: mean 0.06, std 0.01, half width t(2) · 0.01 / √3
    oracle = _seeded_file(tmp_path, "dpr_oracle", {0: {"R@1": 0.55}, 1: {"R@1": 0.57}, 2: {"R@1": 0.56}})
    zeroshot = _method_file(tmp_path, "zeroshot", {"R@1": 0.50})
    pairs = [("dpr_oracle", "zeroshot")]
    (fixed,) = gather_metrics.gather("tiny", [oracle, zeroshot], pairs, fixed=["zeroshot"])["comparisons"]
    half = 4.30265272974946 * 0.01 / 3**0.5
    assert (fixed["n"], fixed["seeds"], fixed["baseline_fixed"]) == (3, [0, 1, 2], True)
    assert fixed["metrics"]["R@1"] == pytest.approx(
        {"diff": 0.06, "std": 0.01, "ci_low": 0.06 - half, "ci_high": 0.06 + half}
    )
    table = gather_metrics.markdown_table(
        gather_metrics.gather("tiny", [oracle, zeroshot], pairs, fixed=["zeroshot"])
    )
    assert "| dpr_oracle − zeroshot | 3 (0, 1, 2); zeroshot seed-free | +0.060 [0.035, 0.085] |" in table
    # not declared seed-free: a run without a seed is not paired with several (it may be a trained
    # method whose seed was not recorded)
    (unpaired,) = gather_metrics.gather("tiny", [oracle, zeroshot], pairs)["comparisons"]
    assert unpaired["n"] == 0 and "baseline_fixed" not in unpaired


@pytest.mark.parametrize(
    "per_seed,field",
    [
        ("not a list", "per_seed"),
        ([{"seed": 0}], "per_seed[0]"),
        ([{"seed": "0", "metrics": {}}], "per_seed[0].seed"),
        ([{"seed": 0, "metrics": {"R@1": 0.1}}, {"seed": 0, "metrics": {"R@1": 0.2}}], "per_seed[1].seed"),
        ([{"seed": 0, "metrics": {"R@1": None}}], "per_seed[0].metrics.R@1"),
    ],
)
def test_gather_rejects_malformed_per_seed(tmp_path, per_seed, field):
    bad = _method_file(tmp_path, "ar2", {"R@1": 0.1}, per_seed=per_seed)
    with pytest.raises(DataError) as err:
        gather_metrics.gather("tiny", [bad])
    assert (err.value.field, err.value.file) == (field, str(bad))


def test_gather_compare_argument_is_method_colon_baseline(tmp_path, capsys):
    a = _method_file(tmp_path, "bm25", {"R@5": 0.5})
    for bad in ("dpr", "dpr:", ":dpr", "a:b:c"):
        with pytest.raises(SystemExit):
            gather_metrics.main(
                [
                    "--dataset",
                    "tiny",
                    "--inputs",
                    str(a),
                    "--out-json",
                    str(tmp_path / "m.json"),
                    "--out-md",
                    str(tmp_path / "m.md"),
                    "--compare",
                    bad,
                ]
            )
        assert "METHOD:BASELINE" in capsys.readouterr().err


def test_a_run_is_gathered_under_the_method_name_the_config_lists(tmp_path):
    # dpr_ccr stands for the run dpr_ccr_b0.5 (ccr.beta 0.5): gathered as dpr_ccr, its run kept; the
    # same run may be listed under its β name too.
    run = _method_file(tmp_path, "dpr_ccr_b0.5", {"R@5": 0.5})
    dpr = _method_file(tmp_path, "dpr", {"R@5": 0.25})
    out = tmp_path / "metrics.json"
    args = ["--dataset", "tiny", "--out-json", str(out), "--out-md", str(tmp_path / "m.md"), "--inputs"]
    assert gather_metrics.main([*args, f"dpr_ccr={run}", f"dpr_ccr_b0.5={run}", str(dpr)]) == 0
    methods = json.loads(out.read_text())["methods"]
    assert list(methods) == ["dpr_ccr", "dpr_ccr_b0.5", "dpr"]
    assert methods["dpr_ccr"]["run"] == "dpr_ccr_b0.5" and "run" not in methods["dpr_ccr_b0.5"]
    assert methods["dpr_ccr"]["metrics"] == {"R@5": 0.5}


def test_the_headline_keeps_the_metrics_that_separate_the_methods_with_intervals_and_the_best_marked():
    """issue 27.4: 21 columns hid the answer. The headline drops a metric equal for every method
    (R@100 saturated) and one equal to another column for every method (recall@1 = hit@1 on
    synthkb), shows mean ± 95% t half-width over seeds, and bolds each column's best."""
    gathered = {
        "dataset": "toy",
        "methods": {
            "bm25": {
                "split": "test",
                "n_queries": 10,
                "seeds": [None],
                "metrics": {"hit_all@1": 0.3, "R@5": 0.7, "R@100": 1.0, "hit@1": 0.2, "recall@1": 0.2},
            },
            "dpr": {
                "split": "test",
                "n_queries": 10,
                "seeds": [0, 1, 2],
                "metrics": {"hit_all@1": 0.5, "R@5": 0.6, "R@100": 1.0, "hit@1": 0.4, "recall@1": 0.4},
                "metrics_std": {"hit_all@1": 0.1, "R@5": 0.0, "R@100": 0.0, "hit@1": 0.05, "recall@1": 0.05},
            },
        },
    }
    assert gather_metrics.headline_columns(gathered) == ["hit_all@1", "R@5", "hit@1"]
    header, rows = gather_metrics.headline_rows(gathered)
    assert header == ["method", "seeds", "hit_all@1", "R@5", "hit@1"]
    # t(0.975, 2) = 4.303: 0.1 / sqrt(3) * 4.303 = 0.248
    assert rows[1] == ["dpr", "3", "**0.500 ± 0.248**", "0.600 ± 0.000", "**0.400 ± 0.124**"]
    assert rows[0] == ["bm25", "1", "0.300", "**0.700**", "0.200"]
    text = gather_metrics.markdown_table(gathered)
    assert text.index("| method | seeds | hit_all@1") < text.index("## All metrics") < text.index("R@100")

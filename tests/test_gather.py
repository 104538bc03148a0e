"""pipeline.evaluation.gather: metrics.json/md/html from each method's metrics, seeds and paired
comparisons with their intervals (hand-computed)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pyarrow as pa
import pytest

from pipeline.core.schemas import per_query_schema
from pipeline.core.storage import DataError, write_table
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


def _paired_section(md: str) -> str:
    """The paired-difference section of a metrics.md (after the headline, Methods and All metrics)."""
    return next(part for part in md.split("\n## ") if part.startswith("Paired differences"))


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
                '[["dpr_ccr", "dpr"], ["dpr_sieve", "dpr"], ["ar2_sieve", "ar2"]]',
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
        "interval": None,  # one seed and no per-query values given: nothing to test over
        "note": "1 seed: a difference of single runs, no interval",
        "metrics": {
            "R@1": {"diff": pytest.approx(0.03), "std": None, "ci_low": None, "ci_high": None},
            "MRR@10": {"diff": pytest.approx(-0.05), "std": None, "ci_low": None, "ci_high": None},
        },
    }
    assert {k: sieve_vs_ar2[k] for k in ("n", "seeds", "only_method", "only_baseline", "interval")} == {
        "n": 3,
        "seeds": [0, 1, 2],
        "only_method": [],
        "only_baseline": [3],
        "interval": "seeds",
    }
    assert "note" not in sieve_vs_ar2
    r1 = sieve_vs_ar2["metrics"]["R@1"]
    half = 4.30265272974946 * 0.01 / 3**0.5
    assert r1 == pytest.approx({"diff": 0.02, "std": 0.01, "ci_low": 0.02 - half, "ci_high": 0.02 + half})
    assert sieve_vs_ar2["metrics"]["MRR@10"] == {"diff": 0.0, "std": 0.0, "ci_low": 0.0, "ci_high": 0.0}
    md = out_md.read_text(encoding="utf-8")
    assert _paired_section(md) == (
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
    assert md.startswith("# tiny: retrieval metrics\n\nPrimary metric: **R@1**, the share of test queries")
    assert "\n\n| method | seeds | R@1 | MRR@10 |" in md.split("## Methods")[0]
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


def _outputs(tmp_path: Path, *inputs: Path) -> list[str]:
    """gather's arguments for ``inputs`` with its JSON and Markdown written into ``tmp_path``."""
    return ["--dataset", "tiny", "--inputs", *map(str, inputs), "--out-json", str(tmp_path / "m.json")] + [
        "--out-md",
        str(tmp_path / "m.md"),
    ]


def test_gather_compare_argument_is_a_json_list_of_pairs(tmp_path, capsys):
    a = _method_file(tmp_path, "bm25", {"R@5": 0.5})
    for bad in (
        "dpr:zeroshot",
        '["dpr", "zeroshot"]',
        '[["dpr"]]',
        '[["dpr", ""]]',
        '[["a", "b", "c"]]',
        "[[1, 2]]",
    ):
        with pytest.raises(SystemExit):
            gather_metrics.main([*_outputs(tmp_path, a), "--compare", bad])
        err = capsys.readouterr().err
        assert "[method, baseline] pairs" in err or "not JSON" in err, err


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


def test_the_methods_figure_shows_each_methods_interval_over_seeds(tmp_path):
    """issue 27.7: metrics.png compares the methods. Its values are the headline's: mean, and the
    95% t-interval over seeds only where a method ran with several (hand-computed)."""
    from pipeline.evaluation.plot_methods import method_values, plot_methods

    gathered = {
        "dataset": "toy",
        "methods": {
            "bm25": {"split": "test", "seeds": [None], "metrics": {"hit_all@1": 0.3, "R@5": 0.7}},
            "dpr": {
                "split": "test",
                "seeds": [0, 1, 2],
                "metrics": {"hit_all@1": 0.5, "R@5": 0.6},
                "metrics_std": {"hit_all@1": 0.1, "R@5": 0.0},
            },
            "dpr_ccr": {"split": "test", "seeds": [0], "metrics": {"R@5": 0.65}},
        },
    }
    bm25, dpr = method_values(gathered, "hit_all@1")  # dpr_ccr has no hit_all@1: left out
    assert (bm25.method, bm25.mean, bm25.low, bm25.seeds) == ("bm25", 0.3, None, 1)
    # t(0.975, 2) = 4.303: 0.1 / sqrt(3) * 4.303 = 0.2484
    assert dpr.seeds == 3 and dpr.low == pytest.approx(0.5 - 0.24843, abs=1e-4)
    assert dpr.high == pytest.approx(0.5 + 0.24843, abs=1e-4)
    assert [v.method for v in method_values(gathered, "R@5")] == ["bm25", "dpr", "dpr_ccr"]
    out = tmp_path / "metrics.png"
    plot_methods(gathered, ["hit_all@1", "R@5"], out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="no metric to plot"):
        plot_methods(gathered, [], tmp_path / "none.png")


def test_issue27_each_point_of_the_methods_figure_sits_in_its_methods_row():
    """issue 27 (figures): each panel numbered its own methods and the panels share the y-axis, so with
    a method missing from one metric the last panel's names labelled the other's points (bm25's 0.300
    was drawn as dpr). Now the rows are the methods', the same in every panel."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from pipeline.evaluation.plot_methods import methods_figure

    gathered = {
        "dataset": "toy",
        "methods": {
            "bm25": {"split": "test", "seeds": [None], "metrics": {"hit_all@1": 0.3, "R@5": 0.7}},
            "dpr": {"split": "test", "seeds": [0], "metrics": {"hit_all@1": 0.5, "R@5": 0.6}},
            "dpr_ccr": {"split": "test", "seeds": [0], "metrics": {"R@5": 0.65}},
        },
    }
    fig = methods_figure(gathered, ["R@5", "hit_all@1"])
    try:
        for ax in fig.axes:
            ticks = list(ax.get_yticks())
            names = dict(zip(ticks, ax.yaxis.get_major_formatter().format_ticks(ticks)))
            assert names == {2: "bm25", 1: "dpr", 0: "dpr_ccr"}  # the first method on top, in every panel
            drawn = {
                names[line.get_ydata()[0]]: line.get_xdata()[0]
                for line in ax.get_lines()
                if line.get_marker() == "o"
            }
            metric = ax.get_title()
            assert drawn == {
                m: e["metrics"][metric] for m, e in gathered["methods"].items() if metric in e["metrics"]
            }
            missing = [t.get_text() for t in ax.texts if t.get_text() == "no value"]
            assert len(missing) == (metric == "hit_all@1")
    finally:
        plt.close(fig)


def test_gather_draws_the_methods_figure_with_out_png(tmp_path):
    a = _method_file(tmp_path, "bm25", {"R@5": 0.6, "MRR@10": 0.25})
    b = _method_file(tmp_path, "dpr", {"R@5": 0.7, "MRR@10": 0.3})
    out = tmp_path / "metrics.png"
    args = ["--dataset", "tiny", "--inputs", str(a), str(b), "--out-json", str(tmp_path / "m.json")]
    assert gather_metrics.main([*args, "--out-md", str(tmp_path / "m.md"), "--out-png", str(out)]) == 0
    assert out.stat().st_size > 1000 and not list(tmp_path.glob("*.tmp*"))
    # methods with equal values still get their figure (no headline column separates them)
    c = _method_file(tmp_path, "dpr_ccr", {"R@5": 0.6, "MRR@10": 0.25})
    same = ["--dataset", "tiny", "--inputs", str(a), str(c), "--out-json", str(tmp_path / "s.json")]
    assert gather_metrics.main([*same, "--out-md", str(tmp_path / "s.md"), "--out-png", str(out)]) == 0
    assert gather_metrics.figure_fallback({"methods": {"a": {"metrics": {"x@1": 1.0, "R@5": 0.5}}}}) == [
        "R@5"
    ]


# ---- paired tests over queries (one common seed) -----------------------------------------------------


def _query_run(
    tmp: Path, folder: str, values: dict[str, list], qids=("q1", "q2", "q3", "q4")
) -> tuple[Path, dict]:
    """A per_query.parquet in ``folder`` and the metrics its columns average to (as evaluate writes)."""
    path = tmp / folder / "per_query.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_table(
        path, pa.Table.from_pydict({"qid": list(qids), **values}, schema=per_query_schema(list(values)))
    )
    metrics = {
        name: math.fsum(v for v in column if v is not None) / sum(v is not None for v in column)
        for name, column in values.items()
    }
    return path, metrics


# R@1 over the 4 queries, MRR@10 over the 3 judged ones (q4 has no qrels)
DPR_VALUES = {"R@1": [1.0, 1.0, 0.0, 1.0], "MRR@10": [1.0, 0.5, 0.25, None]}
ZEROSHOT_VALUES = {"R@1": [0.0, 1.0, 0.0, 0.0], "MRR@10": [0.5, 0.5, 0.0, None]}


def test_one_seed_pairs_get_a_paired_test_over_queries(tmp_path):
    """dpr (one run) − zeroshot (seed-free): no interval over seeds, so the test over the queries.
    R@1: d = 1, 0, 0, 1 -> mean 0.5, std √(1/3), half width t(3) · std / 2; the two queries that
    differ give 4 sign vectors, sums 2, 0, 0, -2 -> p = 2/4. MRR@10 over q1-q3: d = 0.5, 0, 0.25 ->
    mean 0.25, std 0.25, half width t(2) · 0.25 / √3; sums ±0.75, ±0.25 -> p = 2/4."""
    dpr_pq, dpr_metrics = _query_run(tmp_path, "dpr", DPR_VALUES)
    zs_pq, zs_metrics = _query_run(tmp_path, "zeroshot", ZEROSHOT_VALUES)
    dpr = _method_file(tmp_path, "dpr", dpr_metrics)
    zeroshot = _method_file(tmp_path, "zeroshot", zs_metrics)
    out_json, out_md, out_html = tmp_path / "m.json", tmp_path / "m.md", tmp_path / "m.html"
    args = ["--dataset", "tiny", "--inputs", str(dpr), str(zeroshot), "--out-json", str(out_json)]
    args += ["--out-md", str(out_md), "--out-html", str(out_html), "--compare", '[["dpr", "zeroshot"]]']
    args += ["--fixed", "zeroshot", "--per-query", f"dpr={dpr_pq}", f"zeroshot={zs_pq}"]
    assert gather_metrics.main(args) == 0
    (pair,) = json.loads(out_json.read_text(encoding="utf-8"))["comparisons"]
    assert (pair["n"], pair["seeds"], pair["interval"]) == (1, [None], "queries")
    assert (
        pair["note"] == "1 seed: interval and p-value over the test queries of one run each, not over seeds"
    )
    assert pair["query_test"] == {
        "seed": None,
        "method_file": str(dpr_pq),
        "baseline_file": str(zs_pq),
        "test": "paired t-interval; two-sided sign-flip randomisation test",
        "permutations": 10_000,
        "rng_seed": 0,
    }
    r1_half = 3.18244630528371 * math.sqrt(1 / 3) / 2
    mrr_half = 4.30265272974946 * 0.25 / math.sqrt(3)
    assert pair["metrics"]["R@1"] == pytest.approx(
        {
            "diff": 0.5,
            "std": math.sqrt(1 / 3),
            "ci_low": 0.5 - r1_half,
            "ci_high": 0.5 + r1_half,
            "p_value": 0.5,
            "n_queries": 4,
            "exact": True,
        }
    )
    assert pair["metrics"]["MRR@10"] == pytest.approx(
        {
            "diff": 0.25,
            "std": 0.25,
            "ci_low": 0.25 - mrr_half,
            "ci_high": 0.25 + mrr_half,
            "p_value": 0.5,
            "n_queries": 3,
            "exact": True,
        }
    )
    md = out_md.read_text(encoding="utf-8")
    section = _paired_section(md)
    assert section.startswith(
        "Paired differences (method − baseline), 95% CI over seeds, or over test queries where marked (queries)\n"
    )
    assert (
        "| dpr − zeroshot | 1 (not recorded); zeroshot seed-free "
        "| +0.500 [-0.419, 1.419] p=0.500 (queries) | +0.250 [-0.371, 0.871] p=0.500 (queries) |"
    ) in section
    assert (
        "(queries): one seed in common, so no interval over seeds. Instead, over the test queries "
        "(4 for R@k; 3 for MRR@10) of one run each: 95% paired t-interval, two-sided sign-flip "
        "randomisation test, 10,000 permutations (every sign flip when at most 13 queries differ), "
        "seed 0; it shows the difference on these queries, not across training seeds."
    ) in section
    # the headline keeps its per-method columns and points to the test for the one-seed runs
    assert "the paired differences below compare such runs over the test queries" in md.split("## All")[0]
    page = out_html.read_text(encoding="utf-8")
    assert "<td>+0.500 [-0.419, 1.419] p=0.500 (queries)</td>" in page and "not across training seeds" in page


def test_several_seeds_keep_the_interval_over_seeds_and_one_common_seed_tests_its_runs(tmp_path):
    """ar2_sieve − ar2 over seeds 0, 1, 2 stays a seed interval though per-query files are given;
    ar2_sieve − dpr_ccr share only seed 0 (dpr_ccr ran 0 and 5): the test over the queries of the
    two seed-0 runs; dpr_oracle (3 seeds) − zeroshot (seed-free) stays a seed interval."""
    files, per_seed = {}, {}
    for method, shift in (("ar2", 0.0), ("ar2_sieve", 1.0)):
        per_seed[method] = {}
        for seed in (0, 1, 2):
            r1 = [shift, 1.0, 0.0, float(seed == 1)]
            files[(method, seed)], per_seed[method][seed] = _query_run(
                tmp_path, f"{method}/seed{seed}", {"R@1": r1}
            )
    ccr = {}
    for seed in (0, 5):
        files[("dpr_ccr", seed)], ccr[seed] = _query_run(
            tmp_path, f"dpr_ccr/seed{seed}", {"R@1": [0.0, 0.0, 0.0, 1.0]}
        )
    ar2 = _seeded_file(tmp_path, "ar2", per_seed["ar2"])
    sieve = _seeded_file(tmp_path, "ar2_sieve", per_seed["ar2_sieve"])
    dpr_ccr = _seeded_file(tmp_path, "dpr_ccr", ccr)
    oracle = _seeded_file(tmp_path, "dpr_oracle", {0: {"R@1": 0.55}, 1: {"R@1": 0.57}, 2: {"R@1": 0.56}})
    zs_pq, zs_metrics = _query_run(tmp_path, "zeroshot", {"R@1": [0.0, 1.0, 0.0, 1.0]})
    zeroshot = _method_file(tmp_path, "zeroshot", zs_metrics)
    per_query = {"zeroshot": {None: zs_pq}}
    for (method, seed), path in files.items():
        per_query.setdefault(method, {})[seed] = path
    pairs = [("ar2_sieve", "ar2"), ("ar2_sieve", "dpr_ccr"), ("dpr_oracle", "zeroshot")]
    gathered = gather_metrics.gather(
        "tiny", [ar2, sieve, dpr_ccr, oracle, zeroshot], pairs, fixed=["zeroshot"], per_query=per_query
    )
    seeds, common, fixed = gathered["comparisons"]
    assert (seeds["n"], seeds["interval"], "query_test" in seeds) == (3, "seeds", False)
    assert seeds["metrics"]["R@1"] == {"diff": 0.25, "std": 0.0, "ci_low": 0.25, "ci_high": 0.25}
    assert (common["n"], common["seeds"], common["interval"]) == (1, [0], "queries")
    assert common["query_test"]["seed"] == 0
    assert (common["query_test"]["method_file"], common["query_test"]["baseline_file"]) == (
        str(files[("ar2_sieve", 0)]),
        str(files[("dpr_ccr", 0)]),
    )
    # d = 1, 1, 0, -1: mean 0.25, std √(2.75 / 3); three differ, and ±1 ± 1 ± 1 is never 0, so all 8
    # sign vectors reach |1|: p = 1
    assert common["metrics"]["R@1"]["diff"] == 0.25 and common["metrics"]["R@1"]["p_value"] == 1.0
    assert (fixed["n"], fixed["interval"], fixed["baseline_fixed"]) == (3, "seeds", True)
    table = gather_metrics.markdown_table(gathered)
    assert "| ar2_sieve − dpr_ccr | 1 (0) | +0.250 [-1.273, 1.773] p=1.000 (queries) |" in table
    assert "| ar2_sieve − ar2 | 3 (0, 1, 2) | +0.250 [0.250, 0.250] |" in table
    assert "over the 4 test queries of one run each" in table


def test_a_run_without_per_query_values_has_no_test_and_a_missing_file_is_an_error(tmp_path):
    """Decision (docs/evaluation.md): a run for which no per-query file is given (gathered by hand, or
    a run older than the files) keeps "n/a (1 seed)" with a note saying why; a file that is given but
    absent is an error naming it (the rule declares the files, so Snakemake evaluates again first)."""
    dpr_pq, dpr_metrics = _query_run(tmp_path, "dpr", DPR_VALUES)
    _, zs_metrics = _query_run(tmp_path, "zeroshot", ZEROSHOT_VALUES)
    dpr = _method_file(tmp_path, "dpr", dpr_metrics)
    zeroshot = _method_file(tmp_path, "zeroshot", zs_metrics)
    pairs = [("dpr", "zeroshot")]
    (pair,) = gather_metrics.gather("tiny", [dpr, zeroshot], pairs, per_query={"dpr": {None: dpr_pq}})[
        "comparisons"
    ]
    assert pair["interval"] is None and pair["metrics"]["R@1"]["ci_low"] is None
    assert (
        pair["no_query_test"] == "no per-query values for zeroshot (seed not recorded): no test over queries"
    )
    table = gather_metrics.markdown_table({"dataset": "tiny", "methods": {}, "comparisons": [pair]})
    assert "| dpr − zeroshot | 1 (not recorded) | +0.500 [n/a (1 seed)] |" in table
    assert (
        "- dpr − zeroshot: no per-query values for zeroshot (seed not recorded): no test over queries"
        in table
    )
    gone = tmp_path / "gone" / "per_query.parquet"
    with pytest.raises(DataError, match="evaluating again") as err:
        gather_metrics.gather(
            "tiny", [dpr, zeroshot], pairs, per_query={"dpr": {None: dpr_pq}, "zeroshot": {None: gone}}
        )
    assert err.value.file == str(gone)


def test_per_query_files_of_other_queries_or_another_evaluation_are_refused(tmp_path):
    dpr_pq, dpr_metrics = _query_run(tmp_path, "dpr", DPR_VALUES)
    other_pq, other_metrics = _query_run(tmp_path, "zeroshot", ZEROSHOT_VALUES, qids=("q1", "q2", "q3", "q9"))
    dpr = _method_file(tmp_path, "dpr", dpr_metrics)
    zeroshot = _method_file(tmp_path, "zeroshot", other_metrics)
    files = {"dpr": {None: dpr_pq}, "zeroshot": {None: other_pq}}
    with pytest.raises(DataError, match="different queries") as err:
        gather_metrics.gather("tiny", [dpr, zeroshot], [("dpr", "zeroshot")], per_query=files)
    assert str(dpr_pq) in str(err.value) and str(other_pq) in str(err.value)
    # metrics.json from one evaluation, per_query.parquet from another
    stale = _method_file(tmp_path / "stale", "zeroshot", {**other_metrics, "R@1": 0.75})
    with pytest.raises(DataError, match="different evaluations") as err:
        gather_metrics.gather("tiny", [dpr, stale], [("dpr", "zeroshot")], per_query=files)
    assert (err.value.file, err.value.field) == (str(other_pq), "R@1")
    with pytest.raises(DataError, match="not gathered"):
        gather_metrics.gather("tiny", [dpr], [], per_query={"bm25": {None: dpr_pq}})


def test_per_query_argument_is_method_at_seed_equals_path(tmp_path, capsys):
    assert gather_metrics.query_files(
        [gather_metrics._query_file(v) for v in ("dpr=a/p.parquet", "ar2@0=b/p.parquet", "ar2@1=c/p.parquet")]
    ) == {"dpr": {None: "a/p.parquet"}, "ar2": {0: "b/p.parquet", 1: "c/p.parquet"}}
    with pytest.raises(DataError, match="ar2@0 given twice"):
        gather_metrics.query_files([("ar2", 0, "b"), ("ar2", 0, "c")])
    a = _method_file(tmp_path, "bm25", {"R@5": 0.5})
    for bad in ("dpr", "dpr=", "=p", "ar2@x=p", "ar2@=p"):
        with pytest.raises(SystemExit):
            gather_metrics.main([*_outputs(tmp_path, a), "--per-query", bad])
        assert "METHOD@SEED=PATH" in capsys.readouterr().err


# ---- issue 40: who won, by which metric, and what each row is ----------------------------------------


def _demo_like() -> dict:
    """A metrics.json shaped like the demo's (its recipe settings name the methods; every other setting
    at the contracts' defaults: ccr.beta 6, sieve.scorer dpr): the controls score highest on some
    columns, every trained method but the oracle ends below zeroshot on hit_all@1."""

    def entry(hit1, hit5, mrr, **extra):
        return {
            "split": "test",
            "n_queries": 537,
            **extra,
            "metrics": {"hit_all@1": hit1, "hit_all@5": hit5, "MRR@10": mrr},
        }

    one = {"seeds": [0], "notes": "seed 0"}
    return {
        "dataset": "synthkb",
        "methods": {
            "bm25": entry(0.698, 0.885, 0.300),
            "zeroshot": entry(0.639, 0.883, 0.225),
            "dpr": entry(0.531, 0.880, 0.577, **one),
            "dpr_none": entry(0.520, 0.870, 0.560, **one),
            "dpr_ccr": entry(0.540, 0.860, 0.570, run="dpr_ccr_b6", **one),
            "dpr_ccr_b0": entry(0.500, 0.850, 0.590, **one),
            "dpr_sieve": entry(0.618, 0.900, 0.470, run="dpr_sieve_no_ccr", **one),
            "dpr_oracle": entry(0.650, 0.930, 0.500, **one),
        },
        "comparisons": [],
        "recipe": {"settings": {"methods": ["bm25", "zeroshot", "dpr", "dpr_none", "dpr_ccr", "dpr_ccr_b0"]}},
    }


def test_controls_are_marked_and_never_best():
    """dpr_oracle (true labels) tops hit_all@5 and dpr_ccr_b0 (β 0) MRR@10: neither is bold; bm25 is
    the best of hit_all@1, dpr_sieve of hit_all@5, dpr of MRR@10 among the rest."""
    gathered = _demo_like()
    header, rows = gather_metrics.headline_rows(gathered)
    assert header == ["method", "seeds", "hit_all@1", "hit_all@5", "MRR@10"]
    by_name = {row[0]: row for row in rows}
    assert set(by_name) >= {"dpr_oracle (control)", "dpr_ccr_b0 (control)", "dpr_none (control)", "dpr_sieve"}
    assert not any("**" in cell for name, row in by_name.items() if "(control)" in name for cell in row)
    assert by_name["bm25"][2] == "**0.698**"
    assert by_name["dpr_sieve"][3] == "**0.900**"
    assert by_name["dpr"][4] == "**0.577**"
    md = gather_metrics.markdown_table(gathered)
    assert "Best by it, controls left out: **bm25 (0.698)**." in md
    page = gather_metrics.html_table(gathered)
    assert "Best by it, controls left out: bm25 (0.698)." in page and "Control: uses the true" in page
    assert "- dpr_oracle: " in md and "**Control**: uses the true false-negative labels" in md
    assert "**Control**: the same CCR fine-tune at β 0" in md


def test_the_primary_metric_is_named_and_defined_with_why_mrr_disagrees():
    gathered = _demo_like()
    md = gather_metrics.markdown_table(gathered)
    head = md.split("## Methods")[0]
    assert head.startswith("# synthkb: retrieval metrics\n\nPrimary metric: **hit_all@1**, the share of test")
    assert "any passage that states it counts (qrels_all)" in head
    assert "- hit_all@k: share of queries with any passage stating" in head
    assert "- MRR@10: mean reciprocal rank of the annotated positive" in head
    assert "Why MRR@10 and hit_all@1 can rank the methods in opposite orders" in head
    # the primary column comes first in the headline even where another would be preferred
    assert gather_metrics.primary_metric(gathered) == "hit_all@1"
    # without qrels_all: answer match; without answers either: the annotated positives
    assert (
        gather_metrics.primary_metric({"methods": {"a": {"metrics": {"R@1": 0.1, "MRR@10": 0.2}}}}) == "R@1"
    )
    assert (
        gather_metrics.primary_metric({"methods": {"a": {"metrics": {"MRR@10": 0.2, "hit@1": 0.1}}}})
        == "MRR@10"
    )


def test_a_trained_method_below_the_model_it_started_from_is_said_in_words():
    md = gather_metrics.markdown_table(_demo_like())
    assert "- dpr_sieve (0.618) is below zeroshot (0.639), the model it was trained from." in md
    assert "- dpr_ccr (0.540) is below dpr (0.531)" not in md  # CCR starts from dpr and ends above it
    assert "- dpr_ccr_b0 (0.500) is below dpr (0.531), the model it was trained from." in md
    assert "- dpr_oracle" not in md.split("| method |")[0]  # 0.650 ≥ 0.639


def test_below_the_start_with_seeds_gives_the_paired_difference_and_its_interval():
    """With 3 seeds the sentence carries the paired difference with the start and its 95% t-interval:
    zeroshot is seed-free (its one run is every seed's start); dpr_ccr_b0 pairs with dpr seed by seed."""
    gathered = _demo_like()

    def seeded(name, values):
        entry = gathered["methods"][name]
        entry.pop("notes")
        entry["seeds"] = [0, 1, 2]
        entry["per_seed"] = [{"seed": s, "metrics": {"hit_all@1": v}} for s, v in enumerate(values)]
        entry["metrics"]["hit_all@1"] = sum(values) / 3

    seeded("dpr_sieve", [0.600, 0.610, 0.620])  # − 0.639: −0.039, −0.029, −0.019; mean −0.029, s 0.01
    seeded("dpr", [0.530, 0.520, 0.540])
    seeded("dpr_ccr_b0", [0.500, 0.490, 0.510])  # − dpr: −0.03 in every seed
    seeded("dpr_none", [0.600, 0.650, 0.640])  # − 0.639: −0.039, +0.011, +0.001: the interval reaches 0
    md = gather_metrics.markdown_table(gathered)
    # t(0.975, 2) · 0.01 / √3 = 0.0248: −0.029 [−0.054, −0.004]
    assert (
        "- dpr_sieve (0.610) is below zeroshot (0.639), the model it was trained from: -0.029 [-0.054, "
        "-0.004] over 3 seeds (paired, 95% t-interval; zeroshot has no seed, its one run is every seed's "
        "start)." in md
    )
    assert (
        "- dpr_ccr_b0 (0.500) is below dpr (0.530), the model it was trained from: -0.030 [-0.030, -0.030] "
        "over 3 seeds (paired, 95% t-interval)." in md
    )
    assert "- dpr_none (0.630) is below zeroshot (0.639), the model it was trained from: -0.009 [" in md
    assert (
        "; the interval reaches 0: not shown beyond the seeds' spread." in md.split("- dpr_none (0.630)")[1]
    )
    # one run each (dpr_oracle ... are single runs): the sentence stays without an interval
    assert "- dpr_ccr (0.540)" not in md


def test_each_methods_row_says_where_its_files_are_and_what_it_is():
    md = gather_metrics.markdown_table(_demo_like())
    methods = md.split("## Methods\n\n")[1].split("\n\n")[0].splitlines()
    assert len(methods) == 8
    assert (
        "- dpr_sieve: DPR from the base on the negatives the sieve kept, scored by models/dpr (sieve.scorer "
        "dpr: no CCR); files results/synthkb/dpr_sieve_no_ccr/, model results/synthkb/models/dpr_sieve_no_ccr/."
    ) in methods
    assert (
        "- dpr_ccr: CCR fine-tuning of models/dpr at β 6; files results/synthkb/dpr_ccr_b6/, "
        "model results/synthkb/models/dpr_ccr_b6/."
    ) in methods
    assert "- bm25: BM25 (no training); files results/synthkb/bm25/." in methods


def test_one_plus_minus_convention_the_95_percent_half_width_everywhere():
    """The full table used to print mean ± sample std, the headline mean ± 95% half-width."""
    gathered = {
        "dataset": "toy",
        "methods": {
            "dpr": {
                "split": "test",
                "n_queries": 10,
                "seeds": [0, 1, 2],
                "metrics": {"R@5": 0.6},
                "metrics_std": {"R@5": 0.1},
            }
        },
    }
    md = gather_metrics.markdown_table(gathered)
    # t(0.975, 2) · 0.1 / √3 = 0.248 in both tables; the std 0.100 nowhere
    assert md.count("0.600 ± 0.248") == 2 and "± 0.100" not in md
    assert "sample std" not in md and md.count("95% Student-t half-width over seeds") == 2


def test_the_figure_starts_at_zero_and_greys_the_controls():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from pipeline.evaluation.plot_methods import methods_figure

    fig = methods_figure(_demo_like(), ["hit_all@1", "hit_all@5"])
    try:
        for ax in fig.axes:
            assert ax.get_xlim()[0] == 0.0 and ax.get_xlim()[1] >= 1.0
            ticks = list(ax.get_yticks())
            names = dict(zip(ticks, ax.yaxis.get_major_formatter().format_ticks(ticks)))
            assert "dpr_oracle (control)" in names.values() and "dpr_sieve" in names.values()
            colors = {
                names[line.get_ydata()[0]]: matplotlib.colors.to_hex(line.get_color())
                for line in ax.get_lines()
                if line.get_marker() == "o"
            }
            red = [name for name, c in colors.items() if c == matplotlib.colors.to_hex("C3")]
            assert red == (["bm25"] if ax.get_title() == "hit_all@1" else ["dpr_sieve"])
            assert colors["dpr_oracle (control)"] == matplotlib.colors.to_hex("0.6")
    finally:
        plt.close(fig)


def test_metrics_json_keeps_its_keys_and_values(tmp_path):
    """Issue 40 changes metrics.md and metrics.png only: the gathered JSON has the keys it had."""
    a = _method_file(tmp_path, "bm25", {"hit_all@1": 0.7, "MRR@10": 0.3})
    b = _method_file(tmp_path, "dpr_oracle", {"hit_all@1": 0.8, "MRR@10": 0.5}, seed=0)
    gathered = gather_metrics.gather("tiny", [a, b])
    assert gathered == {
        "dataset": "tiny",
        "methods": {
            "bm25": {"split": "test", "n_queries": 6, "metrics": {"hit_all@1": 0.7, "MRR@10": 0.3}},
            "dpr_oracle": {
                "split": "test",
                "n_queries": 6,
                "seed": 0,
                "metrics": {"hit_all@1": 0.8, "MRR@10": 0.5},
            },
        },
        "comparisons": [],
    }

"""pipeline/workflow/spent.py: a run's cost from Snakemake's benchmark files, and the rest priced."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.core.storage import DataError
from pipeline.workflow.cost import PlannedJob, parse_plan
from pipeline.workflow.spent import dataset_of, main, read_benchmarks, remaining, report, spent_by

HEADER = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"


def _bench(root: Path, relative: str, wall: float, rss: float, cpu: float) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(HEADER + f"{wall}\t0:00:00\t{rss}\t0\t0\t0\t0\t0\t0\t{cpu}\n")


@pytest.fixture
def benchmarks(tmp_path: Path) -> Path:
    root = tmp_path / "benchmarks"
    _bench(root, "train_dpr_filtered/synthkb.oracle.tsv", 3600, 2000, 7200)
    _bench(root, "train_dpr_filtered/synthkb.oracle.s1.tsv", 1800, 2500, 3600)
    _bench(root, "train_dpr_filtered/squad.oracle.tsv", 900, 1000, 1800)
    _bench(root, "evaluate/synthkb.dpr/seed1.tsv", 36, 200, 18)
    _bench(root, "download/by-url/key/corpus.tsv", 72, 100, 54)
    return root


@pytest.mark.parametrize(
    "relative, dataset",
    [
        ("synthkb.oracle.s1.tsv", "synthkb"),
        ("gather.tsv", "gather"),
        ("synthkb_fn30_p50.dpr_sieve/seed0.tsv", "synthkb_fn30_p50"),
        ("by-url/key/corpus.tsv", "-"),
    ],
)
def test_the_dataset_is_what_the_benchmark_file_is_named_by(relative, dataset):
    assert dataset_of(Path(relative)) == dataset


def test_totals_per_dataset_and_rule(benchmarks):
    measured = read_benchmarks(benchmarks)
    assert len(measured) == 5
    by_dataset = spent_by(measured, "dataset")
    # synthkb: 3600 + 1800 + 36 s of wall, 7200 + 3600 + 18 s of CPU; the largest RSS of its three.
    # All: 6408 s of wall, 12672 s of CPU.
    assert list(by_dataset) == ["synthkb", "squad", "-"]  # largest CPU first
    synthkb = by_dataset["synthkb"]
    assert (
        synthkb.jobs == 3 and synthkb.wall_h == pytest.approx(1.51) and synthkb.cpu_h == pytest.approx(3.005)
    )
    assert synthkb.max_rss_mb == 2500
    by_rule = spent_by(measured, "rule")
    assert by_rule["train_dpr_filtered"].cpu_h == pytest.approx(3.5) and by_rule["download"].jobs == 1
    text = report(measured)
    assert "| **all** | 5 | 1.78 | 3.52 | 2,500 |" in text


def test_a_job_snakemake_did_not_measure_counts_in_jobs_and_wall_only(benchmarks):
    path = benchmarks / "evaluate" / "synthkb.bm25.tsv"
    path.write_text(HEADER + "0.4\t0:00:00\tNA\tNA\tNA\tNA\tNA\tNA\tNA\tNA\n")
    measured = read_benchmarks(benchmarks)
    evaluate = spent_by(measured, "rule")["evaluate"]
    assert evaluate.jobs == 2 and evaluate.unmeasured == 1 and evaluate.cpu_h == pytest.approx(18 / 3600)
    assert "1 job(s) ended before Snakemake's first measurement (NA)" in report(measured)
    # the rest is priced at the measured jobs' median only
    job = PlannedJob("evaluate", {"dataset": "synthkb"}, {}, "benchmarks/evaluate/synthkb.dpr.tsv")
    assert remaining([job], measured)["evaluate"].cpu_h == pytest.approx(18 / 3600)


def test_the_rest_is_priced_at_the_medians_of_its_rule(benchmarks):
    measured = read_benchmarks(benchmarks)
    jobs = [
        # a seed's twin rule writes into the rule's folder: priced by synthkb's median (7200, 3600 -> 5400 s)
        PlannedJob(
            "train_dpr_filtered_seed",
            {"dataset": "synthkb"},
            {},
            "benchmarks/train_dpr_filtered/synthkb.none.s2.tsv",
        ),
        # a dataset never measured for this rule: the rule's median over every dataset (3600 s)
        PlannedJob("train_dpr_filtered", {"dataset": "nq"}, {}, "benchmarks/train_dpr_filtered/nq.none.tsv"),
        # a rule never measured, and one without a benchmark file: counted, not priced
        PlannedJob("build_index", {"dataset": "synthkb"}, {}, "benchmarks/build_index/synthkb.dpr.tsv"),
        PlannedJob("sieve_report", {"dataset": "synthkb"}, {}),
    ]
    left = remaining(jobs, measured)
    assert left["train_dpr_filtered"].jobs == 2 and left["train_dpr_filtered"].priced == 2
    assert left["train_dpr_filtered"].cpu_h == pytest.approx((5400 + 3600) / 3600)
    assert left["build_index"].priced == 0 and left["sieve_report"].jobs == 1
    text = report(measured, left, cores=2)
    assert "4 jobs left, 2.5 CPU hours at the medians: at least 1.2 h of wall on 2 cores." in text
    assert "Not priced (no job of the rule measured yet): build_index (1), sieve_report (1)." in text


def test_the_plan_s_benchmark_file_is_read_from_snakemake_s_dry_run():
    output = """[Sun Nov 29 17:06:12 2026]
rule train_dpr_filtered_seed:
    input: resources/s/queries.train.parquet
    output: results/s/models/dpr_oracle-s2/retriever.json
    log: logs/train_dpr_filtered/s.oracle.s2.log
    jobid: 759
    benchmark: benchmarks/train_dpr_filtered/s.oracle.s2.tsv
    reason: Missing output files: results/s/models/dpr_oracle-s2/retriever.json
    wildcards: dataset=s, negs=oracle, seed=2
    resources: tmpdir=/tmp, mem_mb=6000
[Sun Nov 29 17:06:12 2026]
localrule sieve_report:
    input: results/s/sieve/oracle/decisions.parquet
    output: results/s/sieve/oracle/report.json
    jobid: 760
    wildcards: dataset=s, filter=oracle
    resources: tmpdir=/tmp
"""
    first, second = parse_plan(output)
    assert (
        first.benchmark == "benchmarks/train_dpr_filtered/s.oracle.s2.tsv" and first.wildcards["seed"] == "2"
    )
    assert second.rule == "sieve_report" and second.benchmark is None


@pytest.mark.parametrize(
    "content, problem",
    [
        ("s\tmax_rss\n1\t2\n", "field 'cpu_time': not a Snakemake benchmark file"),
        (HEADER, "record 1: no row after the header"),
        (
            HEADER + "nan\t0:00:00\t1\t0\t0\t0\t0\t0\t0\t1\n",
            "record 1: field 's': 'nan' is not a non-negative",
        ),
        (HEADER + "1\t0:00:00\t1\t0\t0\t0\t0\t0\t0\t-\n", "record 1: field 'cpu_time': '-' is not a number"),
        (HEADER + "NA\t0:00:00\t1\t0\t0\t0\t0\t0\t0\t1\n", "record 1: field 's': 'NA' is not a number"),
    ],
)
def test_a_malformed_benchmark_file_is_one_line_naming_it(tmp_path, content, problem):
    path = tmp_path / "benchmarks" / "evaluate" / "synthkb.bm25.tsv"
    path.parent.mkdir(parents=True)
    path.write_text(content)
    with pytest.raises(DataError) as err:
        read_benchmarks(tmp_path / "benchmarks")
    assert str(err.value).startswith(f"{path}: {problem}")


def test_the_command_reports_a_workflow_directory(benchmarks, capsys):
    assert main(["--directory", str(benchmarks.parent)]) == 0
    out = capsys.readouterr().out
    assert "| synthkb | 3 | 1.51 | 3.00 | 2,500 |" in out and "## Left" not in out
    with pytest.raises(DataError, match="no such workflow directory"):
        main(["--directory", str(benchmarks.parent / "elsewhere")])
    # a clone where nothing has run yet: an empty report, not an error
    (benchmarks.parent / "fresh").mkdir()
    assert main(["--directory", str(benchmarks.parent / "fresh")]) == 0
    assert "No benchmark file yet: no job has completed here." in capsys.readouterr().out

"""bench/scale.py: the table of the non-neural stages at two sizes (pure part) and the jobs' probe."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("bench_scale", REPO / "bench" / "scale.py")
scale = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(scale)


def _run(
    entities: int, passages: int, train: int, test: int, figures: dict, notes=None, max_queries=None
) -> dict:
    """A run's JSON as ``scale.py run`` writes it, with (wall, user, system, peak, tree) per stage."""
    overlay = {"datasets": {"synthkb": {"entities": entities}}}
    if max_queries is not None:
        overlay["sieve"] = {"max_queries": max_queries}
    return {
        "counts": {
            "entities": entities,
            "passages": passages,
            "queries.train": train,
            "queries.dev": 10,
            "queries.test": test,
        },
        "overlay": overlay,
        "notes": notes or {},
        "stages": [
            {
                "stage": stage,
                "wall_s": wall,
                "user_s": user,
                "system_s": system,
                "peak_rss_mib": peak,
                "tree_rss_sampled_mib": tree,
            }
            for stage, (wall, user, system, peak, tree) in figures.items()
        ],
    }


SMALL = {stage: (10.0, 8.0, 1.0, 200.0, 190.0) for stage in scale.STAGES}
LARGE = {stage: (50.0, 40.0, 5.0, 300.0, 290.0) for stage in scale.STAGES}
LARGE["mine_bm25_negatives"] = (400.0, 350.0, 10.0, 2000.0, 2100.0)  # sampled tree above the kernel's peak


def test_table_rows_and_ratios_from_given_numbers():
    # given in the wrong order: the table sorts by passages
    rows = scale.build_table([_run(1000, 7000, 800, 200, LARGE), _run(100, 700, 80, 20, SMALL)])
    assert [r["stage"] for r in rows] == [s for s in scale.STAGES for _ in range(2)]
    small, large = rows[0], rows[1]  # generate_synthkb
    assert (small["passages"], large["passages"]) == (700, 7000)
    assert (small["queries"], large["queries"]) == (110, 1010)  # train + dev + test
    assert small["rss_ratio"] is None and small["cpu_ratio"] is None
    assert large["work_unit"] == "entities" and (small["work"], large["work"]) == (100, 1000)
    assert large["cpu_s"] == 45.0 and small["cpu_s"] == 9.0
    assert large["rss_ratio"] == 1.5  # 300 / 200
    assert large["wall_ratio"] == 5.0 and large["cpu_ratio"] == 5.0 and large["work_ratio"] == 10.0
    mine = [r for r in rows if r["stage"] == "mine_bm25_negatives"]
    assert mine[0]["work"] == 80 * 700 and mine[1]["work"] == 800 * 7000
    assert mine[1]["work_unit"] == "train questions × passages" and mine[1]["work_ratio"] == 100.0
    # the larger of the kernel's peak (2000) and the sampled tree (2100); the small run: its kernel peak
    assert mine[1]["peak_rss_mib"] == 2100.0 and mine[0]["peak_rss_mib"] == 200.0
    assert mine[1]["rss_ratio"] == 10.5 and mine[1]["cpu_ratio"] == round(360 / 9, 2)
    index = [r for r in rows if r["stage"] == "index_bm25"]
    assert index[1]["work_unit"] == "passages" and index[1]["work_ratio"] == 10.0
    prepare = [r for r in rows if r["stage"] == "prepare_dataset"]
    assert (prepare[0]["work"], prepare[1]["work"]) == (810, 8010)  # passages + every split's questions
    evaluate = [r for r in rows if r["stage"] == "evaluate"]
    assert (evaluate[0]["work"], evaluate[1]["work"]) == (20, 200)


def test_a_sampled_stage_counts_its_sample_and_says_so():
    config = {"sieve": {"max_queries": 300}}
    counts = {"queries.train": 800}
    note = scale.notes(config, counts)
    assert note == {"sieve_candidates": "sample of 300 train questions (sieve.max_queries)"}
    assert scale.notes(config, {"queries.train": 300}) == {}  # a sample of everything is no bound
    rows = scale.build_table(
        [_run(100, 700, 80, 20, SMALL), _run(1000, 7000, 800, 200, LARGE, notes=note, max_queries=300)]
    )
    candidates = [r for r in rows if r["stage"] == "sieve_candidates"]
    assert candidates[1]["work"] == 300 and candidates[1]["work_ratio"] == 3.75  # 300 / 80
    table = scale.markdown(rows)
    assert (
        "| `sieve_candidates` | 7,000 | 1,010 | 300 train questions (sample of 300 train questions" in table
    )
    assert table.count("\n") == len(rows) + 1  # header, rule, one line per row
    assert "| 1.50× |" in table


def test_search_sample_counts_the_sampled_questions_and_extrapolates_all():
    counts = {"queries.train": 800, "queries.test": 200}
    sampled = {"train": 80, "test": 200}  # the test split was smaller than the sample: all of it
    note = scale.notes({}, counts, sampled)
    assert set(note) == {"mine_bm25_negatives", "sieve_candidates"}
    assert note["mine_bm25_negatives"].startswith("seeded sample of 80 of 800 train questions, whole corpus")
    large = _run(1000, 7000, 800, 200, LARGE, notes=note)
    large["sampled"] = sampled
    rows = scale.build_table([_run(100, 700, 80, 20, SMALL), large])
    by_stage = {r["stage"]: r for r in rows if r["passages"] == 7000}
    mine = by_stage["mine_bm25_negatives"]
    assert mine["work"] == 80 * 7000 and mine["full_cpu_s_extrapolated"] == 3600  # 360 CPU s x 10
    assert by_stage["sieve_candidates"]["work"] == 80
    assert by_stage["retrieve_bm25"]["work"] == 200 * 7000
    assert by_stage["retrieve_bm25"]["full_cpu_s_extrapolated"] is None  # nothing left out
    assert "all questions: ~3,600 CPU s (extrapolated)" in scale.markdown(rows)


def test_a_rerun_of_some_stages_replaces_their_records_at_its_size():
    first = _run(1000, 7000, 800, 200, LARGE)
    rerun = _run(1000, 7000, 800, 200, {"sieve_candidates": (5.0, 4.0, 1.0, 99.0, 98.0)})
    other = _run(100, 700, 80, 20, SMALL)
    merged = scale.merge_runs([first, other, rerun])
    assert len(merged) == 2 and len(merged[0]["stages"]) == len(scale.STAGES)
    by_stage = {s["stage"]: s for s in merged[0]["stages"]}
    assert by_stage["sieve_candidates"]["peak_rss_mib"] == 99.0
    assert by_stage["mine_bm25_negatives"]["peak_rss_mib"] == 2000.0
    assert len(first["stages"]) == len(scale.STAGES)  # the inputs are left as they were


def test_sample_qids_is_seeded_and_order_free_and_swap_replaces_values():
    qids = [f"q{i}" for i in range(50)]
    sample = scale.sample_qids(qids, 10)
    assert len(sample) == 10 and sample == scale.sample_qids(list(reversed(qids)), 10)
    assert sample != scale.sample_qids(qids, 10, seed=1)
    argv = ["-m", "x", "--queries", "a", "--per-query", "b", "--log", "c"]
    assert scale.swap(argv, per_query="B", log="C") == [
        "-m",
        "x",
        "--queries",
        "a",
        "--per-query",
        "B",
        "--log",
        "C",
    ]
    with pytest.raises(SystemExit, match="no --out"):
        scale.swap(argv, out="o")


def test_a_stage_a_run_left_out_has_no_row_and_two_jobs_are_refused():
    figures = {s: f for s, f in LARGE.items() if s not in scale.SEARCH_STAGES}  # run --no-search
    rows = scale.build_table([_run(100, 700, 80, 20, SMALL), _run(1000, 7000, 800, 200, figures)])
    mine = [r for r in rows if r["stage"] == "mine_bm25_negatives"]
    assert len(mine) == 1 and mine[0]["passages"] == 700 and mine[0]["rss_ratio"] is None
    index = [r for r in rows if r["stage"] == "index_bm25"]
    assert [r["passages"] for r in index] == [700, 7000] and index[1]["rss_ratio"] == 1.5
    twice = _run(100, 700, 80, 20, SMALL)
    twice["stages"].append(dict(twice["stages"][0]))
    with pytest.raises(ValueError, match="2 jobs of generate_synthkb"):
        scale.build_table([twice])


def test_stage_of_reads_the_rule_from_the_log_path():
    assert scale.stage_of("logs/retrieve_bm25/synthkb.test.log") == "retrieve_bm25"
    assert scale.stage_of("logs/x.log") is None and scale.stage_of(None) is None


def test_overlay_sets_the_generators_own_rates_unless_the_dial_is_kept():
    assert scale.overlay(140000, dial=False, max_queries=None) == {
        "datasets": {"synthkb": {"entities": 140000, "fn_share": None, "fn_paraphrase": 0.0}}
    }
    assert scale.overlay(10, dial=True, max_queries=5) == {
        "datasets": {"synthkb": {"entities": 10}},
        "sieve": {"max_queries": 5},
    }


def test_probe_records_the_childs_peak_and_exit(tmp_path):
    record = tmp_path / "jobs.jsonl"
    # the child touches 150 MiB (bytearray pages are written), then exits 3
    child = ["-c", "import sys; b = bytearray(150 * 2**20); sys.exit(3)", "--log", "logs/x_rule/d.log"]
    # from a small process, as the jobs' shim runs it: a child started by a large one (pytest after
    # torch was imported) inherits the parent's RSS in its ru_maxrss up to its exec
    probe = [sys.executable, str(REPO / "bench" / "scale.py"), "probe", "--record", str(record)]
    assert subprocess.run([*probe, "--python", sys.executable, "--", *child]).returncode == 3
    line = json.loads(record.read_text())
    assert line["exit"] == 3 and line["log"] == "logs/x_rule/d.log" and line["argv"] == child
    assert 150 <= line["peak_rss_mib"] < 400


def _parquet(path: Path, columns: dict) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table(columns), path)


def test_export_msmarco_writes_the_tables_as_tsv(tmp_path):
    data = tmp_path / "d"
    data.mkdir()
    _parquet(
        data / "corpus.parquet", {"pid": ["0-0", "0-1"], "title": ["Kelvar", ""], "text": ["A city.", "B."]}
    )
    for split in scale.SPLITS:
        _parquet(data / f"queries.{split}.parquet", {"qid": [f"q{split}"], "text": [f"Where is {split}?"]})
        _parquet(data / f"qrels.{split}.parquet", {"qid": [f"q{split}"], "pid": ["0-1"], "relevance": [1]})
    out = tmp_path / "export"
    scale.export_msmarco(data, out)
    assert (out / "collection.tsv").read_text() == "0-0\tKelvar A city.\n0-1\tB.\n"  # no title: text alone
    assert (out / "queries.dev.tsv").read_text() == "qdev\tWhere is dev?\n"
    assert (out / "qrels.test.tsv").read_text() == "qtest\t0\t0-1\t1\n"
    _parquet(data / "corpus.parquet", {"pid": ["0-0"], "title": ["T"], "text": ["a\tb"]})
    with pytest.raises(ValueError, match="0-0: a tab or line break"):
        scale.export_msmarco(data, out)


def test_overlay_declares_the_prepared_dataset_from_the_export(tmp_path):
    config = scale.overlay(100, dial=False, max_queries=None, export_dir=tmp_path)
    prepared = config["datasets"][scale.PREPARED]
    assert prepared["format"] == "msmarco" and prepared["source"]["corpus"] == str(
        tmp_path / "collection.tsv"
    )
    assert prepared["source"]["qrels_train"] == str(tmp_path / "qrels.train.tsv")
    assert sorted(prepared["source"]) == sorted(
        ["corpus"] + [f"{kind}_{split}" for kind in ("queries", "qrels") for split in scale.SPLITS]
    )


def test_extrapolation_fits_lines_in_work_and_entities():
    small = {stage: (1.0, 2.0, 0.0, 100.0, 0.0) for stage in scale.STAGES}
    large = {stage: (1.0, 20.0, 0.0, 190.0, 0.0) for stage in scale.STAGES}  # 10x the size
    large["mine_bm25_negatives"] = (1.0, 200.0, 0.0, 1000.0, 0.0)
    rows = scale.build_table([_run(100, 700, 80, 20, small), _run(1000, 7000, 800, 200, large)])
    expected = {e["stage"]: e for e in scale.extrapolate(rows, {700: 100, 7000: 1000}, 10000)}
    index = expected["index_bm25"]  # passages: 7000 -> 70000; CPU 2 + 18/6300 per passage
    assert index["work"] == 70000 and index["cpu_s"] == 20 + round(18 / 6300 * 63000)  # 200
    assert index["peak_rss_mib"] == 1090  # 190 + 0.1 MiB per entity x 9000
    mine = expected["mine_bm25_negatives"]  # questions x passages: 100x at 10x the entities
    assert mine["work"] == 800 * 7000 * 100
    per_pair = 198 / (800 * 7000 - 80 * 700)
    assert mine["cpu_s"] == round(200 + per_pair * (800 * 7000 * 99)) and mine["peak_rss_mib"] == 10000
    with pytest.raises(ValueError, match="two runs are needed"):
        scale.extrapolate(rows[:1], {700: 100}, 10000)

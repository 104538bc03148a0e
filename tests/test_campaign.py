"""pipeline/workflow/campaign.py: a long run in blocks whose results are kept in the repository."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.core.storage import DataError, file_sha256
from pipeline.workflow.campaign import (
    PREVIEW_MIN_SEEDS,
    Block,
    archived_seeds,
    campaign_blocks,
    check_commit,
    level_blocks,
    main,
    next_block,
    planned_rules,
    preview,
    read_records,
    remaining_cpu,
    restore,
    save,
    status,
    tables_of,
)
from pipeline.workflow.evaluation import EvaluationRules

ROOT = Path(__file__).resolve().parents[1]
TOURNAMENT = [str(ROOT / "config.yaml"), str(ROOT / "config/overlays/tournament/tournament_v2.yaml")]


@pytest.fixture(scope="module")
def two_seeds(tmp_path_factory):
    overlay = tmp_path_factory.mktemp("config") / "seeds.yaml"
    overlay.write_text("seeds: [0, 1]\n")
    return tables_of([str(ROOT / "config.yaml"), str(overlay)])


@pytest.fixture(scope="module")
def tournament():
    return tables_of(TOURNAMENT)


def test_a_seed_free_run_goes_with_the_first_seed_and_a_trained_one_with_each(two_seeds):
    first, second = level_blocks(two_seeds, "synthkb")
    assert (first.seed, second.seed) == (0, 1)
    # the demo exports TREC runs: its judgements and each run's export are gathered, so kept
    assert first.files[:2] == ("results/synthkb/qrels.test.trec", "results/synthkb/qrels_all.test.trec")
    assert {"results/synthkb/bm25/metrics.json", "results/synthkb/zeroshot/per_query.parquet"} <= set(
        first.files
    )
    assert not any("/bm25/" in f or "/zeroshot/" in f for f in second.files)
    assert "results/synthkb/dpr_sieve_no_ccr/seed0/metrics.json" in first.files
    assert "results/synthkb/dpr_sieve_no_ccr/seed1/run.test.trec" in second.files
    assert all("seed0" not in f for f in second.files)


def test_the_blocks_hold_every_file_the_gathering_reads_once(two_seeds):
    rules = EvaluationRules(two_seeds)
    wildcards = type("W", (), {"dataset": "synthkb"})()
    gathered = set(rules.per_query_files(wildcards)) | set(rules.trec_exports(wildcards))
    blocks = level_blocks(two_seeds, "synthkb")
    kept = [f for b in blocks for f in b.files]
    assert len(kept) == len(set(kept))
    assert gathered <= set(kept)
    # and nothing but those and the metrics.json beside each per-query file
    beside = {str(Path(f).with_name("metrics.json")) for f in rules.per_query_files(wildcards)}
    assert set(kept) == gathered | beside


def test_a_tournament_block_holds_the_reports_and_its_seeds_selections(tournament):
    blocks = level_blocks(tournament, "synthkb_fn30_p50")
    assert [b.seed for b in blocks] == [0, 1, 2, 3, 4]
    first, third = blocks[0], blocks[2]
    reports = [f for f in first.files if f.endswith("/report.json")]
    assert "results/synthkb_fn30_p50/sieve/sieve_teacher/report.json" in reports and len(reports) == 10
    assert not any(f.endswith("/report.json") for f in third.files)
    assert not any(f.endswith(".trec") for b in blocks for f in b.files)  # the overlay exports none
    assert "results/synthkb_fn30_p50/models/dpr_none_wise-s2/selection.json" in third.files
    assert "results/synthkb_fn30_p50/models/dpr_none_wise/selection.json" in first.files
    # the record is kept, not asked of Snakemake: select_model declares the retriever.json beside it
    assert not any(f.endswith("selection.json") for f in first.targets)
    assert all(f.endswith("selection.json") for f in first.beside) and len(first.beside) == 4
    # a zero-shot-mined level skips the selections
    mined = level_blocks(tournament, "synthkb_fn30_p50_zsmined")[1]
    assert not any(f.endswith("selection.json") for f in mined.files)


def test_the_next_block_is_every_levels_first_seed_first(tournament):
    blocks = campaign_blocks(tournament, ["synthkb_fn30_p50", "squad36"])
    assert next_block(blocks, {}).name == "synthkb_fn30_p50.seed0"
    done = {"synthkb_fn30_p50.seed0": {}}
    assert next_block(blocks, done).name == "squad36.seed0"
    done["squad36.seed0"] = {}
    assert next_block(blocks, done).name == "synthkb_fn30_p50.seed1"
    assert next_block(blocks, {b.name: {} for b in blocks}) is None
    with pytest.raises(DataError, match="nq2 not a dataset"):
        campaign_blocks(tournament, ["nq2"])


def _build(directory: Path, block: Block, text: str = "x") -> None:
    for f in block.files:
        (directory / f).parent.mkdir(parents=True, exist_ok=True)
        (directory / f).write_text(f"{text} {f}\n")


BLOCK = Block("toy", 1, ("results/toy/dpr/seed1/metrics.json", "results/toy/dpr/seed1/per_query.parquet"))


def test_an_unfinished_block_is_not_archived(tmp_path):
    work, archive = tmp_path / "work", tmp_path / "archive"
    _build(work, Block("toy", 1, BLOCK.files[:1]))
    with pytest.raises(
        DataError,
        match=r"toy.seed1 is not complete .*1 of its 2 files are missing, e.g. "
        r"results/toy/dpr/seed1/per_query.parquet",
    ):
        save(BLOCK, work, archive, "abc")
    assert not archive.exists()


def test_save_then_restore_gives_the_same_files_with_one_time(tmp_path):
    work, archive, fresh = tmp_path / "work", tmp_path / "archive", tmp_path / "fresh"
    _build(work, BLOCK)
    (work / "resources/toy").mkdir(parents=True)
    (work / "resources/toy/corpus.parquet").write_text("corpus")
    bench = work / "benchmarks/train_dpr_seed/toy.dpr-s1.tsv"
    bench.parent.mkdir(parents=True)
    bench.write_text("s\th:m:s\tmax_rss\tcpu_time\n100\t0:01:40\t900\t180\n")
    record = save(BLOCK, work, archive, "abc123")
    assert record["files"] == {f: file_sha256(work / f) for f in BLOCK.files}
    assert record["shared_inputs"] == {
        "resources/toy/corpus.parquet": file_sha256(work / "resources/toy/corpus.parquet")
    }
    assert (record["jobs"], record["cpu_hours"]) == (1, 0.05)
    assert read_records(archive)["toy.seed1"]["commit"] == "abc123"
    # a job measured before the block started is not the block's
    assert save(BLOCK, work, archive, "abc123", {"train_dpr_seed/toy.dpr-s1.tsv"})["jobs"] == 0
    assert restore(archive, fresh) == 2
    assert [(fresh / f).read_text() for f in BLOCK.files] == [(work / f).read_text() for f in BLOCK.files]
    assert len({os.stat(fresh / f).st_mtime for f in BLOCK.files}) == 1
    assert restore(archive, fresh) == 2  # the same files again: nothing to refuse


def test_restore_and_save_refuse_other_content(tmp_path):
    work, archive, fresh = tmp_path / "work", tmp_path / "archive", tmp_path / "fresh"
    _build(work, BLOCK)
    save(BLOCK, work, archive, "abc")
    _build(fresh, Block("toy", 1, BLOCK.files[1:]), text="other")
    with pytest.raises(DataError, match="per_query.parquet already holds other content.*fresh directory"):
        restore(archive, fresh)
    assert not (fresh / BLOCK.files[0]).exists()  # refused before anything was copied
    (archive / BLOCK.files[0]).write_text("edited by hand\n")
    with pytest.raises(DataError, match="metrics.json is missing or differs from its block record"):
        restore(archive, tmp_path / "third")
    _build(work, BLOCK, text="rebuilt")
    with pytest.raises(
        DataError, match="already holds other content .*the archive keeps it for block toy.seed1"
    ):
        save(BLOCK, work, archive, "abc")


def test_a_killed_saves_leftover_is_overwritten(tmp_path):
    work, archive = tmp_path / "work", tmp_path / "archive"
    _build(work, BLOCK)
    _build(archive, Block("toy", 1, BLOCK.files[:1]), text="half-copied")  # no record names it
    save(BLOCK, work, archive, "abc")
    assert (archive / BLOCK.files[0]).read_text() == (work / BLOCK.files[0]).read_text()


def test_status_says_where_each_block_ran_and_where_seeds_disagree(tmp_path):
    blocks = [Block("toy", 0, ()), Block("toy", 1, ())]
    shared = {"resources/toy/corpus.parquet": "aa"}
    one = {
        "saved": "2026-11-29T21:00:00+00:00",
        "commit": "0123456789",
        "machine": {"cpu": "Intel(R) Xeon(R) Processor", "cores": 2, "native_bf16": []},
        "trained_in": ["fp32"],
        "jobs": 40,
        "cpu_hours": 1.25,
        "shared_inputs": shared,
    }
    text = status(blocks, {"toy.seed0": one})
    assert (
        "| toy | 0 | 2026-11-29 at 0123456 | Intel(R) Xeon(R) Processor, 2 cores | fp32 | 40 | 1.25 |" in text
    )
    assert "| toy | 1 | no |" in text and "1 of 2 blocks archived, 1.2 CPU hours." in text
    assert "Left: 1 blocks, ~1 CPU hours at the archived blocks' median" in text
    assert remaining_cpu(blocks + [Block("toy", 2, ())], {"toy.seed0": one}) == 2.5
    assert remaining_cpu(blocks, {}) is None
    other = {**one, "shared_inputs": {"resources/toy/corpus.parquet": "bb"}}
    text = status(blocks, {"toy.seed0": one, "toy.seed1": other})
    assert text.endswith("toy: the seeds trained on different resources/toy/corpus.parquet")


def test_the_command_lists_a_blocks_targets(capsys):
    assert main(["targets", "synthkb_fn30_p50", "1", "--configfile", *TOURNAMENT]) == 0
    files = capsys.readouterr().out.split()
    assert "results/synthkb_fn30_p50/dpr_none/seed1/metrics.json" in files
    assert (
        main(["next", "--archive", "/nonexistent", "--configfile", *TOURNAMENT, "--datasets", "squad36"]) == 0
    )
    assert capsys.readouterr().out == "squad36 0\n"
    with pytest.raises(DataError, match="no block squad36 seed 9 .its seeds are \\[0, 1, 2, 3, 4\\]"):
        main(["targets", "squad36", "9", "--configfile", *TOURNAMENT])


def test_snakemake_builds_nothing_a_restored_block_holds(tmp_path):
    """The point of the archive: a fresh directory with a block restored plans no job for its runs.
    A hand-made run stands in for a trained one (Snakemake does not read it); the plan for its
    metrics.json must be empty while another run's is not."""
    checkout = tmp_path / "checkout"
    shutil.copytree(
        ROOT,
        checkout,
        ignore=shutil.ignore_patterns(
            ".venv", "results", "resources", ".snakemake", ".git", "logs", "benchmarks"
        ),
    )
    block = Block(
        "synthkb", 0, ("results/synthkb/bm25/metrics.json", "results/synthkb/bm25/per_query.parquet")
    )
    archive = tmp_path / "archive"
    work = tmp_path / "work"
    _build(work, block)
    save(block, work, archive, "abc")
    restore(archive, checkout)
    snakemake = [str(Path(sys.executable).with_name("snakemake")), "-n", "--quiet", "rules", "--cores", "1"]

    def planned(target: str) -> str:
        done = subprocess.run([*snakemake, target], cwd=checkout, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout + done.stderr

    assert "Nothing to be done" in planned("results/synthkb/bm25/metrics.json")
    assert "retrieve_bm25" in planned("results/synthkb/bm25/run.test.parquet")
    json.dumps(read_records(archive))  # the record is plain JSON


def test_every_block_of_an_archive_runs_at_one_commit():
    check_commit({}, "abc")
    check_commit({"toy.seed0": {"commit": "abc"}}, "abc")
    with pytest.raises(
        DataError, match="the archive's blocks ran at 0123456789ab; this directory is at fedcba"
    ):
        check_commit({"toy.seed0": {"commit": "0123456789abcdef"}}, "fedcba")


ARCHIVE = ROOT / "docs/data/tournament/v2"  # the campaign's own archive: blocks are added, never changed
LEVEL = "synthkb_fn30_p50"


def _checkout(where: Path) -> Path:
    shutil.copytree(
        ROOT,
        where,
        ignore=shutil.ignore_patterns(
            ".venv", "results", "resources", ".snakemake", ".git", "logs", "benchmarks"
        ),
    )
    return where


def test_the_dry_runs_job_stats_are_read_rule_by_rule():
    text = (
        "Building DAG of jobs...\nJob stats:\njob               count\n--------------  -------\n"
        "dense_seeds          18\ngather_metrics        1\ntotal                19\n"
    )
    assert planned_rules(text) == {"dense_seeds": 18, "gather_metrics": 1}
    assert planned_rules("Nothing to be done (all requested files are present and up to date).") == {}


def test_a_preview_needs_a_level_with_two_archived_seeds(tmp_path, tournament):
    blocks = campaign_blocks(tournament, [LEVEL, "squad36"])
    (tmp_path / "blocks").mkdir()
    (tmp_path / "blocks" / f"{LEVEL}.seed0.json").write_text('{"files": {}}')
    with pytest.raises(
        DataError, match=r"no level has 2 archived seeds yet \(archived: synthkb_fn30_p50 \[0\]\)"
    ):
        preview(tournament, blocks, tmp_path, tmp_path / "checkout", TOURNAMENT, tmp_path / "out", 1)


def test_the_preview_builds_the_tables_from_the_archive_alone(tmp_path, tournament):
    """The demo's level from its archived seeds (two or more): the seeds' means and the gathering run,
    nothing else, and the tournament's numbers are the archived runs' (paired by seed, by hand here)."""
    seeds = sorted(r["seed"] for r in read_records(ARCHIVE).values() if r["dataset"] == LEVEL)
    assert len(seeds) >= 2
    blocks = campaign_blocks(tournament, [LEVEL])
    out = tmp_path / "out"
    assert preview(tournament, blocks, ARCHIVE, _checkout(tmp_path / "checkout"), TOURNAMENT, out, 1) == [
        LEVEL
    ]

    def archived(method: str, seed: int) -> float:
        file = ARCHIVE / f"results/{LEVEL}/{method}/seed{seed}/metrics.json"
        return json.loads(file.read_text())["metrics"]["hit_all@1"]

    result = json.loads((out / "tournament_preview.json").read_text())
    (level,) = result["levels"]
    assert level["seeds"] == seeds and result["default"]["decided"] is False
    none = level["rows"]["dpr_none"]["metrics"]["hit_all@1"]
    none_runs = [archived("dpr_none", s) for s in seeds]
    assert none["mean"] == pytest.approx(sum(none_runs) / len(seeds), abs=1e-12)
    sieve = level["rows"]["dpr_sieve_no_ccr"]["metrics"]["hit_all@1"]["vs_baseline"]
    diffs = [archived("dpr_sieve_no_ccr", s) - archived("dpr_none", s) for s in seeds]
    assert (sieve["mean"], sieve["n"]) == (pytest.approx(sum(diffs) / len(seeds), abs=1e-12), len(seeds))
    assert json.loads((out / "preview_seeds.yaml").read_text()) == {"datasets": {LEVEL: {"seeds": seeds}}}
    (chosen,) = json.loads((out / "tournament_selections_preview.json").read_text())["levels"]
    assert chosen["dataset"] == LEVEL
    assert "not decided" in (out / "tournament_preview.md").read_text()


def test_a_preview_refuses_an_archive_that_lacks_a_file_the_tables_read(tmp_path, tournament):
    archive = tmp_path / "archive"
    shutil.copytree(ARCHIVE, archive)
    record_file = archive / "blocks" / f"{LEVEL}.seed1.json"
    record = json.loads(record_file.read_text())
    lost = f"results/{LEVEL}/dpr_none/seed1/metrics.json"
    del record["files"][lost]
    record_file.write_text(json.dumps(record))
    (archive / lost).unlink()
    blocks = campaign_blocks(tournament, [LEVEL])
    with pytest.raises(
        DataError, match=r"lacks files the tables read: Snakemake would run .*evaluate.*train_"
    ):
        preview(
            tournament, blocks, archive, _checkout(tmp_path / "checkout"), TOURNAMENT, tmp_path / "out", 1
        )


def test_the_documented_preview_has_every_archived_seed(tournament):
    """docs/results.md links the archive's preview: a block archived without rebuilding it fails here
    (the command: docs/evaluation.md, the campaign)."""
    levels = list(tournament.config["tournament"]["levels"])
    seeds = archived_seeds(campaign_blocks(tournament, levels), read_records(ARCHIVE))
    shown = json.loads((ARCHIVE / "preview" / "preview_seeds.yaml").read_text())["datasets"]
    assert {d: v["seeds"] for d, v in shown.items()} == {
        d: s for d, s in seeds.items() if len(s) >= PREVIEW_MIN_SEEDS
    }

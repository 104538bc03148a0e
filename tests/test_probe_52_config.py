"""Settings out of range and the small CLIs around the config: every count bounded where it is declared,
BM25's languages asked of the libraries, --threads bounded, the cost model's and the job printer's
hostile flags, and the config check running every check `snakemake -n` runs. Each case exits 2 with one
line naming the key or flag, no traceback (docs/failures.md "Settings out of range")."""

from __future__ import annotations

import argparse
import copy
import json
import subprocess
import sys
import types
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

import pytest
import yaml

from pipeline.core.config import ConfigError, deep_merge, load_config, validate_config
from pipeline.core.settings.base import (
    MAX_RANKS,
    MAX_RUNS,
    MAX_SHARDS,
    MAX_STEPS,
    Contract,
    bare_type,
    field_constraints,
)
from pipeline.core.settings.root import Config
from pipeline.data.settings import DatasetSpec, SplitUnits
from pipeline.sieve.settings import CleanSpec
from pipeline.workflow import checks

REPO = Path(__file__).resolve().parents[1]
BASE = load_config(validate=False)


def refused(overlay: dict, *names: str) -> str:
    """``overlay`` over config.yaml fails validation with one line naming each of ``names``."""
    config = deep_merge(copy.deepcopy(BASE), overlay)
    with pytest.raises(ConfigError) as err:
        validate_config(config)
    message = str(err.value)
    assert "\n" not in message, message
    for name in names:
        assert name in message, (name, message)
    return message


def accepted(overlay: dict) -> None:
    validate_config(deep_merge(copy.deepcopy(BASE), overlay))


def write_yaml(path: Path, data: Any) -> str:
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return str(path)


def check(files: list[str], capsys) -> tuple[int, str]:
    """The config check's exit code and its one error line (or '' when it passed)."""
    capsys.readouterr()
    code = checks.main(files)
    errors = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(errors) <= 1, errors
    return code, errors[0] if errors else ""


def program(*argv: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """``python -m ...`` as a user runs it: its own exit code and stderr."""
    return subprocess.run(
        [sys.executable, "-m", *argv], cwd=REPO, capture_output=True, text=True, timeout=timeout
    )


def one_error_line(done: subprocess.CompletedProcess, *names: str) -> str:
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if "error:" in line]
    assert len(lines) == 1, done.stderr
    for name in names:
        assert name in lines[0], (name, lines[0])
    return lines[0]


# ---- counts out of range ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overlay, key",
    [
        ({"encode": {"shards": 99999999999999999999}}, "encode.shards"),
        ({"encode": {"shards": 5000}}, "encode.shards"),
        ({"dpr": {"max_steps": 10**12}}, "dpr.max_steps"),
        ({"ccr": {"max_steps": 10**12}}, "ccr.max_steps"),
        ({"eval": {"depth": 10**9}}, "eval.depth"),
        ({"eval": {"ks": [1, 10**9]}}, "eval.ks.1"),
        ({"dpr": {"batch_size": 10**9}}, "dpr.batch_size"),
        ({"encode": {"batch_size": 10**9}}, "encode.batch_size"),
        ({"datasets": {"synthkb": {"entities": 10**12}}}, "datasets.synthkb.entities"),
        ({"sieve": {"candidates": 10**9}}, "sieve.candidates"),
        ({"sieve": {"cross_encoder": {"steps": 10**12}}}, "sieve.cross_encoder.steps"),
        ({"ar2": {"rounds": 10**6}}, "ar2.rounds"),
        ({"ar2": {"listwise": {"rerank_depth": 10**9}}}, "ar2.listwise.rerank_depth"),
        ({"search": {"chunk_rows": 2**40}}, "search.chunk_rows"),
        ({"index": {"train_size": 10**12}}, "index.train_size"),
        ({"hybrid": {"rrf_k": 10**12}}, "hybrid.rrf_k"),
        ({"model": {"passage_max_len": 10**6}}, "model.passage_max_len"),
        ({"dpr": {"threads": 10**6}}, "dpr.threads"),
        ({"search": {"gpus": 10**4}}, "search.gpus"),
    ],
)
def test_a_count_out_of_range_is_refused_naming_its_key(overlay, key):
    refused(overlay, f"'{key}'")


def test_a_count_at_its_bound_is_accepted():
    # The bounds are reachable: a real run at the ceiling passes.
    accepted({"encode": {"shards": MAX_SHARDS}, "index": {"shards": MAX_SHARDS}})
    accepted({"eval": {"depth": MAX_RANKS, "ks": [1, MAX_RANKS]}, "dpr": {"max_steps": MAX_STEPS}})


def _int_fields(cls: type, seen: set) -> list[str]:
    """Every int setting (plain, optional or a list's items) of ``cls`` and its nested sections that has
    no upper bound."""
    unbounded = []
    if cls in seen:
        return unbounded
    seen.add(cls)
    for name, field in cls.model_fields.items():
        hint = bare_type(field.annotation)
        if isinstance(hint, type) and issubclass(hint, Contract):
            unbounded += _int_fields(hint, seen)
            continue
        metadata = field_constraints(field)
        if get_origin(hint) is list:
            item = get_args(hint)[0]
            if get_origin(item) is Annotated:
                metadata = [m for a in get_args(item)[1:] for m in getattr(a, "metadata", [a])]
            hint = bare_type(item)
        if get_origin(hint) in (Union, types.UnionType):
            continue
        if hint is int and not any(hasattr(m, "le") or hasattr(m, "lt") for m in metadata):
            unbounded.append(f"{cls.__name__}.{name}")
    return unbounded


def test_every_count_of_the_config_has_an_upper_bound():
    seen: set = set()
    unbounded = _int_fields(Config, seen)
    for spec in (DatasetSpec, CleanSpec, SplitUnits):
        unbounded += _int_fields(spec, seen)
    assert unbounded == []


def test_the_config_check_refuses_a_huge_shard_count_in_one_line(tmp_path, capsys):
    overlay = write_yaml(tmp_path / "o.yaml", {"encode": {"shards": 99999999999999999999}})
    code, line = check([overlay], capsys)
    assert code == 2
    assert "encode.shards" in line and str(MAX_SHARDS) in line


def test_more_index_parts_than_embedding_shards_is_refused():
    # Found only by build_index, after the corpus was encoded.
    refused({"encode": {"shards": 2}, "index": {"shards": 3}}, "'index'", "encode.shards")
    accepted({"encode": {"shards": 3}, "index": {"shards": 3}})


def test_a_margin_grid_too_fine_to_list_is_refused():
    refused({"sieve": {"positive_aware_dev": {"grid_step": 1e-300}}}, "sieve.positive_aware_dev", "grid_step")


# ---- BM25's languages, asked of the libraries ---------------------------------------------------


def test_an_unknown_stop_word_list_is_refused_by_the_config_check():
    message = refused({"bm25": {"stopwords": "nosuchlang"}}, "'bm25.stopwords'", "nosuchlang")
    assert "bm25s" in message


def test_an_unknown_stemmer_is_refused_with_the_languages_pystemmer_has():
    import Stemmer

    message = refused({"bm25": {"stemmer": "klingon"}}, "'bm25.stemmer'", "klingon")
    assert all(name in message for name in Stemmer.algorithms())


@pytest.mark.parametrize("stemmer, stopwords", [("german", "de"), ("porter", "english"), (None, None)])
def test_languages_the_libraries_know_are_accepted(stemmer, stopwords):
    accepted({"bm25": {"stemmer": stemmer, "stopwords": stopwords}})


# ---- --threads --------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["-1", "0", "10000000"])
def test_the_shared_job_flags_refuse_a_thread_count_out_of_range(value, capsys):
    from pipeline.core.cli import add_job_flags

    ap = argparse.ArgumentParser(prog="stage")
    add_job_flags(ap)
    with pytest.raises(SystemExit) as exc:
        ap.parse_args(["--threads", value])
    assert exc.value.code == 2
    assert "--threads" in capsys.readouterr().err


def test_a_stage_with_its_own_threads_flag_is_refused_at_start(tmp_path):
    # train_dense, search, encode, index and AR2's selection declare --threads themselves.
    from pipeline.core.cli import start_stage

    with pytest.raises(ConfigError, match="--threads -1"):
        start_stage(None, -1, keep_handlers=True)


# ---- the cost model's CLI -----------------------------------------------------------------------


def test_cost_names_an_undeclared_dataset():
    done = program("pipeline.workflow.cost", "--recipe", "paper", "--dataset", "nosuch")
    one_error_line(done, "--dataset nosuch", "synthkb")


def test_cost_names_a_missing_measured_file(tmp_path):
    missing = tmp_path / "nothere.json"
    done = program("pipeline.workflow.cost", "--measured", str(missing), "--", "results/synthkb/metrics.json")
    one_error_line(done, str(missing), "not found")


def test_cost_names_a_measured_file_that_is_not_json(tmp_path):
    bad = tmp_path / "m.json"
    bad.write_text("{not json", encoding="utf-8")
    done = program("pipeline.workflow.cost", "--measured", str(bad), "--", "results/synthkb/metrics.json")
    one_error_line(done, str(bad), "not JSON")


def test_cost_names_a_broken_overlay(tmp_path):
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("dpr: [\n", encoding="utf-8")
    done = program(
        "pipeline.workflow.cost", "--configfile", str(bad_yaml), "--", "results/synthkb/metrics.json"
    )
    one_error_line(done, str(bad_yaml), "not valid YAML")
    unknown = write_yaml(tmp_path / "unknown.yaml", {"dpr": {"lrr": 1}})
    done = program("pipeline.workflow.cost", "--configfile", unknown, "--", "results/synthkb/metrics.json")
    one_error_line(done, "'dpr'", "'lrr'")


def test_cost_says_why_snakemake_refused_the_target():
    done = program("pipeline.workflow.cost", "results/nosuch/metrics.json")
    one_error_line(done, "results/nosuch/metrics.json", "unknown dataset 'nosuch'")


def test_snakemakes_reason_is_found_in_its_output():
    from pipeline.workflow.cost import snakemake_reason

    banner = "Using profile p for setting default command line arguments.\nBuilding DAG of jobs...\n"
    assert (
        snakemake_reason(
            banner + 'InputFunctionException in rule r in file "f", line 1:\nError:\n  ValueError: the '
            "reason\nWildcards:\n  a=b\nTraceback:\n  File x\n"
        )
        == "the reason"
    )
    assert (
        snakemake_reason(banner + "MissingRuleException:\nNo rule to produce x.\n") == "No rule to produce x."
    )
    assert snakemake_reason(banner + "WorkflowError:\nline one\nline two\n\n") == "line one line two"


# ---- the job printer's flags ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv, named",
    [
        (["synthkb", "filter_candidates", "--filter", "nosuch"], "--filter"),
        (["synthkb", "ar2_train", "--seed", "-4"], "--seed"),
        (["synthkb", "ar2_sieve", "--seed", str(2**40)], "--seed"),
        (["synthkb", "evaluate", "--run", "nosuch"], "--run nosuch"),
    ],
)
def test_the_job_printer_refuses_a_flag_no_job_has(argv, named, capsys):
    from pipeline.workflow import jobs

    with pytest.raises(SystemExit) as exc:
        jobs.main(argv)
    assert exc.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # no document printed
    assert named in captured.err


# ---- the config check runs what snakemake -n runs ----------------------------------------------------


def test_the_config_check_refuses_an_unknown_method(tmp_path, capsys):
    overlay = write_yaml(tmp_path / "o.yaml", {"methods": ["dpr_sievee"]})
    code, line = check([overlay], capsys)
    assert code == 2 and "'methods.0'" in line and "dpr_sieve" in line


TOURNAMENT = {
    "tournament": {
        "levels": {"synthkb": {"label": "demo"}},
        "methods": ["dpr_none", "dpr_oracle", "dpr_sieve"],
        "incumbent": "dpr_sieve",
    }
}


def test_the_config_check_refuses_a_tournament_typo(tmp_path, capsys):
    good = write_yaml(tmp_path / "good.yaml", TOURNAMENT)
    assert check([good], capsys) == (0, "")
    typo = copy.deepcopy(TOURNAMENT)
    typo["tournament"]["levels"] = {"synthkbb": {"label": "demo"}}
    code, line = check([write_yaml(tmp_path / "typo.yaml", typo)], capsys)
    assert code == 2 and "tournament" in line and "synthkbb" in line
    typo = copy.deepcopy(TOURNAMENT)
    typo["tournament"]["methods"].append("dpr_sieve_no_crr")
    code, line = check([write_yaml(tmp_path / "typo2.yaml", typo)], capsys)
    assert code == 2 and "dpr_sieve_no_crr" in line


def test_the_config_check_refuses_a_sweep_over_an_undeclared_dataset(tmp_path, capsys):
    overlay = write_yaml(tmp_path / "o.yaml", {"sweep": {"datasets": ["synthkbb"]}})
    code, line = check([overlay], capsys)
    assert code == 2 and "sweep.datasets" in line and "synthkbb" in line


def test_the_config_check_refuses_a_sieve_source_that_makes_a_cycle(tmp_path, capsys):
    overlay = write_yaml(tmp_path / "o.yaml", {"sieve": {"source": "dpr_sieve"}})
    code, line = check([overlay], capsys)
    assert code == 2 and "sieve.source" in line


def test_snakemake_n_refuses_what_the_config_check_refuses(tmp_path):
    # The two agree: the check is the same function's, and snakemake -n refuses the typo too.
    typo = copy.deepcopy(TOURNAMENT)
    typo["tournament"]["levels"] = {"synthkbb": {"label": "demo"}}
    overlay = write_yaml(tmp_path / "typo.yaml", typo)
    done = subprocess.run(
        [str(Path(sys.executable).with_name("snakemake")), "-n", "--cores", "1", "--configfile", overlay,
         "--", "results/sweeps/tournament.json"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode != 0
    assert "synthkbb" in done.stdout + done.stderr


# ---- a flag after -- -----------------------------------------------------------------------------


def test_a_flag_after_the_double_dash_is_named():
    from pipeline.workflow.checks import flags_after_targets

    line = flags_after_targets(["snakemake", "--cores", "1", "--", "results/x/metrics.json", "-n"])
    assert line is not None and "-n" in line and "before" in line and "results/x/metrics.json" in line
    assert flags_after_targets(["snakemake", "-n", "--", "results/x/metrics.json"]) is None
    assert flags_after_targets(["snakemake", "-n", "results/x/metrics.json"]) is None
    module = "/venv/lib/python3.11/site-packages/snakemake/__main__.py"
    assert flags_after_targets([module, "--", "results/x/metrics.json", "-n"]) is not None
    # another program that reads the Snakefile in-process (pytest -- ... -x) is not Snakemake
    assert flags_after_targets(["/venv/bin/pytest", "--", "tests/x.py", "-x"]) is None


def test_one_config_problem_is_one_line():
    message = refused({"dpr": {"lrr": 1}}, "'dpr'", "'lrr'")
    assert message.startswith("invalid configuration: ")


def test_the_shipped_overlays_still_pass(capsys):
    # The bounds and the new checks refuse nothing the project ships (the sweep's overlay is checked as
    # its header says it is used: over controls.yaml).
    overlays = sorted(str(p.relative_to(REPO)) for p in (REPO / "config" / "overlays").rglob("*.yaml"))
    for overlay in overlays:
        files = [overlay]
        if overlay.endswith("ccr/sweep.yaml"):
            files = ["config/overlays/ccr/controls.yaml", overlay]
        assert check([str(REPO / f) for f in files], capsys) == (0, ""), files


# ---- found probing further -----------------------------------------------------------------------


def test_a_learning_rate_yaml_reads_as_text_says_how_to_write_it(tmp_path, capsys):
    # docs/config.md shows the defaults as 2e-05; YAML 1.1 reads `lr: 1e-5` as the text '1e-5'.
    overlay = tmp_path / "o.yaml"
    overlay.write_text("dpr: {lr: 1e-5}\n", encoding="utf-8")
    code, line = check([str(overlay)], capsys)
    assert code == 2 and "'dpr.lr'" in line and "1.0e-5" in line
    overlay.write_text("dpr: {lr: 1.0e-5}\n", encoding="utf-8")
    assert check([str(overlay)], capsys) == (0, "")


def test_a_recipe_is_held_to_the_same_bounds(tmp_path, capsys):
    overlay = write_yaml(tmp_path / "o.yaml", {"recipes": {"demo": {"dpr": {"max_steps": 10**11}}}})
    code, line = check([overlay], capsys)
    assert code == 2 and "recipes.demo" in line and "dpr.max_steps" in line


def test_cost_names_a_measured_figure_that_is_not_a_number(tmp_path):
    entry = {"id": "x", "gpu": "h200", "kind": "infer", "model": "minilm", "value": "fast", "status": "m"}
    measured = tmp_path / "m.json"
    measured.write_text(json.dumps([{**entry, "tokens": 128}]), encoding="utf-8")
    done = program(
        "pipeline.workflow.cost", "--measured", str(measured), "--", "results/synthkb/metrics.json"
    )
    one_error_line(done, str(measured), "value", "'fast'")


def test_a_pool_smaller_than_the_candidates_is_refused():
    # The sieve judged `pool` candidates per query where `candidates` were asked for, silently.
    refused({"sieve": {"candidates": 30, "pool": 10}}, "'sieve.pool'", "sieve.candidates")
    accepted({"sieve": {"candidates": 30, "pool": 30}})


def test_a_folder_given_as_a_config_file_is_named(tmp_path, capsys):
    code, line = check([str(tmp_path)], capsys)
    assert code == 2 and str(tmp_path) in line and "folder" in line


@pytest.mark.parametrize("key", ["seeds", "ar2.seeds", "sieve.betas"])
def test_a_list_that_multiplies_the_runs_is_bounded(key):
    # Each seed (each β) trains again: 1,000 of them made a DAG as large as 1,000 shards.
    section, _, name = key.rpartition(".")
    values = list(range(MAX_RUNS + 1))
    overlay = {section: {name: values}} if section else {name: values}
    refused(overlay, f"'{key}'", str(MAX_RUNS))

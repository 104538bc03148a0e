"""Issue 52's workflow cases: the clean entries' rule (content tracking, quoted paths, no stray
exception), every rule's shell command quoted, and job logs that a file or grep can read."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_rerun_content import planned_rules, recorded_workspace, set_back, snakemake

REPO = Path(__file__).resolve().parent.parent
SNAKEMAKE = Path(sys.executable).with_name("snakemake")
TRIPLETS = "anchor,positive,negative\nq1,p one,n one\nq1,p one,p one\nq2,p two,n 2\n"


def run_snakemake(workdir: Path, overlay: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [str(SNAKEMAKE), *args, "-s", str(REPO / "Snakefile"), "--directory", str(workdir)]
    cmd += ["--cores", "1", "--configfile", str(overlay)]
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
    return subprocess.run(cmd, check=False, cwd=workdir, env=env, capture_output=True, text=True)


# ---- a clean entry's source, labels and local model folder are tracked by content ------------------


@pytest.mark.slow
def test_a_clean_entry_reruns_for_new_content_in_its_source_labels_or_model_folder(tmp_path):
    source, labels, model = tmp_path / "mine.csv", tmp_path / "labels.jsonl", tmp_path / "my-model"
    source.write_text(TRIPLETS, encoding="utf-8")
    labels.write_text('{"query": "q1", "passage": "p one"}\n', encoding="utf-8")
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "bert"}')
    (model / "model.safetensors").write_bytes(b"weights v1")
    entry = {"source": str(source), "labels": str(labels), "filter": "sieve", "model": str(model)}
    overlay = {"clean": {"mine": entry}}
    targets = ["results/mine/clean/cleaned.csv"]
    recorded_workspace(tmp_path, overlay, targets)
    # the same content with a new mtime (a copy) reruns nothing
    for path in (source, labels):
        shutil.copy(path, tmp_path / "copy")
        shutil.copy(tmp_path / "copy", path)
    assert planned_rules(snakemake(tmp_path, overlay, "-n", *targets)) == set()
    for path, content in ((source, TRIPLETS + "q3,p3,n3\n"), (labels, '{"query": "q2", "passage": "n 2"}\n')):
        original = path.read_bytes()
        path.write_text(content, encoding="utf-8")
        set_back(path)  # other content with an older mtime (cp -p, tar x)
        out = snakemake(tmp_path, overlay, "-n", *targets)
        assert {"fingerprint", "clean_negatives"} <= planned_rules(out), (path.name, out[-3000:])
        path.write_bytes(original)
        set_back(path)
        assert planned_rules(snakemake(tmp_path, overlay, "-n", *targets)) == set(), path.name
    # new weights in the entry's local model folder, an older mtime
    (model / "model.safetensors").write_bytes(b"weights v2")
    set_back(model / "model.safetensors")
    out = snakemake(tmp_path, overlay, "-n", *targets)
    assert {"fingerprint", "clean_negatives"} <= planned_rules(out), out[-3000:]


@pytest.mark.slow
def test_a_missing_clean_source_is_named_while_planning(tmp_path):
    overlay = tmp_path / "clean.yaml"
    overlay.write_text(f"clean: {{mine: {{source: '{tmp_path / 'gone.csv'}', filter: none}}}}\n")
    proc = run_snakemake(tmp_path, overlay, "-n", "results/mine/clean/cleaned.csv")
    assert proc.returncode != 0
    assert "gone.csv" in proc.stdout + proc.stderr


@pytest.mark.slow
def test_a_clean_entry_may_clean_another_entry_s_cleaned_file(tmp_path):
    # the source is a rule's output: a plain input, built first (never a fingerprint of a missing file)
    (tmp_path / "mine.csv").write_text(TRIPLETS, encoding="utf-8")
    overlay = tmp_path / "chain.yaml"
    overlay.write_text(
        f"clean:\n  mine: {{source: '{tmp_path / 'mine.csv'}', filter: none}}\n"
        "  again: {source: results/mine/clean/cleaned.csv, filter: none}\n"
    )
    proc = run_snakemake(tmp_path, overlay, "-n", "results/again/clean/cleaned.csv")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert re.search(r"^clean_negatives\s+2$", proc.stdout, flags=re.MULTILINE), proc.stdout[-3000:]


# ---- a cleaned file's plan: rule unknown_dataset no longer matches it ----------------------------------


@pytest.mark.slow
def test_a_cleaned_file_is_planned_without_an_unknown_dataset_exception(tmp_path):
    (tmp_path / "mine.csv").write_text(TRIPLETS, encoding="utf-8")
    overlay = tmp_path / "clean.yaml"
    overlay.write_text(f"clean: {{mine: {{source: '{tmp_path / 'mine.csv'}', filter: none}}}}\n")
    proc = run_snakemake(tmp_path, overlay, "-n", "results/mine/clean/cleaned.csv")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    for stray in ("InputFunctionException", "unknown dataset", "Traceback"):
        assert stray not in out, out[-3000:]
    # a clean entry's name is still no dataset: its results/<name>/metrics.json is named as before
    proc = run_snakemake(tmp_path, overlay, "-n", "results/mine/metrics.json")
    assert proc.returncode != 0 and "unknown dataset 'mine'" in proc.stdout + proc.stderr


@pytest.mark.slow
def test_an_entry_that_reads_its_own_cleaned_file_is_refused_at_start_up(tmp_path):
    overlay = tmp_path / "self.yaml"
    overlay.write_text("clean:\n  mine: {source: results/mine/clean/cleaned.csv, filter: none}\n")
    proc = run_snakemake(tmp_path, overlay, "-n", "results/mine/clean/cleaned.csv")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "clean.mine.source" in out and "Cyclic" not in out, out[-3000:]


@pytest.mark.slow
def test_a_flag_after_the_double_dash_is_named_not_a_missing_rule(tmp_path):
    (tmp_path / "mine.csv").write_text(TRIPLETS, encoding="utf-8")
    overlay = tmp_path / "clean.yaml"
    overlay.write_text(f"clean: {{mine: {{source: '{tmp_path / 'mine.csv'}', filter: none}}}}\n")
    cmd = [str(SNAKEMAKE), "--cores", "1", "-s", str(REPO / "Snakefile"), "--directory", str(tmp_path)]
    cmd += ["--configfile", str(overlay), "--", "results/mine/clean/cleaned.csv", "-n"]
    proc = subprocess.run(cmd, check=False, cwd=tmp_path, capture_output=True, text=True)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "-n after '--'" in out and "No rule" not in out, out[-3000:]
    assert not (tmp_path / "results").exists()  # the dry run asked for did not turn into a run


@pytest.mark.slow
def test_a_file_under_clean_that_no_entry_writes_is_named_against_the_clean_entries(tmp_path):
    (tmp_path / "mine.csv").write_text(TRIPLETS, encoding="utf-8")
    overlay = tmp_path / "clean.yaml"
    overlay.write_text(f"clean: {{mine: {{source: '{tmp_path / 'mine.csv'}', filter: none}}}}\n")
    cases = {
        # a misspelt entry, or a dataset's name where no entry is (a forgotten overlay): not "unknown dataset"
        "results/mien/clean/cleaned.csv": "no clean entry 'mien' (closest: mine)",
        "results/synthkb/clean/cleaned.csv": "no clean entry 'synthkb'",
        "results/mine/clean/cleaned.txt": "clean entry 'mine' writes results/mine/clean/cleaned.csv",
    }
    for target, message in cases.items():
        proc = run_snakemake(tmp_path, overlay, "-n", target)
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0 and message in out and "unknown dataset" not in out, (target, out[-2000:])


# ---- paths with spaces -------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_clean_entry_whose_source_and_labels_have_spaces_in_their_paths_runs(tmp_path):
    folder = tmp_path / "my data"
    folder.mkdir()
    source, labels = folder / "mined negatives.csv", folder / "known labels.jsonl"
    source.write_text(TRIPLETS, encoding="utf-8")
    labels.write_text('{"query": "q1", "passage": "p one"}\n', encoding="utf-8")
    overlay = tmp_path / "clean.yaml"
    overlay.write_text(
        f"clean: {{mine: {{source: '{source}', labels: '{labels}', filter: none}}}}\n", encoding="utf-8"
    )
    proc = run_snakemake(tmp_path, overlay, "results/mine/clean/cleaned.csv")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (tmp_path / "results/mine/clean/cleaned.csv").read_text(encoding="utf-8").count("\n") == 3
    # the report names the file the job read, whole
    assert str(source) in (tmp_path / "results/mine/clean/cleaned.csv.report.json").read_text(
        encoding="utf-8"
    )


def test_every_path_in_every_rule_s_shell_command_is_quoted(workflow):
    unquoted = {}
    for rule in workflow.rules:
        if rule.shellcmd is None:
            continue
        # a file the rule names (input, output, log) or a folder param, without Snakemake's :q (params
        # that are whole flags quote their paths themselves: test below)
        found = re.findall(r"\{(?:input|output|log)(?:\.\w+)?\}|\{params\.\w*dir\}", rule.shellcmd)
        found += re.findall(r"(?<!\")\$\(dirname [^)]*\)", rule.shellcmd)
        if found:
            unquoted[rule.name] = found
    assert unquoted == {}, unquoted


def test_the_flags_the_rules_build_from_paths_keep_a_path_with_a_space_whole():
    from types import SimpleNamespace

    from test_workflow_sieve import Namedlist

    from pipeline.workflow.evaluation import fusion_arg, qrels_all_arg, weighted_io
    from pipeline.workflow.retrieval import RetrievalRules
    from pipeline.workflow.sieve import filter_model_arg, pairs_arg
    from pipeline.workflow.training import TrainingRules

    spaced = "my dir/a b.parquet"
    files = Namedlist(
        fromdict={
            k: spaced
            for k in (
                "model",
                "dev_candidates",
                "dev_queries",
                "qrels_all",
                "fusion",
                "corpus",
                "dev_sparse",
                "index",
                "mining_qrels",
                "queries",
                "qrels",
                "negatives",
            )
        }
    )
    built = [
        filter_model_arg(None, files),
        pairs_arg(["a"], [spaced]),
        qrels_all_arg(None, files),
        fusion_arg(None, files),
        weighted_io(None, files, SimpleNamespace(choice=spaced)),
        RetrievalRules.search_source(None, files),
        TrainingRules.dpr_files(None, files),
    ]
    for flags in built:
        words = shlex.split(flags)
        paths = [w for w in words if not w.startswith("--") and w != "faiss"]
        assert paths and all(w.endswith(("a b.parquet", "my dir")) for w in paths), flags


# ---- job logs: one record per line off a terminal; faiss's loader quiet ----------------------------

PROGRESS = """
import logging, time
from pipeline.core.cli import setup_logging
from pipeline.training.engine import ProgressLines
setup_logging(LOG)
lines = ProgressLines(0, 20000, every=1)
lines(1, 0.123456, 2e-5, 123.4, note=" (nce 0.1234, ccr 0.0123, margin 0.5)")
logging.getLogger("sieve.test").info("a long record " + "word " * 40 + "end of record")
import faiss
"""


def test_a_job_s_stderr_in_a_file_has_one_line_per_record_and_no_faiss_loader_lines(tmp_path):
    stderr, log = tmp_path / "job.err", tmp_path / "job.log"
    with stderr.open("w") as err:
        subprocess.run(
            [sys.executable, "-c", PROGRESS.replace("LOG", repr(str(log)))],
            check=True,
            cwd=REPO,
            stdout=err,  # a SLURM job's output file, 2>&1
            stderr=err,
            env=dict(os.environ, COLUMNS="", TERM="xterm"),
        )
    for path in (stderr, log):
        text = path.read_text(encoding="utf-8")
        step = [line for line in text.splitlines() if "step 1/20000" in line]
        assert len(step) == 1 and "s/step" in step[0] and "ETA " in step[0], (path.name, text)
        record = [line for line in text.splitlines() if "a long record" in line]
        assert len(record) == 1 and record[0].endswith("end of record"), (path.name, text)
        assert "Could not load library" not in text and "faiss.loader" not in text, (path.name, text)


def test_the_console_handler_is_rich_on_a_terminal_only(tmp_path):
    import io
    import logging

    from rich.logging import RichHandler

    from pipeline.core.cli import console_handler, setup_logging

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert isinstance(console_handler(Terminal()), RichHandler)
    assert not isinstance(console_handler(io.StringIO()), RichHandler)
    root = logging.getLogger()
    saved = (root.handlers[:], root.level, logging.getLogger("faiss.loader").level)
    try:
        setup_logging()
        assert logging.getLogger("faiss.loader").getEffectiveLevel() == logging.WARNING
    finally:
        root.handlers[:], root.level = saved[0], saved[1]
        logging.getLogger("faiss.loader").setLevel(saved[2])


BAR = """
from pipeline.training.engine import progress_bar
bar = progress_bar(True)
with bar:
    task = bar.add_task("train dpr_sieve_b6 seed 0 on synthkb", total=60, loss=0.5, lr=2e-5, eps=12.3)
    for _ in range(60):
        bar.update(task, advance=1, loss=0.1234, lr=2e-5, eps=12.3)
"""


def test_the_training_bar_leaves_no_cut_line_in_a_job_s_output_file(tmp_path):
    # off a terminal ProgressLines logs the progress; rich's bar printed one line cut at 80 columns
    out = tmp_path / "job.out"
    with out.open("w") as handle:
        subprocess.run([sys.executable, "-c", BAR], check=True, cwd=REPO, stdout=handle, stderr=handle)
    assert out.read_text(encoding="utf-8") == ""

"""The rule files as Snakemake loads them: path functions, the β tag, one definition per helper,
and a conda environment on every rule that runs Python.

The workflow is loaded once through Snakemake's API (default config.yaml), so these tests call the
functions the rules call, not copies of them.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest

REPO = Path(__file__).resolve().parent.parent
RULES = REPO / "workflow" / "rules"
ENVS = REPO / "envs"


@pytest.fixture(scope="module")
def g(workflow):
    """The rule files' module namespace (common.smk's functions and constants)."""
    return SimpleNamespace(**workflow.globals)


# ---- the β tag -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "beta, tag",
    [
        (0, "0"),
        (0.0, "0"),
        (0.5, "0.5"),
        (0.05, "0.05"),
        (0.1, "0.1"),
        (1, "1"),
        (2.0, "2"),
        (1e-4, "0.0001"),
        (1e-5, "0.00001"),
        (1e-7, "0.0000001"),
        (1.5e-5, "0.000015"),
        (0.1234567, "0.1234567"),
        (1e6, "1000000"),
        ("0.5", "0.5"),
    ],
)
def test_beta_tag(g, beta, tag):
    assert g.beta_tag(beta) == tag


@pytest.mark.parametrize("beta", [0, 0.5, 0.05, 1e-4, 1e-7, 3e-12, 0.1234567, 0.30000000000000004, 12.5])
def test_beta_tag_reads_back_as_the_same_beta_and_fits_the_wildcard(g, beta):
    # Two β never share a folder: the tag is the configured value exactly.
    tag = g.beta_tag(beta)
    assert float(tag) == float(beta)
    assert re.fullmatch(g.BETA_RE, tag), tag


# ---- path functions --------------------------------------------------------------------------------


def test_path_functions_give_the_rules_patterns(g):
    assert g.corpus("{dataset}") == "resources/{dataset}/corpus.parquet"
    assert g.queries("{dataset}", "{split}") == "resources/{dataset}/queries.{split}.parquet"
    assert g.qrels("{dataset}", "train") == "resources/{dataset}/qrels.train.parquet"
    assert g.qrels_all("{dataset}", "{split}") == "resources/{dataset}/qrels_all.{split}.parquet"
    assert g.run("{dataset}", "{method}", "{split}") == "results/{dataset}/{method}/run.{split}.parquet"
    assert (
        g.run("{dataset}", "{method}", "{split}", seed="{seed}")
        == "results/{dataset}/{method}/seed{seed}/run.{split}.parquet"
    )
    assert g.per_query("{dataset}", "{run}") == "results/{dataset}/{run}/per_query.parquet"
    assert g.per_query("d", "ar2", seed=1) == "results/d/ar2/seed1/per_query.parquet"
    assert (
        g.retriever("{dataset}", g.ccr_model("{beta}"))
        == "results/{dataset}/models/dpr_ccr_b{beta}/retriever.json"
    )
    assert (
        g.embedding_shard("{dataset}", "{model}", "{shard}", 2, "npy")
        == "results/{dataset}/embeddings/{model}/shard{shard}of2.npy"
    )
    assert (
        g.ar2_round_json("{dataset}", "{variant}", "{seed}", "{r}")
        == "results/{dataset}/ar2/{variant}/seed{seed}/round{r}/round.json"
    )
    assert g.ar2_start_file("d", "negatives.parquet") == "results/d/ar2/start/negatives.parquet"
    assert g.ar2_trained_ranker("d", 2) == "results/d/ar2/ranker/seed2/ranker.json"


def test_default_config_paths(g):
    """The locations the default config produces (the README and the docs name them)."""
    tags = [g.beta_tag(b) for b in (0, 0.5, 6)]
    assert [g.negatives("synthkb", g.sieve_name(t)) for t in tags] == [
        "results/synthkb/negatives/sieve_b0.parquet",
        "results/synthkb/negatives/sieve_b0.5.parquet",
        "results/synthkb/negatives/sieve_b6.parquet",
    ]
    methods = g.METHODS["synthkb"]
    assert g.model_dir("synthkb", methods["dpr_ccr"].model) == "results/synthkb/models/dpr_ccr_b6"
    # the demo's sieve is scored by models/dpr (sieve.scorer dpr)
    assert methods["dpr_sieve"].negatives == "sieve_no_ccr"
    assert g.model_dir("synthkb", methods["dpr_sieve"].model) == "results/synthkb/models/dpr_sieve_no_ccr"
    assert g.negatives("synthkb", "bm25") == "results/synthkb/negatives/bm25.parquet"
    assert g.dataset_metrics("synthkb") == "results/synthkb/metrics.json"


def _code_lines(path: Path):
    for number, line in enumerate(path.read_text().splitlines(), 1):
        code = line.split("#", 1)[0]
        if code.strip():
            yield number, code


def test_rule_files_leave_locations_to_the_path_functions():
    # logs/ and benchmarks/ are per rule; every other location is pipeline/workflow/paths.py's to write.
    typed = re.compile(r"""["'](resources|results|downloads)/""")
    found = [
        f"{smk.name}:{n}: {code.strip()}"
        for smk in sorted(RULES.glob("*.smk"))
        for n, code in _code_lines(smk)
        if typed.search(code)
    ]
    assert not found, "typed-out paths:\n" + "\n".join(found)


def test_no_helper_is_defined_twice():
    seen: dict[str, str] = {}
    twice = []
    for smk in [REPO / "Snakefile", *sorted(RULES.glob("*.smk"))]:
        for name in re.findall(r"^def (\w+)", smk.read_text(), flags=re.MULTILINE):
            if name in seen:
                twice.append(f"{name}: {seen[name]} and {smk.name}")
            seen[name] = smk.name
    assert not twice, twice


# ---- conda environments ----------------------------------------------------------------------------


def _runs_python(rule) -> bool:
    # `python -m pipeline.…`, or the training launcher's `$launch -m pipeline.…` (python or torchrun).
    return re.search(r"\s-m\s+pipeline\.", rule.shellcmd or "") is not None


def test_every_rule_that_runs_python_has_a_conda_env(workflow, g):
    python_rules = [rule for rule in workflow.rules if _runs_python(rule)]
    assert len(python_rules) >= 25, [rule.name for rule in python_rules]
    # all and prefetch: targets that gather others; unknown_dataset: a guard that only names a mistyped dataset
    assert {rule.name for rule in workflow.rules} - {rule.name for rule in python_rules} == {
        "all",
        "prefetch",
        "unknown_dataset",
    }
    for rule in python_rules:
        env = rule.conda_env
        assert env is not None, f"rule {rule.name} has no conda: line"
        if callable(env):
            # The env follows the job's device (its GPUs): the CPU build unless the job holds GPUs.
            assert hasattr(rule.params, "device"), rule.name
            chosen = {device: env(None, SimpleNamespace(device=device)) for device in ("cpu", "cuda")}
            assert chosen == {"cpu": g.CPU_ENV, "cuda": g.CONDA_ENVS["cuda"]}, rule.name
            paths = chosen.values()
        else:
            assert env == g.CPU_ENV, rule.name
            paths = [env]
        for path in paths:
            resolved = (Path(rule.basedir.get_path_or_uri(secret_free=True)) / path).resolve()
            assert resolved.parent == ENVS and resolved.is_file(), (rule.name, resolved)


def test_gpu_capable_rules_follow_their_gpus(workflow):
    """Rules that can be given GPUs choose their env from the job; the others always run on CPU."""
    gpu_rules = {rule.name for rule in workflow.rules if "gpus" in rule.resources}
    trained = {
        "train_dpr",
        "train_dpr_rcl",
        "train_dpr_filtered",
        "train_dpr_relabel",
        "train_dpr_gist",
        "train_dpr_mined",
        "train_ccr",
        "search_dense",
        "select_model",  # model selection on dev: one forward pass per alpha
    }
    assert gpu_rules == trained | {f"{r}_seed" for r in trained} | {
        "encode_corpus",
        "build_index",
        "ar2_mine",
        "ar2_mine_start",
        "ar2_train",
        "ar2_train_ranker",
        "ar2_train_sieve_model",  # train_ccr's rule
        "ar2_encode_corpus",  # encode_corpus's rule
        "ar2_search_dev",  # search_dense's rule
        "ar2_search_dev_start",
        "ar2_search",
        "search_for_mining",
        # the sieve's own stages (issue 38.1: they ran on CPU threads while the GPU idled)
        "sieve_negatives",
        "filter_candidates",
        "train_cross_encoder",
        "ar2_sieve",
        "clean_negatives",  # a user's file cleaned by a model filter
    }
    for rule in workflow.rules:
        if _runs_python(rule):
            assert callable(rule.conda_env) == (rule.name in gpu_rules), rule.name


def test_every_module_a_rule_runs_exists(workflow):
    # A renamed stage module fails only when its job runs; catch it at load time instead.
    modules = {
        m for rule in workflow.rules for m in re.findall(r"\s-m\s+(pipeline(?:\.\w+)+)", rule.shellcmd or "")
    }
    assert len(modules) >= 15, modules
    path = {m: REPO / m.replace(".", "/") for m in modules}  # a module, or a package run by its __main__
    missing = sorted(
        m
        for m in modules
        if not (path[m].with_suffix(".py").is_file() or (path[m] / "__main__.py").is_file())
    )
    assert not missing, missing


# ---- the DPR controls --------------------------------------------------------------------------------


def test_dpr_controls_train_on_their_filters_negatives(g):
    methods = g.METHODS["synthkb"]
    tag = g.beta_tag(g.config["ccr"]["beta"])
    assert methods["dpr_oracle"].model == "dpr_oracle" and methods["dpr_none"].model == "dpr_none"
    scored_by_ccr = g.config["sieve"]["scorer"] == "ccr"
    assert methods["dpr_sieve"].model == (f"dpr_sieve_b{tag}" if scored_by_ccr else "dpr_sieve_no_ccr")
    for method in ("dpr_oracle", "dpr_answer_match", "dpr_sieve"):
        # the model folder is the one train_dpr_filtered writes for those negatives
        assert methods[method].model == g.dpr_on(methods[method].negatives)
        negs = methods[method].negatives
        assert re.fullmatch("|".join(g.OTHER_FILTERS) + "|" + g.sieve_name(g.BETA_RE), negs)


def test_a_ccr_model_takes_its_beta_from_the_table_not_its_folder_name(g):
    # train_ccr's --beta: the β the tag stands for in the config (ccr.beta and sieve.betas).
    betas = g.CCR_BETAS["synthkb"]
    assert betas[g.beta_tag(g.config["ccr"]["beta"])] == g.config["ccr"]["beta"]
    assert set(betas) == {g.beta_tag(b) for b in [g.config["ccr"]["beta"], *g.config["sieve"]["betas"]]}


def _dry_run(tmp_path, overlay_text: str, *targets: str):
    import subprocess
    import sys

    overlay = tmp_path / "overlay.yaml"
    overlay.write_text(overlay_text)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "-n",
            *targets,
            "--snakefile",
            str(REPO / "Snakefile"),
            "--directory",
            str(tmp_path),
            "--configfile",
            str(overlay),
        ],
        capture_output=True,
        text=True,
    )


def test_oracle_on_a_dataset_without_exact_labels_fails_while_planning(tmp_path):
    proc = _dry_run(
        tmp_path,
        "datasets:\n  mydata:\n    format: squad\n    source: data/dev.json\n",
        "results/mydata/dpr_oracle/metrics.json",
    )
    assert proc.returncode != 0
    assert "exact false-negative labels" in proc.stdout + proc.stderr


def test_a_dataset_without_format_is_named_by_the_config_check(tmp_path):
    # issue 28.6: the rule files read every dataset's format; a missing one must reach validation
    proc = _dry_run(tmp_path, "datasets:\n  mydata:\n    source: data/dev.json\n")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "KeyError" not in out, out
    assert "config key 'datasets.mydata.format': required key is missing" in out, out


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf"])
def test_a_non_finite_number_in_an_overlay_is_refused_at_start_up(tmp_path, value):
    # issue 28.2: `snakemake -n` already stops, naming the key, before any job
    proc = _dry_run(tmp_path, f"dpr:\n  lr: {value}\n")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "config key 'dpr.lr': Input should be a finite number" in out, out


def test_a_target_after_configfile_is_named_as_a_target(tmp_path):
    # issue 27.5: Snakemake 9 reads a target written after --configfile as one more config file; a
    # metrics.json was then validated as config (pages of "unknown key(s) 'comparisons', ...")
    (tmp_path / "results/synthkb").mkdir(parents=True)
    (tmp_path / "results/synthkb/metrics.json").write_text('{"dataset": "synthkb", "comparisons": []}')
    (tmp_path / "overlay.yaml").write_text("seed: 0\n")
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--cores", "1", "--snakefile", str(REPO / "Snakefile")]
        + ["--configfile", str(tmp_path / "overlay.yaml"), "results/synthkb/metrics.json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "results/synthkb/metrics.json was read as a config file: it is a target" in out, out
    assert "unknown key" not in out


@pytest.mark.parametrize(
    "target, message",
    [
        (
            "results/synthkb/dpr_cccr/metrics.json",
            "unknown method or run 'dpr_cccr' of dataset 'synthkb' (closest: dpr_ccr",
        ),
        ("results/synthkb/dpr_ccr/metrics.json", "ask for results/synthkb/dpr_ccr_b6/metrics.json"),
        (
            "results/synthkbb/metrics.json",
            "results/synthkbb/metrics.json: unknown dataset 'synthkbb' (closest: synthkb)",
        ),
        # issue 39.11: a deep target was a bare "No rule to produce"
        (
            "results/synthkbb/bm25/run.test.parquet",
            "results/synthkbb/bm25/run.test.parquet: unknown dataset 'synthkbb' (closest: synthkb)",
        ),
        (
            "resources/synthkbb/corpus.parquet",
            "resources/synthkbb/corpus.parquet: unknown dataset 'synthkbb' (closest: synthkb)",
        ),
    ],
)
def test_a_mistyped_target_is_named_with_the_closest_known_names(tmp_path, target, message):
    # issue 27.5: these were "Missing input ... run.test.parquet" and a bare MissingRuleException
    proc = _dry_run(tmp_path, "seed: 0\n", target)
    assert proc.returncode != 0
    assert message in proc.stdout + proc.stderr, (proc.stdout + proc.stderr)[-2000:]


def test_a_declared_dataset_is_not_taken_for_an_unknown_one(tmp_path):
    # the unknown_dataset rule matched declared names too: every plan printed its ValueError
    # ("unknown dataset 'synthkb' (closest: synthkb)") before going on
    proc = _dry_run(tmp_path, "seed: 0\n", "results/synthkb/metrics.json")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-2000:]
    assert "unknown dataset" not in out and "InputFunctionException" not in out, out[:3000]

"""Training recipes (pipeline.core.recipes): a dataset's settings are the top-level sections with its
recipe merged in; the workflow plans each dataset's jobs with its own; models and metrics.json
record the recipe in force."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from shell_settings import job_document

from pipeline.core.config import ConfigError, load_config
from pipeline.core.recipes import dataset_config, dataset_configs, dataset_recipe, recipe_chain, recipe_record
from pipeline.training.settings import TrainSettings

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def config() -> dict:
    return load_config()


# ---- resolution ----------------------------------------------------------------------------------


def test_chain_is_root_first_and_refuses_unknown_names_and_cycles():
    recipes = {"a": {}, "b": {"extends": "a"}, "c": {"extends": "b"}}
    assert recipe_chain(recipes, "c", "datasets.x.recipe") == ["a", "b", "c"]
    with pytest.raises(ConfigError, match=r"datasets\.x\.recipe.*unknown recipe 'nope'"):
        recipe_chain(recipes, "nope", "datasets.x.recipe")
    with pytest.raises(ConfigError, match=r"recipes\.b\.extends.*unknown recipe 'zzz'"):
        recipe_chain({"b": {"extends": "zzz"}}, "b", "datasets.x.recipe")
    with pytest.raises(ConfigError, match="cycle"):
        recipe_chain({"a": {"extends": "b"}, "b": {"extends": "a"}}, "a", "datasets.x.recipe")


def test_default_config_declares_paper_recipes_on_the_paper_datasets(config):
    assert {d: dataset_recipe(config, d) for d in config["datasets"]} == {
        "synthkb": "demo",
        "nq": "paper",
        "tq": "paper_tq",
        "msmarco": "paper_msmarco",
        "squad": "demo",
    }
    configs = dataset_configs(config)
    assert configs["synthkb"] is config and configs["squad"] is config  # demo: the top level as it is
    nq = configs["nq"]
    # reference.md sections 1-2: DPR 40 epochs at batch 128 on BERT-base towers, CCR lr 1e-7 for one epoch
    assert (nq["dpr"]["epochs"], nq["dpr"]["batch_size"], nq["dpr"]["max_steps"]) == (40, 128, 0)
    assert (nq["model"]["base"], nq["model"]["shared_towers"]) == ("bert-base-uncased", False)
    assert (nq["ccr"]["lr"], nq["ccr"]["epochs"], nq["ccr"]["hard_negatives"], nq["ccr"]["temperature"]) == (
        1e-7,
        1,
        5,
        1.0,
    )
    assert (nq["ar2"]["negatives"], nq["ar2"]["top_k"], nq["ar2"]["simans"]["b"]) == (15, 100, -1.0)
    # what the recipe leaves alone comes from the top level (the contract's other fields)
    assert nq["dpr"]["grad_accum"] == config["dpr"]["grad_accum"]
    assert nq["eval"] == config["eval"]
    assert configs["tq"]["ar2"]["simans"] == {"a": 0.5, "b": 0.0, "form": "square"}
    ms = configs["msmarco"]
    assert ms["ccr"]["hard_negatives"] == 3 and ms["ar2"]["top_k"] == 200
    assert ms["ar2"]["select_metric"] == "MRR@10" and ms["ar2"]["simans"]["form"] == "abs"
    assert ms["dpr"]["epochs"] == 40  # inherited from paper
    # the top level (the demo) is untouched by resolving the others
    assert (config["dpr"]["max_steps"], config["model"]["base"]) == (60, "minilm")


def test_an_overlay_changes_a_recipe_where_it_is_declared(config):
    from pipeline.core.config import deep_merge

    overlay = {"recipes": {"paper": {"dpr": {"max_steps": 100}}}, "datasets": {"tq": {"recipe": "demo"}}}
    merged = deep_merge(config, overlay)
    assert dataset_config(merged, "nq")["dpr"]["max_steps"] == 100
    assert dataset_config(merged, "msmarco")["dpr"]["max_steps"] == 100  # extends paper
    assert dataset_config(merged, "tq")["dpr"] == config["dpr"]


def test_a_bad_key_in_a_recipe_names_the_recipe_the_dataset_and_the_key(config):
    from pipeline.core.config import deep_merge

    bad = deep_merge(config, {"recipes": {"paper": {"dpr": {"max_stepz": 1}}}})
    with pytest.raises(ConfigError, match=r"(?s)recipe 'paper' of dataset 'nq'.*dpr.*max_stepz"):
        dataset_config(bad, "nq")
    bad = deep_merge(config, {"recipes": {"paper": {"ccr": {"lr": -1}}}})
    with pytest.raises(ConfigError, match=r"(?s)recipe 'paper'.*ccr\.lr"):
        dataset_config(bad, "nq")


def test_a_recipe_cannot_set_what_every_dataset_shares(tmp_path):
    from pipeline.core.config import validate_config

    config = load_config()
    config["recipes"]["paper"]["eval"] = {"ks": [1]}
    with pytest.raises(ConfigError, match=r"(?s)recipes\.paper.*'eval'"):
        validate_config(config)


def test_record_names_the_recipe_its_chain_and_the_settings_in_force(config):
    record = recipe_record(config, "msmarco")
    assert record["recipe"] == "paper_msmarco" and record["chain"] == ["paper", "paper_msmarco"]
    assert record["settings"]["ccr"]["hard_negatives"] == 3
    assert record["settings"]["methods"] == config["recipes"]["paper"]["methods"]
    assert "gpus" not in record["settings"]["dpr"]  # what a job reserves changes no result
    demo = recipe_record(config, "synthkb")
    assert demo["recipe"] == "demo" and demo["settings"]["dpr"]["max_steps"] == config["dpr"]["max_steps"]
    json.dumps(record)  # it goes into metrics.json


# ---- the plan: paper-scale NQ and the unchanged demo from one config --------------------------------


def _jobs(output: str) -> dict[tuple[str, str], dict]:
    """(rule, dataset) -> {'shell': ..., 'resources': ...} of a dry run printed with -p."""
    jobs = {}
    for block in re.split(r"\n(?=\[[^\n]*\]\n(?:local)?rule )", output):
        rule = re.search(r"^(?:local)?rule (\w+):", block, flags=re.MULTILINE)
        dataset = re.search(r"wildcards: dataset=(\w+)", block)
        if rule and dataset:
            resources = re.search(r"^\s+resources: (.*)$", block, flags=re.MULTILINE)
            threads = re.search(r"^\s+threads: (\d+)$", block, flags=re.MULTILINE)
            jobs[(rule.group(1), dataset.group(1))] = {
                "shell": block,
                "resources": resources.group(1) if resources else "",
                "threads": int(threads.group(1)) if threads else 1,
            }
    return jobs


def _dry_run(workdir: Path, *args: str) -> str:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "-n",
            "-p",
            "--snakefile",
            str(REPO / "Snakefile"),
            "--directory",
            str(workdir),
            *args,
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout + proc.stderr


def test_one_plan_trains_nq_at_paper_scale_and_the_demo_as_before(tmp_path, config):
    out = _dry_run(tmp_path, "--cores", "32", "results/nq/metrics.json", "results/synthkb/metrics.json")
    jobs = _jobs(out)
    nq, demo = jobs[("train_dpr", "nq")], jobs[("train_dpr", "synthkb")]
    paper = dataset_config(config, "nq")
    train_fields = list(TrainSettings.model_fields)
    assert job_document(nq["shell"])["train"] == {k: paper["dpr"][k] for k in train_fields}
    assert (
        "--init resources/models/bert-base-uncased" in nq["shell"]  # the prefetched folder (prefetch.smk)
        and not job_document(nq["shell"])["retriever"]["shared_towers"]
    )
    assert "--recipe paper" in nq["shell"] and "torchrun --standalone --nproc_per_node=4" not in demo["shell"]
    assert re.search(r"\bgpus=4\b", nq["resources"]) and re.search(r"\bmem_mb=64000\b", nq["resources"])
    assert nq["threads"] == 16
    # the demo: exactly the top-level sections, on CPU
    assert job_document(demo["shell"])["train"] == {k: config["dpr"][k] for k in train_fields}
    assert "--init minilm" in demo["shell"]
    assert "--recipe demo" in demo["shell"]
    assert re.search(r"\bgpus=0\b", demo["resources"]) and demo["threads"] == config["dpr"]["threads"]
    ccr = jobs[("train_ccr", "nq")]
    assert (
        job_document(ccr["shell"])["train"]["lr"] == 1e-07
        and job_document(ccr["shell"])["train"]["epochs"] == 1
    )
    assert ("ar2_round", "nq") in jobs and ("ar2_round", "synthkb") in jobs
    assert "--recipe paper" in jobs[("ar2_round", "nq")]["shell"]
    assert "--recipe demo" in jobs[("init_zeroshot", "synthkb")]["shell"]


def test_the_users_slurm_command_plans_paper_dpr_on_gpus(tmp_path):
    profile = yaml.safe_load((REPO / "profiles" / "slurm" / "config.yaml").read_text())
    assert profile["executor"] == "slurm"
    out = _dry_run(
        tmp_path, "--cores", "32", "--profile", str(REPO / "profiles" / "slurm"), "results/nq/metrics.json"
    )
    dpr = _jobs(out)[("train_dpr", "nq")]
    train = job_document(dpr["shell"])["train"]
    assert (train["epochs"], train["batch_size"], train["max_steps"]) == (40, 128, 0)
    assert re.search(r"\bgpu=4\b", dpr["resources"]) and re.search(r"\bgpus=4\b", dpr["resources"])
    # AR2 (16 rounds per variant and seed): every round's corpus encoding is encode.shards parallel
    # GPU jobs of encode_corpus's rule, gathered; the training job encodes no corpus.
    blocks = _blocks(out)
    shard_jobs = [b for b in blocks if b["rule"] == "ar2_encode_corpus"]
    variants = {"ar2_simans", "ar2_simans_sieve"}
    assert len(shard_jobs) == len(variants) * 16 * 2, len(shard_jobs)  # 2 = config encode.shards
    assert all(
        re.search(r"\bgpus=1\b", b["resources"]) and re.search(r"\bgpu=1\b", b["resources"])
        for b in shard_jobs
    )
    rounds = {
        re.search(r"ar2/([\w.]+)/seed0/round(\d+)/embeddings/shard(\d)of2", b["text"]).groups()
        for b in shard_jobs
    }
    assert len(rounds) == len(shard_jobs)  # one job per (variant, round, shard)
    trains = [b for b in blocks if b["rule"] == "ar2_train"]
    assert len(trains) == len(variants) * 16 and all(re.search(r"\bgpus=1\b", b["resources"]) for b in trains)
    assert not any("pipeline.retrieval.encode" in b["text"] for b in trains)
    whole_corpus = [
        b["rule"]
        for b in blocks
        if "pipeline.retrieval.encode corpus" in b["text"] and "--shards 1 " in b["text"]
    ]
    assert whole_corpus == [], whole_corpus


def _blocks(output: str) -> list[dict]:
    """Every job of a dry run printed with -p: rule, resources, the block's text."""
    out = []
    for block in re.split(r"\n(?=\[[^\n]*\]\n(?:local)?rule )", output):
        rule = re.search(r"^(?:local)?rule (\w+):", block, flags=re.MULTILINE)
        if rule:
            resources = re.search(r"^\s+resources: (.*)$", block, flags=re.MULTILINE)
            out.append(
                {"rule": rule.group(1), "resources": resources.group(1) if resources else "", "text": block}
            )
    return out


# ---- what the recipe leaves behind -------------------------------------------------------------------


def test_model_folder_records_the_recipe(tmp_path):
    out = tmp_path / "zeroshot"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline.training.train_dense",
            "--init-only",
            "--base",
            "minilm",
            "--recipe",
            "paper",
            "--out",
            str(out),
        ],
        check=True,
        cwd=REPO,
        capture_output=True,
    )
    assert json.loads((out / "recipe.json").read_text()) == {"recipe": "paper", "trained": False}
    assert (out / "retriever.json").exists()


def test_gather_keeps_the_recipe_in_metrics_json(tmp_path, config):
    from pipeline.evaluation.gather import main

    metrics = tmp_path / "bm25.json"
    metrics.write_text(
        json.dumps(
            {"dataset": "synthkb", "method": "bm25", "split": "test", "n_queries": 3, "metrics": {"R@1": 0.5}}
        )
    )
    record = recipe_record(config, "synthkb")
    assert (
        main(
            [
                "--dataset",
                "synthkb",
                "--inputs",
                str(metrics),
                "--out-json",
                str(tmp_path / "m.json"),
                "--out-md",
                str(tmp_path / "m.md"),
                "--recipe",
                json.dumps(record),
            ]
        )
        == 0
    )
    assert json.loads((tmp_path / "m.json").read_text())["recipe"] == record

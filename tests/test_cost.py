"""The cost model (pipeline.workflow.cost): FLOPs, throughput provenance, work per job, the generated
tables in docs/cluster.md and the SLURM profile's runtimes derived from them."""

from __future__ import annotations

import json

import pytest
import yaml

from pipeline.core.config import load_config
from pipeline.core.recipes import dataset_config
from pipeline.core.settings.base import ConfigError
from pipeline.workflow import cost


def test_forward_flops_by_hand():
    # 1 layer, h 2, i 4, 3 tokens: 3 x (8*4 + 4*2*4 + 4*3*2) = 3 x 88
    assert cost.forward_flops({"layers": 1, "hidden": 2, "intermediate": 4}, 3) == 264
    # BERT-base at 159 tokens is ~7.7x MiniLM's FLOPs: the derivation's ratio
    data = cost.load_data()
    ratio = cost.forward_flops(data["architectures"]["bert-base-uncased"], 159) / cost.forward_flops(
        data["architectures"]["minilm"], 159
    )
    assert 7.5 < ratio < 8.0


def test_parse_plan_reads_rule_wildcards_and_resources():
    text = (
        "[Fri Nov 27 11:37:55 2026]\nrule encode_corpus:\n    jobid: 3\n"
        "    wildcards: dataset=nq, model=dpr, shard=1\n    threads: 8\n"
        "    resources: tmpdir=/tmp, mem_mb=4000, runtime=240, gpus=1, gpu=1\nShell command: x\n\n"
        "[Fri Nov 27 11:37:55 2026]\nlocalrule all:\n    jobid: 0\n"
    )
    jobs = cost.parse_plan(text)
    assert [j.rule for j in jobs] == ["encode_corpus", "all"]
    assert jobs[0].wildcards == {"dataset": "nq", "model": "dpr", "shard": "1"}
    assert jobs[0].resources["gpus"] == "1" and jobs[1].resources == {}


def _job(rule: str, **wildcards: str) -> cost.PlannedJob:
    return cost.PlannedJob(rule, {"dataset": "nq", **wildcards}, {"gpus": "4", "runtime": "360"})


def test_training_work_counts_steps_as_the_loop_does():
    data = cost.load_data()
    cfg = dataset_config(load_config(), "nq")
    sizes = {"passages": 1000, "queries": {"train": 1000, "dev": 10, "test": 10}}
    sizes |= {"passage_tokens": 100, "query_tokens": 10}
    work = cost.job_work(data, _job("train_dpr"), cfg, sizes)
    # 1000 // 128 = 7 steps per epoch (the trailing part-batch is dropped) x 40 epochs
    assert work.count == 7 * 40 and work.unit == "steps" and work.gpus == 4 and work.runtime_min == 360
    arch = data["architectures"]["bert-base-uncased"]
    # a training batch pads to its longest: questions x 1.30, passages x 1.56 (throughputs.yaml padding)
    step = 128 * cost.forward_flops(arch, 10 * 1.30) + 128 * 2 * cost.forward_flops(arch, 100 * 1.56)
    assert work.parts == [cost.Part("train", "bert-base-uncased", 280, "steps", 3 * step)]
    # encoding sorts by length and pads little: the mean
    shard = cost.job_work(data, _job("encode_corpus", model="dpr", shard="0"), cfg, sizes)
    assert shard.count == 500 and shard.parts[0].flops == cost.forward_flops(arch, 100)


def test_training_is_priced_padded_and_capped_at_max_len():
    """Training was priced at the mean token counts while its batches pad to their longest."""
    data = cost.load_data()
    cfg = dataset_config(load_config(), "nq")
    sizes = {"passages": 1000, "queries": {"train": 1000, "dev": 10, "test": 10}}
    sizes |= {"passage_tokens": 200, "query_tokens": 10}
    arch = data["architectures"]["bert-base-uncased"]
    work = cost.job_work(data, _job("train_dpr"), cfg, sizes)
    p_len = cfg["model"]["passage_max_len"]  # 200 x 1.56 is past it: no text is longer than max_len
    unpadded = 128 * cost.forward_flops(arch, 10) + 128 * 2 * cost.forward_flops(arch, min(200, p_len))
    assert work.parts[0].flops > 3 * unpadded
    assert work.parts[0].flops == 3 * (
        128 * cost.forward_flops(arch, 13.0) + 256 * cost.forward_flops(arch, min(200 * 1.56, p_len))
    )


def test_v100_training_is_calibrated_on_dpr_and_keeps_ar2_in_range():
    """DPR's reported day on 8 V100s came out ~4.5x low (42 of 192 GPU-h); one AR2 round must stay
    near the sieve paper's Table 6."""
    data = cost.load_data()
    checks = {c.name: c for c in cost.paper_checks(data)}
    dpr, ar2 = checks["dpr_nq"], checks["ar2_tq_round"]
    assert dpr.low <= dpr.model_gpu_hours <= dpr.high and dpr.uncalibrated_gpu_hours < dpr.low
    assert 0.8 < ar2.ratio < 1.5
    # the calibrated figure is training's alone: the V100's inference rate is the reference's
    assert (
        cost.rate(data, "v100", "infer", "bert-base-uncased").flops_per_s
        == cost.rate({**data, "train_efficiency": {}}, "v100", "infer", "bert-base-uncased").flops_per_s
    )
    fp32 = cost.rate(data, "v100", "train", "bert-base-uncased", "fp32").flops_per_s
    mixed = cost.rate(data, "v100", "train", "bert-base-uncased", "bf16").flops_per_s
    assert fp32 == pytest.approx(0.22 * mixed)
    table = cost.paper_table(list(checks.values()))
    assert max(len(line) for line in table.splitlines()) < 150


def test_rates_say_whether_they_are_measured_or_derived(tmp_path):
    data = cost.load_data()
    direct = cost.rate(data, "v100", "infer", "bert-base-uncased")
    assert direct.entry["status"] == "reference" and not direct.derived
    derived = cost.rate(data, "h200", "train", "bert-base-uncased")
    assert derived.derived and derived.entry["id"] == "h200-minilm-encode-fp16-159tok"
    # a GPU check's figure of that kind wins, as measured
    measured = tmp_path / "m.json"
    entry = {"id": "h200-bert-base-dpr-step", "gpu": "h200", "kind": "train", "model": "bert-base-uncased"}
    entry |= {"value": 4.0, "status": "measured", "step": [[128, 64], [256, 256]]}
    measured.write_text(json.dumps({"throughputs": [entry]}))
    with_check = cost.load_data([measured])
    r = cost.rate(with_check, "h200", "train", "bert-base-uncased")
    assert not r.derived and r.entry["id"] == "h200-bert-base-dpr-step"
    arch = data["architectures"]["bert-base-uncased"]
    assert r.flops_per_s == 4.0 * 3 * (
        128 * cost.forward_flops(arch, 64) + 256 * cost.forward_flops(arch, 256)
    )


def test_a_bad_measured_entry_names_the_file_and_the_entry(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(
        json.dumps([{"id": "x", "gpu": "h100", "kind": "train", "model": "m", "status": "measured"}])
    )
    with pytest.raises(ConfigError, match=r"bad.json: throughput 0 \(x\): missing value"):
        cost.load_data([bad])


def test_runtime_rounds_up_with_margin_and_floor():
    assert cost.runtime_hours(1.01, 2.0, 2) == 3
    assert cost.runtime_hours(0.1, 2.0, 2) == 2
    assert cost.runtime_hours(2.5, 2.0, 1) == 5


@pytest.fixture(scope="module")
def plans():
    return cost.recipe_plans()


@pytest.mark.slow  # plans three recipes with snakemake -n (once, module fixture)
def test_every_gpu_job_of_the_paper_recipes_is_costed(plans):
    data = cost.load_data()
    for recipe, (_dataset, costed, unknown) in cost.recipe_costs(data, data["profile_gpu"], plans).items():
        assert unknown == [], (recipe, sorted({j.rule for j in unknown}))
        assert costed and all(c.wall_h > 0 for c in costed), recipe


@pytest.mark.slow  # plans three recipes with snakemake -n (once, module fixture)
def test_docs_cluster_md_tables_are_current(plans):
    data = cost.load_data()
    text = cost.DOCS.read_text(encoding="utf-8")
    assert cost.docs_generated(text) == cost.docs_section(data, plans), (
        "docs/cluster.md is stale: python -m pipeline.workflow.cost --docs"
    )


@pytest.mark.slow  # plans three recipes with snakemake -n (once, module fixture)
def test_the_profile_runtimes_are_the_cost_models(plans):
    data = cost.load_data()
    derived = cost.profile_runtimes(data, cost.recipe_costs(data, data["profile_gpu"], plans))
    profile = yaml.safe_load((cost.PROFILE / "config.yaml").read_text(encoding="utf-8"))["set-resources"]
    given = {rule: profile[rule].get("runtime") for rule in derived}
    assert given == {rule: f"{hours}h" for rule, hours in derived.items()}

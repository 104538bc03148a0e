"""pipeline/workflow/resources.py: what each job reserves, computed from the data.

Hand-computed figures for the formulas, then the paper recipes' plans at their real sizes (NQ and TQ:
21M passages, MS MARCO: 8.8M; `snakemake -n` with the slurm profile, as the user's command plans them):
every job's memory, disk and runtime request is at least what its formula says it needs and fits a
partition of profiles/slurm/partitions.yaml, chosen by the SLURM plugin's own partition selection.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from snakemake_executor_plugin_slurm.partitions import read_partition_file

from pipeline.core.config import load_config
from pipeline.core.recipes import dataset_config
from pipeline.workflow import cost
from pipeline.workflow.resources import (
    MIB,
    Sizes,
    bytes_per_vector,
    cpu_hours,
    disk_mb,
    encoder_parameters,
    figures,
    folder_architecture,
    memory_mb,
    selection_mib,
)

PARTITIONS = cost.REPO / "profiles" / "slurm" / "partitions.yaml"
NQ = Sizes(passages=21_015_324, queries={"train": 58_880, "dev": 6_515, "test": 3_610}, dim=768)


@pytest.mark.parametrize(
    ("factory", "expected"),
    [
        ("Flat", 3072),  # 768 x fp32
        ("SQfp16", 1536),
        ("SQ8", 768),
        ("IVF4096,Flat", 3080),  # + the 8-byte id IVF keeps per vector
        ("IVF65536,PQ64", 72),  # 64 one-byte codes + the id
        ("OPQ64,IVF65536,PQ64", 72),  # the rotation stores nothing per vector
        ("HNSW32", 3072 + 256),  # vectors + 2 x 32 links of 4 bytes at level 0
        ("Nonsense42", 3072 + 64),  # unknown: raw fp32 plus 64, more than any known one stores
    ],
)
def test_bytes_per_vector_by_factory(factory, expected):
    assert bytes_per_vector(factory, 768) == expected


def test_the_flat_nq_index_is_60_gib_and_its_jobs_ask_for_it():
    cfg = {"index": {"factory": "Flat", "shards": 1, "train_size": 100_000}}
    index_mib = 21_015_324 * 3072 / MIB
    assert index_mib == pytest.approx(61_568, abs=1)  # 60.1 GiB
    assert memory_mb("build_index", cfg, NQ) == math.ceil((index_mib + 1024) * 1.5 + 512)
    assert memory_mb("search_dense", cfg, NQ) == math.ceil((index_mib + 3072) * 1.5 + 512)
    # two index parts: each job holds one part, searched one after the other
    halves = memory_mb("search_dense", {"index": {**cfg["index"], "shards": 2}}, NQ)
    assert halves == math.ceil((math.ceil(21_015_324 / 2) * 3072 / MIB + 3072) * 1.5 + 512)
    # fp16 storage halves the index
    assert memory_mb("build_index", {"index": {**cfg["index"], "factory": "SQfp16"}}, NQ) < 0.55 * memory_mb(
        "build_index", cfg, NQ
    )


def test_each_memory_line_passes_through_its_two_measured_points():
    for rule, line in figures()["memory_lines"].items():
        for units, mib in line["points"]:
            assert line["base_mib"] + line["per_unit_kib"] * units / 1024 == pytest.approx(mib, rel=0.02), (
                rule
            )


def test_the_parameter_count_is_the_shipped_minilm_s_and_bert_base_s():
    from safetensors import safe_open

    from pipeline.core.config import resolve_model_path

    folder = Path(resolve_model_path("minilm"))
    with safe_open(str(folder / "model.safetensors"), "np") as weights:
        stored = sum(
            math.prod(weights.get_slice(k).get_shape()) for k in weights.keys() if "position_ids" not in k
        )
    assert encoder_parameters(folder_architecture(str(folder))) == stored == 22_713_216
    published = yaml.safe_load((cost.REPO / "pipeline" / "workflow" / "throughputs.yaml").read_text())
    assert encoder_parameters(published["architectures"]["minilm"]) == stored
    assert encoder_parameters(published["architectures"]["bert-base-uncased"]) == 109_482_240  # BERT's 110M


def _selection_cfg(depth: int, length: int = 128, batch: int = 64) -> dict:
    return {"model": {"passage_max_len": length}, "encode": {"batch_size": batch}, "eval": {"depth": depth}}


def test_a_selection_s_measured_peaks_lie_at_or_below_its_sum_of_terms():
    """resources.yaml's points: select_model on synthkb_fn30_p50 (282 dev questions, 6,055 passages,
    MiniLM) at eval depths 20 and 100."""
    minilm = yaml.safe_load((cost.REPO / "pipeline" / "workflow" / "throughputs.yaml").read_text())
    sizes = Sizes(6_055, {"dev": 282}, 384, minilm["architectures"]["minilm"])
    for depth, peak in figures()["selection"]["points"]:
        assert peak <= selection_mib(_selection_cfg(depth), sizes) <= 1.1 * peak, depth


def test_an_nq_selection_asks_for_its_dev_candidates_by_hand():
    """BERT-base at 256 tokens, NQ's 6,515 dev questions x depth 100: every term by hand."""
    arch = {"layers": 12, "hidden": 768, "intermediate": 3072, "heads": 12, "vocab": 30_522}
    sizes = Sizes(NQ.passages, NQ.queries, 768, arch)
    rows = 6_515 * 100
    terms = (
        5 * 4 * 109_482_240  # the weights, five times
        + rows * (256 * (13 + 8) + 2 * 4 * 768)  # each row a passage: tokens, text, two embedding copies
        + rows * 512
        + 65_536 * 2 * 4 * 768  # one scoring chunk of the row pairs
        + 64 * 256 * 4 * (3 * 3072 + 2 * 12 * 256)  # one forward batch
    )
    need = 760 + terms / MIB
    assert selection_mib(_selection_cfg(100, 256), sizes) == pytest.approx(need)
    assert memory_mb("select_model", _selection_cfg(100, 256), sizes) == math.ceil(need * 1.5 + 512)
    # the fixed 6,000 MB it asked for before would have been killed: ~10.9 GiB at its peak
    assert need > 10_000
    # without the encoder's shape (or a folder's config.json without heads or vocabulary) the stage's
    # mem_mb setting stands
    assert memory_mb("select_model", _selection_cfg(100, 256), NQ) is None
    partial = Sizes(NQ.passages, NQ.queries, 768, {**arch, "heads": None})
    assert memory_mb("select_model", _selection_cfg(100, 256), partial) is None


def test_a_model_folder_s_config_gives_its_shape(tmp_path):
    config = {"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 256, "num_attention_heads": 4}
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert folder_architecture(str(tmp_path)) == {
        "layers": 2,
        "hidden": 64,
        "intermediate": 256,
        "heads": 4,
        "vocab": None,
    }
    (tmp_path / "config.json").write_text(json.dumps({**config, "vocab_size": 100}))
    assert folder_architecture(str(tmp_path))["vocab"] == 100


def test_stages_whose_need_does_not_grow_keep_their_setting():
    assert memory_mb("train_dpr", {}, NQ) is None and disk_mb("train_dpr", {}, NQ) is None


def test_disk_of_the_growing_outputs():
    cfg = {"encode": {"shards": 2}, "index": {"factory": "Flat"}, "bm25": {"negatives": 100}}
    shard = math.ceil(21_015_324 / 2) * 768 * 2 / MIB  # fp16 embeddings
    assert disk_mb("encode_corpus", cfg, NQ) == math.ceil(shard * 1.2)
    assert disk_mb("build_index", cfg, NQ) == math.ceil(21_015_324 * 3072 / MIB * 1.2)
    assert disk_mb("mine_bm25_negatives", cfg, NQ) == math.ceil(58_880 * 100 * 18 / MIB * 1.2)


def test_bm25_mining_cpu_hours_count_questions_times_passages():
    assert cpu_hours("mine_bm25_negatives", NQ) == pytest.approx(58_880 * 21_015_324 * 2.27e-8 / 3600)
    assert cpu_hours("train_dpr", NQ) is None


# ---- the paper recipes' plans at their real sizes ----------------------------------------------------


@pytest.fixture(scope="module")
def plans():
    return cost.recipe_plans()


def _job(resources: dict) -> SimpleNamespace:
    """What the SLURM plugin's partition scoring reads of a job."""
    values = {k: (int(v) if str(v).isdigit() else v) for k, v in resources.items()}
    return SimpleNamespace(
        resources=SimpleNamespace(get=lambda key, default=None: values.get(key, default)),
        threads=int(values.get("cpus_per_task", 1) or 1),
        name="job",
        is_group=lambda: False,
    )


def _need_mb(rule: str, cfg: dict, sizes: Sizes) -> float | None:
    """What a job cannot do without, computed here apart from resources.py: the FAISS index part it
    holds, or the BM25 stage's measured line, without headroom."""
    lines = figures()["memory_lines"]
    if rule == "build_index" or rule.startswith(("search_dense", "ar2_search", "ar2_mine")):
        part = math.ceil(sizes.passages / cfg["index"]["shards"])
        return part * bytes_per_vector(cfg["index"]["factory"], sizes.dim) / MIB
    if rule in lines and lines[rule]["unit"] == "passages":
        return lines[rule]["base_mib"] + lines[rule]["per_unit_kib"] * sizes.passages / 1024
    return None


@pytest.mark.slow
def test_every_job_of_the_paper_plans_asks_at_least_its_need_and_fits_a_partition(plans):
    partitions = {p.name: p for p in read_partition_file(PARTITIONS)}
    cap = min(p.limits.max_runtime for p in partitions.values())
    assert cap <= 24 * 60
    config = load_config()
    checked = 0
    for recipe, (dataset, jobs) in plans.items():
        cfg = dataset_config(config, dataset)
        sizes = _sizes(cfg, dataset)
        assert sizes.passages > 8_000_000, (recipe, sizes)
        for job in jobs:
            res = job.resources
            where = f"{recipe}: {job.rule} {job.wildcards}"
            assert int(res["runtime"]) <= cap, (
                f"{where}: runtime {res['runtime']} min over the {cap}-minute cap"
            )
            need = _need_mb(job.rule, cfg, sizes)
            if need is not None:
                assert int(res["mem_mb"]) >= need, f"{where}: mem_mb {res['mem_mb']} < need {need:.0f}"
                checked += 1
            if job.rule in ("encode_corpus", "ar2_encode_corpus"):
                shard = math.ceil(sizes.passages / cfg["encode"]["shards"]) * sizes.dim * 2 / MIB
                assert int(res["disk_mb"]) >= shard, where
            fits = {n: p.score_job_fit(_job(res)) for n, p in partitions.items()}
            fits = {n: s for n, s in fits.items() if s is not None}
            assert fits, f"{where}: no partition of {PARTITIONS.name} fits {res}"
            chosen = max(fits, key=fits.get)
            holds_gpu = int(res.get("gpu", 0) or 0) > 0
            assert (partitions[chosen].limits.max_gpu > 0) == holds_gpu, f"{where}: placed on {chosen}"
    assert checked > 20


def _sizes(cfg: dict, dataset: str) -> Sizes:
    from pipeline.workflow.resources import dataset_sizes

    return dataset_sizes(cfg, dataset, cost.REPO / "no-such-folder")


def test_the_profile_points_to_the_partitions_and_asks_no_gres():
    profile = yaml.safe_load((cost.REPO / "profiles" / "slurm" / "config.yaml").read_text())
    assert profile["slurm-partition-config"] == "profiles/slurm/partitions.yaml"
    assert "slurm_partition" not in profile["default-resources"]
    for rule, res in profile["set-resources"].items():
        assert "gres" not in res, f"{rule}: gres beside gpu is two GPU requests (the plugin refuses it)"


@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["paper", "paper_tq", "paper_msmarco"])
def test_each_bm25_stage_finishes_within_its_jobs(plans, recipe):
    """A BM25 stage's work at its measured rate fits the time its jobs ask: one job, or for the mining,
    which continues from its finished chunks, 1 + SEGMENT_RETRIES jobs, each chunk well inside one."""
    from pipeline.retrieval.bm25 import MINE_CHUNK
    from pipeline.workflow.resources import SEGMENT_RETRIES

    dataset, jobs = plans[recipe]
    sizes = _sizes(dataset_config(load_config(), dataset), dataset)
    for job in jobs:
        hours = cpu_hours(job.rule, sizes)
        if hours is None:
            continue
        asked = int(job.resources["runtime"]) / 60
        if job.rule == "mine_bm25_negatives":
            chunk = hours * min(1.0, MINE_CHUNK / sizes.queries["train"])
            assert chunk < asked / 4, f"{recipe}: a chunk takes {chunk:.1f} h of the job's {asked:g} h"
            asked *= 1 + SEGMENT_RETRIES
        assert asked >= hours, f"{recipe}: {job.rule} asks {asked:g} h, its work takes {hours:.1f} CPU-h"

"""The CUDA paths, on a GPU: training in fp32, bf16 and fp16 (GradScaler) killed and resumed, a GPU
checkpoint resumed on the CPU, fp16 encoding against the CPU's fp32, exact search on the GPU against
the CPU, and the training and encoding CLIs with ``--device cuda``.

Skipped where torch sees no CUDA device (CI has none); run them on a GPU machine with
``pytest -m cuda tests/test_cuda.py``. The other test files run their stages with ``--device auto``,
so on a GPU machine they take the CUDA paths too.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from stage_args import encode_corpus

from pipeline.core.distributed import DistInfo
from pipeline.retrieval import embeddings as E
from pipeline.retrieval import encode
from pipeline.retrieval.search import search_torch
from pipeline.training.checkpoint import STATE_FILE, read_checkpoint
from pipeline.training.data import TrainData, TrainInputs
from pipeline.training.engine import LOG_FILE
from pipeline.training.loop import train

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

GPU = DistInfo(device=torch.device("cuda", 0))


@pytest.fixture(scope="module")
def setup(tmp_path_factory, make_train_files, tiny_model_dir):
    root = tmp_path_factory.mktemp("cuda")
    paths = make_train_files(root / "data", n_queries=16, n_passages=48)
    model_dir = tiny_model_dir(root)
    data = TrainData(TrainInputs(**paths), depth=5, seed=3)
    return root, model_dir, data, paths


def _crash_then_resume(retriever_factory, data, cfg, folder, train_until_crash, resume_on: DistInfo) -> tuple:
    """Train on the GPU until step 4 ends in a crash (checkpoint at 3), then rerun on ``resume_on``."""
    train_until_crash(retriever_factory(), data, cfg, folder, dist_info=GPU)
    resumed = retriever_factory()
    return resumed, train(resumed, data, cfg, checkpoint_dir=folder, dist_info=resume_on)


def _weights(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().float().cpu().clone() for k, v in model.state_dict().items()}


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return max(float((a[k] - b[k]).abs().max()) for k in a)


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_training_killed_on_the_gpu_resumes_to_the_weights_of_an_uninterrupted_run(
    resume_config, setup, tmp_path, precision, tiny_retriever, train_until_crash
):
    _, model_dir, data, _ = setup
    cfg = resume_config(precision=precision)
    start = _weights(tiny_retriever(model_dir))

    reference = tiny_retriever(model_dir)
    summary = train(reference, data, cfg, checkpoint_dir=tmp_path / "ref.ckpt", dist_info=GPU)
    assert summary["compute_precision"] == precision
    again = tiny_retriever(model_dir)
    train(again, data, cfg, checkpoint_dir=tmp_path / "again.ckpt", dist_info=GPU)

    resumed, summary = _crash_then_resume(
        lambda: tiny_retriever(model_dir), data, cfg, tmp_path / "run.ckpt", train_until_crash, GPU
    )
    assert summary["start_step"] == 3

    ref, res = _weights(reference), _weights(resumed)
    moved = _max_diff(start, ref)
    rerun = _max_diff(ref, _weights(again))
    gap = _max_diff(ref, res)
    print(f"{precision}: moved {moved:.3g}, rerun differs by {rerun:.3g}, resumed differs by {gap:.3g}")
    assert moved > 1e-3  # training moved the weights, or the comparison would prove nothing
    # A resume that lost the optimizer, scheduler, scaler or RNG state differs by a share of `moved`;
    # CUDA's atomics (embedding backward) may make two identical runs differ in the last bits.
    assert gap <= max(2 * rerun, 1e-6), (gap, rerun, moved)

    ref_log = [json.loads(line) for line in (tmp_path / "ref.ckpt" / LOG_FILE).open()]
    res_log = [json.loads(line) for line in (tmp_path / "run.ckpt" / LOG_FILE).open()]
    assert [r["step"] for r in res_log] == [1, 2, 3, 4, 5, 6]
    assert np.allclose([r["loss"] for r in ref_log], [r["loss"] for r in res_log], rtol=1e-3, atol=1e-4)
    state = read_checkpoint(tmp_path / "run.ckpt" / STATE_FILE)
    assert "cuda" in state["rng"]
    if precision == "fp16":
        ref_scaler = read_checkpoint(tmp_path / "ref.ckpt" / STATE_FILE)["state"]["scaler"]
        assert state["state"]["scaler"]["scale"] == ref_scaler["scale"]
    else:
        assert "scaler" not in state["state"]


def test_a_gpu_checkpoint_resumes_on_the_cpu(
    resume_config, setup, tmp_path, tiny_retriever, train_until_crash
):
    """A job preempted on a GPU node and rerun on a CPU node continues (fp32 on both)."""
    _, model_dir, data, _ = setup
    cfg = resume_config(precision="fp32")
    resumed, summary = _crash_then_resume(
        lambda: tiny_retriever(model_dir), data, cfg, tmp_path / "c", train_until_crash, DistInfo()
    )
    assert summary["start_step"] == 3 and summary["steps"] == 6
    assert all(p.device.type == "cpu" for p in resumed.parameters())


def test_fp16_encoding_on_the_gpu_matches_fp32_on_the_cpu(setup, tmp_path, tiny_retriever):
    _, model_dir, _, paths = setup
    outs = {}
    for name, device, amp in [("cpu", torch.device("cpu"), False), ("gpu", torch.device("cuda", 0), True)]:
        retriever = tiny_retriever(model_dir, dropout=False).to(device).eval()
        encode.encode_table(
            retriever,
            paths["corpus"],
            tmp_path / name,
            0,
            1,
            batch_size=8,
            device=device,
            amp=amp,
            progress=False,
        )
        E.gather(tmp_path / name, 1, model="tiny", source="corpus")
        outs[name] = E.EmbeddingSet(tmp_path / name)
    cpu = np.concatenate([c for _, c in outs["cpu"].iter_rows(1 << 20)]).astype(np.float32)
    gpu = np.concatenate([c for _, c in outs["gpu"].iter_rows(1 << 20)]).astype(np.float32)
    assert outs["cpu"].ids().equals(outs["gpu"].ids())
    cos = (cpu * gpu).sum(1) / np.linalg.norm(cpu, axis=1) / np.linalg.norm(gpu, axis=1)
    print(f"fp16 GPU vs fp32 CPU encoding: min cosine {cos.min():.6f}")
    assert cos.min() > 0.999


def test_exact_search_on_the_gpu_ranks_as_on_the_cpu(tmp_path):
    rng = np.random.default_rng(0)
    passages = rng.standard_normal((5000, 32)).astype(np.float16)
    passages[10] = passages[11]  # a tie: broken by pid, on both devices
    npy, ids = E.shard_paths(tmp_path / "emb", 0, 1)
    with E.EmbeddingWriter(npy, ids, len(passages), passages.shape[1]) as writer:
        writer.write([f"p{i:05d}" for i in range(len(passages))], passages)
    E.gather(tmp_path / "emb", 1, model="random", source="random")
    queries = rng.standard_normal((64, 32)).astype(np.float32)
    queries[0] = passages[10].astype(np.float32)
    cpu_rows, cpu_scores, _ = search_torch(tmp_path / "emb", queries, 20, chunk_rows=1024, progress=False)
    gpu_rows, gpu_scores, _ = search_torch(
        tmp_path / "emb", queries, 20, chunk_rows=1024, device=torch.device("cuda", 0), progress=False
    )
    assert np.allclose(cpu_scores, gpu_scores, atol=1e-3)
    # Rank by rank the same passages, except where two scores are within float32 rounding.
    same = cpu_rows == gpu_rows
    close = np.abs(np.diff(cpu_scores, axis=1)) < 1e-4
    assert same[:, 0].all() or close[~same[:, 0], 0].all()
    assert (same | np.pad(close, ((0, 0), (0, 1))) | np.pad(close, ((0, 0), (1, 0)))).all()
    assert list(cpu_rows[0, :2]) == [10, 11] == list(gpu_rows[0, :2])


def test_the_training_and_encoding_clis_run_on_the_gpu(setup, tmp_path):
    from pipeline.training import train_dense

    root, model_dir, _, paths = setup
    out = tmp_path / "model"
    argv = [
        "--init", str(model_dir), "--corpus", str(paths["corpus"]), "--queries", str(paths["queries"]),
        "--qrels", str(paths["qrels"]), "--negatives", str(paths["negatives"]), "--out", str(out),
        "--device", "cuda", "--precision", "bf16", "--max-steps", "4", "--batch-size", "4",
        "--hard-negatives", "2", "--negatives-depth", "5", "--query-max-len", "16", "--passage-max-len", "32",
    ]  # fmt: skip
    assert train_dense.main(argv) == 0
    info = json.loads((out / "train_info.json").read_text())
    assert info["summary"]["compute_precision"] == "bf16", info
    emb = tmp_path / "emb"
    encode_corpus(out, paths["corpus"], emb, 1, "--device", "cuda", "--no-progress")
    assert E.EmbeddingSet(emb).count == 48


def test_encode_backend_openvino_on_a_gpu_job_encodes_with_torch_on_the_gpu(setup, tmp_path):
    """encode.backend openvino is the CPU path: a job a cluster profile gave a GPU encodes with torch
    there (and says so) instead of failing, without importing OpenVINO."""
    _, model_dir, _, paths = setup
    common = ["--model", str(model_dir), "--corpus", str(paths["corpus"]), "--shard", "0", "--shards", "1"]
    argv = ["corpus", *common, "--out-dir", str(tmp_path / "ov"), "--backend", "openvino"]
    assert encode.main(argv + ["--device", "cuda", "--no-progress", "--log", str(tmp_path / "ov.log")]) == 0
    assert "so torch encodes on it" in (tmp_path / "ov.log").read_text()
    argv = ["corpus", *common, "--out-dir", str(tmp_path / "torch"), "--backend", "torch"]
    assert encode.main(argv + ["--device", "cuda", "--no-progress"]) == 0
    a = np.load(tmp_path / "ov" / "shard0of1.npy")
    b = np.load(tmp_path / "torch" / "shard0of1.npy")
    np.testing.assert_array_equal(a, b)

"""scripts/gpu_check.sh's parts on CPU at tiny sizes: bench/paper_shapes.py's figures are what the cost
model reads back (--measured), and bench/gpu_scale.py matches GPU memory readings to Snakemake jobs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.workflow import cost

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

import gpu_scale  # noqa: E402  (bench/, beside the scripts that run it)


@pytest.mark.slow
def test_paper_shapes_small_on_cpu_feeds_the_cost_model(tmp_path):
    out = tmp_path / "shapes.json"
    cmd = [sys.executable, str(REPO / "bench" / "paper_shapes.py"), "--device", "cpu", "--small"]
    cmd += ["--steps", "1", "--warmup", "1", "--parts", "encode", "dpr", "search", "--out", str(out)]
    subprocess.run(cmd, check=True, cwd=REPO, capture_output=True)
    record = json.loads(out.read_text())
    assert [e["kind"] for e in record["throughputs"]] == ["infer", "train", "search"] and not record["failed"]
    data = cost.load_data([out])
    for kind in ("infer", "train", "search"):
        r = cost.rate(data, "cpu", kind, "tiny-base")
        assert r.entry["status"] == "measured" and r.flops_per_s > 0 and not r.derived


def test_gpu_memory_readings_are_matched_to_jobs_by_their_log(tmp_path):
    peaks = tmp_path / "peaks.jsonl"
    argv = ["x/encode.py", "corpus", "--log", "logs/encode_corpus/scale.dpr.0.log"]
    peaks.write_text(json.dumps({"pid": 41, "argv": argv, "peak_allocated_gib": 1.5}) + "\n")
    by_job, pids = gpu_scale.read_peaks(peaks)
    assert by_job == {"encode_corpus/scale.dpr.0": 1.5} and pids == {41: "encode_corpus/scale.dpr.0"}
    smi = tmp_path / "smi.csv"
    smi.write_text("41, 900\n41, 1200\n77, 5000\n")  # pid 77 is no job of the run
    assert gpu_scale.read_smi(smi, pids) == {"encode_corpus/scale.dpr.0": 1200}
    assert gpu_scale.job_key(["python", "-m", "x"]) is None

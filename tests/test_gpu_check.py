"""scripts/gpu_check.sh's parts on CPU: bench/paper_shapes.py's figures are what the cost model reads back
(--measured), bench/gpu_scale.py matches GPU memory readings to Snakemake jobs, each timed step ends every
process it started (scripts/timed.py), the steps' limits fit 8 minutes, the carried total is checked
before anything, the pre-flight names what is missing, and MiniLM's packed weights restore."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
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


# ---- the timed steps --------------------------------------------------------------------------------

# A Snakemake-like step: its job runs in a session of its own (setsid), writes its pid, and outlives
# the step unless something ends it.
JOB = """
import os, subprocess, sys, time
subprocess.Popen([sys.executable, "-c", "import os, sys, time; os.setsid(); "
                  "open(sys.argv[1] + '.tmp', 'w').write(str(os.getpid())); "
                  "os.rename(sys.argv[1] + '.tmp', sys.argv[1]); time.sleep(60)", sys.argv[1]])
while not os.path.exists(sys.argv[1]):  # the job is running before the step can end
    time.sleep(0.01)
time.sleep(float(sys.argv[2]))
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _job_pid(pid_file: Path) -> int:
    for _ in range(200):  # the job writes its pid right after it starts; wait for the file, not a time
        if pid_file.is_file() and pid_file.read_text():
            return int(pid_file.read_text())
        time.sleep(0.05)
    raise AssertionError(f"{pid_file} never written")


def _timed(seconds: float, *command: str) -> subprocess.CompletedProcess:
    timed = [sys.executable, str(REPO / "scripts" / "timed.py"), str(seconds), "step", "--"]
    return subprocess.run(timed + list(command), capture_output=True, text=True)


def test_gnu_timeout_leaves_a_job_in_its_own_session_running(tmp_path):
    # what the check used before, kept as the control: the job survives the step's timeout
    pid_file = tmp_path / "job.pid"
    subprocess.run(["timeout", "2", sys.executable, "-c", JOB, str(pid_file), "30"])
    pid = _job_pid(pid_file)
    try:
        assert _alive(pid)
    finally:
        os.kill(pid, 9)


def test_a_step_at_its_limit_ends_a_job_in_its_own_session(tmp_path):
    pid_file = tmp_path / "job.pid"
    done = _timed(2, sys.executable, "-c", JOB, str(pid_file), "30")
    pid = _job_pid(pid_file)
    alive = _alive(pid)
    if alive:
        os.kill(pid, 9)
    assert done.returncode == 124 and not alive, done.stderr
    assert (
        "[step step] stopped at its 2 s limit" in done.stderr
        and "process(es) of the step ended" in done.stderr
    )


def test_a_step_that_ends_leaves_no_job_behind(tmp_path):
    # Snakemake killed by its own --timeout, its jobs orphaned: the step's end takes them too
    pid_file = tmp_path / "job.pid"
    done = _timed(60, sys.executable, "-c", JOB + "sys.exit(3)\n", str(pid_file), "0")
    pid = _job_pid(pid_file)
    alive = _alive(pid)
    if alive:
        os.kill(pid, 9)
    assert done.returncode == 3 and not alive, done.stderr
    assert "[step step] exit 3" in done.stderr


def test_the_steps_limits_fit_eight_minutes():
    for args in ([], ["--device", "cpu", "--small"]):
        done = subprocess.run(
            ["bash", str(REPO / "scripts" / "gpu_check.sh"), "--budget", *args],
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr
        line = done.stdout.strip()
        limits = [int(part.rsplit(" ", 1)[1]) for part in line.split(": ", 1)[1].split(" s;")[0].split(", ")]
        worst = int(line.split("worst case ")[1].split(" ")[0])
        kill = int(line.split(" with ")[1].split(" ")[0])
        assert worst == sum(limits) + kill * len(limits) and worst <= 480, line
    assert (
        "cuda"
        in subprocess.run(
            ["bash", str(REPO / "scripts" / "gpu_check.sh"), "--budget"], capture_output=True, text=True
        ).stdout
    )


# ---- what is carried, and the pre-flight ---------------------------------------------------------------


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    for name in ("gpu_carry.py", "gpu_preflight.py"):
        shutil.copy(REPO / "scripts" / name, repo / "scripts" / name)
    (repo / "pyproject.toml").write_text('[project]\nrequires-python = ">=3.11"\n')
    (repo / ".gitignore").write_text("results/\n.gpu_bundle/\n")
    (repo / "tracked.bin").write_bytes(b"x" * 3 * 2**20)
    (repo / "results").mkdir()
    (repo / "results" / "ignored.bin").write_bytes(b"x" * 50 * 2**20)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "-A"], check=True)
    subprocess.run(git + ["commit", "-qm", "t"], check=True)
    (repo / "untracked.bin").write_bytes(b"x" * 2**20)  # copied by the transfer too
    return repo


def _carry(repo: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(repo / "scripts" / "gpu_carry.py"), "--repo", str(repo), *args]
    return subprocess.run(cmd, capture_output=True, text=True)


def test_the_carried_total_counts_tracked_and_untracked_files_and_the_bundle(tmp_path):
    repo = _repo(tmp_path)
    bundle = repo / ".gpu_bundle"
    bundle.mkdir()
    with open(bundle / "site-common.tar.xz", "wb") as handle:
        handle.truncate(58 * 2**20)  # sparse: the size counts, not the disk
    done = _carry(repo)
    assert done.returncode == 0 and "bundle 58.0 MiB + tree 4.0 MiB = 62.0 MiB fits" in done.stdout, (
        done.stdout
    )
    (repo / "more.bin").write_bytes(b"x" * 3 * 2**20)
    done = _carry(repo)
    assert done.returncode == 1 and "= 65.0 MiB OVER the 64 MiB transfer" in done.stdout, done.stdout
    # without git (the node's copy has no .git): the walk skips what .gitignore names
    shutil.rmtree(repo / ".git")
    done = _carry(repo)
    assert done.returncode == 1 and "tree 7.0 MiB" in done.stdout, done.stdout


def test_the_check_stops_before_installing_anything_when_the_carried_total_is_over(tmp_path):
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    with open(bundle / "site-common.tar.xz", "wb") as handle:
        handle.truncate(70 * 2**20)
    site = tmp_path / "site"
    env = {**os.environ, "GPU_BUNDLE": str(bundle), "SIEVE_SITE": str(site), "OUT": str(tmp_path / "out")}
    env["PYTHON"] = sys.executable
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "gpu_check.sh"), "--device", "cpu", "--small"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
    )
    assert done.returncode == 1 and "OVER the 64 MiB transfer" in done.stdout, done.stdout + done.stderr
    assert "pre-flight failed" in done.stdout and not site.exists()


def test_the_preflight_names_the_python_files_the_bundle_lacks(tmp_path):
    repo = _repo(tmp_path)
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "site-common.tar.xz").write_bytes(b"")
    (bundle / "site-cp399.tar.xz").write_bytes(b"")
    cmd = [sys.executable, str(repo / "scripts" / "gpu_preflight.py"), "before", "--bundle", str(bundle)]
    done = subprocess.run(cmd + ["--device", "cpu"], capture_output=True, text=True)
    tag = "cp%d%d" % sys.version_info[:2]
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1, done.stdout + done.stderr
    assert f"missing: the bundle's files for {tag} (built for: cp399)" in lines[0]
    (bundle / f"site-{tag}.tar.xz").write_bytes(b"")
    done = subprocess.run(cmd + ["--device", "cpu"], capture_output=True, text=True)
    assert done.returncode == 0 and "nothing missing" in done.stdout, done.stdout
    (repo / "pyproject.toml").write_text('[project]\nrequires-python = ">=3.99"\n')
    done = subprocess.run(cmd + ["--device", "cpu"], capture_output=True, text=True)
    assert done.returncode == 1 and "missing: Python >= 3.99" in done.stdout, done.stdout


def test_minilm_packed_to_int8_per_row_restores_within_half_a_step(tmp_path):
    import torch
    from safetensors.torch import load_file, save_file

    sys.path.insert(0, str(REPO / "scripts"))
    import gpu_minilm

    torch.manual_seed(0)
    weights = {
        "embeddings.word_embeddings.weight": torch.randn(50, 8) * torch.logspace(-3, 0, 50)[:, None],
        "encoder.layer.0.dense.weight": torch.randn(8, 8),
        "encoder.layer.0.dense.bias": torch.randn(8),
        "embeddings.position_ids": torch.arange(8),
    }
    save_file(weights, tmp_path / "model.safetensors")
    kinds = gpu_minilm.pack(
        str(tmp_path / "model.safetensors"), str(tmp_path / "packed.safetensors"), "matrices"
    )
    assert kinds == {"int8": 2, "fp16": 1, "kept": 1}
    gpu_minilm.unpack(str(tmp_path / "packed.safetensors"), str(tmp_path / "restored.safetensors"))
    restored = load_file(tmp_path / "restored.safetensors")
    for name in ("embeddings.word_embeddings.weight", "encoder.layer.0.dense.weight"):
        row_step = weights[name].abs().amax(dim=1, keepdim=True) / 127
        assert restored[name].dtype == torch.float32
        assert ((restored[name] - weights[name]).abs() <= row_step / 2 + 1e-7).all(), (
            name
        )  # per row, small rows too
    assert torch.equal(restored["embeddings.position_ids"], weights["embeddings.position_ids"])
    assert torch.allclose(
        restored["encoder.layer.0.dense.bias"], weights["encoder.layer.0.dense.bias"], atol=1e-3
    )

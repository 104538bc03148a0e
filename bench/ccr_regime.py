"""Does CCR separate false from true negatives, and in which β regime?

    .venv/bin/python bench/ccr_regime.py --dataset synthkb_fn30_p50 --overlay OVERLAY.yaml \
        --betas 0 0.5 1 3 6 --taus 1 0.05 --seeds 0 1 2 --out docs/data/ccr_regime/fn30_p50.jsonl
    .venv/bin/python bench/ccr_regime.py ... --table     # the table of what --out holds so far

For every seed s, τ and effective β (relative to NCE, ``ccr.scale`` paper unless --scale), it
fine-tunes the dataset's DPR of seed s (models/dpr for the config's seed, models/dpr-s<s> for the
others) exactly as the train_ccr rule would (the dataset's ``ccr`` settings, only β and τ replaced),
scores the sieve's candidates (results/<d>/sieve/candidates<tag>.parquet) with it exactly as the
sieve_negatives rule would, and writes the sieve report (pipeline.sieve.report). Per seed it also
scores the candidates with the DPR itself (scorer "dpr": the sieve without CCR). It runs the stages'
own CLIs, one after the other, so the numbers are the pipeline's.

What it reports per (scorer, τ, β), mean over seeds with a 95% t-interval: the per-query separation
(each query's true vs false negatives, τ-free), the pooled separation (Figure 1's, τ-dependent), the
sieve's FN recall, TN kept and sieve-out rate, and the per-query separation paired by seed with the
DPR scorer (CCR − no CCR). Prerequisites are the DAG's: build them with

    snakemake --cores 2 --configfile config.yaml OVERLAY.yaml -- results/<d>/models/dpr/retriever.json \
        results/<d>/models/dpr-s1/retriever.json ... results/<d>/sieve/candidates.parquet

One JSON line per cell is appended to --out as soon as it is done: a killed run rerun skips the cells
already there. The CCR models are deleted after scoring (--keep-models keeps them).
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.core.config import load_config
from pipeline.core.methods import method_table, sieve_tag
from pipeline.core.recipes import dataset_config
from pipeline.core.settings.flags import to_flags
from pipeline.evaluation.seed_stats import mean_std, paired_difference, t_quantile
from pipeline.retrieval.settings import RETRIEVER_KEYS, ModelSettings
from pipeline.sieve.settings import SIEVE_DECISION_KEYS, SieveSettings
from pipeline.training.settings import TrainSettings

REPORTED = {
    "per_query_auc": "separation_auc_per_query",
    "pooled_auc": "separation_auc",
    "fn_recall": "recall",
    "tn_kept": "true_negative_retention",
    "sieve_out": "sieve_out_rate",
}


def candidates_path(cfg: dict, d: str) -> Path:
    """The sieve's candidates under the dataset's sieve settings (their tag, as the rules name them)."""
    table, source = method_table(cfg), cfg["sieve"]["source"]
    tag = sieve_tag(cfg["sieve"], table[source].run if source in table else source)
    return Path("results") / d / "sieve" / f"candidates{tag}.parquet"


def _model_folder(results: Path, name: str, seed: int, config_seed: int) -> Path:
    return results / "models" / (name if seed == config_seed else f"{name}-s{seed}")


def _run(cmd: list[str], log: Path) -> None:
    started = time.time()
    with open(log, "a", encoding="utf-8") as out:
        out.write("$ " + shlex.join(cmd) + "\n")
        out.flush()
        done = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode:
        raise SystemExit(
            f"failed ({done.returncode}) after {time.time() - started:.0f} s: {shlex.join(cmd)}; see {log}"
        )


def train_ccr(
    cfg: dict, d: str, init: Path, out: Path, seed: int, beta: float, tau: float, scale: str, log: Path
) -> None:
    ccr = {**cfg["ccr"], "temperature": tau}
    model = {**cfg["model"], "similarity": "cosine", "temperature": tau}
    res, results = Path("resources") / d, Path("results") / d
    cmd = [
        sys.executable,
        "-m",
        "pipeline.training.train_dense",
        "--device",
        "cpu",
        "--init",
        str(init),
        "--queries",
        str(res / "queries.train.parquet"),
        "--qrels",
        str(res / "qrels.train.parquet"),
        "--negatives",
        str(results / "negatives" / "bm25.parquet"),
        "--corpus",
        str(res / "corpus.parquet"),
        "--seed",
        str(seed),
        *shlex.split(to_flags(TrainSettings, ccr)),
        "--beta",
        repr(float(beta)),
        "--scale",
        scale,
        *shlex.split(to_flags(ModelSettings, model, RETRIEVER_KEYS)),
        *([] if model["shared_towers"] else ["--separate-towers"]),
        "--threads",
        str(cfg["ccr"]["threads"]),
        "--out",
        str(out),
    ]
    _run(cmd, log)


def score_sieve(cfg: dict, d: str, model: Path, work: Path, seed: int, name: str, log: Path) -> dict:
    res, candidates = Path("resources") / d, candidates_path(cfg, d)
    decisions, report = work / f"{name}.parquet", work / f"{name}.report.json"
    _run(
        [
            sys.executable,
            "-m",
            "pipeline.sieve.passage_sieve",
            "--candidates",
            str(candidates),
            "--corpus",
            str(res / "corpus.parquet"),
            "--queries",
            str(res / "queries.train.parquet"),
            "--model",
            str(model),
            "--out",
            str(decisions),
            *shlex.split(to_flags(SieveSettings, cfg["sieve"], SIEVE_DECISION_KEYS)),
            "--seed",
            str(seed),
            "--threads",
            "2",
        ],
        log,
    )
    _run(
        [
            sys.executable,
            "-m",
            "pipeline.sieve.report",
            "report",
            "--decisions",
            str(decisions),
            "--candidates",
            str(candidates),
            "--dataset",
            d,
            "--filter",
            name,
            "--out",
            str(report),
        ],
        log,
    )
    decisions.unlink()
    return json.loads(report.read_text())


def _done(out: Path) -> dict[tuple, dict]:
    cells = {}
    if out.exists():
        for line in out.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            cells[(row["scorer"], row["tau"], row["beta"], row["seed"])] = row
    return cells


def run_grid(args: argparse.Namespace) -> None:
    config = load_config(args.overlay)
    cfg = dataset_config(config, args.dataset)
    results = Path("results") / args.dataset
    work = Path(args.work) / args.dataset
    work.mkdir(parents=True, exist_ok=True)
    log = work / "bench.log"
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = _done(out)
    cells = [("dpr", None, None, s) for s in args.seeds]
    cells += [("ccr", t, b, s) for s in args.seeds for t in args.taus for b in args.betas]
    for scorer, tau, beta, seed in cells:
        if (scorer, tau, beta, seed) in done:
            continue
        started = time.time()
        dpr = _model_folder(results, "dpr", seed, config["seed"])
        if not (dpr / "retriever.json").exists():
            raise SystemExit(
                f"{dpr}/retriever.json missing: build the DAG's DPR of seed {seed} first (see --help)"
            )
        if scorer == "dpr":
            name, model = f"dpr_s{seed}", dpr
        else:
            name = f"ccr_b{beta:g}_t{tau:g}_s{seed}"
            model = work / name
            if not (model / "retriever.json").exists():
                train_ccr(cfg, args.dataset, dpr, model, seed, beta, tau, args.scale, log)
        report = score_sieve(cfg, args.dataset, model, work, seed, name, log)
        if scorer == "ccr" and not args.keep_models:
            shutil.rmtree(model)
        row = {
            "dataset": args.dataset,
            "scorer": scorer,
            "tau": tau,
            "beta": beta,
            "seed": seed,
            "scale": args.scale if scorer == "ccr" else None,
            "ccr_steps": cfg["ccr"]["max_steps"],
            "ccr_lr": cfg["ccr"]["lr"],
            "wall_s": round(time.time() - started, 1),
            **{key: report[field] for key, field in REPORTED.items()},
            "separation_queries": report["separation_queries"],
            "candidates": report["n_candidates"],
        }
        with open(out, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)


def _interval(values: list[float]) -> str:
    mean, std = mean_std(values)
    if std is None:
        return f"{mean:.3f}"
    half = t_quantile(0.95, len(values) - 1) * std / len(values) ** 0.5
    return f"{mean:.3f} ± {half:.3f}"


def _paired(a: dict, b: dict) -> str:
    """a − b over their common seeds: mean [95% t-interval], the mean alone for one seed."""
    paired = paired_difference(a, b)
    if paired.mean is None:
        return "–"
    interval = "" if paired.ci_low is None else f" [{paired.ci_low:+.3f}, {paired.ci_high:+.3f}]"
    return f"{paired.mean:+.3f}{interval}"


def table(out: Path) -> str:
    """Markdown: one row per (scorer, τ, β), mean ± 95% t half-width over the seeds present; the
    per-query AUC also paired by seed with the DPR scorer and with β 0 at the same τ."""
    rows = list(_done(out).values())
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault((row["dataset"], row["scorer"], row["tau"], row["beta"]), []).append(row)
    dpr = {(r["dataset"], r["seed"]): r for r in rows if r["scorer"] == "dpr"}
    lines = [
        "| dataset | scorer | τ | β | seeds | per-query AUC | CCR − DPR | − β 0, same τ | pooled AUC | FN recall "
        "| TN kept | sieve-out |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    order = sorted(groups, key=lambda k: (k[0], k[1] != "dpr", -(k[2] or 0), k[3] or 0))
    for key in order:
        cell = groups[key]
        by_dpr = by_zero = "–"
        if key[1] == "ccr":
            own = {r["seed"]: r["per_query_auc"] for r in cell}
            base = {s: r["per_query_auc"] for (d, s), r in dpr.items() if d == key[0]}
            zero = {r["seed"]: r["per_query_auc"] for r in groups.get((key[0], "ccr", key[2], 0.0), [])}
            by_dpr = _paired(own, base)
            by_zero = _paired(own, zero) if key[3] != 0 else "–"
        stats = [_interval([r["per_query_auc"] for r in cell]), by_dpr, by_zero]
        stats += [
            _interval([r[k] for r in cell]) for k in ("pooled_auc", "fn_recall", "tn_kept", "sieve_out")
        ]
        tau = "–" if key[2] is None else f"{key[2]:g}"
        beta = "–" if key[3] is None else f"{key[3]:g}"
        lines.append(f"| {key[0]} | {key[1]} | {tau} | {beta} | {len(cell)} | " + " | ".join(stats) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", required=True)
    ap.add_argument(
        "--overlay", nargs="*", default=[], help="config overlays (the dataset is declared in one)"
    )
    ap.add_argument("--betas", nargs="+", type=float, default=[0.0, 0.5, 1.0, 3.0, 6.0], help="effective β")
    ap.add_argument("--taus", nargs="+", type=float, default=[1.0, 0.05])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--scale", default="paper", choices=("paper", "released_code"))
    ap.add_argument("--out", required=True, help="JSON lines, one per cell (appended; done cells skipped)")
    ap.add_argument("--work", default="bench_work/ccr_regime", help="CCR models and reports")
    ap.add_argument("--keep-models", action="store_true")
    ap.add_argument("--table", action="store_true", help="print the table of --out and stop")
    args = ap.parse_args(argv)
    if not args.table:
        run_grid(args)
    print(table(Path(args.out)), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Average one method's per-seed evaluations into its metrics.json (mean, sample std, per-seed values).

    python -m pipeline.evaluation.seed_metrics --metrics results/synthkb/ar2/seed{0,1,2}/metrics.json \
        --infos results/synthkb/ar2/seed{0,1,2}/info.json --out results/synthkb/ar2/metrics.json
    python -m pipeline.evaluation.seed_metrics --metrics results/synthkb/dpr/seed{0,1,2}/metrics.json \
        --seeds 0 1 2 --out results/synthkb/dpr/metrics.json

``metrics`` holds the mean over seeds, so gather_metrics and every reader of a method's metrics.json
work unchanged; ``metrics_std`` the sample standard deviation (ddof 1; absent for a single seed);
``per_seed`` each seed's metrics, with its selected round, steps and wall time when the seeds come
from AR2 selections' info.json (``--infos``); with ``--seeds`` (methods without an info.json) each
entry is the seed and its metrics only. Every seed must have been evaluated on the same split and
queries.
"""

from __future__ import annotations

import logging
import os
from typing import Sequence

from pipeline.core.cli import run_main, stage_parser, start_stage
from pipeline.core.storage import DataError, read_json, write_json
from pipeline.evaluation.gather import read_metrics
from pipeline.evaluation.seed_stats import mean_std

log = logging.getLogger("sieve.seed_metrics")


def _read_info(path: str | os.PathLike) -> dict:
    data = read_json(path, missing="file not found (did ar2_select run?)")
    if not isinstance(data, dict) or "seed" not in data:
        raise DataError("not an AR2 selection: no seed", file=path, field="seed")
    return data


def aggregate_seeds(
    metrics: Sequence[dict],
    infos: Sequence[dict] | None,
    sources: Sequence[str],
    seeds: Sequence[int] | None = None,
    sources_of_infos: Sequence[str] | None = None,
) -> dict:
    """One metrics.json for a method evaluated once per seed. Each file's seed comes from its AR2
    selection (``infos``, aligned: metrics[i] ~ infos[i]) or, without one, from ``seeds`` (same order)."""
    if infos is not None:
        if not metrics or len(metrics) != len(infos):
            raise DataError(
                f"need one info.json per metrics.json (got {len(metrics)} and {len(infos)})", field="--infos"
            )
        for info, src in zip(infos, sources_of_infos or [None] * len(infos)):
            if isinstance(info["seed"], bool) or not isinstance(info["seed"], int):
                raise DataError(f"must be an integer, got {info['seed']!r}", file=src, field="seed")
        seeds = [int(info["seed"]) for info in infos]
    elif seeds is None:
        raise DataError("the seeds are unknown: give --infos or --seeds", field="--seeds")
    elif not metrics or len(seeds) != len(metrics):
        raise DataError(
            f"need one seed per metrics.json (got {len(metrics)} and {len(seeds)})", field="--seeds"
        )
    else:
        seeds = [int(seed) for seed in seeds]
    first = metrics[0]
    negative = [seed for seed in seeds if not 0 <= seed < 2**32]
    if negative:
        raise DataError(f"seeds are integers from 0 to 2^32 - 1, got {negative[0]}", field="seed")
    if len(set(seeds)) != len(seeds):
        raise DataError(f"duplicate seeds {seeds}", field="seed")
    for data, src in zip(metrics, sources):
        for key in ("dataset", "method", "split", "n_queries"):
            if data[key] != first[key]:
                raise DataError(
                    f"{key} is {data[key]!r} here but {first[key]!r} in {sources[0]}", file=src, field=key
                )
    names = [n for n in first["metrics"] if all(n in d["metrics"] for d in metrics)]
    mean, std = {}, {}
    for name in names:
        m, s = mean_std([float(d["metrics"][name]) for d in metrics])
        mean[name] = m
        if s is not None:
            std[name] = s
    if infos is None:
        return _aggregate_without_infos(metrics, seeds, mean, std)
    per_seed = []
    for seed, data, info in zip(seeds, metrics, infos):
        per_seed.append(
            {
                "seed": seed,
                "metrics": data["metrics"],
                "selected_round": info.get("selected_round"),
                "steps": info.get("steps"),
                "wall_time_s": info.get("wall_time_s"),
            }
        )
    out = {k: v for k, v in first.items() if k not in ("metrics", "notes")}
    out.update(
        {
            "seeds": seeds,
            "metrics": mean,
            "steps": infos[0].get("steps"),
            "wall_time_s": round(sum(float(i.get("wall_time_s") or 0.0) for i in infos), 3),
            "per_seed": per_seed,
        }
    )
    if std:
        out["metrics_std"] = std
    note = f"mean over {len(seeds)} seed(s) {seeds}"
    if infos[0].get("steps"):
        note += f"; {infos[0]['steps'].get('total')} AR2 steps per seed"
    out["notes"] = note
    return out


def _aggregate_without_infos(metrics: Sequence[dict], seeds: list[int], mean: dict, std: dict) -> dict:
    """The AR2 layout without what only an AR2 selection knows (round, steps, wall time)."""
    # Fields that differ between seeds (a run's own wall time, its seed) describe no aggregate.
    first = metrics[0]
    out = {
        k: v
        for k, v in first.items()
        if k not in ("metrics", "notes", "seed", "seeds", "fusion") and all(d.get(k) == v for d in metrics)
    }
    # A weighted-sum hybrid chooses its w per seed: each seed's choice stays with its metrics.
    out.update(
        {
            "seeds": seeds,
            "metrics": mean,
            "per_seed": [
                {
                    "seed": seed,
                    "metrics": data["metrics"],
                    **({"fusion": data["fusion"]} if "fusion" in data else {}),
                }
                for seed, data in zip(seeds, metrics)
            ],
        }
    )
    if std:
        out["metrics_std"] = std
    out["notes"] = f"mean over {len(seeds)} seed(s) {seeds}"
    return out


def main(argv: list[str] | None = None) -> int:
    ap = stage_parser("pipeline.evaluation.seed_metrics", __doc__)
    ap.add_argument("--metrics", nargs="+", required=True, help="per-seed metrics.json")
    source = ap.add_mutually_exclusive_group(required=True)
    source.add_argument("--infos", nargs="+", help="per-seed AR2 info.json (same order as --metrics)")
    source.add_argument(
        "--seeds",
        nargs="+",
        type=int,
        help="the seed of each --metrics file, same order (methods without info.json)",
    )
    ap.add_argument("--out", required=True)
    ap.add_argument("--log")
    args = ap.parse_args(argv)
    start_stage(args.log)
    metrics = [read_metrics(p) for p in args.metrics]
    infos = [_read_info(p) for p in args.infos] if args.infos else None
    out = aggregate_seeds(metrics, infos, args.metrics, args.seeds, args.infos)
    write_json(args.out, out)
    log.info("%s: %s", out["method"], out["notes"])
    return 0


if __name__ == "__main__":
    run_main(main)

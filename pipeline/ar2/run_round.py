"""One AR2 round: mine with the previous retriever, (sieve), train ranker then retriever, re-encode, evaluate.

    python -m pipeline.ar2.run_round --round 1 --round-dir results/synthkb/ar2/sieve/seed0/round1 \
        --prev-dir results/synthkb/ar2/sieve/seed0/round0 --variant sieve --settings '{...config ar2...}' \
        --corpus resources/synthkb/corpus.parquet --train-queries ... --train-qrels ... \
        --dev-queries ... --dev-qrels ... [--sieve-config '{...}' --sieve-model DIR --sieve-embeddings DIR]

Round 0 is the start point and trains nothing: ``start.json`` names the DPR retriever and its corpus
embeddings, and the round evaluates it on dev (the learning curve's first point). Round r >= 1:

1. ``negatives.parquet``: train queries encoded by round r-1's retriever, top ``ar2.top_k`` from round
   r-1's corpus embeddings, positives removed (qrels; answer matches flagged/excluded).
2. ``sieve.parquet`` (sieve variants): the passage sieve over those negatives (pipeline.ar2.sieving).
3. ``train.ckpt/``, ``train_log.jsonl``, then ``retriever/`` and ``ranker/``: ranker steps then
   retriever steps (pipeline.ar2.train), optimizer/scheduler state carried from round r-1.
4. ``embeddings/``: the corpus encoded by the new retriever (the next round mines from it).
5. ``run.dev.parquet`` + ``metrics.json``: dev evaluation. ``round.json`` is written last.

Every sub-step is skipped when its output exists, so rerunning after a crash continues where it stopped
(training from its last checkpoint). ``fingerprint.json`` records what the round was built from; when
it differs the old folder is renamed ``round{r}.old-<hash>`` (never overwritten) and the round restarts.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import time
from pathlib import Path

import torch

from pipeline.ar2.data import encode_corpus, mine_negatives, run_table, search, write_negatives
from pipeline.ar2.round_data import (
    ROUND_FILE,
    load_round_data,
    method_of,
    previous_state,
    variant_sampling,
    variant_sieves,
)
from pipeline.ar2.train import CKPT_DIR, compact_checkpoint, train_round
from pipeline.core.cli import check_writable, run_main, stage_parser, start_stage
from pipeline.core.config import ConfigError
from pipeline.core.distributed import DistInfo
from pipeline.core.fingerprint import file_id
from pipeline.core.precision import autocast_dtype, precision_name
from pipeline.core.schemas import QUERIES_SCHEMA
from pipeline.core.settings import (
    AR2_CCR_KEYS,
    AR2_ROUND_KEYS,
    AR2_SIEVE_KEYS,
    RESOURCE_KEYS,
    Ar2Settings,
    CcrSettings,
    Objective,
    SieveSettings,
    TrainSettings,
    add_flags,
    from_dict,
    pick,
)
from pipeline.core.storage import DataError, read_table, write_json, write_table
from pipeline.evaluation.evaluate import evaluate
from pipeline.retrieval.encode import resolve_device
from pipeline.retrieval.model import Retriever
from pipeline.retrieval.ranker import Ranker, RankerSettings
from pipeline.training.checkpoint import STATE_FILE
from pipeline.training.data import load_queries_with_positives

log = logging.getLogger("sieve.ar2")

FINGERPRINT_FILE = "fingerprint.json"
TIMINGS_FILE = "timings.json"


def _prepare_round_dir(round_dir: Path, fingerprint: dict) -> None:
    """Keep a matching partial round (resume); move a round built from other settings aside."""
    path = round_dir / FINGERPRINT_FILE
    if path.exists():
        old = json.loads(path.read_text())
        if old == fingerprint:
            return
        digest = hashlib.sha256(json.dumps(old, sort_keys=True).encode()).hexdigest()[:10]
        target = round_dir.with_name(f"{round_dir.name}.old-{digest}")
        n = 1
        while target.exists():
            target = round_dir.with_name(f"{round_dir.name}.old-{digest}-{n}")
            n += 1
        check_writable(target)  # the rename writes the parent folder
        log.warning(
            "%s was built from other settings or inputs: moved to %s, starting afresh", round_dir, target
        )
        round_dir.rename(target)
    elif round_dir.exists() and any(p.name != ROUND_FILE for p in round_dir.iterdir()):
        raise DataError(
            "round folder has files but no fingerprint.json; move it away to rebuild", file=round_dir
        )
    round_dir.mkdir(parents=True, exist_ok=True)
    write_json(path, fingerprint)


class _Timer:
    """Wall time per sub-step, accumulated in timings.json (a resumed round adds to it)."""

    def __init__(self, round_dir: Path):
        self.path = round_dir / TIMINGS_FILE
        self.data = json.loads(self.path.read_text()) if self.path.exists() else {}

    def add(self, name: str, seconds: float) -> None:
        self.data[name] = round(self.data.get(name, 0.0) + seconds, 3)
        write_json(self.path, self.data)

    @property
    def total(self) -> float:
        return round(sum(self.data.values()), 3)


def _load_retriever(folder: str | Path, settings: dict, device: torch.device) -> Retriever:
    """A retriever with config ar2's overrides applied (similarity, τ, passage length).

    The overrides are saved with every round's retriever, so later rounds inherit them; applying
    them again is a no-op.
    """
    retriever = Retriever.load(folder).to(device)
    for key in ("similarity", "temperature", "passage_max_len"):
        if settings.get(key) is not None:
            setattr(retriever.settings, key, settings[key])
    retriever.settings.__post_init__()
    return retriever


def _dev_eval(
    retriever: Retriever, emb_dir: str | Path, args: argparse.Namespace, round_dir: Path, settings: dict
) -> dict:
    """run.dev.parquet + metrics.json of a retriever over its corpus embeddings."""
    queries = read_table(args.dev_queries, columns=["qid", "text"], schema=QUERIES_SCHEMA)
    if queries.empty:
        log.warning(
            "no dev queries: round %d has no dev metrics (selection takes the last round)", args.round
        )
        out = {"split": "dev", "n_queries": 0, "metrics": {}}
        write_json(round_dir / "metrics.json", out)
        return out
    q_emb = retriever.encode_queries(queries["text"].tolist())
    pids, scores = search(q_emb, emb_dir, args.depth, device=retriever.device)
    run_path = round_dir / "run.dev.parquet"
    write_table(run_path, run_table(queries["qid"].tolist(), pids, scores))
    result, _, _ = evaluate(
        run_path, args.dev_queries, args.dev_qrels, args.corpus, args.ks, args.match, args.dev_qrels_all
    )
    result = {k: v for k, v in result.items() if k != "run"}
    out = {
        "dataset": args.dataset,
        "method": method_of(args.variant),
        "split": "dev",
        "round": args.round,
        **result,
    }
    write_json(round_dir / "metrics.json", out)
    log.info("round %d dev: %s", args.round, ", ".join(f"{k} {v:.4f}" for k, v in out["metrics"].items()))
    return out


def _round_zero(
    args: argparse.Namespace, round_dir: Path, timer: _Timer, settings: dict, device: torch.device
) -> dict:
    if not args.start_retriever or not args.start_embeddings:
        raise ConfigError("round 0 needs --start-retriever and --start-embeddings")
    start = {"retriever": args.start_retriever, "embeddings": args.start_embeddings}
    write_json(round_dir / "start.json", start)
    if not (round_dir / "metrics.json").exists():
        tick = time.perf_counter()
        retriever = _load_retriever(args.start_retriever, settings, device)
        _dev_eval(retriever, args.start_embeddings, args, round_dir, settings)
        timer.add("dev_eval", time.perf_counter() - tick)
    return {"start": start}


def _train_round(
    args: argparse.Namespace, round_dir: Path, timer: _Timer, settings: dict, seed: int, device: torch.device
) -> dict:
    train_cfg = from_dict(Ar2Settings, settings)  # unknown keys are an error, not dropped
    prev = previous_state(Path(args.prev_dir))
    info: dict = {"previous": {k: str(v) if v else None for k, v in prev.items()}}
    retriever = _load_retriever(prev["retriever"], settings, device)
    queries, positives, dropped = load_queries_with_positives(
        args.train_queries, args.train_qrels, drop_without_positive=True
    )
    info["train_queries"] = len(queries)
    info["train_queries_without_positive"] = len(dropped)

    negatives = round_dir / "negatives.parquet"
    if not negatives.exists():
        tick = time.perf_counter()
        answers = read_table(args.train_queries, columns=["qid", "answers"], schema=QUERIES_SCHEMA).set_index(
            "qid"
        )["answers"]
        queries = queries.assign(answers=queries["qid"].map(answers))
        pos_map = {q: [p] for q, p in zip(queries["qid"], queries["positive"])}
        for qid, pid in zip(positives["qid"], positives["pid"]):
            if qid in pos_map and pid not in pos_map[qid]:
                pos_map[qid].append(pid)
        q_emb = retriever.encode_queries(queries["text"].tolist())
        table, stats = mine_negatives(
            q_emb,
            queries,
            pos_map,
            prev["embeddings"],
            args.corpus,
            top_k=int(settings["top_k"]),
            exclude_answer_match=bool(settings["exclude_answer_match"]),
            match=args.match,
            source=f"ar2/{args.variant}/round{args.round}",
            queries_file=args.train_queries,
            device=device,
        )
        write_negatives(negatives, table)
        write_json(round_dir / "negatives.stats.json", stats)
        timer.add("mine", time.perf_counter() - tick)

    sieve_path = round_dir / "sieve.parquet" if variant_sieves(args.variant) else None
    if sieve_path is not None and not sieve_path.exists():
        tick = time.perf_counter()
        from pipeline.ar2.sieving import sieve_round

        model_dir, model_emb = _sieve_model(args, round_dir, settings, prev, device)
        stats = sieve_round(
            negatives,
            sieve_path,
            queries=args.train_queries,
            qrels=args.train_qrels,
            corpus=args.corpus,
            sieve_cfg=args.sieve,
            seed=seed,
            model_dir=model_dir,
            model_embeddings=model_emb,
            qrels_all=args.train_qrels_all,
            suspect_same_article=args.suspect_same_article,
            match=args.match,
        )
        write_json(round_dir / "sieve.stats.json", stats)
        timer.add("sieve", time.perf_counter() - tick)

    done_folders = (round_dir / "retriever" / "retriever.json").exists() and (
        round_dir / "ranker" / "ranker.json"
    ).exists()
    if prev["ranker"] is None and args.trained_ranker:
        info["ranker_init"] = args.trained_ranker  # recorded on a resumed round too
    if not done_folders:
        tick = time.perf_counter()
        if prev["ranker"] is not None:
            ranker = Ranker.load(prev["ranker"])
        elif args.trained_ranker:
            ranker = Ranker.load(args.trained_ranker)  # AR2 starts from a trained ranker (reference §2)
            log.info("round %d: ranker from %s (%s)", args.round, args.trained_ranker, ranker.settings)
        else:
            ranker_cfg = settings["ranker"]
            ranker = Ranker.from_pretrained(
                ranker_cfg["base"],
                RankerSettings(base=ranker_cfg["base"], max_len=int(ranker_cfg["max_len"])),
                seed=seed,
            )
        ranker.to(device)
        data = load_round_data(negatives, sieve_path, queries, args.corpus, retriever.settings)
        summary = train_round(
            retriever,
            ranker,
            data,
            train_cfg,
            round_index=args.round,
            seed=seed,
            round_dir=round_dir,
            previous_ckpt=prev["checkpoint"],
            sampling=variant_sampling(args.variant),
        )
        info["train"] = {**summary, "queries": len(data.qids)}
        write_json(round_dir / "train.summary.json", info["train"])
        ranker.save(round_dir / "ranker")
        retriever.save(round_dir / "retriever")  # retriever.json last: the round's model is complete
        compact_checkpoint(round_dir / CKPT_DIR)
        timer.add("train", time.perf_counter() - tick)
    retriever = Retriever.load(round_dir / "retriever").to(device)

    emb_dir = round_dir / "embeddings"
    if not (emb_dir / "manifest.json").exists():
        tick = time.perf_counter()
        # ar2.precision governs the round's encoding too (fp32 there means fp32 everywhere).
        encode_corpus(
            retriever,
            args.corpus,
            emb_dir,
            batch_size=int(settings["encode_batch_size"]),
            model_name=str(round_dir / "retriever"),
            amp=settings["precision"] != "fp32",
        )
        timer.add("encode", time.perf_counter() - tick)
    if not (round_dir / "metrics.json").exists():
        tick = time.perf_counter()
        _dev_eval(retriever, emb_dir, args, round_dir, settings)
        timer.add("dev_eval", time.perf_counter() - tick)
    return info


def _sieve_model(
    args, round_dir: Path, settings: dict, prev: dict, device: torch.device
) -> tuple[str, str | None]:
    """(sieve model folder, its corpus embeddings or None) for ``ar2.sieve_init``."""
    if settings["sieve_init"] == "initial":
        if not args.sieve_model or not args.sieve_embeddings:
            raise ConfigError("ar2.sieve_init 'initial' needs --sieve-model and --sieve-embeddings")
        return args.sieve_model, args.sieve_embeddings
    from pipeline.training.loop import TrainConfig
    from pipeline.training.train_dense import TrainInputs, train_retriever

    # warm: the authors' scripts retrain CCR each round from the warm-up checkpoint (DPR), on the
    # candidates the round's retriever mined; current: from that retriever itself.
    if settings["sieve_init"] == "warm":
        if not args.warm_retriever:
            raise ConfigError("ar2.sieve_init 'warm' needs --warm-retriever (the warm-up DPR model folder)")
        start = args.warm_retriever
    else:
        start = prev["retriever"]
    out = round_dir / "sieve_model"
    if not (out / "retriever.json").exists():
        ccr = args.ccr
        # Queries whose positives all fell out of this round's negatives are dropped, not an error.
        cfg = TrainConfig(
            **{**pick(TrainSettings, ccr), "drop_queries_without_positive": True},
            **pick(Objective, ccr),
            seed=args.seed,
        )
        log.info(
            "sieve_init %s: CCR fine-tuning of %s on round %d's candidates (beta %g, %d steps)",
            settings["sieve_init"],
            start,
            args.round,
            cfg.beta,
            cfg.max_steps,
        )
        train_retriever(
            str(start),
            TrainInputs(
                args.train_queries, args.train_qrels, str(round_dir / "negatives.parquet"), args.corpus
            ),
            out,
            cfg,
            overrides={"similarity": "cosine", "temperature": ccr["temperature"]},
            dist_info=DistInfo(device=device),
        )
    return str(out), None


def build_parser() -> argparse.ArgumentParser:
    ap = stage_parser("pipeline.ar2.run_round", __doc__)
    ap.add_argument("--round", type=int, required=True)
    ap.add_argument("--round-dir", required=True)
    ap.add_argument("--prev-dir", help="the previous round's folder (rounds >= 1)")
    ap.add_argument("--variant", required=True, choices=["plain", "sieve", "simans", "simans_sieve"])
    ap.add_argument("--dataset", default="")
    add_flags(ap.add_argument_group("config section ar2"), Ar2Settings, names=AR2_ROUND_KEYS)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--recipe", help="the config recipe in force (recorded in round.json)")
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--train-queries", required=True)
    ap.add_argument("--train-qrels", required=True)
    ap.add_argument("--train-qrels-all", help="exact truth (synthkb): labels false negatives")
    ap.add_argument("--dev-queries", required=True)
    ap.add_argument("--dev-qrels", required=True)
    ap.add_argument("--dev-qrels-all")
    ap.add_argument("--start-retriever", help="round 0: the retriever AR2 starts from (DPR)")
    ap.add_argument("--start-embeddings", help="round 0: its gathered corpus embeddings")
    ap.add_argument(
        "--trained-ranker",
        help="round 1: a trained ranker folder to start from (ranker_init cross_encoder; default: "
        "ar2.ranker's base encoder with a new head)",
    )
    add_flags(
        ap.add_argument_group("sieve variants: the round's sieve (config section sieve)"),
        SieveSettings,
        names=AR2_SIEVE_KEYS,
        prefix="sieve",
    )
    ap.add_argument("--sieve-model", help="sieve_init initial: the CCR model folder")
    ap.add_argument("--sieve-embeddings", help="sieve_init initial: its corpus embeddings")
    ap.add_argument("--warm-retriever", help="sieve_init warm: the warm-up DPR model folder CCR starts from")
    add_flags(
        ap.add_argument_group("sieve_init warm/current: the round's CCR training (config section ccr)"),
        CcrSettings,
        names=AR2_CCR_KEYS,
        prefix="ccr",
    )
    ap.add_argument("--suspect-same-article", action="store_true")
    ap.add_argument("--match", default="string", choices=["string", "regex"])
    ap.add_argument("--ks", type=int, nargs="+", default=[1, 5, 20, 100])
    ap.add_argument("--depth", type=int, default=100, help="dev run depth")
    ap.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    ap.add_argument("--threads", type=int)
    ap.add_argument("--log")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    start_stage(args.log, args.threads)
    device = resolve_device(args.device)
    # What the rule passes, read back as config data: ar2 (nested sections as dicts), sieve, ccr.
    settings = pick(Ar2Settings, args, names=AR2_ROUND_KEYS)
    args.sieve = pick(SieveSettings, args, prefix="sieve", names=AR2_SIEVE_KEYS)
    args.ccr = pick(CcrSettings, args, prefix="ccr", names=AR2_CCR_KEYS)
    seed = args.seed
    round_dir = Path(args.round_dir)
    if args.round > 0 and not args.prev_dir:
        raise ConfigError(f"round {args.round} needs --prev-dir")
    # Before the round's work, not by a write at its end: its folder, and the previous round's
    # checkpoint folder when its optimizer state is deleted once carried over.
    check_writable(round_dir)
    if args.round >= 2 and not settings.get("keep_checkpoints", True):
        check_writable(Path(args.prev_dir) / CKPT_DIR / STATE_FILE)
    prev_round = Path(args.prev_dir) / ROUND_FILE if args.prev_dir else None
    fingerprint = {
        "round": args.round,
        "variant": args.variant,
        "seed": seed,
        "settings": {
            k: v
            for k, v in settings.items()
            if k not in ("checkpoint_every", "select_metric", "keep_checkpoints", *RESOURCE_KEYS)
        },
        # bf16 results depend on the batch shapes too, so encode_batch_size stays in
        "compute_precision": precision_name(autocast_dtype(device, settings["precision"])),
        "sieve": args.sieve if variant_sieves(args.variant) else None,
        # the dev evaluation and the round's CCR model (sieve_init warm/current) are part of its result
        "eval": {
            "match": args.match,
            "ks": args.ks,
            "depth": args.depth,
            "suspect_same_article": args.suspect_same_article,
        },
        "ccr": (
            args.ccr
            if variant_sieves(args.variant) and settings.get("sieve_init") in ("warm", "current")
            else None
        ),
        "inputs": [
            file_id(p)
            for p in (
                args.corpus,
                args.train_queries,
                args.train_qrels,
                args.dev_queries,
                args.dev_qrels,
                args.start_retriever,
                args.start_embeddings,
                args.sieve_model,
                args.sieve_embeddings,
                args.warm_retriever,
            )
        ],
        "previous": (
            hashlib.sha256(prev_round.read_bytes()).hexdigest()
            if prev_round is not None and prev_round.exists()
            else None
        ),
    }
    if prev_round is not None and not prev_round.exists():
        raise DataError("the previous round is not complete (no round.json)", file=prev_round)
    _prepare_round_dir(round_dir, fingerprint)
    timer = _Timer(round_dir)
    if args.round == 0:
        info = _round_zero(args, round_dir, timer, settings, device)
    else:
        info = _train_round(args, round_dir, timer, settings, seed, device)
    metrics = json.loads((round_dir / "metrics.json").read_text())
    summary = {
        "round": args.round,
        "variant": args.variant,
        "method": method_of(args.variant),
        "dataset": args.dataset,
        "recipe": args.recipe,
        "seed": seed,
        "dev": metrics.get("metrics", {}),
        "wall_time_s": timer.total,
        "timings_s": timer.data,
        **info,
    }
    for name in ("negatives.stats.json", "sieve.stats.json", "train.summary.json"):
        if (round_dir / name).exists():
            summary[name.split(".")[0]] = json.loads((round_dir / name).read_text())
    write_json(round_dir / ROUND_FILE, summary)
    if args.round >= 2 and not settings.get("keep_checkpoints", True):
        # Round r-1's optimizer state has been carried into this round; nothing else reads it.
        (Path(args.prev_dir) / CKPT_DIR / STATE_FILE).unlink(missing_ok=True)
    log.info("round %d of %s done in %.0f s", args.round, args.variant, timer.total)
    return 0


if __name__ == "__main__":
    run_main(main)

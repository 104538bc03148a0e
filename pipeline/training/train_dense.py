"""Train a dense retriever (DPR warm-up with NCE, or CCR fine-tuning), or save the base model as one.

Examples::

    # the zero-shot retriever folder (no training)
    python -m pipeline.training.train_dense --init-only --base minilm --out results/squad/models/zeroshot

    # DPR: NCE with BM25 hard negatives and in-batch negatives
    python -m pipeline.training.train_dense --init minilm --queries resources/squad/queries.train.parquet \\
        --qrels resources/squad/qrels.train.parquet --negatives results/squad/negatives/bm25.parquet \\
        --corpus resources/squad/corpus.parquet --out results/squad/models/dpr --lr 2e-5 --max-steps 60

    # CCR: continue from DPR with l(p+) - beta * mean l(p), cosine similarity
    python -m pipeline.training.train_dense --init results/squad/models/dpr ... --beta 0.5 --hard-negatives 5 \\
        --no-in-batch --similarity cosine --temperature 1 --out results/squad/models/dpr_ccr_b0.5

Under ``torchrun --nproc_per_node=N -m pipeline.training.train_dense -- ARGS`` it trains with DDP (the ``--``
stops torchrun from reading our flags as abbreviations of its own, e.g. ``--log`` as ``--log-dir``). Checkpoints go to
``<out>.ckpt/`` (or ``--checkpoint-dir``); rerunning the same command after a crash resumes there.
The output folder gets ``train_log.jsonl``, ``train_info.json`` and the retriever (retriever.json last).
"""
from __future__ import annotations

import argparse
import logging
import shutil
import sys
from dataclasses import asdict, fields
from pathlib import Path

import torch

from pipeline.core.seeding import seed_everything
from pipeline.core.cli import run_main, setup_logging
from pipeline.core.config import ConfigError
from pipeline.core.distributed import barrier, init_from_env, shutdown
from pipeline.core.storage import DataError, atomic_path, write_json
from pipeline.retrieval.model import SETTINGS_FILE, Retriever, RetrieverSettings
from pipeline.training.data import TrainData
from pipeline.training.loop import LOG_FILE, TrainConfig, train

log = logging.getLogger("sieve.train_dense")

_SETTING_FLAGS = ("pooling", "similarity", "temperature", "query_max_len", "passage_max_len")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m pipeline.training.train_dense", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="retriever folder to write")
    ap.add_argument("--init-only", action="store_true",
                    help="save --base as a retriever folder without training (zero-shot, dpr.skip)")
    ap.add_argument("--base", default="minilm", help="HF encoder for --init-only ('minilm' = offline)")
    ap.add_argument("--init", help="start training from this retriever folder or HF encoder")
    ap.add_argument("--queries", help="queries.train.parquet")
    ap.add_argument("--qrels", help="qrels.train.parquet")
    ap.add_argument("--negatives", help="hard-negative candidates (qid, pid, rank[, excluded])")
    ap.add_argument("--corpus", help="corpus.parquet")
    ap.add_argument("--checkpoint-dir", help="default: <out>.ckpt")
    ap.add_argument("--keep-checkpoint", action="store_true", help="keep it after success")
    g = ap.add_argument_group("retriever settings (override those of --init)")
    g.add_argument("--pooling", choices=["mean", "cls"])
    g.add_argument("--similarity", choices=["cosine", "dot"])
    g.add_argument("--temperature", type=float, help="tau: scores are divided by it (cosine)")
    g.add_argument("--query-max-len", type=int)
    g.add_argument("--passage-max-len", type=int)
    g.add_argument("--separate-towers", action="store_true",
                   help="separate query/passage encoders (only when starting from a base encoder)")
    t = ap.add_argument_group("training")
    defaults = TrainConfig()
    t.add_argument("--lr", type=float, default=defaults.lr)
    t.add_argument("--epochs", type=int, default=defaults.epochs)
    t.add_argument("--batch-size", type=int, default=defaults.batch_size,
                   help="global queries per micro-batch (split over DDP ranks)")
    t.add_argument("--grad-accum", type=int, default=defaults.grad_accum)
    t.add_argument("--hard-negatives", type=int, default=defaults.hard_negatives, help="k")
    t.add_argument("--negatives-depth", type=int, default=30,
                   help="sample the k negatives from this many top candidates")
    t.add_argument("--in-batch", action=argparse.BooleanOptionalAction, default=defaults.in_batch)
    t.add_argument("--beta", type=float, default=defaults.beta, help="CCR beta (0 = NCE)")
    t.add_argument("--scale", choices=["paper", "released_code"], default=defaults.scale)
    t.add_argument("--f-beta", type=float, default=defaults.f_beta)
    t.add_argument("--warmup-ratio", type=float, default=defaults.warmup_ratio)
    t.add_argument("--weight-decay", type=float, default=defaults.weight_decay)
    t.add_argument("--max-grad-norm", type=float, default=defaults.max_grad_norm)
    t.add_argument("--max-steps", type=int, default=defaults.max_steps, help="0 = no cap")
    t.add_argument("--checkpoint-every", type=int, default=defaults.checkpoint_every)
    t.add_argument("--precision", choices=["bf16", "fp16", "fp32"], default=defaults.precision)
    t.add_argument("--seed", type=int, default=defaults.seed)
    t.add_argument("--drop-queries-without-positive", action="store_true")
    ap.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                    help="auto: CUDA when visible (the rules pass cpu unless GPUs are reserved)")
    ap.add_argument("--threads", type=int, help="torch CPU threads")
    ap.add_argument("--log", help="log file")
    return ap


def _overrides(args: argparse.Namespace) -> dict:
    return {name: getattr(args, name) for name in _SETTING_FLAGS if getattr(args, name) is not None}


def _file_id(path: str | None) -> list:
    """What a checkpoint was built from: path, size and mtime of the file (a folder's key file)."""
    if path is None or not Path(path).exists():
        return [path]  # e.g. 'minilm': resolved by name
    target = Path(path)
    if target.is_dir():
        target = next((target / name for name in (SETTINGS_FILE, "config.json")
                       if (target / name).exists()), target)
    stat = target.stat()
    return [str(path), stat.st_size, stat.st_mtime_ns]


def init_only(args: argparse.Namespace) -> None:
    settings = RetrieverSettings(base=args.base, shared_towers=not args.separate_towers,
                                 **_overrides(args))
    retriever = Retriever.from_pretrained(args.base, settings)
    out = Path(args.out)
    (out / SETTINGS_FILE).unlink(missing_ok=True)
    (out / LOG_FILE).unlink(missing_ok=True)  # a stale log would describe another model
    retriever.save(out)
    log.info("saved %s (untrained, settings %s) -> %s", args.base, asdict(settings), out)


def load_init(args: argparse.Namespace) -> Retriever:
    """The starting retriever: a trained folder keeps its settings unless a flag overrides them."""
    init = args.init
    if Path(init).is_dir() and (Path(init) / SETTINGS_FILE).exists():
        retriever = Retriever.load(init)
        if args.separate_towers and retriever.settings.shared_towers:
            raise DataError("--separate-towers needs a base encoder, not a trained shared-tower folder",
                            file=init)
        for name, value in _overrides(args).items():
            setattr(retriever.settings, name, value)
        RetrieverSettings.__post_init__(retriever.settings)
        return retriever
    settings = RetrieverSettings(base=init, shared_towers=not args.separate_towers, **_overrides(args))
    return Retriever.from_pretrained(init, settings)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--"]:
        # `torchrun ... -m pipeline.training.train_dense -- ARGS`: the separator keeps torchrun's own parser
        # (which accepts abbreviations: --log would be read as its --log-dir) off our flags.
        argv = argv[1:]
    args = build_parser().parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda: no CUDA device is visible to torch")
    dist_info = init_from_env(prefer_cuda=args.device != "cpu")
    # Called in-process by another stage (which set up logging already) and without --log: keep its
    # handlers rather than resetting them.
    if args.log or not logging.getLogger().handlers:
        setup_logging(args.log if dist_info.is_main else None,
                      level=logging.INFO if dist_info.is_main else logging.WARNING)
    if args.threads:
        torch.set_num_threads(args.threads)
    seed_everything(args.seed)
    try:
        if args.init_only:
            if dist_info.is_main:
                init_only(args)
            return 0
        missing = [f"--{n}" for n in ("init", "queries", "qrels", "negatives", "corpus")
                   if getattr(args, n) is None]
        if missing:
            build_parser().error(f"training needs {', '.join(missing)} (or use --init-only)")
        return _train(args, dist_info)
    finally:
        shutdown()


def _train(args: argparse.Namespace, dist_info) -> int:
    cfg = TrainConfig(**{f.name: getattr(args, f.name) for f in fields(TrainConfig)})
    data = TrainData(args.queries, args.qrels, args.negatives, args.corpus,
                     depth=args.negatives_depth, seed=args.seed,
                     drop_without_positive=args.drop_queries_without_positive)
    retriever = load_init(args)
    out = Path(args.out)
    ckpt = Path(args.checkpoint_dir) if args.checkpoint_dir else out.with_name(out.name + ".ckpt")
    fingerprint = {"init": _file_id(args.init), "settings": asdict(retriever.settings),
                   "negatives_depth": args.negatives_depth,
                   "drop_queries_without_positive": args.drop_queries_without_positive,
                   "inputs": [_file_id(p) for p in (args.queries, args.qrels, args.negatives,
                                                    args.corpus)]}
    summary = train(retriever, data, cfg, checkpoint_dir=ckpt, dist_info=dist_info,
                    fingerprint=fingerprint)
    if dist_info.is_main:
        (out / SETTINGS_FILE).unlink(missing_ok=True)
        out.mkdir(parents=True, exist_ok=True)
        with atomic_path(out / LOG_FILE) as tmp:
            shutil.copyfile(ckpt / LOG_FILE, tmp)
        write_json(out / "train_info.json", {
            "init": args.init, "config": asdict(cfg), "negatives_depth": args.negatives_depth,
            "queries": len(data), "dropped_without_positive": data.n_dropped,
            "queries_without_candidates": data.n_without_candidates,
            "world_size": dist_info.world_size, "summary": summary})
        retriever.to("cpu").save(out)  # retriever.json last: the folder is complete once it exists
        if not args.keep_checkpoint:
            shutil.rmtree(ckpt, ignore_errors=True)
        log.info("trained %d steps -> %s", summary["steps"], out)
    barrier()
    return 0


if __name__ == "__main__":
    run_main(main)

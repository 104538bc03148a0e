"""Train a dense retriever (DPR warm-up with NCE, or CCR fine-tuning), or save the base model as one.

Examples::

    # the zero-shot retriever folder (no training)
    python -m pipeline.training.train_dense --init-only --base minilm --out results/squad/models/zeroshot

    # DPR: NCE with BM25 hard negatives and in-batch negatives
    python -m pipeline.training.train_dense --init minilm --queries resources/squad/queries.train.parquet \\
        --qrels resources/squad/qrels.train.parquet --negatives results/squad/negatives/bm25.parquet \\
        --corpus resources/squad/corpus.parquet --out results/squad/models/dpr --lr 2e-5 --max-steps 60

    # CCR: continue from DPR with l(p+) - beta * mean l(p), cosine similarity; --section ccr takes
    # config section ccr's defaults (lr 1e-5, 20 steps, k 5, no in-batch negatives, beta 6), so only
    # what differs is given
    python -m pipeline.training.train_dense --section ccr --init results/squad/models/dpr ... --beta 0.5 \\
        --similarity cosine --temperature 1 --out results/squad/models/dpr_ccr_b0.5

    # exactly what a workflow job trained: its settings document (the job's `settings` param, or
    # python -m pipeline.workflow.jobs synthkb train_ccr > ccr.json), then the same inputs
    python -m pipeline.training.train_dense --settings ccr.json --init ... --out ...

The settings come from a document (--settings FILE, or --settings-json as the rules pass it; schema:
pipeline.training.settings.TrainJob), each flag over it; what neither gives is config section dpr's default
(ccr's with --section ccr or a ccr document): docs/config.md.

Under ``torchrun --nproc_per_node=N -m pipeline.training.train_dense -- ARGS`` it trains with DDP (the ``--``
stops torchrun from reading our flags as abbreviations of its own, e.g. ``--log`` as ``--log-dir``). Checkpoints go to
``<out>.ckpt/`` (or ``--checkpoint-dir``); rerunning the same command after a crash resumes there.
The output folder gets ``train_log.jsonl``, ``train_info.json``, a model card (README.md) and the retriever
(retriever.json last).
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
from dataclasses import asdict
from pathlib import Path

import torch

from pipeline.core.cli import check_writable, run_main, stage_parser, start_stage
from pipeline.core.config import ConfigError
from pipeline.core.distributed import DistInfo, barrier, init_from_env, shutdown
from pipeline.core.fingerprint import file_id
from pipeline.core.jobs import merge_flags, read_document
from pipeline.core.seeding import seed_everything
from pipeline.core.settings.base import default
from pipeline.core.settings.flags import add_flags
from pipeline.core.settings.root import Config
from pipeline.core.settings.validation import from_dict
from pipeline.core.storage import DataError, atomic_open, atomic_path, refuse_overwriting_inputs, write_json
from pipeline.retrieval.model import SETTINGS_FILE, Retriever, RetrieverSettings
from pipeline.retrieval.settings import RETRIEVER_KEYS, ModelSettings
from pipeline.training.data import TrainData, TrainInputs
from pipeline.training.engine import LOG_FILE
from pipeline.training.guides import Guide
from pipeline.training.loop import TrainConfig, train
from pipeline.training.model_card import CARD_FILE, model_card
from pipeline.training.settings import Objective, TrainJob, TrainSettings
from pipeline.training.snapshots import SNAPSHOT_DIR, collect

RECIPE_FILE = "recipe.json"  # the config recipe a model was made under (pipeline.core.recipes)

log = logging.getLogger("sieve.train_dense")


def build_parser() -> argparse.ArgumentParser:
    ap = stage_parser("pipeline.training.train_dense", __doc__)
    ap.add_argument("--out", required=True, help="retriever folder to write")
    ap.add_argument(
        "--settings",
        help="the run's settings document (JSON or YAML; pipeline.training.settings.TrainJob): section, seed, "
        "train, objective, retriever. The workflow's job passes the same document (--settings-json); "
        "the flags below override it",
    )
    ap.add_argument("--settings-json", help="the settings document inline (what the rules pass)")
    ap.add_argument(
        "--section",
        choices=("dpr", "ccr"),
        help="the config section whose defaults the training settings take (default: the document's, else dpr)",
    )
    ap.add_argument(
        "--init-only",
        action="store_true",
        help="save --base as a retriever folder without training (zero-shot, dpr.skip)",
    )
    ap.add_argument(
        "--base",
        default=default(ModelSettings, "base"),
        help="HF encoder for --init-only ('minilm' = offline)",
    )
    ap.add_argument("--init", help="start training from this retriever folder or HF encoder")
    ap.add_argument("--queries", help="queries.train.parquet")
    ap.add_argument("--qrels", help="qrels.train.parquet")
    ap.add_argument("--negatives", help="hard-negative candidates (qid, pid, rank[, excluded])")
    ap.add_argument("--corpus", help="corpus.parquet")
    ap.add_argument(
        "--guide",
        help="GISTEmbedLoss's guide, a retriever folder (dpr_gist_<guide>): every negative it scores above "
        "the query's positive leaves that query's softmax (multi-positive NCE, one positive)",
    )
    ap.add_argument(
        "--relabel",
        dest="relabel_defaults",  # not the document's field relabel, which the flags merge over
        action="store_true",
        help="relabel (dpr_relabel_<detector>): the qrels' other positives take dpr.relabel.extra_positives "
        "slots per query (multi-positive NCE); the document's relabel section, or its defaults",
    )
    ap.add_argument("--checkpoint-dir", help="default: <out>.ckpt")
    ap.add_argument("--keep-checkpoint", action="store_true", help="keep it after success")
    g = ap.add_argument_group("retriever settings (config section model; override those of --init)")
    add_flags(g, ModelSettings, names=RETRIEVER_KEYS, override=True)
    g.add_argument(
        "--separate-towers",
        action="store_true",
        help="separate query/passage encoders (only when starting from a base encoder)",
    )
    # One flag per field of the dpr/ccr contract (pipeline.core.settings), each over the document; what
    # neither gives is the section's default (docs/config.md).
    add_flags(
        ap.add_argument_group("training (over the document; default: config section dpr, or ccr)"),
        TrainSettings,
        override=True,
    )
    add_flags(ap.add_argument_group("objective: NCE (beta 0) or CCR"), Objective, override=True)
    ap.add_argument(
        "--seed", type=int, help=f"training seed (default: the document's, else {default(Config, 'seed')})"
    )
    ap.add_argument(
        "--device",
        choices=["auto", "cpu", "cuda"],
        default="auto",
        help="auto: CUDA when visible (the rules pass cpu unless GPUs are reserved)",
    )
    ap.add_argument("--threads", type=int, help="torch CPU threads")
    ap.add_argument("--recipe", help="the config recipe in force: written to <out>/recipe.json")
    ap.add_argument("--log", help="log file")
    return ap


# The document's parts and the flags over each (their contracts' own, unprefixed: --lr, --beta, --pooling).
DOCUMENT_PARTS = {
    "train": (TrainSettings, None),
    "objective": (Objective, None),
    "retriever": (ModelSettings, RETRIEVER_KEYS),
}


def job_settings(args: argparse.Namespace) -> TrainJob:
    """The run's settings: the document (--settings/--settings-json), the flags over it, validated."""
    document = read_document(args)
    merged = merge_flags(TrainJob, document, args, DOCUMENT_PARTS)
    section = document.get("section", args.section or "dpr")
    if args.section and args.section != section:
        raise ConfigError(f"--section {args.section}: the settings document is section {section!r}")
    merged.setdefault("section", section)
    merged.setdefault("seed", default(Config, "seed"))
    if args.separate_towers:
        merged["retriever"] = {**merged.get("retriever", {}), "shared_towers": False}
    if args.relabel_defaults and merged.get("relabel") is None:
        merged["relabel"] = {}
    job = from_dict(TrainJob, merged, "settings")
    job.resolved()  # every part validated by its contract now, before any work
    job.relabel_settings()
    return job


def init_only(args: argparse.Namespace, job: TrainJob) -> None:
    _, _, retriever_settings = job.resolved()
    overrides = {k: v for k, v in retriever_settings.items() if k != "shared_towers"}
    shared = retriever_settings.get("shared_towers", True)
    settings = RetrieverSettings(base=args.base, shared_towers=shared, **overrides)
    retriever = Retriever.from_pretrained(args.base, settings)
    out = Path(args.out)
    (out / SETTINGS_FILE).unlink(missing_ok=True)
    (out / LOG_FILE).unlink(missing_ok=True)  # a stale log would describe another model
    (out / RECIPE_FILE).unlink(missing_ok=True)
    shutil.rmtree(out / SNAPSHOT_DIR, ignore_errors=True)  # a trained run's, not this model's
    if args.recipe:
        out.mkdir(parents=True, exist_ok=True)
        write_json(out / RECIPE_FILE, {"recipe": args.recipe, "trained": False})
    retriever.save(out)
    log.info("saved %s (untrained, settings %s) -> %s", args.base, asdict(settings), out)


def load_init(init: str, overrides: dict, separate_towers: bool = False) -> Retriever:
    """The starting retriever: a trained folder keeps its settings unless ``overrides`` change them."""
    if Path(init).is_dir() and (Path(init) / SETTINGS_FILE).exists():
        retriever = Retriever.load(init)
        if separate_towers and retriever.settings.shared_towers:
            raise DataError(
                "--separate-towers needs a base encoder, not a trained shared-tower folder", file=init
            )
        for name, value in overrides.items():
            setattr(retriever.settings, name, value)
        RetrieverSettings.__post_init__(retriever.settings)
        return retriever
    settings = RetrieverSettings(base=init, shared_towers=not separate_towers, **overrides)
    return Retriever.from_pretrained(init, settings)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--"]:
        # `torchrun ... -m pipeline.training.train_dense -- ARGS`: the separator keeps torchrun's own parser
        # (which accepts abbreviations: --log would be read as its --log-dir) off our flags.
        argv = argv[1:]
    args = build_parser().parse_args(argv)
    job = job_settings(args)  # before any work: a bad document or flag is one line
    # The start model and the guide are folders read at the start; --out is replaced at the end and the
    # checkpoint folder removed after success: either over an input would delete it.
    read = ("init", "guide", "queries", "qrels", "negatives", "corpus")
    written = ("out", "checkpoint_dir", "log")
    refuse_overwriting_inputs(
        *({"--" + k.replace("_", "-"): getattr(args, k) for k in keys} for keys in (written, read))
    )
    if args.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda: no CUDA device is visible to torch")
    dist_info = init_from_env(prefer_cuda=args.device != "cpu")
    start_stage(args.log, args.threads, main_process=dist_info.is_main)
    try:
        if args.init_only:
            seed_everything(job.seed)  # training seeds in train_retriever
            if dist_info.is_main:
                init_only(args, job)
            return 0
        missing = [
            f"--{n}" for n in ("init", "queries", "qrels", "negatives", "corpus") if getattr(args, n) is None
        ]
        if missing:
            build_parser().error(f"training needs {', '.join(missing)} (or use --init-only)")
        return _train(args, job, dist_info)
    finally:
        shutdown()


def _train(args: argparse.Namespace, job: TrainJob, dist_info: DistInfo) -> int:
    train, objective, retriever_settings = job.resolved()
    relabel = job.relabel_settings() or {"extra_positives": 0}
    cfg = TrainConfig(**train, **objective, seed=job.seed, extra_positives=relabel["extra_positives"])
    overrides = {k: v for k, v in retriever_settings.items() if k != "shared_towers"}
    train_retriever(
        args.init,
        TrainInputs(args.queries, args.qrels, args.negatives, args.corpus),
        args.out,
        cfg,
        overrides=overrides,
        separate_towers=not retriever_settings.get("shared_towers", True),
        checkpoint_dir=args.checkpoint_dir,
        keep_checkpoint=args.keep_checkpoint,
        dist_info=dist_info,
        recipe=args.recipe,
        guide=args.guide,
        snapshots=job.snapshots,
    )
    return 0


def train_retriever(
    init: str,
    inputs: TrainInputs,
    out: str | Path,
    cfg: TrainConfig,
    *,
    overrides: dict | None = None,
    separate_towers: bool = False,
    checkpoint_dir: str | Path | None = None,
    keep_checkpoint: bool = False,
    dist_info: DistInfo = DistInfo(),
    recipe: str | None = None,
    guide: str | None = None,
    snapshots: int = 0,
) -> dict:
    """Train from ``init`` (a retriever folder or a base encoder) and write the retriever to ``out``.

    Resumes from ``<out>.ckpt/`` (or ``checkpoint_dir``) when it holds a checkpoint of the same
    settings and inputs. ``recipe``: the config recipe in force, written to ``recipe.json`` (the
    settings themselves are in ``train_info.json``). ``guide``: GISTEmbedLoss's guide retriever folder
    (training.guides.Guide). ``snapshots``: the weights kept at that many evenly spaced steps, in
    ``<out>/snapshots/step<k>/`` (pipeline.training.snapshots). Returns the training summary.
    """
    out = Path(out)
    ckpt = Path(checkpoint_dir) if checkpoint_dir else out.with_name(out.name + ".ckpt")
    if dist_info.is_main:
        check_writable(out, ckpt)  # before the training, not by the write at its end
    seed_everything(cfg.seed)
    data = TrainData(
        inputs,
        depth=cfg.negatives_depth,
        seed=cfg.seed,
        drop_without_positive=cfg.drop_queries_without_positive,
    )
    retriever = load_init(init, overrides or {}, separate_towers)
    fingerprint = {
        "init": file_id(init),
        "settings": asdict(retriever.settings),
        "negatives_depth": cfg.negatives_depth,
        "drop_queries_without_positive": cfg.drop_queries_without_positive,
        "inputs": [file_id(p) for p in (inputs.queries, inputs.qrels, inputs.negatives, inputs.corpus)],
        **({"guide": file_id(guide)} if guide else {}),
    }
    summary = train(
        retriever,
        data,
        cfg,
        checkpoint_dir=ckpt,
        dist_info=dist_info,
        fingerprint=fingerprint,
        guide=Guide(guide, dist_info.device) if guide else None,
        snapshots=snapshots,
    )
    if dist_info.is_main:
        (out / SETTINGS_FILE).unlink(missing_ok=True)
        (out / RECIPE_FILE).unlink(missing_ok=True)
        out.mkdir(parents=True, exist_ok=True)
        with atomic_path(out / LOG_FILE) as tmp:
            shutil.copyfile(ckpt / LOG_FILE, tmp)
        # Also with none kept: an earlier run's snapshots would be taken for this model's.
        collect(
            ckpt / SNAPSHOT_DIR,
            out / SNAPSHOT_DIR,
            summary.get("snapshots", []),
            keep_source=keep_checkpoint,
        )
        info = {
            "init": init,
            "guide": guide,
            "config": cfg.model_dump(),
            "negatives_depth": cfg.negatives_depth,
            "queries": len(data),
            "dropped_without_positive": data.n_dropped,
            "queries_without_candidates": data.n_without_candidates,
            "world_size": dist_info.world_size,
            "summary": summary,
        }
        write_json(out / "train_info.json", info)
        if recipe:
            write_json(out / RECIPE_FILE, {"recipe": recipe, "trained": True})
        card = model_card(
            info, asdict(retriever.settings), recipe, {k: str(v) for k, v in asdict(inputs).items()}
        )
        with atomic_open(out / CARD_FILE, "w", encoding="utf-8") as handle:
            handle.write(card)
        retriever.to("cpu").save(out)  # retriever.json last: the folder is complete once it exists
        if not keep_checkpoint:
            shutil.rmtree(ckpt, ignore_errors=True)
        log.info("trained %d steps -> %s", summary["steps"], out)
    barrier()
    return summary


if __name__ == "__main__":
    run_main(main)

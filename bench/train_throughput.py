"""DPR training steps in this project's loop vs sentence-transformers' trainer: same model, data,
batch, loss, optimizer, precision and threads; steps/s and peak memory of each, each in its own process.

Ours is ``pipeline.training.loop.train`` (DPR's NCE over the positive, k = 1 BM25 hard negative and
the in-batch negatives) as bench/train_budget.py drives it; sentence-transformers' is
``SentenceTransformerTrainer`` with ``MultipleNegativesRankingLoss`` (MNRL) on (anchor, positive,
negative) triplets, which is the same loss: one softmax per query over every positive and hard
negative of the batch. Both sides get:

- all-MiniLM-L6-v2 (``resolve_model_path("minilm")``), mean pooling, L2-normalised embeddings;
- the same triplets in the same order: a fresh synthkb and its BM25 hard negatives (``demo_train_data``
  of bench/train_budget.py), batched as our loop batches them (its seeded epoch order, its per-(qid,
  epoch) negative). They are written out in that order and sentence-transformers reads them with a
  sequential batch sampler: its default shuffles, and ``NO_DUPLICATES`` reorders, so neither would
  give the same batches;
- passages as the pair (title, text) at 128 tokens, queries at 32 (config.yaml ``model:``):
  sentence-transformers gets ``router_mapping`` anchor -> query, positive/negative -> document and
  the Transformer module's ``query_length`` 32 / ``document_length`` 128, which tokenises exactly as
  ours (same ids, token types, masks). Its MNRL embeds the anchors in one forward and merges positives
  and negatives into a second, as ours embeds queries and passages;
- cosine similarity at temperature 0.05 = MNRL's scale 20; AdamW at lr 2e-5, weight decay 0, linear
  warm-up over int(0.1 x steps) then linear decay, gradient clipping at 2.0 (config ``dpr:``);
- fp32, and bf16 autocast as a second setting where the CPU computes bf16 natively
  (pipeline.core.precision; sentence-transformers: ``bf16=True``). Ours autocasts the encoder only;
  the trainer's autocast also covers pooling and the loss;
- the same torch thread count, set in each process before the model loads.

Sentence-transformers is set up not to do more than ours: no evaluation, saving, logging or progress
bar (ours keeps its JSONL log and progress lines, as it always runs). Its optimizer is the trainer's
default (``adamw_torch_fused`` on torch >= 2.8), since that is what a user of it gets; ours is the
same fused kernel (``pipeline.training.engine.adamw``); ``--st-optim adamw_torch`` gives the trainer the
per-tensor loop instead.

What is timed: each side runs in a fresh subprocess (so peak RSS is per side: VmHWM, model, data and
imports included; the RSS before training is printed beside it). Steps are timed from the end of one
optimizer step to the end of the next (ours: ``train``'s ``on_step_end``; sentence-transformers: a
``TrainerCallback.on_step_end``), so every per-step cost counts on both sides, data and tokenisation
included (the HF trainer fetches and collates a batch before ``on_step_begin``, so begin-to-end would
leave that out). The median step after ``--warmup`` steps is the steady state; end-to-end is the
wall time of ``train(...)`` / ``trainer.train()`` for all steps (model load and building the trainer
are not counted; the trainer's construction time is printed). Runs alternate ours, ST, ST, ours, ...
over ``--repeats`` so drift in machine load hits both alike; medians over runs are reported.

Peak RSS follows glibc's allocator as much as the tensors: both sides save the same 1.2 GB of
activations for backward (counted with saved-tensor hooks), yet in one measurement their peaks were
2.6 GB (ours) and 2.4 GB with glibc's default dynamic mmap threshold, and 2.09 and 2.10 GB with
``MALLOC_MMAP_THRESHOLD_=131072`` in the environment (both children inherit it; it costs page faults,
so time without it).

Checking that both compute the same thing: before timing, each side trains ``--check-steps`` steps
with dropout off (the one source of randomness; the sides draw their masks differently) and the
losses of those steps are printed side by side: step 1 is the same weights on the same batch, later
steps also test that the updates (lr schedule, clipping, AdamW) agree.

    python bench/train_throughput.py --quick        # fp32, 60 entities, 6 steps x 2 runs per side: < 4 min, 2 cores
    python bench/train_throughput.py                # the demo's synthkb, 30 steps x 3 runs, fp32 and (native) bf16
    python bench/train_throughput.py --precision bf16 --st-optim adamw_torch

The last lines are machine-readable, one per precision: ``RESULT train_throughput precision=<p>
ratio=<ST median step time / ours> e2e_ratio=<ST end-to-end time / ours> rss_ratio=<ST peak RSS /
ours>``; > 1 means ours is faster or smaller. Needs sentence-transformers with its training extras
(``pip install -e .[bench]``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from machine import cpu_model_name, current_rss_mib, peak_rss_mib  # noqa: E402  (bench/machine.py)
from st_trainer import quiet_cpu_arguments  # noqa: E402  (bench/st_trainer.py)

from pipeline.core.precision import cpu_has_native_bf16

if TYPE_CHECKING:  # the sentence-transformers side never imports the training data code
    from pipeline.training.data import TrainData

BATCH = 16
HARD_NEGATIVES = 1
QUERY_MAX_LEN = 32
PASSAGE_MAX_LEN = 128
TEMPERATURE = 0.05
LR = 2e-5
WARMUP_RATIO = 0.1
MAX_GRAD_NORM = 2.0
DEPTH = 30  # as demo_train_data builds TrainData
SEED = 0
TRIPLETS_FILE = "triplets.json"
SIDES = {"ours": "ours", "st": "sentence-transformers"}
# Defaults of the options a run leaves out; --quick took 3.6-4 minutes on 2 cores at load average 4-6.
FULL = {"entities": 320, "steps": 30, "repeats": 3, "check_steps": 3, "precision": "both"}
QUICK = {"entities": 60, "steps": 6, "repeats": 2, "check_steps": 2, "precision": "fp32"}


# ---- the machine ------------------------------------------------------------------------------------


# ---- the data both sides train on ---------------------------------------------------------------------


def steps_per_epoch(n_queries: int) -> int:
    """Our loop's own count (pipeline.training.loop.schedule), so the triplets follow its epochs; a
    ConfigError when the queries are fewer than one batch."""
    from pipeline.training.loop import TrainConfig, schedule

    return schedule(n_queries, TrainConfig(batch_size=BATCH, hard_negatives=HARD_NEGATIVES))[0]


def write_triplets(data: TrainData, steps: int, path: Path) -> None:
    """The (query, positive, hard negative) of every query our loop trains on in ``steps`` steps, in its
    order: the same functions the loop calls (epoch_order, micro_batch_indices, TrainData.batch), so the
    sentence-transformers side sees our batches row for row. Passages are [title, text] pairs."""
    from pipeline.training.data import epoch_order, micro_batch_indices

    per_epoch = steps_per_epoch(len(data))
    anchors, positives, negatives = [], [], []
    for step in range(steps):
        epoch, position = divmod(step, per_epoch)
        indices = micro_batch_indices(epoch_order(len(data), SEED, epoch), position, BATCH)
        batch = data.batch(indices, HARD_NEGATIVES, epoch)
        pairs = [[title or "", text] for title, text in zip(batch.passage_titles, batch.passage_texts)]
        anchors += batch.query_texts
        positives += pairs[0 :: batch.group_size]
        negatives += pairs[1 :: batch.group_size]
    path.write_text(json.dumps({"anchor": anchors, "positive": positives, "negative": negatives}))


def load_train_data(work: Path) -> TrainData:
    """TrainData over the files demo_train_data wrote under ``work`` (same depth and seed)."""
    from pipeline.training.data import TrainData, TrainInputs

    skb = work / "skb"
    inputs = TrainInputs(
        skb / "queries.train.parquet",
        skb / "qrels.train.parquet",
        work / "negatives.parquet",
        skb / "corpus.parquet",
    )
    return TrainData(inputs, depth=DEPTH, seed=SEED)


def without_dropout(model: torch.nn.Module) -> None:
    """Dropout off in every layer (BERT's attention reads its module's p too): the sides draw their
    masks differently, so only without it can their losses agree."""
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0


def describe_optimizer(optimizer: torch.optim.Optimizer) -> str:
    """Class and implementation: fused/foreach None means torch's default, a per-tensor loop on CPU."""
    group = optimizer.param_groups[0]
    return (
        f"{type(optimizer).__module__}.{type(optimizer).__name__} "
        f"fused={group.get('fused')} foreach={group.get('foreach')}"
    )


# ---- one side, in its own process -----------------------------------------------------------------


def run_ours(work: Path, steps: int, precision: str, no_dropout: bool) -> dict:
    from pipeline.retrieval.model import Retriever, RetrieverSettings
    from pipeline.training.engine import LOG_FILE, adamw
    from pipeline.training.loop import TrainConfig, train

    data = load_train_data(work)
    retriever = Retriever.from_pretrained(
        "minilm",
        RetrieverSettings(
            similarity="cosine",
            temperature=TEMPERATURE,
            query_max_len=QUERY_MAX_LEN,
            passage_max_len=PASSAGE_MAX_LEN,
        ),
    )
    if no_dropout:
        without_dropout(retriever)
    cfg = TrainConfig(
        lr=LR,
        batch_size=BATCH,
        hard_negatives=HARD_NEGATIVES,
        in_batch=True,
        warmup_ratio=WARMUP_RATIO,
        weight_decay=0.0,
        max_grad_norm=MAX_GRAD_NORM,
        epochs=math.ceil(steps / steps_per_epoch(len(data))),
        max_steps=steps,
        checkpoint_every=0,
        precision=precision,
        seed=SEED,
    )
    # The optimizer train() builds, built here only to name it (no state until its first step).
    probe = adamw(retriever, cfg.lr, cfg.weight_decay)
    optimizer = describe_optimizer(probe)
    del probe
    checkpoint_dir = work / f"ours-{time.monotonic_ns()}"
    rss_before = current_rss_mib()
    step_ends: list[float] = []
    began = time.perf_counter()
    summary = train(
        retriever,
        data,
        cfg,
        checkpoint_dir=checkpoint_dir,
        on_step_end=lambda _: step_ends.append(time.perf_counter()),
    )
    ended = time.perf_counter()
    records = [json.loads(line) for line in (checkpoint_dir / LOG_FILE).open()]
    return {
        "began": began,
        "ended": ended,
        "step_ends": step_ends,
        "losses": [r["loss"] for r in records],
        "lrs": [r["lr"] for r in records],
        "computed_in": summary["compute_precision"],
        "rss_before_mib": rss_before,
        "optimizer": optimizer,
        "attention": retriever.query_model.config._attn_implementation,
        "setup_s": 0.0,
    }


def run_st(work: Path, steps: int, precision: str, no_dropout: bool, optim: str | None) -> dict:
    from datasets import Dataset
    from sentence_transformers import (
        DefaultBatchSampler,
        SentenceTransformer,
        SentenceTransformerTrainer,
    )
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
    from torch.utils.data import SequentialSampler
    from transformers import TrainerCallback

    from pipeline.core.config import resolve_model_path

    class RecordedMNRL(MultipleNegativesRankingLoss):
        """MNRL that keeps each step's loss (the trainer logs none with logging off)."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.values: list[torch.Tensor] = []

        def forward(self, sentence_features, labels):
            loss = super().forward(sentence_features, labels)
            self.values.append(loss.detach())
            return loss

    class StepClock(TrainerCallback):
        def __init__(self):
            self.step_ends: list[float] = []
            self.lrs: list[float] = []

        def on_step_begin(self, args, state, control, optimizer=None, **kwargs):
            self.lrs.append(optimizer.param_groups[0]["lr"])

        def on_step_end(self, args, state, control, **kwargs):
            self.step_ends.append(time.perf_counter())

    def sequential_batches(dataset, batch_size, drop_last, **kwargs):
        return DefaultBatchSampler(
            SequentialSampler(dataset), batch_size=batch_size, drop_last=drop_last, **kwargs
        )

    dataset = Dataset.from_dict(json.loads((work / TRIPLETS_FILE).read_text()))
    model = SentenceTransformer(resolve_model_path("minilm"), device="cpu")
    model[0].query_length, model[0].document_length = QUERY_MAX_LEN, PASSAGE_MAX_LEN
    if no_dropout:
        without_dropout(model)
    loss = RecordedMNRL(model, scale=1 / TEMPERATURE)
    extra = {"optim": optim} if optim else {}
    args = quiet_cpu_arguments(
        work / f"st-{time.monotonic_ns()}",
        BATCH,
        steps,
        LR,
        WARMUP_RATIO,
        max_grad_norm=MAX_GRAD_NORM,
        bf16=precision == "bf16",
        batch_sampler=sequential_batches,
        router_mapping={"anchor": "query", "positive": "document", "negative": "document"},
        seed=SEED,
        **extra,
    )
    clock = StepClock()
    tick = time.perf_counter()
    trainer = SentenceTransformerTrainer(
        model=model, args=args, train_dataset=dataset, loss=loss, callbacks=[clock]
    )
    setup_s = time.perf_counter() - tick
    rss_before = current_rss_mib()
    began = time.perf_counter()
    trainer.train()
    ended = time.perf_counter()
    optimizer = getattr(trainer.optimizer, "optimizer", trainer.optimizer)  # inside accelerate's wrapper
    return {
        "began": began,
        "ended": ended,
        "step_ends": clock.step_ends,
        "losses": [float(v) for v in loss.values],
        "lrs": clock.lrs,
        "computed_in": "bf16" if args.bf16 else "fp32",
        "rss_before_mib": rss_before,
        "optimizer": f"{getattr(args.optim, 'value', args.optim)} = {describe_optimizer(optimizer)}",
        "attention": model[0].auto_model.config._attn_implementation,
        "setup_s": setup_s,
    }


def child(args: argparse.Namespace) -> None:
    # Before anything loads, so both sides compute on the same number of threads.
    torch.set_num_threads(args.threads)
    if args.child == "ours":
        result = run_ours(args.work, args.steps, args.precision, args.no_dropout)
    else:
        result = run_st(args.work, args.steps, args.precision, args.no_dropout, args.st_optim)
    result.update(
        side=args.child,
        steps=args.steps,
        threads_after=torch.get_num_threads(),
        peak_rss_mib=peak_rss_mib(),
    )
    args.out.write_text(json.dumps(result))


def spawn(
    side: str, work: Path, steps: int, precision: str, args: argparse.Namespace, no_dropout: bool
) -> dict:
    """Run one side in a fresh interpreter; its output goes to a log, shown when it fails."""
    out = work / f"result-{side}-{time.monotonic_ns()}.json"
    log = out.with_suffix(".log")
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        side,
        "--work",
        str(work),
        "--steps",
        str(steps),
        "--precision",
        precision,
        "--threads",
        str(args.threads),
        "--out",
        str(out),
    ]
    command += ["--no-dropout"] if no_dropout else []
    command += ["--st-optim", args.st_optim] if args.st_optim else []
    # Offline: the model is a local folder and nothing should look for it elsewhere.
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    with log.open("w") as handle:
        done = subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT, env=env, check=False)
    if done.returncode != 0 or not out.exists():
        sys.stderr.write(log.read_text()[-6000:])
        raise SystemExit(f"the {SIDES[side]} run failed (exit {done.returncode}); its log is above")
    return json.loads(out.read_text())


# ---- the parent: data, checks, alternating runs, report --------------------------------------------


def step_times(result: dict, warmup: int) -> list[float]:
    """Seconds of each step after the first ``warmup``: from the end of the step before (for step 1,
    from the call to train) to its own end."""
    ends = [result["began"], *result["step_ends"]]
    return [b - a for a, b in zip(ends, ends[1:])][warmup:]


def summarise(result: dict, warmup: int) -> dict:
    steps = len(result["step_ends"])
    total = result["ended"] - result["began"]
    return {
        "step_s": statistics.median(step_times(result, warmup)),
        "first_step_s": step_times(result, 0)[0],
        "total_s": total,
        "steps": steps,
        "peak_rss_mib": result["peak_rss_mib"],
        "rss_before_mib": result["rss_before_mib"],
        "setup_s": result["setup_s"],
    }


def check(work: Path, steps: int, precision: str, args: argparse.Namespace, where: str) -> None:
    ours = spawn("ours", work, steps, precision, args, no_dropout=True)
    st = spawn("st", work, steps, precision, args, no_dropout=True)
    print(f"check [{where}]: {steps} steps with dropout off, same start weights and batches")
    for i, (a, b) in enumerate(zip(ours["losses"], st["losses"]), 1):
        print(
            f"  step {i}: loss ours {a:.6f}  sentence-transformers {b:.6f}  |diff| {abs(a - b):.2e}; "
            f"lr ours {ours['lrs'][i - 1]:.3e} ST {st['lrs'][i - 1]:.3e}"
        )
    if len(ours["losses"]) != len(st["losses"]):
        print(f"  steps logged: ours {len(ours['losses'])}, sentence-transformers {len(st['losses'])}")
    print(
        f"  computed in: ours {ours['computed_in']}, sentence-transformers {st['computed_in']}; attention "
        f"ours {ours['attention']}, ST {st['attention']}; optimizer ours {ours['optimizer']}, ST {st['optimizer']}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="defaults for a short run (in brackets below)")
    ap.add_argument("--entities", type=int, help="synthkb size: 320, the demo's [60]")
    ap.add_argument("--steps", type=int, help="training steps per run: 30 [6]")
    ap.add_argument("--warmup", type=int, default=2, help="steps left out of the median step time: 2")
    ap.add_argument("--repeats", type=int, help="runs per side per precision, alternating order: 3 [2]")
    ap.add_argument("--check-steps", type=int, help="dropout-off steps to compare losses, 0 = none: 3 [2]")
    ap.add_argument(
        "--precision",
        choices=["fp32", "bf16", "both"],
        help="both = fp32, then bf16 where the CPU has native bf16: both [fp32]",
    )
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument(
        "--st-optim", default=None, help="the trainer's `optim` (default: its own default, adamw_torch_fused)"
    )
    # Used by the parent to start one side in a fresh process.
    ap.add_argument("--child", choices=list(SIDES), help=argparse.SUPPRESS)
    ap.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--no-dropout", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    defaults = QUICK if args.quick else FULL
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.steps <= args.warmup:
        ap.error(f"--steps must exceed --warmup ({args.warmup}) to leave steps to time")

    native_bf16 = cpu_has_native_bf16()
    precisions = {"fp32": ["fp32"], "bf16": ["bf16"], "both": ["fp32", "bf16"]}[args.precision]
    if not native_bf16 and "bf16" in precisions:
        print("this CPU has no native bf16 (AVX512-BF16 or AMX): bf16 is left out (it would compute fp32)")
        precisions = [p for p in precisions if p != "bf16"]
    if not precisions:
        return
    cpu = cpu_model_name()

    from train_budget import demo_train_data  # the data stage pulls in the pipeline: parent only

    results: dict[str, dict[str, list[dict]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        data, _ = demo_train_data(work, args.entities)
        write_triplets(data, max(args.steps, args.check_steps), work / TRIPLETS_FILE)
        print(
            f"cpu: {cpu}, {os.cpu_count()} cpus, native bf16 {'yes' if native_bf16 else 'no'}; torch threads "
            f"{args.threads}; load average {os.getloadavg()[0]:.2f}"
        )
        print(
            f"data: synthkb {args.entities} entities, {len(data)} train queries; {args.steps} steps x {BATCH} "
            f"queries, k={HARD_NEGATIVES} hard negative + in-batch, query/passage max {QUERY_MAX_LEN}/"
            f"{PASSAGE_MAX_LEN} tokens, cosine / {TEMPERATURE} (MNRL scale {1 / TEMPERATURE:g}), AdamW lr {LR:g}"
        )
        for precision in precisions:
            where = f"{precision}, {cpu}"
            if args.check_steps:
                check(work, args.check_steps, precision, args, where)
            runs: dict[str, list[dict]] = {"ours": [], "st": []}
            for repeat in range(args.repeats):
                order = ["ours", "st"] if repeat % 2 == 0 else ["st", "ours"]
                for side in order:
                    result = spawn(side, work, args.steps, precision, args, no_dropout=False)
                    if result["threads_after"] != args.threads:
                        print(f"  warning: {SIDES[side]} ended on {result['threads_after']} threads")
                    summary = summarise(result, args.warmup)
                    runs[side].append(summary)
                    print(
                        f"run {repeat + 1}/{args.repeats} {SIDES[side]:21s} [{where}]: median step "
                        f"{summary['step_s']:.3f} s, first {summary['first_step_s']:.2f} s, "
                        f"end-to-end {summary['total_s']:.1f} s for "
                        f"{summary['steps']} steps, peak RSS {summary['peak_rss_mib']:.0f} MiB"
                    )
            results[precision] = runs

    print()
    for precision, runs in results.items():
        where = f"{precision}, {cpu}, {args.threads} threads"

        def median(side: str, key: str, runs=runs) -> float:
            return statistics.median(r[key] for r in runs[side])

        print(
            f"{where}: medians of {args.repeats} runs per side, {args.steps} steps, warm-up {args.warmup} left out"
        )
        for side in ("ours", "st"):
            step, total = median(side, "step_s"), median(side, "total_s")
            setup = (
                f"; trainer built in {median(side, 'setup_s'):.2f} s (not counted)" if side == "st" else ""
            )
            print(
                f"  {SIDES[side]:21s} median step {step:.3f} s = {1 / step:.3f} steps/s [{precision}, {cpu}]; "
                f"end-to-end {args.steps / total:.3f} steps/s ({total:.1f} s); peak RSS "
                f"{median(side, 'peak_rss_mib'):.0f} MiB (before training {median(side, 'rss_before_mib'):.0f}){setup}"
            )
    for precision, runs in results.items():
        step_ratio = statistics.median(r["step_s"] for r in runs["st"]) / statistics.median(
            r["step_s"] for r in runs["ours"]
        )
        e2e_ratio = statistics.median(r["total_s"] for r in runs["st"]) / statistics.median(
            r["total_s"] for r in runs["ours"]
        )
        rss_ratio = statistics.median(r["peak_rss_mib"] for r in runs["st"]) / statistics.median(
            r["peak_rss_mib"] for r in runs["ours"]
        )
        print(
            f"RESULT train_throughput precision={precision} ratio={step_ratio:.3f} "
            f"e2e_ratio={e2e_ratio:.3f} rss_ratio={rss_ratio:.3f}"
        )


if __name__ == "__main__":
    main()

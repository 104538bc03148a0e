"""CCR overhead: one training step with the CCR loss vs plain NCE, same batch, same model.

Both variants run the identical encoder forward/backward and AdamW step on the same tokenised batch;
only the loss differs: plain NCE is ``F.cross_entropy(scores, positives)`` (what a DPR trainer does),
CCR is ``pipeline.training.losses.contrastive_loss`` with β = 0.5 (log-softmax, NLL and the mean over P).
Repetitions are interleaved (NCE, CCR, CCR, NCE, ...) so machine load drifts hit both alike; the ratio
is median(CCR step) / median(NCE step), > 1 means CCR is slower.

    python bench/ccr_overhead.py --quick            # MiniLM, < 2 minutes on 2 cores
    python bench/ccr_overhead.py --model tiny       # tiny random BERT: the loss's share is largest

The last line is machine-readable: ``RESULT ccr_overhead ratio=<float>``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.retrieval.model import Retriever, RetrieverSettings, make_tiny_encoder
from pipeline.training.losses import contrastive_loss, positive_columns, similarity_scores

WORDS = (
    "the river castle engine forest music bridge winter paper garden silver doctor island "
    "market planet violin harbor desert lantern copper meadow of in and was is"
).split()


def _texts(n: int, length: int, offset: int) -> list[str]:
    return [" ".join(WORDS[(i * 7 + j * 3 + offset) % len(WORDS)] for j in range(length)) for i in range(n)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small batch, few repetitions (< 2 min)")
    ap.add_argument("--model", choices=["minilm", "tiny"], default="minilm")
    ap.add_argument("--queries", type=int, default=16)
    ap.add_argument("--hard-negatives", type=int, default=5, help="k (CCR recipe: 5)")
    ap.add_argument("--in-batch", action="store_true", help="in-batch negatives in P")
    ap.add_argument("--passage-words", type=int, default=90)
    ap.add_argument("--reps", type=int, default=10, help="timed steps per variant")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument(
        "--clock",
        choices=["wall", "process"],
        default="wall",
        help="ratio from wall-clock or process CPU time (steadier on a shared machine)",
    )
    args = ap.parse_args()
    if args.quick:
        args.queries, args.reps = 8, 4
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    settings = RetrieverSettings(similarity="cosine", temperature=1.0, query_max_len=32, passage_max_len=128)
    with tempfile.TemporaryDirectory() as tmp:
        base = str(make_tiny_encoder(Path(tmp) / "tiny")) if args.model == "tiny" else "minilm"
        model = Retriever.from_pretrained(base, settings)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-7)
    group = args.hard_negatives + 1
    q_batch = model.tokenize_queries(_texts(args.queries, 10, 0))
    p_batch = model.tokenize_passages(
        ["a title"] * (args.queries * group), _texts(args.queries * group, args.passage_words, 1)
    )
    positives = positive_columns(args.queries, group)

    def step(variant: str) -> tuple[float, float]:
        start, start_cpu = time.perf_counter(), time.process_time()
        optimizer.zero_grad(set_to_none=True)
        scores = similarity_scores(model.embed_queries(q_batch), model.embed_passages(p_batch), "cosine", 1.0)
        if variant == "nce":
            if args.in_batch:
                loss = F.cross_entropy(scores, positives)
            else:
                cols = positives.unsqueeze(1) + torch.arange(group).unsqueeze(0)
                loss = F.cross_entropy(scores.gather(1, cols), torch.zeros_like(positives))
        else:
            loss, _ = contrastive_loss(scores, positives, group, in_batch=args.in_batch, beta=0.5)
        loss.backward()
        optimizer.step()
        return time.perf_counter() - start, time.process_time() - start_cpu

    step("nce")
    step("ccr")  # warm-up: allocator, kernels, lazily built tokenizer state
    times = {"nce": [], "ccr": []}
    cpu = {"nce": [], "ccr": []}
    for rep in range(args.reps):
        order = ("nce", "ccr") if rep % 2 == 0 else ("ccr", "nce")
        for variant in order:
            wall, proc = step(variant)
            times[variant].append(wall)
            cpu[variant].append(proc)
    nce, ccr = statistics.median(times["nce"]), statistics.median(times["ccr"])
    nce_cpu, ccr_cpu = statistics.median(cpu["nce"]), statistics.median(cpu["ccr"])

    # The loss alone on a score matrix of the same shape: what CCR adds in absolute terms.
    s = torch.randn(args.queries, args.queries * group, requires_grad=True)
    loss_only = {"nce": 0.0, "ccr": 0.0}
    for chunk in range(20):
        for variant in ("nce", "ccr") if chunk % 2 == 0 else ("ccr", "nce"):
            tick = time.perf_counter()
            for _ in range(10):
                if variant == "nce":
                    F.cross_entropy(s, positives).backward()
                else:
                    contrastive_loss(s, positives, group, beta=0.5)[0].backward()
            loss_only[variant] += (time.perf_counter() - tick) / 200

    print(
        f"model={args.model} queries={args.queries} k={args.hard_negatives} in_batch={args.in_batch} "
        f"passage_tokens={p_batch['input_ids'].shape[1]} reps={args.reps} threads={args.threads}"
    )
    print(
        f"step NCE  median {nce * 1000:9.1f} ms  (all: {', '.join(f'{t * 1000:.0f}' for t in times['nce'])})"
    )
    print(
        f"step CCR  median {ccr * 1000:9.1f} ms  (all: {', '.join(f'{t * 1000:.0f}' for t in times['ccr'])})"
    )
    print(
        f"process CPU time per step: NCE {nce_cpu * 1000:.1f} ms, CCR {ccr_cpu * 1000:.1f} ms "
        f"(ratio {ccr_cpu / nce_cpu:.4f}); wall ratio {ccr / nce:.4f}, "
        f"fastest-step ratio {min(times['ccr']) / min(times['nce']):.4f}"
    )
    print(
        f"loss only: NCE {loss_only['nce'] * 1e6:.0f} us, CCR {loss_only['ccr'] * 1e6:.0f} us per forward+backward"
    )
    ratio = ccr / nce if args.clock == "wall" else ccr_cpu / nce_cpu
    print(f"RESULT ccr_overhead ratio={ratio:.4f}")


if __name__ == "__main__":
    main()

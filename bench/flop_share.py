"""Where a demo encoding job and a demo DPR step spend their time, and what share of this CPU's
measured matmul peak they reach: measure first where the time goes.

Three measurements, one process, ``--threads`` torch threads (the demo's encode jobs run 1 thread,
its training jobs 2):

- **peak**: the best GFLOP/s of ``torch.mm`` on MiniLM's own linear shapes (tokens x 384 x 1536,
  tokens x 1536 x 384) and on a 2048^3 square, per precision. This is what the CPU's matmul kernels
  reach here, the practical ceiling of any transformer job on it.
- **encode**: a corpus through the project's own corpus encoder
  (``pipeline.retrieval.encode.encode_buffer``: length-sorted batches of 64, padded to each batch's
  longest row, (title, text) pairs at 128 tokens). ``--corpus`` names it, e.g. the demo's
  resources/synthkb/corpus.parquet (6,055 passages); without it, the fresh synthkb the training part
  uses (the bare generator at ``--entities``: 2,302 passages at 320, without the demo's false-negative
  passages). Tokenising is timed alone,
  then the whole call; FLOPs counted by ``torch.utils.flop_counter.FlopCounterMode`` on the same call.
- **train**: DPR steps as the demo trains them (batch 16 queries, k = 1 BM25 hard negative, in-batch
  negatives, NCE at τ 0.05, fused AdamW, clipping at 2.0), each phase timed on its own: tokenising,
  forward + loss, backward, clipping + optimizer step. FLOPs of forward + backward counted as above.

Achieved GFLOP/s = counted FLOPs / measured seconds; share = achieved / peak in the same precision.
The count covers matmuls and attention (what FlopCounterMode counts); layer norms, GELU, softmax,
embedding lookups and pooling cost time but are not counted, which is part of what the share shows.

    python bench/flop_share.py --threads 1 --corpus resources/synthkb/corpus.parquet   # after make demo
    python bench/flop_share.py --threads 2 --quick         # 60 entities, a minute

The last lines are machine-readable: ``RESULT flop_share part=<peak|encode|train> precision=<p>
gflops=<…> share=<…>``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq
import torch
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import cpu_model_name  # noqa: E402
from train_budget import demo_train_data  # noqa: E402

from pipeline.core.precision import autocast, autocast_dtype, cpu_has_native_bf16  # noqa: E402
from pipeline.retrieval.encode import encode_buffer, tokenize_buffer  # noqa: E402
from pipeline.retrieval.model import Retriever, RetrieverSettings  # noqa: E402
from pipeline.training.engine import adamw  # noqa: E402
from pipeline.training.loop import DualEncoder  # noqa: E402
from pipeline.training.losses import NCELoss, positive_columns, similarity_scores  # noqa: E402

HIDDEN, FFN = 384, 1536  # all-MiniLM-L6-v2


def counted_flops(fn) -> int:
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


def matmul_peak(dtype: torch.dtype, seconds: float = 2.0) -> dict[str, float]:
    """Best GFLOP/s of torch.mm per shape; each shape is run for about ``seconds``."""
    shapes = {"tokens x 384 x 1536": (4096, HIDDEN, FFN), "tokens x 1536 x 384": (4096, FFN, HIDDEN)}
    shapes["2048^3"] = (2048, 2048, 2048)
    best = {}
    for name, (m, k, n) in shapes.items():
        a, b = torch.randn(m, k).to(dtype), torch.randn(k, n).to(dtype)
        torch.mm(a, b)
        rates, began = [], time.perf_counter()
        while time.perf_counter() - began < seconds:
            tick = time.perf_counter()
            torch.mm(a, b)
            rates.append(2 * m * k * n / (time.perf_counter() - tick) / 1e9)
        best[name] = max(rates)
    return best


def measure_encode(retriever, titles: list[str], texts: list[str], amp: bool, repeats: int) -> dict:
    device = torch.device("cpu")

    def encode():
        return encode_buffer(retriever, texts, titles, batch_size=64, device=device, amp=amp)

    def tokenise():
        return tokenize_buffer(retriever, texts, titles)

    encode_buffer(retriever, texts[:256], titles[:256], batch_size=64, device=device, amp=amp)  # warm-up
    tokenise_s = min(_timed(tokenise) for _ in range(repeats))
    whole = min(_timed(encode) for _ in range(repeats))
    return {
        "passages": len(texts),
        "mean_tokens": float(tokenise()["attention_mask"].sum(axis=1).mean()),
        "tokenise_s": tokenise_s,
        "forward_s": whole - tokenise_s,
        "total_s": whole,
        "flops": counted_flops(encode),
    }


def measure_train(retriever, data, precision: str, steps: int) -> dict:
    """Median seconds per phase of ``steps`` DPR steps (after one warm-up step), the FLOPs of a step's
    forward and backward (mean over the timed steps) and the FLOP/s they reached."""
    device = torch.device("cpu")
    model = DualEncoder(retriever).train()
    optimizer = adamw(retriever, 2e-5, 0.0)
    amp_dtype = autocast_dtype(device, precision)
    loss_fn = NCELoss()
    settings = retriever.settings
    phases: dict[str, list[float]] = {"tokenise": [], "forward": [], "backward": [], "optimizer": []}

    def forward(queries, passages, batch):
        with autocast(device, amp_dtype):
            q_emb, p_emb = model(queries, passages)
        scores = similarity_scores(q_emb, p_emb, settings.similarity, settings.temperature)
        columns = positive_columns(len(batch.query_texts), batch.group_size)
        return loss_fn(scores, columns, batch.group_size, in_batch=True)[0]

    timed = []  # the timed steps' inputs: their FLOPs are counted afterwards (the counter costs time)
    for step in range(steps + 1):
        batch = data.batch(torch.arange(step * 16, step * 16 + 16).numpy() % len(data), 1, 0)
        tick = time.perf_counter()
        queries = retriever.tokenize_queries(batch.query_texts)
        passages = retriever.tokenize_passages(batch.passage_titles, batch.passage_texts)
        t_tok = time.perf_counter()
        loss = forward(queries, passages, batch)
        t_fwd = time.perf_counter()
        loss.backward()
        t_bwd = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(retriever.parameters(), 2.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        t_opt = time.perf_counter()
        if step == 0:  # warm-up
            continue
        timed.append((queries, passages, batch))
        for name, seconds in zip(phases, (t_tok - tick, t_fwd - t_tok, t_bwd - t_fwd, t_opt - t_bwd)):
            phases[name].append(seconds)
    # Batches are padded to their longest row, so each timed step is counted on its own inputs.
    flops = sum(counted_flops(lambda inputs=inputs: forward(*inputs).backward()) for inputs in timed)
    optimizer.zero_grad(set_to_none=True)
    compute_s = sum(phases["forward"]) + sum(phases["backward"])
    medians = {name: statistics.median(values) for name, values in phases.items()}
    return {
        "phases_s": medians,
        "step_s": sum(medians.values()),
        "flops": flops / len(timed),
        "rate": flops / compute_s,
    }


def _timed(fn) -> float:
    tick = time.perf_counter()
    fn()
    return time.perf_counter() - tick


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="60 entities, 4 training steps")
    ap.add_argument("--entities", type=int, default=320, help="synthkb size (the demo's: 320)")
    ap.add_argument("--corpus", type=Path, help="corpus.parquet to encode (default: the generated synthkb's)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=8, help="timed DPR steps per precision")
    ap.add_argument("--repeats", type=int, default=2, help="encoding passes per precision (best is kept)")
    args = ap.parse_args()
    if args.quick:
        args.entities, args.steps = 60, 4
    torch.set_num_threads(args.threads)
    precisions = ["fp32"] + (["bf16"] if cpu_has_native_bf16() else [])
    print(
        f"CPU: {cpu_model_name()}; torch {torch.__version__}, {args.threads} thread(s); precisions {precisions}"
    )

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        data, skb = demo_train_data(Path(tmp), args.entities)
        corpus = pq.read_table(args.corpus or skb / "corpus.parquet", columns=["title", "text"])
        titles, texts = corpus.column("title").to_pylist(), corpus.column("text").to_pylist()
        for precision in precisions:
            dtype = torch.bfloat16 if precision == "bf16" else torch.float32
            peak = matmul_peak(dtype)
            top = max(peak.values())
            print(
                f"\n== {precision}: torch.mm peak "
                + ", ".join(f"{k} {v:.0f}" for k, v in peak.items())
                + " GFLOP/s"
            )
            results.append(("peak", precision, top, 1.0))

            # one fresh MiniLM per precision: encoded first (eval mode), then trained
            retriever = Retriever.from_pretrained(
                "minilm", RetrieverSettings(query_max_len=32, passage_max_len=128)
            ).eval()
            enc = measure_encode(retriever, titles, texts, precision == "bf16", args.repeats)
            rate = enc["flops"] / enc["forward_s"] / 1e9
            print(
                f"encode {enc['passages']} passages (mean {enc['mean_tokens']:.0f} tokens): "
                f"{enc['total_s']:.2f} s = tokenise {enc['tokenise_s']:.2f} + model {enc['forward_s']:.2f} "
                f"({enc['passages'] / enc['total_s']:.0f} passages/s); {enc['flops'] / 1e9:.0f} GFLOP counted "
                f"({enc['flops'] / enc['passages'] / 1e9:.2f} per passage), "
                f"{rate:.0f} GFLOP/s in the model = {rate / top:.0%} of peak"
            )
            results.append(("encode", precision, rate, rate / top))

            tr = measure_train(retriever, data, precision, args.steps)
            rate = tr["rate"] / 1e9
            print(
                f"DPR step {tr['step_s']:.3f} s = "
                + " + ".join(f"{k} {v:.3f}" for k, v in tr["phases_s"].items())
                + f"; forward+backward {tr['flops'] / 1e9:.0f} GFLOP counted (mean), {rate:.0f} GFLOP/s = {rate / top:.0%} of peak"
            )
            results.append(("train", precision, rate, rate / top))
    print()
    for part, precision, rate, share in results:
        print(f"RESULT flop_share part={part} precision={precision} gflops={rate:.1f} share={share:.3f}")


if __name__ == "__main__":
    main()

"""The paper recipes' shapes on one device, timed: what pipeline.workflow.cost needs.

Random weights from a config (speed does not depend on the values), bf16 autocast on CUDA:

- **encode**: BERT-base (12 layers, 768) passage encoding at 256 tokens, batch 512, no gradient;
- **dpr step**: a DPR/CCR step with separate BERT-base towers: 128 queries at 64 tokens, 128 positives +
  128 hard negatives at 256 tokens, in-batch negatives (a 128 x 256 softmax), backward, AdamW;
- **ar2 ranker step**: a BERT-large (24 layers, 1024) cross-encoder over 64 queries x 16 candidates at
  256 tokens (listwise cross-entropy), backward, AdamW, in micro-batches of ``--ranker-micro`` pairs
  (gradient accumulation: one optimizer step per 1,024 pairs, as a step of ar2_train_ranker);
- **search**: exact inner-product top-100 of 1,024 queries over chunks of ``--chunk`` x 768 bf16
  passages, ``--chunks`` chunks timed, extrapolated linearly to 21,015,324 passages (NQ/TQ).

Each part runs ``--warmup`` untimed then ``--steps`` timed repetitions, synchronised; its peak memory is
``torch.cuda.max_memory_allocated`` (reset per part). Parts that run out of memory are recorded as such.
Output: ``--out`` JSON ``{"device": ..., "throughputs": [...]}`` whose entries use
pipeline/workflow/throughputs.yaml's fields, so ``python -m pipeline.workflow.cost --measured FILE``
reads them back. ``--small`` shrinks every shape (2-layer, 64-wide towers, 8 queries, 32 tokens) so the
whole script runs on a CPU in seconds: the test and the pre-flight of scripts/gpu_check.sh.

    python bench/paper_shapes.py --out gpu_check/paper_shapes.json
    python bench/paper_shapes.py --device cpu --small --out /tmp/shapes.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

NQ_PASSAGES = 21_015_324
# Full shapes (the paper recipe) and the --small ones.
FULL = {
    "base": {"layers": 12, "hidden": 768, "intermediate": 3072, "heads": 12, "name": "bert-base-uncased"},
    "large": {"layers": 24, "hidden": 1024, "intermediate": 4096, "heads": 16, "name": "bert-large-uncased"},
    "queries": 128,
    "query_tokens": 64,
    "passage_tokens": 256,
    "encode_batch": 512,
    "ar2_queries": 64,
    "ar2_candidates": 16,
    "pair_tokens": 256,
    "search_queries": 1024,
    "dim": 768,
}
SMALL = {
    "base": {"layers": 2, "hidden": 64, "intermediate": 128, "heads": 2, "name": "tiny-base"},
    "large": {"layers": 2, "hidden": 96, "intermediate": 192, "heads": 2, "name": "tiny-large"},
    "queries": 8,
    "query_tokens": 16,
    "passage_tokens": 32,
    "encode_batch": 16,
    "ar2_queries": 4,
    "ar2_candidates": 4,
    "pair_tokens": 32,
    "search_queries": 16,
    "dim": 64,
}


def gpu_key(device: torch.device) -> tuple[str, str]:
    """(short key as throughputs.yaml names GPUs, full name)."""
    if device.type != "cuda":
        return "cpu", "CPU"
    name = torch.cuda.get_device_name(device)
    for key in ("h200", "h100", "a100", "l40s", "v100", "a10"):
        if key in name.lower():
            return key, name
    return name.lower().replace(" ", "-"), name


def encoder(spec: dict, device: torch.device) -> torch.nn.Module:
    from transformers import BertConfig, BertModel

    config = BertConfig(
        vocab_size=30522,
        hidden_size=spec["hidden"],
        num_hidden_layers=spec["layers"],
        num_attention_heads=spec["heads"],
        intermediate_size=spec["intermediate"],
        max_position_embeddings=512,
    )
    return BertModel(config, add_pooling_layer=False).to(device)


def arch(spec: dict) -> dict:
    """The shape pipeline.workflow.cost computes FLOPs from."""
    return {key: spec[key] for key in ("layers", "hidden", "intermediate")}


def tokens(n: int, length: int, device: torch.device) -> dict:
    ids = torch.randint(1000, 30000, (n, length), device=device)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def cls(model: torch.nn.Module, batch: dict) -> torch.Tensor:
    return model(**batch).last_hidden_state[:, 0]


class Timer:
    """Synchronised wall time of ``steps`` repetitions after ``warmup``, and the part's peak memory."""

    def __init__(self, device: torch.device):
        self.device = device

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def run(self, fn, warmup: int, steps: int) -> dict:
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(self.device)
        for _ in range(warmup):
            fn()
        self.sync()
        start = time.perf_counter()
        for _ in range(steps):
            fn()
        self.sync()
        seconds = (time.perf_counter() - start) / steps
        peak = torch.cuda.max_memory_allocated(self.device) / 2**30 if self.device.type == "cuda" else None
        return {"seconds": seconds, "peak_gib": None if peak is None else round(peak, 2)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--small", action="store_true", help="tiny shapes: the CPU pre-flight")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument(
        "--ranker-micro", type=int, default=256, help="pairs per forward/backward of the ranker step"
    )
    ap.add_argument("--chunk", type=int, default=2_000_000, help="passages per search chunk")
    ap.add_argument("--chunks", type=int, default=3)
    ap.add_argument("--parts", nargs="*", default=["encode", "dpr", "ranker", "search"])
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    shapes = SMALL if args.small else FULL
    if args.small:
        args.chunk, args.ranker_micro = min(args.chunk, 5000), min(args.ranker_micro, 8)
    device = torch.device(args.device)
    torch.manual_seed(0)
    amp = (
        torch.autocast("cuda", dtype=torch.bfloat16)
        if device.type == "cuda"
        else torch.autocast("cpu", dtype=torch.bfloat16)
    )
    key, name = gpu_key(device)
    timer = Timer(device)
    out_path = Path(args.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    today = datetime.date.today().isoformat()
    command = "python bench/paper_shapes.py " + " ".join(sys.argv[1:] if argv is None else argv)
    record = {
        "device": name,
        "torch": torch.__version__,
        "small": args.small,
        "throughputs": [],
        "failed": {},
    }

    def entry(**fields) -> None:
        base = {"gpu": key, "gpu_name": name, "precision": "bf16", "status": "measured", "date": today}
        record["throughputs"].append({**base, **fields, "command": command})
        out_path.write_text(json.dumps(record, indent=1))  # every figure on disk as soon as it exists
        print(json.dumps(record["throughputs"][-1]), flush=True)

    base, large = shapes["base"], shapes["large"]

    def attempt(part: str, fn) -> None:
        if part not in args.parts:
            return
        try:
            fn()
        except torch.OutOfMemoryError as exc:
            record["failed"][part] = f"out of memory: {str(exc).splitlines()[0]}"
            out_path.write_text(json.dumps(record, indent=1))
            print(f"{part}: out of memory", flush=True)
        finally:
            if device.type == "cuda":
                torch.cuda.empty_cache()

    def encode() -> None:
        model = encoder(base, device).eval()
        batch = tokens(shapes["encode_batch"], shapes["passage_tokens"], device)

        def step():
            with torch.no_grad(), amp:
                cls(model, batch)

        t = timer.run(step, args.warmup, args.steps)
        entry(
            id=f"{key}-bert-base-encode-bf16-{shapes['passage_tokens']}tok",
            kind="infer",
            model=base["name"],
            arch=arch(base),
            tokens=shapes["passage_tokens"],
            batch=shapes["encode_batch"],
            value=round(shapes["encode_batch"] / t["seconds"], 2),
            unit="passages/s",
            peak_gib=t["peak_gib"],
        )

    def dpr() -> None:
        q_tower, p_tower = encoder(base, device).train(), encoder(base, device).train()
        params = [*q_tower.parameters(), *p_tower.parameters()]
        opt = torch.optim.AdamW(params, lr=1e-5, fused=device.type == "cuda")
        n = shapes["queries"]
        q = tokens(n, shapes["query_tokens"], device)
        p = tokens(2 * n, shapes["passage_tokens"], device)  # positive and one hard negative per query
        target = torch.arange(0, 2 * n, 2, device=device)

        def step():
            opt.zero_grad(set_to_none=True)
            with amp:
                qe = F.normalize(cls(q_tower, q).float(), dim=-1)
                pe = F.normalize(cls(p_tower, p).float(), dim=-1)
                loss = F.cross_entropy(qe @ pe.T / 0.05, target)  # every passage of the batch in the softmax
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 2.0)
            opt.step()

        t = timer.run(step, args.warmup, args.steps)
        entry(
            id=f"{key}-bert-base-dpr-step-bf16",
            kind="train",
            model=base["name"],
            arch=arch(base),
            step=[[n, shapes["query_tokens"]], [2 * n, shapes["passage_tokens"]]],
            batch=n,
            value=round(1 / t["seconds"], 4),
            unit="steps/s",
            peak_gib=t["peak_gib"],
        )

    def ranker() -> None:
        model = encoder(large, device).train()
        head = torch.nn.Linear(large["hidden"], 1).to(device)
        params = [*model.parameters(), *head.parameters()]
        opt = torch.optim.AdamW(params, lr=1e-6, fused=device.type == "cuda")
        k = shapes["ar2_candidates"]
        pairs = shapes["ar2_queries"] * k
        micro = max(k, args.ranker_micro // k * k)  # whole queries per micro-batch
        batch = tokens(pairs, shapes["pair_tokens"], device)

        def step():
            opt.zero_grad(set_to_none=True)
            for start in range(0, pairs, micro):
                part = {name: t[start : start + micro] for name, t in batch.items()}
                with amp:
                    logits = head(cls(model, part)).float().view(-1, k)
                    loss = F.cross_entropy(logits, torch.zeros(len(logits), dtype=torch.long, device=device))
                (loss * len(logits) / shapes["ar2_queries"]).backward()
            torch.nn.utils.clip_grad_norm_(params, 2.0)
            opt.step()

        t = timer.run(step, max(1, args.warmup - 1), max(2, args.steps - 2))
        entry(
            id=f"{key}-bert-large-ar2-ranker-step-bf16",
            kind="train",
            model=large["name"],
            arch=arch(large),
            step=[[pairs, shapes["pair_tokens"]]],
            batch=pairs,
            micro_batch=micro,
            value=round(1 / t["seconds"], 4),
            unit="steps/s",
            peak_gib=t["peak_gib"],
        )

    def search() -> None:
        dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
        queries = torch.randn(shapes["search_queries"], shapes["dim"], device=device, dtype=dtype)
        chunk = torch.randn(args.chunk, shapes["dim"], device=device, dtype=dtype)

        def step():
            torch.topk(queries @ chunk.T, 100, dim=1)

        t = timer.run(step, 1, args.chunks)
        per_query_chunk = t["seconds"] / shapes["search_queries"]
        entry(
            id=f"{key}-exact-search-{'bf16' if dtype == torch.bfloat16 else 'fp32'}",
            kind="search",
            model="flat",
            precision="bf16" if dtype == torch.bfloat16 else "fp32",
            passages=args.chunk,
            dim=shapes["dim"],
            value=round(1 / per_query_chunk, 2),
            unit="queries/s",
            chunks_timed=args.chunks,
            extrapolated_21m_queries_per_s=round(1 / (per_query_chunk * NQ_PASSAGES / args.chunk), 2),
            peak_gib=t["peak_gib"],
        )

    for part, fn in (("encode", encode), ("dpr", dpr), ("ranker", ranker), ("search", search)):
        attempt(part, fn)
    out_path.write_text(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

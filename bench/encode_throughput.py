"""encode_corpus's inner loop vs sentence-transformers ``encode``: same model, texts, max length, batch.

Both encode the same SQuAD paragraphs (title + text) with all-MiniLM-L6-v2 at max length 256, batch
size 32, on the same device, interleaved round by round in one process (the order alternates every
round so drift in machine load hits both sides alike). Ours is ``pipeline.retrieval.encode.encode_buffer`` (what
``encode_table`` runs per buffer): passages as (title, text) pairs, fp16 output, computed in fp32 like
sentence-transformers (``--amp``: ours under its autocast, bf16 on a CPU with native bf16, which
bench/precision.py measures on its own). Sentence-transformers
gets ``"title [SEP] text"``, which tokenises to the same length (the tokenizer maps "[SEP]" to the
separator token), so both sides do the same work; the token totals are printed to prove it.

The last line is ``RESULT encode_throughput_speedup ratio=<ST seconds / our seconds>``: > 1 means ours
is faster. Needs sentence-transformers (``pip install -e .[bench]``).

    python bench/encode_throughput.py --quick      # ~1-2 min on 2 CPU cores
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.core.config import resolve_model_path
from pipeline.core.precision import encoding_dtype, precision_name
from pipeline.retrieval.encode import encode_buffer, resolve_device, tokenize_buffer
from pipeline.retrieval.model import Retriever, RetrieverSettings

SQUAD = (
    Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "squad" / "squad-v1.1-dev-36.json.gz"
)


def load_passages(path: Path, n: int, seed: int) -> tuple[list[str], list[str], str]:
    """(titles, texts, source): SQuAD paragraphs when the file is there, else synthetic ones."""
    if path.exists():
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            data = json.load(handle)["data"]
        pairs = [(a["title"].replace("_", " "), p["context"]) for a in data for p in a["paragraphs"]]
        source = f"SQuAD paragraphs ({path.name})"
    else:
        rng = np.random.default_rng(seed)
        vocab = [f"w{i}" for i in range(5000)]
        pairs = [
            (f"title {i}", " ".join(rng.choice(vocab, int(rng.integers(40, 200)))))
            for i in range(max(n, 2000))
        ]
        source = "synthetic passages"
    pick = np.random.default_rng(seed).permutation(len(pairs))[:n]
    return [pairs[i][0] for i in pick], [pairs[i][1] for i in pick], source


def padded_tokens(lengths: np.ndarray, order: np.ndarray, batch_size: int) -> int:
    """Tokens a forward pass computes when batches follow ``order`` and pad to their longest row."""
    return int(
        sum(
            lengths[order[i : i + batch_size]].max() * len(order[i : i + batch_size])
            for i in range(0, len(order), batch_size)
        )
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="64 passages x 3 rounds")
    parser.add_argument("--passages", type=int, help="passages per round (default 64 quick, 384)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-len", type=int, default=256)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--squad", type=Path, default=SQUAD)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--amp", action="store_true", help="ours under autocast (not like for like)")
    args = parser.parse_args()
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        print("sentence-transformers is not installed: pip install -e .[bench]", file=sys.stderr)
        return 2
    n = args.passages or (64 if args.quick else 384)
    device = resolve_device(args.device)
    titles, texts, source = load_passages(args.squad, n, args.seed)
    joined = [f"{t} [SEP] {x}" for t, x in zip(titles, texts)]

    settings = RetrieverSettings(
        base="minilm", pooling="mean", similarity="cosine", passage_max_len=args.max_len
    )
    ours = Retriever.from_pretrained("minilm", settings).to(device).eval()
    st = SentenceTransformer(resolve_model_path("minilm"), device=str(device))
    st.max_seq_length = args.max_len

    our_lengths = tokenize_buffer(ours, texts, titles)["attention_mask"].sum(axis=1)
    st_lengths = np.array(
        [len(ids) for ids in st.tokenizer(joined, truncation=True, max_length=args.max_len)["input_ids"]]
    )
    # Padded tokens actually computed: ours sorts by token length, ST by character length.
    ours_padded = padded_tokens(our_lengths, np.argsort(-our_lengths, kind="stable"), args.batch_size)
    st_padded = padded_tokens(st_lengths, np.argsort([-len(t) for t in joined]), args.batch_size)
    print(
        f"machine: {os.cpu_count()} cpus, torch threads {torch.get_num_threads()}, "
        f"load average {os.getloadavg()[0]:.2f}, device {device}, ours "
        f"{precision_name(encoding_dtype(device, args.amp))}, sentence-transformers fp32"
    )
    print(
        f"data: {n} {source}, max_len {args.max_len}, batch {args.batch_size}; "
        f"tokens ours {int(our_lengths.sum())}, sentence-transformers {int(st_lengths.sum())}; "
        f"with batch padding ours {ours_padded}, sentence-transformers {st_padded}"
    )

    def run_ours() -> np.ndarray:
        return encode_buffer(ours, texts, titles, batch_size=args.batch_size, device=device, amp=args.amp)

    def run_st() -> np.ndarray:
        return st.encode(joined, batch_size=args.batch_size, show_progress_bar=False, convert_to_numpy=True)

    # Warm-up (allocator, kernels) on a few passages each, untimed.
    encode_buffer(ours, texts[:8], titles[:8], batch_size=8, device=device, amp=args.amp)
    st.encode(joined[:8], batch_size=8, show_progress_bar=False)

    times = {"ours": [], "st": []}
    outputs = {}
    for r in range(args.rounds):
        order = [("ours", run_ours), ("st", run_st)]
        for name, fn in order if r % 2 == 0 else order[::-1]:
            if device.type == "cuda":
                torch.cuda.synchronize()
            began = time.perf_counter()
            outputs[name] = fn()
            if device.type == "cuda":
                torch.cuda.synchronize()
            times[name].append(time.perf_counter() - began)
        print(
            f"round {r + 1}: ours {n / times['ours'][-1]:.1f} passages/s, "
            f"sentence-transformers {n / times['st'][-1]:.1f} passages/s"
        )
    a, b = outputs["ours"].astype(np.float32), np.asarray(outputs["st"], dtype=np.float32)
    cosine = np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    print(
        f"embedding agreement (token type ids differ for the text segment): mean cosine "
        f"{cosine.mean():.4f}, min {cosine.min():.4f}"
    )
    ours_s, st_s = sum(times["ours"]), sum(times["st"])
    print(
        f"total: ours {n * args.rounds / ours_s:.1f} passages/s, sentence-transformers "
        f"{n * args.rounds / st_s:.1f} passages/s; load average now {os.getloadavg()[0]:.2f}"
    )
    print(f"RESULT encode_throughput_speedup ratio={st_s / ours_s:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

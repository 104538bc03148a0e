"""One encoding backend in its own process, for bench/encode_throughput.py (which starts it).

Each backend runs in a fresh interpreter so its peak memory is its own and so the sentence-transformers
backends can run from another virtual environment: sentence-transformers 6's ``[onnx]`` extra cannot
be installed beside transformers 5 (optimum-onnx requires transformers < 4.58), so ONNX Runtime and
OpenVINO are measured through sentence-transformers 5.7 in ``make bench-st-venv``'s environment.
Only the standard library, numpy and torch are imported at the top: the project's package and
sentence-transformers are imported by the backends that use them.

    python bench/encode_worker.py prepare --model-dir M --work DIR            # export the ONNX / OpenVINO models
    python bench/encode_worker.py run --backend st-onnx --model-dir M --work DIR --speed speed.json ...

``run`` prints one line ``WORKER {json}``: seconds per round, passages, tokens and peak RSS (``--speed``),
and writes the embeddings of ``--quality``'s passages and queries (encoded once, untimed) to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import torch
from machine import peak_rss_mib  # bench/machine.py, beside this script

REPO = Path(__file__).resolve().parent.parent
OURS = ("ours", "ours-bf16", "ours-openvino", "ours-openvino-bf16")
ST_TORCH = ("st-torch", "st-torch-bf16")
ST_EXPORTED = ("st-onnx", "st-onnx-O3", "st-onnx-int8", "st-openvino", "st-openvino-f32")
BACKENDS = OURS + ST_TORCH + ST_EXPORTED


def cpu_int8_config() -> str:
    """sentence-transformers' dynamic int8 configuration for this CPU (its best: VNNI where present)."""
    sys.path.insert(0, str(REPO))
    from pipeline.core.cpu_features import cpu_flags  # torch- and pyarrow-free: imports in either venv

    flags = cpu_flags() or set()
    if "avx512_vnni" in flags:
        return "avx512_vnni"
    if "avx512f" in flags:
        return "avx512"
    return "avx2"


def prepare(model_dir: Path, work: Path) -> dict:
    """Copy the model into ``work/st`` and export what the exported backends load (untimed in the
    benchmark: a user exports once). Returns the seconds each export took."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.backend import export_dynamic_quantized_onnx_model, export_optimized_onnx_model

    folder = work / "st"
    if folder.exists():
        shutil.rmtree(folder)
    shutil.copytree(model_dir, folder)
    seconds = {}
    began = time.perf_counter()
    onnx = SentenceTransformer(str(folder), backend="onnx", device="cpu")
    onnx.save(str(folder))
    seconds["onnx"] = time.perf_counter() - began
    began = time.perf_counter()
    export_optimized_onnx_model(onnx, "O3", str(folder))
    seconds["onnx-O3"] = time.perf_counter() - began
    began = time.perf_counter()
    export_dynamic_quantized_onnx_model(onnx, cpu_int8_config(), str(folder))
    seconds["onnx-int8"] = time.perf_counter() - began
    try:
        began = time.perf_counter()
        SentenceTransformer(str(folder), backend="openvino", device="cpu").save(str(folder))
        seconds["openvino"] = time.perf_counter() - began
    except Exception as error:  # optimum-intel missing: the benchmark says the backend was skipped
        seconds["openvino"] = f"not exported: {error}"
    return seconds


class OursEncoder:
    """The pipeline's own ``encode_buffer``: (title, text) pairs, token-length sorted batches."""

    def __init__(self, max_len: int, query_max_len: int, amp: bool, openvino: bool) -> None:
        sys.path.insert(0, str(REPO))
        from pipeline.retrieval.encode import encode_buffer, openvino_tower
        from pipeline.retrieval.model import Retriever, RetrieverSettings

        settings = RetrieverSettings(
            base="minilm",
            pooling="mean",
            similarity="cosine",
            passage_max_len=max_len,
            query_max_len=query_max_len,
        )
        self.model = Retriever.from_pretrained("minilm", settings).eval()
        self.encode_buffer, self.amp = encode_buffer, amp
        # encode.backend openvino: the towers compiled once, as an encode_corpus job does (untimed here)
        cpu = torch.device("cpu")
        self.towers = {
            kind: openvino_tower(self.model, kind, cpu, amp) if openvino else None
            for kind in ("passage", "query")
        }

    def _encode(self, texts: list[str], titles: list[str] | None, batch_size: int) -> np.ndarray:
        # As the pipeline stores them: passages in fp16 (encode_corpus's shards), queries in fp32.
        out = self.encode_buffer(
            self.model,
            texts,
            titles,
            batch_size=batch_size,
            device=torch.device("cpu"),
            amp=self.amp,
            dtype=torch.float32 if titles is None else torch.float16,
            tower=self.towers["query" if titles is None else "passage"],
        )
        return out.astype(np.float32)

    def passages(self, titles: list[str], texts: list[str], batch_size: int) -> np.ndarray:
        return self._encode(texts, titles, batch_size)

    def queries(self, texts: list[str], batch_size: int) -> np.ndarray:
        return self._encode(texts, None, batch_size)

    def count_tokens(self, titles: list[str], texts: list[str]) -> int:
        from pipeline.retrieval.encode import tokenize_buffer

        return int(tokenize_buffer(self.model, texts, titles)["attention_mask"].sum())


class STEncoder:
    """sentence-transformers' ``encode`` on "title [SEP] text" (the tokenizer maps [SEP] to the
    separator token, so the token count equals ours)."""

    def __init__(
        self, backend: str, model_dir: Path, work: Path, max_len: int, query_max_len: int, threads: int
    ) -> None:
        from sentence_transformers import SentenceTransformer

        kwargs: dict = {}
        if backend == "st-torch-bf16":
            kwargs["model_kwargs"] = {"torch_dtype": torch.bfloat16}
        elif backend.startswith("st-onnx"):
            import onnxruntime as ort

            options = ort.SessionOptions()
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
            name = {
                "st-onnx": "model.onnx",
                "st-onnx-O3": "model_O3.onnx",
                "st-onnx-int8": f"model_qint8_{cpu_int8_config()}.onnx",
            }[backend]
            kwargs = {
                "backend": "onnx",
                "model_kwargs": {
                    "file_name": f"onnx/{name}",
                    "provider": "CPUExecutionProvider",
                    "session_options": options,
                },
            }
        elif backend.startswith("st-openvino"):
            # OpenVINO computes in bf16 by default on a CPU with native bf16; -f32 pins fp32 (as on AVX2).
            config = {"INFERENCE_NUM_THREADS": str(threads)}
            if backend == "st-openvino-f32":
                config["INFERENCE_PRECISION_HINT"] = "f32"
            kwargs = {"backend": "openvino", "model_kwargs": {"ov_config": config}}
        source = str(work / "st") if backend in ST_EXPORTED else str(model_dir)
        self.model = SentenceTransformer(source, device="cpu", **kwargs)
        self.max_len, self.query_max_len = max_len, query_max_len

    def _encode(self, texts: list[str], batch_size: int, max_len: int) -> np.ndarray:
        self.model.max_seq_length = max_len
        out = self.model.encode(texts, batch_size=batch_size, show_progress_bar=False, convert_to_numpy=True)
        return np.asarray(out, dtype=np.float32)

    def passages(self, titles: list[str], texts: list[str], batch_size: int) -> np.ndarray:
        joined = [f"{t} [SEP] {x}" for t, x in zip(titles, texts)]
        return self._encode(joined, batch_size, self.max_len)

    def queries(self, texts: list[str], batch_size: int) -> np.ndarray:
        return self._encode(texts, batch_size, self.query_max_len)

    def count_tokens(self, titles: list[str], texts: list[str]) -> int:
        joined = [f"{t} [SEP] {x}" for t, x in zip(titles, texts)]
        ids = self.model.tokenizer(joined, truncation=True, max_length=self.max_len)["input_ids"]
        return sum(len(row) for row in ids)


def run(args: argparse.Namespace) -> dict:
    torch.set_num_threads(args.threads)
    if args.backend in OURS:
        encoder = OursEncoder(
            args.max_len,
            args.query_max_len,
            amp=args.backend.endswith("bf16"),
            openvino="openvino" in args.backend,
        )
    else:
        encoder = STEncoder(
            args.backend, args.model_dir, args.work, args.max_len, args.query_max_len, args.threads
        )
    result: dict = {"backend": args.backend, "threads": torch.get_num_threads()}
    if args.speed:
        speed = json.loads(Path(args.speed).read_text())
        titles, texts = speed["titles"], speed["texts"]
        encoder.passages(titles[:8], texts[:8], 8)  # warm-up (allocator, kernel selection), untimed
        seconds = []
        for _ in range(args.rounds):
            began = time.perf_counter()
            encoder.passages(titles, texts, args.batch_size)
            seconds.append(time.perf_counter() - began)
        result.update(
            passages=len(texts),
            tokens=encoder.count_tokens(titles, texts),
            round_s=seconds,
            load_average=os.getloadavg()[0],
        )
    if args.quality:
        quality = json.loads(Path(args.quality).read_text())
        began = time.perf_counter()
        passages = encoder.passages(quality["titles"], quality["texts"], args.batch_size)
        queries = encoder.queries(quality["queries"], args.batch_size)
        result["quality_s"] = time.perf_counter() - began
        np.savez(args.out, passages=passages, queries=queries)
    result["peak_rss_mib"] = peak_rss_mib()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    prep = sub.add_parser("prepare", help="export the ONNX and OpenVINO models into WORK/st")
    prep.add_argument("--work", type=Path, required=True)
    prep.add_argument("--model-dir", type=Path, required=True, help="the all-MiniLM-L6-v2 folder")
    go = sub.add_parser("run", help="time one backend")
    go.add_argument("--backend", choices=BACKENDS, required=True)
    go.add_argument("--work", type=Path, required=True)
    go.add_argument("--model-dir", type=Path, required=True, help="the all-MiniLM-L6-v2 folder")
    go.add_argument("--speed", help="JSON {titles, texts}: the timed passages")
    go.add_argument("--rounds", type=int, default=3)
    go.add_argument("--batch-size", type=int, default=32)
    go.add_argument("--max-len", type=int, default=256)
    go.add_argument("--query-max-len", type=int, default=32)
    go.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    go.add_argument("--quality", help="JSON {titles, texts, queries}: encoded once, saved to --out")
    go.add_argument("--out", help="npz of the quality embeddings")
    args = parser.parse_args()
    if args.command == "prepare":
        print("WORKER " + json.dumps(prepare(args.model_dir, args.work)))
    else:
        print("WORKER " + json.dumps(run(args)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

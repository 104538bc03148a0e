"""MiniLM's weights made small enough to carry to a GPU node, and restored there.

  gpu_minilm.py pack MODEL.safetensors OUT.safetensors [--int8 embeddings|matrices]
  gpu_minilm.py unpack PACKED.safetensors MODEL.safetensors
  gpu_minilm.py agree MODEL_DIR PACKED.safetensors   # cosine of the two encodes on CPU

Packing stores the chosen 2-D weights as int8 with one fp32 scale per row (symmetric: row / max|row| *
127), and every other floating tensor in fp16; unpacking writes fp32 (transformers loads a checkpoint in
its stored dtype, and the stages expect fp32 weights). Per-row scales keep a rare token's embedding
(small norm) as precise as a frequent one's, which one scale for the whole matrix would not.
Runs on any Python with torch and safetensors (3.10-3.13): it is called on the node before the check.
"""

from __future__ import annotations

import argparse
import sys

SCALE = ".q8scale"
QUANT = ".q8"


def _quantized(name: str, shape: tuple[int, ...], which: str) -> bool:
    if len(shape) != 2:
        return False
    if which == "embeddings":
        return name.endswith("word_embeddings.weight")
    return True


def pack(src: str, dst: str, which: str) -> dict[str, int]:
    """Writes the packed weights; returns the tensor counts by storage kind."""
    import torch
    from safetensors.torch import load_file, save_file

    out: dict[str, torch.Tensor] = {}
    kinds = {"int8": 0, "fp16": 0, "kept": 0}
    for name, tensor in load_file(src).items():
        if tensor.is_floating_point() and _quantized(name, tuple(tensor.shape), which):
            weights = tensor.float()
            scale = weights.abs().amax(dim=1).clamp_min(1e-12) / 127.0
            out[name + QUANT] = torch.round(weights / scale[:, None]).clamp(-127, 127).to(torch.int8)
            out[name + SCALE] = scale
            kinds["int8"] += 1
        elif tensor.is_floating_point():
            out[name] = tensor.half()
            kinds["fp16"] += 1
        else:
            out[name] = tensor
            kinds["kept"] += 1
    save_file(out, dst, metadata={"format": "pt"})
    return kinds


def unpack(src: str, dst: str) -> None:
    from safetensors.torch import load_file, save_file

    packed = load_file(src)
    out = {}
    for name, tensor in packed.items():
        if name.endswith(SCALE):
            continue
        if name.endswith(QUANT):
            base = name[: -len(QUANT)]
            out[base] = tensor.float() * packed[base + SCALE][:, None]
        else:
            out[name] = tensor.float() if tensor.is_floating_point() else tensor
    save_file(out, dst, metadata={"format": "pt"})


def agree(model_dir: str, packed: str) -> dict[str, float]:
    """Encodes sentences with the fp32 model and with the unpacked weights; cosine per sentence."""
    import tempfile
    from pathlib import Path

    import torch
    from transformers import AutoModel, AutoTokenizer

    texts = [
        "who wrote the declaration of independence",
        "The Eiffel Tower was completed in 1889 for the World's Fair in Paris.",
        "photosynthesis converts light energy into chemical energy stored in glucose",
        "Zyxwv quokka phlegmatic obsequious 1729 ramanujan",
        "how many moons does jupiter have",
        "A retriever encodes questions and passages into one vector space.",
    ] * 4
    tok = AutoTokenizer.from_pretrained(model_dir)
    batch = tok(texts, padding=True, truncation=True, return_tensors="pt")

    def encode(model) -> torch.Tensor:
        with torch.no_grad():
            hidden = model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).float()
        return torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1)

    reference = encode(AutoModel.from_pretrained(model_dir).eval())
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for item in Path(model_dir).iterdir():
            if item.is_file() and item.name != "model.safetensors":
                (folder / item.name).write_bytes(item.read_bytes())
        unpack(packed, str(folder / "model.safetensors"))
        restored = encode(AutoModel.from_pretrained(str(folder)).eval())
    cosine = (reference * restored).sum(-1)
    return {"min_cosine": float(cosine.min()), "mean_cosine": float(cosine.mean())}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pack")
    p.add_argument("src")
    p.add_argument("dst")
    p.add_argument("--int8", choices=["embeddings", "matrices"], default="matrices")
    u = sub.add_parser("unpack")
    u.add_argument("src")
    u.add_argument("dst")
    a = sub.add_parser("agree")
    a.add_argument("model_dir")
    a.add_argument("packed")
    args = ap.parse_args(argv)
    if args.command == "pack":
        print(pack(args.src, args.dst, args.int8))
    elif args.command == "unpack":
        unpack(args.src, args.dst)
    else:
        result = agree(args.model_dir, args.packed)
        print(
            f"fp32 vs packed MiniLM on CPU: min cosine {result['min_cosine']:.6f}, mean {result['mean_cosine']:.6f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

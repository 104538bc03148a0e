"""README.md of a trained retriever folder: what it is, what it was trained from and on, how to load it.

The card carries the Hugging Face model-card metadata block (base model, library, tags) so a folder
pushed to a hub or opened by a model browser describes itself, and it holds only what the run's inputs
and settings decide: two runs with the same settings write the same card (no times, no hosts), so the
folder stays reproducible byte for byte.
"""

from __future__ import annotations

from pathlib import Path

CARD_FILE = "README.md"

# The loss names train_info.json records, in words.
_LOSSES = {
    "nce": "contrastive NCE over the positive, the hard negatives{in_batch}",
    "ccr": "NCE plus contrastive confidence regularisation (CCR, beta = {beta})",
    "gist": "GISTEmbed's guided NCE: negatives the guide model scores above the positive are masked",
}


def _loss_text(loss: dict, config: dict) -> str:
    name = loss.get("loss", "nce")
    template = _LOSSES.get(name, name)
    in_batch = " and the other queries' passages in the batch" if config.get("in_batch") else ""
    return template.format(in_batch=in_batch, beta=loss.get("beta", config.get("beta")))


def _yaml_scalar(value: object) -> str:
    text = str(value)
    return text if text.replace("-", "").replace("_", "").replace(".", "").isalnum() else repr(text)


def model_card(info: dict, settings: dict, recipe: str | None, inputs: dict[str, str]) -> str:
    """The card's text from what train_dense writes beside it: ``info`` (train_info.json), ``settings``
    (retriever.json), the recipe in force and the training inputs by role."""
    config, summary = info["config"], info["summary"]
    loss = summary.get("loss", {})
    base = info["init"]
    steps = summary["steps"]
    last = summary.get("last") or {}
    tags = ["sentence-transformers", "dense-retrieval", "sieve"]
    if loss.get("loss") == "ccr":
        tags.append("contrastive-confidence-regularization")
    lines = [
        "---",
        f"base_model: {_yaml_scalar(base)}",
        "library_name: sentence-transformers",
        "pipeline_tag: sentence-similarity",
        "tags:",
        *(f"- {t}" for t in tags),
        "---",
        "",
        f"# Dense retriever trained by sieve ({Path(inputs['queries']).parent.name})",
        "",
        f"Trained from `{base}` for {steps:,} optimizer steps with {_loss_text(loss, config)}.",
        f"Recipe: `{recipe or 'none recorded'}`; seed {config['seed']}; compute precision "
        f"{summary.get('compute_precision', config['precision'])}; {info['world_size']} process(es).",
        "",
        "## Training data",
        "",
        f"- queries: `{inputs['queries']}` ({info['queries']:,} used; {info['dropped_without_positive']:,} "
        f"dropped without a positive, {info['queries_without_candidates']:,} without hard negatives)",
        f"- judgements: `{inputs['qrels']}`",
        f"- hard negatives: `{inputs['negatives']}` (top {config['negatives_depth']} per query, "
        f"{config['hard_negatives']} drawn per query and step)",
        f"- passages: `{inputs['corpus']}`",
    ]
    if info.get("guide"):
        lines.append(f"- guide model: `{info['guide']}`")
    lines += [
        "",
        "## Settings",
        "",
        "| setting | value |",
        "|---|---|",
        *(f"| {k} | {v} |" for k, v in settings.items()),
        *(
            f"| {k} | {config[k]} |"
            for k in (
                "lr",
                "batch_size",
                "grad_accum",
                "epochs",
                "max_steps",
                "warmup_ratio",
                "weight_decay",
                "max_grad_norm",
            )
        ),
        "",
        "The full record: `train_info.json` (every setting and the last step's losses), `train_log.jsonl`",
        "(one line per step), `recipe.json`, and `checksums.json` (sha256 of the weights and tokenizer).",
        "",
    ]
    if "loss" in last:
        lines += [f"Last step's loss: {last['loss']:.4f}.", ""]
    if summary.get("snapshots"):
        steps = ", ".join(str(s) for s in summary["snapshots"])
        lines += [
            f"Weight snapshots at steps {steps}: `snapshots/step<k>/model.safetensors` (this folder's",
            "architecture and settings), the candidates of model selection on dev besides the start and this model.",
            "",
        ]
    towers = (
        "Both queries and passages go through this one encoder."
        if settings.get("shared_towers", True)
        else "This loads the query tower; passages go through `passage_encoder/` (load it the same way)."
    )
    lines += [
        "## Use",
        "",
        "```python",
        "from sentence_transformers import SentenceTransformer",
        "",
        'model = SentenceTransformer("path/to/this/folder")',
        'embeddings = model.encode(["who wrote the iliad"])',
        "```",
        "",
        towers,
        "",
    ]
    return "\n".join(lines)

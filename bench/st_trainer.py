"""The sentence-transformers training arguments the benchmarks share (bench/train_throughput.py,
bench/st_clean_vs_raw.py): on the CPU, and no evaluation, checkpoint, log or progress bar, so the trainer
does nothing the project's loop would not; AdamW without weight decay, linear warm-up over int(ratio x
steps) (the project's loop: int(); the trainer's own ratio would round up) then linear decay, as
config ``dpr:``. Each caller adds its batch sampler, precision, seed and the rest."""

from __future__ import annotations

from pathlib import Path


def quiet_cpu_arguments(output_dir: Path, batch: int, steps: int, lr: float, warmup_ratio: float, **settings):
    from sentence_transformers import SentenceTransformerTrainingArguments

    return SentenceTransformerTrainingArguments(
        output_dir=str(output_dir),
        per_device_train_batch_size=batch,
        max_steps=steps,
        learning_rate=lr,
        lr_scheduler_type="linear",
        warmup_steps=int(warmup_ratio * steps),
        weight_decay=0.0,
        eval_strategy="no",
        save_strategy="no",
        logging_strategy="no",
        report_to="none",
        disable_tqdm=True,
        dataloader_num_workers=0,
        use_cpu=True,
        **settings,
    )

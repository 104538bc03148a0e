"""Dense retriever training: NCE / CCR losses, training data, the training loop, checkpoints and the
train_dense stage (DPR warm-up and CCR fine-tuning)."""

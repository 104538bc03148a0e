"""Data preparation: downloads, readers for DPR / MS MARCO / SQuAD / BEIR, splits, answer matching,
and the prepare stage that writes the canonical tables under resources/{dataset}/."""

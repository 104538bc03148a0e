"""Evaluation: metrics (R@k, MRR@10, hit@k, recall@k), the evaluate stage, gathering and seed statistics."""

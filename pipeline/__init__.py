"""sieve: dense retrieval that stays accurate under false negatives (CCR + passage sieve).

One module per workflow stage, each with a CLI: ``python -m pipeline.<stage> --help``.
"""
__version__ = "0.1.0"

"""sieve: dense retrieval that stays accurate under false negatives (CCR + passage sieve).

One subpackage per stage family (core, data, synthkb, retrieval, evaluation, training, sieve, ar2),
one module per stage, each with a CLI: ``python -m pipeline.<family>.<stage> --help``.
"""

__version__ = "0.1.0"

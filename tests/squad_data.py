"""The real SQuAD v1.1 dev sample (36 articles) in ../shared, reached through the SQuAD config overlay.

Tests read it where the workflow reads it: `config/overlays/squad/config.yaml` declares dataset `squad36`
with `source: ../shared/data/squad/...` (relative to the repository root), and
`pipeline.data.readers.sources.prepare_inputs` resolves the role -> file mapping the prepare rule uses.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pipeline.core.config import load_config
from pipeline.data.readers import sources

REPO = Path(__file__).resolve().parent.parent
OVERLAY = REPO / "config" / "overlays" / "squad" / "config.yaml"
DATASET = "squad36"


def squad36() -> tuple[Path, dict]:
    """(source file, dataset spec) of `squad36` from the default config + the SQuAD overlay."""
    config = load_config([OVERLAY])
    source = Path(sources.prepare_inputs(config, DATASET)["source"])
    path = source if source.is_absolute() else REPO / source
    if not path.exists():
        # A clone of the public repository has no ../shared: its tests skip. CI has it, and there a
        # missing sample is a failure, so those tests can never pass by not running.
        message = f"{path} not found: the shared SQuAD data must sit beside the checkout (../shared)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path, config["datasets"][DATASET]

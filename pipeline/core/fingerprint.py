"""What an output was built from: cheap identities of input files and folders.

Resumable stages (training checkpoints, AR2 round training) store a fingerprint of their inputs and settings
and resume only a run whose fingerprint matches; anything else starts afresh.
"""

from __future__ import annotations

import os
from pathlib import Path

# The file that stands for a folder: written last, so it changes whenever the folder is rewritten.
KEY_FILES = ("manifest.json", "retriever.json", "ranker.json", "state.pt", "config.json")


def file_id(path: str | os.PathLike | None) -> list | None:
    """[path, size, mtime_ns] of a file (of a folder's key file); [path] for a name such as 'minilm'."""
    if not path:
        return None
    target = Path(path)
    if target.is_dir():
        target = next((target / name for name in KEY_FILES if (target / name).exists()), target)
    if not target.exists():
        return [str(path)]
    stat = target.stat()
    return [str(path), stat.st_size, stat.st_mtime_ns]

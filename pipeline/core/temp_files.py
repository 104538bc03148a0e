"""Temporary files of atomic writes: recognise them, and clean those a killed write left behind.

``pipeline.core.storage.atomic_path`` writes ``PATH`` through ``tempfile.mkstemp(prefix=".NAME.",
suffix=".tmp")`` beside it, where NAME is ``PATH``'s file name, and renames the result onto ``PATH``.
A process killed with SIGKILL (an OOM kill, a scheduler's time limit) runs no cleanup, so the hidden
temporary stays. The next write of the same ``PATH`` removes them: only names of exactly that form
(the prefix, mkstemp's 8 random characters, the suffix), so temporaries of other outputs beside it,
which may belong to writes under way, are never touched.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

log = logging.getLogger("sieve.storage")

# tempfile._RandomNameSequence: 8 characters from this set. A dot never occurs in them, so the
# temporaries of "x" and of "x.y" cannot be mistaken for each other.
_RANDOM = r"[a-z0-9_]{8}"
SUFFIX = ".tmp"


def _pattern(path: Path) -> re.Pattern[str]:
    return re.compile(rf"\.{re.escape(path.name)}\.{_RANDOM}{re.escape(SUFFIX)}")


def is_temp_of(candidate: str | os.PathLike, path: str | os.PathLike) -> bool:
    """Whether ``candidate`` is a temporary file of an atomic write of ``path``."""
    candidate, path = Path(candidate), Path(path)
    # mkstemp returns an absolute name (Python 3.12+) even for a relative folder.
    same_folder = os.path.abspath(candidate.parent) == os.path.abspath(path.parent)
    return same_folder and _pattern(path).fullmatch(candidate.name) is not None


def remove_stale_temps(path: str | os.PathLike) -> list[Path]:
    """Remove the temporary files that earlier, interrupted writes of ``path`` left beside it; return
    them. Call it before starting a new write of ``path`` (one writer per output at a time)."""
    path = Path(path)
    pattern = _pattern(path)
    removed: list[Path] = []
    try:
        entries = list(os.scandir(path.parent))
    except (FileNotFoundError, NotADirectoryError):
        return removed
    for entry in entries:
        if pattern.fullmatch(entry.name) and entry.is_file(follow_symlinks=False):
            try:
                os.unlink(entry.path)
            except FileNotFoundError:
                continue
            removed.append(Path(entry.path))
    if removed:
        log.info("removed %d temporary file(s) of an interrupted write of %s", len(removed), path)
    return removed

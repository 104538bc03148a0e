"""CLI glue shared by every stage: logging to the console (rich) and to a file, and clean exits."""
from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Callable

from rich.logging import RichHandler

from pipeline.core.config import ConfigError
from pipeline.core.storage import DataError

log = logging.getLogger("sieve")


def setup_logging(log_file: str | None = None, level: int = logging.INFO) -> None:
    handlers: list[logging.Handler] = [RichHandler(show_path=False, rich_tracebacks=False)]
    if log_file:
        Path(log_file).parent.mkdir(parents=True, exist_ok=True)
        file_handler = logging.FileHandler(log_file, mode="a", encoding="utf-8")
        file_handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        handlers.append(file_handler)
    logging.basicConfig(level=level, handlers=handlers, format="%(message)s", force=True)


def run_main(main: Callable[[list[str] | None], int | None], argv: list[str] | None = None) -> None:
    """Run a stage's main(); bad input and bad config exit 2 with one clear message, no traceback."""
    try:
        code = main(argv)
    except (DataError, ConfigError) as exc:
        log.error("%s", exc)
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    raise SystemExit(code or 0)

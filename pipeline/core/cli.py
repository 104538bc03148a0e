"""CLI glue shared by every stage: parsers, logging to the console (rich) and to a file, CPU threads,
and clean exits."""

from __future__ import annotations

import argparse
import errno
import json
import logging
import os
import sys
import tempfile
from pathlib import Path
from typing import Callable, Sequence, TextIO

from rich.logging import RichHandler

from pipeline.core.settings.base import MAX_THREADS, ConfigError
from pipeline.core.storage import DataError

log = logging.getLogger("sieve")


# A log line as files keep it: one record per line, so grep finds a whole record.
LINE_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# faiss's loader reports at INFO each CPU-specific build it tried and could not import (three
# "Could not load library ... ModuleNotFoundError" lines per job on most CPUs): read as failures, and
# the build it did load works; its warnings still show.
QUIET_LOGGERS = ("faiss.loader",)


class _StdoutLines(logging.StreamHandler):
    """Plain lines on whatever sys.stdout is when a record is written (as rich's console resolves it):
    a stream bound once would outlive a replaced sys.stdout (pytest's capture, a redirect)."""

    @property
    def stream(self) -> TextIO:
        return sys.stdout

    @stream.setter
    def stream(self, value: TextIO) -> None:
        pass


def console_handler(stream: TextIO | None = None) -> logging.Handler:
    """The log on stdout, as it always was (stderr carries a failing stage's one "error:" line): rich's
    columns on a terminal; elsewhere (a job's output in a file, a pipe, SLURM's output) the file's plain
    line: rich laid records out for a console 80 columns wide there, a long record over several lines
    that grep found in pieces. ``stream``: the one to decide by (sys.stdout)."""
    stream = sys.stdout if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    if isatty is not None and isatty():
        return RichHandler(show_path=False, rich_tracebacks=False)
    handler = _StdoutLines()
    handler.setFormatter(logging.Formatter(LINE_FORMAT))
    return handler


def setup_logging(log_file: str | None = None, level: int = logging.INFO) -> None:
    handlers: list[logging.Handler] = [console_handler()]
    if log_file:
        Path(log_file).parent.mkdir(parents=True, exist_ok=True)
        file_handler = logging.FileHandler(log_file, mode="a", encoding="utf-8")
        file_handler.setFormatter(logging.Formatter(LINE_FORMAT))
        handlers.append(file_handler)
    for handler in handlers:
        # A library that sets its own logger to DEBUG (bm25s) would otherwise print through ours.
        handler.setLevel(level)
    logging.basicConfig(level=level, handlers=handlers, format="%(message)s", force=True)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(max(level, logging.WARNING))


def stage_parser(module: str, description: str | None) -> argparse.ArgumentParser:
    """The parser of ``python -m <module>``; a multi-line description (the module docstring) keeps
    its line breaks in --help."""
    raw = description is not None and "\n" in description
    return argparse.ArgumentParser(
        prog=f"python -m {module}",
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter if raw else argparse.HelpFormatter,
    )


def thread_count(text: str) -> int:
    """argparse type of a --threads flag: a whole number from 1 to the settings' MAX_THREADS (torch
    took -1 and failed in set_num_threads, after the stage had read its inputs)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not 1 <= value <= MAX_THREADS:
        raise argparse.ArgumentTypeError(f"{value} is not between 1 and {MAX_THREADS:,}")
    return value


def json_pairs(text: str) -> list[tuple[str, str]]:
    """argparse type of a flag that takes [name, name] pairs as JSON (the config's own form:
    ``eval.compare``, ``sweep.pairs``), so a list of pairs reaches the stage as data, not as text
    joined and split on a separator."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON ({exc}): {text!r}") from None
    if not isinstance(value, list) or not all(
        isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) and x for x in p) for p in value
    ):
        raise argparse.ArgumentTypeError(
            f'expected a JSON list of [method, baseline] pairs, e.g. \'[["dpr", "zeroshot"]]\', got {text!r}'
        )
    return [(a, b) for a, b in value]


def add_job_flags(ap: argparse.ArgumentParser, device: bool = True) -> None:
    """What every job of a rule passes: --device (where the stage computes), --threads, --log."""
    if device:
        ap.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    ap.add_argument("--threads", type=thread_count, help="CPU threads (torch)")
    ap.add_argument("--log", help="append the log to this file")


def quiet_weight_loading() -> None:
    """No "Loading weights" bar per model: in a job's log file each is a line (52 in one demo log).
    For libraries imported later through the environment, for an imported transformers directly."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if "transformers" in sys.modules:
        sys.modules["transformers"].utils.logging.disable_progress_bar()


def confine_to(device: str | None) -> None:
    """A job told to compute on the CPU sees no GPU: CUDA_VISIBLE_DEVICES is emptied before anything
    initialises CUDA (torch does it lazily), so a job that holds no GPU never opens a CUDA context on a
    node it shares with GPU jobs. JAX, which bm25s imports when installed, is kept on the CPU for every
    job by the package itself (pipeline/__init__.py)."""
    if device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""


def device_flag(argv: Sequence[str]) -> str | None:
    """The value of --device in a command line (``--device cpu`` or ``--device=cpu``), else None."""
    for i, word in enumerate(argv):
        if word == "--device" and i + 1 < len(argv):
            return argv[i + 1]
        if word.startswith("--device="):
            return word.split("=", 1)[1]
    return None


def start_stage(
    log_file: str | None,
    threads: int | None = None,
    *,
    libraries: Sequence[str] = ("torch",),
    main_process: bool = True,
    keep_handlers: bool = False,
) -> None:
    """What every stage does once its arguments are parsed: log to the console (and ``log_file``),
    and cap the CPU threads of ``libraries`` ("torch", "faiss") at ``threads`` when given.

    Other processes of a distributed job log warnings only, and never to the file. With
    ``keep_handlers`` a stage called in-process without a log file keeps its caller's logging.
    """
    if log_file or not keep_handlers or not logging.getLogger().handlers:
        setup_logging(
            log_file if main_process else None, level=logging.INFO if main_process else logging.WARNING
        )
    quiet_weight_loading()
    if threads is None:
        return
    # Also here for the stages whose --threads is their own flag, not add_job_flags'.
    if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= MAX_THREADS:
        raise ConfigError(f"--threads {threads}: CPU threads must be between 1 and {MAX_THREADS:,}")
    unknown = set(libraries) - {"torch", "faiss"}
    if unknown:
        raise ValueError(f"cannot set the threads of {sorted(unknown)} (known: faiss, torch)")
    # Imported here: the stages that need neither library should not pay for loading them.
    if "torch" in libraries:
        import torch

        torch.set_num_threads(threads)
    if "faiss" in libraries:
        import faiss

        faiss.omp_set_num_threads(threads)


def check_writable(*outputs: str | os.PathLike | None) -> None:
    """Raise DataError naming the folder when an output (file or folder, existing or not) could not be
    written there. Call it before a long stage starts: a read-only results folder is better
    found before hours of training than by the write at their end."""
    for output in outputs:
        if output is None:
            continue
        output = Path(output)
        # An existing folder is written into; anything else is created in its parent, or in the
        # nearest ancestor that exists (the stage makes the folders in between).
        folder = output if output.is_dir() else output.parent
        while not folder.exists() and folder != folder.parent:
            folder = folder.parent
        if not folder.is_dir():
            raise DataError(f"is not a folder, so {output} cannot be written", file=folder)
        try:
            # A real file, not os.access(): that can say yes where a write fails (NFS root squashing).
            fd, probe = tempfile.mkstemp(prefix=".write-check.", dir=folder)
        except OSError as exc:
            raise DataError(
                f"cannot write {output} here ({exc.strerror or exc}); make the folder "
                "writable or choose another output before running again",
                file=folder,
            ) from None
        os.close(fd)
        os.unlink(probe)


# What the file system refuses: a full disk or quota, a read-only or forbidden folder. Not a bug of the
# stage, so one line naming the path, like bad input; other OSErrors keep their traceback.
_FILE_SYSTEM = {
    errno.ENOSPC: "free space there and run again",
    errno.EDQUOT: "free space (quota) there and run again",
    errno.EFBIG: "the file system cannot hold a file this large; choose another output folder",
    errno.EROFS: "the file system is read-only; choose another output folder",
    errno.EACCES: "permission denied; make it accessible or choose another output folder",
    errno.EPERM: "not permitted; make it accessible or choose another output folder",
    # A path the user typed that cannot be a file there: a folder where a file goes, a file where a
    # folder goes (`--out existing_file/x.parquet`), a name longer than the file system allows.
    errno.EISDIR: "a folder is in the way; give the path of a file",
    errno.ENOTDIR: "a part of the path is a file, not a folder; choose another path",
    errno.ENAMETOOLONG: "the name is longer than the file system allows; choose a shorter path",
}


def file_system_error(exc: OSError) -> str | None:
    """One line for an OSError of the file system (full, read-only, forbidden), else None."""
    advice = _FILE_SYSTEM.get(exc.errno)
    if advice is None:
        return None
    where = f"{exc.filename}: " if exc.filename else ""
    return f"{where}{exc.strerror or exc} ({advice})"


def run_main(main: Callable[[list[str] | None], int | None], argv: list[str] | None = None) -> None:
    """Run a stage's main(); bad input, bad config and a full or read-only disk exit 2 with one clear
    message, no traceback. A stage run as a program (``argv`` None: its command line) with
    ``--device cpu`` sees no GPU (confine_to); a call in-process leaves its caller's devices alone."""
    if argv is None:
        confine_to(device_flag(sys.argv[1:]))
    try:
        code = main(argv)
    except (DataError, ConfigError) as exc:
        _fail(str(exc))
    except OSError as exc:
        line = file_system_error(exc)
        if line is None:
            raise
        _fail(line)
    raise SystemExit(code or 0)


def _fail(line: str) -> None:
    # Into the stage's log file only: the console already gets the "error:" line (a console handler
    # printed it a second time, and logging's last resort, before any handler, a third way).
    record = log.makeRecord(log.name, logging.ERROR, __file__, 0, "%s", (line,), None)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handle(record)
    print(f"error: {line}", file=sys.stderr)
    raise SystemExit(2) from None

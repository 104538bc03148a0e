"""How a stage must fail on bad input in tests: exit 2 with one ``error:`` line naming the file, record
and field (or the flag or config key), no traceback, and no output left behind (docs/failures.md
"Bad input")."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterable

import pytest

from pipeline.core.cli import run_main


def fails(
    main: Callable[[list[str] | None], int | None],
    argv: Iterable[object],
    capsys: pytest.CaptureFixture,
    *names: object,
    outputs: Iterable[object] = (),
) -> str:
    """Run the stage in-process; it must exit 2 with one error line naming each of ``names``, and leave
    none of ``outputs`` (an empty folder may stay). Returns the line."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        run_main(main, [str(a) for a in argv])
    assert exc.value.code == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, lines
    for name in names:
        assert str(name) in lines[0], (name, lines[0])
    for out in outputs:
        out = Path(out)
        assert not out.exists() or (out.is_dir() and not any(out.iterdir())), out
    return lines[0]

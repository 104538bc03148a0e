"""A config overlay that is not UTF-8 (issue 39, item 10, its last case).

Snakemake reads every `--configfile` itself, in `ConfigSettings.__post_init__`, while its command line
is turned into API settings (cli.args_to_api), before the Snakefile is parsed: no code of this project
runs before the UnicodeDecodeError traceback, whose `position` counts from the start of PyYAML's read
chunk and which names no file. `python -m pipeline.workflow.checks FILE ...` checks the files as Snakemake
will merge them, naming the file, the byte, line and column.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.core.config import ConfigError, load_mapping
from pipeline.workflow.checks import main

REPO = Path(__file__).resolve().parent.parent
SNAKEMAKE = Path(sys.executable).with_name("snakemake")


def latin1_overlay(path: Path) -> int:
    """A valid overlay but for one Latin-1 'é' past the first 8 KiB; returns that byte's offset."""
    comments = "".join(f"# line {i}: {'x' * 60}\n" for i in range(200))
    data = comments.encode() + b"dpr:\n  lr: 3.0e-5  # caf\xe9\n"
    path.write_bytes(data)
    return data.index(b"\xe9")


def test_the_check_names_the_file_and_the_files_own_byte_line_and_column(tmp_path, capsys):
    overlay = tmp_path / "overlay.yaml"
    offset = latin1_overlay(overlay)
    good = tmp_path / "good.yaml"
    good.write_text("dpr: {lr: 3.0e-5}\n")
    assert main([str(good), str(overlay)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"error: {overlay}: not UTF-8 text (invalid continuation byte at byte {offset}: line 202, column 20)"
    )
    assert offset > 8192  # beyond the chunk Snakemake's reader counts from
    assert main([str(good)]) == 0
    assert "good.yaml: valid" in capsys.readouterr().out


def test_the_check_reports_what_snakemake_n_reports_in_one_line(tmp_path, capsys):
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text("dpr:\n  lr: 1.0e-5\ndpr:\n  lr: 2.0e-5\n")
    assert main([str(overlay)]) == 2
    assert "key 'dpr' given twice in one mapping" in capsys.readouterr().err
    overlay.write_text("dpr: {lrr: 1.0e-5}\n")
    assert main([str(overlay)]) == 2
    assert "config key 'dpr': unknown key(s) 'lrr'" in capsys.readouterr().err


def test_a_byte_order_mark_or_a_bad_first_byte_is_placed_at_line_one(tmp_path):
    overlay = tmp_path / "o.yaml"
    overlay.write_bytes(b"\xffdpr: {}\n")
    with pytest.raises(ConfigError, match=r"invalid start byte at byte 0: line 1, column 1\)"):
        load_mapping(overlay)


@pytest.mark.slow
def test_snakemake_reads_the_overlay_before_any_code_of_the_project(tmp_path):
    """The evidence for docs/failures.md: if a Snakemake release lets the Snakefile run first, this
    fails, and the Snakefile's check (common.smk's check_config_files) can name the file instead."""
    overlay = tmp_path / "overlay.yaml"
    offset = latin1_overlay(overlay)
    marker = tmp_path / "snakefile_ran"
    snakefile = tmp_path / "Snakefile"
    snakefile.write_text(f"open({str(marker)!r}, 'w').close()\ninclude: {str(REPO / 'Snakefile')!r}\n")
    proc = subprocess.run(
        [str(SNAKEMAKE), "-n", "-s", str(snakefile), "--directory", str(tmp_path), "--cores", "1"]
        + ["--configfile", str(overlay)],
        cwd=tmp_path,
        env=dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"),
        capture_output=True,
        text=True,
        check=False,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and not marker.exists(), out[-3000:]
    assert "settings/types.py" in out and "UnicodeDecodeError" in out, out[-3000:]
    assert str(overlay) not in out.splitlines()[-1] and f"position {offset}" not in out, out[-3000:]

"""Issue 39's own probe: the stages the issue did not name (noise sweep, figures, trade-off, report,
AR2 selection and search, learning curve, seed metrics, clean, train_dense's settings document) given
hostile inputs. Each case must exit 2 with one line naming the file, record and field (or the flag or
config key), no traceback, and leave no output (docs/failures.md "Bad input")."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from stage_failures import fails

from pipeline.ar2 import learning_curve, selection
from pipeline.core import schemas as S
from pipeline.core.cli import run_main
from pipeline.evaluation import seed_metrics, sweep
from pipeline.sieve import clean, figures, report, tradeoff
from pipeline.training import train_dense

NOT_UTF8 = b'{"a": "\xff\xfe"}\n'


def write(path: Path, content) -> str:
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
    return str(path)


def table(path: Path, schema: pa.Schema, rows: list[dict]) -> str:
    pq.write_table(pa.table({f.name: [r.get(f.name) for r in rows] for f in schema}, schema=schema), path)
    return str(path)


# ---- noise sweep -------------------------------------------------------------------------------------

METHODS = ("dpr_none", "dpr_sieve", "dpr_oracle")


def sweep_argv(tmp_path, metrics=None, manifest=None):
    metrics = metrics if metrics is not None else {"methods": {m: {"metrics": {"R@5": 0.5}} for m in METHODS}}
    manifest = manifest if manifest is not None else {"false_negatives": {"measured": {"share": 0.1}}}
    mp, fp = write(tmp_path / "metrics.json", metrics), write(tmp_path / "manifest.json", manifest)
    out = tmp_path / "out"
    return [
        "--dataset", f"a={mp}:{fp}", "--methods", *METHODS, "--baseline", "dpr_none",
        "--oracle", "dpr_oracle", "--metric", "R@5", "--out-json", out / "s.json",
        "--out-png", out / "s.png", "--out-md", out / "s.md",
    ]  # fmt: skip


def sweep_fails(tmp_path, capsys, name: str, document, field: str) -> None:
    """The sweep with ``document`` as its ``name``.json (metrics or manifest) fails naming file and field."""
    argv = sweep_argv(tmp_path, **{name: document})
    fails(sweep.main, argv, capsys, f"{name}.json", field, outputs=[tmp_path / "out"])


def test_sweep_valid_input_still_runs(tmp_path):
    with pytest.raises(SystemExit) as exc:
        run_main(sweep.main, [str(a) for a in sweep_argv(tmp_path)])
    assert exc.value.code == 0


@pytest.mark.parametrize(
    "metrics, field",
    [
        ({"methods": ["dpr_none"]}, "methods"),  # AttributeError
        ({"methods": {m: {"metrics": {"R@5": "high"}} for m in METHODS}}, "metrics.R@5"),  # ValueError
        ('{"methods": {"dpr_none": {"metrics": {"R@5": NaN}}}}', "metrics.R@5"),  # NaN into the sweep
        ({"methods": {m: {"per_seed": [{"seed": 1}]} for m in METHODS}}, "per_seed"),  # KeyError
        (
            {
                "methods": {
                    m: {"per_seed": [{"seed": 1, "metrics": {"R@5": v}} for v in (0.1, 0.3)]} for m in METHODS
                }
            },
            "per_seed.seed",
        ),  # one seed twice: the first silently dropped
    ],
)
def test_sweep_bad_metrics(tmp_path, capsys, metrics, field):
    sweep_fails(tmp_path, capsys, "metrics", metrics, field)


@pytest.mark.parametrize(
    "manifest, field",
    [
        ({"false_negatives": {"measured": {"share": "ten"}}}, "false_negatives.measured.share"),
        ({"false_negatives": [1]}, "false_negatives"),
    ],
)
def test_sweep_bad_manifest(tmp_path, capsys, manifest, field):
    sweep_fails(tmp_path, capsys, "manifest", manifest, field)


# ---- figures -----------------------------------------------------------------------------------------


def figures_argv(tmp_path, losses=None, comparison=None, sieve_rows=None):
    losses = losses if losses is not None else [
        {"qid": "q", "pid": f"p{i}", "group": g, "similarity": 0.1, "nce_loss": float(i)}
        for i, g in enumerate(["false_negative", "hard_negative", "in_batch"])
    ]  # fmt: skip
    sieve_rows = sieve_rows if sieve_rows is not None else [
        {"qid": "q", "pid": f"p{i}", "rank": i, "kept": i % 2 == 0, "is_false_negative": i == 1,
         "nce_loss": 0.1, "threshold": 0.2, "fallback": False}
        for i in range(4)
    ]  # fmt: skip
    comparison = comparison if comparison is not None else {
        "dataset": "a", "filters": [{"filter": "sieve", "precision": 0.5, "recall": 0.5}]
    }  # fmt: skip
    return [
        "--losses", f"0.5={table(tmp_path / 'losses.parquet', S.SIEVE_LOSSES_SCHEMA, losses)}",
        "--sieve", f"0.5={table(tmp_path / 'sieve.parquet', S.SIEVE_SCHEMA, sieve_rows)}",
        "--comparison", write(tmp_path / "comparison.json", comparison), "--out-dir", tmp_path / "out",
    ]  # fmt: skip


@pytest.mark.parametrize(
    "comparison, field",
    [
        (b'{"dataset":', "not valid JSON"),  # a valid one named it, but after two figures were written
        ([1], "must be a JSON object"),  # TypeError
        ({"dataset": "a"}, "filters"),  # KeyError
        (NOT_UTF8, "not valid JSON"),  # UnicodeDecodeError
    ],
)
def test_figures_bad_comparison_writes_nothing(tmp_path, capsys, comparison, field):
    figures_fail(tmp_path, capsys, "comparison.json", field, comparison=comparison)


def figures_fail(tmp_path, capsys, name: str, field: str, **inputs) -> None:
    """The figures stage with ``inputs`` (figures_argv's) fails naming ``name`` and ``field``, writing nothing."""
    argv = figures_argv(tmp_path, **inputs)
    fails(figures.main, argv, capsys, name, field, outputs=[tmp_path / "out"])


def test_figures_empty_or_nan_losses(tmp_path, capsys):
    figures_fail(tmp_path, capsys, "losses.parquet", "no rows", losses=[])
    nan = [{"qid": "q", "pid": "p", "group": "hard_negative", "similarity": 0.1, "nce_loss": float("nan")}]
    line = fails(figures.main, figures_argv(tmp_path, losses=nan), capsys, "losses.parquet", "nce_loss")
    assert "record 0" in line


def test_figures_empty_sieve(tmp_path, capsys):
    figures_fail(tmp_path, capsys, "sieve.parquet", "no rows", sieve_rows=[])


# ---- trade-off ---------------------------------------------------------------------------------------


def tradeoff_argv(tmp_path, rows=None, points="11"):
    rows = rows if rows is not None else [
        {"qid": "q", "pid": f"p{i}", "rank": i, "kept": i % 2 == 0, "is_false_negative": i == 1,
         "nce_loss": 0.1 * i, "threshold": 0.2}
        for i in range(4)
    ]  # fmt: skip
    path = table(tmp_path / "s.parquet", S.SIEVE_SCHEMA, rows)
    out = tmp_path / "out"
    return [
        "--decisions",
        f"sieve={path}",
        "--points",
        points,
        "--out-json",
        out / "t.json",
        "--out-png",
        out / "t.png",
    ]


def _row(i, **kw):
    return {"qid": "q", "pid": f"p{i}", "rank": i, "kept": True, "is_false_negative": i == 1, "nce_loss": 0.1,
            "threshold": 0.2, **kw}  # fmt: skip


@pytest.mark.parametrize(
    "rows, field",
    [
        ([], "no rows"),  # ValueError: cannot convert float NaN to integer
        ([_row(i, nce_loss=float("nan")) for i in range(3)], "nce_loss"),  # a curve, exit 0
        ([_row(i, nce_loss=float("inf") if i == 0 else 0.1) for i in range(3)], "nce_loss"),
        ([_row(i, pid="p") for i in range(3)], "judged twice"),  # duplicates counted twice
    ],
)
def test_tradeoff_bad_decisions(tmp_path, capsys, rows, field):
    fails(
        tradeoff.main,
        tradeoff_argv(tmp_path, rows=rows),
        capsys,
        "s.parquet",
        field,
        outputs=[tmp_path / "out"],
    )


@pytest.mark.parametrize("points", ["0", "-5", "1"])
def test_tradeoff_points_below_two(tmp_path, capsys, points):
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        run_main(tradeoff.main, [str(a) for a in tradeoff_argv(tmp_path, points=points)])
    assert exc.value.code == 2
    assert "--points" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


# ---- report compare ----------------------------------------------------------------------------------

REPORT = {
    "dataset": "a", "filter": "sieve", "candidates_digest": "x", "n_candidates": 3, "n_queries": 1,
    "n_false_negatives": 1, "n_true_negatives": 2, "precision": 0.5, "recall": 0.5,
}  # fmt: skip


@pytest.mark.parametrize(
    "content, field",
    [
        ([REPORT], "must be a JSON object"),  # TypeError
        (NOT_UTF8, "not valid JSON"),  # UnicodeDecodeError
        ({k: v for k, v in REPORT.items() if k != "candidates_digest"}, "candidates_digest"),  # KeyError
        ({**REPORT, "recall": "half"}, "recall"),  # went into the table, exit 0
    ],
)
def test_report_compare_bad_report(tmp_path, capsys, content, field):
    path = write(tmp_path / "r.json", content)
    out = tmp_path / "out"
    argv = [
        "compare",
        "--dataset",
        "a",
        "--reports",
        path,
        "--out-json",
        out / "c.json",
        "--out-md",
        out / "c.md",
    ]
    fails(report.main, argv, capsys, "r.json", field, outputs=[out])


# ---- AR2 selection, search and learning curve --------------------------------------------------------


def rounds_folder(tmp_path, round_json=None, selection_json=None, n=2) -> Path:
    folder = tmp_path / "v"
    for r in range(n + 1):
        (folder / f"round{r}").mkdir(parents=True, exist_ok=True)
        data = (
            round_json(r)
            if round_json
            else {"round": r, "variant": "plain", "seed": 0, "dev": {"R@5": 0.1 * r}}
        )
        write(folder / f"round{r}" / "round.json", data)
    if selection_json is not None:
        write(folder / "selection.json", selection_json)
    return folder


BAD_ROUNDS = [
    (lambda r: [r], "must be a JSON object"),  # TypeError
    (lambda r: {"dev": {"R@5": 0.1}}, "round"),  # KeyError
    (lambda r: {"round": r, "variant": "plain", "seed": 0, "dev": {"R@5": "x"}}, "dev.R@5"),  # TypeError
    (
        lambda r: b'{"round": %d, "variant": "plain", "seed": 0, "dev": {"R@5": NaN}}' % r,
        "dev.R@5",
    ),  # selected
    (lambda r: {"round": r, "variant": "plain", "seed": 0, "dev": [1]}, "dev"),  # TypeError
    (lambda r: {"round": 7, "variant": "plain", "seed": 0, "dev": {"R@5": 0.1}}, "round"),  # round 7 selected
]


@pytest.mark.parametrize("round_json, field", BAD_ROUNDS)
def test_ar2_select_bad_round(tmp_path, capsys, round_json, field):
    folder = rounds_folder(tmp_path, round_json)
    out = tmp_path / "out"
    argv = ["select", "--variant-dir", folder, "--variant", "plain", "--rounds", "2", "--select-metric", "R@5",
            "--info-out", out / "info.json", "--figure", out / "f.png"]  # fmt: skip
    fails(selection.main, argv, capsys, "round.json", field, outputs=[out, folder / "selection.json"])


def test_ar2_select_read_only_output_leaves_no_selection(tmp_path, capsys, monkeypatch):
    """selection.json was written beside the round folders before the figure failed in a read-only
    output folder (root ignores permissions: the write check is made to fail as it would)."""
    import tempfile

    folder, out = rounds_folder(tmp_path), tmp_path / "out"
    out.mkdir()
    real = tempfile.mkstemp

    def refuse(*args, **kwargs):
        if str(kwargs.get("dir", "")).startswith(str(out)):
            raise PermissionError(13, "Permission denied", str(kwargs["dir"]))
        return real(*args, **kwargs)

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    argv = ["select", "--variant-dir", folder, "--variant", "plain", "--rounds", "2", "--select-metric", "R@5",
            "--info-out", out / "info.json", "--figure", out / "f.png"]  # fmt: skip
    fails(selection.main, argv, capsys, str(out), outputs=[out, folder / "selection.json"])


@pytest.mark.parametrize(
    "info, field",
    [([1], "must be a JSON object"), ({"retriever": 5, "embeddings": 3}, "retriever")],
)
def test_ar2_search_bad_info(tmp_path, capsys, info, field):
    queries = table(tmp_path / "q.parquet", S.QUERIES_SCHEMA, [{"qid": "q", "text": "hi"}])
    argv = ["search", "--info", write(tmp_path / "info.json", info), "--queries", queries,
            "--run-out", tmp_path / "out" / "run.parquet", "--device", "cpu"]  # fmt: skip
    fails(selection.main, argv, capsys, "info.json", field, outputs=[tmp_path / "out"])


@pytest.mark.parametrize(
    "selection_json, field",
    [
        (b'{"selected', "not valid JSON"),  # JSONDecodeError
        ([1], "must be a JSON object"),  # TypeError
        (NOT_UTF8, "not valid JSON"),  # UnicodeDecodeError
        ({"reason": "x"}, "selected_round"),  # KeyError
    ],
)
def test_learning_curve_bad_selection(tmp_path, capsys, selection_json, field):
    folder = rounds_folder(tmp_path, selection_json=selection_json)
    argv = ["--variant", f"x={folder}", "--rounds", "2", "--out", tmp_path / "out" / "lc.png"]
    fails(learning_curve.main, argv, capsys, "selection.json", field, outputs=[tmp_path / "out"])


@pytest.mark.parametrize("round_json, field", BAD_ROUNDS[:3])
def test_learning_curve_bad_round(tmp_path, capsys, round_json, field):
    folder = rounds_folder(tmp_path, round_json)
    argv = ["--variant", f"x={folder}", "--rounds", "2", "--out", tmp_path / "out" / "lc.png"]
    fails(learning_curve.main, argv, capsys, "round.json", field, outputs=[tmp_path / "out"])


def test_learning_curve_negative_rounds(tmp_path, capsys):
    """--rounds -1 drew an empty figure, exit 0."""
    argv = [
        "--variant",
        f"x={rounds_folder(tmp_path)}",
        "--rounds",
        "-1",
        "--out",
        tmp_path / "out" / "lc.png",
    ]
    fails(learning_curve.main, argv, capsys, "--rounds", "settings.rounds", outputs=[tmp_path / "out"])


# ---- seed metrics ------------------------------------------------------------------------------------

METRICS = {"dataset": "a", "method": "dpr", "split": "test", "n_queries": 3, "metrics": {"R@5": 0.5}}


def test_seed_metrics_negative_seed(tmp_path, capsys):
    paths = [write(tmp_path / f"m{i}.json", METRICS) for i in range(2)]
    argv = ["--metrics", *paths, "--seeds", "-1", "2", "--out", tmp_path / "out" / "m.json"]
    fails(seed_metrics.main, argv, capsys, "seed", "-1", outputs=[tmp_path / "out"])


def test_seed_metrics_info_seed_not_integer(tmp_path, capsys):
    paths = [write(tmp_path / f"m{i}.json", METRICS) for i in range(2)]
    infos = [write(tmp_path / "i0.json", {"seed": "abc"}), write(tmp_path / "i1.json", {"seed": 1})]
    argv = ["--metrics", *paths, "--infos", *infos, "--out", tmp_path / "out" / "m.json"]
    fails(seed_metrics.main, argv, capsys, "i0.json", "seed", outputs=[tmp_path / "out"])


# ---- clean -------------------------------------------------------------------------------------------

TRIPLETS = b"".join(
    json.dumps({"anchor": f"q{i}", "positive": f"pos {i}", "negative": f"neg {i}"}).encode() + b"\n"
    for i in range(3)
)


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("in.jsonl", b'{"anchor":"q\xff","positive":"p","negative":"n"}\n', "not UTF-8"),
        ("in.parquet", b"not parquet", "not a readable parquet file"),
        ("in.csv", b"", "not a readable csv file"),
        ("in.csv", b"anchor,positive,negative\nq\xff,p,n\n", "not UTF-8"),
    ],
)
def test_clean_unreadable_input(tmp_path, capsys, name, content, message):
    path = write(tmp_path / name, content)
    argv = ["--input", path, "--out", tmp_path / "out" / f"clean{Path(name).suffix}", "--filter", "none"]
    fails(clean.main, argv, capsys, name, message, outputs=[tmp_path / "out"])


def test_clean_labels_not_utf8(tmp_path, capsys):
    labels = write(tmp_path / "labels.jsonl", b'{"query": "q\xff", "passage": "p"}\n')
    argv = ["--input", write(tmp_path / "in.jsonl", TRIPLETS), "--out", tmp_path / "out" / "clean.jsonl",
            "--filter", "none", "--labels", labels]  # fmt: skip
    fails(clean.main, argv, capsys, "labels.jsonl", "not UTF-8", outputs=[tmp_path / "out"])


@pytest.mark.parametrize(
    "flag, value", [("--near-duplicate", "2"), ("--near-duplicate", "nan"), ("--batch-size", "0")]
)
def test_clean_flag_out_of_range(tmp_path, capsys, flag, value):
    """Each was accepted and the file cleaned with it (a threshold of 2 or NaN flags no duplicate)."""
    argv = ["--input", write(tmp_path / "in.jsonl", TRIPLETS), "--out", tmp_path / "out" / "clean.jsonl",
            "--filter", "none", flag, value]  # fmt: skip
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        run_main(clean.main, [str(a) for a in argv])
    assert exc.value.code == 2
    assert flag in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


# ---- train_dense's settings document -----------------------------------------------------------------


def test_train_settings_section_not_a_mapping(tmp_path, capsys):
    settings = write(tmp_path / "s.json", {"train": [1]})
    argv = ["--settings", settings, "--init", tmp_path / "init", "--out", tmp_path / "out" / "m"]
    fails(train_dense.main, argv, capsys, "settings.train", outputs=[tmp_path / "out"])


def test_train_settings_json_repeated_key(tmp_path, capsys):
    """json.loads kept the last of a repeated key silently; the config files refuse it."""
    argv = [
        "--settings-json",
        '{"seed": 1, "seed": 2}',
        "--init",
        tmp_path / "init",
        "--out",
        tmp_path / "out" / "m",
    ]
    fails(train_dense.main, argv, capsys, "--settings-json", "'seed' given twice", outputs=[tmp_path / "out"])

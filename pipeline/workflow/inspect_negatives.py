"""Look at the sieve's decisions: one query, a random sample, or a dataset summary (Parquet only).

    python -m pipeline.workflow.inspect_negatives --dataset synthkb --qid q123            # the sieve the run built
    python -m pipeline.workflow.inspect_negatives --dataset synthkb --sample 5 --seed 1 --dropped
    python -m pipeline.workflow.inspect_negatives --dataset synthkb --filter positive_aware --sample 3 --false-negatives
    python -m pipeline.workflow.inspect_negatives summary --dataset synthkb
    sieve-inspect ...                                                   # the same, installed entry point

Reads results/{dataset}/negatives/sieve_b<β>.parquet (or sieve/<filter>/decisions.parquet, or --file),
the train queries and the corpus; never loads a model. For each query: its question, its positive, then
every candidate with source score, similarity, NCE loss, threshold, decision and false-negative label.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from pipeline.core.cli import run_main
from pipeline.core.methods import BETA_RE
from pipeline.core.schemas import CANDIDATES_SCHEMA, FILTER_DECISIONS_SCHEMA, QUERIES_SCHEMA, SIEVE_SCHEMA
from pipeline.core.settings.base import ConfigError, default
from pipeline.core.settings.root import Config
from pipeline.core.storage import DataError, read_table
from pipeline.sieve.data import load_passages
from pipeline.sieve.report import detection_metrics
from pipeline.sieve.settings import FILTER_NAMES

# What the sieve's own settings (strict, fallback) add after the candidates' tag (methods.sieve_tag).
_DECISION_TAG = r"(?:_(?:no)?strict)?(?:_fallback_[a-z_]+)?"


def sieve_files(results: Path, settings: str = "") -> dict[str, Path]:
    """β tag (with the sieve rule's own settings, e.g. ``0.5_strict``) -> sieve decisions file built
    from the candidates tagged ``settings`` (methods.sieve_tag: '' for the defaults; the training files
    ``*.train.parquet`` are not listed)."""
    pattern = re.compile(
        rf"^sieve_b(?P<beta>{BETA_RE}){re.escape(settings)}(?P<rule>{_DECISION_TAG})\.parquet$"
    )
    neg = results / "negatives"
    found = {}
    for path in sorted(neg.glob("sieve_b*.parquet")) if neg.is_dir() else []:
        match = pattern.match(path.name)
        if match:
            found[match.group("beta") + match.group("rule")] = path
    return found


def sieve_outputs(results: Path, settings: str = "") -> dict[str, tuple[Path, object]]:
    """Every sieve output built from the candidates tagged ``settings``, by name: ``sieve_b<β>``
    (negatives/sieve_b<β>.parquet: scored by the CCR model at β) and ``sieve_no_ccr``
    (sieve/sieve_no_ccr/decisions.parquet: sieve.scorer dpr, scored by models/dpr: the demo's), with
    each file's schema."""
    found: dict[str, tuple[Path, object]] = {
        f"sieve_b{tag}": (path, SIEVE_SCHEMA) for tag, path in sieve_files(results, settings).items()
    }
    no_ccr = results / "sieve" / f"sieve_no_ccr{settings}" / "decisions.parquet"
    if no_ccr.is_file():
        found["sieve_no_ccr"] = (no_ccr, FILTER_DECISIONS_SCHEMA)
    return found


def report_paths(results: Path, settings: str = "") -> list[Path]:
    """The filters' reports on the candidates tagged ``settings``."""
    names = "|".join(re.escape(name) for name in (*FILTER_NAMES, "sieve"))
    pattern = re.compile(rf"^(?:{names}|sieve_b{BETA_RE}){re.escape(settings)}{_DECISION_TAG}$")
    return [
        path for path in sorted((results / "sieve").glob("*/report.json")) if pattern.match(path.parent.name)
    ]


class Workflow:
    """What the workflow would build for one dataset, for naming a missing file and the command that
    makes it. The config is read only when something is missing: a results folder made under an
    overlay stays readable without that overlay."""

    def __init__(self, args: argparse.Namespace):
        self.dataset = args.dataset
        self.overlays = list(args.configfile)
        self.results = Path(args.results_dir) / args.dataset
        self.settings = args.settings

    def _tables(self):
        from pipeline.core.config import load_config
        from pipeline.core.methods import method_table
        from pipeline.core.recipes import dataset_config
        from pipeline.workflow.tables import WorkflowTables

        config = load_config(self.overlays)
        if self.dataset not in config["datasets"]:
            return None, sorted(config["datasets"])
        resolved = dataset_config(config, self.dataset, methods=method_table)
        return WorkflowTables(config, {self.dataset: resolved}), sorted(config["datasets"])

    def check_declared(self) -> None:
        """An unknown dataset with nothing on disk is a typo or a missing --configfile, not a missing
        sieve output: say which datasets the config declares."""
        if self.results.is_dir():
            return
        tables, declared = self._tables()
        if tables is None:
            where = " + ".join(["config.yaml", *self.overlays])
            raise ConfigError(
                f"dataset {self.dataset!r} is not declared in {where} (declared: {', '.join(declared)}); "
                "a dataset of an overlay needs --configfile <overlay.yaml>"
            )

    def command(self, target: str, demo: bool = False) -> str:
        """The command that builds ``target`` (a workflow path under results/); ``demo``: `make demo`
        builds it too."""
        configfile = f" --configfile {' '.join(self.overlays)}" if self.overlays else ""
        if self.settings and not self.overlays:
            # a sieve tag in a path is built only under the settings it names: the user's overlay
            configfile = f" --configfile <the overlay that sets the sieve settings {self.settings}>"
        snakemake = f".venv/bin/snakemake --cores 2{configfile} {target}"
        if demo and self.dataset == "synthkb" and not self.overlays and not self.settings:
            return f"`make demo` (or `{snakemake}`)"
        return f"`{snakemake}`"

    def missing(self, path: Path, what: str, target: str | None = None, demo: bool = False) -> DataError:
        """The error for a file the workflow builds that is not there yet."""
        target = target or self._target(path)
        how = f"; build it with {self.command(target, demo)}" if target else ""
        return DataError(f"{what} not built yet{how}", file=path)

    def _target(self, path: Path) -> str | None:
        """``path`` as the workflow names it (results/<dataset>/...), or None under another --results-dir."""
        try:
            return str(Path("results") / self.dataset / path.relative_to(self.results))
        except ValueError:
            return None

    def sieve(self) -> str | None:
        """The sieve output the workflow builds for this dataset (the one dpr_sieve trains on)."""
        from pipeline.workflow.sieve import SieveRules

        tables, _ = self._tables()
        return SieveRules(tables).decisions(self.dataset, "sieve") if tables is not None else None


def decisions_path(args: argparse.Namespace) -> Path:
    if args.file:
        return Path(args.file)
    results = Path(args.results_dir) / args.dataset
    workflow = Workflow(args)
    workflow.check_declared()
    if args.filter and not args.filter.startswith("sieve_b"):
        path = results / "sieve" / f"{args.filter}{args.settings}" / "decisions.parquet"
        if not path.is_file():
            raise workflow.missing(path, f"the decisions of filter {args.filter}")
        return path
    files = sieve_files(results, args.settings)
    tag = args.filter[len("sieve_b") :] if args.filter else args.beta
    if tag is not None:
        if not files:
            path = results / "negatives" / f"sieve_b{tag}{args.settings}.parquet"
            raise workflow.missing(path, f"the sieve at β {tag}")
        if tag not in files:
            raise DataError(
                f"no sieve output for β={tag} (have: {', '.join(files) or 'none'})",
                file=results / "negatives" / f"sieve_b{tag}{args.settings}.parquet",
            )
        return files[tag]
    # sieve.scorer dpr builds the sieve as a filter (models/dpr scores it) and no sieve_b<β> file
    no_ccr = results / "sieve" / f"sieve_no_ccr{args.settings}" / "decisions.parquet"
    built_no_ccr = no_ccr.is_file()
    found = [*files.values(), *([no_ccr] if built_no_ccr else [])]
    if not found:
        target = workflow.sieve()
        if target is None or args.settings not in target:  # the config's sieve has other settings
            raise DataError(
                f"no sieve output: neither negatives/sieve_b<β>{args.settings}.parquet nor "
                f"sieve/sieve_no_ccr{args.settings}/decisions.parquet is built yet",
                file=results,
            )
        path = Path(args.results_dir) / Path(target).relative_to("results")
        raise workflow.missing(path, "the sieve's decisions", target, demo=True)
    if len(found) != 1:
        raise DataError(
            f"{len(found)} sieve outputs (β = {', '.join(files) or 'none'}"
            f"{'; sieve_no_ccr' if built_no_ccr else ''}); choose one with --beta or --filter",
            file=results / "negatives",
        )
    return found[0]


def select_rows(table: pd.DataFrame, kept: bool, dropped: bool, false_negatives: bool) -> pd.DataFrame:
    mask = np.ones(len(table), dtype=bool)
    if kept:
        mask &= table["kept"].to_numpy(bool)
    if dropped:
        mask &= ~table["kept"].to_numpy(bool)
    if false_negatives:
        truth = table["is_false_negative"].astype("boolean").fillna(False).to_numpy(bool)
        suspected = (table["fn_label_source"].astype("string").fillna("") == "suspected").to_numpy(bool)
        mask &= truth | suspected
    return table[mask]


def _at_least(low: int) -> Callable[[str], int]:
    """An argparse type: an integer >= ``low`` (a negative --sample was a numpy traceback)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {value}")
        return value

    return parse


def pick_queries(rows: pd.DataFrame, qid: str | None, sample: int | None, seed: int) -> list[str]:
    if qid is not None:
        return [qid]
    qids = sorted(rows["qid"].unique())
    if not qids:
        return []
    n = min(sample or 1, len(qids))
    return sorted(np.random.default_rng(seed).choice(qids, size=n, replace=False).tolist())


def fn_label(is_fn, source) -> str:
    if source is pd.NA or source is None or pd.isna(source):
        return "?"
    if source == "suspected":
        return "suspected"
    return f"{'FN' if bool(is_fn) else 'neg'} ({source})"


def _num(value, fmt: str = "{:.3f}") -> str:
    return "–" if value is None or pd.isna(value) else fmt.format(value)


def _snippet(passages: pd.DataFrame, pid: str, width: int) -> Text:
    """The passage as rich Text (never parsed as markup: corpus text may hold "[/b]" or "[citation
    needed]"), title in bold, cut to ``width`` characters."""
    if pid not in passages.index:
        return Text("(not in corpus)", style="dim")
    title, text = str(passages.at[pid, "title"] or ""), str(passages.at[pid, "text"])
    body = Text.assemble((title, "bold"), ": ", text) if title else Text(text)
    if len(body) > width:
        body.truncate(max(width - 1, 1))
        body.append("…")
    return body


# Below this many columns a candidate takes two lines (figures, then its passage) instead of a table
# row whose passage column would be a few characters wide.
WIDE = 110
SIEVE_RULE = (
    "kept iff its NCE loss >= the query's threshold, the mean loss over the positive and its candidates "
    "(> under sieve.strict); a query with nothing kept keeps one random candidate (fallback)"
)


def _decision(row: pd.Series) -> Text:
    if not bool(row["kept"]):
        return Text("dropped", style="red")
    if bool(row.get("fallback", False)):
        return Text("kept (fallback)", style="yellow")
    return Text("kept", style="green")


def show_query(
    console: Console,
    qid: str,
    rows: pd.DataFrame,
    query: pd.Series | None,
    passages: pd.DataFrame,
    width: int,
) -> None:
    rows = rows.sort_values("rank", kind="stable")
    first = rows.iloc[0]
    has_loss = "nce_loss" in rows
    question = str(query["text"]) if query is not None else "(query not found)"
    answers = list(query["answers"]) if query is not None and query["answers"] is not None else []
    console.rule(Text(str(qid), style="bold"))
    line = Text.assemble(("question", "bold"), ": ", question)
    if answers:
        line.append(f"   answers: {answers}", style="dim")
    console.print(line)
    positive = str(first["positive_pid"])
    line = Text.assemble(("positive", "bold"), f" {positive}: ", _snippet(passages, positive, width))
    if has_loss and "positive_similarity" in rows:
        line.append(
            f"   similarity {_num(first['positive_similarity'])}, loss {_num(first['positive_loss'])}, "
            f"threshold {_num(first['threshold'])}",
            style="dim",
        )
    console.print(line)
    score = "sim" if has_loss else "score"
    if console.width < WIDE:
        passage_width = min(width, max(console.width - 6, 20))
        # the columns' names once per query: rank, decision, label, figures, passage id
        console.print(
            Text(f"rank decision  label  {score}{'  loss  thr' if has_loss else ''}  pid", style="dim")
        )
        for _, row in rows.iterrows():
            figures = [f"{score} {_num(row['similarity'] if has_loss else row.get('score'))}"]
            if has_loss:
                figures += [f"loss {_num(row.get('nce_loss'))}", f"thr {_num(row.get('threshold'))}"]
            console.print(
                Text.assemble(
                    f"{row['rank']:>4} ",
                    _decision(row),
                    f"  {fn_label(row['is_false_negative'], row['fn_label_source'])}  ",
                    ("  ".join(figures), "dim"),
                    f"  {row['pid']}",
                ),
                overflow="fold",
            )
            console.print(Text("      ").append_text(_snippet(passages, row["pid"], passage_width)))
        return
    table = Table(show_lines=False, expand=True)
    for name, kw in (
        ("rank", {"justify": "right"}),
        ("pid", {}),
        ("passage", {"ratio": 1}),
        ("source", {"justify": "right"}),
        (score, {"justify": "right"}),
        ("loss", {"justify": "right"}),
        ("thr", {"justify": "right"}),
        ("decision", {}),
        ("label", {}),
    ):
        table.add_column(name, **kw)
    for _, row in rows.iterrows():
        table.add_row(
            str(row["rank"]),
            Text(str(row["pid"])),
            _snippet(passages, row["pid"], width),
            _num(row.get("source_score"), "{:.2f}"),
            _num(row["similarity"] if has_loss else row.get("score")),
            _num(row.get("nce_loss")),
            _num(row.get("threshold")),
            _decision(row),
            Text(fn_label(row["is_false_negative"], row["fn_label_source"])),
        )
    console.print(table)


def cmd_show(args: argparse.Namespace, console: Console) -> int:
    path = decisions_path(args)
    # Sieve and filter decisions share these columns' types; which are required is checked below.
    table = read_table(path, schema=FILTER_DECISIONS_SCHEMA, optional=FILTER_DECISIONS_SCHEMA.names)
    for col in ("qid", "pid", "rank", "kept", "is_false_negative", "fn_label_source", "positive_pid"):
        if col not in table:
            raise DataError("missing column (not a sieve/filter decisions file?)", file=path, field=col)
    rows = select_rows(table, args.kept, args.dropped, args.false_negatives)
    if args.qid is not None and args.qid not in set(table["qid"]):
        raise DataError(f"query {args.qid!r} has no candidates here", file=path, field="qid")
    qids = pick_queries(rows, args.qid, args.sample, args.seed)
    if not qids:
        console.print("no query has candidates matching the filters")
        return 0
    rows = rows[rows["qid"].isin(qids)]
    if rows.empty:
        console.print(f"{args.qid}: no candidate matches the filters")
        return 0
    resources = Path(args.resources_dir) / args.dataset
    queries = read_table(
        resources / "queries.train.parquet", ["qid", "text", "answers"], schema=QUERIES_SCHEMA
    ).set_index("qid")
    passages = load_passages(resources / "corpus.parquet", set(rows["pid"]) | set(rows["positive_pid"]))
    console.print(Text(f"decisions: {path}", style="dim"))
    if "nce_loss" in table:
        console.print(Text(f"rule: {SIEVE_RULE}", style="dim"))
    for qid in qids:
        query = queries.loc[qid] if qid in queries.index else None
        show_query(console, qid, rows[rows["qid"] == qid], query, passages, args.width)
    return 0


def _rate(num: int, den: int) -> str:
    return f"{num / den:.3f}" if den else "–"


def _share(value: float | None) -> str:
    """A share the labels decide; None where no label does."""
    return "unknown" if value is None else f"{value:.3f}"


def cmd_summary(args: argparse.Namespace, console: Console) -> int:
    results = Path(args.results_dir) / args.dataset
    cand_path = results / "sieve" / f"candidates{args.settings}.parquet"
    workflow = Workflow(args)
    workflow.check_declared()
    if not cand_path.is_file():
        raise workflow.missing(cand_path, "the sieve's candidates", demo=True)
    cands = read_table(
        cand_path, ["qid", "pid", "is_false_negative", "fn_label_source"], schema=CANDIDATES_SCHEMA
    )
    truth = cands["is_false_negative"].astype("boolean")
    src = cands["fn_label_source"].astype("string").fillna("none")
    console.print(Text(f"summary of {results}/: sieve candidates, outputs, filter reports"))
    console.rule(f"[b]{args.dataset}[/b]: sieve candidates ({cand_path})")
    console.print(
        f"queries {cands['qid'].nunique()}, candidates {len(cands)} "
        f"({len(cands) / max(cands['qid'].nunique(), 1):.1f} per query), distinct passages "
        f"{cands['pid'].nunique()}"
    )
    console.print(
        f"false negatives {int(truth.fillna(False).sum())}, known true negatives "
        f"{int((truth == False).sum())}; labels from: "  # noqa: E712
        + ", ".join(f"{name} {count}" for name, count in src.value_counts().items())
    )
    files = sieve_outputs(results, args.settings)
    if not files:
        console.print(
            Text(
                f"no sieve output: neither {results}/negatives/sieve_b<β>{args.settings}.parquet (the sieve "
                f"scored by a CCR model) nor {results}/sieve/sieve_no_ccr{args.settings}/decisions.parquet "
                "(scored by models/dpr: the demo's) exists yet",
                style="dim",
            )
        )
    if files:
        table = Table(title=f"sieve outputs: decisions on the {len(cands)} candidates", box=box.SIMPLE_HEAD)
        # A filter that dropped the same share at random would drop that share of the false negatives
        # (FN recall = its sieve-out) at the candidates' false-negative share as precision: the note
        # below the table gives both floors.
        table.add_column("sieve", no_wrap=True)
        for name in ("kept", "sieve-out", "fallback", "precision", "FN recall", "TN kept"):
            table.add_column(name, justify="right")
        sentences = []
        for label, (path, schema) in files.items():
            columns = ["kept", "is_false_negative"] + (["fallback"] if schema is SIEVE_SCHEMA else [])
            s = read_table(path, columns, schema=schema)
            kept = s["kept"].to_numpy(bool)
            # report.py's definitions, so this table and the filters' reports agree: precision over the
            # labelled drops, None (unknown, not 0) where no drop has a label.
            scores = detection_metrics(kept, s["is_false_negative"])
            dropped = int((~kept).sum())
            precision, recall = _share(scores["precision"]), _share(scores["recall"])
            table.add_row(
                Text(label),
                str(int(kept.sum())),
                _rate(dropped, len(s)),
                str(int(s["fallback"].sum())) if "fallback" in s else "–",
                precision,
                recall,
                _share(scores["true_negative_retention"]),
            )
            scorer = "models/dpr" if label.startswith("sieve_no_ccr") else f"the CCR model at β {label[7:]}"
            if scores["n_labelled"] == 0:
                sentences.append(
                    f"{label} (scored by {scorer}): {dropped} drops; precision and FN recall unknown: no "
                    "candidate has a false-negative label (is_false_negative is empty)."
                )
                continue
            labelled = scores["true_positives"] + scores["false_positives"]
            of = f"its {dropped} drops" + (f" ({labelled} labelled)" if labelled != dropped else "")
            sentences.append(
                f"{label} (scored by {scorer}): of {of}, a share of {precision} were true "
                f"false negatives (precision); it dropped {recall} of the false negatives (FN recall)."
            )
        console.print(table)
        for sentence in sentences:
            console.print(Text(sentence))
    reports = report_paths(results, args.settings)
    if not reports:
        console.print(
            Text(
                f"no filter report ({results}/sieve/<filter>/report.json; the demo builds none): e.g. "
                f".venv/bin/snakemake --cores 2 {results}/sieve/sieve_no_ccr/report.json",
                style="dim",
            )
        )
    if reports:
        table = Table(
            title="filters (results/{dataset}/sieve/<filter>/report.json)".replace("{dataset}", args.dataset)
        )
        for name in ("filter", "sieve-out", "precision", "FN recall", "F1", "TN kept", "suspected dropped"):
            table.add_column(name, justify="right")
        for path in reports:
            rep = json.loads(path.read_text(encoding="utf-8"))
            table.add_row(
                Text(str(rep["filter"])),
                *(
                    _num(rep.get(k))
                    for k in (
                        "sieve_out_rate",
                        "precision",
                        "recall",
                        "f1",
                        "true_negative_retention",
                        "suspected_dropped_rate",
                    )
                ),
            )
        console.print(table)
    if files or reports:
        floor = _share(detection_metrics(np.zeros(len(cands), dtype=bool), truth)["precision"])
        console.print(
            Text(
                "precision: share of the labelled drops that were false negatives (unknown: no drop has a label); FN recall: share of the known "
                "false negatives dropped. A filter dropping the same share at random reaches its sieve-out "
                f"rate as FN recall and the labelled candidates' false-negative share ({floor}) "
                "as precision: the numbers to read them against.",
                style="dim",
            )
        )
    return 0


def build_parsers() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--dataset", required=True)
    common.add_argument("--results-dir", default="results")
    common.add_argument("--resources-dir", default="resources")
    common.add_argument(
        "--configfile",
        nargs="*",
        default=[],
        help="overlays, as given to snakemake (a dataset they declare; read only to name what is missing)",
    )
    common.add_argument(
        "--settings",
        default="",
        help="the sieve settings' tag in the file names ('' = the defaults; e.g. _max_queries600: "
        "results/{dataset}/sieve/candidates_max_queries600.parquet)",
    )
    show = argparse.ArgumentParser(
        prog="python -m pipeline.workflow.inspect_negatives",
        parents=[common],
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    which = show.add_mutually_exclusive_group()
    which.add_argument("--beta", default=None, help="sieve output to read (β tag as in the file name)")
    which.add_argument(
        "--filter", default=None, help="a filter's decisions (sieve/<filter>/decisions.parquet)"
    )
    which.add_argument("--file", default=None, help="any sieve/filter decisions Parquet")
    pick = show.add_mutually_exclusive_group()
    pick.add_argument("--qid", default=None)
    pick.add_argument("--sample", type=_at_least(1), default=None, help="show N random queries")
    show.add_argument("--seed", type=_at_least(0), default=default(Config, "seed"))
    show.add_argument("--kept", action="store_true", help="only kept candidates")
    show.add_argument("--dropped", action="store_true", help="only dropped candidates")
    show.add_argument("--false-negatives", action="store_true", help="only known/suspected false negatives")
    show.add_argument("--width", type=int, default=90, help="characters of passage text shown")
    summary = argparse.ArgumentParser(
        prog="python -m pipeline.workflow.inspect_negatives summary",
        parents=[common],
        description="dataset summary: candidates, sieve outputs, filter reports",
    )
    return show, summary


def main(argv: list[str] | None = None) -> int:
    import sys

    argv = list(sys.argv[1:] if argv is None else argv)
    show, summary = build_parsers()
    console = Console(width=int(os.environ.get("COLUMNS", 0)) or None)
    if argv and argv[0] == "summary":
        return cmd_summary(summary.parse_args(argv[1:]), console)
    if argv and argv[0] == "show":
        argv = argv[1:]
    args = show.parse_args(argv)
    if args.kept and args.dropped:
        show.error("--kept and --dropped exclude each other")
    return cmd_show(args, console)


def entry() -> None:
    """Console-script entry point (``sieve-inspect``)."""
    # This tool writes no log file, so nothing handles run_main's logged error line and logging's
    # last resort would print it on stderr a second time, above the "error: ..." line.
    logging.getLogger("sieve").addHandler(logging.NullHandler())
    run_main(main)


if __name__ == "__main__":
    entry()

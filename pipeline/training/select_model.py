"""Model selection on dev that can keep the start model: WiSE-FT (Wortsman et al. 2022).

Each alpha of ``alphas`` gives the weight-space interpolation

    theta(alpha) = (1 - alpha) * theta_start + alpha * theta_trained

of the model training started from (alpha 0) and the model it ended with (alpha 1). The trained
folder's snapshots (``snapshots/step<k>/``, kept by training under selection.checkpoints:
pipeline.training.snapshots) are candidates too. Every candidate is scored on the dev queries by
``metric``, and the best is written as a retriever folder. Ties go to the first in the order start,
snapshots by step, interpolations by alpha, trained model: a fine-tuned model that does no better on
dev than the model it started from is not kept (the conservative choice).

    python -m pipeline.training.select_model \\
        --start results/D/models/zeroshot --trained results/D/models/dpr \\
        --queries resources/D/queries.dev.parquet --qrels resources/D/qrels.dev.parquet \\
        --corpus resources/D/corpus.parquet --candidates results/D/bm25/run.dev.parquet \\
        [--settings FILE] [--alphas 0 0.5 1 --metric MRR@10 --depth 100 ...] --out results/D/models/dpr_wise

The settings (pipeline.core.settings.job_documents.SelectModelJob: alphas, metric, depth, match, batch_size, amp) come as
one document (``--settings FILE`` or ``--settings-json``), each flag over it, the contract's default
for a key neither gives.

Only the candidates are scored: each dev query's top ``depth`` passages of the ``--candidates`` run
(BM25's, say) are re-ranked by each model, so the corpus is never encoded and the selection costs the
same on a 21M-passage corpus as on a small one. ``--qrels`` holds the labels that choose: the
annotated dev qrels a user has, or a truth file (synthkb's qrels_all, where hit@1 is hit_all@1).

``--out`` is a retriever folder (pipeline.retrieval.model) holding the chosen model, its model card
(README.md) and ``selection.json``: the dev metric of every candidate, the chosen one, the qrels file
and the tie rule.
Interpolation runs in fp32 (each weight cast back to its dtype); the models are scored as the corpus
encoding computes (``amp``, encode.amp: bf16 autocast on a CPU with native bf16, fp16 on CUDA, else fp32;
the record's ``precision``), the dev passages tokenised once for every candidate.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence, TypeVar

import numpy as np
import pandas as pd
import torch

from pipeline.core.cli import add_job_flags, check_writable, run_main, stage_parser, start_stage
from pipeline.core.jobs import add_settings_flags, job_settings
from pipeline.core.precision import encoding_dtype, precision_name
from pipeline.core.schemas import QUERIES_SCHEMA
from pipeline.core.settings.job_documents import SelectModelJob
from pipeline.core.storage import (
    DataError,
    atomic_open,
    check_unique,
    read_table,
    refuse_overwriting_inputs,
    write_json,
)
from pipeline.evaluation.evaluate import read_finite_run
from pipeline.evaluation.hybrid import dev_metric
from pipeline.evaluation.selections import SELECTION_FILE, candidate_order
from pipeline.retrieval.embeddings import rowwise_dot
from pipeline.retrieval.encode import encode_tokenized, resolve_device, tokenize_buffer
from pipeline.retrieval.model import SETTINGS_FILE, Retriever
from pipeline.training.data import PassageStore
from pipeline.training.model_card import CARD_FILE
from pipeline.training.snapshots import list_snapshots, load_snapshot

log = logging.getLogger("sieve.select_model")

TIE_RULE = (
    "equal dev metrics: the first in the order start model, snapshots by step, interpolations by "
    "smallest alpha, trained model (the start model first)"
)
# Settings that change what a model computes; base (a record) and temperature (read by the losses
# only) may differ between the start and the trained model.
_SCORING_SETTINGS = ("pooling", "similarity", "shared_towers", "query_max_len", "passage_max_len")


def interpolate(
    start_state: Mapping[str, torch.Tensor],
    trained_state: Mapping[str, torch.Tensor],
    alpha: float,
    names: tuple[str, str] = ("start model", "trained model"),
) -> dict[str, torch.Tensor]:
    """(1 - alpha) * start + alpha * trained, tensor by tensor, computed in fp32 and cast back to each
    tensor's dtype (fp64 in fp64; alpha 0 gives the start's tensors exactly, alpha 1 the trained ones). Integer
    buffers are not weights: they must be equal and are taken as they are. A tensor one model lacks,
    or of another shape or dtype, is a DataError naming it (``names``: the two models' in messages)."""
    if not 0 <= alpha <= 1:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    only = sorted(set(start_state) ^ set(trained_state))
    if only:
        which = names[0] if only[0] in start_state else names[1]
        raise DataError(
            f"tensor {only[0]!r} is in the {which} only ({len(only)} such tensors): the models do not "
            "share an architecture",
            field=only[0],
        )
    out = {}
    for name, start in start_state.items():
        trained = trained_state[name]
        if start.shape != trained.shape or start.dtype != trained.dtype:
            raise DataError(
                f"tensor {name!r} is {_describe(start)} in the {names[0]}, {_describe(trained)} in the "
                f"{names[1]}: the models do not share an architecture",
                field=name,
            )
        if start.is_floating_point():
            # At least fp32 (a bf16 sum rounds twice); fp64 stays fp64, or alpha 0 would not give it back.
            wide = torch.promote_types(start.dtype, torch.float32)
            mixed = (1.0 - alpha) * start.to(wide) + alpha * trained.to(wide)
            out[name] = mixed.to(start.dtype)
        elif torch.equal(start, trained):
            out[name] = start.clone()
        else:
            raise DataError(
                f"integer buffer {name!r} differs between the {names[0]} and the {names[1]}; it cannot be "
                "interpolated",
                field=name,
            )
    return out


def _describe(tensor: torch.Tensor) -> str:
    return f"{str(tensor.dtype).removeprefix('torch.')} {list(tensor.shape)}"


K = TypeVar("K")


def choose(scores: Mapping[K, float], order: Callable[[K], Any] = lambda key: key) -> K:
    """The key of the highest dev metric; among equal metrics the one first by ``order`` (alphas: the
    smallest, closest to the start model: a trained model must do better on dev to replace the one it
    started from)."""
    if not scores:
        raise ValueError("no candidate was scored")
    best = max(scores.values())
    return min((key for key, value in scores.items() if value == best), key=order)


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One model the selection scores: the start (alpha 0), a snapshot of training (its step), an
    interpolation (its alpha) or the trained model (alpha 1)."""

    kind: str  # start | snapshot | interpolation | trained
    alpha: float | None = None
    step: int | None = None
    weights: Path | None = None  # a snapshot's file

    @property
    def name(self) -> str:
        if self.kind == "snapshot":
            return f"step{self.step}"
        if self.kind == "interpolation":
            return f"alpha{self.alpha:g}"
        return self.kind

    def order(self) -> tuple:
        """The tie order (TIE_RULE): start, snapshots by step, interpolations by alpha, trained; the
        selections' table (pipeline.evaluation.selections) reads records by the same order."""
        return candidate_order(self.kind, self.step, self.alpha)


def candidates_of(alphas: Sequence[float], snapshots: Sequence[tuple[int, Path]]) -> list[Candidate]:
    """The candidates in tie order: alpha 0 is the start, 1 the trained model, the snapshots between."""
    found = [Candidate("snapshot", step=step, weights=path) for step, path in snapshots]
    for alpha in sorted({float(a) for a in alphas}):
        kind = {0.0: "start", 1.0: "trained"}.get(alpha, "interpolation")
        found.append(Candidate(kind, alpha=alpha))
    return sorted(found, key=Candidate.order)


def load_texts(path: str | Path, qids: Sequence[str] = ()) -> dict[str, str]:
    """qid -> text of the dev queries, in file order (the one read of the file); ``qids`` must be among
    them."""
    queries = read_table(path, columns=["qid", "text"], schema=QUERIES_SCHEMA)
    if len(queries) == 0:
        raise DataError("no queries to evaluate", file=path)
    check_unique(queries, "qid", path)
    for field in ("qid", "text"):
        nulls = queries[field].isna()
        if nulls.any():
            raise DataError("null value", file=path, record=int(nulls.idxmax()), field=field)
    texts = dict(zip(queries["qid"].astype(str), queries["text"]))
    missing = [q for q in qids if q not in texts]
    if missing:
        raise DataError(f"query {missing[0]!r} has no text", file=path, field="qid")
    return texts


def top_candidates(run: pd.DataFrame, depth: int) -> pd.DataFrame:
    """Each query's first ``depth`` rows of a validated run (sorted by qid, rank)."""
    return run[run["rank"] <= depth].reset_index(drop=True)


@dataclasses.dataclass(frozen=True)
class DevCandidates:
    """The dev candidates every model of a selection re-ranks, tokenised once: ``run`` (qid, pid, rank),
    the queries' and passages' token arrays (pipeline.retrieval.encode.tokenize_buffer) and each run row's
    query and passage row in them."""

    run: pd.DataFrame
    queries: dict[str, np.ndarray]
    passages: dict[str, np.ndarray]
    query_row: np.ndarray
    passage_row: np.ndarray

    @classmethod
    def tokenize(
        cls, retriever: Retriever, run: pd.DataFrame, texts: Mapping[str, str], store: PassageStore
    ) -> DevCandidates:
        qids = list(dict.fromkeys(run["qid"]))
        titles, bodies = store.get(np.arange(len(store)))
        return cls(
            run=run,
            queries=tokenize_buffer(retriever, [texts[q] for q in qids], None),
            passages=tokenize_buffer(retriever, bodies, titles),
            query_row=pd.Index(qids).get_indexer(run["qid"]),
            passage_row=pd.Index(store.pids).get_indexer(run["pid"]),
        )


def rescore(
    retriever: Retriever, dev: DevCandidates, *, batch_size: int, device: torch.device, amp: bool
) -> pd.DataFrame:
    """The candidates re-ranked by ``retriever`` (a run: qid, pid, rank, score), its forward passes as the
    corpus encoding computes them (``amp``: encode.amp); equal scores keep the candidates' order."""
    options = {"batch_size": batch_size, "device": device, "amp": amp, "dtype": torch.float32}
    query_emb = encode_tokenized(retriever, dev.queries, passages=False, **options)
    passage_emb = encode_tokenized(retriever, dev.passages, passages=True, **options)
    # Row by row (rowwise_dot), not a matrix product: a pair's score must not depend on the other pairs.
    scores = rowwise_dot(query_emb, dev.query_row, passage_emb, dev.passage_row, dtype=np.float32)
    run = dev.run[["qid", "pid"]].assign(score=scores, order=dev.run["rank"])
    run = run.sort_values(["qid", "score", "order"], ascending=[True, False, True], kind="stable")
    run["rank"] = run.groupby("qid", sort=False).cumcount().astype("int32") + 1
    return run[["qid", "pid", "rank", "score"]].reset_index(drop=True)


def check_same_settings(start: Retriever, trained: Retriever, start_dir: str, trained_dir: str) -> None:
    """The two retrievers pool, compare and truncate alike, else interpolating them means nothing."""
    for name in _SCORING_SETTINGS:
        a, b = getattr(start.settings, name), getattr(trained.settings, name)
        if a != b:
            raise DataError(
                f"{name} is {a!r} in the start model ({start_dir}) and {b!r} here: the models must be "
                "scored alike to be interpolated",
                file=Path(trained_dir) / SETTINGS_FILE,
                field=name,
            )


def select(
    start_dir: str,
    trained_dir: str,
    *,
    queries: str,
    qrels: str,
    corpus: str,
    candidates: str,
    alphas: Sequence[float],
    metric: str,
    depth: int,
    match: str = "string",
    batch_size: int = 64,
    amp: bool = True,
    device: str | torch.device = "cpu",
) -> tuple[Retriever, dict]:
    """(the chosen model, the selection record). Each candidate (every alpha's interpolation and every
    snapshot the trained folder keeps, pipeline.training.snapshots) re-ranks the dev candidates and is
    scored by ``metric`` against ``qrels``; the best wins, ties by TIE_RULE (the start first)."""
    texts = load_texts(queries)
    dev_qids = list(texts)
    run = top_candidates(read_finite_run(candidates, set(dev_qids)), depth)
    if run.empty:
        raise DataError("the candidates run ranks no dev query", file=candidates, field="qid")
    pids = np.array(sorted(set(run["pid"])), dtype=object)
    store = PassageStore.from_corpus(corpus, pids, source_of=lambda _pid: str(candidates))
    # qrels given as qrels_all too: with one labels file, hit_all@k and hit@k are the same count over it.
    score = dev_metric(queries, qrels, corpus, set(pids), metric, match, qrels_all=qrels)

    start, trained = Retriever.load(start_dir), Retriever.load(trained_dir)
    check_same_settings(start, trained, start_dir, trained_dir)
    start_state = {k: v.detach().clone() for k, v in start.state_dict().items()}
    trained_state = {k: v.detach().clone() for k, v in trained.state_dict().items()}
    # Fails before any scoring: a tensor the models do not share is one line naming it.
    try:
        interpolate(start_state, trained_state, 1.0)
    except DataError as err:
        raise DataError(err.message, file=trained_dir, field=err.field) from None
    # The trained model's settings (temperature included) unless the start itself is kept.
    model = trained.to(device)
    dev = DevCandidates.tokenize(model, run, texts, store)  # the scoring settings are the start's too
    by_candidate: dict[Candidate, float] = {}
    for candidate in candidates_of(alphas, list_snapshots(trained_dir)):
        model.load_state_dict(_weights(candidate, start_state, trained_state))
        scored = rescore(model, dev, batch_size=batch_size, device=device, amp=amp)
        by_candidate[candidate] = float(score(scored))
        log.info("%s: dev %s %.4f", candidate.name, metric, by_candidate[candidate])
    chosen = choose(by_candidate, Candidate.order)
    log.info("chosen: %s", chosen.name)
    if chosen.kind == "start":
        model = start.to(device)
    else:
        model.load_state_dict(_weights(chosen, start_state, trained_state))
    by_alpha = {c.alpha: v for c, v in by_candidate.items() if c.alpha is not None}
    record = {
        "method": "the best on dev of the start model, the training's snapshots and the WiSE-FT "
        "interpolations (1 - alpha) * start + alpha * trained (fp32); alpha 1 is the trained model",
        "start": str(start_dir),
        "trained": str(trained_dir),
        "metric": metric,
        "qrels": str(qrels),
        "queries": str(queries),
        "candidates": str(candidates),
        "depth": depth,
        "precision": precision_name(encoding_dtype(device, amp)),
        "n_queries": len(dev_qids),
        "dev_metric_by_alpha": {f"{a:g}": v for a, v in by_alpha.items()},
        "dev_metric_by_snapshot": {str(c.step): v for c, v in by_candidate.items() if c.kind == "snapshot"},
        "scored": [
            {"name": c.name, "kind": c.kind, "alpha": c.alpha, "step": c.step, "dev_metric": v}
            for c, v in by_candidate.items()
        ],
        "chosen": chosen.name,
        "chosen_kind": chosen.kind,
        "chosen_alpha": chosen.alpha,
        "chosen_step": chosen.step,
        "kept_start": chosen.kind == "start",
        "tie_rule": TIE_RULE,
        "retriever": dataclasses.asdict(model.settings),
    }
    return model, record


def _weights(
    candidate: Candidate, start_state: Mapping[str, torch.Tensor], trained_state: Mapping[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """A candidate's state_dict: an interpolation's, or a snapshot's checked tensor by tensor against
    the trained model (alpha 1 of trained -> snapshot is the snapshot exactly)."""
    if candidate.weights is None:
        return interpolate(start_state, trained_state, candidate.alpha)
    try:
        return interpolate(
            trained_state, load_snapshot(candidate.weights), 1.0, ("trained model", "snapshot")
        )
    except DataError as err:
        raise DataError(err.message, file=candidate.weights, field=err.field) from None


def selection_card(record: Mapping[str, Any]) -> str:
    """README.md of the chosen folder: what was chosen among which candidates, on what, and why."""
    chosen = record["chosen"]
    kind = record["chosen_kind"]
    if kind == "snapshot":
        what = f"the training's snapshot at step {record['chosen_step']}"
    elif kind == "interpolation":
        what = f"the WiSE-FT interpolation at alpha {record['chosen_alpha']:g}"
    elif kind == "start":
        what = "the start model itself: no trained candidate did better on dev"
    else:
        what = "the trained model as training ended"
    lines = [
        "# Dense retriever chosen on dev by sieve",
        "",
        f"This folder holds `{chosen}`: {what}. Start: `{record['start']}`; trained: `{record['trained']}`.",
        f"Every candidate re-ranked the first {record['depth']} passages of `{record['candidates']}` for the "
        f"{record['n_queries']:,} dev queries of `{record['queries']}` and was scored by {record['metric']} "
        f"against `{record['qrels']}`; the highest wins; {record['tie_rule']}.",
        "",
        f"| candidate | dev {record['metric']} |",
        "|---|---:|",
        *(
            f"| {c['name']}{' (chosen)' if c['name'] == chosen else ''} | {c['dev_metric']:.4f} |"
            for c in record["scored"]
        ),
        "",
        "The full record: `selection.json`.",
        "",
    ]
    return "\n".join(lines)


# The stage's inputs: flag -> help.
INPUTS = {
    "start": "retriever folder training started from (alpha 0)",
    "trained": "retriever folder it ended with (alpha 1)",
    "queries": "dev queries Parquet",
    "qrels": "dev labels that choose: annotated qrels or the truth (qrels_all)",
    "corpus": "corpus Parquet (only the candidates' passages are read)",
    "candidates": "a run of the dev queries (e.g. BM25's) whose top depth passages are re-scored",
}


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser("pipeline.training.select_model", __doc__)
    for name, text in INPUTS.items():
        parser.add_argument(f"--{name}", required=True, help=text)
    parser.add_argument(
        "--out", required=True, help="retriever folder of the chosen model (+ selection.json)"
    )
    add_job_flags(parser)
    add_settings_flags(parser, SelectModelJob, "selection")
    args = parser.parse_args(argv)
    job = job_settings(SelectModelJob, args)  # before any work: a bad document or flag is one line
    inputs = {f"--{name}": getattr(args, name) for name in INPUTS}
    refuse_overwriting_inputs({"--out": args.out, "--log": args.log}, inputs)
    check_writable(args.out, args.log)
    start_stage(args.log, args.threads)
    device = resolve_device(args.device)
    paths = {k: getattr(args, k) for k in ("queries", "qrels", "corpus", "candidates")}
    model, record = select(args.start, args.trained, **paths, **job.model_dump(), device=device)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / SETTINGS_FILE).unlink(missing_ok=True)  # incomplete until save rewrites it, last
    write_json(out / SELECTION_FILE, record)
    with atomic_open(out / CARD_FILE, "w", encoding="utf-8") as handle:
        handle.write(selection_card(record))
    model.to("cpu").save(out)
    log.info("wrote %s: %s", out, record["chosen"])
    return 0


if __name__ == "__main__":
    run_main(main)

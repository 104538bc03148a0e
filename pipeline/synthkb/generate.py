"""synthkb: the embedded default dataset, a synthetic encyclopedia with exact relevance ground truth.

    python -m pipeline.synthkb.generate --out-dir resources/synthkb --entities 500 --seed 0 \\
        [--split '{"by": "entity", "dev": 0.1, "test": 0.2, "seed": 0}'] \\
        [--positive named_article|source] [--fn-share 0.3] [--fn-paraphrase 0.5] [--log FILE]

    # exactly what the workflow's job generates: its settings document, then the same folder
    python -m pipeline.workflow.jobs synthkb generate > synthkb.json
    python -m pipeline.synthkb.generate --settings synthkb.json --out-dir resources/synthkb

The settings are a document (--settings FILE, or --settings-json as the rule passes it; schema:
pipeline.core.settings.job_documents.GenerateJob), each flag over it; what neither gives is the contract's default.

Made-up people, places, organisations and works, linked by typed relations; each entity has an article
of ~100-word passages stating its facts in varied wording amid filler prose, and facts are stated again
in related entities' articles. Questions are generated from facts; ``qrels`` holds one stating
passage (by default the first of the article the question names; ``--positive source``: the one the
question was generated from), ``qrels_all`` every passage that states an answer (from the generator's
provenance). Passages in qrels_all but not in qrels are the true false negatives. See docs/synthkb.md.

The false-negative dial (``--fn-share``, ``--fn-paraphrase``; pipeline.synthkb.dial) sets the share of
true false negatives among BM25-mined train negatives and the share of them without an answer
string; the manifest records both as measured (``false_negatives``), with or without the dial.

Generation streams block by block (``pipeline.synthkb.world.BLOCK_SIZE`` entities each) through
ParquetStreamWriter, so memory does not grow with ``--entities``. Output is a pure function of the
arguments: same arguments, byte-identical files.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from collections import Counter
from pathlib import Path

from rich.progress import Progress

from pipeline.core.cli import run_main, stage_parser, start_stage
from pipeline.core.config import ConfigError
from pipeline.core.jobs import add_settings_flags, job_settings
from pipeline.core.schemas import CORPUS_SCHEMA, QRELS_SCHEMA, QUERIES_SCHEMA, SHIPPED_NEGATIVES_SCHEMA
from pipeline.core.settings.job_documents import GenerateJob
from pipeline.core.storage import SPLITS, ParquetStreamWriter, write_json, write_table
from pipeline.data.settings import SplitUnits
from pipeline.data.splits import SplitSpec, assign_splits, parse_split_spec
from pipeline.synthkb.articles import ArticleWriter
from pipeline.synthkb.dial import ACCEPT, PROBE_ENTITIES, Dial, Search, knobs_at, make_dial
from pipeline.synthkb.draft import Knobs
from pipeline.synthkb.measure import ProbeQuestion, fn_shares
from pipeline.synthkb.paraphrase import Paraphraser
from pipeline.synthkb.questions import Question, QuestionKnobs, make_questions, passage_place
from pipeline.synthkb.world import BLOCK_SIZE, TYPES, Layout, build_block, name_space

log = logging.getLogger("sieve.synthkb")

FLUSH_ROWS = 50_000
GENERATOR_VERSION = 2  # 2: qrels' positive rule (QuestionKnobs.positive)


# ---- split ------------------------------------------------------------------------------------------


def parse_split(split: object) -> SplitSpec | None:
    """The config ``split`` value (or its JSON); synthkb splits by entity or by query (None: all test)."""
    spec = parse_split_spec(split)
    if spec is not None and spec.by not in ("entity", "query"):
        raise ConfigError(
            f"split: synthkb splits by 'entity' (each entity is one article) or 'query', not {spec.by!r}"
        )
    return spec


def block_splits(units: list[str], spec: SplitSpec | None) -> dict[str, str]:
    """Split of each unit (entity gid or qid) of one block: exact per-block sizes, seeded hash order.

    Per block, so that generation streams; units are globally unique, so the order does not
    depend on the block.
    """
    if spec is None:
        return dict.fromkeys(units, "test")
    return assign_splits(units, spec.dev, spec.test, spec.seed)


# ---- writing ----------------------------------------------------------------------------------------


class BufferedWriter:
    """Rows accumulate in columns and go out in large batches (few, large row groups)."""

    def __init__(self, writer: ParquetStreamWriter):
        self.writer = writer
        self.columns: dict[str, list] = {name: [] for name in writer.schema.names}
        self.rows = 0

    def add(self, *values) -> None:
        for column, value in zip(self.columns.values(), values):
            column.append(value)
        self.rows += 1
        if len(next(iter(self.columns.values()))) >= FLUSH_ROWS:
            self.flush()

    def flush(self) -> None:
        if next(iter(self.columns.values())):
            self.writer.write(self.columns)
            self.columns = {name: [] for name in self.writer.schema.names}


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def generate(
    out_dir: str | Path,
    entities: int,
    seed: int,
    split_spec: SplitSpec | None,
    knobs: Knobs = Knobs(),
    qknobs: QuestionKnobs = QuestionKnobs(),
    block_size: int = BLOCK_SIZE,
    distractor_rate: float = 0.6,
    fn_share: float | None = None,
    fn_paraphrase: float = 0.0,
) -> dict:
    """Write the dataset to ``out_dir``; return the manifest (written last).

    ``fn_share`` / ``fn_paraphrase``: the false-negative dial (pipeline.synthkb.dial); they replace
    ``knobs``' restatement rates, echo and paraphrase by those the search finds.
    """
    dial = make_dial(fn_share, fn_paraphrase)
    out_dir = Path(out_dir)
    manifest_path = out_dir / "manifest.json"
    # A stale manifest must never vouch for a half-regenerated folder.
    manifest_path.unlink(missing_ok=True)
    try:
        layout = Layout(entities, block_size)
    except ValueError as exc:
        raise ConfigError(f"synthkb: {exc}") from None
    names = name_space(layout, seed, bynames=dial.fn_paraphrase > 0 or knobs.paraphrase > 0)
    probe = _Probe(layout, names, seed, split_spec, qknobs, distractor_rate)
    search = None
    if dial.active:
        search = Search(probe.measure, knobs, dial)
        knobs = _checked(search, *search.run())
    measured = search.at(search.level, search.paraphrase) if search else probe.measure(knobs)
    stats: Counter = Counter()
    statements: Counter = Counter()
    files = {"corpus": (out_dir / "corpus.parquet", CORPUS_SCHEMA)}
    for split in SPLITS:
        files[f"queries.{split}"] = (out_dir / f"queries.{split}.parquet", QUERIES_SCHEMA)
        files[f"qrels.{split}"] = (out_dir / f"qrels.{split}.parquet", QRELS_SCHEMA)
        files[f"qrels_all.{split}"] = (out_dir / f"qrels_all.{split}.parquet", QRELS_SCHEMA)
    with contextlib.ExitStack() as stack:
        out = {
            key: BufferedWriter(stack.enter_context(ParquetStreamWriter(path, schema)))
            for key, (path, schema) in files.items()
        }
        with Progress(transient=True) as progress:
            task = progress.add_task("synthkb: generating", total=layout.n_blocks)
            for b in range(layout.n_blocks):
                _generate_block(
                    layout, names, seed, b, split_spec, knobs, qknobs, distractor_rate, out, stats, statements
                )
                progress.advance(task)
        for writer in out.values():
            writer.flush()
    write_table(out_dir / "negatives.train.parquet", SHIPPED_NEGATIVES_SCHEMA.empty_table())
    files["negatives.train"] = (out_dir / "negatives.train.parquet", SHIPPED_NEGATIVES_SCHEMA)
    manifest = {
        "dataset": out_dir.name,
        "format": "synthkb",
        "generator": {
            "version": GENERATOR_VERSION,
            "entities": entities,
            "seed": seed,
            "split": vars(split_spec) if split_spec else "none",
            "block_size": block_size,
            "distractor_rate": distractor_rate,
            "knobs": vars(knobs),
            "question_knobs": vars(qknobs),
            "fn_share": dial.fn_share,
            "fn_paraphrase": dial.fn_paraphrase,
        },
        "counts": {
            "entities": entities,
            **{f"entities.{t}": stats[f"entities.{t}"] for t in TYPES},
            "facts": stats["facts"],
            "passages": out["corpus"].rows,
            **{key: out[key].rows for key in out if key != "corpus"},
            "negatives.train": 0,
            "questions.reverse": stats["reverse"],
            # qrels' positive in the article the question names; fallbacks: positive=named_article
            # found no stating passage there and kept the source passage
            "questions.positive_in_named_article": stats["positive_in_named_article"],
            "questions.positive_fallback": stats["positive_fallback"],
        },
        # facts by the number of passages stating them: the size of the false-negative problem
        "passages_per_fact": {str(k): statements[k] for k in sorted(statements)},
        "false_negatives": _fn_record(dial, knobs, measured, probe, search),
        "files": {f"{key}.parquet": {"sha256": _sha256(path)} for key, (path, _) in files.items()},
    }
    write_json(manifest_path, manifest)
    log.info(
        "synthkb: %d entities, %d passages, %s questions (train/dev/test) -> %s",
        entities,
        out["corpus"].rows,
        "/".join(str(out[f"queries.{s}"].rows) for s in SPLITS),
        out_dir,
    )
    return manifest


def block_content(
    layout: Layout,
    names,
    seed: int,
    b: int,
    knobs: Knobs,
    qknobs: QuestionKnobs,
    distractor_rate: float,
    split_spec: SplitSpec | None,
):
    """Block ``b``: its entities with their passages, each fact's stating passages, and its
    questions with their splits."""
    block = build_block(layout, names, seed, b, distractor_rate)
    para = Paraphraser(block, seed, knobs.paraphrase, names.byname) if knobs.paraphrase > 0 else None
    writer = ArticleWriter(block, seed, knobs, para)
    passages_of: dict[int, list[str]] = {f.fid: [] for f in block.facts}
    articles = []
    for ent in block.entities:
        passages = writer.passages(ent)
        articles.append((ent, passages))
        for passage in passages:
            for fid in sorted(passage.facts):
                passages_of[fid].append(passage.pid)
    unstated = [f for f in block.facts if not passages_of[f.fid]]
    if unstated:  # an article template lost a fact: the ground truth would be wrong
        raise RuntimeError(f"synthkb block {b}: fact {unstated[0]} is stated in no passage")
    questions = make_questions(block, passages_of, seed, qknobs)
    by_query = split_spec is not None and split_spec.by == "query"
    unit = (lambda q: q.qid) if by_query else (lambda q: str(q.subject))
    units = [q.qid for q in questions] if by_query else [str(e.gid) for e in block.entities]
    splits = block_splits(units, split_spec)
    return block, articles, passages_of, [(q, splits[unit(q)]) for q in questions]


def _generate_block(
    layout: Layout,
    names,
    seed: int,
    b: int,
    split_spec: SplitSpec | None,
    knobs: Knobs,
    qknobs: QuestionKnobs,
    distractor_rate: float,
    out: dict[str, BufferedWriter],
    stats: Counter,
    statements: Counter,
) -> None:
    block, articles, passages_of, questions = block_content(
        layout, names, seed, b, knobs, qknobs, distractor_rate, split_spec
    )
    for ent, passages in articles:
        stats[f"entities.{ent.type}"] += 1
        for passage in passages:
            out["corpus"].add(passage.pid, passage.title, passage.text)
    stats["facts"] += len(block.facts)
    statements.update(len(p) for p in passages_of.values())
    for q, split in questions:
        stats["reverse"] += q.reverse
        stats["positive_fallback"] += q.fallback
        stats["positive_in_named_article"] += passage_place(q.positive)[0] == q.subject
        out[f"queries.{split}"].add(q.qid, q.text, q.answers)
        out[f"qrels.{split}"].add(q.qid, q.positive, 1)
        for pid in q.relevant:
            out[f"qrels_all.{split}"].add(q.qid, pid, 1)


# ---- the false-negative dial's measurements ---------------------------------------------------------


class _Probe:
    """The first blocks of the layout (up to PROBE_ENTITIES entities), generated in memory at given
    knobs and measured: the search's candidates, and the figures of the manifest."""

    def __init__(
        self,
        layout: Layout,
        names,
        seed: int,
        split_spec: SplitSpec | None,
        qknobs: QuestionKnobs,
        distractor_rate: float,
    ):
        self.layout, self.names, self.seed, self.split_spec = layout, names, seed, split_spec
        self.qknobs, self.distractor_rate = qknobs, distractor_rate
        self.blocks = 1
        while self.blocks < layout.n_blocks and layout.entity_offset(self.blocks + 1) <= PROBE_ENTITIES:
            self.blocks += 1
        self.entities = layout.entity_offset(self.blocks)

    def measure(self, knobs: Knobs) -> dict:
        passages: list[tuple[str, str, str]] = []
        questions: list[Question] = []
        for b in range(self.blocks):
            _, articles, _, block_questions = block_content(
                self.layout,
                self.names,
                self.seed,
                b,
                knobs,
                self.qknobs,
                self.distractor_rate,
                self.split_spec,
            )
            passages += [(p.pid, p.title, p.text) for _, ps in articles for p in ps]
            # Mined negatives are for training; a dataset with no train split is measured on all.
            questions += [q for q, split in block_questions if split == "train" or self.split_spec is None]
        return fn_shares(
            passages, [ProbeQuestion(q.text, q.answers, q.positive, frozenset(q.relevant)) for q in questions]
        )


def _checked(search: Search, level: float, paraphrase: float) -> Knobs:
    """The knobs the search found; a ConfigError if a request is out of the dial's reach."""
    measured = search.at(level, paraphrase)
    far = [(key, want, got) for key, want, got in search.misses(measured) if abs(got - want) > ACCEPT]
    if far:
        tried = {
            key: (min(t[name] for t in search.trace), max(t[name] for t in search.trace))
            for key, name in (("fn_share", "share"), ("fn_paraphrase", "string_free_share"))
        }
        key, want, got = far[0]
        lo, hi = tried[key]
        raise ConfigError(
            f"synthkb: {key} {want} is out of the dial's reach at this size and seed: "
            f"the closest measured was {got:.3f} ({len(search.trace)} datasets tried, "
            f"measuring {lo:.3f} to {hi:.3f}); docs/synthkb.md, 'The false-negative dial'"
        )
    log.info(
        "synthkb dial: restatement level %.3f, paraphrase %.3f after %d tries",
        level,
        paraphrase,
        len(search.trace),
    )
    return knobs_at(search.base, level, paraphrase)


def _fn_record(dial: Dial, knobs: Knobs, measured: dict, probe: _Probe, search: Search | None) -> dict:
    return {
        "requested": {"fn_share": dial.fn_share, "fn_paraphrase": dial.fn_paraphrase},
        "measured": {
            key: round(value, 4) if isinstance(value, float) else value for key, value in measured.items()
        },
        "probe_entities": probe.entities,  # measured on the first blocks, up to PROBE_ENTITIES
        # what the search set (dial.py): restatement level (1: the generator's own rates; above 1,
        # 1 + echo passages per entity), paraphrase rate; the knobs are under generator.knobs
        "level": round(search.level, 6) if search else 1.0,
        "paraphrase": round(knobs.paraphrase, 6),
        "search": search.trace if search else [],
    }


# ---- CLI --------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser("pipeline.synthkb.generate", __doc__.split("\n")[0])
    parser.add_argument("--out-dir", required=True, help="e.g. resources/synthkb")
    add_settings_flags(
        parser, GenerateJob, "the dataset's generator settings (datasets.<name>)", {"split": "--split-spec"}
    )
    parser.add_argument(
        "--block-size", type=int, default=BLOCK_SIZE, help="entities per self-contained block (memory bound)"
    )
    parser.add_argument(
        "--distractor-rate",
        type=float,
        default=0.6,
        help="probability that a name group gets look-alike members",
    )
    parser.add_argument("--log", help="also log to this file")
    args = parser.parse_args(argv)
    job = job_settings(GenerateJob, args)  # before any work: a bad document or flag is one line
    start_stage(args.log)
    if job.entities is None:
        raise ConfigError(
            "settings key 'entities': the number of entities is needed (datasets.<name>.entities)"
        )
    if args.block_size < 10:
        raise ConfigError(f"--block-size must be at least 10, got {args.block_size}")
    if not 0 <= args.distractor_rate <= 1:
        raise ConfigError(f"--distractor-rate must be in [0, 1], got {args.distractor_rate}")
    split = job.split.model_dump() if isinstance(job.split, SplitUnits) else job.split
    generate(
        args.out_dir,
        job.entities,
        job.seed,
        parse_split(split),
        qknobs=QuestionKnobs(positive=job.positive),
        block_size=args.block_size,
        distractor_rate=args.distractor_rate,
        fn_share=job.fn_share,
        fn_paraphrase=job.fn_paraphrase,
    )
    return 0


if __name__ == "__main__":
    run_main(main)

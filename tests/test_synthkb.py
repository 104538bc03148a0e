"""synthkb: determinism, sizes, splits, ids, schemas, and the exactness of the relevance ground truth."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from pipeline.core.cli import run_main
from pipeline.core.config import ConfigError, load_config
from pipeline.core.schemas import CORPUS_SCHEMA, QRELS_SCHEMA, QUERIES_SCHEMA
from pipeline.core.schemas import SHIPPED_NEGATIVES_SCHEMA as NEGATIVES_SCHEMA
from pipeline.core.storage import SPLITS
from pipeline.data.answers import string_has_answer
from pipeline.data.splits import SplitSpec
from pipeline.synthkb import generate as synthkb
from pipeline.synthkb.articles import ArticleWriter, pack
from pipeline.synthkb.draft import Knobs
from pipeline.synthkb.names import CITY_FORMS, FIRST_NAMES, ROOT_USES, AffinePermutation, NameSpace
from pipeline.synthkb.questions import QuestionKnobs, make_questions
from pipeline.synthkb.world import Layout, build_block, composition, name_space

REPO = Path(__file__).resolve().parent.parent
ENTITY_SPLIT = SplitSpec(by="entity", dev=0.1, test=0.2, seed=0)
FILES = (
    ["corpus", "negatives.train"]
    + [f"queries.{s}" for s in SPLITS]
    + [f"qrels.{s}" for s in SPLITS]
    + [f"qrels_all.{s}" for s in SPLITS]
)


def _generate(root: Path, entities: int = 65, seed: int = 3, spec=ENTITY_SPLIT, block_size: int = 25) -> Path:
    out = root / "synthkb"
    synthkb.generate(out, entities, seed, spec, block_size=block_size)
    return out


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    # 65 entities in blocks of 25 -> 3 blocks of 22/22/21: exercises the unequal-block offsets.
    return _generate(tmp_path_factory.mktemp("a"))


def _read(out: Path, name: str) -> pd.DataFrame:
    return pq.read_table(out / f"{name}.parquet").to_pandas()


def _in_memory(entities: int = 65, seed: int = 3, block_size: int = 25):
    """Every block with its passages, provenance and questions, straight from the generator."""
    layout = Layout(entities, block_size)
    names = name_space(layout, seed)
    for b in range(layout.n_blocks):
        block = build_block(layout, names, seed, b)
        writer = ArticleWriter(block, seed, Knobs())
        passages = [p for e in block.entities for p in pack(e, writer.article(e), Knobs().max_words)]
        passages_of = defaultdict(list)
        for p in passages:
            for fid in sorted(p.facts):
                passages_of[fid].append(p.pid)
        yield block, passages, passages_of, make_questions(block, passages_of, seed, QuestionKnobs())


# ---- names and layout --------------------------------------------------------------------------------


def test_affine_permutation_is_a_bijection():
    perm = AffinePermutation(1000, seed=7, tag="t")
    assert sorted(perm(i) for i in range(1000)) == list(range(1000))
    with pytest.raises(IndexError):
        perm(1000)


def test_names_are_unique_across_types_and_shaped():
    caps = dict.fromkeys(ROOT_USES, 3000) | {"person_group": 3000}
    ns = NameSpace(seed=1, caps=caps)
    names = [ns.person(g, m) for g in range(3000) for m in range(3)]
    names += [ns.city(g, m) for g in range(3000) for m in range(3)]
    names += [ns.country(i) for i in range(3000)] + [ns.city_alias(i) for i in range(3000)]
    names += [ns.org(g, m)[0] for g in range(3000) for m in range(3)]
    names += [ns.work(g, m) for g in range(3000) for m in range(3)]
    assert len(names) == len(set(names))
    assert all(f[-1] in "aeio" for f in FIRST_NAMES)
    assert all(ns.root("city", i)[-1] not in "aeiou" for i in range(3000))
    # Look-alikes share a name part: same first name and surname stem, same city root.
    assert ns.person(5, 0).split()[0] == ns.person(5, 1).split()[0]
    assert ns.person(5, 0) != ns.person(5, 1) and ns.person(5, 0)[:-3] == ns.person(5, 1)[:-3]
    assert ns.city(9, 0) in ns.city(9, 1) and len(CITY_FORMS) > 3


def test_name_space_capacity_is_checked():
    with pytest.raises(ConfigError, match="too many entities"):
        NameSpace(seed=0, caps=dict.fromkeys(ROOT_USES, 10**6) | {"person_group": 10})


@pytest.mark.parametrize("entities,block_size", [(10, 200), (11, 10), (65, 25), (401, 200), (1234, 100)])
def test_layout_offsets_are_cumulative_sums(entities, block_size):
    layout = Layout(entities, block_size)
    sizes = [layout.size(b) for b in range(layout.n_blocks)]
    assert sum(sizes) == entities and min(sizes) >= 10 and max(sizes) - min(sizes) <= 1
    running = 0
    typed = defaultdict(int)
    for b, size in enumerate(sizes):
        assert layout.entity_offset(b) == running
        for etype, count in composition(size).items():
            assert layout.type_offset(b, etype) == typed[etype]
            typed[etype] += count
        running += size
    assert all(layout.type_total(t) == n for t, n in typed.items())


# ---- the written dataset -----------------------------------------------------------------------------


def test_same_seed_gives_byte_identical_files(small, tmp_path):
    again = _generate(tmp_path)
    for name in FILES:
        assert (small / f"{name}.parquet").read_bytes() == (again / f"{name}.parquet").read_bytes(), name
    assert (small / "manifest.json").read_bytes() == (again / "manifest.json").read_bytes()


def test_deterministic_across_processes(tmp_path):
    """Nothing depends on Python's per-process string hashing or on dict/set order."""
    env = dict(os.environ, PYTHONHASHSEED="12345")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline.synthkb.generate",
            "--out-dir",
            str(tmp_path / "p" / "synthkb"),
            "--entities",
            "30",
            "--seed",
            "3",
            "--block-size",
            "15",
        ],
        cwd=REPO,
        env=env,
        check=True,
        capture_output=True,
    )
    here = _generate(tmp_path / "h", entities=30, block_size=15)
    for name in FILES:
        assert (here / f"{name}.parquet").read_bytes() == (
            tmp_path / "p" / "synthkb" / f"{name}.parquet"
        ).read_bytes(), name


def test_another_seed_gives_another_corpus(small, tmp_path):
    other = _generate(tmp_path, seed=4)
    assert not _read(small, "corpus").equals(_read(other, "corpus"))


def test_schemas(small):
    expected = {"corpus": CORPUS_SCHEMA, "negatives.train": NEGATIVES_SCHEMA}
    for split in SPLITS:
        expected |= {
            f"queries.{split}": QUERIES_SCHEMA,
            f"qrels.{split}": QRELS_SCHEMA,
            f"qrels_all.{split}": QRELS_SCHEMA,
        }
    for name, schema in expected.items():
        assert pq.read_schema(small / f"{name}.parquet").equals(schema, check_metadata=False), name
    assert pq.read_metadata(small / "negatives.train.parquet").num_rows == 0


def test_ids_unique_and_references_resolve(small):
    corpus = _read(small, "corpus")
    assert corpus["pid"].is_unique and (corpus["text"].str.len() > 0).all()
    pids = set(corpus["pid"])
    all_qids: list[str] = []
    for split in SPLITS:
        qids = set(_read(small, f"queries.{split}")["qid"])
        all_qids += list(qids)
        for table in ("qrels", "qrels_all"):
            qrels = _read(small, f"{table}.{split}")
            assert set(qrels["qid"]) == qids and set(qrels["pid"]) <= pids
            assert not qrels.duplicated(["qid", "pid"]).any() and (qrels["relevance"] == 1).all()
    assert len(all_qids) == len(set(all_qids))


def test_annotated_positive_is_one_of_the_relevant_passages(small):
    for split in SPLITS:
        qrels = _read(small, f"qrels.{split}")
        assert qrels["qid"].is_unique  # exactly one annotated positive per question
        relevant = set(map(tuple, _read(small, f"qrels_all.{split}")[["qid", "pid"]].values))
        assert all((q, p) in relevant for q, p in qrels[["qid", "pid"]].values)


def test_named_article_positive_is_the_first_stating_passage_of_the_named_entity(small):
    manifest = json.loads((small / "manifest.json").read_text())
    assert manifest["generator"]["question_knobs"]["positive"] == "named_article"
    named = fallback = 0
    for split in SPLITS:
        relevant = _read(small, f"qrels_all.{split}").groupby("qid")["pid"].apply(list)
        for qid, pid in _read(small, f"qrels.{split}")[["qid", "pid"]].values:
            subject = qid[1:].split("-")[0]  # qids are q<named entity gid>-<k>
            own = sorted(
                (p for p in relevant[qid] if p.split("-")[0] == subject), key=lambda p: int(p.split("-")[1])
            )
            if own:
                assert pid == own[0], qid
                named += 1
            else:
                fallback += 1
    counts = manifest["counts"]
    assert counts["questions.positive_in_named_article"] == named
    assert counts["questions.positive_fallback"] == fallback
    assert named > 0.95 * (named + fallback)


def test_positive_rule_changes_only_the_annotated_passage(small, tmp_path):
    source = tmp_path / "source"
    synthkb.generate(source, 65, 3, ENTITY_SPLIT, block_size=25, qknobs=QuestionKnobs(positive="source"))
    for name in ["corpus"] + [f"queries.{s}" for s in SPLITS] + [f"qrels_all.{s}" for s in SPLITS]:
        assert _read(source, name).equals(_read(small, name)), name
    changed = sum(
        (_read(source, f"qrels.{s}")["pid"] != _read(small, f"qrels.{s}")["pid"]).sum() for s in SPLITS
    )
    total = sum(len(_read(small, f"qrels.{s}")) for s in SPLITS)
    assert 0.3 * total < changed < total  # the source passage is often elsewhere, often not
    counts = json.loads((source / "manifest.json").read_text())["counts"]
    assert counts["questions.positive_fallback"] == 0
    named_fallbacks = json.loads((small / "manifest.json").read_text())["counts"][
        "questions.positive_fallback"
    ]
    # an unchanged positive is the named article's first stating passage (or a fallback)
    assert counts["questions.positive_in_named_article"] >= total - changed - named_fallbacks
    assert counts["questions.positive_in_named_article"] < 0.6 * total


def test_unknown_positive_rule_is_refused():
    block, _, passages_of, _ = next(_in_memory())
    with pytest.raises(ValueError, match="positive must be one of"):
        make_questions(block, passages_of, 3, QuestionKnobs(positive="best"))


def test_false_negatives_exist(small):
    qrels_all = pd.concat(_read(small, f"qrels_all.{s}") for s in SPLITS)
    sizes = qrels_all.groupby("qid").size()
    assert (sizes > 1).mean() > 0.5  # most questions have relevant passages beyond the annotated one


def test_no_entity_in_two_splits(small):
    subjects = {s: set(_read(small, f"queries.{s}")["qid"].str.extract(r"^q(\d+)-")[0]) for s in SPLITS}
    assert all(subjects.values())
    assert not subjects["train"] & subjects["dev"]
    assert not subjects["train"] & subjects["test"] and not subjects["dev"] & subjects["test"]


def test_every_relevant_passage_mentions_an_answer(small):
    corpus = _read(small, "corpus").set_index("pid")
    in_text = total = 0
    for split in SPLITS:
        answers = _read(small, f"queries.{split}").set_index("qid")["answers"]
        for qid, pid in _read(small, f"qrels_all.{split}")[["qid", "pid"]].values:
            found = string_has_answer(list(answers[qid]), corpus.at[pid, "text"])
            assert found or string_has_answer(list(answers[qid]), corpus.at[pid, "title"]), (qid, pid)
            in_text += found
            total += 1
    assert in_text / total > 0.98  # title-only: the article's own entity said as "she" (reverse)


def test_forward_answers_are_in_the_passage_text():
    for _block, passages, _, questions in _in_memory():
        text = {p.pid: p.text for p in passages}
        for q in questions:
            for pid in q.relevant:
                assert string_has_answer(q.answers, text[pid]) or q.reverse, (q.text, pid)


def test_no_unrecorded_birth_or_death_statement():
    """A sentence '<person> was born in / died in <city>' anywhere is in that fact's provenance."""
    for block, passages, passages_of, _ in _in_memory():
        ents = block.entities
        for p in passages:
            for person in (e for e in ents if e.type == "person"):
                for rel, verb in (("born_in", "was born in"), ("died_in", "died in")):
                    city = ents[person.attrs[rel]]
                    for place in city.answers():
                        if re.search(rf"\b{re.escape(person.name)} {verb} {re.escape(place)}\b", p.text):
                            assert p.pid in passages_of[block.fid[(person.idx, rel)]], p.text


def test_passages_respect_the_word_limit(small):
    words = _read(small, "corpus")["text"].str.split().str.len()
    assert words.max() <= Knobs().max_words and words.mean() > 0.6 * Knobs().max_words


def test_size_scales_linearly(tmp_path):
    a = synthkb.generate(tmp_path / "a", 60, 0, ENTITY_SPLIT, block_size=30)["counts"]
    b = synthkb.generate(tmp_path / "b", 120, 0, ENTITY_SPLIT, block_size=30)["counts"]
    for key in ("passages", "facts", "queries.train"):
        assert 1.7 < b[key] / a[key] < 2.3, key


def test_default_config_size(tmp_path):
    spec = load_config()["datasets"]["synthkb"]
    counts = synthkb.generate(
        tmp_path / "synthkb",
        spec["entities"],
        spec.get("seed", 0),
        synthkb.parse_split(json.dumps(spec["split"])),
    )["counts"]
    questions = sum(counts[f"queries.{s}"] for s in SPLITS)
    assert 2000 <= counts["passages"] <= 2600 and 2000 <= questions <= 3600, counts


def test_manifest_matches_files(small):
    manifest = json.loads((small / "manifest.json").read_text())
    assert manifest["format"] == "synthkb" and manifest["dataset"] == "synthkb"
    for name in FILES:
        digest = hashlib.sha256((small / f"{name}.parquet").read_bytes()).hexdigest()
        assert manifest["files"][f"{name}.parquet"]["sha256"] == digest
        key = "passages" if name == "corpus" else name
        assert manifest["counts"][key] == pq.read_metadata(small / f"{name}.parquet").num_rows
    assert sum(manifest["passages_per_fact"].values()) == manifest["counts"]["facts"]


def test_failure_leaves_no_output_and_no_stale_manifest(tmp_path, monkeypatch):
    out = tmp_path / "synthkb"
    out.mkdir()
    (out / "manifest.json").write_text("{}")

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(synthkb, "build_block", broken)
    with pytest.raises(RuntimeError):
        synthkb.generate(out, 20, 0, ENTITY_SPLIT)
    assert list(out.iterdir()) == []


def test_split_none_and_by_query(tmp_path):
    none = _generate(tmp_path / "none", entities=20, spec=None)
    assert pq.read_metadata(none / "queries.train.parquet").num_rows == 0
    assert pq.read_metadata(none / "queries.dev.parquet").num_rows == 0
    assert pq.read_metadata(none / "queries.test.parquet").num_rows > 0
    by_query = _generate(tmp_path / "q", entities=20, spec=SplitSpec("query", 0.1, 0.2, 0))
    sizes = {s: pq.read_metadata(by_query / f"queries.{s}.parquet").num_rows for s in SPLITS}
    assert all(sizes.values()) and sizes["train"] > sizes["test"] > sizes["dev"]


@pytest.mark.parametrize(
    "argv",
    [
        ["--entities", "65", "--seed", "0", "--split-spec", '{"by": "article", "test": 0.2}'],
        ["--entities", "65", "--seed", "0", "--split-spec", '{"by": "entity", "test": 1.5}'],
        ["--entities", "5", "--seed", "0"],
        ["--entities", "65", "--seed", "0", "--positive", "random"],
    ],
)
def test_cli_rejects_bad_arguments_with_exit_2(tmp_path, argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        run_main(synthkb.main, ["--out-dir", str(tmp_path / "x"), *argv])
    assert exit_info.value.code == 2
    assert "error:" in capsys.readouterr().err and not (tmp_path / "x" / "corpus.parquet").exists()


def test_cli_writes_the_dataset(tmp_path):
    log = tmp_path / "gen.log"
    assert (
        synthkb.main(["--out-dir", str(tmp_path / "d"), "--entities", "12", "--seed", "1", "--log", str(log)])
        == 0
    )
    assert (tmp_path / "d" / "manifest.json").exists() and "12 entities" in log.read_text()


def test_stats_script_measures_false_negatives(small):
    spec = importlib.util.spec_from_file_location("synthkb_stats", REPO / "bench" / "synthkb_stats.py")
    stats = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(stats)
    corpus = _read(small, "corpus")
    fn = stats.fn_fraction(corpus, small, depth=10)
    assert fn["negatives"] > 0 and 0 < fn["fn_fraction"] < 1
    rec = stats.recall(corpus, small, "test", [1, 5])
    assert 0 < rec["R@1_qrels_all"] <= rec["R@5_qrels_all"] <= 1

"""Command lines for the stages' ``main(argv)`` in tests, written as the tables and values they hand over.

``flags(paths, "queries", "corpus", out=out, steps=3)`` is
``["--queries", str(paths["queries"]), "--corpus", str(paths["corpus"]), "--out", str(out), "--steps", "3"]``:
a test names which of its files a stage reads instead of spelling each flag and its path again.
"""

from __future__ import annotations

from collections.abc import Mapping


def flag(name: str) -> str:
    """The command-line flag of a table or setting name: ``qrels_all`` -> ``--qrels-all``."""
    return "--" + name.replace("_", "-")


def flags(paths: Mapping[str, object] | None = None, /, *names: str, **values: object) -> list[str]:
    """A flag and ``str(paths[name])`` per name, then a flag and ``str(value)`` per keyword, in order."""
    pairs = [(name, (paths or {})[name]) for name in names] + list(values.items())
    return [arg for name, value in pairs for arg in (flag(name), str(value))]


def encode_corpus(model: object, corpus: object, out_dir: object, shards: int, *extra: str) -> None:
    """The encode rules' sequence: ``pipeline.retrieval.encode corpus`` once per shard (with ``extra``),
    then ``gather``; each must exit 0."""
    from pipeline.retrieval import encode

    where = dict(model=model, corpus=corpus, out_dir=out_dir)
    for shard in range(shards):
        assert encode.main(["corpus", *flags(**where, shard=shard, shards=shards), *extra]) == 0
    assert encode.main(["gather", *flags(**where, shards=shards)]) == 0

"""Training with labelled columns: relabelled positives (dpr_relabel_<detector>) and a guide's masking
(dpr_gist_<guide>), on tiny data: the batch layout, and train_dense runs that use them."""

import json

import numpy as np
import pandas as pd
import pytest

from pipeline.core.schemas import QRELS_SCHEMA
from pipeline.core.storage import write_table
from pipeline.training.data import TrainData, TrainInputs
from pipeline.training.train_dense import main


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, make_train_files, tiny_model_dir):
    root = tmp_path_factory.mktemp("labelled")
    paths = make_train_files(root / "data")
    # Relabelled qrels: the gold rows first, then query 0 gains 3 positives, query 1 one, others none.
    qrels = pd.read_parquet(paths["qrels"])
    extra = pd.DataFrame(
        {"qid": ["q000"] * 3 + ["q001"], "pid": ["p030", "p031", "p032", "p033"], "relevance": 1}
    )
    relabelled = root / "data" / "qrels.relabel.parquet"
    write_table(relabelled, pd.concat([qrels, extra], ignore_index=True), QRELS_SCHEMA)
    return root, {**paths, "relabelled": relabelled}, tiny_model_dir(root)


def _data(paths, qrels="relabelled"):
    return TrainData(
        TrainInputs(paths["queries"], paths[qrels], paths["negatives"], paths["corpus"]), depth=5, seed=0
    )


def test_batch_with_extra_positive_slots(inputs):
    _, paths, _ = inputs
    data = _data(paths)
    store = {pid: i for i, pid in enumerate(data.passages.pids)}
    batch = data.batch(np.array([0, 1, 2]), k=1, epoch=0, extra_positives=2)
    assert batch.group_size == 4
    ids = batch.passage_ids.reshape(3, 4)
    # Query 0: positive p000, one negative, two of its three relabelled positives (a seeded draw).
    assert ids[0, 0] == store["p000"]
    assert set(ids[0, 2:]) <= {store["p030"], store["p031"], store["p032"]} and len(set(ids[0, 2:])) == 2
    # Query 1: its one relabelled positive and an empty slot; query 2: two empty slots.
    assert ids[1, 2] == store["p033"] and ids[1, 3] == -1
    assert list(ids[2, 2:]) == [-1, -1]
    assert batch.passage_texts[7] == "" and batch.passage_texts[10] == ""
    assert sorted(batch.positive_sets[0]) == sorted(store[p] for p in ("p000", "p030", "p031", "p032"))
    # The relabelled passages are never hard negatives of their query.
    assert not set(ids[:, 1]) & {store[p] for p in ("p030", "p031", "p032", "p033")} - {ids[2, 1]}
    # The draw is a function of (seed, qid, epoch): the same batch again is the same.
    again = data.batch(np.array([0, 1, 2]), k=1, epoch=0, extra_positives=2)
    assert np.array_equal(again.passage_ids, batch.passage_ids)
    # Without the slots the layout is the plain one.
    plain = data.batch(np.array([0, 1, 2]), k=1, epoch=0)
    assert plain.group_size == 2 and plain.passage_ids is None


def _train(paths, tiny, out, *extra):
    args = [
        "--init", str(tiny), "--queries", str(paths["queries"]), "--qrels", str(paths["relabelled"]),
        "--negatives", str(paths["negatives"]), "--corpus", str(paths["corpus"]), "--out", str(out),
        "--batch-size", "4", "--max-steps", "2", "--threads", "1", *extra,
    ]  # fmt: skip
    assert main(args) == 0
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    return log, json.loads((out / "train_info.json").read_text())


def test_train_dense_relabel(inputs, tmp_path):
    _, paths, tiny = inputs
    log, info = _train(paths, tiny, tmp_path / "relabel", "--relabel")
    assert info["config"]["extra_positives"] == 1
    assert info["summary"]["loss"] == {"loss": "multi_positive_nce", "relabel": True, "guide": None}
    assert len(log) == 2 and all("excluded" in r and np.isfinite(r["loss"]) for r in log)


def test_train_dense_guide_is_deterministic(inputs, tmp_path):
    root, paths, tiny = inputs
    guide = tmp_path / "zeroshot"
    assert main(["--init-only", "--base", str(tiny), "--out", str(guide)]) == 0
    first, info = _train(paths, tiny, tmp_path / "gist1", "--guide", str(guide))
    second, _ = _train(paths, tiny, tmp_path / "gist2", "--guide", str(guide))
    assert info["guide"] == str(guide) and info["summary"]["loss"]["guide"] == "zeroshot"
    strip = lambda log: [{k: v for k, v in r.items() if k != "examples_per_s"} for r in log]  # noqa: E731
    assert strip(first) == strip(second)


def test_a_guide_with_beta_is_refused(inputs, tmp_path):
    from pipeline.core.config import ConfigError

    _, paths, tiny = inputs
    with pytest.raises(ConfigError, match="multi-positive NCE"):
        _train(paths, tiny, tmp_path / "bad", "--relabel", "--beta", "0.5")

"""Settings beside their stages: train_dense's flags merge over its settings document through
pipeline.core.jobs' one merge, which knows a document's parts (``train``, ``objective``,
``retriever``: mappings of another contract's keys, whose flags carry no prefix), and refuses a nested
section that a document gives as anything but a mapping instead of letting a flag replace it."""

from __future__ import annotations

import argparse
import json

import pytest

from pipeline.core.jobs import add_settings_flags, job_settings, merge_flags
from pipeline.core.settings.base import ConfigError
from pipeline.core.settings.job_documents import Ar2TrainJob
from pipeline.training import train_dense
from pipeline.training.settings import TrainJob

DOCUMENT = {
    "section": "ccr",
    "seed": 3,
    "train": {"lr": 1e-6, "max_steps": 7},
    "objective": {"beta": 6, "scale": "released_code"},
    "retriever": {"pooling": "cls"},
}


def train_args(*flags: str) -> argparse.Namespace:
    return train_dense.build_parser().parse_args(
        ["--out", "x", "--settings-json", json.dumps(DOCUMENT), *flags]
    )


def test_a_flag_over_a_document_lands_in_its_part():
    # --beta is the objective's, --max-steps the training's, --temperature the retriever's: each goes
    # into its part, over the document's keys there, which stay; none becomes a top-level key.
    args = train_args("--beta", "0.5", "--max-steps", "9", "--temperature", "0.1")
    merged = merge_flags(TrainJob, DOCUMENT, args, train_dense.DOCUMENT_PARTS)
    assert merged == {
        "section": "ccr",
        "seed": 3,
        "train": {"lr": 1e-6, "max_steps": 9},
        "objective": {"beta": 0.5, "scale": "released_code"},
        "retriever": {"pooling": "cls", "temperature": 0.1},
    }
    assert DOCUMENT["objective"] == {"beta": 6, "scale": "released_code"}  # the document is left as given
    job = train_dense.job_settings(args)
    assert job.model_dump() == {**merged, "relabel": None, "snapshots": 0}
    train, objective, retriever = job.resolved()
    assert objective == {"beta": 0.5, "scale": "released_code"}
    assert (train["lr"], train["max_steps"]) == (1e-6, 9)
    assert retriever == {"pooling": "cls", "temperature": 0.1}


def test_train_dense_switches_still_reach_their_parts():
    job = train_dense.job_settings(train_args("--separate-towers", "--relabel", "--seed", "5"))
    assert job.retriever == {"pooling": "cls", "shared_towers": False}
    assert (job.relabel, job.seed, job.section) == ({}, 5, "ccr")


def test_a_part_that_is_no_mapping_is_refused_naming_it():
    args = train_dense.build_parser().parse_args(
        ["--out", "x", "--settings-json", json.dumps({"objective": [6]}), "--beta", "1"]
    )
    with pytest.raises(
        ConfigError, match=r"^config key 'settings.objective': a mapping is needed, got list$"
    ):
        train_dense.job_settings(args)


def test_a_nested_section_that_is_no_mapping_is_not_replaced_by_its_flag():
    # Before, --simans-a replaced a document's simans: [0.3] with {a: 0.3} and the run went on.
    ap = argparse.ArgumentParser()
    add_settings_flags(ap, Ar2TrainJob, "ar2")
    document = {"sampling": "simans", "simans": [0.3]}
    args = ap.parse_args(["--settings-json", json.dumps(document), "--simans-a", "0.3"])
    with pytest.raises(ConfigError, match=r"^config key 'settings.simans': a mapping is needed, got list$"):
        job_settings(Ar2TrainJob, args)
    good = ap.parse_args(
        ["--settings-json", json.dumps({**document, "simans": {"b": -1.0}}), "--simans-a", "0.3"]
    )
    assert job_settings(Ar2TrainJob, good).simans.model_dump() == {"a": 0.3, "b": -1.0, "form": "square"}

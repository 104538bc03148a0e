"""AR2 step schedule, query batches and negative sampling: order, coverage and determinism."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pipeline.ar2.sampling import (
    RANKER,
    RETRIEVER,
    phase_at,
    query_batch,
    round_phases,
    sample_negatives,
    sampling_weights,
    step_negatives,
)
from pipeline.ar2.settings import Ar2Settings
from pipeline.ar2.train import round_steps, total_steps


def test_round_is_ranker_steps_then_retriever_steps():
    phases = round_phases(ranker_steps=3, retriever_steps=5)
    assert phases == [RANKER] * 3 + [RETRIEVER] * 5
    assert [phase_at(s, 3, 5) for s in range(8)] == phases
    with pytest.raises(IndexError):
        phase_at(8, 3, 5)


def test_warmup_ranker_steps_come_first_and_only_in_round_one():
    settings = Ar2Settings(rounds=3, ranker_steps=2, retriever_steps=4, ranker_warmup_steps=3)
    assert round_steps(settings, 1) == (3, 2, 4)
    assert round_steps(settings, 2) == (0, 2, 4)
    warm, rank, ret = round_steps(settings, 1)
    assert round_phases(rank, ret, warm) == [RANKER] * 5 + [RETRIEVER] * 4
    # Scheduler horizons cover every round (3*2 ranker, 3*4 retriever steps); the warm-up has its
    # own optimizer and schedule (AR2 warms its ranker in a separate run).
    assert total_steps(settings) == (6, 12)


def test_alternation_over_rounds_matches_the_ar2_blocks():
    # AR2: each block of 2000 steps = ~500 ranker then ~1500 retriever steps, then a refresh.
    settings = Ar2Settings(rounds=2, ranker_steps=500, retriever_steps=1500, ranker_warmup_steps=0)
    blocks = []
    for r in (1, 2):
        warm, rank, ret = round_steps(settings, r)
        phases = round_phases(rank, ret, warm)
        blocks.append((phases.count(RANKER), phases.count(RETRIEVER), phases.index(RETRIEVER)))
    assert blocks == [(500, 1500, 500), (500, 1500, 500)]


def test_query_batches_cover_every_query_once_per_pass():
    qids = [f"q{i:02d}" for i in range(10)]
    batches = [query_batch(qids, 5, seed=0, round_index=1, step=s) for s in range(4)]
    assert sorted(batches[0] + batches[1]) == qids  # pass 0
    assert sorted(batches[2] + batches[3]) == qids  # pass 1
    assert batches[0] + batches[1] != batches[2] + batches[3]  # a fresh permutation per pass


def test_query_batch_crossing_a_pass_boundary():
    qids = ["a", "b", "c"]
    stream = [q for s in range(4) for q in query_batch(qids, 2, seed=3, round_index=1, step=s)]
    assert sorted(stream[:3]) == qids and sorted(stream[3:6]) == qids
    assert len(query_batch(["x"], 3, 0, 1, 0)) == 3  # fewer queries than the batch: repeats


def test_query_batch_is_a_pure_function_of_seed_round_step():
    qids = [f"q{i}" for i in range(7)]
    a = query_batch(qids, 3, seed=1, round_index=2, step=5)
    assert a == query_batch(qids, 3, seed=1, round_index=2, step=5)
    assert a != query_batch(qids, 3, seed=2, round_index=2, step=5)
    assert a != query_batch(qids, 3, seed=1, round_index=3, step=5)


def test_uniform_and_simans_weights_by_hand():
    scores = np.array([1.0, 2.0, 3.0])
    assert sampling_weights(scores, 2.0, "uniform").tolist() == pytest.approx([1 / 3] * 3)
    # a=0.5, b=0, s+ = 2: w ∝ exp(-0.5 (s - 2)^2) = (e^-0.5, 1, e^-0.5)
    w = sampling_weights(scores, 2.0, "simans", a=0.5, b=0.0)
    z = 1 + 2 * math.exp(-0.5)
    assert w.tolist() == pytest.approx([math.exp(-0.5) / z, 1 / z, math.exp(-0.5) / z])
    # b shifts the peak: b=1 favours s = s+ + 1 = 3.
    w = sampling_weights(scores, 2.0, "simans", a=1.0, b=1.0)
    assert int(np.argmax(w)) == 2
    # Far-off scores with a huge a do not underflow to all zeros.
    w = sampling_weights(np.array([100.0, 101.0]), 0.0, "simans", a=50.0)
    assert np.isfinite(w).all() and w.sum() == pytest.approx(1.0)
    # form abs (SimANS on MS MARCO: exp(-3 |s - s+|)): (e^-3, 1, e^-3) normalised.
    w = sampling_weights(scores, 2.0, "simans", a=3.0, b=0.0, form="abs")
    z = 1 + 2 * math.exp(-3.0)
    assert w.tolist() == pytest.approx([math.exp(-3.0) / z, 1 / z, math.exp(-3.0) / z])
    with pytest.raises(ValueError):
        sampling_weights(scores, 0.0, "topk")
    with pytest.raises(ValueError):
        sampling_weights(scores, 0.0, "simans", form="cube")


def test_sample_negatives_without_replacement_and_top_up():
    rng = np.random.default_rng(0)
    pool = np.array(["a", "b", "c", "d"], dtype=object)
    got = sample_negatives(pool, np.full(4, 0.25), 3, rng)
    assert len(set(got)) == 3
    got = sample_negatives(pool[:2], np.full(2, 0.5), 5, rng)
    assert set(got[:2]) == {"a", "b"} and len(got) == 5  # whole pool first, then repeats
    with pytest.raises(ValueError):
        sample_negatives(pool[:0], np.zeros(0), 2, rng)


def test_step_negatives_deterministic_per_qid_round_step_seed():
    pool = np.array([f"p{i}" for i in range(20)], dtype=object)
    scores = np.linspace(0, 1, 20)
    args = dict(positive_score=1.0, k=5, method="simans", a=0.5, b=0.0)
    a = step_negatives("q1", pool, scores, seed=0, round_index=1, step=3, **args)
    assert a.tolist() == step_negatives("q1", pool, scores, seed=0, round_index=1, step=3, **args).tolist()
    others = [
        step_negatives("q1", pool, scores, seed=0, round_index=1, step=4, **args),
        step_negatives("q2", pool, scores, seed=0, round_index=1, step=3, **args),
        step_negatives("q1", pool, scores, seed=0, round_index=2, step=3, **args),
        step_negatives("q1", pool, scores, seed=1, round_index=1, step=3, **args),
    ]
    assert all(o.tolist() != a.tolist() for o in others)


def test_simans_prefers_negatives_near_the_positive_score():
    pool = np.arange(50)
    scores = np.linspace(-10, 10, 50)
    counts = np.zeros(50)
    for step in range(300):
        counts[step_negatives("q", pool, scores, 0.0, 1, "simans", 0.5, 0.0, 0, 1, step)] += 1
    near = np.abs(scores) < 2
    assert counts[near].sum() > 0.9 * counts.sum()

"""The cross-encoder ranker: head on [CLS], save/load round trip, scoring order, listwise loss."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from pipeline.retrieval.model import make_tiny_encoder
from pipeline.retrieval.ranker import Ranker, RankerSettings, listwise_loss


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory):
    return str(make_tiny_encoder(tmp_path_factory.mktemp("tiny"), seed=0))


QUERIES = ["who wrote hamlet", "capital of france", "who wrote hamlet"]
TITLES = ["Hamlet", "", "Paris"]
TEXTS = [
    "Hamlet is a tragedy written by William Shakespeare around 1600.",
    "Paris is the capital and most populous city of France.",
    "Paris is a city.",
]


def test_head_init_is_seeded_and_independent_of_global_rng(tiny_base):
    torch.manual_seed(123)
    a = Ranker.from_pretrained(tiny_base, seed=7)
    torch.manual_seed(999)
    b = Ranker.from_pretrained(tiny_base, seed=7)
    c = Ranker.from_pretrained(tiny_base, seed=8)
    assert torch.equal(a.head.weight, b.head.weight)
    assert not torch.equal(a.head.weight, c.head.weight)
    assert torch.all(a.head.bias == 0)


def test_forward_is_linear_head_on_cls(tiny_base):
    ranker = Ranker.from_pretrained(tiny_base, seed=0).eval()
    batch = ranker.tokenize(QUERIES, TITLES, TEXTS)
    with torch.no_grad():
        logits = ranker(batch)
        hidden = ranker.encoder(**batch).last_hidden_state[:, 0]
        expected = hidden @ ranker.head.weight[0] + ranker.head.bias[0]
    assert logits.shape == (3,)
    torch.testing.assert_close(logits, expected)


def test_tokenize_pairs_query_with_title_and_text(tiny_base):
    ranker = Ranker.from_pretrained(tiny_base, RankerSettings(max_len=64))
    batch = ranker.tokenize(["q one"], ["T"], ["body text"])
    decoded = ranker.tokenizer.decode(batch["input_ids"][0])
    assert decoded.split() == ["[CLS]", "q", "one", "[SEP]", "t", "[SEP]", "body", "text", "[SEP]"]
    # The passage is the second segment (token type 1), so the model can tell the two apart.
    assert batch["token_type_ids"][0].tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 1]


def test_max_len_truncates(tiny_base):
    ranker = Ranker.from_pretrained(tiny_base, RankerSettings(max_len=12))
    batch = ranker.tokenize(["a question"], ["title"], ["word " * 100])
    assert batch["input_ids"].shape[1] == 12


def test_score_matches_forward_in_input_order(tiny_base):
    ranker = Ranker.from_pretrained(tiny_base, seed=0)
    scores = ranker.score(QUERIES, TITLES, TEXTS, batch_size=2)  # sorted batches, input order back
    ranker.eval()
    with torch.no_grad():
        single = [ranker(ranker.tokenize([q], [t], [x])).item() for q, t, x in zip(QUERIES, TITLES, TEXTS)]
    assert scores.dtype == np.float32
    np.testing.assert_allclose(scores, single, rtol=1e-4, atol=1e-5)


def test_save_load_round_trip(tiny_base, tmp_path):
    ranker = Ranker.from_pretrained(tiny_base, RankerSettings(base="tiny", max_len=40), seed=3)
    with torch.no_grad():
        ranker.head.bias.fill_(0.25)
    ranker.save(tmp_path / "r")
    assert (tmp_path / "r" / "ranker.json").exists()
    loaded = Ranker.load(tmp_path / "r")
    assert loaded.settings == ranker.settings
    np.testing.assert_array_equal(loaded.score(QUERIES, TITLES, TEXTS), ranker.score(QUERIES, TITLES, TEXTS))


def test_load_rejects_a_non_ranker_folder(tiny_base):
    with pytest.raises(FileNotFoundError, match="ranker.json"):
        Ranker.load(tiny_base)


def test_listwise_loss_hand_computed():
    # Row 1: logits (2, 0, 0): -log(e^2 / (e^2 + 2)) = log(1 + 2 e^-2) = 0.2395...
    # Row 2: logits (0, 0, 0): log 3 = 1.0986...
    logits = torch.tensor([[2.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    expected = (math.log(1 + 2 * math.exp(-2)) + math.log(3)) / 2
    assert listwise_loss(logits).item() == pytest.approx(expected, abs=1e-6)
    # Positive in another column: row (0, 2, 0) with positive=1 is row 1 again.
    assert listwise_loss(torch.tensor([[0.0, 2.0, 0.0]]), positive=1).item() == pytest.approx(
        math.log(1 + 2 * math.exp(-2)), abs=1e-6
    )
    with pytest.raises(ValueError):
        listwise_loss(torch.zeros(3))

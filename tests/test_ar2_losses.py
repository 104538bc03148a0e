"""AR2 losses against values computed by hand (docs/ar2.md, reference.md section 2)."""

from __future__ import annotations

import math

import pytest
import torch

from pipeline.ar2.losses import (
    adversarial_loss,
    adversarial_rewards,
    candidate_logits,
    distill_loss,
    positive_top1,
    retriever_loss,
)

LN2 = math.log(2.0)
# One query, two candidates (positive first). G logits (ln 2, 0) -> p_G = (2/3, 1/3).
# D logits (0, 0) -> p_D = (1/2, 1/2); rewards r = log sigma(0) = -ln 2 for both candidates.
G = [[LN2, 0.0]]
D_TIE = [[0.0, 0.0]]


def _g():
    return torch.tensor(G, requires_grad=True)


def test_distill_value_and_gradient_by_hand():
    g = _g()
    loss = distill_loss(g, torch.tensor(D_TIE))
    # -(1/2 ln 2/3 + 1/2 ln 1/3) = 1/2 ln 4.5
    assert loss.item() == pytest.approx(0.5 * math.log(4.5), abs=1e-6)
    loss.backward()
    # d/dg CE = p_G - p_D = (2/3 - 1/2, 1/3 - 1/2)
    assert g.grad.tolist()[0] == pytest.approx([1 / 6, -1 / 6], abs=1e-6)


def test_distill_temperature_softens_the_ranker():
    # D logits (ln 3, 0) at T=1: p_D = (3/4, 1/4); at T=2: (sqrt3, 1)/(sqrt3+1).
    d = torch.tensor([[math.log(3.0), 0.0]])
    g = torch.tensor([[0.0, 0.0]])  # p_G uniform: CE = ln 2 whatever p_D
    assert distill_loss(g, d, 1.0).item() == pytest.approx(LN2, abs=1e-6)
    g = torch.tensor(G)
    p1 = math.sqrt(3) / (math.sqrt(3) + 1)
    expected = -(p1 * math.log(2 / 3) + (1 - p1) * math.log(1 / 3))
    assert distill_loss(g, d, 2.0).item() == pytest.approx(expected, abs=1e-6)


def test_rewards_are_log_sigmoid_of_positive_minus_candidate():
    d = torch.tensor([[2.0, 2.0, 0.0, 3.0]])
    r = adversarial_rewards(d)
    expected = [math.log(0.5), math.log(0.5), -math.log(1 + math.exp(-2.0)), -math.log(1 + math.exp(1.0))]
    assert r.tolist()[0] == pytest.approx(expected, abs=1e-6)
    assert (r <= 0).all()


def test_adversarial_value_and_gradient_by_hand():
    g = _g()
    loss = adversarial_loss(g, torch.tensor(D_TIE))
    # sum_d r(d) log p_G(d) = (-ln2)(ln 2/3) + (-ln2)(ln 1/3) = ln2 * ln 4.5 (>= 0)
    assert loss.item() == pytest.approx(LN2 * math.log(4.5), abs=1e-6)
    loss.backward()
    # d/dg_j sum_d r_d log p_d = r_j - p_j * sum_d r_d = -ln2 + p_j * 2 ln2 -> (ln2/3, -ln2/3)
    assert g.grad.tolist()[0] == pytest.approx([LN2 / 3, -LN2 / 3], abs=1e-6)


def test_adversarial_pushes_g_towards_what_the_ranker_believes():
    # The ranker rates negative 2 above the positive: minimising adv must raise G's logit for it
    # more than for the negative the ranker rejects (gradient descent moves g against the gradient).
    g = torch.zeros(1, 3, requires_grad=True)
    adversarial_loss(g, torch.tensor([[1.0, 4.0, -4.0]])).backward()
    step = -g.grad[0]
    assert step[1] > step[0] > step[2]


def test_retriever_loss_mixes_with_lambda():
    g, d = torch.tensor(G), torch.tensor(D_TIE)
    distill = 0.5 * math.log(4.5)
    adv = LN2 * math.log(4.5)
    loss0, parts0 = retriever_loss(g, d, 0.0)
    assert loss0.item() == pytest.approx(distill, abs=1e-6)
    assert set(parts0) == {"distill"}  # lambda 0: the adversarial term is not computed
    loss_half, parts = retriever_loss(g, d, 0.5)
    assert loss_half.item() == pytest.approx(0.5 * adv + 0.5 * distill, abs=1e-6)
    assert parts["adv"] == pytest.approx(adv, abs=1e-6)
    assert retriever_loss(g, d, 1.0)[0].item() == pytest.approx(adv, abs=1e-6)
    with pytest.raises(ValueError):
        retriever_loss(g, d, 1.5)


def test_losses_average_over_queries():
    g = torch.tensor([G[0], [0.0, 0.0]])
    d = torch.tensor([D_TIE[0], [0.0, 0.0]])
    expected = (0.5 * math.log(4.5) + LN2) / 2
    assert distill_loss(g, d).item() == pytest.approx(expected, abs=1e-6)


def test_no_gradient_flows_into_the_ranker():
    g = _g()
    d = torch.tensor(D_TIE, requires_grad=True)
    retriever_loss(g, d, 0.5)[0].backward()
    assert d.grad is None


def test_candidate_logits_dot_and_cosine():
    q = torch.tensor([[1.0, 2.0], [0.0, 1.0]])
    p = torch.tensor([[[1.0, 1.0], [2.0, 0.0]], [[0.0, 3.0], [1.0, 0.0]]])
    dot = candidate_logits(q, p, "dot")
    assert dot.tolist() == [[3.0, 2.0], [3.0, 0.0]]
    assert candidate_logits(q, p, "cosine", temperature=0.5).tolist() == [[6.0, 4.0], [6.0, 0.0]]
    with pytest.raises(ValueError):
        candidate_logits(q, p[:1], "dot")
    with pytest.raises(ValueError):
        candidate_logits(q, p, "l2")


def test_positive_top1_splits_ties_and_gives_chance_to_a_uniform_scorer():
    logits = torch.tensor(
        [
            [3.0, 1.0, 2.0],  # positive first: 1
            [1.0, 1.0, 0.0],  # tied with one negative: 1/2
            [0.0, 2.0, -1.0],  # a negative above: 0
            [5.0, 4.9, 4.8],
        ]
    )  # 1
    assert positive_top1(logits) == pytest.approx(2.5 / 4)
    assert positive_top1(logits, positive=1) == pytest.approx(1.5 / 4)  # rows 1 (1/2) and 2 (1)
    assert positive_top1(torch.zeros(5, 4)) == pytest.approx(0.25)


def test_top1_by_phase_reads_the_whole_round_log(tmp_path):
    import json

    from pipeline.ar2.train import top1_by_phase

    rows = [
        {"round": 1, "phase": "ranker", "ranker_top1": 0.5},
        {"round": 1, "phase": "retriever", "ranker_top1": 0.25, "retriever_top1": 1.0},
        {"round": 1, "phase": "retriever", "ranker_top1": 0.75, "retriever_top1": 0.5},
        {"round": 2, "phase": "retriever", "ranker_top1": 0.0, "retriever_top1": 0.0},
    ]
    (tmp_path / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert top1_by_phase(tmp_path / "log.jsonl", 1) == {
        "ranker": {"ranker_top1": 0.5},
        "retriever": {"ranker_top1": 0.5, "retriever_top1": 0.75},
    }

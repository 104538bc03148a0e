"""NCE / CCR losses against hand-computed values (reference.md §1)."""

import math

import pytest
import torch
import torch.nn.functional as F

from pipeline.training.losses import (
    candidate_scores,
    contrastive_loss,
    positive_columns,
    rcl_loss,
    similarity_scores,
)

LN2, LN3, LN5 = math.log(2), math.log(3), math.log(5)

# 2 queries x 3 passages. Row 0: exp = (2, 1, 1) -> softmax (1/2, 1/4, 1/4), positive column 0.
# Row 1: exp = (1, 3, 1) -> softmax (1/5, 3/5, 1/5), positive column 1.
SCORES = [[LN2, 0.0, 0.0], [0.0, LN3, 0.0]]
POS = [0, 1]
# l(p) per row: row 0 (ln2, ln4, ln4); row 1 (ln5, ln5 - ln3, ln5).
NCE = (LN2 + (LN5 - LN3)) / 2
CCR = ((LN2 + 4 * LN2) / 3 + (3 * LN5 - LN3) / 3) / 2


def _scores():
    return torch.tensor(SCORES, dtype=torch.float64, requires_grad=True)


def test_nce_value_and_gradient_by_hand():
    s = _scores()
    loss, parts = rcl_loss(s, torch.tensor(POS), beta=0.0)
    assert loss.item() == pytest.approx(NCE, abs=1e-12)
    assert parts["nce"].item() == pytest.approx(NCE, abs=1e-12)
    assert parts["ccr_term"].item() == pytest.approx(CCR, abs=1e-12)
    loss.backward()
    # d l(p+)/ds = softmax - onehot, averaged over the 2 queries.
    expected = torch.tensor([[-1 / 4, 1 / 8, 1 / 8], [1 / 10, -1 / 5, 1 / 10]], dtype=torch.float64)
    assert torch.allclose(s.grad, expected, atol=1e-12)


def test_ccr_value_and_gradient_by_hand():
    s = _scores()
    loss, _ = rcl_loss(s, torch.tensor(POS), beta=0.5)
    assert loss.item() == pytest.approx(NCE - 0.5 * CCR, abs=1e-12)
    loss.backward()
    # d/ds [l(p+) - b mean_p l(p)] = (softmax - onehot) - b (softmax - 1/n); then / 2 queries.
    # row 0: (-1/2, 1/4, 1/4) - 0.5 (1/6, -1/12, -1/12) = (-7/12, 7/24, 7/24)
    # row 1: (1/5, -2/5, 1/5) - 0.5 (-2/15, 4/15, -2/15) = (4/15, -8/15, 4/15)
    expected = torch.tensor([[-7 / 24, 7 / 48, 7 / 48], [2 / 15, -4 / 15, 2 / 15]], dtype=torch.float64)
    assert torch.allclose(s.grad, expected, atol=1e-12)


def test_beta_zero_equals_nce_cross_entropy():
    torch.manual_seed(0)
    s = torch.randn(4, 12, dtype=torch.float64)
    pos = positive_columns(4, 3)
    loss, _ = contrastive_loss(s, pos, 3, beta=0.0)
    assert loss.item() == pytest.approx(F.cross_entropy(s, pos).item(), abs=1e-12)


def test_paper_scale_matches_appendix_listing():
    # s_ = log_softmax(s); loss = nll(s_, pos) + beta * s_.mean(dim=1)   (averaged over queries)
    torch.manual_seed(1)
    s = torch.randn(3, 8, dtype=torch.float64)
    pos = torch.tensor([0, 3, 6])
    s_ = F.log_softmax(s, dim=1)
    listing = F.nll_loss(s_, pos) + 0.3 * s_.mean(dim=1).mean()
    loss, _ = rcl_loss(s, pos, beta=0.3)
    assert loss.item() == pytest.approx(listing.item(), abs=1e-12)


def test_released_code_scale_is_the_authors_formula():
    # The authors' code: sum the Q x |P| matrix (nll at the positive + f_beta * log-probs) / (Q |P|)
    # = NCE / |P| - f_beta * CCR, no beta of its own. Scale released_code at beta = |P| * f_beta is
    # exactly that: here |P| = 3, f_beta = 1.0 (the branch of the paper's tables) -> beta 3, and
    # f_beta 0.1 (the default branch) -> beta 0.3.
    s = torch.tensor(SCORES, dtype=torch.float64)
    s_ = F.log_softmax(s, dim=1)
    for f_beta in (1.0, 0.1):
        matrix = f_beta * s_.clone()
        matrix[0, 0] -= s_[0, 0]
        matrix[1, 1] -= s_[1, 1]
        authors = (matrix.sum() / 6).item()
        loss, parts = rcl_loss(_scores(), torch.tensor(POS), beta=3 * f_beta, scale="released_code")
        assert loss.item() == pytest.approx(authors, abs=1e-12)
        assert loss.item() == pytest.approx(NCE / 3 - f_beta * CCR, abs=1e-12)
        assert parts["nce"].item() == pytest.approx(NCE, abs=1e-12)


# reference.md §1: one query, |P| = 6, cosine scores (0.8 positive; negatives 0.75, 0.5, 0.4, 0.3,
# 0.2), tau 1. The step gradient descent takes on the 0.75 negative, -dl/ds_j = -((1-beta) p_j + beta/|P|),
# at each beta: negative (pushed down) for beta <= 1, positive (lifted) at beta 6.
GRADIENT_SCORES = [0.8, 0.75, 0.5, 0.4, 0.3, 0.2]
UPDATE_ON_TOP_NEGATIVE = {0.0: -0.211, 0.5: -0.189, 1.0: -0.167, 3.0: -0.079, 6.0: +0.053}


@pytest.mark.parametrize("beta", sorted(UPDATE_ON_TOP_NEGATIVE))
def test_gradient_on_a_negative_flips_sign_above_beta_one(beta):
    s = torch.tensor([GRADIENT_SCORES], dtype=torch.float64, requires_grad=True)
    loss, _ = rcl_loss(s, torch.tensor([0]), beta=beta)
    loss.backward()
    p = torch.softmax(s.detach(), dim=1)[0]
    closed_form = (1 - beta) * p + beta / 6  # every negative j; the positive gets (1-beta) p_0 - 1 + beta/6
    assert torch.allclose(s.grad[0, 1:], closed_form[1:], atol=1e-12)
    assert -s.grad[0, 1].item() == pytest.approx(UPDATE_ON_TOP_NEGATIVE[beta], abs=5e-4)
    # Lifted exactly the negatives above beta / ((beta - 1) |P|); none for beta <= 1.
    lifted = (s.grad[0, 1:] < 0).tolist()
    threshold = beta / ((beta - 1) * 6) if beta > 1 else math.inf
    assert lifted == [pj > threshold for pj in p[1:].tolist()]
    # released_code: the same direction, |P| times smaller.
    r = s.detach().clone().requires_grad_(True)
    rcl_loss(r, torch.tensor([0]), beta=beta, scale="released_code")[0].backward()
    assert torch.allclose(r.grad, s.grad / 6, atol=1e-12)


def test_no_in_batch_restricts_to_own_group():
    # k = 1: layout [q0: pos, neg, q1: pos, neg]; without in-batch negatives q1 sees columns 2, 3.
    s = torch.tensor([[LN2, 0.0, 5.0, 5.0], [7.0, 7.0, 0.0, LN3]], dtype=torch.float64)
    pos = positive_columns(2, 2)
    assert pos.tolist() == [0, 2]
    cand, local = candidate_scores(s, pos, 2, in_batch=False)
    assert cand.tolist() == [[LN2, 0.0], [0.0, LN3]] and local.tolist() == [0, 0]
    loss, parts = contrastive_loss(s, pos, 2, in_batch=False, beta=0.0)
    # row 0: softmax (2/3, 1/3) -> l(p+) = ln 3/2; row 1: (1/4, 3/4) -> ln 4
    assert loss.item() == pytest.approx((math.log(1.5) + math.log(4)) / 2, abs=1e-12)
    # CCR mean: row 0 (ln 1.5 + ln 3)/2, row 1 (ln 4 + ln 4/3)/2
    ccr = ((math.log(1.5) + LN3) / 2 + (math.log(4) + math.log(4 / 3)) / 2) / 2
    assert parts["ccr_term"].item() == pytest.approx(ccr, abs=1e-12)
    with_batch, _ = contrastive_loss(s, pos, 2, in_batch=True)
    assert with_batch.item() > loss.item()


def test_positive_columns_with_rank_offset():
    # k = 2 hard negatives, 2 local queries on rank 1 of 2: global queries 2 and 3.
    assert positive_columns(2, 3, first_query=2).tolist() == [6, 9]


def test_similarity_temperature_only_for_cosine():
    q = torch.tensor([[1.0, 0.0]])
    p = torch.tensor([[0.6, 0.8], [1.0, 0.0]])
    assert similarity_scores(q, p, "cosine", 0.05)[0].tolist() == pytest.approx([12.0, 20.0])
    assert similarity_scores(q, p, "dot", 0.05)[0].tolist() == pytest.approx([0.6, 1.0])
    with pytest.raises(ValueError):
        similarity_scores(q, p, "l2")


def test_bad_arguments():
    with pytest.raises(ValueError, match="scale"):
        rcl_loss(torch.zeros(1, 2), torch.tensor([0]), scale="other")
    with pytest.raises(ValueError, match="exceeds"):
        candidate_scores(torch.zeros(2, 3), torch.tensor([0, 2]), 2, in_batch=False)


def test_loss_objects_are_the_pure_functions_the_config_names():
    from pipeline.training.losses import CCRLoss, NCELoss, loss_for

    s, pos = _scores(), torch.tensor(POS)
    assert loss_for(0.0) == NCELoss()
    assert loss_for(0.5) == CCRLoss(beta=0.5)
    # released_code divides even NCE by |P|: β 0 on that scale is not NCE.
    assert loss_for(0.0, "released_code") == CCRLoss(beta=0.0, scale="released_code")
    nce, _ = NCELoss()(s, pos, s.shape[1], in_batch=True)
    assert nce.item() == rcl_loss(s, pos, beta=0.0)[0].item()
    ccr, parts = CCRLoss(beta=0.5, scale="released_code")(s, pos, s.shape[1], in_batch=True)
    expected, _ = rcl_loss(s, pos, beta=0.5, scale="released_code")
    assert ccr.item() == expected.item() and set(parts) == {"nce", "ccr_term"}
    with pytest.raises(ValueError, match="scale"):
        CCRLoss(beta=0.5, scale="other")


# ---- multi-positive NCE, GIST's in-loss masking, relabelled positives -----------------------------


def _labels(positive, exclude):
    from pipeline.training.losses import ColumnLabels

    return ColumnLabels(torch.tensor(positive), torch.tensor(exclude))


def test_multi_positive_nce_by_hand():
    from pipeline.training.losses import multi_positive_nce

    # Row 0: exp (2, 1, 1), positives {0, 1}: -log (3/4). Row 1: exp (1, 3, 1), positive {1}, column 2
    # excluded: softmax over (1, 3) -> -log(3/4) as well.
    s = _scores()
    labels = _labels(
        [[True, True, False], [False, True, False]], [[False, False, False], [False, False, True]]
    )
    loss, parts = multi_positive_nce(s, labels)
    assert loss.item() == pytest.approx(math.log(4 / 3), abs=1e-12)
    # ccr_term: mean l(p) over the kept columns. Row 0: (ln2, ln4, ln4) -> 5ln2/3; row 1: (ln4, ln4/3).
    ccr = (5 * LN2 / 3 + (2 * LN2 + 2 * LN2 - LN3) / 2) / 2
    assert parts["ccr_term"].item() == pytest.approx(ccr, abs=1e-12)
    loss.backward()
    # d/ds of -log sum_{P+} e^s + log sum_P e^s = softmax_P - softmax restricted to P+, / 2 rows.
    # Row 0: (1/2, 1/4, 1/4) - (2/3, 1/3, 0); row 1: (1/4, 3/4, 0) - (0, 1, 0); excluded: 0.
    expected = torch.tensor([[-1 / 12, -1 / 24, 1 / 8], [1 / 8, -1 / 8, 0.0]], dtype=torch.float64)
    assert torch.allclose(s.grad, expected, atol=1e-12)


def test_multi_positive_nce_with_one_positive_is_nce_exactly():
    from pipeline.training.losses import multi_positive_nce, one_positive

    torch.manual_seed(0)
    for dtype in (torch.float64, torch.float32, torch.bfloat16):
        s = torch.randn(4, 12).to(dtype)
        pos = positive_columns(4, 3)
        nce, _ = contrastive_loss(s, pos, 3)
        multi, _ = multi_positive_nce(s, one_positive((4, 12), pos))
        assert torch.equal(multi, nce), dtype


def test_multi_positive_nce_refuses_bad_labels():
    from pipeline.training.losses import multi_positive_nce

    s = _scores()
    with pytest.raises(ValueError, match="at least one positive"):
        multi_positive_nce(s, _labels([[True, False, False], [False] * 3], [[False] * 3] * 2))
    with pytest.raises(ValueError, match="cannot be excluded"):
        multi_positive_nce(
            s, _labels([[True, False, False], [False, True, False]], [[True, False, False], [False] * 3])
        )


def test_gist_exclude_masks_what_the_guide_scores_above_the_positive():
    from pipeline.training.losses import gist_exclude, multi_positive_nce, one_positive

    # Guide: row 0's positive (column 0) 0.5; column 1 at 0.7 goes, column 3 at 0.5 (a tie) stays.
    # Row 1's positive (column 2) 0.9: nothing above it.
    guide = torch.tensor([[0.5, 0.7, 0.1, 0.5], [0.3, 0.95, 0.9, 0.2]])
    exclude = gist_exclude(guide, torch.tensor([0, 2]))
    assert exclude.tolist() == [[False, True, False, False], [False, True, False, False]]
    # The masked loss by hand: model scores ln(1), ln(2), ln(3), ln(4) in both rows.
    s = torch.log(torch.tensor([[1.0, 2, 3, 4], [1.0, 2, 3, 4]], dtype=torch.float64))
    labels = one_positive((2, 4), torch.tensor([0, 2]))
    loss, _ = multi_positive_nce(s, type(labels)(labels.positive, exclude))
    # Row 0: -log 1/(1+3+4) = ln 8; row 1: -log 3/(1+3+4) = ln 8 - ln 3.
    assert loss.item() == pytest.approx((2 * math.log(8) - LN3) / 2, abs=1e-12)


def test_a_guide_that_masks_nothing_gives_nce_exactly():
    from pipeline.training.losses import MultiPositiveNCELoss, gist_exclude, one_positive

    torch.manual_seed(1)
    s = torch.randn(3, 9, dtype=torch.float32)
    pos = positive_columns(3, 3)
    guide = torch.full((3, 9), -1.0)
    guide[torch.arange(3), pos] = 1.0  # every negative below the positive
    labels = one_positive((3, 9), pos)
    labels = type(labels)(labels.positive, gist_exclude(guide, pos))
    assert not labels.exclude.any()
    loss, _ = MultiPositiveNCELoss(guide="zeroshot")(s, pos, 3, in_batch=True, labels=labels)
    nce, _ = contrastive_loss(s, pos, 3, in_batch=True)
    assert torch.equal(loss, nce)


def test_relabel_labels_decide_every_column():
    from pipeline.training.losses import relabel_labels

    # Two queries, groups [pos, neg, extra]: q0 = (10, 11, 12), q1 = (20, 12, -1: an empty slot).
    # q0's positives {10, 12}; q1's {20}. Column 4 holds 12: q1's hard negative, q0's relabelled
    # positive: it leaves q0's softmax (q0 already has 12 in its own group) and stays q1's negative.
    ids = torch.tensor([10, 11, 12, 20, 12, -1])
    labels = relabel_labels(ids, [{10, 12}, {20}], group_size=3)
    assert labels.positive.tolist() == [
        [True, False, True, False, False, False],
        [False, False, False, True, False, False],
    ]
    assert labels.exclude.tolist() == [
        [False, False, False, False, True, True],
        [False, False, False, False, False, True],
    ]
    # Rank 1 of a DDP run: its one query is global query 1.
    mine = relabel_labels(ids, [{20}], group_size=3, first_query=1)
    assert mine.positive.tolist() == [[False, False, False, True, False, False]]


def test_restrict_to_groups_equals_nce_without_in_batch():
    from pipeline.training.losses import MultiPositiveNCELoss

    s = torch.log(torch.tensor([[1.0, 1, 5, 5], [5, 5, 2, 1]], dtype=torch.float64))
    pos = positive_columns(2, 2)
    loss, _ = MultiPositiveNCELoss()(s, pos, 2, in_batch=False)
    # Row 0: -log 1/2; row 1: -log 2/3.
    assert loss.item() == pytest.approx((LN2 + LN3 - LN2) / 2, abs=1e-12)

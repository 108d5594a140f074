"""The training losses against values computed by hand on hand-made tensors."""
import math

import pytest
import torch

from workers.science.training import losses as L


def test_grpo_advantage_of_a_hand_made_group():
    # Group 1: rewards 1,0,0,1 -> mean 0.5, unbiased std sqrt(4*0.25/3) = 0.57735 -> +-0.866025.
    # Group 2: all equal -> 0.
    a = L.grpo_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0]), group_size=4)
    s = 0.5 / math.sqrt(1.0 / 3.0)
    assert a.tolist() == pytest.approx([s, -s, -s, s, 0, 0, 0, 0], abs=1e-5)


def test_grpo_refuses_a_batch_that_is_not_whole_groups():
    with pytest.raises(ValueError, match="groups of 4"):
        L.grpo_advantages(torch.zeros(6), 4)


def test_tis_weights_and_clip_fraction():
    # ratios exp(lp_train - lp_roll): e^0 = 1, e^1 = 2.718 (clipped to 2), e^-1 = 0.3679; last token masked.
    lp_roll = torch.tensor([[-1.0, -2.0, -1.0, -1.0]])
    lp_train = torch.tensor([[-1.0, -1.0, -2.0, 5.0]])
    mask = torch.tensor([[True, True, True, False]])
    w, stats = L.truncated_is_weights(lp_train, lp_roll, mask, cap=2.0)
    e = math.exp(-1)
    assert w.tolist()[0] == pytest.approx([1.0, 2.0, e, 0.0])
    assert stats["is/clip_fraction"] == pytest.approx(1 / 3)
    assert stats["is/weight_mean"] == pytest.approx((3 + e) / 3)
    assert stats["is/weight_max"] == pytest.approx(2.0)
    mean = (3 + e) / 3
    assert stats["is/ess"] == pytest.approx(1 / (((1 / mean) ** 2 + (2 / mean) ** 2 + (e / mean) ** 2) / 3))


def test_sequence_mask_drops_sequences_outside_the_thresholds():
    mask = torch.tensor([[True, True], [True, True], [True, False]])
    lp_roll = torch.zeros(3, 2)
    # per-token log ratios: seq 0 mean 0.1 (ratio 1.105, kept); seq 1 mean 1.0 (2.718 > 2, dropped);
    # seq 2 one token -0.8 (0.449 < 0.5, dropped); its padding token does not count.
    lp_train = torch.tensor([[0.0, 0.2], [1.0, 1.0], [-0.8, 9.0]])
    w, stats = L.sequence_mask(lp_train, lp_roll, mask, upper=2.0, mode="geometric")
    assert w.tolist() == [[1.0, 1.0], [0.0, 0.0], [0.0, 0.0]]
    assert stats["is/masked_fraction"] == pytest.approx(2 / 3)
    # "sequence" mode takes the product over the tokens: seq 0's ratio is exp(0.2) = 1.2214.
    w, stats = L.sequence_mask(lp_train, lp_roll, mask, upper=1.2, lower=0.9, mode="sequence")
    assert w[:, 0].tolist() == [0.0, 0.0, 0.0]  # exp(0.2) = 1.2214 > 1.2
    assert stats["is/masked_fraction"] == 1.0


def test_opd_advantages_are_normalised_over_the_masked_tokens():
    lp_t = torch.tensor([[-1.0, -1.0, 0.0]])
    lp_s = torch.tensor([[-2.0, -4.0, -100.0]])
    mask = torch.tensor([[True, True, False]])
    raw = L.opd_advantages(lp_t, lp_s, mask, normalize=False)
    assert raw.tolist() == [[1.0, 3.0, 0.0]]
    norm = L.opd_advantages(lp_t, lp_s, mask, normalize=True)
    # mean 2, population std 1 -> -1, +1
    assert norm.tolist()[0] == pytest.approx([-1.0, 1.0, 0.0], abs=1e-5)


def test_policy_gradient_loss_value_and_gradient():
    lp = torch.tensor([[-1.0, -2.0, -3.0]], requires_grad=True)
    adv = torch.tensor([[1.0, -1.0, 5.0]])
    mask = torch.tensor([[True, True, False]])
    w = torch.tensor([[2.0, 1.0, 1.0]])
    loss = L.policy_gradient_loss(lp, adv, mask, w)
    # -(2*1*-1 + 1*-1*-2)/2 = -(-2 + 2)/2 = 0
    assert float(loss.detach()) == pytest.approx(0.0)
    loss.backward()
    assert lp.grad.tolist() == [[-1.0, 0.5, 0.0]]


def test_full_reverse_kl_by_hand():
    # Two-token vocabulary: pS = (0.5, 0.5), pT = (0.25, 0.75):
    # KL = 0.5 ln(0.5/0.25) + 0.5 ln(0.5/0.75) = 0.5 ln 2 + 0.5 ln(2/3)
    ls = torch.log(torch.tensor([[[0.5, 0.5], [0.9, 0.1]]]))
    lt = torch.log(torch.tensor([[[0.25, 0.75], [0.5, 0.5]]]))
    mask = torch.tensor([[True, False]])
    loss, stats = L.full_reverse_kl(ls, lt, mask)
    assert float(loss) == pytest.approx(0.5 * math.log(2) + 0.5 * math.log(2 / 3))
    # identical distributions: zero
    assert float(L.full_reverse_kl(lt, lt, torch.ones(1, 2, dtype=torch.bool))[0]) == pytest.approx(0.0, abs=1e-7)


def test_topk_reverse_kl_renormalises_on_the_teachers_top_k():
    # Vocabulary of 3; teacher's top-2 are tokens 0 and 1: pT on them (0.5, 0.3) -> (0.625, 0.375);
    # student (0.2, 0.2, 0.6) -> (0.5, 0.5).
    ls = torch.log(torch.tensor([[[0.2, 0.2, 0.6]]]))
    lt = torch.log(torch.tensor([[[0.5, 0.3, 0.2]]]))
    loss, _ = L.topk_reverse_kl(ls, lt, torch.tensor([[True]]), k=2)
    assert float(loss) == pytest.approx(0.5 * math.log(0.5 / 0.625) + 0.5 * math.log(0.5 / 0.375), rel=1e-5)
    full, _ = L.full_reverse_kl(ls, lt, torch.tensor([[True]]))
    assert float(L.topk_reverse_kl(ls, lt, torch.tensor([[True]]), k=3)[0]) == pytest.approx(float(full), rel=1e-5)


def test_k3_is_zero_for_identical_logprobs_and_matches_the_formula():
    lp = torch.tensor([[-1.0, -0.5]])
    mask = torch.ones(1, 2, dtype=torch.bool)
    assert L.k3(lp, lp, mask) == 0.0
    # d = 0.3 on one token, -0.2 on the other
    got = L.k3(lp + torch.tensor([[0.3, -0.2]]), lp, mask)
    want = ((math.exp(0.3) - 1 - 0.3) + (math.exp(-0.2) - 1 + 0.2)) / 2
    assert got == pytest.approx(want)

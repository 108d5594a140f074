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


# --- each method's loss, as its trainer computes it, on a hand-made batch --------------------

def _trainer(cls, config):
    """A method's trainer holding only its config (compute_loss needs no model)."""
    trainer = cls.__new__(cls)
    trainer.config, trainer.device = config, torch.device("cpu")
    return trainer


def _opd_batch():
    # Two response tokens, vocabulary of 2: the student's distributions (0.5, 0.5) then (0.8, 0.2);
    # sampled tokens 0 then 1, so log pS = ln 0.5, ln 0.2.  The teacher's log-probabilities of those
    # tokens are 1 and 3 nats higher: raw advantages 1, 3 -> normalised (mean 2, std 1) -1, +1.
    # The rollout engine gave the tokens ln 0.5 and ln 0.2 - 1: TIS ratios 1 and e -> weights 1, 2.
    logp_train = torch.log(torch.tensor([[[0.5, 0.5], [0.8, 0.2]]])).requires_grad_()
    logp_teacher = torch.log(torch.tensor([[[0.25, 0.75], [0.5, 0.5]]]))
    lp_train = torch.log(torch.tensor([[0.5, 0.2]]))
    return {"rollouts": _Rollouts(torch.tensor([[0, 1]])), "mask": torch.tensor([[True, True]]),
            "logp_train": logp_train, "lp_train": lp_train, "logp_teacher": logp_teacher,
            "lp_teacher": lp_train + torch.tensor([[1.0, 3.0]]), "lp_roll": lp_train - torch.tensor([[0.0, 1.0]])}


class _Rollouts:
    def __init__(self, tokens):
        self.tokens = tokens


def _opd_config(**kw):
    from workers.science.training.config import OPDConfig

    return OPDConfig(model="student", teacher="teacher", **kw)


def test_sampled_token_opd_loss_of_a_hand_made_batch():
    from workers.science.training.opd import OPDTrainer

    # -token_mean(A * log pS) = -(-1 * ln 0.5 + 1 * ln 0.2) / 2
    loss, _ = _trainer(OPDTrainer, _opd_config(loss="sampled")).compute_loss(_opd_batch())
    assert float(loss.detach()) == pytest.approx((math.log(0.5) - math.log(0.2)) / 2, rel=1e-5)


def test_sampled_token_opd_loss_with_tis_of_a_hand_made_batch():
    from workers.science.training.opd import OPDTrainer

    # weights 1 and 2: -(1 * -1 * ln 0.5 + 2 * 1 * ln 0.2) / 2
    batch = _opd_batch()
    loss, stats = _trainer(OPDTrainer, _opd_config(loss="sampled", correction="tis")).compute_loss(batch)
    assert float(loss.detach()) == pytest.approx((math.log(0.5) - 2 * math.log(0.2)) / 2, rel=1e-5)
    assert stats["is/clip_fraction"] == pytest.approx(0.5)
    # The gradient raises the logit of the token with the positive advantage (token 1 at position 1).
    loss.backward()
    grad = batch["logp_train"].grad
    assert grad[0, 1, 1] < 0 and grad[0, 0, 0] > 0


def test_full_vocabulary_opd_loss_with_tis_of_a_hand_made_batch():
    from workers.science.training.opd import OPDTrainer

    # KL at position 0: 0.5 ln(0.5/0.25) + 0.5 ln(0.5/0.75); at position 1: 0.8 ln(0.8/0.5) + 0.2 ln(0.2/0.5);
    # TIS weights 1 and 2, token-mean over the two tokens.
    kl0 = 0.5 * math.log(2) + 0.5 * math.log(2 / 3)
    kl1 = 0.8 * math.log(1.6) + 0.2 * math.log(0.4)
    loss, _ = _trainer(OPDTrainer, _opd_config(loss="full", correction="tis")).compute_loss(_opd_batch())
    assert float(loss.detach()) == pytest.approx((kl0 + 2 * kl1) / 2, rel=1e-5)


def _grpo_batch():
    # One group of four responses of two tokens over a vocabulary of 2, every distribution uniform
    # (every sampled token has log p = ln 0.5); the second response is one token long.  Rewards
    # 1, 0, 0, 0: mean 0.25, unbiased std 0.5 -> advantages 1.5, -0.5, -0.5, -0.5.  The rollout
    # engine gave the first response's tokens ln 0.5 - 1 (TIS ratio e, capped to 2).
    logp_train = torch.full((4, 2, 2), math.log(0.5)).requires_grad_()
    mask = torch.tensor([[True, True], [True, False], [True, True], [True, True]])
    lp_train = torch.full((4, 2), math.log(0.5))
    lp_roll = lp_train - torch.tensor([[1.0, 1.0], [0, 0], [0, 0], [0, 0]])
    return {"rollouts": _Rollouts(torch.zeros(4, 2, dtype=torch.long)), "mask": mask, "logp_train": logp_train,
            "lp_train": lp_train, "lp_roll": lp_roll, "rewards": torch.tensor([1.0, 0.0, 0.0, 0.0])}


@pytest.mark.parametrize("tis, weighted_advantage_sum", [
    # token-mean over the 7 response tokens: sum over tokens of w * A = 1.5*2 - 0.5*1 - 0.5*2 - 0.5*2 = 0.5;
    # with TIS the first response's two tokens weigh 2: 1.5*2*2 - 0.5 - 1 - 1 = 3.5.  (A sequence-mean
    # aggregation would give 0 without TIS: the mean advantage of a group is 0.)
    (False, 0.5),
    (True, 3.5),
])
def test_grpo_loss_of_a_hand_made_group(tis, weighted_advantage_sum):
    from workers.science.training.config import GRPOConfig
    from workers.science.training.grpo import GRPOTrainer

    trainer = _trainer(GRPOTrainer, GRPOConfig(model="student", group_size=4, batch_size=4, tis=tis))
    loss, stats = trainer.compute_loss(_grpo_batch())
    assert float(loss.detach()) == pytest.approx(-weighted_advantage_sum * math.log(0.5) / 7, rel=1e-5)
    assert stats["train/groups_with_signal"] == 1.0

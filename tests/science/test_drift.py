import numpy as np
import pytest

from workers.science.config import DriftJobConfig, RolloutConfig
from workers.science.drift import drift_statistics, mismatch_after_divergence, run_drift
from workers.science.metrics import TokenRecords


def test_drift_statistics_by_hand():
    fd = np.array([-1, 0, 2, 2])
    s = drift_statistics(fd, np.array([3, 3, 3, 3]), [1, 2, 3])
    assert s["diverged_fraction"] == 0.75
    assert s["identical_prefix_fraction"] == {"1": 0.75, "2": 0.75, "3": 0.25}
    assert s["first_divergence"]["histogram"] == {"0": 1, "2": 2}
    assert s["first_divergence"]["median"] == 2.0


def test_share_after_divergence_by_hand():
    # seq 0 diverges at 1, seq 1 never: k3 = d - 1 + e^-d on d = lp_roll - lp_train
    d = np.array([[0.0, 0.5, 0.5], [0.5, 0.0, 0.0]])
    rec = TokenRecords.from_arrays(d - 1.0, np.full_like(d, -1.0), np.ones_like(d, bool))
    k3 = 0.5 - 1 + np.exp(-0.5)
    out = mismatch_after_divergence(rec, np.array([1, -1]), "k3")
    assert out["share_after"] == pytest.approx(2 * k3 / (3 * k3))
    assert out["tokens_after"] == 2 and out["tokens_before"] == 4


def test_the_reference_does_not_drift_from_itself(student):
    r = run_drift(DriftJobConfig(model=student, rollout=RolloutConfig(), prompts=64,
                                 device="cpu")).model_dump(mode="json")
    assert r["diverged_fraction"] == 0.0
    assert set(r["identical_prefix_fraction"].values()) == {1.0}


def test_noise_makes_decodes_diverge_and_mismatch_concentrates_after(student):
    r = run_drift(DriftJobConfig(model=student, rollout=RolloutConfig(noise_sigma=0.3), prompts=128,
                                 device="cpu")).model_dump(mode="json")
    assert 0 < r["diverged_fraction"] <= 1
    fracs = [r["identical_prefix_fraction"][k] for k in ("1", "2", "4", "8")]
    assert fracs == sorted(fracs, reverse=True)
    a = r["mismatch_after_divergence"]
    assert 0 < a["share_after"] < 1
    g = run_drift(DriftJobConfig(model=student, rollout=RolloutConfig(noise_sigma=0.3), prompts=64, decode="greedy",
                                 device="cpu")).model_dump(mode="json")
    assert g["rollout"]["sampling"]["temperature"] == 0.0


def _spread_shift(vocab: int, eps: float):
    """p uniform over ``vocab`` tokens; q moves ``eps`` of mass from the first half to the second,
    spread evenly: TV(p, q) = eps exactly, by construction."""
    import torch

    p = torch.full((vocab,), 1.0 / vocab, dtype=torch.float64)
    q = p.clone()
    q[: vocab // 2] -= eps / (vocab // 2)
    q[vocab // 2:] += eps / (vocab - vocab // 2)
    return p, q


def test_the_gumbel_coupling_flips_at_most_2tv_over_1_plus_tv_where_inverse_cdf_flips_almost_always():
    """Two distributions 5 % apart (TV), the shift spread over 1,000 tokens: every boundary of
    the cumulative distribution moves by up to 2.5 % = 25 tokens' mass, so the inverse-CDF token
    differs nearly always; the exponential race flips at most 2TV/(1+TV) = 9.5 % of the time."""
    import torch

    from workers.science.config import SamplingConfig
    from workers.science.engines.hf.sampling import choose_tokens, prompt_uniforms, race_tokens, step_exponentials

    vocab, eps, n = 1000, 0.05, 2000
    p, q = _spread_shift(vocab, eps)
    assert 0.5 * float((p - q).abs().sum()) == pytest.approx(eps)
    sampling = SamplingConfig(temperature=1.0)
    logits = torch.stack([p.log(), q.log()]).float()
    u = prompt_uniforms(seed=7, offset=0, n=n, length=1)[:, 0]
    inverse_flips = sum(int(choose_tokens(logits[:1], sampling, u[i:i + 1]) != choose_tokens(logits[1:], sampling,
                                                                                             u[i:i + 1]))
                        for i in range(n)) / n
    race = step_exponentials(seed=7, offset=0, n=n, step=0, vocab=vocab)
    gumbel_flips = float((race_tokens(logits[:1].expand(n, -1), sampling, race)
                          != race_tokens(logits[1:].expand(n, -1), sampling, race)).double().mean())
    bound = 2 * eps / (1 + eps)
    assert inverse_flips > 0.8
    assert gumbel_flips <= bound + 3 * (bound * (1 - bound) / n) ** 0.5  # within 3 standard errors of the bound
    assert gumbel_flips > 0  # the race does flip where the distributions differ


def test_the_race_samples_each_token_with_its_probability_and_the_same_noise_in_any_batch_layout():
    import torch

    from workers.science.config import SamplingConfig
    from workers.science.engines.hf.sampling import race_tokens, step_exponentials

    probs = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    n = 6000
    tokens = race_tokens(probs.log().float().expand(n, -1), SamplingConfig(temperature=1.0),
                         step_exponentials(seed=3, offset=0, n=n, step=4, vocab=3))
    freq = torch.bincount(tokens, minlength=3).double() / n
    assert torch.allclose(freq, probs, atol=4 * (0.25 / n) ** 0.5)
    # prompt 5's noise is the same whether it is drawn in a batch from 0 or from 5
    assert torch.equal(step_exponentials(3, 0, 8, 2, 11)[5], step_exponentials(3, 5, 1, 2, 11)[0])
    assert not torch.equal(step_exponentials(3, 0, 8, 2, 11)[5], step_exponentials(3, 0, 8, 3, 11)[5])


def test_drift_reports_its_coupling_and_both_couplings_agree_the_reference_never_drifts(student):
    for coupling in ("gumbel", "inverse_cdf"):
        r = run_drift(DriftJobConfig(model=student, rollout=RolloutConfig(), prompts=16, device="cpu",
                                     coupling=coupling)).model_dump(mode="json")
        assert r["coupling"] == coupling and r["diverged_fraction"] == 0.0

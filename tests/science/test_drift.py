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

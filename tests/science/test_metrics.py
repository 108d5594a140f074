import math

import numpy as np
import pytest
import torch

from workers.science.metrics import (
    TokenRecords,
    first_divergence,
    full_vocab_terms,
    metric_values,
    multiple_with_ci,
    position_buckets,
    summarize,
)

LOG2 = math.log(2.0)


def records(lp_roll, lp_train, mask=None, **kw):
    lp_roll, lp_train = np.asarray(lp_roll, float), np.asarray(lp_train, float)
    mask = np.ones_like(lp_roll, bool) if mask is None else np.asarray(mask, bool)
    return TokenRecords.from_arrays(lp_roll, lp_train, mask, **kw)


def test_hand_computed_values_on_two_tokens():
    # p_roll = (1/2, 1/4), p_train = (1/4, 1/2): d = (log 2, -log 2), r = (1/2, 2)
    rec = records([[math.log(0.5), math.log(0.25)]], [[math.log(0.25), math.log(0.5)]])
    v = metric_values(summarize(rec))
    assert v["k1"] == pytest.approx(0.0, abs=1e-15)
    assert v["k2"] == pytest.approx(LOG2**2 / 2)
    # k3 = mean(r - 1 - log r) = ((1/2 - 1 + log 2) + (2 - 1 - log 2)) / 2 = 1/4
    assert v["k3"] == pytest.approx(0.25)
    assert v["prob_diff"] == pytest.approx(0.25) and v["prob_diff_max"] == pytest.approx(0.25)
    assert v["chi2_token"] == pytest.approx((0.25 + 4.0) / 2 - 1)  # E[r^2] - 1
    assert v["mult_error"] == pytest.approx(2.0)  # mean exp|d|
    assert v["ess"] == pytest.approx(1.25**2 / 2.125)  # mean(r)^2 / mean(r^2)
    assert v["pearson"] == pytest.approx(-1.0)
    assert v["log_ppl_gap"] == pytest.approx(0.0, abs=1e-15)  # one sequence, gaps cancel
    assert v["chi2_seq"] == pytest.approx(0.0, abs=1e-12)  # prod r = 1


def test_sequence_level_metrics_by_hand():
    # two sequences of one token each: d = (log 2, 0)
    rec = records([[math.log(0.5)], [math.log(0.3)]], [[math.log(0.25)], [math.log(0.3)]])
    v = metric_values(summarize(rec))
    assert v["log_ppl_gap"] == pytest.approx(LOG2 / 2)  # mean of (log 2, 0)
    assert v["chi2_seq"] == pytest.approx((0.25 + 1.0) / 2 - 1)  # E[(prod r)^2] - 1, r = (1/2, 1)


def test_full_vocab_kl_and_tv_by_hand():
    p = torch.tensor([[0.5, 0.5]]).log()
    q = torch.tensor([[0.25, 0.75]]).log()
    kl, tv = full_vocab_terms(p, q)
    assert kl[0] == pytest.approx(0.5 * math.log(2) + 0.5 * math.log(0.5 / 0.75))
    assert tv[0] == pytest.approx(0.25)


def test_identical_engines_give_exactly_zero():
    rng = np.random.default_rng(0)
    lp = np.log(rng.uniform(0.01, 1.0, size=(8, 12)))
    mask = rng.uniform(size=(8, 12)) < 0.8
    full = torch.log_softmax(torch.randn(8, 12, 30, generator=torch.Generator().manual_seed(0)), -1)
    kl, tv = full_vocab_terms(full, full.clone())
    summ = summarize(records(lp, lp.copy(), mask, kl_full=kl, tv_full=tv))
    v = metric_values(summ)
    for name in ("k1", "k2", "k3", "kl_full", "tv_full", "prob_diff", "prob_diff_max", "chi2_token", "log_ppl_gap",
                 "chi2_seq"):
        assert v[name] == 0.0, name
        if isinstance(summ.get(name), dict):
            assert summ[name]["p95"] == 0.0 and summ[name]["max"] == 0.0, name
    # the ratio-type metrics sit exactly at their identity value
    assert v["mult_error"] == 1.0 and v["ess"] == 1.0 and v["pearson"] == 1.0


def test_only_masked_tokens_count():
    rec = records([[0.0, -1.0]], [[0.0, -5.0]], mask=[[True, False]])
    assert rec.tokens == 1 and metric_values(summarize(rec))["k3"] == 0.0


def test_k3_is_never_negative_while_k1_can_be():
    rng = np.random.default_rng(1)
    a, b = np.log(rng.uniform(0.05, 1, (50, 8))), np.log(rng.uniform(0.05, 1, (50, 8)))
    v = metric_values(summarize(records(a, b)))
    w = metric_values(summarize(records(b, a)))
    assert v["k3"] > 0 and w["k3"] > 0
    assert v["k1"] == pytest.approx(-w["k1"])


def test_p95_and_max():
    # one sequence of 20 tokens with d = 0.0 .. 1.9
    d = np.arange(20) / 10.0
    rec = records([-0.5 + d], [np.full(20, -0.5)])
    s = summarize(rec)["k1"]
    assert s["mean"] == pytest.approx(0.95) and s["max"] == pytest.approx(1.9)
    assert s["p95"] == pytest.approx(np.percentile(d, 95))


def test_position_buckets():
    rec = records([[0.0, -0.1, -0.2, -0.3]], [[0.0, 0.0, 0.0, 0.0]])
    rows = position_buckets(rec, [0, 2])
    assert [(r["positions"], r["tokens"]) for r in rows] == [("0-1", 2), ("2+", 2)]
    assert rows[0]["k1"] == pytest.approx(-0.05) and rows[1]["k1"] == pytest.approx(-0.25)


def test_multiple_and_its_bootstrap_ci():
    # config: k1 = 0.2 on every token; reference: 0.1 -> multiple exactly 2, CI degenerate
    n = 30
    cfg = records(np.full((n, 4), -0.8), np.full((n, 4), -1.0))
    ref = records(np.full((n, 4), -0.9), np.full((n, 4), -1.0))
    m, ci = multiple_with_ci(cfg, ref, "k1", n, n_boot=200, seed=0)
    assert m == pytest.approx(2.0)
    assert ci[0] == pytest.approx(2.0) and ci[1] == pytest.approx(2.0)
    # noisy config: the CI brackets the point estimate
    rng = np.random.default_rng(0)
    noisy = records(-1.0 + rng.uniform(0, 0.4, (n, 4)), np.full((n, 4), -1.0))
    m, ci = multiple_with_ci(noisy, ref, "k1", n, n_boot=500, seed=0)
    assert ci[0] < m < ci[1]


def test_zero_reference_gives_no_multiple():
    same = records(np.zeros((3, 2)) - 1, np.zeros((3, 2)) - 1)
    diff = records(np.zeros((3, 2)) - 0.5, np.zeros((3, 2)) - 1)
    assert multiple_with_ci(same, same, "k3", 3, 10)[0] is None
    assert multiple_with_ci(diff, same, "k3", 3, 10)[0] == math.inf


def test_first_divergence():
    a = np.array([[1, 2, 3, 4], [1, 2, 3, 0], [5, 6, 0, 0]])
    ma = np.array([[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 0, 0]], bool)
    b = np.array([[1, 2, 3, 4], [1, 9, 3, 0], [5, 6, 7, 0]])
    mb = np.array([[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 1, 0]], bool)
    assert first_divergence(a, ma, b, mb).tolist() == [-1, 1, 2]


def test_reports_are_json_safe_even_when_a_metric_overflows():
    import json

    from workers.science.metrics import json_safe

    # 300 tokens with d = -5 each: prod r = e^1500 overflows the sequence chi^2
    rec = records([np.full(300, -6.0)] * 3, [np.full(300, -1.0)] * 3)
    v = json_safe(metric_values(summarize(rec)))
    assert v["chi2_seq"] is None and v["k1"] == pytest.approx(-5.0)
    json.dumps(v, allow_nan=False)

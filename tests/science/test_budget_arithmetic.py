"""Budget arithmetic on synthetic curves with a planted threshold, and the verdict around the
boundary: every expected value below is worked out by hand in the comments."""
from __future__ import annotations

import random

import pytest

from workers.science.budget.arithmetic import (
    Level,
    bisect_target,
    difference_interval,
    extend_ladder,
    find_budget,
    judge_agreement,
    judge_drop,
    ladder,
    learning,
    seeds_to_decide,
)
from workers.science.budget.noise import Trial, next_sigma, solve_sigma
from workers.science.budget.student_t import t_quantile, two_sided
from workers.science.config import ConfigError
from workers.science.verdicts import decide, prompts_to_decide


def level(multiple, accs):
    return Level(target=multiple, multiple=multiple, accuracies=tuple(accs))


def test_planted_threshold_without_seed_spread():
    # Baseline 0.500 on every seed; accuracy flat to 100x, then a 3-point drop at 300x.
    base = [0.5, 0.5, 0.5]
    levels = [level(10, [0.5] * 3), level(30, [0.495] * 3), level(100, [0.49] * 3), level(300, [0.47] * 3)]
    b = find_budget(base, levels, tolerance_points=1.4)
    # drops: 0, 0.5, 1.0, 3.0 points; sd 0 everywhere, so each interval is the drop itself.
    assert [round(j.drop_points, 9) for j in b.levels] == [0.0, 0.5, 1.0, 3.0]
    assert [tuple(round(e, 9) for e in j.drop_ci) for j in b.levels] == [(0, 0), (0.5, 0.5), (1, 1), (3, 3)]
    assert [j.judgement for j in b.levels] == ["within", "within", "within", "beyond"]
    assert b.status == "reached" and b.budget == 100 and b.bracket == (100, 300)


def test_the_drop_interval_is_welchs_with_students_t():
    # Baseline 0.49 / 0.50 / 0.51 (sd 0.01); level at 100x 0.47 / 0.48 / 0.49 (sd 0.01): drop 2.0 points.
    # se = sqrt(0.01^2/3 + 0.01^2/3) = 0.0081650 -> 0.8165 points; Welch df = (2v)^2 / (2 v^2 / 2) = 4;
    # t(0.975, 4) = 2.7764, so the half-width is 2.2669 points: [-0.2669, 4.2669].
    base = [0.49, 0.50, 0.51]
    drop, low, high = difference_interval(base, [0.47, 0.48, 0.49], 0.95)
    assert drop == pytest.approx(2.0) and low == pytest.approx(-0.2669, abs=1e-4) and high == pytest.approx(4.2669,
                                                                                                              abs=1e-4)
    # At 10x the drop is 0 with the same spread: [-2.2669, 2.2669].  Tolerance 3: 10x is within (2.27 <= 3),
    # 100x straddles 3 and is inconclusive, so it ends the budget at 10x.  (The old rule, drop <= tolerance
    # + one standard error, would have passed 100x even at tolerance 1.4: 2.0 <= 2.2165.)
    b = find_budget(base, [level(10, base), level(100, [0.47, 0.48, 0.49])], tolerance_points=3.0)
    assert [j.judgement for j in b.levels] == ["within", "inconclusive"]
    assert b.status == "reached" and b.budget == 10 and b.bracket == (10, 100) and b.deciding.target == 100
    # At tolerance 1.4 not even 10x is within: its interval reaches 2.27 points.
    assert find_budget(base, [level(10, base), level(100, [0.47, 0.48, 0.49])]).status == "below_ladder"


def test_a_single_seed_borrows_the_other_sides_spread_and_two_single_seeds_decide_nothing():
    # Baseline 0.50 / 0.52 (sd 0.014142), level one seed 0.50: drop 1.0 point.
    # se = sqrt(0.0002/2 + 0.0002/1) = 0.017321 -> 1.7321 points; df = 2 - 1 = 1, t = 12.706: half 22.008.
    drop, low, high = difference_interval([0.50, 0.52], [0.50], 0.95)
    assert drop == pytest.approx(1.0) and (low, high) == (pytest.approx(-21.008, abs=1e-3),
                                                         pytest.approx(23.008, abs=1e-3))
    assert difference_interval([0.5], [0.4], 0.95) == (pytest.approx(10.0), None, None)
    assert judge_drop(None, None, 1.4) == "inconclusive"


def spread_out(base_mean, means, offsets, spread, tolerance, multiples):
    """The same means, each seed ``spread`` times its (centred) offset away from its level's mean."""
    base = [base_mean + spread * o for o in offsets[0]]
    levels = [level(m, [mu + spread * o for o in offsets[i + 1]])
              for i, (m, mu) in enumerate(zip(multiples, means, strict=True))]
    return find_budget(base, levels, tolerance_points=tolerance)


def test_more_seed_noise_never_raises_the_budget():
    # The same means, every seed pushed further from its level's mean: the budget may only fall (or stay).
    rng = random.Random(7)
    multiples = [10, 30, 100, 300, 1000]
    moved = 0
    for _ in range(300):
        base_mean = rng.uniform(0.4, 0.6)
        means = [base_mean - rng.uniform(0, 0.004) * (i + 1) ** 1.5 for i in range(len(multiples))]
        offsets = [[rng.gauss(0, 1) for _ in range(3)] for _ in range(len(multiples) + 1)]
        offsets = [[o - sum(row) / 3 for o in row] for row in offsets]  # centred: the means stay put
        tolerance = rng.uniform(0.5, 3.0)
        budgets = [spread_out(base_mean, means, offsets, spread, tolerance, multiples)
                   for spread in (0.0, 0.002, 0.005, 0.01, 0.03)]
        covered = [0 if b.budget is None else multiples.index(b.budget) + 1 for b in budgets]
        assert covered == sorted(covered, reverse=True), covered
        moved += covered[0] != covered[-1]
    assert moved > 100  # the noise does move budgets (the property is not vacuous)


def test_first_failure_ends_the_budget_even_if_a_higher_level_passes():
    base = [0.6, 0.6]
    levels = [level(10, [0.6, 0.6]), level(30, [0.55, 0.55]), level(100, [0.6, 0.6])]  # 30x drops 5; 100x recovers
    b = find_budget(base, levels, tolerance_points=1.4)
    assert b.budget == 10 and b.bracket == (10, 30)


def test_not_reached_and_below_ladder():
    base = [0.5, 0.5]
    assert find_budget(base, [level(10, [0.5, 0.5]), level(100, [0.499, 0.499])]).status == "not_reached"
    below = find_budget(base, [level(10, [0.3, 0.3]), level(100, [0.2, 0.2])])
    assert below.status == "below_ladder" and below.budget is None and below.bracket == (None, 10)
    assert extend_ladder([10, 100], "not_reached", 10) == [1000]
    assert extend_ladder([100, 1000], "below_ladder", 10) == [10]
    # never down to 1x, the BF16 unit itself: halfway in log multiple instead, and nothing below 1.01x
    assert extend_ladder([10, 100], "below_ladder", 10) == [3.16] and extend_ladder([3.16, 10], "below_ladder", 10) \
        == [1.78]
    assert extend_ladder([1.01, 10], "below_ladder", 10) == []
    assert extend_ladder([10, 100], "reached", 10) == []


def test_levels_are_judged_by_measured_multiple_not_by_input_order():
    base = [0.5, 0.5]
    b = find_budget(base, [level(300, [0.4, 0.4]), level(10, [0.5, 0.5])])
    assert b.budget == 10 and b.bracket == (10, 300)


@pytest.mark.parametrize("kwargs, message", [
    ({"tolerance_points": -0.1}, "tolerance must be >= 0"),
    ({"confidence": 1.0}, "confidence must be in"),
    ({"confidence": 0.2}, "confidence must be in"),
])
def test_bad_rule_parameters(kwargs, message):
    with pytest.raises(ValueError, match=message):
        find_budget([0.5], [level(10, [0.5]), level(100, [0.5])], **kwargs)


def test_a_ladder_needs_two_levels():
    with pytest.raises(ValueError, match="at least two levels"):
        find_budget([0.5], [level(10, [0.5])])
    assert ladder(2, 10, 3) == [2, 20, 200]


def test_students_t_quantiles_match_the_tables():
    # Two-sided 95% (the 0.975 quantile) from any statistics table; 90% at 5 degrees of freedom: 2.015.
    for df, t in [(1, 12.706), (2, 4.303), (3, 3.182), (4, 2.776), (10, 2.228), (30, 2.042), (1e7, 1.960)]:
        assert t_quantile(0.975, df) == pytest.approx(t, abs=5e-4), df
    assert two_sided(0.90, 5) == pytest.approx(2.015, abs=5e-4)
    assert t_quantile(0.025, 4) == pytest.approx(-2.776, abs=5e-4) and t_quantile(0.5, 3) == pytest.approx(0.0)


def test_bisection_halves_the_bracket_in_log_multiple_until_the_resolution():
    assert bisect_target((10, 100), 1.5) == pytest.approx(31.6)  # sqrt(1000) = 31.62, to 3 digits
    assert bisect_target((31.6, 100), 1.5) == pytest.approx(56.2)
    assert bisect_target((10, 14), 1.5) is None  # 1.4 apart: within x1.5
    assert bisect_target((None, 10), 1.5) is None and bisect_target((10, None), 1.5) is None


def test_seeds_to_decide_a_level_at_its_spread():
    # sd 1 point a side, no drop, tolerance 1.4: n seeds give Welch df 2(n - 1) and half-width t * sqrt(2 / n):
    # n = 5: 2.306 * 0.632 = 1.459 > 1.4;  n = 6: 2.228 * 0.577 = 1.286 <= 1.4.
    assert seeds_to_decide(1.0, 1.0, 0.0, 1.4) == 6
    # A drop of 0.7 leaves 0.7 for the half-width: n = 20 gives t(38) 2.024 * 0.316 = 0.640, n = 17 t(32) 2.037 *
    # 0.343 = 0.699, n = 16 t(30) 2.042 * 0.354 = 0.722.
    assert seeds_to_decide(1.0, 1.0, 0.7, 1.4) == 17
    assert seeds_to_decide(0.0, 0.0, 0.5, 1.4) == 2  # no spread: the interval is the drop
    assert seeds_to_decide(1.0, 1.0, 1.4, 1.4) is None  # a mean drop at the tolerance is never shown within
    assert seeds_to_decide(5.0, 5.0, 0.0, 1.4) is None  # more than 64 seeds


def test_learning_is_the_paired_gain_with_its_lower_end():
    # Gains 53 and 51 points: mean 52, sd 1.4142, se 1.0, t(0.975, 1) = 12.706: lower end 39.294.
    learned = learning([0.37, 0.37], [0.90, 0.88], required_points=1.4)
    assert learned.gain_points == pytest.approx(52.0) and learned.gain_low == pytest.approx(39.294, abs=1e-3)
    assert learned.informative
    # The calibration that learned nothing (10.0 % -> 10.0 % on every seed) is uninformative.
    flat = learning([0.1, 0.1, 0.1], [0.1, 0.1, 0.1], required_points=1.4)
    assert flat.gain_points == pytest.approx(0.0) and not flat.informative
    # Learned, but by less than the tolerance a level may lose: still uninformative.
    assert not learning([0.3, 0.3], [0.31, 0.31], required_points=1.4).informative
    assert learning([0.3], [0.9], required_points=1.4).gain_low is None  # one seed cannot bound the gain


def test_verdict_at_and_around_the_boundary():
    # budget 100x; CI half-width 5 around each multiple
    assert decide(90, [85, 95], 100, "reached", 128).verdict == "pass"
    assert decide(99, [94, 99.999], 100, "reached", 128).verdict == "pass"  # just below: CI entirely under
    at = decide(100, [95, 105], 100, "reached", 128)
    assert at.verdict == "inconclusive" and at.prompts_to_decide is None  # on the budget: no n decides
    touching = decide(95, [90, 100], 100, "reached", 128)
    assert touching.verdict == "inconclusive"  # the CI's end touches the budget: not entirely below
    # just above the budget, and no level was shown to hurt: not shown safe, never "fail"
    assert decide(106, [100.001, 112], 100, "reached", 128).verdict == "not_shown_safe"
    assert decide(200, [150, 250], 100, "reached", 128).margin == pytest.approx(0.5)


def test_inconclusive_says_how_many_prompts_would_decide():
    # multiple 96, CI [90, 102]: half-width 6, gap 4 -> n * (6/4)^2 = 128 * 2.25 = 288 prompts
    d = decide(96, [90, 102], 100, "reached", 128)
    assert d.verdict == "inconclusive" and d.prompts_to_decide == 288
    assert prompts_to_decide(96, (90, 102), 100, 128) == 288


def test_verdict_without_budget_or_ci():
    assert decide(5, [4, 6], None, "below_ladder", 64).verdict == "not_shown_safe"  # nothing shown safe, nor harmful
    assert decide(5, [4, 6], None, "below_ladder", 64, harmful=3).verdict == "fail"
    assert decide(5, None, 100, "reached", 64).verdict == "inconclusive"
    # every level passed up to 1000x: under it passes, over it cannot be judged
    assert decide(50, [40, 60], 1000, "not_reached", 64).verdict == "pass"
    assert decide(2000, [1500, 2500], 1000, "not_reached", 64).verdict == "not_shown_safe"
    assert decide(1200, [900, 1500], 1000, "not_reached", 64).verdict == "inconclusive"


def test_bf16_passes_any_reached_budget():
    # The BF16 engine is the unit: its multiple is 1 with a CI around 1; any budget above 1x passes.
    for budget in (1.5, 12, 200, 1e4):
        assert decide(1.0, [0.9, 1.1], budget, "reached", 128).verdict == "pass"


def test_noise_solver_on_a_known_curve():
    # multiple(sigma) = 1 + (sigma / 0.002)^2: sigma for 101x is exactly 0.02.
    calls = []

    def measure(sigma):
        calls.append(sigma)
        m = 1 + (sigma / 0.002) ** 2
        return m, [m * 0.97, m * 1.03], {}

    hit, trials, _ = solve_sigma(measure, 101.0, start_sigma=0.001, rel_tolerance=0.03)
    assert abs(hit.multiple / 101 - 1) <= 0.03
    assert hit.sigma == pytest.approx(0.02, rel=0.03)
    assert len(calls) <= 5


def test_noise_solver_first_step_assumes_slope_two_and_clamps_secant():
    assert next_sigma([Trial(0.01, 4.0, None)], 16.0) == pytest.approx(0.02)  # (16/4)^(1/2) = 2
    # two trials with slope 10 (clamped to 4): from the nearest (0.02, 20) to 40: 0.02 * 2^(1/4)
    t = [Trial(0.01, 20 / 2**10, None), Trial(0.02, 20.0, None)]
    assert next_sigma(t, 40.0) == pytest.approx(0.02 * 2 ** 0.25)


def test_noise_solver_refuses_targets_at_or_below_one():
    with pytest.raises(ConfigError, match="not above the BF16"):
        solve_sigma(lambda s: (1.0, None, {}), 1.0)


def test_noise_solver_reports_when_it_cannot_reach():
    with pytest.raises(ConfigError, match="did not reach 50x"):
        solve_sigma(lambda s: (2.0, [1.9, 2.1], {}), 50.0, max_iterations=3)  # the multiple never moves


def test_noise_solver_interpolates_once_the_target_is_bracketed():
    # (0.01, 10x) and (0.04, 160x): log-log straight line of slope 2, so 40x is at sigma 0.02.
    assert next_sigma([Trial(0.01, 10.0, None), Trial(0.04, 160.0, None)], 40.0) == pytest.approx(0.02)
    # multiples that fall with sigma (noise): the geometric mean of the bracketing sigmas
    assert next_sigma([Trial(0.01, 50.0, None), Trial(0.04, 5.0, None)], 20.0) == pytest.approx(0.02)


@pytest.mark.parametrize("low, high, verdict", [
    (-1.0, 1.0, "agrees"),           # inside [-1.4, 1.4]
    (-1.4, 1.4, "agrees"),           # touching the ends is inside
    (-0.5, 2.0, "inconclusive"),     # straddles +1.4
    (-3.0, 0.0, "inconclusive"),     # straddles -1.4
    (1.5, 6.0, "differs"),           # wholly above
    (-6.0, -1.5, "differs"),         # wholly below
    (None, None, "inconclusive"),    # a single seed each side: unbounded
])
def test_transfer_agreement_on_hand_intervals(low, high, verdict):
    assert judge_agreement(low, high, 1.4) == verdict


def test_a_noisier_difference_never_turns_into_agreement():
    # The same mean difference (0.5 points), intervals widening with the seed spread: once it
    # leaves [-1.4, 1.4] it is inconclusive, never agrees again.
    verdicts = [judge_agreement(0.5 - h, 0.5 + h, 1.4) for h in (0.2, 0.8, 0.9, 1.5, 3.0, 10.0)]
    assert verdicts == ["agrees", "agrees", "agrees", "inconclusive", "inconclusive", "inconclusive"]

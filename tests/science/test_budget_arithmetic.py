"""Budget arithmetic on synthetic curves with a planted threshold, and the verdict around the
boundary: every expected value below is worked out by hand in the comments."""
from __future__ import annotations

import math

import pytest

from workers.science.budget.arithmetic import Level, decide, extend_ladder, find_budget, ladder, prompts_to_decide
from workers.science.budget.noise import Trial, next_sigma, solve_sigma
from workers.science.config import ConfigError


def level(multiple, accs):
    return Level(target=multiple, multiple=multiple, accuracies=tuple(accs))


def test_planted_threshold_without_seed_spread():
    # Baseline 0.500 on every seed; accuracy flat to 100x, then a 3-point drop at 300x.
    base = [0.5, 0.5, 0.5]
    levels = [level(10, [0.5] * 3), level(30, [0.495] * 3), level(100, [0.49] * 3), level(300, [0.47] * 3)]
    b = find_budget(base, levels, tolerance_points=1.4)
    # drops: 0, 0.5, 1.0, 3.0 points; sd 0 everywhere so the allowance is exactly 1.4.
    assert [round(j.drop_points, 9) for j in b.levels] == [0.0, 0.5, 1.0, 3.0]
    assert [j.allowance_points for j in b.levels] == pytest.approx([1.4] * 4)
    assert b.status == "reached" and b.budget == 100 and b.bracket == (100, 300)


def test_seed_spread_widens_what_counts_as_a_drop():
    # Baseline mean 0.50, sd 0.01 (0.49, 0.50, 0.51); level at 100x: mean 0.48, sd 0.01.
    # drop 2.0 points; se = sqrt(0.01^2/3 + 0.01^2/3) = 0.0081650 -> 0.8165 points.
    base = [0.49, 0.50, 0.51]
    levels = [level(10, [0.49, 0.50, 0.51]), level(100, [0.47, 0.48, 0.49])]
    strict = find_budget(base, levels, tolerance_points=1.4, seed_z=0.0)
    assert strict.budget == 10 and strict.bracket == (10, 100)  # 2.0 > 1.4
    lenient = find_budget(base, levels, tolerance_points=1.4, seed_z=1.0)
    assert lenient.levels[1].allowance_points == pytest.approx(1.4 + 100 * math.sqrt(2 * 0.01**2 / 3))
    assert lenient.status == "not_reached" and lenient.budget == 100  # 2.0 <= 2.2165


def test_first_failure_ends_the_budget_even_if_a_higher_level_passes():
    base = [0.6]
    levels = [level(10, [0.6]), level(30, [0.55]), level(100, [0.6])]  # 30x drops 5 points; 100x recovers (noise)
    b = find_budget(base, levels, tolerance_points=1.4)
    assert b.budget == 10 and b.bracket == (10, 30)


def test_not_reached_and_below_ladder():
    base = [0.5, 0.5]
    assert find_budget(base, [level(10, [0.5]), level(100, [0.499])]).status == "not_reached"
    below = find_budget(base, [level(10, [0.3]), level(100, [0.2])])
    assert below.status == "below_ladder" and below.budget is None and below.bracket == (None, 10)
    assert extend_ladder([10, 100], "not_reached", 10) == [1000]
    assert extend_ladder([10, 100], "below_ladder", 10) == [1]
    assert extend_ladder([10, 100], "reached", 10) == []


def test_levels_are_judged_by_measured_multiple_not_by_input_order():
    base = [0.5]
    b = find_budget(base, [level(300, [0.4]), level(10, [0.5])])
    assert b.budget == 10 and b.bracket == (10, 300)


@pytest.mark.parametrize("kwargs, message", [
    ({"tolerance_points": -0.1}, "tolerance must be >= 0"),
    ({"seed_z": -1}, "seed_z must be >= 0"),
])
def test_bad_rule_parameters(kwargs, message):
    with pytest.raises(ValueError, match=message):
        find_budget([0.5], [level(10, [0.5]), level(100, [0.5])], **kwargs)


def test_a_ladder_needs_two_levels():
    with pytest.raises(ValueError, match="at least two levels"):
        find_budget([0.5], [level(10, [0.5])])
    assert ladder(2, 10, 3) == [2, 20, 200]


def test_verdict_at_and_around_the_boundary():
    # budget 100x; CI half-width 5 around each multiple
    assert decide(90, [85, 95], 100, "reached", 128).verdict == "pass"
    assert decide(99, [94, 99.999], 100, "reached", 128).verdict == "pass"  # just below: CI entirely under
    at = decide(100, [95, 105], 100, "reached", 128)
    assert at.verdict == "inconclusive" and at.prompts_to_decide is None  # on the budget: no n decides
    touching = decide(95, [90, 100], 100, "reached", 128)
    assert touching.verdict == "inconclusive"  # the CI's end touches the budget: not entirely below
    assert decide(106, [100.001, 112], 100, "reached", 128).verdict == "fail"  # just above
    assert decide(200, [150, 250], 100, "reached", 128).margin == pytest.approx(0.5)


def test_inconclusive_says_how_many_prompts_would_decide():
    # multiple 96, CI [90, 102]: half-width 6, gap 4 -> n * (6/4)^2 = 128 * 2.25 = 288 prompts
    d = decide(96, [90, 102], 100, "reached", 128)
    assert d.verdict == "inconclusive" and d.prompts_to_decide == 288
    assert prompts_to_decide(96, (90, 102), 100, 128) == 288


def test_verdict_without_budget_or_ci():
    assert decide(5, [4, 6], None, "below_ladder", 64).verdict == "fail"
    assert decide(5, None, 100, "reached", 64).verdict == "inconclusive"
    # every level passed up to 1000x: under it passes, over it cannot be judged
    assert decide(50, [40, 60], 1000, "not_reached", 64).verdict == "pass"
    assert decide(2000, [1500, 2500], 1000, "not_reached", 64).verdict == "inconclusive"


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

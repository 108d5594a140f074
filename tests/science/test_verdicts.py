"""The budget over training: one interpolation for the re-check and the run watch."""
from __future__ import annotations

import pytest

from workers.science.verdicts import budget_at


def test_it_interpolates_log_linearly_between_calibrated_steps():
    # 10x at step 0 and 1,000x at step 1,000: the geometric path is 100x at step 500 (a straight
    # line would say 505x), 10^1.5 at step 250
    points = [(0, 10.0), (1000, 1000.0)]
    assert budget_at(points, 500) == pytest.approx(100.0)
    assert budget_at(points, 250) == pytest.approx(10 ** 1.5)
    assert budget_at(points, 0) == pytest.approx(10.0) and budget_at(points, 1000) == pytest.approx(1000.0)


def test_it_is_flat_outside_and_takes_points_in_any_order():
    points = [(100, 10.0), (0, 1000.0)]
    assert budget_at(points, -5) == 1000.0 and budget_at(points, 10_000) == 10.0
    assert budget_at(points, 50) == pytest.approx(100.0)  # sqrt(1000 * 10)
    assert budget_at([(5, 3.0)], 0) == budget_at([(5, 3.0)], 99) == 3.0
    assert budget_at([], 3) is None


def test_it_never_allows_more_than_the_straight_line():
    points = [(0, 7.0), (300, 2500.0), (900, 40.0)]
    for step in range(0, 901, 25):
        (s0, b0), (s1, b1) = [(0, 7.0), (300, 2500.0)] if step <= 300 else [(300, 2500.0), (900, 40.0)]
        straight = b0 + (b1 - b0) * (step - s0) / (s1 - s0)
        assert min(b0, b1) - 1e-9 <= budget_at(points, step) <= straight + 1e-9

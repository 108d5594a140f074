"""The one number formatter of every page, on values written out by hand."""
import pytest

from opdweb.numbers import budget, multiple, significant


@pytest.mark.parametrize("value, text", [
    (85916.811, "85,900"),  # the budget that read "85916.811x", "8.59e+04x" and "85916.81x BF16"
    (1054.3, "1,050"), (106.2, "106"), (99.96, "100"), (23.2, "23.2"), (9.96, "9.96"), (1.4, "1.4"), (0.5, "0.5"),
    (0.9998, "1"), (0.99949, "0.999"), (0.001234, "0.00123"), (3.19e-4, "0.000319"), (1.44e-5, "1.44e-05"),
    (2e-6, "2e-06"), (-3.5, "-3.5"),
    (0, "0"), (0.0, "0"), (2.0, "2"), (12, "12"), (5000, "5,000"), (123456, "123,456"),  # integers as integers
    (None, ""), (float("inf"), "∞"),
])
def test_significant_digits_and_integers(value, text):
    assert significant(value) == text


def test_a_budget_says_its_status():
    assert budget(85916.811, "not_reached") == "≥ 85,900× (not reached)"
    assert budget(12.46, "reached") == "12.5×"
    assert budget(None, "below_ladder") == "below the ladder"
    assert budget(None, "uninformative") == "none (uninformative)"
    assert budget(None, "undecided") == "none (undecided)"
    assert multiple(None) == "–" and multiple(33.81) == "33.8×"

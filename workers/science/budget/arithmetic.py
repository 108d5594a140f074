"""The arithmetic of a mismatch budget: from a calibration curve to the budget, and from a
measured multiple to an admission verdict.  Pure Python (no torch, no numpy): the web
process imports it to explain a verdict.

**The budget rule.**  A calibration trains equal-step runs at a ladder of mismatch levels,
several seeds each, plus a BF16 baseline.  A level's *drop* is the baseline's mean held-out
accuracy minus the level's mean (in points).  Seed spread decides only what counts as a
real drop: a level is *within tolerance* when

    drop <= tolerance + z * se,   se = sqrt(s_base^2 / n_base + s_level^2 / n_level)

(``s``: the seeds' sample standard deviations, ``z`` = ``seed_z``, 1 by default), that is, a
drop is charged to the mismatch only when it exceeds the tolerance by more than one standard
error of the seed noise.  The **budget** is the measured multiple of the highest level such
that it and every level below it are within tolerance (the first failure ends it; a pass
above a failure is noise, not tolerance).  Its bracket is (that level, the first failing
level).  When every level passes the budget is *not reached* (it is at least the top level);
when the lowest level already fails the ladder does not bracket from below.

**The verdict.**  ``pass`` when the multiple's 95% CI lies entirely below the budget, ``fail``
when entirely above, ``inconclusive`` when it straddles (or touches) the budget; the
prompts that would likely decide it assume the CI's half-width shrinks as 1/sqrt(prompts).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal, Sequence

BudgetStatus = Literal["reached", "not_reached", "below_ladder"]
Verdict = Literal["pass", "fail", "inconclusive"]


def ladder(start: float, factor: float, count: int) -> list[float]:
    """A geometric ladder of target multiples: start, start*factor, ... (``count`` levels)."""
    if start <= 0 or factor <= 1 or count < 1:
        raise ValueError("a ladder needs start > 0, factor > 1 and at least one level")
    return [start * factor**i for i in range(count)]


def mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs)


def sample_sd(xs: Sequence[float]) -> float:
    """Sample standard deviation (n - 1); 0 for a single value."""
    if len(xs) < 2:
        return 0.0
    m = mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


@dataclass(frozen=True)
class Level:
    """One rung of the ladder: the multiple it was meant to be, the multiple measured (with
    its CI), how it was realised (noise sigma, ...) and the seeds' final accuracies (0-1)."""

    target: float
    multiple: float
    accuracies: tuple[float, ...]
    multiple_ci: tuple[float, float] | None = None
    setting: dict = field(default_factory=dict)


@dataclass(frozen=True)
class LevelJudgement:
    target: float
    multiple: float
    multiple_ci: tuple[float, float] | None
    setting: dict
    accuracies: tuple[float, ...]
    accuracy_mean: float
    accuracy_sd: float
    drop_points: float
    allowance_points: float
    within: bool


@dataclass(frozen=True)
class Budget:
    budget: float | None
    status: BudgetStatus
    bracket: tuple[float | None, float | None]
    baseline_mean: float
    baseline_sd: float
    tolerance_points: float
    seed_z: float
    levels: tuple[LevelJudgement, ...]


def find_budget(baseline: Sequence[float], levels: Sequence[Level], tolerance_points: float = 1.4,
                seed_z: float = 1.0) -> Budget:
    """The budget of a calibration curve (the rule in the module docstring); accuracies are
    fractions, tolerance in points (1.4 = 1.4 percentage points)."""
    if tolerance_points < 0:
        raise ValueError(f"tolerance must be >= 0 points (got {tolerance_points})")
    if seed_z < 0:
        raise ValueError(f"seed_z must be >= 0 (got {seed_z})")
    if not baseline:
        raise ValueError("the baseline needs at least one seed's accuracy")
    if len(levels) < 2:
        raise ValueError(f"a ladder needs at least two levels (got {len(levels)})")
    if any(not lv.accuracies for lv in levels):
        raise ValueError("every level needs at least one seed's accuracy")
    ordered = sorted(levels, key=lambda lv: lv.multiple)
    b_mean, b_sd = mean(baseline), sample_sd(baseline)
    judged = []
    for lv in ordered:
        m, sd = mean(lv.accuracies), sample_sd(lv.accuracies)
        se = math.sqrt(b_sd**2 / len(baseline) + sd**2 / len(lv.accuracies))
        drop, allowance = 100.0 * (b_mean - m), tolerance_points + seed_z * 100.0 * se
        judged.append(LevelJudgement(lv.target, lv.multiple, lv.multiple_ci, dict(lv.setting), tuple(lv.accuracies),
                                     m, sd, drop, allowance, drop <= allowance))
    first_fail = next((i for i, j in enumerate(judged) if not j.within), None)
    status: BudgetStatus
    value: float | None
    bracket: tuple[float | None, float | None]
    if first_fail is None:
        status, value, bracket = "not_reached", judged[-1].multiple, (judged[-1].multiple, None)
    elif first_fail == 0:
        status, value, bracket = "below_ladder", None, (None, judged[0].multiple)
    else:
        status, value = "reached", judged[first_fail - 1].multiple
        bracket = (value, judged[first_fail].multiple)
    return Budget(value, status, bracket, b_mean, b_sd, tolerance_points, seed_z, tuple(judged))


def extend_ladder(targets: Sequence[float], status: BudgetStatus, factor: float) -> list[float]:
    """One more rung where the ladder does not bracket: above the top when every level
    passed, below the bottom when the lowest failed."""
    top, bottom = max(targets), min(targets)
    if status == "not_reached":
        return [top * factor]
    if status == "below_ladder":
        return [bottom / factor]
    return []


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    reason: str
    margin: float | None  # budget / multiple: above 1 is room to spare
    prompts_to_decide: int | None = None


def decide(multiple: float | None, ci: Sequence[float | None] | None, budget: float | None, status: BudgetStatus,
           prompts: int) -> Decision:
    """The admission verdict of a measured multiple (with its 95% CI over ``prompts``
    prompts) against a budget (see the module docstring)."""
    if budget is None or status == "below_ladder":
        return Decision("fail", "the budget is below the lowest calibrated level: no mismatch above BF16 was "
                                "tolerated", None)
    if multiple is None or ci is None or len(ci) != 2 or ci[0] is None or ci[1] is None:
        return Decision("inconclusive", "the multiple has no confidence interval (too few prompts, or a zero "
                                        "BF16 reference); measure more prompts", None)
    lo, hi = float(ci[0]), float(ci[1])
    margin = budget / multiple if multiple > 0 else math.inf
    if hi < budget:
        return Decision("pass", f"the 95% CI [{lo:.3g}, {hi:.3g}] lies below the budget {budget:.3g}x", margin)
    if status == "not_reached":
        return Decision("inconclusive", f"the CI [{lo:.3g}, {hi:.3g}] reaches past {budget:.3g}x, the highest "
                                        "level calibrated (every level stayed within tolerance); extend the "
                                        "calibration's ladder", margin)
    if lo > budget:
        return Decision("fail", f"the 95% CI [{lo:.3g}, {hi:.3g}] lies above the budget {budget:.3g}x", margin)
    return Decision("inconclusive", f"the 95% CI [{lo:.3g}, {hi:.3g}] contains the budget {budget:.3g}x", margin,
                    prompts_to_decide(multiple, (lo, hi), budget, prompts))


def prompts_to_decide(multiple: float, ci: tuple[float, float], budget: float, prompts: int) -> int | None:
    """Prompts at which the CI would likely clear the budget, if its half-width shrinks as
    1/sqrt(prompts) around the same multiple; None when the multiple sits on the budget."""
    gap = abs(multiple - budget)
    half = (ci[1] - ci[0]) / 2
    if gap <= 1e-12 * max(1.0, abs(budget)) or half <= 0:
        return None
    return max(prompts + 1, math.ceil(prompts * (half / gap) ** 2))

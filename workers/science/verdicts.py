"""Verdicts against a mismatch budget: the budget over training, and the one rule that decides
each question asked of it.  Pure Python: the web process and the trainer both import it.

A budget is calibrated on one checkpoint; a team that calibrated several checkpoints of one
lineage (the same task, method, metric and unit pair) has a budget per training step.  The
budget at step t between two calibrated steps is interpolated **log-linearly in the
multiple** and held flat before the first and after the last.  Why log-linear: multiples are
ratios whose budgets span decades (10x early, 1,000x late is usual), and the calibration's
ladder is geometric.  A straight line in the multiple would put the budget halfway between
10x and 1,000x at 505x, fifty times the lower budget; the geometric path puts it at 100x.
It is also the cautious choice: the geometric mean never exceeds the arithmetic one, so the
interpolated budget never allows more than a straight line would.

One question, one rule (each verdict names its rule where it is shown):

- ``admission`` (an admission check of a rollout config, and the **re-check** during a
  training run, which asks the same question on the current weights):
  :data:`CI_AGAINST_BUDGET`, the 95 % CI of the measured multiple against the budget
  (:func:`decide`: ``pass`` when the CI lies
  entirely below the budget, ``fail`` when entirely above, ``inconclusive`` when it straddles or
  touches it; the prompts that would likely decide it assume the CI's half-width shrinks as
  1/sqrt(prompts)).
- ``run watch`` (a cluster run that logs one multiple per step, with no interval):
  :data:`OVER_FOR_CONSECUTIVE_STEPS`, the logged multiple above the budget at its step for a
  number of logged steps in a row (one noisy point does not alert).
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import Iterable, Literal, Sequence

#: Where a calibration left its budget: found, above its ladder, or below its lowest level.
BudgetStatus = Literal["reached", "not_reached", "below_ladder"]
#: An admission verdict.
Verdict = Literal["pass", "fail", "inconclusive"]

#: The admission check's rule, also the re-check's during training.
CI_AGAINST_BUDGET = "ci_against_budget"
#: The run watch's rule.
OVER_FOR_CONSECUTIVE_STEPS = "over_for_consecutive_steps"

#: Each rule in words, as pages, reports and webhook bodies name it.
RULES = {
    CI_AGAINST_BUDGET: "the 95 % CI of the multiple against the budget: pass when it lies below, fail when it "
                       "lies above, inconclusive when it contains the budget",
    OVER_FOR_CONSECUTIVE_STEPS: "the logged multiple above the budget at its step for N logged steps in a row",
}


def budget_at(points: Iterable[tuple[int, float]], step: int) -> float | None:
    """The budget that applies at training ``step`` from ``(step, budget)`` points (see the
    module docstring); None without points.  Points need not be sorted; where two share a
    step, the last one given wins."""
    by_step = dict(points)
    if not by_step:
        return None
    steps = sorted(by_step)
    i = bisect.bisect_right(steps, step)
    if i == 0:
        return by_step[steps[0]]
    if i == len(steps):
        return by_step[steps[-1]]
    s0, s1 = steps[i - 1], steps[i]
    b0, b1 = by_step[s0], by_step[s1]
    if b0 <= 0 or b1 <= 0:  # not a multiple: no log scale; the lower one is the cautious budget
        return min(b0, b1)
    f = (step - s0) / (s1 - s0)
    return math.exp(math.log(b0) + f * (math.log(b1) - math.log(b0)))


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


__all__ = ["CI_AGAINST_BUDGET", "OVER_FOR_CONSECUTIVE_STEPS", "RULES", "BudgetStatus", "Decision", "Verdict",
           "budget_at", "decide", "prompts_to_decide"]

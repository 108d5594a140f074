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
  :data:`CI_AGAINST_BUDGET`, the 95 % CI of the measured multiple against the calibration's
  three zones (:func:`decide`; the zones are :mod:`workers.science.budget.zones`'s): ``pass``
  when the CI lies entirely below the budget (shown safe), ``inconclusive`` when it contains
  or touches the budget (the prompts that would likely decide it assume the CI's half-width
  shrinks as 1/sqrt(prompts)), ``not_shown_safe`` when it lies above the budget but not
  above the first level shown to hurt (more calibration decides it, not more prompts), and
  ``fail`` only when it lies above that level (shown harmful).
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
#: An admission verdict (:func:`decide`).
Verdict = Literal["pass", "inconclusive", "not_shown_safe", "fail"]
#: Each verdict in words, as pages and reports head it.
VERDICT_WORDS = {
    "pass": "shown safe",
    "inconclusive": "undecided: the CI contains the budget",
    "not_shown_safe": "above the budget, not shown harmful",
    "fail": "shown harmful",
}



def in_words(verdict: str | None, with_zones: bool = True) -> str:
    """A verdict in words; ``with_zones`` False for a check judged before the zones (its
    budget carried no ladder), whose ``fail`` meant only "the CI lies above the budget"."""
    if verdict == "fail" and not with_zones:
        return "above the budget (judged before harm was told apart; not shown harmful)"
    return VERDICT_WORDS.get(str(verdict), str(verdict or ""))


#: The admission check's rule, also the re-check's during training.
CI_AGAINST_BUDGET = "ci_against_budget"
#: The run watch's rule.
OVER_FOR_CONSECUTIVE_STEPS = "over_for_consecutive_steps"

#: Each rule in words, as pages, reports and webhook bodies name it.
RULES = {
    CI_AGAINST_BUDGET: "the 95 % CI of the multiple against the budget: pass when it lies below, inconclusive "
                       "when it contains the budget, not shown safe when it lies above the budget but not above "
                       "the first level shown to hurt, fail only when it lies above that level",
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
           prompts: int, harmful: float | None = None) -> Decision:
    """The admission verdict of a measured multiple (with its 95% CI over ``prompts``
    prompts) against a budget and ``harmful``, the multiple of the calibration's first level
    shown to hurt (None: none was; see the module docstring)."""
    ends = _ends(ci) if multiple is not None else None
    lo, hi = ends or (math.nan, math.nan)
    if harmful is not None and ends is not None and lo > harmful:
        margin = None if budget is None or not multiple else budget / multiple
        return Decision("fail", f"the 95% CI [{lo:.3g}, {hi:.3g}] lies above {harmful:.3g}x, the first calibrated "
                                "level whose accuracy drop lay wholly beyond the tolerance (shown harmful)", margin)
    if budget is None or status == "below_ladder":
        return Decision("not_shown_safe", "no level was shown safe: the lowest calibrated level is not within "
                                          "tolerance, and " + _harm_words(harmful, hi if ends else None), None)
    if multiple is None or ends is None:
        return Decision("inconclusive", "the multiple has no confidence interval (too few prompts, or a zero "
                                        "BF16 reference); measure more prompts", None)
    margin = budget / multiple if multiple > 0 else math.inf
    if hi < budget:
        return Decision("pass", f"the 95% CI [{lo:.3g}, {hi:.3g}] lies below the budget {budget:.3g}x (shown safe)",
                        margin)
    if status == "not_reached":
        where = "lies above" if lo > budget else "reaches past"
        return Decision("not_shown_safe" if lo > budget else "inconclusive",
                        f"the 95% CI [{lo:.3g}, {hi:.3g}] {where} {budget:.3g}x, the highest level calibrated "
                        "(every level stayed within tolerance, none was shown to hurt); extend the calibration's "
                        "ladder", margin)
    if lo > budget:
        return Decision("not_shown_safe", f"the 95% CI [{lo:.3g}, {hi:.3g}] lies above the budget {budget:.3g}x, "
                                          f"but {_harm_words(harmful, hi)}", margin)
    return Decision("inconclusive", f"the 95% CI [{lo:.3g}, {hi:.3g}] contains the budget {budget:.3g}x", margin,
                    prompts_to_decide(multiple, (lo, hi), budget, prompts))


def _ends(ci: Sequence[float | None] | None) -> tuple[float, float] | None:
    """A CI's two ends, or None where it has none (or an unbounded end)."""
    if ci is None or len(ci) != 2 or ci[0] is None or ci[1] is None:
        return None
    return float(ci[0]), float(ci[1])


def _harm_words(harmful: float | None, hi: float | None = None) -> str:
    if harmful is None:
        return "no calibrated level was shown to hurt (its drop wholly beyond the tolerance)"
    if hi is not None and hi >= harmful:
        return f"not wholly above {harmful:.3g}x, the first level shown to hurt"
    return f"below {harmful:.3g}x, the first level shown to hurt"


def prompts_to_decide(multiple: float, ci: tuple[float, float], budget: float, prompts: int) -> int | None:
    """Prompts at which the CI would likely clear the budget, if its half-width shrinks as
    1/sqrt(prompts) around the same multiple; None when the multiple sits on the budget."""
    gap = abs(multiple - budget)
    half = (ci[1] - ci[0]) / 2
    if gap <= 1e-12 * max(1.0, abs(budget)) or half <= 0:
        return None
    return max(prompts + 1, math.ceil(prompts * (half / gap) ** 2))


__all__ = ["CI_AGAINST_BUDGET", "OVER_FOR_CONSECUTIVE_STEPS", "RULES", "VERDICT_WORDS", "BudgetStatus", "Decision",
           "Verdict", "in_words",
           "budget_at", "decide", "prompts_to_decide"]

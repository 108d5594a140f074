"""Admission re-checks while training: the rollout config's multiple at the current weights,
measured at every evaluation, against the budget that applies at that step.

The multiple is measured as the admission check measures it, on the trainer's own current
weights: the rollout engine (this config, this step's noise draw) and a plain BF16 engine
each sample the same prompts under the same seed, the trainer scores both, and the ratio of
their k3 is the multiple (the BF16 reference is re-measured each time: it moves with the
weights too).  Where budgets were calibrated at several checkpoints the one that applies at
step t is interpolated between its neighbours (log-linear in the multiple), and held flat
before the first and after the last.
"""
from __future__ import annotations

import bisect
import logging
import math
from typing import Sequence

from .config import BudgetAtStep

log = logging.getLogger(__name__)


def budget_at(budgets: Sequence[BudgetAtStep], step: int) -> float | None:
    """The budget that applies at ``step`` (see the module docstring); None without budgets."""
    if not budgets:
        return None
    points = sorted(budgets, key=lambda b: b.step)
    steps = [b.step for b in points]
    i = bisect.bisect_right(steps, step)
    if i == 0:
        return points[0].multiple
    if i == len(points):
        return points[-1].multiple
    a, b = points[i - 1], points[i]
    f = (step - a.step) / (b.step - a.step)
    return math.exp(math.log(a.multiple) + f * (math.log(b.multiple) - math.log(a.multiple)))


class AdmissionRecheck:
    """Re-measures and judges at each evaluation; remembers the first step out of budget."""

    def __init__(self, trainer) -> None:  # an OnPolicyTrainer
        self.trainer = trainer
        self.budgets = list(trainer.config.budget)
        self.checks: list[dict] = []
        self.left_at: int | None = None

    def multiple_now(self, step: int) -> float | None:
        t = self.trainer
        problems = t.train_problems(step)
        reference = t.k3_against_trainer(t.bf16_config(), problems, step)
        return t.k3_against_trainer(t.rollout_config(step), problems, step) / reference if reference > 0 else None

    def check(self, step: int) -> dict:
        multiple = self.multiple_now(step)
        budget = budget_at(self.budgets, step)
        within = None if budget is None or multiple is None else multiple <= budget
        entry = {"step": step, "multiple": multiple, "budget": budget, "within": within}
        self.checks.append(entry)
        values: dict[str, float] = {} if multiple is None else {"admission/multiple": multiple}
        if within is not None and budget is not None:
            values["admission/within_budget"] = float(within)
            values["admission/budget"] = budget
        self.trainer.reporter.log(step, values)
        if within is False and self.left_at is None:
            self.left_at = step
            log.warning("admission: at step %d the rollout config's multiple %.3gx left the budget %.3gx",
                        step, multiple, budget)
        return entry

    def report(self) -> dict:
        return {"checks": self.checks, "left_budget_at_step": self.left_at}

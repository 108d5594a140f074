"""Admission re-checks while training: the rollout config's multiple at the current weights,
measured at every evaluation, against the budget that applies at that step.

The multiple is measured as the admission check measures it, on the trainer's own current
weights: the rollout engine (this config, this step's noise draw) and a plain BF16 engine
each sample the same prompts under the same seed, the trainer scores both, and the ratio of
their k3 is the multiple, with a paired bootstrap CI over the prompts (the BF16 reference is
re-measured each time: it moves with the weights too).  The verdict is the admission's own
rule (:data:`~workers.science.verdicts.CI_AGAINST_BUDGET`) against the budget at the
step (:func:`~workers.science.verdicts.budget_at`): the run leaves its budget at the
first evaluation whose CI lies wholly above it (verdict ``not_shown_safe``: the budgets over
training carry no harmful level, so nothing there is called shown harmful).
"""
from __future__ import annotations

import logging

from ..metrics import ratio_with_ci
from ..verdicts import CI_AGAINST_BUDGET, budget_at, decide

log = logging.getLogger(__name__)

#: The verdicts of a CI wholly above the budget: the run left the shown-safe zone (the
#: re-check knows no harmful level, so it says ``not_shown_safe`` there, not ``fail``).
LEFT = ("not_shown_safe", "fail")
#: Bootstrap resamples of the re-check's CI (the admission check's default).
BOOTSTRAP = 1000


class AdmissionRecheck:
    """Re-measures and judges at each evaluation; remembers the first step out of budget."""

    def __init__(self, trainer) -> None:  # an OnPolicyTrainer
        self.trainer = trainer
        self.budgets = [(b.step, b.multiple) for b in trainer.config.budget]
        self.checks: list[dict] = []
        self.left_at: int | None = None

    def multiple_now(self, step: int) -> tuple[float | None, list[float] | None, int]:
        """The multiple at the current weights, its 95 % CI and the prompts it was measured on."""
        t = self.trainer
        problems = t.train_problems(step)
        s0, c0 = t.k3_sums_against_trainer(t.bf16_config(), problems, step)
        s1, c1 = t.k3_sums_against_trainer(t.rollout_config(step), problems, step)
        multiple, ci = ratio_with_ci(s1, c1, s0, c0, n_boot=BOOTSTRAP, seed=step)
        return multiple, ci, len(problems)

    def check(self, step: int) -> dict:
        multiple, ci, prompts = self.multiple_now(step)
        budget = budget_at(self.budgets, step)
        decision = decide(multiple, ci, budget, "reached", prompts) if budget is not None else None
        verdict = None if decision is None else decision.verdict
        entry = {"step": step, "multiple": multiple, "multiple_ci": ci, "budget": budget, "verdict": verdict,
                 "within": None if verdict is None else verdict == "pass",
                 "reason": None if decision is None else decision.reason, "rule": CI_AGAINST_BUDGET}
        self.checks.append(entry)
        values: dict[str, float] = {} if multiple is None else {"admission/multiple": multiple}
        if verdict is not None and budget is not None:
            values["admission/within_budget"] = float(verdict == "pass")
            values["admission/budget"] = budget
        self.trainer.reporter.log(step, values)
        if verdict in LEFT and self.left_at is None:
            self.left_at = step
            log.warning("admission: at step %d the rollout config left the budget %.3gx: %s",
                        step, budget, decision.reason if decision else "")
        return entry

    def report(self) -> dict:
        return {"checks": self.checks, "left_budget_at_step": self.left_at, "rule": CI_AGAINST_BUDGET}

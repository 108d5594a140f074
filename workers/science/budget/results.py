"""The typed results of the budget kinds (``noise-solve``, ``calibration``, ``admission``):
pydantic and the standard library only, so the web process stores and reads them.

:class:`CalibratedBudget` is what a calibration establishes: the budget's fields
(:class:`~.config.BudgetFields`, declared once) with the evidence behind them (the curve,
the BF16 baseline, the bracket and the rule).  The product stores exactly that as a
``MismatchBudget`` row.
"""
from __future__ import annotations

from typing import Any, ClassVar

from ..results import CI, JobResult, MismatchReport, UnitOfMultiple
from .arithmetic import Verdict
from .config import BudgetFields, BudgetSpec


class NoiseTrial(JobResult):
    sigma: float
    multiple: float
    ci: CI


class NoiseSolveResult(JobResult):
    """The ``noise-solve`` job: the weight-noise sigma that realises a target multiple, with
    the multiple measured at it and every trial of the search."""

    target_multiple: float
    sigma: float
    noise_seed: int
    multiple: float
    multiple_ci: CI
    trials: list[NoiseTrial]
    metric: str
    reference_value: float | None
    unit: UnitOfMultiple
    task: str
    model: str
    prompts: int


class CurveLevel(JobResult):
    """One rung of a calibration curve, judged (:class:`~.arithmetic.LevelJudgement`)."""

    target: float
    multiple: float
    multiple_ci: CI
    setting: dict[str, Any]
    accuracies: list[float]
    accuracy_mean: float
    accuracy_sd: float
    drop_points: float
    allowance_points: float
    within: bool


class Baseline(JobResult):
    """The BF16 baseline's final accuracies over the seeds."""

    accuracies: list[float]
    mean: float
    sd: float


class CalibratedBudget(BudgetFields):
    """A budget with its evidence: what the product stores for a calibration."""

    model_config = BudgetFields.model_config | {"frozen": False}

    teacher: str | None
    bracket: tuple[float | None, float | None]
    curve: list[CurveLevel]
    baseline: Baseline
    rule: str


class CalibrationResult(CalibratedBudget, JobResult):
    """The ``calibration`` job: the budget, and how the ladder was run to find it."""

    steps: int
    seeds: int
    seed_z: float
    extensions: int
    noise: list[dict[str, Any]]


class AdmissionVerdict(MismatchReport):
    """The ``admission`` job: the mismatch report of the config, judged against a budget."""

    optional_keys: ClassVar[frozenset[str]] = MismatchReport.optional_keys | {
        "drift", "recipe", "recipe_candidates", "pareto_front", "recipe_margin", "layers", "recipe_skipped"}

    budget: BudgetSpec
    verdict: Verdict
    reason: str
    margin: float | None
    prompts_to_decide: int | None
    extend: dict[str, int] | None
    checkpoint_hash: str | None
    kv_capacity_gain: float
    drift: dict[str, Any] | None = None
    recipe: dict[str, Any] | None = None
    recipe_candidates: list[dict[str, Any]] | None = None
    pareto_front: list[dict[str, Any]] | None = None
    recipe_margin: float | None = None
    layers: list[dict[str, Any]] | None = None
    recipe_skipped: list[dict[str, Any]] | None = None


__all__ = ["AdmissionVerdict", "Baseline", "CalibratedBudget", "CalibrationResult", "CurveLevel", "NoiseSolveResult",
           "NoiseTrial"]

"""The typed results of the budget kinds (``noise-solve``, ``calibration``, ``admission``):
pydantic and the standard library only, so the web process stores and reads them.

:class:`CalibratedBudget` is what a calibration establishes: the budget's fields
(:class:`~.config.BudgetFields`, declared once) with the evidence behind them (the curve,
the BF16 baseline, the bracket and the rule).  The product stores exactly that as a
``MismatchBudget`` row.
"""
from __future__ import annotations

from typing import Any, ClassVar, Literal

from ..results import CI, JobResult, MismatchReport, UnitOfMultiple
from .arithmetic import BudgetStatus, Judgement, Verdict
from .config import BudgetFields, BudgetSpec

#: A calibration's outcome: a budget's status, or ``uninformative`` (no budget: the baseline
#: did not learn, so no drop could be told from no learning).
CalibrationStatus = BudgetStatus | Literal["uninformative"]


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
    """One rung of a calibration curve, judged (:class:`~.arithmetic.LevelJudgement`).
    Calibrations before the strict rule carried ``allowance_points``; later ones the drop's
    interval and the judgement."""

    optional_keys = frozenset({"allowance_points", "drop_ci", "judgement"})

    target: float
    multiple: float
    multiple_ci: CI
    setting: dict[str, Any]
    accuracies: list[float]
    accuracy_mean: float
    accuracy_sd: float
    drop_points: float
    within: bool
    allowance_points: float | None = None
    drop_ci: list[float | None] | None = None
    judgement: Judgement | None = None


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


class Learned(JobResult):
    """What the BF16 baseline learned over the starting checkpoint (:class:`~.arithmetic.Learning`)."""

    start_mean: float
    final_mean: float
    gain_points: float
    gain_low: float | None
    required_points: float
    seeds: int
    informative: bool


class CalibrationResult(CalibratedBudget, JobResult):
    """The ``calibration`` job: the budget, and how the ladder was run to find it.  An
    ``uninformative`` one (the baseline did not learn) has no budget and is never stored as
    one; ``message`` says what to change."""

    optional_keys = frozenset({"seed_z", "confidence", "learning", "bisections", "resolution", "message"})

    status: CalibrationStatus  # type: ignore[assignment]
    steps: int
    seeds: int
    extensions: int
    noise: list[dict[str, Any]]
    seed_z: float | None = None  # the old lenient rule's; absent from calibrations under the strict rule
    confidence: float | None = None
    learning: Learned | None = None
    bisections: int | None = None
    resolution: float | None = None
    message: str | None = None

    @property
    def stores_budget(self) -> bool:
        return self.status != "uninformative"


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


__all__ = ["AdmissionVerdict", "Baseline", "CalibratedBudget", "CalibrationResult", "CalibrationStatus", "CurveLevel",
           "Learned", "NoiseSolveResult", "NoiseTrial"]

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
from ..verdicts import BudgetStatus, Verdict
from .arithmetic import Agreement, Judgement
from .config import BudgetFields, BudgetSpec, LadderRung
from .zones import CurveReading, read_curve

#: A calibration's outcome: a budget's status, ``uninformative`` (no budget: the baseline did
#: not learn, so no drop could be told from no learning) or ``undecided`` (no budget: the
#: lowest level stayed inconclusive at the seed cap, its seeds spread too much for the
#: tolerance).  Only ``reached`` and ``not_reached`` store a budget.
CalibrationStatus = BudgetStatus | Literal["uninformative", "undecided"]
#: The outcomes that store no budget; ``message`` says why and what to change.
NO_BUDGET = ("uninformative", "undecided", "below_ladder")


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


class NoiseAtMatch(JobResult):
    """One noise draw trained at a deployed source's multiple, against the source."""

    accuracies: list[float]
    difference_points: float  # the noise runs' mean accuracy minus the source's
    difference_ci: list[float | None]
    agreement: Agreement


class TransferRow(JobResult):
    """A transfer check's row: a deployed source, its measured multiple, and whether noise of
    the same multiple (re-drawn, persistent) trains to the same accuracy."""

    optional_keys = frozenset({"sigma", "noise_multiple", "accuracies", "redrawn", "persistent", "message"})

    name: str
    kind: str
    rollout: dict[str, Any]
    async_k: int
    multiple: float | None
    multiple_ci: CI
    sigma: float | None = None
    noise_multiple: float | None = None
    accuracies: list[float] | None = None  # the source's own runs
    redrawn: NoiseAtMatch | None = None
    persistent: NoiseAtMatch | None = None
    message: str | None = None

    def agreement(self, draw: str) -> Agreement | None:
        at = getattr(self, draw, None)
        return at.agreement if at is not None else None


class CalibratedBudget(BudgetFields):
    """A budget with its evidence: what the product stores for a calibration."""

    model_config = BudgetFields.model_config | {"frozen": False}

    teacher: str | None
    bracket: tuple[float | None, float | None]
    curve: list[CurveLevel]
    baseline: Baseline
    rule: str
    transfer: list[TransferRow] = []

    def reading(self) -> CurveReading:
        """What its curve shows: both criteria's budgets, the harmful zone, what would decide
        the zone between (:mod:`.zones`)."""
        return read_curve([LadderRung.of_curve(c.model_dump(mode="json")) for c in self.curve], self.tolerance)


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
    """The ``calibration`` job: the budget, and how the ladder was run to find it.  One that
    ends in :data:`NO_BUDGET` (the baseline did not learn, or the lowest level is not within)
    has no budget and is never stored as one; ``message`` says why and what to change."""

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
        return self.status not in NO_BUDGET


class ToDecideCalibration(JobResult):
    """The calibration that would decide a check that is not shown safe (:class:`~.zones.ToDecide`):
    in words, as a command, and the levels and seed cap a re-run of the calibration takes."""

    words: str
    command: str
    levels: list[float]
    max_seeds: int


class AdmissionVerdict(MismatchReport):
    """The ``admission`` job: the mismatch report of the config, judged against a budget."""

    optional_keys: ClassVar[frozenset[str]] = MismatchReport.optional_keys | {
        "drift", "recipe", "recipe_candidates", "pareto_front", "recipe_margin", "layers", "recipe_skipped",
        "calibrated_with", "transfer_warnings", "absolute_budget", "to_decide"}

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
    calibrated_with: str | None = None  # the budget's source of mismatch, in words
    decided_on: Literal["multiple", "absolute"] = "multiple"  # absolute: the unit measured zero
    absolute_budget: float | None = None  # the budget in the metric's units (multiple x the unit at calibration)
    transfer_warnings: list[str] | None = None  # the config's sources never shown to transfer to the budget
    to_decide: ToDecideCalibration | None = None  # not shown safe: the calibration that would decide it


__all__ = ["NO_BUDGET", "AdmissionVerdict", "Baseline", "CalibratedBudget", "CalibrationResult", "CalibrationStatus",
           "CurveLevel", "Learned", "NoiseAtMatch", "NoiseSolveResult", "NoiseTrial", "ToDecideCalibration",
           "TransferRow"]

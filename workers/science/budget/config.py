"""Configs of the budget kinds (torch-free: the web process validates with them).

``noise-solve``: the weight-noise sigma that realises a target multiple.  ``calibration``:
a model's mismatch budget from equal-step training runs at a ladder of multiples.
``admission``: a rollout config's multiple against a budget, with a verdict.  A budget
travels as :class:`BudgetSpec` (the web fills it from a stored budget's id, the CLI reads
it from the JSON file the budget page offers).
"""
from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import Field, field_validator, model_validator

from ..config import MetricName, MismatchJobConfig, RolloutConfig, TrainerDtype, UnitEngine, _Strict
from ..results import unit_pair
from ..training.config import TrainJobConfig
from ..verdicts import BudgetStatus
from .arithmetic import Judgement
from .zones import Criterion, ToDecide, budget_under, first_harmful, to_decide

MAX_LEVELS = 16
MAX_TRANSFER_SOURCES = 8

#: The mismatch a calibration's ladder is made of: weight noise re-drawn every step, or drawn
#: once per run (a fixed bias, as quantization is).
CalibrationSource = Literal["redrawn-noise", "persistent-noise"]


def calibration_source_in_words(source: str | None) -> str:
    """A budget's source in words (None: calibrated before sources were named, with re-drawn noise)."""
    return "weight noise drawn once per run" if source == "persistent-noise" else "weight noise re-drawn every step"


class TransferSource(_Strict):
    """A deployed source of mismatch for a calibration's transfer check: a rollout config
    (quantized), a staleness ``async_k``, or both.  The check measures its multiple, trains
    at it and at noise of the same multiple, and says whether accuracy agrees."""

    name: str = Field(..., min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.+-]+$")
    rollout: RolloutConfig = Field(default_factory=RolloutConfig, description="The rollout config (no noise).")
    async_k: int = Field(0, ge=0, le=64, description="Rollouts from the weights of k steps ago (staleness k).")

    @model_validator(mode="after")
    def _deployed(self) -> "TransferSource":
        if self.rollout.noise_sigma or self.rollout.staleness:
            raise ValueError(f"transfer source {self.name!r}: give a deployed source (quantization in rollout, "
                             "staleness as async_k), not noise_sigma or rollout.staleness")
        if not self.rollout.mismatch_sources and not self.async_k:
            raise ValueError(f"transfer source {self.name!r}: the BF16 engine synchronously has no mismatch to "
                             "transfer; quantize the rollout or set async_k")
        return self

    @property
    def kind(self) -> str:
        """``quantization``, ``staleness`` or ``quantization+staleness``."""
        return "+".join(self.rollout.mismatch_sources + (("staleness",) if self.async_k else ()))


class NoiseSolveJobConfig(MismatchJobConfig):
    """The weight-noise sigma that realises a target multiple of the BF16 engine's mismatch."""

    target_multiple: float = Field(..., gt=1.0, le=1e9, description="The multiple to realise.")
    start_sigma: float = Field(0.01, gt=0.0, le=10.0, description="First sigma tried (relative to each tensor's RMS).")
    rel_tolerance: float = Field(0.25, gt=0.0, le=10.0, description="Stop when the measured multiple is within this "
                                                                    "fraction of the target (or its CI holds it).")
    max_iterations: int = Field(8, ge=1, le=50)
    noise_seed: int = Field(0, ge=0, le=2**31 - 1)
    target_ci: float = Field(0.0, ge=0.0, le=10.0, description="As the mismatch job's; 0: one round of prompts.")

    def measurement(self) -> MismatchJobConfig:
        return MismatchJobConfig.model_validate(self.model_dump(include=set(MismatchJobConfig.model_fields)))


class CalibrationJobConfig(TrainJobConfig):
    """A model's mismatch budget: equal-step training runs at a ladder of injected multiples."""

    levels: list[float] = Field([10.0, 100.0, 1000.0], min_length=2, max_length=MAX_LEVELS,
                                description="Target multiples of the ladder (ascending, each above 1); each is "
                                            "realised by weight noise solved to hit it, and measured.")
    seeds: int = Field(3, ge=2, le=16, description="Training seeds per level and for the BF16 baseline to start "
                                                   "with (at least 2: one seed says nothing about the spread).")
    tolerance: float = Field(1.4, ge=0.0, le=100.0, description="Accuracy drop (points) a level may show and "
                                                                "still be within budget.")
    confidence: float = Field(0.95, ge=0.5, lt=1.0, description="Of the drop's interval: a level is within only "
                                                                "when the interval's upper end is at most the "
                                                                "tolerance.")
    max_seeds: int = Field(6, ge=2, le=32, description="An inconclusive level (its interval straddles the "
                                                       "tolerance) and the baseline get more seeds, one at a time, "
                                                       "up to this many; a level still inconclusive ends the budget "
                                                       "below it.")
    resolution: float = Field(1.5, gt=1.0, le=1e3, description="Bisect between the last level within and the "
                                                               "first not (in log multiple) until they are within "
                                                               "this factor of each other.")
    max_bisections: int = Field(4, ge=0, le=12, description="At most this many bisection levels.")
    min_gain: float | None = Field(None, ge=0.0, le=100.0,
                                   description="Points the BF16 baseline must gain over the starting checkpoint "
                                               "(the lower end of the gain's interval), else the calibration is "
                                               "uninformative and stores no budget; default: the tolerance.")
    metric: MetricName = Field("k3", description="The metric the multiple is taken on.")
    reference_engine: UnitEngine = Field("auto", description="The BF16 engine that is the unit of the multiple.")
    measure_prompts: int = Field(128, ge=8, le=65_536, description="Prompts per multiple measurement.")
    extend_factor: float = Field(10.0, gt=1.0, le=1e3, description="A ladder that does not bracket the budget "
                                                                   "gets one more level this factor beyond its end.")
    max_extensions: int = Field(2, ge=0, le=4, description="How often the ladder may be extended before the "
                                                           "calibration reports 'not reached' or refuses.")
    noise_rel_tolerance: float = Field(0.25, gt=0.0, le=10.0)
    unit_trainer: TrainerDtype = Field("auto", description="The trainer half of the unit pair the multiples are "
                                                          "measured against (as the mismatch job's trainer_dtype).")
    transfer: list[TransferSource] = Field(default_factory=list, max_length=MAX_TRANSFER_SOURCES,
                                           description="Deployed sources to check the budget's scale transfers "
                                                       "to: each is measured, trained at, and compared with noise "
                                                       "(re-drawn and persistent) of the same multiple.")

    @field_validator("levels")
    @classmethod
    def _ascending(cls, levels: list[float]) -> list[float]:
        if any(v <= 1.0 for v in levels):
            raise ValueError("every level must be a multiple above 1 (1 is the BF16 engine itself)")
        if any(b <= a for a, b in zip(levels, levels[1:], strict=False)):
            raise ValueError("levels must be strictly ascending")
        return levels

    @model_validator(mode="before")
    @classmethod
    def _no_seed_z(cls, data: Any) -> Any:
        if isinstance(data, dict) and "seed_z" in data:
            raise ValueError("seed_z was removed: a level is judged on its drop's confidence interval (`confidence`), "
                             "so more seed noise can no longer widen what passes")
        return data

    @model_validator(mode="after")
    def _base_rollout(self) -> "CalibrationJobConfig":
        if self.max_seeds < self.seeds:
            raise ValueError(f"max_seeds ({self.max_seeds}) must be at least seeds ({self.seeds})")
        if self.rollout.noise_sigma:
            raise ValueError("rollout.noise_sigma: the calibration sets the noise of each level; leave it 0")
        names = [t.name for t in self.transfer]
        if len(set(names)) != len(names):
            raise ValueError(f"transfer: source names must be unique, got {names}")
        return self

    @property
    def source(self) -> str:
        """The calibration's source of mismatch (:data:`CalibrationSource`)."""
        return f"{self.noise_draw}-noise"

    @property
    def required_gain(self) -> float:
        return self.tolerance if self.min_gain is None else self.min_gain

    def method_label(self) -> str:
        """e.g. ``opd:full``, ``opd:sampled+tis``, ``grpo``, ``grpo+tis``."""
        if self.method == "grpo":
            return "grpo+tis" if self.tis else "grpo"
        return f"opd:{self.loss}" + ("" if self.correction == "none" else f"+{self.correction}")

    def training_config(self, **update: Any) -> dict:
        """The config of one of the ladder's training runs."""
        own = set(CalibrationJobConfig.model_fields) - set(TrainJobConfig.model_fields)
        data = self.model_dump(mode="json", exclude=own | {"out", "resume_from"})
        data.update(update)
        return data


class BudgetFields(_Strict):
    """A calibrated mismatch budget: the one declaration of its fields.  The calibration's
    result carries them, the admission check takes them (:class:`BudgetSpec`), the product
    stores them as a ``MismatchBudget`` row and serves them over its API."""

    checkpoint: str = Field(..., max_length=1000, description="The checkpoint the budget was calibrated on.")
    checkpoint_hash: str | None = Field(None, max_length=128)
    task: str = Field(..., max_length=1000)
    method: str = Field(..., max_length=40)
    metric: MetricName
    unit_engine: Literal["hf", "vllm"]
    unit_trainer: Literal["fp32", "bf16", "fp16"] | None = Field(
        None, description="The trainer half of the unit pair (None: calibrated before the pair was named, against an "
                          "fp32 trainer).")
    reference_value: float | None = None
    source: CalibrationSource | None = Field(
        None, description="The mismatch the ladder was made of (None: calibrated before sources were named, with "
                          "re-drawn noise).")
    shown_to_transfer: list[str] = Field(
        default_factory=list, max_length=MAX_TRANSFER_SOURCES,
        description="The deployed sources (quantization, staleness) whose accuracy at a matched multiple agreed with "
                    "this source's within the tolerance.")
    budget: float | None = Field(..., description="The budget multiple (None: below the lowest level; with status "
                                                  "not_reached, a lower bound).")
    status: BudgetStatus
    step: int = Field(0, ge=0)
    tolerance: float = Field(1.4, ge=0.0)

    @property
    def absolute_budget(self) -> float | None:
        """The budget in the metric's own units (the budget multiple times the unit's value at
        calibration): what an admission decides on when its own unit measures zero."""
        if self.budget is None or self.reference_value is None or self.reference_value <= 0:
            return None
        return self.budget * self.reference_value

    @property
    def trainer(self) -> str:
        """The unit pair's trainer half: fp32 where the budget records none (calibrated before
        the pair was named)."""
        return self.unit_trainer or "fp32"

    @property
    def pair(self) -> str:
        """The unit pair its multiples are of, in words."""
        return unit_pair(self.unit_engine, self.trainer)

    @property
    def calibrated_with(self) -> str:
        """The calibration's source in words."""
        return calibration_source_in_words(self.source)


class LadderRung(_Strict):
    """One judged level of the calibration's ladder, as an admission check needs it to place a
    multiple in the calibration's zones (:mod:`.zones`)."""

    target: float
    multiple: float
    seeds: int = Field(..., ge=0)
    drop_points: float
    within: bool = Field(..., description="Within under the strict rule (or, calibrated before it, the old one).")
    judgement: Judgement | None = Field(None, description="within, inconclusive or beyond (None: calibrated "
                                                          "before levels were judged on their drop's interval).")

    @classmethod
    def of_curve(cls, level: dict[str, Any]) -> "LadderRung":
        """The rung of a stored curve level (``CurveLevel``'s JSON)."""
        return cls(target=level["target"], multiple=level["multiple"], seeds=len(level["accuracies"]),
                   drop_points=level["drop_points"], within=level["within"], judgement=level.get("judgement"))


class BudgetSpec(BudgetFields):
    """A calibrated budget, as an admission check needs it: the budget under the criterion
    its team chose (``budget`` and ``status``), and the judged ladder that places a multiple
    above it (not shown safe, or shown harmful: :mod:`.zones`)."""

    id: int | None = Field(None, description="The stored budget's id (set by the product).")
    criterion: Criterion = Field("strict", description="The criterion budget and status are under: strict (the "
                                                       "upper end of the drop's 95 % interval) or mean (the "
                                                       "paper's: the mean drop) at most the tolerance.")
    ladder: list[LadderRung] = Field(default_factory=list, max_length=4 * MAX_LEVELS,
                                     description="The calibration's judged levels (empty: a spec from before the "
                                                 "zones; then nothing is shown harmful).")

    @property
    def harmful(self) -> float | None:
        """Where the shown-harmful zone starts: the first level whose drop lay wholly beyond
        the tolerance (None: not shown)."""
        return first_harmful(self.ladder)

    def under(self, criterion: Criterion) -> tuple[float | None, BudgetStatus]:
        """The budget and its status under ``criterion``, from the ladder (the spec's own
        where it has no ladder)."""
        if not self.ladder or criterion == self.criterion:
            return self.budget, self.status
        budget, status, _ = budget_under(self.ladder, criterion, self.tolerance)
        return budget, status

    def to_decide(self, up_to: float | None = None) -> ToDecide | None:
        """What calibration would decide the multiples up to ``up_to`` (default: the zone above
        the budget); None where nothing there is undecided or the spec has no ladder."""
        if not self.ladder:
            return None
        return to_decide(self.ladder, self.budget, self.harmful, up_to)


class AdmissionJobConfig(MismatchJobConfig):
    """Admission check: the config's multiple against a mismatch budget, with a verdict."""

    budget: BudgetSpec | int = Field(..., description="The budget: in the product, the id of one of the team's "
                                                   "budgets; on the command line, the budget's JSON file.")
    drift: bool = Field(True, description="Also measure prefix drift (first divergence, mismatch after it).")
    drift_prompts: int = Field(32, ge=1, le=4096)
    recipe: bool = Field(False, description="Also scan per-layer sensitivity and name the cheapest FP8 recipe "
                                            "within the budget (slower).")
    recipe_margin: float = Field(1.5, ge=1.0, le=100.0, description="The recipe must pass with budget / multiple "
                                                                    "at least this.")

    @model_validator(mode="before")
    @classmethod
    def _budget_metric(cls, data: Any) -> Any:
        """The metric is the budget's: given explicitly, it must agree."""
        if isinstance(data, dict) and isinstance(data.get("budget"), dict):  # an id is resolved by the product
            metric = data["budget"].get("metric")
            if "metric" in data and metric is not None and data["metric"] != metric:
                raise ValueError(f"metric {data['metric']!r} differs from the budget's metric {metric!r}: a multiple "
                                 "is only comparable to a budget on the same metric")
            if metric in get_args(MetricName):  # an unknown one is the budget's problem, reported there
                data = {**data, "metric": metric}
        return data

"""Mismatch budgets: what a calibration found a checkpoint tolerates, per training method.

A budget is immutable once computed.  A newer calibration of the same (checkpoint, task,
method, metric) in the same team supersedes the older one (``superseded_by``), never
overwrites it: admission checks and approvals keep pointing at the budget they used.
"""
from __future__ import annotations

from functools import cached_property

from django.conf import settings
from django.db import models

from workers.science.budget.config import BudgetFields, BudgetSpec, LadderRung, calibration_source_in_words
from workers.science.budget.zones import CurveReading, ToDecide, read_curve
from workers.science.results import unit_pair


class ImmutableBudget(Exception):
    pass


class MismatchBudget(models.Model):
    """A calibrated budget: the columns are the fields of
    :class:`~workers.science.budget.results.CalibratedBudget` (the bracket in two columns)."""

    #: The fields a newer calibration must share with a budget to supersede it (with the team).
    SAME_BUDGET = ("checkpoint", "task", "method", "metric")

    team = models.ForeignKey("teams.Team", on_delete=models.PROTECT, related_name="budgets")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    calibration_job = models.OneToOneField("jobs.Job", on_delete=models.SET_NULL, null=True, related_name="budget")

    checkpoint = models.CharField(max_length=1000)
    checkpoint_hash = models.CharField(max_length=128, blank=True)
    teacher = models.CharField(max_length=1000, blank=True)
    task = models.CharField(max_length=1000)
    method = models.CharField(max_length=40)
    metric = models.CharField(max_length=20)
    unit_engine = models.CharField(max_length=10)
    # The unit pair's trainer half; null: calibrated before the pair was named (an fp32 trainer).
    unit_trainer = models.CharField(max_length=10, null=True, blank=True)
    reference_value = models.FloatField(null=True)
    # The ladder's mismatch (redrawn-noise | persistent-noise); null: calibrated before sources were named (redrawn).
    source = models.CharField(max_length=20, null=True, blank=True)
    shown_to_transfer = models.JSONField(default=list)  # deployed sources whose accuracy agreed at a matched multiple
    transfer = models.JSONField(default=list)  # the transfer check's rows (TransferRow)
    step = models.PositiveIntegerField(default=0)
    tolerance = models.FloatField()
    curve = models.JSONField()  # per level: multiple with CI, setting, per-seed accuracies, mean, sd, drop, within
    baseline = models.JSONField()  # BF16 baseline accuracies, mean, sd
    budget = models.FloatField(null=True)  # None: the lowest level already failed
    status = models.CharField(max_length=20)  # reached | not_reached
    bracket_low = models.FloatField(null=True)
    bracket_high = models.FloatField(null=True)
    rule = models.TextField()
    superseded_by = models.ForeignKey("self", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["team", "checkpoint", "task", "method", "metric"])]

    def __str__(self) -> str:
        value = "not reached" if self.status == "not_reached" else f"{self.budget:.3g}x"
        return f"budget #{self.pk} {self.method} on {self.checkpoint}: {value}"

    def save(self, *args, **kwargs):
        if not self._state.adding and set(kwargs.get("update_fields") or ()) != {"superseded_by"}:
            raise ImmutableBudget("a budget is immutable once computed; calibrate again to supersede it")
        super().save(*args, **kwargs)

    @property
    def pair(self) -> str:
        """The unit pair its multiples are of, in words."""
        return unit_pair(self.unit_engine, self.unit_trainer)

    @property
    def calibrated_with(self) -> str:
        """The mismatch its ladder was made of, in words."""
        return calibration_source_in_words(self.source)

    @property
    def is_current(self) -> bool:
        return self.superseded_by_id is None

    @property
    def ladder(self) -> list[LadderRung]:
        """The curve's judged levels (a curve stored before judgements has none judged
        ``beyond``: nothing there is shown harmful)."""
        return [LadderRung.of_curve(level) for level in self.curve]

    @cached_property
    def reading(self) -> CurveReading:
        """What its curve shows: both criteria's budgets, the harmful zone, what would decide
        the zone between (``workers.science.budget.zones``)."""
        return read_curve(self.ladder, self.tolerance)

    @property
    def harmful(self) -> float | None:
        """Where the shown-harmful zone starts (None: no level was shown to hurt)."""
        return self.reading.harmful

    @property
    def mean_budget(self) -> float | None:
        """The paper's criterion on the same curve: the budget where the mean drop is at most
        the tolerance."""
        return self.reading.mean

    @property
    def mean_status(self) -> str:
        return self.reading.mean_status

    @property
    def decides(self) -> str:
        """The criterion the team's admission checks are judged under."""
        return self.team.budget_criterion

    @property
    def to_decide(self) -> ToDecide | None:
        """What calibration would decide the not-shown-safe zone above the (strict) budget."""
        return self.reading.undecided

    def spec(self, criterion: str = "strict") -> dict:
        """The budget as an admission check takes it (``BudgetSpec``: the declared budget
        fields, read off this row, its id and judged ladder), with ``budget`` and ``status``
        under ``criterion`` (the team's)."""
        fields = {name: getattr(self, name) for name in BudgetFields.model_fields}
        spec = BudgetSpec.model_validate({**fields, "id": self.pk, "checkpoint_hash": self.checkpoint_hash or None,
                                          "ladder": self.ladder})
        budget, status = spec.under("mean" if criterion == "mean" else "strict")
        return spec.model_copy(update={"criterion": criterion, "budget": budget, "status": status}).model_dump(
            mode="json")

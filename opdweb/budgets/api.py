"""Mismatch budgets over the API (read-only: a budget is made by a calibration job)."""
from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from opdweb.api import Routes
from opdweb.budgets.access import visible_budget
from opdweb.budgets.models import MismatchBudget
from opdweb.teams.access import teams_of
from workers.science.budget.config import BudgetFields

routes = Routes()


class BudgetOut(BudgetFields):
    """A stored budget: the budget's declared fields (:class:`BudgetFields`) as its row
    holds them, with the row's own (team, times, the calibration's evidence)."""

    model_config = ConfigDict(from_attributes=True, frozen=True, extra="forbid")

    id: int
    team: str
    created_at: datetime
    calibration_job_id: int | None
    checkpoint_hash: str  # type: ignore[assignment]  # the row stores '' where the science has None
    teacher: str
    bracket_low: float | None
    bracket_high: float | None
    curve: list[dict[str, Any]]
    baseline: dict[str, Any]
    rule: str
    superseded_by_id: int | None
    harmful: float | None = Field(description="Where the shown-harmful zone starts: the first level whose drop "
                                              "interval lay wholly beyond the tolerance (null: not shown).")
    mean_budget: float | None = Field(description="The paper's criterion on the same curve: the budget where the "
                                                  "mean drop is at most the tolerance (`budget` is the strict one).")
    mean_status: str
    decides: str = Field(description="The criterion the team's admission checks are judged under: strict or mean.")

    @field_validator("team", mode="before")
    @classmethod
    def _team_slug(cls, team):
        return getattr(team, "slug", team)


class BudgetFilter(BaseModel):
    model_config = ConfigDict(extra="forbid")

    checkpoint: str | None = Field(None, max_length=1000)
    method: str | None = Field(None, max_length=40)
    current: bool = Field(False, description="only budgets no newer calibration superseded")
    limit: int = Field(100, ge=1, le=1000)


@routes.route("GET", "budgets", summary="Mismatch budgets of your teams, newest first", query=BudgetFilter,
              response=list[BudgetOut])
def list_budgets(request, query: BudgetFilter):
    budgets = MismatchBudget.objects.filter(team__in=teams_of(request.user)).select_related("team")
    if query.checkpoint:
        budgets = budgets.filter(checkpoint=query.checkpoint)
    if query.method:
        budgets = budgets.filter(method=query.method)
    if query.current:
        budgets = budgets.filter(superseded_by__isnull=True)
    return list(budgets[: query.limit])


@routes.route("GET", "budgets/<int:budget_id>", summary="One budget with its calibration curve", response=BudgetOut,
              errors=(404,))
def get_budget(request, budget_id: int):
    return visible_budget(request.user, budget_id)


@routes.route("GET", "budgets/<int:budget_id>/spec", summary="The budget as `python -m workers admit --budget FILE` "
              "takes it, under its team's criterion", response=dict[str, Any], errors=(404,))
def budget_spec(request, budget_id: int):
    budget = visible_budget(request.user, budget_id)
    return budget.spec(budget.team.budget_criterion)

"""Budget pages: every budget of your teams, and one budget's curve with the admission
checks that used it placed on it."""
from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.shortcuts import render

from opdweb.budgets.access import visible_budget
from opdweb.budgets.models import MismatchBudget
from opdweb.jobs.models import Job, JobState
from opdweb.jobs.results import typed_result
from opdweb.teams.access import teams_of
from workers.science.budget.results import AdmissionVerdict
from workers.science.kinds import Kind
from workers.science.verdicts import in_words


@login_required
def budget_list(request):
    budgets = MismatchBudget.objects.filter(team__in=teams_of(request.user)).select_related("team", "calibration_job")
    return render(request, "budgets/list.html", {"budgets": budgets[:500]})


def admission_points(budget: MismatchBudget) -> list[dict]:
    """Every finished admission check against this budget: its config, multiple, CI, verdict."""
    jobs = Job.objects.filter(team=budget.team, kind=Kind.ADMISSION, state=JobState.SUCCEEDED,
                              config__budget__id=budget.pk).order_by("-created_at")[:200]
    checks = [(j, typed_result(j)) for j in jobs]
    return [{"job": j.pk, "name": j.name or f"#{j.pk}", "verdict": r.verdict, "multiple": r.multiple,
             "words": in_words(r.verdict, with_zones=bool(r.budget.ladder)), "ci": r.multiple_ci,
             "rollout": r.rollout} for j, r in checks if isinstance(r, AdmissionVerdict)]


@login_required
def budget_detail(request, budget_id: int):
    budget = visible_budget(request.user, budget_id)
    by_step = MismatchBudget.objects.filter(team=budget.team, task=budget.task, method=budget.method,
                                            metric=budget.metric).order_by("step", "-created_at")
    checks = admission_points(budget)
    chart = {"curve": budget.curve, "baseline": budget.baseline, "tolerance": budget.tolerance,
             "budget": budget.budget, "status": budget.status, "checks": checks, "harmful": budget.harmful,
             "mean_budget": budget.mean_budget}
    return render(request, "budgets/detail.html", {"budget": budget, "by_step": by_step, "checks": checks,
                                                   "chart": chart})

"""Who may see a budget: members of its team, any role.  Anyone else gets a 404 (other
teams' budgets are never revealed)."""
from __future__ import annotations

from django.http import Http404

from opdweb.budgets.models import MismatchBudget
from opdweb.teams.access import teams_of


def visible_budget(user, budget_id: int) -> MismatchBudget:
    budget = (MismatchBudget.objects.filter(pk=budget_id, team__in=teams_of(user))
              .select_related("team", "calibration_job").first())
    if budget is None:
        raise Http404(f"budget #{budget_id} not found")
    return budget

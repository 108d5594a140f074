"""The new-job form filled for an admission check from a config's page: the config, and
the chosen budget's checkpoint, task and unit engine, so the check is comparable to it."""
from __future__ import annotations

import json

from django.http import QueryDict

from opdweb.budgets.access import visible_budget
from opdweb.jobs.views import FORM_PREFILLS
from opdweb.rollouts.access import visible_config
from workers.science.kinds import Kind


def admission_form(user, params: QueryDict, example: dict) -> dict:
    """``?budget=<id>[&rollout=<config id>]``: both must be visible to the user (else 404)."""
    budget_id, rollout_id = params.get("budget", ""), params.get("rollout", "")
    if not budget_id.isdigit():
        return {}
    budget = visible_budget(user, int(budget_id))
    config = {**example, "model": budget.checkpoint, "task": budget.task, "reference_engine": budget.unit_engine,
              "budget": budget.pk}
    name = f"admission vs budget #{budget.pk}"
    if rollout_id.isdigit():
        record = visible_config(user, int(rollout_id))
        config["rollout"] = record.config
        name = f"{record.name} vs budget #{budget.pk}"
    return {"kind": Kind.ADMISSION.value, "config": json.dumps(config, indent=2), "name": name,
            "team": budget.team.slug}


FORM_PREFILLS[Kind.ADMISSION] = admission_form

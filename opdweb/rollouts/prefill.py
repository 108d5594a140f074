"""The new-job form filled from a config's page: an admission check (the config, and the
chosen budget's checkpoint, task and unit engine, so the check is comparable to it), or a
measurement of the config's multiple on a checkpoint, which needs no budget."""
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


def mismatch_form(user, params: QueryDict, example: dict) -> dict:
    """``?rollout=<config id>[&model=<checkpoint>]``: the config's multiple of BF16 on the
    checkpoint (the example's when none is named); the config must be visible (else 404)."""
    rollout_id = params.get("rollout", "")
    if not rollout_id.isdigit():
        return {}
    record = visible_config(user, int(rollout_id))
    config = {**example, "rollout": record.config}
    if params.get("model", "").strip():
        config["model"] = params["model"].strip()
    return {"kind": Kind.MISMATCH.value, "config": json.dumps(config, indent=2), "name": f"{record.name}: multiple",
            "team": record.team.slug}


FORM_PREFILLS[Kind.ADMISSION] = admission_form
FORM_PREFILLS[Kind.MISMATCH] = mismatch_form

"""Where the budgets app hooks into jobs: a succeeded calibration is stored as a budget
(superseding the team's previous one for the same checkpoint, task, method and metric), and
an admission config's budget id is replaced by the budget itself."""
from __future__ import annotations

from django.dispatch import receiver

from opdweb.budgets.models import MismatchBudget
from opdweb.jobs.actions import CONFIG_RESOLVERS
from opdweb.sandbox import OutsideSandbox, confine_model
from opdweb.jobs.signals import job_succeeded
from opdweb.refusals import Refused


@receiver(job_succeeded)
def store_calibrated_budget(sender, job, **kwargs) -> None:
    if job.kind != "calibration":
        return
    r = job.result
    same = dict(team=job.team, checkpoint=r["checkpoint"], task=r["task"], method=r["method"], metric=r["metric"])
    previous = list(MismatchBudget.objects.select_for_update().filter(superseded_by__isnull=True, **same))
    bracket = r["bracket"]
    budget = MismatchBudget.objects.create(
        created_by=job.created_by, calibration_job=job, checkpoint_hash=r["checkpoint_hash"] or "",
        teacher=r["teacher"] or "", unit_engine=r["unit_engine"], reference_value=r["reference_value"], step=r["step"],
        tolerance=r["tolerance"], curve=r["curve"], baseline=r["baseline"], budget=r["budget"], status=r["status"],
        bracket_low=bracket[0], bracket_high=bracket[1], rule=r["rule"], **same)
    for old in previous:
        old.superseded_by = budget
        old.save(update_fields=["superseded_by"])


def resolve_admission_budget(team, config: dict) -> dict:
    """``budget`` in an admission config submitted to the product is the id of one of the
    team's current budgets."""
    ref = config.get("budget")
    if isinstance(ref, bool) or not isinstance(ref, int):
        raise Refused("budget: give the id of one of your team's budgets (an integer)",
                      details=[{"field": "budget", "message": "must be a budget id"}])
    budget = MismatchBudget.objects.filter(pk=ref, team=team).first() if team is not None else None
    if budget is None:
        raise Refused(f"budget: your team has no budget #{ref}", details=[{"field": "budget", "message": "not found"}])
    if not budget.is_current:
        raise Refused(f"budget: #{ref} was superseded by #{budget.superseded_by_id}, a newer calibration; use that one",
                      details=[{"field": "budget", "message": "superseded"}])
    model = config.get("model")
    if isinstance(model, str):
        try:
            model = confine_model(model)
        except OutsideSandbox:
            pass  # the sandbox check of the config itself reports it
        if model != budget.checkpoint:
            raise Refused(f"budget: #{ref} was calibrated on checkpoint {budget.checkpoint!r}, not on {model!r}; "
                          "calibrate a budget for this checkpoint", details=[{"field": "budget", "message": "other checkpoint"}])
    return {**config, "budget": budget.spec()}


CONFIG_RESOLVERS["admission"] = resolve_admission_budget

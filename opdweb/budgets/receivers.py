"""Where the budgets app hooks into jobs: a succeeded calibration (unless uninformative) is stored as a budget
(superseding the team's previous one for the same checkpoint, task, method and metric), and
an admission config's budget id is replaced by the budget itself."""
from __future__ import annotations

from django.dispatch import receiver

from opdweb.budgets.models import MismatchBudget
from opdweb.jobs.actions import CONFIG_RESOLVERS
from opdweb.jobs.config_form import PICKERS
from opdweb.jobs.signals import job_succeeded
from opdweb.numbers import budget as budget_text
from opdweb.refusals import Refused
from opdweb.sandbox import OutsideSandbox, confine_model
from opdweb.teams.access import teams_of
from workers.science.budget.results import CalibratedBudget, CalibrationResult
from workers.science.entrypoints import get_kind
from workers.science.kinds import Kind


def budget_row(calibrated: CalibratedBudget) -> dict:
    """The ``MismatchBudget`` columns of a calibrated budget: every field of the one
    declaration, the bracket in its two columns, a missing text as ''."""
    row = calibrated.model_dump(mode="json", include=set(CalibratedBudget.model_fields) - {"bracket"})
    row["bracket_low"], row["bracket_high"] = calibrated.bracket
    return {**row, "checkpoint_hash": row["checkpoint_hash"] or "", "teacher": row["teacher"] or ""}


@receiver(job_succeeded)
def store_calibrated_budget(sender, job, **kwargs) -> None:
    if job.kind != Kind.CALIBRATION:
        return
    result = get_kind(Kind.CALIBRATION).validated(job.result)
    assert isinstance(result, CalibrationResult)
    if not result.stores_budget:  # uninformative: the baseline did not learn, there is no budget to store
        return
    row = budget_row(result)
    same = {name: row.pop(name) for name in MismatchBudget.SAME_BUDGET}
    previous = list(MismatchBudget.objects.select_for_update().filter(team=job.team, superseded_by__isnull=True,
                                                                       **same))
    budget = MismatchBudget.objects.create(team=job.team, created_by=job.created_by, calibration_job=job, **same,
                                           **row)
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
                          "calibrate a budget for this checkpoint",
                          details=[{"field": "budget", "message": "other checkpoint"}])
    return {**config, "budget": budget.spec(team.budget_criterion)}


CONFIG_RESOLVERS[Kind.ADMISSION] = resolve_admission_budget


def offered_budgets(user) -> dict[str, list[tuple[str, str]]]:
    """The budget picker of the job form: each of the user's teams' current budgets."""
    by_team: dict[str, list[tuple[str, str]]] = {}
    for b in (MismatchBudget.objects.filter(team__in=teams_of(user), superseded_by=None)
              .select_related("team").order_by("-pk")[:200]):
        label = f"#{b.pk} {budget_text(b.budget, b.status)} on {b.checkpoint.rsplit('/', 1)[-1]} ({b.task})"
        by_team.setdefault(b.team.slug, []).append((str(b.pk), label))
    return by_team


PICKERS["budget"] = offered_budgets

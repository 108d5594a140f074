"""An admission verdict in words on every page: ``pass`` is shown safe, ``fail`` shown harmful,
and between them ``not_shown_safe`` (``workers.science.verdicts``)."""
from __future__ import annotations

from django import template

from workers.science.verdicts import in_words

register = template.Library()


@register.filter
def verdict_words(result) -> str:
    """The words of an admission result's verdict (an ``AdmissionVerdict``); a check judged
    before the zones (its budget carried no ladder) has its ``fail`` said as what it meant then."""
    budget = getattr(result, "budget", None)
    return in_words(getattr(result, "verdict", None), with_zones=bool(getattr(budget, "ladder", None)))


@register.filter
def verdict_label(verdict) -> str:
    """The verdict as a label: ``not shown safe`` rather than ``not_shown_safe``."""
    return str(verdict or "").replace("_", " ")


@register.simple_tag
def calibration_job_of(budget_id) -> int | None:
    """The calibration job a stored budget came from (None: unknown), for the one click that
    calibrates again to decide a check that is not shown safe (on a page that already shows
    the check, so the budget is the viewer's team's)."""
    from opdweb.budgets.models import MismatchBudget

    return MismatchBudget.objects.filter(pk=budget_id).values_list("calibration_job_id", flat=True).first()

"""The watch rules' form: a team's default rule and a run's own, each checked field by field,
set and cleared with an audit entry."""
from __future__ import annotations

import math

from django.db import transaction

from opdweb.jobs.models import Job
from opdweb.refusals import Refused
from opdweb.runs.models import WatchRule
from opdweb.teams import audit
from workers.science.kinds import Kind

#: The team rule's fields, as the form names them, with their bounds.
RULE_FIELDS = {"consecutive_steps": (int, 1, 100_000), "growth_per_1k_steps": (float, 0.0, 1e9),
               "ess_floor": (float, 0.0, 1e9), "silence_seconds": (int, 1, 30 * 86400),
               "updates_per_step": (int, 1, 1_000_000)}
#: The fields that always hold a value: blank is refused, or (a default here) means the default.
ALWAYS_SET = {"consecutive_steps": None, "updates_per_step": 1}


def check_rule_fields(data) -> dict:
    """The form's values, each a number within its bounds or blank (not watched; the
    consecutive steps are always watched, and blank updates per step is 1); refused with
    every problem named."""
    values, problems = {}, []
    for name, (kind, low, high) in RULE_FIELDS.items():
        text = (data.get(name) or "").strip()
        if not text and ALWAYS_SET.get(name, 0) is not None:
            values[name] = ALWAYS_SET.get(name)
            continue
        try:
            value = kind(text)
        except ValueError:
            problems.append({"field": name, "message": f"must be a {'whole ' if kind is int else ''}number"})
            continue
        if not (low <= value <= high) or (kind is float and not math.isfinite(value)):
            problems.append({"field": name, "message": f"must be from {_number(low)} to {_number(high)}"})
            continue
        values[name] = value
    if problems:
        raise Refused("; ".join(f"{p['field']}: {p['message']}" for p in problems), details=problems)
    return values


def _number(bound: float) -> str:
    """A bound as the form would take it: whole numbers in full, others as ``%g``."""
    return str(bound) if isinstance(bound, int) else f"{bound:g}"


def _rule_text(values: dict) -> str:
    return ", ".join(f"{k} {'off' if v is None else v}" for k, v in values.items())


def do_set_team_rule(team, user, data) -> WatchRule:
    values = check_rule_fields(data)
    with transaction.atomic():
        rule, _ = WatchRule.objects.update_or_create(team=team, job=None, defaults=values)
        audit.record(team, user, audit.WATCH_RULE_CHANGED, "set the team's watch rule: " + _rule_text(values),
                     subject="watch_rule", **values)
    return rule


def do_set_run_rule(job: Job, user, data) -> WatchRule:
    """The run's own rule, replacing its team's for this run from its next point on."""
    if job.kind != Kind.EXTERNAL:
        raise Refused(f"job #{job.pk} is a {job.kind} job; only external runs are watched", status=400)
    values = check_rule_fields(data)
    with transaction.atomic():
        rule, _ = WatchRule.objects.update_or_create(team_id=job.team_id, job=job, defaults=values)
        audit.record(job.team, user, audit.WATCH_RULE_CHANGED, f"set run #{job.pk}'s own watch rule: "
                     + _rule_text(values), subject="job", subject_id=job.pk, **values)
    return rule


def do_clear_run_rule(job: Job, user) -> None:
    """Watch the run by its team's rule again; refused when it has no rule of its own."""
    with transaction.atomic():
        deleted, _ = WatchRule.objects.filter(job=job).delete()
        if not deleted:
            raise Refused(f"run #{job.pk} has no watch rule of its own; it is watched by its team's", status=409)
        audit.record(job.team, user, audit.WATCH_RULE_CHANGED, f"run #{job.pk} is watched by its team's rule again",
                     subject="job", subject_id=job.pk)

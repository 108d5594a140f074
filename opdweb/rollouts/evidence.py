"""The jobs that ran a config, and the admission check an approval rests on.

A job used a config when its ``config["rollout"]`` has the config's hash.  PostgreSQL
first keeps the team's jobs whose rollout is contained in the canonical config (every key
a job wrote has the record's value: a necessary condition, on the jsonb index path), and
the hash decides among those (a key a job left out must default to the record's value).
"""
from __future__ import annotations

from opdweb.budgets.models import MismatchBudget
from opdweb.jobs.models import Job, JobState
from opdweb.jobs.results import typed_result
from opdweb.rollouts.canonical import hash_of_rollout
from opdweb.rollouts.models import RolloutConfigRecord
from workers.science.budget.results import AdmissionVerdict
from workers.science.kinds import Kind

ADMISSION_KIND = Kind.ADMISSION


def jobs_using(record: RolloutConfigRecord, **filters) -> list[Job]:
    candidates = (Job.objects.filter(team_id=record.team_id, config__rollout__contained_by=record.config, **filters)
                  .select_related("created_by").order_by("-created_at", "-pk"))
    return [job for job in candidates if hash_of_rollout(job.config.get("rollout")) == record.config_hash]


def latest_admission_check(record: RolloutConfigRecord, checkpoint: str) -> Job | None:
    """The newest succeeded admission job of exactly this config on this checkpoint."""
    checks = jobs_using(record, kind=ADMISSION_KIND, state=JobState.SUCCEEDED, config__model=checkpoint)
    return checks[0] if checks else None


def admission_verdict(job: Job | None) -> AdmissionVerdict | None:
    """An admission job's typed result (None: no job, or not a finished admission check)."""
    result = typed_result(job) if job is not None else None
    return result if isinstance(result, AdmissionVerdict) else None


def verdict_of(job: Job | None) -> str | None:
    result = admission_verdict(job)
    return result.verdict if result is not None else None


def _budget_id(value) -> int | None:
    """A budget named by id, or by its spec (a mapping with ``id``), as admission jobs do."""
    if isinstance(value, dict):
        value = value.get("id")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def budget_of(job: Job | None) -> MismatchBudget | None:
    """The team's budget an admission job was checked against."""
    if job is None:
        return None
    result = admission_verdict(job)
    budget_id = (result.budget.id if result is not None else None) or _budget_id(job.config.get("budget"))
    return MismatchBudget.objects.filter(pk=budget_id, team_id=job.team_id).first() if budget_id else None


def curve_with_check(budget: MismatchBudget | None, multiple: float | None) -> list[dict]:
    """The budget's calibration curve by multiple, with this check's multiple placed among
    its levels (a row with ``check: True``), so an approver sees where the config falls."""
    if budget is None or not isinstance(budget.curve, list):
        return []
    rows = sorted((dict(row, check=False, accuracy_pct=100 * (row.get("accuracy_mean") or 0.0),
                        sd_pct=100 * (row.get("accuracy_sd") or 0.0))
                   for row in budget.curve if isinstance(row, dict) and isinstance(row.get("multiple"), (int, float))),
                  key=lambda row: row["multiple"])
    if isinstance(multiple, (int, float)):
        at = next((i for i, row in enumerate(rows) if row["multiple"] > multiple), len(rows))
        rows.insert(at, {"multiple": multiple, "check": True})
    return rows

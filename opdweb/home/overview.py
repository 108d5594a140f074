"""What the home page shows, read for one person across the teams they are in."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Count
from django.utils import timezone

from opdweb.approvals.currency import lapse_reason
from opdweb.approvals.models import ApprovalRequest, ApprovalState
from opdweb.jobs.models import Job, JobState
from opdweb.rollouts.evidence import admission_verdict, jobs_using
from opdweb.rollouts.models import RolloutConfigRecord
from opdweb.runs.models import Alert
from opdweb.teams.access import teams_of
from opdweb.teams.models import Role
from workers.science.kinds import Kind

#: A first visit looks back this far.
FIRST_VISIT_LOOKBACK = timedelta(days=7)
#: Breaches and failures older than this no longer "need" anyone.
RECENT = timedelta(days=14)
LISTED = 10
CONFIGS = 8


@dataclass
class NextStep:
    """A config's way on: where it stands and the one link that takes it further."""

    record: RolloutConfigRecord
    stands: str  # in words
    action: str  # the link's words
    url: str
    verdict: str | None = None


def needs(user) -> dict:
    """What waits for ``user``: approvals they may decide, alerts not acknowledged, runs
    past their budget, and their own failed jobs (recent ones)."""
    teams = teams_of(user)
    deciding = teams_of(user, Role.APPROVER)
    since = timezone.now() - RECENT
    return {
        "to_decide": list(ApprovalRequest.objects.filter(team__in=deciding, state=ApprovalState.PENDING)
                          .exclude(requested_by=user).select_related("config", "team", "requested_by")
                          .order_by("requested_at")[:LISTED]),
        "waiting_on_others": list(ApprovalRequest.objects.filter(team__in=teams, state=ApprovalState.PENDING,
                                                                 requested_by=user).select_related("config")
                                  .order_by("requested_at")[:LISTED]),
        "alerts": list(Alert.objects.filter(job__team__in=teams, acknowledged_at__isnull=True)
                       .select_related("job").order_by("-created_at")[:LISTED]),
        "breaching": list(ApprovalRequest.objects.filter(team__in=teams, breached_at__gte=since)
                          .select_related("config", "breached_by").order_by("-breached_at")[:LISTED]),
        "failed": list(Job.objects.filter(team__in=teams, created_by=user, state=JobState.FAILED,
                                          finished_at__gte=since).order_by("-finished_at")[:LISTED]),
    }


def since_last_visit(user, last: datetime | None) -> dict:
    """Jobs of ``user``'s teams that ended since ``last`` (a first visit: the last week)."""
    start = last or timezone.now() - FIRST_VISIT_LOOKBACK
    ended = Job.objects.filter(team__in=teams_of(user), finished_at__gt=start, parent__isnull=True)
    counts = dict(ended.values_list("state").annotate(n=Count("pk")).values_list("state", "n"))
    return {"start": start, "first_visit": last is None, "counts": counts,
            "jobs": list(ended.select_related("created_by").order_by("-finished_at")[:LISTED])}


def next_steps(user) -> list[NextStep]:
    """The newest configs of ``user``'s teams, each with its next step: check it, ask for
    approval on the checked checkpoint, wait for a second person, or take the export."""
    from django.urls import reverse

    steps = []
    records = RolloutConfigRecord.objects.filter(team__in=teams_of(user)).order_by("-created_at")[:CONFIGS]
    for record in records:
        detail = reverse("rollouts:detail", args=[record.pk])
        approval = (ApprovalRequest.objects.filter(config=record).exclude(state=ApprovalState.REJECTED)
                    .order_by("-requested_at").first())
        if approval is not None and approval.state == ApprovalState.APPROVED and lapse_reason(approval) is None:
            steps.append(NextStep(record, f"approved for {approval.checkpoint} (#{approval.pk})", "Export",
                                  reverse("approvals:detail", args=[approval.pk]) + "#exports"))
            continue
        if approval is not None and approval.state == ApprovalState.PENDING:
            steps.append(NextStep(record, f"approval #{approval.pk} waits for a second person", "See the request",
                                  reverse("approvals:detail", args=[approval.pk])))
            continue
        checks = jobs_using(record, kind=Kind.ADMISSION, state=JobState.SUCCEEDED)
        verdict = admission_verdict(checks[0]) if checks else None
        if verdict is None:
            steps.append(NextStep(record, "not checked against a budget yet", "Check admission",
                                  detail + "#check-admission"))
        elif verdict.verdict == "pass":
            steps.append(NextStep(record, f"passed on {checks[0].config.get('model')}", "Request approval",
                                  detail + "#request-approval", verdict.verdict))
        else:
            steps.append(NextStep(record, f"{verdict.verdict.replace('_', ' ')} on {checks[0].config.get('model')}",
                                  "See the check", reverse("jobs:detail", args=[checks[0].pk]), verdict.verdict))
    return steps

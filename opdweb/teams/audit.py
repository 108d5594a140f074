"""The team's audit log: one entry per action, written inside the action's transaction."""
from __future__ import annotations

from opdweb.teams.models import AuditEntry

CONFIG_CREATED = "config.created"
APPROVAL_REQUESTED = "approval.requested"
APPROVAL_APPROVED = "approval.approved"
APPROVAL_REJECTED = "approval.rejected"
CONFIG_EXPORTED = "config.exported"
MEMBER_ADDED = "member.added"
MEMBER_INVITED = "member.invited"
MEMBER_REMOVED = "member.removed"
MEMBER_ROLE_CHANGED = "member.role_changed"
WEBHOOK_CHANGED = "webhook.changed"
JOB_SUBMITTED = "job.submitted"
JOB_CANCELLED = "job.cancelled"
TOKEN_CREATED = "token.created"
TOKEN_REVOKED = "token.revoked"
RUN_STARTED = "run.started"
RUN_LINKED = "run.linked"
RUN_ALERT = "run.alert"
RUN_RECHECKED = "run.rechecked"
WATCH_RULE_CHANGED = "watch.rule_changed"
BUDGET_CRITERION_CHANGED = "team.budget_criterion"


def record(team, actor, action: str, summary: str, *, subject: str = "", subject_id: int | None = None,
           **detail) -> AuditEntry:
    return AuditEntry.objects.create(team=team, actor=actor if getattr(actor, "pk", None) else None, action=action,
                                     summary=summary[:500], subject=subject, subject_id=subject_id, detail=detail)

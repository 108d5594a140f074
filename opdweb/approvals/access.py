"""Which approvals a user may see or act on: the team rule of :mod:`opdweb.teams.access`
(another team's approval is a 404, never revealed; too low a role in its own team is a 403)."""
from __future__ import annotations

from opdweb.approvals.models import ApprovalRequest
from opdweb.teams.access import visible_in_team
from opdweb.teams.models import Role


def visible_approval(user, pk: int, min_role: Role = Role.VIEWER) -> ApprovalRequest:
    return visible_in_team(ApprovalRequest, "approval request", user, pk, min_role,
                           related=("config", "requested_by", "decided_by", "admission_job"))

"""Which configs and approvals a user may see or act on: the same rule as for jobs (another
team's object is a 404, never revealed; too low a role in its own team is a 403)."""
from __future__ import annotations

from django.db.models import Model, OuterRef, Subquery
from django.http import Http404

from opdweb.configs.models import ApprovalRequest, RolloutConfigRecord
from opdweb.refusals import Refused
from opdweb.teams.models import Membership, Role


def _visible(model: type[Model], what: str, user, pk: int, min_role: Role, related: tuple[str, ...]):
    obj = None
    if user.is_authenticated:  # one query: the object and the user's role in its team
        role = Membership.objects.filter(team=OuterRef("team"), user=user).values("role")[:1]
        obj = model.objects.select_related("team", *related).annotate(role=Subquery(role)).filter(pk=pk).first()
    if obj is None or obj.role is None:
        raise Http404(f"{what} #{pk} not found")
    obj.viewer_role = Role(obj.role)
    if obj.viewer_role < min_role:
        raise Refused(f"your role in team {obj.team.slug} cannot do this (needs {min_role.label})", status=403)
    return obj


def visible_config(user, pk: int, min_role: Role = Role.VIEWER) -> RolloutConfigRecord:
    return _visible(RolloutConfigRecord, "rollout config", user, pk, min_role, ("created_by",))


def visible_approval(user, pk: int, min_role: Role = Role.VIEWER) -> ApprovalRequest:
    return _visible(ApprovalRequest, "approval request", user, pk, min_role,
                    ("config", "requested_by", "decided_by", "admission_job"))

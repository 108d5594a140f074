"""Who may see and do what: the one place team scoping is decided."""
from __future__ import annotations

from django.db.models import QuerySet
from django.http import Http404

from opdweb.refusals import Refused
from opdweb.teams.models import Membership, Role, Team


def teams_of(user, min_role: Role = Role.VIEWER) -> QuerySet[Team]:
    """Teams in which ``user`` holds at least ``min_role``."""
    if not user.is_authenticated:
        return Team.objects.none()
    return Team.objects.filter(memberships__user=user, memberships__role__gte=min_role)


def role_in(user, team_id: int) -> Role | None:
    if not user.is_authenticated:
        return None
    role = Membership.objects.filter(user=user, team_id=team_id).values_list("role", flat=True).first()
    return Role(role) if role is not None else None


def has_role(user, team_id: int, min_role: Role) -> bool:
    role = role_in(user, team_id)
    return role is not None and role >= min_role



def team_for(user, slug: str, min_role: Role = Role.VIEWER) -> Team:
    """The team named ``slug`` with ``viewer_role`` set: a 404 for someone outside it (teams
    one is not in are not revealed), a 403 for a member whose role is too low."""
    team = Team.objects.filter(slug=slug).first()
    role = role_in(user, team.pk) if team is not None else None
    if role is None:
        raise Http404(f"team {slug!r} not found")
    if role < min_role:
        raise Refused(f"your role in team {slug} cannot do this (needs {min_role.label})", status=403)
    team.viewer_role = role
    return team
